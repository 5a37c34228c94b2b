//! # Settlements
//!
//! What a send, a resume or a "Try again" answers: the core's [`Settled`] with the last answer's
//! headers and body ([`Settlement`]), one per stored submission for a resume ([`Resumed`]), and a
//! stored submission as [`Client::pending`](crate::Client::pending) lists it ([`Pending`]).

use std::fmt;
use std::sync::Arc;

use reqwest::header::HeaderMap;

use super::error::{Error, Result};
use super::store::Lease;
use crate::core::{GiveUp, Key, Outcome, Record, Settled};

/// How a submission ended, or why its retries stopped: the core's outcome with the last answer.
#[derive(Debug, Clone)]
pub struct Settlement {
    pub(super) name: String,
    pub(super) settled: Settled,
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
    pub(super) body_error: Option<Arc<Error>>,
}

impl Settlement {
    /// The outcome: succeeded, refused, conflict, misconfigured, or unsure or expired (both
    /// still stored).
    pub fn outcome(&self) -> Outcome {
        self.settled.outcome
    }

    /// The submission's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key it was sent with.
    pub fn key(&self) -> &Key {
        &self.settled.key
    }

    /// Attempts made, over every round and restart.
    pub fn attempts(&self) -> u32 {
        self.settled.attempts
    }

    /// The last status received, if any answer came.
    pub fn status(&self) -> Option<u16> {
        self.settled.status
    }

    /// The server replayed the answer it stored for this key.
    pub fn replayed(&self) -> bool {
        self.settled.replayed
    }

    /// For [`Outcome::Unsure`]: why the retries stopped.
    pub fn gave_up(&self) -> Option<GiveUp> {
        self.settled.gave_up
    }

    /// The headers of the last answer (empty without one).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body of the last answer (empty without one, and when it was not kept: see
    /// [`Settlement::body_error`]).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Why the last answer's body was not kept, though its status came and decided the
    /// outcome: larger than [`max_response_bytes`](crate::ClientBuilder::max_response_bytes)
    /// ([`Error::is_body_too_large`]), not whole within the attempt's timeout
    /// ([`Error::is_timeout`]), or cut off ([`Error::is_body_incomplete`]).
    pub fn body_error(&self) -> Option<&Error> {
        self.body_error.as_deref()
    }

    /// The body of the last answer as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }
}

impl fmt::Display for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.outcome().as_str())?;
        if let Some(status) = self.status() {
            write!(f, " ({status}")?;
            if self.replayed() {
                f.write_str(", replayed")?;
            }
            f.write_str(")")?;
        }
        write!(
            f,
            ", key {}, {} attempt{}",
            self.key().short(),
            self.attempts(),
            if self.attempts() == 1 { "" } else { "s" }
        )?;
        if let Some(why) = self.gave_up() {
            write!(f, "; stopped: {}", why.as_str())?;
        }
        Ok(())
    }
}

/// One stored submission found by [`Client::resume_pending`](crate::Client::resume_pending), and how it ended.
#[derive(Debug)]
pub struct Resumed {
    /// Its name.
    pub name: String,
    /// Its settlement, or why it could not be resumed (busy elsewhere, unreadable, the store
    /// failed).
    pub result: Result<Settlement>,
}

/// A stored submission, as [`Client::pending`](crate::Client::pending) lists it.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its name.
    pub name: String,
    /// Its record, or why it cannot be read.
    pub record: std::result::Result<Record, String>,
    /// Its lease, if held (it may have run out).
    pub lease: Option<Lease>,
}
