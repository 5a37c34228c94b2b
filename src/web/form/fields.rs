//! # Fields
//!
//! The form's fields as the browser would submit them (`FormData`: repeated names become
//! arrays), split into the body that is stored and the secrets that never are (CONTRACT.md
//! section 4: `type=password`, `autocomplete` values starting with `cc-`, `data-oncekey-secret`);
//! and a stored body put back into the fields after a reload.

use crate::core::body::{Fields, Value};
use super::messages::{Message, Messages};
use crate::core::text::quoted;
use crate::prelude::*;
use js_sys::{Array, Reflect};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{
    Element, FormData, HtmlElement, HtmlFormElement, HtmlInputElement, HtmlOptionElement,
    HtmlSelectElement, HtmlTextAreaElement,
};

/// An attribute's value in ASCII lower case ("" when absent): attribute values the kit compares
/// (`type`, `autocomplete`) are ASCII keywords.
fn lower(el: &Element, name: &str) -> String {
    el.get_attribute(name)
        .unwrap_or_default()
        .to_ascii_lowercase()
}

/// A button that submits the form: `<button>` (of type submit, the default) or
/// `<input type=submit|image>`.
pub(crate) fn is_submit_button(el: &Element) -> bool {
    let tag = el.tag_name();
    let kind = lower(el, "type");
    (tag.eq_ignore_ascii_case("button") && (kind.is_empty() || kind == "submit"))
        || (tag.eq_ignore_ascii_case("input") && (kind == "submit" || kind == "image"))
}

fn is_secret(el: &Element) -> bool {
    lower(el, "type") == "password"
        || lower(el, "autocomplete")
            .split_ascii_whitespace()
            .any(|w| w.starts_with("cc-"))
        || el.has_attribute("data-oncekey-secret")
}

/// The names of the form's secret fields, in document order, each once.
pub(crate) fn secret_field_names(form: &HtmlFormElement) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let elements = form.elements();
    for i in 0..elements.length() {
        let Some(el) = elements.item(i) else { continue };
        if let Some(name) = el.get_attribute("name").filter(|n| !n.is_empty()) {
            if is_secret(&el) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The form's controls named `name`, in document order.
pub(crate) fn named_controls(form: &HtmlFormElement, name: &str) -> Vec<Element> {
    let elements = form.elements();
    (0..elements.length())
        .filter_map(|i| elements.item(i))
        .filter(|el| el.get_attribute("name").as_deref() == Some(name))
        .collect()
}

/// The text of the control's first `<label>`, trimmed; `None` when it has none (or it is empty).
pub(crate) fn label_of(el: &Element) -> Option<String> {
    let labels = Reflect::get(el, &JsValue::from_str("labels")).ok()?;
    let first = Reflect::get(&labels, &JsValue::from_f64(0.0)).ok()?;
    let text = first.dyn_into::<HtmlElement>().ok()?.inner_text();
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
}

/// Reads the form's fields as the browser would submit them; a message for the person when it
/// cannot be sent (a chosen file).
pub(crate) fn read_fields(
    form: &HtmlFormElement,
    secret_names: &[String],
    m: &Messages,
) -> Result<Read, String> {
    let data = FormData::new_with_form(form).map_err(|e| super::view::describe(&e))?;
    let mut read = Read {
        body: Fields::new(),
        secrets: Fields::new(),
    };
    // Its [name, value] pairs, by Array.from (leaner than the iterator protocol in wasm).
    for entry in Array::from(&data).iter() {
        let pair: Array = entry.unchecked_into();
        let name = pair.get(0).as_string().unwrap_or_default();
        let value = pair.get(1);
        let Some(text) = value.as_string() else {
            // A File: refused only when one was chosen (an empty file input sends nothing).
            let size = Reflect::get(&value, &JsValue::from_str("size"))
                .ok()
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0);
            let file = Reflect::get(&value, &JsValue::from_str("name"))
                .ok()
                .and_then(|v| v.as_string())
                .unwrap_or_default();
            if size > 0.0 || !file.is_empty() {
                return Err(m.fill(Message::FileField, &[("field", &quoted(&name))]));
            }
            continue;
        };
        let target = if secret_names.contains(&name) {
            &mut read.secrets
        } else {
            &mut read.body
        };
        target.append(name, Value::String(text));
    }
    Ok(read)
}

/// Puts a stored body back into the fields it came from: checkboxes and radios checked by value,
/// options selected by value, other fields filled in order.
pub(crate) fn restore_fields(form: &HtmlFormElement, fields: &Fields) {
    for (name, value) in fields.iter() {
        let values: Vec<&str> = match value {
            Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
            v => v.as_str().into_iter().collect(),
        };
        let mut next = values.iter();
        for el in named_controls(form, name) {
            let kind = lower(&el, "type");
            if let Some(select) = el.dyn_ref::<HtmlSelectElement>() {
                let options = select.options();
                for i in 0..options.length() {
                    // A select's options are <option>s.
                    if let Some(option) = options
                        .item(i)
                        .map(JsCast::unchecked_into::<HtmlOptionElement>)
                    {
                        option.set_selected(values.contains(&option.value().as_str()));
                    }
                }
            } else if let Some(input) = el.dyn_ref::<HtmlInputElement>() {
                if kind == "checkbox" || kind == "radio" {
                    input.set_checked(values.contains(&input.value().as_str()));
                } else if !matches!(kind.as_str(), "file" | "submit" | "button" | "image") {
                    if let Some(v) = next.next() {
                        input.set_value(v);
                    }
                }
            } else if let Some(area) = el.dyn_ref::<HtmlTextAreaElement>() {
                if let Some(v) = next.next() {
                    area.set_value(v);
                }
            }
        }
    }
}
