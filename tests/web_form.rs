//! The form kit in headless Chromium, against the reference server with faults on.
//!
//! Run by `scripts/test-web.sh` (`--test web_form`), which starts `oncekey-server --faults` and
//! passes its address in `ONCEKEY_TEST_SERVER` at compile time. Each test builds its own form in
//! the page, with its own tenant (the server counts per `X-Tenant`) and submission name, and
//! checks what a person would see: the fields locked or not, `aria-busy`, the status text, the
//! buttons, where the focus is, and how many tickets the server made. Faults reach the server
//! through `attemptHeaders` (`X-Fault` on the attempts a test plans), which also records each
//! attempt's key. A reload is a second kit, on a new form of the same name, that finds the record.
#![cfg(target_arch = "wasm32")]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use oncekey::{
    FormKit, FormOptions, Messages, Options, Resume, RetryPolicy, StorageKind, SuccessMessage,
};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{wasm_bindgen_test as test, wasm_bindgen_test_configure};
use web_sys::{Element, HtmlElement, HtmlFormElement, HtmlInputElement};

wasm_bindgen_test_configure!(run_in_browser);

mod web_support;
use web_support::*;

#[wasm_bindgen(inline_js = r#"
export function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }
// Offline as a page sees it (navigator.onLine false, the offline event), and back.
export function set_offline() {
  Object.defineProperty(navigator, 'onLine', { configurable: true, get: () => false });
  globalThis.dispatchEvent(new Event('offline'));
}
export function set_online() {
  delete navigator.onLine;
  globalThis.dispatchEvent(new Event('online'));
}
export function reset_online() {
  if (Object.getOwnPropertyDescriptor(navigator, 'onLine')) set_online();
}
// The names of the Web Locks asked for from now on, with when (Date.now()); `restore()` stops.
export function log_locks() {
  const locks = navigator.locks;
  const real = locks.request.bind(locks);
  const log = [];
  locks.request = (name, cb) => { log.push({ name, asked: Date.now() }); return real(name, cb); };
  return { log, restore: () => { delete locks.request; } };
}
// Whether the Web Lock `name` is let go (neither held nor asked for) within 5 s.
export async function lock_let_go(name) {
  for (let i = 0; i < 250; i++) {
    const s = await navigator.locks.query();
    if (!s.held.concat(s.pending).some((l) => l.name === name)) return true;
    await sleep(20);
  }
  return false;
}
// How many 'online' listeners the global has now, counted from the first call on (every
// submitter adds one, and removes it when it is freed).
export function online_listeners() {
  if (!globalThis.__onlineCount) {
    globalThis.__onlineCount = { n: 0 };
    const add = globalThis.addEventListener.bind(globalThis);
    const remove = globalThis.removeEventListener.bind(globalThis);
    globalThis.addEventListener = (t, f, o) => { if (t === 'online') globalThis.__onlineCount.n++; return add(t, f, o); };
    globalThis.removeEventListener = (t, f, o) => { if (t === 'online') globalThis.__onlineCount.n--; return remove(t, f, o); };
  }
  return globalThis.__onlineCount.n;
}
// The page's uncaught errors from now on (a listener's exception is one), as a list to read.
export function catch_page_errors() {
  const seen = [];
  addEventListener('error', (e) => seen.push(String(e.message)));
  return seen;
}
"#)]
extern "C" {
    fn sleep(ms: u32) -> js_sys::Promise;
    fn online_listeners() -> i32;
    fn catch_page_errors() -> js_sys::Array;
    fn log_locks() -> JsValue;
    fn lock_let_go(name: &str) -> js_sys::Promise;
    fn set_offline();
    fn set_online();
    fn reset_online();
}

fn document() -> web_sys::Document {
    web_sys::window().unwrap().document().unwrap()
}

const FIELDS: &str = r#"
  <label>Subject <input name="subject"></label>
  <label>Email <input name="email" type="email"></label>
  <label>Message <textarea name="body"></textarea></label>
  <button type="submit">Send</button>
  <p role="status"></p>"#;

const SECRETS: &str = r#"
  <label>Password <input type="password" name="password"></label>
  <label>Card <input name="card" autocomplete="cc-number"></label>
  <label>PIN <input name="pin" data-oncekey-secret></label>"#;

/// One test's tenant, submission name, planned faults and the keys its attempts carried.
struct Case {
    tenant: String,
    name: String,
    faults: Rc<RefCell<VecDeque<&'static str>>>,
    keys: Rc<RefCell<Vec<String>>>,
}

impl Case {
    fn new(what: &str) -> Case {
        // Every test begins online, even after one that failed while offline.
        reset_online();
        Case {
            tenant: unique(what),
            name: unique(what),
            faults: Rc::default(),
            keys: Rc::default(),
        }
    }

    /// The next attempts' faults, one each.
    fn plan(&self, faults: &[&'static str]) {
        self.faults.borrow_mut().extend(faults.iter().copied());
    }

    /// A form of this case's name in the page, with `extra` controls before the button.
    fn form(&self, extra: &str) -> HtmlFormElement {
        let form: HtmlFormElement = document().create_element("form").unwrap().unchecked_into();
        form.set_attribute("data-oncekey", &self.name).unwrap();
        form.set_attribute("method", "post").unwrap();
        // The server judges the fields (a refusal is one of the tests), not the browser.
        form.set_attribute("novalidate", "").unwrap();
        form.set_inner_html(&(extra.to_owned() + FIELDS));
        document().body().unwrap().append_child(&form).unwrap();
        form
    }

    /// The kit's options: this tenant, quick retries, faults as planned.
    fn options(&self, attempts: u32) -> FormOptions {
        let mut submitter = Options::new(&format!("{}/api/tickets", server()));
        submitter.headers = vec![("X-Tenant".into(), self.tenant.clone())];
        submitter.retry = RetryPolicy {
            attempts,
            base: Duration::from_millis(20),
            // Above the 1 s Retry-After of the server's 503s, which a shorter cap would not wait.
            cap: Duration::from_millis(2000),
            budget: Duration::from_secs(20),
            ..RetryPolicy::default()
        };
        let (faults, keys) = (self.faults.clone(), self.keys.clone());
        submitter.attempt_headers = Some(Rc::new(move |_attempt, key| {
            keys.borrow_mut().push(key.as_str().to_owned());
            match faults.borrow_mut().pop_front() {
                Some(fault) => vec![("X-Fault".to_owned(), fault.to_owned())],
                None => Vec::new(),
            }
        }));
        FormOptions {
            submitter,
            ..FormOptions::default()
        }
    }

    fn attach(&self, form: &HtmlFormElement, attempts: u32) -> FormKit {
        FormKit::attach(form, self.options(attempts)).expect("valid options")
    }

    fn keys(&self) -> Vec<String> {
        self.keys.borrow().clone()
    }

    fn stored(&self) -> Option<String> {
        stored(&self.name)
    }

    /// The key of the record in `storage`'s `slot`, if one is there.
    fn keys_stored(&self, storage: &web_sys::Storage, slot: &str) -> Option<String> {
        let text = storage.get_item(slot).unwrap()?;
        let record = oncekey::core::Record::from_json(&text).unwrap();
        Some(record.key.as_str().to_owned())
    }

    async fn count(&self, what: &str) -> f64 {
        let stats = stats(&self.tenant).await;
        js_sys::Reflect::get(&stats, &what.into())
            .unwrap()
            .as_f64()
            .unwrap()
    }
}

fn field(form: &HtmlFormElement, name: &str) -> HtmlInputElement {
    form.query_selector(&format!("[name={name}]"))
        .unwrap()
        .unwrap()
        .unchecked_into()
}

/// Sets a field's value (a text area's too: `value` is on both).
fn fill(form: &HtmlFormElement, name: &str, value: &str) {
    let el = form
        .query_selector(&format!("[name={name}]"))
        .unwrap()
        .unwrap();
    js_sys::Reflect::set(&el, &"value".into(), &value.into()).unwrap();
}

/// The secret fields of `SECRETS`, filled. The PIN holds letters no key (hex) or stored number
/// has, so finding it in storage means the PIN itself was stored.
fn fill_secrets(form: &HtmlFormElement) {
    fill(form, "password", "hunter2-very-secret");
    fill(form, "card", "4242424242424242");
    fill(form, "pin", "zq9876");
}

fn fill_ticket(form: &HtmlFormElement, subject: &str) {
    fill(form, "subject", subject);
    fill(form, "email", "ana@example.com");
    fill(form, "body", "Third floor.");
}

/// Whether `el` is disabled now (its `disabled` property).
fn off(el: &JsValue) -> bool {
    js_sys::Reflect::get(el, &"disabled".into())
        .unwrap()
        .is_truthy()
}

fn disabled(form: &HtmlFormElement, selector: &str) -> bool {
    let el = form.query_selector(selector).unwrap().unwrap();
    js_sys::Reflect::get(&el, &"disabled".into())
        .unwrap()
        .as_bool()
        .unwrap()
}

fn busy(form: &HtmlFormElement) -> Option<String> {
    form.get_attribute("aria-busy")
}

fn state(form: &HtmlFormElement) -> String {
    form.get_attribute("data-oncekey-state").unwrap_or_default()
}

fn status(form: &HtmlFormElement) -> Element {
    form.query_selector("[role=status]").unwrap().unwrap()
}

fn status_text(form: &HtmlFormElement) -> String {
    status(form).text_content().unwrap_or_default()
}

fn button(form: &HtmlFormElement, text: &str) -> Option<HtmlElement> {
    let buttons = form.query_selector_all("button").unwrap();
    (0..buttons.length())
        .filter_map(|i| buttons.get(i))
        .map(|n| n.unchecked_into::<HtmlElement>())
        .find(|b| b.text_content().as_deref() == Some(text))
}

fn focused() -> Option<Element> {
    document().active_element()
}

/// The state of every `oncekey:change` the form dispatches from now on.
fn changes(form: &HtmlFormElement) -> Rc<RefCell<Vec<String>>> {
    let seen: Rc<RefCell<Vec<String>>> = Rc::default();
    let sink = seen.clone();
    let f = Closure::<dyn FnMut(web_sys::CustomEvent)>::new(move |e: web_sys::CustomEvent| {
        let state = js_sys::Reflect::get(&e.detail(), &"state".into()).unwrap();
        sink.borrow_mut().push(state.as_string().unwrap());
    });
    form.add_event_listener_with_callback("oncekey:change", f.as_ref().unchecked_ref())
        .unwrap();
    f.forget();
    seen
}

/// Waits until the form is in `want` (at most 15 s).
async fn settled(form: &HtmlFormElement, want: &str) {
    for _ in 0..750 {
        if state(form) == want {
            return;
        }
        JsFuture::from(sleep(20)).await.unwrap();
    }
    panic!(
        "the form never reached {want}: it is {}, saying {:?}",
        state(form),
        status_text(form)
    );
}

/// Leaves a submission of `case` pending and unsure (its one attempt lost to the "offline"
/// fault), with `secrets` among the fields; returns the kit, detached as a reload would, and the
/// pending key. The form is removed from the page, as a reload removes it.
async fn leave_unsure(case: &Case, secrets: &str) -> String {
    let form = case.form(secrets);
    let kit = case.attach(&form, 1);
    fill_ticket(&form, "Reloaded");
    if !secrets.is_empty() {
        fill_secrets(&form);
    }
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    let key = kit
        .submitter()
        .pending()
        .expect("pending")
        .key()
        .as_str()
        .to_owned();
    kit.detach();
    form.remove();
    // A reload ends the page, and with it the attempt's hold on the key's Web Lock; here the
    // page goes on, and the browser lets go of it a moment after the attempt ended.
    let let_go = JsFuture::from(lock_let_go(&format!("oncekey:{key}")))
        .await
        .unwrap();
    assert_eq!(let_go, JsValue::TRUE, "the attempt's lock was let go");
    key
}

#[test]
async fn a_submit_locks_the_form_at_once_says_so_and_makes_one_ticket() {
    let case = Case::new("lock");
    let form = case.form("");
    let _kit = case.attach(&form, 8);
    let seen = changes(&form);
    fill_ticket(&form, "Printer on fire");
    case.plan(&["delay=300"]);
    form.request_submit().unwrap();
    // Locked in the submit's own task.
    assert_eq!(busy(&form).as_deref(), Some("true"));
    assert!(disabled(&form, "[name=subject]") && disabled(&form, "textarea"));
    assert!(disabled(&form, "button[type=submit]"));
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(state(&form), "sending");
    assert_eq!(status_text(&form), "Sending…");
    assert!(
        case.stored().is_some(),
        "stored while the outcome is unknown"
    );

    settled(&form, "succeeded").await;
    let tickets = case.count("tickets").await;
    assert_eq!(tickets, 1.0);
    assert!(
        status_text(&form).starts_with("Created #"),
        "{}",
        status_text(&form)
    );
    assert_eq!(busy(&form), None);
    assert!(!disabled(&form, "[name=subject]") && !disabled(&form, "button[type=submit]"));
    assert_eq!(
        field(&form, "subject").value(),
        "",
        "cleared after a success"
    );
    assert_eq!(focused(), Some(status(&form)), "the focus is on the status");
    assert_eq!(
        *seen.borrow(),
        ["sending", "succeeded"],
        "one event per change of state"
    );
    assert_eq!(case.stored(), None);
    form.remove();
}

#[test]
async fn focusing_the_form_draws_its_key_ahead_with_the_lock_asked_for_before_the_submit() {
    // The focus in the form: the key of its next submit is drawn in a task of its own, and
    // its Web Lock asked for there, out of the submit's way. The submit's attempt holds that
    // lock and asks for no other. One ticket, with that key.
    let case = Case::new("ahead");
    let form = case.form("");
    let _kit = case.attach(&form, 8);
    let locks = log_locks();
    field(&form, "subject").focus().unwrap();
    fill_ticket(&form, "Printer on fire");
    JsFuture::from(sleep(20)).await.unwrap();
    let before = js_sys::Date::now();
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    let get = |v: &JsValue, f: &str| js_sys::Reflect::get(v, &f.into()).unwrap();
    get(&locks, "restore")
        .unchecked_into::<js_sys::Function>()
        .call0(&JsValue::NULL)
        .unwrap();
    let keys = case.keys();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let log: Vec<JsValue> = js_sys::Array::from(&get(&locks, "log"))
        .iter()
        .filter(|e| get(e, "name").as_string() == Some("oncekey:".to_owned() + &keys[0]))
        .collect();
    assert_eq!(log.len(), 1, "the key's lock was asked for once");
    assert!(
        get(&log[0], "asked").as_f64().unwrap() < before,
        "its lock was asked for before the submit"
    );
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

/// A click on `button` as the `clicks`-th click of one gesture (`detail`: 2 is the second click
/// of a double click). Not cancelled: a click the kit let through submits the form.
fn click(button: &HtmlElement, clicks: i32) {
    let init = web_sys::MouseEventInit::new();
    init.set_bubbles(true);
    init.set_cancelable(true);
    init.set_detail(clicks);
    let event = web_sys::MouseEvent::new_with_mouse_event_init_dict("click", &init).unwrap();
    button.dispatch_event(&event).unwrap();
}

#[test]
async fn the_second_click_of_a_double_click_after_the_answer_sends_nothing() {
    let case = Case::new("dblclick");
    let form = case.form("");
    // Kept after the success: a second submission would carry the same values, under a new key.
    let kit = FormKit::attach(
        &form,
        FormOptions {
            clear_on_success: false,
            ..case.options(8)
        },
    )
    .expect("valid options");
    fill_ticket(&form, "Double click, slow finger");
    let send = button(&form, "Send").unwrap();
    click(&send, 1);
    settled(&form, "succeeded").await;
    let first = case.keys();
    assert_eq!(first.len(), 1);

    // The reply came before the second click of the double click: that click sends nothing.
    click(&send, 2);
    click(&send, 3);
    JsFuture::from(sleep(300)).await.unwrap();
    assert_eq!(state(&form), "succeeded", "{}", status_text(&form));
    assert_eq!(case.keys(), first, "no request after the answer");
    assert_eq!(case.count("tickets").await, 1.0);
    assert!(status_text(&form).starts_with("Created #"));

    // A click of its own, later, is a new submission the person means: a new key, a second
    // ticket.
    click(&send, 1);
    settled(&form, "sending").await;
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[1], keys[0], "a new key for a new submission");
    assert_eq!(case.count("tickets").await, 2.0);
    kit.detach();
    form.remove();
}

#[test]
async fn a_lost_reply_is_resent_with_the_same_key_and_makes_one_ticket() {
    let case = Case::new("lost");
    let form = case.form("");
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Lost reply");
    case.plan(&["drop-reply"]);
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert!(keys.iter().all(|k| *k == keys[0]), "one key: {keys:?}");
    assert_eq!(case.count("tickets").await, 1.0);
    // The resend (the kit's, or Chromium's own of a POST whose connection closed before any
    // answer byte) carried the same key and was answered by a replay.
    assert_eq!(case.count("replays").await, 1.0);
    form.remove();
}

#[test]
async fn secret_fields_never_reach_session_storage() {
    let case = Case::new("secret");
    let form = case.form(SECRETS);
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Change my password");
    fill_secrets(&form);
    case.plan(&["delay=500"]);
    form.request_submit().unwrap();
    JsFuture::from(sleep(100)).await.unwrap();
    let stored = case.stored().expect("stored before the answer");
    assert!(stored.contains("Change my password"), "{stored}");
    let storage = session();
    for i in 0..storage.length().unwrap() {
        let name = storage.key(i).unwrap().unwrap();
        let value = storage.get_item(&name).unwrap().unwrap_or_default();
        for secret in ["hunter2", "4242424242424242", "zq9876"] {
            assert!(
                !value.contains(secret),
                "{secret} is in sessionStorage[{name}]"
            );
        }
    }
    settled(&form, "succeeded").await;
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn after_a_reload_the_fields_come_back_locked_and_try_again_sends_the_same_key() {
    let case = Case::new("reload");
    let key = leave_unsure(&case, "").await;
    // The reload: a new form of the same name, empty, and a new kit.
    let form = case.form("");
    let options = FormOptions {
        resume: Resume::Manual,
        ..case.options(8)
    };
    let _kit = FormKit::attach(&form, options).unwrap();
    assert_eq!(field(&form, "subject").value(), "Reloaded");
    assert_eq!(busy(&form).as_deref(), Some("true"));
    assert!(disabled(&form, "[name=subject]") && disabled(&form, "textarea"));
    assert_eq!(state(&form), "unsure");
    assert!(
        status_text(&form).contains("before the page reloaded"),
        "{}",
        status_text(&form)
    );
    button(&form, "Try again")
        .expect("Try again is offered")
        .click();
    settled(&form, "succeeded").await;
    assert_eq!(
        case.keys().last(),
        Some(&key),
        "the same key after the reload"
    );
    assert_eq!(case.count("tickets").await, 1.0);
    assert!(button(&form, "Try again").is_none());
    form.remove();
}

#[test]
async fn after_a_reload_the_kit_resends_by_itself_and_keeps_the_form_locked_meanwhile() {
    let case = Case::new("resume");
    let key = leave_unsure(&case, "").await;
    let form = case.form("");
    case.plan(&["delay=300"]);
    let _kit = case.attach(&form, 8);
    assert_eq!(field(&form, "subject").value(), "Reloaded");
    assert_eq!(busy(&form).as_deref(), Some("true"));
    assert!(disabled(&form, "[name=subject]"));
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().last(), Some(&key));
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn after_a_reload_the_kit_asks_for_the_secrets_then_resends_with_the_same_key() {
    let case = Case::new("ask");
    let key = leave_unsure(&case, SECRETS).await;
    let form = case.form(SECRETS);
    let _kit = case.attach(&form, 8);
    // Only the secret fields are open, and the status names them.
    assert!(!disabled(&form, "[name=password]") && !disabled(&form, "[name=pin]"));
    assert!(disabled(&form, "[name=subject]"));
    assert_eq!(field(&form, "subject").value(), "Reloaded");
    assert_eq!(
        field(&form, "password").value(),
        "",
        "secrets were not kept"
    );
    let text = status_text(&form);
    assert!(
        text.contains("Password, Card and PIN were not kept"),
        "{text}"
    );
    assert_eq!(focused(), Some(field(&form, "password").unchecked_into()));
    assert!(
        case.keys().len() == 1,
        "nothing sent before the secrets are back"
    );
    fill_secrets(&form);
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys(), [key.clone(), key], "resent with the same key");
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_server_asking_for_more_than_the_cap_is_said_and_try_again_goes_once_that_time_is_near() {
    // The server's 503 asks for a second; this kit waits half a second at most. Unsure, the
    // status said only that nothing was confirmed, and Try again came straight back to it (the
    // server's time is not waited for beyond the cap): a person saw the button do nothing.
    let case = Case::new("kit-busy");
    let form = case.form("");
    let mut options = case.options(8);
    options.submitter.retry.cap = Duration::from_millis(500);
    let _kit = FormKit::attach(&form, options).expect("valid options");
    fill_ticket(&form, "Busy server");
    case.plan(&["fail-before"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    let busy = Messages::default().get("busy").unwrap().to_owned();
    assert_eq!(status_text(&form), busy, "it says the server asked to wait");
    button(&form, "Try again").unwrap().click();
    JsFuture::from(sleep(50)).await.unwrap();
    assert_eq!(state(&form), "unsure");
    assert_eq!(status_text(&form), busy);
    assert_eq!(
        case.keys().len(),
        1,
        "nothing sent before the server's time"
    );
    JsFuture::from(sleep(600)).await.unwrap();
    button(&form, "Try again").unwrap().click();
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert!(keys.len() == 2 && keys[0] == keys[1], "{keys:?}");
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn unsure_locks_the_form_s_own_buttons_and_offers_try_again() {
    let case = Case::new("unsure");
    let form = case.form("");
    let _kit = case.attach(&form, 2);
    fill_ticket(&form, "Unsure");
    case.plan(&["fail-before", "fail-before"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    assert!(status_text(&form).starts_with("We could not confirm"));
    assert_eq!(busy(&form).as_deref(), Some("true"));
    assert!(
        disabled(&form, "[name=subject]"),
        "still locked while unsure"
    );
    // CONTRACT.md section 4: buttons are locked while the outcome is unknown; the kit's own
    // say what sending again does.
    assert!(
        disabled(&form, "button[type=submit]"),
        "the form's own Send is locked while unsure"
    );
    let again = button(&form, "Try again").expect("Try again offered");
    assert!(button(&form, "Discard").is_some());
    assert!(
        !disabled(&form, "button.oncekey-try-again"),
        "Try again is usable"
    );
    assert_eq!(case.count("tickets").await, 0.0);
    again.click();
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == keys[0]), "one key: {keys:?}");
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn discard_unlocks_the_form_forgets_the_record_and_the_next_send_has_a_new_key() {
    let case = Case::new("discard");
    let form = case.form("");
    let _kit = case.attach(&form, 1);
    fill_ticket(&form, "Discard me");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    assert!(case.stored().is_some());
    button(&form, "Discard")
        .expect("Discard is offered")
        .click();
    // Done once the key's Web Lock is known to be free (nobody else sends it).
    settled(&form, "idle").await;
    assert!(status_text(&form).starts_with("Discarded."));
    assert_eq!(busy(&form), None);
    assert!(!disabled(&form, "[name=subject]"));
    assert!(button(&form, "Try again").is_none() && button(&form, "Discard").is_none());
    assert_eq!(case.stored(), None, "the record is gone");
    assert_eq!(
        field(&form, "subject").value(),
        "Discard me",
        "the fields are kept"
    );
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "a new key after a discard");
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_refusal_marks_the_invalid_field_and_moves_the_focus_to_it() {
    let case = Case::new("refused");
    let form = case.form("");
    let _kit = case.attach(&form, 8);
    // The page's own description of the field (a hint) stays while the note is shown, and is
    // there again after: it was overwritten, then removed.
    field(&form, "email")
        .set_attribute("aria-describedby", "email-hint")
        .unwrap();
    fill_ticket(&form, "Bad email");
    fill(&form, "email", "not-an-email");
    form.request_submit().unwrap();
    settled(&form, "refused").await;
    let email = field(&form, "email");
    assert_eq!(email.get_attribute("aria-invalid").as_deref(), Some("true"));
    let note = form
        .query_selector(".oncekey-field-error")
        .unwrap()
        .expect("a note");
    assert!(note.text_content().unwrap().contains("email"));
    assert_eq!(
        email.get_attribute("aria-describedby"),
        Some(format!("email-hint {}", note.id()))
    );
    assert_eq!(focused(), Some(email.clone().unchecked_into()));
    assert!(status_text(&form).starts_with("Not accepted: "));
    assert!(!email.disabled() && field(&form, "subject").value() == "Bad email");
    fill(&form, "email", "ana@example.com");
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert!(form
        .query_selector(".oncekey-field-error")
        .unwrap()
        .is_none());
    assert_eq!(
        email.get_attribute("aria-describedby").as_deref(),
        Some("email-hint")
    );
    let keys = case.keys();
    assert_ne!(
        keys[0], keys[1],
        "the corrected request is a new submission"
    );
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_refusal_marks_and_focuses_the_visible_field_not_its_hidden_twin() {
    // A hidden field before the one the person fills, under one name (Rails' check_box
    // pattern): the note, aria-invalid and the focus went to the hidden one, and the focus
    // stayed on the page's body.
    let case = Case::new("refused-twin");
    let form = case.form(r#"<input type="hidden" name="email" value="">"#);
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Twin");
    form.request_submit().unwrap();
    settled(&form, "refused").await;
    let visible: Element = form
        .query_selector("input[name=email]:not([type=hidden])")
        .unwrap()
        .unwrap();
    let hidden: Element = form
        .query_selector("input[name=email][type=hidden]")
        .unwrap()
        .unwrap();
    assert_eq!(
        visible.get_attribute("aria-invalid").as_deref(),
        Some("true")
    );
    assert_eq!(hidden.get_attribute("aria-invalid"), None);
    assert_eq!(focused(), Some(visible.clone()));
    assert_eq!(case.count("tickets").await, 0.0);
    // Only hidden (the page's mistake): its note is still shown, and the focus goes to the
    // status, which says what was not accepted.
    visible.remove();
    fill(&form, "email", "not-an-email");
    form.request_submit().unwrap();
    settled(&form, "refused").await;
    let note = form.query_selector(".oncekey-field-error").unwrap();
    assert!(note.is_some_and(|n| n.text_content().unwrap().contains("email")));
    assert_eq!(focused(), Some(status(&form)));
    form.remove();
}

#[test]
async fn an_image_submit_button_is_enabled_by_the_kit_and_locked_while_sending() {
    // `<input type=image>` is not in form.elements: a markup-only form whose image button
    // waited for the kit (disabled, data-oncekey-wait) stayed disabled for good, and an enabled
    // one was not locked while sending (a click then was a silent Try again).
    let case = Case::new("image-button");
    let form = case
        .form(r#"<input type="image" name="go" alt="Go" src="data:," disabled data-oncekey-wait>"#);
    let _kit = case.attach(&form, 8);
    let image = "input[type=image]";
    assert!(!disabled(&form, image), "enabled once the kit is attached");
    fill_ticket(&form, "Image");
    case.plan(&["delay=500"]);
    let go: HtmlElement = form
        .query_selector(image)
        .unwrap()
        .unwrap()
        .unchecked_into();
    go.click();
    assert_eq!(state(&form), "sending");
    assert!(disabled(&form, image), "locked with the fields");
    settled(&form, "succeeded").await;
    assert!(!disabled(&form, image), "unlocked after the answer");
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_dialog_s_cancel_button_sends_nothing_and_another_formaction_is_refused() {
    // A button with formmethod="dialog" closes its dialog: nothing is submitted. The kit sent
    // the form as a ticket under a new key. A button with a formaction of its own (Save draft)
    // went to the form's address.
    let case = Case::new("button-elsewhere");
    let form = case.form(concat!(
        r#"<button type="submit" formmethod="dialog" formnovalidate value="cancel">Cancel</button>"#,
        r#"<button type="submit" formaction="/api/drafts">Save draft</button>"#,
    ));
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Not now");
    button(&form, "Cancel").unwrap().click();
    JsFuture::from(sleep(300)).await.unwrap();
    assert_eq!(state(&form), "idle");
    assert_eq!(field(&form, "subject").value(), "Not now");
    button(&form, "Save draft").unwrap().click();
    JsFuture::from(sleep(300)).await.unwrap();
    assert_eq!(state(&form), "idle");
    let said = status_text(&form);
    assert!(
        said.contains("formaction") && said.contains("/api/drafts"),
        "{said}"
    );
    assert!(!disabled(&form, "[name=subject]"), "the form as it was");
    assert!(case.keys().is_empty(), "nothing sent: {:?}", case.keys());
    assert_eq!(case.count("tickets").await, 0.0);
    form.remove();
}

#[test]
async fn a_button_whose_formaction_is_the_kit_s_address_sends_even_beside_a_control_named_action() {
    // A hidden control named "action" hides the form's action property: the button's
    // formaction, the very address the kit sends to, was compared with what was left (nothing,
    // or the attribute unresolved), and every submit was refused. A fragment is not sent, so it
    // names the same address.
    let case = Case::new("formaction-same");
    let form = case.form(&format!(
        r#"<input type="hidden" name="action" value="open">
           <button type="submit" formaction="{}/api/tickets#top" formmethod="POST">Open it</button>"#,
        server()
    ));
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Same address");
    button(&form, "Open it").unwrap().click();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_status_text_holding_html_is_shown_as_text() {
    let case = Case::new("html");
    let form = case.form("");
    let options = FormOptions {
        success_message: SuccessMessage::Template("Created {subject}".into()),
        ..case.options(8)
    };
    let _kit = FormKit::attach(&form, options).unwrap();
    let subject = "<img id=injected src=x onerror=alert(1)><b>bold</b>";
    fill_ticket(&form, subject);
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(status_text(&form), format!("Created {subject}"));
    assert_eq!(
        status(&form).child_element_count(),
        0,
        "no element was made from it"
    );
    assert!(document().get_element_by_id("injected").is_none());
    form.remove();
}

#[test]
async fn a_kit_nobody_keeps_stays_wired_until_detached() {
    let case = Case::new("kept");
    let form = case.form("");
    // What a page does that drops attachForm's result: the wrapper is freed.
    drop(case.attach(&form, 8));
    // After the kit's own listener: was the native post stopped? (Stopped here either way, so
    // that a failure does not navigate the test page away.)
    let native = Rc::new(std::cell::Cell::new(false));
    let seen = native.clone();
    let guard = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
        seen.set(!e.default_prevented());
        e.prevent_default();
    });
    let document = document();
    document
        .add_event_listener_with_callback("submit", guard.as_ref().unchecked_ref())
        .unwrap();
    fill_ticket(&form, "Nobody keeps me");
    form.request_submit().unwrap();
    assert!(
        !native.get(),
        "the form would have been posted natively, without a key"
    );
    settled(&form, "succeeded").await;
    document
        .remove_event_listener_with_callback("submit", guard.as_ref().unchecked_ref())
        .unwrap();
    assert_eq!(case.count("tickets").await, 1.0);
    assert_eq!(case.count("missing_keys").await, 0.0);
    form.remove();
}

#[test]
async fn detach_undoes_what_the_kit_did_and_keeps_the_pending_record() {
    let case = Case::new("detach");
    let form = case.form("");
    form.query_selector("[role=status]")
        .unwrap()
        .unwrap()
        .remove();
    let kit = case.attach(&form, 1);
    assert!(
        form.query_selector("p.oncekey-status[role=status]")
            .unwrap()
            .is_some(),
        "made"
    );
    fill_ticket(&form, "Detached");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    kit.detach();
    for attr in ["data-oncekey-state", "data-oncekey-outcome", "aria-busy"] {
        assert_eq!(form.get_attribute(attr), None, "{attr}");
    }
    assert!(!disabled(&form, "[name=subject]") && button(&form, "Try again").is_none());
    assert!(form.query_selector("[role=status]").unwrap().is_none());
    assert!(case.stored().is_some(), "a pending submission stays stored");
    form.remove();
}

#[test]
async fn wrong_options_are_errors_that_name_the_option() {
    let case = Case::new("options");
    let form = case.form("");
    let js = |text: &str| js_sys::JSON::parse(text).unwrap();
    // As attachForm reads them, then attaches.
    let error = |value: JsValue| {
        FormOptions::from_js(&value, &form)
            .and_then(|options| FormKit::attach(&form, options))
            .unwrap_err()
    };
    for (options, says) in [
        (r#"{"clearOnSuccess":1}"#, "options.clearOnSuccess"),
        (
            r#"{"resume":true}"#,
            "options.resume must be \"auto\" or \"manual\"",
        ),
        (r#"{"successMessage":5}"#, "options.successMessage"),
        (r#"{"name":7}"#, "options.name"),
        (r#"{"timeout":5}"#, "options.timeout is not an option"),
        (r#"{"retry":{"attempts":0}}"#, "options.retry.attempts"),
        (
            r#"{"messages":{"tryagain":"Réessayer"}}"#,
            "options.messages.tryagain is not a message of the form kit; the messages are sending,",
        ),
        (
            r#"{"messages":{"tryAgain":5}}"#,
            "options.messages.tryAgain must be a string",
        ),
        (r#"{"messages":"de"}"#, "options.messages must be an object"),
    ] {
        let e = error(js(options));
        assert!(e.message().contains(says), "{options}: {}", e.message());
    }
    assert!(error(JsValue::from(5))
        .message()
        .contains("must be an object"));
    // A translation table's missing entry (undefined, as TypeScript's optional keys allow) is the
    // kit's own text, not an error.
    let messages = js(r#"{"discard":"Verwerfen"}"#);
    js_sys::Reflect::set(&messages, &"tryAgain".into(), &JsValue::UNDEFINED).unwrap();
    let options = js("{}");
    js_sys::Reflect::set(&options, &"messages".into(), &messages).unwrap();
    // A retired key left undefined too (a table written for earlier versions, as TypeScript's).
    js_sys::Reflect::set(&messages, &"fileField".into(), &JsValue::UNDEFINED).unwrap();
    let read = FormOptions::from_js(&options, &form).expect("a message left undefined");
    assert_eq!(read.messages.get("tryAgain"), Some("Try again"));
    assert_eq!(read.messages.get("discard"), Some("Verwerfen"));
    form.set_attribute("method", "get").unwrap();
    let e = error(js("{}"));
    assert!(e.message().contains("method=\"post\""), "{}", e.message());
    form.remove_attribute("data-oncekey").unwrap();
    form.set_attribute("method", "post").unwrap();
    let e = FormKit::attach(&form, case.options(8)).unwrap_err();
    assert!(
        e.message().contains("options.name is required"),
        "{}",
        e.message()
    );
    form.remove();
}

#[test]
async fn german_messages_are_what_a_person_reads_in_the_status_and_on_the_buttons() {
    let case = Case::new("deutsch");
    let form = case.form("");
    let german = js_sys::JSON::parse(
        r#"{"messages":{
            "sending":"Wird gesendet…",
            "sendingAgain":"Erneuter Versuch {attempt}, mit demselben Schlüssel…",
            "unsure":"Wir konnten den Empfang nicht bestätigen. „Erneut senden“ schickt dieselbe Anfrage.",
            "created":"Ticket #{id} angelegt.",
            "tryAgain":"Erneut senden",
            "discard":"Verwerfen"
        }}"#,
    )
    .unwrap();
    // Read as attachForm reads them; sent as this case sends.
    let mut options = FormOptions::from_js(&german, &form).expect("valid options");
    options.submitter = case.options(1).submitter;
    let _kit = FormKit::attach(&form, options).unwrap();
    fill_ticket(&form, "Drucker brennt");
    case.plan(&["delay=300"]);
    form.request_submit().unwrap();
    assert_eq!(status_text(&form), "Wird gesendet…");
    settled(&form, "succeeded").await;
    let said = status_text(&form);
    assert!(
        said.starts_with("Ticket #") && said.ends_with(" angelegt."),
        "{said}"
    );
    fill_ticket(&form, "Drucker brennt wieder");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    assert!(
        status_text(&form).starts_with("Wir konnten den Empfang nicht bestätigen."),
        "{}",
        status_text(&form)
    );
    assert!(button(&form, "Try again").is_none() && button(&form, "Discard").is_none());
    button(&form, "Erneut senden")
        .expect("the German Try again")
        .click();
    assert_eq!(
        status_text(&form),
        "Erneuter Versuch 2, mit demselben Schlüssel…"
    );
    assert!(button(&form, "Verwerfen").is_none(), "gone while sending");
    settled(&form, "succeeded").await;
    assert_eq!(case.count("tickets").await, 2.0);
    form.remove();
}

#[test]
async fn messages_name_a_wrong_key_and_keep_the_english_for_the_others() {
    let mut messages = Messages::default();
    let e = messages.set("tryagain", "Réessayer").unwrap_err();
    assert_eq!(e.code(), oncekey::ErrorCode::Option);
    assert!(e.message().contains("options.messages.tryagain"), "{e}");
    messages.set("tryAgain", "Réessayer").unwrap();
    assert_eq!(messages.get("tryAgain"), Some("Réessayer"));
    assert_eq!(messages.get("discard"), Some("Discard"));
    assert_eq!(messages.get("nope"), None);
    // A message of versions that could not send files: a table written for them still loads,
    // and nothing says files cannot be sent.
    messages
        .set("fileField", "Le champ {field} contient un fichier")
        .unwrap();
    assert_eq!(messages.get("fileField"), None);
    // Every key is documented in the declarations and the README.
    let readme = include_str!("../README.md");
    for (key, _) in Messages::keys() {
        assert!(readme.contains(&format!("`{key}`")), "README lacks {key}");
    }
}

#[test]
async fn offline_the_form_stays_locked_says_it_goes_when_back_and_then_sends_the_same_key() {
    let case = Case::new("kit-offline");
    let form = case.form("");
    let _kit = case.attach(&form, 1);
    let seen = changes(&form);
    fill_ticket(&form, "Sent from a train");
    set_offline();
    form.request_submit().unwrap();
    assert_eq!(state(&form), "waiting");
    assert!(
        status_text(&form).contains("when the connection is back"),
        "{}",
        status_text(&form)
    );
    assert_eq!(busy(&form).as_deref(), Some("true"));
    assert!(disabled(&form, "[name=subject]") && disabled(&form, "button[type=submit]"));
    JsFuture::from(sleep(300)).await.unwrap();
    assert!(case.keys().is_empty(), "nothing is sent while offline");
    set_online();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.count("tickets").await, 1.0);
    assert_eq!(*seen.borrow(), ["waiting", "sending", "succeeded"]);
    form.remove();
}

#[test]
async fn an_expired_form_says_to_check_and_offers_send_as_a_new_ticket_and_discard() {
    let case = Case::new("kit-expired");
    let lifetime = |mut options: FormOptions| {
        // A server that keeps keys one second (usable for 0.9 s).
        options.submitter.retry.budget = Duration::from_millis(500);
        options.submitter.retry.key_lifetime = Duration::from_millis(1000);
        options
    };
    let form = case.form("");
    let kit = FormKit::attach(&form, lifetime(case.options(1))).unwrap();
    fill_ticket(&form, "Too late");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    assert!(button(&form, "Try again").is_some());
    // Its key's deadline comes while the person looks at it.
    settled(&form, "expired").await;
    let said = status_text(&form);
    assert!(
        said.contains("may or may not have arrived") && said.contains("check"),
        "{said}"
    );
    assert!(
        button(&form, "Try again").is_none(),
        "Try again cannot work"
    );
    assert!(button(&form, "Send as a new ticket").is_some() && button(&form, "Discard").is_some());
    assert_eq!(busy(&form).as_deref(), Some("true"));
    assert!(disabled(&form, "[name=subject]") && disabled(&form, "button[type=submit]"));
    // The form's own submit, and the kit's tryAgain(), send nothing with the expired key.
    form.request_submit().unwrap();
    kit.try_again();
    assert!(
        button(&form, "Send as a new ticket").is_some(),
        "still offered"
    );
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(case.keys().len(), 1);
    // A reload finds it expired too: the fields back, locked, the same offer.
    kit.detach();
    form.remove();
    let form = case.form("");
    let _kit = FormKit::attach(&form, lifetime(case.options(1))).unwrap();
    assert_eq!(state(&form), "expired");
    assert_eq!(field(&form, "subject").value(), "Too late");
    assert!(disabled(&form, "[name=subject]"));
    assert!(button(&form, "Try again").is_none());
    button(&form, "Send as a new ticket")
        .expect("offered after the reload")
        .click();
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "sent as new: a new key, deliberately");
    assert_eq!(case.count("tickets").await, 1.0);
    assert_eq!(case.stored(), None);
    form.remove();
}

#[test]
async fn an_expired_form_found_after_a_reload_asks_for_its_secrets_before_sending_it_as_new() {
    let case = Case::new("kit-expired-secret");
    let lifetime = |mut options: FormOptions| {
        options.submitter.retry.budget = Duration::from_millis(500);
        options.submitter.retry.key_lifetime = Duration::from_millis(1000);
        options
    };
    let form = case.form(SECRETS);
    let kit = FormKit::attach(&form, lifetime(case.options(1))).unwrap();
    fill_ticket(&form, "Too late, with a card");
    fill_secrets(&form);
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "expired").await;
    // A reload: the secrets were never stored.
    kit.detach();
    form.remove();
    let form = case.form(SECRETS);
    let _kit = FormKit::attach(&form, lifetime(case.options(1))).unwrap();
    assert_eq!(state(&form), "expired");
    assert_eq!(field(&form, "password").value(), "");
    let errors = catch_page_errors();
    button(&form, "Send as a new ticket")
        .expect("offered after the reload")
        .click();
    // Asked for, the first of them focused, and the page's console clean (the focus reached
    // the kit's own listener while its click was still running, and wasm-bindgen refused the
    // recursive call with an uncaught "closure invoked recursively").
    assert_eq!(
        document()
            .active_element()
            .and_then(|e| e.get_attribute("name")),
        Some("password".to_owned())
    );
    assert_eq!(errors.length(), 0, "{:?}", errors.to_vec());
    // Not sent without them.
    let text = status_text(&form);
    assert!(
        text.contains("Password, Card and PIN were not kept"),
        "{text}"
    );
    assert!(!disabled(&form, "[name=password]") && disabled(&form, "[name=subject]"));
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(
        case.keys().len(),
        1,
        "nothing sent before the secrets are back"
    );
    fill_secrets(&form);
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    let keys = case.keys();
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0], keys[1], "sent as new: a new key");
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_form_has_one_kit_and_each_submit_one_key() {
    // attachForm, then autoAttach (or a second attachForm, as a module run again does): two
    // kits each sent the submit, under two keys, and one's record replaced the other's.
    let case = Case::new("twice");
    let form = case.form("");
    let kit = case.attach(&form, 8);
    let again = FormKit::attach(&form, case.options(8)).expect_err("a second kit");
    assert_eq!(
        again.code(),
        oncekey::ErrorCode::State,
        "{}",
        again.message()
    );
    form.set_attribute("data-oncekey", &case.name).unwrap();
    let kits = oncekey::js::auto_attach(None).unwrap();
    assert_eq!(kits.length(), 0, "autoAttach leaves an attached form alone");
    fill_ticket(&form, "Once");
    case.plan(&["delay=200"]);
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().len(), 1, "one attempt, one key");
    assert_eq!(case.count("tickets").await, 1.0);
    // Detached, the form takes a kit again.
    kit.detach();
    let _kit = case.attach(&form, 8);
    form.remove();
}

#[test]
async fn a_secret_field_added_after_attach_never_reaches_session_storage() {
    let case = Case::new("late-secret");
    let form = case.form("");
    let _kit = case.attach(&form, 8);
    let late = document().create_element("input").unwrap();
    late.set_attribute("type", "password").unwrap();
    late.set_attribute("name", "password").unwrap();
    form.append_child(&late).unwrap();
    fill_ticket(&form, "Late password");
    fill(&form, "password", "hunter2-added-late");
    case.plan(&["delay=500"]);
    form.request_submit().unwrap();
    JsFuture::from(sleep(100)).await.unwrap();
    let stored = case.stored().expect("stored before the answer");
    assert!(stored.contains("Late password"), "{stored}");
    assert!(
        !stored.contains("hunter2"),
        "the password is stored: {stored}"
    );
    settled(&form, "succeeded").await;
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn fields_in_a_fieldset_are_locked_one_by_one_so_a_secret_asked_for_can_be_filled() {
    // The fieldset itself was disabled with the rest: every control in it was unusable
    // whatever its own state, the secret field the kit opened after a reload included.
    let secrets = r#"<fieldset>
      <label>Password <input type="password" name="password"></label>
      <label>Card <input name="card" autocomplete="cc-number"></label>
      <label>PIN <input name="pin" data-oncekey-secret></label></fieldset>"#;
    let case = Case::new("fieldset");
    let key = leave_unsure(&case, secrets).await;
    let form = case.form(secrets);
    let _kit = case.attach(&form, 8);
    let usable = |name: &str| {
        let el: Element = field(&form, name).unchecked_into();
        !el.matches(":disabled").unwrap()
    };
    assert!(
        usable("password") && usable("pin"),
        "the secrets can be filled"
    );
    assert!(!usable("subject"), "the rest stays locked");
    assert!(!disabled(&form, "fieldset"), "the fieldset is left alone");
    fill_secrets(&form);
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys(), [key.clone(), key], "resent with the same key");
    form.remove();
}

#[test]
async fn a_control_named_action_does_not_hide_the_form_s_url() {
    // form.action is the control then, not the URL: attachForm refused the form.
    let case = Case::new("action-field");
    let form = case.form(r#"<input type="hidden" name="action" value="new_ticket">"#);
    let mut options = case.options(8);
    let url = options.submitter.url.clone();
    options.submitter.url = String::new();
    form.set_attribute("action", &url).unwrap();
    let _kit = FormKit::attach(&form, options).expect("attached");
    fill_ticket(&form, "Hidden action field");
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn attach_form_reads_the_url_and_the_name_past_controls_named_action_and_id() {
    // form.action and form.id are the controls then: the JavaScript face's reader copied the
    // element into options.url and refused the form (autoAttach threw for the whole page), and
    // a form named by its id alone was refused for want of a name.
    let case = Case::new("action-id-js");
    let form = case.form(
        r#"<input type="hidden" name="action" value="new_ticket"><input type="hidden" name="id" value="7">"#,
    );
    let url = format!("{}/api/tickets", server());
    form.set_attribute("action", &url).unwrap();
    form.remove_attribute("data-oncekey").unwrap();
    form.set_attribute("id", &case.name).unwrap();
    let options = js_sys::JSON::parse(&format!(
        r#"{{"headers":{{"X-Tenant":"{}"}}}}"#,
        case.tenant
    ))
    .unwrap();
    let read = FormOptions::from_js(&options, &form).expect("read past the controls");
    assert_eq!(read.submitter.url, url);
    let _kit = FormKit::attach(&form, read).expect("attached, named by its id");
    fill_ticket(&form, "Hidden action and id");
    form.request_submit().unwrap();
    assert!(
        stored(&case.name).is_some(),
        "stored under the form's id while it is sent"
    );
    settled(&form, "succeeded").await;
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_conflict_unlocks_the_form_keeps_the_fields_says_so_and_is_not_retried() {
    // CONTRACT.md section 4: conflict: fields unlocked and kept, the error shown, nothing
    // retried. A key the server did with one body, found stored with another (a record changed
    // while the page was away): the server answers 422.
    let case = Case::new("kit-conflict");
    let form = case.form("");
    let kit = case.attach(&form, 1);
    fill_ticket(&form, "First body");
    case.plan(&["delay=300"]);
    form.request_submit().unwrap();
    let stored = case.stored().expect("stored before it is sent");
    settled(&form, "succeeded").await;
    kit.detach();
    form.remove();
    assert!(stored.contains("First body"));
    session()
        .set_item(
            &format!("oncekey:{}", case.name),
            &stored.replace("First body", "Second body"),
        )
        .unwrap();
    // The reload, and Try again.
    let form = case.form("");
    let options = FormOptions {
        resume: Resume::Manual,
        ..case.options(8)
    };
    let _kit = FormKit::attach(&form, options).unwrap();
    button(&form, "Try again").expect("offered").click();
    settled(&form, "conflict").await;
    assert_eq!(
        case.keys().len(),
        2,
        "the lost reply's attempt and one more, not retried"
    );
    assert!(!disabled(&form, "[name=subject]") && !disabled(&form, "button[type=submit]"));
    assert_eq!(busy(&form), None);
    assert_eq!(field(&form, "subject").value(), "Second body", "kept");
    assert!(
        status_text(&form).contains("different content"),
        "{}",
        status_text(&form)
    );
    assert!(button(&form, "Try again").is_none());
    assert_eq!(case.count("tickets").await, 1.0);
    assert!(
        case.stored().is_none(),
        "definite: the next send gets a new key"
    );
    form.remove();
}

#[test]
async fn a_misconfigured_key_header_unlocks_the_form_keeps_the_fields_says_so_and_is_not_retried() {
    // CONTRACT.md section 4: misconfigured: fields unlocked and kept, the error shown, nothing
    // retried. The key sent under another header (X-Tenant: the one other header the test
    // server lets a page of another origin send): the server finds none and says so (400).
    let case = Case::new("kit-misconfigured");
    let form = case.form("");
    let mut options = case.options(8);
    options.submitter.key_header = "X-Tenant".into();
    let _kit = FormKit::attach(&form, options).unwrap();
    fill_ticket(&form, "Wrong header");
    form.request_submit().unwrap();
    settled(&form, "misconfigured").await;
    assert_eq!(case.keys().len(), 1, "not retried");
    assert!(!disabled(&form, "[name=subject]") && !disabled(&form, "button[type=submit]"));
    assert_eq!(busy(&form), None);
    assert_eq!(field(&form, "subject").value(), "Wrong header", "kept");
    assert!(
        status_text(&form).contains("set up wrongly"),
        "{}",
        status_text(&form)
    );
    assert!(button(&form, "Try again").is_none());
    assert_eq!(case.count("tickets").await, 0.0);
    assert!(case.stored().is_none());
    form.remove();
}

#[test]
async fn a_round_started_through_the_kit_s_submitter_unlocks_the_form_when_it_settles() {
    // The form locked on 'sending' but the kit heard only its own rounds' settlements: a Try
    // again made by the page through kit.submitter left the form locked for good.
    let case = Case::new("by-page");
    let form = case.form("");
    let kit = case.attach(&form, 1);
    fill_ticket(&form, "Tried again by the page");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    let key = case.keys()[0].clone();
    drop(kit.submitter().try_again());
    JsFuture::from(sleep(0)).await.unwrap();
    assert!(
        button(&form, "Try again").is_none(),
        "no Try again while it sends"
    );
    settled(&form, "succeeded").await;
    assert_eq!(busy(&form), None);
    assert!(!disabled(&form, "[name=subject]") && !disabled(&form, "button[type=submit]"));
    assert!(button(&form, "Try again").is_none() && button(&form, "Discard").is_none());
    assert!(
        status_text(&form).starts_with("Created #"),
        "{}",
        status_text(&form)
    );
    assert_eq!(case.keys(), [key.clone(), key]);
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn the_button_that_submitted_the_form_is_sent_with_its_name_and_value() {
    // As a form posted by the browser: "Publish" and "Save draft" are one form's two buttons,
    // and the server tells them apart by the button's name and value. The kit dropped both.
    let case = Case::new("intent");
    let form = case.form(
        r#"<button type="submit" name="intent" value="draft">Save draft</button>
           <button type="submit" name="intent" value="publish">Publish</button>"#,
    );
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Two buttons");
    case.plan(&["delay=300"]);
    button(&form, "Publish").expect("Publish").click();
    JsFuture::from(sleep(100)).await.unwrap();
    let stored = case.stored().expect("stored before the answer");
    assert!(stored.contains(r#"\"intent\":\"publish\""#), "{stored}");
    assert!(!stored.contains("draft"), "{stored}");
    settled(&form, "succeeded").await;
    // Enter in a field: the form's first submit button is the submitter, as the browser says.
    fill_ticket(&form, "By Enter");
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(case.count("tickets").await, 2.0);
    form.remove();
}

#[test]
async fn asked_for_the_secrets_after_a_reload_a_person_can_discard_or_try_again_with_them() {
    // The kit asked for the secrets with no button: a person who could not give them again
    // had a locked form until the key expired (a day).
    let case = Case::new("ask-discard");
    leave_unsure(&case, SECRETS).await;
    let form = case.form(SECRETS);
    let _kit = case.attach(&form, 8);
    assert!(!disabled(&form, "[name=password]"), "asked for");
    button(&form, "Discard")
        .expect("Discard, while asked")
        .click();
    settled(&form, "idle").await;
    assert_eq!(case.stored(), None, "the record is gone");
    assert!(!disabled(&form, "[name=subject]") && busy(&form).is_none());
    form.remove();

    // Try again while asked: sent with the secrets filled, with the same key.
    let case = Case::new("ask-again");
    let key = leave_unsure(&case, SECRETS).await;
    let form = case.form(SECRETS);
    let _kit = case.attach(&form, 8);
    fill_secrets(&form);
    button(&form, "Try again")
        .expect("Try again, while asked")
        .click();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys(), [key.clone(), key]);
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_detached_kit_is_freed_with_its_submitter_and_its_listeners() {
    // The kit's change listener held the kit, and the kit its submitter: a cycle, let go only
    // at the submitter's next change, which a detached kit's idle submitter never had. Each
    // attach and detach kept a submitter, its window listeners and its IndexedDB connection.
    let case = Case::new("freed");
    let form = case.form("");
    let before = online_listeners();
    for _ in 0..3 {
        let kit = case.attach(&form, 8);
        JsFuture::from(sleep(20)).await.unwrap();
        assert_eq!(online_listeners(), before + 1, "the submitter listens");
        kit.detach();
        drop(kit);
        JsFuture::from(sleep(20)).await.unwrap();
        assert_eq!(online_listeners(), before, "freed: its listener removed");
    }
    form.remove();
}

#[test]
async fn after_a_reload_the_fields_are_as_they_were_sent_and_hidden_fields_as_the_page_has_them() {
    // Only the names in the stored body were set: a checkbox the person had unchecked came
    // back checked (the page's default), a multiple select emptied came back with its default;
    // and a hidden field got the old page's value (a stale CSRF token for the next submit).
    let extra = |token: &str| {
        format!(
            r#"<input type="checkbox" name="urgent" value="yes" checked>
               <select name="floors" multiple><option value="1" selected>1</option><option value="2">2</option></select>
               <input type="hidden" name="csrf" value="{token}">"#
        )
    };
    let case = Case::new("restore-all");
    let form = case.form(&extra("old-token"));
    let kit = case.attach(&form, 1);
    fill_ticket(&form, "Low priority");
    field(&form, "urgent").set_checked(false);
    let floors: web_sys::HtmlSelectElement = form
        .query_selector("[name=floors]")
        .unwrap()
        .unwrap()
        .unchecked_into();
    floors
        .options()
        .get_with_index(0)
        .unwrap()
        .unchecked_into::<web_sys::HtmlOptionElement>()
        .set_selected(false);
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    let stored = case.stored().expect("stored");
    assert!(
        stored.contains("old-token") && !stored.contains("urgent"),
        "{stored}"
    );
    kit.detach();
    form.remove();

    // The reload: the page renders its defaults and a fresh token.
    let form = case.form(&extra("new-token"));
    let _kit = case.attach(&form, 8);
    assert_eq!(field(&form, "subject").value(), "Low priority");
    assert!(!field(&form, "urgent").checked(), "unchecked, as sent");
    let floors: web_sys::HtmlSelectElement = form
        .query_selector("[name=floors]")
        .unwrap()
        .unwrap()
        .unchecked_into();
    assert_eq!(
        floors.selected_options().length(),
        0,
        "nothing chosen, as sent"
    );
    assert_eq!(field(&form, "csrf").value(), "new-token", "the page's own");
    form.remove();
}

#[test]
async fn after_a_reload_a_round_the_server_ended_waits_for_the_person_s_try_again() {
    // The kit resumes a submission found after a reload with Try again, which sends at once:
    // one whose round the server ended (x-should-retry: false, a redirect) went out again on
    // every reload. It is kept unsure, with Try again and Discard, as before the reload.
    let case = Case::new("stopped");
    let key = leave_unsure(&case, "").await;
    let stored = case.stored().expect("stored");
    let marked = stored.replacen(r#","url":"#, r#","stopped":"server-said-stop","url":"#, 1);
    assert_ne!(marked, stored);
    session()
        .set_item(&format!("oncekey:{}", case.name), &marked)
        .unwrap();
    let form = case.form("");
    let _kit = case.attach(&form, 8);
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(case.keys().len(), 1, "nothing sent on its own");
    assert_eq!(state(&form), "unsure");
    assert_eq!(field(&form, "subject").value(), "Reloaded");
    button(&form, "Try again").expect("Try again").click();
    settled(&form, "succeeded").await;
    assert_eq!(
        case.keys(),
        [key.clone(), key],
        "the person's Try again: the same key"
    );
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

#[test]
async fn a_held_submit_is_sent_by_the_kit_attached_last_when_one_is_detached_first() {
    // React's StrictMode: attach, detach, attach again, before IndexedDB has answered. The
    // first kit took the held mark and, detached, sent nothing; the second found no mark: the
    // person's Send was lost without a word.
    let case = Case::new("held-twice");
    let form = case.form("");
    fill_ticket(&form, "Held, then StrictMode");
    form.set_attribute("data-oncekey-held", "").unwrap();
    let first = case.attach(&form, 8);
    first.detach();
    let _second = case.attach(&form, 8);
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.count("tickets").await, 1.0);
    assert_eq!(form.get_attribute("data-oncekey-held"), None, "taken off");
    form.remove();
}

/// The first-paint snippet as the README gives it, listening on `form` only (a page has it on
/// the window, for every form; here the other tests' forms are left alone). Returns what takes
/// it off.
fn first_paint_snippet_on(form: &HtmlFormElement) -> js_sys::Function {
    let readme = include_str!("../README.md");
    let start = readme
        .find("```html\n<script>")
        .expect("the snippet in the README")
        + 16;
    let end = start + readme[start..].find("</script>").unwrap();
    let install = js_sys::Function::new_with_args(
        "form, snippet",
        "var on = []; new Function('addEventListener', snippet)(function (t, f, c) { \
         form.addEventListener(t, f, c); on.push([t, f, c]); }); \
         return function () { on.forEach(function (a) { form.removeEventListener(a[0], a[1], a[2]); }); };",
    );
    install
        .call2(&JsValue::NULL, form, &readme[start..end].into())
        .unwrap()
        .unchecked_into()
}

#[test]
async fn a_submit_held_before_the_module_loaded_is_sent_with_the_button_that_was_pressed() {
    // "Publish" pressed on a slow link, before the kit was attached: the snippet held it, and
    // the kit sent the form without the button's name and value (a draft, to the server).
    let case = Case::new("held-button");
    let form = case.form(
        r#"<button type="submit" name="intent" value="draft">Save draft</button>
           <button type="submit" name="intent" value="publish">Publish</button>"#,
    );
    let off = first_paint_snippet_on(&form);
    fill_ticket(&form, "Held, then published");
    button(&form, "Publish").expect("Publish").click();
    assert!(form.get_attribute("data-oncekey-held").is_some(), "held");
    // A script of the page adds a control before the buttons meanwhile (a token, a widget):
    // the button pressed is still the one sent, never the one now in its place.
    form.insert_adjacent_html(
        "afterbegin",
        r#"<input type="hidden" name="token" value="t">"#,
    )
    .unwrap();
    case.plan(&["delay=300"]);
    let _kit = case.attach(&form, 8);
    off.call0(&JsValue::NULL).unwrap();
    JsFuture::from(sleep(150)).await.unwrap();
    let stored = case.stored().expect("stored before the answer");
    assert!(stored.contains(r#"\"intent\":\"publish\""#), "{stored}");
    assert!(!stored.contains("draft"), "{stored}");
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.count("tickets").await, 1.0);
    assert_eq!(form.get_attribute("data-oncekey-held"), None, "taken off");
    form.remove();
}

#[test]
async fn a_held_cancel_or_a_held_button_not_told_from_send_sends_nothing() {
    // Before the kit was attached, the snippet held a dialog's Cancel (formmethod=dialog,
    // which submits nothing) and noted it as ["", ""]: the kit took it for Send, the first
    // submit button of no name and value, and sent a ticket. An unnamed Save draft with its
    // own formaction was held and sent as Send alike.
    for (extra, pressed) in [
        (
            r#"<button type="submit" formmethod="dialog" value="">Cancel</button>"#,
            "Cancel",
        ),
        (
            r#"<button type="submit" formaction="/api/drafts">Save draft</button>"#,
            "Save draft",
        ),
    ] {
        let case = Case::new("held-not-send");
        let form = case.form("");
        // After Send: the first submit button of its name and value is Send.
        form.insert_adjacent_html("beforeend", extra).unwrap();
        let off = first_paint_snippet_on(&form);
        fill_ticket(&form, "Not this one");
        button(&form, pressed).expect("the button").click();
        // A dialog's Cancel is not held: the browser closes the dialog, as without the kit.
        let held = form.get_attribute("data-oncekey-held").is_some();
        assert_eq!(held, pressed == "Save draft", "{pressed}");
        let _kit = case.attach(&form, 8);
        off.call0(&JsValue::NULL).unwrap();
        // Taken up once the kit has looked in IndexedDB; then anything sent would be under way.
        for _ in 0..150 {
            if form.get_attribute("data-oncekey-held").is_none() {
                break;
            }
            JsFuture::from(sleep(20)).await.unwrap();
        }
        JsFuture::from(sleep(300)).await.unwrap();
        assert_eq!(state(&form), "idle", "{pressed}");
        assert_eq!(field(&form, "subject").value(), "Not this one", "{pressed}");
        assert!(
            !disabled(&form, "[name=subject]"),
            "{pressed}: the form as it was"
        );
        assert_eq!(form.get_attribute("data-oncekey-held"), None, "{pressed}");
        assert!(case.keys().is_empty(), "{pressed}: nothing sent");
        assert_eq!(case.count("tickets").await, 0.0, "{pressed}");
        if held {
            let said = status_text(&form);
            assert!(said.contains("press the button again"), "{said}");
        }
        form.remove();
    }
    // Send itself, pressed early beside a dialog's Cancel of the same (no) name and value, is
    // the one held, and sent: one ticket.
    let case = Case::new("held-send-by-cancel");
    let form = case.form("");
    let cancel = r#"<button type="submit" formmethod="dialog" value="">Cancel</button>"#;
    form.insert_adjacent_html("beforeend", cancel).unwrap();
    let off = first_paint_snippet_on(&form);
    fill_ticket(&form, "This one");
    button(&form, "Send").expect("Send").click();
    let _kit = case.attach(&form, 8);
    off.call0(&JsValue::NULL).unwrap();
    settled(&form, "succeeded").await;
    assert_eq!(case.keys().len(), 1);
    assert_eq!(case.count("tickets").await, 1.0);
    form.remove();
}

/// Two tabs of the origin, as two forms of one name on `localStorage`, both attached before
/// either submits: tab A's submission is left unsure; then the person fills tab B's form with
/// another ticket and sends it. B is refused (another submission is pending) and shows A's in
/// place, with Try again and Discard.
async fn refused_for_another_tab_s_submission(case: &Case) -> (HtmlFormElement, HtmlFormElement) {
    let on_local = |attempts| {
        let mut o = case.options(attempts);
        o.submitter.storage = StorageKind::Local;
        o
    };
    let (a, b) = (case.form(""), case.form(""));
    FormKit::attach(&a, on_local(1)).unwrap();
    FormKit::attach(&b, on_local(1)).unwrap();
    fill_ticket(&a, "From tab A");
    case.plan(&["offline"]);
    a.request_submit().unwrap();
    settled(&a, "unsure").await;
    fill_ticket(&b, "Typed in tab B");
    fill(&b, "body", "Second floor.");
    b.request_submit().unwrap();
    settled(&b, "unsure").await;
    assert_eq!(
        field(&b, "subject").value(),
        "From tab A",
        "A's shown in place"
    );
    assert!(button(&b, "Try again").is_some() && button(&b, "Discard").is_some());
    assert_eq!(case.count("tickets").await, 0.0, "B's ticket was not sent");
    (a, b)
}

fn typed_in_b_is_back(b: &HtmlFormElement) {
    assert_eq!(
        field(b, "subject").value(),
        "Typed in tab B",
        "what the person typed is back"
    );
    assert_eq!(field(b, "body").value(), "Second floor.");
    assert!(
        !disabled(b, "[name=subject]"),
        "the form is the person's again"
    );
}

#[test]
async fn after_another_tab_s_submission_is_tried_again_the_fields_typed_in_this_one_come_back() {
    let case = Case::new("tabs-typed-again");
    let (a, b) = refused_for_another_tab_s_submission(&case).await;
    button(&b, "Try again").unwrap().click();
    settled(&b, "succeeded").await;
    typed_in_b_is_back(&b);
    b.request_submit().unwrap();
    settled(&b, "succeeded").await;
    let keys = case.keys();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert_eq!(keys[0], keys[1], "A's ticket under A's key: {keys:?}");
    assert_ne!(keys[2], keys[0], "B's own under a key of its own");
    assert_eq!(case.count("tickets").await, 2.0, "A's and B's, once each");
    a.remove();
    b.remove();
}

#[test]
async fn after_another_tab_s_submission_is_discarded_the_fields_typed_in_this_one_come_back() {
    let case = Case::new("tabs-typed-discard");
    let (a, b) = refused_for_another_tab_s_submission(&case).await;
    button(&b, "Discard").unwrap().click();
    settled(&b, "idle").await;
    typed_in_b_is_back(&b);
    b.request_submit().unwrap();
    settled(&b, "succeeded").await;
    assert_eq!(case.count("tickets").await, 1.0, "B's, once");
    a.remove();
    b.remove();
}

#[test]
async fn a_discard_here_of_a_submission_another_tab_is_sending_keeps_its_record() {
    // Tab A is sending (its answer slow); tab B's person submits another ticket, is refused for
    // A's and shown it in place, and presses Discard. That removed A's record while A sent it:
    // a reload of A then found nothing to resume, and its person wrote the ticket again under
    // a new key. Now B keeps it, says so, and "Try again" shows A's answer (a replay).
    let case = Case::new("tabs-discard-sending");
    let on_local = || {
        let mut o = case.options(1);
        o.submitter.storage = StorageKind::Local;
        o
    };
    let local = web_sys::window().unwrap().local_storage().unwrap().unwrap();
    let slot = format!("oncekey:{}", case.name);
    let (a, b) = (case.form(""), case.form(""));
    FormKit::attach(&a, on_local()).unwrap();
    FormKit::attach(&b, on_local()).unwrap();
    fill_ticket(&a, "From tab A");
    case.plan(&["delay=1500"]);
    a.request_submit().unwrap();
    settled(&a, "sending").await;
    let key = case.keys_stored(&local, &slot).expect("A's record");
    fill_ticket(&b, "Typed in tab B");
    fill(&b, "body", "Second floor.");
    b.request_submit().unwrap();
    settled(&b, "unsure").await;
    assert_eq!(
        field(&b, "subject").value(),
        "From tab A",
        "A's shown in place"
    );
    button(&b, "Discard").expect("Discard is offered").click();
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(
        case.keys_stored(&local, &slot).as_deref(),
        Some(key.as_str()),
        "A's record is kept while A sends it"
    );
    assert_eq!(state(&b), "unsure", "B still shows it");
    assert!(
        status_text(&b).starts_with("This request is being sent from another tab"),
        "{}",
        status_text(&b)
    );
    assert!(button(&b, "Try again").is_some() && button(&b, "Discard").is_some());
    settled(&a, "succeeded").await;
    assert_eq!(
        local.get_item(&slot).unwrap(),
        None,
        "removed by A, after its answer"
    );
    button(&b, "Try again").unwrap().click();
    settled(&b, "succeeded").await;
    typed_in_b_is_back(&b);
    let keys = case.keys();
    assert_eq!(
        keys,
        [key.clone(), key],
        "A's ticket under A's key, replayed to B"
    );
    assert_eq!(case.count("tickets").await, 1.0);
    a.remove();
    b.remove();
}

#[test]
async fn another_tab_s_expired_submission_shown_here_is_not_sent_as_new_with_the_secrets_typed_here(
) {
    // Tab B's person typed their password for their own ticket; refused for tab A's expired
    // submission, B shows A's with "Send as a new ticket", which sent A's body with B's
    // password, not asking for A's.
    let case = Case::new("tabs-expired-secret");
    let options = || {
        let mut o = case.options(1);
        o.submitter.storage = StorageKind::Local;
        o.submitter.retry.budget = Duration::from_millis(500);
        o.submitter.retry.key_lifetime = Duration::from_millis(1000);
        o
    };
    let (a, b) = (case.form(SECRETS), case.form(SECRETS));
    FormKit::attach(&a, options()).unwrap();
    FormKit::attach(&b, options()).unwrap();
    fill_ticket(&a, "From tab A");
    fill_secrets(&a);
    case.plan(&["offline"]);
    a.request_submit().unwrap();
    settled(&a, "expired").await;
    fill_ticket(&b, "Typed in tab B");
    fill(&b, "body", "Second floor.");
    fill_secrets(&b);
    fill(&b, "password", "b's own password");
    b.request_submit().unwrap();
    settled(&b, "expired").await;
    // Expired as it was taken up; refused a moment later.
    JsFuture::from(sleep(50)).await.unwrap();
    assert_eq!(
        field(&b, "subject").value(),
        "From tab A",
        "A's shown in place"
    );
    assert_eq!(
        field(&b, "password").value(),
        "",
        "B's password is not offered for A's"
    );
    button(&b, "Send as a new ticket").expect("offered").click();
    let text = status_text(&b);
    assert!(
        text.contains("Password, Card and PIN were not kept"),
        "{text}"
    );
    JsFuture::from(sleep(100)).await.unwrap();
    assert_eq!(
        case.keys().len(),
        1,
        "nothing sent before the secrets are given"
    );
    fill_secrets(&b);
    b.request_submit().unwrap();
    settled(&b, "succeeded").await;
    assert_eq!(case.keys().len(), 2);
    assert_eq!(case.count("tickets").await, 1.0, "A's, sent as new, once");
    typed_in_b_is_back(&b);
    a.remove();
    b.remove();
}

#[test]
async fn a_refusal_s_note_on_a_field_outside_the_form_goes_at_the_next_submit() {
    // Before: clearing searched the form's subtree only, so a form= field's note and mark stayed.
    let case = Case::new("rv-outside");
    let form = case.form("");
    form.set_id(&case.name);
    form.query_selector("input[name=email]")
        .unwrap()
        .unwrap()
        .remove();
    let outside: HtmlInputElement = document().create_element("input").unwrap().unchecked_into();
    outside.set_name("email");
    outside.set_attribute("form", &case.name).unwrap();
    document().body().unwrap().append_child(&outside).unwrap();
    let kit = case.attach(&form, 8);
    fill(&form, "subject", "Outside");
    fill(&form, "body", "Third floor.");
    outside.set_value("not-an-email");
    form.request_submit().unwrap();
    settled(&form, "refused").await;
    assert_eq!(
        outside.get_attribute("aria-invalid").as_deref(),
        Some("true"),
        "marked"
    );
    assert_eq!(focused(), Some(outside.clone().unchecked_into()));
    outside.set_value("ana@example.com");
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    let note_after = outside
        .next_element_sibling()
        .map(|n| n.class_name())
        .unwrap_or_default();
    let invalid = outside.get_attribute("aria-invalid");
    kit.detach();
    let note_after_detach = outside
        .next_element_sibling()
        .map(|n| n.class_name())
        .unwrap_or_default();
    if let Some(n) = outside.next_element_sibling() {
        n.remove();
    }
    outside.remove();
    form.remove();
    assert_eq!(
        (note_after.as_str(), invalid, note_after_detach.as_str()),
        ("", None, ""),
        "the refusal's note and mark are gone once the corrected request succeeded"
    );
}

/// A reload of `form`, whose submission was sent while offline: once it is `unsure`, its kit
/// detached and the form gone, the same form is made again from `extra` with a kit that waits
/// for "Try again" (the fields as the kit put them back). The new form, and its kit.
async fn reloaded_unsure(
    case: &Case,
    form: HtmlFormElement,
    kit: FormKit,
    extra: &str,
) -> (HtmlFormElement, FormKit) {
    settled(&form, "unsure").await;
    kit.detach();
    form.remove();
    let form = case.form(extra);
    let mut o = case.options(8);
    o.resume = Resume::Manual;
    let kit = FormKit::attach(&form, o).unwrap();
    (form, kit)
}

#[test]
async fn after_a_reload_a_text_field_after_a_hidden_field_of_its_name_gets_its_own_value() {
    // Before: restoring skipped the hidden field without taking its value, so the next got it.
    let extra = r#"<input type="hidden" name="subject" value="from-page">"#;
    let case = Case::new("rv-hidden-twin");
    let form = case.form(extra);
    let kit = case.attach(&form, 1);
    let visible = "input[name=subject]:not([type=hidden])";
    let set = |form: &HtmlFormElement, v: &str| {
        let el = form.query_selector(visible).unwrap().unwrap();
        js_sys::Reflect::set(&el, &"value".into(), &v.into()).unwrap();
    };
    set(&form, "Typed subject");
    fill(&form, "email", "ana@example.com");
    fill(&form, "body", "Third floor.");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    let (form, _kit) = reloaded_unsure(&case, form, kit, extra).await;
    let shown = form
        .query_selector(visible)
        .unwrap()
        .unwrap()
        .unchecked_into::<HtmlInputElement>()
        .value();
    form.remove();
    assert_eq!(
        shown, "Typed subject",
        "the visible field shows what was sent in it"
    );
}

#[test]
async fn after_a_reload_a_check_box_after_its_hidden_twin_comes_back_as_it_was_sent() {
    // Rails' check_box: a hidden "0" before the checkbox "1" of one name. Passing the hidden
    // field's value over leaves the box as it was sent, checked or not, whatever the page's
    // default, and the hidden field as the page has it.
    let extra = |checked: &str| {
        format!(
            r#"<input type="hidden" name="urgent" value="0">
               <input type="checkbox" name="urgent" value="1" {checked}>"#
        )
    };
    let the_box = "input[name=urgent][type=checkbox]";
    let check_box = |form: &HtmlFormElement| -> HtmlInputElement {
        form.query_selector(the_box)
            .unwrap()
            .unwrap()
            .unchecked_into()
    };
    for sent in [true, false] {
        let case = Case::new("check-box-twin");
        let form = case.form(&extra(if sent { "" } else { "checked" }));
        let kit = case.attach(&form, 1);
        fill_ticket(&form, "Twin");
        check_box(&form).set_checked(sent);
        case.plan(&["offline"]);
        form.request_submit().unwrap();
        // The reload: the page's default is the other one.
        let page = extra(if sent { "" } else { "checked" });
        let (form, _kit) = reloaded_unsure(&case, form, kit, &page).await;
        let shown = (
            check_box(&form).checked(),
            field(&form, "urgent").value(),
            field(&form, "subject").value(),
        );
        form.remove();
        assert_eq!(
            shown,
            (sent, "0".to_owned(), "Twin".to_owned()),
            "sent {sent}"
        );
    }
}

#[test]
async fn a_reset_button_named_reset_does_not_keep_the_fields_after_a_success() {
    // Before: clearing called form.reset, which a control named "reset" hides: nothing cleared.
    let case = Case::new("rv-reset");
    let form = case.form(r#"<input type="reset" name="reset" value="Clear">"#);
    let _kit = case.attach(&form, 8);
    fill_ticket(&form, "Cleared after");
    form.request_submit().unwrap();
    settled(&form, "succeeded").await;
    let subject = field(&form, "subject").value();
    form.remove();
    assert_eq!(subject, "", "cleared on success (clearOnSuccess: true)");
}

#[test]
async fn controls_named_like_the_form_s_methods_do_not_hide_them_from_the_kit() {
    // Before: form.elements, form.append and form.dispatchEvent were the controls of those names.
    let case = Case::new("shadowed");
    let form = case.form(
        r#"<input type="hidden" name="elements" value="e">
           <input type="hidden" name="append" value="a">
           <input type="hidden" name="dispatchEvent" value="d">"#,
    );
    let seen = changes(&form);
    let _kit = case.attach(&form, 1);
    fill_ticket(&form, "Shadowed");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    let locked = disabled(&form, "[name=subject]");
    let said = status_text(&form);
    let told = seen.borrow().clone();
    form.remove();
    assert!(locked, "the fields are locked while unsure");
    assert!(!said.is_empty(), "the status says so");
    assert!(told.contains(&"unsure".to_owned()), "told: {told:?}");
}

#[test]
async fn after_a_reload_a_reset_button_keeps_its_label_and_the_text_field_of_its_name_its_value() {
    // Before: restoring filled every input but file, submit, button and image ones in order: a
    // reset button before a text field of its name took the field's value as its label.
    let extra = r#"<input type="reset" name="subject" value="Clear">"#;
    let case = Case::new("rv-reset-name");
    let form = case.form(extra);
    let kit = case.attach(&form, 1);
    let (reset, text) = ("input[type=reset]", "input[name=subject]:not([type])");
    let value = |form: &HtmlFormElement, selector: &str| {
        form.query_selector(selector)
            .unwrap()
            .unwrap()
            .unchecked_into::<HtmlInputElement>()
            .value()
    };
    js_sys::Reflect::set(
        &form.query_selector(text).unwrap().unwrap(),
        &"value".into(),
        &"Typed subject".into(),
    )
    .unwrap();
    fill(&form, "email", "ana@example.com");
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    let (form, _kit) = reloaded_unsure(&case, form, kit, extra).await;
    let shown = (value(&form, reset), value(&form, text));
    form.remove();
    assert_eq!(shown, ("Clear".to_owned(), "Typed subject".to_owned()));
}

/// The values of `name` the form sends, submitted by `by` (`FormData`, as the kit reads it).
fn sent_values(form: &HtmlFormElement, name: &str, by: Option<&Element>) -> Vec<String> {
    let data: web_sys::FormData = match by {
        Some(button) => {
            let class = js_sys::Reflect::get(&js_sys::global(), &"FormData".into()).unwrap();
            let args = js_sys::Array::of2(form, button);
            js_sys::Reflect::construct(class.unchecked_ref::<js_sys::Function>(), &args)
                .unwrap()
                .unchecked_into()
        }
        None => web_sys::FormData::new_with_form(form).unwrap(),
    };
    data.get_all(name)
        .iter()
        .map(|v| v.as_string().unwrap())
        .collect()
}

#[test]
async fn after_a_reload_controls_sharing_a_name_come_back_as_they_were_sent() {
    // Before: text fields took the name's values in order, checkboxes and selects looked theirs
    // up anywhere among them and took none: a checked box before a text field of its name gave
    // the field the box's "on".
    let extra = r#"<input type="checkbox" name="tag" checked>
        <select name="tag" multiple><option>a</option><option>b</option><option>c</option></select>
        <button type="submit" name="tag" value="go">Go</button>
        <input name="tag" id="tag-text">
        <input type="checkbox" name="tag" value="late" checked>"#;
    let first = "input[name=tag][type=checkbox]:not([value])";
    let last = "input[name=tag][value=late]";
    let go = "button[name=tag]";
    let el = |form: &HtmlFormElement, selector: &str| -> HtmlInputElement {
        form.query_selector(selector)
            .unwrap()
            .unwrap()
            .unchecked_into()
    };
    let options = |form: &HtmlFormElement| -> Vec<HtmlInputElement> {
        let list = form.query_selector_all("select[name=tag] option").unwrap();
        (0..list.length())
            .map(|i| list.get(i).unwrap().unchecked_into())
            .collect()
    };
    // What the person did (the first box, the options chosen, Go pressed or not, the text, the
    // last box), and what the form sent. The page's defaults are the boxes checked, nothing
    // chosen, the text empty. In the second, "on" is the text field's (it had to send a value);
    // in the third, "go" is the text field's too (Go, before it, did not submit the form).
    type Round = (
        bool,
        &'static [&'static str],
        bool,
        &'static str,
        bool,
        &'static [&'static str],
    );
    let rounds: [Round; 3] = [
        (
            true,
            &["a", "c"],
            true,
            "mine",
            false,
            &["on", "a", "c", "go", "mine"],
        ),
        (false, &[], false, "on", false, &["on"]),
        (false, &["b"], false, "go", true, &["b", "go", "late"]),
    ];
    for (checked, chosen, pressed, typed, late, sent) in rounds {
        let case = Case::new("shared-name");
        let form = case.form(extra);
        let kit = case.attach(&form, 1);
        fill_ticket(&form, "Shared");
        el(&form, first).set_checked(checked);
        for option in options(&form) {
            let selected = chosen.contains(&option.text_content().unwrap().as_str());
            js_sys::Reflect::set(&option, &"selected".into(), &selected.into()).unwrap();
        }
        el(&form, "#tag-text").set_value(typed);
        el(&form, last).set_checked(late);
        let by = pressed.then(|| el(&form, go).unchecked_into::<Element>());
        assert_eq!(sent_values(&form, "tag", by.as_ref()), sent, "as sent");
        case.plan(&["offline"]);
        match &by {
            Some(b) => form
                .request_submit_with_submitter(Some(b.unchecked_ref()))
                .unwrap(),
            None => form.request_submit().unwrap(),
        }
        let (form, _kit) = reloaded_unsure(&case, form, kit, extra).await;
        let chosen_now: Vec<String> = options(&form)
            .iter()
            .filter(|o| {
                js_sys::Reflect::get(o, &"selected".into())
                    .unwrap()
                    .is_truthy()
            })
            .map(|o| o.text_content().unwrap())
            .collect();
        let shown = (
            el(&form, first).checked(),
            chosen_now,
            el(&form, go).value(),
            el(&form, "#tag-text").value(),
            el(&form, last).checked(),
        );
        // Unlocked (its fields are disabled while it is held), it sends what it sent.
        button(&form, "Discard").expect("Discard").click();
        settled(&form, "idle").await;
        let by = pressed.then(|| el(&form, go).unchecked_into::<Element>());
        let again = sent_values(&form, "tag", by.as_ref());
        form.remove();
        let chosen: Vec<String> = chosen.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            shown,
            (checked, chosen, "go".to_owned(), typed.to_owned(), late),
            "sent {sent:?}"
        );
        assert_eq!(again, sent, "sent again");
    }
}

#[test]
async fn controls_added_while_the_form_is_locked_are_locked_too_and_unlocked_with_it() {
    // Before: the lock disabled the controls there when it was made: a row a script added while
    // the outcome was unknown could be filled in and sent.
    let case = Case::new("added");
    let form = case.form("");
    form.set_id(&case.name);
    let _kit = case.attach(&form, 1);
    fill_ticket(&form, "Added");
    // A field outside the form, there before the lock, that the page makes the form's while
    // locked (by the attribute alone: no node is added then).
    let named_later = document().create_element("input").unwrap();
    named_later.set_attribute("name", "named-later").unwrap();
    document()
        .body()
        .unwrap()
        .append_child(&named_later)
        .unwrap();
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    named_later.set_attribute("form", &case.name).unwrap();
    JsFuture::from(sleep(0)).await.unwrap();
    let later_locked = off(&named_later);
    // A row in the form, with a field the page disabled, and a field outside naming the form.
    let row = document().create_element("div").unwrap();
    row.set_inner_html(
        r#"<input name="late"><select name="pick"><option>1</option></select>
           <input name="off" disabled>"#,
    );
    form.append_child(&row).unwrap();
    let outside = document().create_element("input").unwrap();
    outside.set_attribute("name", "outside").unwrap();
    outside.set_attribute("form", &case.name).unwrap();
    document().body().unwrap().append_child(&outside).unwrap();
    JsFuture::from(sleep(0)).await.unwrap();
    let named = |name: &str| disabled(&form, &format!("[name={name}]"));
    let locked = (named("late"), named("pick"), named("off"), off(&outside));
    let offered = ["Try again", "Discard"].map(|b| off(&button(&form, b).expect(b)));
    button(&form, "Discard").expect("Discard").click();
    settled(&form, "idle").await;
    let unlocked = (named("late"), named("pick"), named("off"), off(&outside));
    let later_unlocked = !off(&named_later);
    outside.remove();
    named_later.remove();
    form.remove();
    assert!(
        later_locked,
        "a field made the form's by its form= attribute is locked"
    );
    assert!(later_unlocked, "and unlocked with the rest");
    assert_eq!(locked, (true, true, true, true), "locked as they came");
    assert_eq!(offered, [false, false], "the kit's own buttons stay usable");
    assert_eq!(
        unlocked,
        (false, false, true, false),
        "the one the page disabled stays disabled"
    );
}

#[test]
async fn a_discard_as_soon_as_the_form_is_unsure_is_not_taken_for_another_tab_s_attempt() {
    // Before: the failed attempt's Web Lock, asked for when the key was made and granted after
    // the server's fast refusal, was still this page's when the page discarded in its listener of
    // the change to unsure: Discard said another tab was sending it, and kept it.
    let case = Case::new("discard-at-once");
    let form = case.form("");
    let kit = Rc::new(case.attach(&form, 1));
    fill_ticket(&form, "At once");
    let k = kit.clone();
    let f = form.clone();
    let on_change = Closure::<dyn Fn(web_sys::Event)>::new(move |_| {
        if state(&f) == "unsure" {
            k.discard();
        }
    });
    form.add_event_listener_with_callback("oncekey:change", on_change.as_ref().unchecked_ref())
        .unwrap();
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "idle").await;
    assert_eq!(case.stored(), None, "discarded");
    assert_eq!(case.keys().len(), 1);
    form.remove_event_listener_with_callback("oncekey:change", on_change.as_ref().unchecked_ref())
        .unwrap();
    // The same from a listener of the submitter itself, told of the change while the attempt
    // still holds its lock (before the record is written).
    fill_ticket(&form, "At once again");
    let k = kit.clone();
    let _listener = kit.submitter().on_change(move |update| {
        if update.state == oncekey::State::Unsure {
            k.discard();
        }
    });
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "idle").await;
    form.remove();
    assert_eq!(case.stored(), None, "discarded again");
    assert_eq!(case.keys().len(), 2);
}

#[test]
async fn a_control_that_becomes_the_form_s_when_the_form_takes_another_id_is_locked_too() {
    // Before: the lock watched `form=` attributes and added nodes only: a field outside naming
    // an id the form took while locked could be filled in and sent.
    let case = Case::new("renamed");
    let form = case.form("");
    form.set_id(&case.name);
    let _kit = case.attach(&form, 1);
    fill_ticket(&form, "Renamed");
    let next_id = format!("{}-next", case.name);
    let waiting = document().create_element("input").unwrap();
    waiting.set_attribute("name", "waiting").unwrap();
    waiting.set_attribute("form", &next_id).unwrap();
    document().body().unwrap().append_child(&waiting).unwrap();
    case.plan(&["offline"]);
    form.request_submit().unwrap();
    settled(&form, "unsure").await;
    form.set_id(&next_id);
    JsFuture::from(sleep(0)).await.unwrap();
    let locked = off(&waiting);
    button(&form, "Discard").expect("Discard").click();
    settled(&form, "idle").await;
    let unlocked = !off(&waiting);
    waiting.remove();
    form.remove();
    assert!(locked, "the form's new control is locked");
    assert!(unlocked, "and unlocked with the rest");
}

#[test]
async fn asked_for_the_secrets_a_control_added_is_locked_but_the_secret_fields_and_a_submit_button_are_not(
) {
    // Asking for the secrets a reload lost, the kit opens the secret fields and keeps the
    // submit buttons usable: a control the page adds then is held as the rest are.
    let case = Case::new("added-asking");
    leave_unsure(&case, SECRETS).await;
    let form = case.form(SECRETS);
    let _kit = case.attach(&form, 8);
    assert!(!disabled(&form, "[name=password]"), "asked for");
    let row = document().create_element("div").unwrap();
    row.set_inner_html(r#"<input name="late"><button type="submit" name="more">More</button>"#);
    form.append_child(&row).unwrap();
    JsFuture::from(sleep(0)).await.unwrap();
    let held =
        ["late", "more", "password", "subject"].map(|n| disabled(&form, &format!("[name={n}]")));
    form.remove();
    assert_eq!(held, [true, false, false, true]);
}
