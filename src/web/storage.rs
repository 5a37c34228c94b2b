//! # Storage
//!
//! CONTRACT.md section 5 in the browser: one record per name, under `oncekey:<name>`, in
//! `sessionStorage` by default, `localStorage` or memory on request; the value is the record's
//! JSON text, written and read by the core ([`Record`](crate::core::Record)). Web storage is
//! reached through gloo-storage's `raw()`, the `web_sys::Storage` itself (its typed `get` and
//! `set` would bring serde_json). `raw()` throws when storage is blocked, so it is only called
//! once a probe through `web_sys` found the storage there. Storage that cannot be used (blocked
//! in a sandboxed frame, absent in a worker, disabled, full) degrades to memory with a warning;
//! the submission still happens once.

use std::cell::RefCell;

use gloo_storage::{LocalStorage, SessionStorage, Storage as _};

use super::error::describe;
use super::options::StorageKind;
use crate::core::{Key, Record};
use wasm_bindgen::JsValue;

thread_local! {
    /// The memory store, one per page like the web storages it stands in for.
    static MEMORY: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
}

/// Where a record's slot name begins; the rest is the submission's name.
const SLOT_PREFIX: &str = "oncekey:";
/// The slot a probe writes and removes: outside the records' (`oncekey:probe` was the record
/// slot of a submission named `probe`, which every probe wiped).
const PROBE_SLOT: &str = "oncekey-probe";

fn slot(name: &str) -> String {
    SLOT_PREFIX.to_owned() + name
}

/// Whether `slot` of a web storage holds a submission's record (not another key).
#[cfg(feature = "js")]
pub(crate) fn is_record_slot(slot: &str) -> bool {
    slot.starts_with(SLOT_PREFIX)
}

fn memory_get(slot: &str) -> Option<String> {
    MEMORY.with(|m| {
        m.borrow()
            .iter()
            .find(|(k, _)| k == slot)
            .map(|(_, v)| v.clone())
    })
}

fn memory_set(slot: String, text: &str) {
    MEMORY.with(|m| {
        let mut m = m.borrow_mut();
        match m.iter_mut().find(|(k, _)| *k == slot) {
            Some((_, v)) => *v = text.to_owned(),
            None => m.push((slot, text.to_owned())),
        }
    });
}

fn memory_remove(slot: &str) {
    MEMORY.with(|m| m.borrow_mut().retain(|(k, _)| k != slot));
}

/// Where one submitter keeps its record.
#[derive(Debug)]
pub(crate) struct Store {
    asked: StorageKind,
    web: Option<web_sys::Storage>,
}

fn degraded(kind: StorageKind, what: &str, why: &str) -> String {
    kind.as_str().to_owned()
        + "Storage "
        + what
        + " ("
        + why
        + "); pending submissions are kept in memory and will not survive a reload"
}

/// The web storage of `kind`, once a probe was written and removed.
fn probe(kind: StorageKind) -> Result<web_sys::Storage, String> {
    let name = kind.as_str().to_owned() + "Storage";
    let none = || "this context has no ".to_owned() + &name;
    let window = web_sys::window().ok_or_else(none)?;
    let found = match kind {
        StorageKind::Local => window.local_storage(),
        _ => window.session_storage(),
    };
    match found {
        Err(e) => return Err(describe(&e)),
        Ok(None) => return Err(none()),
        Ok(Some(_)) => {}
    }
    // Found: gloo's raw() can no longer throw.
    let web = match kind {
        StorageKind::Local => LocalStorage::raw(),
        _ => SessionStorage::raw(),
    };
    web.set_item(PROBE_SLOT, "1")
        .and_then(|()| web.remove_item(PROBE_SLOT))
        .map_err(|e| describe(&e))?;
    Ok(web)
}

impl Store {
    /// The storage asked for, or memory and the warning that says why.
    pub(crate) fn open(kind: StorageKind) -> (Store, Option<String>) {
        let mut store = Store {
            asked: kind,
            web: None,
        };
        // IndexedDB is asynchronous: `upload.rs` keeps those records, this store none.
        if matches!(kind, StorageKind::Memory | StorageKind::IndexedDb) {
            return (store, None);
        }
        match probe(kind) {
            Ok(web) => {
                store.web = Some(web);
                (store, None)
            }
            Err(why) => (store, Some(degraded(kind, "cannot be used", &why))),
        }
    }

    /// What is really used: the storage asked for, or memory once it could not be.
    pub(crate) fn kind(&self) -> StorageKind {
        match self.web {
            Some(_) => self.asked,
            None if self.asked == StorageKind::IndexedDb => self.asked,
            None => StorageKind::Memory,
        }
    }

    /// A failure of the web storage: memory from now on; returns the warning.
    fn degrade(&mut self, e: &JsValue) -> String {
        self.web = None;
        degraded(self.asked, "failed", &describe(e))
    }

    /// The text stored under `name`, and a warning when the storage failed.
    pub(crate) fn read(&mut self, name: &str) -> (Option<String>, Option<String>) {
        if self.asked == StorageKind::IndexedDb {
            return (None, None);
        }
        let slot = slot(name);
        if let Some(web) = &self.web {
            match web.get_item(&slot) {
                Ok(text) => return (text, None),
                Err(e) => {
                    let warning = self.degrade(&e);
                    return (memory_get(&slot), Some(warning));
                }
            }
        }
        (memory_get(&slot), None)
    }

    /// Writes synchronously, so before the action that follows; returns a warning when it
    /// failed (the record is then kept in memory).
    pub(crate) fn write(&mut self, name: &str, text: &str) -> Option<String> {
        let slot = slot(name);
        if let Some(web) = &self.web {
            match web.set_item(&slot, text) {
                Ok(()) => return None,
                Err(e) => {
                    // An earlier write of this record is older than memory's now, and nothing
                    // would remove it after the answer: a reload found a submission already
                    // done, unsure, under its key. Removed (a full storage still removes).
                    let _ = web.remove_item(&slot);
                    memory_set(slot, text);
                    return Some(self.degrade(&e));
                }
            }
        }
        memory_set(slot, text);
        None
    }

    /// Writes `text` only where the record stored under `name` is still of `key` (in web
    /// storage, or in memory when that is where it is kept): one removed or replaced by another
    /// writer since stays as that writer left it.
    pub(crate) fn rewrite(&mut self, name: &str, key: &Key, text: &str) -> Option<String> {
        let (stored, warning) = self.read(name);
        if warning.is_some() || !stored.is_some_and(|t| Record::is_of_key(&t, key)) {
            return warning;
        }
        self.write(name, text)
    }

    /// Removes the record of `key` (from memory too, where a failure may have put it). A record
    /// of another key in its place is another writer's, written since this one's (another tab
    /// on `localStorage`, another submitter of the name in the page), and stays: it is pending.
    pub(crate) fn forget(&mut self, name: &str, key: &Key) {
        let slot = slot(name);
        let ours = |text: Option<String>| text.is_some_and(|t| Record::is_of_key(&t, key));
        if let Some(web) = &self.web {
            // A storage that fails to read fails to remove too; nothing more can be done here.
            if ours(web.get_item(&slot).ok().flatten()) {
                let _ = web.remove_item(&slot);
            }
        }
        if ours(memory_get(&slot)) {
            memory_remove(&slot);
        }
    }

    /// Removes whatever is stored under `name` (a record that cannot be taken up).
    pub(crate) fn remove(&mut self, name: &str) {
        let slot = slot(name);
        if let Some(web) = &self.web {
            // A storage that fails to remove fails to read too; nothing more can be done here.
            let _ = web.remove_item(&slot);
        }
        memory_remove(&slot);
    }
}
