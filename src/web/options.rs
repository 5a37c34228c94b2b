//! # Options
//!
//! [`Options`] for Rust callers, and the reading of the JavaScript options object, where every
//! mistake is an error that names the option (and an unknown name is one, so that a typo such as
//! `timeout` for `timeoutMs` does not pass silently).

use std::time::Duration;

use js_sys::{Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use crate::core::body::{concat, quoted};
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

const KNOWN: &[&str] = &[
    "url",
    "method",
    "headers",
    "attemptHeaders",
    "keyHeader",
    "keyFormat",
    "timeoutMs",
    "retry",
    "storage",
    "credentials",
    "encoding",
    "resume",
];

const RETRY_KNOWN: &[&str] = &["attempts", "base", "cap", "budget"];

/// Reads the JavaScript options object.
pub(crate) fn from_js(value: &JsValue) -> Result<Options> {
    if !is_plain_object(value) {
        return Err(Error::option(
            "options must be an object such as { url: \"/api/tickets\" }",
        ));
    }
    check_names(value, KNOWN, "options.")?;
    let url = string(value, "url")?
        .ok_or_else(|| Error::option("options.url is required: where to send the submission"))?;
    let mut options = Options::new(&url);
    if let Some(method) = string(value, "method")? {
        options.method = method.to_ascii_uppercase();
    }
    if let Some(name) = string(value, "keyHeader")? {
        options.key_header = name;
    }
    // The words and what they stand for, in the same order.
    if let Some(i) = choice(value, "keyFormat", &["bare", "sf-string"])? {
        options.key_format = [KeyFormat::Bare, KeyFormat::SfString][i];
    }
    if let Some(i) = choice(value, "storage", &["session", "local", "memory"])? {
        options.storage = [
            StorageKind::Session,
            StorageKind::Local,
            StorageKind::Memory,
        ][i];
    }
    if let Some(i) = choice(value, "credentials", &["omit", "same-origin", "include"])? {
        options.credentials = [
            Credentials::Omit,
            Credentials::SameOrigin,
            Credentials::Include,
        ][i];
    }
    if let Some(i) = choice(value, "encoding", &["json", "form"])? {
        options.encoding = [Encoding::Json, Encoding::Form][i];
    }
    if let Some(ms) = millis(value, "timeoutMs", "options.timeoutMs")? {
        options.timeout = Some(ms);
    }
    let resume = get(value, "resume");
    if !resume.is_undefined() {
        options.resume = resume
            .as_bool()
            .ok_or_else(|| wrong("options.resume", "true or false", &resume))?;
    }
    let headers = get(value, "headers");
    if !headers.is_undefined() {
        if !is_plain_object(&headers) {
            return Err(Error::option(
                "options.headers must be an object of header names to string values",
            ));
        }
        for entry in Object::entries(headers.unchecked_ref::<Object>()).iter() {
            let pair: js_sys::Array = entry.unchecked_into();
            let name = pair.get(0).as_string().unwrap_or_default();
            let Some(v) = pair.get(1).as_string() else {
                let path = concat(&["options.headers[", &quoted(&name), "]"]);
                return Err(wrong(&path, "a string", &pair.get(1)));
            };
            options.headers.push((name, v));
        }
    }
    let attempt_headers = get(value, "attemptHeaders");
    if !attempt_headers.is_undefined() {
        options.attempt_headers =
            Some(attempt_headers.dyn_into().map_err(|v| {
                wrong("options.attemptHeaders", "a function returning headers", &v)
            })?);
    }
    let retry = get(value, "retry");
    if !retry.is_undefined() {
        if !is_plain_object(&retry) {
            return Err(Error::option(
                "options.retry must be an object such as { attempts: 8, base: 500, cap: 30000, budget: 900000 }",
            ));
        }
        check_names(&retry, RETRY_KNOWN, "options.retry.")?;
        let attempts = get(&retry, "attempts");
        if !attempts.is_undefined() {
            options.retry.attempts = attempts
                .as_f64()
                .filter(|n| n.fract() == 0.0 && *n >= 1.0 && *n <= f64::from(u32::MAX))
                .ok_or_else(|| {
                    wrong(
                        "options.retry.attempts",
                        "a whole number of at least 1",
                        &attempts,
                    )
                })? as u32;
        }
        if let Some(d) = millis(&retry, "base", "options.retry.base")? {
            options.retry.base = d;
        }
        if let Some(d) = millis(&retry, "cap", "options.retry.cap")? {
            options.retry.cap = d;
        }
        if let Some(d) = millis(&retry, "budget", "options.retry.budget")? {
            options.retry.budget = d;
        }
    }
    options.check()?;
    Ok(options)
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &name.into()).unwrap_or(JsValue::UNDEFINED)
}

fn is_plain_object(value: &JsValue) -> bool {
    value.is_object() && !js_sys::Array::is_array(value) && !value.is_function()
}

fn check_names(object: &JsValue, known: &[&str], prefix: &str) -> Result<()> {
    for name in Object::keys(object.unchecked_ref::<Object>()).iter() {
        let name = name.as_string().unwrap_or_default();
        if !known.contains(&name.as_str()) {
            return Err(Error::option(concat(&[
                prefix,
                &name,
                " is not an option; the options are ",
                &listed(known.iter().copied()),
            ])));
        }
    }
    Ok(())
}

fn string(object: &JsValue, name: &str) -> Result<Option<String>> {
    let value = get(object, name);
    if value.is_undefined() {
        return Ok(None);
    }
    match value.as_string() {
        Some(s) if !s.is_empty() => Ok(Some(s)),
        _ => Err(wrong(
            &concat(&["options.", name]),
            "a non-empty string",
            &value,
        )),
    }
}

/// One of a few words (its index), named in the error when it is none of them. Not generic
/// over the choices' type: one copy of this in the package rather than four.
fn choice(object: &JsValue, name: &str, words: &[&str]) -> Result<Option<usize>> {
    let value = get(object, name);
    if value.is_undefined() {
        return Ok(None);
    }
    let word = value.as_string().unwrap_or_default();
    match words.iter().position(|w| *w == word) {
        Some(i) => Ok(Some(i)),
        None => {
            let quoted: Vec<String> = words.iter().map(|w| quoted(w)).collect();
            let listed = listed(quoted.iter().map(String::as_str));
            let path = concat(&["options.", name]);
            Err(wrong(&path, &concat(&["one of ", &listed]), &value))
        }
    }
}

fn millis(object: &JsValue, name: &str, path: &str) -> Result<Option<Duration>> {
    let value = get(object, name);
    if value.is_undefined() {
        return Ok(None);
    }
    match value.as_f64() {
        Some(ms) if ms.is_finite() && ms > 0.0 && ms <= 2_147_483_647.0 => {
            Ok(Some(Duration::from_millis(ms.ceil() as u64)))
        }
        _ => Err(wrong(
            path,
            "a number of milliseconds above 0 (at most 2147483647)",
            &value,
        )),
    }
}

/// `items` separated by commas.
fn listed<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for item in items {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(item);
    }
    out
}

/// "`path` must be `expected`, not `value`".
fn wrong(path: &str, expected: &str, value: &JsValue) -> Error {
    Error::option(concat(&[
        path,
        " must be ",
        expected,
        ", not ",
        &show(value),
    ]))
}

/// A value as the error message shows it.
fn show(value: &JsValue) -> String {
    if let Some(s) = value.as_string() {
        return quoted(&s);
    }
    if value.is_function() {
        return "a function".to_owned();
    }
    js_sys::JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
        .unwrap_or_else(|| value.js_typeof().as_string().unwrap_or_default())
}
