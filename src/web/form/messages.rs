//! # The kit's texts
//!
//! Every text the kit writes into the page (status texts, its buttons' labels, the request for
//! the secret fields, the notes next to invalid fields) is a message with a key, and each can be
//! replaced: [`Messages::set`] in Rust, the `messages` option in JavaScript
//! (`{ sending: 'Envoi…', tryAgain: 'Réessayer' }`). A key the kit does not know is an error that
//! names it. A message may hold `{name}` placeholders, filled as the key's documentation says
//! (`{id}` and the other fields of the answer in `created`, as `successMessage` does).

use crate::core::text::concat;
use crate::prelude::*;

use super::super::Error;

/// A message of the kit, by its place in [`TEXTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    Sending,
    SendingAgain,
    Waiting,
    Offline,
    Unsure,
    Busy,
    Reloaded,
    Expired,
    Discarded,
    SentElsewhere,
    Succeeded,
    Created,
    Sent,
    Refused,
    Conflict,
    Misconfigured,
    NoAnswer,
    ServerAnswered,
    SecretOne,
    SecretMany,
    And,
    FieldInvalid,
    FieldReason,
    TryAgain,
    Discard,
    SendAsNew,
}

/// Each message's key and its English text, in the order of [`Message`]. README.md ("A plain
/// HTML form") and the `FormKitMessages` declarations list the same.
const TEXTS: [(&str, &str); 26] = [
    ("sending", "Sending…"),
    // {attempt}: the attempt's number.
    ("sendingAgain", "Sending again (attempt {attempt}), with the same key…"),
    // {seconds}: until the next attempt, to a tenth.
    ("waiting", "No answer yet. Trying again in {seconds} s; it will not be counted twice."),
    ("offline", "You are offline. This request will be sent when the connection is back, as the same request; the form stays locked until then."),
    ("unsure", "We could not confirm that this was received. Try again sends the same request, and the server will not do it twice; or discard it to write a new one."),
    ("busy", "The server asked us to wait before this is sent again. Try again in a little while: it sends the same request, and the server will not do it twice; or discard it to write a new one."),
    ("reloaded", "This request was sent before the page reloaded, and its answer was lost. Try again sends the same request; the server will not do it twice."),
    ("expired", "We could not confirm that this ticket arrived, and it is now too old to be sent again safely: it may or may not have arrived. Please check whether it did before you send it again. Send as a new ticket sends it again as a new one; Discard drops it."),
    ("discarded", "Discarded. Nothing was confirmed; sending again makes a new request."),
    ("sentElsewhere", "This request is being sent from another tab right now, so it was not discarded. Try again shows its answer once it comes; the server will not do it twice."),
    ("succeeded", "Sent and confirmed."),
    // {id}, or any field of the answer.
    ("created", "Created #{id}."),
    ("sent", "Sent."),
    // {problem}: the server's problem details in one line.
    ("refused", "Not accepted: {problem}"),
    ("conflict", "The server holds this request's key for different content. This is a bug in the page; nothing was retried. ({problem})"),
    ("misconfigured", "The server refused the idempotency key: this form is set up wrongly. Nothing was done. ({problem})"),
    ("noAnswer", "no answer"),
    // {status}: the HTTP status.
    ("serverAnswered", "the server answered {status}"),
    // {fields}: the secret fields' labels, joined with ", " and `and`.
    ("secretOne", "This request was interrupted by a reload. For your safety, {fields} was not kept: please enter it again, then send; it goes out as the same request."),
    ("secretMany", "This request was interrupted by a reload. For your safety, {fields} were not kept: please enter them again, then send; it goes out as the same request."),
    ("and", " and "),
    // {field}: the field's name; {reason}: the server's reason, or `fieldReason`.
    ("fieldInvalid", "{field} {reason}"),
    ("fieldReason", "is not accepted"),
    ("tryAgain", "Try again"),
    ("discard", "Discard"),
    ("sendAsNew", "Send as a new ticket"),
];

/// The kit's texts: English unless replaced ([`Messages::set`]).
///
/// ```no_run
/// # fn run() -> Result<(), oncekey::Error> {
/// let mut messages = oncekey::Messages::default();
/// messages.set("tryAgain", "Erneut senden")?;
/// messages.set("sendingAgain", "Erneuter Versuch {attempt}, mit demselben Schlüssel…")?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Messages {
    replaced: Vec<(Message, String)>,
}

impl Messages {
    /// Every message's key, with its English text.
    pub fn keys() -> impl Iterator<Item = (&'static str, &'static str)> {
        TEXTS.iter().copied()
    }

    /// Replaces the message `key`; an error names a key the kit does not know. `fileField`,
    /// from versions that could not send files, is accepted and not used, so that translation
    /// tables written for them still load.
    pub fn set(&mut self, key: &str, text: impl Into<String>) -> Result<&mut Messages, Error> {
        if is_retired(key) {
            return Ok(self);
        }
        let Some(i) = TEXTS.iter().position(|(k, _)| *k == key) else {
            return Err(unknown("messages.", key));
        };
        let message = ALL[i];
        self.replaced.retain(|(m, _)| *m != message);
        self.replaced.push((message, text.into()));
        Ok(self)
    }

    /// The message `key` as the kit writes it now (`None`: no such key).
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = TEXTS.iter().position(|(k, _)| *k == key)?;
        Some(self.text(ALL[i]))
    }

    pub(crate) fn text(&self, m: Message) -> &str {
        self.replaced
            .iter()
            .find(|(r, _)| *r == m)
            .map_or(TEXTS[m as usize].1, |(_, t)| t.as_str())
    }

    /// The message with its `{name}` placeholders filled from `args`.
    pub(crate) fn fill(&self, m: Message, args: &[(&str, &str)]) -> String {
        fill_with(self.text(m), &|name| {
            args.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }
}

const ALL: [Message; 26] = [
    Message::Sending,
    Message::SendingAgain,
    Message::Waiting,
    Message::Offline,
    Message::Unsure,
    Message::Busy,
    Message::Reloaded,
    Message::Expired,
    Message::Discarded,
    Message::SentElsewhere,
    Message::Succeeded,
    Message::Created,
    Message::Sent,
    Message::Refused,
    Message::Conflict,
    Message::Misconfigured,
    Message::NoAnswer,
    Message::ServerAnswered,
    Message::SecretOne,
    Message::SecretMany,
    Message::And,
    Message::FieldInvalid,
    Message::FieldReason,
    Message::TryAgain,
    Message::Discard,
    Message::SendAsNew,
];

/// A message no version uses any more ([`Messages::set`]): accepted, and not used.
pub(crate) fn is_retired(key: &str) -> bool {
    key == "fileField"
}

/// "options.messages.tryagain is not a message of the form kit; the messages are ...".
pub(crate) fn unknown(prefix: &str, key: &str) -> Error {
    let mut message = concat(&[
        "options.",
        prefix,
        key,
        " is not a message of the form kit; the messages are ",
    ]);
    for (i, (k, _)) in TEXTS.iter().enumerate() {
        if i > 0 {
            message.push_str(", ");
        }
        message.push_str(k);
    }
    Error::option(message)
}

/// `template` with each `{name}` replaced by `value(name)` (nothing when it has none); an
/// unclosed `{` is kept as written. (`dyn`: one copy of it for the messages and the templates.)
pub(crate) fn fill_with(template: &str, value: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some((before, after)) = rest.split_once('{') {
        out.push_str(before);
        match after.split_once('}') {
            Some((name, after)) => {
                if let Some(v) = value(name) {
                    out.push_str(&v);
                }
                rest = after;
            }
            None => {
                out.push('{');
                out.push_str(after);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}
