//! # The browser driver
//!
//! The npm package `oncekey` that wasm-pack publishes:
//!
//! ```js
//! import init, { Submitter } from 'oncekey'
//! await init()
//! const tickets = new Submitter('new-ticket', { url: '/api/tickets' })
//! tickets.pending()            // { key, body, attempts, startedAt } or null, read from storage
//! await tickets.submit(body)   // { outcome, status, key, body, replayed, attempts, gaveUp }
//! await tickets.tryAgain()     // resend the pending submission: same key, same body
//! tickets.discard()            // drop an unconfirmed submission; the next one gets a new key
//! tickets.onChange(fn)         // idle, sending, waiting, unsure, the outcome, and warnings
//! ```
//!
//! # What it promises
//!
//! Key and body are written to storage before the first byte is sent (the core's `Persist`
//! comes before its `Send`, and web storage writes are synchronous), and removed only after a
//! definite answer. A new `Submitter` of the same name, after a reload, finds them. Retries
//! keep the key; when and whether to retry is the core's call, never the driver's. A second
//! `submit` of the same body joins the one under way; across tabs, a Web Lock named after the
//! key lets one attempt out at a time (every attempt of a key another tab can know: retries,
//! resumed records, and all attempts with `localStorage`). A body JSON cannot carry is refused
//! before anything is stored or sent. Storage that cannot be used degrades to memory with a
//! warning; an unreadable record is removed with a warning. Keys come from
//! `crypto.getRandomValues`.
//!
//! # Rust and JavaScript
//!
//! The package's size is part of the product (budget: 40 KB gzipped), and promises, web APIs
//! and the DOM cost wasm many times the bytes they cost JavaScript, through bindings. So the
//! wasm module is the sans-IO [`core`](crate::core) and one class around it ([`machine`]): every
//! rule and every decision. The driver that carries the core's actions out in the page (storage,
//! `fetch` under a Web Lock with its timeout, timers, promises, listeners) and the form kit are
//! JavaScript, `browser.js` beside this file, shipped in the package's `snippets/`. The wasm
//! module hands the driver its core when it starts. The package also brings its own small
//! allocator (`alloc.rs`, cargo feature `small-alloc`, which `scripts/build-pkg.sh` turns on) and
//! carries no formatting machinery: messages are built by concatenation.
//!
//! Rust programs in the browser use the same API through the bindings in [`Submitter`].

#[cfg(all(feature = "small-alloc", not(target_feature = "atomics")))]
mod alloc;
mod api;
mod machine;

#[cfg(all(feature = "small-alloc", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator::new();

pub use api::Submitter;
pub use machine::install;

/// The package starts: the driver gets its core. Only in the package build (a Rust program
/// that uses this crate has its own start, and calls [`install`]).
#[cfg(feature = "small-alloc")]
#[wasm_bindgen::prelude::wasm_bindgen(start, skip_typescript)]
fn start() {
    install();
}
