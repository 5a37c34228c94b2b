//! The `oncekey` command line: outcomes as exit codes, clear messages, `--help`.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]

mod support;

use std::process::{Command, Output};

use support::*;

fn oncekey(args: &[&str]) -> Output {
    Command::new(cli_bin()).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs the command, which must fail (exit 1) with a message containing `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let out = oncekey(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

/// A server that answers every request with `raw` (a whole HTTP/1.1 answer) and closes.
fn answering(raw: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/payouts", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 65536];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(raw.as_bytes());
        }
    });
    url
}

#[test]
fn a_conflict_exits_4_and_a_misconfigured_key_exits_5() {
    // A script reads these codes; both are definite, neither is success, and neither is
    // retried. A mapping to 0 read a 422 as the payout made.
    let server = Server::start();
    let tenant = tenant("cli-codes");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let store = store.to_str().unwrap();
    let header = format!("X-Tenant: {tenant}");
    let url = server.tickets_url();
    let send = |name: &str, subject: &str| {
        let body = ticket(subject).to_string();
        oncekey(&[
            "send",
            "--store",
            store,
            "--name",
            name,
            "--derive-key",
            "payout-77",
            "-H",
            &header,
            "--json",
            &body,
            "POST",
            &url,
        ])
    };
    let out = send("first", "Payout 77");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The same derived key with another body: the server holds it for the first (422).
    let out = send("second", "Payout 77, changed");
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("conflict"),
        "{}",
        text(&out.stderr)
    );
    let tickets = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(server.tickets(&tenant));
    assert_eq!(tickets, 1);
    // A server that says the key is missing (400 naming it): a setup error.
    const MISSING: &str = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\n\
        Content-Length: 49\r\nConnection: close\r\n\r\n\
        {\"title\":\"the Idempotency-Key header is missing\"}";
    let out = oncekey(&[
        "send",
        "--store",
        store,
        "--name",
        "third",
        "--json",
        "{}",
        "POST",
        &answering(MISSING),
    ]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("misconfigured"),
        "{}",
        text(&out.stderr)
    );
    // Both definite: nothing is left to resume.
    let out = oncekey(&["list", "--store", store]);
    assert_eq!(text(&out.stdout), "", "{}", text(&out.stderr));
}

#[test]
fn help_explains_the_outcomes() {
    let out = oncekey(&["send", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in [
        "succeeded",
        "refused",
        "conflict",
        "misconfigured",
        "unsure",
        "oncekey resume",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
}

#[test]
fn send_resume_list_and_discard_with_exit_codes() {
    let server = Server::start();
    let tenant = tenant("cli");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let store = store.to_str().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, ticket("from the shell").to_string()).unwrap();
    let at_body = format!("@{}", body.display());
    let header = format!("X-Tenant: {tenant}");
    let url = server.tickets_url();

    let out = oncekey(&[
        "send", "--store", store, "--name", "t1", "-H", &header, "--json", &at_body, "POST", &url,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"subject\":\"from the shell\""));
    assert!(text(&out.stderr).contains("succeeded (201)"));

    // Refused (a bad ticket): exit 3, and says what to do.
    let out = oncekey(&[
        "send",
        "--store",
        store,
        "--name",
        "t2",
        "-H",
        &header,
        "--json",
        r#"{"subject":"","body":"","email":"x"}"#,
        "POST",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("refused"));

    // Unsure (every attempt fails): exit 6, the record is kept, listed, and resumable.
    let out = oncekey(&[
        "send",
        "--store",
        store,
        "--name",
        "t3",
        "-H",
        &header,
        "-H",
        "X-Fault: fail-before",
        "--attempts",
        "2",
        "--base",
        "10ms",
        "--json",
        &at_body,
        "POST",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("oncekey resume"));
    let out = oncekey(&["list", "--store", store]);
    assert!(
        text(&out.stdout).starts_with("t3\t"),
        "{}",
        text(&out.stdout)
    );
    // Another body under the pending name: exit 8, nothing sent.
    let out = oncekey(&[
        "send",
        "--store",
        store,
        "--name",
        "t3",
        "-H",
        &header,
        "--json",
        r#"{"subject":"x"}"#,
        "POST",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(8), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("pending"));
    let out = oncekey(&["discard", "--store", store, "--name", "t3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = oncekey(&["resume", "--store", store]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("nothing pending"));

    // Failures are non-zero with a clear message. A duration too long to hold is one (it
    // overflowed: a panic in a debug build), and so is a timeout over the client's bound.
    let out = oncekey(&[
        "send",
        "--store",
        store,
        "--name",
        "t6",
        "--timeout",
        "18446744073709551615m",
        "POST",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("too long a duration"),
        "{}",
        text(&out.stderr)
    );
    fails_with(
        &[
            "send",
            "--store",
            store,
            "--name",
            "t6",
            "--timeout",
            "2d",
            "POST",
            &url,
        ],
        "at most 1 day",
    );
    fails_with(
        &[
            "send", "--store", store, "--name", "t4", "--json", "{oops", "POST", &url,
        ],
        "error:",
    );
    fails_with(
        &[
            "send",
            "--store",
            "/nonexistent/dir/p.db",
            "--name",
            "t5",
            "POST",
            &url,
        ],
        "/nonexistent/dir/p.db",
    );
    fails_with(
        &[
            "send",
            "--store",
            store,
            "--name",
            "t6",
            "--secret-header",
            "Authorization=NOT_SET_ANYWHERE",
            "POST",
            &url,
        ],
        "NOT_SET_ANYWHERE",
    );
    fails_with(
        &[
            "send",
            "--store",
            store,
            "--name",
            "t7",
            "-H",
            "Authorization: Bearer x",
            "POST",
            &url,
        ],
        "secret",
    );

    // A corrupt store file: a clear error naming it.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, "not a database ".repeat(500)).unwrap();
    fails_with(
        &["resume", "--store", junk.to_str().unwrap()],
        "not a SQLite database",
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(server.tickets(&tenant)), 1);
}

#[test]
fn work_ends_when_only_unsure_submissions_are_left() {
    // `oncekey work` polls for due submissions until none is left but the unsure ones. An
    // unsure one was due again at once on SQLite: each poll took it up, so the loop never
    // paused nor ended.
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let store = store.to_str().unwrap();
    let header = format!("X-Tenant: {}", tenant("work"));
    let url = server.tickets_url();
    let policy = [
        "--attempts",
        "2",
        "--base",
        "10ms",
        "--timeout",
        "300ms",
        "--lease",
        "300ms",
    ];
    let mut send = vec!["send", "--store", store, "--name", "w1", "-H", &header];
    send.extend(["-H", "X-Fault: fail-before", "--json", r#"{"subject":"x"}"#]);
    send.extend(policy);
    send.extend(["POST", &url]);
    let out = oncekey(&send);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    let mut work = vec!["work", "--store", store, "--poll", "20ms"];
    work.extend(policy);
    let mut child = Command::new(cli_bin())
        .args(&work)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > std::time::Duration::from_secs(20) {
            child.kill().unwrap();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stderr = text(&child.wait_with_output().unwrap().stderr);
    let status = status.unwrap_or_else(|| panic!("still polling after 20 s: {stderr}"));
    assert_eq!(status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("w1"), "{stderr}");
    // Still stored, with its key, for `oncekey resume`.
    let out = oncekey(&["list", "--store", store]);
    assert!(
        text(&out.stdout).starts_with("w1\t"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn an_unreadable_record_is_moved_aside_and_listed_as_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    drop(oncekey::SqliteStore::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "INSERT INTO oncekey_pending (name, record) VALUES ('payout-9', '{\"v\":7}')",
            [],
        )
        .unwrap();
    let store = path.to_str().unwrap();
    let out = oncekey(&["list", "--store", store]);
    assert!(
        text(&out.stdout).starts_with("payout-9\tUNREADABLE"),
        "{}",
        text(&out.stdout)
    );

    let out = oncekey(&["resume", "--store", store]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("payout-9") && said.contains("quarantine"),
        "{said}"
    );
    assert_eq!(text(&oncekey(&["list", "--store", store]).stdout), "");
    let out = oncekey(&["list", "--store", store, "--quarantined"]);
    let listed = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.starts_with("payout-9\t"), "{listed}");
    assert!(
        listed.contains("version 7") && listed.contains(r#"{\"v\":7}"#),
        "{listed}"
    );
    // Nothing is left to resume.
    let out = oncekey(&["resume", "--store", store]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("nothing pending"));
}

#[test]
fn an_expired_record_exits_9_and_is_sent_as_new_only_when_asked() {
    let server = Server::start();
    let tenant = tenant("cli-expired");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    let store = oncekey::SqliteStore::open(&path).unwrap();
    let url = server.tickets_url();
    let key = left_behind(
        &store,
        &url,
        &tenant,
        "old",
        std::time::Duration::from_secs(25 * 3600),
    );
    drop(store);
    let store = path.to_str().unwrap();

    let out = oncekey(&["resume", "--store", store]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(
        stderr.contains("expired") && stderr.contains("send-as-new"),
        "{stderr}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(server.tickets(&tenant)), 0, "nothing was sent");
    let listed = text(&oncekey(&["list", "--store", store]).stdout);
    assert!(listed.contains(key.as_str()), "kept: {listed}");
    assert!(listed.contains("EXPIRED"), "says so: {listed}");

    // Checked (no ticket exists): sent as new, deliberately.
    let out = oncekey(&["send-as-new", "--store", store, "--name", "old"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(rt.block_on(server.tickets(&tenant)), 1);
    assert!(!text(&oncekey(&["list", "--store", store]).stdout).contains("old"));

    let help = text(&oncekey(&["resume", "--help"]).stdout);
    assert!(
        help.contains("9  expired") && help.contains("--key-lifetime"),
        "{help}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_server_said_outlives_a_killed_process() {
    // A process killed while it waited out a `Retry-After: 3` left a record that `oncekey
    // resume` took over at once (its holder is dead) and sent at once, early. And a round the
    // server ended (`x-should-retry: false`) was sent again by every `oncekey resume`, its
    // round not being spent.
    let stub = Stub::start(vec![
        (503, vec![("retry-after", "3")]),
        (503, vec![("x-should-retry", "false")]),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let store = store.to_str().unwrap();
    let url = format!("{}/payouts", stub.url);
    let cli = || tokio::process::Command::new(cli_bin());
    let mut sender = cli()
        .args([
            "send",
            "--store",
            store,
            "--name",
            "p1",
            "--json",
            r#"{"amount":5}"#,
        ])
        .args(["--lease", "300ms", "POST", &url])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let seen = || stub.seen.lock().unwrap().len();
    while seen() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let first = std::time::Instant::now();
    // The 503 read and the wait begun; then the crash.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    sender.kill().await.unwrap();

    let out = cli()
        .args(["resume", "--store", store])
        .output()
        .await
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert_eq!(seen(), 2, "{stderr}");
    let waited = first.elapsed();
    assert!(
        waited >= std::time::Duration::from_millis(2500),
        "resent {waited:?} after the first attempt, before the server's 3 s"
    );
    assert!(stderr.contains("server said not to retry"), "{stderr}");

    // Resumed again (twice): settled unsure again, nothing sent.
    for _ in 0..2 {
        let out = cli()
            .args(["resume", "--store", store])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
        assert_eq!(seen(), 2, "{}", text(&out.stderr));
    }
    // A deliberate new round: the same key, and done.
    let out = cli()
        .args(["resume", "--again", "--store", store])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let keys = stub.keys();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
}

#[test]
fn store_addresses_and_work_batches_are_checked() {
    // libpq's key=value address was taken for a SQLite file name: a fleet's processes each
    // made a store of their own in their working directory, with no message.
    let dir = tempfile::tempdir().unwrap();
    for address in [
        "host=127.0.0.1 port=1 dbname=nowhere user=app connect_timeout=1",
        "POSTGRES://app@127.0.0.1:1/nowhere",
    ] {
        let out = Command::new(cli_bin())
            .current_dir(dir.path())
            .args(["list", "--store", address])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{address}: {}",
            text(&out.stderr)
        );
        let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(made.is_empty(), "{address}: a file was made: {made:?}");
    }
    // A batch of 0 took nothing and polled for ever; over 64, leases ran out in the queue.
    let store = dir.path().join("p.db");
    let store = store.to_str().unwrap();
    for batch in ["0", "65"] {
        let out = oncekey(&["work", "--store", store, "--batch", batch]);
        assert_eq!(out.status.code(), Some(2), "{batch}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("--batch"),
            "{}",
            text(&out.stderr)
        );
    }
    // --again never waits: asking for both is a usage error, not a silent --again.
    let out = oncekey(&["resume", "--store", store, "--again", "--wait"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Leaves a submission in `store` as a process that died after sending it once would: a ticket
/// with `body`, and `headers` stored with it.
fn left_with(
    store: &dyn oncekey::Store,
    url: &str,
    name: &str,
    body: &str,
    headers: &[(&str, &str)],
) {
    let key = oncekey::Key::derive(
        &uuid::Uuid::from_u128(0x6f6e_6365_6b65_7900_8000_0000_0000_00cc),
        &format!("{name}-{}", now_ms()),
    );
    let then = oncekey::Timestamp::from_millis(now_ms() - 1000);
    let mut record = sent_once(url, "", name, key, then);
    let mut request = oncekey::Request::new("POST", url, body, oncekey::Encoding::Json).unwrap();
    for (header, value) in headers {
        request = request.header(header, value).unwrap();
    }
    record.request = request;
    let lease = oncekey::Lease {
        owner: "gone".into(),
        until: oncekey::Timestamp::from_millis(now_ms() + 60_000),
    };
    store
        .claim(name, &lease, oncekey::Timestamp::from_millis(now_ms()))
        .unwrap();
    assert!(store.save(name, &record.to_json(), &lease).unwrap());
    store.release(name, "gone").unwrap();
}

#[test]
fn a_run_over_several_submissions_exits_with_the_most_urgent_code() {
    // `oncekey resume` and `oncekey work` exited with the largest of their submissions' codes:
    // a failure (1, here an unreadable record moved aside) ranked under a refusal (3), and the
    // run exited 3 as if every submission had had its answer.
    let server = Server::start();
    let tenant = tenant("cli-urgent");
    let tenant_header = ("X-Tenant", tenant.as_str());
    let url = server.tickets_url();
    let refused = r#"{"subject":"","body":"","email":"x"}"#;
    let dir = tempfile::tempdir().unwrap();
    for command in ["resume", "work"] {
        let path = dir.path().join(format!("{command}.db"));
        let store = oncekey::SqliteStore::open(&path).unwrap();
        left_with(&store, &url, "bad-ticket", refused, &[tenant_header]);
        drop(store);
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "INSERT INTO oncekey_pending (name, record) VALUES ('payout-9', '{\"v\":7}')",
                [],
            )
            .unwrap();
        let out = oncekey(&[command, "--store", path.to_str().unwrap()]);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {said}");
        assert!(
            said.contains("payout-9") && said.contains("quarantine"),
            "{command}: {said}"
        );
        assert!(
            said.contains("bad-ticket") && said.contains("refused"),
            "{command}: {said}"
        );
    }

    // A submission still stored with its key (unsure: every attempt fails) outranks a refusal,
    // which is settled.
    let path = dir.path().join("unsure.db");
    let store = oncekey::SqliteStore::open(&path).unwrap();
    left_with(&store, &url, "bad-ticket", refused, &[tenant_header]);
    let fault = ("X-Fault", "fail-before");
    left_with(
        &store,
        &url,
        "kept",
        &ticket("kept").to_string(),
        &[tenant_header, fault],
    );
    drop(store);
    let store = path.to_str().unwrap();
    let out = oncekey(&[
        "resume",
        "--store",
        store,
        "--attempts",
        "2",
        "--base",
        "10ms",
    ]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{said}");
    assert!(
        said.contains("refused") && said.contains("unsure"),
        "{said}"
    );
    assert!(
        text(&oncekey(&["list", "--store", store]).stdout).starts_with("kept\t"),
        "kept with its key"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(server.tickets(&tenant)), 0);
    let help = text(&oncekey(&["resume", "--help"]).stdout);
    assert!(help.contains("most urgent"), "{help}");
}
