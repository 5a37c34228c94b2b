//! # The sans-IO core
//!
//! Every rule of the oncekey contract, as plain data and a state machine. Nothing here reads a
//! clock, draws randomness, touches storage or the network: the time (`now`, a [`Timestamp`]) and
//! random bytes come in as arguments, and the [`Submission`] answers with [`Action`]s for its
//! driver to carry out ("persist this record", "send attempt 3 with this key", "wake me at t").
//! The browser driver (`src/web/`) and the native driver (`src/native/`) are small loops around
//! it, and its tests run in simulated time.
//!
//! - [`key`]: one key per intended submission, made from random bytes or derived from an id.
//! - [`body`]: "same body" compares meaning (canonical JSON), and form encoding.
//! - [`answer`]: what an answer means: the table of CONTRACT.md section 2.
//! - [`retry`]: backoff with full jitter, `Retry-After`, the attempt limit and the time budget.
//! - [`record`]: the versioned stored form of a pending submission.
//! - [`submission`]: the states of CONTRACT.md section 3.

pub mod body;
pub mod key;

pub use body::BodyError;
pub use key::{Key, KeyError, KeyFormat};
