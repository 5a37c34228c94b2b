//! # Errors
//!
//! One opaque [`Error`] with the code a caller branches on, as in JavaScript: an `OncekeyError`
//! (an `Error` named so) whose `code` is one of the words of [`ErrorCode`]. Nothing the driver
//! does throws a JavaScript value it did not make; what a page or the browser throws is turned
//! into text by [`describe`], which never assumes it is an `Error`.

use js_sys::Reflect;
use wasm_bindgen::{JsCast, JsValue};

/// What kind of mistake or refusal an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// An option is wrong; the message names it.
    Option,
    /// The body cannot be sent (JSON cannot carry it, or it is not a flat object for a form).
    Body,
    /// Another body is pending under this name: try it again or discard it first.
    Pending,
    /// Nothing to try again (or, in JavaScript, `init()` not awaited).
    State,
    /// The submission was discarded before a definite answer.
    Discarded,
    /// The caller aborted its wait (an `AbortSignal`, an [`AbortHandle`](super::AbortHandle)):
    /// the submission stays pending with its key.
    Aborted,
}

impl ErrorCode {
    /// The code's word, as JavaScript's `OncekeyError.code` has it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Option => "option",
            ErrorCode::Body => "body",
            ErrorCode::Pending => "pending",
            ErrorCode::State => "state",
            ErrorCode::Discarded => "discarded",
            ErrorCode::Aborted => "aborted",
        }
    }
}

/// Why the driver refused or stopped. Nothing was stored or sent when it refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inner {
    code: ErrorCode,
    message: String,
}

impl Error {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                code,
                message: message.into(),
            }),
        }
    }

    pub(crate) fn option(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Option, message)
    }

    pub(crate) fn body(message: impl Into<String>) -> Error {
        Error::new(ErrorCode::Body, message)
    }

    /// What kind of error it is.
    pub fn code(&self) -> ErrorCode {
        self.inner.code
    }

    /// What went wrong, for people.
    pub fn message(&self) -> &str {
        &self.inner.message
    }
}

impl ::core::fmt::Display for Error {
    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

/// The error as JavaScript gets it: an `Error` named `OncekeyError` with its `code`.
impl From<Error> for JsValue {
    fn from(e: Error) -> JsValue {
        let error = js_sys::Error::new(e.message());
        error.set_name("OncekeyError");
        let _ = Reflect::set(&error, &"code".into(), &e.code().as_str().into());
        error.into()
    }
}

/// What a thrown value says, without assuming it is an `Error`: an error's message (after its
/// name, unless that is a plain `Error`), a string, the value's JSON, or its type.
pub(crate) fn describe(value: &JsValue) -> String {
    if value.is_instance_of::<js_sys::Error>() {
        // Read as whatever they are: a page's error may have a name or message that is not
        // text, or a getter that throws (js-sys's typed getters would throw through us then).
        let text = |k: &str| super::text(value, k).unwrap_or_default();
        let (name, message) = (text("name"), text("message"));
        return match name.as_str() {
            "" | "Error" | "OncekeyError" => message,
            _ => name + ": " + &message,
        };
    }
    if let Some(s) = value.as_string() {
        return s;
    }
    if let Some(s) = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
    {
        return s;
    }
    "a thrown ".to_owned() + &value.js_typeof().as_string().unwrap_or_default()
}
