//! # The form kit
//!
//! Wires a plain HTML `<form>` to a [`Submitter`], following CONTRACT.md section 4:
//!
//! ```js
//! import init, { attachForm, autoAttach } from 'oncekey'
//! await init()
//! const kit = attachForm(document.querySelector('form'), { headers: { 'X-Tenant': 'acme' } })
//! autoAttach()   // every <form data-oncekey="NAME"> on the page
//! kit.detach()   // undoes everything it did
//! ```
//!
//! While the outcome is unknown (sending, waiting, unsure) the form's controls are disabled,
//! `aria-busy="true"` is set, and its `[role="status"]` element (made if missing) says what is
//! happening, as text. After a reload the stored body is put back into the fields, which stay
//! locked until the submission is definite or discarded, and it is resent with the same key
//! (`resume: "auto"`) or waits for "Try again" (`resume: "manual"`). Secret fields
//! (`type=password`, `autocomplete="cc-..."`, `data-oncekey-secret`) never reach storage: they
//! are merged into each attempt's body in memory, and after a reload the kit unlocks just them,
//! asks for them, and resends with the same key once they are filled.
//!
//! The form carries `data-oncekey-state` (the state) and, once settled,
//! `data-oncekey-outcome`, and dispatches `oncekey:change` events (detail: `state`, `key`,
//! `attempts`, `nextAttemptAt`, `outcome`) so a React or Vue app can follow along.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Element, Event, HtmlElement, HtmlFormElement};

use crate::core::body::{decimal, quoted, Value};
use crate::core::{Outcome, State};

use super::error::{describe, Error};
use super::options;
use super::submitter::{Event as SubmitterEvent, ListenerId, Submitted, Submitter};

/// What the kit adds to a submitter's options.
const KIT_OPTIONS: &[&str] = &["name", "clearOnSuccess", "successMessage", "resume"];

/// A form wired to a submitter; `detach()` undoes it.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct FormKit {
    inner: Rc<RefCell<Kit>>,
}

struct Kit {
    form: HtmlFormElement,
    submitter: Submitter,
    listener: Option<ListenerId>,
    status: HtmlElement,
    status_made: bool,
    controls: Option<Element>,
    /// Controls the kit disabled, to enable again (and only those). A cell of its own so that
    /// locking works with the kit borrowed.
    locked: RefCell<Vec<Element>>,
    clear_on_success: bool,
    success_message: Option<JsValue>,
    /// Secret fields' names, read when the form is attached.
    secret_names: Vec<String>,
    /// Waiting for the person to fill the secret fields again after a reload.
    asking_secrets: bool,
    on_submit: Option<Closure<dyn FnMut(Event)>>,
    on_try: Option<Closure<dyn FnMut(Event)>>,
    on_discard: Option<Closure<dyn FnMut(Event)>>,
}

impl std::fmt::Debug for Kit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit")
            .field("submitter", &self.submitter)
            .field("locked", &self.locked.borrow().len())
            .finish()
    }
}

thread_local! {
    /// Attached forms stay wired until `detach()`, whether or not the page keeps the `FormKit`
    /// it was given: wasm-bindgen frees a Rust object when its JavaScript wrapper is collected.
    static ATTACHED: RefCell<Vec<Rc<RefCell<Kit>>>> = const { RefCell::new(Vec::new()) };
}

fn get(obj: &JsValue, name: &str) -> JsValue {
    Reflect::get(obj, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

fn set(obj: &JsValue, name: &str, value: &JsValue) {
    let _ = Reflect::set(obj, &JsValue::from_str(name), value);
}

/// Wires `form` to a submitter named by `options.name`, its `data-oncekey` attribute or its id.
/// The URL and method default to the form's own `action` and `method` (POST when it has none).
#[wasm_bindgen(js_name = attachForm)]
pub fn attach_form(form: HtmlFormElement, options: JsValue) -> Result<FormKit, JsValue> {
    attach(form, &options).map_err(JsValue::from)
}

/// Wires every `<form data-oncekey="NAME">` on the page, with the same options for each.
#[wasm_bindgen(js_name = autoAttach)]
pub fn auto_attach(options: JsValue) -> Result<Array, JsValue> {
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or_else(|| JsValue::from(Error::option("autoAttach needs a page (window.document)")))?;
    let forms = document.query_selector_all("form[data-oncekey]")?;
    let kits = Array::new();
    for i in 0..forms.length() {
        if let Some(form) = forms
            .get(i)
            .and_then(|n| n.dyn_into::<HtmlFormElement>().ok())
        {
            kits.push(&JsValue::from(
                attach(form, &options).map_err(JsValue::from)?,
            ));
        }
    }
    Ok(kits)
}

fn attach(form: HtmlFormElement, options: &JsValue) -> Result<FormKit, Error> {
    let options = if options.is_undefined() || options.is_null() {
        JsValue::from(Object::new())
    } else if options.is_object() && !options.is_function() {
        options.clone()
    } else {
        return Err(Error::option("form kit options must be an object"));
    };
    // The submitter's options: a copy without the kit's own names, with the form's URL and
    // method where none are given.
    let submitter_options = JsValue::from(Object::assign(&Object::new(), options.unchecked_ref()));
    for name in KIT_OPTIONS {
        let _ = Reflect::delete_property(
            submitter_options.unchecked_ref::<Object>(),
            &JsValue::from_str(name),
        );
    }
    if get(&submitter_options, "url").is_undefined() {
        set(
            &submitter_options,
            "url",
            &JsValue::from_str(&form.action()),
        );
    }
    if get(&submitter_options, "method").is_undefined() {
        let method = form
            .get_attribute("method")
            .unwrap_or_else(|| "POST".into());
        if method.eq_ignore_ascii_case("get") || method.eq_ignore_ascii_case("dialog") {
            return Err(Error::option(
                [
                    "the form's method is ",
                    &quoted(&method),
                    "; oncekey sends a body, so use method=\"post\"",
                ]
                .concat(),
            ));
        }
        set(&submitter_options, "method", &JsValue::from_str(&method));
    }
    // The kit decides when to resend what it found (it may need secrets first).
    set(&submitter_options, "resume", &JsValue::FALSE);

    let name = match get(&options, "name").as_string() {
        Some(n) => n,
        None => form
            .get_attribute("data-oncekey")
            .filter(|n| !n.is_empty())
            .or_else(|| Some(form.id()).filter(|n| !n.is_empty()))
            .ok_or_else(|| {
                Error::option(
                    "options.name is required when the form has no data-oncekey attribute or id",
                )
            })?,
    };
    let resume = match get(&options, "resume").as_string().as_deref() {
        None | Some("auto") => true,
        Some("manual") => false,
        Some(other) => {
            return Err(Error::option(
                "options.resume must be \"auto\" or \"manual\", not ".to_owned() + &quoted(other),
            ))
        }
    };
    let clear_on_success = match get(&options, "clearOnSuccess") {
        v if v.is_undefined() => true,
        v => v
            .as_bool()
            .ok_or_else(|| Error::option("options.clearOnSuccess must be true or false"))?,
    };
    let success_message = match get(&options, "successMessage") {
        v if v.is_undefined() => None,
        v if v.is_string() || v.is_function() => Some(v),
        _ => {
            return Err(Error::option(
                "options.successMessage must be a string such as \"Ticket #{id} created\" or a function",
            ))
        }
    };

    let submitter = Submitter::open(&name, options::from_js(&submitter_options)?)?;
    let document = form
        .owner_document()
        .ok_or_else(|| Error::option("the form is not in a document"))?;
    let (status, status_made) = match form.query_selector("[role=\"status\"]").ok().flatten() {
        Some(el) => (el.unchecked_into::<HtmlElement>(), false),
        None => {
            let el = document
                .create_element("p")
                .map_err(|e| Error::from_js(Error::option, &e))?
                .unchecked_into::<HtmlElement>();
            let _ = el.set_attribute("role", "status");
            let _ = el.set_attribute("class", "oncekey-status");
            let _ = form.append_child(&el);
            (el, true)
        }
    };
    // Focus can be moved to the status so screen readers and keyboard users hear it.
    if !status.has_attribute("tabindex") {
        let _ = status.set_attribute("tabindex", "-1");
    }
    let secret_names = secret_field_names(&form);
    let kit = FormKit {
        inner: Rc::new(RefCell::new(Kit {
            form: form.clone(),
            submitter,
            listener: None,
            status,
            status_made,
            controls: None,
            locked: RefCell::new(Vec::new()),
            clear_on_success,
            success_message,
            secret_names,
            asking_secrets: false,
            on_submit: None,
            on_try: None,
            on_discard: None,
        })),
    };
    kit.wire();
    {
        let k = kit.inner.borrow();
        let _ = k
            .form
            .set_attribute("data-oncekey-state", k.submitter.current_state().as_str());
    }
    kit.take_up_pending(resume);
    ATTACHED.with(|a| a.borrow_mut().push(kit.inner.clone()));
    Ok(kit)
}

#[wasm_bindgen]
impl FormKit {
    /// Undoes everything the kit did: listeners, locks, attributes, the elements it made. A
    /// pending submission stays stored.
    pub fn detach(&self) {
        ATTACHED.with(|a| a.borrow_mut().retain(|k| !Rc::ptr_eq(k, &self.inner)));
        let mut k = self.inner.borrow_mut();
        if let Some(id) = k.listener.take() {
            k.submitter.off(id);
        }
        if let Some(cb) = k.on_submit.take() {
            let _ = k
                .form
                .remove_event_listener_with_callback("submit", cb.as_ref().unchecked_ref());
        }
        k.on_try = None;
        k.on_discard = None;
        if let Some(c) = k.controls.take() {
            c.remove();
        }
        k.unlock();
        for attr in ["data-oncekey-state", "data-oncekey-outcome", "aria-busy"] {
            let _ = k.form.remove_attribute(attr);
        }
        clear_field_errors(&k.form);
        if k.status_made {
            k.status.remove();
        } else {
            k.status.set_text_content(None);
        }
    }

    /// "Try again", as the button does.
    #[wasm_bindgen(js_name = tryAgain)]
    pub fn try_again(&self) {
        self.resend();
    }

    /// "Discard", as the button does.
    pub fn discard(&self) {
        let submitter = self.inner.borrow().submitter.clone();
        submitter.discard();
    }

    /// The submitter behind the form.
    #[wasm_bindgen(getter)]
    pub fn submitter(&self) -> Submitter {
        self.inner.borrow().submitter.clone()
    }
}

impl FormKit {
    fn wire(&self) {
        let weak = Rc::downgrade(&self.inner);
        let on_submit = Closure::<dyn FnMut(Event)>::new(move |event: Event| {
            event.prevent_default();
            if let Some(inner) = weak.upgrade() {
                FormKit { inner }.on_submit();
            }
        });
        let weak = Rc::downgrade(&self.inner);
        let listener = {
            let k = self.inner.borrow();
            let _ = k
                .form
                .add_event_listener_with_callback("submit", on_submit.as_ref().unchecked_ref());
            k.submitter.on_change(move |e: &SubmitterEvent| {
                if let Some(inner) = weak.upgrade() {
                    FormKit { inner }.on_change(e);
                }
            })
        };
        let mut k = self.inner.borrow_mut();
        k.on_submit = Some(on_submit);
        k.listener = Some(listener);
    }

    /// A submission found in storage: fields back, form locked, then resend (or wait).
    fn take_up_pending(&self, resume: bool) {
        let (record, needs_secrets) = {
            let k = self.inner.borrow();
            match k.submitter.pending_record() {
                Some(r) => (r, !k.secret_names.is_empty()),
                None => return,
            }
        };
        {
            let k = self.inner.borrow();
            if let Ok(Value::Object(fields)) = crate::core::body::parse(&record.request.body) {
                restore_fields(&k.form, &fields);
            }
        }
        if needs_secrets {
            self.ask_for_secrets();
        } else if resume {
            self.resend();
        } else {
            self.show_unsure("This request was sent before the page reloaded, and its answer was lost. Try again sends the same request; the server will not do it twice.");
            let detail = Object::new();
            set(&detail, "key", &JsValue::from_str(record.key.as_str()));
            set(&detail, "attempts", &JsValue::from(record.attempts));
            announce(&self.inner.borrow().form, State::Unsure, &detail);
        }
    }

    fn on_submit(&self) {
        let (state, asking) = {
            let k = self.inner.borrow();
            (k.submitter.current_state(), k.asking_secrets)
        };
        if asking {
            let (submitter, secrets) = {
                let mut k = self.inner.borrow_mut();
                k.asking_secrets = false;
                let secrets = read_fields(&k.form, &k.secret_names).map(|(_, s)| s);
                (k.submitter.clone(), secrets)
            };
            match secrets {
                Ok(secrets) => submitter.set_secrets(secrets),
                Err(message) => return self.inner.borrow().say(&message),
            }
            self.resend();
            return;
        }
        match state {
            // The person pressed Enter or the form's button while unsure: that is Try again.
            State::Unsure => self.resend(),
            // Double submit: the attempt under way answers for both.
            State::Sending | State::Waiting => {}
            _ => self.begin(),
        }
    }

    fn begin(&self) {
        let (body, secrets) = {
            let k = self.inner.borrow();
            clear_field_errors(&k.form);
            let _ = k.form.remove_attribute("data-oncekey-outcome");
            match read_fields(&k.form, &k.secret_names) {
                Ok(fields) => fields,
                Err(message) => {
                    k.say(&message);
                    return;
                }
            }
        };
        let submitter = self.inner.borrow().submitter.clone();
        submitter.set_secrets(secrets);
        match submitter.submit(&body) {
            Ok(settling) => self.await_outcome(settling),
            Err(e) => self.inner.borrow().say(e.message()),
        }
    }

    /// Try again: the same key and body (and the secrets held in memory).
    fn resend(&self) {
        let submitter = self.inner.borrow().submitter.clone();
        if let Some(c) = self.inner.borrow_mut().controls.take() {
            c.remove();
        }
        match submitter.try_again() {
            Ok(settling) => self.await_outcome(settling),
            Err(e) => self.inner.borrow().say(e.message()),
        }
    }

    fn await_outcome(&self, settling: super::submitter::Settling) {
        let kit = self.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let result = settling.await;
            kit.settled(result);
        });
    }

    fn on_change(&self, e: &SubmitterEvent) {
        if let Some(w) = &e.warning {
            // Storage degraded to memory, or an unreadable record removed: the form still
            // works, once; the console says why.
            super::js::warn(w);
            return;
        }
        let state = e.change.state;
        let k = self.inner.borrow();
        match state {
            State::Sending => {
                k.lock(false);
                k.say(&if e.change.attempts > 1 {
                    [
                        "Sending again (attempt ",
                        &decimal(e.change.attempts.into()),
                        "), with the same key…",
                    ]
                    .concat()
                } else {
                    "Sending…".to_owned()
                });
            }
            State::Waiting => {
                k.lock(false);
                // Tenths of a second, in integers: float formatting would add kilobytes.
                let tenths = e.change.next_attempt_at.map_or(0, |at| {
                    at.as_millis()
                        .saturating_sub(super::js::now().as_millis())
                        .div_ceil(100)
                });
                k.say(
                    &[
                        "No answer yet. Trying again in ",
                        &decimal(tenths / 10),
                        ".",
                        &decimal(tenths % 10),
                        " s; it will not be counted twice.",
                    ]
                    .concat(),
                );
            }
            // Unsure and the definite outcomes are shown when the submission settles, with its
            // answer; a restored record is shown by take_up_pending.
            _ => return,
        }
        k.tell(state, e);
    }

    fn settled(&self, result: Result<Submitted, Error>) {
        let k = self.inner.borrow();
        let s = match result {
            Ok(s) => s,
            Err(e) if e.is_discarded() => {
                k.unlock();
                k.remove_controls();
                k.say("Discarded. Nothing was confirmed; sending again makes a new request.");
                k.finish(State::Idle, None);
                return;
            }
            Err(e) => {
                k.unlock();
                k.say(e.message());
                k.finish(State::Idle, None);
                return;
            }
        };
        let outcome = s.outcome;
        match outcome {
            Outcome::Succeeded => {
                k.unlock();
                k.remove_controls();
                if k.clear_on_success {
                    k.form.reset();
                }
                k.say(&k.success_text(&s.body));
                k.finish(State::Succeeded, Some(&s));
                focus(&k.status);
            }
            Outcome::Refused => {
                k.unlock();
                k.remove_controls();
                let first_invalid = show_problem(&k.form, &s.body);
                k.say(&("Not accepted: ".to_owned() + &problem_text(&s.body, s.status)));
                k.finish(State::Refused, Some(&s));
                match first_invalid {
                    Some(field) => focus(&field),
                    None => focus(&k.status),
                }
            }
            Outcome::Conflict | Outcome::Misconfigured => {
                k.unlock();
                k.remove_controls();
                let what = if outcome == Outcome::Conflict {
                    "The server holds this request's key for different content. This is a bug in the page; nothing was retried."
                } else {
                    "The server refused the idempotency key: this form is set up wrongly. Nothing was done."
                };
                let problem = problem_text(&s.body, s.status);
                web_sys::console::error_1(&JsValue::from_str(
                    &[
                        "oncekey: ",
                        outcome.as_str(),
                        " for key ",
                        s.key.as_str(),
                        ": ",
                        &problem,
                    ]
                    .concat(),
                ));
                k.say(&[what, " (", &problem, ")"].concat());
                let state = if outcome == Outcome::Conflict {
                    State::Conflict
                } else {
                    State::Misconfigured
                };
                k.finish(state, Some(&s));
                focus(&k.status);
            }
            Outcome::Unsure => {
                drop(k);
                self.show_unsure(
                    "We could not confirm that this was received. Try again sends the same request, and the server will not do it twice; or discard it to write a new one.",
                );
                let k = self.inner.borrow();
                k.finish(State::Unsure, Some(&s));
            }
        }
    }

    /// Locked, with "Try again" and "Discard"; the form's own submit buttons are Try again too.
    /// The caller announces the state, with what it knows of the submission.
    fn show_unsure(&self, message: &str) {
        let kit = self.clone();
        let on_try = Closure::<dyn FnMut(Event)>::new(move |_e: Event| kit.resend());
        let kit = self.clone();
        let on_discard = Closure::<dyn FnMut(Event)>::new(move |_e: Event| kit.discard());
        let mut k = self.inner.borrow_mut();
        k.lock(true);
        k.say(message);
        if k.controls.is_none() {
            if let Some(c) = make_controls(&k.status, &on_try, &on_discard) {
                k.controls = Some(c);
            }
        }
        k.on_try = Some(on_try);
        k.on_discard = Some(on_discard);
    }

    /// After a reload the secrets are gone: unlock just those fields and ask for them.
    fn ask_for_secrets(&self) {
        let mut k = self.inner.borrow_mut();
        k.asking_secrets = true;
        k.lock(true);
        let mut labels = Vec::new();
        for name in k.secret_names.clone() {
            for el in named_controls(&k.form, &name) {
                let _ = Reflect::set(&el, &JsValue::from_str("disabled"), &JsValue::FALSE);
                labels.push(label_of(&el).unwrap_or_else(|| name.clone()));
            }
        }
        labels.dedup();
        // "password", "password and pin", "password, card and pin".
        let listed = match labels.split_last() {
            Some((last, rest)) if !rest.is_empty() => [&rest.join(", "), " and ", last].concat(),
            _ => labels.join(""),
        };
        let one = labels.len() == 1;
        k.say(
            &[
                "This request was interrupted by a reload. For your safety, ",
                &listed,
                if one { " was" } else { " were" },
                " not kept: please enter ",
                if one { "it" } else { "them" },
                " again, then send; it goes out as the same request.",
            ]
            .concat(),
        );
        let detail = Object::new();
        set(&detail, "needsSecrets", &JsValue::TRUE);
        announce(&k.form, State::Unsure, &detail);
        if let Some(first) = k
            .secret_names
            .first()
            .and_then(|n| named_controls(&k.form, n).into_iter().next())
        {
            focus(&first.unchecked_into());
        }
    }
}

impl Kit {
    fn say(&self, text: &str) {
        // Text, never HTML.
        self.status.set_text_content(Some(text));
    }

    /// Disables every enabled control (remembering which), sets `aria-busy`. With
    /// `submit_enabled`, the form's submit buttons stay usable (they mean Try again).
    fn lock(&self, submit_enabled: bool) {
        let _ = self.form.set_attribute("aria-busy", "true");
        let elements = self.form.elements();
        let mut locked = self.locked_mut();
        for i in 0..elements.length() {
            let Some(el) = elements.item(i) else { continue };
            if self
                .controls
                .as_ref()
                .is_some_and(|c| c.contains(Some(&el)))
            {
                continue;
            }
            let is_submit = is_submit_button(&el);
            let disabled = Reflect::get(&el, &JsValue::from_str("disabled"))
                .ok()
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
            if submit_enabled && is_submit {
                if disabled && locked.iter().any(|l| l == &el) {
                    let _ = Reflect::set(&el, &JsValue::from_str("disabled"), &JsValue::FALSE);
                }
                continue;
            }
            if !disabled {
                let _ = Reflect::set(&el, &JsValue::from_str("disabled"), &JsValue::TRUE);
                if !locked.iter().any(|l| l == &el) {
                    locked.push(el);
                }
            }
        }
    }

    fn unlock(&self) {
        for el in self.locked_mut().drain(..) {
            let _ = Reflect::set(&el, &JsValue::from_str("disabled"), &JsValue::FALSE);
        }
        let _ = self.form.remove_attribute("aria-busy");
    }

    fn locked_mut(&self) -> std::cell::RefMut<'_, Vec<Element>> {
        self.locked.borrow_mut()
    }

    fn remove_controls(&self) {
        if let Some(c) = &self.controls {
            c.remove();
        }
    }

    fn success_text(&self, body: &JsValue) -> String {
        match &self.success_message {
            Some(f) if f.is_function() => f
                .unchecked_ref::<Function>()
                .call1(&JsValue::NULL, body)
                .ok()
                .and_then(|v| v.as_string())
                .unwrap_or_else(|| "Sent.".into()),
            Some(t) => fill_template(&t.as_string().unwrap_or_default(), body),
            None => match get(body, "id") {
                id if id.is_undefined() || id.is_null() => "Sent and confirmed.".into(),
                id => ["Created #", &describe(&id), "."].concat(),
            },
        }
    }

    /// Records the settled state on the form and tells listeners.
    fn finish(&self, state: State, s: Option<&Submitted>) {
        let detail = Object::new();
        if let Some(s) = s {
            let _ = self
                .form
                .set_attribute("data-oncekey-outcome", s.outcome.as_str());
            set(&detail, "outcome", &JsValue::from_str(s.outcome.as_str()));
            set(&detail, "key", &JsValue::from_str(s.key.as_str()));
            set(&detail, "attempts", &JsValue::from(s.attempts));
            set(
                &detail,
                "status",
                &s.status.map_or(JsValue::NULL, JsValue::from),
            );
            set(&detail, "replayed", &JsValue::from_bool(s.replayed));
            set(&detail, "body", &s.body);
        }
        announce(&self.form, state, &detail);
    }

    fn tell(&self, state: State, e: &SubmitterEvent) {
        let detail = Object::new();
        if let Some(k) = &e.change.key {
            set(&detail, "key", &JsValue::from_str(k.as_str()));
        }
        set(&detail, "attempts", &JsValue::from(e.change.attempts));
        if let Some(at) = e.change.next_attempt_at {
            set(
                &detail,
                "nextAttemptAt",
                &JsValue::from(at.as_millis() as f64),
            );
        }
        announce(&self.form, state, &detail);
    }
}

/// Marks the form with `state` and tells listeners: an `oncekey:change` event whose detail is
/// `detail` with its `state` set here. One call per change of state.
fn announce(form: &HtmlFormElement, state: State, detail: &Object) {
    let _ = form.set_attribute("data-oncekey-state", state.as_str());
    set(detail, "state", &JsValue::from_str(state.as_str()));
    let init = web_sys::CustomEventInit::new();
    init.set_detail(detail);
    init.set_bubbles(true);
    if let Ok(event) = web_sys::CustomEvent::new_with_event_init_dict("oncekey:change", &init) {
        let _ = form.dispatch_event(&event);
    }
}

fn focus(el: &HtmlElement) {
    let _ = el.focus();
}

fn is_submit_button(el: &Element) -> bool {
    let tag = el.tag_name();
    let kind = el
        .get_attribute("type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    (tag.eq_ignore_ascii_case("button") && (kind.is_empty() || kind == "submit"))
        || (tag.eq_ignore_ascii_case("input") && (kind == "submit" || kind == "image"))
}

fn is_secret(el: &Element) -> bool {
    el.get_attribute("type")
        .is_some_and(|t| t.eq_ignore_ascii_case("password"))
        || el.get_attribute("autocomplete").is_some_and(|a| {
            a.trim()
                .to_ascii_lowercase()
                .split_whitespace()
                .any(|w| w.starts_with("cc-"))
        })
        || el.has_attribute("data-oncekey-secret")
}

fn secret_field_names(form: &HtmlFormElement) -> Vec<String> {
    let elements = form.elements();
    let mut names = Vec::new();
    for i in 0..elements.length() {
        if let Some(el) = elements.item(i) {
            let name = el.get_attribute("name").unwrap_or_default();
            if !name.is_empty() && is_secret(&el) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

fn named_controls(form: &HtmlFormElement, name: &str) -> Vec<HtmlElement> {
    let elements = form.elements();
    (0..elements.length())
        .filter_map(|i| elements.item(i))
        .filter(|el| el.get_attribute("name").as_deref() == Some(name))
        .filter_map(|el| el.dyn_into::<HtmlElement>().ok())
        .collect()
}

fn label_of(el: &HtmlElement) -> Option<String> {
    let labels = Reflect::get(el, &JsValue::from_str("labels")).ok()?;
    let first = Reflect::get(&labels, &JsValue::from_f64(0.0)).ok()?;
    let text = first.dyn_into::<HtmlElement>().ok()?.inner_text();
    let text = text.trim().to_owned();
    // As written: Unicode lowercasing would add its tables to the package.
    (!text.is_empty()).then_some(text)
}

/// The form's fields as JSON text (secrets left out) and the secrets, as the browser would
/// submit them: repeated names become arrays; a chosen file is refused.
fn read_fields(
    form: &HtmlFormElement,
    secret_names: &[String],
) -> Result<(String, Vec<(String, Value)>), String> {
    let data = web_sys::FormData::new_with_form(form).map_err(|e| describe(&e))?;
    let mut fields: BTreeMap<String, Value> = BTreeMap::new();
    let mut secrets: BTreeMap<String, Value> = BTreeMap::new();
    let entries = js_sys::try_iter(&data).ok().flatten();
    for entry in entries.into_iter().flatten() {
        let Ok(entry) = entry else { continue };
        let pair: Array = entry.unchecked_into();
        let name = pair.get(0).as_string().unwrap_or_default();
        let value = pair.get(1);
        let Some(text) = value.as_string() else {
            // A File: only refuse it when one was chosen (an empty file input sends nothing).
            let size = get(&value, "size").as_f64().unwrap_or(0.0);
            if size > 0.0
                || !get(&value, "name")
                    .as_string()
                    .unwrap_or_default()
                    .is_empty()
            {
                return Err([
                    "The field ",
                    &quoted(&name),
                    " holds a file; oncekey cannot send files yet.",
                ]
                .concat());
            }
            continue;
        };
        let target = if secret_names.contains(&name) {
            &mut secrets
        } else {
            &mut fields
        };
        let value = Value::String(text);
        match target.get_mut(&name) {
            None => {
                target.insert(name, value);
            }
            Some(Value::Array(items)) => items.push(value),
            Some(first) => {
                let first = std::mem::replace(first, Value::Null);
                *target.get_mut(&name).expect("present") = Value::Array(vec![first, value]);
            }
        }
    }
    Ok((
        Value::Object(fields).to_canonical(),
        secrets.into_iter().collect(),
    ))
}

/// Puts a stored body back into the fields it came from.
fn restore_fields(form: &HtmlFormElement, fields: &BTreeMap<String, Value>) {
    for (name, value) in fields {
        let values: Vec<String> = match value {
            Value::Array(items) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            v => v.as_str().map(str::to_owned).into_iter().collect(),
        };
        let mut next = values.iter();
        for el in named_controls(form, name) {
            let kind = el
                .get_attribute("type")
                .unwrap_or_default()
                .to_ascii_lowercase();
            if kind == "checkbox" || kind == "radio" {
                let own = Reflect::get(&el, &JsValue::from_str("value"))
                    .ok()
                    .and_then(|v| v.as_string())
                    .unwrap_or_default();
                let _ = Reflect::set(
                    &el,
                    &JsValue::from_str("checked"),
                    &JsValue::from_bool(values.contains(&own)),
                );
            } else if el.tag_name().eq_ignore_ascii_case("select") {
                let options =
                    Reflect::get(&el, &JsValue::from_str("options")).unwrap_or(JsValue::NULL);
                let len = get(&options, "length").as_f64().unwrap_or(0.0) as u32;
                for i in 0..len {
                    let option = Reflect::get(&options, &JsValue::from(i)).unwrap_or(JsValue::NULL);
                    let own = get(&option, "value").as_string().unwrap_or_default();
                    set(
                        &option,
                        "selected",
                        &JsValue::from_bool(values.contains(&own)),
                    );
                }
            } else if kind != "file" && kind != "submit" && kind != "button" && kind != "image" {
                if let Some(v) = next.next() {
                    set(&el, "value", &JsValue::from_str(v));
                }
            }
        }
    }
}

fn clear_field_errors(form: &HtmlFormElement) {
    if let Ok(list) = form.query_selector_all(".oncekey-field-error") {
        for i in 0..list.length() {
            if let Some(n) = list.get(i).and_then(|n| n.dyn_into::<Element>().ok()) {
                n.remove();
            }
        }
    }
    if let Ok(list) = form.query_selector_all("[aria-invalid][data-oncekey-invalid]") {
        for i in 0..list.length() {
            if let Some(el) = list.get(i).and_then(|n| n.dyn_into::<Element>().ok()) {
                let _ = el.remove_attribute("aria-invalid");
                let _ = el.remove_attribute("data-oncekey-invalid");
                let _ = el.remove_attribute("aria-describedby");
            }
        }
    }
}

/// Shows RFC 9457 `invalid-params` (or `errors`) next to the fields they name; returns the
/// first such field.
fn show_problem(form: &HtmlFormElement, body: &JsValue) -> Option<HtmlElement> {
    let mut params = get(body, "invalid-params");
    if !Array::is_array(&params) {
        params = get(body, "errors");
    }
    if !Array::is_array(&params) {
        return None;
    }
    let document = form.owner_document()?;
    let mut first = None;
    for (i, p) in Array::from(&params).iter().enumerate() {
        let name = ["name", "field", "pointer"]
            .iter()
            .find_map(|k| get(&p, k).as_string())
            .map(|n| n.trim_start_matches('/').to_owned())?;
        let reason = ["reason", "message", "detail"]
            .iter()
            .find_map(|k| get(&p, k).as_string())
            .unwrap_or_else(|| "is not accepted".into());
        let Some(field) = named_controls(form, &name).into_iter().next() else {
            continue;
        };
        let id = [
            "oncekey-error-",
            &name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
            "-",
            &decimal(i as u64),
        ]
        .concat();
        let Ok(note) = document.create_element("span") else {
            continue;
        };
        let _ = note.set_attribute("class", "oncekey-field-error");
        let _ = note.set_attribute("id", &id);
        note.set_text_content(Some(&[&name, " ", &reason].concat()));
        let _ = field.after_with_node_1(&note);
        let _ = field.set_attribute("aria-invalid", "true");
        let _ = field.set_attribute("data-oncekey-invalid", "");
        let _ = field.set_attribute("aria-describedby", &id);
        first.get_or_insert(field);
    }
    first
}

/// One line for people from a problem document (or an answer's text).
fn problem_text(body: &JsValue, status: Option<u16>) -> String {
    let title = get(body, "title").as_string();
    let detail = get(body, "detail").as_string();
    match (title, detail, body.as_string()) {
        (Some(t), Some(d), _) if !d.is_empty() => [t, d].join(": "),
        (Some(t), _, _) => t,
        (None, Some(d), _) => d,
        (None, None, Some(text)) if !text.is_empty() && text.len() < 200 => text,
        _ => match status {
            Some(s) => "the server answered ".to_owned() + &decimal(s.into()),
            None => "no answer".into(),
        },
    }
}

/// `"Ticket #{id} created"` with `{name}` replaced by the answer's fields, as text.
fn fill_template(template: &str, body: &JsValue) -> String {
    // split_once rather than indexing: no slicing that could panic (and bring its messages).
    let mut out = String::new();
    let mut rest = template;
    while let Some((before, after)) = rest.split_once('{') {
        out.push_str(before);
        match after.split_once('}') {
            Some((name, after)) => {
                let v = get(body, name);
                if !v.is_undefined() {
                    out.push_str(&describe(&v));
                }
                rest = after;
            }
            None => {
                out.push('{');
                out.push_str(after);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn make_controls(
    status: &HtmlElement,
    on_try: &Closure<dyn FnMut(Event)>,
    on_discard: &Closure<dyn FnMut(Event)>,
) -> Option<Element> {
    let document = status.owner_document()?;
    let box_ = document.create_element("div").ok()?;
    let _ = box_.set_attribute("class", "oncekey-actions actions");
    for (text, class, cb) in [
        ("Try again", "oncekey-try-again", on_try),
        ("Discard", "oncekey-discard secondary", on_discard),
    ] {
        let b = document.create_element("button").ok()?;
        let _ = b.set_attribute("type", "button");
        let _ = b.set_attribute("class", class);
        b.set_text_content(Some(text));
        let _ = b.add_event_listener_with_callback("click", cb.as_ref().unchecked_ref());
        let _ = box_.append_child(&b);
    }
    let _ = status.after_with_node_1(&box_);
    Some(box_)
}
