//! # An attempt
//!
//! One `fetch` of the core's `Send`, after the current task, under the Web Lock named after the
//! key: every attempt, the first of a key too, since another tab can know a key from its first
//! moment (`localStorage`, or a duplicated tab, which copies `sessionStorage` with the record in
//! it), and another submitter of the name in this page can take a record up from any storage,
//! the page's memory too. The first attempt of a key made here asks for the
//! lock before anyone else can and does not wait for the grant; every other attempt waits for
//! it. The per-attempt timeout aborts the fetch; a timed-out attempt, a network error and an
//! abort are failures for the core, an answer of any status is an answer.
//!
//! An attempt is a few steps (send; the response; its body read) that the promises call back,
//! not a future: between steps it waits in a list by its number, and each promise is given the
//! module's one callback bound to that number (`global.rs`). A future would make two closures
//! for JavaScript per promise awaited, and a microtask per wake; this makes none.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Object, Reflect};
use wasm_bindgen::prelude::*;
use web_sys::{AbortController, RequestCredentials, RequestInit, Response};

use super::driver::Driver;
use super::global::{
    fetch, queue_microtask, request_lock, step_callback, Callee, Lock, Numbered, Timer,
};
use super::options::Credentials;
use super::{spare, too_long, warn};
use crate::core::text::{decimal, quoted};
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

/// Starts `attempt`. Its body is put together (the secrets merged in) as it is sent, after the
/// current task: secrets set right after a resuming submitter is made (`setSecrets` after `new`,
/// as the adapters do) go with its first attempt; sent without them, a server that had done the
/// first attempt saw another body under the key (422, the submission lost). A body that cannot
/// be put together (a secret the encoding cannot carry) fails like the network. The attempt
/// holds the Web Lock named after its key (another tab or submitter can know the key).
/// `fresh`: the key was made by this submitter for this attempt, its first, so nobody else can
/// have asked for the lock yet. The lock is asked for now, before anyone could, and held until
/// the attempt is over, but the fetch does not wait for it to be granted (a round trip to the
/// browser's lock manager, most of the driver's own cost per submission). A key drawn ahead
/// (`spare.rs`) brings its lock, asked for before the key was made: its first attempt, whenever
/// it goes, holds that one without waiting either.
pub(crate) fn start(
    driver: Rc<Driver>,
    attempt: Attempt,
    controller: Option<AbortController>,
    fresh: bool,
) {
    // A key drawn ahead had its lock asked for before anyone could know it (`spare.rs`).
    let (lock, fresh) = match spare::take_lock(&driver, &attempt.key) {
        Some(held) => (Some(held), true),
        None => (request_lock(&attempt.key), fresh),
    };
    let n = FLIGHTS.with(|f| f.borrow_mut().number(STEPS));
    let wait = !fresh && lock.is_some();
    // Both only queue the first step (a microtask), so the flight is kept after.
    let first = bound(n, START);
    match &lock {
        // Retries and resumed attempts go once the lock is granted (or refused: then without).
        Some(lock) if wait => lock.once_answered(first),
        // After the current task's drive, as a promise's reaction would be.
        _ => queue_microtask(&first),
    }
    // The wait for the lock is bounded like the attempt: a tab that never lets go of it (hung,
    // or a page that took the name) would keep this one "sending" for ever.
    let timer = wait.then(|| Timer::new(driver.options.timeout_ms, &driver, lock_wait_over, n));
    land(Flight {
        n,
        waits: wait,
        driver,
        attempt,
        controller,
        lock,
        timer,
        timed_out: false,
        response: None,
    });
}

/// The attempt's Web Lock was not granted within its timeout: the attempt fails as timed out,
/// unsent (retried with the same key, after the backoff, waiting for the lock again); its
/// request for the lock is let go the moment it is granted.
fn lock_wait_over(_: &Rc<Driver>, n: u32) {
    if let Some(flight) = take(n) {
        flight.failed(Failure::Timeout);
    }
}

/// An attempt under way. Between its steps it is kept in [`FLIGHTS`] by its number, and each
/// step is a call of the module's one callback bound to that number and the step
/// ([`step_callback`]), so that no closure or future is made per attempt.
struct Flight {
    n: u32,
    /// Its lock is waited for before it is sent.
    waits: bool,
    driver: Rc<Driver>,
    attempt: Attempt,
    controller: Option<AbortController>,
    /// Held until the attempt is over, its answer handled.
    lock: Option<Lock>,
    /// The attempt's timeout.
    timer: Option<Timer>,
    timed_out: bool,
    response: Option<Response>,
}

/// The steps: send; the fetch settled (a `Response`, or not: failed); the answer's body read
/// (a string, or not: unread).
const START: u32 = 0;
const FETCHED: u32 = 1;
const READ_BODY: u32 = 2;
const STEPS: u32 = 4;

thread_local! {
    /// The attempts under way between their steps, and the next attempt's number.
    static FLIGHTS: RefCell<Numbered<Flight>> = const { RefCell::new(Numbered::new()) };
}

/// Keeps `flight` until its next step; returns its number.
fn land(flight: Flight) -> u32 {
    let n = flight.n;
    FLIGHTS.with(|f| f.borrow_mut().keep(n, flight));
    n
}

fn take(n: u32) -> Option<Flight> {
    FLIGHTS.with(|f| f.borrow_mut().take(n))
}

/// The callback of step `step` of flight `n`.
fn bound(n: u32, step: u32) -> js_sys::Function {
    step_callback(n * STEPS + step)
}

/// A step's callback was called (`global.rs`): `n` says whose and which.
pub(crate) fn step_of(n: u32, value: JsValue) {
    if let Some(flight) = take(n / STEPS) {
        step(flight, n % STEPS, value);
    }
}

/// The attempt's timeout: it is aborted, and fails as timed out.
fn time_out(driver: &Rc<Driver>, n: u32) {
    let controller = FLIGHTS.with(|f| {
        let mut f = f.borrow_mut();
        let flight = f.get_mut(n)?;
        flight.timed_out = true;
        // A `fetch` that ignores its signal (a page's wrapper of it, say) never settles: once
        // the abort had its turn (its rejection comes before the next task), it is abandoned.
        flight.timer = Some(Timer::new(0, driver, abandon, n));
        flight.controller.clone()
    });
    if let Some(controller) = controller {
        controller.abort();
    }
}

/// The attempt's fetch went on after the abort of its timeout: it fails as timed out (retried
/// with the same key, its lock let go), or, when only its answer's body was being read, the
/// status answers without it. Whatever the fetch does later finds no flight.
fn abandon(_: &Rc<Driver>, n: u32) {
    let Some(flight) = take(n) else { return };
    if flight.response.is_some() {
        return flight.answered(JsValue::UNDEFINED);
    }
    flight.failed(Failure::Timeout);
}

/// Runs step `at` of `flight`, with what the step was called with.
fn step(mut flight: Flight, at: u32, value: JsValue) {
    let waited = std::mem::take(&mut flight.waits);
    if waited && !flight.lock.as_ref().is_some_and(Lock::held) {
        // Refused (an opaque origin, say): the attempt goes on without it.
        flight.lock = None;
    }
    let failure = match at {
        START => match send(&mut flight) {
            Ok(promise) => {
                let (driver, n) = (&flight.driver, flight.n);
                flight.timer = Some(Timer::new(driver.options.timeout_ms, driver, time_out, n));
                let n = land(flight);
                then(&promise, n, FETCHED);
                return;
            }
            Err(()) => flight.failure(),
        },
        _ if at == FETCHED && value.is_instance_of::<Response>() => {
            // The next key is drawn here, in the task of the answer, not in the submit's:
            // its Web Lock would hold up the task of the person's click.
            spare::after_answer(&flight.driver);
            let response: Response = value.unchecked_into();
            // The status is the answer; a body cut off (by the timeout) only loses the details.
            let text = response.text();
            flight.response = Some(response);
            match text {
                Ok(promise) => {
                    let n = land(flight);
                    then(&promise, n, READ_BODY);
                    return;
                }
                Err(_) => return flight.answered(JsValue::UNDEFINED),
            }
        }
        READ_BODY => return flight.answered(value),
        _ => flight.failure(),
    };
    flight.failed(failure);
}

/// Step `next` of flight `n` when `promise` settles, either way (the step tells which by what
/// it is given). What is not a promise after all (`then` threw) is a step that failed, taken
/// at once: the flight would otherwise wait, with its Web Lock, for a call that never comes.
fn then(promise: &js_sys::Promise, n: u32, next: u32) {
    let f = bound(n, next);
    if promise.unchecked_ref::<Callee>().then_call(&f, &f).is_err() {
        step_of(n * STEPS + next, JsValue::UNDEFINED);
    }
}

impl Flight {
    /// The attempt failed: its lock is let go, and the driver hears it. Let go first, so that a
    /// listener of the change that asks who holds the key's lock (the form kit's Discard) is
    /// not told this attempt's; the browser lets it go only once this task is over (a promise
    /// resolved), after the record is written.
    fn failed(self, failure: Failure) {
        let Flight {
            driver,
            attempt,
            lock,
            ..
        } = self;
        drop(lock);
        driver.failure(attempt.id, failure);
    }

    fn failure(&self) -> Failure {
        match self.timed_out {
            true => Failure::Timeout,
            false => Failure::Network,
        }
    }

    /// The answer came, its body `text` (a string, or not when it could not be read).
    fn answered(self, mut text: JsValue) {
        let Flight {
            driver,
            attempt,
            lock,
            timer,
            response,
            ..
        } = self;
        drop(timer);
        let Some(response) = response else { return };
        if let Some(long) = too_long(&text) {
            warn(
                &("an answer's body of ".to_owned()
                    + &decimal(long.into())
                    + " characters is more than is kept (16 Mi): the status decides, without it"),
            );
            text = JsValue::UNDEFINED;
        }
        let string = text.as_string().unwrap_or_default();
        let answer = answer(&response, &string, &driver.options.key_header);
        let js = if text.is_string() { Some(text) } else { None };
        // Let go first, as a failure's is (see `failed`).
        drop(lock);
        driver.answer(attempt.id, &answer, string, js);
    }
}

/// Sends the attempt: `fetch`'s promise, or `Err` when it failed at once.
fn send(flight: &mut Flight) -> Result<js_sys::Promise, ()> {
    let driver = &flight.driver;
    let Some(controller) = &flight.controller else {
        return Err(());
    };
    let signal = controller.signal();
    if signal.aborted() {
        return Err(());
    }
    let secrets = driver.secrets();
    let body = super::driver::wire_body(&mut flight.attempt.request, &secrets).map_err(|_| ())?;
    let init = request_init(driver, &flight.attempt, &body, &signal);
    fetch(&flight.attempt.request.url, &init).map_err(|_| ())
}

#[wasm_bindgen]
extern "C" {
    /// A `Response`'s `Headers`, asked with names made once (web-sys's `get` takes a `&str`,
    /// which JavaScript decodes again on every call).
    #[wasm_bindgen(extends = Object)]
    type HeaderList;

    #[wasm_bindgen(method, js_name = get)]
    fn get_named(this: &HeaderList, name: &JsValue) -> Option<String>;
}

thread_local! {
    /// [`READ`] as JavaScript strings.
    static READ_JS: Vec<JsValue> = READ.iter().map(|n| JsValue::from_str(n)).collect();
}

/// What the answer table makes of `response` ([`Answer::from_response`]).
#[inline(never)]
fn answer(response: &Response, text: &str, key_header: &str) -> Answer {
    let found: HeaderList = response.headers().unchecked_into();
    let mut read = Vec::new();
    READ_JS.with(|names| {
        for (name, js) in READ.iter().zip(names) {
            if let Some(value) = found.get_named(js) {
                read.push((*name, value));
            }
        }
    });
    Answer::from_response(
        response.status(),
        read.iter().map(|(n, v)| (*n, v.as_str())),
        text,
        key_header,
    )
}

/// The `fetch` options of `attempt`: its headers (the key's among them), method, credentials,
/// signal and body. Out of the attempt's steps, which then hold only what they await.
#[inline(never)]
fn request_init(
    driver: &Driver,
    attempt: &Attempt,
    body: &str,
    signal: &web_sys::AbortSignal,
) -> RequestInit {
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
            if super::sendable_header(&name, &value) {
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
