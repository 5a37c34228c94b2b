//! # Protected from the first paint
//!
//! Before the module has loaded, a form marked `data-oncekey` is a plain form, and a submit
//! would post it natively, with no key (CONTRACT.md section 4: it never is). A page protects it
//! with one of two things, and the kit takes each up when it attaches:
//!
//! - the inline snippet in the page's head (README.md, "Protected from the first paint"): it
//!   holds every submit of a `[data-oncekey]` form that has no `data-oncekey-state` yet (the kit
//!   not attached), and marks the form `data-oncekey-held`, whose value is the place of the
//!   button pressed among the form's `elements` (empty when none was). The kit sends a held form
//!   once it has attached and looked in IndexedDB (a submission stored there is the one to send,
//!   with its key), with the values in its fields then, as if that button were pressed at that
//!   moment: its name and value go with the fields, as the browser would send them.
//! - markup only, for a page whose policy allows no inline script: the form's submit buttons
//!   carry `disabled data-oncekey-wait`, so the form cannot be sent (nor by Enter: its default
//!   button is disabled) and keeps its values; the kit enables them when it attaches, before it
//!   locks the form for anything it finds pending.

use wasm_bindgen::JsValue;
use web_sys::HtmlFormElement;

use super::dom::{attr, controls, has_attr, remove_attr};
use super::fields::is_submit_button;

/// The snippet's mark on a form whose submit it held.
const HELD: &str = "data-oncekey-held";
/// The mark of a control disabled until the kit is attached.
const WAIT: &str = "data-oncekey-wait";

/// Enables the controls disabled until the kit is attached.
pub(super) fn enable_waiting(form: &HtmlFormElement) {
    for el in controls(form) {
        if has_attr(&el, WAIT) {
            remove_attr(&el, WAIT);
            remove_attr(&el, "disabled");
        }
    }
}

/// Whether the snippet held a submit of `form` (the mark left on).
pub(super) fn is_held(form: &HtmlFormElement) -> bool {
    has_attr(form, HELD)
}

/// The submit the snippet held of `form`, if it held one: the button that was pressed
/// (`undefined` when none was, or the mark names no submit button of the form). The mark is
/// taken off.
pub(super) fn take_held(form: &HtmlFormElement) -> Option<JsValue> {
    let place = attr(form, HELD)?;
    remove_attr(form, HELD);
    let button = place
        .parse::<u32>()
        .ok()
        .and_then(|i| form.elements().item(i))
        .filter(is_submit_button);
    Some(button.map_or(JsValue::UNDEFINED, JsValue::from))
}
