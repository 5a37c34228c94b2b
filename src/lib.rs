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

// The target predicate, stated once (as reqwest does): the browser is wasm32 without an OS
// (`unknown`, or `none`); every other target is native. Cargo.toml's dependency tables and the
// test files' `#![cfg]` lines carry it too, as Cargo and separate crates need.
macro_rules! if_wasm {
    ($($item:item)*) => {$(
        #[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
        $item
    )*};
}

macro_rules! if_native {
    ($($item:item)*) => {$(
        #[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
        $item
    )*};
}

/// The `alloc` names the `std` prelude gives, for the drivers' code that names its imports as
/// the core does; the core has its own.
#[allow(unused_imports)]
use crate::core::prelude;

pub mod core;

pub use crate::core::{
    Encoding, Key, KeyError, KeyFormat, Outcome, Request, RetryPolicy, State, Timestamp,
};

if_wasm! {
    mod web;
    pub use crate::web::{
        AbortHandle, AttemptHeaders, Credentials, Error, ErrorCode, FormKit, FormLock, FormOptions, Listener,
        Messages, Options, Pending, Resume, Settlement, Settling, StorageKind, Submitter,
        SuccessMessage, SuccessText, Update,
    };

    /// The npm package's JavaScript face, for Rust code that works with JavaScript values
    /// (tests, or a page that hands a `Submitter` object to JavaScript): the exported
    /// `Submitter` class. Cargo feature `js` (on by default).
    #[cfg(feature = "js")]
    pub mod js {
        pub use crate::web::js::JsSubmitter as Submitter;
        pub use crate::web::auto_attach;
        pub use crate::web::listing::list_pending;
    }
}

if_native! {
    mod native;
    pub use crate::native::{
        BoxError, Claim, Client, ClientBuilder, Due, Error, HeaderProvider, Lease, Listed,
        DEFAULT_MAX_RESPONSE_BYTES,
        MemoryStore, Outgoing, Pending, Quarantined, Result, Resumed, Settlement, SqliteStore, Store,
        StoreAnswer, StoreCall, StoreReply, SubmissionBuilder,
    };
    #[cfg(feature = "postgres")]
    pub use crate::native::PostgresStore;
}
