//! Tickets with files (`multipart/form-data`) over real HTTP, on SQLite and on PostgreSQL: one
//! key makes one ticket with its files, whose listed SHA-256 is the file's; the same key with
//! other files is a `422`; an upload over `--max-upload` is a `413`; malformed multipart is a
//! `400` naming what was wrong; the bytes come back from `GET /api/tickets/{id}/attachments/{n}`.
//! Past `--upload-memory`, uploads in flight together, one more is a `503` that claims nothing and
//! whose retry makes its ticket; a body that fails gives its room back. Downloads count against
//! the same budget until their answer is sent or dropped.
//!
//! The PostgreSQL runs need `ONCEKEY_PG_URL` (`bash scripts/with-pg.sh cargo test -p
//! oncekey-server --test attachments`); without it they say they are skipped.

mod common;

use common::{send, send_until_definite, Answer, Desk, TICKET};
use oncekey_server::Config;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A file part: (field name, file name, media type, bytes).
type FilePart<'a> = (&'a str, &'a str, &'a str, &'a [u8]);

const BOUNDARY: &str = "----oncekey-test-boundary-7MA4YWxkTrZu0gW";

const FIELDS: &[(&str, &str)] = &[
    ("subject", "Printer on fire"),
    ("body", "Third floor, again."),
    ("email", "ada@example.com"),
];

/// A `multipart/form-data` body of these fields and files, as a browser writes one.
fn multipart(fields: &[(&str, &str)], files: &[FilePart]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    for (field, file, media, bytes) in files {
        out.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{file}\"\r\nContent-Type: {media}\r\n\r\n"
            )
            .as_bytes(),
        );
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A file a few chunks long, with every byte value in it (not text).
fn screenshot() -> Vec<u8> {
    (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn upload(desk: &Desk, key: Option<&str>, body: Vec<u8>) -> reqwest::RequestBuilder {
    upload_as(
        desk,
        key,
        &format!("multipart/form-data; boundary={BOUNDARY}"),
        body,
    )
}

fn upload_as(
    desk: &Desk,
    key: Option<&str>,
    content_type: &str,
    body: Vec<u8>,
) -> reqwest::RequestBuilder {
    let mut request = desk
        .client
        .post(desk.url("/api/tickets"))
        .header("X-Tenant", &desk.tenant)
        .header("Content-Type", content_type)
        .body(body);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request
}

async fn get_attachment(
    desk: &Desk,
    tenant: &str,
    path: &str,
) -> (Answer, reqwest::header::HeaderMap) {
    let response = desk
        .client
        .get(desk.url(path))
        .header("X-Tenant", tenant)
        .send()
        .await
        .unwrap();
    let headers = response.headers().clone();
    (Answer::read(response).await, headers)
}

/// Runs `scenario` on a desk of its own on SQLite, and on PostgreSQL when one is configured.
macro_rules! on_both_stores {
    ($sqlite:ident, $pg:ident, $scenario:ident, $config:expr) => {
        #[tokio::test]
        async fn $sqlite() {
            let desk = Desk::with("uploads-sqlite", $config).await;
            $scenario(&desk).await;
            desk.server.shutdown().await;
        }

        #[tokio::test]
        async fn $pg() {
            let Some(db) = common::pg::fresh(concat!("attachments::", stringify!($pg))) else {
                return;
            };
            let desk = Desk::with(
                "uploads-pg",
                Config {
                    db: db.url.clone(),
                    db_connections: 2,
                    ..$config
                },
            )
            .await;
            $scenario(&desk).await;
            desk.server.shutdown().await;
            drop(db);
        }
    };
}

fn faults() -> Config {
    Config {
        faults: true,
        lease: std::time::Duration::from_millis(300),
        ..Config::default()
    }
}

fn small_uploads() -> Config {
    Config {
        max_upload: 100_000,
        ..faults()
    }
}

async fn a_lost_reply_then_a_retry_makes_one_ticket_with_the_files_bytes(desk: &Desk) {
    let file = screenshot();
    let body = || {
        multipart(
            FIELDS,
            &[("attachment", "screen shot.png", "image/png", &file)],
        )
    };
    let lost = upload(desk, Some("k-upload"), body())
        .header("X-Fault", "drop-reply")
        .send()
        .await;
    if let Ok(r) = lost {
        panic!(
            "the first reply is lost, not {}",
            String::from_utf8_lossy(&r.bytes().await.unwrap())
        );
    }
    let retry = send_until_definite(|| upload(desk, Some("k-upload"), body())).await;
    assert_eq!(
        retry.status,
        201,
        "{}",
        String::from_utf8_lossy(&retry.body)
    );
    assert!(retry.replayed, "the retry gets the first answer");
    let listed = desk.tickets().await;
    assert_eq!(listed.len(), 1, "one ticket: {listed:?}");
    assert_eq!(
        retry.json(),
        listed[0],
        "the answer is the ticket as listed"
    );
    let ticket = &listed[0];
    assert_eq!(ticket["subject"], "Printer on fire");
    let files = ticket["attachments"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{ticket}");
    assert_eq!(files[0]["name"], "screen shot.png");
    assert_eq!(files[0]["type"], "image/png");
    assert_eq!(files[0]["size"], file.len());
    assert_eq!(files[0]["sha256"], sha256_hex(&file).as_str());
    let id = ticket["id"].as_i64().unwrap();
    let (got, headers) = get_attachment(
        desk,
        &desk.tenant,
        &format!("/api/tickets/{id}/attachments/0"),
    )
    .await;
    assert_eq!(got.status, 200);
    assert_eq!(got.content_type, "image/png");
    assert_eq!(sha256_hex(&got.body), sha256_hex(&file));
    assert_eq!(got.body, file);
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(
        headers["content-disposition"],
        "attachment; filename*=UTF-8''screen%20shot.png"
    );
    // Another tenant, another number, or no number at all: 404.
    for (tenant, path) in [
        ("someone-else", format!("/api/tickets/{id}/attachments/0")),
        (
            desk.tenant.as_str(),
            format!("/api/tickets/{id}/attachments/1"),
        ),
        (
            desk.tenant.as_str(),
            format!("/api/tickets/{id}/attachments/-1"),
        ),
        (
            desk.tenant.as_str(),
            format!("/api/tickets/{id}/attachments/x"),
        ),
        (
            desk.tenant.as_str(),
            "/api/tickets/99999/attachments/0".into(),
        ),
    ] {
        let (got, _) = get_attachment(desk, tenant, &path).await;
        assert_eq!(got.status, 404, "{tenant} {path}");
        assert_eq!(got.content_type, "application/problem+json");
    }
    assert_eq!(desk.stat("tickets").await, 1);
}

on_both_stores!(
    a_lost_reply_then_a_retry_makes_one_ticket_with_the_files_bytes_sqlite,
    a_lost_reply_then_a_retry_makes_one_ticket_with_the_files_bytes_pg,
    a_lost_reply_then_a_retry_makes_one_ticket_with_the_files_bytes,
    faults()
);

async fn the_same_key_with_other_files_is_a_422(desk: &Desk) {
    let file = screenshot();
    let first = send(upload(
        desk,
        Some("k-files"),
        multipart(FIELDS, &[("attachment", "a.png", "image/png", &file)]),
    ))
    .await;
    assert_eq!(first.status, 201);
    let mut other = file.clone();
    other[100_000] ^= 1;
    let others: [(&str, Vec<u8>); 5] = [
        (
            "one byte changed",
            multipart(FIELDS, &[("attachment", "a.png", "image/png", &other)]),
        ),
        (
            "another name",
            multipart(FIELDS, &[("attachment", "b.png", "image/png", &file)]),
        ),
        (
            "another type",
            multipart(FIELDS, &[("attachment", "a.png", "image/jpeg", &file)]),
        ),
        ("no file", multipart(FIELDS, &[])),
        (
            "one file more",
            multipart(
                FIELDS,
                &[
                    ("attachment", "a.png", "image/png", &file),
                    ("attachment", "c.txt", "text/plain", b"hello"),
                ],
            ),
        ),
    ];
    for (what, body) in others {
        let again = send(upload(desk, Some("k-files"), body)).await;
        assert_eq!(again.status, 422, "{what}");
        assert_eq!(again.content_type, "application/problem+json", "{what}");
        assert_eq!(again.invalid_names(), ["Idempotency-Key"], "{what}");
    }
    // The first body again is still its first answer.
    let repeat = send(upload(
        desk,
        Some("k-files"),
        multipart(FIELDS, &[("attachment", "a.png", "image/png", &file)]),
    ))
    .await;
    assert!(repeat.replayed);
    assert_eq!(repeat.body, first.body);
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.stat("conflicts").await, 5);
}

on_both_stores!(
    the_same_key_with_other_files_is_a_422_sqlite,
    the_same_key_with_other_files_is_a_422_pg,
    the_same_key_with_other_files_is_a_422,
    faults()
);

async fn an_upload_over_the_limit_is_a_413_problem_and_stores_nothing(desk: &Desk) {
    // --max-upload is 100,000 bytes here.
    let big = vec![7u8; 100_001];
    let answer = send(upload(
        desk,
        Some("k-big"),
        multipart(
            FIELDS,
            &[("attachment", "big.bin", "application/octet-stream", &big)],
        ),
    ))
    .await;
    assert_eq!(
        answer.status,
        413,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.content_type, "application/problem+json");
    let problem = answer.json();
    assert_eq!(problem["type"], "urn:oncekey:problem:body-too-large");
    assert!(
        problem["detail"].as_str().unwrap().contains("100000 bytes"),
        "{problem}"
    );
    assert_eq!(answer.invalid_names(), ["body"]);
    assert_eq!(desk.stat("tickets").await, 0);
    assert_eq!(desk.stat("receipts").await, 0);
    // Just under the limit is fine, and the JSON limit (--max-body) is its own.
    let fits = vec![7u8; 90_000];
    let ok = send(upload(
        desk,
        Some("k-fits"),
        multipart(
            FIELDS,
            &[("attachment", "fits.bin", "application/octet-stream", &fits)],
        ),
    ))
    .await;
    assert_eq!(ok.status, 201);
    let json = format!(
        r#"{{"subject":"Big","body":"{}","email":"ada@example.com"}}"#,
        "a".repeat(70_000)
    );
    assert_eq!(send(desk.post(Some("k-json"), &json)).await.status, 413);
    assert_eq!(desk.stat("tickets").await, 1);
}

on_both_stores!(
    an_upload_over_the_limit_is_a_413_problem_and_stores_nothing_sqlite,
    an_upload_over_the_limit_is_a_413_problem_and_stores_nothing_pg,
    an_upload_over_the_limit_is_a_413_problem_and_stores_nothing,
    small_uploads()
);

#[tokio::test]
async fn malformed_multipart_is_a_400_naming_what_was_wrong() {
    let desk = Desk::start("malformed-multipart").await;
    let good = multipart(FIELDS, &[("attachment", "a.txt", "text/plain", b"hello")]);
    let truncated = good[..good.len() - 30].to_vec();
    let seventeen: Vec<(String, Vec<u8>)> = (0..17)
        .map(|i| (format!("f{i}.txt"), vec![b'x'; 3]))
        .collect();
    let seventeen: Vec<FilePart> = seventeen
        .iter()
        .map(|(n, b)| ("attachment", n.as_str(), "text/plain", b.as_slice()))
        .collect();
    let mut unnamed =
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nwho am I\r\n").into_bytes();
    unnamed.extend_from_slice(&multipart(FIELDS, &[])[..]);
    let mut not_text =
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"subject\"\r\n\r\n")
            .into_bytes();
    not_text.extend_from_slice(&[0xff, 0xfe, b'\r', b'\n']);
    not_text.extend_from_slice(&multipart(&FIELDS[1..], &[])[..]);
    let long_name = format!("{}.txt", "n".repeat(296));
    // Fields beyond the 64 a ticket could use (each one more shifted every field after it
    // in the sorted list: 400,000 of them took minutes of CPU), and a text over 64 Ki characters.
    let names: Vec<String> = (0..62).map(|i| format!("extra-{i:02}")).collect();
    let mut many: Vec<(&str, &str)> = FIELDS.to_vec();
    many.extend(names.iter().map(|n| (n.as_str(), "x")));
    let long_text = "x".repeat(64 * 1024 + 1);
    let long_body: Vec<(&str, &str)> = FIELDS
        .iter()
        .map(|&(n, v)| {
            if n == "body" {
                (n, long_text.as_str())
            } else {
                (n, v)
            }
        })
        .collect();
    let multipart_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let cases: Vec<(&str, &str, Vec<u8>, &str, &str)> = vec![
        (
            "no boundary",
            "multipart/form-data",
            good.clone(),
            "invalid-multipart",
            "Content-Type",
        ),
        (
            "another boundary",
            "multipart/form-data; boundary=nope",
            good.clone(),
            "invalid-multipart",
            "body",
        ),
        (
            "cut short",
            &multipart_type,
            truncated,
            "invalid-multipart",
            "body",
        ),
        (
            "not multipart at all",
            &multipart_type,
            TICKET.as_bytes().to_vec(),
            "invalid-multipart",
            "body",
        ),
        (
            "a part with no name",
            &multipart_type,
            unnamed,
            "invalid-multipart",
            "body",
        ),
        (
            "seventeen files",
            &multipart_type,
            multipart(FIELDS, &seventeen),
            "invalid-multipart",
            "attachment",
        ),
        (
            "a file name of 300 bytes",
            &multipart_type,
            multipart(FIELDS, &[("attachment", &long_name, "text/plain", b"x")]),
            "invalid-multipart",
            "attachment",
        ),
        (
            "a field that is not UTF-8",
            &multipart_type,
            not_text,
            "invalid-multipart",
            "subject",
        ),
        (
            "65 fields",
            &multipart_type,
            multipart(&many, &[]),
            "invalid-multipart",
            "body",
        ),
        (
            "a text of 64 Ki + 1 characters",
            &multipart_type,
            multipart(&long_body, &[]),
            "invalid-ticket",
            "body",
        ),
        (
            "no subject",
            &multipart_type,
            multipart(&FIELDS[1..], &[("attachment", "a.txt", "text/plain", b"x")]),
            "invalid-ticket",
            "subject",
        ),
    ];
    for (i, (what, content_type, body, kind, named)) in cases.into_iter().enumerate() {
        let key = format!("k-bad-{i}");
        let answer = send(upload_as(&desk, Some(&key), content_type, body.clone())).await;
        assert_eq!(
            answer.status,
            400,
            "{what}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(answer.content_type, "application/problem+json", "{what}");
        let problem = answer.json();
        assert_eq!(
            problem["type"],
            format!("urn:oncekey:problem:{kind}"),
            "{what}: {problem}"
        );
        assert_eq!(answer.invalid_names(), [named], "{what}: {problem}");
        // Like any answer to a keyed request, it is kept: the repeat gets it again.
        let again = send(upload_as(&desk, Some(&key), content_type, body)).await;
        assert!(again.replayed, "{what}");
        assert_eq!(again.body, answer.body, "{what}");
    }
    // A file input left empty (an empty part with an empty file name) is no file.
    let empty = send(upload(
        &desk,
        Some("k-empty-input"),
        multipart(
            FIELDS,
            &[("attachment", "", "application/octet-stream", b"")],
        ),
    ))
    .await;
    assert_eq!(empty.status, 201);
    assert_eq!(empty.json()["attachments"], Value::Array(vec![]));
    // 64 fields, and a text of exactly 64 Ki characters, are taken.
    many.pop();
    let mut at_most: Vec<(&str, &str)> = many.clone();
    let exactly = "x".repeat(64 * 1024);
    for field in at_most.iter_mut().filter(|f| f.0 == "body") {
        field.1 = exactly.as_str();
    }
    let taken = send(upload(&desk, Some("k-at-most"), multipart(&at_most, &[]))).await;
    assert_eq!(
        taken.status,
        201,
        "{}",
        String::from_utf8_lossy(&taken.body)
    );
    assert_eq!(desk.stat("tickets").await, 2);
}

/// A part's header section up to its data (`data` is sent as is, with no closing boundary
/// unless it holds one).
fn part_named(name: &str, file_name: Option<&str>, data: &str) -> Vec<u8> {
    let file = file_name.map_or(String::new(), |f| format!("; filename=\"{f}\""));
    format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n{data}")
        .into_bytes()
}

/// Before, a part's name was copied whole into its `400`, Debug-escaped and then JSON-escaped,
/// in the detail and again in `invalid-params`, and that answer stored as the key's: a 512 KiB
/// name of backslashes made an answer (and a receipt, replayed on every retry) of 2 to 4 MiB.
#[tokio::test]
async fn a_part_name_over_255_bytes_is_a_400_that_does_not_quote_it() {
    let desk = Desk::start("long-part-name").await;
    // Backslashes, which each escaping doubles; the last character ends the quoted name.
    let long = format!("{}n", "\\".repeat(512 * 1024));
    let closing = format!("\r\n--{BOUNDARY}--\r\n");
    let cases = [
        // A file part with an empty file name and some bytes (refused, naming the part, before).
        (
            "a file part",
            part_named(&long, Some(""), &format!("x{closing}")),
        ),
        // Cut inside the part's data (multer's error, holding the name, before).
        ("a part cut short", part_named(&long, None, "x")),
        (
            "a text field",
            part_named(&long, None, &format!("x{closing}")),
        ),
    ];
    for (i, (what, body)) in cases.into_iter().enumerate() {
        let key = format!("k-long-name-{i}");
        let answer = send(upload(&desk, Some(&key), body.clone())).await;
        assert_eq!(answer.status, 400, "{what}");
        let problem = answer.json();
        assert_eq!(
            problem["type"], "urn:oncekey:problem:invalid-multipart",
            "{what}"
        );
        assert_eq!(answer.invalid_names(), ["body"], "{what}: {problem}");
        let reason = problem["invalid-params"][0]["reason"].as_str().unwrap();
        assert!(reason.contains("at most 255"), "{what}: {reason}");
        assert!(
            answer.body.len() < 1024,
            "{what}: a {} byte answer",
            answer.body.len()
        );
        let again = send(upload(&desk, Some(&key), body)).await;
        assert!(again.replayed, "{what}");
        assert_eq!(again.body, answer.body, "{what}");
    }
    // A name of 255 bytes is a name; cut short, its 400 quotes only its first characters.
    let name = "n".repeat(255);
    let mut body = part_named(&name, None, "x\r\n");
    body.extend_from_slice(&multipart(FIELDS, &[])[..]);
    let taken = send(upload(&desk, Some("k-name-255"), body)).await;
    assert_eq!(
        taken.status,
        201,
        "{}",
        String::from_utf8_lossy(&taken.body)
    );
    let cut = send(upload(
        &desk,
        Some("k-name-cut"),
        part_named(&name, None, "x"),
    ))
    .await;
    assert_eq!(cut.status, 400);
    let text = String::from_utf8_lossy(&cut.body);
    assert!(text.contains(&"n".repeat(40)), "{text}");
    assert!(!text.contains(&"n".repeat(41)), "{text}");
    assert_eq!(desk.stat("tickets").await, 1);
}

#[tokio::test]
async fn a_multipart_ticket_without_files_is_the_same_body_as_its_json_twin() {
    let desk = Desk::start("multipart-json-twin").await;
    let first = send(desk.post(Some("k-twin"), TICKET)).await;
    assert_eq!(first.status, 201);
    assert_eq!(first.json()["attachments"], Value::Array(vec![]));
    let twin = send(upload(&desk, Some("k-twin"), multipart(FIELDS, &[]))).await;
    assert!(twin.replayed, "{}", String::from_utf8_lossy(&twin.body));
    assert_eq!(twin.body, first.body);
    // With a file it is another body.
    let with_file = send(upload(
        &desk,
        Some("k-twin"),
        multipart(FIELDS, &[("attachment", "a.txt", "text/plain", b"x")]),
    ))
    .await;
    assert_eq!(with_file.status, 422);
    assert_eq!(desk.stat("tickets").await, 1);
}

/// `body` posted as `multipart/form-data` to the route without keys.
fn plain_multipart(desk: &Desk, body: Vec<u8>) -> reqwest::RequestBuilder {
    desk.client
        .post(desk.url("/api/plain/tickets"))
        .header("X-Tenant", &desk.tenant)
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body)
}

#[tokio::test]
async fn the_plain_route_takes_uploads_too_and_makes_a_ticket_per_request() {
    let desk = Desk::start("plain-upload").await;
    let file = screenshot();
    for _ in 0..2 {
        let answer = send(plain_multipart(
            &desk,
            multipart(FIELDS, &[("attachment", "a.png", "image/png", &file)]),
        ))
        .await;
        assert_eq!(answer.status, 201);
    }
    let listed = desk.tickets().await;
    assert_eq!(listed.len(), 2, "no key, no protection: two tickets");
    for ticket in listed {
        assert_eq!(
            ticket["attachments"][0]["sha256"],
            sha256_hex(&file).as_str()
        );
    }
}

#[tokio::test]
async fn a_max_upload_over_its_cap_stops_the_server_at_start() {
    let refused = oncekey_server::start(Config {
        max_upload: oncekey_server::api::MAX_UPLOAD_CAP + 1,
        ..Config::default()
    })
    .await
    .expect_err("refused");
    assert!(refused.to_string().contains("--max-upload"), "{refused}");
}

/// A desk whose bodies may hold 150,000 bytes of memory at once, each upload at most 100,000.
fn small_budget() -> Config {
    Config {
        max_upload: 100_000,
        upload_memory: Some(150_000),
        body_read_timeout: std::time::Duration::from_secs(1),
        ..faults()
    }
}

/// An upload of a file of `size` bytes.
fn upload_of(desk: &Desk, key: &str, size: usize) -> reqwest::RequestBuilder {
    let file = vec![7u8; size];
    upload(
        desk,
        Some(key),
        multipart(
            FIELDS,
            &[("attachment", "f.bin", "application/octet-stream", &file)],
        ),
    )
}

/// A multipart body of `size` bytes that is not multipart, sent where nothing is ever stored
/// for it (a `400`): whether the budget has room for `size` bytes now (`503` when not).
async fn probe(desk: &Desk, size: usize) -> u16 {
    let answer = send(plain_multipart(desk, vec![b'x'; size])).await;
    assert!(matches!(answer.status, 400 | 503), "{answer:?}");
    answer.status
}

/// Probes until the budget has no room for `size` bytes (bounded: 200 probes).
async fn wait_until_full_for(desk: &Desk, size: usize) {
    for _ in 0..200 {
        if probe(desk, size).await == 503 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the budget never filled up");
}

/// Sends a request's header section and the first bytes of its body over raw TCP, and leaves
/// the rest unsent.
async fn begin_slow_upload(desk: &Desk, length: Option<usize>) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(desk.server.addr())
        .await
        .unwrap();
    let framing = match length {
        Some(n) => format!("Content-Length: {n}"),
        None => "Transfer-Encoding: chunked".to_owned(),
    };
    let head = format!(
        "POST /api/tickets HTTP/1.1\r\nHost: x\r\nX-Tenant: {}\r\nIdempotency-Key: k-slow\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n{framing}\r\n\r\n",
        desk.tenant
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let start = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"subject\"\r\n\r\n");
    let first = match length {
        Some(_) => start,
        None => format!("{:x}\r\n{start}\r\n", start.len()),
    };
    stream.write_all(first.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn uploads_beyond_the_memory_budget_get_a_503_and_the_retry_makes_one_ticket() {
    let desk = Desk::with("upload-memory", small_budget()).await;
    // The first upload holds 90,000 of the 150,000 bytes while its work is held a while.
    let first = tokio::spawn({
        let request = upload_of(&desk, "k-first", 90_000).header("X-Fault", "delay=1500");
        async move { send(request).await }
    });
    desk.wait_for_stat("processing", 1).await;
    // A second one as large does not fit: 503, retry after a second, nothing claimed.
    let refused = send(upload_of(&desk, "k-second", 90_000)).await;
    assert_eq!(
        refused.status,
        503,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert_eq!(refused.content_type, "application/problem+json");
    let problem = refused.json();
    assert_eq!(problem["type"], "urn:oncekey:problem:body-memory-busy");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("--upload-memory, 150000 bytes"),
        "{problem}"
    );
    assert_eq!(
        desk.stat("processing").await,
        1,
        "the refused key is not claimed"
    );
    // A small ticket fits beside the first.
    assert_eq!(send(desk.post(Some("k-small"), TICKET)).await.status, 201);
    assert_eq!(first.await.unwrap().status, 201);
    // The refused upload's retry, with its key, does the work once the room is back.
    let retry = send_until_definite(|| upload_of(&desk, "k-second", 90_000)).await;
    assert_eq!(
        retry.status,
        201,
        "{}",
        String::from_utf8_lossy(&retry.body)
    );
    assert!(!retry.replayed, "the 503 did nothing");
    let again = send(upload_of(&desk, "k-second", 90_000)).await;
    assert!(again.replayed);
    assert_eq!(again.body, retry.body);
    let tickets = desk.tickets().await;
    assert_eq!(
        tickets.len(),
        3,
        "k-first, k-small and k-second once: {tickets:?}"
    );
    assert_eq!(desk.stat("processing").await, 0);
    desk.server.shutdown().await;
}

#[tokio::test]
async fn a_body_that_never_arrives_or_breaks_off_gives_its_memory_back() {
    use tokio::io::AsyncReadExt;
    let desk = Desk::with("upload-memory-back", small_budget()).await;
    // 90,000 bytes declared, a few sent: the room is held while the rest is awaited...
    let mut slow = begin_slow_upload(&desk, Some(90_000)).await;
    wait_until_full_for(&desk, 90_000).await;
    // ...until the body read timeout (1 s) answers 408.
    let mut heard = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        slow.read_to_end(&mut heard),
    )
    .await
    .expect("answered");
    let heard = String::from_utf8_lossy(&heard);
    assert!(heard.starts_with("HTTP/1.1 408"), "{heard}");
    // All of it came back: 99,000 bytes fit in 150,000 only if the 90,000 were given back.
    let after = send(upload_of(&desk, "k-after-timeout", 99_000)).await;
    assert_eq!(
        after.status,
        201,
        "{}",
        String::from_utf8_lossy(&after.body)
    );
    // A chunked body declares no length: its limit (100,000) is held, so 60,000 more do not fit.
    let chunked = begin_slow_upload(&desk, None).await;
    wait_until_full_for(&desk, 60_000).await;
    // The client goes away mid-body: the body cannot be read, and its room comes back.
    drop(chunked);
    let mut after = None;
    for _ in 0..200 {
        let answer = send(upload_of(&desk, "k-after-close", 99_000)).await;
        if answer.status != 503 {
            after = Some(answer);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let after = after.expect("the room came back");
    assert_eq!(
        after.status,
        201,
        "{}",
        String::from_utf8_lossy(&after.body)
    );
    assert_eq!(desk.tickets().await.len(), 2);
    assert_eq!(
        desk.stat("receipts").await,
        2,
        "the broken bodies claimed nothing"
    );
    assert_eq!(desk.stat("processing").await, 0);
    desk.server.shutdown().await;
}

/// The size of the file the download budget tests send: larger than what the kernel's socket
/// buffers take from a connection whose client reads nothing, so its answer's body stays
/// unsent.
const LARGE: usize = 8 * 1024 * 1024;

/// A desk whose bodies may hold 12,000,000 bytes of memory at once: one download of a
/// [`LARGE`] file, not two.
fn download_budget() -> Config {
    Config {
        max_upload: 9_000_000,
        upload_memory: Some(12_000_000),
        ..faults()
    }
}

/// Uploads a ticket with these files (name, bytes) under `key`; its id.
async fn ticket_with(desk: &Desk, key: &str, files: &[(&str, &[u8])]) -> i64 {
    let parts: Vec<FilePart> = files
        .iter()
        .map(|(name, bytes)| ("attachment", *name, "application/octet-stream", *bytes))
        .collect();
    let created = send(upload(desk, Some(key), multipart(FIELDS, &parts))).await;
    assert_eq!(
        created.status,
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    created.json()["id"].as_i64().unwrap()
}

async fn download(desk: &Desk, path: &str) -> Answer {
    get_attachment(desk, &desk.tenant, path).await.0
}

/// Gets `path` until it is answered `status` (bounded: 15 s, 10 ms apart); that answer.
async fn download_until(desk: &Desk, path: &str, status: u16) -> Answer {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while std::time::Instant::now() < deadline {
        let answer = download(desk, path).await;
        if answer.status == status {
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{path} was never answered {status} within 15 s");
}

/// Reads from `stream` until the end of an answer's header section (bounded: 10 s), and no
/// further; that section.
async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut heard = Vec::new();
    let mut byte = [0u8; 1];
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while !heard.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap() == 1 {
            heard.push(byte[0]);
        }
    })
    .await
    .expect("a header section");
    String::from_utf8_lossy(&heard).into_owned()
}

/// Sends `GET path` over raw TCP with a small receive buffer and reads the answer's header
/// section, then nothing more: the client of a download that stalls mid-way.
async fn begin_unread_download(desk: &Desk, path: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut stream = socket.connect(desk.server.addr()).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nX-Tenant: {}\r\n\r\n",
        desk.tenant
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream
}

/// Asserts that `answer` is the budget's `503`.
fn assert_busy(answer: &Answer) {
    let start = &answer.body[..answer.body.len().min(300)];
    assert_eq!(answer.status, 503, "{}", String::from_utf8_lossy(start));
    assert_eq!(answer.retry_after.as_deref(), Some("1"));
    assert_eq!(answer.content_type, "application/problem+json");
    assert_eq!(
        answer.json()["type"],
        "urn:oncekey:problem:body-memory-busy"
    );
}

async fn downloads_count_against_the_memory_budget(desk: &Desk) {
    let large: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
    let small = vec![3u8; 1000];
    let id = ticket_with(
        desk,
        "k-files",
        &[("large.bin", &large), ("small.bin", &small)],
    )
    .await;
    let large_path = format!("/api/tickets/{id}/attachments/0");
    let small_path = format!("/api/tickets/{id}/attachments/1");
    // One after another, two downloads fit: each gives its room back once sent.
    for _ in 0..2 {
        let got = download(desk, &large_path).await;
        assert_eq!(got.status, 200);
        assert!(got.body == large, "the file's bytes");
    }
    // An upload that declared 9,000,000 bytes holds them while it waits for its body: the large
    // file does not fit beside it (503, retry after a second), the small one does.
    let slow = begin_slow_upload(desk, Some(9_000_000)).await;
    assert_busy(&download_until(desk, &large_path, 503).await);
    let got = download(desk, &small_path).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, small);
    // The client goes away: the room comes back, and the file is whole.
    drop(slow);
    let got = download_until(desk, &large_path, 200).await;
    assert!(got.body == large, "the file's bytes after the 503");
    // A download whose client reads nothing holds its room while its body is unsent: another
    // download of the large file is a 503, and so is an upload that does not fit beside it.
    let unread = begin_unread_download(desk, &large_path).await;
    assert_busy(&download(desk, &large_path).await);
    let mut upload = begin_slow_upload(desk, Some(5_000_000)).await;
    let head = read_head(&mut upload).await;
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(head.contains("retry-after: 1\r\n"), "{head}");
    drop(upload);
    assert_eq!(download(desk, &small_path).await.status, 200);
    // Its client goes away mid-body: the room comes back, and the file is whole.
    drop(unread);
    let got = download_until(desk, &large_path, 200).await;
    assert!(
        got.body == large,
        "the file's bytes after a dropped download"
    );
    // The same for a client that read some of it first.
    let mut unread = begin_unread_download(desk, &large_path).await;
    let mut some = vec![0u8; 100_000];
    tokio::io::AsyncReadExt::read_exact(&mut unread, &mut some)
        .await
        .unwrap();
    assert_eq!(some, large[..100_000]);
    assert_busy(&download(desk, &large_path).await);
    drop(unread);
    let got = download_until(desk, &large_path, 200).await;
    assert!(
        got.body == large,
        "the file's bytes after a dropped download"
    );
    assert_eq!(desk.stat("tickets").await, 1);
}

on_both_stores!(
    downloads_count_against_the_memory_budget_sqlite,
    downloads_count_against_the_memory_budget_pg,
    downloads_count_against_the_memory_budget,
    download_budget()
);

/// Starts a desk on `db` that stores a ticket with a file of 150,000 bytes (`--max-upload`
/// 200,000), stops it, and starts one on `db` whose whole budget is 120,000 bytes: the file,
/// stored under the larger limit, does not fit it.
async fn a_file_larger_than_the_whole_budget_is_sent_alone(db: &str) {
    let file: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8).collect();
    let desk = Desk::with(
        "download-larger",
        Config {
            db: db.to_owned(),
            db_connections: 2,
            max_upload: 200_000,
            ..faults()
        },
    )
    .await;
    let id = ticket_with(&desk, "k-large", &[("large.bin", &file)]).await;
    let tenant = desk.tenant.clone();
    desk.server.shutdown().await;
    let mut desk = Desk::with(
        "download-larger",
        Config {
            db: db.to_owned(),
            db_connections: 2,
            max_upload: 100_000,
            upload_memory: Some(120_000),
            ..faults()
        },
    )
    .await;
    desk.tenant = tenant;
    let path = format!("/api/tickets/{id}/attachments/0");
    // Nothing else held: sent, holding the whole budget.
    let got = download(&desk, &path).await;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert!(got.body == file);
    // Anything else held, even 10,000 bytes: not beside it.
    let slow = begin_slow_upload(&desk, Some(10_000)).await;
    assert_busy(&download_until(&desk, &path, 503).await);
    drop(slow);
    let got = download_until(&desk, &path, 200).await;
    assert!(got.body == file);
    desk.server.shutdown().await;
}

#[tokio::test]
async fn a_file_larger_than_the_whole_budget_is_sent_alone_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("desk.db").to_str().unwrap().to_owned();
    a_file_larger_than_the_whole_budget_is_sent_alone(&db).await;
}

#[tokio::test]
async fn a_file_larger_than_the_whole_budget_is_sent_alone_pg() {
    let Some(db) = common::pg::fresh("attachments::download_larger_pg") else {
        return;
    };
    a_file_larger_than_the_whole_budget_is_sent_alone(&db.url).await;
}

/// A desk like [`download_budget`]'s whose answers wait at most `send_timeout` on a client
/// that takes none of their bytes.
fn send_timeout_budget(send_timeout: std::time::Duration) -> Config {
    Config {
        send_timeout,
        ..download_budget()
    }
}

#[tokio::test]
async fn a_download_whose_client_stops_reading_is_closed_after_the_send_timeout_and_gives_its_room_back(
) {
    use tokio::io::AsyncReadExt;
    let send_timeout = std::time::Duration::from_secs(2);
    let desk = Desk::with("send-timeout", send_timeout_budget(send_timeout)).await;
    let large: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
    let id = ticket_with(&desk, "k-large", &[("large.bin", &large)]).await;
    let path = format!("/api/tickets/{id}/attachments/0");
    let asked = std::time::Instant::now();
    let mut unread = begin_unread_download(&desk, &path).await;
    // Before the send timeout its answer holds the room: another download of it is a 503.
    assert_busy(&download(&desk, &path).await);
    // After it, the server has closed that connection and dropped the answer: the room is back.
    let got = download_until(&desk, &path, 200).await;
    let freed = asked.elapsed();
    assert!(got.body == large, "the file's bytes");
    assert!(
        freed >= send_timeout && freed < send_timeout + std::time::Duration::from_secs(10),
        "the room came back after {freed:?}; the send timeout is {send_timeout:?}"
    );
    // The client, reading on, finds its connection ended (a reset, or the end of what was
    // sent), never the whole file.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        unread.read_to_end(&mut rest),
    )
    .await
    .expect("the connection is closed, not waiting");
    assert!(
        rest.len() < LARGE,
        "{} bytes of {LARGE} ({read:?}): the answer was cut",
        rest.len()
    );
    desk.server.shutdown().await;
}

#[tokio::test]
async fn a_download_whose_client_reads_slowly_but_steadily_is_not_cut() {
    use tokio::io::AsyncReadExt;
    let send_timeout = std::time::Duration::from_secs(1);
    let desk = Desk::with("send-steady", send_timeout_budget(send_timeout)).await;
    let large: Vec<u8> = (0..LARGE).map(|i| (i % 251) as u8).collect();
    let id = ticket_with(&desk, "k-large", &[("large.bin", &large)]).await;
    let path = format!("/api/tickets/{id}/attachments/0");
    let mut reader = begin_unread_download(&desk, &path).await;
    // 16 KiB every 100 ms for three send timeouts: the socket's buffers stay full all along
    // (the kernel wakes a writer only once a third of its send buffer is free, megabytes on
    // loopback), yet the client takes bytes within every timeout.
    let mut got = vec![0u8; 16 * 1024];
    let mut taken = Vec::new();
    for _ in 0..30 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        reader.read_exact(&mut got).await.expect("still open");
        taken.extend_from_slice(&got);
    }
    // Then the rest at once: the whole file, byte for byte.
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        reader.read_to_end(&mut taken),
    )
    .await
    .expect("the rest within 30 s")
    .expect("the rest, not a reset");
    assert_eq!(taken.len(), LARGE);
    assert!(taken == large, "the file's bytes");
    desk.server.shutdown().await;
}

#[tokio::test]
async fn an_upload_memory_below_a_body_limit_stops_the_server_at_start() {
    let refused = oncekey_server::start(Config {
        max_upload: 100_000,
        upload_memory: Some(99_999),
        ..Config::default()
    })
    .await
    .expect_err("refused");
    let said = refused.to_string();
    assert!(
        said.contains("--upload-memory (99999) must be at least --max-upload (100000)"),
        "{said}"
    );
    let refused = oncekey_server::start(Config {
        max_body: 200_000,
        max_upload: 100_000,
        upload_memory: Some(150_000),
        ..Config::default()
    })
    .await
    .expect_err("refused");
    assert!(
        refused.to_string().contains("--max-body (200000)"),
        "{refused}"
    );
    let refused = oncekey_server::start(Config {
        max_body: oncekey_server::api::MAX_UPLOAD_CAP + 1,
        ..Config::default()
    })
    .await
    .expect_err("refused");
    assert!(
        refused.to_string().contains("--max-body must be at most"),
        "{refused}"
    );
}

/// A SQLite desk that answered one ticket under the key `k-old`, then stopped, its database put
/// back as an older server left it (`downgrade`, SQL run on the stopped database), and started
/// again: the desk, that first answer, the database's path and the folder that holds it.
async fn downgraded_sqlite(
    label: &str,
    downgrade: &str,
) -> (Desk, Answer, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("desk.db").to_str().unwrap().to_owned();
    let config = || Config {
        db: db.clone(),
        ..Config::default()
    };
    let desk = Desk::with(label, config()).await;
    let first = send(desk.post(Some("k-old"), TICKET)).await;
    assert_eq!(first.status, 201);
    let tenant = desk.tenant.clone();
    desk.server.shutdown().await;
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(downgrade).unwrap();
    }
    let mut desk = Desk::with(label, config()).await;
    desk.tenant = tenant;
    (desk, first, db, dir)
}

/// What version 5 added, which older versions do not have: the index of receipts' hashes.
const RECEIPT_KEYS: &str = "DROP TABLE receipt_keys; DROP TABLE receipt_keys_upto;";

/// What versions 1 and 2 kept their receipts in: a table ordered by (tenant, key).
const RECEIPTS_BY_KEY: &str = "
    CREATE TABLE receipts_by_key (
        tenant TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('processing', 'done')),
        claim_token INTEGER NOT NULL, lease_until INTEGER NOT NULL, status INTEGER,
        content_type TEXT, response BLOB, ticket_id INTEGER REFERENCES tickets (id),
        created_at INTEGER NOT NULL, completed_at INTEGER,
        PRIMARY KEY (tenant, key),
        CHECK (state = 'processing' OR (status IS NOT NULL AND response IS NOT NULL))
    ) WITHOUT ROWID;
    INSERT INTO receipts_by_key SELECT tenant, key, fingerprint, state, claim_token,
        lease_until, status, content_type, response, ticket_id, created_at, completed_at
    FROM receipts;
    DROP TABLE receipts;
    ALTER TABLE receipts_by_key RENAME TO receipts;
    CREATE INDEX receipts_by_age ON receipts (created_at);
";

/// The schema version a SQLite database is at.
fn sqlite_version(db: &str) -> i64 {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_version_1_sqlite_database_is_migrated_and_keeps_its_tickets() {
    // What a version 1 server left: no attachments table, its receipts ordered by key.
    let (desk, first, db, _dir) = downgraded_sqlite(
        "migrate",
        &format!(
            "BEGIN; DROP TABLE attachments; {RECEIPTS_BY_KEY} {RECEIPT_KEYS} PRAGMA user_version = 1; COMMIT;"
        ),
    )
    .await;
    let listed = desk.tickets().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["id"], first.json()["id"]);
    let replay = send(desk.post(Some("k-old"), TICKET)).await;
    assert!(replay.replayed);
    let upload = send(upload(
        &desk,
        Some("k-new"),
        multipart(FIELDS, &[("attachment", "a.txt", "text/plain", b"hello")]),
    ))
    .await;
    assert_eq!(
        upload.status,
        201,
        "{}",
        String::from_utf8_lossy(&upload.body)
    );
    assert_eq!(sqlite_version(&db), 5);
    desk.server.shutdown().await;
}

/// After a migration: the old key's answer, byte for byte, and its other body still a
/// conflict; a new key makes a ticket; the database is at the current version.
async fn keeps_its_receipts(desk: Desk, first: Answer, db: &str) {
    let replay = send(desk.post(Some("k-old"), TICKET)).await;
    assert!(replay.replayed);
    assert_eq!(replay.status, 201);
    assert_eq!(replay.body, first.body);
    let other = send(desk.post(
        Some("k-old"),
        r#"{"subject":"Another","body":"Another body","email":"a@example.com"}"#,
    ))
    .await;
    assert_eq!(other.status, 422);
    let second = send(desk.post(Some("k-new"), TICKET)).await;
    assert_eq!(second.status, 201);
    assert!(!second.replayed);
    assert_eq!(desk.tickets().await.len(), 2);
    assert_eq!(desk.stat("receipts").await, 2);
    assert_eq!(sqlite_version(db), 5);
    desk.server.shutdown().await;
}

#[tokio::test]
async fn a_version_2_sqlite_database_is_migrated_and_keeps_its_receipts() {
    // What a version 2 server left: its receipts in a table ordered by key.
    let (desk, first, db, _dir) = downgraded_sqlite(
        "migrate-2",
        &format!("BEGIN; {RECEIPTS_BY_KEY} {RECEIPT_KEYS} PRAGMA user_version = 2; COMMIT;"),
    )
    .await;
    keeps_its_receipts(desk, first, &db).await;
}

/// What a version 3 or 4 server left: its receipts in a rowid table of today's columns but
/// `id`, found by (tenant, key) (3), or by their hash, stored and indexed (4).
fn rowid_receipts(version: u32) -> String {
    let (hash, copied, key, index) = match version {
        4 => (
            "key_hash INTEGER NOT NULL,",
            "key_hash,",
            "",
            "CREATE INDEX receipts_by_hash ON receipts (key_hash);",
        ),
        _ => ("", "", "PRIMARY KEY (tenant, key),", ""),
    };
    format!(
        "BEGIN; {RECEIPT_KEYS}
         CREATE TABLE receipts_old ({hash}
             tenant TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL,
             state TEXT NOT NULL CHECK (state IN ('processing', 'done')),
             claim_token INTEGER NOT NULL, lease_until INTEGER NOT NULL, status INTEGER,
             content_type TEXT, response BLOB, ticket_id INTEGER REFERENCES tickets (id),
             created_at INTEGER NOT NULL, completed_at INTEGER,
             {key}
             CHECK (state = 'processing' OR (status IS NOT NULL AND response IS NOT NULL))
         );
         INSERT INTO receipts_old SELECT {copied} tenant, key, fingerprint, state, claim_token,
             lease_until, status, content_type, response, ticket_id, created_at, completed_at
         FROM receipts;
         DROP TABLE receipts;
         ALTER TABLE receipts_old RENAME TO receipts;
         {index}
         CREATE INDEX receipts_by_age ON receipts (created_at);
         PRAGMA user_version = {version};
         COMMIT;"
    )
}

#[tokio::test]
async fn a_version_3_sqlite_database_is_migrated_and_keeps_its_receipts() {
    // What a version 3 server left: its receipts found by (tenant, key), with no hash.
    let (desk, first, db, _dir) = downgraded_sqlite("migrate-3", &rowid_receipts(3)).await;
    keeps_its_receipts(desk, first, &db).await;
}

#[tokio::test]
async fn a_version_4_sqlite_database_is_migrated_and_keeps_its_receipts() {
    // What a version 4 server left: its receipts found by an index of their hashes.
    let (desk, first, db, _dir) = downgraded_sqlite("migrate-4", &rowid_receipts(4)).await;
    keeps_its_receipts(desk, first, &db).await;
}

#[tokio::test]
async fn keys_that_share_a_hash_keep_a_receipt_each() {
    // The receipt of `k-old` renamed `k-twin`, keeping its hash: `k-twin` then shares the
    // hash of `k-old`, as two keys would if their hashes collided.
    let (desk, first, _db, _dir) = downgraded_sqlite(
        "hash-twins",
        "UPDATE receipts SET key = 'k-twin' WHERE key = 'k-old';",
    )
    .await;
    // `k-old` has no receipt any more: a new ticket, not the twin's answer.
    let again = send(desk.post(Some("k-old"), TICKET)).await;
    assert_eq!(again.status, 201);
    assert!(!again.replayed);
    assert_ne!(again.body, first.body);
    // And from now on replays its own answer.
    let old = send(desk.post(Some("k-old"), TICKET)).await;
    assert!(old.replayed);
    assert_eq!(old.body, again.body);
    assert_eq!(desk.tickets().await.len(), 2);
    assert_eq!(desk.stat("receipts").await, 2);
    desk.server.shutdown().await;
}

#[tokio::test]
async fn a_version_1_postgres_database_is_migrated_and_keeps_its_tickets() {
    let Some(db) = common::pg::fresh("attachments::pg_migrate") else {
        return;
    };
    let config = || Config {
        db: db.url.clone(),
        db_connections: 2,
        ..Config::default()
    };
    let desk = Desk::with("migrate-pg", config()).await;
    let first = send(desk.post(Some("k-old"), TICKET)).await;
    assert_eq!(first.status, 201);
    let tenant = desk.tenant.clone();
    desk.server.shutdown().await;
    // What a version 1 server left: no attachments table.
    db.sql(|c| {
        c.batch_execute("DROP TABLE attachments; UPDATE oncekey_server_schema SET version = 1")
            .unwrap()
    });
    let mut desk = Desk::with("migrate-pg", config()).await;
    desk.tenant = tenant;
    assert_eq!(desk.tickets().await.len(), 1);
    assert!(send(desk.post(Some("k-old"), TICKET)).await.replayed);
    let upload = send(upload(
        &desk,
        Some("k-new"),
        multipart(FIELDS, &[("attachment", "a.txt", "text/plain", b"hello")]),
    ))
    .await;
    assert_eq!(
        upload.status,
        201,
        "{}",
        String::from_utf8_lossy(&upload.body)
    );
    desk.server.shutdown().await;
    assert_eq!(
        db.count("SELECT max(version)::bigint FROM oncekey_server_schema"),
        2
    );
    assert_eq!(db.count("SELECT count(*) FROM oncekey_server_schema"), 1);
    assert_eq!(db.count("SELECT count(*) FROM attachments"), 1);
}
