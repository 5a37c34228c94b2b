//! # Locking
//!
//! CONTRACT.md section 4: while the outcome is unknown the form's fields and buttons are locked
//! and `aria-busy="true"` is set. A [`FormLock`] is that lock as a guard: made, it disables every
//! control that was enabled (and only those, so a field the page disabled stays disabled), and
//! every control the page adds while it is held (a script's new row, a late widget), in the form
//! or naming it with `form=`; dropped, it enables them again and removes `aria-busy`.

use ::core::cell::RefCell;

use crate::prelude::*;
use alloc::rc::Rc;
use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Element, Event, HtmlFormElement};

use super::dom::{
    builtin, call, call2, call_str, controls, get, is_tag, put, remove_attr, set_attr,
};
use super::fields::is_submit_button;
use super::view::ACTIONS;

/// A form locked while its submission's outcome is unknown; unlocked when dropped.
#[derive(Debug)]
pub struct FormLock {
    held: Rc<RefCell<Held>>,
    /// A `MutationObserver` of the form's document (or shadow root): controls added to the form
    /// are locked as they come.
    observer: JsValue,
    _on_added: Closure<dyn Fn(Event)>,
}

#[derive(Debug)]
struct Held {
    form: HtmlFormElement,
    /// The controls this lock disabled, to enable again (and only those).
    disabled: Vec<Element>,
    /// Every control it has looked at (a `WeakSet`): one it has not was added since. Asked in
    /// one call per control, not by comparing it with each one seen (quadratic in the form's
    /// controls, for every batch of the page's DOM changes).
    seen: JsValue,
    /// Whether the submit buttons are usable: how it holds the form now.
    submit_enabled: bool,
}

impl FormLock {
    /// Locks `form`: `aria-busy="true"`, and every enabled control disabled.
    pub fn new(form: &HtmlFormElement) -> FormLock {
        FormLock::holding(form, false)
    }

    /// Locks `form` as [`hold`](Self::hold) says.
    pub(crate) fn holding(form: &HtmlFormElement, submit_enabled: bool) -> FormLock {
        let held = Rc::new(RefCell::new(Held {
            form: form.clone(),
            disabled: Vec::new(),
            seen: Reflect::construct(&get(&js_sys::global(), "WeakSet").into(), &Array::new())
                .unwrap_or(JsValue::UNDEFINED),
            submit_enabled,
        }));
        held.borrow_mut().scan(true);
        let h = held.clone();
        let on_added = Closure::<dyn Fn(Event)>::new(move |records: Event| {
            if !adds_control(&records) {
                return;
            }
            if let Ok(mut h) = h.try_borrow_mut() {
                h.scan(false);
            }
        });
        // A control is added to the form by a node put in it, or elsewhere with `form=`, or by
        // that attribute, or by the form taking the `id` a control's `form=` names.
        let made = Reflect::construct(
            &get(&js_sys::global(), "MutationObserver").into(),
            &Array::of1(on_added.as_ref()),
        );
        let observer = made.unwrap_or(JsValue::UNDEFINED);
        let options = Object::new();
        put(&options, "childList", &JsValue::TRUE);
        put(&options, "subtree", &JsValue::TRUE);
        put(
            &options,
            "attributeFilter",
            &Array::of2(&"form".into(), &"id".into()),
        );
        let root = call(form, "getRootNode", &JsValue::UNDEFINED);
        call2(&observer, "observe", &root, &options);
        FormLock {
            held,
            observer,
            _on_added: on_added,
        }
    }

    /// Holds the form with its submit buttons usable (while the person fills the secret fields a
    /// reload lost, to send them) or not.
    /// A change of mode disables every enabled control again but the kit's own buttons, controls
    /// added since included; the same mode again costs nothing, since it is asked for on every
    /// attempt.
    pub(crate) fn hold(&mut self, submit_enabled: bool) {
        if let Ok(mut held) = self.held.try_borrow_mut() {
            if held.submit_enabled != submit_enabled {
                held.submit_enabled = submit_enabled;
                held.scan(true);
            }
        }
    }

    /// Enables `el` again (a field the person must fill while the rest stays locked); a later
    /// [`hold`](Self::hold) disables it again.
    pub(crate) fn release(&self, el: &Element) {
        if let Ok(held) = self.held.try_borrow() {
            if held.disabled.contains(el) {
                set(el, false);
            }
        }
    }
}

impl Held {
    /// Locks the form's controls: every one (`all`), or those it has not looked at yet.
    fn scan(&mut self, all: bool) {
        set_attr(&self.form, "aria-busy", "true");
        let (has, add) = (builtin(&self.seen, "has"), builtin(&self.seen, "add"));
        for el in controls(&self.form) {
            let seen = has.unchecked_ref::<Function>().call1(&self.seen, &el);
            if seen.is_ok_and(|seen| seen.is_truthy()) {
                if !all {
                    continue;
                }
            } else {
                let _ = add.unchecked_ref::<Function>().call1(&self.seen, &el);
            }
            // The kit's own buttons (`view::make_controls`) stay usable. A fieldset's controls
            // are listed on their own; disabling the fieldset would disable all of them whatever
            // their own state, the kit's buttons and a secret field opened for the person
            // included.
            if is_tag(&el, "fieldset") || call_str(&el, "closest", ACTIONS).is_truthy() {
                continue;
            }
            if self.submit_enabled && is_submit_button(&el) {
                if self.disabled.contains(&el) {
                    set(&el, false);
                }
            } else if !get(&el, "disabled").is_truthy() {
                set(&el, true);
                // Listed again only if the page enabled it since: enabled twice at the end,
                // harmless, where looking it up first was quadratic in the form's controls.
                self.disabled.push(el);
            }
        }
    }
}

impl Drop for FormLock {
    fn drop(&mut self) {
        call(&self.observer, "disconnect", &JsValue::UNDEFINED);
        if let Ok(held) = self.held.try_borrow() {
            for el in &held.disabled {
                set(el, false);
            }
            remove_attr(&held.form, "aria-busy");
        }
    }
}

/// Whether a batch of a `MutationObserver`'s records (the callback's argument, an array) may have
/// added a control: a `form` or `id` attribute changed, or an element was put in the document.
/// Text the page (or the kit's own status) writes adds none, and is not worth a look at the form.
fn adds_control(records: &JsValue) -> bool {
    Array::from(records).iter().any(|record| {
        get(&record, "type") != "childList"
            || Array::from(&get(&record, "addedNodes"))
                .iter()
                .any(|node| get(&node, "nodeType") == 1)
    })
}

/// The `disabled` property, which every form control has: the kit writes it alike for inputs,
/// buttons, selects, text areas and fieldsets.
fn set(el: &Element, value: bool) {
    put(el, "disabled", &JsValue::from_bool(value));
}
