//! # Thin bindings to the platform
//!
//! Bound to the global scope, not to `window`, so the same code runs in a page and in a worker
//! (gloo-net's way): `setTimeout`, `crypto.getRandomValues`, and one attempt's trip over the
//! network (`browser.js` beside this file: `navigator.locks`, `fetch`, its timeout). Side effects
//! that must end belong to guards: a [`Timer`] clears itself when dropped.

use js_sys::Function;
use wasm_bindgen::prelude::*;

use crate::core::Timestamp;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(handler: &Function, ms: i32) -> JsValue;

    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(id: &JsValue);

    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(buf: &mut [u8]);
}

#[wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// Sends one attempt after the current task, under the Web Lock `lock` when given, with
    /// `headers` as `name:value` lines (names are tokens and values have no line breaks: the
    /// core checks both), then the ones `attempt_headers` gives, then the key; `body` is a
    /// string, `undefined` for none, or `false` for one that cannot be sent (the attempt then
    /// fails as the network would, with nothing sent). Calls `done` once
    /// with the status (0: no answer; 1: the timeout fired), the answer's headers as
    /// `name:value` lines, and its text. Returns a function that aborts the attempt.
    #[allow(clippy::too_many_arguments)]
    #[wasm_bindgen(js_name = attempt)]
    pub(crate) fn send_attempt(
        url: &str,
        method: &str,
        headers: &str,
        body: &JsValue,
        credentials: &str,
        timeout_ms: f64,
        lock: Option<String>,
        attempt_headers: Option<Function>,
        number: u32,
        key: &str,
        key_header: &str,
        key_value: &str,
        done: JsValue,
    ) -> Function;
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

/// `console.warn("oncekey: " + message)`, where warnings also go.
pub(crate) fn warn(message: &str) {
    web_sys::console::warn_1(&JsValue::from_str(&("oncekey: ".to_owned() + message)));
}
