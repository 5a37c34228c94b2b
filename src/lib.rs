//! # oncekey
//!
//! Twice counts once. A network cannot tell a sender whether its request arrived, so people press
//! Send again, pages reload mid-request and servers retry after timeouts. oncekey gives every
//! *intended* submission one idempotency key, stores key and body before the first byte is sent,
//! retries with the same key until a definite answer, and only then makes a new one.
//!
//! The rules live in [`core`], a pure state machine with no clock, randomness, storage or
//! network of its own. The browser driver (wasm32) and the native driver (tokio and reqwest)
//! carry out its actions.
#![deny(missing_docs, missing_debug_implementations)]

extern crate alloc;

/// What the `std` prelude gives, from `alloc`: the core names its imports so that it reads the
/// same on every target.
#[allow(unused_imports)]
mod prelude {
    pub(crate) use alloc::borrow::ToOwned;
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec;
    pub(crate) use alloc::vec::Vec;
}

pub mod core;

#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
mod web;
#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
pub use crate::web::{
    AttemptHeaders, Credentials, Error, ErrorCode, Listener, Options, Pending, Settlement,
    Settling, StorageKind, Submitter, Update,
};

/// The npm package's JavaScript face, for Rust code that works with JavaScript values (tests,
/// or a page that hands a `Submitter` object to JavaScript): the exported `Submitter` class.
#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
pub mod js {
    pub use crate::web::js::JsSubmitter as Submitter;
}

pub use crate::core::{
    Encoding, Key, KeyError, KeyFormat, Outcome, Request, RetryPolicy, State, Timestamp,
};

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
mod native;

#[cfg(all(
    feature = "postgres",
    not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))
))]
pub use crate::native::PostgresStore;
#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
pub use crate::native::{
    BoxError, Claim, Client, ClientBuilder, Due, Error, HeaderProvider, Lease, Listed, MemoryStore,
    Outgoing, Pending, Result, Resumed, Settlement, SqliteStore, Store, SubmissionBuilder,
};
