//! The browser SDK in headless Chromium, against the reference server with faults on.
//!
//! Run by `scripts/test-web.sh`, which starts `oncekey-server --faults` and passes its address
//! in `ONCEKEY_TEST_SERVER` at compile time. Each test uses its own tenant (the server counts per
//! `X-Tenant`) and its own submission name, so tests do not see each other's tickets or records.
//! A spy around the global `fetch` records the key of every attempt, its status, and adds the
//! `X-Fault` a test planned for it; the server's `/api/stats` says how many tickets it made.
#![cfg(target_arch = "wasm32")]

use js_sys::{Promise, Reflect, JSON};
use oncekey::core::{Key, Record};
use oncekey::js::Submitter;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{wasm_bindgen_test as test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

mod web_support;
use web_support::*;

#[wasm_bindgen(inline_js = r#"
export function spy_install() {
  if (globalThis.__oncekeySpy) return;
  const real = globalThis.fetch.bind(globalThis);
  const spy = { plans: new Map(), seen: [] };
  globalThis.__oncekeySpy = spy;
  globalThis.fetch = async (input, init) => {
    let req = new Request(input, init);
    const tenant = req.headers.get('x-tenant');
    const entry = { tenant, key: req.headers.get('idempotency-key'), at: Date.now(),
                    status: null, answeredAt: null, retryAfter: null, body: null };
    if (entry.key !== null) {
      entry.body = await req.clone().text();
      spy.seen.push(entry);
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
      entry.retryAfter = res.headers.get('retry-after');
      entry.answeredAt = Date.now();
      return res;
    } catch (e) {
      entry.status = 'error';
      entry.answeredAt = Date.now();
      throw e;
    }
  };
}
export function spy_plan(tenant, faults) { globalThis.__oncekeySpy.plans.set(tenant, faults); }
export function spy_seen(tenant) {
  return globalThis.__oncekeySpy.seen.filter((e) => e.tenant === tenant);
}
export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }
export function block_session_storage() {
  const desc = Object.getOwnPropertyDescriptor(globalThis, 'sessionStorage');
  Object.defineProperty(globalThis, 'sessionStorage', {
    configurable: true,
    get() { throw new DOMException("The document is sandboxed and lacks the 'allow-same-origin' flag.", 'SecurityError'); },
  });
  return () => Object.defineProperty(globalThis, 'sessionStorage', desc);
}
// Storage that fills up after `n` more writes of oncekey's records; `restore()` undoes it.
export function fill_storage_after(n) {
  const real = Storage.prototype.setItem;
  let left = n;
  Storage.prototype.setItem = function (k, v) {
    if (String(k).startsWith('oncekey:') && left-- <= 0) {
      throw new DOMException('The quota has been exceeded.', 'QuotaExceededError');
    }
    return real.call(this, k, v);
  };
  return () => { Storage.prototype.setItem = real; };
}
export function fill_storage() {
  const real = Storage.prototype.setItem;
  Storage.prototype.setItem = function (k, v) {
    if (String(k).startsWith('oncekey:')) {
      throw new DOMException('The quota has been exceeded.', 'QuotaExceededError');
    }
    return real.call(this, k, v);
  };
  return () => { Storage.prototype.setItem = real; };
}
// attemptHeaders that records each call as "attempt:key" in `calls`, makes attempt 2 fail (503)
// through its own header, and gives attempt 3 headers that cannot be sent (left out).
export function with_attempt_headers(options, calls) {
  options.attemptHeaders = ({ attempt, key }) => {
    calls.push(attempt + ':' + key);
    return attempt === 2 ? { 'X-Fault': 'fail-before' } : { 'Bad Name': 'x', 'X-Fault': 'a\nb', 'X-N': 5, 'X-User': 'Łukasz' };
  };
  return options;
}
// The browser offline as a page sees it: navigator.onLine false (on the navigator itself,
// over its prototype's getter), with or without the `offline` event; back online, the getter
// is the browser's again and `online` is dispatched.
export function set_offline(dispatch) {
  Object.defineProperty(navigator, 'onLine', { configurable: true, get: () => false });
  if (dispatch) globalThis.dispatchEvent(new Event('offline'));
}
export function set_online() {
  delete navigator.onLine;
  globalThis.dispatchEvent(new Event('online'));
}
// Back online with no `online` event (one the page missed).
export function set_online_quietly() {
  delete navigator.onLine;
}
// Every test begins online, even after one that failed while offline.
export function reset_online() {
  if (Object.getOwnPropertyDescriptor(navigator, 'onLine')) set_online();
}
// navigator.locks.request, each grant put off by `ms` (as a busy lock manager would), its
// requests logged as { name, asked, granted, threw, askedAt } (Date.now(); `threw`: what the
// granted callback threw, null when nothing; `askedAt`: performance.now(), finer than a
// millisecond); `restore()` undoes it.
export function delay_locks(ms) {
  const locks = navigator.locks;
  const real = locks.request.bind(locks);
  const log = [];
  locks.request = (name, cb) => {
    const entry = { name, asked: Date.now(), granted: null, threw: null, askedAt: performance.now() };
    log.push(entry);
    return real(name, (l) => new Promise((r) => setTimeout(r, ms)).then(() => {
      entry.granted = Date.now();
      try {
        return cb(l);
      } catch (e) {
        entry.threw = String(e);
        throw e;
      }
    }));
  };
  return { log, restore: () => { delete locks.request; } };
}
export function precise_now() { return performance.now(); }
export function cycle() { const a = { subject: 'loop' }; a.self = a; return a; }
export function with_bigint() { return { subject: 'big', amount: 10n }; }
export function with_function() { return { subject: 'fn', onClick() {} }; }
export function with_long_subject(chars) { return { subject: 'x'.repeat(chars) }; }
// The next fetch answers 201 with a body of `chars` characters (a JSON string), at once; the
// later ones go on as before. Gives back what it answered.
export function answer_big_once(chars) {
  const real = globalThis.fetch;
  const seen = { status: null, key: null };
  globalThis.fetch = async (input, init) => {
    globalThis.fetch = real;
    seen.key = new Request(input, init).headers.get('idempotency-key');
    seen.status = 201;
    return new Response('"' + 'x'.repeat(chars - 2) + '"', { status: 201, headers: { 'Content-Type': 'application/json' } });
  };
  return seen;
}
// The next fetch gives back `what` (not a promise: a page's broken wrapper of fetch, say)
// without sending anything; the later ones go on as before.
export function fetch_gives_back_once(what) {
  const real = globalThis.fetch;
  globalThis.fetch = () => { globalThis.fetch = real; return what; };
}
// The next fetch goes through a page's wrapper that drops the signal and whose promise never
// settles (a hung connection it does not let go of); the later ones go on as before.
export function fetch_ignores_signal_once() {
  const real = globalThis.fetch;
  const seen = { key: null };
  globalThis.fetch = (input, init) => {
    globalThis.fetch = real;
    seen.key = new Request(input, init).headers.get('idempotency-key');
    return new Promise(() => {});
  };
  return seen;
}
// Takes the Web Lock `name` and holds it (as a hung tab would) until the function it gives
// back is called.
export function hold_lock(name) {
  let release;
  const held = new Promise((r) => { release = r; });
  navigator.locks.request(name, () => held);
  return release;
}
// The page's clock jumps `ms` ahead (a laptop that slept: Date.now moves on, timers do not
// fire meanwhile); `restore()` puts it back.
export function clock_ahead(ms) {
  const real = Date.now;
  Date.now = () => real() + ms;
  return () => { Date.now = real; };
}
// `promise`, or 'still waiting' once `ms` have passed.
export function within(promise, ms) {
  return Promise.race([promise, new Promise((r) => setTimeout(() => r('still waiting'), ms))]);
}
// attemptHeaders that throws an Error whose name is not text (undefined).
export function with_attempt_headers_throwing(options) {
  options.attemptHeaders = () => {
    const e = new Error('no token yet');
    e.name = undefined;
    throw e;
  };
  return options;
}
"#)]
extern "C" {
    fn spy_install();
    fn fetch_gives_back_once(what: JsValue);
    fn fetch_ignores_signal_once() -> JsValue;
    fn within(promise: &Promise, ms: u32) -> Promise;
    fn hold_lock(name: &str) -> js_sys::Function;
    fn clock_ahead(ms: f64) -> js_sys::Function;
    fn with_attempt_headers_throwing(options: JsValue) -> JsValue;
    fn spy_plan(tenant: &str, faults: Vec<JsValue>);
    fn spy_seen(tenant: &str) -> js_sys::Array;
    fn sleep(ms: u32) -> Promise;
    fn block_session_storage() -> js_sys::Function;
    fn fill_storage() -> js_sys::Function;
    fn fill_storage_after(n: u32) -> js_sys::Function;
    fn with_attempt_headers(options: JsValue, calls: &js_sys::Array) -> JsValue;
    fn set_offline(dispatch: bool);
    fn set_online();
    fn set_online_quietly();
    fn reset_online();
    fn delay_locks(ms: u32) -> JsValue;
    fn precise_now() -> f64;
    fn cycle() -> JsValue;
    fn with_bigint() -> JsValue;
    fn with_function() -> JsValue;
    fn with_long_subject(chars: u32) -> JsValue;
    fn answer_big_once(chars: u32) -> JsValue;
}

const TICKET: &str =
    r#"{"subject":"Printer on fire","body":"3rd floor","email":"ana@example.com"}"#;

/// Every event the submitter emits from now on (the first is its current state).
fn listen(s: &Submitter) -> js_sys::Array {
    let events = js_sys::Array::new();
    let sink = events.clone();
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        sink.push(&e);
    });
    s.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    events
}

fn state(s: &Submitter) -> String {
    s.state().as_string().unwrap()
}

struct Case {
    tenant: String,
    name: String,
}

impl Case {
    fn new(what: &str) -> Case {
        spy_install();
        reset_online();
        Case {
            tenant: unique(what),
            name: unique(what),
        }
    }

    /// Options sending to the test server as this tenant, with `extra` JSON members.
    fn options(&self, extra: &str) -> JsValue {
        let sep = if extra.is_empty() { "" } else { "," };
        json(&format!(
            r#"{{"url":"{}/api/tickets","headers":{{"X-Tenant":"{}"}},"retry":{{"base":20,"cap":2000}}{sep}{extra}}}"#,
            server(),
            self.tenant
        ))
    }

    fn submitter(&self, extra: &str) -> Submitter {
        Submitter::new(self.name.as_str().into(), self.options(extra)).expect("valid options")
    }

    fn plan(&self, faults: &[&str]) {
        spy_plan(
            &self.tenant,
            faults.iter().map(|f| JsValue::from_str(f)).collect(),
        );
    }

    /// The attempts the server was sent, in order.
    fn seen(&self) -> Vec<JsValue> {
        spy_seen(&self.tenant).iter().collect()
    }

    fn keys(&self) -> Vec<String> {
        self.seen().iter().map(|e| text(e, "key")).collect()
    }

    async fn stats(&self) -> JsValue {
        stats(&self.tenant).await
    }

    async fn tickets(&self) -> f64 {
        number(&self.stats().await, "tickets")
    }

    fn stored(&self) -> Option<String> {
        stored(&self.name)
    }
}

fn json(text: &str) -> JsValue {
    JSON::parse(text).unwrap()
}

fn get(v: &JsValue, field: &str) -> JsValue {
    Reflect::get(v, &field.into()).unwrap()
}

fn text(v: &JsValue, field: &str) -> String {
    get(v, field).as_string().unwrap_or_default()
}

fn number(v: &JsValue, field: &str) -> f64 {
    get(v, field).as_f64().unwrap_or(f64::NAN)
}

/// What `within` gives when the promise has not settled in time.
const STILL_WAITING: &str = "still waiting";

/// What `p` resolved to, failing the test when it is still waiting after `ms`.
async fn settled_within(p: &Promise, ms: u32) -> JsValue {
    let result = JsFuture::from(within(p, ms)).await.unwrap();
    assert_ne!(
        result,
        JsValue::from_str(STILL_WAITING),
        "settled within {ms} ms"
    );
    result
}

async fn settle(p: Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(p).await
}

async fn submit(s: &Submitter, body: &str) -> JsValue {
    settle(s.submit(json(body), None))
        .await
        .expect("submit resolves")
}

fn error_message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_default()
}

fn statuses(case: &Case) -> Vec<String> {
    case.seen()
        .iter()
        .map(|e| {
            let s = get(e, "status");
            s.as_f64()
                .map(|n| n.to_string())
                .or_else(|| s.as_string())
                .unwrap_or_default()
        })
        .collect()
}

fn all_equal(keys: &[String]) -> bool {
    !keys.is_empty() && keys.iter().all(|k| *k == keys[0])
}

#[test]
async fn a_503_is_retried_with_the_same_key_and_makes_one_ticket() {
    let case = Case::new("503");
    case.plan(&["fail-before", "fail-before"]);
    let s = case.submitter("");
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(number(&result, "status"), 201.0);
    assert_eq!(number(&result, "attempts"), 3.0);
    assert_eq!(statuses(&case), ["503", "503", "201"]);
    let keys = case.keys();
    assert!(all_equal(&keys), "{keys:?}");
    assert_eq!(text(&result, "key"), keys[0]);
    assert_eq!(text(&get(&result, "body"), "subject"), "Printer on fire");
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(case.stored(), None, "removed after the definite answer");
}

#[test]
async fn storage_that_fills_up_between_attempts_keeps_no_stale_record_after_the_answer() {
    // The first attempt's record was written, the second's write failed (storage full), and
    // the driver went on in memory: after the 201, memory's copy was removed but the first
    // one stayed in sessionStorage, so a reload found a submission already done, unsure.
    let case = Case::new("fills-up");
    case.plan(&["fail-before"]);
    let s = case.submitter("");
    let restore = fill_storage_after(1);
    let result = submit(&s, TICKET).await;
    restore.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(statuses(&case), ["503", "201"]);
    assert_eq!(case.stored(), None, "nothing left in sessionStorage");
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_dropped_reply_ends_in_one_ticket_and_a_replay_with_the_same_key() {
    // The server commits, then closes the connection without an answer. Chromium itself resends
    // a request whose reused connection closed before any answer byte (with the same headers,
    // so the same key); otherwise fetch fails and the driver retries. Either way the server
    // replays the stored answer for the same key, and one ticket exists.
    let case = Case::new("drop");
    case.plan(&["drop-reply"]);
    let s = case.submitter("");
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(number(&result, "status"), 201.0);
    assert_eq!(get(&result, "replayed"), JsValue::TRUE);
    assert_eq!(statuses(&case).last().unwrap(), "201");
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    let stats = case.stats().await;
    assert_eq!(number(&stats, "tickets"), 1.0);
    assert!(number(&stats, "replays") >= 1.0);
}

#[test]
async fn a_timeout_is_retried_with_the_same_key() {
    let case = Case::new("timeout");
    case.plan(&["delay=1500"]);
    let s = case.submitter(r#""timeoutMs":300"#);
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    let seen = statuses(&case);
    assert_eq!(
        seen[0], "error",
        "the first attempt was abandoned: {seen:?}"
    );
    assert_eq!(seen.last().unwrap(), "201");
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_409_is_retried_with_the_same_key_not_before_its_retry_after() {
    // The first attempt is held by the server for 2.5 s and abandoned here after 300 ms; the
    // next one finds the key in progress: 409 with Retry-After.
    let case = Case::new("409");
    case.plan(&["delay=2500"]);
    let s = case.submitter(r#""timeoutMs":300"#);
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    let seen = case.seen();
    let conflict = seen
        .iter()
        .position(|e| number(e, "status") == 409.0)
        .unwrap_or_else(|| panic!("no 409 among {:?}", statuses(&case)));
    let retry_after: f64 = text(&seen[conflict], "retryAfter").parse().unwrap();
    let next = &seen[conflict + 1];
    assert!(
        number(next, "at") >= number(&seen[conflict], "answeredAt") + retry_after * 1000.0,
        "the attempt after the 409 came before its Retry-After of {retry_after} s"
    );
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_new_key_after_a_201_and_after_a_400() {
    let case = Case::new("newkey");
    let s = case.submitter("");
    let first = submit(&s, TICKET).await;
    let second = submit(&s, TICKET).await;
    assert_eq!(text(&first, "outcome"), "succeeded");
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_ne!(text(&first, "key"), text(&second, "key"));
    let bad = r#"{"subject":"","body":"no subject","email":"ana@example.com"}"#;
    let refused = submit(&s, bad).await;
    assert_eq!(text(&refused, "outcome"), "refused");
    assert_eq!(number(&refused, "status"), 400.0);
    let again = submit(&s, bad).await;
    assert_eq!(text(&again, "outcome"), "refused");
    assert_ne!(text(&refused, "key"), text(&again, "key"));
    let keys = case.keys();
    assert_eq!(keys.len(), 4);
    assert_eq!(
        keys.iter().collect::<std::collections::BTreeSet<_>>().len(),
        4
    );
    assert_eq!(case.tickets().await, 2.0);
    assert_eq!(case.stored(), None);
}

/// Leaves a submission pending (unsure) under the case's name, as a page that was closed or
/// reloaded while the server failed. Returns its key.
async fn leave_pending(case: &Case) -> String {
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "unsure");
    assert_eq!(number(&result, "status"), 503.0);
    assert_eq!(text(&result, "gaveUp"), "attempts spent");
    text(&result, "key")
}

#[test]
async fn a_fresh_submitter_with_the_same_name_finishes_the_pending_one() {
    let case = Case::new("reload");
    let key = leave_pending(&case).await;
    assert!(case.stored().unwrap().contains(&key));
    // The "reloaded page": a new submitter of the same name, storage as it was left.
    let s = case.submitter("");
    assert_eq!(state(&s), "unsure");
    let pending = s.pending();
    assert_eq!(text(&pending, "key"), key);
    assert_eq!(text(&get(&pending, "body"), "subject"), "Printer on fire");
    assert_eq!(number(&pending, "attempts"), 1.0);
    let result = settle(s.try_again(None)).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(number(&result, "attempts"), 2.0);
    assert_eq!(case.keys(), [key.clone(), key]);
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(case.stored(), None);
    assert!(s.pending().is_null());
}

#[test]
async fn an_answer_after_pagehide_keeps_the_record_for_the_next_page_to_ask_again() {
    let case = Case::new("unload");
    let s = case.submitter("");
    let answered = s.submit(json(TICKET), None);
    // The page begins to unload with the request on its way: whatever answer comes now is
    // shown to nobody.
    dispatch("pagehide");
    let result = settle(answered).await.unwrap();
    dispatch("pageshow");
    assert_eq!(text(&result, "outcome"), "succeeded");
    let key = text(&result, "key");
    // So the record stays, and the next page finds the submission under its key.
    assert!(case.stored().is_some_and(|r| r.contains(&key)));
    let next = case.submitter("");
    assert_eq!(state(&next), "unsure");
    assert_eq!(text(&next.pending(), "key"), key);
    // Asking again gets the server's replay: one ticket, one key, and the record goes.
    let again = settle(next.try_again(None)).await.unwrap();
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(get(&again, "replayed"), JsValue::TRUE);
    assert_eq!(case.keys(), [key.clone(), key]);
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(case.stored(), None);
    // Shown again (`pageshow`), a page removes a record after its answer as before.
    let after = submit(&next, TICKET).await;
    assert_eq!(text(&after, "outcome"), "succeeded");
    assert_eq!(case.stored(), None);
    drop(s);
}

#[test]
async fn a_discard_while_the_page_unloads_removes_the_record_the_page_let_go() {
    // Before: the record was kept like an answer's after pagehide, so the next page found the
    // discarded submission, unsure, and sent it again (at once, with `resume`).
    let case = Case::new("unload-discard");
    let key = leave_pending(&case).await;
    let s = case.submitter("");
    assert_eq!(state(&s), "unsure");
    // The page lets it go as it unloads (its own pagehide listener, say).
    dispatch("pagehide");
    s.discard();
    dispatch("pageshow");
    assert_eq!(case.stored(), None, "the discarded record is gone");
    let next = case.submitter(r#""resume":true"#);
    assert_eq!(state(&next), "idle");
    assert_eq!(case.keys(), [key], "nothing was sent again");
    assert_eq!(case.tickets().await, 0.0);
}

#[test]
async fn a_different_body_is_refused_and_leaves_the_pending_record_untouched() {
    let case = Case::new("differs");
    let key = leave_pending(&case).await;
    let before = case.stored().unwrap();
    let s = case.submitter("");
    let other = r#"{"subject":"Another","body":"x","email":"ana@example.com"}"#;
    let err = settle(s.submit(json(other), None)).await.unwrap_err();
    assert_eq!(text(&err, "code"), "pending");
    let message = error_message(&err);
    assert!(
        message.contains("another body") && message.contains(&key[..8]),
        "{message}"
    );
    assert_eq!(
        case.stored().unwrap(),
        before,
        "the pending record is untouched"
    );
    assert_eq!(case.keys().len(), 1, "nothing was sent");
    // The same body, in another key order, is the same submission: it goes on with its key.
    let same = r#"{"email":"ana@example.com","subject":"Printer on fire","body":"3rd floor"}"#;
    let result = submit(&s, same).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_double_submit_sends_one_request() {
    let case = Case::new("double");
    let s = case.submitter("");
    let first = s.submit(json(TICKET), None);
    let second = s.submit(json(TICKET), None);
    let (first, second) = (settle(first).await.unwrap(), settle(second).await.unwrap());
    assert_eq!(text(&first, "outcome"), "succeeded");
    assert_eq!(text(&first, "key"), text(&second, "key"));
    assert_eq!(case.keys().len(), 1, "one request");
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn an_on_change_stop_function_stops_its_listener_only_and_is_harmless_after_free() {
    let case = Case::new("stop");
    let s = case.submitter("");
    let (kept, stopped) = (js_sys::Array::new(), js_sys::Array::new());
    let sinks = [kept.clone(), stopped.clone()].map(|sink| {
        Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
            sink.push(&get(&e, "state"));
        })
    });
    let stops = sinks
        .each_ref()
        .map(|f| js_sys::Function::from(s.on_change(f.as_ref().clone()).unwrap()));
    stops[1].call0(&JsValue::NULL).expect("stop");
    // Stopped twice: nothing more happens.
    stops[1].call0(&JsValue::NULL).expect("stop again");
    submit(&s, TICKET).await;
    let states = |a: &js_sys::Array| a.iter().map(|v| v.as_string().unwrap()).collect::<Vec<_>>();
    assert_eq!(states(&kept), ["idle", "sending", "succeeded"]);
    assert_eq!(states(&stopped), ["idle"], "heard nothing after its stop");
    // A page's cleanup that runs after the submitter was freed (a framework's unmount after
    // `free()`, say) calls a stop function that has nothing left to stop: no error. The driver
    // goes once its start-up read of IndexedDB is over.
    drop(s);
    JsFuture::from(sleep(300)).await.unwrap();
    stops[0].call0(&JsValue::NULL).expect("stop after free");
    drop(sinks);
}

#[test]
async fn an_answer_body_over_the_limit_is_not_taken_in_and_the_status_decides() {
    // A 201 whose body is larger than the module keeps (16 Mi characters): the submission
    // succeeded, with no body; the module's memory does not take it in, and the next
    // submission goes on as usual.
    let case = Case::new("big-answer");
    let s = case.submitter("");
    submit(&s, TICKET).await;
    let memory = || {
        wasm_bindgen::memory()
            .unchecked_into::<js_sys::WebAssembly::Memory>()
            .buffer()
            .unchecked_into::<js_sys::ArrayBuffer>()
            .byte_length()
    };
    let before = memory();
    let seen = answer_big_once(16 * 1024 * 1024 + 1);
    let r = submit(&s, TICKET).await;
    assert_eq!(text(&r, "outcome"), "succeeded");
    assert_eq!(text(&r, "key"), text(&seen, "key"));
    assert!(get(&r, "body").is_null(), "no body kept");
    assert!(
        memory() - before < 4 * 1024 * 1024,
        "the module's memory grew by {} bytes",
        memory() - before
    );
    assert_eq!(state(&s), "succeeded");
    let next = submit(&s, TICKET).await;
    assert_eq!(text(&next, "outcome"), "succeeded");
    assert_eq!(case.tickets().await, 2.0, "the two sent to the server");
}

/// Submits the ticket and waits up to 3 s, without awaiting the submit's promise (a driver
/// stuck on the way would never settle it), for the submitter to have succeeded; its result.
async fn succeeds_by_itself(s: &Submitter) -> JsValue {
    let settled = s.submit(json(TICKET), None);
    for _ in 0..300 {
        if !matches!(state(s).as_str(), "sending" | "waiting") {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(state(s), "succeeded");
    let r = settle(settled).await.expect("submit resolves");
    assert_eq!(text(&r, "outcome"), "succeeded");
    r
}

#[test]
async fn a_fetch_that_gives_back_no_promise_is_a_failed_attempt_retried_with_the_same_key() {
    // A page's wrapper of fetch that gives back something else than a promise: the attempt
    // failed (nothing was sent), and the retry goes out with the same key. Before, the
    // exception left the attempt with its Web Lock where no step would take it again: the
    // submitter said "sending" for good.
    for what in [JsValue::UNDEFINED, JsValue::from_str("not a promise")] {
        let case = Case::new("fetch-no-promise");
        let s = case.submitter("");
        fetch_gives_back_once(what);
        let r = succeeds_by_itself(&s).await;
        assert_eq!(
            number(&r, "attempts"),
            2.0,
            "the failed attempt, then the one sent"
        );
        assert_eq!(
            case.keys(),
            vec![text(&r, "key")],
            "sent once, with its key"
        );
        assert_eq!(case.tickets().await, 1.0);
    }
}

#[test]
async fn a_fetch_that_ignores_the_timeout_s_abort_is_abandoned_and_retried_with_the_same_key() {
    let case = Case::new("hung-fetch");
    let s = case.submitter(r#""timeoutMs":200"#);
    let hung = fetch_ignores_signal_once();
    let waiting = s.submit(json(TICKET), None);
    let result = settled_within(&waiting, 5000).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(number(&result, "attempts"), 2.0);
    // The hung attempt never reached the server; the retry did, under the same key.
    assert_eq!(text(&hung, "key"), text(&result, "key"));
    assert_eq!(case.keys(), [text(&result, "key")]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_web_lock_another_tab_never_lets_go_bounds_each_attempt_and_sends_nothing_beside_it() {
    let case = Case::new("hung-lock");
    let key = leave_pending(&case).await;
    let release = hold_lock(&format!("oncekey:{key}"));
    let s = case.submitter(r#""timeoutMs":200,"retry":{"attempts":2,"base":20}"#);
    let waiting = s.try_again(None);
    let result = settled_within(&waiting, 5000).await;
    assert_eq!(text(&result, "outcome"), "unsure");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(
        case.keys(),
        std::slice::from_ref(&key),
        "nothing sent beside the lock's holder"
    );
    assert!(case.stored().unwrap().contains(&key), "still pending");
    // Let go, Try again sends it under its key.
    release.call0(&JsValue::NULL).unwrap();
    let result = settle(s.try_again(None)).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn try_again_after_the_key_s_lifetime_ran_out_unseen_settles_expired() {
    // Unsure, then the laptop sleeps past the key's lifetime: the deadline's timer has not
    // fired when the person clicks Try again, and the round ends expired as it begins.
    let case = Case::new("slept");
    let key = leave_pending(&case).await;
    let s = case.submitter("");
    let back = clock_ahead(25.0 * 3600.0 * 1000.0);
    let waiting = s.try_again(None);
    let result = JsFuture::from(within(&waiting, 3000)).await;
    back.call0(&JsValue::NULL).unwrap();
    let result = result.unwrap();
    assert_ne!(result, JsValue::from_str(STILL_WAITING), "settled");
    assert_eq!(text(&result, "outcome"), "expired");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(
        case.keys(),
        std::slice::from_ref(&key),
        "nothing sent past its lifetime"
    );
    assert!(
        case.stored().unwrap().contains(&key),
        "kept for send-as-new"
    );
}

#[test]
async fn attempt_headers_that_throw_an_error_without_a_name_are_said_and_the_attempt_goes_on() {
    // The error is described from what it has (its message), not read as if its name were
    // text: that read threw through the attempt and left the submitter "sending" for good.
    let case = Case::new("headers-throw");
    let options = with_attempt_headers_throwing(case.options(""));
    let s = Submitter::new(case.name.as_str().into(), options).expect("valid options");
    let r = succeeds_by_itself(&s).await;
    assert_eq!(case.keys(), vec![text(&r, "key")]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn blocked_storage_degrades_to_memory_and_still_submits_once() {
    let case = Case::new("blocked");
    let restore = block_session_storage();
    let s = case.submitter("");
    let events = listen(&s);
    restore.call0(&JsValue::UNDEFINED).unwrap();
    let warnings: Vec<String> = events
        .iter()
        .filter_map(|e| get(&e, "warning").as_string())
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("sessionStorage cannot be used"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains("SecurityError"), "{}", warnings[0]);
    assert_eq!(s.storage(), "memory");
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn full_storage_degrades_to_memory_and_still_submits_once() {
    let case = Case::new("full");
    let restore = fill_storage();
    let s = case.submitter("");
    let events = listen(&s);
    let result = submit(&s, TICKET).await;
    restore.call0(&JsValue::UNDEFINED).unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    let warnings: Vec<String> = events
        .iter()
        .filter_map(|e| get(&e, "warning").as_string())
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("QuotaExceededError"),
        "{}",
        warnings[0]
    );
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn corrupt_and_foreign_records_are_removed_with_a_warning() {
    for stored in [
        "{not json",
        r#"{"v":2,"name":"x","key":"k"}"#,
        r#"[1,2,3]"#,
        r#"{"v":1,"name":"someone-else","key":"k","method":"POST","url":"/x","body":"{}","startedAt":1,"attempts":1}"#,
    ] {
        let case = Case::new("corrupt");
        session()
            .set_item(&format!("oncekey:{}", case.name), stored)
            .unwrap();
        let s = case.submitter("");
        let events = listen(&s);
        let warnings: Vec<String> = events
            .iter()
            .filter_map(|e| get(&e, "warning").as_string())
            .collect();
        assert_eq!(warnings.len(), 1, "{stored}: {warnings:?}");
        assert!(warnings[0].contains("was removed"), "{}", warnings[0]);
        assert_eq!(case.stored(), None, "{stored}");
        assert!(s.pending().is_null());
        assert_eq!(state(&s), "idle");
    }
    // And the submitter still works.
    let case = Case::new("corrupt");
    session()
        .set_item(&format!("oncekey:{}", case.name), "{not json")
        .unwrap();
    let s = case.submitter("");
    assert_eq!(text(&submit(&s, TICKET).await, "outcome"), "succeeded");
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn unsure_after_the_budget_then_try_again_succeeds_with_the_same_key() {
    let case = Case::new("budget");
    // fail-before answers 503 with Retry-After: 1; the round's budget has room for two.
    case.plan(&["fail-before"; 64]);
    let s = case.submitter(r#""retry":{"attempts":64,"base":40,"cap":1000,"budget":1500}"#);
    let events = listen(&s);
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "unsure");
    assert_eq!(text(&result, "gaveUp"), "time budget spent");
    assert_eq!(number(&result, "status"), 503.0);
    let states: Vec<String> = events.iter().map(|e| text(&e, "state")).collect();
    assert!(states.contains(&"waiting".to_owned()), "{states:?}");
    assert_eq!(states.last().unwrap(), "unsure");
    assert!(case.stored().is_some(), "still stored while unsure");
    // A listener added now hears the state as it is: unsure, with no attempt due (the key's
    // deadline, which the driver's timer waits for, is not an attempt).
    let now = listen(&s).get(0);
    assert_eq!(text(&now, "state"), "unsure");
    assert!(get(&now, "nextAttemptAt").is_null(), "{now:?}");
    assert_eq!(case.tickets().await, 0.0);
    case.plan(&[]);
    let again = settle(s.try_again(None)).await.unwrap();
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(text(&again, "key"), text(&result, "key"));
    assert!(all_equal(&case.keys()));
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(case.stored(), None);
}

#[test]
async fn bodies_json_cannot_carry_are_refused_before_anything_is_stored_or_sent() {
    let case = Case::new("nojson");
    let s = case.submitter("");
    for (body, expected) in [
        (cycle(), "circular"),
        (with_bigint(), "BigInt"),
        (with_function(), "a function at \"onClick\""),
        (JsValue::UNDEFINED, "undefined"),
        // Longer than the module takes in: 16 Mi characters of JSON.
        (with_long_subject(16 * 1024 * 1024), "16777230 characters"),
    ] {
        let err = settle(s.submit(body.clone(), None)).await.unwrap_err();
        assert_eq!(text(&err, "code"), "body");
        let message = error_message(&err);
        assert!(message.contains(expected), "{message}");
    }
    assert_eq!(case.stored(), None);
    assert!(case.keys().is_empty());
    assert_eq!(state(&s), "idle");
}

#[test]
async fn form_encoding_and_sf_string_keys_reach_the_server() {
    let case = Case::new("form");
    let s = case.submitter(r#""encoding":"form","keyFormat":"sf-string""#);
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    let seen = case.seen();
    assert!(text(&seen[0], "key").starts_with('"'));
    assert!(text(&seen[0], "body").contains("subject=Printer+on+fire"));
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_discard_forgets_the_pending_submission_and_the_next_gets_a_new_key() {
    let case = Case::new("discard");
    let key = leave_pending(&case).await;
    let s = case.submitter("");
    s.discard();
    assert_eq!(case.stored(), None);
    assert!(s.pending().is_null());
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_ne!(text(&result, "key"), key);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn resume_resends_a_pending_submission_by_itself_and_submit_joins_it() {
    let case = Case::new("resume");
    let key = leave_pending(&case).await;
    let s = case.submitter(r#""resume":true"#);
    // Resent by itself, once the Retry-After (1 s) of the 503 that ended its round is past.
    assert_eq!(state(&s), "waiting", "not before the server's time");
    // The same body joins it: no second request.
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(case.keys(), [key.clone(), key]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn two_submitters_resuming_one_record_send_one_at_a_time() {
    // As two tabs that share a pending record (a duplicated tab copies sessionStorage): both
    // resume it at once. The Web Lock on the key lets one attempt out at a time, so the second
    // finds the first finished (a replay), never still in progress (a 409).
    let case = Case::new("locks");
    let key = leave_pending(&case).await;
    case.plan(&["delay=500"]);
    let a = case.submitter(r#""resume":true"#);
    let b = case.submitter(r#""resume":true"#);
    let (ra, rb) = (a.submit(json(TICKET), None), b.submit(json(TICKET), None));
    let (ra, rb) = (settle(ra).await.unwrap(), settle(rb).await.unwrap());
    assert_eq!(text(&ra, "outcome"), "succeeded");
    assert_eq!(text(&rb, "outcome"), "succeeded");
    assert_eq!(text(&ra, "key"), key);
    assert_eq!(text(&rb, "key"), key);
    assert_eq!(statuses(&case), ["503", "201", "201"]);
    assert!(get(&ra, "replayed") == JsValue::TRUE || get(&rb, "replayed") == JsValue::TRUE);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_discard_while_sending_aborts_and_answers_the_waiting_caller() {
    let case = Case::new("abort");
    case.plan(&["delay=800"]);
    let s = case.submitter("");
    let waiting = s.submit(json(TICKET), None);
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(state(&s), "sending");
    s.discard();
    let err = settle(waiting).await.unwrap_err();
    assert_eq!(text(&err, "code"), "discarded");
    assert_eq!(state(&s), "idle");
    assert_eq!(case.stored(), None);
    assert_eq!(statuses(&case), ["error"], "the fetch was aborted");
}

#[test]
async fn secrets_go_with_every_attempt_and_never_to_storage() {
    let case = Case::new("secret");
    case.plan(&["fail-before"]);
    let s = case.submitter("");
    s.set_secrets(json(r#"{"email":"ana@example.com"}"#))
        .unwrap();
    let waiting = s.submit(json(r#"{"subject":"Printer","body":"3rd floor"}"#), None);
    let stored = case.stored().expect("stored before the first byte is sent");
    assert!(
        stored.contains("Printer") && !stored.contains("ana@"),
        "{stored}"
    );
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    let bodies: Vec<String> = case.seen().iter().map(|e| text(e, "body")).collect();
    assert_eq!(bodies.len(), 2);
    assert!(
        bodies
            .iter()
            .all(|b| b.contains(r#""email":"ana@example.com""#)),
        "{bodies:?}"
    );
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn another_secret_after_a_reload_is_a_conflict_never_retried() {
    // The first attempt is abandoned (timeout) while the server commits it; after the "reload"
    // the person types another secret, so the same key now comes with another body: 422.
    let case = Case::new("conflict");
    case.plan(&["delay=1000"]);
    let secret = |v: &str| json(&format!(r#"{{"email":"{v}"}}"#));
    let body = r#"{"subject":"Printer","body":"3rd floor"}"#;
    let first = case.submitter(r#""timeoutMs":200,"retry":{"attempts":1}"#);
    first.set_secrets(secret("ana@example.com")).unwrap();
    let unsure = submit(&first, body).await;
    assert_eq!(text(&unsure, "outcome"), "unsure");
    drop(first);
    JsFuture::from(sleep(1200)).await.unwrap(); // the server finishes the first attempt
    let again = case.submitter("");
    again.set_secrets(secret("bob@example.com")).unwrap();
    let result = settle(again.try_again(None)).await.unwrap();
    assert_eq!(text(&result, "outcome"), "conflict");
    assert_eq!(number(&result, "status"), 422.0);
    assert_eq!(text(&result, "key"), text(&unsure, "key"));
    assert_eq!(statuses(&case), ["error", "422"], "not retried");
    assert_eq!(case.stored(), None, "definite: forgotten");
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn secrets_set_right_after_a_resuming_submitter_is_made_go_with_its_first_attempt() {
    // The first attempt is abandoned (timeout) while the server commits it; the next page makes
    // a submitter that resumes at once and sets the same secret in the same task.
    let case = Case::new("resume-secret");
    case.plan(&["delay=1000"]);
    let body = r#"{"subject":"Printer","body":"3rd floor"}"#;
    let secret = || json(r#"{"email":"ana@example.com"}"#);
    let first = case.submitter(r#""timeoutMs":200,"retry":{"attempts":1}"#);
    first.set_secrets(secret()).unwrap();
    let unsure = submit(&first, body).await;
    assert_eq!(text(&unsure, "outcome"), "unsure");
    drop(first);
    JsFuture::from(sleep(1200)).await.unwrap();
    let again = case.submitter(r#""resume":true"#);
    again.set_secrets(secret()).unwrap();
    let result = submit(&again, body).await;
    assert_eq!(
        text(&result, "outcome"),
        "succeeded",
        "{:?}",
        statuses(&case)
    );
    assert_eq!(text(&result, "key"), text(&unsure, "key"));
    assert_eq!(get(&result, "replayed"), JsValue::TRUE);
    let bodies: Vec<String> = case.seen().iter().map(|e| text(e, "body")).collect();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(
        bodies
            .iter()
            .all(|b| b.contains(r#""email":"ana@example.com""#)),
        "{bodies:?}"
    );
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn attempt_headers_are_asked_for_on_every_attempt_and_never_stored() {
    // After a reload, with one attempt made: the numbers go on from the stored record's.
    let case = Case::new("trace");
    let key = leave_pending(&case).await;
    let calls = js_sys::Array::new();
    let options = with_attempt_headers(case.options(""), &calls);
    let s = Submitter::new(case.name.as_str().into(), options).expect("valid options");
    let waiting = s.try_again(None);
    let stored = case.stored().expect("pending");
    assert!(
        stored.contains(&key) && !stored.contains("fail-before"),
        "{stored}"
    );
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(number(&result, "attempts"), 3.0);
    let calls: Vec<String> = calls.iter().filter_map(|c| c.as_string()).collect();
    assert_eq!(calls, [format!("2:{key}"), format!("3:{key}")]);
    // The header went on attempt 2 only: it failed, and attempt 3, whose headers could not be
    // sent, went out without them and made the ticket.
    assert_eq!(statuses(&case), ["503", "503", "201"]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn local_storage_keeps_the_record_there_until_the_answer() {
    let case = Case::new("local");
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""storage":"local""#);
    assert_eq!(s.storage(), "local");
    let local = web_sys::window().unwrap().local_storage().unwrap().unwrap();
    let slot = format!("oncekey:{}", case.name);
    let waiting = s.submit(json(TICKET), None);
    let stored = local
        .get_item(&slot)
        .unwrap()
        .expect("in localStorage before sending");
    assert!(stored.contains("Printer on fire"), "{stored}");
    assert_eq!(case.stored(), None, "not in sessionStorage");
    // Another tab of the origin finds it: a new submitter of the same name sees it pending.
    let other = case.submitter(r#""storage":"local""#);
    assert_eq!(text(&other.pending(), "key"), text(&s.pending(), "key"));
    drop(other);
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(number(&result, "attempts"), 2.0);
    assert!(all_equal(&case.keys()));
    assert_eq!(
        local.get_item(&slot).unwrap(),
        None,
        "removed after the answer"
    );
    assert_eq!(case.tickets().await, 1.0);
}

/// Two tabs of the origin on `localStorage`, as two submitters of one name made before either
/// submits (each read storage when it was made, and found nothing).
fn two_tabs(case: &Case) -> (Submitter, Submitter, web_sys::Storage, String) {
    let a = case.submitter(r#""storage":"local""#);
    let b = case.submitter(r#""storage":"local""#);
    let local = web_sys::window().unwrap().local_storage().unwrap().unwrap();
    (a, b, local, format!("oncekey:{}", case.name))
}

#[test]
async fn two_tabs_on_local_storage_sending_the_same_body_send_it_under_one_key() {
    let case = Case::new("tabs-same");
    case.plan(&["fail-before"]);
    let (a, b, local, slot) = two_tabs(&case);
    let first = a.submit(json(TICKET), None);
    let second = b.submit(json(TICKET), None);
    let (first, second) = (settle(first).await.unwrap(), settle(second).await.unwrap());
    assert_eq!(text(&first, "outcome"), "succeeded");
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_eq!(text(&first, "key"), text(&second, "key"));
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(local.get_item(&slot).unwrap(), None);
}

#[test]
async fn a_tab_on_local_storage_is_refused_another_body_while_another_tab_s_is_pending() {
    let case = Case::new("tabs-other");
    case.plan(&["fail-before"]);
    let (a, b, local, slot) = two_tabs(&case);
    let first = a.submit(json(TICKET), None);
    let key = text(&a.pending(), "key");
    let other = r#"{"subject":"Another","body":"x","email":"ana@example.com"}"#;
    let err = settle(b.submit(json(other), None)).await.unwrap_err();
    assert_eq!(text(&err, "code"), "pending");
    assert!(
        error_message(&err).contains(&key[..8]),
        "{}",
        error_message(&err)
    );
    let stored = local.get_item(&slot).unwrap().expect("the pending record");
    assert!(
        Record::is_of_key(&stored, &Key::parse(&key).unwrap()),
        "{stored}"
    );
    let first = settle(first).await.unwrap();
    assert_eq!(text(&first, "outcome"), "succeeded");
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await, 1.0, "the other body was never sent");
    assert_eq!(local.get_item(&slot).unwrap(), None);
}

/// A submitter on `storage` (`"local"`, `"session"`) whose one attempt failed before the server
/// did anything: unsure, its record stored. It and its key.
async fn unsure_on(case: &Case, storage: &str) -> (Submitter, String) {
    case.plan(&["fail-before"]);
    let a = case.submitter(&format!(
        r#""storage":"{storage}","retry":{{"attempts":1}}"#
    ));
    let first = submit(&a, TICKET).await;
    assert_eq!(text(&first, "outcome"), "unsure");
    (a, text(&first, "key"))
}

#[test]
async fn an_unsure_submission_another_tab_had_answered_no_longer_refuses_another_body() {
    let case = Case::new("tabs-answered");
    let (a, key) = unsure_on(&case, "local").await;
    // Another tab opens, finds it, tries it again and has its answer: the record is removed.
    let (b, _, local, slot) = two_tabs(&case);
    assert_eq!(state(&b), "unsure");
    let answered = settle(b.try_again(None)).await.unwrap();
    assert_eq!(text(&answered, "outcome"), "succeeded");
    assert_eq!(text(&answered, "key"), key);
    assert_eq!(local.get_item(&slot).unwrap(), None);
    // This tab still had it unsure: another body is sent under a new key, not refused for a
    // submission that is no longer pending anywhere.
    assert_eq!(state(&a), "unsure");
    let other = r#"{"subject":"Another","body":"x","email":"ana@example.com"}"#;
    let second = submit(&a, other).await;
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_ne!(text(&second, "key"), key);
    assert_eq!(case.tickets().await, 2.0);
    assert_eq!(local.get_item(&slot).unwrap(), None);
    assert!(a.pending().is_null());
}

#[test]
async fn with_secrets_set_another_body_is_still_refused_after_another_tab_answered() {
    // Secrets kept for the unsure submission's "Try again", or set for the next body: nothing
    // tells which, so the refusal stands and nothing of the other body is sent.
    let case = Case::new("tabs-answered-secret");
    case.plan(&["fail-before"]);
    let a = case.submitter(r#""storage":"local","retry":{"attempts":1}"#);
    a.set_secrets(json(r#"{"email":"first@example.com"}"#))
        .unwrap();
    let first = submit(&a, r#"{"subject":"First","body":"x"}"#).await;
    assert_eq!(text(&first, "outcome"), "unsure");
    let (b, _, local, slot) = two_tabs(&case);
    let _ = settle(b.try_again(None)).await;
    assert_eq!(local.get_item(&slot).unwrap(), None, "answered there");
    let sent = case.seen().len();
    let other = r#"{"subject":"Second","body":"y","email":"second@example.com"}"#;
    let err = settle(a.submit(json(other), None)).await.unwrap_err();
    assert_eq!(text(&err, "code"), "pending");
    assert_eq!(case.seen().len(), sent, "nothing sent");
    assert_eq!(local.get_item(&slot).unwrap(), None, "nothing stored");
    // Discarded here, the other body goes out as it is, without the first one's secret.
    a.discard();
    let second = submit(&a, other).await;
    assert_eq!(text(&second, "outcome"), "succeeded", "{second:?}");
    let body = text(&case.seen().pop().unwrap(), "body");
    assert!(
        body.contains("second@example.com") && !body.contains("first@example.com"),
        "{body}"
    );
}

#[test]
async fn another_body_is_still_refused_when_another_tab_stored_its_own_submission_since() {
    let case = Case::new("tabs-replaced");
    let (a, key) = unsure_on(&case, "local").await;
    let (b, _, local, slot) = two_tabs(&case);
    let mine = local.get_item(&slot).unwrap().expect("stored while unsure");
    let answered = settle(b.try_again(None)).await.unwrap();
    assert_eq!(text(&answered, "outcome"), "succeeded");
    // Then another tab stores a submission of its own under the name: pending there.
    let theirs_key = "5f0c3e1a-3b7e-4c1d-9a2b-8e7f6d5c4b3a";
    local
        .set_item(&slot, &mine.replace(&key, theirs_key))
        .unwrap();
    let sent = case.seen().len();
    let other = r#"{"subject":"Another","body":"x","email":"ana@example.com"}"#;
    let err = settle(a.submit(json(other), None)).await.unwrap_err();
    assert_eq!(text(&err, "code"), "pending");
    // This tab still shows its own, and theirs is left as it was; nothing sent.
    assert_eq!(text(&a.pending(), "key"), key);
    assert!(local.get_item(&slot).unwrap().unwrap().contains(theirs_key));
    assert_eq!(case.seen().len(), sent);
}

#[test]
async fn a_listener_submitting_another_body_on_unsure_before_its_caller_is_answered_is_refused() {
    // The record is gone (another submitter of the name discarded it during the attempt), but
    // the round's caller is not answered yet when a listener hears "unsure" and submits.
    let case = Case::new("listener-unsure");
    case.plan(&["fail-before"]);
    let a = std::rc::Rc::new(case.submitter(r#""retry":{"attempts":1}"#));
    let other = r#"{"subject":"Another","body":"x","email":"ana@example.com"}"#;
    let sent: std::rc::Rc<std::cell::RefCell<Option<Promise>>> = Default::default();
    let (weak, out) = (std::rc::Rc::downgrade(&a), sent.clone());
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        if text(&e, "state") == "unsure" && out.borrow().is_none() {
            let a = weak.upgrade().unwrap();
            *out.borrow_mut() = Some(a.submit(json(other), None));
        }
    });
    a.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let first = a.submit(json(TICKET), None);
    let b = case.submitter("");
    assert_eq!(state(&b), "unsure");
    b.discard();
    assert_eq!(case.stored(), None);
    let first = settle(first).await.unwrap();
    assert_eq!(text(&first, "outcome"), "unsure");
    let refused = sent.borrow_mut().take().expect("submitted on unsure");
    let err = settle(refused).await.unwrap_err();
    assert_eq!(text(&err, "code"), "pending");
    assert_eq!(case.seen().len(), 1, "the first attempt only");
    // Once its caller was answered, another body goes out.
    let second = submit(&a, other).await;
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_ne!(text(&second, "key"), text(&first, "key"));
}

#[test]
async fn the_same_body_after_another_submitter_had_the_answer_is_replayed_under_its_key() {
    let case = Case::new("page-answered");
    let (a, key) = unsure_on(&case, "session").await;
    // Another submitter of the name in this page (one sessionStorage) has its answer.
    let b = case.submitter("");
    let answered = settle(b.try_again(None)).await.unwrap();
    assert_eq!(text(&answered, "outcome"), "succeeded");
    assert_eq!(case.stored(), None);
    // The same body here is still "Try again" of that submission: its key, the answer replayed,
    // one ticket.
    let again = submit(&a, TICKET).await;
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(text(&again, "key"), key);
    assert_eq!(get(&again, "replayed").as_bool(), Some(true), "{again:?}");
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(case.stored(), None);
}

/// A `<base href>` in the test page's head, taken out again when dropped: relative URLs then
/// resolve against `href`, as in a page served from there.
struct Base(web_sys::Element);

impl Base {
    fn new(href: &str) -> Base {
        let document = web_sys::window().unwrap().document().unwrap();
        let base = document.create_element("base").unwrap();
        base.set_attribute("href", href).unwrap();
        let head = document.query_selector("head").unwrap().unwrap();
        head.append_child(&base).unwrap();
        Base(base)
    }
}

impl Drop for Base {
    fn drop(&mut self) {
        self.0.remove();
    }
}

#[test]
async fn one_endpoint_written_relative_and_in_full_is_one_submission() {
    // A page that names its endpoint "/api/tickets" in one place and in full in another (a
    // form's `action` reads in full): two submitters of the name, one request. Found by the API
    // fuzz run: the same body went out again under a new key, a second ticket.
    let case = Case::new("page-relative-url");
    let _base = Base::new(&format!("{}/", server()));
    let (a, key) = unsure_on(&case, "session").await;
    let relative = Submitter::new(
        case.name.as_str().into(),
        json(&format!(
            r#"{{"url":"/api/tickets","headers":{{"X-Tenant":"{}"}}}}"#,
            case.tenant
        )),
    )
    .expect("valid options");
    assert_eq!(text(&relative.pending(), "key"), key, "taken up");
    // Another submitter of the name has the answer; the same body here is still that
    // submission: its key, the answer replayed, one ticket.
    let answered = settle(a.try_again(None)).await.unwrap();
    assert_eq!(text(&answered, "outcome"), "succeeded");
    assert_eq!(case.stored(), None);
    let again = submit(&relative, TICKET).await;
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(text(&again, "key"), key);
    assert_eq!(get(&again, "replayed").as_bool(), Some(true), "{again:?}");
    assert!(all_equal(&case.keys()), "{:?}", case.keys());
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn the_same_body_sent_another_way_after_another_submitter_had_the_answer_is_not_sent_again() {
    // Two submitters of a name that send it differently (here, one as a form): once one had the
    // answer, the same body given to the other is still that submission, refused as pending
    // (Try again replays the answer), never sent again under a new key. Found by the API fuzz
    // run: a second ticket.
    let case = Case::new("page-encoding");
    let (a, key) = unsure_on(&case, "session").await;
    let form = case.submitter(r#""encoding":"form""#);
    assert_eq!(text(&form.pending(), "key"), key, "taken up");
    let answered = settle(a.try_again(None)).await.unwrap();
    assert_eq!(text(&answered, "outcome"), "succeeded");
    assert_eq!(case.stored(), None);
    let sent = case.seen().len();
    let err = settle(form.submit(json(TICKET), None)).await.unwrap_err();
    assert_eq!(text(&err, "code"), "pending");
    assert!(
        error_message(&err).contains("encoding"),
        "{}",
        error_message(&err)
    );
    assert_eq!(case.seen().len(), sent, "nothing sent");
    let again = settle(form.try_again(None)).await.unwrap();
    assert_eq!(text(&again, "outcome"), "succeeded");
    assert_eq!(text(&again, "key"), key);
    assert_eq!(get(&again, "replayed").as_bool(), Some(true), "{again:?}");
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_listener_that_discards_what_a_submit_took_up_never_makes_a_submission_without_a_key() {
    let case = Case::new("tabs-discard");
    case.plan(&["fail-before"]);
    let (a, b, _, _) = two_tabs(&case);
    let first = a.submit(json(TICKET), None);
    let key = text(&a.pending(), "key");
    // B's page discards whatever it hears is unsure (its own "Discard" wired to the state).
    let b = std::rc::Rc::new(b);
    let weak = std::rc::Rc::downgrade(&b);
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        if text(&e, "state") == "unsure" {
            if let Some(b) = weak.upgrade() {
                b.discard();
            }
        }
    });
    b.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let second = settle(b.submit(json(TICKET), None)).await;
    let first = settle(first).await.unwrap();
    assert_eq!(text(&first, "outcome"), "succeeded");
    if let Ok(second) = second {
        assert_eq!(text(&second, "key"), key, "B went on with A's key");
    }
    let keys = case.keys();
    assert!(keys.iter().all(|k| *k == key), "{keys:?} vs {key}");
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_new_key_s_lock_is_asked_for_before_its_record_is_written_where_tabs_share_it() {
    // Another tab reads the record from localStorage and asks for its key's lock: it must find
    // the lock asked for already, by the tab that made the key, whose first attempt does not
    // wait for the grant. The key was written first, and its lock asked for a moment later.
    let case = Case::new("lock-first");
    let seen = LockAndWrites::watch("Storage.prototype.setItem", "arguments[1]");
    let s = case.submitter(r#""storage":"local""#);
    let result = submit(&s, TICKET).await;
    seen.lock_first(&text(&result, "key"));
    assert_eq!(text(&result, "outcome"), "succeeded");
}

#[test]
async fn a_listener_that_submits_in_its_first_call_hears_its_submission_go_out() {
    // A page that sends a queued ticket as soon as it hears the submitter is idle: the changes
    // made in that first call were told while the listener was still in it, and so skipped.
    let case = Case::new("listener-submits");
    let s = std::rc::Rc::new(case.submitter(""));
    let heard: std::rc::Rc<std::cell::RefCell<Vec<String>>> = Default::default();
    let sent: std::rc::Rc<std::cell::RefCell<Option<Promise>>> = Default::default();
    let (weak, log, out) = (std::rc::Rc::downgrade(&s), heard.clone(), sent.clone());
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        log.borrow_mut().push(text(&e, "state"));
        if log.borrow().len() == 1 {
            let s = weak.upgrade().unwrap();
            *out.borrow_mut() = Some(s.submit(json(TICKET), None));
        }
    });
    s.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let promise = sent
        .borrow_mut()
        .take()
        .expect("submitted in the first call");
    let result = settle(promise).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(*heard.borrow(), ["idle", "sending", "succeeded"]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_definite_answer_leaves_a_record_another_tab_wrote_since() {
    let case = Case::new("tabs-forget");
    let (a, _, local, slot) = two_tabs(&case);
    let waiting = a.submit(json(TICKET), None);
    // While the request is out, another tab writes its own pending record in the slot.
    let mine = local
        .get_item(&slot)
        .unwrap()
        .expect("written before sending");
    let key = text(&a.pending(), "key");
    let theirs_key = "5f0c3e1a-3b7e-4c1d-9a2b-8e7f6d5c4b3a";
    local
        .set_item(&slot, &mine.replace(&key, theirs_key))
        .unwrap();
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(case.tickets().await, 1.0);
    // Theirs is still there, pending, for that tab or the next page that opens.
    let after = case.submitter(r#""storage":"local""#);
    assert_eq!(text(&after.pending(), "key"), theirs_key);
    after.discard();
    assert_eq!(local.get_item(&slot).unwrap(), None);
}

#[test]
async fn a_400_naming_the_key_is_misconfigured_and_not_retried() {
    // The key sent under another header: the server answers that Idempotency-Key is missing.
    let case = Case::new("misconf");
    let s = case.submitter(r#""keyHeader":"X-Tenant""#);
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "misconfigured");
    assert_eq!(number(&result, "status"), 400.0);
    assert!(
        text(&get(&result, "body"), "title").contains("Idempotency-Key"),
        "the problem details are the body"
    );
    assert_eq!(case.stored(), None);
}

#[test]
async fn wrong_options_are_errors_that_name_the_option() {
    let cases = [
        (r#"{}"#, "options.url"),
        (r#"{"url":5}"#, "options.url"),
        (r#"{"url":"http://["}"#, "options.url must be a URL"),
        (
            r#"{"url":"/x","storag":"local"}"#,
            "options.storag is not an option",
        ),
        (r#"{"url":"/x","timeoutMs":-1}"#, "options.timeoutMs"),
        (
            r#"{"url":"/x","retry":{"attempts":0}}"#,
            "options.retry.attempts",
        ),
        (
            r#"{"url":"/x","retry":{"base":500,"cap":10}}"#,
            "options.retry.cap",
        ),
        (r#"{"url":"/x","retry":{"tries":3}}"#, "options.retry.tries"),
        (r#"{"url":"/x","keyFormat":"quoted"}"#, "options.keyFormat"),
        (r#"{"url":"/x","storage":"cookie"}"#, "options.storage"),
        (r#"{"url":"/x","encoding":"xml"}"#, "options.encoding"),
        (r#"{"url":"/x","credentials":"all"}"#, "options.credentials"),
        (r#"{"url":"/x","method":"PO ST"}"#, "options.method"),
        (
            r#"{"url":"/x","keyHeader":"Idempotency Key"}"#,
            "options.keyHeader",
        ),
        (r#"{"url":"/x","headers":{"X-A":1}}"#, "options.headers"),
        // fetch takes byte strings only: every attempt would fail.
        (
            r#"{"url":"/x","headers":{"X-User":"Łukasz"}}"#,
            "options.headers",
        ),
        (r#"{"url":"/x","resume":"yes"}"#, "options.resume"),
        (r#"{"url":"/x","keyLifetimeMs":0}"#, "options.keyLifetimeMs"),
        (
            r#"{"url":"/x","keyLifetimeMs":60000,"retry":{"budget":900000}}"#,
            "options.retry.budget must fit in the key lifetime",
        ),
    ];
    for (options, expected) in cases {
        let err = Submitter::new("opts".into(), json(options)).unwrap_err();
        assert_eq!(text(&err, "code"), "option", "{options}");
        let message = error_message(&err);
        assert!(message.contains(expected), "{options}: {message}");
    }
    assert!(Submitter::new("opts".into(), JsValue::NULL).is_err());
    let _ = JsFuture::from(sleep(0)).await;
}

/// The last event a listener heard.
fn last(events: &js_sys::Array) -> JsValue {
    events.get(events.length() - 1)
}

/// Waits until `s` is in `want` (at most 15 s).
async fn reaches(s: &Submitter, want: &str) {
    for _ in 0..750 {
        if state(s) == want {
            return;
        }
        JsFuture::from(sleep(20)).await.unwrap();
    }
    panic!("the submitter never reached {want}: it is {}", state(s));
}

#[test]
async fn offline_nothing_is_sent_or_spent_and_online_sends_at_once_with_the_same_key() {
    let case = Case::new("offline");
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let events = listen(&s);
    set_offline(true);
    let waiting = s.submit(json(TICKET), None);
    assert_eq!(state(&s), "waiting");
    let now = last(&events);
    assert_eq!(text(&now, "waitingFor"), "online", "{now:?}");
    assert!(get(&now, "nextAttemptAt").is_null());
    let key = text(&s.pending(), "key");
    assert!(
        case.stored().unwrap().contains(&key),
        "stored before anything is sent"
    );
    JsFuture::from(sleep(400)).await.unwrap();
    assert!(case.seen().is_empty(), "nothing is sent while offline");
    assert_eq!(number(&s.pending(), "attempts"), 0.0, "nothing is spent");
    assert_eq!(state(&s), "waiting");
    set_online();
    assert_eq!(state(&s), "sending", "sent at once when back online");
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(number(&result, "attempts"), 1.0);
    assert_eq!(case.keys(), [key]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_refused_send_as_new_still_sends_at_once_when_it_finds_the_connection_back() {
    // Waiting for the connection; it came back without an `online` event. "Send as new" is
    // refused (the submission is not unsure), but the look at navigator.onLine it made sends
    // the waiting attempt with the same key at once, not at the next second's look.
    let case = Case::new("offline-send-as-new");
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let events = listen(&s);
    set_offline(true);
    let waiting = s.submit(json(TICKET), None);
    assert_eq!(text(&last(&events), "waitingFor"), "online");
    let key = text(&s.pending(), "key");
    set_online_quietly();
    let refused = settle(s.send_as_new()).await.unwrap_err();
    assert_eq!(text(&refused, "code"), "state");
    let heard = text(&last(&events), "state");
    assert_eq!(
        heard, "sending",
        "the listener heard the attempt go at once"
    );
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(case.keys(), [key]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn an_attempt_failing_while_navigator_says_offline_is_given_back_and_resent_online() {
    // The connection fails before an answer (the server's "offline" fault); meanwhile
    // navigator.onLine turned false (no event yet). The one attempt of the round is not spent:
    // no `unsure`, it waits for the connection, and back online it goes again with the same key.
    let case = Case::new("offline-fail");
    case.plan(&["offline"]);
    let s = case.submitter(r#""retry":{"attempts":1}"#);
    let events = listen(&s);
    let waiting = s.submit(json(TICKET), None);
    set_offline(false);
    reaches(&s, "waiting").await;
    assert_eq!(text(&last(&events), "waitingFor"), "online");
    JsFuture::from(sleep(300)).await.unwrap();
    assert_eq!(case.seen().len(), 1, "nothing more is sent while offline");
    set_online();
    let result = settle(waiting).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(number(&result, "attempts"), 2.0);
    assert!(all_equal(&case.keys()) && case.keys().len() == 2);
    assert_eq!(case.tickets().await, 1.0);
    let states: Vec<String> = events.iter().map(|e| text(&e, "state")).collect();
    assert!(!states.contains(&"unsure".to_owned()), "{states:?}");
}

#[test]
async fn a_record_past_its_key_lifetime_after_a_reload_settles_expired_and_sends_nothing() {
    let case = Case::new("expired");
    case.plan(&["fail-before"]);
    // A server that keeps keys 1.2 s: usable for 1.08 s from the first attempt.
    let s = case.submitter(r#""keyLifetimeMs":1200,"retry":{"attempts":1}"#);
    let first = submit(&s, TICKET).await;
    assert_eq!(text(&first, "outcome"), "unsure");
    let key = text(&first, "key");
    assert!(
        case.stored().unwrap().contains(r#""keyLifetimeMs":1200"#),
        "the lifetime is kept in the record: {:?}",
        case.stored()
    );
    drop(s);
    JsFuture::from(sleep(1300)).await.unwrap();
    // The reloaded page, with the default lifetime and resume: the record keeps its own.
    let s = case.submitter(r#""resume":true"#);
    assert_eq!(state(&s), "expired");
    assert_eq!(
        text(&s.pending(), "key"),
        key,
        "still pending, for a person to check"
    );
    let again = settle(s.try_again(None)).await.unwrap_err();
    assert_eq!(text(&again, "code"), "state");
    assert!(
        error_message(&again).contains("lifetime"),
        "{}",
        error_message(&again)
    );
    let same = settle(s.submit(json(TICKET), None)).await.unwrap_err();
    assert_eq!(text(&same, "code"), "pending");
    JsFuture::from(sleep(200)).await.unwrap();
    assert_eq!(case.keys().len(), 1, "nothing is sent with the expired key");
    assert_eq!(case.tickets().await, 0.0);
    // Checked, the person sends it as new: the same body under a new key.
    let new = settle(s.send_as_new()).await.unwrap();
    assert_eq!(text(&new, "outcome"), "succeeded");
    assert_ne!(text(&new, "key"), key);
    assert_eq!(case.keys().len(), 2);
    assert_eq!(case.tickets().await, 1.0);
    assert_eq!(case.stored(), None);
    let nothing = settle(s.send_as_new()).await.unwrap_err();
    assert_eq!(text(&nothing, "code"), "state");
}

#[test]
async fn an_unsure_submission_expires_when_its_key_s_lifetime_ends() {
    let case = Case::new("expires");
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""keyLifetimeMs":1000,"retry":{"attempts":1}"#);
    let events = listen(&s);
    assert_eq!(text(&submit(&s, TICKET).await, "outcome"), "unsure");
    reaches(&s, "expired").await;
    assert_eq!(text(&last(&events), "state"), "expired");
    assert_eq!(
        text(&settle(s.try_again(None)).await.unwrap_err(), "code"),
        "state"
    );
    assert_eq!(case.seen().len(), 1);
    s.discard();
    assert_eq!(case.stored(), None);
}

#[test]
async fn an_abort_during_a_held_reply_rejects_keeps_the_key_and_try_again_replays_it() {
    let case = Case::new("abort-held");
    case.plan(&["delay=600"]);
    let s = case.submitter("");
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let waiting = s.submit(json(TICKET), Some(options.into()));
    let key = text(&s.pending(), "key");
    JsFuture::from(sleep(150)).await.unwrap();
    assert_eq!(state(&s), "sending");
    controller.abort();
    let err = settle(waiting).await.unwrap_err();
    assert_eq!(text(&err, "code"), "aborted");
    assert_eq!(state(&s), "unsure", "pending, its retries stopped");
    assert_eq!(text(&s.pending(), "key"), key, "never a silent new key");
    assert!(case.stored().unwrap().contains(&key));
    assert_eq!(statuses(&case), ["error"], "the fetch was aborted");
    // The server finished the held request meanwhile; Try again replays it under the same key.
    JsFuture::from(sleep(700)).await.unwrap();
    let result = settle(s.try_again(None)).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(get(&result, "replayed"), JsValue::TRUE);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn an_abort_before_a_key_s_first_attempt_lets_its_lock_go_for_another_tab() {
    // The key came from the spare drawn ahead with its Web Lock; offline, its first attempt was
    // never sent, and the abort left the submission unsure with this tab still holding the
    // lock. A duplicated tab's Try again of that key then waited for the lock for ever.
    let case = Case::new("abort-spare");
    let a = case.submitter("");
    assert_eq!(text(&submit(&a, TICKET).await, "outcome"), "succeeded");
    // The answer's task drew the next key ahead, and asked for its lock.
    JsFuture::from(sleep(100)).await.unwrap();
    set_offline(true);
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let second = TICKET.replace("Printer on fire", "Second printer");
    let waiting = a.submit(json(&second), Some(options.into()));
    let key = text(&a.pending(), "key");
    controller.abort();
    assert_eq!(text(&settle(waiting).await.unwrap_err(), "code"), "aborted");
    set_online();
    // Another tab with the same session (a duplicated one) tries the pending key again.
    let b = case.submitter("");
    assert_eq!(text(&b.pending(), "key"), key);
    let again = b.try_again(None);
    for _ in 0..300 {
        if state(&b) == "succeeded" {
            break;
        }
        JsFuture::from(sleep(10)).await.unwrap();
    }
    assert_eq!(state(&b), "succeeded", "the lock was let go");
    assert_eq!(text(&settle(again).await.unwrap(), "key"), key);
    drop(a);
}

#[test]
async fn an_abort_during_a_retry_wait_stops_the_retries_and_try_again_resends_the_key() {
    let case = Case::new("abort-wait");
    // 503 with Retry-After: 1 s, then the retry would be due.
    case.plan(&["fail-before"]);
    let s = case.submitter("");
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let waiting = s.submit(json(TICKET), Some(options.clone().into()));
    reaches(&s, "waiting").await;
    controller.abort();
    assert_eq!(text(&settle(waiting).await.unwrap_err(), "code"), "aborted");
    assert_eq!(state(&s), "unsure");
    JsFuture::from(sleep(1300)).await.unwrap();
    assert_eq!(case.seen().len(), 1, "no retry after the abort");
    // An already aborted signal begins nothing.
    let err = settle(s.try_again(Some(options.into()))).await.unwrap_err();
    assert_eq!(text(&err, "code"), "aborted");
    assert_eq!(case.seen().len(), 1);
    let result = settle(s.try_again(None)).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert!(all_equal(&case.keys()) && case.keys().len() == 2);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_submission_the_caller_aborted_is_not_resent_on_its_own_after_a_reload() {
    let case = Case::new("abort-reload");
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""resume":true"#);
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let waiting = s.submit(json(TICKET), Some(options.into()));
    reaches(&s, "waiting").await;
    controller.abort();
    assert_eq!(text(&settle(waiting).await.unwrap_err(), "code"), "aborted");
    let key = text(&s.pending(), "key");
    drop(s);
    // The page reloads: the same submitter, resuming on its own.
    let again = case.submitter(r#""resume":true"#);
    assert_eq!(state(&again), "unsure", "it waits for Try again");
    JsFuture::from(sleep(300)).await.unwrap();
    assert_eq!(case.seen().len(), 1, "nothing sent after the reload");
    let result = settle(again.try_again(None)).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(text(&result, "key"), key);
    assert_eq!(case.tickets().await, 1.0);
}

/// A submission on `localStorage` waiting for its retry (a 503 first), with the signal that
/// stops it, and its slot.
async fn waiting_on_local(case: &Case) -> (Submitter, web_sys::AbortController, Promise, String) {
    case.plan(&["fail-before"]);
    let s = case.submitter(r#""storage":"local""#);
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let waiting = s.submit(json(TICKET), Some(options.into()));
    reaches(&s, "waiting").await;
    (s, controller, waiting, format!("oncekey:{}", case.name))
}

#[test]
async fn an_abort_never_writes_back_a_record_another_tab_removed_or_replaced() {
    // The abort's mark (not to be resent on its own) was written wherever the slot stood: a
    // record another tab had answered and removed came back, unsure, on the next load.
    let local = web_sys::window().unwrap().local_storage().unwrap().unwrap();
    let case = Case::new("abort-removed");
    let (_s, controller, waiting, slot) = waiting_on_local(&case).await;
    local.remove_item(&slot).unwrap();
    controller.abort();
    assert_eq!(text(&settle(waiting).await.unwrap_err(), "code"), "aborted");
    assert_eq!(local.get_item(&slot).unwrap(), None, "not written back");
    // Nor over another tab's own record, stored since.
    let case = Case::new("abort-replaced");
    let (s, controller, waiting, slot) = waiting_on_local(&case).await;
    let key = text(&s.pending(), "key");
    let theirs = "5f0c3e1a-3b7e-4c1d-9a2b-8e7f6d5c4b3a";
    let mine = local.get_item(&slot).unwrap().unwrap();
    local.set_item(&slot, &mine.replace(&key, theirs)).unwrap();
    controller.abort();
    assert_eq!(text(&settle(waiting).await.unwrap_err(), "code"), "aborted");
    let stored = local.get_item(&slot).unwrap().unwrap();
    assert!(
        stored.contains(theirs) && !stored.contains("stopped"),
        "{stored}"
    );
    local.remove_item(&slot).unwrap();
}

#[test]
async fn an_abort_while_another_call_waits_only_rejects_its_own() {
    let case = Case::new("abort-joined");
    case.plan(&["delay=300"]);
    let s = case.submitter("");
    let controller = web_sys::AbortController::new().unwrap();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let first = s.submit(json(TICKET), None);
    let second = s.submit(json(TICKET), Some(options.into()));
    controller.abort();
    assert_eq!(text(&settle(second).await.unwrap_err(), "code"), "aborted");
    assert_eq!(state(&s), "sending", "the other call still waits");
    let result = settle(first).await.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn the_first_attempt_takes_the_web_lock_so_a_duplicated_tab_never_sends_beside_it() {
    // A duplicated tab copies sessionStorage, record and all, while the first attempt's reply is
    // held. Its resumed attempt waits for the lock: it finds the first finished (a replay), never
    // still in progress (a 409).
    let case = Case::new("dup-tab");
    case.plan(&["delay=500"]);
    let a = case.submitter("");
    let first = a.submit(json(TICKET), None);
    let key = text(&a.pending(), "key");
    let b = case.submitter(r#""resume":true"#);
    assert_eq!(state(&b), "sending");
    let second = b.submit(json(TICKET), None);
    let (ra, rb) = (settle(first).await.unwrap(), settle(second).await.unwrap());
    assert_eq!(statuses(&case), ["201", "201"]);
    assert_eq!(text(&ra, "key"), key);
    assert_eq!(text(&rb, "key"), key);
    assert_eq!(get(&rb, "replayed"), JsValue::TRUE);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn a_new_keys_first_attempt_holds_the_lock_without_waiting_for_it_and_retries_wait() {
    // The first attempt of a key made here asks for the lock before anyone else can know the
    // key, and goes out before the (slow) grant; the retry waits for its grant. Still one
    // ticket, one key.
    let case = Case::new("lock-fresh");
    case.plan(&["fail-before"]);
    let locks = delay_locks(300);
    let s = case.submitter("");
    let result = settle(s.submit(json(TICKET), None)).await;
    let restore: js_sys::Function = get(&locks, "restore").unchecked_into();
    restore.call0(&JsValue::NULL).unwrap();
    let result = result.unwrap();
    assert_eq!(text(&result, "outcome"), "succeeded");
    let key = text(&result, "key");
    let log: Vec<JsValue> = js_sys::Array::from(&get(&locks, "log"))
        .iter()
        .filter(|e| text(e, "name") == "oncekey:".to_owned() + &key)
        .collect();
    assert_eq!(log.len(), 2, "one lock asked for per attempt");
    let seen = case.seen();
    assert_eq!(statuses(&case), ["503", "201"]);
    let at = |e: &JsValue, f: &str| get(e, f).as_f64().unwrap();
    assert!(
        at(&seen[0], "at") < at(&log[0], "granted"),
        "the first attempt went out before its lock was granted"
    );
    assert!(
        at(&seen[1], "at") >= at(&log[1], "granted"),
        "the retry waited for its lock"
    );
    // The first lock was let go before its grant came: its callback was still there for it.
    JsFuture::from(sleep(400)).await.unwrap();
    for entry in &log {
        assert!(
            get(entry, "granted").as_f64().is_some(),
            "every lock was granted"
        );
        assert!(get(entry, "threw").is_null(), "{:?}", get(entry, "threw"));
    }
    assert_eq!(case.keys(), [key.clone(), key]);
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn the_next_key_is_drawn_ahead_with_its_lock_and_its_first_attempt_asks_for_no_other() {
    // When a key's attempt is answered, the next key is drawn and its Web Lock asked for there
    // (spare.rs), out of the next submit's way: that submit's first attempt holds it, goes out
    // before its (slow) grant, and asks for no other. Two submissions, two keys, two tickets.
    let case = Case::new("lock-ahead");
    let locks = delay_locks(300);
    let s = case.submitter("");
    let first = settle(s.submit(json(TICKET), None)).await.unwrap();
    // Finer than Date.now(): the answer's task, which asks, may fall in the same millisecond.
    let before = precise_now();
    let second = settle(s.submit(json(TICKET), None)).await;
    let restore: js_sys::Function = get(&locks, "restore").unchecked_into();
    restore.call0(&JsValue::NULL).unwrap();
    let second = second.unwrap();
    let (k1, k2) = (text(&first, "key"), text(&second, "key"));
    assert_ne!(k1, k2, "a new key after a definite answer");
    let log: Vec<JsValue> = js_sys::Array::from(&get(&locks, "log"))
        .iter()
        .filter(|e| text(e, "name") == "oncekey:".to_owned() + &k2)
        .collect();
    assert_eq!(log.len(), 1, "the second key's lock was asked for once");
    // Its grant, put off by 300 ms, comes after both answers.
    JsFuture::from(sleep(400)).await.unwrap();
    let at = |e: &JsValue, f: &str| get(e, f).as_f64().unwrap();
    assert!(
        at(&log[0], "askedAt") < before,
        "asked for before the second submit"
    );
    let seen = case.seen();
    assert!(
        at(&seen[1], "at") < at(&log[0], "granted"),
        "the second key's attempt went out before its lock was granted"
    );
    assert_eq!(case.keys(), [k1, k2]);
    assert_eq!(case.tickets().await, 2.0);
}

#[test]
async fn a_refused_submit_does_not_let_go_of_the_lock_drawn_ahead_for_the_pending_key() {
    // A key made from a spare waits offline for its first attempt; a submit of another body is
    // refused meanwhile (another submission is pending). The pending key keeps the lock asked
    // for ahead: back online, its attempt asks for no other. One ticket per key.
    let case = Case::new("lock-kept");
    let locks = delay_locks(0);
    let s = case.submitter("");
    let first = settle(s.submit(json(TICKET), None)).await.unwrap();
    JsFuture::from(sleep(20)).await.unwrap();
    set_offline(true);
    let waiting = s.submit(
        json(r#"{"subject":"Second","email":"a@example.com","body":"."}"#),
        None,
    );
    let key = text(&s.pending(), "key");
    let other = settle(s.submit(json(TICKET), None)).await.unwrap_err();
    assert_eq!(text(&other, "code"), "pending");
    set_online();
    let second = settle(waiting).await;
    let restore: js_sys::Function = get(&locks, "restore").unchecked_into();
    restore.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&second.unwrap(), "key"), key);
    let asked = js_sys::Array::from(&get(&locks, "log"))
        .iter()
        .filter(|e| text(e, "name") == "oncekey:".to_owned() + &key)
        .count();
    assert_eq!(asked, 1, "the pending key's lock was asked for once, ahead");
    assert_eq!(case.keys(), [text(&first, "key"), key]);
    assert_eq!(case.tickets().await, 2.0);
}

/// Replaces `crypto.getRandomValues` with `body` (a function's source, taking the array);
/// the returned function puts the real one back.
fn stub_random_values(body: &str) -> js_sys::Function {
    js_sys::Function::new_no_args(&format!(
        "var c = globalThis.crypto; c.getRandomValues = {body}; \
         return function () {{ delete c.getRandomValues; }};"
    ))
    .call0(&JsValue::NULL)
    .unwrap()
    .unchecked_into()
}

#[test]
async fn the_key_is_drawn_from_crypto_get_random_values_and_never_made_without_it() {
    // CONTRACT.md section 1: browser keys are UUID v4 from the platform CSPRNG
    // (crypto.getRandomValues), never Math.random, never a timestamp.
    let case = Case::new("csprng");
    let restore = stub_random_values("function (a) { a.fill(0x5a); return a; }");
    let s = case.submitter("");
    let p = s.submit(json(TICKET), None);
    restore.call0(&JsValue::NULL).unwrap();
    let result = settle(p).await.unwrap();
    let want = oncekey::Key::from_random_bytes([0x5a; 16]);
    assert_eq!(text(&result, "key"), want.as_str());
    assert!(
        want.as_str().starts_with("5a5a5a5a-5a5a-4"),
        "a v4 UUID: {want}"
    );
    assert_eq!(case.tickets().await, 1.0);
    // Without it, no key is made another way: the submit is refused, nothing stored or sent.
    let case = Case::new("no-csprng");
    let restore = stub_random_values("function () { throw new Error('no entropy here'); }");
    let s = case.submitter("");
    let refused = settle(s.submit(json(TICKET), None)).await;
    restore.call0(&JsValue::NULL).unwrap();
    assert!(refused.is_err(), "refused");
    assert!(case.seen().is_empty() && case.stored().is_none());
}

#[test]
async fn wrong_submit_options_are_errors() {
    let case = Case::new("submit-opts");
    let s = case.submitter("");
    let err = settle(s.submit(json(TICKET), Some(json(r#"{"signal":5}"#))))
        .await
        .unwrap_err();
    assert_eq!(text(&err, "code"), "option");
    assert!(
        error_message(&err).contains("signal"),
        "{}",
        error_message(&err)
    );
    assert!(case.seen().is_empty() && case.stored().is_none());
}

// The Rust API, as a Leptos or Yew frontend uses it: no JavaScript values at all.

mod rust_api {
    use super::{all_equal, server, Case, TICKET};
    use oncekey::core::body::{parse, Value};
    use oncekey::{ErrorCode, Options, Outcome, State, StorageKind, Submitter, Update};
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn options(case: &Case) -> Options {
        let mut options = Options::new(&format!("{}/api/tickets", server()));
        options
            .headers
            .push(("X-Tenant".into(), case.tenant.clone()));
        options.retry.base = Duration::from_millis(20);
        options.retry.cap = Duration::from_millis(2000);
        options
    }

    fn ticket() -> Value {
        parse(TICKET).unwrap()
    }

    #[test]
    async fn a_submit_made_before_indexeddb_answers_waits_and_takes_up_the_submission_kept_there() {
        let case = Case::new("rust-idb-early");
        case.plan(&["delay=1500"]);
        let mut o = options(&case);
        o.storage = StorageKind::IndexedDb;
        let key = {
            let mut first = o.clone();
            first.timeout_ms = 300;
            first.retry.attempts = 1;
            let s = Submitter::new(&case.name, first).unwrap();
            let left = s.submit(ticket()).await.unwrap();
            assert_eq!(left.outcome(), Outcome::Unsure);
            left.key().clone()
        };
        wasm_bindgen_futures::JsFuture::from(super::sleep(1600))
            .await
            .unwrap();
        // The next page submits at once, before IndexedDB has answered: another body, a wait
        // aborted at once, then the same body.
        let s = Submitter::new(&case.name, o).unwrap();
        let other = s.submit(parse(r#"{"subject":"Another"}"#).unwrap());
        let aborted = s.submit(ticket());
        aborted.abort_handle().abort();
        let same = s.submit(ticket());
        let refused = other.await.unwrap_err();
        assert_eq!(refused.code(), ErrorCode::Pending, "{}", refused.message());
        assert!(
            refused.message().contains(&key.as_str()[..8]),
            "{}",
            refused.message()
        );
        assert_eq!(aborted.await.unwrap_err().code(), ErrorCode::Aborted);
        let same = same.await.unwrap();
        assert_eq!(same.outcome(), Outcome::Succeeded);
        assert_eq!(same.key(), &key);
        assert!(same.replayed());
        assert!(all_equal(&case.keys()), "{:?}", case.keys());
        assert_eq!(case.tickets().await, 1.0);
    }

    #[test]
    async fn a_submitter_dropped_while_its_caller_waits_retries_and_answers_the_caller() {
        // As `await new Submitter(name, options).submit(body)` leaves it in a page: nothing
        // else holds the submitter while a retry waits, and its wrapper may be collected.
        let case = Case::new("rust-dropped");
        case.plan(&["fail-before"]);
        let s = Submitter::new(&case.name, options(&case)).unwrap();
        let settling = s.submit(ticket());
        drop(s);
        let answer: Rc<RefCell<Option<Result<oncekey::Settlement, oncekey::Error>>>> =
            Rc::default();
        let put = answer.clone();
        wasm_bindgen_futures::spawn_local(async move {
            *put.borrow_mut() = Some(settling.await);
        });
        for _ in 0..250 {
            if answer.borrow().is_some() {
                break;
            }
            wasm_bindgen_futures::JsFuture::from(super::sleep(20))
                .await
                .unwrap();
        }
        let settled = answer.borrow_mut().take().expect("the caller was answered");
        let settled = settled.unwrap();
        assert_eq!(settled.outcome(), Outcome::Succeeded);
        assert_eq!(settled.attempts(), 2);
        assert!(all_equal(&case.keys()), "{:?}", case.keys());
        assert_eq!(case.tickets().await, 1.0);
        assert_eq!(case.stored(), None, "removed after the answer");
    }

    #[test]
    async fn try_again_called_by_a_listener_of_unsure_settles_with_its_own_round() {
        // The listener hears "unsure" before the settlement is handed out; a Try again it
        // made then was handed that earlier settlement (unsure, 1 attempt), while its own
        // attempt went out and succeeded unheard.
        let case = Case::new("rust-listener-again");
        case.plan(&["fail-before"]);
        let mut o = options(&case);
        o.retry.attempts = 1;
        let s = Rc::new(Submitter::new(&case.name, o).unwrap());
        let again: Rc<RefCell<Option<oncekey::Settling>>> = Rc::default();
        let (held, weak) = (again.clone(), Rc::downgrade(&s));
        let _listener = s.on_change(move |u| {
            if u.state == State::Unsure && held.borrow().is_none() {
                if let Some(s) = weak.upgrade() {
                    *held.borrow_mut() = Some(s.try_again());
                }
            }
        });
        let first = s.submit(ticket()).await.unwrap();
        assert_eq!(first.outcome(), Outcome::Unsure);
        let settling = again.borrow_mut().take().expect("the listener tried again");
        let second = settling.await.unwrap();
        assert_eq!(
            second.outcome(),
            Outcome::Succeeded,
            "its own round's settlement"
        );
        assert_eq!(second.attempts(), 2);
        assert_eq!(second.key(), first.key());
        assert_eq!(case.tickets().await, 1.0);
    }

    #[test]
    async fn submit_stores_before_sending_retries_with_the_same_key_and_settles() {
        let case = Case::new("rust");
        case.plan(&["fail-before"]);
        let s = Submitter::new(&case.name, options(&case)).unwrap();
        assert_eq!(s.storage(), StorageKind::Session);
        let updates: Rc<RefCell<Vec<Update>>> = Rc::default();
        let sink = updates.clone();
        let listener = s.on_change(move |u| sink.borrow_mut().push(u.clone()));
        let settling = s.submit(ticket());
        // Stored before submit returned, and so before the first byte was sent.
        let stored = case.stored().expect("stored at once");
        let pending = s.pending().expect("pending");
        assert!(stored.contains(pending.key().as_str()), "{stored}");
        assert_eq!(pending.body(), &ticket());
        assert_eq!(s.state(), State::Sending);
        let settlement = settling.await.unwrap();
        assert_eq!(settlement.outcome(), Outcome::Succeeded);
        assert_eq!(settlement.status(), Some(201));
        assert_eq!(settlement.attempts(), 2);
        assert_eq!(settlement.key(), pending.key());
        let Some(Value::Object(answer)) = settlement.body() else {
            panic!("a JSON answer: {}", settlement.text());
        };
        assert_eq!(
            answer.get("subject").and_then(Value::as_str),
            Some("Printer on fire")
        );
        let keys = case.keys();
        assert_eq!(keys.len(), 2);
        assert!(all_equal(&keys), "{keys:?}");
        assert_eq!(keys[0], settlement.key().as_str());
        let states: Vec<State> = updates.borrow().iter().map(|u| u.state).collect();
        assert_eq!(
            states,
            [
                State::Idle,
                State::Sending,
                State::Waiting,
                State::Sending,
                State::Succeeded
            ]
        );
        assert_eq!(case.stored(), None);
        assert_eq!(case.tickets().await, 1.0);
        // A dropped listener hears nothing more; the next submission has a new key.
        drop(listener);
        let heard = updates.borrow().len();
        let next = s.submit(ticket()).await.unwrap();
        assert_ne!(next.key(), settlement.key());
        assert_eq!(updates.borrow().len(), heard);
        assert_eq!(case.tickets().await, 2.0);
    }

    #[test]
    async fn refusals_carry_their_codes_and_change_nothing() {
        let case = Case::new("rust-codes");
        assert_eq!(
            Submitter::new(&case.name, Options::new(""))
                .unwrap_err()
                .code(),
            ErrorCode::Option
        );
        let mut bad = options(&case);
        bad.retry.cap = Duration::from_millis(1);
        let e = Submitter::new(&case.name, bad).unwrap_err();
        assert!(e.message().contains("options.retry.cap"), "{e}");
        let mut once = options(&case);
        once.retry.attempts = 1;
        let s = Submitter::new(&case.name, once).unwrap();
        let e = s.try_again().await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::State);
        case.plan(&["fail-before"]);
        let unsure = s.submit(ticket()).await.unwrap();
        assert_eq!(unsure.outcome(), Outcome::Unsure);
        let before = case.stored().unwrap();
        let other = parse(r#"{"subject":"Another"}"#).unwrap();
        let e = s.submit(other).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::Pending);
        assert_eq!(case.stored().unwrap(), before, "untouched");
        // Waiting callers hear of a discard.
        case.plan(&["delay=800"]);
        let waiting = s.try_again();
        s.discard();
        assert_eq!(waiting.await.unwrap_err().code(), ErrorCode::Discarded);
        assert_eq!(s.state(), State::Idle);
        assert_eq!(case.stored(), None);
        assert_eq!(case.tickets().await, 0.0);
    }

    #[test]
    async fn an_abort_handle_stops_the_wait_and_the_key_stays_for_try_again() {
        let case = Case::new("rust-abort");
        case.plan(&["fail-before"]);
        let s = Submitter::new(&case.name, options(&case)).unwrap();
        let settling = s.submit(ticket());
        let key = s.pending().unwrap().key().clone();
        settling.abort_handle().abort();
        assert_eq!(settling.await.unwrap_err().code(), ErrorCode::Aborted);
        assert_eq!(s.state(), State::Unsure);
        assert_eq!(s.pending().unwrap().key(), &key);
        let again = s.try_again().await.unwrap();
        assert_eq!(again.outcome(), Outcome::Succeeded);
        assert_eq!(again.key(), &key);
        assert!(all_equal(&case.keys()));
        assert_eq!(case.tickets().await, 1.0);
    }

    #[test]
    async fn the_key_lifetime_is_a_rust_option_and_an_expired_one_is_sent_as_new() {
        let case = Case::new("rust-expired");
        case.plan(&["fail-before"]);
        let mut o = options(&case);
        o.retry.attempts = 1;
        o.retry.budget = Duration::from_millis(500);
        o.retry.key_lifetime = Duration::from_millis(800);
        let s = Submitter::new(&case.name, o).unwrap();
        let unsure = s.submit(ticket()).await.unwrap();
        assert_eq!(unsure.outcome(), Outcome::Unsure);
        // The key's deadline comes while unsure (a timer: 720 ms after the first attempt).
        for _ in 0..750 {
            if s.state() == State::Expired {
                break;
            }
            wasm_bindgen_futures::JsFuture::from(super::sleep(20))
                .await
                .unwrap();
        }
        assert_eq!(s.state(), State::Expired);
        assert_eq!(s.try_again().await.unwrap_err().code(), ErrorCode::State);
        let new = s.send_as_new().await.unwrap();
        assert_eq!(new.outcome(), Outcome::Succeeded);
        assert_ne!(new.key(), unsure.key());
        assert_eq!(case.keys().len(), 2);
        assert_eq!(case.tickets().await, 1.0);
    }
}

/// A case whose submission is named `name` exactly (not made unique).
fn named_case(what: &str, name: &str) -> Case {
    spy_install();
    reset_online();
    session().remove_item(&format!("oncekey:{name}")).unwrap();
    Case {
        tenant: unique(what),
        name: name.to_owned(),
    }
}

#[test]
async fn a_submission_named_probe_is_found_after_a_reload() {
    // The storage probe wrote and removed "oncekey:probe", the record slot of a submission
    // named "probe": every submitter made wiped it, and a reload found nothing (a new key).
    let case = named_case("probe-reload", "probe");
    let key = leave_pending(&case).await;
    assert!(
        case.stored().is_some_and(|t| t.contains(&key)),
        "stored while unsure"
    );
    // The "reloaded page": a new submitter of the same name.
    let s = case.submitter("");
    let pending = s.pending();
    session().remove_item("oncekey:probe").unwrap();
    assert!(!pending.is_null(), "pending() after a reload is null");
    assert_eq!(
        text(&pending, "key"),
        key,
        "the pending submission after a reload"
    );
}

#[test]
async fn another_submitter_made_in_the_page_leaves_the_record_of_probe_alone() {
    let case = named_case("probe-other", "probe");
    let key = leave_pending(&case).await;
    let _other = Case::new("probe-other-name").submitter("");
    let stored = case.stored();
    session().remove_item("oncekey:probe").unwrap();
    assert!(
        stored.is_some_and(|t| t.contains(&key)),
        "the pending record of \"probe\" is still stored"
    );
}

#[test]
async fn two_submitters_of_one_name_in_memory_never_send_at_once() {
    // Memory storage is the page's: a second submitter of the name takes the first one's record
    // up. Its attempt took no Web Lock (memory keys took none), and went out beside the first.
    let case = Case::new("mem-two");
    case.plan(&["delay=800"]);
    let a = case.submitter(r#""storage":"memory""#);
    let pa = a.submit(json(TICKET), None);
    JsFuture::from(sleep(100)).await.unwrap();
    let b = case.submitter(r#""storage":"memory""#);
    let pb = b.submit(json(TICKET), None);
    let (ra, rb) = (settle(pa).await.unwrap(), settle(pb).await.unwrap());
    assert_eq!(text(&ra, "key"), text(&rb, "key"));
    let seen = case.seen();
    for w in seen.windows(2) {
        assert!(
            number(&w[1], "at") >= number(&w[0], "answeredAt"),
            "an attempt went out while the one before was under way: {:?}",
            statuses(&case)
        );
    }
    assert_eq!(case.tickets().await, 1.0);
}

#[test]
async fn attempt_headers_whose_object_throws_when_read_still_settle() {
    // A getter that throws as the headers are read unwound through the attempt: no fetch, no
    // failure for the core, the lock held, and the submit pending for ever.
    let case = Case::new("ah-getter");
    let options = case.options("");
    let f = js_sys::Function::new_no_args(
        "return { get Authorization() { throw new Error('token not ready'); } };",
    );
    Reflect::set(&options, &"attemptHeaders".into(), &f).unwrap();
    let s = Submitter::new(case.name.as_str().into(), options).unwrap();
    let p = s.submit(json(TICKET), None);
    let result = JsFuture::from(within(&p, 5000)).await;
    assert_ne!(
        result.as_ref().ok(),
        Some(&JsValue::from_str(STILL_WAITING)),
        "the submit settled; state {}, attempts seen {:?}",
        state(&s),
        statuses(&case)
    );
}

#[test]
async fn a_discard_in_a_listener_of_succeeded_does_not_reject_the_settled_caller() {
    // The caller's settlement was queued behind the change the listener hears; the discard
    // rejected it "discarded", though the ticket was made.
    let case = Case::new("discard-on-success");
    let s = case.submitter("");
    let s2 = s.clone();
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        if text(&e, "state") == "succeeded" {
            s2.discard();
        }
    });
    s.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let result = settle(s.submit(json(TICKET), None)).await;
    assert_eq!(case.tickets().await, 1.0);
    let result = result.unwrap_or_else(|e| panic!("rejected: {}", text(&e, "code")));
    assert_eq!(text(&result, "outcome"), "succeeded");
}

#[test]
async fn a_submit_in_a_listener_of_succeeded_keeps_the_lock_drawn_ahead() {
    // The settlement let go of the lock of the key made last, which was by then the one the
    // listener's submit had drawn: its lock was asked for again, after the record was written.
    let case = Case::new("listener-next-lock");
    let locks = delay_locks(0);
    let s = case.submitter("");
    let first = settle(s.submit(json(TICKET), None)).await.unwrap();
    let first_key = text(&first, "key");
    // On the second's "succeeded" (its answer drew the next key ahead, with its lock), the
    // listener sends the next one.
    let next: std::rc::Rc<std::cell::RefCell<Option<Promise>>> = Default::default();
    let (s2, out) = (s.clone(), next.clone());
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        let key = text(&e, "key");
        if text(&e, "state") == "succeeded"
            && !key.is_empty()
            && key != first_key
            && out.borrow().is_none()
        {
            let p = s2.submit(
                json(r#"{"subject":"Next","email":"a@example.com","body":"."}"#),
                None,
            );
            *out.borrow_mut() = Some(p);
        }
    });
    s.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let second = settle(s.submit(
        json(r#"{"subject":"Second","email":"a@example.com","body":"."}"#),
        None,
    ))
    .await
    .unwrap();
    let p = next.borrow_mut().take().expect("submitted in the listener");
    let third = settle(p).await.unwrap();
    let restore: js_sys::Function = get(&locks, "restore").unchecked_into();
    restore.call0(&JsValue::NULL).unwrap();
    assert_eq!(text(&second, "outcome"), "succeeded");
    assert_eq!(text(&third, "outcome"), "succeeded");
    let k = text(&third, "key");
    let asked = js_sys::Array::from(&get(&locks, "log"))
        .iter()
        .filter(|e| text(e, "name") == "oncekey:".to_owned() + &k)
        .count();
    assert_eq!(
        asked, 1,
        "the key made in the listener had its lock asked for once, ahead (and kept)"
    );
}

#[test]
async fn a_record_removed_at_submit_is_told_to_the_listeners_as_a_warning() {
    // A record found unreadable at submit (another tab's, say) was removed with a console
    // warning only; at construction the listeners hear of it too.
    let case = Case::new("corrupt-later");
    let s = case.submitter("");
    let events = listen(&s);
    session()
        .set_item(&format!("oncekey:{}", case.name), "{not json")
        .unwrap();
    let result = submit(&s, TICKET).await;
    assert_eq!(text(&result, "outcome"), "succeeded");
    let warned = events
        .iter()
        .any(|e| text(&e, "warning").contains("was removed"));
    assert!(warned, "the listeners heard of the record removed");
    // And when the submit is refused after it (no key can be made): told then, not at some
    // later change.
    let case = Case::new("corrupt-refused");
    let s = case.submitter("");
    let events = listen(&s);
    session()
        .set_item(&format!("oncekey:{}", case.name), "{not json")
        .unwrap();
    let restore = stub_random_values("function () { throw new Error('no entropy here'); }");
    let refused = settle(s.submit(json(TICKET), None)).await;
    restore.call0(&JsValue::NULL).unwrap();
    assert!(refused.is_err());
    let warned = events
        .iter()
        .any(|e| text(&e, "warning").contains("was removed"));
    assert!(
        warned,
        "the listeners heard of the record removed, with the refusal"
    );
}

#[test]
async fn an_abort_in_a_listener_of_succeeded_does_not_reject_the_settled_caller() {
    // Aborting after the settlement does nothing (AbortHandle's docs); from a listener of the
    // change before it, the caller was rejected "aborted".
    let case = Case::new("abort-on-success");
    let s = case.submitter("");
    let controller = web_sys::AbortController::new().unwrap();
    let c2 = controller.clone();
    let f = Closure::<dyn FnMut(JsValue)>::new(move |e: JsValue| {
        if text(&e, "state") == "succeeded" {
            c2.abort();
        }
    });
    s.on_change(f.as_ref().clone()).unwrap();
    f.forget();
    let options = js_sys::Object::new();
    Reflect::set(&options, &"signal".into(), &controller.signal()).unwrap();
    let result = settle(s.submit(json(TICKET), Some(options.into()))).await;
    assert_eq!(case.tickets().await, 1.0);
    let result = result.unwrap_or_else(|e| panic!("rejected: {}", text(&e, "code")));
    assert_eq!(text(&result, "outcome"), "succeeded");
}
