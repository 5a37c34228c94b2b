//! # Errors
//!
//! One opaque [`Error`] for everything the browser driver refuses, asked about with `is_*`
//! questions. JavaScript sees it as an `Error` whose `name` is `"OncekeyError"` and whose `code`
//! says which kind it is (`"option"`, `"body"`, `"pending"`, `"state"`, `"discarded"`).

use std::fmt;

use wasm_bindgen::JsValue;

/// A `Result` with the driver's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Why the driver refused something. Nothing was stored or sent.
#[derive(Clone)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Clone)]
struct Inner {
    kind: Kind,
    message: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Option,
    Body,
    Pending,
    State,
    Discarded,
}

impl Kind {
    fn code(self) -> &'static str {
        match self {
            Kind::Option => "option",
            Kind::Body => "body",
            Kind::Pending => "pending",
            Kind::State => "state",
            Kind::Discarded => "discarded",
        }
    }
}

impl Error {
    fn new(kind: Kind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
            }),
        }
    }

    /// A wrong option; the message names it.
    pub(crate) fn option(message: impl Into<String>) -> Error {
        Error::new(Kind::Option, message)
    }

    /// A body JSON cannot carry, or that the chosen encoding cannot send.
    pub(crate) fn body(message: impl Into<String>) -> Error {
        Error::new(Kind::Body, message)
    }

    /// Another submission is pending under this name.
    pub(crate) fn pending(message: impl Into<String>) -> Error {
        Error::new(Kind::Pending, message)
    }

    /// Nothing to act on (for example "Try again" with nothing pending).
    pub(crate) fn state(message: impl Into<String>) -> Error {
        Error::new(Kind::State, message)
    }

    /// The submission this call waited for was discarded.
    pub(crate) fn discarded() -> Error {
        Error::new(
            Kind::Discarded,
            "the submission was discarded before a definite answer",
        )
    }

    /// The one conversion from a thrown JavaScript value: its message if it is an `Error`, its
    /// text if it is a string, and a plain description otherwise.
    pub(crate) fn from_js(kind_of: fn(String) -> Error, value: &JsValue) -> Error {
        kind_of(describe(value))
    }

    /// What went wrong, for people (what [`Display`](fmt::Display) writes).
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// A wrong option: the message names the option.
    pub fn is_option(&self) -> bool {
        self.inner.kind == Kind::Option
    }

    /// A body that JSON cannot carry, or that form encoding cannot send.
    pub fn is_body(&self) -> bool {
        self.inner.kind == Kind::Body
    }

    /// A different submission is still pending under this name: try it again or discard it.
    pub fn is_pending(&self) -> bool {
        self.inner.kind == Kind::Pending
    }

    /// Nothing was pending to act on.
    pub fn is_state(&self) -> bool {
        self.inner.kind == Kind::State
    }

    /// The submission was discarded while this call waited for it.
    pub fn is_discarded(&self) -> bool {
        self.inner.kind == Kind::Discarded
    }
}

#[wasm_bindgen::prelude::wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// What a thrown JavaScript value says, without assuming it is an `Error`: its message if
    /// it is one (after its name, unless that is `Error` or `OncekeyError`), its text if it is a
    /// string, its JSON, or else its type.
    pub(crate) fn describe(value: &JsValue) -> String;

    /// `new Error(message)` named `OncekeyError`, with its `code`.
    #[wasm_bindgen(js_name = fail)]
    fn js_error(message: &str, code: &str) -> JsValue;
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oncekey::Error")
            .field("kind", &self.inner.kind.code())
            .field("message", &self.inner.message)
            .finish()
    }
}

impl std::error::Error for Error {}

impl From<Error> for JsValue {
    fn from(e: Error) -> JsValue {
        js_error(&e.inner.message, e.inner.kind.code())
    }
}
