//! # Fields
//!
//! The form's fields as the browser would submit them (`FormData`: repeated names become
//! arrays), split into the body that is stored and the secrets that never are (CONTRACT.md
//! section 4: `type=password`, `autocomplete` values starting with `cc-`, `data-oncekey-secret`);
//! and a stored body put back into the fields after a reload.

use crate::core::body::{Fields, Value};
use crate::prelude::*;
use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{Element, FormData, HtmlFormElement};

use super::dom::{attr, controls, get, has_attr, is_tag, items, put, text};

/// An attribute's value in ASCII lower case ("" when absent): attribute values the kit compares
/// (`type`, `autocomplete`) are ASCII keywords.
fn lower(el: &Element, name: &str) -> String {
    attr(el, name).unwrap_or_default().to_ascii_lowercase()
}

/// A button that submits the form: `<button>` (of type submit, the default) or
/// `<input type=submit|image>`.
pub(crate) fn is_submit_button(el: &Element) -> bool {
    let kind = lower(el, "type");
    (is_tag(el, "button") && (kind.is_empty() || kind == "submit"))
        || (is_tag(el, "input") && (kind == "submit" || kind == "image"))
}

fn is_secret(el: &Element) -> bool {
    lower(el, "type") == "password"
        || lower(el, "autocomplete")
            .split_ascii_whitespace()
            .any(|w| w.starts_with("cc-"))
        || has_attr(el, "data-oncekey-secret")
}

/// The names of the form's secret fields, in document order, each once.
pub(crate) fn secret_field_names(form: &HtmlFormElement) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for el in controls(form) {
        if let Some(name) = attr(&el, "name").filter(|n| !n.is_empty()) {
            if is_secret(&el) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// Empties the form's secret fields (a password typed for another submission is not offered
/// for the one the form shows now).
pub(crate) fn empty_secret_fields(form: &HtmlFormElement) {
    for el in controls(form) {
        if is_secret(&el) {
            put(&el, "value", &JsValue::from_str(""));
        }
    }
}

/// The form's controls named `name`, in document order.
pub(crate) fn named_controls(form: &HtmlFormElement, name: &str) -> Vec<Element> {
    let mut found = controls(form);
    found.retain(|el| attr(el, "name").as_deref() == Some(name));
    found
}

/// The text of the control's first `<label>`, trimmed; `None` when it has none (or it is empty).
pub(crate) fn label_of(el: &Element) -> Option<String> {
    let first = items(&get(el, "labels")).into_iter().next()?;
    let text = text(&first, "innerText")?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// What a submit reads from the form.
#[derive(Debug)]
pub(crate) struct Read {
    /// The fields but the secrets, by name (repeated names are arrays of strings).
    pub body: Fields,
    /// The secret fields, the same way.
    pub secrets: Fields,
    /// A file was chosen: the form goes out as an upload (`multipart/form-data`).
    pub files: bool,
}

/// The form's data as the browser submits it: with the name and value of the button that
/// submitted it (`submitter`, the submit event's), as `new FormData(form, submitter)` has it
/// (web-sys does not bind that constructor); without, when there is none or it is not one of the
/// form's submit buttons.
pub(crate) fn form_data(form: &HtmlFormElement, submitter: &JsValue) -> Result<FormData, JsValue> {
    if submitter.is_object() {
        let args = Array::of2(form, submitter);
        let made = js_sys::Reflect::construct(&get(&js_sys::global(), "FormData").into(), &args);
        if let Ok(data) = made {
            return Ok(data.unchecked_into());
        }
    }
    FormData::new_with_form(form)
}

/// Reads the form's fields as the browser would submit them, the button that submitted it
/// included (the files only noted: an upload reads them itself); a message for the person when
/// the form cannot be read.
pub(crate) fn read_fields(
    form: &HtmlFormElement,
    secret_names: &[String],
    submitter: &JsValue,
) -> Result<Read, String> {
    let data = form_data(form, submitter).map_err(|e| super::view::describe(&e))?;
    let mut read = Read {
        body: Fields::new(),
        secrets: Fields::new(),
        files: false,
    };
    // A secret field the page added after the kit was attached is a secret too: never stored.
    let added = secret_field_names(form);
    // Its [name, value] pairs, by Array.from (leaner than the iterator protocol in wasm).
    for entry in Array::from(&data).iter() {
        let pair: Array = entry.unchecked_into();
        let name = pair.get(0).as_string().unwrap_or_default();
        let value = pair.get(1);
        let Some(text) = value.as_string() else {
            // A File: an upload when one was chosen (an empty file input sends nothing).
            let size = get(&value, "size").as_f64().unwrap_or(0.0);
            let file = text(&value, "name").unwrap_or_default();
            read.files |= size > 0.0 || !file.is_empty();
            continue;
        };
        let target = if secret_names.contains(&name) || added.contains(&name) {
            &mut read.secrets
        } else {
            &mut read.body
        };
        target.append(name, Value::String(text));
    }
    Ok(read)
}

/// How a control adds to its name's values in `FormData`.
#[derive(Clone, Copy, PartialEq)]
enum Sends {
    /// Nothing of its name: a reset or plain button, a file input (its files are not stored),
    /// an image button (it sends `name.x` and `name.y`).
    Nothing,
    /// Its value, whatever it is: a text field or a text area.
    Value,
    /// Its value, which the restore passes over: a hidden field.
    Hidden,
    /// Its value when checked: a checkbox or a radio.
    Check,
    /// Its value when it submitted the form: a submit button.
    Submit,
    /// Its value when chosen: an option of a multiple select.
    Option,
    /// Its chosen options' values: a multiple select (its options are steps of their own).
    Multiple,
    /// Its chosen option's value: a single select.
    Single,
}

impl Sends {
    /// Whether it sent a value whatever it held (a hidden field too, and a single select).
    fn always(self) -> bool {
        matches!(self, Sends::Value | Sends::Hidden | Sends::Single)
    }
}

fn sends(el: &Element) -> Sends {
    if is_tag(el, "select") {
        return if has_attr(el, "multiple") {
            Sends::Multiple
        } else {
            Sends::Single
        };
    }
    if is_tag(el, "option") {
        return Sends::Option;
    }
    if is_tag(el, "textarea") {
        return Sends::Value;
    }
    if !is_tag(el, "input") {
        return if is_submit_button(el) {
            Sends::Submit
        } else {
            Sends::Nothing
        };
    }
    match lower(el, "type").as_str() {
        "checkbox" | "radio" => Sends::Check,
        "submit" => Sends::Submit,
        "hidden" => Sends::Hidden,
        "file" | "button" | "image" | "reset" => Sends::Nothing,
        _ => Sends::Value,
    }
}

/// One step of a name's restore: a control, or an option of a multiple select, with what it
/// sends and its own value, read from the page once: the alignment below asks each step about
/// every value of the name.
struct Step {
    el: Element,
    kind: Sends,
    own: Option<String>,
}

impl Step {
    fn new(el: Element, kind: Sends) -> Step {
        let own = text(&el, "value");
        Step { el, kind, own }
    }

    /// Whether it can send `value`.
    fn can_send(&self, value: &str) -> bool {
        match self.kind {
            Sends::Value | Sends::Hidden => true,
            Sends::Nothing | Sends::Multiple => false,
            Sends::Single => items(&get(&self.el, "options"))
                .iter()
                .any(|option| text(option, "value").as_deref() == Some(value)),
            _ => self.own.as_deref() == Some(value),
        }
    }
}

/// Puts a stored body back into the fields it came from, so that the form sends it again: each
/// name's values are taken in the order `FormData` gave them, by its controls in document order.
/// A checkbox or radio is checked when it takes the next value (its own), a select takes the
/// next values that are its options (one, when single), a submit button takes its own (it
/// submitted the form) and keeps its value, a text field takes the next whatever it is. A
/// value that may be a checkbox's (an option's, a button's) or a later field's is left to the
/// later ones when they can send all that is left with it: checkbox `x` then text field `x`,
/// sent as `["on"]`, were a box unchecked and a field holding "on". A checkbox, radio or multiple
/// select whose name the body does not have was sent unchecked (or with nothing chosen): so it is
/// shown, whatever the page's defaults say. Hidden fields keep what the page gave them now (a
/// fresh CSRF token, say): the stored body is sent as it was anyway.
pub(crate) fn restore_fields(form: &HtmlFormElement, fields: &Fields) {
    // The controls and their names are read once, and each name's controls taken from them in
    // turn: looking a name's up anew at each control was quadratic in calls to the page (a
    // reload of a form of 1,000 fields spent a second in it).
    let all = controls(form);
    let names: Vec<String> = all
        .iter()
        .map(|el| attr(el, "name").unwrap_or_default())
        .collect();
    for (i, name) in names.iter().enumerate() {
        // Each name once, at its first control.
        if name.is_empty() || names[..i].contains(name) {
            continue;
        }
        let named = (i..all.len())
            .filter(|&k| names[k] == *name)
            .map(|k| all[k].clone());
        let sent = fields.get(name);
        let values: Vec<&str> = match sent {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            v => v.and_then(Value::as_str).into_iter().collect(),
        };
        // Its steps: its controls, a multiple select's options in their place; disabled ones
        // too (the kit's lock may hold the form already), but for a name not sent (the page's).
        let mut steps = Vec::new();
        for el in named {
            if sent.is_none() && get(&el, "disabled").is_truthy() {
                continue;
            }
            match sends(&el) {
                Sends::Multiple => steps.extend(
                    items(&get(&el, "options"))
                        .into_iter()
                        .map(|option| Step::new(option, Sends::Option)),
                ),
                kind => steps.push(Step::new(el, kind)),
            }
        }
        // fits[at(k, j)]: steps k and after can send exactly values j and after.
        let (n, m) = (steps.len(), values.len());
        let at = |k: usize, j: usize| k * (m + 1) + j;
        let mut fits = vec![false; at(n + 1, 0)];
        fits[at(n, m)] = true;
        for k in (0..n).rev() {
            let step = &steps[k];
            for j in 0..=m {
                fits[at(k, j)] = (!step.kind.always() && fits[at(k + 1, j)])
                    || (j < m && step.can_send(values[j]) && fits[at(k + 1, j + 1)]);
            }
        }
        let mut j = 0;
        for (k, step) in steps.iter().enumerate() {
            let (el, kind) = (&step.el, step.kind);
            let next = values.get(j).copied().filter(|v| step.can_send(v));
            // A body that does not fit the page's controls (its page has changed): each takes
            // what it can.
            let take = match fits[at(k, j)] {
                true => kind.always() || !fits[at(k + 1, j)],
                false => next.is_some(),
            };
            let next = next.filter(|_| take);
            let taken = JsValue::from_bool(next.is_some());
            j += next.is_some() as usize;
            match (kind, next) {
                (Sends::Value, Some(v)) => put(el, "value", &JsValue::from_str(v)),
                (Sends::Check, _) => put(el, "checked", &taken),
                (Sends::Option, _) => put(el, "selected", &taken),
                (Sends::Single, Some(v)) => {
                    for option in items(&get(el, "options")) {
                        let chosen = text(&option, "value").as_deref() == Some(v);
                        put(&option, "selected", &JsValue::from_bool(chosen));
                    }
                }
                // A submit button keeps its value; a hidden field's, sent in its place among the
                // name's, is passed over (the page's stays): the field after it gets its own.
                _ => {}
            }
        }
    }
}
