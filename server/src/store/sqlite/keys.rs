//! # Finding a receipt by its key without reading the index for a new one
//!
//! A browser's keys are UUID v4, and most keys a server sees are new. With one index of the
//! receipts ordered by a hash of tenant and key (version 4), every new key read a leaf of the
//! index at a random place to learn it was absent, and then wrote its entry into that leaf: a
//! random page read and a random page dirtied per request. Measured with the `load` example
//! (20,000 requests, 64 at once, alternated runs): the writer thread spent +12.4 to +16.7 µs
//! per keyed request over an unkeyed one; with this module, +6.0 to +9.0 µs.
//!
//! The hashes are kept in two parts, and in front of the second, a filter:
//!
//! - the receipts written since the last merge are found through a map in memory (hash to the
//!   receipt's rowid), held by the writer thread beside its connection and read again from the
//!   table when the database is opened: a new receipt is a row appended to `receipts`, and
//!   nothing else;
//! - every [`MERGE_AT`] receipts, their hashes are merged into `receipt_keys` (hash, rowid),
//!   sorted, in one statement of the writer's open transaction, with `receipt_keys_upto` (the
//!   last rowid merged) in the same transaction: each page of that index is written once per
//!   merge, however many entries land on it;
//! - a Bloom filter of the hashes in `receipt_keys` ([`Filter`]) answers "not there" for
//!   almost every new key, which is then known absent without reading `receipt_keys` at all.
//!
//! A rowid found either way is only a place to look: the row is read by rowid, tenant and key,
//! so a stale entry (a receipt rolled back, released or swept since) is passed over, and two
//! keys that share a hash keep a receipt each. A rowid given out and committed is never given
//! out again (`AUTOINCREMENT`; one rolled back is, which is one more reason an entry is only a
//! place to look), and `upto` is the last one given out when the merge ran, so every row after
//! `upto` is one the map knows, or one another connection wrote: the writer compares
//! `PRAGMA data_version` at the start of every transaction it opens (under the write lock) and,
//! when another connection has committed, reads the rows after `upto` and the filter again.
//! That is a read of all of `receipt_keys` per transaction while two servers take turns on one
//! file: it works, slowly; a fleet uses PostgreSQL.
//!
//! Memory: the map holds about [`MERGE_AT`] entries at most (more only while commits fail),
//! about 32 bytes each; the filter 4 to 8 bytes per receipt kept (16 bits for twice the
//! receipts it was loaded with, rounded up to a power of two; at least 128 KiB). Opening the
//! database reads `receipt_keys` once, for the filter. A merge writes each page of
//! `receipt_keys` that gets an entry: a few tens of milliseconds while it is small; with many
//! receipts nearly all its pages (about 14 MB of log at 860,000 receipts), in the transaction
//! of the requests waiting then.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension};

/// Receipts found through the map before their hashes are merged into `receipt_keys`: about
/// 1 MiB of map.
pub(super) const MERGE_AT: usize = 32_768;

/// Earlier rowids of one hash in the map past which a merge is due.
const MAX_EARLIER: usize = 4;

/// The receipts written after `upto`, by hash; which hashes `receipt_keys` may hold; and the
/// state of the merge.
pub(super) struct Recent {
    /// Every receipt up to this rowid has its hash in `receipt_keys` (as committed).
    upto: i64,
    /// Every hash in `receipt_keys` (and perhaps some that were taken out since).
    merged: Filter,
    /// The rowid of the receipt last written for each hash since `upto`.
    latest: HashMap<i64, i64>,
    /// Earlier rowids of a hash in `latest` (a key whose receipt was written again, or two keys
    /// that share a hash): rare, so a list.
    earlier: Vec<(i64, i64)>,
    /// `PRAGMA data_version` as last read: another connection's commit changes it.
    version: i64,
    /// A merge written in the open transaction: its `upto`, taken once committed.
    merging: Option<i64>,
    /// A merge is due before [`MERGE_AT`] entries: a hash has too many ([`Recent::written`]).
    merge_due: bool,
    /// How many entries make a merge due ([`MERGE_AT`], smaller in tests).
    merge_at: usize,
}

/// [`Recent::version`] while the index is not read whole: `PRAGMA data_version` is never
/// negative, so the next `begin` reads it again.
const UNREAD: i64 = -1;

/// A read of [`Recent::reload`] that fails, for the tests: armed for one database file.
#[cfg(test)]
pub(super) mod fault {
    use rusqlite::Connection;
    use std::sync::Mutex;

    static ARMED: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());

    /// The next reload of the index of the database at `path` fails midway.
    pub(in super::super) fn fail_next_reload(path: &str) {
        let path = std::fs::canonicalize(path).unwrap();
        ARMED.lock().unwrap().push(path);
    }

    pub(super) fn reload(conn: &Connection) -> rusqlite::Result<()> {
        let Some(path) = conn.path().and_then(|p| std::fs::canonicalize(p).ok()) else {
            return Ok(());
        };
        let mut armed = ARMED.lock().unwrap();
        let Some(at) = armed.iter().position(|p| *p == path) else {
            return Ok(());
        };
        armed.remove(at);
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some("a read that fails (the test's fault)".into()),
        ))
    }
}

impl Recent {
    /// Reads the state of the index from `conn` (at open, and after another connection's
    /// commit).
    pub(super) fn load(conn: &Connection, merge_at: usize) -> rusqlite::Result<Recent> {
        let mut recent = Recent {
            upto: 0,
            merged: Filter::default(),
            latest: HashMap::new(),
            earlier: Vec::new(),
            version: 0,
            merging: None,
            merge_due: false,
            merge_at,
        };
        recent.reload(conn)?;
        Ok(recent)
    }

    fn reload(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        // Until the reload is whole, no version is taken for the one read: a read below that
        // fails (an I/O error, say) leaves a filter or a map that misses another connection's
        // receipts, and the next `begin` must read them again, not find the version unchanged
        // and take a repeat for a new key.
        self.version = UNREAD;
        // Read first: at open, outside a transaction, each read below sees the database as it
        // is then, and a commit of another connection in between must show as a change at the
        // next `begin`.
        let version = data_version(conn)?;
        self.upto = conn.query_row("SELECT upto FROM receipt_keys_upto", [], |r| r.get(0))?;
        #[cfg(test)]
        fault::reload(conn)?;
        self.merged = Filter::load(conn)?;
        self.latest.clear();
        self.earlier.clear();
        let mut rows = conn.prepare_cached(
            "SELECT key_hash, rowid FROM receipts WHERE rowid > ?1 ORDER BY rowid",
        )?;
        let mut rows = rows.query([self.upto])?;
        while let Some(row) = rows.next()? {
            self.written(row.get(0)?, row.get(1)?);
        }
        self.version = version;
        Ok(())
    }

    /// At the start of a transaction of the writer (which holds the write lock): reads the
    /// rows again if another connection committed since, and merges if a merge is due.
    pub(super) fn begin(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        self.merging = None;
        if data_version(conn)? != self.version {
            self.reload(conn)?;
        }
        if self.merge_due || self.latest.len() + self.earlier.len() >= self.merge_at {
            // In a savepoint of its own: a merge that fails (a full disk, say) is rolled back
            // and tried again at a later transaction, and the requests of this one go on.
            conn.execute_batch("SAVEPOINT merge")?;
            match self.merge(conn) {
                Ok(()) => conn.execute_batch("RELEASE merge")?,
                Err(e) => {
                    self.merging = None;
                    conn.execute_batch("ROLLBACK TO merge; RELEASE merge")?;
                    tracing::warn!("the receipts' hashes were not merged, this time: {e}");
                }
            }
        }
        Ok(())
    }

    /// The transaction ended: a merge in it counts once it committed. `conn` reads the index
    /// again when the filter has grown past what it was sized for.
    pub(super) fn end(&mut self, conn: &Connection, committed: bool) {
        if let (Some(upto), true) = (self.merging.take(), committed) {
            self.upto = upto;
            self.merge_due = false;
            let merged = &mut self.merged;
            let mut keep = |hash: i64, id: i64| {
                if id <= upto {
                    merged.insert(hash);
                }
                id > upto
            };
            self.latest.retain(|hash, id| keep(*hash, *id));
            self.earlier.retain(|(hash, id)| keep(*hash, *id));
            if merged.is_full() {
                match Filter::load(conn) {
                    Ok(filter) => *merged = filter,
                    // Kept as it is: over its size it only answers "maybe" more often.
                    Err(e) => tracing::warn!("the receipts' key filter was not rebuilt: {e}"),
                }
            }
        }
    }

    /// Merges the hashes of the receipts after `upto`, up to the last rowid given out and
    /// committed (`sqlite_sequence`, which a deletion does not lower: the watermark never goes
    /// back, and the next receipt written is after it).
    fn merge(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let upto: i64 = conn.query_row(
            "SELECT max(?1, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'receipts'), 0))",
            [self.upto],
            |r| r.get(0),
        )?;
        conn.prepare_cached(
            "INSERT OR IGNORE INTO receipt_keys (key_hash, id)
                 SELECT key_hash, rowid FROM receipts WHERE rowid > ?1 ORDER BY key_hash",
        )?
        .execute([self.upto])?;
        conn.prepare_cached("UPDATE receipt_keys_upto SET upto = ?1")?
            .execute([upto])?;
        self.merging = Some(upto);
        Ok(())
    }

    /// A receipt was written with rowid `id` (its transaction may still roll back: the entry is
    /// then stale, and passed over; a rowid rolled back is given out again). A key written
    /// again and again (claimed, its work failing with a 5xx, released, claimed again) would
    /// leave a list of dead rowids to look at on each claim: past [`MAX_EARLIER`] for one hash,
    /// a merge is due, which keeps the live ones only. An entry is never taken out before then:
    /// the deletion that made it dead may yet be rolled back.
    pub(super) fn written(&mut self, hash: i64, id: i64) {
        match self.latest.insert(hash, id) {
            Some(before) if before != id => {
                self.earlier.push((hash, before));
                if self.earlier.iter().filter(|(h, _)| *h == hash).count() > MAX_EARLIER {
                    self.merge_due = true;
                }
            }
            _ => {}
        }
    }

    /// The rowids that may hold the receipt of a key with this hash, the latest first: the
    /// map's, then the index's.
    pub(super) fn candidates(&self, conn: &Connection, hash: i64) -> rusqlite::Result<Vec<i64>> {
        let mut ids: Vec<i64> = self.latest.get(&hash).copied().into_iter().collect();
        ids.extend(
            self.earlier
                .iter()
                .rev()
                .filter(|(h, _)| *h == hash)
                .map(|(_, id)| *id),
        );
        if !self.merged.may_hold(hash) {
            return Ok(ids);
        }
        let mut stmt = conn
            .prepare_cached("SELECT id FROM receipt_keys WHERE key_hash = ?1 ORDER BY id DESC")?;
        let found = stmt.query_map([hash], |r| r.get::<_, i64>(0))?;
        for id in found {
            ids.push(id?);
        }
        Ok(ids)
    }
}

/// The rowid of `hash`'s receipt for `tenant` and `key`, if there is one.
pub(super) fn find(
    recent: &Recent,
    conn: &Connection,
    hash: i64,
    tenant: &str,
    key: &str,
) -> rusqlite::Result<Option<i64>> {
    for id in recent.candidates(conn, hash)? {
        let here = conn
            .prepare_cached("SELECT 1 FROM receipts WHERE rowid = ?1 AND tenant = ?2 AND key = ?3")?
            .query_row(rusqlite::params![id, tenant, key], |_| Ok(()))
            .optional()?;
        if here.is_some() {
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Takes `id`'s entry out of `receipt_keys` (its receipt was deleted); a receipt only in the
/// map has none, and its entry there is passed over until the next merge.
pub(super) fn forget(conn: &Connection, hash: i64, id: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM receipt_keys WHERE key_hash = ?1 AND id = ?2")?
        .execute(rusqlite::params![hash, id])?;
    Ok(())
}

/// A Bloom filter of the hashes in `receipt_keys`: "not there" is certain, "maybe" is asked of
/// the table. So a new key, whose hash is in neither the map nor the filter, is written without
/// reading a page of the index (a page at a random place, for a UUID key). Sized for twice the
/// hashes it was loaded with (at least 65,536), 16 bits each and 4 probes (under 0.3 % of
/// "maybe" for an absent hash while within size); loaded again, twice as large, once it holds
/// more. A hash taken out of the table stays in the filter until then (a "maybe" more).
#[derive(Default)]
struct Filter {
    words: Vec<u64>,
    held: usize,
}

/// Bits per hash the filter is sized for.
const FILTER_BITS: usize = 16;

impl Filter {
    /// The hashes in `receipt_keys`.
    fn load(conn: &Connection) -> rusqlite::Result<Filter> {
        let count: i64 = conn.query_row("SELECT count(*) FROM receipt_keys", [], |r| r.get(0))?;
        let room = (2 * usize::try_from(count).unwrap_or(0)).max(1 << 16);
        let bits = (room * FILTER_BITS).next_power_of_two();
        let mut filter = Filter {
            words: vec![0; bits / 64],
            held: 0,
        };
        let mut stmt = conn.prepare("SELECT key_hash FROM receipt_keys")?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            filter.insert(row.get(0)?);
        }
        Ok(filter)
    }

    /// The filter's 4 bits for `hash` (a hash already spread evenly: the first bytes of a
    /// SHA-256), as (word, bit) pairs, in a filter of `words` words (a power of two).
    fn probes(words: usize, hash: i64) -> impl Iterator<Item = (usize, u64)> {
        let bits = (words * 64) as u64;
        let h = hash as u64;
        let (a, b) = (h & 0xffff_ffff, (h >> 32) | 1);
        (0..4u64).map(move |i| {
            let bit = a.wrapping_add(i.wrapping_mul(b)) & (bits - 1);
            ((bit / 64) as usize, 1u64 << (bit % 64))
        })
    }

    fn insert(&mut self, hash: i64) {
        if self.words.is_empty() {
            return;
        }
        for (word, bit) in Filter::probes(self.words.len(), hash) {
            self.words[word] |= bit;
        }
        self.held += 1;
    }

    /// Whether `receipt_keys` may hold `hash`; always, for a filter never loaded.
    fn may_hold(&self, hash: i64) -> bool {
        self.words.is_empty()
            || Filter::probes(self.words.len(), hash).all(|(word, bit)| self.words[word] & bit != 0)
    }

    fn is_full(&self) -> bool {
        self.held * FILTER_BITS > self.words.len() * 64
    }
}

/// Read at the start of every transaction of the writer: through the statement cache.
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spread of hashes, as SHA-256 gives them (SplitMix64).
    fn hashes(seed: u64, n: usize) -> Vec<i64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as i64
            })
            .collect()
    }

    #[test]
    fn the_filter_never_says_absent_for_a_merged_hash_and_rarely_says_maybe_for_another() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE receipt_keys (key_hash INTEGER NOT NULL, id INTEGER NOT NULL,
                 PRIMARY KEY (key_hash, id)) WITHOUT ROWID;",
        )
        .unwrap();
        let held = hashes(1, 50_000);
        for (id, hash) in held.iter().enumerate() {
            conn.execute(
                "INSERT INTO receipt_keys VALUES (?1, ?2)",
                rusqlite::params![hash, id as i64],
            )
            .unwrap();
        }
        let mut filter = Filter::load(&conn).unwrap();
        assert!(held.iter().all(|h| filter.may_hold(*h)), "loaded");
        // Sized for twice what it was loaded with: as many again go in by merges.
        let merged = hashes(2, 50_000);
        for hash in &merged {
            filter.insert(*hash);
        }
        assert!(merged.iter().all(|h| filter.may_hold(*h)), "merged");
        assert!(!filter.is_full(), "within its size");
        let others = hashes(3, 100_000);
        let maybe = others.iter().filter(|h| filter.may_hold(**h)).count();
        assert!(maybe < 1_000, "{maybe} of 100,000 absent hashes said maybe");
        // Past its size (the bits round up to a power of two: 131,072 hashes here) it says so,
        // to be loaded again larger.
        for hash in hashes(4, 40_000) {
            filter.insert(hash);
        }
        assert!(filter.is_full());
    }
}
