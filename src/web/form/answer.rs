//! # What the answer says, for people
//!
//! A success's message (a template filled from the answer's fields, or the default), a
//! problem's one line (RFC 9457 `title` and `detail`), and `invalid-params` shown next to the
//! fields they name. All of it goes into the page as text, never as HTML.

use crate::core::body::{Fields, Value};
use crate::core::text::{concat, decimal};
use crate::prelude::*;
use wasm_bindgen::JsValue;
use web_sys::{Element, HtmlFormElement};

use super::dom::{
    attr, builtin, call, call_str, controls, has_attr, make, remove_attr, run, select_all,
    set_attr, set_text,
};
use super::fields::named_controls;
use super::messages::{fill_with, Message, Messages};
use super::Settlement;

/// The answer's JSON object, when it is one.
fn object(s: &Settlement) -> Option<&Fields> {
    match s.body() {
        Some(Value::Object(fields)) => Some(fields),
        _ => None,
    }
}

/// A value as people read it: a string as it is, anything else as its JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_canonical(),
    }
}

/// The field `name` of the answer, as text (`None` when it has no such field).
fn field(s: &Settlement, name: &str) -> Option<String> {
    object(s).and_then(|f| f.get(name)).map(text_of)
}

/// The default message of a success: `created` ("Created #12.") when the answer has an id,
/// else `succeeded`.
pub(crate) fn default_success(s: &Settlement, m: &Messages) -> String {
    match object(s).and_then(|f| f.get("id")) {
        None | Some(Value::Null) => m.text(Message::Succeeded).to_owned(),
        Some(_) => fill_template(m.text(Message::Created), s),
    }
}

/// `"Ticket #{id} created"` with `{name}` replaced by the answer's fields (nothing for a field
/// it does not have); an unclosed `{` is kept as written.
pub(crate) fn fill_template(template: &str, s: &Settlement) -> String {
    fill_with(template, &|name| field(s, name))
}

/// One line for people from a problem document (its `title` and `detail`), or from a short
/// answer text.
pub(crate) fn problem_text(s: &Settlement, m: &Messages) -> String {
    let string = |name| match object(s).and_then(|f| f.get(name)) {
        Some(Value::String(t)) => Some(t.as_str()),
        _ => None,
    };
    let text = match s.body() {
        Some(Value::String(t)) => t.as_str(),
        Some(_) => "",
        None => s.text(),
    };
    match (string("title"), string("detail")) {
        (Some(t), Some(d)) if !d.is_empty() => concat(&[t, ": ", d]),
        (Some(t), _) => t.to_owned(),
        (None, Some(d)) => d.to_owned(),
        (None, None) if !text.is_empty() && text.len() < 200 => text.to_owned(),
        _ => match s.status() {
            Some(status) => m.fill(
                Message::ServerAnswered,
                &[("status", &decimal(status.into()))],
            ),
            None => m.text(Message::NoAnswer).to_owned(),
        },
    }
}

thread_local! {
    /// The field notes made so far in this page: each note's id is unique in it.
    static NOTES: ::core::cell::Cell<u32> = const { ::core::cell::Cell::new(0) };
}

/// Removes what [`show_problem`] added: its notes, and its marks on the fields. The fields are
/// the form's controls wherever they are: one outside the form (joined to it by `form=`) has
/// its note after it, outside the form too, named by its `aria-describedby`. Notes left in the
/// form that no field names any more (the page rewrote its description) go as well.
pub(crate) fn clear_field_errors(form: &HtmlFormElement) {
    let document = builtin(form, "ownerDocument");
    for el in controls(form) {
        if !has_attr(&el, "data-oncekey-invalid") {
            continue;
        }
        for id in attr(&el, "aria-describedby")
            .unwrap_or_default()
            .split_ascii_whitespace()
        {
            let note = call_str(&document, "getElementById", id);
            let class = attr(&note, "class").unwrap_or_default();
            if class.split_ascii_whitespace().any(|c| c == NOTE) {
                run(&note, "remove");
            }
        }
        // The page's own description of the field, kept aside in the mark, comes back.
        match attr(&el, "data-oncekey-invalid").filter(|own| !own.is_empty()) {
            Some(own) => set_attr(&el, "aria-describedby", &own),
            None => remove_attr(&el, "aria-describedby"),
        }
        for attr in ["aria-invalid", "data-oncekey-invalid"] {
            remove_attr(&el, attr);
        }
    }
    for note in select_all(form, ".oncekey-field-error") {
        run(&note, "remove");
    }
}

/// The class of a field's note.
const NOTE: &str = "oncekey-field-error";

/// A member of `p` that is a string, the first of `names` found.
fn first_string<'a>(p: &'a Fields, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|n| p.get(n).and_then(Value::as_str))
}

/// Shows RFC 9457 `invalid-params` (or `errors`) next to the fields they name (by `name`,
/// `field` or a JSON `pointer`), with `aria-invalid` and `aria-describedby`; returns the first
/// such field, for the focus.
pub(crate) fn show_problem(
    form: &HtmlFormElement,
    s: &Settlement,
    m: &Messages,
) -> Option<Element> {
    let fields = object(s)?;
    let params = match fields.get("invalid-params") {
        Some(Value::Array(items)) => items,
        _ => match fields.get("errors") {
            Some(Value::Array(items)) => items,
            _ => return None,
        },
    };
    let mut first = None;
    for p in params {
        let Value::Object(p) = p else { continue };
        let Some(name) = first_string(p, &["name", "field", "pointer"]) else {
            continue;
        };
        let name = name.trim_start_matches('/');
        let reason = first_string(p, &["reason", "message", "detail"])
            .unwrap_or_else(|| m.text(Message::FieldReason));
        // The one the person fills: a hidden field of the same name before it (Rails'
        // check_box pattern) can be neither marked for them nor focused. A field that is only
        // hidden still gets its note, but not the focus.
        let named = named_controls(form, name);
        let hidden =
            |el: &Element| attr(el, "type").is_some_and(|t| t.eq_ignore_ascii_case("hidden"));
        let visible = named.iter().find(|el| !hidden(el)).cloned();
        let Some(field) = visible.clone().or_else(|| named.into_iter().next()) else {
            continue;
        };
        let safe: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        // Unique in the page, not only in the form: two forms' notes on one field name would
        // share an id, and the second field be described by the first form's note.
        let n = NOTES.with(|n| n.replace(n.get().wrapping_add(1)));
        let id = concat(&["oncekey-error-", &safe, "-", &decimal(n.into())]);
        let Some(note) = make(form, "span") else {
            continue;
        };
        set_attr(&note, "class", NOTE);
        set_attr(&note, "id", &id);
        set_text(
            &note,
            &m.fill(
                Message::FieldInvalid,
                &[("field", name), ("reason", reason)],
            ),
        );
        call(&field, "after", &JsValue::from(note));
        set_attr(&field, "aria-invalid", "true");
        // The page's own aria-describedby (a hint) stays, the note after it; kept aside in the
        // mark, it is what clearing puts back. Marked twice (two problems for one field): the
        // first mark holds the page's.
        let own = attr(&field, "aria-describedby").unwrap_or_default();
        if !has_attr(&field, "data-oncekey-invalid") {
            set_attr(&field, "data-oncekey-invalid", &own);
        }
        let described = if own.is_empty() {
            id
        } else {
            concat(&[&own, " ", &id])
        };
        set_attr(&field, "aria-describedby", &described);
        if visible.is_some() {
            first.get_or_insert(field);
        }
    }
    first
}
