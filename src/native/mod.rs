//! # The native client for servers
//!
//! The core, driven by tokio and reqwest (rustls), for a server process that calls an API taking
//! idempotency keys: a payment provider, a ticketing system, another team's service. Pay once,
//! even across a crash:
//!
//! - The record (key, method, URL, body, safe headers, attempts, start time) is written and
//!   synced to a [`Store`] before the first attempt, and removed after a definite answer. An
//!   [`Outcome::Unsure`](crate::Outcome::Unsure) keeps it; [`Client::resume_pending`] finishes it
//!   after a restart, with the same key.
//! - No attempt goes out with a key past its lifetime ([`ClientBuilder::key_lifetime`], 24 h by
//!   default, less min(10 %, 5 min)), counted from the first attempt across restarts and "Try
//!   again": such a submission is [`Outcome::Expired`](crate::Outcome::Expired), kept until
//!   [`Client::send_as_new`] (a deliberate new key) or [`Client::discard`].
//! - Secrets (`Authorization`, `Cookie`, headers marked secret) are never stored; the client adds
//!   them to every attempt ([`ClientBuilder::secret_header`], [`HeaderProvider`]).
//! - Clients sharing a store take a lease on a submission before sending it (see [`Store`]), so
//!   two processes never send the same one at once, and a dead one's work is taken over.
//! - A fleet of instances can share one PostgreSQL table (`PostgresStore`, feature `postgres`):
//!   [`Client::resume_due`] takes what no live instance holds, and
//!   `PostgresStore::enqueue` writes a submission in the caller's own transaction.
//! - What an attempt reads is bounded in size and time, and redirects never re-send a `POST` as
//!   something else nor take the key to another origin (see [`ClientBuilder::max_response_bytes`]).
//! - Each attempt is a `tracing` span `oncekey.attempt` with the submission's name, the key's
//!   short form, the attempt's number and its outcome.
//!
//! ```no_run
//! # async fn pay() -> oncekey::Result<()> {
//! use oncekey::{Client, Key, Outcome, SqliteStore};
//! const PAYOUTS: uuid::Uuid = uuid::Uuid::from_u128(0x6f6e_6365_6b65_7900_0000_0000_0000_0001);
//! let client = Client::builder().store(SqliteStore::open("oncekey.db")?).build()?;
//! let settled = client
//!     .submission("payout-77")
//!     .key(Key::derive(&PAYOUTS, "withdrawal-77"))
//!     .post("https://api.example.com/payouts")
//!     .json(&serde_json::json!({ "amount": 1200, "currency": "EUR" }))?
//!     .send()
//!     .await?;
//! assert_eq!(settled.outcome(), Outcome::Succeeded);
//! # Ok(()) }
//! ```

mod builder;
mod client;
mod drive;
mod error;
mod flight;
mod limits;
mod owner;
#[cfg(feature = "postgres")]
mod pg;
mod settlement;
mod sqlite;
mod store;

pub use builder::{ClientBuilder, SubmissionBuilder};
pub use client::{Client, HeaderProvider, Outgoing};
pub use error::{BoxError, Error, Result};
pub use limits::DEFAULT_MAX_RESPONSE_BYTES;
#[cfg(feature = "postgres")]
pub use pg::PostgresStore;
pub use settlement::{Pending, Resumed, Settlement};
pub use sqlite::SqliteStore;
pub use store::{
    Claim, Due, Lease, Listed, MemoryStore, Quarantined, Store, StoreAnswer, StoreCall, StoreReply,
};
