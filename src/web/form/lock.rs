//! # Locking
//!
//! CONTRACT.md section 4: while the outcome is unknown the form's fields and buttons are locked
//! and `aria-busy="true"` is set. A [`FormLock`] is that lock as a guard: made, it disables every
//! control that was enabled (and only those, so a field the page disabled stays disabled); dropped,
//! it enables them again and removes `aria-busy`.

use crate::prelude::*;
use wasm_bindgen::JsValue;
use web_sys::{Element, HtmlFormElement};

use super::dom::{call, controls, get, is_tag, put, remove_attr, set_attr};
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

    /// Holds the form with its submit buttons usable (while the person fills the secret fields a
    /// reload lost, to send them) or not.
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
        set_attr(&self.form, "aria-busy", "true");
        for el in controls(&self.form) {
            // A fieldset's controls are listed on their own; disabling the fieldset would
            // disable all of them whatever their own state, the kit's buttons and a secret field
            // opened for the person included.
            if skip.is_some_and(|s| call(s, "contains", &el).is_truthy()) || is_tag(&el, "fieldset")
            {
                continue;
            }
            if self.submit_enabled && is_submit_button(&el) {
                if self.disabled.contains(&el) {
                    set(&el, false);
                }
            } else if !get(&el, "disabled").is_truthy() {
                set(&el, true);
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
            set(el, false);
        }
    }
}

impl Drop for FormLock {
    fn drop(&mut self) {
        for el in &self.disabled {
            set(el, false);
        }
        remove_attr(&self.form, "aria-busy");
    }
}

/// The `disabled` property, which every form control has: the kit writes it alike for inputs,
/// buttons, selects, text areas and fieldsets.
fn set(el: &Element, value: bool) {
    put(el, "disabled", &JsValue::from_bool(value));
}
