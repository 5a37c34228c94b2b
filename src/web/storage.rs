//! # Where pending submissions are kept
//!
//! CONTRACT.md section 5, in the browser: one record per name, under `oncekey:<name>`, in
//! `sessionStorage` by default, `localStorage` or memory on request. The storage is taken from the
//! global scope and probed by `browser.js` (`webStorage`), so workers are served too; values stay
//! strings, the record's JSON text ([`Record::to_json`], written by the core without a serde
//! format).
//!
//! Storage that cannot be used (blocked in a sandboxed frame, disabled, quota exceeded) degrades
//! to memory with a warning; the submission still happens once. A record that cannot be read is
//! removed with a warning.

use std::cell::RefCell;

use wasm_bindgen::prelude::*;

use crate::core::body::{concat, quoted};
use crate::core::Record;

use super::error::describe;

/// Where a [`Submitter`](super::Submitter) keeps its pending record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageKind {
    /// `sessionStorage`: per tab, survives reloads, gone when the tab closes.
    #[default]
    Session,
    /// `localStorage`: shared by the origin's tabs, survives restarts.
    Local,
    /// This page's memory: survives nothing, but a new submitter of the same name on the same
    /// page finds the record.
    Memory,
}

impl StorageKind {
    /// Reads `session`, `local` or `memory`.
    pub fn parse(s: &str) -> Option<StorageKind> {
        match s {
            "session" => Some(StorageKind::Session),
            "local" => Some(StorageKind::Local),
            "memory" => Some(StorageKind::Memory),
            _ => None,
        }
    }

    fn global_name(self) -> &'static str {
        match self {
            StorageKind::Session => "sessionStorage",
            StorageKind::Local => "localStorage",
            StorageKind::Memory => "memory",
        }
    }
}

thread_local! {
    // The memory store is one per page, like the web storages it stands in for.
    // A list, not a HashMap: a page holds a few records, and hashbrown costs 3 KB of wasm.
    static MEMORY: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
}

/// What a read found.
pub(crate) enum Found {
    Nothing,
    Record(Record),
    /// The record was unreadable and has been removed; the text says why.
    Removed(String),
}

/// The store one submitter uses.
#[derive(Debug)]
pub(crate) struct Store {
    web: Option<web_sys::Storage>,
    kind: StorageKind,
}

impl Store {
    /// Opens the storage asked for, or memory with a warning when it cannot be used.
    pub(crate) fn open(kind: StorageKind) -> (Store, Option<String>) {
        if kind == StorageKind::Memory {
            return (Store { web: None, kind }, None);
        }
        match probe(kind) {
            Ok(storage) => (
                Store {
                    web: Some(storage),
                    kind,
                },
                None,
            ),
            Err(why) => (
                Store { web: None, kind },
                Some(concat(&[
                    kind.global_name(),
                    " cannot be used (",
                    &why,
                    "); pending submissions are kept in memory and will not survive a reload",
                ])),
            ),
        }
    }

    /// Whether records live in memory only (asked for, or degraded).
    pub(crate) fn is_memory(&self) -> bool {
        self.web.is_none()
    }

    /// The record stored under `name`. An unreadable one is removed.
    pub(crate) fn read(&mut self, name: &str) -> Found {
        let slot = slot(name);
        let text = match &self.web {
            Some(web) => match web.get_item(&slot) {
                Ok(text) => text,
                Err(e) => {
                    let warning = self.degrade(&e);
                    return match self.read(name) {
                        Found::Nothing => Found::Removed(warning),
                        other => other,
                    };
                }
            },
            None => memory_get(&slot),
        };
        let Some(text) = text else {
            return Found::Nothing;
        };
        match decode(&text, name) {
            Ok(record) => Found::Record(record),
            Err(why) => {
                self.remove(name);
                Found::Removed(removed(name, &why))
            }
        }
    }

    /// Writes `record`, durably before the next action (web storage writes are synchronous).
    /// A failure degrades to memory and returns a warning; the record is then kept there.
    pub(crate) fn write(&mut self, record: &Record) -> Option<String> {
        let slot = slot(&record.name);
        let text = encode(record);
        if let Some(web) = &self.web {
            match web.set_item(&slot, &text) {
                Ok(()) => return None,
                Err(e) => {
                    let warning = self.degrade(&e);
                    memory_set(slot, text);
                    return Some(warning);
                }
            }
        }
        memory_set(slot, text);
        None
    }

    /// Removes the record stored under `name`.
    pub(crate) fn remove(&mut self, name: &str) {
        let slot = slot(name);
        if let Some(web) = &self.web {
            // A storage that fails to remove fails to read too; nothing more can be done here.
            let _ = web.remove_item(&slot);
        }
        MEMORY.with(|m| m.borrow_mut().retain(|(s, _)| *s != slot));
    }

    fn degrade(&mut self, error: &JsValue) -> String {
        self.web = None;
        concat(&[
            self.kind.global_name(),
            " failed (",
            &describe(error),
            "); pending submissions are kept in memory and will not survive a reload",
        ])
    }
}

fn memory_get(slot: &str) -> Option<String> {
    MEMORY.with(|m| {
        m.borrow()
            .iter()
            .find(|(s, _)| s == slot)
            .map(|(_, t)| t.clone())
    })
}

fn memory_set(slot: String, text: String) {
    MEMORY.with(|m| {
        let mut m = m.borrow_mut();
        match m.iter_mut().find(|(s, _)| *s == slot) {
            Some(entry) => entry.1 = text,
            None => m.push((slot, text)),
        }
    })
}

/// Where the record of `name` is kept.
pub(crate) fn slot(name: &str) -> String {
    "oncekey:".to_owned() + name
}

/// The warning for a stored record of `name` that had to be removed.
pub(crate) fn removed(name: &str, why: &str) -> String {
    concat(&[
        "the stored submission ",
        &quoted(&slot(name)),
        " was removed: ",
        why,
    ])
}

#[wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// The web storage named so from the global scope, once a probe was written and removed;
    /// throws when it is blocked, missing, disabled or full.
    #[wasm_bindgen(catch, js_name = webStorage)]
    fn web_storage(name: &str) -> Result<web_sys::Storage, JsValue>;
}

/// The storage of `kind` (not memory), or why it cannot be used.
fn probe(kind: StorageKind) -> Result<web_sys::Storage, String> {
    web_storage(kind.global_name()).map_err(|e| describe(&e))
}

fn encode(record: &Record) -> String {
    record.to_json()
}

fn decode(text: &str, name: &str) -> Result<Record, String> {
    let record = Record::from_json(text).map_err(|e| e.0)?;
    if record.name != name {
        return Err("it belongs to ".to_owned() + &quoted(&record.name));
    }
    Ok(record)
}
