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

/// Puts a stored body back into the fields it came from: checkboxes and radios checked by value,
/// options selected by value, other fields filled in order. A checkbox, radio or multiple select
/// whose name the body does not have was sent unchecked (or with nothing chosen): so it is
/// shown, whatever the page's defaults say. Hidden fields keep what the page gave them now (a
/// fresh CSRF token, say): the stored body is sent as it was anyway.
pub(crate) fn restore_fields(form: &HtmlFormElement, fields: &Fields) {
    for el in controls(form) {
        let name = attr(&el, "name").unwrap_or_default();
        if name.is_empty() || fields.get(&name).is_some() || get(&el, "disabled").is_truthy() {
            continue;
        }
        let kind = lower(&el, "type");
        if is_tag(&el, "input") && (kind == "checkbox" || kind == "radio") {
            put(&el, "checked", &JsValue::FALSE);
        } else if is_tag(&el, "select") && has_attr(&el, "multiple") {
            for option in items(&get(&el, "options")) {
                put(&option, "selected", &JsValue::FALSE);
            }
        }
    }
    for (name, value) in fields.iter() {
        let values: Vec<&str> = match value {
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            v => v.as_str().into_iter().collect(),
        };
        let mut next = values.iter();
        for el in named_controls(form, name) {
            let kind = lower(&el, "type");
            if is_tag(&el, "select") {
                for option in items(&get(&el, "options")) {
                    let selected = text(&option, "value").is_some_and(|v| values.contains(&&*v));
                    put(&option, "selected", &JsValue::from_bool(selected));
                }
            } else if is_tag(&el, "input") && (kind == "checkbox" || kind == "radio") {
                let checked = text(&el, "value").is_some_and(|v| values.contains(&&*v));
                put(&el, "checked", &JsValue::from_bool(checked));
            } else if is_tag(&el, "input") && kind == "hidden" {
                // Its value, sent in its place among the name's, is passed over (the page's
                // stays): the field after it gets its own, not this one's.
                next.next();
            } else if (is_tag(&el, "input")
                && !matches!(
                    kind.as_str(),
                    "file" | "submit" | "button" | "image" | "reset"
                ))
                || is_tag(&el, "textarea")
            {
                if let Some(v) = next.next() {
                    put(&el, "value", &JsValue::from_str(v));
                }
            }
        }
    }
}
