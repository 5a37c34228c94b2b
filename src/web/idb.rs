//! # IndexedDB
//!
//! The storage that outlives the tab and holds bytes (CONTRACT.md section 5): one database,
//! `oncekey`, with one object store, `pending`. Under a submission's name, the record's JSON
//! text (`{ record }`); under `[name]` (a key no name is), an upload's fields and files
//! (`{ fields: [[name, text]], files: [[name, File]] }`, the files as the `Blob`s themselves,
//! structured-cloned by the browser, which copies their bytes at each put). The record is
//! written before every attempt, the files once per key: with the first record of the key, in
//! its transaction, and never again while the record stored is that key's (a key's body never
//! changes). A JSON body kept here by `storage: 'indexeddb'` has its (empty) lists in its value,
//! with `json: true`; so had an upload's files in the release before (`{ record, fields, files
//! }` under the name), which is still read, and replaced by the two at its next write. Every
//! write and removal is one `readwrite` transaction that leaves a record with its files, and
//! a write counts only once that transaction has completed. IndexedDB is reached through
//! web-sys, bound to the global scope (a worker has it too); each request becomes a promise
//! whose `resolve` and `reject` are its `onsuccess` and `onerror` handlers, so no closure
//! outlives it.

use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{IdbDatabase, IdbObjectStore, IdbRequest, IdbTransactionMode};

use super::error::describe;
use crate::core::{Key, Record};

const DATABASE: &str = "oncekey";
const STORE: &str = "pending";

/// Why IndexedDB could not be used, in words for a warning.
pub(crate) type Why = String;

/// How long an open may take before IndexedDB is given up for memory (with a warning): an
/// open waits behind another page's deletion or upgrade of the database for as long as any
/// connection to it stays open, which may be for ever.
const OPEN_WITHIN_MS: i32 = 10_000;

/// The promise of `r`: resolved when it succeeds, rejected when it fails.
fn promise(r: &IdbRequest) -> Promise {
    Promise::new(&mut |resolve: Function, reject: Function| {
        r.set_onsuccess(Some(&resolve));
        r.set_onerror(Some(&reject));
    })
}

/// The request's result once it succeeded.
async fn request(r: &IdbRequest) -> Result<JsValue, Why> {
    JsFuture::from(promise(r)).await.map_err(|e| describe(&e))?;
    r.result().map_err(|e| describe(&e))
}

/// A promise rejected with `why` after `ms` milliseconds (the global's `setTimeout`, a
/// window's or a worker's); one that never settles where there is none.
fn rejected_after(ms: i32, why: &str) -> Promise {
    let why = JsValue::from_str(why);
    Promise::new(&mut |_, reject: Function| {
        let set_timeout = Reflect::get(&js_sys::global(), &JsValue::from_str("setTimeout"))
            .ok()
            .and_then(|f| f.dyn_into::<Function>().ok());
        if let Some(set_timeout) = set_timeout {
            let _ = set_timeout.call2(
                &JsValue::UNDEFINED,
                &reject.bind1(&JsValue::UNDEFINED, &why),
                &JsValue::from(ms),
            );
        }
    })
}

thread_local! {
    /// Closes the database its event is about: on `versionchange` (another page deletes the
    /// database or opens a newer version of it, which waits until every connection is closed,
    /// and every later open waits behind it), and on the late `success` of an open given up
    /// on. The next use of a closed connection fails, and the submission goes on in memory.
    static CLOSE: Closure<dyn FnMut(web_sys::Event)> = Closure::new(|event: web_sys::Event| {
        let target = event.target().map(JsValue::from);
        let db = target.and_then(|t| match t.dyn_into::<IdbDatabase>() {
            Ok(db) => Some(db),
            Err(t) => t
                .dyn_into::<IdbRequest>()
                .ok()
                .and_then(|r| r.result().ok())
                .and_then(|r| r.dyn_into::<IdbDatabase>().ok()),
        });
        if let Some(db) = db {
            db.close();
        }
    });
}

/// The database, created at its first use.
pub(crate) async fn open() -> Result<IdbDatabase, Why> {
    // Looked up at each open, not bound once: a page (or a test) may block it later.
    let factory = Reflect::get(&js_sys::global(), &JsValue::from_str("indexedDB"))
        .map_err(|e| describe(&e))?
        .dyn_into::<web_sys::IdbFactory>()
        .map_err(|_| "this context has no indexedDB".to_owned())?;
    let opening = factory
        .open_with_u32(DATABASE, 1)
        .map_err(|e| describe(&e))?;
    let upgrade = Closure::once(move |event: web_sys::Event| {
        let db = event
            .target()
            .and_then(|t| t.dyn_into::<IdbRequest>().ok())
            .and_then(|r| r.result().ok())
            .and_then(|r| r.dyn_into::<IdbDatabase>().ok());
        if let Some(db) = db {
            if !db.object_store_names().contains(STORE) {
                let _ = db.create_object_store(STORE);
            }
        }
    });
    opening.set_onupgradeneeded(Some(upgrade.as_ref().unchecked_ref()));
    let within = rejected_after(
        OPEN_WITHIN_MS,
        "indexedDB.open did not finish within 10 s: another page holds the database",
    );
    let opened = JsFuture::from(Promise::race(&Array::of2(&promise(&opening), &within))).await;
    if opened.is_err() {
        // A late open is closed as it succeeds (having made the store, if it upgrades: the
        // closure stays for it).
        CLOSE.with(|close| opening.set_onsuccess(Some(close.as_ref().unchecked_ref())));
        upgrade.forget();
    } else {
        opening.set_onupgradeneeded(None);
        drop(upgrade);
    }
    opened.map_err(|e| describe(&e))?;
    let db = opening
        .result()
        .map_err(|e| describe(&e))?
        .dyn_into::<IdbDatabase>()
        .map_err(|_| "indexedDB.open gave no database".to_owned())?;
    // Never in the way of another page's deletion or upgrade of the database.
    CLOSE.with(|close| db.set_onversionchange(Some(close.as_ref().unchecked_ref())));
    Ok(db)
}

fn store(
    db: &IdbDatabase,
    mode: IdbTransactionMode,
) -> Result<(web_sys::IdbTransaction, IdbObjectStore), Why> {
    let tx = db
        .transaction_with_str_and_mode(STORE, mode)
        .map_err(|e| describe(&e))?;
    let store = tx.object_store(STORE).map_err(|e| describe(&e))?;
    Ok((tx, store))
}

/// Resolves once `tx` has committed; rejects when it failed or was aborted.
async fn committed(tx: &web_sys::IdbTransaction) -> Result<(), Why> {
    let done = Promise::new(&mut |resolve: Function, reject: Function| {
        tx.set_oncomplete(Some(&resolve));
        tx.set_onerror(Some(&reject));
        tx.set_onabort(Some(&reject));
    });
    let result = JsFuture::from(done).await.map(|_| ());
    tx.set_oncomplete(None);
    tx.set_onerror(None);
    tx.set_onabort(None);
    result.map_err(|e| match tx.error() {
        Some(dom) => dom.name() + ": " + &dom.message(),
        None => describe(&e),
    })
}

/// One stored submission: its record's JSON text, its text fields, and its files.
#[derive(Clone)]
pub(crate) struct Stored {
    pub(crate) record: String,
    pub(crate) fields: Vec<(String, String)>,
    pub(crate) files: Vec<(String, web_sys::Blob)>,
    /// A JSON body kept here (`storage: 'indexeddb'`), no upload: `json: true` in the value.
    pub(crate) json: bool,
}

fn pairs<T: Into<JsValue> + Clone>(items: &[(String, T)]) -> Array {
    items
        .iter()
        .map(|(n, v)| Array::of2(&JsValue::from_str(n), &v.clone().into()))
        .collect()
}

/// Where an upload's fields and files stored under `name` are kept: `[name]`.
fn payload_key(name: &str) -> JsValue {
    Array::of1(&JsValue::from_str(name)).into()
}

/// Writes `value`, the record of `key`, under `name` in one transaction, done once it has
/// committed. An upload's fields and files are written only where the record stored is not
/// already `key`'s with them apart (`[name]`).
pub(crate) async fn put(
    db: &IdbDatabase,
    name: &str,
    key: &Key,
    value: &Stored,
) -> Result<(), Why> {
    let (tx, store) = store(db, IdbTransactionMode::Readwrite)?;
    let at = payload_key(name);
    let name = JsValue::from_str(name);
    // Looked at in this transaction (see `delete`): a record of `key` written apart from its
    // files has had them beside it since the write that put both.
    let with_files = value.json || {
        let found = request(&store.get(&name).map_err(|e| describe(&e))?).await?;
        !super::get(&found, "files").is_undefined()
            || !super::text(&found, "record").is_some_and(|r| Record::is_of_key(&r, key))
    };
    let set = |o: &Object, k: &str, v: &JsValue| {
        let _ = Reflect::set(o, &JsValue::from_str(k), v);
    };
    let record = Object::new();
    set(&record, "record", &JsValue::from_str(&value.record));
    if with_files {
        // A JSON body's value carries its (empty) lists itself.
        let lists = match value.json {
            true => record.clone(),
            false => Object::new(),
        };
        set(&lists, "fields", &pairs(&value.fields));
        set(&lists, "files", &pairs(&value.files));
        match value.json {
            true => {
                set(&record, "json", &JsValue::TRUE);
                // An upload's files this record is written over.
                store.delete(&at)
            }
            false => store.put_with_key(&lists, &at),
        }
        .map_err(|e| describe(&e))?;
    }
    store
        .put_with_key(&record, &name)
        .map_err(|e| describe(&e))?;
    committed(&tx).await
}

/// Removes what is stored under `name` (and its files under `[name]`); with keys, unless it is
/// a record of none of them, looked at and removed in one transaction: a record written after
/// this call (the next submission's, begun at once) is never the one removed.
pub(crate) async fn delete(
    db: &IdbDatabase,
    name: &str,
    keys: &[Option<Key>; 2],
) -> Result<(), Why> {
    let (tx, store) = store(db, IdbTransactionMode::Readwrite)?;
    let at = payload_key(name);
    let name = JsValue::from_str(name);
    if keys.iter().any(Option::is_some) {
        // The transaction stays active while the request's success is handled, and the
        // promise's continuation (a microtask) runs within that: the removal below joins it.
        let found = request(&store.get(&name).map_err(|e| describe(&e))?).await?;
        if let Some(record) = super::text(&found, "record") {
            if !keys
                .iter()
                .flatten()
                .any(|key| Record::is_of_key(&record, key))
            {
                return Ok(());
            }
        }
    }
    store.delete(&name).map_err(|e| describe(&e))?;
    store.delete(&at).map_err(|e| describe(&e))?;
    committed(&tx).await
}

/// What is stored under `name`: `Ok(None)` when nothing is, `Err` with why when it cannot be
/// read (the caller removes it with a warning).
pub(crate) async fn get(db: &IdbDatabase, name: &str) -> Result<Option<Result<Stored, Why>>, Why> {
    let (_tx, store) = store(db, IdbTransactionMode::Readonly)?;
    get_in(&store, name).await
}

/// [`get`] in `store`'s transaction: the record and its files, read together.
async fn get_in(store: &IdbObjectStore, name: &str) -> Result<Option<Result<Stored, Why>>, Why> {
    let get = |key: &JsValue| store.get(key).map_err(|e| describe(&e));
    let found = request(&get(&JsValue::from_str(name))?).await?;
    if found.is_undefined() || found.is_null() {
        return Ok(None);
    }
    // Apart under `[name]`; inline in a value written before they were (an upgrade of the
    // package still takes that upload up).
    let lists = match super::get(&found, "files").is_undefined() {
        true => request(&get(&payload_key(name))?).await?,
        false => found.clone(),
    };
    Ok(Some(read(&found, &lists)))
}

/// The stored value `found`, with its fields and files read from `lists`.
fn read(found: &JsValue, lists: &JsValue) -> Result<Stored, Why> {
    let record = super::get(found, "record")
        .as_string()
        .ok_or_else(|| "it has no record text".to_owned())?;
    let list = |k: &str| -> Result<Vec<(String, JsValue)>, Why> {
        let Ok(array) = super::get(lists, k).dyn_into::<Array>() else {
            return Err("its ".to_owned() + k + " are not a list");
        };
        array
            .iter()
            .map(|pair| {
                let pair: Array = pair
                    .dyn_into()
                    .map_err(|_| "a pair is not a list".to_owned())?;
                let name = pair
                    .get(0)
                    .as_string()
                    .ok_or_else(|| "a name is not text".to_owned())?;
                Ok((name, pair.get(1)))
            })
            .collect()
    };
    let fields = list("fields")?
        .into_iter()
        .map(|(n, v)| {
            v.as_string()
                .map(|v| (n, v))
                .ok_or_else(|| "a field is not text".to_owned())
        })
        .collect::<Result<_, _>>()?;
    let files = list("files")?
        .into_iter()
        .map(|(n, v)| {
            v.dyn_into::<web_sys::Blob>()
                .map(|b| (n, b))
                .map_err(|_| "a file is not a Blob".to_owned())
        })
        .collect::<Result<_, _>>()?;
    Ok(Stored {
        record,
        fields,
        files,
        json: super::get(found, "json").is_truthy(),
    })
}

/// Everything stored, readable or not (an unreadable value is left out).
#[cfg(feature = "js")]
pub(crate) async fn all(db: &IdbDatabase) -> Result<Vec<Stored>, Why> {
    let (_tx, store) = store(db, IdbTransactionMode::Readonly)?;
    let names = request(&store.get_all_keys().map_err(|e| describe(&e))?).await?;
    let mut all = Vec::new();
    // The names' records (each with its files), not the `[name]` entries of files.
    for name in Array::from(&names).iter().filter_map(|n| n.as_string()) {
        if let Ok(Some(Ok(stored))) = get_in(&store, &name).await {
            all.push(stored);
        }
    }
    Ok(all)
}
