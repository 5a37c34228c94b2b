//! A PostgreSQL database of its own for each test, in the cluster named by `ONCEKEY_PG_URL`
//! (`bash scripts/with-pg.sh` starts a throwaway one); without it, the test says it is skipped.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh database, dropped (with its connections) when this is dropped.
pub struct PgDb {
    /// Its URL, for the server's `--db`.
    pub url: String,
    name: String,
    cluster: String,
}

static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

/// A fresh database for `test`, or `None` (and a line saying the test is skipped) when no
/// PostgreSQL is configured.
pub fn fresh(test: &str) -> Option<PgDb> {
    let cluster = match std::env::var("ONCEKEY_PG_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            // Straight to the process's stderr, past the test harness's capture (which takes
            // what `eprintln!` prints), so the skip shows in `cargo test`'s output.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no PostgreSQL (ONCEKEY_PG_URL is unset; make test starts one)"
            );
            return None;
        }
    };
    let slug: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = format!(
        "oncekey_{slug}_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    sql(&cluster, |c| {
        c.batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .unwrap_or_else(|e| panic!("cannot create database {name}: {e:?}"))
    });
    Some(PgDb {
        url: with_dbname(&cluster, &name),
        name,
        cluster,
    })
}

impl PgDb {
    /// Runs `f` with a connection to this database (on a thread of its own: the synchronous
    /// client cannot run on the test's runtime).
    pub fn sql<T: Send>(&self, f: impl FnOnce(&mut postgres::Client) -> T + Send) -> T {
        sql(&self.url, f)
    }

    /// The one number `query` returns.
    pub fn count(&self, query: &str) -> i64 {
        self.sql(|c| {
            c.query_one(query, &[])
                .unwrap_or_else(|e| panic!("{query}: {e:?}"))
                .get(0)
        })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let cluster = self.cluster.clone();
        // Never a second panic while a failed test unwinds.
        let _ = std::thread::spawn(move || {
            if let Ok(mut c) = postgres::Client::connect(&cluster, postgres::NoTls) {
                let _ = c.batch_execute(&drop);
            }
        })
        .join();
    }
}

/// Runs `f` with a new connection to `url`, on a thread of its own.
pub fn sql<T: Send>(url: &str, f: impl FnOnce(&mut postgres::Client) -> T + Send) -> T {
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let mut client = postgres::Client::connect(url, postgres::NoTls)
                .unwrap_or_else(|e| panic!("cannot connect to PostgreSQL: {e:?}"));
            f(&mut client)
        });
        match worker.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// `url` with its database name replaced.
pub fn with_dbname(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    format!("{}/{name}{query}", &base[..host_end])
}
