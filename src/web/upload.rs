//! # Uploads
//!
//! A submission whose body has files (`Submitter.submit(formData)`) goes out as
//! `multipart/form-data` with its key, and is kept in IndexedDB (`idb.rs`) before the first
//! byte is sent: the core's record (whose body is the description below) with the fields and
//! the files themselves, in one transaction, removed after a definite answer. The record is
//! written again before each attempt (its attempt count), the fields and files only with the
//! key's first record: a retry does not copy the files' bytes again. A new submitter of the same
//! name, after a reload or with the tab closed and opened again, finds them there together.
//!
//! "Same body" covers the files: the body the core compares and stores is the canonical JSON of
//! `{ fields: {...}, files: [{ field, name, type, size, sha256 }] }`, each file's SHA-256 made by
//! SubtleCrypto, so the same name with another file is refused locally while one is pending.
//! A body over `maxBodyBytes` (25 MB by default) is refused before anything is stored. When
//! IndexedDB cannot be used, the upload is kept in memory with a warning, up to
//! [`MEMORY_FALLBACK_BYTES`]; a larger one is refused rather than sent unprotected.

use std::rc::Rc;

use js_sys::{Array, Function, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{spawn_local, JsFuture};
use web_sys::{Blob, FormData, IdbDatabase};

use super::driver::{Driver, Settlement, Settling};
use super::error::{describe, Error, ErrorCode};
use super::idb::{self, Stored, Why};
use super::options::StorageKind;
use super::warn;
use crate::core::body::{Fields, Value};
use crate::core::text::{decimal, push_hex, LOWER_HEX};
use crate::core::{Key, Record};

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(thread_local_v2, js_name = crypto)]
    static CRYPTO: Option<web_sys::Crypto>;
}

/// The largest upload kept in memory when IndexedDB cannot be used: 5 MiB.
pub const MEMORY_FALLBACK_BYTES: u64 = 5 * 1024 * 1024;

/// The fields and files of an upload.
#[derive(Clone, Default)]
pub(crate) struct Payload {
    fields: Vec<(String, String)>,
    files: Vec<(String, Blob)>,
    /// Its size as `maxBodyBytes` counts it (0 for one taken up from IndexedDB, kept there).
    size: u64,
}

/// Whether IndexedDB was looked at yet, and what it gave.
#[derive(Default)]
enum Db {
    #[default]
    Opening,
    Open(IdbDatabase),
    /// It cannot be used: uploads are kept in memory (the warning was given).
    Failed,
    /// A write failed (a quota met, say): uploads are kept in memory from then on, and the
    /// database is kept only to remove what was written before (a record left after its
    /// definite answer would be taken up by the next page and sent again).
    WritesFailed(IdbDatabase),
}

/// A driver's uploads: its IndexedDB, the pending upload's payload, and whether the driver waits
/// for a write.
#[derive(Default)]
pub(crate) struct Uploads {
    db: Db,
    /// Resolved once IndexedDB was opened and looked at (or could not be).
    ready: Option<Promise>,
    /// The payload of the submission pending (a stored or begun upload).
    payload: Option<Payload>,
    /// The key of the submission `payload` and `json_in_idb` describe (begun here or taken up
    /// from IndexedDB): a record taken up from web storage has neither, and a late `Forget` of
    /// another key leaves them to their own.
    owner: Option<Key>,
    /// The payload of the submission being begun, taken up if the core starts it.
    next: Option<Payload>,
    /// A record is being written: the driver carries out no action until it is.
    pub(crate) blocked: bool,
    /// An upload stored in IndexedDB was taken up at start-up.
    taken_up: bool,
    /// A look at IndexedDB before a begin ([`look_again`]), while it is under way.
    looking_again: Option<Promise>,
    /// The key this submitter last forgot or dropped, whose record may still be on its way out
    /// of IndexedDB: never taken up again.
    forgotten: Option<Key>,
    /// The pending submission is a JSON body found in IndexedDB (written under `storage:
    /// 'indexeddb'` by another page of the origin): kept there, and removed from there.
    json_in_idb: bool,
    /// The key of the submission whose record this driver keeps in IndexedDB (written, being
    /// written, or taken up from there): its `Forget` removes it from there even when another
    /// submission has begun since (a discard, then a submit while the write held the drive).
    in_idb: Option<Key>,
    /// The key `in_idb` replaced (sent as new): its record stays in IndexedDB until the new
    /// key's is put over it, and until then the new key's `Forget` removes a record of either
    /// (another tab may write the old key's record again later: then it is that tab's).
    replaced: Option<Key>,
    /// The key whose record's write has been made and not yet told of.
    writing: Option<Key>,
}

fn db(d: &Driver) -> Option<IdbDatabase> {
    match &d.uploads.borrow().db {
        Db::Open(db) => Some(db.clone()),
        _ => None,
    }
}

/// The database to remove records from: also one whose writes failed.
fn db_to_remove_from(d: &Driver) -> Option<IdbDatabase> {
    match &d.uploads.borrow().db {
        Db::Open(db) | Db::WritesFailed(db) => Some(db.clone()),
        _ => None,
    }
}

fn warn_all(d: &Rc<Driver>, message: String) {
    warn(&message);
    d.warned(message);
}

/// Opens IndexedDB and takes up an upload stored under the submitter's name.
pub(crate) fn start(d: &Rc<Driver>) {
    let mut resolve_ready: Option<Function> = None;
    let ready = Promise::new(&mut |resolve, _| resolve_ready = Some(resolve));
    d.uploads.borrow_mut().ready = Some(ready);
    let d = d.clone();
    spawn_local(async move {
        match idb::open().await {
            Ok(db) => {
                let found = idb::get(&db, &d.name).await;
                d.uploads.borrow_mut().db = Db::Open(db.clone());
                take_up_found(&d, &db, found).await;
            }
            Err(why) => {
                d.uploads.borrow_mut().db = Db::Failed;
                let what = match d.options.storage {
                    StorageKind::IndexedDb => "); submissions are kept in memory",
                    _ => "); uploads are kept in memory",
                };
                warn_all(
                    &d,
                    "IndexedDB cannot be used (".to_owned()
                        + &why
                        + what
                        + " and will not survive a reload",
                );
            }
        }
        if let Some(resolve) = resolve_ready {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
        d.drive();
    });
}

/// Takes up what IndexedDB gave under the submitter's name (`found`): an upload or a JSON body
/// is pending from then on; one that cannot be taken up is removed with a warning.
async fn take_up_found(
    d: &Rc<Driver>,
    db: &IdbDatabase,
    found: Result<Option<Result<Stored, Why>>, Why>,
) {
    match found {
        Ok(Some(Ok(stored))) => {
            // A JSON body (`storage: 'indexeddb'`) has no payload: it is sent as JSON.
            let payload = (!stored.json).then_some(Payload {
                fields: stored.fields,
                files: stored.files,
                size: 0,
            });
            match d.take_up(&stored.record) {
                Ok(true) => {
                    let key = d.pending_key();
                    let mut u = d.uploads.borrow_mut();
                    u.json_in_idb = payload.is_none();
                    u.payload = payload;
                    u.taken_up = true;
                    u.owner = key.clone();
                    u.in_idb = key;
                    u.replaced = None;
                }
                Ok(false) => warn_all(
                    d,
                    "an upload stored in IndexedDB under this name was left there: another submission is pending".into(),
                ),
                Err(why) => {
                    let _ = idb::delete(db, &d.name, &[None, None]).await;
                    warn_all(d, "the upload stored in IndexedDB was removed: ".to_owned() + &why);
                }
            }
        }
        Ok(Some(Err(why))) => {
            let _ = idb::delete(db, &d.name, &[None, None]).await;
            warn_all(
                d,
                "the upload stored in IndexedDB was removed: ".to_owned() + &why,
            );
        }
        Ok(None) => {}
        Err(why) => warn_all(d, "IndexedDB cannot be read (".to_owned() + &why + ")"),
    }
}

/// IndexedDB is the origin's: another tab may have stored a submission under the name since
/// this submitter looked. When nothing is pending here and one of this submitter's submissions
/// would be kept there (`upload`, or `storage: 'indexeddb'`), it looks again before the next
/// begins, and takes up what it finds, as at start-up: the same body then goes on under its
/// key, another is refused (`pending`), and neither writes over the other. What this
/// submitter itself settled and is removing is not taken up. The promise resolves once looked
/// (one look at a time); `None` when there is nothing to look at.
pub(crate) fn look_again(d: &Rc<Driver>, upload: bool) -> Option<Promise> {
    if !upload && d.options.storage != StorageKind::IndexedDb || d.has_pending() {
        return None;
    }
    // An upload being begun looked already (`begin`), and its payload goes with this call.
    if !upload && d.uploads.borrow().next.is_some() {
        return None;
    }
    let db = db(d)?;
    if let Some(looking) = d.uploads.borrow().looking_again.clone() {
        return Some(looking);
    }
    let mut resolve: Option<Function> = None;
    let looked = Promise::new(&mut |r, _| resolve = Some(r));
    d.uploads.borrow_mut().looking_again = Some(looked.clone());
    let d = d.clone();
    spawn_local(async move {
        let found = idb::get(&db, &d.name).await;
        // This driver's own record on its way out: of the key it last forgot, or of the one
        // whose record it keeps there while nothing is pending (ended, its Forget behind a
        // write), or of the key that one replaced.
        let ours = {
            let u = d.uploads.borrow();
            let of = |key: &Option<Key>| match (&found, key) {
                (Ok(Some(Ok(stored))), Some(key)) => Record::is_of_key(&stored.record, key),
                _ => false,
            };
            of(&u.forgotten) || of(&u.in_idb) || of(&u.replaced)
        };
        if !ours && !d.has_pending() {
            take_up_found(&d, &db, found).await;
        }
        d.uploads.borrow_mut().looking_again = None;
        if let Some(resolve) = resolve {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
        d.drive();
    });
    Some(looked)
}

/// IndexedDB's first look, while it is under way, for a submitter that keeps its records there
/// (`storage: 'indexeddb'`): a submission must not begin before a stored one is taken up.
pub(crate) fn looking(d: &Driver) -> Option<Promise> {
    let u = d.uploads.borrow();
    match (d.options.storage, &u.db) {
        (StorageKind::IndexedDb, Db::Opening) => u.ready.clone(),
        _ => None,
    }
}

/// The core began the submission being begun: its payload is the pending one's, and it was not
/// found in IndexedDB.
pub(crate) fn started(d: &Driver) {
    let key = d.pending_key();
    let mut u = d.uploads.borrow_mut();
    u.payload = u.next.take();
    u.json_in_idb = false;
    u.owner = key;
}

/// Whether the pending record is IndexedDB's to keep: an upload's, any under `storage:
/// 'indexeddb'`, and a JSON body found there. Otherwise the driver writes it to its web storage.
pub(crate) fn keeps(d: &Driver) -> bool {
    let u = d.uploads.borrow();
    u.payload.is_some() || d.options.storage == StorageKind::IndexedDb || u.json_in_idb
}

/// `Persist` of a record IndexedDB keeps ([`keeps`]), of the pending submission's `key` (the
/// driver writes no other): writes the record, with its payload where it is not stored yet
/// (none for a JSON body), in one IndexedDB transaction ([`idb::put`]), once IndexedDB was
/// looked at, and blocks the driver until it has committed. With `only_of`, the record is
/// rewritten only where the stored one is still of that key (see `Driver::drive`).
pub(crate) fn persist(d: &Rc<Driver>, record: String, key: Key, only_of: Option<Key>) {
    let (payload, ready) = {
        let mut u = d.uploads.borrow_mut();
        u.blocked = true;
        // A key that replaced another keeps `replaced` until its own record is over the
        // other's.
        if u.in_idb.as_ref() != Some(&key) {
            u.replaced = None;
        }
        u.in_idb = Some(key.clone());
        (u.payload.clone(), u.ready.clone())
    };
    // Too large to be kept in memory should its write fail (`begin` refuses it where IndexedDB
    // cannot be used at all).
    let too_large = payload
        .as_ref()
        .is_some_and(|p| p.size > MEMORY_FALLBACK_BYTES);
    let d = d.clone();
    spawn_local(async move {
        if let Some(ready) = ready {
            let _ = JsFuture::from(ready).await;
        }
        // None: in memory only (the warning was given when IndexedDB failed). Whether the
        // record was put.
        let written = match db(&d) {
            Some(db) if !still_of(&db, &d.name, only_of.as_ref()).await => Ok(false),
            // Ended (or replaced) meanwhile: its record was removed already (see `ended`), and
            // is not written back.
            Some(_) if d.pending_key().as_ref() != Some(&key) => Ok(false),
            Some(db) => {
                let stored = match payload {
                    Some(p) => Stored {
                        record,
                        fields: p.fields,
                        files: p.files,
                        json: false,
                    },
                    None => Stored {
                        record,
                        fields: Vec::new(),
                        files: Vec::new(),
                        json: true,
                    },
                };
                d.uploads.borrow_mut().writing = Some(key.clone());
                let put = idb::put(&db, &d.name, &key, &stored).await;
                d.uploads.borrow_mut().writing = None;
                put.map(|()| true)
            }
            None => Ok(false),
        };
        {
            let mut u = d.uploads.borrow_mut();
            u.blocked = false;
            match &written {
                Ok(true) if u.in_idb.as_ref() == Some(&key) => u.replaced = None,
                Err(_) => {
                    u.db = match ::core::mem::take(&mut u.db) {
                        Db::Open(db) => Db::WritesFailed(db),
                        other => other,
                    }
                }
                _ => {}
            }
        }
        if let Err(why) = written {
            if too_large {
                // Its Send is still queued behind this write: dropped with it, never sent.
                let error = not_kept_in_memory(&("IndexedDB failed (".to_owned() + &why + "), "));
                warn_all(&d, error.message().to_owned());
                d.drop_pending(error);
                return;
            }
            warn_all(
                &d,
                "IndexedDB failed (".to_owned()
                    + &why
                    + "); this submission is kept in memory and will not survive a reload",
            );
        }
        d.drive();
    });
}

/// `Forget` of `key`: the upload's record and files (or the record kept by `storage:
/// 'indexeddb'`) are removed, unless another writer stored its own submission under the name
/// since (IndexedDB is the origin's: another tab's upload, pending, stays). When another
/// submission of this driver has begun since (a discard, then a submit while a write held the
/// drive), the payload is that one's and stays, and its record, written after, is not removed.
pub(crate) fn forget(d: &Driver, key: &Key) {
    let pending = d.pending_key();
    let kept = {
        let mut u = d.uploads.borrow_mut();
        let kept = (u.in_idb.as_ref() == Some(key)).then(|| {
            u.in_idb = None;
            [Some(key.clone()), u.replaced.take()]
        });
        u.forgotten = Some(key.clone());
        // Kept only when they are the submission pending now, begun or taken up from
        // IndexedDB since this one (a record taken up from web storage, or the one sent as new
        // in an upload's place, has none of its own).
        if u.owner.is_none() || u.owner != pending || u.owner.as_ref() == Some(key) {
            // A JSON body found there too: settled here, it was resent on every load ever
            // after.
            u.json_in_idb = false;
            u.payload = None;
            u.owner = None;
        }
        kept
    };
    if let Some(keys) = kept {
        remove(d, keys);
    }
}

/// The submission of `key` ended (answered, discarded), or was replaced by `now` (sent as new):
/// its record, on its way out of IndexedDB once its `Forget` is carried out (perhaps after a
/// write under way), is never taken up again meanwhile; its files, sent again as new, are the
/// new key's.
///
/// Ended while a write holds its `Forget` back, its record is removed at once as well: only
/// this driver knows the submission ended, and another tab (or submitter of the name) that
/// looked at IndexedDB before the late `Forget` would take the record up and send it. IndexedDB
/// carries out `readwrite` transactions of one store in the order they were made, so this
/// removal comes after a write of the record already under way, and before anything looked at
/// from now on; a write not begun yet is not made (see [`persist`]). The key it replaced (sent
/// as new) goes too only while its own record's write is not made: once it is, what is stored
/// after it under the old key is another writer's.
pub(crate) fn ended(d: &Driver, key: &Key, now: Option<Key>) {
    let removal = {
        let mut u = d.uploads.borrow_mut();
        u.forgotten = Some(key.clone());
        match now {
            Some(now) => {
                if u.owner.as_ref() == Some(key) {
                    u.owner = Some(now.clone());
                }
                // Its record is this driver's to remove until the new key's is written over it
                // (a discard may come first).
                if u.in_idb.as_ref() == Some(key) {
                    u.in_idb = Some(now);
                    u.replaced = Some(key.clone());
                }
                None
            }
            // Kept while the page unloads, as the driver keeps a record then (`Driver::drive`).
            None if d.unloading() => None,
            None => (u.blocked && u.in_idb.as_ref() == Some(key)).then(|| {
                let replaced = u.replaced.clone();
                [
                    Some(key.clone()),
                    replaced.filter(|_| u.writing.as_ref() != Some(key)),
                ]
            }),
        }
    };
    if let Some(keys) = removal {
        remove(d, keys);
    }
}

/// Removes this driver's record of one of `keys` from IndexedDB (another writer's stays, see
/// [`idb::delete`]). Its transaction is made in a task spawned now, so it comes before those of
/// any IndexedDB call spawned after it.
fn remove(d: &Driver, keys: [Option<Key>; 2]) {
    if let Some(db) = db_to_remove_from(d) {
        let name = d.name.clone();
        spawn_local(async move {
            let _ = idb::delete(&db, &name, &keys).await;
        });
    }
}

/// Whether the record stored under `name` is of `key` (`true` when no key is asked about).
async fn still_of(db: &IdbDatabase, name: &str, key: Option<&Key>) -> bool {
    let Some(key) = key else { return true };
    matches!(idb::get(db, name).await, Ok(Some(Ok(stored))) if Record::is_of_key(&stored.record, key))
}

/// Whether the submission being begun is an upload.
pub(crate) fn begins(d: &Driver) -> bool {
    d.uploads.borrow().next.is_some()
}

/// The body of an upload's attempt, or `None` when the submission is no upload.
pub(crate) fn form_data(d: &Driver) -> Option<FormData> {
    let u = d.uploads.borrow();
    let payload = u.payload.as_ref()?;
    let form = FormData::new().ok()?;
    for (name, value) in &payload.fields {
        let _ = form.append_with_str(name, value);
    }
    // The secrets (a password, a card number), from memory: never in IndexedDB.
    for (name, value) in d.secrets().iter() {
        let values = match value {
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            v => v.as_str().into_iter().collect::<Vec<_>>(),
        };
        for v in values {
            let _ = form.append_with_str(name, v);
        }
    }
    for (name, blob) in &payload.files {
        let _ = form.append_with_blob_and_filename(name, blob, &file_name(blob));
    }
    Some(form)
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        push_hex(&mut out, *b, LOWER_HEX);
    }
    out
}

/// The name a blob goes out under: a `File`'s own, else "blob" (as `FormData` names it).
fn file_name(blob: &Blob) -> String {
    match is_file(blob) {
        true => super::text(blob, "name").unwrap_or_default(),
        false => "blob".into(),
    }
}

/// `value`'s class as `Object.prototype.toString` names it (`File`, `Blob`): unlike
/// `instanceof` (`dyn_into`), it knows an object made in another frame, as a form of an iframe
/// holds.
fn class_of(value: &JsValue) -> Option<String> {
    value.is_object().then(|| {
        let tag: String = value.unchecked_ref::<js_sys::Object>().to_string().into();
        tag.strip_prefix("[object ")
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or_default()
            .to_owned()
    })
}

/// `value` as a `Blob` (a `File` too), of this realm or another frame's.
fn as_blob(value: JsValue) -> Option<Blob> {
    matches!(class_of(&value).as_deref(), Some("Blob" | "File")).then(|| value.unchecked_into())
}

fn is_file(blob: &Blob) -> bool {
    class_of(blob).as_deref() == Some("File")
}

/// The SHA-256 of a blob's bytes, by SubtleCrypto.
async fn sha256(blob: &Blob) -> Result<String, String> {
    let subtle = CRYPTO
        .with(|c| c.as_ref().map(|c| c.subtle()))
        .ok_or_else(|| "this context has no crypto.subtle".to_owned())?;
    let bytes = JsFuture::from(blob.array_buffer())
        .await
        .map_err(|e| "the file cannot be read: ".to_owned() + &describe(&e))?;
    let digest = subtle
        .digest_with_str_and_buffer_source("SHA-256", &bytes.into())
        .map_err(|e| describe(&e))?;
    let digest = JsFuture::from(digest).await.map_err(|e| describe(&e))?;
    Ok(hex(&Uint8Array::new(&digest).to_vec()))
}

/// Reads `form`'s entries, refusing a body over `max` bytes.
fn entries(form: &FormData, max: u64) -> Result<(Payload, u64), Error> {
    let mut payload = Payload::default();
    let mut size: u64 = 0;
    // Its [name, value] pairs, by Array.from (leaner than the iterator protocol in wasm).
    for entry in Array::from(form).iter() {
        let entry: Array = entry.unchecked_into();
        let name = entry.get(0).as_string().unwrap_or_default();
        let value = entry.get(1);
        if let Some(text) = value.as_string() {
            size += (name.len() + text.len()) as u64;
            payload.fields.push((name, text));
        } else if let Some(blob) = as_blob(value) {
            // A file input left empty: an empty file with no name, which is no file.
            if blob.size() == 0.0 && is_file(&blob) && file_name(&blob).is_empty() {
                continue;
            }
            size += blob.size() as u64 + name.len() as u64;
            payload.files.push((name, blob));
        }
        if size > max {
            return Err(Error::body(
                "the body is larger than options.maxBodyBytes (".to_owned()
                    + &decimal(max)
                    + " bytes); nothing was stored or sent",
            ));
        }
    }
    payload.size = size;
    Ok((payload, size))
}

/// The description the core stores and compares: fields, and each file's field, name, type,
/// size and SHA-256.
async fn describe_body(payload: &Payload) -> Result<String, Error> {
    let mut fields = Fields::new();
    for (name, value) in &payload.fields {
        fields.append(name.clone(), Value::String(value.clone()));
    }
    let mut files = Vec::new();
    for (field, blob) in &payload.files {
        let sha = sha256(blob)
            .await
            .map_err(|why| Error::body("a file cannot be hashed: ".to_owned() + &why))?;
        let mut f = Fields::new();
        f.insert("field".into(), Value::String(field.clone()));
        f.insert("name".into(), Value::String(file_name(blob)));
        f.insert("type".into(), Value::String(blob.type_()));
        f.insert("size".into(), Value::Number(decimal(blob.size() as u64)));
        f.insert("sha256".into(), Value::String(sha));
        files.push(Value::Object(f));
    }
    let mut body = Fields::new();
    body.insert("fields".into(), Value::Object(fields));
    body.insert("files".into(), Value::Array(files));
    Ok(Value::Object(body).to_canonical())
}

impl super::Submitter {
    /// Whether IndexedDB was asked for (`storage: 'indexeddb'`) and could not be used.
    pub(crate) fn indexeddb_failed(&self) -> bool {
        matches!(
            self.driver().uploads.borrow().db,
            Db::Failed | Db::WritesFailed(_)
        )
    }

    /// Calls `f` once IndexedDB was looked at, with whether an upload stored there was taken
    /// up (it is pending then).
    pub(crate) fn when_loaded(&self, f: impl FnOnce(bool) + 'static) {
        let driver = self.driver().clone();
        let ready = driver.uploads.borrow().ready.clone();
        spawn_local(async move {
            if let Some(ready) = ready {
                let _ = JsFuture::from(ready).await;
            }
            let taken_up = driver.uploads.borrow().taken_up;
            f(taken_up);
        });
    }

    /// Sends `form` (fields and files, as `FormData`) once as `multipart/form-data`, kept in
    /// IndexedDB with its files until a definite answer (see the module docs). Refused with
    /// [`ErrorCode::Body`] over [`Options::max_body_bytes`](super::Options::max_body_bytes)
    /// before anything is stored; another upload pending under this name is
    /// [`ErrorCode::Pending`], as for [`submit`](super::Submitter::submit).
    pub fn submit_form(
        &self,
        form: FormData,
    ) -> impl ::core::future::Future<Output = Result<Settlement, Error>> {
        submit(self.driver().clone(), form)
    }
}

/// Sends `form` once as `multipart/form-data` (see the module docs).
pub(crate) async fn submit(d: Rc<Driver>, form: FormData) -> Result<Settlement, Error> {
    begin(d, form).await?.await
}

/// Reads, checks and hashes `form`, then begins it: the wait for its settlement.
pub(crate) async fn begin(d: Rc<Driver>, form: FormData) -> Result<Settling, Error> {
    let (payload, size) = entries(&form, d.options.max_body_bytes)?;
    let ready = d.uploads.borrow().ready.clone();
    if let Some(ready) = ready {
        let _ = JsFuture::from(ready).await;
    }
    if let Some(looked) = look_again(&d, true) {
        let _ = JsFuture::from(looked).await;
    }
    if db(&d).is_none() && size > MEMORY_FALLBACK_BYTES {
        return Err(not_kept_in_memory("IndexedDB cannot be used here, "));
    }
    let text = describe_body(&payload).await?;
    d.uploads.borrow_mut().next = Some(payload);
    let settling = d.submit(&text);
    d.uploads.borrow_mut().next = None;
    Ok(settling)
}

/// The refusal of an upload over [`MEMORY_FALLBACK_BYTES`] that IndexedDB cannot keep, after
/// `why` ("IndexedDB cannot be used here, ").
fn not_kept_in_memory(why: &str) -> Error {
    Error::new(
        ErrorCode::Body,
        why.to_owned()
            + "and a body of more than "
            + &decimal(MEMORY_FALLBACK_BYTES)
            + " bytes is not kept in memory: it was not sent, rather than sent unprotected",
    )
}
