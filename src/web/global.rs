//! # The global scope
//!
//! `fetch`, the timers, `crypto`, `navigator.locks`, `navigator.onLine` and the `online` and
//! `offline` events, bound to the global scope itself (gloo's way), not to `window`, so that the
//! driver runs in a worker too. JavaScript calls back one function of ours, made once, bound to
//! a number for each timer, lock, attempt step and listener's stop function ([`CALLBACK`]): a
//! closure made per call costs the page a function and a finalizer's registration, every
//! submission. web-sys gives the types (`Crypto`, `RequestInit`, `Response`); `navigator.locks`
//! is a binding of our own because web-sys has `LockManager` only behind
//! `--cfg=web_sys_unstable_apis`, which a plain build does not set.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use super::driver::Driver;
use super::{get, text};
use crate::core::Key;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_name = fetch)]
    pub(crate) fn fetch(url: &str, init: &web_sys::RequestInit) -> Result<Promise, JsValue>;

    /// `setTimeout(handler, ms, id)`: the handler is one function for every timer, told which
    /// timer fired by `id`.
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &Function, ms: i32, id: u32) -> f64;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(handle: f64);

    #[wasm_bindgen(thread_local_v2, js_name = crypto)]
    static CRYPTO: Option<web_sys::Crypto>;

    #[wasm_bindgen(thread_local_v2, js_name = navigator)]
    static NAVIGATOR: Option<Navigator>;

    /// The global's `navigator` (a window's or a worker's).
    type Navigator;

    #[wasm_bindgen(method, getter, js_name = onLine)]
    fn on_line(this: &Navigator) -> JsValue;

    #[wasm_bindgen(method, getter)]
    fn locks(this: &Navigator) -> JsValue;

    /// `queueMicrotask(f)`.
    #[wasm_bindgen(js_name = queueMicrotask)]
    pub(crate) fn queue_microtask(f: &Function);

    /// A function of ours made once, and a promise, as seen by the two calls below.
    pub(crate) type Callee;

    /// `f.bind(null, n)`: one function made once, told which of many calls it is by `n`.
    #[wasm_bindgen(method, js_name = bind)]
    pub(crate) fn bind_number(this: &Callee, this_arg: &JsValue, n: u32) -> Function;

    /// `promise.then(resolved, rejected)`; what it returns is not needed. `Err` when it threw:
    /// not a promise after all (a page's wrapper of `fetch` may give back anything).
    #[wasm_bindgen(method, catch, js_name = then)]
    pub(crate) fn then_call(
        this: &Callee,
        resolved: &JsValue,
        rejected: &JsValue,
    ) -> Result<(), JsValue>;

    /// `navigator.locks`, the Web Locks API.
    type LockManager;

    #[wasm_bindgen(method, catch)]
    fn request(this: &LockManager, name: &str, callback: &Function) -> Result<Promise, JsValue>;

    /// `locks.request(name, { ifAvailable: true }, callback)`: the callback gets `null` when
    /// the lock is held or asked for elsewhere.
    #[wasm_bindgen(method, catch, js_name = request)]
    fn request_if_available(
        this: &LockManager,
        name: &str,
        options: &JsValue,
        callback: &Function,
    ) -> Result<Promise, JsValue>;
}

/// 16 bytes from the platform CSPRNG (`crypto.getRandomValues`), for a key.
pub(crate) fn random_bytes() -> Result<[u8; 16], JsValue> {
    let mut bytes = [0u8; 16];
    CRYPTO.with(|crypto| match crypto {
        Some(crypto) => crypto
            .get_random_values_with_u8_array(&mut bytes)
            .map(|_| ()),
        None => Err(JsValue::from_str(
            "this context has no crypto.getRandomValues",
        )),
    })?;
    Ok(bytes)
}

/// A timer: `due(driver, arg)` runs once after `ms` milliseconds, if the driver still lives,
/// unless the timer is dropped first.
pub(crate) struct Timer {
    id: u32,
    handle: f64,
}

impl ::core::fmt::Debug for Timer {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.write_str("Timer")
    }
}

/// What JavaScript holds a function of ours for ([`CALLBACK`] bound to a number), kept here by
/// that number until the call comes or the holder lets it go: timers, locks, attempts between
/// their steps, `onChange` listeners. A page has a few of each at a time, so a list.
pub(crate) struct Numbered<T> {
    next: u32,
    items: Vec<(u32, T)>,
}

impl<T> Numbered<T> {
    pub(crate) const fn new() -> Numbered<T> {
        Numbered {
            next: 0,
            items: Vec::new(),
        }
    }

    /// A new number, for an item that binds `per` numbers of its own to [`CALLBACK`] (a lock is
    /// granted or refused, an attempt has steps): every bound number fits in a `u32`, beside
    /// its kind.
    pub(crate) fn number(&mut self, per: u32) -> u32 {
        let n = self.next;
        self.next = n.wrapping_add(1) % (u32::MAX / (KINDS * per));
        n
    }

    /// Keeps `item` under `n` (from [`Numbered::number`]).
    pub(crate) fn keep(&mut self, n: u32, item: T) {
        self.items.push((n, item));
    }

    /// Keeps `item` under a new number ([`Numbered::number`] with `per` 1); returns it.
    pub(crate) fn add(&mut self, item: T) -> u32 {
        let n = self.number(1);
        self.keep(n, item);
        n
    }

    pub(crate) fn get(&self, n: u32) -> Option<&T> {
        self.items.iter().find(|(i, _)| *i == n).map(|(_, t)| t)
    }

    pub(crate) fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        self.items.iter_mut().find(|(i, _)| *i == n).map(|(_, t)| t)
    }

    pub(crate) fn take(&mut self, n: u32) -> Option<T> {
        let at = self.items.iter().position(|(i, _)| *i == n)?;
        Some(self.items.swap_remove(at).1)
    }

    /// Every item kept, to change in place.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.items.iter_mut().map(|(_, t)| t)
    }

    /// Keeps only the items `keep` says to.
    #[cfg(feature = "js")]
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.items.retain(|(_, t)| keep(t));
    }
}

/// What a timer does when it fires: a plain function of the driver and a number (no closure, so
/// no code per timer beyond that function).
pub(crate) type Due = fn(&Rc<Driver>, u32);

/// A timer armed: its driver, what it does and with what number.
type Armed = (Weak<Driver>, Due, u32);

thread_local! {
    /// The timers armed, by number.
    static TIMERS: RefCell<Numbered<Armed>> = const { RefCell::new(Numbered::new()) };
    /// The one function of ours that JavaScript calls back, made once (a closure per timer,
    /// lock or promise handed to JavaScript costs a function and a finalizer's registration
    /// each time): `setTimeout`, Web Locks and promises call it bound to a number that says
    /// whose call it is ([`TIMER`], [`LOCK`], [`STEP`], [`STOP`] in its low bits).
    /// It holds nothing itself (`Fn`), so a call made while another runs is no error.
    static CALLBACK: Closure<dyn Fn(u32, JsValue) -> JsValue> =
        Closure::new(|n: u32, value: JsValue| match n % KINDS {
            TIMER => {
                fire(n / KINDS);
                JsValue::UNDEFINED
            }
            LOCK => lock_answered(n / KINDS, &value),
            STEP => {
                super::attempt::step_of(n / KINDS, value);
                JsValue::UNDEFINED
            }
            _ => {
                #[cfg(feature = "js")]
                super::js::stop(n / KINDS);
                JsValue::UNDEFINED
            }
        });
}

/// Whose call [`CALLBACK`] gets, in the low bits of its number: one of [`KINDS`].
const KINDS: u32 = 4;
const TIMER: u32 = 0;
const LOCK: u32 = 1;
const STEP: u32 = 2;
#[cfg(feature = "js")]
const STOP: u32 = 3;

/// [`CALLBACK`] bound to `n` of `kind`.
fn bound(kind: u32, n: u32) -> Function {
    CALLBACK.with(|f| {
        f.as_ref()
            .unchecked_ref::<Callee>()
            .bind_number(&JsValue::NULL, n * KINDS + kind)
    })
}

/// [`CALLBACK`] bound to step `n` of an attempt (`attempt.rs`).
pub(crate) fn step_callback(n: u32) -> Function {
    bound(STEP, n)
}

/// [`CALLBACK`] bound to the stop function of `onChange` listener `n` (`js.rs`).
#[cfg(feature = "js")]
pub(crate) fn stop_callback(n: u32) -> Function {
    bound(STOP, n)
}

fn fire(id: u32) {
    let due = take_due(id);
    if let Some((driver, due, arg)) = due.and_then(|(w, f, a)| Some((w.upgrade()?, f, a))) {
        due(&driver, arg);
    }
}

fn take_due(id: u32) -> Option<Armed> {
    TIMERS.with(|t| t.borrow_mut().take(id))
}

impl Timer {
    pub(crate) fn new(ms: u32, driver: &Rc<Driver>, due: Due, arg: u32) -> Timer {
        let id = TIMERS.with(|t| t.borrow_mut().add((Rc::downgrade(driver), due, arg)));
        let ms = ms.min(i32::MAX as u32) as i32;
        let handle =
            CALLBACK.with(|f| set_timeout(f.as_ref().unchecked_ref(), ms, id * KINDS + TIMER));
        Timer { id, handle }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        clear_timeout(self.handle);
        // Dropped outside the borrow: the driver may go with it.
        drop(take_due(self.id));
    }
}

/// `url` as `fetch` reads it here, written out in full (`URL.href`): resolved against the
/// document's base URL in a window (its `<base href>` counted), or the worker's location. So
/// one endpoint written two ways (`/api/tickets`, and in full, as a form's `action` reads) is
/// one URL, and a record of it is the same request. `None` when it is no URL there; as given
/// where the global has neither.
pub(crate) fn full_url(url: &str) -> Option<String> {
    let global = js_sys::global();
    let base = text(&get(&global, "document"), "baseURI")
        .or_else(|| text(&get(&global, "location"), "href"));
    match base {
        Some(base) => web_sys::Url::new_with_base(url, &base)
            .ok()
            .map(|u| u.href()),
        None => Some(url.to_owned()),
    }
}

/// `navigator.onLine`: `false` only when the platform says it is offline (a global without a
/// navigator, or one that does not say, counts as online).
pub(crate) fn on_line() -> bool {
    NAVIGATOR.with(|n| {
        n.as_ref()
            .and_then(|n| n.on_line().as_bool())
            .unwrap_or(true)
    })
}

/// Whether the global is dispatching a `pagehide` now (a window's `event`). A browser runs the
/// microtasks queued so far after each listener of an event it fires, `event` still set: an
/// answer can settle there, between a listener the page made before the driver's and the
/// driver's own, which is yet to say that the page is unloading.
pub(crate) fn in_pagehide() -> bool {
    // Outside an event's dispatch `event` is undefined, and asking `undefined` for its `type`
    // would throw: an exception made (its stack captured) on every answer, 60 µs of a
    // submission's own cost (profiled).
    Reflect::get(&js_sys::global(), &JsValue::from_str("event"))
        .ok()
        .filter(JsValue::is_object)
        .and_then(|event| Reflect::get(&event, &JsValue::from_str("type")).ok())
        .is_some_and(|kind| kind == "pagehide")
}

/// What a driver hears of its global scope ([`Heard::watch`]).
pub(crate) enum Event {
    /// `online` (`true`) or `offline` (`false`).
    Online(bool),
    /// `pagehide` (`true`: the page began to unload, or went into the back/forward cache) or
    /// `pageshow` (`false`: the cache gave it back). A worker's global has neither.
    Hidden(bool),
}

/// The global scope's events a driver follows (a window's or a worker's): `online`, `offline`,
/// `pagehide` and `pageshow`, heard until dropped.
pub(crate) struct Heard {
    target: web_sys::EventTarget,
    f: Closure<dyn FnMut(web_sys::Event)>,
}

/// The events [`Heard`] listens for.
const EVENTS: [&str; 4] = ["online", "offline", "pagehide", "pageshow"];

impl Heard {
    /// Calls `f` with every event of [`EVENTS`]; `None` where the global scope takes no
    /// listeners.
    pub(crate) fn watch(mut f: impl FnMut(Event) + 'static) -> Option<Heard> {
        let target: web_sys::EventTarget = js_sys::global().dyn_into().ok()?;
        let f = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
            let kind = e.type_();
            f(match kind.strip_prefix("page") {
                Some(page) => Event::Hidden(page == "hide"),
                None => Event::Online(kind == "online"),
            })
        });
        for event in EVENTS {
            target
                .add_event_listener_with_callback(event, f.as_ref().unchecked_ref())
                .ok()?;
        }
        Some(Heard { target, f })
    }
}

impl Drop for Heard {
    fn drop(&mut self) {
        for event in EVENTS {
            let _ = self
                .target
                .remove_event_listener_with_callback(event, self.f.as_ref().unchecked_ref());
        }
    }
}

thread_local! {
    /// `navigator.locks`, looked up once; `None` where the browser has no Web Locks.
    static LOCKS: Option<LockManager> = NAVIGATOR.with(|n| {
        let locks = n.as_ref()?.locks();
        let request = Reflect::get(&locks, &"request".into()).ok()?;
        request.is_function().then(|| locks.unchecked_into())
    });
    /// The locks asked for and not yet let go, by number.
    static ASKED: RefCell<Numbered<Asked>> = const { RefCell::new(Numbered::new()) };
}

/// What [`CALLBACK`] is told of a lock, beside its number: granted (the lock's callback),
/// refused (its request's promise rejected) or let go (that promise fulfilled, once the lock
/// was released).
const GRANTED: u32 = 0;
const REFUSED: u32 = 1;
const LET_GO: u32 = 2;
/// How many of those a lock has.
const ANSWERS: u32 = 3;

/// The browser answered lock request `n` (the lock's number and [`GRANTED`], [`REFUSED`] or
/// [`LET_GO`]; `lock`, what the grant was given): what the lock's callback returns.
fn lock_answered(n: u32, lock: &JsValue) -> JsValue {
    let (id, answer) = (n / ANSWERS, n % ANSWERS);
    // A lock being let go is done with at its release (or refusal); a question of
    // `if_lock_taken`, at its grant or refusal.
    let done = ASKED.with(|a| {
        let mut a = a.borrow_mut();
        match a.get(id) {
            Some(Asked::LettingGo(..)) if answer != GRANTED => a.take(id),
            Some(Asked::IfFree(_)) if answer != LET_GO => a.take(id),
            _ => None,
        }
    });
    match (done, answer) {
        (Some(Asked::LettingGo(key, waiting)), _) => {
            // Let go (or refused, so never held): the questions about its key are asked now.
            for then in waiting {
                if_lock_taken(&key, then);
            }
        }
        // Granted `null`: held or asked for elsewhere. Granted a lock: `then` runs with it held
        // (let go when this returns). Refused: nothing can be known.
        (Some(Asked::IfFree(then)), _) => then(answer == GRANTED && lock.is_null()),
        (_, GRANTED) => return granted(id),
        (_, REFUSED) => {
            answered(id, Asked::Refused);
        }
        _ => {}
    }
    JsValue::UNDEFINED
}

/// Where a lock asked for is.
enum Asked {
    /// Not answered yet; what is queued once it is, if anything.
    Waiting(Option<Function>),
    /// Held: calling this lets it go.
    Granted(Function),
    /// The browser refused it (an opaque origin, say).
    Refused,
    /// Asked for only if available ([`if_lock_taken`]): told whether someone else has it.
    IfFree(Box<dyn FnOnce(bool)>),
    /// Dropped, and not yet let go in the browser (its request's promise has not settled; one
    /// dropped before the grant is let go once granted): of `key`, with the questions about
    /// that key ([`if_lock_taken`]) that wait for it.
    LettingGo(Key, Vec<Box<dyn FnOnce(bool)>>),
}

/// The browser granted lock `id`: the promise that holds it until it is let go, or nothing
/// (let go at once) when it was dropped before the grant.
fn granted(id: u32) -> JsValue {
    if ASKED.with(|a| matches!(a.borrow().get(id), None | Some(Asked::LettingGo(..)))) {
        return JsValue::UNDEFINED;
    }
    let mut release = None;
    let held = Promise::new(&mut |resolve, _| release = Some(resolve));
    match release.map(|release| answered(id, Asked::Granted(release))) {
        Some(true) => held.into(),
        _ => JsValue::UNDEFINED,
    }
}

/// Records the browser's answer to lock `id`, and wakes a task waiting for it; `false` when the
/// lock was dropped already.
fn answered(id: u32, answer: Asked) -> bool {
    let then = ASKED.with(|a| {
        let mut a = a.borrow_mut();
        let slot = a.get_mut(id)?;
        match std::mem::replace(slot, answer) {
            Asked::Waiting(then) => Some(then),
            // Answered twice (refused after the grant): the first answer stands.
            other => {
                *slot = other;
                Some(None)
            }
        }
    });
    match then {
        Some(then) => {
            if let Some(then) = then {
                queue_microtask(&then);
            }
            true
        }
        None => false,
    }
}

/// Asks for the Web Lock named after `key` (`oncekey:` and the key, the name every tab asks
/// for that key by) at once and holds it, once granted, until the [`Lock`] is dropped (dropped
/// before the grant, it is let go the moment it is granted). `None` where the browser has no Web
/// Locks: then the attempt goes on without, and the server's idempotency still holds.
/// Requests for one name are granted in the order they were made, across tabs.
pub(crate) fn request_lock(key: &Key) -> Option<Lock> {
    if LOCKS.with(|l| l.is_none()) {
        return None;
    }
    let (id, asked) = ask(key, Asked::Waiting(None));
    // Not asked (the browser threw): dropped, the lock's entry goes with it.
    let lock = Lock {
        id,
        key: key.clone(),
    };
    asked.then_some(lock)
}

/// Whether anyone (another tab, or another submitter of this page) holds or waits for the
/// Web Lock of `key` now, that is, sends under that key: `then(false)` when no one does, called
/// with the lock held (taken only if no one wanted it, and let go when `then` returns, so no
/// attempt under the key starts meanwhile); `then(true)` when someone does. Answered in a later
/// task, through the one callback locks are answered by (no closure of its own). `false` (and
/// `then` dropped unanswered) where the global has no Web Locks; a request the browser refuses
/// (an opaque origin) answers `false`, as nothing can be known then. A lock of `key` this page
/// dropped and the browser has yet to let go (an attempt that just ended) would be taken for
/// someone else's: the question waits until it is let go.
pub(crate) fn if_lock_taken(key: &Key, then: impl FnOnce(bool) + 'static) -> bool {
    if LOCKS.with(|l| l.is_none()) {
        return false;
    }
    let mut then: Option<Box<dyn FnOnce(bool)>> = Some(Box::new(then));
    ASKED.with(|a| {
        for asked in a.borrow_mut().values_mut() {
            if let Asked::LettingGo(k, waiting) = asked {
                if k == key {
                    waiting.extend(then.take());
                    break;
                }
            }
        }
    });
    let Some(then) = then else { return true };
    let (id, asked) = ask(key, Asked::IfFree(then));
    if !asked {
        lock_answered(id * ANSWERS + REFUSED, &JsValue::UNDEFINED);
    }
    true
}

/// Keeps `asked` under a new lock number and asks the browser for the Web Lock of `key`
/// (`oncekey:` and the key, the name every tab asks for that key by; only if available for
/// [`Asked::IfFree`]), answered through [`CALLBACK`] under that number, granted or refused.
/// The number, and whether the browser took the request (the entry stays when it threw).
fn ask(key: &Key, asked: Asked) -> (u32, bool) {
    let if_available = matches!(asked, Asked::IfFree(_));
    let id = ASKED.with(|a| {
        let mut a = a.borrow_mut();
        // Granted, refused and let go are three numbers.
        let id = a.number(ANSWERS);
        a.keep(id, asked);
        id
    });
    let name = "oncekey:".to_owned() + key.as_str();
    let on_grant = bound(LOCK, id * ANSWERS + GRANTED);
    let request = LOCKS.with(|l| {
        let l = l.as_ref()?;
        Some(if if_available {
            let options = js_sys::Object::new();
            let _ = Reflect::set(&options, &"ifAvailable".into(), &JsValue::TRUE);
            l.request_if_available(&name, &options, &on_grant)
        } else {
            l.request(&name, &on_grant)
        })
    });
    let Some(Ok(request)) = request else {
        return (id, false);
    };
    // Refused before it was granted: the request's promise rejects; it resolves once let go.
    let _ = request.unchecked_ref::<Callee>().then_call(
        &bound(LOCK, id * ANSWERS + LET_GO),
        &bound(LOCK, id * ANSWERS + REFUSED),
    );
    (id, true)
}

/// A Web Lock asked for ([`request_lock`]): held once granted, let go when dropped.
pub(crate) struct Lock {
    id: u32,
    key: Key,
}

impl Lock {
    /// Queues `then` (a microtask) once the browser answered: granted, or refused (then
    /// [`Lock::held`] says no). Another tab or submitter may hold the lock meanwhile.
    pub(crate) fn once_answered(&self, then: Function) {
        let now = ASKED.with(|a| {
            let mut a = a.borrow_mut();
            match a.get_mut(self.id) {
                Some(Asked::Waiting(waiting)) => {
                    *waiting = Some(then);
                    None
                }
                _ => Some(then),
            }
        });
        if let Some(then) = now {
            queue_microtask(&then);
        }
    }

    /// Whether the browser granted it (not refused, nor still to answer).
    pub(crate) fn held(&self) -> bool {
        ASKED.with(|a| matches!(a.borrow().get(self.id), Some(Asked::Granted(_))))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let asked = ASKED.with(|a| a.borrow_mut().take(self.id));
        // Granted: let go now. Not answered yet: the grant finds it dropped and lets it go at
        // once. Either way the browser has yet to let it go ([`Asked::LettingGo`]).
        let release = match asked {
            Some(Asked::Granted(release)) => Some(release),
            Some(Asked::Waiting(_)) => None,
            _ => return,
        };
        let letting_go = Asked::LettingGo(self.key.clone(), Vec::new());
        ASKED.with(|a| a.borrow_mut().keep(self.id, letting_go));
        if let Some(release) = release {
            let _ = release.call0(&JsValue::NULL);
        }
    }
}
