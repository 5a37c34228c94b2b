//! # What the person sees
//!
//! How the kit shows each moment on the page: the form locked (or not), the status text, "Try
//! again" and "Discard", the request for the secrets after a reload, `data-oncekey-state` and the
//! `oncekey:change` event. Text goes in as text, never as HTML.

use crate::core::text::concat;
use crate::core::{Outcome, State};
use crate::prelude::*;
use js_sys::{Object, Reflect, JSON};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{CustomEvent, CustomEventInit, Element, Event, HtmlElement, HtmlFormElement};

use super::answer::{default_success, fill_template, problem_text, show_problem};
use super::fields::{label_of, named_controls};
use super::kit::Kit;
use super::messages::Message;
use super::{FormLock, SuccessMessage};
use crate::web::{Error, Settlement};

impl Kit {
    pub(super) fn settled(&self, s: &Settlement) {
        self.asking_secrets.set(false);
        let outcome = s.outcome();
        if outcome == Outcome::Unsure {
            self.show_unsure(Message::Unsure);
            return self.finish(State::Unsure, s);
        }
        if outcome == Outcome::Expired {
            self.show_expired();
            return self.finish(State::Expired, s);
        }
        self.unlock();
        self.remove_controls();
        let m = &self.messages;
        let problem = problem_text(s, m);
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
                let first_invalid = show_problem(&self.form, s, m);
                self.say(&m.fill(Message::Refused, &[("problem", &problem)]));
                self.finish(State::Refused, s);
                match first_invalid {
                    Some(field) => focus(&field),
                    None => focus(&self.status),
                }
            }
            Outcome::Conflict | Outcome::Misconfigured => {
                let (state, what) = if outcome == Outcome::Conflict {
                    (State::Conflict, Message::Conflict)
                } else {
                    (State::Misconfigured, Message::Misconfigured)
                };
                web_sys::console::error_1(&JsValue::from_str(&concat(&[
                    "oncekey: ",
                    outcome.as_str(),
                    " for key ",
                    s.key().as_str(),
                    ": ",
                    &problem,
                ])));
                self.say(&m.fill(what, &[("problem", &problem)]));
                self.finish(state, s);
                focus(&self.status);
            }
            Outcome::Unsure | Outcome::Expired => {}
        }
    }

    /// The unconfirmed submission was dropped: the form is the person's again. Once: nothing
    /// happens when nothing was held.
    pub(super) fn discarded(&self) {
        let lock = self.lock.borrow_mut().take();
        let asking = self.asking_secrets.replace(false);
        if lock.is_none() && self.controls.borrow().is_none() && !asking {
            return;
        }
        self.round.set(self.round.get().wrapping_add(1));
        self.in_flight.set(false);
        drop(lock);
        self.remove_controls();
        self.say(self.messages.text(Message::Discarded));
        self.announce(State::Idle, &Object::new());
    }

    /// Locked, with "Try again" and "Discard"; the form's own submit buttons are Try again too.
    /// The caller announces the state, with what it knows of the submission.
    pub(super) fn show_unsure(&self, message: Message) {
        self.hold(true);
        self.say(self.messages.text(message));
        self.offer(false);
    }

    /// Locked, its own buttons too, with "Send as a new ticket" and "Discard": nothing more is
    /// sent with the key, and a new one is the person's deliberate choice.
    pub(super) fn show_expired(&self) {
        self.remove_controls();
        self.hold(false);
        self.say(self.messages.text(Message::Expired));
        self.offer(true);
    }

    /// The kit's buttons after the status: "Try again" (or, expired, "Send as a new ticket") and
    /// "Discard"; kept when they are there already.
    fn offer(&self, expired: bool) {
        if self.controls.borrow().is_some() {
            return;
        }
        let made = {
            let wiring = self.wiring.borrow();
            let Some(w) = wiring.as_ref() else { return };
            let m = &self.messages;
            let first = match expired {
                false => (m.text(Message::TryAgain), "oncekey-try-again", &w.on_try),
                true => (
                    m.text(Message::SendAsNew),
                    "oncekey-send-as-new",
                    &w.on_send_as_new,
                ),
            };
            make_controls(
                &self.status,
                [
                    first,
                    (
                        m.text(Message::Discard),
                        "oncekey-discard secondary",
                        &w.on_discard,
                    ),
                ],
            )
        };
        *self.controls.borrow_mut() = made;
    }

    /// After a reload the secrets are gone: unlock just those fields and ask for them.
    pub(super) fn ask_for_secrets(&self) {
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
        // "password", "password and pin", "password, card and pin" (by hand: slices' join
        // costs the package a kilobyte).
        let m = &self.messages;
        let one = labels.len() == 1;
        let mut listed = String::new();
        for (i, label) in labels.iter().enumerate() {
            if i > 0 {
                listed.push_str(if i + 1 == labels.len() {
                    m.text(Message::And)
                } else {
                    ", "
                });
            }
            listed.push_str(label);
        }
        let message = if one {
            Message::SecretOne
        } else {
            Message::SecretMany
        };
        self.say(&m.fill(message, &[("fields", &listed)]));
        let detail = Object::new();
        set(&detail, "needsSecrets", &JsValue::TRUE);
        self.announce(State::Unsure, &detail);
        if let Some(el) = first {
            focus(&el);
        }
    }

    /// Locks the form (or locks what was added since), skipping the kit's own buttons.
    pub(super) fn hold(&self, submit_enabled: bool) {
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

    pub(super) fn unlock(&self) {
        let lock = self.lock.borrow_mut().take();
        drop(lock);
    }

    pub(super) fn remove_controls(&self) {
        if let Some(c) = self.controls.borrow_mut().take() {
            c.remove();
        }
    }

    /// Text, never HTML.
    pub(super) fn say(&self, text: &str) {
        self.status.set_text_content(Some(text));
    }

    pub(super) fn success_text(&self, s: &Settlement) -> String {
        match &self.success {
            SuccessMessage::Default => default_success(s, &self.messages),
            SuccessMessage::Template(t) => fill_template(t, s),
            SuccessMessage::With(f) => {
                f(s).unwrap_or_else(|| self.messages.text(Message::Sent).to_owned())
            }
        }
    }

    /// Records the settled outcome on the form and tells listeners.
    pub(super) fn finish(&self, state: State, s: &Settlement) {
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
    pub(super) fn announce(&self, state: State, detail: &Object) {
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

pub(super) fn set(object: &Object, name: &str, value: &JsValue) {
    let _ = Reflect::set(object, &JsValue::from_str(name), value);
}

pub(super) fn focus(el: &Element) {
    if let Some(el) = el.dyn_ref::<HtmlElement>() {
        let _ = el.focus();
    }
}

/// The form's `[role="status"]` element, or a `<p role="status">` made at its end; focusable by
/// script, so that screen readers and keyboard users hear it.
pub(super) fn status_of(form: &HtmlFormElement) -> Result<(HtmlElement, bool), Error> {
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
                .map(JsCast::unchecked_into::<HtmlElement>)
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

/// A button of the kit: its label, its class and what a click does.
type Button<'a> = (&'a str, &'a str, &'a Closure<dyn FnMut(Event)>);

/// The kit's buttons ("Try again" and "Discard"), after the status.
pub(super) fn make_controls(status: &HtmlElement, buttons: [Button<'_>; 2]) -> Option<Element> {
    let document = status.owner_document()?;
    let actions = document.create_element("div").ok()?;
    let _ = actions.set_attribute("class", "oncekey-actions actions");
    for (text, class, f) in buttons {
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
