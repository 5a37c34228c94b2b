//! # The kit's behaviour
//!
//! One [`Kit`] per attached form: what each submit, change of state and settlement does to the
//! page. Its state is a few cells, each borrowed only for a moment and never across a call out
//! of the kit (events it dispatches, focus, a page's listener, the submitter), so that a page's
//! listener may call the kit again.

use ::core::cell::{Cell, RefCell};
use ::core::future::Future;

use crate::core::body::{concat, decimal, quoted, Value};
use crate::core::{Outcome, State};
use crate::prelude::*;
use alloc::rc::Rc;
use js_sys::{Object, Reflect, JSON};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{CustomEvent, CustomEventInit, Element, Event, HtmlElement, HtmlFormElement};

use super::answer::{
    clear_field_errors, default_success, fill_template, problem_text, show_problem,
};
use super::fields::{label_of, named_controls, read_fields, restore_fields, secret_field_names};
use super::{FormLock, FormOptions, Resume, SuccessMessage};
use crate::web::{Error, ErrorCode, Listener, Settlement, Submitter, Update};

const UNSURE: &str = "We could not confirm that this was received. Try again sends the same request, and the server will not do it twice; or discard it to write a new one.";
const RELOADED: &str = "This request was sent before the page reloaded, and its answer was lost. Try again sends the same request; the server will not do it twice.";
const DISCARDED: &str = "Discarded. Nothing was confirmed; sending again makes a new request.";

/// A form wired to a submitter.
pub(super) struct Kit {
    pub(super) form: HtmlFormElement,
    pub(super) submitter: Submitter,
    status: HtmlElement,
    /// The kit made the status element (and removes it on detach).
    status_made: bool,
    /// The secret fields' names, read when the form is attached.
    secret_names: Vec<String>,
    clear_on_success: bool,
    success: SuccessMessage,
    /// Held while the outcome is unknown.
    lock: RefCell<Option<FormLock>>,
    /// "Try again" and "Discard", while unsure.
    controls: RefCell<Option<Element>>,
    /// Waiting for the person to fill the secret fields again after a reload.
    asking_secrets: Cell<bool>,
    /// Counts submissions begun and discards, so that a late settlement of a discarded one is
    /// ignored.
    round: Cell<u32>,
    /// A submission or a "Try again" of this kit awaits its settlement.
    in_flight: Cell<bool>,
    /// The listeners; `None` once detached. They hold the kit (a cycle that `detach` breaks), so
    /// the kit lives as long as the form is wired, whoever keeps a `FormKit`.
    wiring: RefCell<Option<Wiring>>,
}

struct Wiring {
    on_submit: Closure<dyn FnMut(Event)>,
    on_try: Closure<dyn FnMut(Event)>,
    on_discard: Closure<dyn FnMut(Event)>,
    _listener: Listener,
}

impl Kit {
    pub(super) fn attach(form: &HtmlFormElement, o: FormOptions) -> Result<Rc<Kit>, Error> {
        let mut options = o.submitter;
        if options.url.is_empty() {
            options.url = form.action();
        }
        options.method = match o.method {
            Some(method) => method,
            None => {
                let method = form
                    .get_attribute("method")
                    .unwrap_or_else(|| "POST".into());
                if method.eq_ignore_ascii_case("get") || method.eq_ignore_ascii_case("dialog") {
                    return Err(Error::option(concat(&[
                        "the form's method is ",
                        &quoted(&method),
                        "; oncekey sends a body, so use method=\"post\"",
                    ])));
                }
                method
            }
        };
        // The kit decides when to resend what it found: it may need secrets first.
        options.resume = false;
        let name = match o.name {
            Some(name) => name,
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
        let submitter = Submitter::new(&name, options)?;
        let (status, status_made) = status_of(form)?;
        let kit = Rc::new(Kit {
            form: form.clone(),
            submitter,
            status,
            status_made,
            secret_names: secret_field_names(form),
            clear_on_success: o.clear_on_success,
            success: o.success_message,
            lock: RefCell::new(None),
            controls: RefCell::new(None),
            asking_secrets: Cell::new(false),
            round: Cell::new(0),
            in_flight: Cell::new(false),
            wiring: RefCell::new(None),
        });
        Kit::wire(&kit);
        let _ = form.set_attribute("data-oncekey-state", kit.submitter.state().as_str());
        Kit::take_up_pending(&kit, o.resume);
        Ok(kit)
    }

    fn wire(kit: &Rc<Kit>) {
        let k = kit.clone();
        let on_submit = Closure::<dyn FnMut(Event)>::new(move |event: Event| {
            event.prevent_default();
            Kit::on_submit(&k);
        });
        let k = kit.clone();
        let on_try = Closure::<dyn FnMut(Event)>::new(move |_: Event| Kit::resend(&k));
        let k = kit.clone();
        let on_discard = Closure::<dyn FnMut(Event)>::new(move |_: Event| k.discard());
        let k = kit.clone();
        let listener = kit
            .submitter
            .on_change(move |update: &Update| Kit::on_change(&k, update));
        let _ = kit
            .form
            .add_event_listener_with_callback("submit", on_submit.as_ref().unchecked_ref());
        *kit.wiring.borrow_mut() = Some(Wiring {
            on_submit,
            on_try,
            on_discard,
            _listener: listener,
        });
    }

    pub(super) fn detach(&self) {
        let Some(wiring) = self.wiring.borrow_mut().take() else {
            return;
        };
        let _ = self.form.remove_event_listener_with_callback(
            "submit",
            wiring.on_submit.as_ref().unchecked_ref(),
        );
        // A settlement still to come finds the kit gone.
        self.round.set(self.round.get().wrapping_add(1));
        self.in_flight.set(false);
        self.asking_secrets.set(false);
        self.remove_controls();
        self.unlock();
        for attr in ["data-oncekey-state", "data-oncekey-outcome", "aria-busy"] {
            let _ = self.form.remove_attribute(attr);
        }
        clear_field_errors(&self.form);
        if self.status_made {
            self.status.remove();
        } else {
            self.status.set_text_content(None);
        }
        drop(wiring);
    }

    /// A submission found in storage: fields back, form locked, then resend (or wait).
    fn take_up_pending(kit: &Rc<Kit>, resume: Resume) {
        let Some(pending) = kit.submitter.pending() else {
            return;
        };
        if let Value::Object(fields) = pending.body() {
            restore_fields(&kit.form, fields);
        }
        if !kit.secret_names.is_empty() {
            kit.ask_for_secrets();
        } else if resume == Resume::Auto {
            Kit::resend(kit);
        } else {
            kit.show_unsure(RELOADED);
            let detail = Object::new();
            set(&detail, "key", &pending.key().as_str().into());
            set(&detail, "attempts", &pending.attempts().into());
            kit.announce(State::Unsure, &detail);
        }
    }

    fn on_submit(kit: &Rc<Kit>) {
        if kit.asking_secrets.replace(false) {
            match read_fields(&kit.form, &kit.secret_names) {
                Ok(read) => {
                    if let Err(e) = kit.submitter.set_secrets(read.secrets) {
                        return kit.say(e.message());
                    }
                }
                Err(message) => return kit.say(&message),
            }
            return Kit::resend(kit);
        }
        match kit.submitter.state() {
            // The person pressed Enter or the form's button while unsure: that is Try again.
            State::Unsure => Kit::resend(kit),
            // Double submit: the attempt under way answers for both.
            State::Sending | State::Waiting => {}
            _ => Kit::begin(kit),
        }
    }

    fn begin(kit: &Rc<Kit>) {
        if kit.in_flight.get() {
            return;
        }
        clear_field_errors(&kit.form);
        let _ = kit.form.remove_attribute("data-oncekey-outcome");
        // Read before locking: disabled fields are not submitted.
        let read = match read_fields(&kit.form, &kit.secret_names) {
            Ok(read) => read,
            Err(message) => return kit.say(&message),
        };
        if let Err(e) = kit.submitter.set_secrets(read.secrets) {
            return kit.say(e.message());
        }
        // Locked in the submit's own task, before the driver's first step.
        kit.hold(false);
        let submitter = kit.submitter.clone();
        Kit::settle_later(kit, async move {
            submitter.submit(Value::Object(read.body)).await
        });
    }

    /// Try again: the same key and body (and the secrets held in memory).
    pub(super) fn resend(kit: &Rc<Kit>) {
        if kit.in_flight.get() || kit.wiring.borrow().is_none() {
            return;
        }
        kit.remove_controls();
        kit.hold(false);
        let submitter = kit.submitter.clone();
        Kit::settle_later(kit, async move { submitter.try_again().await });
    }

    pub(super) fn discard(&self) {
        self.submitter.discard();
        // Shown now, whether or not an attempt was under way.
        self.discarded();
    }

    fn settle_later(
        kit: &Rc<Kit>,
        work: impl Future<Output = Result<Settlement, Error>> + 'static,
    ) {
        let round = kit.round.get().wrapping_add(1);
        kit.round.set(round);
        kit.in_flight.set(true);
        let kit = kit.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let result = work.await;
            // Discarded or detached meanwhile: that was shown already.
            if kit.round.get() != round {
                return;
            }
            kit.in_flight.set(false);
            match result {
                Ok(settlement) => kit.settled(&settlement),
                Err(e) if e.code() == ErrorCode::Discarded => kit.discarded(),
                Err(e) => {
                    // Refused at once (nothing was sent): the form is the person's again,
                    // unless another submission is pending.
                    if !kit.submitter.state().is_pending() {
                        kit.unlock();
                    }
                    kit.say(e.message());
                }
            }
        });
    }

    fn on_change(kit: &Rc<Kit>, update: &Update) {
        // Storage degraded to memory, or an unreadable record removed: the form still works,
        // once; the submitter has said why on the console.
        if update.warning.is_some() {
            return;
        }
        let state = update.state;
        match state {
            State::Sending => {
                kit.hold(false);
                if update.attempts > 1 {
                    kit.say(&concat(&[
                        "Sending again (attempt ",
                        &decimal(update.attempts.into()),
                        "), with the same key…",
                    ]));
                } else {
                    kit.say("Sending…");
                }
            }
            State::Waiting => {
                kit.hold(false);
                // Tenths of a second, in integers: float formatting would cost the package.
                let now = js_sys::Date::now() as u64;
                let tenths = update
                    .next_attempt_at
                    .map_or(0, |at| at.as_millis().saturating_sub(now).div_ceil(100));
                kit.say(&concat(&[
                    "No answer yet. Trying again in ",
                    &decimal(tenths / 10),
                    ".",
                    &decimal(tenths % 10),
                    " s; it will not be counted twice.",
                ]));
            }
            // Discarded through the submitter itself, with nothing of the kit's awaiting it.
            State::Idle if !kit.in_flight.get() => return kit.discarded(),
            // Unsure and the outcomes are shown when the submission settles, with its answer;
            // a restored record by take_up_pending.
            _ => return,
        }
        let detail = Object::new();
        if let Some(key) = &update.key {
            set(&detail, "key", &key.as_str().into());
        }
        set(&detail, "attempts", &update.attempts.into());
        if let Some(at) = update.next_attempt_at {
            set(&detail, "nextAttemptAt", &(at.as_millis() as f64).into());
        }
        kit.announce(state, &detail);
    }

    fn settled(&self, s: &Settlement) {
        self.asking_secrets.set(false);
        let outcome = s.outcome();
        if outcome == Outcome::Unsure {
            self.show_unsure(UNSURE);
            return self.finish(State::Unsure, s);
        }
        self.unlock();
        self.remove_controls();
        let problem = problem_text(s);
        match outcome {
            Outcome::Succeeded => {
                if self.clear_on_success {
                    self.form.reset();
                }
                self.say(&self.success_text(s));
                self.finish(State::Succeeded, s);
                focus(&self.status);
            }
            Outcome::Refused => {
                let first_invalid = show_problem(&self.form, s);
                self.say(&concat(&["Not accepted: ", &problem]));
                self.finish(State::Refused, s);
                match first_invalid {
                    Some(field) => focus(&field),
                    None => focus(&self.status),
                }
            }
            Outcome::Conflict | Outcome::Misconfigured => {
                let (state, what) = if outcome == Outcome::Conflict {
                    (State::Conflict, "The server holds this request's key for different content. This is a bug in the page; nothing was retried.")
                } else {
                    (State::Misconfigured, "The server refused the idempotency key: this form is set up wrongly. Nothing was done.")
                };
                web_sys::console::error_1(&JsValue::from_str(&concat(&[
                    "oncekey: ",
                    outcome.as_str(),
                    " for key ",
                    s.key().as_str(),
                    ": ",
                    &problem,
                ])));
                self.say(&concat(&[what, " (", &problem, ")"]));
                self.finish(state, s);
                focus(&self.status);
            }
            Outcome::Unsure => {}
        }
    }

    /// The unconfirmed submission was dropped: the form is the person's again. Once: nothing
    /// happens when nothing was held.
    fn discarded(&self) {
        let lock = self.lock.borrow_mut().take();
        let asking = self.asking_secrets.replace(false);
        if lock.is_none() && self.controls.borrow().is_none() && !asking {
            return;
        }
        self.round.set(self.round.get().wrapping_add(1));
        self.in_flight.set(false);
        drop(lock);
        self.remove_controls();
        self.say(DISCARDED);
        self.announce(State::Idle, &Object::new());
    }

    /// Locked, with "Try again" and "Discard"; the form's own submit buttons are Try again too.
    /// The caller announces the state, with what it knows of the submission.
    fn show_unsure(&self, message: &str) {
        self.hold(true);
        self.say(message);
        if self.controls.borrow().is_some() {
            return;
        }
        let made = {
            let wiring = self.wiring.borrow();
            let Some(w) = wiring.as_ref() else { return };
            make_controls(&self.status, &w.on_try, &w.on_discard)
        };
        *self.controls.borrow_mut() = made;
    }

    /// After a reload the secrets are gone: unlock just those fields and ask for them.
    fn ask_for_secrets(&self) {
        self.asking_secrets.set(true);
        self.hold(true);
        let mut labels: Vec<String> = Vec::new();
        let mut first = None;
        for name in &self.secret_names {
            for el in named_controls(&self.form, name) {
                if let Some(lock) = self.lock.borrow().as_ref() {
                    lock.release(&el);
                }
                let label = label_of(&el).unwrap_or_else(|| name.clone());
                if labels.last() != Some(&label) {
                    labels.push(label);
                }
                first.get_or_insert(el);
            }
        }
        // "password", "password and pin", "password, card and pin".
        let one = labels.len() == 1;
        let listed = match labels.split_last() {
            Some((last, rest)) if !rest.is_empty() => concat(&[&rest.join(", "), " and ", last]),
            _ => labels.concat(),
        };
        self.say(&concat(&[
            "This request was interrupted by a reload. For your safety, ",
            &listed,
            if one { " was" } else { " were" },
            " not kept: please enter ",
            if one { "it" } else { "them" },
            " again, then send; it goes out as the same request.",
        ]));
        let detail = Object::new();
        set(&detail, "needsSecrets", &JsValue::TRUE);
        self.announce(State::Unsure, &detail);
        if let Some(el) = first {
            focus(&el);
        }
    }

    /// Locks the form (or locks what was added since), skipping the kit's own buttons.
    fn hold(&self, submit_enabled: bool) {
        let controls = self.controls.borrow().clone();
        let mut lock = self.lock.borrow_mut();
        match lock.as_mut() {
            Some(lock) => lock.hold(submit_enabled, controls.as_ref()),
            None => {
                *lock = Some(FormLock::holding(
                    &self.form,
                    submit_enabled,
                    controls.as_ref(),
                ))
            }
        }
    }

    fn unlock(&self) {
        let lock = self.lock.borrow_mut().take();
        drop(lock);
    }

    fn remove_controls(&self) {
        if let Some(c) = self.controls.borrow_mut().take() {
            c.remove();
        }
    }

    /// Text, never HTML.
    fn say(&self, text: &str) {
        self.status.set_text_content(Some(text));
    }

    fn success_text(&self, s: &Settlement) -> String {
        match &self.success {
            SuccessMessage::Default => default_success(s),
            SuccessMessage::Template(t) => fill_template(t, s),
            SuccessMessage::With(f) => f(s).unwrap_or_else(|| "Sent.".to_owned()),
        }
    }

    /// Records the settled outcome on the form and tells listeners.
    fn finish(&self, state: State, s: &Settlement) {
        let _ = self
            .form
            .set_attribute("data-oncekey-outcome", s.outcome().as_str());
        let detail = Object::new();
        set(&detail, "outcome", &s.outcome().as_str().into());
        set(&detail, "key", &s.key().as_str().into());
        set(&detail, "attempts", &s.attempts().into());
        set(
            &detail,
            "status",
            &s.status().map_or(JsValue::NULL, JsValue::from),
        );
        set(&detail, "replayed", &s.replayed().into());
        set(&detail, "body", &body_js(s));
        self.announce(state, &detail);
    }

    /// Marks the form with `state` and tells listeners: an `oncekey:change` event whose detail
    /// is `detail` with its `state` set here. One call per change of state.
    fn announce(&self, state: State, detail: &Object) {
        let _ = self
            .form
            .set_attribute("data-oncekey-state", state.as_str());
        set(detail, "state", &state.as_str().into());
        let init = CustomEventInit::new();
        init.set_detail(detail);
        init.set_bubbles(true);
        if let Ok(event) = CustomEvent::new_with_event_init_dict("oncekey:change", &init) {
            let _ = self.form.dispatch_event(&event);
        }
    }
}

/// The answer's body as a page sees it: its JSON, or its text; null when empty.
pub(super) fn body_js(s: &Settlement) -> JsValue {
    match s.body() {
        Some(v) => JSON::parse(&v.to_canonical()).unwrap_or(JsValue::NULL),
        None if s.text().is_empty() => JsValue::NULL,
        None => JsValue::from_str(s.text()),
    }
}

fn set(object: &Object, name: &str, value: &JsValue) {
    let _ = Reflect::set(object, &JsValue::from_str(name), value);
}

fn focus(el: &Element) {
    if let Some(el) = el.dyn_ref::<HtmlElement>() {
        let _ = el.focus();
    }
}

/// The form's `[role="status"]` element, or a `<p role="status">` made at its end; focusable by
/// script, so that screen readers and keyboard users hear it.
fn status_of(form: &HtmlFormElement) -> Result<(HtmlElement, bool), Error> {
    let found = form
        .query_selector("[role=\"status\"]")
        .ok()
        .flatten()
        .and_then(|el| el.dyn_into::<HtmlElement>().ok());
    let (status, made) = match found {
        Some(el) => (el, false),
        None => {
            let document = form
                .owner_document()
                .ok_or_else(|| Error::option("the form is not in a document"))?;
            let el = document
                .create_element("p")
                .ok()
                .and_then(|el| el.dyn_into::<HtmlElement>().ok())
                .ok_or_else(|| Error::option("the form's status element cannot be made"))?;
            let _ = el.set_attribute("role", "status");
            let _ = el.set_attribute("class", "oncekey-status");
            let _ = form.append_with_node_1(&el);
            (el, true)
        }
    };
    if !status.has_attribute("tabindex") {
        let _ = status.set_attribute("tabindex", "-1");
    }
    Ok((status, made))
}

/// "Try again" and "Discard", after the status.
fn make_controls(
    status: &HtmlElement,
    on_try: &Closure<dyn FnMut(Event)>,
    on_discard: &Closure<dyn FnMut(Event)>,
) -> Option<Element> {
    let document = status.owner_document()?;
    let actions = document.create_element("div").ok()?;
    let _ = actions.set_attribute("class", "oncekey-actions actions");
    for (text, class, f) in [
        ("Try again", "oncekey-try-again", on_try),
        ("Discard", "oncekey-discard secondary", on_discard),
    ] {
        let button = document.create_element("button").ok()?;
        let _ = button.set_attribute("type", "button");
        let _ = button.set_attribute("class", class);
        button.set_text_content(Some(text));
        let _ = button.add_event_listener_with_callback("click", f.as_ref().unchecked_ref());
        let _ = actions.append_with_node_1(&button);
    }
    let _ = status.after_with_node_1(&actions);
    Some(actions)
}

/// What a thrown value says (the kit reads `FormData`, which throws only for a form that is
/// not one).
pub(super) fn describe(e: &JsValue) -> String {
    match e.dyn_ref::<js_sys::Error>() {
        Some(e) => e.message().into(),
        None => e
            .as_string()
            .unwrap_or_else(|| "the form's fields cannot be read".to_owned()),
    }
}
