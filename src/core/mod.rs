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
//! - [`answer`]: what an answer means: the table of CONTRACT.md section 2, the one classifier.
//! - [`retry`]: backoff with full jitter, `Retry-After`, the attempt limit and the time budget.
//! - [`record`]: the versioned stored form of a pending submission, and the request it carries.
//! - [`submission`]: the states of CONTRACT.md section 3.
//! - [`time`]: the wall-clock [`Timestamp`] drivers hand in, and HTTP-dates.
//! - `text`: the few text helpers the core writes with, and why it avoids `fmt`.

/// The `alloc` names the `std` prelude would give: the core builds without `std` in the browser
/// package.
#[allow(unused_imports)]
pub(crate) mod prelude {
    pub(crate) use alloc::borrow::ToOwned;
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec;
    pub(crate) use alloc::vec::Vec;
}

#[macro_use]
pub(crate) mod text;

pub mod answer;
pub mod body;
pub mod key;
pub mod record;
pub mod retry;
pub mod submission;
pub mod time;

pub use answer::{classify, Answer, Failure, Outcome, RetryAfter, Verdict};
pub use body::BodyError;
pub use key::{Key, KeyError, KeyFormat, DEFAULT_KEY_HEADER};
pub use record::{Encoding, Record, RecordError, Request, RequestError, RECORD_VERSION};
pub use retry::{GiveUp, Next, PolicyError, RetryPolicy};
pub use submission::{
    Action, Attempt, AttemptId, BeginError, Begun, Change, NewKey, Settled, State, StateError,
    Submission,
};
pub use time::Timestamp;

display_by_message!(
    BodyError,
    KeyError,
    RequestError,
    BeginError,
    StateError,
    PolicyError
);
