//! Uploads in headless Chromium against the reference server (faults on): `submit(formData)`
//! sends `multipart/form-data` with the key, keeps fields and files in IndexedDB until a
//! definite answer, and a new submitter of the same name finds a pending upload there.
//!
//! Run by `scripts/test-web.sh` (server address in `ONCEKEY_TEST_SERVER` at compile time). A spy
//! around `fetch` records each keyed attempt's key and status and adds a planned `X-Fault`.
#![cfg(target_arch = "wasm32")]

use js_sys::{Promise, Reflect, JSON};
use oncekey::js::Submitter;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{wasm_bindgen_test as test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

mod web_support;
use web_support::*;

#[wasm_bindgen(inline_js = r#"
export function spy_install() {
  if (globalThis.__oncekeyUploadSpy) return;
  const real = globalThis.fetch.bind(globalThis);
  const spy = { plans: new Map(), seen: [], holds: new Map() };
  globalThis.__oncekeyUploadSpy = spy;
  globalThis.fetch = async (input, init) => {
    let req = new Request(input, init);
    const tenant = req.headers.get('x-tenant');
    const entry = { tenant, key: req.headers.get('idempotency-key'), status: null,
                    type: req.headers.get('content-type') };
    if (entry.key !== null) {
      spy.seen.push(entry);
      entry.body = await req.clone().text().catch(() => '');
      const plan = spy.plans.get(tenant);
      const fault = plan && plan.length ? plan.shift() : null;
      if (fault) {
        const headers = new Headers(req.headers);
        headers.set('x-fault', fault);
        req = new Request(req, { headers });
      }
    }
    try {
      const res = await real(req);
      entry.status = res.status;
      const hold = entry.key !== null && spy.holds.get(tenant);
      if (hold) await hold;
      return res;
    } catch (e) {
      entry.status = 'error';
      throw e;
    }
  };
}
export function spy_plan(tenant, faults) { globalThis.__oncekeyUploadSpy.plans.set(tenant, faults); }
// Holds back the answers of `tenant`'s keyed requests until the function given back is called.
export function spy_hold(tenant) {
  let release;
  globalThis.__oncekeyUploadSpy.holds.set(tenant, new Promise((r) => (release = r)));
  return () => { globalThis.__oncekeyUploadSpy.holds.delete(tenant); release(); };
}
export function network_event(kind) { globalThis.dispatchEvent(new Event(kind)); }
export function spy_seen(tenant) {
  return globalThis.__oncekeyUploadSpy.seen.filter((e) => e.tenant === tenant);
}
export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }
// A file of `size` bytes, not text, the same for the same seed.
export function file_bytes(size, seed) {
  const b = new Uint8Array(size);
  for (let i = 0; i < size; i++) b[i] = (i * 7 + seed * 13 + (i >> 8)) & 255;
  return b;
}
export function ticket_form(bytes, name, type) {
  const f = new FormData();
  f.append('subject', 'Printer on fire');
  f.append('body', 'Screenshot attached');
  f.append('email', 'ana@example.com');
  f.append('attachment', new File([bytes], name, { type }));
  return f;
}
export async function sha256_hex(bytes) {
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
  return Array.from(d, (b) => b.toString(16).padStart(2, '0')).join('');
}
export async function tickets(server, tenant) {
  const r = await fetch(server + '/api/tickets', { headers: { 'X-Tenant': tenant } });
  return r.json();
}
// What oncekey keeps in IndexedDB under `name` (its record) and `[name]` (an upload's fields
// and files) as one value `{ record, fields, files }`, or null when there is neither.
export function idb_get(name) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open('oncekey', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('pending');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const store = open.result.transaction('pending').objectStore('pending');
      const get = store.get(name), files = store.get([name]);
      files.onsuccess = () => {
        const [v, f] = [get.result, files.result];
        resolve(v === undefined && f === undefined ? null : { ...f, ...v });
        open.result.close();
      };
      files.onerror = () => reject(files.error);
    };
  });
}
// Runs `change(store)` in one readwrite transaction of oncekey's store; resolves once it has
// committed.
function in_pending(change) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open('oncekey', 1);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const tx = open.result.transaction('pending', 'readwrite');
      change(tx.objectStore('pending'));
      tx.oncomplete = () => { open.result.close(); resolve(); };
      tx.onerror = () => reject(tx.error);
    };
  });
}
// As the release before the files had their own entry wrote an upload: its fields and files
// inline in the value under `name`, nothing under `[name]`.
export function idb_inline(name) {
  return in_pending((store) => {
    const get = store.get(name), files = store.get([name]);
    files.onsuccess = () => {
      store.put({ ...get.result, ...files.result }, name);
      store.delete([name]);
    };
  });
}
// Counts the IndexedDB puts under `name` (or `[name]`) of a value that carries a Blob, until
// `undo_count_file_writes`.
export function count_file_writes(name) {
  const proto = IDBObjectStore.prototype;
  const put = globalThis.__oncekeyRealPut || proto.put;
  globalThis.__oncekeyRealPut = put;
  globalThis.__oncekeyFileWrites = 0;
  const blob = (v, depth) => v instanceof Blob
    || (depth < 4 && v !== null && typeof v === 'object' && Object.values(v).some((x) => blob(x, depth + 1)));
  proto.put = function (value, key) {
    const ours = key === name || (Array.isArray(key) && key[0] === name);
    if (ours && blob(value, 0)) globalThis.__oncekeyFileWrites++;
    return put.apply(this, arguments);
  };
}
export function file_writes() { return globalThis.__oncekeyFileWrites; }
export function undo_count_file_writes() { IDBObjectStore.prototype.put = globalThis.__oncekeyRealPut; }
// Another tab's write: the value under `name` with its record's key `from` made `to`; or, with
// `to` null, the value deleted (with the files kept apart under `[name]`).
export function idb_rekey(name, from, to) {
  return in_pending((store) => {
    const get = store.get(name);
    get.onsuccess = () => {
      if (to == null) { store.delete(name); store.delete([name]); }
      else store.put({ ...get.result, record: get.result.record.replace(from, to) }, name);
    };
  });
}
// IndexedDB that tells of each commit `ms` late, as on a slow disk: a transaction's complete
// handler is called `ms` after it committed. Gives back the function that undoes it.
export function slow_idb_commits(ms) {
  const proto = IDBTransaction.prototype;
  const desc = Object.getOwnPropertyDescriptor(proto, 'oncomplete');
  Object.defineProperty(proto, 'oncomplete', {
    configurable: true,
    get() { return desc.get.call(this); },
    set(f) { desc.set.call(this, typeof f === 'function' ? (e) => setTimeout(() => f(e), ms) : f); },
  });
  return () => Object.defineProperty(proto, 'oncomplete', desc);
}
export function block_indexeddb() {
  const desc = Object.getOwnPropertyDescriptor(globalThis, 'indexedDB')
    || Object.getOwnPropertyDescriptor(Object.getPrototypeOf(globalThis), 'indexedDB');
  Object.defineProperty(globalThis, 'indexedDB', {
    configurable: true,
    get() { throw new DOMException('The user denied permission to access the database.', 'SecurityError'); },
  });
  return () => { delete globalThis.indexedDB; if (!('indexedDB' in globalThis)) Object.defineProperty(globalThis, 'indexedDB', desc); };
}
"#)]
extern "C" {
    fn spy_install();
    fn spy_plan(tenant: &str, faults: Vec<JsValue>);
    fn spy_hold(tenant: &str) -> js_sys::Function;
    fn network_event(kind: &str);
    fn spy_seen(tenant: &str) -> js_sys::Array;
    fn sleep(ms: u32) -> Promise;
    fn file_bytes(size: u32, seed: u32) -> js_sys::Uint8Array;
    fn ticket_form(bytes: &js_sys::Uint8Array, name: &str, media_type: &str) -> web_sys::FormData;
    fn sha256_hex(bytes: &js_sys::Uint8Array) -> Promise;
    fn tickets(server: &str, tenant: &str) -> Promise;
    fn idb_get(name: &str) -> Promise;
    fn idb_inline(name: &str) -> Promise;
    fn count_file_writes(name: &str);
    fn file_writes() -> u32;
    fn undo_count_file_writes();
    fn idb_rekey(name: &str, from: &str, to: Option<String>) -> Promise;
    fn block_indexeddb() -> js_sys::Function;
    fn slow_idb_commits(ms: u32) -> js_sys::Function;
}

struct Case {
    tenant: String,
    name: String,
}

impl Case {
    fn new(what: &str) -> Case {
        spy_install();
        Case {
            tenant: unique(what),
            name: unique(what),
        }
    }

    /// A submitter of the case's name and tenant, with `extra` options. Its cap is above the
    /// server's fail-before Retry-After (1 s), which a shorter cap would not wait for (a round
    /// ended by it, resumed or tried again, would be unsure again at once).
    fn submitter(&self, extra: &str) -> Submitter {
        let sep = if extra.is_empty() { "" } else { "," };
        let options = JSON::parse(&format!(
            r#"{{"url":"{}/api/tickets","headers":{{"X-Tenant":"{}"}},"retry":{{"base":20,"cap":2000}}{sep}{extra}}}"#,
            server(),
            self.tenant
        ))
        .unwrap();
        Submitter::new(self.name.as_str().into(), options).expect("valid options")
    }

    fn plan(&self, faults: &[&str]) {
        spy_plan(
            &self.tenant,
            faults.iter().map(|f| JsValue::from_str(f)).collect(),
        );
    }

    fn seen(&self) -> Vec<JsValue> {
        spy_seen(&self.tenant).iter().collect()
    }

    /// Every keyed request seen went out with a Content-Type beginning with `media_type`.
    fn assert_all_sent_as(&self, media_type: &str) {
        for e in self.seen() {
            let sent = text(&e, "type");
            assert!(sent.starts_with(media_type), "{sent}");
        }
    }

    fn keys(&self) -> Vec<String> {
        self.seen().iter().map(|e| text(e, "key")).collect()
    }

    async fn tickets(&self) -> Vec<JsValue> {
        let list = JsFuture::from(tickets(server(), &self.tenant))
            .await
            .unwrap();
        js_sys::Array::from(&list).iter().collect()
    }

    async fn stored(&self) -> JsValue {
        JsFuture::from(idb_get(&self.name)).await.unwrap()
    }

    /// Whether IndexedDB holds nothing under the name, once it does or after 3 s.
    async fn left_idb(&self) -> bool {
        for _ in 0..300 {
            if self.stored().await.is_null() {
                return true;
            }
            JsFuture::from(sleep(10)).await.unwrap();
        }
        false
    }

    /// As after a reload: a new submitter of the name, resuming, finds nothing and stays idle.
    async fn reload_finds_nothing(&self) {
        let again = self.submitter(r#""resume":true"#);
        JsFuture::from(sleep(200)).await.unwrap();
        assert_eq!(
            again.state().as_string().as_deref(),
            Some("idle"),
            "nothing found again"
        );
    }

    /// A form kit's options: this case's tenant, the server's tickets.
    fn kit_options(&self) -> oncekey::FormOptions {
        let mut submitter = oncekey::Options::new(&format!("{}/api/tickets", server()));
        submitter.headers = vec![("X-Tenant".into(), self.tenant.clone())];
        oncekey::FormOptions {
            submitter,
            ..oncekey::FormOptions::default()
        }
    }
}

/// Waits (3 s at most) for the form's attribute `name` to say `want`.
async fn comes_to(form: &web_sys::HtmlFormElement, name: &str, want: &str) {
    for _ in 0..300 {
        if form.get_attribute(name).as_deref() == Some(want) {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(form.get_attribute(name).as_deref(), Some(want), "{name}");
}

fn get(v: &JsValue, field: &str) -> JsValue {
    Reflect::get(v, &field.into()).unwrap()
}

fn text(v: &JsValue, field: &str) -> String {
    get(v, field).as_string().unwrap_or_default()
}

async fn sha(bytes: &js_sys::Uint8Array) -> String {
    JsFuture::from(sha256_hex(bytes))
        .await
        .unwrap()
        .as_string()
        .unwrap()
}

fn all_equal(keys: &[String]) -> bool {
    !keys.is_empty() && keys.iter().all(|k| *k == keys[0])
}

fn error_code(e: &JsValue) -> String {
    text(e, "code")
}

fn error_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_default()
}

/// The one ticket's one attachment, checked against `bytes`.
async fn assert_one_ticket_with(case: &Case, bytes: &js_sys::Uint8Array, name: &str) {
    let listed = case.tickets().await;
    assert_eq!(listed.len(), 1, "one ticket");
    let files: Vec<JsValue> = js_sys::Array::from(&get(&listed[0], "attachments"))
        .iter()
        .collect();
    assert_eq!(files.len(), 1, "one attachment");
    assert_eq!(text(&files[0], "name"), name);
    assert_eq!(
        get(&files[0], "size").as_f64(),
        Some(f64::from(bytes.length()))
    );
    assert_eq!(text(&files[0], "sha256"), sha(bytes).await);
}

#[test]
async fn an_upload_whose_first_reply_is_lost_makes_one_ticket_with_the_files_sha256() {
    let case = Case::new("upload-drop");
    case.plan(&["drop-reply"]);
    let s = case.submitter("");
    let bytes = file_bytes(300_000, 1);
    let result =
        JsFuture::from(s.submit(ticket_form(&bytes, "screen.png", "image/png").into(), None))
            .await
            .expect("submit resolves");
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(get(&result, "status").as_f64(), Some(201.0));
    let keys = case.keys();
    assert!(all_equal(&keys), "{keys:?}");
    // Chromium itself may resend a request whose reused connection closed before any answer
    // byte (same headers, same key); otherwise the driver retries. Either way: a replay.
    assert_eq!(get(&result, "replayed"), JsValue::TRUE);
    case.assert_all_sent_as("multipart/form-data; boundary=");
    assert_one_ticket_with(&case, &bytes, "screen.png").await;
    // Removed after the definite answer.
    assert!(case.left_idb().await, "removed from IndexedDB");
}

#[test]
async fn an_upload_is_stored_in_indexeddb_before_it_is_sent_and_another_file_is_refused() {
    let case = Case::new("upload-other");
    // Every attempt of the first round fails before the server does anything: unsure.
    case.plan(&["fail-before", "fail-before"]);
    let s = case.submitter(r#""retry":{"attempts":2,"base":10,"cap":2000}"#);
    let bytes = file_bytes(50_000, 2);
    let first = JsFuture::from(s.submit(ticket_form(&bytes, "a.png", "image/png").into(), None))
        .await
        .expect("submit resolves");
    assert_eq!(text(&first, "outcome"), "unsure");
    let key = text(&first, "key");
    let stored = case.stored().await;
    assert!(!stored.is_null(), "kept in IndexedDB while unsure");
    assert!(
        text(&stored, "record").contains(&key),
        "the record holds the key"
    );
    assert_eq!(js_sys::Array::from(&get(&stored, "files")).length(), 1);
    let sent = case.seen().len();
    // Another file under the same name: refused here, nothing sent.
    let other = file_bytes(50_000, 3);
    refused_pending(&s, ticket_form(&other, "a.png", "image/png")).await;
    // The same file under another name is another body too.
    refused_pending(&s, ticket_form(&bytes, "b.png", "image/png")).await;
    // And of another type (CONTRACT.md section 5: each file's SHA-256, name and type).
    refused_pending(&s, ticket_form(&bytes, "a.png", "image/jpeg")).await;
    assert_eq!(case.seen().len(), sent, "nothing sent");
    // Try again resends the same bytes with the same key.
    let again = JsFuture::from(s.try_again(None)).await.expect("resolves");
    let statuses: Vec<String> = case
        .seen()
        .iter()
        .map(|e| format!("{:?}", get(e, "status")))
        .collect();
    assert_eq!(
        text(&again, "outcome"),
        "succeeded",
        "{statuses:?} {}",
        text(&again, "gaveUp")
    );
    assert_eq!(text(&again, "key"), key);
    assert!(all_equal(&case.keys()));
    assert_one_ticket_with(&case, &bytes, "a.png").await;
}

#[test]
async fn an_upload_is_still_refused_for_a_json_submission_unsure_here_that_another_tab_answered() {
    // The drop of a submission another tab answered is for JSON bodies: an upload's files and
    // its look at IndexedDB are not entangled with it. Refused as before, nothing kept or sent.
    let case = Case::new("upload-elsewhere");
    let (a, key) = json_left_unsure(&case, "local").await;
    let b = case.submitter(r#""storage":"local""#);
    let answered = JsFuture::from(b.try_again(None)).await.expect("resolves");
    assert_eq!(text(&answered, "outcome"), "succeeded");
    let sent = case.seen().len();
    let bytes = file_bytes(40_000, 5);
    let refused = refused_pending(&a, ticket_form(&bytes, "c.png", "image/png")).await;
    assert!(error_message(&refused).contains(&key[..8]));
    assert_eq!(case.seen().len(), sent, "nothing sent");
    assert!(case.stored().await.is_null(), "nothing kept in IndexedDB");
    assert_eq!(case.tickets().await.len(), 1, "the first ticket only");
}

/// `form` submitted by `s` and refused as `pending` (another submission is pending): the error.
async fn refused_pending(s: &Submitter, form: web_sys::FormData) -> JsValue {
    let refused = JsFuture::from(s.submit(form.into(), None))
        .await
        .expect_err("refused");
    assert_eq!(
        error_code(&refused),
        "pending",
        "{}",
        error_message(&refused)
    );
    refused
}

/// A JSON submission under `storage` (`local`, `indexeddb`) left unsure: its one attempt failed
/// before the server did anything, its record is stored. Its submitter and its key.
async fn json_left_unsure(case: &Case, storage: &str) -> (Submitter, String) {
    case.plan(&["fail-before"]);
    let s = case.submitter(&format!(
        r#""storage":"{storage}","retry":{{"attempts":1}}"#
    ));
    let first = JsFuture::from(s.submit(JSON::parse(PRINTER).unwrap(), None))
        .await
        .expect("submit resolves");
    assert_eq!(text(&first, "outcome"), "unsure");
    (s, text(&first, "key"))
}

/// The JSON body of [`json_left_unsure`].
const PRINTER: &str = r#"{"subject":"Printer","body":"x","email":"a@b.co"}"#;

/// An upload of `bytes` left unsure (its one attempt failed before the server did anything)
/// and, as after closing the tab, in IndexedDB only: nothing of it in sessionStorage. Its key.
async fn left_unsure_in_indexeddb(case: &Case, bytes: &js_sys::Uint8Array, file: &str) -> String {
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let first = JsFuture::from(s.submit(ticket_form(bytes, file, "image/jpeg").into(), None))
        .await
        .expect("submit resolves");
    assert_eq!(text(&first, "outcome"), "unsure");
    session()
        .remove_item(&format!("oncekey:{}", case.name))
        .unwrap();
    text(&first, "key")
}

#[test]
async fn a_pending_upload_found_in_indexeddb_by_a_new_submitter_is_finished_with_the_same_key() {
    let case = Case::new("upload-reopen");
    let bytes = file_bytes(120_000, 4);
    let key = left_unsure_in_indexeddb(&case, &bytes, "receipt.jpg").await;
    assert!(!case.stored().await.is_null());
    let s = case.submitter(r#""resume":true"#);
    for _ in 0..300 {
        if s.state().as_string().as_deref() == Some("succeeded") {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(s.state().as_string().as_deref(), Some("succeeded"));
    let keys = case.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| *k == key), "{keys:?} vs {key}");
    assert_one_ticket_with(&case, &bytes, "receipt.jpg").await;
}

#[test]
async fn an_upload_discarded_while_the_page_unloads_leaves_indexeddb() {
    // Before: a discard made as the page unloaded kept the record, as an answer's is kept then,
    // and the next page found the upload the person let go and sent it again.
    let case = Case::new("upload-unload-discard");
    let bytes = file_bytes(20_000, 7);
    let key = left_unsure_in_indexeddb(&case, &bytes, "receipt.jpg").await;
    let s = case.submitter("");
    for _ in 0..300 {
        if s.state().as_string().as_deref() == Some("unsure") {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(s.state().as_string().as_deref(), Some("unsure"));
    dispatch("pagehide");
    s.discard();
    let gone = case.left_idb().await;
    dispatch("pageshow");
    assert!(gone, "the discarded upload is gone from IndexedDB");
    case.reload_finds_nothing().await;
    assert_eq!(case.keys(), [key], "nothing was sent again");
}

/// `case`'s submitter (`extra` options) taken up the upload kept in IndexedDB (`resume`: sent at
/// once) and finished it: its state then.
async fn taken_up_and_finished(case: &Case, extra: &str) -> Option<String> {
    let s = case.submitter(extra);
    for _ in 0..500 {
        if s.state().as_string().as_deref() == Some("succeeded") {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    s.state().as_string()
}

/// An upload taken up after a reload ended as the person meant it: `state` succeeded, after
/// `attempts` attempts all under `key`, with one ticket holding `bytes` as `file`, and nothing
/// of it left in IndexedDB.
async fn assert_finished(
    case: &Case,
    state: Option<String>,
    key: &str,
    attempts: usize,
    bytes: &js_sys::Uint8Array,
    file: &str,
) {
    assert_eq!(state.as_deref(), Some("succeeded"));
    let keys = case.keys();
    assert!(
        keys.len() == attempts && keys.iter().all(|k| k == key),
        "{keys:?} vs {key}"
    );
    assert_one_ticket_with(case, bytes, file).await;
    assert!(case.left_idb().await, "record and files removed");
}

#[test]
async fn a_retried_upload_writes_its_files_to_indexeddb_once() {
    // Every attempt's record was written with the files: a 10 MB upload retried 8 times wrote
    // its bytes 9 times, each write holding the next attempt back.
    let case = Case::new("upload-once");
    count_file_writes(&case.name);
    case.plan(&["fail-before", "fail-before"]);
    let s = case.submitter("");
    let bytes = file_bytes(200_000, 14);
    let result =
        JsFuture::from(s.submit(ticket_form(&bytes, "log.txt", "text/plain").into(), None))
            .await
            .expect("submit resolves");
    let writes = file_writes();
    undo_count_file_writes();
    assert_eq!(text(&result, "outcome"), "succeeded");
    let keys = case.keys();
    assert!(keys.len() == 3 && all_equal(&keys), "{keys:?}");
    assert_eq!(writes, 1, "the files written once for 3 attempts");
    assert_one_ticket_with(&case, &bytes, "log.txt").await;
    assert!(case.left_idb().await, "record and files removed");
}

#[test]
async fn an_upload_taken_up_after_a_reload_sends_its_files_without_writing_them_again() {
    let case = Case::new("upload-once-reload");
    count_file_writes(&case.name);
    let bytes = file_bytes(150_000, 15);
    case.plan(&["fail-before", "fail-before"]);
    let s = case.submitter(r#""retry":{"attempts":2}"#);
    let first = JsFuture::from(s.submit(
        ticket_form(&bytes, "cv.pdf", "application/pdf").into(),
        None,
    ))
    .await
    .expect("submit resolves");
    assert_eq!(text(&first, "outcome"), "unsure");
    let key = text(&first, "key");
    drop(s);
    // The reload's submitter: one more 503, then the ticket.
    case.plan(&["fail-before"]);
    let state = taken_up_and_finished(&case, r#""resume":true"#).await;
    let writes = file_writes();
    undo_count_file_writes();
    assert_eq!(
        writes, 1,
        "the files written once, before the first attempt"
    );
    assert_finished(&case, state, &key, 4, &bytes, "cv.pdf").await;
}

#[test]
async fn an_upload_stored_with_its_files_inline_by_the_previous_release_is_finished_with_its_key() {
    // An upgrade of the package must not lose a pending upload: the value the previous release
    // wrote (`{ record, fields, files }` under the name) is still taken up and sent.
    let case = Case::new("upload-inline");
    let bytes = file_bytes(60_000, 16);
    let key = left_unsure_in_indexeddb(&case, &bytes, "old.jpg").await;
    JsFuture::from(idb_inline(&case.name)).await.unwrap();
    let stored = case.stored().await;
    assert_eq!(js_sys::Array::from(&get(&stored, "files")).length(), 1);
    case.plan(&["fail-before"]);
    let state = taken_up_and_finished(&case, r#""resume":true"#).await;
    assert_finished(&case, state, &key, 3, &bytes, "old.jpg").await;
}

#[test]
async fn an_upload_over_max_body_bytes_is_refused_before_anything_is_stored() {
    let case = Case::new("upload-max");
    let s = case.submitter(r#""maxBodyBytes":10000"#);
    let bytes = file_bytes(20_000, 5);
    let refused = JsFuture::from(s.submit(
        ticket_form(&bytes, "big.bin", "application/octet-stream").into(),
        None,
    ))
    .await
    .expect_err("refused");
    assert_eq!(error_code(&refused), "body");
    assert!(
        error_message(&refused).contains("maxBodyBytes"),
        "{}",
        error_message(&refused)
    );
    assert!(case.seen().is_empty(), "nothing sent");
    assert!(case.stored().await.is_null(), "nothing stored");
    assert!(s.pending().is_null());
}

#[test]
async fn blocked_indexeddb_falls_back_to_memory_with_a_warning_and_refuses_large_bodies() {
    let case = Case::new("upload-blocked");
    let restore = block_indexeddb();
    let s = case.submitter("");
    let events = js_sys::Array::new();
    let sink = events.clone();
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        sink.push(&e);
    });
    s.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let big = file_bytes(6 * 1024 * 1024, 6);
    let refused = JsFuture::from(s.submit(
        ticket_form(&big, "big.bin", "application/octet-stream").into(),
        None,
    ))
    .await
    .expect_err("refused");
    assert!(
        error_message(&refused).contains("IndexedDB"),
        "{}",
        error_message(&refused)
    );
    let small = file_bytes(10_000, 7);
    let result = JsFuture::from(s.submit(ticket_form(&small, "s.txt", "text/plain").into(), None))
        .await
        .expect("resolves");
    restore.call0(&JsValue::UNDEFINED).unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    let warned = events
        .iter()
        .any(|e| text(&e, "warning").contains("IndexedDB cannot be used"));
    assert!(warned, "a warning says so");
    assert_one_ticket_with(&case, &small, "s.txt").await;
}

#[wasm_bindgen(inline_js = r#"
export function form_with_file(name, tenant, bytes) {
  const form = document.createElement('form');
  form.setAttribute('data-oncekey', name);
  form.innerHTML = '<input name="subject" value="Printer on fire"><input name="email" value="ana@example.com">'
    + '<textarea name="body">See the photo</textarea><input type="file" name="photo">'
    + '<button type="submit">Send</button><p role="status"></p>';
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], 'photo.jpg', { type: 'image/jpeg' }));
  form.querySelector('input[type=file]').files = dt.files;
  document.body.appendChild(form);
  return form;
}
"#)]
extern "C" {
    fn form_with_file(
        name: &str,
        tenant: &str,
        bytes: &js_sys::Uint8Array,
    ) -> web_sys::HtmlFormElement;
}

#[test]
async fn the_form_kit_sends_a_form_with_a_file_as_an_upload_with_one_key() {
    let case = Case::new("upload-kit");
    case.plan(&["drop-reply"]);
    let bytes = file_bytes(80_000, 8);
    let form = form_with_file(&case.name, &case.tenant, &bytes);
    let _kit = oncekey::FormKit::attach(&form, case.kit_options()).expect("attached");
    form.request_submit().unwrap();
    comes_to(&form, "data-oncekey-outcome", "succeeded").await;
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_one_ticket_with(&case, &bytes, "photo.jpg").await;
    form.remove();
}

/// Whether the kit locks `form`: a field disabled, or the form marked busy.
fn locked(form: &web_sys::HtmlFormElement) -> bool {
    let subject = form.query_selector("input[name=subject]").unwrap().unwrap();
    subject.has_attribute("disabled") || form.has_attribute("aria-busy")
}

#[test]
async fn a_kit_detached_before_indexeddb_answers_leaves_the_form_to_the_next_kit() {
    // React's StrictMode attaches, detaches and attaches again at once. The first kit looked at
    // IndexedDB and, detached by then, took up the upload it found there anyway: the form stayed
    // locked, marked unsure, by a kit nobody could reach.
    let case = Case::new("upload-kit-detached");
    let bytes = file_bytes(20_000, 9);
    let key = left_unsure_in_indexeddb(&case, &bytes, "photo.jpg").await;
    let form = form_with_file(&case.name, &case.tenant, &bytes);
    let options = || {
        let mut submitter = oncekey::Options::new(&format!("{}/api/tickets", server()));
        submitter.headers = vec![("X-Tenant".into(), case.tenant.clone())];
        oncekey::FormOptions {
            submitter,
            resume: oncekey::Resume::Manual,
            ..oncekey::FormOptions::default()
        }
    };
    let first = oncekey::FormKit::attach(&form, options()).expect("attached");
    first.detach();
    for _ in 0..100 {
        assert!(!locked(&form), "a detached kit locked the form");
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(form.get_attribute("data-oncekey-state"), None);
    // The kit attached next takes the upload up, in less time than the wait above.
    let second = oncekey::FormKit::attach(&form, options()).expect("attached");
    for _ in 0..100 {
        if locked(&form) {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert!(locked(&form), "the attached kit took the upload up");
    assert_eq!(
        form.get_attribute("data-oncekey-state").as_deref(),
        Some("unsure")
    );
    assert_eq!(
        case.keys(),
        vec![key],
        "nothing sent again before Try again"
    );
    second.detach();
    assert!(!locked(&form));
    form.remove();
}

#[test]
async fn list_pending_names_every_unconfirmed_submission_of_a_storage() {
    let case = Case::new("upload-list");
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let bytes = file_bytes(30_000, 9);
    let first = JsFuture::from(s.submit(ticket_form(&bytes, "l.png", "image/png").into(), None))
        .await
        .expect("resolves");
    assert_eq!(text(&first, "outcome"), "unsure");
    let listed = JsFuture::from(oncekey::js::list_pending(Some("indexeddb".into())))
        .await
        .unwrap();
    let mine: Vec<JsValue> = js_sys::Array::from(&listed)
        .iter()
        .filter(|e| text(e, "name") == case.name)
        .collect();
    assert_eq!(mine.len(), 1, "listed once");
    assert_eq!(text(&mine[0], "key"), text(&first, "key"));
    assert_eq!(get(&mine[0], "attempts").as_f64(), Some(1.0));
    assert!(get(&mine[0], "startedAt").as_f64().unwrap() > 0.0);
    assert!(
        get(&mine[0], "size").as_f64().unwrap() >= 30_000.0,
        "the file counts"
    );
    // Not in sessionStorage: uploads live in IndexedDB; a JSON submission does.
    let json = Case::new("list-json");
    json.plan(&["fail-before"]);
    let j = json.submitter(r#""retry":{"attempts":1}"#);
    let body = JSON::parse(r#"{"subject":"Printer","body":"x","email":"a@b.co"}"#).unwrap();
    let unsure = JsFuture::from(j.submit(body, None))
        .await
        .expect("resolves");
    assert_eq!(text(&unsure, "outcome"), "unsure");
    let session = JsFuture::from(oncekey::js::list_pending(None))
        .await
        .unwrap();
    let session: Vec<JsValue> = js_sys::Array::from(&session).iter().collect();
    assert!(session.iter().all(|e| text(e, "name") != case.name));
    let listed_json: Vec<&JsValue> = session
        .iter()
        .filter(|e| text(e, "name") == json.name)
        .collect();
    assert_eq!(listed_json.len(), 1);
    assert_eq!(text(listed_json[0], "key"), text(&unsure, "key"));
    j.discard();
    let wrong = JsFuture::from(oncekey::js::list_pending(Some("cookies".into())))
        .await
        .expect_err("refused");
    assert_eq!(error_code(&wrong), "option");
    // Not a storage's name at all: refused too, not taken for the default.
    let wrong = JsFuture::from(oncekey::js::list_pending(Some(5.into())))
        .await
        .expect_err("refused");
    assert_eq!(error_code(&wrong), "option");
    // Discarded: no longer listed.
    s.discard();
    assert!(case.left_idb().await, "discarded");
    let listed = JsFuture::from(oncekey::js::list_pending(Some("indexeddb".into())))
        .await
        .unwrap();
    assert!(js_sys::Array::from(&listed)
        .iter()
        .all(|e| text(&e, "name") != case.name));
}

#[test]
async fn a_json_submission_kept_in_indexeddb_is_found_by_a_new_submitter_and_finished_with_the_same_key(
) {
    let case = Case::new("json-idb");
    // The reply is held past the attempt's timeout: unsure, the ticket made meanwhile.
    case.plan(&["delay=1500"]);
    let body = JSON::parse(r#"{"subject":"Printer","body":"kept","email":"a@b.co"}"#).unwrap();
    let key = {
        let s = case.submitter(r#""storage":"indexeddb","timeoutMs":300,"retry":{"attempts":1}"#);
        assert_eq!(s.storage().as_string().as_deref(), Some("indexeddb"));
        let first = JsFuture::from(s.submit(body, None))
            .await
            .expect("submit resolves");
        assert_eq!(text(&first, "outcome"), "unsure");
        text(&first, "key")
    };
    // Nothing in sessionStorage (as after closing the tab); the record in IndexedDB.
    assert!(session()
        .get_item(&format!("oncekey:{}", case.name))
        .unwrap()
        .is_none());
    let stored = case.stored().await;
    assert!(!stored.is_null(), "kept in IndexedDB");
    assert!(
        text(&stored, "record").contains(&key),
        "the record holds the key"
    );
    let listed = JsFuture::from(oncekey::js::list_pending(Some("indexeddb".into())))
        .await
        .unwrap();
    let mine: Vec<JsValue> = js_sys::Array::from(&listed)
        .iter()
        .filter(|e| text(e, "name") == case.name)
        .collect();
    assert_eq!(mine.len(), 1, "listPending('indexeddb') lists it");
    assert_eq!(text(&mine[0], "key"), key);
    // The held reply over (the ticket made), a new submitter takes the record up from IndexedDB:
    // unsure, the same key; Try again gets the first answer.
    JsFuture::from(sleep(1600)).await.unwrap();
    let s = case.submitter(r#""storage":"indexeddb""#);
    for _ in 0..300 {
        if s.state().as_string().as_deref() == Some("unsure") {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(s.state().as_string().as_deref(), Some("unsure"), "taken up");
    let again = JsFuture::from(s.try_again(None)).await.expect("resolves");
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(text(&again, "key"), key);
    assert_eq!(get(&again, "replayed"), JsValue::TRUE);
    let keys = case.keys();
    assert!(keys.len() >= 2, "{keys:?}");
    assert!(keys.iter().all(|k| *k == key), "{keys:?} vs {key}");
    for e in case.seen() {
        assert_eq!(text(&e, "type"), "application/json", "sent as JSON");
    }
    assert_eq!(case.tickets().await.len(), 1, "one ticket");
    assert!(case.left_idb().await, "removed after the answer");
}

#[test]
async fn a_submit_made_before_indexeddb_answers_takes_up_the_submission_kept_there() {
    let case = Case::new("json-idb-early");
    case.plan(&["delay=1500"]);
    let body = r#"{"subject":"Printer","body":"kept","email":"a@b.co"}"#;
    let key = {
        let s = case.submitter(r#""storage":"indexeddb","timeoutMs":300,"retry":{"attempts":1}"#);
        let first = JsFuture::from(s.submit(JSON::parse(body).unwrap(), None))
            .await
            .expect("submit resolves");
        assert_eq!(text(&first, "outcome"), "unsure");
        text(&first, "key")
    };
    JsFuture::from(sleep(1600)).await.unwrap();
    // The next page submits at once, before IndexedDB has answered: another body first, then
    // the same one (a person pressing Send on the restored form).
    let s = case.submitter(r#""storage":"indexeddb""#);
    let other = r#"{"subject":"Another","body":"x","email":"a@b.co"}"#;
    let other = JsFuture::from(s.submit(JSON::parse(other).unwrap(), None));
    let same = JsFuture::from(s.submit(JSON::parse(body).unwrap(), None));
    let refused = other.await.expect_err("another body is refused");
    assert_eq!(
        error_code(&refused),
        "pending",
        "{}",
        error_message(&refused)
    );
    assert!(
        error_message(&refused).contains(&key[..8]),
        "{}",
        error_message(&refused)
    );
    let same = same.await.expect("resolves");
    assert_eq!(text(&same, "outcome"), "succeeded");
    assert_eq!(text(&same, "key"), key);
    assert_eq!(get(&same, "replayed"), JsValue::TRUE);
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await.len(), 1, "one ticket");
}

#[test]
async fn a_definite_answer_leaves_a_submission_another_tab_stored_in_indexeddb_since() {
    let case = Case::new("idb-other-tab");
    case.plan(&["delay=800"]);
    let s = case.submitter(r#""storage":"indexeddb""#);
    let body = JSON::parse(r#"{"subject":"Printer","body":"mine","email":"a@b.co"}"#).unwrap();
    let waiting = JsFuture::from(s.submit(body, None));
    // While the request is out, another tab stores its own pending submission under the name.
    for _ in 0..100 {
        if !case.stored().await.is_null() {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    let key = text(&s.pending(), "key");
    let theirs = "5f0c3e1a-3b7e-4c1d-9a2b-8e7f6d5c4b3a";
    JsFuture::from(idb_rekey(&case.name, &key, Some(theirs.into())))
        .await
        .unwrap();
    let result = waiting.await.expect("resolves");
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    // The removal runs after the answer; theirs is still there once it has.
    JsFuture::from(sleep(300)).await.unwrap();
    let stored = case.stored().await;
    assert!(!stored.is_null(), "the other tab's submission was removed");
    assert!(text(&stored, "record").contains(theirs));
    assert_eq!(case.tickets().await.len(), 1);
    JsFuture::from(idb_rekey(&case.name, "", None))
        .await
        .unwrap();
}

#[test]
async fn two_idle_tabs_on_indexeddb_send_one_body_under_one_key_and_refuse_another() {
    let case = Case::new("idb-two-tabs");
    case.plan(&["delay=800"]);
    let (a, b, c) = (
        case.submitter(r#""storage":"indexeddb""#),
        case.submitter(r#""storage":"indexeddb""#),
        case.submitter(r#""storage":"indexeddb""#),
    );
    // All three have looked at IndexedDB (and found nothing) before A sends.
    JsFuture::from(sleep(200)).await.unwrap();
    let body = r#"{"subject":"Printer","body":"one","email":"a@b.co"}"#;
    let first = JsFuture::from(a.submit(JSON::parse(body).unwrap(), None));
    for _ in 0..100 {
        if !case.stored().await.is_null() {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    let key = text(&a.pending(), "key");
    let other = r#"{"subject":"Another","body":"two","email":"a@b.co"}"#;
    let refused = JsFuture::from(c.submit(JSON::parse(other).unwrap(), None))
        .await
        .expect_err("another body is refused");
    assert_eq!(
        error_code(&refused),
        "pending",
        "{}",
        error_message(&refused)
    );
    let second = JsFuture::from(b.submit(JSON::parse(body).unwrap(), None));
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(text(&first, "outcome"), "succeeded");
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_eq!(text(&second, "key"), key);
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await.len(), 1);
}

#[test]
async fn the_next_submission_on_indexeddb_after_an_answer_gets_a_new_key() {
    // Its own record is still on its way out of IndexedDB: never taken for another tab's.
    let case = Case::new("idb-next");
    let s = case.submitter(r#""storage":"indexeddb""#);
    let body = r#"{"subject":"Printer","body":"again","email":"a@b.co"}"#;
    let first = JsFuture::from(s.submit(JSON::parse(body).unwrap(), None))
        .await
        .unwrap();
    let second = JsFuture::from(s.submit(JSON::parse(body).unwrap(), None))
        .await
        .unwrap();
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_ne!(text(&second, "key"), text(&first, "key"));
    assert_ne!(get(&second, "replayed"), JsValue::TRUE);
    assert_eq!(case.tickets().await.len(), 2, "two intended submissions");
}

#[test]
async fn an_upload_s_signal_aborts_its_wait_and_try_again_finishes_it_with_the_same_key() {
    let case = Case::new("upload-signal");
    // The answer held: the abort comes while the attempt is under way.
    case.plan(&["delay=2000"]);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let bytes = file_bytes(40_000, 10);
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let sending = JsFuture::from(s.submit(
        ticket_form(&bytes, "held.png", "image/png").into(),
        Some(options.into()),
    ));
    let abort = controller.clone();
    wasm_bindgen_futures::spawn_local(async move {
        JsFuture::from(sleep(300)).await.unwrap();
        abort.abort();
    });
    let aborted = sending.await.expect_err("aborted");
    assert_eq!(
        error_code(&aborted),
        "aborted",
        "{}",
        error_message(&aborted)
    );
    let pending = s.pending();
    assert!(!pending.is_null(), "still pending");
    let key = text(&pending, "key");
    assert!(!case.stored().await.is_null(), "kept in IndexedDB");
    // The held attempt's claim over, Try again gets the first answer or does the work once.
    JsFuture::from(sleep(2000)).await.unwrap();
    let again = JsFuture::from(s.try_again(None)).await.expect("resolves");
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(text(&again, "key"), key);
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_one_ticket_with(&case, &bytes, "held.png").await;
}

#[test]
async fn an_upload_s_abort_never_writes_back_its_record_another_tab_removed() {
    // The abort's mark (not to be resent on its own) was written to IndexedDB wherever the
    // slot stood: an upload another tab had finished and removed came back on the next load.
    let case = Case::new("upload-abort-removed");
    case.plan(&["delay=2000"]);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let bytes = file_bytes(20_000, 11);
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let sending = JsFuture::from(s.submit(
        ticket_form(&bytes, "gone.png", "image/png").into(),
        Some(options.into()),
    ));
    for _ in 0..100 {
        if !case.stored().await.is_null() {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    // Another tab took it up, had its answer and removed it.
    JsFuture::from(idb_rekey(&case.name, "", None))
        .await
        .unwrap();
    controller.abort();
    let aborted = sending.await.expect_err("aborted");
    assert_eq!(error_code(&aborted), "aborted");
    JsFuture::from(sleep(300)).await.unwrap();
    assert!(case.stored().await.is_null(), "not written back");
}

#[test]
async fn an_upload_s_new_key_has_its_lock_asked_for_before_its_record_is_written() {
    // An upload's record is IndexedDB's, shared by tabs, even with storage 'memory': its key's
    // lock was asked for only as the first attempt started, after the record was written.
    let case = Case::new("upload-lock-first");
    let seen = LockAndWrites::watch(
        "IDBObjectStore.prototype.put",
        "arguments[0] && arguments[0].record",
    );
    let s = case.submitter(r#""storage":"memory""#);
    let bytes = file_bytes(5_000, 12);
    let result = JsFuture::from(s.submit(ticket_form(&bytes, "a.png", "image/png").into(), None))
        .await
        .expect("resolves");
    seen.lock_first(&text(&result, "key"));
    assert_eq!(text(&result, "outcome"), "succeeded");
}

#[test]
async fn an_upload_keeps_a_secret_field_added_after_attach_out_of_indexeddb() {
    let case = Case::new("upload-late-secret");
    case.plan(&["delay=400"]);
    let bytes = file_bytes(10_000, 3);
    let form = form_with_file(&case.name, &case.tenant, &bytes);
    let _kit = oncekey::FormKit::attach(&form, case.kit_options()).expect("attached");
    let late = web_sys::window()
        .unwrap()
        .document()
        .unwrap()
        .create_element("input")
        .unwrap();
    late.set_attribute("type", "password").unwrap();
    late.set_attribute("name", "password").unwrap();
    late.set_attribute("value", "hunter2-added-late").unwrap();
    form.append_child(&late).unwrap();
    form.request_submit().unwrap();
    let mut stored = JsValue::NULL;
    for _ in 0..100 {
        stored = case.stored().await;
        if !stored.is_null() {
            break;
        }
        JsFuture::from(sleep(5)).await.unwrap();
    }
    let text: String = js_sys::JSON::stringify(&stored).unwrap().into();
    assert!(text.contains("Printer on fire"), "{text}");
    assert!(
        !text.contains("hunter2"),
        "the password is in IndexedDB: {text}"
    );
    comes_to(&form, "data-oncekey-outcome", "succeeded").await;
    form.remove();
}

#[test]
async fn an_expired_upload_found_in_indexeddb_puts_its_fields_back_for_send_as_new() {
    // Taken up from IndexedDB, an expired upload showed "Send as a new ticket" over the form as
    // the page had it: the fields that button sends were not put back.
    let case = Case::new("upload-expired-kit");
    let bytes = file_bytes(8_000, 11);
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""retry":{"attempts":1},"keyLifetimeMs":600"#);
    let first =
        JsFuture::from(s.submit(ticket_form(&bytes, "scan.jpg", "image/jpeg").into(), None))
            .await
            .expect("submit resolves");
    assert_eq!(text(&first, "outcome"), "unsure");
    drop(s);
    session()
        .remove_item(&format!("oncekey:{}", case.name))
        .unwrap();
    JsFuture::from(sleep(700)).await.unwrap();
    let form = form_with_file(&case.name, &case.tenant, &bytes);
    let subject: web_sys::HtmlInputElement = form
        .query_selector("input[name=subject]")
        .unwrap()
        .unwrap()
        .unchecked_into();
    subject.set_value("");
    let _kit = oncekey::FormKit::attach(&form, case.kit_options()).expect("attached");
    comes_to(&form, "data-oncekey-state", "expired").await;
    assert_eq!(
        subject.value(),
        "Printer on fire",
        "the stored fields are back"
    );
    assert_eq!(case.keys().len(), 1, "nothing sent with the expired key");
    form.remove();
}

#[test]
async fn a_submit_held_before_the_module_loaded_sends_the_upload_found_in_indexeddb_with_its_key() {
    // The tab closed on an unsure upload; reopened, the person pressed Send before the module
    // had loaded (the first-paint snippet held it). The kit pressed it at once, before
    // IndexedDB had answered: another body for the name, refused, and the form stayed locked
    // with no button; or, the same, a second key whose record replaced the first's.
    let case = Case::new("upload-held");
    let bytes = file_bytes(30_000, 12);
    let key = left_unsure_in_indexeddb(&case, &bytes, "photo.jpg").await;
    let form = form_with_file(&case.name, &case.tenant, &bytes);
    form.set_attribute("data-oncekey-held", "").unwrap();
    let _kit = oncekey::FormKit::attach(&form, case.kit_options()).expect("attached");
    comes_to(&form, "data-oncekey-outcome", "succeeded").await;
    let keys = case.keys();
    assert!(
        keys.len() >= 2 && keys.iter().all(|k| *k == key),
        "{keys:?} vs {key}"
    );
    assert_one_ticket_with(&case, &bytes, "photo.jpg").await;
    form.remove();
}

#[test]
async fn a_submit_refused_for_an_upload_found_in_indexeddb_offers_try_again_and_discard() {
    // Sent at once after the attach, before IndexedDB had answered, with another file: refused
    // as another body once the stored upload was taken up, and the form stayed locked with the
    // refusal's text and no button, until the key expired.
    let case = Case::new("upload-refused-pending");
    let bytes = file_bytes(30_000, 13);
    let key = left_unsure_in_indexeddb(&case, &bytes, "photo.jpg").await;
    let other = file_bytes(30_000, 14);
    let form = form_with_file(&case.name, &case.tenant, &other);
    let options = oncekey::FormOptions {
        resume: oncekey::Resume::Manual,
        ..case.kit_options()
    };
    let _kit = oncekey::FormKit::attach(&form, options).expect("attached");
    form.request_submit().unwrap();
    let try_again = || {
        form.query_selector("button.oncekey-try-again")
            .unwrap()
            .map(|b| b.unchecked_into::<web_sys::HtmlElement>())
    };
    for _ in 0..300 {
        if try_again().is_some() {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    // The stored upload's fields are back (what Try again sends), not the ones refused.
    let body: web_sys::HtmlTextAreaElement = form
        .query_selector("textarea[name=body]")
        .unwrap()
        .unwrap()
        .unchecked_into();
    assert_eq!(body.value(), "Screenshot attached");
    try_again().expect("Try again offered").click();
    comes_to(&form, "data-oncekey-outcome", "succeeded").await;
    let keys = case.keys();
    assert!(keys.iter().all(|k| *k == key), "{keys:?} vs {key}");
    assert_one_ticket_with(&case, &bytes, "photo.jpg").await;
    form.remove();
}

#[test]
async fn a_json_submission_found_in_indexeddb_is_removed_from_there_once_settled() {
    // A page with storage 'indexeddb' left a JSON submission unsure; another page of the origin,
    // with the default storage, took it up from IndexedDB and settled it, but removed it from
    // its own sessionStorage only: every later load resent it (and after a day offered it as
    // expired), and Discard did not remove it.
    let case = Case::new("idb-json-elsewhere");
    let (x, _) = json_left_unsure(&case, "indexeddb").await;
    drop(x);
    assert!(!case.stored().await.is_null(), "kept in IndexedDB");
    let y = case.submitter(r#""resume":true"#);
    for _ in 0..300 {
        if y.state().as_string().as_deref() == Some("succeeded") {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(y.state().as_string().as_deref(), Some("succeeded"));
    drop(y);
    assert!(case.left_idb().await, "removed from IndexedDB once settled");
    case.reload_finds_nothing().await;
    let keys = case.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(all_equal(&keys), "{keys:?}");
}

/// An upload `s` began and whose record IndexedDB holds, committed but not yet told of (commits
/// are told of late), is discarded: the promise of its submit, rejected, and its key.
async fn discarded_while_written(
    case: &Case,
    s: &Submitter,
    bytes: &js_sys::Uint8Array,
) -> (Promise, String) {
    let one = s.submit(ticket_form(bytes, "one.png", "image/png").into(), None);
    for _ in 0..200 {
        if !case.stored().await.is_null() {
            break;
        }
        JsFuture::from(sleep(5)).await.unwrap();
    }
    let stored = case.stored().await;
    assert!(!stored.is_null(), "the first upload's record written");
    let key = text(&JSON::parse(&text(&stored, "record")).unwrap(), "key");
    s.discard();
    (one, key)
}

#[test]
async fn an_upload_begun_at_once_after_a_discard_during_a_write_keeps_its_files_and_its_record() {
    // The discarded upload's removal, carried out once the write it waited for was told of,
    // came after the next upload had begun: it dropped that one's files (its record went to
    // sessionStorage and it was sent as JSON, with no attachment).
    let case = Case::new("upload-discard-next");
    case.plan(&["fail-before"]);
    let undo = slow_idb_commits(300);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let (first, second) = (file_bytes(30_000, 8), file_bytes(40_000, 9));
    let (one, _) = discarded_while_written(&case, &s, &first).await;
    let two = s.submit(ticket_form(&second, "two.png", "image/png").into(), None);
    let one = JsFuture::from(one).await.expect_err("discarded");
    assert_eq!(error_code(&one), "discarded", "{}", error_message(&one));
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    // Its one attempt failed before the server did anything: unsure, and kept in IndexedDB
    // with its file (the first one's removal did not take it).
    assert_eq!(text(&two, "outcome"), "unsure");
    let key = text(&two, "key");
    let stored = case.stored().await;
    assert!(!stored.is_null(), "its record is kept in IndexedDB");
    assert!(text(&stored, "record").contains(&key), "its record is kept");
    assert_eq!(js_sys::Array::from(&get(&stored, "files")).length(), 1);
    let again = JsFuture::from(s.try_again(None)).await.expect("resolves");
    assert_eq!(text(&again, "outcome"), "succeeded");
    let keys = case.keys();
    assert!(
        keys.len() == 2 && keys.iter().all(|k| *k == key),
        "{keys:?}"
    );
    case.assert_all_sent_as("multipart/form-data;");
    assert_one_ticket_with(&case, &second, "two.png").await;
}

#[test]
async fn an_upload_discarded_during_its_write_is_not_taken_up_again_after_a_json_submission() {
    // The discarded upload's removal, carried out after a JSON body had begun, looked at that
    // body (not kept in IndexedDB) and left the upload there: the next load took it up again.
    let case = Case::new("upload-discard-json");
    let undo = slow_idb_commits(300);
    let s = case.submitter("");
    let (one, _) = discarded_while_written(&case, &s, &file_bytes(30_000, 10)).await;
    let body = JSON::parse(PRINTER).unwrap();
    let two = s.submit(body, None);
    let one = JsFuture::from(one).await.expect_err("discarded");
    assert_eq!(error_code(&one), "discarded", "{}", error_message(&one));
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&two, "outcome"), "succeeded");
    assert!(case.left_idb().await, "the discarded upload left IndexedDB");
    // As after a reload: nothing is found, nothing more is sent.
    case.reload_finds_nothing().await;
    let keys = case.keys();
    assert_eq!(keys, vec![text(&two, "key")]);
    assert_eq!(case.tickets().await.len(), 1);
}

#[test]
async fn an_upload_discarded_during_its_write_is_not_taken_up_by_another_tab_meanwhile() {
    // Its record stayed in IndexedDB until the write was told of and its removal carried out:
    // another tab's submitter of the name that looked meanwhile took it up and sent it.
    let case = Case::new("upload-discard-other-tab");
    let undo = slow_idb_commits(300);
    let s = case.submitter("");
    let (one, _) = discarded_while_written(&case, &s, &file_bytes(30_000, 20)).await;
    let other = case.submitter(r#""resume":true"#);
    let one = JsFuture::from(one).await.expect_err("discarded");
    assert_eq!(error_code(&one), "discarded", "{}", error_message(&one));
    JsFuture::from(sleep(600)).await.unwrap();
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(other.state().as_string().as_deref(), Some("idle"));
    assert!(case.seen().is_empty(), "nothing sent: {:?}", case.keys());
    assert!(case.left_idb().await, "the discarded upload left IndexedDB");
    assert!(case.tickets().await.is_empty());
}

#[test]
async fn an_upload_discarded_as_its_record_is_written_again_is_not_taken_up_by_another_tab() {
    // Out, its answer held; the offline event writes its record again, and it is discarded in
    // the same task. The record was put back after its removal, and stayed there until that
    // write was told of: another tab that looked meanwhile took it up and sent it again.
    let case = Case::new("upload-rewrite-discard");
    let s = case.submitter("");
    let form = ticket_form(&file_bytes(30_000, 21), "one.png", "image/png");
    let (one, release) = out_with_its_answer_held(&case, &s, form).await;
    let undo = slow_idb_commits(300);
    network_event("offline");
    s.discard();
    let other = case.submitter(r#""resume":true"#);
    network_event("online");
    let one = JsFuture::from(one).await.expect_err("discarded");
    assert_eq!(error_code(&one), "discarded", "{}", error_message(&one));
    JsFuture::from(sleep(600)).await.unwrap();
    undo.call0(&JsValue::NULL).unwrap();
    release.call0(&JsValue::NULL).unwrap();
    assert_eq!(other.state().as_string().as_deref(), Some("idle"));
    assert_eq!(case.seen().len(), 1, "sent once: {:?}", case.keys());
    assert!(case.left_idb().await, "the discarded upload left IndexedDB");
}

#[test]
async fn a_json_submission_taken_up_after_a_discard_during_a_write_goes_without_the_files() {
    // After the discard, a submit took up another submitter's JSON record from localStorage;
    // the discarded upload's Forget, carried out after that, left its files as the payload of
    // the record taken up, which went to IndexedDB with them and out as multipart.
    let case = Case::new("upload-discard-taken");
    let s = case.submitter(r#""storage":"local""#);
    let undo = slow_idb_commits(1000);
    let (one, _) = discarded_while_written(&case, &s, &file_bytes(30_000, 11)).await;
    let (_other, key) = json_left_unsure(&case, "local").await;
    let two = s.submit(JSON::parse(PRINTER).unwrap(), None);
    let _ = JsFuture::from(one).await.expect_err("discarded");
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&two, "outcome"), "succeeded");
    assert_eq!(text(&two, "key"), key, "the record taken up goes on");
    let seen = case.seen();
    assert_eq!(seen.len(), 2);
    for e in &seen {
        assert_eq!(text(e, "key"), key);
        assert_eq!(text(e, "type"), "application/json");
    }
    let listed = case.tickets().await;
    assert_eq!(listed.len(), 1, "one ticket");
    assert_eq!(
        js_sys::Array::from(&get(&listed[0], "attachments")).length(),
        0
    );
}

#[test]
async fn secrets_set_after_a_discard_during_a_write_go_with_the_next_submission() {
    // The form kit's order: discard, the secret fields, submit. The discarded upload's Forget,
    // carried out after the write it waited for, dropped the secrets set since.
    let case = Case::new("upload-discard-secrets");
    let s = case.submitter("");
    let undo = slow_idb_commits(300);
    let (one, _) = discarded_while_written(&case, &s, &file_bytes(30_000, 12)).await;
    s.set_secrets(JSON::parse(r#"{"password":"hunter2"}"#).unwrap())
        .unwrap();
    let body = JSON::parse(PRINTER).unwrap();
    let two = s.submit(body, None);
    let _ = JsFuture::from(one).await.expect_err("discarded");
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&two, "outcome"), "succeeded");
    let seen = case.seen();
    assert_eq!(seen.len(), 1);
    assert!(
        text(&seen[0], "body").contains("\"password\":\"hunter2\""),
        "{}",
        text(&seen[0], "body")
    );
}

/// `form` submitted by `s`, its attempt out and its answer held back: the promise of its submit,
/// and the function that lets the answer through.
async fn out_with_its_answer_held(
    case: &Case,
    s: &Submitter,
    form: web_sys::FormData,
) -> (Promise, js_sys::Function) {
    let release = spy_hold(&case.tenant);
    let one = s.submit(form.into(), None);
    for _ in 0..300 {
        if !case.seen().is_empty() {
            break;
        }
        JsFuture::from(sleep(5)).await.unwrap();
    }
    assert_eq!(case.seen().len(), 1, "its attempt is out");
    (one, release)
}

/// `form` submitted by `s` and answered while writes of its record held the driver back:
/// offline and online while its attempt was out (its answer held back meanwhile) queued two
/// writes, told of 300 ms late. The submit's promise (settled, not yet handed out) and the undo
/// of the slow commits.
async fn answered_behind_a_write(
    case: &Case,
    s: &Submitter,
    form: web_sys::FormData,
) -> (Promise, js_sys::Function) {
    let (one, release) = out_with_its_answer_held(case, s, form).await;
    let undo = slow_idb_commits(300);
    network_event("offline");
    network_event("online");
    JsFuture::from(sleep(50)).await.unwrap();
    release.call0(&JsValue::NULL).unwrap();
    for _ in 0..300 {
        if s.state().as_string().as_deref() == Some("succeeded") {
            break;
        }
        JsFuture::from(sleep(2)).await.unwrap();
    }
    assert_eq!(s.state().as_string().as_deref(), Some("succeeded"));
    (one, undo)
}

#[test]
async fn an_upload_answered_while_a_write_is_queued_leaves_indexeddb() {
    // The second write, carried out after the answer, counted the record as no one's, and the
    // upload's Forget left it in IndexedDB, to be taken up and resent on the next load.
    let case = Case::new("upload-late-write");
    let s = case.submitter("");
    let form = ticket_form(&file_bytes(30_000, 13), "one.png", "image/png");
    let (one, undo) = answered_behind_a_write(&case, &s, form).await;
    let one = JsFuture::from(one).await.expect("resolves");
    assert_eq!(text(&one, "outcome"), "succeeded");
    undo.call0(&JsValue::NULL).unwrap();
    assert!(case.left_idb().await, "its record left IndexedDB");
    assert_eq!(case.tickets().await.len(), 1);
}

#[test]
async fn the_same_form_again_after_an_answer_behind_a_write_is_a_new_submission() {
    // Submitted before the answered upload's Forget was carried out, the same form looked at
    // IndexedDB, found the answered upload's record there and took it up again: sent as JSON
    // under the old key, a conflict, and the second ticket never made.
    let case = Case::new("upload-again-behind");
    let s = case.submitter("");
    let bytes = file_bytes(30_000, 14);
    let form = || ticket_form(&bytes, "one.png", "image/png");
    let (one, undo) = answered_behind_a_write(&case, &s, form()).await;
    let two = s.submit(form().into(), None);
    let one = JsFuture::from(one).await.expect("resolves");
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&one, "outcome"), "succeeded");
    assert_eq!(
        text(&two, "outcome"),
        "succeeded",
        "{}",
        text(&two, "gaveUp")
    );
    assert_ne!(text(&two, "key"), text(&one, "key"), "a new key");
    assert_eq!(case.tickets().await.len(), 2, "the second ticket made too");
}

#[test]
async fn secrets_of_an_upload_answered_behind_a_write_do_not_go_with_the_next_body() {
    // The answered upload's secrets were dropped by its Forget, carried out late, and only
    // when no other submission had begun: a body submitted before that went out with them.
    let case = Case::new("upload-secrets-behind");
    let s = case.submitter("");
    s.set_secrets(JSON::parse(r#"{"password":"old"}"#).unwrap())
        .unwrap();
    let form = ticket_form(&file_bytes(30_000, 15), "one.png", "image/png");
    let (one, undo) = answered_behind_a_write(&case, &s, form).await;
    let body = JSON::parse(r#"{"subject":"Other","body":"y","email":"a@b.co"}"#).unwrap();
    let two = s.submit(body, None);
    let _ = JsFuture::from(one).await.expect("resolves");
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&two, "outcome"), "succeeded");
    let key = text(&two, "key");
    for e in case.seen().iter().filter(|e| text(e, "key") == key) {
        assert!(!text(e, "body").contains("old"), "{}", text(e, "body"));
    }
}

#[test]
async fn a_json_record_taken_up_after_an_upload_sent_as_new_goes_without_the_files() {
    // Send as new put a new key in the upload's place without naming it the files' owner; the
    // new key's Forget left the files, and a JSON record another submitter left in
    // localStorage, taken up by the same body, went out as multipart with them: a second
    // ticket of the upload, and the JSON body never sent.
    let case = Case::new("upload-as-new-taken");
    let s = case.submitter(r#""storage":"local","retry":{"attempts":1}"#);
    case.plan(&["fail-before"]);
    let bytes = file_bytes(30_000, 16);
    let one = JsFuture::from(s.submit(ticket_form(&bytes, "one.png", "image/png").into(), None))
        .await
        .expect("resolves");
    assert_eq!(text(&one, "outcome"), "unsure");
    let anew = JsFuture::from(s.send_as_new()).await.expect("resolves");
    assert_eq!(text(&anew, "outcome"), "succeeded");
    let (_other, key) = json_left_unsure(&case, "local").await;
    let taken = JsFuture::from(s.submit(JSON::parse(PRINTER).unwrap(), None))
        .await
        .expect("resolves");
    assert_eq!(text(&taken, "outcome"), "succeeded");
    assert_eq!(text(&taken, "key"), key);
    for e in case.seen().iter().filter(|e| text(e, "key") == key) {
        assert_eq!(text(e, "type"), "application/json");
    }
    let listed = case.tickets().await;
    assert_eq!(listed.len(), 2, "the upload's ticket and the JSON body's");
    let attached: u32 = listed
        .iter()
        .map(|t| js_sys::Array::from(&get(t, "attachments")).length())
        .sum();
    assert_eq!(attached, 1, "one attachment in all");
}

#[test]
async fn an_upload_discarded_during_a_write_is_not_taken_up_after_a_second_discard() {
    // Only the key discarded last was kept from being taken up again: after a JSON body begun
    // and discarded in the same write's window, the same form looked at IndexedDB, found the
    // first upload's record and went on under its discarded key.
    let case = Case::new("upload-discard-twice");
    let s = case.submitter("");
    let undo = slow_idb_commits(1000);
    let bytes = file_bytes(30_000, 17);
    let (one, first) = discarded_while_written(&case, &s, &bytes).await;
    let json = s.submit(JSON::parse(PRINTER).unwrap(), None);
    s.discard();
    let two = s.submit(ticket_form(&bytes, "one.png", "image/png").into(), None);
    let _ = JsFuture::from(one).await.expect_err("discarded");
    let _ = JsFuture::from(json).await.expect_err("discarded");
    let two = JsFuture::from(two).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&two, "outcome"), "succeeded");
    assert_ne!(text(&two, "key"), first, "a new key");
    case.assert_all_sent_as("multipart/form-data;");
    assert_one_ticket_with(&case, &bytes, "one.png").await;
}

/// `form` submitted by `s` with a signal, aborted as soon as it has begun (its record's write
/// held back by slow commits, nothing sent): unsure. The promise of its submit.
async fn aborted_once_begun(s: &Submitter, form: web_sys::FormData) -> Promise {
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let submitted = s.submit(form.into(), Some(options.into()));
    for _ in 0..400 {
        if !s.pending().is_null() {
            break;
        }
        JsFuture::from(sleep(2)).await.unwrap();
    }
    assert!(!s.pending().is_null(), "begun");
    controller.abort();
    assert_eq!(s.state().as_string().as_deref(), Some("unsure"));
    submitted
}

#[test]
async fn an_upload_sent_as_new_keeps_its_files_through_an_older_key_s_late_forget() {
    // Sent as new, the files stayed named after the old key; a discarded upload's Forget,
    // carried out behind a write while the new key was pending, took them: the new key went
    // out as JSON, without them.
    let case = Case::new("upload-as-new-late");
    let s = case.submitter("");
    let undo = slow_idb_commits(1000);
    let (one, _) = discarded_while_written(&case, &s, &file_bytes(30_000, 18)).await;
    let bytes = file_bytes(30_000, 19);
    let two = aborted_once_begun(&s, ticket_form(&bytes, "two.png", "image/png")).await;
    let anew = s.send_as_new();
    let _ = JsFuture::from(one).await.expect_err("discarded");
    let _ = JsFuture::from(two).await;
    let anew = JsFuture::from(anew).await.expect("resolves");
    undo.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&anew, "outcome"), "succeeded");
    case.assert_all_sent_as("multipart/form-data;");
    assert_one_ticket_with(&case, &bytes, "two.png").await;
}

#[test]
async fn an_upload_sent_as_new_then_discarded_during_a_write_leaves_no_record() {
    // The new key's record was never written (the discard dropped its write), and its Forget
    // removed a record of its own key only: the replaced key's, with the files, stayed in
    // IndexedDB and came back unsure on the next load.
    let case = Case::new("upload-as-new-discarded");
    let s = case.submitter("");
    let undo = slow_idb_commits(1000);
    let form = ticket_form(&file_bytes(30_000, 20), "one.png", "image/png");
    let one = aborted_once_begun(&s, form).await;
    let anew = s.send_as_new();
    s.discard();
    let _ = JsFuture::from(one).await;
    let _ = JsFuture::from(anew).await.expect_err("discarded");
    assert!(case.left_idb().await, "no record left in IndexedDB");
    undo.call0(&JsValue::NULL).unwrap();
    case.reload_finds_nothing().await;
    assert!(case.seen().is_empty(), "nothing sent");
}

/// An upload `s` began and stopped, taken up by another submitter of the name (another tab):
/// that submitter, and the key.
async fn stopped_and_taken_up_by_another(
    case: &Case,
    s: &Submitter,
    seed: u32,
) -> (Submitter, String) {
    let form = ticket_form(&file_bytes(30_000, seed), "one.png", "image/png");
    let _ = JsFuture::from(aborted_once_begun(s, form).await).await;
    JsFuture::from(sleep(300)).await.unwrap();
    assert!(!case.stored().await.is_null(), "its record stored");
    let t = case.submitter("");
    for _ in 0..300 {
        if !t.pending().is_null() {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    let old = text(&t.pending(), "key");
    assert!(!old.is_empty(), "taken up by the other submitter");
    (t, old)
}

/// `t` tries its pending submission again and stops at once: its record written again, nothing
/// sent. The promise of its try.
fn tried_again_and_stopped(t: &Submitter) -> Promise {
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let again = t.try_again(Some(options.into()));
    controller.abort();
    again
}

/// `t` still has the upload of `old` pending, and IndexedDB still holds its record and file.
async fn still_pending_there(case: &Case, t: &Submitter, old: &str) {
    assert_eq!(text(&t.pending(), "key"), old, "still pending there");
    let stored = case.stored().await;
    assert!(
        !stored.is_null(),
        "the other's pending record kept (sent: {:?})",
        case.keys()
    );
    assert!(text(&stored, "record").contains(old));
    assert_eq!(js_sys::Array::from(&get(&stored, "files")).length(), 1);
}

#[test]
async fn another_submitter_s_record_of_a_key_sent_as_new_here_stays_after_the_new_key_s_answer() {
    // The replaced key's mark lasted the new key's whole life: another submitter of the name,
    // which had taken the old key up and written its record again since, lost that pending
    // record (with its files) to this one's Forget.
    let case = Case::new("upload-as-new-other");
    let s = case.submitter("");
    let (t, old) = stopped_and_taken_up_by_another(&case, &s, 21).await;
    let release = spy_hold(&case.tenant);
    let anew = s.send_as_new();
    for _ in 0..300 {
        if !case.seen().is_empty() {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(case.seen().len(), 1, "the new key sent");
    // The other tries the old key again and stops at once: its record written over the new
    // key's, nothing sent.
    let _ = JsFuture::from(tried_again_and_stopped(&t)).await;
    JsFuture::from(sleep(300)).await.unwrap();
    assert!(text(&case.stored().await, "record").contains(&old));
    release.call0(&JsValue::NULL).unwrap();
    let anew = JsFuture::from(anew).await.expect("resolves");
    assert_eq!(text(&anew, "outcome"), "succeeded");
    JsFuture::from(sleep(500)).await.unwrap();
    still_pending_there(&case, &t, &old).await;
}

#[test]
async fn another_submitter_s_record_of_a_key_sent_as_new_here_stays_after_a_discard_during_the_write(
) {
    // Discarded while the new key's record was being written, its removal at once took the
    // replaced key's too: another submitter of the name, which wrote its record of that key
    // again behind the new key's write, lost it (with its files), still pending there.
    let case = Case::new("upload-as-new-discard-other");
    let s = case.submitter("");
    let (t, old) = stopped_and_taken_up_by_another(&case, &s, 31).await;
    let undo = slow_idb_commits(1000);
    let anew = s.send_as_new();
    JsFuture::from(sleep(50)).await.unwrap();
    let again = tried_again_and_stopped(&t);
    JsFuture::from(sleep(50)).await.unwrap();
    s.discard();
    let anew = JsFuture::from(anew).await.expect_err("discarded");
    assert_eq!(error_code(&anew), "discarded", "{}", error_message(&anew));
    let _ = JsFuture::from(again).await;
    JsFuture::from(sleep(2500)).await.unwrap();
    undo.call0(&JsValue::NULL).unwrap();
    still_pending_there(&case, &t, &old).await;
    assert!(case.seen().is_empty(), "nothing sent: {:?}", case.keys());
}

#[wasm_bindgen(inline_js = r#"
// IndexedDB whose store refuses every put from the `from`-th (1-based) on, as a full disk does.
export function quota_on_put(from) {
  const proto = IDBObjectStore.prototype, real = proto.put;
  let n = 0;
  proto.put = function () {
    n++;
    if (n >= from) throw new DOMException('The quota has been exceeded.', 'QuotaExceededError');
    return real.apply(this, arguments);
  };
  return () => { proto.put = real; };
}
// indexedDB.deleteDatabase('oncekey'), as a page's "clear my data" or logout does; its state.
export function delete_oncekey_db() {
  const state = { blocked: false, done: false };
  const r = indexedDB.deleteDatabase('oncekey');
  r.onblocked = () => { state.blocked = true; };
  r.onsuccess = () => { state.done = true; };
  r.onerror = () => { state.done = true; };
  return state;
}
// `p`'s value, or the string "timeout" after `ms`.
export function within(p, ms) {
  return Promise.race([p.then((v) => v, (e) => e), new Promise((r) => setTimeout(() => r('timeout'), ms))]);
}
// A form in a same-origin iframe whose file input holds a file made by the frame's own script.
export function iframe_form_with_file(name, bytes) {
  const frame = document.createElement('iframe');
  document.body.appendChild(frame);
  const w = frame.contentWindow, doc = frame.contentDocument;
  const form = doc.createElement('form');
  form.setAttribute('data-oncekey', name);
  form.setAttribute('method', 'post');
  form.innerHTML = '<input name="subject" value="Printer on fire"><input name="email" value="ana@example.com">'
    + '<textarea name="body">See the photo</textarea><input type="file" name="photo">'
    + '<button type="submit">Send</button><p role="status"></p>';
  const dt = new w.DataTransfer();
  dt.items.add(new w.File([bytes], 'photo.jpg', { type: 'image/jpeg' }));
  form.querySelector('input[type=file]').files = dt.files;
  doc.body.appendChild(form);
  return form;
}
export function json_form(name) {
  const form = document.createElement('form');
  form.setAttribute('data-oncekey', name);
  form.setAttribute('method', 'post');
  form.innerHTML = '<input name="subject" value="Held"><input name="email" value="ana@example.com">'
    + '<textarea name="body">Held before the module loaded</textarea><button type="submit">Send</button><p role="status"></p>';
  document.body.appendChild(form);
  return form;
}
"#)]
extern "C" {
    fn quota_on_put(from: u32) -> js_sys::Function;
    fn delete_oncekey_db() -> JsValue;
    fn within(p: &Promise, ms: u32) -> Promise;
    fn iframe_form_with_file(name: &str, bytes: &js_sys::Uint8Array) -> web_sys::HtmlFormElement;
    fn json_form(name: &str) -> web_sys::HtmlFormElement;
}

#[test]
async fn an_upload_over_5_mib_whose_write_meets_the_quota_is_not_sent_unprotected() {
    // README: "When IndexedDB cannot be used (blocked, private mode, quota) the upload is kept
    // in memory with a warning, up to 5 MiB; a larger one is refused rather than sent
    // unprotected." A quota is met when the record is written, not when the database opens.
    let case = Case::new("quota-big");
    let s = case.submitter("");
    JsFuture::from(sleep(300)).await.unwrap();
    let restore = quota_on_put(1);
    let big = file_bytes(6 * 1024 * 1024, 9);
    let result = JsFuture::from(s.submit(
        ticket_form(&big, "big.bin", "application/octet-stream").into(),
        None,
    ))
    .await;
    restore.call0(&JsValue::UNDEFINED).unwrap();
    let outcome = result.as_ref().map(|r| text(r, "outcome")).ok();
    let tickets = case.tickets().await.len();
    assert!(
        result.is_err() && tickets == 0,
        "sent unprotected: outcome {outcome:?}, {tickets} ticket(s), {} attempt(s)",
        case.seen().len()
    );
}

#[test]
async fn an_upload_answered_after_a_failed_rewrite_leaves_no_record_in_indexeddb() {
    // The first attempt's record is written; the retry's rewrite fails (quota): IndexedDB is
    // given up for memory, and the answer's Forget no longer reaches the record written
    // before, which a reload then takes up as unsure and sends again.
    let case = Case::new("quota-rewrite");
    case.plan(&["fail-before"]);
    let s = case.submitter("");
    JsFuture::from(sleep(300)).await.unwrap();
    let restore = quota_on_put(2);
    let bytes = file_bytes(20_000, 10);
    let result = JsFuture::from(s.submit(ticket_form(&bytes, "a.txt", "text/plain").into(), None))
        .await
        .expect("resolves");
    restore.call0(&JsValue::UNDEFINED).unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert!(
        case.left_idb().await,
        "the record of a submission answered 201 is still in IndexedDB"
    );
}

#[test]
async fn a_form_in_a_frame_sends_its_file() {
    // attachForm takes a form of another frame ("a form of another frame is a form too"); its
    // File is of that frame's realm, and `dyn_into::<Blob>()` (instanceof) drops it: the
    // ticket goes out, succeeded, without its attachment.
    let case = Case::new("frame");
    let bytes = file_bytes(40_000, 12);
    let form = iframe_form_with_file(&case.name, &bytes);
    let _kit = oncekey::FormKit::attach(&form, case.kit_options()).expect("attached");
    form.request_submit().unwrap();
    comes_to(&form, "data-oncekey-outcome", "succeeded").await;
    let sent = case
        .seen()
        .iter()
        .map(|e| text(e, "body").contains("photo.jpg"))
        .collect::<Vec<_>>();
    let seen: Vec<String> = case
        .seen()
        .iter()
        .map(|e| {
            let body = text(e, "body");
            format!(
                "{} | {} bytes | {:?}",
                text(e, "type"),
                body.len(),
                &body[..body.len().min(400)]
            )
        })
        .collect();
    assert_eq!(sent, [true], "the attempt carried the file: {seen:#?}");
    assert_one_ticket_with(&case, &bytes, "photo.jpg").await;
}

#[test]
async fn a_deletion_of_the_database_neither_waits_for_ever_nor_holds_the_kit() {
    // (Were it to come back, the deletion would stay blocked for the page's life, and the
    // tests after this one with it.)
    // oncekey's connection never closes on `versionchange`: a deletion of the database (a
    // logout's "clear my data", a newer schema opening it) waits for ever, and every later
    // indexedDB.open of the origin waits behind it. Every Submitter's start opens it: the
    // kit's held submit (a plain JSON form, sessionStorage) waits for IndexedDB's look, and an
    // upload waits to be stored, with the form locked and no word.
    let case = Case::new("versionchange");
    let first = case.submitter("");
    JsFuture::from(sleep(300)).await.unwrap();
    let deletion = delete_oncekey_db();
    JsFuture::from(sleep(300)).await.unwrap();
    // A held submit of a JSON form (the first-paint snippet marked it).
    let form = json_form(&unique("held"));
    form.set_attribute("data-oncekey-held", "").unwrap();
    let _kit = oncekey::FormKit::attach(&form, case.kit_options()).expect("attached");
    let s = case.submitter("");
    let bytes = file_bytes(10_000, 11);
    let upload = JsFuture::from(within(
        &s.submit(ticket_form(&bytes, "v.txt", "text/plain").into(), None),
        5000,
    ))
    .await
    .unwrap();
    let held_state = form.get_attribute("data-oncekey-state");
    let (blocked, done) = (get(&deletion, "blocked"), get(&deletion, "done"));
    drop(first);
    form.remove();
    assert!(
        upload.as_string().as_deref() != Some("timeout") && held_state.as_deref() == Some("succeeded"),
        "after 5 s: upload {:?}, held JSON form {held_state:?}, deletion blocked {blocked:?} done {done:?}",
        upload.as_string().unwrap_or_else(|| text(&upload, "outcome")),
    );
}
