//! # Errors
//!
//! One opaque [`Error`] for everything the native client can refuse or fail at, with questions
//! (`is_pending_mismatch()`, `is_busy()`, ...) in place of a public enum, as reqwest does. An
//! answer from the server is never an error: refused, conflict, misconfigured and unsure are
//! [`Outcome`](crate::Outcome)s of a [`Settlement`](crate::Settlement).

use std::fmt;

use super::owner::{holder, Holder};
use crate::core::{Key, Timestamp};

/// What can go wrong in the native client.
pub struct Error {
    inner: Box<Inner>,
}

/// `Result` with the native client's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error from a [`Store`](crate::Store) implementation.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Inner {
    kind: Kind,
    name: Option<String>,
    key: Option<Key>,
    message: String,
    source: Option<BoxError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Builder,
    Request,
    /// Nothing is stored under the name (a request error to the caller, see `is_request`).
    NotStored,
    PendingMismatch,
    Busy {
        owner: String,
        until: Timestamp,
    },
    LeaseLost,
    Store,
    Corrupt,
    UnreadableRecord,
    BodyTooLarge,
    BodyTimeout,
    BodyIncomplete,
}

impl Error {
    fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                name: None,
                key: None,
                message: message.into(),
                source: None,
            }),
        }
    }

    pub(crate) fn builder(message: impl Into<String>) -> Error {
        Error::new(Kind::Builder, message)
    }

    pub(crate) fn request(message: impl Into<String>) -> Error {
        Error::new(Kind::Request, message)
    }

    /// "Try again" (or a resume) of a name under which nothing is stored.
    pub(crate) fn not_stored(name: &str) -> Error {
        let mut not = Error::new(Kind::NotStored, format!("nothing is stored under {name:?}"));
        not.inner.name = Some(name.to_owned());
        not
    }

    /// "Try again" of a name under which nothing is stored: none was, or another process
    /// settled or discarded it since it was listed. Also [`Error::is_request`].
    pub fn is_not_stored(&self) -> bool {
        self.inner.kind == Kind::NotStored
    }

    /// An outbox's enqueue of a name already pending (enqueued, or being sent).
    #[cfg(feature = "postgres")]
    pub(crate) fn already_pending(name: &str) -> Error {
        let mut e = Error::new(
            Kind::PendingMismatch,
            format!(
                "submission {name:?} is already pending (enqueued, or being sent); nothing was enqueued. Let it finish, or discard it, before enqueuing another under its name"
            ),
        );
        e.inner.name = Some(name.to_owned());
        e
    }

    pub(crate) fn pending_mismatch(name: &str, key: Option<Key>, differs: &str) -> Error {
        let shown = key.as_ref().map(|k| k.short().to_owned());
        let mut e = Error::new(
            Kind::PendingMismatch,
            match shown {
                Some(k) => format!(
                    "submission {name:?} is still pending under key {k} with another {differs}; nothing was sent. Resume it (resume_pending, or send the same request again) or discard it before sending a new one"
                ),
                None => format!(
                    "submission {name:?} is being sent with another {differs}; nothing was sent. Wait for it, then send again"
                ),
            },
        );
        e.inner.name = Some(name.to_owned());
        e.inner.key = key;
        e
    }

    /// Another holder's lease on `name`, which runs out at `until` (`now` is the time of the
    /// claim): the message says whether the holder is a live process here or one elsewhere.
    pub(crate) fn busy(name: &str, owner: &str, until: Timestamp, now: Timestamp) -> Error {
        let left = until.saturating_since(now).as_secs_f64();
        let who = match holder(owner) {
            Holder::LiveHere(pid) => format!("a live process on this host (pid {pid})"),
            Holder::DeadHere(pid) => format!("a process of this host that has just died (pid {pid}), taken over by another client meanwhile"),
            Holder::Elsewhere { host, pid } => format!(
                "a client on host {host} (pid {pid}), which may be alive: if it died, its lease runs out"
            ),
            Holder::Unknown => format!("another client ({owner})"),
        };
        let mut e = Error::new(
            Kind::Busy {
                owner: owner.to_owned(),
                until,
            },
            format!(
                "submission {name:?} is being sent by {who}; its lease ends in {left:.1} s unless renewed; nothing was sent (oncekey resume --wait waits for it)"
            ),
        );
        e.inner.name = Some(name.to_owned());
        e
    }

    pub(crate) fn lease_lost(name: &str) -> Error {
        let mut e = Error::new(
            Kind::LeaseLost,
            format!("the lease on submission {name:?} was taken over by another client, which goes on with it; this client stopped"),
        );
        e.inner.name = Some(name.to_owned());
        e
    }

    pub(crate) fn store(message: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::new(Kind::Store, message).with_source(source)
    }

    pub(crate) fn corrupt(message: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::new(Kind::Corrupt, message).with_source(source)
    }

    /// The record stored under `name` cannot be read (`why`); `moved` says whether it was moved
    /// aside into the store's quarantine or kept in place.
    pub(crate) fn unreadable_record(name: &str, why: &str, moved: bool) -> Error {
        let what = if moved {
            "it was moved aside to the store's quarantine (oncekey list --quarantined), kept for inspection, and the name is free"
        } else {
            "it is kept in place, as this store has no quarantine: discard it (oncekey discard) to go on"
        };
        let mut e = Error::new(
            Kind::UnreadableRecord,
            format!("the stored record of submission {name:?} cannot be read ({why}); {what}"),
        );
        e.inner.name = Some(name.to_owned());
        e
    }

    pub(crate) fn body_too_large(limit: usize, declared: Option<u64>) -> Error {
        Error::new(
            Kind::BodyTooLarge,
            match declared {
                Some(n) => format!(
                    "the answer's body is {n} bytes, more than max_response_bytes ({limit}); it was not read, and the status alone decided the outcome"
                ),
                None => format!(
                    "the answer's body is larger than max_response_bytes ({limit}); it was not kept, and the status alone decided the outcome"
                ),
            },
        )
    }

    pub(crate) fn body_timeout(read: usize) -> Error {
        Error::new(
            Kind::BodyTimeout,
            format!("the answer's body did not arrive whole within the attempt's timeout ({read} bytes came); it was not kept, and the status alone decided the outcome"),
        )
    }

    pub(crate) fn body_incomplete(read: usize, source: impl Into<BoxError>) -> Error {
        Error::new(
            Kind::BodyIncomplete,
            format!("the answer's body was cut off after {read} bytes; it was not kept, and the status alone decided the outcome"),
        )
        .with_source(source)
    }

    pub(crate) fn with_source(mut self, source: impl Into<BoxError>) -> Error {
        self.inner.source = Some(source.into());
        self
    }

    pub(crate) fn with_name(mut self, name: &str) -> Error {
        self.inner.name.get_or_insert_with(|| name.to_owned());
        self
    }

    /// The same error again, for a second caller that joined the first one's submission (the
    /// source is kept as text).
    pub(crate) fn duplicate(&self) -> Error {
        Error {
            inner: Box::new(Inner {
                kind: self.inner.kind.clone(),
                name: self.inner.name.clone(),
                key: self.inner.key.clone(),
                message: self.inner.message.clone(),
                source: self
                    .inner
                    .source
                    .as_ref()
                    .map(|s| BoxError::from(s.to_string())),
            }),
        }
    }

    /// The client could not be built: a missing store, a policy that cannot work, a bad header.
    pub fn is_builder(&self) -> bool {
        self.inner.kind == Kind::Builder
    }

    /// The request cannot be made: a bad method or URL, a body that is not JSON, a secret header
    /// given where it would be stored; "Try again" of a name under which nothing is stored.
    /// Nothing was stored or sent.
    pub fn is_request(&self) -> bool {
        matches!(self.inner.kind, Kind::Request | Kind::NotStored)
    }

    /// Another request is pending under this submission's name (another body, method, URL or
    /// key). Nothing was stored or sent: resume or discard the pending one first.
    pub fn is_pending_mismatch(&self) -> bool {
        self.inner.kind == Kind::PendingMismatch
    }

    /// Another client (usually another process sharing the store) holds the lease on this
    /// submission and is sending it. Nothing was sent.
    pub fn is_busy(&self) -> bool {
        matches!(self.inner.kind, Kind::Busy { .. })
    }

    /// This client's lease ran out and another client took the submission over.
    pub fn is_lease_lost(&self) -> bool {
        self.inner.kind == Kind::LeaseLost
    }

    /// The store failed (I/O, locking, a full disk).
    pub fn is_store(&self) -> bool {
        self.inner.kind == Kind::Store
    }

    /// The store file is not a store this oncekey can read: damaged, not a database, or made by
    /// a newer version.
    pub fn is_corrupt(&self) -> bool {
        self.inner.kind == Kind::Corrupt
    }

    /// One stored record cannot be read: it was moved aside to the store's quarantine
    /// ([`Client::quarantined`](crate::Client::quarantined)). The other records are still
    /// usable.
    pub fn is_unreadable_record(&self) -> bool {
        self.inner.kind == Kind::UnreadableRecord
    }

    /// An answer's body was larger than
    /// [`max_response_bytes`](crate::ClientBuilder::max_response_bytes) and was not kept
    /// ([`Settlement::body_error`](crate::Settlement::body_error)).
    pub fn is_body_too_large(&self) -> bool {
        self.inner.kind == Kind::BodyTooLarge
    }

    /// An answer's body did not arrive whole within the attempt's
    /// [`timeout`](crate::ClientBuilder::timeout) and was not kept.
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == Kind::BodyTimeout
    }

    /// An answer's body was cut off (the connection failed) and was not kept.
    pub fn is_body_incomplete(&self) -> bool {
        self.inner.kind == Kind::BodyIncomplete
    }

    /// The submission the error is about, if it is about one.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// The pending key, for [`Error::is_pending_mismatch`].
    pub fn key(&self) -> Option<&Key> {
        self.inner.key.as_ref()
    }

    /// Who holds the lease and until when, for [`Error::is_busy`].
    pub fn lease_holder(&self) -> Option<(&str, Timestamp)> {
        match &self.inner.kind {
            Kind::Busy { owner, until } => Some((owner, *until)),
            _ => None,
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("oncekey::Error");
        d.field("kind", &self.inner.kind);
        if let Some(name) = &self.inner.name {
            d.field("name", name);
        }
        d.field("message", &self.inner.message);
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)?;
        if let Some(source) = &self.inner.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| &**s as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_answer_by_kind_and_messages_say_what_to_do() {
        let e = Error::pending_mismatch("payout-77", Key::parse("abcdefghij").ok(), "body");
        assert!(e.is_pending_mismatch() && !e.is_busy());
        assert_eq!(e.name(), Some("payout-77"));
        assert!(e.to_string().contains("abcdefgh"), "{e}");
        assert!(e.to_string().contains("nothing was sent"), "{e}");
        let b = Error::busy(
            "n",
            "pid1",
            Timestamp::from_millis(5),
            Timestamp::from_millis(0),
        );
        assert_eq!(b.lease_holder(), Some(("pid1", Timestamp::from_millis(5))));
        let d = Error::store("writing failed", "disk full").duplicate();
        assert!(d.is_store());
        assert!(d.to_string().ends_with("disk full"), "{d}");
    }
}
