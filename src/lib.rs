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
// In the browser the crate needs no `std`: the npm package (feature `package`) leaves it out, and
// with it the panic and formatting machinery (see src/web/mod.rs).
#![cfg_attr(
    all(
        target_arch = "wasm32",
        any(target_os = "unknown", target_os = "none"),
        not(test)
    ),
    no_std
)]

extern crate alloc;

/// What the `std` prelude would give, from `alloc`, for the code that also builds without it.
#[allow(unused_imports)]
mod prelude {
    pub(crate) use alloc::borrow::ToOwned;
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec;
    pub(crate) use alloc::vec::Vec;
}

pub mod core;

/// The npm package's panic handler (feature `package`, no `std`): a trap, as a panic is with
/// `std` on this target, minus the message no one would see.
#[cfg(all(feature = "package", target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_: &::core::panic::PanicInfo<'_>) -> ! {
    ::core::arch::wasm32::unreachable()
}

#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
mod web;
#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
pub use crate::web::{install, Submitter};

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
