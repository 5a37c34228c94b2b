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
        };
        lock.hold(submit_enabled, skip);
        lock
    }

    /// Disables every enabled control but those inside `skip` (the kit's own buttons), including
    /// controls added since. With `submit_enabled` the form's submit buttons are usable (while
    /// unsure, they mean "Try again"); without, they are disabled too.
    pub(crate) fn hold(&mut self, submit_enabled: bool, skip: Option<&Element>) {
        let _ = self.form.set_attribute("aria-busy", "true");
        let elements = self.form.elements();
        for i in 0..elements.length() {
            let Some(el) = elements.item(i) else { continue };
            if skip.is_some_and(|s| s.contains(Some(&el))) {
                continue;
            }
            let mine = self.disabled.contains(&el);
            if submit_enabled && is_submit_button(&el) {
                if mine {
                    set_disabled(&el, false);
                }
            } else if !is_disabled(&el) {
                set_disabled(&el, true);
                if !mine {
                    self.disabled.push(el);
                }
            }
        }
    }

    /// Enables `el` again (a field the person must fill while the rest stays locked); a later
    /// [`hold`](Self::hold) disables it again.
    pub(crate) fn release(&self, el: &Element) {
        if self.disabled.contains(el) {
            set_disabled(el, false);
        }
    }
}

impl Drop for FormLock {
    fn drop(&mut self) {
        for el in self.disabled.drain(..) {
            set_disabled(&el, false);
        }
        let _ = self.form.remove_attribute("aria-busy");
    }
}

/// The `disabled` property, which every form control has (and the kit reads and writes alike
/// for inputs, buttons, selects, text areas and fieldsets).
fn is_disabled(el: &Element) -> bool {
    Reflect::get(el, &JsValue::from_str("disabled"))
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

fn set_disabled(el: &Element, disabled: bool) {
    let _ = Reflect::set(
        el,
        &JsValue::from_str("disabled"),
        &JsValue::from_bool(disabled),
    );
}
