//! # An attempt
//!
//! One `fetch` of the core's `Send`, after the current task, under the Web Lock named after the
//! key: every attempt, the first of a key too, since another tab can know a key from its first
//! moment (`localStorage`, or a duplicated tab, which copies `sessionStorage` with the record in
//! it). Only a key kept in memory needs none. The first attempt of a key made here asks for the
//! lock before anyone else can and does not wait for the grant; every other attempt waits for
//! it. The per-attempt timeout aborts the fetch; a timed-out attempt, a network error and an
//! abort are failures for the core, an answer of any status is an answer.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::{spawn_local, JsFuture};
use web_sys::{AbortController, RequestCredentials, RequestInit, Response};

use super::driver::Driver;
use super::global::{fetch, request_lock, Timer};
use super::options::Credentials;
use super::{spare, warn};
use crate::core::text::quoted;
use crate::core::record::is_sendable_header;
use crate::core::{Answer, Attempt, Failure};

/// The headers the answer table reads ([`Answer::from_response`]).
const READ: &[&str] = &[
    "retry-after",
    "retry-after-ms",
    "stripe-should-retry",
    "x-should-retry",
    "idempotent-replayed",
    "x-idempotency-status",
];

/// Starts `attempt`; `body` is what goes on the wire, or `None` when it cannot be sent (a secret
/// the encoding cannot carry), which fails like the network. `shared`: another tab or submitter
/// can know the key (it is not in memory only), so the attempt holds the Web Lock named after it.
/// `fresh`: the key was made by this submitter for this attempt, its first, so nobody else can
/// have asked for the lock yet. The lock is asked for now, before anyone could, and held until
/// the attempt is over, but the fetch does not wait for it to be granted (a round trip to the
/// browser's lock manager, most of the driver's own cost per submission). A key drawn ahead
/// (`spare.rs`) brings its lock, asked for before the key was made: its first attempt, whenever
/// it goes, holds that one without waiting either.
pub(crate) fn start(
    driver: Rc<Driver>,
    attempt: Attempt,
    body: Option<String>,
    controller: Option<AbortController>,
    (shared, fresh): (bool, bool),
) {
    // A key drawn ahead had its lock asked for before anyone could know it (`spare.rs`).
    let (lock, fresh) = match shared.then(|| spare::take_lock(&driver, &attempt.key)) {
        Some(Some(held)) => (Some(held), true),
        Some(None) => (request_lock(&("oncekey:".to_owned() + attempt.key.as_str())), fresh),
        None => (None, fresh),
    };
    spawn_local(async move {
        let _lock = match lock {
            Some(lock) if !fresh => lock.granted().await,
            lock => lock,
        };
        let id = attempt.id;
        match send(&driver, attempt, body, controller).await {
            Ok((answer, text)) => driver.answer(id, &answer, text),
            Err(failure) => driver.failure(id, failure),
        }
    });
}

async fn send(
    driver: &Driver,
    attempt: Attempt,
    body: Option<String>,
    controller: Option<AbortController>,
) -> Result<(Answer, String), Failure> {
    let o = &driver.options;
    let (Some(body), Some(controller)) = (body, controller) else {
        return Err(Failure::Network);
    };
    let signal = controller.signal();
    if signal.aborted() {
        return Err(Failure::Network);
    }
    let timed_out = Rc::new(Cell::new(false));
    let _timer = {
        let (timed_out, controller) = (timed_out.clone(), controller.clone());
        Timer::new(o.timeout_ms, move || {
            timed_out.set(true);
            controller.abort();
        })
    };
    let failed = |_| match timed_out.get() {
        true => Failure::Timeout,
        false => Failure::Network,
    };
    let r = &attempt.request;
    let init = request_init(driver, &attempt, &body, &signal);
    let response: Response = JsFuture::from(fetch(&r.url, &init).map_err(failed)?)
        .await
        .map_err(failed)?
        .unchecked_into();
    // The status is the answer; a body cut off (by the timeout) only loses the details.
    let text = match response.text() {
        Ok(p) => JsFuture::from(p)
            .await
            .ok()
            .and_then(|t| t.as_string())
            .unwrap_or_default(),
        Err(_) => String::new(),
    };
    Ok((answer(&response, &text, &o.key_header), text))
}

/// What the answer table makes of `response` ([`Answer::from_response`]).
#[inline(never)]
fn answer(response: &Response, text: &str, key_header: &str) -> Answer {
    let found = response.headers();
    let mut read = Vec::new();
    for name in READ {
        if let Ok(Some(value)) = found.get(name) {
            read.push((*name, value));
        }
    }
    Answer::from_response(
        response.status(),
        read.iter().map(|(n, v)| (*n, v.as_str())),
        text,
        key_header,
    )
}

/// The `fetch` options of `attempt`: its headers (the key's among them), method, credentials,
/// signal and body. Out of the attempt's future, which then holds only what it awaits.
#[inline(never)]
fn request_init(driver: &Driver, attempt: &Attempt, body: &str, signal: &web_sys::AbortSignal) -> RequestInit {
    let o = &driver.options;
    let r = &attempt.request;
    // A plain object by lower-case name (a later header replaces an earlier one of the same
    // name, as `Headers.set` does): fetch reads it faster than a `Headers` object.
    let headers = Object::new();
    let set = |name: &str, value: &str| {
        let _ = Reflect::set(
            &headers,
            &JsValue::from_str(&name.to_ascii_lowercase()),
            &JsValue::from_str(value),
        );
    };
    // An upload's body is FormData: the browser writes its multipart Content-Type.
    let upload = super::upload::form_data(driver);
    if upload.is_none() {
        set("Content-Type", r.encoding.content_type());
    }
    for (name, value) in r.headers.iter().chain(&o.headers) {
        set(name, value);
    }
    if let Some(f) = &o.attempt_headers {
        for (name, value) in f(attempt.number, &attempt.key) {
            if is_sendable_header(&name, &value) {
                set(&name, &value);
            } else {
                warn(
                    &("options.attemptHeaders gave a header that cannot be sent: ".to_owned()
                        + &quoted(&name)),
                );
            }
        }
    }
    set(&o.key_header, &attempt.key.header_value(o.key_format));
    let init = RequestInit::new();
    init.set_method(&r.method);
    init.set_headers(&headers);
    init.set_credentials(match o.credentials {
        Credentials::SameOrigin => RequestCredentials::SameOrigin,
        Credentials::Omit => RequestCredentials::Omit,
        Credentials::Include => RequestCredentials::Include,
    });
    init.set_signal(Some(signal));
    // As fetch takes it: no body for GET and HEAD.
    if let Some(form) = &upload {
        init.set_body(form);
    } else if r.method != "GET" && r.method != "HEAD" {
        init.set_body(&JsValue::from_str(body));
    }
    init
}
