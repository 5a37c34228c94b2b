//! # The browser driver
//!
//! The loop that carries out the [`core`](crate::core)'s actions in a browser (window or worker),
//! and the JavaScript API that wasm-pack publishes as the npm package `oncekey`:
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
//! definite answer. A new [`Submitter`] of the same name, after a reload, finds them. Retries
//! keep the key; when and whether to retry is the core's call, never this driver's. A second
//! `submit` of the same body joins the one under way; across tabs, a Web Lock named after the
//! key lets one attempt out at a time (every attempt of a key another tab can know: retries,
//! resumed records, and all attempts with `localStorage`). A body JSON cannot carry is refused
//! before anything is stored or sent. Storage that cannot be used degrades to memory with a warning; an unreadable
//! record is removed with a warning. Keys and jitter come from `crypto.getRandomValues`.
//!
//! # For Rust callers
//!
//! [`Submitter::open`] with [`Options`], [`Submitter::submit`] with JSON text, and the
//! [`Settling`] future it returns; [`Submitter::on_change`] for [`Event`]s.
//!
//! # Rust and JavaScript
//!
//! The package's size is part of the product (budget: 40 KB gzipped), and promises, web APIs
//! and the DOM cost wasm many times the bytes they cost JavaScript. So the driver keeps its
//! state and every decision here, in Rust, around the core, and `browser.js` (shipped in the
//! package's `snippets/`) does the page's work: reading the options object, one attempt's
//! trip over the network (Web Lock, `fetch`, timeout), the storage probe, the JSON text of a
//! JavaScript body, and the form kit. The npm package also brings its own small allocator
//! (`alloc.rs`, cargo feature `small-alloc`, which `scripts/build-pkg.sh` turns on) and carries no
//! formatting machinery on its paths: messages are built by concatenation.

#[cfg(all(feature = "small-alloc", not(target_feature = "atomics")))]
mod alloc;
mod api;
mod error;
mod form;
mod js;
mod options;
mod storage;
mod submitter;

#[cfg(all(feature = "small-alloc", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator::new();

pub use error::{Error, Result};
pub use form::{attach_form, auto_attach, FormKit};
pub use options::{Credentials, Options};
pub use storage::StorageKind;
pub use submitter::{Event, ListenerId, Settling, Submitted, Submitter};
