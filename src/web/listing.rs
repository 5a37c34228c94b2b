//! # What is pending
//!
//! `listPending(storage)`: every pending submission of the origin in one storage, so that a page
//! can say "2 tickets were not confirmed" and offer Try again or Discard for each (through a
//! `Submitter` of that name). Each entry is `{ name, key, startedAt, attempts, size }`, `size`
//! being the stored body's bytes (for an upload, its description and its files). Records that
//! cannot be read are left out here (a `Submitter` of their name removes them with a warning).

use js_sys::{Array, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::error::Error;
use super::idb;
use super::storage::is_record_slot;
use crate::core::Record;

fn entry(record: &Record, size: f64) -> JsValue {
    let o = Object::new();
    let set = |k: &str, v: JsValue| {
        let _ = Reflect::set(&o, &JsValue::from_str(k), &v);
    };
    set("name", JsValue::from_str(&record.name));
    set("key", JsValue::from_str(record.key.as_str()));
    set(
        "startedAt",
        JsValue::from_f64(record.started_at.as_millis() as f64),
    );
    set("attempts", JsValue::from_f64(f64::from(record.attempts)));
    set("size", JsValue::from_f64(size));
    o.into()
}

/// The records of a web storage (`sessionStorage` or `localStorage`).
fn in_web_storage(local: bool) -> Array {
    let out = Array::new();
    let Some(window) = web_sys::window() else {
        return out;
    };
    let storage = match local {
        true => window.local_storage(),
        false => window.session_storage(),
    };
    let Ok(Some(storage)) = storage else {
        return out;
    };
    let n = storage.length().unwrap_or(0);
    for i in 0..n {
        let Ok(Some(slot)) = storage.key(i) else {
            continue;
        };
        if !is_record_slot(&slot) {
            continue;
        }
        let Ok(Some(text)) = storage.get_item(&slot) else {
            continue;
        };
        if let Ok(record) = Record::from_json(&text) {
            out.push(&entry(&record, record.request.body.len() as f64));
        }
    }
    out
}

/// Every pending submission of the origin in `storage` (`"session"`, the default when left out,
/// `"local"` or `"indexeddb"`, where uploads are kept): `{ name, key, startedAt, attempts, size }`.
/// Anything else is refused (`option`).
#[wasm_bindgen(js_name = listPending, unchecked_return_type = "Promise<PendingEntry[]>")]
pub fn list_pending(
    #[wasm_bindgen(unchecked_optional_param_type = "\"session\" | \"local\" | \"indexeddb\"")]
    storage: Option<JsValue>,
) -> Promise {
    let which = match &storage {
        None => Some("session".to_owned()),
        Some(given) => given.as_string(),
    };
    match which.as_deref() {
        Some("session") => Promise::resolve(&JsValue::from(in_web_storage(false))),
        Some("local") => Promise::resolve(&JsValue::from(in_web_storage(true))),
        Some("indexeddb") => future_to_promise(async move {
            let out = Array::new();
            let Ok(db) = idb::open().await else {
                return Ok(out.into());
            };
            for stored in idb::all(&db).await.unwrap_or_default() {
                if let Ok(record) = Record::from_json(&stored.record) {
                    let files: f64 = stored.files.iter().map(|(_, b)| b.size()).sum();
                    let size = record.request.body.len() as f64 + files;
                    out.push(&entry(&record, size));
                }
            }
            Ok(out.into())
        }),
        _ => Promise::reject(
            &Error::option(
                "listPending(storage): storage must be \"session\", \"local\" or \"indexeddb\"",
            )
            .into(),
        ),
    }
}
