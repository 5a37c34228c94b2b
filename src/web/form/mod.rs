//! # The form kit
//!
//! Wires a plain HTML `<form>` to a [`Submitter`], following CONTRACT.md section 4 (README.md,
//! "A plain HTML form", says what it does for people). It is a client of the public `Submitter`
//! API only, so a Rust frontend (Leptos, Yew) could write it the same way.
//!
//! ```js
//! import init, { attachForm, autoAttach } from 'oncekey'
//! await init()
//! const kit = attachForm(document.querySelector('form'), { headers: { 'X-Tenant': 'acme' } })
//! autoAttach()   // every <form data-oncekey="NAME"> on the page
//! kit.detach()   // undoes everything it did
//! ```
//!
//! From Rust: [`FormKit::attach`] with [`FormOptions`].
//!
//! # What it does
//!
//! While the outcome is unknown (sending, waiting, unsure) the form is held by a [`FormLock`]: its
//! controls disabled (those the page adds meanwhile too), `aria-busy="true"`. Its `[role="status"]`
//! element (made if missing) says what is happening, as text (every text replaceable:
//! [`Messages`]). When retries run out it offers "Try again" (same key, same body) and "Discard";
//! while offline it says the request goes out when the connection is back; when the key is past its
//! lifetime (`expired`) it says the outcome cannot be known and offers "Send as a new ticket" (a
//! new key) and "Discard". After a reload the stored body is put back into the fields, which stay
//! locked until the submission is definite or discarded, and it is resent with the same key
//! ([`Resume::Auto`]) or waits for "Try again" ([`Resume::Manual`]). Secret fields never reach
//! storage: they go to [`Submitter::set_secrets`], and after a reload the kit unlocks just them,
//! asks for them, and resends with the same key once they are filled. A refusal shows RFC 9457
//! `invalid-params` next to the fields they name and moves the focus to the first.
//!
//! The form carries `data-oncekey-state` (the state) and, once settled, `data-oncekey-outcome`,
//! and dispatches bubbling `oncekey:change` events (detail: `state`, and what is known of
//! `key`, `attempts`, `nextAttemptAt`, `waitingFor`, `outcome`, `status`, `replayed`, `body`,
//! `needsSecrets`), one per change of state, so a React or Vue app can follow along.
//!
//! # Lifetime
//!
//! An attached form stays wired until [`FormKit::detach`], whether or not the page (or the Rust
//! caller) keeps the [`FormKit`]: the form's listeners own the kit. A page that drops what
//! `attachForm` returned, and whose garbage collector frees the wrapper, keeps a working form.

mod answer;
mod dom;
mod fields;
mod first_paint;
#[cfg(feature = "js")]
mod js;
#[cfg(feature = "js")]
pub use js::auto_attach;
mod kit;
mod lock;
mod messages;
mod view;

use ::core::fmt;

use crate::prelude::*;
use alloc::rc::Rc;
use web_sys::HtmlFormElement;

use super::{Error, Options, Settlement, Submitter};

#[cfg(feature = "js")]
pub(crate) use kit::waiting_for;
pub use lock::FormLock;
pub use messages::Messages;

/// Options of the form kit: the submitter's, and its own.
#[derive(Clone)]
pub struct FormOptions {
    /// The submission's name; `None`: the form's `data-oncekey` attribute, or its id.
    pub name: Option<String>,
    /// How to send; `None`: the form's `method` attribute (POST when it has none; `get` and
    /// `dialog` are refused, since oncekey sends a body). The submitter's `method` is not used.
    pub method: Option<String>,
    /// The submitter's options. An empty `url` (the default) is the form's `action`; `method`
    /// is [`FormOptions::method`]'s; `resume` is the kit's to decide ([`FormOptions::resume`]).
    pub submitter: Options,
    /// Clear the form after a success; default true.
    pub clear_on_success: bool,
    /// What the status says after a success.
    pub success_message: SuccessMessage,
    /// What to do with a submission found in storage.
    pub resume: Resume,
    /// Every text the kit writes, English unless replaced.
    pub messages: Messages,
}

impl Default for FormOptions {
    fn default() -> FormOptions {
        FormOptions {
            name: None,
            method: None,
            submitter: Options::default(),
            clear_on_success: true,
            success_message: SuccessMessage::Default,
            resume: Resume::Auto,
            messages: Messages::default(),
        }
    }
}

impl fmt::Debug for FormOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormOptions")
            .field("name", &self.name)
            .field("url", &self.submitter.url)
            .field("method", &self.method)
            .field("clear_on_success", &self.clear_on_success)
            .field("success_message", &self.success_message)
            .field("resume", &self.resume)
            .field("messages", &self.messages)
            .finish_non_exhaustive()
    }
}

/// What the status says after a success.
#[derive(Clone, Default)]
pub enum SuccessMessage {
    /// "Created #12." when the answer has an `id`, otherwise "Sent and confirmed."
    #[default]
    Default,
    /// `"Ticket #{id} created"`: each `{field}` replaced by the answer's field.
    Template(String),
    /// Made from the settlement; `None` says "Sent."
    With(SuccessText),
}

/// A success's message made from its settlement (see [`SuccessMessage::With`]).
pub type SuccessText = Rc<dyn Fn(&Settlement) -> Option<String>>;

impl fmt::Debug for SuccessMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuccessMessage::Default => f.write_str("Default"),
            SuccessMessage::Template(t) => f.debug_tuple("Template").field(t).finish(),
            SuccessMessage::With(_) => f.write_str("With(..)"),
        }
    }
}

/// What the kit does with a pending submission it finds in storage (after a reload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resume {
    /// Resend it at once, with the same key (once secrets, if the form has any, are filled).
    #[default]
    Auto,
    /// Show it as unsure and wait for "Try again".
    Manual,
}

/// A form wired to a submitter. It stays wired until `detach()`, whether or not this object is
/// kept (clones, and the JavaScript object, are all the same kit).
#[wasm_bindgen::prelude::wasm_bindgen]
#[derive(Clone)]
pub struct FormKit {
    kit: Rc<kit::Kit>,
}

impl fmt::Debug for FormKit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FormKit")
            .field("name", &self.kit.submitter.name())
            .finish_non_exhaustive()
    }
}

impl FormKit {
    /// Wires `form` to a new [`Submitter`]; a submission it finds in storage is restored into
    /// the fields at once. Errors name the wrong option (or say why the form cannot be used).
    pub fn attach(form: &HtmlFormElement, options: FormOptions) -> Result<FormKit, Error> {
        kit::Kit::attach(form, options).map(|kit| FormKit { kit })
    }

    /// The submitter behind the form.
    pub fn submitter(&self) -> &Submitter {
        &self.kit.submitter
    }

    /// The form.
    pub fn form(&self) -> &HtmlFormElement {
        &self.kit.form
    }

    /// Undoes everything the kit did: listeners, locks, attributes, the elements it made. A
    /// pending submission stays stored.
    pub fn detach(&self) {
        self.kit.detach();
    }

    /// "Try again", as the button does: the pending submission resent with the same key.
    pub fn try_again(&self) {
        kit::Kit::resend(&self.kit);
    }

    /// "Send as a new ticket", as the button of an expired form does: its request sent again
    /// under a new key, deliberately.
    pub fn send_as_new(&self) {
        kit::Kit::send_as_new(&self.kit);
    }

    /// "Discard", as the button does: the unconfirmed submission is dropped, the form unlocked;
    /// one that another tab is sending right now is kept, and the form says so (a moment
    /// later: the key's Web Lock is asked about first).
    pub fn discard(&self) {
        kit::Kit::discard(&self.kit);
    }
}
