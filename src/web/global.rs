//! # The global scope
//!
//! `fetch`, the timers, `crypto`, `navigator.locks`, `navigator.onLine` and the `online` and
//! `offline` events, bound to the global scope itself (gloo's way), not to `window`, so that the
//! driver runs in a worker too. web-sys gives the types
//! (`Crypto`, `RequestInit`, `Response`); `navigator.locks` is a binding of our own because
//! web-sys has `LockManager` only behind `--cfg=web_sys_unstable_apis`, which a plain build
//! does not set.

use std::cell::Cell;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_name = fetch)]
    pub(crate) fn fetch(url: &str, init: &web_sys::RequestInit) -> Result<Promise, JsValue>;

    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &Function, ms: i32) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(id: &JsValue);

    #[wasm_bindgen(thread_local_v2, js_name = crypto)]
    static CRYPTO: Option<web_sys::Crypto>;

    /// `navigator.locks`, the Web Locks API.
    type LockManager;

    #[wasm_bindgen(method, catch)]
    fn request(this: &LockManager, name: &str, callback: &Function) -> Result<Promise, JsValue>;
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

/// A timer: `f` runs once after `ms` milliseconds unless the timer is dropped first.
pub(crate) struct Timer {
    id: JsValue,
    _f: Closure<dyn FnMut()>,
}

impl ::core::fmt::Debug for Timer {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.write_str("Timer")
    }
}

impl Timer {
    pub(crate) fn new(ms: u32, f: impl FnOnce() + 'static) -> Timer {
        let f = Closure::once(f);
        let id = set_timeout(f.as_ref().unchecked_ref(), ms.min(i32::MAX as u32) as i32);
        Timer { id, _f: f }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        clear_timeout(&self.id);
    }
}

/// `navigator.onLine`: `false` only when the platform says it is offline (a global without a
/// navigator, or one that does not say, counts as online).
pub(crate) fn on_line() -> bool {
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into()).unwrap_or_default();
    if !navigator.is_object() {
        return true;
    }
    Reflect::get(&navigator, &"onLine".into())
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(true)
}

/// The global scope's `online` and `offline` events (a window's or a worker's), heard until
/// dropped.
pub(crate) struct Connection {
    target: web_sys::EventTarget,
    f: Closure<dyn FnMut(web_sys::Event)>,
}

impl Connection {
    /// Calls `f(true)` on every `online` event and `f(false)` on every `offline`; `None` where
    /// the global scope takes no listeners.
    pub(crate) fn watch(mut f: impl FnMut(bool) + 'static) -> Option<Connection> {
        let target: web_sys::EventTarget = js_sys::global().dyn_into().ok()?;
        let f = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
            f(e.type_() == "online")
        });
        for event in ["online", "offline"] {
            target
                .add_event_listener_with_callback(event, f.as_ref().unchecked_ref())
                .ok()?;
        }
        Some(Connection { target, f })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for event in ["online", "offline"] {
            let _ = self
                .target
                .remove_event_listener_with_callback(event, self.f.as_ref().unchecked_ref());
        }
    }
}

fn locks() -> Option<LockManager> {
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into()).ok()?;
    if !navigator.is_object() {
        return None;
    }
    let locks = Reflect::get(&navigator, &"locks".into()).ok()?;
    let request = Reflect::get(&locks, &"request".into()).ok()?;
    request.is_function().then(|| locks.unchecked_into())
}

/// Asks for the Web Lock `name` at once and holds it, once granted, until the [`Lock`] is
/// dropped (dropped before the grant, it is let go the moment it is granted). `None` where the browser has
/// no Web Locks: then the attempt goes on without, and the server's idempotency still holds.
/// Requests for one name are granted in the order they were made, across tabs.
pub(crate) fn request_lock(name: &str) -> Option<Lock> {
    let locks = locks()?;
    let mut release = None;
    let held = Promise::new(&mut |resolve, _| release = Some(resolve));
    let mut grant = None;
    let granted = Promise::new(&mut |resolve, _| grant = Some(resolve));
    let (release, grant) = (release?, grant?);
    let refused = grant.clone();
    let answered = Rc::new(Cell::new(false));
    let told = answered.clone();
    let callback: Closure<dyn FnMut(JsValue) -> JsValue> = Closure::once(move |_lock: JsValue| {
        told.set(true);
        let _ = grant.call1(&JsValue::NULL, &JsValue::TRUE);
        JsValue::from(held)
    });
    let request = locks
        .request(name, callback.as_ref().unchecked_ref())
        .ok()?;
    // Refused before it was granted: `granted` resolves with false (a no-op once granted).
    let told = answered.clone();
    let on_refused: Closure<dyn FnMut(JsValue)> = Closure::once(move |_e: JsValue| {
        told.set(true);
        let _ = refused.call1(&JsValue::NULL, &JsValue::FALSE);
    });
    let _ = request.catch(&on_refused);
    Some(Lock {
        release,
        granted,
        answered,
        closures: Some((callback, on_refused)),
    })
}

/// The lock's callback (granted: it returns the promise that holds the lock) and its refusal's.
type LockClosures = (
    Closure<dyn FnMut(JsValue) -> JsValue>,
    Closure<dyn FnMut(JsValue)>,
);

/// A Web Lock asked for ([`request_lock`]): held once granted, let go when dropped.
pub(crate) struct Lock {
    release: Function,
    granted: Promise,
    /// The browser granted or refused it: one of the closures was called.
    answered: Rc<Cell<bool>>,
    /// Called once each at most, and kept until the browser answered.
    closures: Option<LockClosures>,
}

impl Lock {
    /// Waits until it is granted: another tab or submitter may hold it. `None` when the browser
    /// refused it (an opaque origin, say).
    pub(crate) async fn granted(self) -> Option<Lock> {
        let ok = JsFuture::from(self.granted.clone()).await.ok()? == JsValue::TRUE;
        ok.then_some(self)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = self.release.call0(&JsValue::NULL);
        // Dropped before the browser answered: its callback must still be there when the
        // grant comes (at once, the lock let go), so the closures go when it has come.
        if let Some(closures) = self.closures.take().filter(|_| !self.answered.get()) {
            let granted = self.granted.clone();
            wasm_bindgen_futures::spawn_local(async move {
                let _ = JsFuture::from(granted).await;
                drop(closures);
            });
        }
    }
}
