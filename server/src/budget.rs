//! # The memory budget of bodies held whole (`--upload-memory`)
//!
//! A ticket request's body is read whole into memory before it is answered: its fingerprint
//! needs every byte, and a ticket's files are stored in the ticket's transaction. A download
//! (`GET /api/tickets/{id}/attachments/{n}`) reads its file whole from the store before it is
//! sent. `--max-body` and `--max-upload` bound each body; the budget bounds their sum over the
//! requests being served at once, uploads and downloads together, so that many of them cannot
//! take the process's memory.
//!
//! A request reserves room for its body before the first byte is read: its declared
//! `Content-Length`, or its limit when it declares none (chunked). The room is given back when
//! the request is done: answered, its body unreadable or late, or its client gone. A download
//! reserves its file's stored length before the bytes are read from the store, and gives it
//! back when its answer's body has been handed to the connection whole, or dropped (its client
//! gone, or cut off by `--send-timeout` for taking none of it); a ticket list's answer, built
//! whole, reserves its length and is held the same way. When the room is not there, the
//! request is answered `503` with `Retry-After` at once rather than put in a queue that could
//! grow without bound. Nothing of it was read, claimed or stored, so the client's retry (with
//! the same key, CONTRACT.md section 2) does the work.
//!
//! The budget counts declared bytes. Parsing a multipart body copies its files once more, so
//! the memory used is up to about twice the budget while bodies are parsed. A download is
//! handed to the connection in pieces copied out of the file, so that once its room is given
//! back only the connection's write buffer (bounded per connection, as for any answer) holds
//! any of it.
//!
//! # A file larger than the budget
//!
//! The server does not start with a budget below `--max-upload` (or `--max-body`), and a file
//! is part of a multipart body within `--max-upload`, so every file uploaded to this server
//! fits the budget alone. A file stored under an earlier, larger `--max-upload` (at most 256
//! MiB, the cap of every run) may not: it reserves the whole budget, so it is sent when nothing
//! else is held and never beside another body, rather than refused for good.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::problem::{problem, respond};

/// The bytes of bodies the server may hold at once: a semaphore whose permits are bytes.
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

/// The most bytes of a download handed to the connection at once.
const PIECE: usize = 64 * 1024;

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
        // A body is at most 256 MiB (checked at start) and a stored file at most 1 GB (the
        // largest value either database keeps), so this never saturates.
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = self.room.clone().try_acquire_many_owned(permits).ok()?;
        Some(Reserved { _permit: permit })
    }

    /// Reserves room for a stored file of `bytes` about to be read and sent, or says there is
    /// none; one larger than the whole budget reserves all of it (see the
    /// [module docs](self#a-file-larger-than-the-budget)).
    pub(crate) fn reserve_download(&self, bytes: usize) -> Option<Reserved> {
        self.reserve(bytes.min(self.bytes))
    }

    /// The answer to a request whose body found no room: `503` with `Retry-After: 1`.
    pub(crate) fn busy(&self, bytes: usize) -> Response {
        tracing::warn!(
            body = bytes,
            budget = self.bytes,
            "bodies held in memory (uploads and downloads) are at --upload-memory: 503"
        );
        let mut r = respond(&problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "body-memory-busy",
            "Server busy",
            &format!(
                "the server holds as many bodies in memory as it may, uploads and downloads \
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

impl Reserved {
    /// `bytes` as an answer's body that keeps this room until it has been handed to the
    /// connection whole, or is dropped (its client gone).
    pub(crate) fn into_body(self, bytes: Vec<u8>) -> Body {
        Body::new(Held {
            bytes,
            sent: 0,
            _reserved: self,
        })
    }
}

/// A file being sent, and the room reserved for it.
struct Held {
    bytes: Vec<u8>,
    sent: usize,
    _reserved: Reserved,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let rest = &this.bytes[this.sent..];
        if rest.is_empty() {
            return Poll::Ready(None);
        }
        let piece = &rest[..rest.len().min(PIECE)];
        this.sent += piece.len();
        // Copied: a slice of the file would keep all of it alive in the connection's write
        // buffer after the body, and its room, are gone. In pieces: the connection takes the
        // next one only when its buffer has room, so the body lasts until the file is sent.
        Poll::Ready(Some(Ok(Frame::data(Bytes::copy_from_slice(piece)))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent == self.bytes.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact((self.bytes.len() - self.sent) as u64)
    }
}
