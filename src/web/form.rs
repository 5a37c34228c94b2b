//! # The form kit
//!
//! Wires a plain HTML `<form>` to a [`Submitter`], following CONTRACT.md section 4:
//!
//! ```js
//! import init, { attachForm, autoAttach } from 'oncekey'
//! await init()
//! const kit = attachForm(document.querySelector('form'), { headers: { 'X-Tenant': 'acme' } })
//! autoAttach()   // every <form data-oncekey="NAME"> on the page
//! kit.detach()   // undoes everything it did
//! ```
//!
//! While the outcome is unknown (sending, waiting, unsure) the form's controls are disabled,
//! `aria-busy="true"` is set, and its `[role="status"]` element (made if missing) says what is
//! happening, as text. After a reload the stored body is put back into the fields, which stay
//! locked until the submission is definite or discarded, and it is resent with the same key
//! (`resume: "auto"`) or waits for "Try again" (`resume: "manual"`). Secret fields
//! (`type=password`, `autocomplete="cc-..."`, `data-oncekey-secret`) never reach storage: they
//! are merged into each attempt's body in memory, and after a reload the kit unlocks just them,
//! asks for them, and resends with the same key once they are filled.
//!
//! The form carries `data-oncekey-state` (the state) and, once settled,
//! `data-oncekey-outcome`, and dispatches `oncekey:change` events (detail: `state`, `key`,
//! `attempts`, `nextAttemptAt`, `outcome`) so a React or Vue app can follow along.
//!
//! The kit's work on the page is JavaScript (`browser.js`, beside this file, shipped in the
//! package's `snippets/`): a client of the public `Submitter` API, with one hook from here to
//! hold the secret fields in memory. JavaScript does that DOM work in a fraction of the bytes
//! that wasm and its bindings need; the rules stay in the core, behind the `Submitter`.

use js_sys::Array;
use wasm_bindgen::prelude::*;
use web_sys::HtmlFormElement;

use crate::core::body::Value;

use super::error::Error;
use super::options;
use super::submitter::Submitter;

#[wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// The kit's page work, as `browser.js`'s `wire` returns it.
    #[derive(Debug, Clone)]
    type Kit;

    /// Checks the kit's options: `{ name, submitter, resume, clear, success }`, where
    /// `submitter` holds the submitter's options.
    #[wasm_bindgen(catch)]
    fn prepare(form: &HtmlFormElement, options: &JsValue) -> Result<JsValue, JsValue>;

    /// Every `<form data-oncekey>` of the page, or `null` where there is no page.
    fn forms() -> JsValue;

    #[wasm_bindgen(catch)]
    fn wire(
        form: &HtmlFormElement,
        submitter: JsValue,
        set_secrets: &JsValue,
        prepared: &JsValue,
    ) -> Result<Kit, JsValue>;

    #[wasm_bindgen(method)]
    fn detach(this: &Kit);

    #[wasm_bindgen(method, js_name = tryAgain)]
    fn try_again(this: &Kit);

    #[wasm_bindgen(method)]
    fn discard(this: &Kit);
}

/// A form wired to a submitter; `detach()` undoes it.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct FormKit {
    kit: Kit,
    submitter: Submitter,
}

/// Wires `form` to a submitter named by `options.name`, its `data-oncekey` attribute or its id.
/// The URL and method default to the form's own `action` and `method` (POST when it has none).
#[wasm_bindgen(js_name = attachForm)]
pub fn attach_form(form: HtmlFormElement, options: JsValue) -> Result<FormKit, JsValue> {
    let prepared = prepare(&form, &options)?;
    let get = |name: &str| js_sys::Reflect::get(&prepared, &name.into()).unwrap_or_default();
    let name = get("name").as_string().unwrap_or_default();
    let submitter = Submitter::open(&name, options::from_js(&get("submitter"))?)?;
    // Secret fields, held in memory by the submitter, never stored: [[name, value or values]].
    let holder = submitter.clone();
    let set_secrets = Closure::<dyn Fn(Array)>::new(move |entries: Array| {
        holder.set_secrets(entries.iter().filter_map(secret).collect());
    })
    .into_js_value();
    // The page keeps the kit alive through the form's listeners, whether or not it keeps this.
    let kit = wire(&form, submitter.clone().into(), &set_secrets, &prepared)?;
    Ok(FormKit { kit, submitter })
}

/// One `[name, value]` pair of secret fields: a value is a string or a list of strings.
fn secret(entry: JsValue) -> Option<(String, Value)> {
    let pair: Array = entry.dyn_into().ok()?;
    let value = pair.get(1);
    let value = match value.as_string() {
        Some(text) => Value::String(text),
        None => Value::Array(
            value
                .dyn_into::<Array>()
                .ok()?
                .iter()
                .filter_map(|v| v.as_string().map(Value::String))
                .collect(),
        ),
    };
    Some((pair.get(0).as_string()?, value))
}

/// Wires every `<form data-oncekey="NAME">` on the page, with the same options for each.
#[wasm_bindgen(js_name = autoAttach)]
pub fn auto_attach(options: JsValue) -> Result<Array, JsValue> {
    let forms: Array = forms()
        .dyn_into()
        .map_err(|_| Error::option("autoAttach needs a page (window.document)"))?;
    let kits = Array::new();
    for form in forms.iter() {
        kits.push(&attach_form(form.unchecked_into(), options.clone())?.into());
    }
    Ok(kits)
}

#[wasm_bindgen]
impl FormKit {
    /// Undoes everything the kit did: listeners, locks, attributes, the elements it made. A
    /// pending submission stays stored.
    pub fn detach(&self) {
        self.kit.detach();
    }

    /// "Try again", as the button does.
    #[wasm_bindgen(js_name = tryAgain)]
    pub fn try_again(&self) {
        self.kit.try_again();
    }

    /// "Discard", as the button does.
    pub fn discard(&self) {
        self.kit.discard();
    }

    /// The submitter behind the form.
    #[wasm_bindgen(getter)]
    pub fn submitter(&self) -> Submitter {
        self.submitter.clone()
    }
}
