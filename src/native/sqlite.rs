//! # The SQLite store
//!
//! The embedded default: one file, created with mode `0600` (owner only: a record holds request
//! bodies), in WAL mode with `synchronous = FULL`, so a record is on disk before the attempt it
//! covers is sent. Its schema is versioned (`PRAGMA user_version`) and migrated forward on open;
//! a file from a newer oncekey, a foreign database or a damaged file is refused with a clear
//! [`Error::is_corrupt`] instead of being changed.
//!
//! Every method is one transaction; a claim is `BEGIN IMMEDIATE`, so two processes deciding
//! about the same lease are serialised by SQLite's own lock.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::error::{BoxError, Error, Result};
use super::store::{Claim, Lease, Listed, Store};
use crate::core::Timestamp;

/// The schema, one step per version: `MIGRATIONS[i]` takes `user_version` from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &["CREATE TABLE oncekey_pending (
        name        TEXT PRIMARY KEY NOT NULL,
        record      TEXT,
        lease_owner TEXT,
        lease_until INTEGER
    );"];

/// A [`Store`] in a SQLite file. See the module docs.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
}

fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> Error {
    let corrupt = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    );
    let message = format!("the store {} could not be {what}", path.display());
    if corrupt {
        Error::corrupt(
            format!("{message}: it is damaged or not a SQLite database (move it aside and restore a backup, or start a new store)"),
            e,
        )
    } else {
        Error::store(message, e)
    }
}

impl SqliteStore {
    /// Opens the store at `path`, creating it (mode `0600`) if it does not exist, and migrates
    /// its schema to this version.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        create_private(&path)?;
        let conn = Connection::open(&path).map_err(|e| sql_error(&path, "opened", e))?;
        let store = SqliteStore {
            conn: Mutex::new(conn),
            path,
        };
        store.prepare()?;
        Ok(store)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn prepare(&self) -> Result<()> {
        let mut conn = self.conn();
        let err = |what: &str, e| sql_error(&self.path, what, e);
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(|e| err("opened", e))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| err("read", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::store(
                format!(
                    "the store {} could not be put in WAL mode",
                    self.path.display()
                ),
                format!("journal_mode is {mode}"),
            ));
        }
        conn.execute_batch("PRAGMA synchronous = FULL;")
            .map_err(|e| err("opened", e))?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err("opened", e))?;
        let version: usize = tx
            .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
            .map_err(|e| err("read", e))?
            .try_into()
            .unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(Error::corrupt(
                format!(
                    "the store {} has schema version {version}, made by a newer oncekey; this one reads up to {}",
                    self.path.display(),
                    MIGRATIONS.len()
                ),
                "refusing to change it",
            ));
        }
        if version == 0 {
            let tables: i64 = tx
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| err("read", e))?;
            if tables > 0 {
                return Err(Error::corrupt(
                    format!(
                        "{} is a SQLite database of something else, not an oncekey store",
                        self.path.display()
                    ),
                    "refusing to change it",
                ));
            }
        }
        for (i, step) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(step).map_err(|e| err("migrated", e))?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)
                .map_err(|e| err("migrated", e))?;
        }
        tx.commit().map_err(|e| err("migrated", e))
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // The connection holds no state of ours between calls; a panic mid-call rolled back.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, what: &str, e: rusqlite::Error) -> BoxError {
        Box::new(sql_error(&self.path, what, e))
    }
}

#[cfg(unix)]
fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::store(
            format!("the store {} could not be created", path.display()),
            e,
        )),
    }
}

#[cfg(not(unix))]
fn create_private(_path: &Path) -> Result<()> {
    Ok(())
}

impl Store for SqliteStore {
    fn claim(&self, name: &str, lease: &Lease, now: Timestamp) -> Result<Claim, BoxError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.fail("written", e))?;
        let row: Option<(Option<String>, Option<String>, Option<i64>)> = tx
            .query_row(
                "SELECT record, lease_owner, lease_until FROM oncekey_pending WHERE name = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| self.fail("read", e))?;
        let record = match row {
            Some((record, Some(owner), Some(until))) => {
                let until = Timestamp::from_millis(until.max(0) as u64);
                if owner != lease.owner && until > now {
                    return Ok(Claim::Busy(Lease { owner, until }));
                }
                record
            }
            Some((record, _, _)) => record,
            None => None,
        };
        tx.execute(
            "INSERT INTO oncekey_pending (name, record, lease_owner, lease_until) VALUES (?1, NULL, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until",
            params![name, lease.owner, millis(lease.until)],
        )
        .map_err(|e| self.fail("written", e))?;
        tx.commit().map_err(|e| self.fail("written", e))?;
        Ok(Claim::Taken(record))
    }

    fn save(&self, name: &str, record: &str, lease: &Lease) -> Result<bool, BoxError> {
        let n = self
            .conn()
            .execute(
                "UPDATE oncekey_pending SET record = ?2, lease_until = ?4 WHERE name = ?1 AND lease_owner = ?3",
                params![name, record, lease.owner, millis(lease.until)],
            )
            .map_err(|e| self.fail("written", e))?;
        Ok(n == 1)
    }

    fn renew(&self, name: &str, lease: &Lease) -> Result<bool, BoxError> {
        let n = self
            .conn()
            .execute(
                "UPDATE oncekey_pending SET lease_until = ?3 WHERE name = ?1 AND lease_owner = ?2",
                params![name, lease.owner, millis(lease.until)],
            )
            .map_err(|e| self.fail("written", e))?;
        Ok(n == 1)
    }

    fn remove(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        let n = self
            .conn()
            .execute(
                "DELETE FROM oncekey_pending WHERE name = ?1 AND lease_owner = ?2",
                params![name, owner],
            )
            .map_err(|e| self.fail("written", e))?;
        Ok(n == 1)
    }

    fn release(&self, name: &str, owner: &str) -> Result<(), BoxError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.fail("written", e))?;
        tx.execute(
            "DELETE FROM oncekey_pending WHERE name = ?1 AND lease_owner = ?2 AND record IS NULL",
            params![name, owner],
        )
        .map_err(|e| self.fail("written", e))?;
        tx.execute(
            "UPDATE oncekey_pending SET lease_owner = NULL, lease_until = NULL WHERE name = ?1 AND lease_owner = ?2",
            params![name, owner],
        )
        .map_err(|e| self.fail("written", e))?;
        tx.commit().map_err(|e| self.fail("written", e))?;
        Ok(())
    }

    fn list(&self) -> Result<Vec<Listed>, BoxError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT name, record, lease_owner, lease_until FROM oncekey_pending
                 WHERE record IS NOT NULL ORDER BY name",
            )
            .map_err(|e| self.fail("read", e))?;
        let rows = stmt
            .query_map([], |r| {
                let owner: Option<String> = r.get(2)?;
                let until: Option<i64> = r.get(3)?;
                Ok(Listed {
                    name: r.get(0)?,
                    // A record that is not text is read as lossy text, so it fails to parse as a
                    // record (one unreadable record) instead of failing the whole list.
                    record: match r.get_ref(1)? {
                        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                            String::from_utf8_lossy(t).into_owned()
                        }
                        other => format!("{other:?}"),
                    },
                    lease: owner.zip(until).map(|(owner, until)| Lease {
                        owner,
                        until: Timestamp::from_millis(until.max(0) as u64),
                    }),
                })
            })
            .map_err(|e| self.fail("read", e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.fail("read", e))
    }
}

fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_store_has_the_semantics_across_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let a = SqliteStore::open(&path).unwrap();
        let b = SqliteStore::open(&path).unwrap();
        super::super::store::check_semantics(&a, &b);
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_private_and_reopens_at_the_same_version() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        drop(SqliteStore::open(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SqliteStore::open(&path).unwrap();
        let v: i64 = again
            .conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
    }

    #[test]
    fn foreign_newer_and_damaged_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
        let e = SqliteStore::open(&junk).unwrap_err();
        assert!(e.is_corrupt(), "{e:?}");
        assert!(e.to_string().contains("not a SQLite database"), "{e}");

        let foreign = dir.path().join("foreign.db");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = SqliteStore::open(&foreign).unwrap_err();
        assert!(
            e.is_corrupt() && e.to_string().contains("something else"),
            "{e}"
        );

        let newer = dir.path().join("newer.db");
        Connection::open(&newer)
            .unwrap()
            .execute_batch("PRAGMA user_version = 99")
            .unwrap();
        let e = SqliteStore::open(&newer).unwrap_err();
        assert!(
            e.is_corrupt() && e.to_string().contains("newer oncekey"),
            "{e}"
        );
    }
}
