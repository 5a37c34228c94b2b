//! # Protected from the first paint
//!
//! Before the module has loaded, a form marked `data-oncekey` is a plain form, and a submit
//! would post it natively, with no key (CONTRACT.md section 4: it never is). A page protects it
//! with one of two things, and the kit takes each up when it attaches:
//!
//! - the inline snippet in the page's head (README.md, "Protected from the first paint"): it
//!   holds every submit of a `[data-oncekey]` form that has no `data-oncekey-state` yet (the kit
//!   not attached), and marks the form `data-oncekey-held`. The kit sends a held form once it has
//!   attached and looked in IndexedDB (a submission stored there is the one to send, with its
//!   key), with the values in its fields then, as if Send were pressed at that moment.
//! - markup only, for a page whose policy allows no inline script: the form's submit buttons
//!   carry `disabled data-oncekey-wait`, so the form cannot be sent (nor by Enter: its default
//!   button is disabled) and keeps its values; the kit enables them when it attaches, before it
//!   locks the form for anything it finds pending.

use web_sys::HtmlFormElement;

use super::dom::{controls, has_attr, remove_attr};

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

/// Whether the snippet held a submit of `form`; the mark is taken off.
pub(super) fn take_held(form: &HtmlFormElement) -> bool {
    let held = has_attr(form, HELD);
    if held {
        remove_attr(form, HELD);
    }
    held
}
