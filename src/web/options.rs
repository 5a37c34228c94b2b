//! # Options
//!
//! [`Options`] for Rust callers, and the reading of the JavaScript options object, where every
//! mistake is an error that names the option (and an unknown name is one, so that a typo such as
//! `timeout` for `timeoutMs` does not pass silently).

use std::time::Duration;

use js_sys::Array;
use wasm_bindgen::prelude::*;

use crate::core::body::quoted;
use crate::core::record::{is_sendable_header, is_token};
use crate::core::{Encoding, KeyFormat, RetryPolicy, DEFAULT_KEY_HEADER};

use super::error::{Error, Result};
use super::storage::StorageKind;

/// The per-attempt timeout when none is given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether cookies and HTTP authentication go with the request (`fetch`'s `credentials`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Credentials {
    /// Never.
    Omit,
    /// To the page's own origin only (fetch's default).
    #[default]
    SameOrigin,
    /// Also cross-origin.
    Include,
}

impl Credentials {
    /// As `fetch` spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Credentials::Omit => "omit",
            Credentials::SameOrigin => "same-origin",
            Credentials::Include => "include",
        }
    }
}

/// How a [`Submitter`](super::Submitter) sends, retries and stores.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Where to send.
    pub url: String,
    /// The method, `POST` by default.
    pub method: String,
    /// Headers added to every attempt. They are not stored, so they may carry credentials; a
    /// page that resumes a stored submission must give them again.
    pub headers: Vec<(String, String)>,
    /// Called before every attempt with `{ attempt, key }`; the headers it returns go on that
    /// attempt only and are never stored.
    pub attempt_headers: Option<js_sys::Function>,
    /// The header that carries the key, `Idempotency-Key` by default.
    pub key_header: String,
    /// How the key is written in its header.
    pub key_format: KeyFormat,
    /// How long one attempt may take before it is abandoned (and retried); `None` waits as long
    /// as the browser does.
    pub timeout: Option<Duration>,
    /// Attempts, backoff and time budget.
    pub retry: RetryPolicy,
    /// Where the pending record is kept.
    pub storage: StorageKind,
    /// `fetch`'s `credentials`.
    pub credentials: Credentials,
    /// How the body goes on the wire.
    pub encoding: Encoding,
    /// Whether a pending submission found at start-up is resent at once (otherwise it waits,
    /// `unsure`, for "Try again" or a discard).
    pub resume: bool,
}

impl Options {
    /// The defaults, sending to `url`.
    pub fn new(url: &str) -> Options {
        Options {
            url: url.to_owned(),
            method: "POST".to_owned(),
            headers: Vec::new(),
            attempt_headers: None,
            key_header: DEFAULT_KEY_HEADER.to_owned(),
            key_format: KeyFormat::Bare,
            timeout: Some(DEFAULT_TIMEOUT),
            retry: RetryPolicy::default(),
            storage: StorageKind::Session,
            credentials: Credentials::SameOrigin,
            encoding: Encoding::Json,
            resume: false,
        }
    }

    /// Checks what the JavaScript reader checks, for options built in Rust.
    pub(crate) fn check(&self) -> Result<()> {
        if self.url.is_empty() {
            return Err(Error::option("options.url must be a non-empty string"));
        }
        if !is_token(&self.method) {
            return Err(Error::option(
                "options.method must be an HTTP method such as \"POST\", not ".to_owned()
                    + &quoted(&self.method),
            ));
        }
        if !is_token(&self.key_header) {
            return Err(Error::option(
                "options.keyHeader must be a header name, not ".to_owned()
                    + &quoted(&self.key_header),
            ));
        }
        for (name, value) in &self.headers {
            if !is_sendable_header(name, value) {
                return Err(Error::option(
                    "options.headers has a header that cannot be sent: ".to_owned() + &quoted(name),
                ));
            }
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::option("options.timeoutMs must be more than 0"));
        }
        self.retry
            .validate()
            .map_err(|e| Error::option("options.".to_owned() + e.message()))
    }
}

#[wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// Checks the options object's names and the types of its values, and gives them back in
    /// a fixed order (see `browser.js`), or throws an error that names the option.
    #[wasm_bindgen(catch, js_name = readOptions)]
    fn read_options(value: &JsValue) -> std::result::Result<Array, JsValue>;
}

/// Reads the JavaScript options object.
pub(crate) fn from_js(value: &JsValue) -> Result<Options> {
    let read = read_options(value).map_err(|e| Error::from_js(Error::option, &e))?;
    let text = |i| read.get(i).as_string();
    let number = |i| read.get(i).as_f64();
    let millis = |i| number(i).map(|ms| Duration::from_millis(ms as u64));
    let mut options = Options::new(&text(0).unwrap_or_default());
    if let Some(method) = text(1) {
        options.method = method;
    }
    if let Some(name) = text(2) {
        options.key_header = name;
    }
    // The choices come as the index of their word, in the same order as here.
    if let Some(i) = number(3) {
        options.key_format = [KeyFormat::Bare, KeyFormat::SfString][i as usize];
    }
    if let Some(i) = number(4) {
        options.storage = [
            StorageKind::Session,
            StorageKind::Local,
            StorageKind::Memory,
        ][i as usize];
    }
    if let Some(i) = number(5) {
        options.credentials = [
            Credentials::Omit,
            Credentials::SameOrigin,
            Credentials::Include,
        ][i as usize];
    }
    if let Some(i) = number(6) {
        options.encoding = [Encoding::Json, Encoding::Form][i as usize];
    }
    if let Some(ms) = millis(7) {
        options.timeout = Some(ms);
    }
    if let Some(resume) = read.get(8).as_bool() {
        options.resume = resume;
    }
    if let Ok(pairs) = read.get(9).dyn_into::<Array>() {
        for pair in pairs.iter() {
            let pair: Array = pair.unchecked_into();
            let (name, value) = (pair.get(0).as_string(), pair.get(1).as_string());
            options
                .headers
                .push((name.unwrap_or_default(), value.unwrap_or_default()));
        }
    }
    options.attempt_headers = read.get(10).dyn_into().ok();
    if let Some(attempts) = number(11) {
        options.retry.attempts = attempts as u32;
    }
    if let Some(d) = millis(12) {
        options.retry.base = d;
    }
    if let Some(d) = millis(13) {
        options.retry.cap = d;
    }
    if let Some(d) = millis(14) {
        options.retry.budget = d;
    }
    options.check()?;
    Ok(options)
}
