//! # Protected from the first paint
//!
//! Before the module has loaded, a form marked `data-oncekey` is a plain form, and a submit
//! would post it natively, with no key (CONTRACT.md section 4: it never is). A page protects it
//! with one of two things, and the kit takes each up when it attaches:
//!
//! - the inline snippet in the page's head (README.md, "Protected from the first paint"): it
//!   holds every submit of a `[data-oncekey]` form that has no `data-oncekey-state` yet (the kit
//!   not attached), and marks the form `data-oncekey-held`, whose value is the name and value
//!   of the button pressed, as a JSON array (empty when none was). The kit sends a held form
//!   once it has attached and looked in IndexedDB (a submission stored there is the one to send,
//!   with its key), with the values in its fields then, as if that button were pressed at that
//!   moment: the form's submit button of that name and value (never another one, whatever the
//!   page added or removed meanwhile; none when it has none of them any more).
//! - markup only, for a page whose policy allows no inline script: the form's submit buttons
//!   carry `disabled data-oncekey-wait`, so the form cannot be sent (nor by Enter: its default
//!   button is disabled) and keeps its values; the kit enables them when it attaches, before it
//!   locks the form for anything it finds pending.

use wasm_bindgen::JsValue;
use web_sys::{Element, HtmlFormElement};

use super::dom::{attr, controls, has_attr, remove_attr, text};
use super::fields::is_submit_button;
use crate::core::body::Value;

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

/// What the snippet held of a form.
pub(super) enum Held {
    /// The button that was pressed (`undefined` when none was, or the form has no submit button
    /// of that name and value any more).
    Pressed(JsValue),
    /// Buttons of the pressed one's name and value that do different things (an unnamed Send
    /// beside an unnamed Save draft with a formaction of its own): which was pressed is not
    /// known.
    Unknown,
}

/// The submit the snippet held of `form`, if it held one, found again by the pressed button's
/// name and value; `differs` tells a button that would not do what the form's plain submit
/// does. A dialog's buttons are not among them: the snippet holds none of their submits. The
/// mark is taken off.
pub(super) fn take_held(
    form: &HtmlFormElement,
    differs: impl Fn(&Element) -> bool,
) -> Option<Held> {
    let mark = attr(form, HELD)?;
    remove_attr(form, HELD);
    let pressed = match crate::core::body::parse(&mark) {
        Ok(Value::Array(pair)) => match pair.as_slice() {
            [Value::String(name), Value::String(value)] => Some((name.clone(), value.clone())),
            _ => None,
        },
        _ => None,
    };
    let Some((name, value)) = pressed else {
        return Some(Held::Pressed(JsValue::UNDEFINED));
    };
    let mut found = controls(form).into_iter().filter(|el| {
        is_submit_button(el)
            && !closes_dialog(el)
            && text(el, "name").as_deref() == Some(&*name)
            && text(el, "value").as_deref() == Some(&*value)
    });
    let button = found.next();
    if let Some(first) = &button {
        if found.any(|other| differs(first) != differs(&other)) {
            return Some(Held::Unknown);
        }
    }
    Some(Held::Pressed(
        button.map_or(JsValue::UNDEFINED, JsValue::from),
    ))
}

/// Whether `button` has `formmethod="dialog"`: it closes the form's dialog, and submits nothing
/// (a Cancel button).
pub(super) fn closes_dialog(button: &JsValue) -> bool {
    attr(button, "formmethod").is_some_and(|m| m.eq_ignore_ascii_case("dialog"))
}
