//! # The submitter: the driver loop
//!
//! A [`Submitter`] owns one core [`Submission`] and carries out its actions in order: `Persist`
//! writes to storage (synchronously, so before the `Send` that follows it), `Send` starts an
//! attempt with `fetch` under a Web Lock named after the key, `Forget` removes the record,
//! `Changed` goes to the listeners and `Settled` answers every caller waiting on the submission.
//! After each round of actions the core's `poll_timeout` is armed as a timer.
//!
//! Effects run with no `RefCell` borrow held, so a listener may call back into the submitter.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use js_sys::Function;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::core::body::{self, concat, Value};
use crate::core::{
    Action, Answer, Attempt, BeginError, Begun, BodyError, Change, Encoding, Failure, GiveUp, Key,
    NewKey, Outcome, Record, Request, RequestError, Settled, State, Submission, Timestamp,
};

use super::error::{Error, Result};
use super::js::{self, Timer};
use super::options::Options;
use super::storage::{self, Found, StorageKind, Store};

/// The answer a submission settled with, or why its retries stopped.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The outcome (CONTRACT.md section 2).
    pub outcome: Outcome,
    /// The last status received, if any.
    pub status: Option<u16>,
    /// The key the submission was sent with.
    pub key: Key,
    /// The last answer's body: its JSON parsed, or its text; `null` when there was none.
    pub body: JsValue,
    /// The server replayed a stored answer.
    pub replayed: bool,
    /// Attempts made, all rounds.
    pub attempts: u32,
    /// For [`Outcome::Unsure`]: why retries stopped.
    pub gave_up: Option<GiveUp>,
}

/// What listeners hear: every change of state, and warnings (storage degraded to memory, an
/// unreadable record removed) with the state unchanged.
#[derive(Debug, Clone)]
pub struct Event {
    /// The state, the key and the attempts.
    pub change: Change,
    /// A warning, when the event is one.
    pub warning: Option<String>,
}

/// Tells listeners apart, to remove one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerId(u32);

/// One named submission in the browser: one key per intended submission, kept in storage
/// across retries and reloads until a definite answer.
///
/// ```js
/// const tickets = new Submitter('new-ticket', { url: '/api/tickets' })
/// tickets.pending()            // { key, body, attempts, startedAt } or null
/// await tickets.submit(body)   // { outcome, status, key, body, replayed, attempts, gaveUp }
/// await tickets.tryAgain()     // resend the pending submission: same key, same body
/// tickets.discard()            // drop it; the next submission gets a new key
/// tickets.onChange(fn)         // idle, sending, waiting, unsure, the outcome, and warnings
/// ```
///
/// From Rust: [`Submitter::open`], [`Submitter::submit`] (JSON text) and the [`Settling`]
/// future it returns.
///
/// A clone is another handle on the same submission.
#[wasm_bindgen::prelude::wasm_bindgen]
#[derive(Clone)]
pub struct Submitter {
    inner: Rc<RefCell<Inner>>,
}

type Listener = Rc<dyn Fn(&Event)>;

pub(crate) struct Inner {
    core: Submission,
    options: Options,
    store: Store,
    listeners: Vec<(ListenerId, Listener)>,
    next_listener: u32,
    waiters: Vec<Rc<RefCell<Waiter>>>,
    timer: Option<(Timestamp, Timer)>,
    /// Aborts the attempt under way (a discard).
    abort: Option<Function>,
    last_body: JsValue,
    /// Fields merged into the body of every attempt and never stored (see `set_secrets`).
    secrets: Vec<(String, Value)>,
    /// Warnings raised before anyone could listen (at construction), told to each new listener.
    early_warnings: Vec<String>,
}

type OnSettled = Box<dyn FnOnce(Result<Submitted>)>;

#[derive(Default)]
struct Waiter {
    result: Option<Result<Submitted>>,
    waker: Option<Waker>,
    /// Called instead, when set (the JavaScript API's promise: no executor needed).
    on_settled: Option<OnSettled>,
}

/// Answers a caller waiting on the submission.
fn complete(waiter: &RefCell<Waiter>, result: Result<Submitted>) {
    let on_settled = waiter.borrow_mut().on_settled.take();
    match on_settled {
        Some(f) => f(result),
        None => {
            let mut w = waiter.borrow_mut();
            w.result = Some(result);
            if let Some(waker) = w.waker.take() {
                waker.wake();
            }
        }
    }
}

/// Resolves when the submission it waits on settles (definite or unsure), or is discarded.
#[must_use = "a submission is sent whether or not this is awaited; await it for the outcome"]
pub struct Settling(Rc<RefCell<Waiter>>);

impl Future for Settling {
    type Output = Result<Submitted>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Submitted>> {
        let mut waiter = self.0.borrow_mut();
        match waiter.result.take() {
            Some(result) => Poll::Ready(result),
            None => {
                waiter.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Settling {
    /// Calls `f` with the result instead of waking a task: at once if it is there already.
    pub(crate) fn then(self, f: impl FnOnce(Result<Submitted>) + 'static) {
        let ready = self.0.borrow_mut().result.take();
        match ready {
            Some(result) => f(result),
            None => self.0.borrow_mut().on_settled = Some(Box::new(f)),
        }
    }
}

impl std::fmt::Debug for Settling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settling")
            .field("ready", &self.0.borrow().result.is_some())
            .finish()
    }
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.borrow();
        f.debug_struct("Submitter")
            .field("name", &inner.core.name())
            .field("state", &inner.core.state())
            .field("memory", &inner.store.is_memory())
            .finish()
    }
}

impl Submitter {
    /// A submitter named `name`. A pending submission stored under that name (before a reload)
    /// is taken up: [`State::Unsure`], or resent at once with [`Options::resume`]. Storage that
    /// cannot be used, or an unreadable record, is a warning, never an error.
    pub fn open(name: &str, options: Options) -> Result<Submitter> {
        if name.is_empty() {
            return Err(Error::option(
                "the submitter's name must be a non-empty string",
            ));
        }
        options.check()?;
        let (mut store, warning) = Store::open(options.storage);
        let mut warnings: Vec<String> = warning.into_iter().collect();
        let mut core = Submission::new(name, options.retry);
        match store.read(name) {
            Found::Nothing => {}
            Found::Removed(why) => warnings.push(why),
            Found::Record(record) => {
                if let Err(e) = core.restore(js::now(), record, options.resume) {
                    store.remove(name);
                    warnings.push(storage::removed(name, &e.message()));
                }
            }
        }
        for w in &warnings {
            js::warn(w);
        }
        let inner = Rc::new(RefCell::new(Inner {
            core,
            options,
            store,
            listeners: Vec::new(),
            next_listener: 0,
            waiters: Vec::new(),
            timer: None,
            abort: None,
            last_body: JsValue::NULL,
            secrets: Vec::new(),
            early_warnings: warnings,
        }));
        drive(&inner);
        Ok(Submitter { inner })
    }

    /// Begins the intended submission of `body` (JSON text). A new key is made, key and body
    /// are stored, then sent. The same body while one is pending joins it (or, when unsure,
    /// counts as "Try again"); another body is refused with [`Error::is_pending`] and nothing
    /// changes.
    pub fn submit(&self, body: &str) -> Result<Settling> {
        let request = {
            let inner = self.inner.borrow();
            let o = &inner.options;
            Request::new(&o.method, &o.url, body, o.encoding).map_err(|e| match e {
                RequestError::Body(b) => Error::body(concat(&[
                    match o.encoding {
                        Encoding::Json => "the body cannot be sent: ",
                        Encoding::Form => "the body cannot be sent as a form: ",
                    },
                    &b.message(),
                ])),
                other => Error::option(other.message()),
            })?
        };
        let key = NewKey::Random(js::random_bytes());
        let waiter = Rc::new(RefCell::new(Waiter::default()));
        {
            let mut inner = self.inner.borrow_mut();
            let begun = inner
                .core
                .begin(js::now(), request, key)
                .map_err(|e| match e {
                    BeginError::PendingMismatch { .. } => Error::pending(e.message()),
                    BeginError::Body(b) => {
                        Error::body("the body cannot be sent: ".to_owned() + &b.message())
                    }
                })?;
            if begun == Begun::Started {
                inner.last_body = JsValue::NULL;
            }
            inner.waiters.push(waiter.clone());
        }
        drive(&self.inner);
        Ok(Settling(waiter))
    }

    /// "Try again": resends the pending submission with the same key and body, in a new round
    /// of retries. While an attempt is under way, waits for it.
    pub fn try_again(&self) -> Result<Settling> {
        let waiter = Rc::new(RefCell::new(Waiter::default()));
        {
            let mut inner = self.inner.borrow_mut();
            inner
                .core
                .try_again(js::now())
                .map_err(|e| Error::state(e.message()))?;
            inner.waiters.push(waiter.clone());
        }
        drive(&self.inner);
        Ok(Settling(waiter))
    }

    /// The pending record (as stored), if a submission is pending.
    pub fn pending_record(&self) -> Option<Record> {
        self.inner.borrow().core.pending().cloned()
    }

    /// The current state.
    pub fn current_state(&self) -> State {
        self.inner.borrow().core.state()
    }

    /// Whether records are kept in memory only (asked for, or because storage failed).
    pub fn is_memory(&self) -> bool {
        self.inner.borrow().store.is_memory()
    }

    /// Calls `listener` with every event from now on, starting at once with the current state
    /// and any warning raised when the submitter was made.
    pub fn on_change(&self, listener: impl Fn(&Event) + 'static) -> ListenerId {
        let listener: Listener = Rc::new(listener);
        let (id, events) = {
            let mut inner = self.inner.borrow_mut();
            inner.next_listener += 1;
            let id = ListenerId(inner.next_listener);
            inner.listeners.push((id, listener.clone()));
            let now = inner.snapshot();
            let mut events = vec![Event {
                change: now.clone(),
                warning: None,
            }];
            events.extend(inner.early_warnings.iter().map(|w| Event {
                change: now.clone(),
                warning: Some(w.clone()),
            }));
            (id, events)
        };
        for event in &events {
            listener(event);
        }
        id
    }

    /// Fields that must never be stored (a password, a card number: CONTRACT.md section 4),
    /// merged into the JSON object body of every attempt from now on, in memory only. They are
    /// dropped when the submission settles or is discarded; after a reload the caller asks for
    /// them again and sets them before "Try again". The body must be a JSON object.
    pub fn set_secrets(&self, secrets: Vec<(String, Value)>) {
        self.inner.borrow_mut().secrets = secrets;
    }

    /// Stops calling a listener.
    pub fn off(&self, id: ListenerId) {
        self.inner.borrow_mut().listeners.retain(|(i, _)| *i != id);
    }
}

impl Inner {
    fn snapshot(&self) -> Change {
        let pending = self.core.pending();
        Change {
            state: self.core.state(),
            key: pending.map(|r| r.key.clone()),
            attempts: pending.map_or(0, |r| r.attempts),
            next_attempt_at: self.core.poll_timeout(),
        }
    }
}

#[wasm_bindgen::prelude::wasm_bindgen]
impl Submitter {
    /// The person chose to drop the unconfirmed submission: the record is removed, an attempt
    /// under way is aborted, callers waiting on it get an error, and the next submission gets a
    /// new key.
    pub fn discard(&self) {
        let (waiters, abort) = {
            let mut inner = self.inner.borrow_mut();
            inner.core.discard();
            (std::mem::take(&mut inner.waiters), inner.abort.take())
        };
        drive(&self.inner);
        if let Some(abort) = abort {
            let _ = abort.call0(&JsValue::NULL);
        }
        for w in waiters {
            complete(&w, Err(Error::discarded()));
        }
    }
}

/// Carries out the core's actions in order, then arms its timer.
pub(crate) fn drive(inner: &Rc<RefCell<Inner>>) {
    loop {
        let action = inner.borrow_mut().core.poll_action();
        let Some(action) = action else { break };
        match action {
            Action::Persist(record) => {
                let warning = inner.borrow_mut().store.write(&record);
                if let Some(w) = warning {
                    warn(inner, w);
                }
            }
            Action::Send(attempt) => run_attempt(inner, attempt),
            Action::Forget => {
                let mut i = inner.borrow_mut();
                let name = i.core.name().to_owned();
                i.store.remove(&name);
                i.secrets.clear();
            }
            Action::Changed(change) => emit(
                inner,
                &Event {
                    change,
                    warning: None,
                },
            ),
            Action::Settled(settled) => settle(inner, settled),
        }
    }
    arm_timer(inner);
}

fn emit(inner: &Rc<RefCell<Inner>>, event: &Event) {
    let listeners: Vec<Listener> = inner
        .borrow()
        .listeners
        .iter()
        .map(|(_, l)| l.clone())
        .collect();
    for listener in listeners {
        listener(event);
    }
}

fn warn(inner: &Rc<RefCell<Inner>>, warning: String) {
    js::warn(&warning);
    let change = inner.borrow().snapshot();
    emit(
        inner,
        &Event {
            change,
            warning: Some(warning),
        },
    );
}

fn settle(inner: &Rc<RefCell<Inner>>, settled: Settled) {
    let (waiters, body) = {
        let mut i = inner.borrow_mut();
        (std::mem::take(&mut i.waiters), i.last_body.clone())
    };
    let result = Submitted {
        outcome: settled.outcome,
        status: settled.status,
        key: settled.key,
        body,
        replayed: settled.replayed,
        attempts: settled.attempts,
        gave_up: settled.gave_up,
    };
    for w in waiters {
        complete(&w, Ok(result.clone()));
    }
}

fn arm_timer(inner: &Rc<RefCell<Inner>>) {
    let mut i = inner.borrow_mut();
    let Some(at) = i.core.poll_timeout() else {
        i.timer = None;
        return;
    };
    if i.timer.as_ref().is_some_and(|(armed, _)| *armed == at) {
        return;
    }
    let delay = at.saturating_since(js::now()).as_millis() as u64;
    let weak: Weak<RefCell<Inner>> = Rc::downgrade(inner);
    let timer = Timer::once(delay, move || {
        let Some(inner) = weak.upgrade() else { return };
        // Taken out first so that drive() arms a new one, also when this fired a little early
        // and the core is still waiting.
        let fired = inner.borrow_mut().timer.take();
        inner.borrow_mut().core.handle_timeout(js::now());
        drive(&inner);
        drop(fired);
    });
    i.timer = Some((at, timer));
}

/// Starts an attempt (see [`js::send_attempt`]); its answer goes to the core, then [`drive`].
fn run_attempt(inner: &Rc<RefCell<Inner>>, attempt: Attempt) {
    let id = attempt.id;
    let (options, secrets) = {
        let i = inner.borrow();
        (i.options.clone(), i.secrets.clone())
    };
    let request = &attempt.request;
    // As `fetch` takes it: no body for GET and HEAD; a body the encoding cannot carry (a secret
    // that is not a string, say) is `false`: an attempt that fails like the network.
    let body = match request.method.as_str() {
        "GET" | "HEAD" => JsValue::UNDEFINED,
        _ => match with_secrets(request, &secrets).and_then(|r| r.wire_body()) {
            Ok(body) => body.into(),
            Err(_) => JsValue::FALSE,
        },
    };
    let mut headers = concat(&["Content-Type:", request.encoding.content_type()]);
    for (name, value) in request.headers.iter().chain(&options.headers) {
        headers.extend(["\n", name, ":", value]);
    }
    // Another tab can know this key only once it has been stored and found there: after a
    // first attempt, or at once through localStorage. The first attempt of a key made here in
    // session (or memory) storage skips the lock, whose round trip costs about 1 ms.
    let shared = attempt.number > 1 || options.storage == StorageKind::Local;
    let held = inner.clone();
    let key_header = options.key_header.clone();
    let done = Closure::once_into_js(move |status: u16, found: String, text: String| {
        let mut i = held.borrow_mut();
        if i.core.in_flight() != Some(id) {
            return; // discarded meanwhile: the answer is ignored
        }
        i.abort = None;
        let (now, jitter) = (js::now(), js::jitter());
        match status {
            0 => i.core.handle_failure(now, id, Failure::Network, jitter),
            1 => i.core.handle_failure(now, id, Failure::Timeout, jitter),
            _ => {
                let answer = Answer::from_response(
                    status,
                    found.split('\n').filter_map(|line| line.split_once(':')),
                    &text,
                    &key_header,
                );
                i.last_body = parse_body(&text);
                i.core.handle_answer(now, id, &answer, jitter);
            }
        }
        drop(i);
        drive(&held);
    });
    let abort = js::send_attempt(
        &request.url,
        &request.method,
        &headers,
        &body,
        options.credentials.as_str(),
        options.timeout.map_or(0.0, |t| t.as_millis() as f64),
        shared.then(|| storage::slot(attempt.key.as_str())),
        options.attempt_headers.clone(),
        attempt.number,
        attempt.key.as_str(),
        &options.key_header,
        &attempt.key.header_value(options.key_format),
        done,
    );
    inner.borrow_mut().abort = Some(abort);
}

/// The request with the secrets merged into its JSON object body (the same on every attempt).
fn with_secrets(
    request: &Request,
    secrets: &[(String, Value)],
) -> std::result::Result<Request, BodyError> {
    let mut request = request.clone();
    if secrets.is_empty() {
        return Ok(request);
    }
    if let Value::Object(mut fields) = body::parse(&request.body)? {
        fields.extend(secrets.iter().cloned());
        request.body = Value::Object(fields).to_canonical();
    }
    Ok(request)
}

/// An answer's body: its JSON parsed, or its text; `null` when empty.
pub(crate) fn parse_body(text: &str) -> JsValue {
    if text.is_empty() {
        return JsValue::NULL;
    }
    js_sys::JSON::parse(text).unwrap_or_else(|_| JsValue::from_str(text))
}

#[wasm_bindgen::prelude::wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    #[wasm_bindgen(catch, js_name = toJson)]
    fn js_to_json(body: &JsValue) -> std::result::Result<String, JsValue>;
}

/// The body as JSON text, refusing what JSON cannot carry (a cycle, a BigInt, a function, a
/// symbol, NaN or Infinity) instead of letting `JSON.stringify` drop or mangle it.
pub(crate) fn to_json(body: &JsValue) -> Result<String> {
    js_to_json(body).map_err(|e| Error::from_js(Error::body, &e))
}

/// For the JavaScript API: the listener as a Rust closure.
pub(crate) fn js_listener(listener: Function) -> impl Fn(&Event) + 'static {
    move |event: &Event| {
        if let Err(e) = listener.call1(&JsValue::UNDEFINED, &super::api::event_to_js(event)) {
            web_sys::console::error_2(&"oncekey: an onChange listener threw".into(), &e);
        }
    }
}

/// For the JavaScript API: a cast kept here so that `api` stays declarative.
pub(crate) fn as_function(value: JsValue) -> Option<Function> {
    value.dyn_into().ok()
}

impl Submitter {
    pub(crate) fn weak(&self) -> Weak<RefCell<Inner>> {
        Rc::downgrade(&self.inner)
    }

    pub(crate) fn off_weak(weak: &Weak<RefCell<Inner>>, id: ListenerId) {
        if let Some(inner) = weak.upgrade() {
            inner.borrow_mut().listeners.retain(|(i, _)| *i != id);
        }
    }
}
