//! # The browser driver
//!
//! The npm package `oncekey` that wasm-pack publishes, and the same submitter for Rust programs
//! in the browser (Leptos, Yew):
//!
//! ```js
//! import init, { Submitter } from 'oncekey'
//! await init()
//! const tickets = new Submitter('new-ticket', { url: '/api/tickets' })
//! tickets.pending()            // { key, body, attempts, startedAt } or null, read from storage
//! await tickets.submit(body)   // { outcome, status, key, body, replayed, attempts, gaveUp }
//! await tickets.submit(formData) // an upload: multipart/form-data, kept in IndexedDB
//! await tickets.tryAgain()     // resend the pending submission: same key, same body
//! tickets.submit(body, { signal }) // an abort rejects ("aborted"); the key stays pending
//! tickets.sendAsNew()          // an expired submission, checked, sent again under a new key
//! tickets.discard()            // drop an unconfirmed submission; the next one gets a new key
//! tickets.onChange(fn)         // idle, sending, waiting (for a retry or online), unsure, the
//!                              // outcome, and warnings
//! ```
//!
//! # What it promises
//!
//! Key and body are written to storage before the first byte is sent (the core's `Persist`
//! comes before its `Send`, and web storage writes are synchronous; IndexedDB's, for uploads
//! and `storage: 'indexeddb'`, hold the driver until committed), and removed only after a
//! definite answer. A new `Submitter` of the same name, after a reload, finds them. Retries
//! keep the key; when and whether to retry is the core's call, never the driver's. A second
//! `submit` of the same body joins the one under way; across tabs, a Web Lock named after the
//! key lets one attempt out at a time (every attempt, the first too: a duplicated tab copies
//! `sessionStorage`, record and all). While the platform is offline (`navigator.onLine`, the
//! global's `online` and `offline` events, fed to the core) nothing is sent and nothing of the
//! attempts or budget is spent; back online it is sent at once with the same key. No attempt
//! goes out with a key past its lifetime (`keyLifetimeMs`): the submission settles `expired`,
//! and only a deliberate `sendAsNew()` (a new key) or a discard leaves it. A body JSON cannot carry is refused
//! before anything is stored or sent. Storage that cannot be used degrades to memory with a
//! warning; an unreadable record is removed with a warning. Keys are UUID v4 made by `uuid`
//! from 16 bytes of `crypto.getRandomValues`.
//!
//! # How it is made
//!
//! All of it is Rust. The sans-IO [`core`](crate::core) decides; [`Submitter`] (`driver.rs`)
//! carries out its actions as Rust values: storage through gloo-storage (`storage.rs`), `fetch`
//! with its `AbortController`, the answer's `Response` and `Headers` through web-sys, under a
//! Web Lock, with the per-attempt timeout (`attempt.rs`), timers, `crypto` and
//! `navigator.locks` bound to the global scope so that a worker runs it too (`global.rs`),
//! futures through wasm-bindgen-futures, and the listeners. The options (`options.rs`) and what
//! goes back to JavaScript cross with serde-wasm-bindgen as typed structs. The package's
//! JavaScript face (`js.rs`: the `Submitter` class and its TypeScript declarations; `form/js.rs`,
//! `listing.rs`) is a thin wrapper that wasm-bindgen exports, behind the cargo feature `js` (on
//! by default): wasm-bindgen keeps every export of every crate in a module, so a Rust frontend
//! leaves it out. The package also brings its own small allocator (`alloc.rs`, cargo feature
//! `small-alloc`, which `scripts/build-pkg.sh` turns on) and carries no `serde_json` and little
//! formatting machinery: messages are built by concatenation.
//!
//! Uploads (`upload.rs`, over IndexedDB in `idb.rs`): a `FormData` body is sent as
//! `multipart/form-data`, its fields and files kept in IndexedDB until a definite answer, the
//! driver waiting for that write before its next action.
//!
//! The form kit (`form/`) wires a plain HTML form to a [`Submitter`], through its public API
//! only: `attachForm` and `autoAttach` in JavaScript, [`FormKit`] in Rust.

#[cfg(all(feature = "small-alloc", not(target_feature = "atomics")))]
mod alloc;
mod attempt;
mod driver;
mod error;
mod form;
mod global;
mod idb;
#[cfg(feature = "js")]
pub(crate) mod js;
#[cfg(feature = "js")]
pub(crate) mod listing;
mod options;
mod spare;
mod storage;
mod upload;

#[cfg(all(feature = "small-alloc", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator::new();

pub use driver::{AbortHandle, Listener, Pending, Settlement, Settling, Submitter, Update};
pub use error::{Error, ErrorCode};
#[cfg(feature = "js")]
pub use form::auto_attach;
pub use form::{FormKit, FormLock, FormOptions, Messages, Resume, SuccessMessage, SuccessText};

/// Whether `fetch` takes this header: the core's check (a token for a name, no line break or
/// control character in the value), and a value of characters up to U+00FF, since a header
/// value is a byte string and `fetch` throws for any other ("Łukasz"): every attempt failed.
pub(crate) fn sendable_header(name: &str, value: &str) -> bool {
    crate::core::record::is_sendable_header(name, value)
        && value.chars().all(|c| u32::from(c) <= 0xFF)
}
pub use options::{AttemptHeaders, Credentials, Options, StorageKind};

/// The longest text taken into the module from JavaScript, in characters as JavaScript counts a
/// string (UTF-16 code units): 16 Mi, as the native client's 16 MiB of answer. A body given to
/// `submit` (as JSON) or an answer's body longer than this is not copied into the module's
/// memory, which would otherwise grow (and never shrink) until an allocation failed and the
/// module trapped for the page: the body is refused (code `body`); the answer's status decides
/// the outcome and the settlement has no body.
pub(crate) const MAX_TEXT_CHARS: u32 = 16 * 1024 * 1024;

/// The length of `text` when it is a string longer than [`MAX_TEXT_CHARS`] (not to be taken in).
pub(crate) fn too_long(text: &wasm_bindgen::JsValue) -> Option<u32> {
    use wasm_bindgen::JsCast;
    text.dyn_ref::<js_sys::JsString>()
        .map(js_sys::JsString::length)
        .filter(|n| *n > MAX_TEXT_CHARS)
}

/// `target[name]`; `undefined` when it cannot be read (a getter that throws, say).
pub(crate) fn get(target: &wasm_bindgen::JsValue, name: &str) -> wasm_bindgen::JsValue {
    js_sys::Reflect::get(target, &wasm_bindgen::JsValue::from_str(name))
        .unwrap_or(wasm_bindgen::JsValue::UNDEFINED)
}

/// `target[name]` as a string, when it is one.
pub(crate) fn text(target: &wasm_bindgen::JsValue, name: &str) -> Option<String> {
    get(target, name).as_string()
}

/// A warning on the console, as `oncekey: ...`.
pub(crate) fn warn(message: &str) {
    web_sys::console::warn_1(&("oncekey: ".to_owned() + message).into());
}
