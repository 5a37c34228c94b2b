//! # The driver
//!
//! A [`Submitter`] is the core's [`Submission`] and the loop that carries out its actions in the
//! page, in order: `Persist` writes the record (synchronously, so before the `Send` that
//! follows), `Send` starts an attempt ([`attempt`](super::attempt)), `Forget` removes the
//! record (unless the page is unloading: nobody would see the answer), `Changed` tells the
//! listeners and `Settled` answers the callers waiting on [`Submitter::submit`]. After the
//! actions, the core's [`poll_timeout`](Submission::poll_timeout) arms the one timer. Whether
//! and when to retry, what a status means, the key, the record and "same body" are the core's
//! calls, never the driver's.
//!
//! What the platform says of the connection goes to the core's
//! [`handle_online`](Submission::handle_online): `navigator.onLine` when the submitter is made,
//! at each begin and after a failed attempt, and the global's `online` and `offline` events while
//! it lives. An [`AbortHandle`] (JavaScript's `{ signal }`) ends one caller's wait; when no caller
//! is left, the core [stops](Submission::stop) and the fetch under way is aborted, the key kept.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use super::error::{Error, ErrorCode};
use super::global::{on_line, Event, Heard, Timer};
use super::options::{Options, StorageKind};
use super::storage::Store;
use super::{attempt, spare, warn};
use crate::core::body::{self, Fields, Value};
use crate::core::text::quoted;
use crate::core::{
    Action, Answer, AttemptId, BeginError, Begun, Failure, GiveUp, Key, NewKey, Outcome, Record,
    Request, RequestError, Settled, State, Submission, Timestamp, WaitingFor,
};

pub(crate) fn now() -> Timestamp {
    Timestamp::from_millis(js_sys::Date::now() as u64)
}

/// The backoff's jitter spreads retries out; it guards no secret, so `Math.random` will do
/// (keys come from `crypto.getRandomValues`).
fn jitter() -> u32 {
    (js_sys::Math::random() * 4_294_967_296.0) as u32
}

/// One named submission in the page: one key per intended submission, kept in storage across
/// retries and reloads until a definite answer. Clones are the same submitter.
///
/// ```no_run
/// # async fn run() -> Result<(), oncekey::Error> {
/// use oncekey::{Options, Submitter};
/// use oncekey::core::body::parse;
/// use oncekey::Outcome;
///
/// let tickets = Submitter::new("new-ticket", Options::new("/api/tickets"))?;
/// let body = parse(r#"{"subject":"Printer on fire"}"#).expect("JSON");
/// let settlement = tickets.submit(body).await?;
/// if settlement.outcome() == Outcome::Unsure {
///     let again = tickets.try_again().await?; // the same key and body
/// #   let _ = again;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Submitter {
    driver: Rc<Driver>,
}

impl ::core::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.debug_struct("Submitter")
            .field("name", &self.driver.name)
            .field("state", &self.state())
            .finish()
    }
}

/// How often a submission waiting for the connection looks at `navigator.onLine` itself,
/// beside the `online` event (see [`Driver::arm`]).
const ONLINE_POLL: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) struct Driver {
    pub(crate) name: String,
    pub(crate) options: Options,
    store: RefCell<Store>,
    machine: RefCell<Machine>,
    listeners: RefCell<Vec<Rc<Entry>>>,
    /// Changes waiting to reach the listeners (a listener's own calls may add more).
    queue: RefCell<VecDeque<Update>>,
    emitting: Cell<bool>,
    /// What the constructor warned of, told to every new listener.
    warnings: Vec<String>,
    /// The global's `online` and `offline` events, fed to the core while the submitter lives,
    /// and its `pagehide` and `pageshow`, which set `hidden`.
    heard: RefCell<Option<Heard>>,
    /// A `pagehide` came, and no `pageshow` since (see [`Driver::unloading`]).
    hidden: Cell<bool>,
    /// The page is letting the pending submission go (a discard): its record goes, unloading
    /// or not.
    letting_go: Cell<bool>,
    /// Uploads (`upload.rs`): IndexedDB, and the pending upload's fields and files.
    pub(crate) uploads: RefCell<super::upload::Uploads>,
    /// The next key drawn ahead, with its Web Lock (`spare.rs`).
    pub(crate) spares: RefCell<spare::Spares>,
}

struct Machine {
    core: Submission,
    /// Callers of `submit` and `try_again` waiting for the settlement.
    waiters: Vec<Rc<RefCell<Slot>>>,
    /// The core's timer, and when it fires.
    timer: Option<(Timestamp, Timer)>,
    /// The attempt under way: its id and the abort of its fetch.
    flight: Option<(AttemptId, web_sys::AbortController)>,
    /// The last answer's body text, for the settlement, and as JavaScript read it.
    last_text: Option<(Rc<String>, Option<wasm_bindgen::JsValue>)>,
    /// Fields merged into the JSON object body of every attempt, in memory only.
    secrets: Fields,
    /// A key was just made here, and its first attempt goes out in this drive: nobody else can
    /// know it yet ([`attempt::start`]).
    fresh: bool,
    /// The core's settlements handed out so far.
    settled_seen: u64,
    /// Callers of `submit` waiting for IndexedDB's first look before their submission begins.
    held: Vec<Rc<RefCell<Slot>>>,
    /// The pending key as the last drive saw it ([`Driver::note_ended`]).
    noted: Option<Key>,
}

/// What [`Submitter::on_change`] keeps of a listener.
type Callback = RefCell<Box<dyn FnMut(&Update)>>;

struct Entry {
    live: Cell<bool>,
    listener: Callback,
}

/// What listeners get: a change of state, or a warning with the state unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The state now.
    pub state: State,
    /// The pending key (or the key just settled).
    pub key: Option<Key>,
    /// Attempts made so far.
    pub attempts: u32,
    /// In [`State::Waiting`]: when the next attempt is due.
    pub next_attempt_at: Option<Timestamp>,
    /// In [`State::Waiting`]: why it waits, a retry due at a time or the connection to be back.
    pub waiting_for: Option<WaitingFor>,
    /// Storage degraded to memory, or an unreadable record was removed.
    pub warning: Option<String>,
}

/// The pending submission, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    key: Key,
    text: String,
    body: Value,
    attempts: u32,
    started_at: Timestamp,
    stopped: Option<GiveUp>,
}

impl Pending {
    /// Its key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Its body, as stored.
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// Its body's JSON text, as stored and sent.
    pub fn body_text(&self) -> &str {
        &self.text
    }

    /// Attempts made, all rounds.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// When its first attempt was made.
    pub fn started_at(&self) -> Timestamp {
        self.started_at
    }

    /// Its round was ended by the server (said not to retry, or redirected), by its time
    /// budget (its next attempt was due past it), or by its caller (an abort): only a deliberate
    /// "Try again" sends it.
    pub fn stopped(&self) -> Option<GiveUp> {
        self.stopped
    }
}

/// How a submission ended, or why its retries stopped ([`Outcome::Unsure`]).
#[derive(Debug, Clone)]
pub struct Settlement {
    settled: Settled,
    /// Shared by the settlement's clones (one per caller waiting) and the driver.
    text: Option<Rc<String>>,
    /// The body text as JavaScript read it, to hand back without decoding it again.
    #[cfg_attr(not(feature = "js"), allow(dead_code))]
    pub(crate) js_text: Option<wasm_bindgen::JsValue>,
    body: OnceCell<Option<Value>>,
}

impl Settlement {
    /// The outcome.
    pub fn outcome(&self) -> Outcome {
        self.settled.outcome
    }

    /// The last HTTP status, or `None` when no answer ever came.
    pub fn status(&self) -> Option<u16> {
        self.settled.status
    }

    /// The key it was sent with.
    pub fn key(&self) -> &Key {
        &self.settled.key
    }

    /// The last answer's body, when it is JSON.
    pub fn body(&self) -> Option<&Value> {
        self.body
            .get_or_init(|| self.text.as_ref().and_then(|t| body::parse(t).ok()))
            .as_ref()
    }

    /// The last answer's body text, empty when no answer came.
    pub fn text(&self) -> &str {
        self.text.as_ref().map_or("", |t| t.as_str())
    }

    /// Whether the server replayed a stored answer.
    pub fn replayed(&self) -> bool {
        self.settled.replayed
    }

    /// Attempts made, all rounds.
    pub fn attempts(&self) -> u32 {
        self.settled.attempts
    }

    /// For [`Outcome::Unsure`]: why retries stopped.
    pub fn gave_up(&self) -> Option<GiveUp> {
        self.settled.gave_up
    }
}

/// A listener of [`Submitter::on_change`]: it hears until this is dropped, or for the
/// submitter's life once [`Listener::forget`] is called.
#[must_use = "a Listener stops listening when dropped"]
pub struct Listener {
    entry: Option<Rc<Entry>>,
}

impl ::core::fmt::Debug for Listener {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.write_str("Listener")
    }
}

impl Listener {
    /// Keeps the listener for as long as the submitter lives.
    pub fn forget(mut self) {
        self.entry = None;
    }

    /// Whether its submitter still lives (it keeps its listeners).
    #[cfg(feature = "js")]
    pub(crate) fn has_submitter(&self) -> bool {
        self.entry.as_ref().is_some_and(|e| Rc::strong_count(e) > 1)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            entry.live.set(false);
            // What the listener holds is let go now, not when the entry is swept at the next
            // change, which an idle submitter may never have: a form kit's listener holds the
            // kit, which holds the submitter (a cycle). Not while it runs: swept then.
            if let Ok(mut listener) = entry.listener.try_borrow_mut() {
                *listener = Box::new(|_: &Update| {});
            }
        }
    }
}

thread_local! {
    /// The drivers a caller waits on ([`Driver::keep_while_waited`]).
    static WAITED: RefCell<Vec<Rc<Driver>>> = const { RefCell::new(Vec::new()) };
}

/// What a settlement is handed to: a callback (JavaScript's promise), or the awaiting task.
type Then = Box<dyn FnOnce(Result<Settlement, Error>)>;

#[derive(Default)]
struct Slot {
    result: Option<Result<Settlement, Error>>,
    waker: Option<Waker>,
    then: Option<Then>,
    /// The core's settlements asked for before the call that began its round: those are
    /// earlier rounds'.
    after: u64,
}

/// The settlement of a [`Submitter::submit`] or [`Submitter::try_again`], to `.await`. The
/// submission began when the call returned (its record is already stored); dropping this only
/// stops waiting, never the submission. To stop its retries, use [`Settling::abort_handle`].
#[must_use = "the submission goes on; await this for its settlement"]
pub struct Settling {
    slot: Result<Rc<RefCell<Slot>>, Option<Error>>,
    driver: Weak<Driver>,
}

/// Aborts the wait of one [`Settling`] (JavaScript's `{ signal }`): it resolves with
/// [`ErrorCode::Aborted`], and when no other caller waits on the submission, its retries stop
/// and an attempt under way is aborted. The submission stays pending with its key and record
/// ([`State::Unsure`]), for [`Submitter::try_again`] (the same key) or a discard; an abort never
/// makes a new key. Aborting after the settlement, or twice, does nothing.
#[derive(Clone)]
pub struct AbortHandle {
    slot: Weak<RefCell<Slot>>,
    driver: Weak<Driver>,
}

impl ::core::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.write_str("AbortHandle")
    }
}

impl AbortHandle {
    /// Stops waiting, and the retries when nobody else waits (see [`AbortHandle`]).
    pub fn abort(&self) {
        if let (Some(slot), Some(driver)) = (self.slot.upgrade(), self.driver.upgrade()) {
            driver.abort(&slot);
        }
    }
}

impl ::core::fmt::Debug for Settling {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.write_str("Settling")
    }
}

impl Future for Settling {
    type Output = Result<Settlement, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.slot {
            Err(e) => match e.take() {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
            Ok(slot) => {
                let mut slot = slot.borrow_mut();
                match slot.result.take() {
                    Some(result) => Poll::Ready(result),
                    None => {
                        slot.waker = Some(cx.waker().clone());
                        Poll::Pending
                    }
                }
            }
        }
    }
}

impl Settling {
    /// A call refused before anything began: it settles with `e` at once.
    fn refused(e: Error) -> Settling {
        Settling {
            slot: Err(Some(e)),
            driver: Weak::new(),
        }
    }

    /// A handle that aborts this wait (and the retries, when nobody else waits).
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            slot: self
                .slot
                .as_ref()
                .map_or_else(|_| Weak::new(), Rc::downgrade),
            driver: self.driver.clone(),
        }
    }

    /// Hands the settlement to `f` when it comes (at once when it has), instead of a task that
    /// awaits it: how the JavaScript face resolves its promise without a future.
    #[cfg(feature = "js")]
    pub(crate) fn then(self, f: impl FnOnce(Result<Settlement, Error>) + 'static) {
        match self.slot {
            Err(e) => f(Err(e.unwrap_or_else(|| {
                Error::new(ErrorCode::State, "the settlement was taken already")
            }))),
            Ok(slot) => {
                let ready = slot.borrow_mut().result.take();
                match ready {
                    Some(result) => f(result),
                    None => slot.borrow_mut().then = Some(Box::new(f)),
                }
            }
        }
    }
}

fn resolve(slot: &Rc<RefCell<Slot>>, result: Result<Settlement, Error>) {
    let then = slot.borrow_mut().then.take();
    if let Some(then) = then {
        return then(result);
    }
    let waker = {
        let mut slot = slot.borrow_mut();
        slot.result = Some(result);
        slot.waker.take()
    };
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl Submitter {
    /// A submitter named `name` (the form's or caller's handle). A record of that name found in
    /// storage is taken up: the submission is [`State::Unsure`], or resent at once with
    /// [`Options::resume`]. Errors name a wrong option; storage problems are never errors but
    /// warnings (on the console and to [`Submitter::on_change`]).
    pub fn new(name: &str, options: Options) -> Result<Submitter, Error> {
        if name.is_empty() {
            return Err(Error::option(
                "the submitter's name must be a non-empty string",
            ));
        }
        let options = options.check()?;
        let mut warnings = Vec::new();
        let (mut store, warning) = Store::open(options.storage);
        warnings.extend(warning);
        let (text, warning) = store.read(name);
        warnings.extend(warning);
        let mut core = Submission::new(name, options.retry);
        // Before a record is taken up: offline, a resumed one waits for the connection.
        core.handle_online(now(), on_line());
        if let Some(text) = text {
            if let Some(why) = restore(&mut core, &text, options.resume) {
                store.remove(name);
                warnings.push(removed(name, &why));
            }
        }
        for w in &warnings {
            warn(w);
        }
        let driver = Rc::new(Driver {
            name: name.to_owned(),
            options,
            store: RefCell::new(store),
            machine: RefCell::new(Machine {
                core,
                waiters: Vec::new(),
                timer: None,
                flight: None,
                last_text: None,
                secrets: Fields::new(),
                fresh: false,
                settled_seen: 0,
                held: Vec::new(),
                noted: None,
            }),
            listeners: RefCell::new(Vec::new()),
            queue: RefCell::new(VecDeque::new()),
            emitting: Cell::new(false),
            warnings,
            heard: RefCell::new(None),
            hidden: Cell::new(false),
            letting_go: Cell::new(false),
            uploads: RefCell::default(),
            spares: RefCell::default(),
        });
        let weak = Rc::downgrade(&driver);
        let heard = Heard::watch(move |event| {
            let Some(d) = weak.upgrade() else { return };
            match event {
                Event::Online(online) => {
                    d.machine.borrow_mut().core.handle_online(now(), online);
                    d.drive();
                }
                Event::Hidden(hidden) => d.hidden.set(hidden),
            }
        });
        *driver.heard.borrow_mut() = heard;
        driver.drive();
        super::upload::start(&driver);
        Ok(Submitter { driver })
    }

    /// The name it was made with.
    pub fn name(&self) -> &str {
        &self.driver.name
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.driver.machine.borrow().core.state()
    }

    /// Where records are kept: the storage asked for, or [`StorageKind::Memory`] once it could
    /// not be used.
    pub fn storage(&self) -> StorageKind {
        match self.driver.store.borrow().kind() {
            StorageKind::IndexedDb if self.indexeddb_failed() => StorageKind::Memory,
            kind => kind,
        }
    }

    /// The pending submission, as stored, or `None`.
    pub fn pending(&self) -> Option<Pending> {
        let machine = self.driver.machine.borrow();
        let r = machine.core.pending()?;
        Some(Pending {
            key: r.key.clone(),
            body: body::parse(&r.request.body).unwrap_or(Value::Null),
            text: r.request.body.clone(),
            attempts: r.attempts,
            started_at: r.started_at,
            stopped: r.stopped,
        })
    }

    /// Sends `body` once: the returned [`Settling`] resolves when the outcome is definite, or
    /// [`Outcome::Unsure`] when retries stopped. Key and body are stored before this returns;
    /// under [`StorageKind::IndexedDb`], called before IndexedDB was first looked at, the
    /// submission begins once it was (a submission stored there is taken up first).
    /// The same body while one is pending joins it; another body is refused
    /// ([`ErrorCode::Pending`]) with nothing stored or sent, unless the pending one is unsure
    /// and its record has left the web storage since (another tab removed it), and no secrets
    /// are set: that one is dropped as a discard drops it, and this body begun.
    pub fn submit(&self, body: Value) -> Settling {
        self.driver.submit(&body.to_canonical())
    }

    /// Resends the pending submission with the same key and body, in a new round of retries
    /// ([`ErrorCode::State`] when nothing is pending).
    pub fn try_again(&self) -> Settling {
        let (before, result) = {
            let mut m = self.driver.machine.borrow_mut();
            let before = m.core.settlements();
            m.core.handle_online(now(), on_line());
            (before, m.core.try_again(now()))
        };
        match result {
            Ok(()) => self.driver.wait_in(Rc::default(), Ok(before)),
            Err(e) => Settling::refused(Error::new(ErrorCode::State, e.message())),
        }
    }

    /// "Send as new": the person (or caller) checked an [`Outcome::Expired`] (or unsure)
    /// submission and means to send its request again, deliberately, as a new one, under a new
    /// key ([`ErrorCode::State`] when nothing expired or unsure is pending).
    pub fn send_as_new(&self) -> Settling {
        let d = &self.driver;
        let refused = Settling::refused;
        let key = match spare::draw(d) {
            Ok(bytes) => bytes,
            Err(e) => {
                return refused(Error::new(
                    ErrorCode::State,
                    "no key can be made: ".to_owned() + &super::error::describe(&e),
                ))
            }
        };
        let (before, result) = {
            let mut m = d.machine.borrow_mut();
            let before = m.core.settlements();
            m.core.handle_online(now(), on_line());
            (before, m.core.send_as_new(now(), NewKey::Random(key)))
        };
        match result {
            Ok(()) => {
                d.made_key();
                d.wait_in(Rc::default(), Ok(before))
            }
            Err(e) => {
                spare::forget_made(d);
                // Refused, but the look at the connection above may have sent a submission
                // waiting for it: carried out now, not at the next look a second later.
                d.drive();
                refused(Error::new(ErrorCode::State, e.message()))
            }
        }
    }

    /// Drops an unconfirmed submission: the record is removed, an attempt under way is aborted,
    /// waiting callers get [`ErrorCode::Discarded`], and the next submission gets a new key.
    pub fn discard(&self) {
        self.driver.drop_pending(Error::new(
            ErrorCode::Discarded,
            "the submission was discarded before a definite answer",
        ));
    }

    /// Fields that are never stored (a password, a card number: CONTRACT.md section 4), merged
    /// into the JSON object body of every attempt from now on, in memory only; dropped when the
    /// submission settles or is discarded (kept while it is unsure, for "Try again").
    pub fn set_secrets(&self, secrets: Fields) -> Result<(), Error> {
        self.driver.machine.borrow_mut().secrets = secrets;
        Ok(())
    }

    /// Calls `listener` at once with the current state (and then each warning from the
    /// constructor), then on every change, until the returned [`Listener`] is dropped.
    pub fn on_change(&self, listener: impl FnMut(&Update) + 'static) -> Listener {
        let entry = Rc::new(Entry {
            live: Cell::new(true),
            listener: RefCell::new(Box::new(listener)),
        });
        let d = &self.driver;
        d.listeners.borrow_mut().push(entry.clone());
        let now = d.snapshot(None);
        // Straight to this listener, in turn with any changes already queued for all.
        let mut told = vec![now.clone()];
        told.extend(d.warnings.iter().map(|w| Update {
            warning: Some(w.clone()),
            ..now.clone()
        }));
        // What the listener changes in these calls (a submit, say) is queued and told after
        // them, to it too, as a change made in any listener's call is.
        let outer = d.emitting.replace(true);
        for update in &told {
            if let Ok(mut f) = entry.listener.try_borrow_mut() {
                f(update);
            }
        }
        if !outer {
            d.deliver();
        }
        Listener { entry: Some(entry) }
    }

    pub(crate) fn driver(&self) -> &Rc<Driver> {
        &self.driver
    }
}

/// The warning for a stored record of `name` removed because it could not be taken up.
fn removed(name: &str, why: &str) -> String {
    "the stored submission ".to_owned()
        + &quoted(&("oncekey:".to_owned() + name))
        + " was removed: "
        + why
}

/// Takes up a stored record; returns why it cannot be (the caller removes it).
fn restore(core: &mut Submission, text: &str, resume: bool) -> Option<String> {
    let mut record = match Record::from_json(text) {
        Ok(record) => record,
        Err(e) => return Some(e.0),
    };
    if record.name != core.name() {
        return Some("it belongs to ".to_owned() + &quoted(&record.name));
    }
    // In full, as the options' URL is: a record an older page stored with "/api/tickets" is
    // the same request as this submitter's (one that is no URL is sent as it is, and fails).
    if let Some(url) = super::global::full_url(&record.request.url) {
        record.request.url = url;
    }
    core.restore(now(), record, resume)
        .err()
        .map(|e| e.message())
}

impl Driver {
    /// Begins the submission of `body` (JSON text). Under `storage: 'indexeddb'`, before
    /// IndexedDB was first looked at, it begins once it was: a submission stored there is taken
    /// up first, so this one joins it or is refused (`pending`) instead of writing over it.
    pub(crate) fn submit(self: &Rc<Self>, body: &str) -> Settling {
        let looked =
            super::upload::looking(self).or_else(|| super::upload::look_again(self, false));
        if let Some(looked) = looked {
            return self.submit_later(looked, body.to_owned());
        }
        self.wait_in(Rc::default(), self.begin(body))
    }

    /// The submission of `body`, once IndexedDB was looked at; its wait can be aborted before.
    fn submit_later(self: &Rc<Self>, looked: js_sys::Promise, body: String) -> Settling {
        let slot: Rc<RefCell<Slot>> = Rc::default();
        self.machine.borrow_mut().held.push(slot.clone());
        let (driver, held) = (self.clone(), slot.clone());
        wasm_bindgen_futures::spawn_local(async move {
            let _ = wasm_bindgen_futures::JsFuture::from(looked).await;
            let still = {
                let mut m = driver.machine.borrow_mut();
                let before = m.held.len();
                m.held.retain(|h| !Rc::ptr_eq(h, &held));
                m.held.len() != before
            };
            // Aborted meanwhile: nothing began.
            if still {
                // `held` is the caller's slot: this Settling is only another look at it.
                drop(driver.wait_in(held, driver.begin(&body)));
            }
        });
        Settling {
            slot: Ok(slot),
            driver: Rc::downgrade(self),
        }
    }

    /// Begins the submission of `body` with the core, or says why it cannot: the core's
    /// settlements asked for before it began (see [`Driver::wait_in`]).
    fn begin(self: &Rc<Self>, body: &str) -> Result<u64, Error> {
        self.begin_once(body, true)
    }

    /// [`Driver::begin`]; `look_again`: a refusal for a submission pending here is looked at
    /// once more when its record is no longer stored ([`Driver::finished_elsewhere`]).
    fn begin_once(self: &Rc<Self>, body: &str, look_again: bool) -> Result<u64, Error> {
        let refused = Err;
        let o = &self.options;
        let request = match Request::new(&o.method, &o.url, body, o.encoding) {
            Ok(request) => request,
            Err(RequestError::Body(b)) => {
                let cannot = match o.encoding {
                    crate::core::Encoding::Json => "the body cannot be sent: ",
                    crate::core::Encoding::Form => "the body cannot be sent as a form: ",
                };
                return refused(Error::body(cannot.to_owned() + &b.message()));
            }
            Err(other) => return refused(Error::option(other.message())),
        };
        // A record stored since this submitter read storage (another tab on `localStorage`,
        // another submitter of the name in this page) is taken up as a reload would take it
        // up: the same body goes on under its key, another is refused, and neither writes over
        // the other's record.
        let pending = self.machine.borrow().core.pending().is_some() || self.take_up_stored();
        let key = if pending {
            [0; 16]
        } else {
            match spare::draw(self) {
                Ok(bytes) => bytes,
                Err(e) => {
                    return refused(Error::new(
                        ErrorCode::State,
                        "no key can be made: ".to_owned() + &super::error::describe(&e),
                    ))
                }
            }
        };
        let (before, begun) = {
            let mut m = self.machine.borrow_mut();
            let before = m.core.settlements();
            m.core.handle_online(now(), on_line());
            (before, m.core.begin(now(), request, NewKey::Random(key)))
        };
        match begun {
            Ok(Begun::Started) => {
                super::upload::started(self);
                self.made_key();
                Ok(before)
            }
            Ok(_) => Ok(before),
            Err(e) => {
                // The key drawn for it is not used; a pending submission's (none was drawn)
                // keeps the lock drawn ahead for its first attempt.
                if !pending {
                    spare::forget_made(self);
                }
                // Another body only: the same body sent another way (another encoding or
                // method, the submitter's own headers) is still that submission, which a new
                // key would send a second time; the refusal stands for it.
                let other_body = matches!(
                    e,
                    BeginError::PendingMismatch {
                        differs: "body",
                        ..
                    }
                );
                if look_again && other_body && self.finished_elsewhere() {
                    // Dropped here as a discard drops it (the caller of its round was answered
                    // already), not driven: its Forget, carried out after this body began,
                    // finds neither secrets nor files to clear (see `finished_elsewhere`).
                    self.machine.borrow_mut().core.discard();
                    return self.begin_once(body, false);
                }
                refused(match e {
                    BeginError::Body(b) => {
                        Error::body("the body cannot be sent: ".to_owned() + &b.message())
                    }
                    e => Error::new(ErrorCode::Pending, e.message()),
                })
            }
        }
    }

    /// Takes up the record another writer stored under the name since this submitter last
    /// looked, when none is pending here; whether one was. One that cannot be taken up is
    /// removed with a warning, as at start-up.
    fn take_up_stored(self: &Rc<Self>) -> bool {
        let Some(text) = self.read_slot().0 else {
            return false;
        };
        let why = {
            let mut m = self.machine.borrow_mut();
            m.core.handle_online(now(), on_line());
            restore(&mut m.core, &text, false)
        };
        if let Some(why) = why {
            self.store.borrow_mut().remove(&self.name);
            let warning = removed(&self.name, &why);
            warn(&warning);
            // Queued, not told now: heard in the submit's drive, after its begin.
            let update = self.snapshot(Some(warning));
            self.queue.borrow_mut().push_back(update);
            return false;
        }
        // Not driven here: a listener hearing "unsure" now could discard it between this and
        // the core's begin, which would then start a submission under the key not drawn for a
        // pending one. Its changes are queued first, and heard in the submit's drive.
        true
    }

    /// Whether the submission pending here, unsure (this submitter sends nothing of it until
    /// "Try again"), has left the web storage tabs share: another tab or another submitter of
    /// the name in this page had its definite answer, or discarded it, and removed its record.
    /// Another body is then no longer refused for it (the same body with another encoding,
    /// method or headers still is). The same body still goes on under its
    /// key, as "Try again" (the server replays the answer the other tab had), and an expired
    /// key is still refused (a new key for it is the caller's choice: `sendAsNew`). (A tab
    /// whose write failed goes on from memory and removes its record too: then the submission
    /// is still being sent there, under its key, and this body goes out beside it, a body of
    /// its own.)
    ///
    /// Only where dropping it entangles nothing, so that its Forget may be carried out after
    /// the next body began: a record in `sessionStorage` or `localStorage` (not IndexedDB, not
    /// memory), its slot readable now and empty (not another tab's record since), its unsure
    /// settlement delivered, no IndexedDB write under way; no secrets set (they may be its own,
    /// kept for "Try again", or set for this body: nothing tells which); and a body that is no
    /// upload (an upload's files are the driver's until the Forget, and IndexedDB was not
    /// looked at for it). Otherwise the refusal stands, as before: the caller may discard the
    /// submission, then submit.
    fn finished_elsewhere(self: &Rc<Self>) -> bool {
        let unsure = {
            let m = self.machine.borrow();
            // Its settlement delivered (not a listener hearing "unsure" that submits while its
            // caller is still to be answered).
            m.core.state() == State::Unsure
                && m.core.settlements() == m.settled_seen
                && m.secrets.is_empty()
        };
        // An IndexedDB write under way holds up the drive: a record of this one's may not have
        // been written yet.
        if !unsure
            || self.uploads.borrow().blocked
            || super::upload::keeps(self)
            || super::upload::begins(self)
            || !matches!(
                self.store.borrow().kind(),
                StorageKind::Session | StorageKind::Local
            )
        {
            return false;
        }
        // Gone, not replaced: a record another tab stored since is pending there, and the
        // refusal stands (it would be taken up in this one's place, and a form kit shows what
        // it was told of).
        matches!(self.read_slot(), (None, false))
    }

    /// The text stored under the name now, and whether the storage failed to read (then it is
    /// memory from now on, the text is memory's, and listeners and the console are told).
    fn read_slot(self: &Rc<Self>) -> (Option<String>, bool) {
        let (text, warning) = self.store.borrow_mut().read(&self.name);
        let failed = warning.is_some();
        if let Some(warning) = warning {
            warn(&warning);
            self.emit(self.snapshot(Some(warning)));
        }
        (text, failed)
    }

    /// Whether the page has begun to unload: its `pagehide` is being dispatched now, or came
    /// (and no `pageshow` since). An answer that comes then is shown to nobody, and its record is
    /// kept (see `Action::Forget` in [`Driver::drive`]). Not while the page discards: what it
    /// lets go as it unloads (in its own `pagehide` listener, say), kept, would be found by the
    /// next page and sent again.
    pub(crate) fn unloading(&self) -> bool {
        !self.letting_go.get() && (self.hidden.get() || super::global::in_pagehide())
    }

    /// Whether a submission is pending here.
    pub(crate) fn has_pending(&self) -> bool {
        self.machine.borrow().core.pending().is_some()
    }

    /// Every call into the core is followed by a drive, which first notes what ended: a
    /// submission no longer pending (answered, discarded) has its secrets dropped and its key
    /// marked gone at once, even while a write holds its actions back, so that secrets set and
    /// a submission begun meanwhile are the next one's, and its record, on its way out, is never
    /// taken up again. One replaced by send-as-new keeps the secrets (the same request is sent
    /// again).
    fn note_ended(&self) {
        let now = self.pending_key();
        let mut m = self.machine.borrow_mut();
        let Some(before) = std::mem::replace(&mut m.noted, now.clone()) else {
            return;
        };
        if now.as_ref() == Some(&before) {
            return;
        }
        if now.is_none() {
            m.secrets = Fields::new();
        }
        drop(m);
        super::upload::ended(self, &before, now);
    }

    /// The pending submission's key, if one is pending (its body neither read nor copied).
    pub(crate) fn pending_key(&self) -> Option<Key> {
        self.machine.borrow().core.pending().map(|r| r.key.clone())
    }

    /// Takes up a record found after start-up (an upload in IndexedDB): `Ok(false)` when
    /// another submission is pending already, `Err` with why it cannot be taken up.
    pub(crate) fn take_up(&self, text: &str) -> Result<bool, String> {
        let mut m = self.machine.borrow_mut();
        if m.core.pending().is_some() {
            return Ok(false);
        }
        match restore(&mut m.core, text, self.options.resume) {
            Some(why) => Err(why),
            None => Ok(true),
        }
    }

    /// The fields that are never stored, sent from memory.
    pub(crate) fn secrets(&self) -> Fields {
        self.machine.borrow().secrets.clone()
    }

    /// Tells the listeners of a warning, the state unchanged.
    pub(crate) fn warned(&self, warning: String) {
        self.emit(self.snapshot(Some(warning)));
    }

    /// A new key was made and its submission begun: no answer of the last one is kept, and its
    /// first attempt is fresh ([`attempt::start`]). The next key is drawn ahead while this one
    /// is out (`spare.rs`).
    fn made_key(self: &Rc<Self>) {
        {
            let mut m = self.machine.borrow_mut();
            m.last_text = None;
            m.fresh = true;
        }
        spare::want(self);
    }

    /// Drops the pending submission (its record removed, an attempt under way aborted, the next
    /// submission gets a new key), and answers its waiting callers `error`: a discard, or an
    /// upload that cannot be kept anywhere. A caller whose settlement was asked for already
    /// (queued behind the change a listener is hearing) gets it instead.
    pub(crate) fn drop_pending(self: &Rc<Self>, error: Error) {
        let (waiters, flight) = {
            let mut m = self.machine.borrow_mut();
            let asked = m.core.settlements();
            m.core.discard();
            let (settled, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut m.waiters)
                .into_iter()
                .partition(|w| w.borrow().after < asked);
            m.waiters = settled;
            (rest, m.flight.take())
        };
        spare::forget_made(self);
        let letting_go = self.letting_go.replace(true);
        self.drive();
        self.letting_go.set(letting_go);
        if let Some((_, controller)) = flight {
            controller.abort();
        }
        for w in &waiters {
            resolve(w, Err(error.clone()));
        }
    }

    /// `slot` waits for the settlement of what `begun` began, or has its refusal at once.
    /// `begun` counts the core's settlements asked for before the call that began it: those
    /// are earlier rounds', and the next is its own, even when that call asked for it already
    /// (a key whose lifetime ran out as its round began settles expired within the call).
    fn wait_in(self: &Rc<Self>, slot: Rc<RefCell<Slot>>, begun: Result<u64, Error>) -> Settling {
        match begun {
            Err(e) => resolve(&slot, Err(e)),
            Ok(before) => {
                slot.borrow_mut().after = before;
                self.machine.borrow_mut().waiters.push(slot.clone());
            }
        }
        self.drive();
        // Changes queued before the core began (a record found unreadable and removed at
        // submit) are told now, whether or not anything began.
        if !self.queue.borrow().is_empty() && !self.emitting.replace(true) {
            self.deliver();
        }
        Settling {
            slot: Ok(slot),
            driver: Rc::downgrade(self),
        }
    }

    /// One caller stops waiting ([`AbortHandle`]): it hears [`ErrorCode::Aborted`]; when it was
    /// the last to wait, the core stops (no retry, the attempt under way abandoned) and the fetch
    /// is aborted. Nothing happens for a wait already settled.
    fn abort(self: &Rc<Self>, slot: &Rc<RefCell<Slot>>) {
        let (found, flight, stopped) = {
            let mut m = self.machine.borrow_mut();
            // Its settlement was asked for already (queued behind the change a listener is
            // hearing): aborting after the settlement does nothing.
            let asked = m.core.settlements();
            if m.waiters
                .iter()
                .any(|w| Rc::ptr_eq(w, slot) && w.borrow().after < asked)
            {
                return;
            }
            // Held until IndexedDB was looked at: it never began, and nothing else stops.
            let held = m.held.len();
            m.held.retain(|h| !Rc::ptr_eq(h, slot));
            let held = m.held.len() != held;
            let before = m.waiters.len();
            m.waiters.retain(|w| !Rc::ptr_eq(w, slot));
            let found = held || m.waiters.len() != before;
            let stopped = !held && found && m.waiters.is_empty();
            let flight = if stopped {
                m.core.stop();
                m.flight.take()
            } else {
                None
            };
            (found, flight, stopped)
        };
        if !found {
            return;
        }
        if stopped {
            // A key made from a spare whose first attempt was never sent (offline) still held
            // the spare's Web Lock: another tab trying it again waited for it for ever.
            spare::forget_made(self);
        }
        self.drive();
        if let Some((_, controller)) = flight {
            controller.abort();
        }
        resolve(
            slot,
            Err(Error::new(
                ErrorCode::Aborted,
                "aborted: the submission stays pending with its key; try it again or discard it",
            )),
        );
    }

    /// The state as a listener sees it now.
    fn snapshot(&self, warning: Option<String>) -> Update {
        let m = self.machine.borrow();
        let pending = m.core.pending();
        Update {
            state: m.core.state(),
            key: pending.map(|r| r.key.clone()),
            attempts: pending.map_or(0, |r| r.attempts),
            next_attempt_at: m.core.next_attempt_at(),
            waiting_for: m.core.waiting_for(),
            warning,
        }
    }

    fn emit(&self, update: Update) {
        self.queue.borrow_mut().push_back(update);
        if self.emitting.replace(true) {
            return;
        }
        self.deliver();
    }

    /// Tells every listener the queued changes in order (a change made by a listener is queued
    /// and told after the call that made it, never skipped), then lets go of the listeners
    /// dropped meanwhile, even inside their own calls.
    fn deliver(&self) {
        loop {
            let Some(update) = self.queue.borrow_mut().pop_front() else {
                break;
            };
            self.listeners.borrow_mut().retain(|e| e.live.get());
            let listeners: Vec<Rc<Entry>> = self.listeners.borrow().clone();
            for entry in listeners.iter().filter(|e| e.live.get()) {
                if let Ok(mut f) = entry.listener.try_borrow_mut() {
                    f(&update);
                }
            }
        }
        self.listeners.borrow_mut().retain(|e| e.live.get());
        self.emitting.set(false);
    }

    /// Carries out the core's actions in order, then arms its timer.
    pub(crate) fn drive(self: &Rc<Self>) {
        self.note_ended();
        loop {
            // An upload's record is being written to IndexedDB: nothing goes on before it is.
            if self.uploads.borrow().blocked {
                break;
            }
            let action = self.machine.borrow_mut().core.poll_action();
            let Some(action) = action else { break };
            match action {
                Action::Persist(text) => {
                    // The record of a submission no longer pending (its answer or discard came
                    // while this write waited behind another) is not written: its Forget
                    // follows, and written now it would be this driver's files and secrets
                    // under that key.
                    let Some(key) = self.pending_key().filter(|k| Record::is_of_key(&text, k))
                    else {
                        continue;
                    };
                    // A mark on a submission this submitter is not sending (unsure: stopped by
                    // its caller or by the server) is written only where its record still is:
                    // another tab may have had its answer and removed it (written back, it
                    // would come back on the next load as unsure), or stored its own since.
                    let unsure = self.machine.borrow().core.state() == State::Unsure;
                    let only_of = unsure.then(|| key.clone());
                    if super::upload::keeps(self) {
                        super::upload::persist(self, text, key, only_of);
                        continue;
                    }
                    let warning = match &only_of {
                        Some(key) => self.store.borrow_mut().rewrite(&self.name, key, &text),
                        None => self.store.borrow_mut().write(&self.name, &text),
                    };
                    if let Some(warning) = warning {
                        warn(&warning);
                        self.emit(self.snapshot(Some(warning)));
                    }
                }
                Action::Send(a) => {
                    let (controller, fresh) = {
                        let mut m = self.machine.borrow_mut();
                        let controller = web_sys::AbortController::new().ok();
                        m.flight = controller.clone().map(|c| (a.id, c));
                        (controller, std::mem::take(&mut m.fresh))
                    };
                    attempt::start(self.clone(), a, controller, fresh);
                }
                Action::Forget(key) => {
                    // An answer that comes after the page's `pagehide` (its status came, and
                    // the unload cut off the body being read: script of an unloading page
                    // still runs) is shown to nobody: the next page would start empty, and the
                    // person, told nothing, might send it again under a new key. So the record
                    // stays: the next page finds the submission under its key, unsure, and
                    // asking again gets the server's replay of this answer. (A page the
                    // back/forward cache gives back keeps it too, until its next load asks.)
                    if self.unloading() {
                        continue;
                    }
                    // Its secrets went when it ended (`note_ended`).
                    super::upload::forget(self, &key);
                    self.store.borrow_mut().forget(&self.name, &key);
                }
                Action::Changed(c) => self.emit(Update {
                    state: c.state,
                    key: c.key,
                    attempts: c.attempts,
                    next_attempt_at: c.next_attempt_at,
                    waiting_for: c.waiting_for,
                    warning: None,
                }),
                Action::Settled(settled) => {
                    spare::forget_made_of(self, &settled.key);
                    let (waiters, text) = {
                        let mut m = self.machine.borrow_mut();
                        m.settled_seen += 1;
                        // A caller who began to wait after this settlement was asked for (a
                        // listener of the change before it called tryAgain) waits for its own.
                        let seen = m.settled_seen;
                        let (now, later) = std::mem::take(&mut m.waiters)
                            .into_iter()
                            .partition(|w| w.borrow().after < seen);
                        m.waiters = later;
                        (now, m.last_text.clone())
                    };
                    let (text, js_text) = text.unzip();
                    let settlement = Settlement {
                        settled,
                        text,
                        js_text: js_text.flatten(),
                        body: OnceCell::new(),
                    };
                    for w in &waiters {
                        resolve(w, Ok(settlement.clone()));
                    }
                }
            }
        }
        // A first attempt not sent in the drive that made its key (offline, an upload being
        // stored) waits for the lock like any other.
        self.machine.borrow_mut().fresh = false;
        self.arm();
        self.keep_while_waited();
    }

    /// A driver that a caller waits on lives until that wait is answered, whoever else lets
    /// go of it: `await new Submitter(name, options).submit(body)` keeps no reference to the
    /// submitter, and its wrapper may be collected (and the driver dropped) during a retry's
    /// wait, which holds the driver weakly, like the timers and listeners do; the promise
    /// then never settled and the retries stopped. No cycle: the keep is let go in the drive
    /// that answers the last waiting caller (settled, aborted or discarded).
    fn keep_while_waited(self: &Rc<Self>) {
        let waited = !self.machine.borrow().waiters.is_empty();
        let let_go = WAITED.with(|kept| {
            let mut kept = kept.borrow_mut();
            let at = kept.iter().position(|d| Rc::ptr_eq(d, self));
            match (waited, at) {
                (true, None) => {
                    kept.push(self.clone());
                    None
                }
                (false, Some(at)) => Some(kept.swap_remove(at)),
                _ => None,
            }
        });
        // Dropped outside the borrow (it is not the last reference: `self` is one).
        drop(let_go);
    }

    /// Arms the core's timer for its deadline (once per deadline). While the submission waits
    /// for the connection, the timer also looks at `navigator.onLine` every
    /// [`ONLINE_POLL`]: a dedicated worker's global is not told `online` in every browser
    /// (Chromium's emulated offline changes its `navigator.onLine` and fires no event there),
    /// and a submission must not wait for an event that never comes.
    fn arm(self: &Rc<Self>) {
        let mut m = self.machine.borrow_mut();
        let mut deadline = m.core.poll_timeout();
        if m.core.waiting_for() == Some(WaitingFor::Online) {
            // A look already armed within ONLINE_POLL stands: every drive comes here, and
            // would otherwise put it off by a new timer each time.
            let soon = now() + ONLINE_POLL;
            let armed = m.timer.as_ref().map(|(at, _)| *at).filter(|at| *at <= soon);
            let poll = armed.unwrap_or(soon);
            deadline = Some(deadline.map_or(poll, |at| at.min(poll)));
        }
        if m.timer.as_ref().map(|(at, _)| *at) == deadline {
            return;
        }
        m.timer = deadline.map(|at| {
            let ms = at.saturating_since(now()).as_millis();
            let timer = Timer::new(ms.min(u128::from(u32::MAX)) as u32, self, Driver::fired, 0);
            (at, timer)
        });
    }

    /// The core's timer fired.
    fn fired(self: &Rc<Self>, _: u32) {
        // Disarmed first, so that the drive re-arms, also when this fired early.
        let timer = self.machine.borrow_mut().timer.take();
        {
            let mut m = self.machine.borrow_mut();
            if m.core.waiting_for() == Some(WaitingFor::Online) && on_line() {
                m.core.handle_online(now(), true);
            }
            m.core.handle_timeout(now());
        }
        self.drive();
        drop(timer);
    }

    /// The answer to attempt `id`; ignored when that attempt is no longer under way.
    pub(crate) fn answer(
        self: &Rc<Self>,
        id: AttemptId,
        answer: &Answer,
        text: String,
        js: Option<wasm_bindgen::JsValue>,
    ) {
        {
            let mut m = self.machine.borrow_mut();
            if m.core.in_flight() != Some(id) {
                return;
            }
            m.flight = None;
            m.last_text = Some((Rc::new(text), js));
            m.core.handle_answer(now(), id, answer, jitter());
        }
        self.drive();
    }

    /// No answer to attempt `id`; ignored when that attempt is no longer under way.
    pub(crate) fn failure(self: &Rc<Self>, id: AttemptId, failure: Failure) {
        {
            let mut m = self.machine.borrow_mut();
            if m.core.in_flight() != Some(id) {
                return;
            }
            m.flight = None;
            // Failed because the platform is offline: the core gives the attempt back and
            // waits for the connection.
            m.core.handle_online(now(), on_line());
            m.core.handle_failure(now(), id, failure, jitter());
        }
        self.drive();
    }
}

/// The body as it goes on the wire, with the secrets merged into its JSON object body (the same
/// on every attempt), taken from the attempt's own copy of the request (which is not stored).
pub(crate) fn wire_body(
    request: &mut Request,
    secrets: &Fields,
) -> Result<String, body::BodyError> {
    if !secrets.is_empty() {
        if let Value::Object(mut fields) = body::parse(&request.body)? {
            for (name, value) in secrets.iter() {
                fields.insert(name.to_owned(), value.clone());
            }
            request.body = Value::Object(fields).to_canonical();
        }
    }
    request.take_wire_body()
}
