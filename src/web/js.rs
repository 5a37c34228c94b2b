//! # Thin bindings to the platform
//!
//! Bound to the global scope, not to `window`, so the same code runs in a page and in a worker
//! (gloo-net's way): `fetch`, `setTimeout`, `crypto.getRandomValues`, `navigator.locks`. Side
//! effects that must end belong to guards: a [`Timer`] clears itself when dropped, an
//! [`AbortGuard`] aborts its fetch and clears its timer.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::core::Timestamp;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = fetch)]
    fn fetch_with_init(input: &str, init: &web_sys::RequestInit) -> Promise;

    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &Function, ms: i32) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(id: &JsValue);

    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(buf: &mut [u8]);

    /// The Web Locks API's `LockManager` (bound here: web-sys marks it unstable).
    type LockManager;

    #[wasm_bindgen(method, catch)]
    fn request(this: &LockManager, name: &str, callback: &Function) -> Result<Promise, JsValue>;
}

/// The wall clock, in milliseconds since the epoch: records live across reloads.
pub(crate) fn now() -> Timestamp {
    Timestamp::from_millis(js_sys::Date::now() as u64)
}

/// Bytes from the platform CSPRNG.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    get_random_values(&mut buf);
    buf
}

/// A uniform draw for the core's backoff jitter.
pub(crate) fn jitter() -> u32 {
    u32::from_le_bytes(random_bytes::<4>())
}

/// `fetch(url, init)` from the global scope (no `Request` object: it costs a little per call).
pub(crate) async fn fetch(
    url: &str,
    init: &web_sys::RequestInit,
) -> Result<web_sys::Response, JsValue> {
    let response = JsFuture::from(fetch_with_init(url, init)).await?;
    response.dyn_into()
}

/// A `setTimeout` that is cleared when dropped.
pub(crate) struct Timer {
    id: JsValue,
    _callback: Closure<dyn FnMut()>,
}

impl Timer {
    /// Calls `f` once after `ms` milliseconds, unless dropped first.
    pub(crate) fn once(ms: u64, f: impl FnOnce() + 'static) -> Timer {
        let mut f = Some(f);
        let callback = Closure::<dyn FnMut()>::new(move || {
            if let Some(f) = f.take() {
                f()
            }
        });
        // Browsers fire at once past 2^31 - 1 ms; the core's cap keeps delays far below it.
        let ms = ms.min(i32::MAX as u64) as i32;
        let id = set_timeout(callback.as_ref().unchecked_ref(), ms);
        Timer {
            id,
            _callback: callback,
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        clear_timeout(&self.id);
    }
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer").field("id", &self.id).finish()
    }
}

/// One attempt's `AbortController` and its timeout. Dropped, it aborts the fetch and clears the
/// timer; [`AbortGuard::finish`] only clears the timer, once the whole answer has been read.
pub(crate) struct AbortGuard {
    controller: web_sys::AbortController,
    timed_out: Rc<Cell<bool>>,
    _timer: Option<Timer>,
    finished: bool,
}

impl AbortGuard {
    /// A controller that aborts by itself after `timeout_ms`, if given.
    pub(crate) fn new(timeout_ms: Option<u64>) -> Result<AbortGuard, JsValue> {
        let controller = web_sys::AbortController::new()?;
        let timed_out = Rc::new(Cell::new(false));
        let timer = timeout_ms.map(|ms| {
            let (controller, timed_out) = (controller.clone(), timed_out.clone());
            Timer::once(ms, move || {
                timed_out.set(true);
                controller.abort();
            })
        });
        Ok(AbortGuard {
            controller,
            timed_out,
            _timer: timer,
            finished: false,
        })
    }

    pub(crate) fn signal(&self) -> web_sys::AbortSignal {
        self.controller.signal()
    }

    /// A handle to abort the attempt from elsewhere (a discard).
    pub(crate) fn controller(&self) -> web_sys::AbortController {
        self.controller.clone()
    }

    /// Whether the timeout fired.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out.get()
    }

    /// The answer has been read: clear the timer, leave the finished fetch alone (aborting it
    /// would still cost the browser an abort event).
    pub(crate) fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.controller.abort();
        }
    }
}

/// A held Web Lock: released when dropped.
pub(crate) struct LockGuard {
    release: Function,
    _callback: Closure<dyn FnMut(JsValue) -> Promise>,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = self.release.call0(&JsValue::UNDEFINED);
    }
}

/// Takes the Web Lock `name`, waiting for another tab (or submitter) that holds it. `None` where
/// the browser has no Web Locks or refuses one (an opaque origin, say): the caller goes on
/// without, as the server's idempotency still holds. Two tabs that share a pending record thus
/// never send it at the same time.
pub(crate) async fn lock(name: &str) -> Option<LockGuard> {
    let locks = lock_manager()?;
    // `held` is what the lock's callback returns: the lock lasts until it resolves.
    let mut release = None;
    let held = Promise::new(&mut |resolve, _| release = Some(resolve));
    let mut grant = None;
    let granted = Promise::new(&mut |resolve, _| grant = Some(resolve));
    let (release, grant) = (release?, grant?);
    let mut once = Some((grant, held));
    let callback =
        Closure::<dyn FnMut(JsValue) -> Promise>::new(move |_lock: JsValue| match once.take() {
            Some((grant, held)) => {
                let _ = grant.call0(&JsValue::UNDEFINED);
                held
            }
            None => Promise::resolve(&JsValue::UNDEFINED),
        });
    let request = locks
        .request(name, callback.as_ref().unchecked_ref())
        .ok()?;
    // The request settles only after release, unless it is refused first.
    let first = Promise::race(&js_sys::Array::of2(&granted, &request));
    JsFuture::from(first).await.ok()?;
    Some(LockGuard {
        release,
        _callback: callback,
    })
}

fn lock_manager() -> Option<LockManager> {
    let navigator = js_sys::Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    let locks = js_sys::Reflect::get(&navigator, &"locks".into()).ok()?;
    let request = js_sys::Reflect::get(&locks, &"request".into()).ok()?;
    request.is_function().then(|| locks.unchecked_into())
}

/// `console.warn("oncekey: " + message)`, where warnings also go.
pub(crate) fn warn(message: &str) {
    web_sys::console::warn_1(&JsValue::from_str(&("oncekey: ".to_owned() + message)));
}
