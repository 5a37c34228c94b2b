//! # What the person sees
//!
//! How the kit shows each moment on the page: the form locked (or not), the status text, "Try
//! again" and "Discard", the request for the secrets after a reload, `data-oncekey-state` and the
//! `oncekey:change` event. Text goes in as text, never as HTML.

use crate::core::text::concat;
use crate::core::{GiveUp, Outcome, State};
use crate::prelude::*;
use js_sys::{Object, JSON};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{CustomEvent, CustomEventInit, Element, Event, HtmlFormElement};

use super::answer::{
    clear_field_errors, default_success, fill_template, problem_text, show_problem,
};
use super::dom::{call, call2, has_attr, make, put, run, set_attr, set_text};
use super::fields::{label_of, named_controls, restore_fields};
use super::kit::{holds, Kit, DISCARD, SEND_AS_NEW, TRY_AGAIN};
use super::messages::Message;
use super::{FormLock, SuccessMessage};
use crate::web::{Error, Settlement};

impl Kit {
    pub(super) fn settled(&self, s: &Settlement) {
        self.asking_secrets.set(false);
        let outcome = s.outcome();
        if outcome == Outcome::Unsure {
            // The server asked for longer than the cap: Try again before then comes back here.
            let busy = s.gave_up() == Some(GiveUp::RetryAfterBeyondCap);
            self.show_unsure(if busy { Message::Busy } else { Message::Unsure });
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
        // The state, the message with the problem (none: the success's), the field to focus.
        let (state, what, first_invalid) = match outcome {
            Outcome::Succeeded => {
                if self.clear_on_success {
                    // The form's own reset, whatever its controls are named (`dom::builtin`).
                    run(&self.form, "reset");
                }
                (State::Succeeded, None, None)
            }
            Outcome::Refused => {
                self.marked.set(true);
                let first = show_problem(&self.form, s, m);
                (State::Refused, Some(Message::Refused), first)
            }
            Outcome::Conflict => (State::Conflict, Some(Message::Conflict), None),
            _ => (State::Misconfigured, Some(Message::Misconfigured), None),
        };
        // The answer was to another tab's submission: the person's own fields come back.
        let put_back = self.put_back_typed();
        let first_invalid = first_invalid.filter(|_| !put_back);
        let text = match what {
            None => self.success_text(s),
            Some(what) => {
                if state != State::Refused {
                    web_sys::console::error_1(&JsValue::from_str(&concat(&[
                        "oncekey: ",
                        outcome.as_str(),
                        " for key ",
                        s.key().as_str(),
                        ": ",
                        &problem,
                    ])));
                }
                m.fill(what, &[("problem", &problem)])
            }
        };
        self.say(&text);
        self.finish(state, s);
        focus(first_invalid.as_ref().unwrap_or(&self.status));
    }

    /// The unconfirmed submission was dropped: the form is the person's again. Once: nothing
    /// happens when nothing was held.
    pub(super) fn discarded(&self) {
        let lock = self.lock.take();
        let asking = self.asking_secrets.replace(false);
        if lock.is_none() && !holds(&self.controls) && !asking {
            return;
        }
        self.round.set(self.round.get().wrapping_add(1));
        self.in_flight.set(false);
        drop(lock);
        self.remove_controls();
        self.put_back_typed();
        self.say(self.messages.text(Message::Discarded));
        self.announce(State::Idle, &Object::new());
    }

    /// Locked, the form's own submit buttons too (CONTRACT.md section 4: buttons are locked while
    /// the outcome is unknown), with "Try again" and "Discard", the kit's own buttons, which say
    /// what sending it again does. The caller announces the state, with what it knows of the
    /// submission.
    pub(super) fn show_unsure(&self, message: Message) {
        self.hold(false);
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
        if holds(&self.controls) {
            return;
        }
        let Some(wiring) = self.wiring.take() else {
            return;
        };
        let m = &self.messages;
        let first = match expired {
            false => (m.text(Message::TryAgain), TRY_AGAIN),
            true => (m.text(Message::SendAsNew), SEND_AS_NEW),
        };
        let made = make_controls(
            &self.status,
            [first, (m.text(Message::Discard), DISCARD)],
            &wiring.on_event,
        );
        self.wiring.set(Some(wiring));
        self.controls.set(made);
    }

    /// After a reload the secrets are gone: unlock just those fields and ask for them.
    pub(super) fn ask_for_secrets(&self) {
        self.asking_secrets.set(true);
        self.hold(true);
        // A way out for a person who cannot give them again: Discard. Beside it Try again (or
        // Send as a new ticket), which sends with what was filled, as the form's Send does.
        self.offer(self.submitter.state() == State::Expired);
        let mut labels: Vec<String> = Vec::new();
        let mut first = None;
        for name in &self.secret_names {
            let lock = self.lock.take();
            for el in named_controls(&self.form, name) {
                if let Some(lock) = &lock {
                    lock.release(&el);
                }
                let label = label_of(&el).unwrap_or_else(|| name.clone());
                if labels.last() != Some(&label) {
                    labels.push(label);
                }
                first.get_or_insert(el);
            }
            self.lock.set(lock);
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
        put(&detail, "needsSecrets", &JsValue::TRUE);
        self.announce(State::Unsure, &detail);
        if let Some(el) = first {
            focus(&el);
        }
    }

    /// Locks the form, or holds it in another mode, skipping the kit's own buttons.
    pub(super) fn hold(&self, submit_enabled: bool) {
        let lock = match self.lock.take() {
            Some(mut lock) => {
                lock.hold(submit_enabled);
                lock
            }
            None => FormLock::holding(&self.form, submit_enabled),
        };
        self.lock.set(Some(lock));
    }

    pub(super) fn unlock(&self) {
        drop(self.lock.take());
    }

    /// What the person had filled in before another tab's submission took the form's place
    /// (`Kit::typed`), back in the fields once that one is over: a success's reset of the form
    /// and a refusal's notes, which are that submission's, do not stay.
    fn put_back_typed(&self) -> bool {
        let Some(typed) = self.typed.take() else {
            return false;
        };
        clear_field_errors(&self.form);
        restore_fields(&self.form, &typed);
        true
    }

    pub(super) fn remove_controls(&self) {
        if let Some(c) = self.controls.take() {
            run(&c, "remove");
        }
    }

    /// Text, never HTML.
    pub(super) fn say(&self, text: &str) {
        set_text(&self.status, text);
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
        set_attr(&self.form, "data-oncekey-outcome", s.outcome().as_str());
        let detail = Object::new();
        put(&detail, "outcome", &s.outcome().as_str().into());
        put(&detail, "key", &s.key().as_str().into());
        put(&detail, "attempts", &s.attempts().into());
        put(
            &detail,
            "status",
            &s.status().map_or(JsValue::NULL, JsValue::from),
        );
        put(&detail, "replayed", &s.replayed().into());
        put(&detail, "body", &body_js(s));
        self.announce(state, &detail);
    }

    /// Marks the form with `state` and tells listeners: an `oncekey:change` event whose detail
    /// is `detail` with its `state` set here. One call per change of state.
    pub(super) fn announce(&self, state: State, detail: &Object) {
        set_attr(&self.form, "data-oncekey-state", state.as_str());
        put(detail, "state", &state.as_str().into());
        // The init dictionary as a plain object: its setters would cost an import each.
        let init = Object::new();
        put(&init, "detail", detail);
        put(&init, "bubbles", &JsValue::TRUE);
        if let Ok(event) = CustomEvent::new_with_event_init_dict(
            "oncekey:change",
            init.unchecked_ref::<CustomEventInit>(),
        ) {
            call(&self.form, "dispatchEvent", &event);
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

pub(super) fn focus(el: &Element) {
    run(el, "focus");
}

/// The form's `[role="status"]` element, or a `<p role="status">` made at its end; focusable by
/// script, so that screen readers and keyboard users hear it.
pub(super) fn status_of(form: &HtmlFormElement) -> Result<(Element, bool), Error> {
    let found = call(
        form,
        "querySelector",
        &JsValue::from_str("[role=\"status\"]"),
    );
    let (status, made) = match found.is_object() {
        true => (found.unchecked_into::<Element>(), false),
        false => {
            let el = make(form, "p")
                .ok_or_else(|| Error::option("the form's status element cannot be made"))?;
            set_attr(&el, "role", "status");
            set_attr(&el, "class", "oncekey-status");
            call(form, "append", &el);
            (el, true)
        }
    };
    if !has_attr(&status, "tabindex") {
        set_attr(&status, "tabindex", "-1");
    }
    Ok((status, made))
}

/// The class of the element that holds the kit's buttons, named once for the two that use it.
macro_rules! actions_class {
    () => {
        "oncekey-actions"
    };
}
/// The class list of that element (the page's stylesheets may know it as `actions` too).
const ACTIONS_CLASSES: &str = concat!(actions_class!(), " actions");
/// What finds that element: the lock leaves what is in it (the kit's buttons) usable.
pub(super) const ACTIONS: &str = concat!(".", actions_class!());

/// A button of the kit: its label and its class (which says what a click does).
type Button<'a> = (&'a str, &'static str);

/// The kit's buttons ("Try again" and "Discard"), after the status.
pub(super) fn make_controls(
    status: &Element,
    buttons: [Button<'_>; 2],
    on_click: &Closure<dyn Fn(Event)>,
) -> Option<Element> {
    let actions = make(status, "div")?;
    set_attr(&actions, "class", ACTIONS_CLASSES);
    for (text, class) in buttons {
        let button = make(status, "button")?;
        set_attr(&button, "type", "button");
        set_attr(&button, "class", class);
        set_text(&button, text);
        call2(
            &button,
            "addEventListener",
            &JsValue::from_str("click"),
            on_click.as_ref(),
        );
        call(&actions, "append", &button);
    }
    call(status, "after", &actions);
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
