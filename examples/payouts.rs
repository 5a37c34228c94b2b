//! Pays out a table of withdrawals exactly once, even across crashes and restarts.
//!
//! Each withdrawal row has a durable id; the idempotency key is derived from it
//! (`Key::derive(PAYOUTS, "withdrawal-<id>")`), so a rerun after any crash computes the same key,
//! and the provider answers a payout it already made with a replay instead of paying twice.
//! Pending submissions are kept in `oncekey.db` and finished first on start.
//!
//! The reference server stands in for the payment provider (a payout becomes a ticket):
//!
//! ```sh
//! cargo build -p oncekey-server && target/debug/oncekey-server --addr 127.0.0.1:8080 --db :memory: --faults &
//! cargo run --example payouts -- http://127.0.0.1:8080/api/tickets /tmp/payouts
//! ```
//!
//! Kill it at any point and run it again: every withdrawal is paid once.

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
mod app {
    use std::path::PathBuf;
    use std::time::Duration;

    use oncekey::{Client, Key, Outcome, RetryPolicy, SqliteStore};
    use rusqlite::{params, Connection};

    /// The namespace of this application's payout keys (any fixed UUID of your own).
    const PAYOUTS: uuid::Uuid = uuid::Uuid::from_u128(0x7061_796f_7574_7300_8000_0000_0000_0001);

    #[tokio::main(flavor = "current_thread")]
    pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
        let mut args = std::env::args().skip(1);
        let url = args
            .next()
            .unwrap_or_else(|| "http://127.0.0.1:8080/api/tickets".to_owned());
        let dir = PathBuf::from(args.next().unwrap_or_else(|| ".".to_owned()));
        std::fs::create_dir_all(&dir)?;

        // The application's own table of withdrawals (made up on the first run).
        let db = Connection::open(dir.join("withdrawals.db"))?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS withdrawals (
                 id INTEGER PRIMARY KEY, account TEXT NOT NULL, cents INTEGER NOT NULL,
                 state TEXT NOT NULL DEFAULT 'due', note TEXT);",
        )?;
        if db.query_row("SELECT count(*) FROM withdrawals", [], |r| {
            r.get::<_, i64>(0)
        })? == 0
        {
            for id in 1..=20i64 {
                db.execute(
                    "INSERT INTO withdrawals (id, account, cents) VALUES (?1, ?2, ?3)",
                    params![id, format!("acct-{:03}", id * 7 % 100), 1_000 + id * 125],
                )?;
            }
        }

        let client = Client::builder()
            .store(SqliteStore::open(dir.join("oncekey.db"))?)
            .retry(RetryPolicy {
                attempts: 10,
                base: Duration::from_millis(200),
                ..RetryPolicy::default()
            })
            .timeout(Duration::from_secs(10))
            // A provider token would go here; it is sent on every attempt and never stored:
            // .secret_header("Authorization", &std::env::var("PAYOUT_TOKEN")?)
            .build()?;

        // Whatever a crash left pending is finished first, with its stored key and body.
        for r in client.resume_pending().await? {
            match r.result {
                Ok(s) => println!("resumed {s}"),
                Err(e) => eprintln!("could not resume {}: {e}", r.name),
            }
        }

        let due: Vec<(i64, String, i64)> = db
            .prepare("SELECT id, account, cents FROM withdrawals WHERE state = 'due' ORDER BY id")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        for (id, account, cents) in due {
            let settled = client
                .submission(&format!("payout-{id}"))
                .key(Key::derive(&PAYOUTS, &format!("withdrawal-{id}")))
                .post(&url)
                .header("X-Tenant", "payouts")
                .json(&serde_json::json!({
                    "subject": format!("Payout of withdrawal {id}"),
                    "body": format!("Pay {}.{:02} EUR to {account}", cents / 100, cents % 100),
                    "email": "payouts@example.com",
                }))?
                .send()
                .await;
            let (state, note) = match &settled {
                Ok(s) => match s.outcome() {
                    Outcome::Succeeded => ("paid", s.to_string()),
                    // Left due: the next run resumes it with the same key.
                    Outcome::Unsure => ("due", s.to_string()),
                    // Past the payment API's key lifetime: a person checks the payout at the
                    // provider, then sends it as new (`Client::send_as_new`) or discards it.
                    Outcome::Expired => ("check", s.to_string()),
                    Outcome::Refused | Outcome::Conflict | Outcome::Misconfigured => {
                        ("failed", s.to_string())
                    }
                },
                Err(e) => ("due", e.to_string()),
            };
            println!("withdrawal {id}: {note}");
            db.execute(
                "UPDATE withdrawals SET state = ?2, note = ?3 WHERE id = ?1",
                params![id, state, note],
            )?;
        }
        let paid: i64 = db.query_row(
            "SELECT count(*) FROM withdrawals WHERE state = 'paid'",
            [],
            |r| r.get(0),
        )?;
        println!("{paid} of 20 withdrawals paid");
        Ok(())
    }
}

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    app::main()
}

/// A server-side example: nothing to run in the browser build.
#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
fn main() {}
