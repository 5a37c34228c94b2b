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

/// Runs `work` while holding the Web Lock `name`, where the browser has Web Locks; otherwise
/// runs it directly. Two tabs that share a pending record thus never send it at the same time.
pub(crate) async fn with_lock<T: 'static>(
    name: &str,
    work: impl std::future::Future<Output = T> + 'static,
) -> T {
    let Some(locks) = lock_manager() else {
        return work.await;
    };
    let slot = Rc::new(Cell::new(None));
    let work = Rc::new(Cell::new(Some(work)));
    let callback = {
        let (slot, work) = (slot.clone(), work.clone());
        Closure::once(move |_lock: JsValue| -> Promise {
            let work = work.take();
            wasm_bindgen_futures::future_to_promise(async move {
                if let Some(work) = work {
                    slot.set(Some(work.await));
                }
                Ok(JsValue::UNDEFINED)
            })
        })
    };
    if let Ok(granted) = locks.request(name, callback.as_ref().unchecked_ref()) {
        // A rejection means the lock could not be taken (an opaque origin, say): the work
        // then runs below, without it.
        let _ = JsFuture::from(granted).await;
    }
    if let Some(done) = slot.take() {
        return done;
    }
    match work.take() {
        Some(work) => work.await,
        None => unreachable_after_lock(),
    }
}

/// The work was handed to the lock's callback, which always fills the slot before its promise
/// settles; reaching here would be a bug in this file, not a browser condition.
fn unreachable_after_lock() -> ! {
    wasm_bindgen::throw_str("oncekey: the lock callback ran without finishing its work")
}

fn lock_manager() -> Option<LockManager> {
    let navigator = js_sys::Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    let locks = js_sys::Reflect::get(&navigator, &"locks".into()).ok()?;
    let request = js_sys::Reflect::get(&locks, &"request".into()).ok()?;
    request.is_function().then(|| locks.unchecked_into())
}

/// `console.warn`, where warnings also go.
pub(crate) fn warn(message: &str) {
    web_sys::console::warn_1(&JsValue::from_str(message));
}
