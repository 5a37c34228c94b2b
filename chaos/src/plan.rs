//! # What a run means to do
//!
//! The intended submissions of a run, the seeded generator every random choice is drawn from, and
//! the lines a worker writes to its results file. A ticket maps back to its submission through
//! its subject, which carries the run and the submission's number.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The tenant every chaos request is made for.
pub const TENANT: &str = "chaos";

/// SplitMix64: the same sequence on every platform for a seed (the server's faults use it too).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` and a stream label, so that separate choices do not share draws.
    pub fn new(seed: u64, stream: &str) -> Rng {
        let mut state = seed;
        for b in stream.bytes() {
            state = state.rotate_left(8) ^ u64::from(b);
            let mut r = Rng(state);
            state = r.next_u64();
        }
        Rng(state)
    }

    /// The next draw.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A draw in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A draw in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One intended submission: meant to happen exactly once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Intent {
    /// The submission's name in the worker's store.
    pub name: String,
    /// The run it belongs to.
    pub run: u32,
    /// Its number within the run.
    pub id: u32,
    /// Whether the server should accept it (the others carry an invalid email: a 400).
    pub valid: bool,
    /// The JSON body sent.
    pub body: String,
}

/// The subject that maps a ticket back to its submission.
pub fn subject(run: u32, id: u32) -> String {
    format!("chaos run {run} submission {id}")
}

/// The run and submission number a ticket's subject names.
pub fn parse_subject(subject: &str) -> Option<(u32, u32)> {
    let rest = subject.strip_prefix("chaos run ")?;
    let (run, id) = rest.split_once(" submission ")?;
    Some((run.parse().ok()?, id.parse().ok()?))
}

/// The submissions of run `run`: `count` of them, `invalid_percent` of them refused by the
/// server's validation.
pub fn intents(seed: u64, run: u32, count: u32, invalid_percent: u32) -> Vec<Intent> {
    let mut rng = Rng::new(seed, &format!("intents {run}"));
    (0..count)
        .map(|id| {
            let valid = rng.below(100) >= u64::from(invalid_percent);
            let email = if valid {
                format!("worker{}@example.com", rng.below(1000))
            } else {
                "not an email address".to_owned()
            };
            let text = format!(
                "printer {} is out of toner ({})",
                rng.below(100),
                rng.next_u64()
            );
            let body = serde_json::json!({
                "subject": subject(run, id),
                "body": text,
                "email": email,
            })
            .to_string();
            Intent {
                name: format!("r{run}-s{id}"),
                run,
                id,
                valid,
                body,
            }
        })
        .collect()
}

/// A line of a worker's results file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "ev", rename_all = "kebab-case")]
pub enum Event {
    /// The worker took this settlement as the submission's end.
    Settled {
        /// The submission's name.
        name: String,
        /// The key it was sent with.
        key: String,
        /// `succeeded`, `refused`, `conflict`, `misconfigured` (or `refused` faked by a break).
        outcome: String,
        /// The last status received.
        status: Option<u16>,
        /// Whether the server said it replayed the answer.
        replayed: bool,
        /// SHA-256 of the answer's body bytes, in hex.
        sha: String,
        /// Attempts made over every round and restart.
        attempts: u32,
    },
    /// The store is about to remove this record (a definite answer came, or a discard).
    Removed {
        /// The submission's name.
        name: String,
        /// The key of the removed record.
        key: String,
    },
    /// An impatient caller stopped waiting for this send (its future dropped mid-way) and sends
    /// the same message again.
    GaveUp {
        /// The submission's name.
        name: String,
    },
    /// The worker deliberately discarded the pending submission (only under `--break`).
    Discarded {
        /// The submission's name.
        name: String,
        /// The key it gave up.
        key: String,
    },
}

/// An append-only file of [`Event`]s, one JSON line each, synced per line.
#[derive(Debug)]
pub struct Journal {
    file: Mutex<File>,
}

impl Journal {
    /// Opens `path` for appending. A line cut by a kill is ended first, so it stays one bad line.
    pub fn open(path: &Path) -> std::io::Result<Journal> {
        let mut file = OpenOptions::new().create(true).append(true).open(path)?;
        let text = std::fs::read(path)?;
        if text.last().is_some_and(|&b| b != b'\n') {
            file.write_all(b"\n")?;
        }
        Ok(Journal {
            file: Mutex::new(file),
        })
    }

    /// Appends one event and syncs it.
    pub fn write(&self, event: &Event) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(event).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&line)?;
        file.sync_data()
    }
}

/// Every readable event in a results file, in order (a missing file has none; a line cut by a
/// kill is skipped).
pub fn read_events(path: &Path) -> Vec<Event> {
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// SHA-256 in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_map_back() {
        assert_eq!(parse_subject(&subject(3, 417)), Some((3, 417)));
        assert_eq!(parse_subject("chaos run x submission 1"), None);
        assert_eq!(parse_subject("Printer"), None);
    }

    #[test]
    fn the_same_seed_gives_the_same_intents() {
        let a = intents(7, 1, 200, 5);
        let b = intents(7, 1, 200, 5);
        assert_eq!(
            a.iter().map(|i| &i.body).collect::<Vec<_>>(),
            b.iter().map(|i| &i.body).collect::<Vec<_>>()
        );
        let invalid = a.iter().filter(|i| !i.valid).count();
        assert!((1..40).contains(&invalid), "{invalid}");
        assert_ne!(intents(8, 1, 10, 5)[0].body, a[0].body);
    }

    #[test]
    fn a_cut_line_is_skipped_and_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let e = Event::Removed {
            name: "a".into(),
            key: "k".into(),
        };
        Journal::open(&path).unwrap().write(&e).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"ev\":\"sett")
            .unwrap();
        Journal::open(&path).unwrap().write(&e).unwrap();
        assert_eq!(read_events(&path), vec![e.clone(), e]);
    }
}
