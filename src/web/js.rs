//! # The JavaScript face
//!
//! What the npm package exports besides `init`: the `Submitter` class, a thin wasm-bindgen
//! wrapper of the Rust [`Submitter`](super::Submitter). Options come in through
//! [`Options::from_js`], bodies become the core's canonical JSON, and settlements, changes and
//! pending submissions go out as plain objects through serde-wasm-bindgen. Errors are
//! `OncekeyError`s with their `code` ([`Error`]). The TypeScript declarations are wasm-bindgen's,
//! from these exports, with the types they name in the custom section below.

use core::cell::RefCell;
use js_sys::{Function, Promise, Reflect, JSON};
use serde::Serialize;
use wasm_bindgen::prelude::*;
use web_sys::AbortSignal;

use super::driver::{Settlement, Settling, Submitter as Driven, Update};
use super::error::{describe, Error, ErrorCode};
use super::options::Options;
use crate::core::body::{self, Value};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** The contract's outcomes (CONTRACT.md section 2). */
export type Outcome = "succeeded" | "refused" | "conflict" | "misconfigured" | "unsure" | "expired";

/** Where a submission is (CONTRACT.md section 3). */
export type SubmitterState = "idle" | "sending" | "waiting" | Outcome;

/** Retries: attempts per round, and times in milliseconds. */
export interface RetryOptions {
  /** Attempts per round (the first and each "Try again"), default 8. */
  attempts?: number;
  /** Backoff base in ms, default 500: delay = random(0, min(cap, base * 2^n)). */
  base?: number;
  /** Longest wait between attempts in ms (also for Retry-After), default 30000. */
  cap?: number;
  /** Time budget of a round in ms, default 900000 (15 minutes); then `unsure`. */
  budget?: number;
}

export interface SubmitterOptions {
  /** Where to send: in full, or relative to the page (read in full, as `fetch` reads it). */
  url: string;
  /** Default "POST". */
  method?: string;
  /** Added to every attempt; never stored (they may carry credentials). */
  headers?: Record<string, string>;
  /**
   * Called before every attempt; the headers it returns go on that attempt only and are never
   * stored (a fresh token, a per-request trace id). A throw is reported and the attempt goes on.
   */
  attemptHeaders?: (attempt: { attempt: number; key: string }) => Record<string, string>;
  /** Default "Idempotency-Key". */
  keyHeader?: string;
  /** "bare" (default) or "sf-string" (a quoted structured-field string). */
  keyFormat?: "bare" | "sf-string";
  /** Per attempt, default 30000; a timed-out attempt is retried with the same key (its fetch aborted, and abandoned if it ignores the abort). */
  timeoutMs?: number;
  retry?: RetryOptions;
  /**
   * Where key and body are kept until a definite answer; default "session". "indexeddb" keeps a
   * JSON body across closing the tab too (an upload is kept there whatever is asked); blocked,
   * it falls back to memory with a warning.
   */
  storage?: "session" | "local" | "memory" | "indexeddb";
  /** fetch's credentials; default "same-origin". */
  credentials?: "omit" | "same-origin" | "include";
  /** "json" (default) or "form" (application/x-www-form-urlencoded from a flat object). */
  encoding?: "json" | "form";
  /** Resend a pending submission found at start-up at once, instead of waiting `unsure`. */
  resume?: boolean;
  /**
   * How long the server keeps a key, in ms; default 86400000 (24 h). No attempt is ever sent
   * with a key older than this less a margin of min(10 %, 5 min), counted from its first attempt
   * across reloads and `tryAgain()`: the submission settles `expired` instead. Kept in the
   * stored record. Given without `retry.budget`, the default budget is shortened to fit in it.
   */
  keyLifetimeMs?: number;
  /**
   * The largest upload (`submit(formData)`: fields and files) in bytes, default 25000000; a
   * larger one is refused (code "body") before anything is stored.
   */
  maxBodyBytes?: number;
}

/** A pending submission of the origin, as `listPending(storage)` lists it. */
export interface PendingEntry {
  name: string;
  key: string;
  /** When its first attempt was made, Unix milliseconds. */
  startedAt: number;
  attempts: number;
  /** The stored body's bytes (an upload's with its files). */
  size: number;
}

/** How a submission ended, or why its retries stopped (`unsure`). */
export interface SubmitResult {
  outcome: Outcome;
  /** The last HTTP status, or null when no answer ever came. */
  status: number | null;
  /** The idempotency key it was sent with. */
  key: string;
  /** The answer's JSON parsed, or its text; null when empty. */
  body: unknown;
  /** The server replayed a stored answer (Idempotent-Replayed). */
  replayed: boolean;
  /** Attempts made, all rounds. */
  attempts: number;
  /** For `unsure`: why retries stopped. */
  gaveUp: string | null;
}

/** What `submit` and `tryAgain` take besides the body. */
export interface SubmitOptions {
  /**
   * Aborting rejects this call's promise with an OncekeyError of code "aborted" and, when no
   * other call waits on the submission, stops its retries (an attempt under way is aborted).
   * The submission stays pending with its key (`unsure`): `tryAgain()` resends the same key.
   */
  signal?: AbortSignal;
}

/** The pending submission, as stored. */
export interface PendingSubmission {
  key: string;
  body: unknown;
  attempts: number;
  /** When the first attempt was made, ms since the epoch. */
  startedAt: number;
}

/** An event: a change of state, or a warning (with the state unchanged). */
export interface SubmitterChange {
  state: SubmitterState;
  key: string | null;
  attempts: number;
  /** In `waiting`: when the next attempt is due, ms since the epoch. */
  nextAttemptAt: number | null;
  /**
   * In `waiting`: why it waits. "retry": an attempt is due at `nextAttemptAt`; "online": the
   * browser is offline, and it is sent, with the same key, as soon as it is back online.
   */
  waitingFor: "retry" | "online" | null;
  /** Storage degraded to memory, or an unreadable record was removed. */
  warning: string | null;
}
"#;

/// One named submission: one key per intended submission, kept in storage across retries and
/// reloads until a definite answer. Make it after `await init()`.
#[wasm_bindgen(js_name = Submitter)]
#[derive(Debug, Clone)]
pub struct JsSubmitter {
    inner: Driven,
}

/// The serializer of everything that goes out: `None` is `null`, as the declarations say, and
/// maps are plain objects.
fn out(value: &impl Serialize) -> JsValue {
    let s = serde_wasm_bindgen::Serializer::new()
        .serialize_missing_as_null(true)
        .serialize_maps_as_objects(true);
    value.serialize(&s).unwrap_or(JsValue::NULL)
}

/// The plain objects that go out are written as maps of their JavaScript names, not derived as
/// structs: serde-wasm-bindgen's struct serializer keeps a hash map of JavaScript strings per
/// field name, which costs the package 2 KB (0.8 KB gzipped) for three small objects. Each field
/// goes out as a [`Field`], so that the map serializer is made once, not once per field type.
macro_rules! out_object {
    ($name:ident { $($field:ident: $js:literal),* $(,)? }) => {
        impl Serialize for $name<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = s.serialize_map(None)?;
                $(map.serialize_entry($js, &Field::from(&self.$field))?;)*
                map.end()
            }
        }
    };
}

/// One field's value as JavaScript gets it: a string, a number, a boolean, null, or a
/// JavaScript value as it is.
enum Field<'a> {
    Text(&'a str),
    Number(f64),
    Bool(bool),
    Null,
    Js(&'a JsValue),
}

impl Serialize for Field<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Field::Text(t) => s.serialize_str(t),
            Field::Number(n) => s.serialize_f64(n),
            Field::Bool(b) => s.serialize_bool(b),
            Field::Null => s.serialize_none(),
            Field::Js(v) => serde_wasm_bindgen::preserve::serialize(v, s),
        }
    }
}

impl<'a> From<&'a &str> for Field<'a> {
    fn from(t: &'a &str) -> Field<'a> {
        Field::Text(t)
    }
}

impl<'a> From<&'a Option<&str>> for Field<'a> {
    fn from(t: &'a Option<&str>) -> Field<'a> {
        t.map_or(Field::Null, Field::Text)
    }
}

impl From<&f64> for Field<'_> {
    fn from(n: &f64) -> Self {
        Field::Number(*n)
    }
}

impl From<&Option<f64>> for Field<'_> {
    fn from(n: &Option<f64>) -> Self {
        n.map_or(Field::Null, Field::Number)
    }
}

impl From<&u32> for Field<'_> {
    fn from(n: &u32) -> Self {
        Field::Number((*n).into())
    }
}

impl From<&Option<u16>> for Field<'_> {
    fn from(n: &Option<u16>) -> Self {
        n.map_or(Field::Null, |n| Field::Number(n.into()))
    }
}

impl From<&bool> for Field<'_> {
    fn from(b: &bool) -> Self {
        Field::Bool(*b)
    }
}

impl<'a> From<&'a JsValue> for Field<'a> {
    fn from(v: &'a JsValue) -> Field<'a> {
        Field::Js(v)
    }
}

/// An answer's body as JavaScript gets it: its JSON parsed, or its text; null when empty.
fn parse_body(text: &str) -> JsValue {
    if text.is_empty() {
        return JsValue::NULL;
    }
    JSON::parse(text).unwrap_or_else(|_| JsValue::from_str(text))
}

#[wasm_bindgen]
extern "C" {
    /// `JSON.parse` of a JavaScript string as it is (js-sys's takes a `&str`).
    #[wasm_bindgen(catch, js_namespace = JSON, js_name = parse)]
    fn parse_js(text: &JsValue) -> Result<JsValue, JsValue>;
}

/// A settlement's body: [`parse_body`] of the text JavaScript read, without decoding it again.
fn settled_body(s: &Settlement) -> JsValue {
    match &s.js_text {
        Some(_) if s.text().is_empty() => JsValue::NULL,
        Some(text) => parse_js(text).unwrap_or_else(|_| text.clone()),
        None => parse_body(s.text()),
    }
}

struct SubmitResult<'a> {
    outcome: &'static str,
    status: Option<u16>,
    key: &'a str,
    body: JsValue,
    replayed: bool,
    attempts: u32,
    gave_up: Option<&'static str>,
}

out_object!(SubmitResult {
    outcome: "outcome",
    status: "status",
    key: "key",
    body: "body",
    replayed: "replayed",
    attempts: "attempts",
    gave_up: "gaveUp",
});

fn result(s: &Settlement) -> JsValue {
    out(&SubmitResult {
        outcome: s.outcome().as_str(),
        status: s.status(),
        key: s.key().as_str(),
        body: settled_body(s),
        replayed: s.replayed(),
        attempts: s.attempts(),
        gave_up: s.gave_up().map(|g| g.as_str()),
    })
}

struct Change<'a> {
    state: &'static str,
    key: Option<&'a str>,
    attempts: u32,
    next_attempt_at: Option<f64>,
    waiting_for: Option<&'static str>,
    warning: Option<&'a str>,
}

out_object!(Change {
    state: "state",
    key: "key",
    attempts: "attempts",
    next_attempt_at: "nextAttemptAt",
    waiting_for: "waitingFor",
    warning: "warning",
});

fn change(u: &Update) -> JsValue {
    out(&Change {
        state: u.state.as_str(),
        key: u.key.as_ref().map(|k| k.as_str()),
        attempts: u.attempts,
        next_attempt_at: u.next_attempt_at.map(|t| t.as_millis() as f64),
        waiting_for: u.waiting_for.map(super::form::waiting_for),
        warning: u.warning.as_deref(),
    })
}

struct PendingOut<'a> {
    key: &'a str,
    body: JsValue,
    attempts: u32,
    started_at: f64,
}

out_object!(PendingOut {
    key: "key",
    body: "body",
    attempts: "attempts",
    started_at: "startedAt",
});

/// The settlement as a promise, resolved straight from the driver (no task to poll it); an
/// `abort` of `signal` aborts its wait ([`AbortHandle`](super::AbortHandle)).
fn settle(settling: Settling, signal: Option<AbortSignal>) -> Promise {
    let on_abort = signal.map(|signal| {
        let handle = settling.abort_handle();
        // Aborted while an upload was hashed (or IndexedDB opened): begun, so pending with its
        // key, and this wait over at once.
        if signal.aborted() {
            settling.abort_handle().abort();
        }
        let f = Closure::<dyn FnMut()>::new(move || handle.abort());
        let _ = signal.add_event_listener_with_callback("abort", f.as_ref().unchecked_ref());
        (signal, f)
    });
    let mut settling = Some((settling, on_abort));
    Promise::new(&mut |resolve, reject| {
        if let Some((settling, on_abort)) = settling.take() {
            settling.then(move |settled| {
                if let Some((signal, f)) = on_abort {
                    let _ = signal
                        .remove_event_listener_with_callback("abort", f.as_ref().unchecked_ref());
                    // Dropped after the current call: this may run inside that listener.
                    wasm_bindgen_futures::spawn_local(async move { drop(f) });
                }
                let _ = match settled {
                    Ok(s) => resolve.call1(&JsValue::UNDEFINED, &result(&s)),
                    Err(e) => reject.call1(&JsValue::UNDEFINED, &e.into()),
                };
            });
        }
    })
}

/// `{ signal }` of `submit` and `tryAgain`: `Ok(None)` without one; an already aborted signal is
/// an `aborted` error, with nothing begun.
fn signal_of(options: &JsValue) -> Result<Option<AbortSignal>, Error> {
    if options.is_undefined() || options.is_null() {
        return Ok(None);
    }
    let signal = if options.is_object() {
        Reflect::get(options, &"signal".into()).unwrap_or_default()
    } else {
        JsValue::UNDEFINED
    };
    if !options.is_object() || !(signal.is_undefined() || signal.is_instance_of::<AbortSignal>()) {
        return Err(Error::option(
            "submit's and tryAgain's options must be an object such as { signal: controller.signal }",
        ));
    }
    let Some(signal) = signal.dyn_into::<AbortSignal>().ok() else {
        return Ok(None);
    };
    if signal.aborted() {
        return Err(Error::new(
            ErrorCode::Aborted,
            "aborted before it began: nothing was stored or sent",
        ));
    }
    Ok(Some(signal))
}

/// `body` as JSON text, refusing what JSON cannot carry (a cycle, a BigInt, a function, a
/// symbol, NaN or Infinity) instead of letting `JSON.stringify` drop or mangle it.
pub(crate) fn to_json(body: &JsValue) -> Result<String, Error> {
    let text = REPLACER
        .with(|replacer| JSON::stringify_with_replacer(body, replacer.as_ref().unchecked_ref()))
        .map_err(|e| Error::body("the body cannot be sent as JSON: ".to_owned() + &describe(&e)))?;
    if let Some(long) = super::too_long(&text) {
        return Err(Error::body(
            "the body is ".to_owned()
                + &crate::core::text::decimal(long.into())
                + " characters of JSON, more than the 16 Mi (16777216) sent",
        ));
    }
    text.as_string()
        .ok_or_else(|| Error::body("the body cannot be sent as JSON: it is undefined"))
}

/// `JSON.stringify`'s replacer that throws an `OncekeyError` (code `body`) for what JSON
/// cannot carry; made once, as every submission calls it.
type Replacer = Closure<dyn FnMut(JsValue, JsValue) -> Result<JsValue, JsValue>>;

thread_local! {
    static REPLACER: Replacer = Closure::new(|key: JsValue, value: JsValue| {
        // Most values are strings and objects (not functions, whose `typeof` is "function"):
        // one question each to JavaScript, before the rarer ones.
        if value.is_string() || value.is_object() {
            return Ok(value);
        }
        let what = if value.is_function() {
            "a function"
        } else if value.is_bigint() {
            "a BigInt"
        } else if value.is_symbol() {
            "a symbol"
        } else if value.as_f64().is_some_and(|n| !n.is_finite()) {
            "NaN or Infinity"
        } else {
            return Ok(value);
        };
        let at = match key.as_string() {
            Some(k) if !k.is_empty() => " at ".to_owned() + &crate::core::text::quoted(&k),
            _ => String::new(),
        };
        Err(Error::body("the body has ".to_owned() + what + &at + ", which JSON cannot carry").into())
    });
}

#[wasm_bindgen(js_class = Submitter)]
impl JsSubmitter {
    /// Throws an error naming a wrong option; never throws for storage problems (warnings).
    #[wasm_bindgen(constructor)]
    pub fn new(
        #[wasm_bindgen(unchecked_param_type = "string")] name: JsValue,
        #[wasm_bindgen(unchecked_param_type = "SubmitterOptions")] options: JsValue,
    ) -> Result<JsSubmitter, JsValue> {
        let name = match name.as_string() {
            Some(name) if !name.is_empty() => name,
            _ => {
                return Err(Error::option("the submitter's name must be a non-empty string").into())
            }
        };
        let options = Options::from_js(&options)?;
        Ok(JsSubmitter {
            inner: Driven::new(&name, options)?,
        })
    }

    /// The name it was made with.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_owned()
    }

    /// Sends `body` once: resolves when the outcome is definite, or `unsure` when retries
    /// stopped. The same body while one is pending joins it. Rejects, with nothing stored or
    /// sent, for a body JSON cannot carry (code "body") or when another body is pending
    /// ("pending"; not, for a JSON body with no secrets set, for an unsure one whose record
    /// another tab has since removed from web storage: that one is dropped, and this body
    /// sent). A `FormData` is an upload: sent as `multipart/form-data`, kept with its
    /// files in IndexedDB until a definite answer, its files' SHA-256, names and types part of
    /// "same body"; over `maxBodyBytes` it rejects ("body") before anything is stored.
    /// `options.signal` aborts the wait ("aborted"; see `SubmitOptions`), an upload's too: one
    /// aborted while its files are hashed is begun and left pending with its key.
    #[wasm_bindgen(unchecked_return_type = "Promise<SubmitResult>")]
    pub fn submit(
        &self,
        #[wasm_bindgen(unchecked_param_type = "unknown | FormData")] body: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "SubmitOptions")] options: Option<JsValue>,
    ) -> Promise {
        let begun = signal_of(&options.unwrap_or_default()).and_then(|signal| {
            let driver = self.inner.driver().clone();
            let Some(form) = body.dyn_ref::<web_sys::FormData>().cloned() else {
                // Under `storage: 'indexeddb'` the driver holds it until IndexedDB was looked at.
                return Ok(settle(driver.submit(&to_json(&body)?), signal));
            };
            // An upload begins once its files are read and hashed.
            Ok(wasm_bindgen_futures::future_to_promise(async move {
                let settling = super::upload::begin(driver, form)
                    .await
                    .map_err(JsValue::from)?;
                wasm_bindgen_futures::JsFuture::from(settle(settling, signal)).await
            }))
        });
        begun.unwrap_or_else(|e| Promise::reject(&e.into()))
    }

    /// Resends the pending submission: same key, same body ("state" when nothing is pending).
    /// `options.signal` aborts the wait ("aborted"; see `SubmitOptions`).
    #[wasm_bindgen(js_name = tryAgain, unchecked_return_type = "Promise<SubmitResult>")]
    pub fn try_again(
        &self,
        #[wasm_bindgen(unchecked_optional_param_type = "SubmitOptions")] options: Option<JsValue>,
    ) -> Promise {
        match signal_of(&options.unwrap_or_default()) {
            Ok(signal) => settle(self.inner.try_again(), signal),
            Err(e) => Promise::reject(&e.into()),
        }
    }

    /// "Send as new", for an `expired` (or `unsure`) submission, once a person has checked that
    /// it was not done: its request sent again under a new key, deliberately ("state" when
    /// nothing expired or unsure is pending).
    #[wasm_bindgen(js_name = sendAsNew, unchecked_return_type = "Promise<SubmitResult>")]
    pub fn send_as_new(&self) -> Promise {
        settle(self.inner.send_as_new(), None)
    }

    /// Drops an unconfirmed submission: the record is removed, an attempt under way is aborted,
    /// waiting calls reject ("discarded"), and the next submission gets a new key.
    pub fn discard(&self) {
        self.inner.discard();
    }

    /// The pending submission, or null.
    #[wasm_bindgen(unchecked_return_type = "PendingSubmission | null")]
    pub fn pending(&self) -> JsValue {
        match self.inner.pending() {
            None => JsValue::NULL,
            Some(p) => out(&PendingOut {
                key: p.key().as_str(),
                body: parse_body(p.body_text()),
                attempts: p.attempts(),
                started_at: p.started_at().as_millis() as f64,
            }),
        }
    }

    /// The current state.
    #[wasm_bindgen(getter, unchecked_return_type = "SubmitterState")]
    pub fn state(&self) -> JsValue {
        JsValue::from_str(self.inner.state().as_str())
    }

    /// Where records are kept: the storage asked for, or "memory" once it could not be used.
    #[wasm_bindgen(
        getter,
        unchecked_return_type = "\"session\" | \"local\" | \"memory\" | \"indexeddb\""
    )]
    pub fn storage(&self) -> JsValue {
        JsValue::from_str(self.inner.storage().as_str())
    }

    /// Calls `listener` at once with the current state (and any warning from the constructor),
    /// then on every change. Returns a function that stops it; a page that drops the function
    /// keeps the listener for the submitter's life.
    #[wasm_bindgen(js_name = onChange, unchecked_return_type = "() => void")]
    pub fn on_change(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(change: SubmitterChange) => void")]
        listener: JsValue,
    ) -> Result<JsValue, JsValue> {
        let Some(f) = listener.dyn_ref::<Function>().cloned() else {
            return Err(Error::option("onChange needs a function").into());
        };
        let listening = self.inner.on_change(move |u| {
            // A throw is reported, and the other listeners still hear.
            if let Err(e) = f.call1(&JsValue::UNDEFINED, &change(u)) {
                web_sys::console::error_2(&"oncekey: an onChange listener threw".into(), &e);
            }
        });
        Ok(listen(listening))
    }

    /// Fields that are never stored (a password, a card number), merged into the JSON object
    /// body of every attempt from now on, in memory only; dropped when the submission settles
    /// or is discarded. After a reload, ask for them again and set them before `tryAgain()`.
    #[wasm_bindgen(js_name = setSecrets)]
    pub fn set_secrets(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, unknown>")] fields: JsValue,
    ) -> Result<(), JsValue> {
        let text = to_json(&fields)?;
        match body::parse(&text) {
            Ok(Value::Object(fields)) => Ok(self.inner.set_secrets(fields)?),
            Ok(_) => Err(Error::body("secret fields must be an object of names to values").into()),
            Err(e) => Err(Error::new(ErrorCode::Body, e.message()).into()),
        }
    }
}

thread_local! {
    /// The `onChange` listeners of JavaScript, by number: each hears until its stop function is
    /// called, or for its submitter's life (dropping the function stops nothing). A stop
    /// function is the module's one callback bound to the listener's number (`global.rs`), not a
    /// closure of its own: a closure given to JavaScript was finalized at the next collection
    /// (it stopped the listener of a page that did not keep the function, and a finalizer that
    /// runs while the page sits in the back/forward cache gets it evicted), and one kept by the
    /// submitter threw when called after the submitter was freed.
    static LISTENING: RefCell<super::global::Numbered<super::driver::Listener>> =
        const { RefCell::new(super::global::Numbered::new()) };
}

/// Keeps `listener` until its stop function is called; returns that function. The listeners
/// of submitters gone are let go here (their stop functions then find nothing to stop; what
/// goes with them is a page's function, whose release calls nothing of ours).
fn listen(listener: super::driver::Listener) -> JsValue {
    let id = LISTENING.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(super::driver::Listener::has_submitter);
        l.add(listener)
    });
    super::global::stop_callback(id).into()
}

/// A stop function was called (`global.rs`): its listener hears no more, if it still does.
pub(crate) fn stop(id: u32) {
    let stopped = LISTENING.with(|l| l.borrow_mut().take(id));
    drop(stopped);
}

impl JsSubmitter {
    /// The Rust submitter it wraps.
    pub fn submitter(&self) -> &Driven {
        &self.inner
    }
}

/// The same submitter, for JavaScript (a Rust frontend or the form kit handing it to a page).
impl From<Driven> for JsSubmitter {
    fn from(inner: Driven) -> JsSubmitter {
        JsSubmitter { inner }
    }
}
