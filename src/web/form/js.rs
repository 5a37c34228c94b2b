//! # The kit's JavaScript face
//!
//! `attachForm(form, options)` and `autoAttach(options)`, and the `FormKit` class they return,
//! with their TypeScript declarations. The options object is read here: the kit's own names
//! (`name`, `clearOnSuccess`, `successMessage`, `resume`, `messages`), and the rest read as a submitter's
//! options, with the same errors that name the option.

use crate::core::text::concat;
use crate::prelude::*;
use alloc::rc::Rc;
use js_sys::{Array, Function, Object, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::HtmlFormElement;

use super::dom::{call_str, get, items, put};
use super::kit::{form_url, holds, Faces};
use super::messages::{is_retired, unknown};
use super::view::body_js;
use super::{FormKit, FormOptions, Messages, Resume, SuccessMessage};
use crate::web::{Error, Options};

#[wasm_bindgen(typescript_custom_section)]
const TS_FORM_KIT: &'static str = r#"
/** Options of the form kit: the submitter's, and its own. */
export interface FormKitOptions extends Partial<Omit<SubmitterOptions, "resume">> {
  /** The submission's name; default: the form's `data-oncekey` attribute, or its id. */
  name?: string;
  /** Clear the form after a success; default true. */
  clearOnSuccess?: boolean;
  /** "Ticket #{id} created", with `{field}` from the answer, or a function of the answer. */
  successMessage?: string | ((body: unknown) => string);
  /** After a reload: resend at once ("auto", the default) or wait for "Try again" ("manual"). */
  resume?: "auto" | "manual";
  /** Every text the kit writes, by key (a key it does not know is an error naming it). */
  messages?: FormKitMessages;
}

/**
 * Every text the form kit writes (status texts, button labels, the request for secret fields,
 * the notes next to invalid fields), by key; each replaces the English text shown here.
 * `{name}` placeholders are filled as noted.
 */
export interface FormKitMessages {
  /** Sending… */
  sending?: string;
  /** Sending again (attempt {attempt}), with the same key… — {attempt}: the attempt's number. */
  sendingAgain?: string;
  /** No answer yet. Trying again in {seconds} s; it will not be counted twice. — {seconds}: until the next attempt, to a tenth. */
  waiting?: string;
  /** You are offline. This request will be sent when the connection is back, as the same request; the form stays locked until then. */
  offline?: string;
  /** We could not confirm that this was received. Try again sends the same request, and the server will not do it twice; or discard it to write a new one. */
  unsure?: string;
  /** The server asked us to wait before this is sent again. Try again in a little while: it sends the same request, and the server will not do it twice; or discard it to write a new one. */
  busy?: string;
  /** This request was sent before the page reloaded, and its answer was lost. Try again sends the same request; the server will not do it twice. */
  reloaded?: string;
  /** We could not confirm that this ticket arrived, and it is now too old to be sent again safely: it may or may not have arrived. Please check whether it did before you send it again. Send as a new ticket sends it again as a new one; Discard drops it. */
  expired?: string;
  /** Discarded. Nothing was confirmed; sending again makes a new request. */
  discarded?: string;
  /** This request is being sent from another tab right now, so it was not discarded. Try again shows its answer once it comes; the server will not do it twice. */
  sentElsewhere?: string;
  /** Sent and confirmed. */
  succeeded?: string;
  /** Created #{id}. — {id}, or any field of the answer. */
  created?: string;
  /** Sent. */
  sent?: string;
  /** Not accepted: {problem} — {problem}: the server's problem details in one line. */
  refused?: string;
  /** The server holds this request's key for different content. This is a bug in the page; nothing was retried. ({problem}) */
  conflict?: string;
  /** The server refused the idempotency key: this form is set up wrongly. Nothing was done. ({problem}) */
  misconfigured?: string;
  /** no answer */
  noAnswer?: string;
  /** the server answered {status} — {status}: the HTTP status. */
  serverAnswered?: string;
  /** This request was interrupted by a reload. For your safety, {fields} was not kept: please enter it again, then send; it goes out as the same request. — {fields}: the secret fields' labels, joined with ", " and `and`. */
  secretOne?: string;
  /** This request was interrupted by a reload. For your safety, {fields} were not kept: please enter them again, then send; it goes out as the same request. */
  secretMany?: string;
  /**  and  */
  and?: string;
  /** {field} {reason} — {field}: the field's name; {reason}: the server's reason, or `fieldReason`. */
  fieldInvalid?: string;
  /** is not accepted */
  fieldReason?: string;
  /** @deprecated Not used: the kit sends files. Accepted so that translation tables written for earlier versions still load. */
  fileField?: string;
  /** Try again */
  tryAgain?: string;
  /** Discard */
  discard?: string;
  /** Send as a new ticket */
  sendAsNew?: string;
}
"#;

#[wasm_bindgen]
extern "C" {
    /// The options object, as TypeScript names it.
    #[wasm_bindgen(typescript_type = "FormKitOptions")]
    pub type FormKitOptions;
}

/// What the kit adds to a submitter's options, in the order `read_kit_option` reads them.
const KIT_OPTIONS: [&str; 5] = [
    "name",
    "clearOnSuccess",
    "successMessage",
    "resume",
    "messages",
];

/// Wires `form` to a submitter: locks it while the outcome is unknown, restores it after a
/// reload, says what is happening, offers "Try again". URL and method default to the form's.
/// A form has one kit at a time: attaching a second throws (`state`) until the first is detached.
#[wasm_bindgen(js_name = attachForm, unchecked_return_type = "FormKit")]
pub fn attach_form(
    #[wasm_bindgen(unchecked_param_type = "HTMLFormElement")] form: JsValue,
    options: Option<FormKitOptions>,
) -> Result<JsValue, Error> {
    // By its tag, not `instanceof`: a form of another frame is a form too.
    if !super::dom::is_tag(&form, "form") {
        return Err(Error::option("attachForm needs a <form> element"));
    }
    let form: HtmlFormElement = form.unchecked_into();
    let options = options.map_or(JsValue::UNDEFINED, JsValue::from);
    Ok(FormKit::attach(&form, read_options(&form, &options)?)?.face())
}

/// `attachForm` for every `<form data-oncekey="NAME">` on the page that has no kit yet, with the
/// same options.
#[wasm_bindgen(js_name = autoAttach, unchecked_return_type = "FormKit[]")]
pub fn auto_attach(options: Option<FormKitOptions>) -> Result<Array, Error> {
    let document = get(&js_sys::global(), "document");
    if !document.is_object() {
        return Err(Error::option("autoAttach needs a page (window.document)"));
    }
    // Not a form attached already (by attachForm, or an earlier autoAttach).
    let forms = call_str(
        &document,
        "querySelectorAll",
        "form[data-oncekey]:not([data-oncekey-state])",
    );
    if !forms.is_object() {
        return Err(Error::option("autoAttach cannot search the page"));
    }
    let options = options.map_or(JsValue::UNDEFINED, JsValue::from);
    // An array of the kits as they are made (a Vec of exported structs costs the package 2 KB of
    // conversion code).
    let kits = Array::new();
    for form in items(&forms) {
        // The selector only matches forms.
        let form: HtmlFormElement = form.unchecked_into();
        kits.push(&FormKit::attach(&form, read_options(&form, &options)?)?.face());
    }
    Ok(kits)
}

impl FormOptions {
    /// The options as `attachForm` reads them from JavaScript (`undefined` is none): the kit's
    /// own, and the rest as a submitter's (see [`Options::from_js`]), with `form`'s URL where
    /// none is given. Errors name the option.
    pub fn from_js(value: &JsValue, form: &HtmlFormElement) -> Result<FormOptions, Error> {
        read_options(form, value)
    }
}

fn read_options(form: &HtmlFormElement, value: &JsValue) -> Result<FormOptions, Error> {
    let none = value.is_undefined() || value.is_null();
    if !none && (!value.is_object() || value.is_function()) {
        return Err(Error::option("form kit options must be an object"));
    }
    let mut o = FormOptions::default();
    // One pass over what was given: the kit's own options read as they come, the rest copied
    // for the submitter.
    let copy = Object::new();
    if !none {
        for name in Object::keys(value.unchecked_ref::<Object>()).iter() {
            let v = Reflect::get(value, &name).unwrap_or_default();
            let key = name.as_string().unwrap_or_default();
            let Some(i) = KIT_OPTIONS.iter().position(|k| *k == key) else {
                let _ = Reflect::set(&copy, &name, &v);
                continue;
            };
            if v.is_undefined() {
                continue;
            }
            read_kit_option(&mut o, i, v)?;
        }
    }
    if get(&copy, "url").is_undefined() {
        put(&copy, "url", &form_url(form).into());
    }
    let method_given = !get(&copy, "method").is_undefined();
    o.submitter = Options::from_js(&copy)?;
    o.method = method_given.then(|| o.submitter.method.clone());
    Ok(o)
}

/// The kit's option `KIT_OPTIONS[i]`, given as `v` (not `undefined`).
fn read_kit_option(o: &mut FormOptions, i: usize, v: JsValue) -> Result<(), Error> {
    match i {
        0 => {
            o.name = Some(
                v.as_string()
                    .ok_or_else(|| Error::option("options.name must be a string"))?,
            )
        }
        1 => {
            o.clear_on_success = v
                .as_bool()
                .ok_or_else(|| Error::option("options.clearOnSuccess must be true or false"))?
        }
        2 if v.is_function() => {
            let f: Function = v.unchecked_into();
            // A throw, or anything but a string, says "Sent.".
            o.success_message = SuccessMessage::With(Rc::new(move |s| {
                f.call1(&JsValue::NULL, &body_js(s)).ok()?.as_string()
            }))
        }
        2 => {
            o.success_message = SuccessMessage::Template(v.as_string().ok_or_else(|| {
                Error::option(
                    "options.successMessage must be a string such as \"Ticket #{id} created\" or a function",
                )
            })?)
        }
        3 => {
            o.resume = match v.as_string().as_deref() {
                Some("auto") => Resume::Auto,
                Some("manual") => Resume::Manual,
                _ => {
                    return Err(Error::option(concat(&[
                        "options.resume must be \"auto\" or \"manual\", not ",
                        &shown(&v),
                    ])))
                }
            }
        }
        _ => o.messages = read_messages(&v)?,
    }
    Ok(())
}

/// `options.messages`: an object of the kit's message keys to strings.
fn read_messages(value: &JsValue) -> Result<Messages, Error> {
    let mut messages = Messages::default();
    if value.is_undefined() {
        return Ok(messages);
    }
    if !value.is_object() || value.is_function() || Array::is_array(value) {
        return Err(Error::option(
            "options.messages must be an object of message keys to texts, such as { tryAgain: \"Réessayer\" }",
        ));
    }
    for name in Object::keys(value.unchecked_ref::<Object>()).iter() {
        let given = Reflect::get(value, &name).unwrap_or_default();
        let key = name.as_string().unwrap_or_default();
        let Some(text) = given.as_string() else {
            if Messages::keys().all(|(k, _)| k != key) && !is_retired(&key) {
                return Err(unknown("messages.", &key));
            }
            // Left out, as a translation table's missing entry is: the kit's own text.
            if given.is_undefined() {
                continue;
            }
            return Err(Error::option(concat(&[
                "options.messages.",
                &key,
                " must be a string, not ",
                &shown(&given),
            ])));
        };
        messages.set(&key, text)?;
    }
    Ok(messages)
}

/// A value as an error message shows it: its JSON, or its type.
fn shown(v: &JsValue) -> String {
    match js_sys::JSON::stringify(v) {
        Ok(s) if s.is_string() => s.into(),
        _ => v.js_typeof().as_string().unwrap_or_default(),
    }
}

impl FormKit {
    /// Its JavaScript object: one per kit, kept by the kit while the form is wired (see
    /// `kit::Faces`).
    fn face(&self) -> JsValue {
        self.kept(|f| &mut f.kit, || self.clone().into())
    }

    /// The object in `slot` of the kit's faces, or `make`'s, kept there while the form is
    /// wired. `make` calls into JavaScript, so no borrow of the faces is held across it.
    fn kept(
        &self,
        slot: fn(&mut Faces) -> &mut Option<JsValue>,
        make: impl FnOnce() -> JsValue,
    ) -> JsValue {
        let kept = slot(&mut self.kit.faces.borrow_mut()).clone();
        kept.unwrap_or_else(|| {
            let face = make();
            if holds(&self.kit.wiring) {
                *slot(&mut self.kit.faces.borrow_mut()) = Some(face.clone());
            }
            face
        })
    }
}

#[wasm_bindgen]
impl FormKit {
    /// Undoes everything the kit did; a pending submission stays stored.
    #[wasm_bindgen(js_name = detach)]
    pub fn js_detach(&self) {
        self.detach();
    }

    /// "Try again", as the button does.
    #[wasm_bindgen(js_name = tryAgain)]
    pub fn js_try_again(&self) {
        self.try_again();
    }

    /// The submitter behind the form (the same object each time, while the form is wired).
    #[wasm_bindgen(getter = submitter, unchecked_return_type = "Submitter")]
    pub fn js_submitter(&self) -> JsValue {
        self.kept(
            |f| &mut f.submitter,
            || crate::js::Submitter::from(self.submitter().clone()).into(),
        )
    }

    /// "Send as a new ticket", as the button of an expired form does: a new key, deliberately.
    #[wasm_bindgen(js_name = sendAsNew)]
    pub fn js_send_as_new(&self) {
        self.send_as_new();
    }

    /// "Discard", as the button does.
    #[wasm_bindgen(js_name = discard)]
    pub fn js_discard(&self) {
        self.discard();
    }
}
