//! # The memory budget of request bodies (`--upload-memory`)
//!
//! A ticket request's body is read whole into memory before it is answered: its fingerprint
//! needs every byte, and a ticket's files are stored in the ticket's transaction. `--max-body`
//! and `--max-upload` bound each body; the budget bounds their sum over the requests being
//! served at once, so that many uploads together cannot take the process's memory.
//!
//! A request reserves room for its body before the first byte is read: its declared
//! `Content-Length`, or its limit when it declares none (chunked). The room is given back when
//! the request is done: answered, its body unreadable or late, or its client gone. When the
//! room is not there, the request is answered `503` with `Retry-After` at once rather than put
//! in a queue that could grow without bound. Nothing of it was read, claimed or stored, so the
//! client's retry with the same key (CONTRACT.md section 2) does the work.
//!
//! The budget counts declared bytes. Parsing a multipart body copies its files once more, so
//! the memory used is up to about twice the budget while bodies are parsed.

use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::problem::{problem, respond};

/// The bytes of request bodies the server may hold at once: a semaphore whose permits are
/// bytes.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    room: Arc<Semaphore>,
    bytes: usize,
}

/// Room reserved for one body; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reserved {
    _permit: OwnedSemaphorePermit,
}

impl BodyBudget {
    /// A budget of `bytes` (at most [`Semaphore::MAX_PERMITS`], checked at start).
    pub(crate) fn new(bytes: usize) -> BodyBudget {
        BodyBudget {
            room: Arc::new(Semaphore::new(bytes)),
            bytes,
        }
    }

    /// Reserves room for a body of `bytes` now, or says there is none.
    pub(crate) fn reserve(&self, bytes: usize) -> Option<Reserved> {
        // Each body is at most 256 MiB (checked at start), so this never saturates.
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = self.room.clone().try_acquire_many_owned(permits).ok()?;
        Some(Reserved { _permit: permit })
    }

    /// The answer to a request whose body found no room: `503` with `Retry-After: 1`.
    pub(crate) fn busy(&self, bytes: usize) -> Response {
        tracing::warn!(
            body = bytes,
            budget = self.bytes,
            "request bodies held in memory are at --upload-memory: 503"
        );
        let mut r = respond(&problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "body-memory-busy",
            "Server busy",
            &format!(
                "the server holds as many request bodies in memory as it may \
                 (--upload-memory, {} bytes); nothing was done, retry",
                self.bytes
            ),
            vec![],
        ));
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    }
}
