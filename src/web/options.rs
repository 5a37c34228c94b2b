//! # Options
//!
//! What a [`Submitter`](super::Submitter) is made with, and their checks. Every mistake is an
//! [`Error`] of code `option` that names the option by its JavaScript name (`options.timeoutMs`),
//! an unknown name too, so that a typo such as `timeout` for `timeoutMs` does not pass silently.
//! From JavaScript, [`Options::from_js`] reads the options object field by field with js-sys, so
//! that a wrong type is reported with the field it is in. (Not with serde-wasm-bindgen's
//! `Deserializer`: its error path formats floats, which costs the package 17 KB gzipped, a
//! third of the module; serde-wasm-bindgen carries what goes back to JavaScript instead.)

use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use super::error::{describe, Error};
use super::get;
use crate::core::record::is_token;
use crate::core::text::quoted;
use crate::core::{key_margin, Encoding, Key, KeyFormat, RetryPolicy, DEFAULT_KEY_HEADER};

/// Where key and body are kept until a definite answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StorageKind {
    /// `sessionStorage`: per tab, survives reloads, gone when the tab closes (the default).
    #[default]
    Session,
    /// `localStorage`: shared by the origin's tabs, kept across closing them.
    Local,
    /// Memory only: lost on a reload. Also what a storage that cannot be used degrades to.
    Memory,
    /// IndexedDB (database `oncekey`, store `pending`): kept across closing the tab and
    /// restarting the browser, for a JSON body too. Uploads are kept there whatever is asked.
    IndexedDb,
}

impl StorageKind {
    /// `session`, `local`, `memory` or `indexeddb`.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Session => "session",
            StorageKind::Local => "local",
            StorageKind::Memory => "memory",
            StorageKind::IndexedDb => "indexeddb",
        }
    }
}

/// `fetch`'s `credentials`: whether cookies go with the attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Credentials {
    /// To the page's own origin only (the default).
    #[default]
    SameOrigin,
    /// Never.
    Omit,
    /// Always, cross-origin too.
    Include,
}

/// Headers for one attempt, asked for before each: given the attempt's number (counting every
/// attempt of the submission from 1, across reloads) and the key. Never stored.
pub type AttemptHeaders = Rc<dyn Fn(u32, &Key) -> Vec<(String, String)>>;

/// How a [`Submitter`](super::Submitter) sends. [`Options::new`] gives the defaults.
#[derive(Clone)]
pub struct Options {
    /// Where to send: in full, or relative to the page (read in full, as `fetch` reads it,
    /// when the submitter is made).
    pub url: String,
    /// The HTTP method, `POST` by default.
    pub method: String,
    /// Added to every attempt; never stored (they may carry credentials).
    pub headers: Vec<(String, String)>,
    /// The key's header, `Idempotency-Key` by default.
    pub key_header: String,
    /// How the key is written in its header.
    pub key_format: KeyFormat,
    /// Per attempt, 30000 by default; a timed-out attempt is retried with the same key. Its
    /// `fetch` is aborted then, and abandoned if it goes on regardless (a page's wrapper that
    /// drops the signal): the timeout bounds the attempt either way.
    pub timeout_ms: u32,
    /// Attempts per round, backoff, the round's time budget, and the key's lifetime
    /// ([`RetryPolicy::key_lifetime`], `keyLifetimeMs` in JavaScript, 24 h by default): no
    /// attempt is sent with a key older than it (less its margin, from the first attempt, across
    /// reloads and "Try again"); such a submission settles `expired`.
    pub retry: RetryPolicy,
    /// Where key and body are kept until a definite answer.
    pub storage: StorageKind,
    /// `fetch`'s credentials.
    pub credentials: Credentials,
    /// JSON, or a form from a flat object.
    pub encoding: Encoding,
    /// Resend a pending submission found at start-up at once, instead of waiting `unsure`.
    pub resume: bool,
    /// Headers for each attempt (a fresh token, a trace id), never stored. A header that cannot
    /// be sent is left out with a warning; the attempt still goes out.
    pub attempt_headers: Option<AttemptHeaders>,
    /// The largest upload (`submit(formData)`: fields and files), in bytes; a larger one is
    /// refused before anything is stored. 25 MB by default.
    pub max_body_bytes: u64,
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("url", &self.url)
            .field("method", &self.method)
            .field("headers", &self.headers)
            .field("key_header", &self.key_header)
            .field("key_format", &self.key_format)
            .field("timeout_ms", &self.timeout_ms)
            .field("retry", &self.retry)
            .field("storage", &self.storage)
            .field("credentials", &self.credentials)
            .field("encoding", &self.encoding)
            .field("resume", &self.resume)
            .field("attempt_headers", &self.attempt_headers.is_some())
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            url: String::new(),
            method: "POST".to_owned(),
            headers: Vec::new(),
            key_header: DEFAULT_KEY_HEADER.to_owned(),
            key_format: KeyFormat::Bare,
            timeout_ms: 30_000,
            retry: RetryPolicy::default(),
            storage: StorageKind::Session,
            credentials: Credentials::SameOrigin,
            encoding: Encoding::Json,
            resume: false,
            attempt_headers: None,
            max_body_bytes: 25_000_000,
        }
    }
}

/// The options' names, as JavaScript spells them.
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
    "keyLifetimeMs",
    "maxBodyBytes",
];
const RETRY_KNOWN: &[&str] = &["attempts", "base", "cap", "budget"];

/// The most milliseconds a timer takes (`setTimeout`'s limit).
const MAX_MS: f64 = 2_147_483_647.0;

/// The longest key lifetime, in milliseconds: a year (Adyen keeps keys for at least 31 days,
/// past a timer's limit; the driver re-arms its timer for a deadline further away).
const MAX_LIFETIME_MS: f64 = 31_536_000_000.0;

impl Options {
    /// The defaults, sending to `url`.
    pub fn new(url: &str) -> Options {
        Options {
            url: url.to_owned(),
            ..Options::default()
        }
    }

    /// Checks what [`Options::from_js`] cannot see by type: the URL, method and header names,
    /// the timeout and the retry policy. Methods are upper-cased (ASCII), as the core compares
    /// them.
    pub(crate) fn check(mut self) -> Result<Options, Error> {
        if self.url.is_empty() {
            return Err(Error::option(
                "options.url is required: where to send the submission",
            ));
        }
        // In full: a record of this endpoint written the other way is the same request.
        self.url = super::global::full_url(&self.url).ok_or_else(|| {
            wrong_text(
                "options.url",
                "a URL (in full, or relative to the page)",
                &self.url,
            )
        })?;
        self.method = self.method.to_ascii_uppercase();
        if !is_token(&self.method) {
            return Err(wrong_text(
                "options.method",
                "an HTTP method such as \"POST\"",
                &self.method,
            ));
        }
        if !is_token(&self.key_header) {
            return Err(wrong_text(
                "options.keyHeader",
                "a header name",
                &self.key_header,
            ));
        }
        for (name, value) in &self.headers {
            if !super::sendable_header(name, value) {
                return Err(Error::option(
                    "options.headers has a header that cannot be sent: ".to_owned() + &quoted(name),
                ));
            }
        }
        if self.timeout_ms == 0 || f64::from(self.timeout_ms) > MAX_MS {
            return Err(Error::option(
                "options.timeoutMs must be a number of milliseconds above 0 (at most 2147483647)",
            ));
        }
        self.retry
            .validate()
            .map_err(|e| Error::option("options.".to_owned() + e.message()))?;
        Ok(self)
    }

    /// Reads JavaScript's options object (`{ url: "/api/tickets", ... }`, see the package's
    /// `SubmitterOptions`), with the defaults for what it leaves out.
    pub fn from_js(value: &JsValue) -> Result<Options, Error> {
        if !is_plain_object(value) {
            return Err(Error::option(
                "options must be an object such as { url: \"/api/tickets\" }",
            ));
        }
        check_names(value, KNOWN, "options.")?;
        let url = non_empty(value, "url")?.ok_or_else(|| {
            Error::option("options.url is required: where to send the submission")
        })?;
        let mut o = Options::new(&url);
        if let Some(method) = non_empty(value, "method")? {
            o.method = method;
        }
        if let Some(header) = non_empty(value, "keyHeader")? {
            o.key_header = header;
        }
        if let Some(i) = choice(value, "keyFormat", &["bare", "sf-string"])? {
            o.key_format = [KeyFormat::Bare, KeyFormat::SfString][i];
        }
        if let Some(i) = choice(
            value,
            "storage",
            &["session", "local", "memory", "indexeddb"],
        )? {
            o.storage = [
                StorageKind::Session,
                StorageKind::Local,
                StorageKind::Memory,
                StorageKind::IndexedDb,
            ][i];
        }
        if let Some(i) = choice(value, "credentials", &["same-origin", "omit", "include"])? {
            o.credentials = [
                Credentials::SameOrigin,
                Credentials::Omit,
                Credentials::Include,
            ][i];
        }
        if let Some(i) = choice(value, "encoding", &["json", "form"])? {
            o.encoding = [Encoding::Json, Encoding::Form][i];
        }
        if let Some(ms) = millis(value, "timeoutMs", "options.timeoutMs")? {
            o.timeout_ms = ms;
        }
        let resume = get(value, "resume");
        if !resume.is_undefined() {
            o.resume = resume
                .as_bool()
                .ok_or_else(|| wrong("options.resume", "true or false", &resume))?;
        }
        let max = get(value, "maxBodyBytes");
        if !max.is_undefined() {
            o.max_body_bytes = match max.as_f64() {
                Some(n) if (1.0..=9_007_199_254_740_991.0).contains(&n) && n.fract() == 0.0 => {
                    n as u64
                }
                _ => {
                    return Err(wrong(
                        "options.maxBodyBytes",
                        "a whole number of bytes above 0",
                        &max,
                    ))
                }
            };
        }
        o.headers = headers(&get(value, "headers"))?;
        let attempt_headers = get(value, "attemptHeaders");
        if !attempt_headers.is_undefined() {
            let Some(f) = attempt_headers.dyn_ref::<Function>() else {
                return Err(wrong(
                    "options.attemptHeaders",
                    "a function returning headers",
                    &attempt_headers,
                ));
            };
            o.attempt_headers = Some(js_attempt_headers(f.clone()));
        }
        let lifetime = get(value, "keyLifetimeMs");
        let lifetime_given = !lifetime.is_undefined();
        if lifetime_given {
            match lifetime.as_f64() {
                Some(ms) if ms > 0.0 && ms <= MAX_LIFETIME_MS => {
                    o.retry.key_lifetime = Duration::from_millis(ms.ceil() as u64);
                }
                _ => {
                    return Err(wrong(
                        "options.keyLifetimeMs",
                        "the server's key lifetime in milliseconds, above 0 (at most a year)",
                        &lifetime,
                    ))
                }
            }
        }
        let mut budget_given = false;
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
                match attempts.as_f64() {
                    Some(n) if n.fract() == 0.0 && (1.0..=4_294_967_295.0).contains(&n) => {
                        o.retry.attempts = n as u32;
                    }
                    _ => {
                        return Err(wrong(
                            "options.retry.attempts",
                            "a whole number of at least 1",
                            &attempts,
                        ))
                    }
                }
            }
            budget_given = !get(&retry, "budget").is_undefined();
            for (name, slot) in [
                ("base", &mut o.retry.base),
                ("cap", &mut o.retry.cap),
                ("budget", &mut o.retry.budget),
            ] {
                if let Some(ms) = millis(&retry, name, &("options.retry.".to_owned() + name))? {
                    *slot = Duration::from_millis(ms.into());
                }
            }
        }
        if lifetime_given && !budget_given {
            // A short lifetime (Qonto's 30 minutes) shortens the default budget to fit in it.
            let usable = o.retry.key_lifetime - key_margin(o.retry.key_lifetime);
            o.retry.budget = o.retry.budget.min(usable);
        }
        o.check()
    }
}

fn is_plain_object(v: &JsValue) -> bool {
    v.is_object() && !Array::is_array(v)
}

fn check_names(object: &JsValue, known: &[&str], prefix: &str) -> Result<(), Error> {
    for name in Object::keys(object.unchecked_ref::<Object>()).iter() {
        let name = name.as_string().unwrap_or_default();
        if !known.contains(&name.as_str()) {
            let mut message = prefix.to_owned() + &name + " is not an option; the options are ";
            for (i, k) in known.iter().enumerate() {
                if i > 0 {
                    message.push_str(", ");
                }
                message.push_str(k);
            }
            return Err(Error::option(message));
        }
    }
    Ok(())
}

/// A value as an error message shows it.
fn show(value: &JsValue) -> String {
    if let Some(s) = value.as_string() {
        return quoted(&s);
    }
    if value.is_function() {
        return "a function".to_owned();
    }
    match js_sys::JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
    {
        Some(s) => s,
        None => value.js_typeof().as_string().unwrap_or_default(),
    }
}

fn wrong(path: &str, expected: &str, value: &JsValue) -> Error {
    Error::option(path.to_owned() + " must be " + expected + ", not " + &show(value))
}

fn wrong_text(path: &str, expected: &str, value: &str) -> Error {
    Error::option(path.to_owned() + " must be " + expected + ", not " + &quoted(value))
}

/// `options[name]`, one of `words` (its index), or `None` when it is not given.
fn choice(object: &JsValue, name: &str, words: &[&str]) -> Result<Option<usize>, Error> {
    let value = get(object, name);
    if value.is_undefined() {
        return Ok(None);
    }
    let found = value.as_string();
    match words.iter().position(|w| Some(*w) == found.as_deref()) {
        Some(i) => Ok(Some(i)),
        None => {
            let mut expected = "one of ".to_owned();
            for (i, w) in words.iter().enumerate() {
                if i > 0 {
                    expected.push_str(", ");
                }
                expected.push_str(&quoted(w));
            }
            Err(wrong(&("options.".to_owned() + name), &expected, &value))
        }
    }
}

fn non_empty(object: &JsValue, name: &str) -> Result<Option<String>, Error> {
    let value = get(object, name);
    match value.as_string() {
        _ if value.is_undefined() => Ok(None),
        Some(s) if !s.is_empty() => Ok(Some(s)),
        _ => Err(wrong(
            &("options.".to_owned() + name),
            "a non-empty string",
            &value,
        )),
    }
}

fn millis(object: &JsValue, name: &str, path: &str) -> Result<Option<u32>, Error> {
    let value = get(object, name);
    if value.is_undefined() {
        return Ok(None);
    }
    match value.as_f64() {
        Some(ms) if ms > 0.0 && ms <= MAX_MS => Ok(Some(ms.ceil() as u32)),
        _ => Err(wrong(
            path,
            "a number of milliseconds above 0 (at most 2147483647)",
            &value,
        )),
    }
}

fn headers(value: &JsValue) -> Result<Vec<(String, String)>, Error> {
    if value.is_undefined() {
        return Ok(Vec::new());
    }
    if !is_plain_object(value) {
        return Err(Error::option(
            "options.headers must be an object of header names to string values",
        ));
    }
    let mut out = Vec::new();
    for entry in Object::entries(value.unchecked_ref::<Object>()).iter() {
        let entry: Array = entry.unchecked_into();
        let name = entry.get(0).as_string().unwrap_or_default();
        let v = entry.get(1);
        let Some(v) = v.as_string() else {
            return Err(wrong(
                &("options.headers[".to_owned() + &quoted(&name) + "]"),
                "a string",
                &v,
            ));
        };
        out.push((name, v));
    }
    Ok(out)
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `Object.entries(value)`, which runs a page's getters and proxy traps: `Err` when they throw.
    #[wasm_bindgen(catch, js_namespace = Object, js_name = entries)]
    fn entries_of(value: &JsValue) -> Result<Array, JsValue>;
}

/// `options.attemptHeaders` as the driver calls it: with `{ attempt, key }`. A throw is reported
/// on the console and adds nothing; a value that is not a string is left out with a warning.
fn js_attempt_headers(f: Function) -> AttemptHeaders {
    Rc::new(move |attempt: u32, key: &Key| {
        let arg = Object::new();
        let _ = Reflect::set(&arg, &"attempt".into(), &attempt.into());
        let _ = Reflect::set(&arg, &"key".into(), &key.as_str().into());
        let given = match f.call1(&JsValue::NULL, &arg) {
            Ok(given) => given,
            Err(e) => {
                super::warn(&("options.attemptHeaders threw: ".to_owned() + &describe(&e)));
                return Vec::new();
            }
        };
        if !given.is_object() {
            return Vec::new();
        }
        let entries = match entries_of(&given) {
            Ok(entries) => entries,
            Err(e) => {
                super::warn(
                    &("options.attemptHeaders gave headers that cannot be read: ".to_owned()
                        + &describe(&e)),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for entry in entries.iter() {
            let entry: Array = entry.unchecked_into();
            let name = entry.get(0).as_string().unwrap_or_default();
            match entry.get(1).as_string() {
                Some(v) => out.push((name, v)),
                None => super::warn(
                    &("options.attemptHeaders gave a header that cannot be sent: ".to_owned()
                        + &quoted(&name)),
                ),
            }
        }
        out
    })
}
