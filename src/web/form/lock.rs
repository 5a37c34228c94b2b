//! # Locking
//!
//! CONTRACT.md section 4: while the outcome is unknown the form's fields and buttons are locked
//! and `aria-busy="true"` is set. A [`FormLock`] is that lock as a guard: made, it disables every
//! control that was enabled (and only those, so a field the page disabled stays disabled); dropped,
//! it enables them again and removes `aria-busy`.

use crate::prelude::*;
use js_sys::Reflect;
use wasm_bindgen::JsValue;
use web_sys::{Element, HtmlFormElement};

use super::fields::is_submit_button;

/// A form locked while its submission's outcome is unknown; unlocked when dropped.
#[derive(Debug)]
pub struct FormLock {
    form: HtmlFormElement,
    /// The controls this lock disabled, to enable again (and only those).
    disabled: Vec<Element>,
    /// Whether the submit buttons are usable: how it holds the form now.
    submit_enabled: bool,
}

impl FormLock {
    /// Locks `form`: `aria-busy="true"`, and every enabled control disabled.
    pub fn new(form: &HtmlFormElement) -> FormLock {
        FormLock::holding(form, false, None)
    }

    /// Locks `form` as [`hold`](Self::hold) says.
    pub(crate) fn holding(
        form: &HtmlFormElement,
        submit_enabled: bool,
        skip: Option<&Element>,
    ) -> FormLock {
        let mut lock = FormLock {
            form: form.clone(),
            disabled: Vec::new(),
            submit_enabled,
        };
        lock.scan(skip);
        lock
    }

    /// Holds the form with its submit buttons usable (while unsure, they mean "Try again") or not.
    /// A change of mode disables every enabled control again but those inside `skip` (the kit's
    /// own buttons), controls added since included; the same mode again costs nothing, since it
    /// is asked for on every attempt.
    pub(crate) fn hold(&mut self, submit_enabled: bool, skip: Option<&Element>) {
        if self.submit_enabled != submit_enabled {
            self.submit_enabled = submit_enabled;
            self.scan(skip);
        }
    }

    fn scan(&mut self, skip: Option<&Element>) {
        let _ = self.form.set_attribute("aria-busy", "true");
        let disabled = JsValue::from_str("disabled");
        let elements = self.form.elements();
        for i in 0..elements.length() {
            let Some(el) = elements.item(i) else { continue };
            if skip.is_some_and(|s| s.contains(Some(&el))) {
                continue;
            }
            if self.submit_enabled && is_submit_button(&el) {
                if self.disabled.contains(&el) {
                    set(&el, &disabled, false);
                }
            } else if !get(&el, &disabled) {
                set(&el, &disabled, true);
                if !self.disabled.contains(&el) {
                    self.disabled.push(el);
                }
            }
        }
    }

    /// Enables `el` again (a field the person must fill while the rest stays locked); a later
    /// [`hold`](Self::hold) disables it again.
    pub(crate) fn release(&self, el: &Element) {
        if self.disabled.contains(el) {
            set(el, &JsValue::from_str("disabled"), false);
        }
    }
}

impl Drop for FormLock {
    fn drop(&mut self) {
        let disabled = JsValue::from_str("disabled");
        for el in self.disabled.drain(..) {
            set(&el, &disabled, false);
        }
        let _ = self.form.remove_attribute("aria-busy");
    }
}

/// The `disabled` property (`name`), which every form control has: the kit reads and writes it
/// alike for inputs, buttons, selects, text areas and fieldsets.
fn get(el: &Element, name: &JsValue) -> bool {
    Reflect::get(el, name)
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

fn set(el: &Element, name: &JsValue, value: bool) {
    let _ = Reflect::set(el, name, &JsValue::from_bool(value));
}
