//! Shared by the browser tests (`tests/web.rs`, `tests/web_form.rs`, `tests/web_upload.rs`):
//! the reference server's address, names unique to a run, the session storage, a global event
//! dispatched as the browser does, the server's counts per tenant, and a log of the page's lock requests and record writes in order.
#![allow(dead_code)]

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// The reference server `scripts/test-web.sh` started.
pub fn server() -> &'static str {
    // Read at compile time, so that `cargo clippy` builds the tests without a server.
    match option_env!("ONCEKEY_TEST_SERVER") {
        Some(url) => url,
        None => {
            panic!("ONCEKEY_TEST_SERVER is not set: run the browser tests with scripts/test-web.sh")
        }
    }
}

/// A name unique to this run, for a tenant or a submission.
pub fn unique(what: &str) -> String {
    let n = (js_sys::Math::random() * 2f64.powi(48)) as u64;
    format!("{what}-{n:012x}")
}

pub fn session() -> web_sys::Storage {
    web_sys::window()
        .unwrap()
        .session_storage()
        .unwrap()
        .unwrap()
}

/// The record stored for submission `name` in the session storage, as text.
pub fn stored(name: &str) -> Option<String> {
    session().get_item(&format!("oncekey:{name}")).unwrap()
}

/// Dispatches an event named `kind` at the global scope, as the browser does (`pagehide` when a
/// page begins to unload, `pageshow` when the back/forward cache gives it back).
pub fn dispatch(kind: &str) {
    let event = web_sys::Event::new(kind).unwrap();
    js_sys::global()
        .unchecked_into::<web_sys::EventTarget>()
        .dispatch_event(&event)
        .unwrap();
}

/// The server's counts for `tenant` (`GET /api/stats`).
pub async fn stats(tenant: &str) -> JsValue {
    let init = web_sys::RequestInit::new();
    let headers = web_sys::Headers::new().unwrap();
    headers.set("X-Tenant", tenant).unwrap();
    init.set_headers(&headers);
    let url = format!("{}/api/stats", server());
    let request = web_sys::Request::new_with_str_and_init(&url, &init).unwrap();
    let window = web_sys::window().unwrap();
    let response: web_sys::Response = JsFuture::from(window.fetch_with_request(&request))
        .await
        .unwrap()
        .unchecked_into();
    JsFuture::from(response.json().unwrap()).await.unwrap()
}

/// The page's Web Lock requests and its writes through `method` (a prototype's method, such as
/// `Storage.prototype.setItem`), logged in the order they are made (`lock NAME`, `write TEXT`,
/// `text` a JavaScript expression of the write's `arguments`) until [`LockAndWrites::lock_first`].
pub struct LockAndWrites(JsValue);

impl LockAndWrites {
    pub fn watch(method: &str, text: &str) -> LockAndWrites {
        let body = format!(
            "var log = [], request = LockManager.prototype.request, write = {method}; \
             LockManager.prototype.request = function (name) {{ log.push('lock ' + name); return request.apply(this, arguments); }}; \
             {method} = function () {{ log.push('write ' + ({text})); return write.apply(this, arguments); }}; \
             return {{ log: log, restore: function () {{ LockManager.prototype.request = request; {method} = write; }} }};"
        );
        LockAndWrites(
            js_sys::Function::new_no_args(&body)
                .call0(&JsValue::NULL)
                .unwrap(),
        )
    }

    /// Stops watching, and asserts that the lock of `key` was asked for before the first write
    /// holding the key.
    pub fn lock_first(self, key: &str) {
        let get = |name: &str| js_sys::Reflect::get(&self.0, &name.into()).unwrap();
        get("restore")
            .unchecked_into::<js_sys::Function>()
            .call0(&JsValue::NULL)
            .unwrap();
        let log: Vec<String> = js_sys::Array::from(&get("log"))
            .iter()
            .map(|e| e.as_string().unwrap_or_default())
            .collect();
        let lock = log.iter().position(|e| *e == format!("lock oncekey:{key}"));
        let write = log
            .iter()
            .position(|e| e.starts_with("write") && e.contains(key));
        assert!(lock.is_some() && write.is_some(), "{log:?}");
        assert!(lock < write, "the lock first: {log:?}");
    }
}
