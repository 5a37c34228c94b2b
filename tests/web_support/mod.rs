//! Shared by the browser tests (`tests/web.rs`, `tests/web_form.rs`): the reference server's
//! address, names unique to a run, the session storage and the server's counts per tenant.
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
