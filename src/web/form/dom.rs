//! # The page, through one door
//!
//! Every DOM property and method the kit uses, by name, through `Reflect` and `Function.call`:
//! each distinct web-sys method would cost the package an import and its glue, and the kit uses
//! some forty, once or twice each. Reads that fail are `undefined`; calls that throw are
//! `undefined` too (the kit ignores what the DOM refuses, as it did with `let _ =`).
//!
//! Methods are looked up where the DOM defines them, on the object's prototype ([`builtin`]): a
//! form's controls are properties of the form by their names, and hide those of the form.

use crate::prelude::*;
use js_sys::{Array, Function, Reflect};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::Element;

#[wasm_bindgen]
extern "C" {
    /// `Reflect.get(target, key, receiver)`: a getter found on `target` runs on `receiver`.
    #[wasm_bindgen(catch, js_namespace = Reflect, js_name = get)]
    fn get_on(target: &JsValue, key: &JsValue, receiver: &JsValue) -> Result<JsValue, JsValue>;
}

/// `target[name]`, and as a string when it is one (the driver reads the page's objects so too).
pub(super) use crate::web::{get, text};

/// `target[name]` as the DOM defines it: a method, or a getter run on `target`, from its
/// prototype chain. A form's controls are properties of the form by their names, which hide the
/// form's own (the HTML standard's `[LegacyOverrideBuiltIns]`): `<input type=reset name=reset>`
/// makes `form.reset` that input, and a control named `elements` or `querySelectorAll` does the
/// same to those; a document's named forms and images do it to the document. What the
/// prototypes do not have (a plain object's members, a `Location`'s own ones) is read from
/// `target` itself.
pub(super) fn builtin(target: &JsValue, name: &str) -> JsValue {
    let key = JsValue::from_str(name);
    match Reflect::get_prototype_of(target).and_then(|proto| get_on(&proto, &key, target)) {
        Ok(found) if !found.is_undefined() => found,
        _ => get(target, name),
    }
}

/// `target[name] = value`.
pub(super) fn put(target: &JsValue, name: &str, value: &JsValue) {
    let _ = Reflect::set(target, &JsValue::from_str(name), value);
}

/// `target.method(arg)`: a method of at most one argument (`undefined` for none; a variadic
/// one such as `after` gets exactly `arg`).
pub(super) fn call(target: &JsValue, method: &str, arg: &JsValue) -> JsValue {
    builtin(target, method)
        .unchecked_into::<Function>()
        .call1(target, arg)
        .unwrap_or(JsValue::UNDEFINED)
}

/// `target.method(arg)`, with a string.
pub(super) fn call_str(target: &JsValue, method: &str, arg: &str) -> JsValue {
    call(target, method, &JsValue::from_str(arg))
}

/// `target.method(a, b)`.
pub(super) fn call2(target: &JsValue, method: &str, a: &JsValue, b: &JsValue) -> JsValue {
    builtin(target, method)
        .unchecked_into::<Function>()
        .call2(target, a, b)
        .unwrap_or(JsValue::UNDEFINED)
}

/// `el.getAttribute(name)`.
pub(super) fn attr(el: &JsValue, name: &str) -> Option<String> {
    call_str(el, "getAttribute", name).as_string()
}

/// `el.hasAttribute(name)`.
pub(super) fn has_attr(el: &JsValue, name: &str) -> bool {
    call_str(el, "hasAttribute", name).is_truthy()
}

/// `el.setAttribute(name, value)`.
pub(super) fn set_attr(el: &JsValue, name: &str, value: &str) {
    call2(
        el,
        "setAttribute",
        &JsValue::from_str(name),
        &JsValue::from_str(value),
    );
}

/// `el.removeAttribute(name)`.
pub(super) fn remove_attr(el: &JsValue, name: &str) {
    call_str(el, "removeAttribute", name);
}

/// `el.textContent = text`: text, never HTML.
pub(super) fn set_text(el: &JsValue, text: &str) {
    put(el, "textContent", &JsValue::from_str(text));
}

/// `el.method()`: `remove`, `focus`, `reset`, `preventDefault`.
pub(super) fn run(el: &JsValue, method: &str) {
    call(el, method, &JsValue::UNDEFINED);
}

/// A collection's items (`elements`, a `NodeList`, `options`), as elements.
pub(super) fn items(list: &JsValue) -> Vec<Element> {
    if !list.is_object() {
        return Vec::new();
    }
    Array::from(list)
        .iter()
        .map(JsCast::unchecked_into::<Element>)
        .collect()
}

/// The form's controls, in document order, then its image buttons (`<input type=image>`, in
/// the form or naming it with `form=`), which `form.elements` leaves out: they are submit
/// buttons all the same, to lock and unlock.
pub(super) fn controls(form: &JsValue) -> Vec<Element> {
    let mut all = items(&builtin(form, "elements"));
    let document = builtin(form, "ownerDocument");
    let images = select_all(&document, "input[type=image]");
    all.extend(
        images
            .into_iter()
            .filter(|image| get(image, "form") == *form),
    );
    all
}

/// `parent.querySelectorAll(selector)`'s elements.
pub(super) fn select_all(parent: &JsValue, selector: &str) -> Vec<Element> {
    items(&call_str(parent, "querySelectorAll", selector))
}

/// A new element of `el`'s document (`None`: it has none).
pub(super) fn make(el: &JsValue, tag: &str) -> Option<Element> {
    let document = builtin(el, "ownerDocument");
    let made = call_str(&document, "createElement", tag);
    (!made.is_undefined()).then(|| made.unchecked_into())
}

/// Whether `el` is the element `tag` (`tagName`, in any case).
pub(super) fn is_tag(el: &JsValue, tag: &str) -> bool {
    builtin(el, "tagName")
        .as_string()
        .is_some_and(|t| t.eq_ignore_ascii_case(tag))
}
