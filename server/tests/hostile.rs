//! Hostile input over raw TCP against the real server (in-process, on 127.0.0.1): oversized
//! bodies and headers, slow header sections, bad JSON, bad keys, bad framing, path traversal,
//! long tenant names, and generated request lines. Each case must get a clear `4xx`, or a closed
//! connection where HTTP has no answer; must store no ticket; must not panic the server; and a
//! bystander must be served meanwhile. The suite prints its table to stderr past the test
//! harness's capture.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use oncekey_server::{Config, Server};

const TICKET: &str =
    r#"{"subject":"Printer on fire","body":"Third floor, again.","email":"ada@example.com"}"#;
const SECRET: &str = "TOP SECRET: outside every static folder";
const HOSTILE: &str = "hostile";

/// Panics anywhere in this process (the server's tasks included), counted.
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    });
}

/// What the server's log said, for the tests that look for a line in it.
static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOG.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture_log() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("oncekey_server=warn")
            .with_ansi(false)
            .with_writer(|| LogWriter)
            .try_init();
    });
}

/// A server on its own runtime, with short timeouts, static folders beside a secret file.
struct Desk {
    runtime: tokio::runtime::Runtime,
    server: Option<Server>,
    addr: SocketAddr,
    _root: tempfile::TempDir,
}

impl Desk {
    fn start(tweak: impl FnOnce(&mut Config)) -> Desk {
        count_panics();
        capture_log();
        let root = tempfile::tempdir().unwrap();
        let (www, pkg) = (root.path().join("www"), root.path().join("pkg"));
        std::fs::create_dir(&www).unwrap();
        std::fs::create_dir(&pkg).unwrap();
        std::fs::write(www.join("index.html"), "<h1>Help desk</h1>").unwrap();
        std::fs::write(pkg.join("oncekey.js"), "export {}").unwrap();
        std::fs::write(root.path().join("secret.txt"), SECRET).unwrap();
        let mut config = Config {
            www: Some(www),
            pkg: Some(pkg),
            faults: true,
            header_read_timeout: Duration::from_secs(1),
            keep_alive_timeout: Duration::from_secs(1),
            body_read_timeout: Duration::from_secs(1),
            ..Config::default()
        };
        tweak(&mut config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = runtime
            .block_on(oncekey_server::start(config))
            .expect("server starts");
        Desk {
            addr: server.addr(),
            server: Some(server),
            runtime,
            _root: root,
        }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// Sends `request` on a connection of its own and reads what comes back.
    fn exchange(&self, request: &[u8]) -> Heard {
        let mut stream = self.connect();
        let started = Instant::now();
        // A server may answer and close before reading everything; what it answered counts.
        let _ = stream.write_all(request);
        heard(&mut BufReader::new(stream), started)
    }

    /// A GET for `tenant` on a connection of its own.
    fn get(&self, path: &str, tenant: &str) -> Reply {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nX-Tenant: {tenant}\r\nConnection: close\r\n\r\n"
        );
        match self.exchange(request.as_bytes()) {
            Heard::Answer(reply) => reply,
            other => panic!("GET {path}: {other:?}"),
        }
    }

    fn tickets(&self, tenant: &str) -> usize {
        let reply = self.get("/api/tickets?limit=10000", tenant);
        assert_eq!(reply.status, 200);
        let list: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        list.as_array().unwrap().len()
    }

    fn receipts(&self, tenant: &str) -> i64 {
        let reply = self.get("/api/stats", tenant);
        let stats: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        stats["receipts"].as_i64().unwrap() + stats["processing"].as_i64().unwrap()
    }

    /// A good keyed ticket for the bystander tenant: its status.
    fn bystander(&self, key: &str) -> u16 {
        let request = keyed("bystander", key, "application/json", TICKET);
        match self.exchange(&request) {
            Heard::Answer(reply) => reply.status,
            other => panic!("the bystander got {other:?}"),
        }
    }
}

impl Drop for Desk {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.shutdown());
        }
    }
}

/// A keyed ticket request with `Connection: close`.
fn keyed(tenant: &str, key: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {tenant}\r\nIdempotency-Key: {key}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `413 body-too-large`: the status and, for a problem document, its type's last part.
    fn describe(&self) -> String {
        let kind = serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|p| {
                p["type"]
                    .as_str()
                    .map(|t| t.rsplit(':').next().unwrap_or(t).to_owned())
            });
        match kind {
            Some(kind) => format!("{} {kind}", self.status),
            None => self.status.to_string(),
        }
    }
}

#[derive(Debug)]
enum Heard {
    Answer(Reply),
    /// Closed with no answer, after this long.
    Closed(Duration),
    /// Nothing, and still open, when the read timed out.
    Silent,
}

fn heard(reader: &mut BufReader<TcpStream>, started: Instant) -> Heard {
    match read_reply(reader) {
        Ok(Some(reply)) => Heard::Answer(reply),
        Ok(None) => Heard::Closed(started.elapsed()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Heard::Silent
        }
        Err(_) => Heard::Closed(started.elapsed()),
    }
}

/// One answer from a connection (keep-alive aware); `None` when it closed before a status line.
fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Option<Reply>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    let status_line = String::from_utf8_lossy(&line).into_owned();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_until(b'\n', &mut line)?;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text.is_empty() {
            break;
        }
        if let Some((name, value)) = text.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let mut reply = Reply {
        status,
        headers,
        body: Vec::new(),
    };
    if reply
        .header("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        loop {
            line.clear();
            reader.read_until(b'\n', &mut line)?;
            let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16)
                .map_err(std::io::Error::other)?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            reply.body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = reply.header("content-length") {
        let length: usize = length.parse().map_err(std::io::Error::other)?;
        reply.body = vec![0; length];
        reader.read_exact(&mut reply.body)?;
    } else if !(status < 200 || status == 204 || status == 304) {
        reader.read_to_end(&mut reply.body)?;
    }
    Ok(Some(reply))
}

/// What a case must get.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// One of these statuses.
    Status(&'static [u16]),
    /// A closed connection with no answer, within this long.
    ClosedWithin(Duration),
    /// One of these statuses, or a closed connection with no answer.
    StatusOrClosed(&'static [u16]),
}

/// How a case talks to the server.
enum Send {
    /// These bytes, then read the answer.
    Bytes(Vec<u8>),
    /// This head, then `chunks` chunks of `size` bytes of chunked body, written while reading.
    ChunkedFlood {
        head: Vec<u8>,
        size: usize,
        chunks: usize,
    },
    /// These lines one at a time, `every` apart, never finishing the header section.
    Trickle { lines: Vec<String>, every: Duration },
    /// These bytes, then the write side shut, then read.
    ThenShut(Vec<u8>),
}

struct Case {
    name: String,
    send: Send,
    expect: Expect,
    /// A 400 for an unreadable ticket is kept as its key's answer (CONTRACT.md section 6):
    /// the receipts the case may add.
    receipts: i64,
}

fn case(name: impl Into<String>, send: Send, expect: Expect) -> Case {
    Case {
        name: name.into(),
        send,
        expect,
        receipts: 0,
    }
}

impl Case {
    /// The case's 400 is kept as its key's answer.
    fn keeps_answer(mut self) -> Case {
        self.receipts = 1;
        self
    }
}

fn raw(s: impl Into<Vec<u8>>) -> Send {
    Send::Bytes(s.into())
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let key = "hostile-key";
    let json = "application/json";
    let mut cases = vec![
        case(
            "body: Content-Length 20 MB",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-big\r\nContent-Type: {json}\r\nContent-Length: 20971520\r\n\r\n{{\"subject\":"
            )),
            Status(&[413]),
        ),
        case(
            "body: 20 MB chunked, no length",
            Send::ChunkedFlood {
                head: format!(
                    "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-flood\r\nContent-Type: {json}\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                .into_bytes(),
                size: 64 * 1024,
                chunks: 320,
            },
            StatusOrClosed(&[413]),
        ),
        case(
            "body: 64 KiB + 1 byte",
            raw(keyed(HOSTILE, "k-edge", json, &format!("\"{}\"", "a".repeat(64 * 1024 - 1)))),
            Status(&[413]),
        ),
        case(
            "header: 200 KB header section",
            raw(format!(
                "GET /api/stats HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
                "a".repeat(200_000)
            )),
            Status(&[431]),
        ),
        case(
            "header: 17 KB header section",
            raw(format!(
                "GET /api/stats HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n",
                "a".repeat(17 * 1024)
            )),
            Status(&[431]),
        ),
        case(
            "header: 200 header lines",
            raw(format!(
                "GET /api/stats HTTP/1.1\r\nHost: t\r\n{}\r\n",
                (0..200).map(|i| format!("X-H{i}: v\r\n")).collect::<String>()
            )),
            Status(&[431]),
        ),
        case(
            "header: 100 KB request target",
            raw(format!(
                "GET /api/stats?{} HTTP/1.1\r\nHost: t\r\n\r\n",
                "q".repeat(100_000)
            )),
            Status(&[414, 431]),
        ),
        case(
            "header: sent a line every 300 ms",
            Send::Trickle {
                lines: std::iter::once("POST /api/tickets HTTP/1.1\r\n".to_owned())
                    .chain((0..120).map(|i| format!("X-Slow-{i}: still sending\r\n")))
                    .collect(),
                every: Duration::from_millis(300),
            },
            // The header read timeout is 1 s here (10 s by default); the head would take 36 s.
            // The bound leaves a loaded machine room, and only stops a server with none.
            ClosedWithin(Duration::from_secs(30)),
        ),
        case(
            "header: request line only, then silence",
            raw("GET /api/stats HTTP/1.1\r\n"),
            ClosedWithin(Duration::from_secs(30)),
        ),
        case(
            "JSON: 60,000 nested arrays",
            raw(keyed(HOSTILE, "k-deep", json, &"[".repeat(60_000))),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "JSON: 12,000 nested objects",
            raw(keyed(HOSTILE, "k-deep-obj", json, &"{\"a\":".repeat(12_000))),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "JSON: unterminated object",
            raw(keyed(HOSTILE, "k-cut", json, r#"{"subject":"Printer"#)),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "JSON: not an object",
            raw(keyed(HOSTILE, "k-array", json, "[1,2,3]")),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "JSON: lone surrogate escape",
            raw(keyed(
                HOSTILE,
                "k-surrogate",
                json,
                r#"{"subject":"\ud800","body":"x","email":"a@b.c"}"#,
            )),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "body: invalid UTF-8",
            raw(
                [
                    format!(
                        "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-utf8\r\nContent-Type: {json}\r\nContent-Length: 6\r\nConnection: close\r\n\r\n"
                    )
                    .into_bytes(),
                    b"\"\xff\xfe\xc0\xaf\"".to_vec(),
                ]
                .concat(),
            ),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "key: missing",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nContent-Type: {json}\r\nContent-Length: {}\r\n\r\n{TICKET}",
                TICKET.len()
            )),
            Status(&[400]),
        ),
        case(
            "key: given twice",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: one\r\nIdempotency-Key: two\r\nContent-Type: {json}\r\nContent-Length: {}\r\n\r\n{TICKET}",
                TICKET.len()
            )),
            Status(&[400]),
        ),
        case("key: empty", raw(keyed(HOSTILE, "", json, TICKET)), Status(&[400])),
        case(
            "key: quoted, unterminated",
            raw(keyed(HOSTILE, "\"abc", json, TICKET)),
            Status(&[400]),
        ),
        case(
            "key: 256 characters",
            raw(keyed(HOSTILE, &"k".repeat(256), json, TICKET)),
            Status(&[400]),
        ),
        case(
            "key: 10,000 characters",
            raw(keyed(HOSTILE, &"k".repeat(10_000), json, TICKET)),
            Status(&[400]),
        ),
        case(
            "key: inner space",
            raw(keyed(HOSTILE, "a b", json, TICKET)),
            Status(&[400]),
        ),
        case(
            "key: a control character",
            raw(keyed(HOSTILE, "a\x01b", json, TICKET)),
            Status(&[400]),
        ),
        case(
            "key: bytes that are not UTF-8",
            raw([
                b"POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: hostile\r\nIdempotency-Key: \xff\xfe\r\n".as_slice(),
                format!("Content-Type: {json}\r\nContent-Length: {}\r\n\r\n{TICKET}", TICKET.len()).as_bytes(),
            ]
            .concat()),
            Status(&[400]),
        ),
        case(
            "content type: text/plain",
            raw(keyed(HOSTILE, "k-text", "text/plain", TICKET)),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "multipart: no parts at all (a ticket without fields)",
            raw(keyed(HOSTILE, "k-multipart", "multipart/form-data; boundary=x", "--x--")),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "content type: none",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-no-type\r\nContent-Length: {}\r\n\r\n{TICKET}",
                TICKET.len()
            )),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "form: bad percent-encoding",
            raw(keyed(HOSTILE, "k-form", "application/x-www-form-urlencoded", "subject=%zz&body=%&email=%e2")),
            Status(&[400]),
        )
        .keeps_answer(),
        case("method: PUT /api/tickets", raw(format!("PUT /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-put\r\nContent-Type: {json}\r\nContent-Length: {}\r\n\r\n{TICKET}", TICKET.len())), Status(&[405])),
        case("method: DELETE /api/tickets", raw(format!("DELETE /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\n\r\n")), Status(&[405])),
        case("method: BREW /api/tickets", raw(format!("BREW /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\n\r\n")), Status(&[405])),
        case("method: POST /api/stats", raw(format!("POST /api/stats HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nContent-Length: 0\r\n\r\n")), Status(&[405])),
        case(
            "chunked: a size that is not hex",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-chunk\r\nContent-Type: {json}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{TICKET}\r\n0\r\n\r\n"
            )),
            StatusOrClosed(&[400]),
        ),
        case(
            "chunked: a chunk longer than its size",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-chunk-long\r\nContent-Type: {json}\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{TICKET}\r\n0\r\n\r\n"
            )),
            StatusOrClosed(&[400]),
        ),
        case(
            "chunked: a size of 2^64",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-chunk-huge\r\nContent-Type: {json}\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n{TICKET}\r\n0\r\n\r\n"
            )),
            StatusOrClosed(&[400, 413]),
        ),
        case(
            "framing: Content-Length and chunked",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-smuggle\r\nContent-Type: {json}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /api/plain/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nContent-Type: {json}\r\nContent-Length: {}\r\n\r\n{TICKET}",
                TICKET.len()
            )),
            StatusOrClosed(&[400]),
        )
        // hyper reads it as chunked (an empty body, refused and kept) and closes the connection
        // rather than read what follows as a request.
        .keeps_answer(),
        case(
            "framing: two different Content-Lengths",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-two-lengths\r\nContent-Type: {json}\r\nContent-Length: 5\r\nContent-Length: {}\r\n\r\n{TICKET}",
                TICKET.len()
            )),
            StatusOrClosed(&[400]),
        ),
        case(
            "framing: negative Content-Length",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-negative\r\nContent-Type: {json}\r\nContent-Length: -1\r\n\r\n{TICKET}"
            )),
            StatusOrClosed(&[400]),
        ),
        case(
            "body: shorter than its length, then silence",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-short\r\nContent-Type: {json}\r\nContent-Length: 500\r\n\r\n{TICKET}"
            )),
            // The body read timeout is 1 s here (30 s by default).
            Status(&[408]),
        ),
        case(
            "body: shorter than its length, then closed",
            Send::ThenShut(
                format!(
                    "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-short-shut\r\nContent-Type: {json}\r\nContent-Length: 500\r\n\r\n{TICKET}"
                )
                .into_bytes(),
            ),
            StatusOrClosed(&[400]),
        ),
        case(
            "multipart: Content-Length 30 MB (over --max-upload)",
            raw(format!(
                "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-big-upload\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 31457280\r\n\r\n--b\r\n"
            )),
            Status(&[413]),
        ),
        case(
            "multipart: 27 MB chunked, no length",
            Send::ChunkedFlood {
                head: format!(
                    "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {HOSTILE}\r\nIdempotency-Key: k-upload-flood\r\nContent-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n"
                )
                .into_bytes(),
                size: 64 * 1024,
                chunks: 420,
            },
            StatusOrClosed(&[413]),
        ),
        case(
            "multipart: no boundary",
            raw(keyed(HOSTILE, "k-mp-1", "multipart/form-data", "--b\r\n\r\n--b--")),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "multipart: no closing boundary",
            raw(keyed(
                HOSTILE,
                "k-mp-2",
                "multipart/form-data; boundary=b",
                "--b\r\nContent-Disposition: form-data; name=\"subject\"\r\n\r\nPrinter",
            )),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "multipart: headers that never end",
            raw(keyed(
                HOSTILE,
                "k-mp-3",
                "multipart/form-data; boundary=b",
                &format!("--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"{}", "x".repeat(5000)),
            )),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "multipart: JSON sent as multipart",
            raw(keyed(HOSTILE, "k-mp-4", "multipart/form-data; boundary=b", TICKET)),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "multipart: a part with no headers, then a NUL boundary",
            raw(keyed(
                HOSTILE,
                "k-mp-5",
                "multipart/form-data; boundary=\"\"",
                "--\r\n\r\n\0--\r\n",
            )),
            Status(&[400]),
        )
        .keeps_answer(),
        case(
            "tenant: 65 characters",
            raw(keyed(&"t".repeat(65), key, json, TICKET)),
            Status(&[400]),
        ),
        case(
            "tenant: 10,000 characters",
            raw(keyed(&"t".repeat(10_000), key, json, TICKET)),
            Status(&[400]),
        ),
        case(
            "tenant: 20,000 characters",
            raw(keyed(&"t".repeat(20_000), key, json, TICKET)),
            Status(&[431]),
        ),
        case(
            "tenant: 20,000 characters, GET /api/tickets",
            raw(format!(
                "GET /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {}\r\n\r\n",
                "t".repeat(20_000)
            )),
            Status(&[431]),
        ),
        case(
            "tenant: a space inside",
            raw(keyed("a b", key, json, TICKET)),
            Status(&[400]),
        ),
        case(
            "request line: not HTTP",
            raw("HELLO\r\n\r\n"),
            StatusOrClosed(&[400]),
        ),
        case(
            "request line: HTTP/2 preface on HTTP/1",
            raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            StatusOrClosed(&[400, 505]),
        ),
        case(
            "request line: a NUL in the target",
            raw(b"GET /api/\0stats HTTP/1.1\r\nHost: t\r\n\r\n".to_vec()),
            StatusOrClosed(&[400]),
        ),
    ];
    for traversal in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/%2e%2e%2fsecret.txt",
        "/..%2fsecret.txt",
        "/..%5csecret.txt",
        "/..\\secret.txt",
        "/.%2e/secret.txt",
        "/%252e%252e%252fsecret.txt",
        "/%c0%ae%c0%ae/secret.txt",
        "/%c0%ae%c0%ae%c0%afsecret.txt",
        "/%u002e%u002e/secret.txt",
        "/./../secret.txt",
        "/..;/secret.txt",
        "/%00../secret.txt",
        "/pkg/../secret.txt",
        "/pkg/%2e%2e/secret.txt",
        "/pkg/..%2f..%2fsecret.txt",
        "/pkg/%2e%2e%2f%2e%2e%2fsecret.txt",
        "/pkg/....//secret.txt",
        "/%2fetc%2fpasswd",
        "//etc/passwd",
        "/pkg//etc/passwd",
        "http://t/../secret.txt",
        "secret.txt",
        "../secret.txt",
    ] {
        cases.push(case(
            format!("path: GET {traversal}"),
            raw(format!(
                "GET {traversal} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )),
            StatusOrClosed(&[400, 404]),
        ));
    }
    cases
}

/// Runs one case: what it heard.
fn run(desk: &Desk, send: &Send) -> Heard {
    match send {
        Send::Bytes(bytes) => desk.exchange(bytes),
        Send::ThenShut(bytes) => {
            let mut stream = desk.connect();
            let started = Instant::now();
            let _ = stream.write_all(bytes);
            let _ = stream.shutdown(std::net::Shutdown::Write);
            heard(&mut BufReader::new(stream), started)
        }
        Send::ChunkedFlood { head, size, chunks } => {
            let stream = desk.connect();
            let started = Instant::now();
            let mut writer = stream.try_clone().unwrap();
            let (head, size, chunks) = (head.clone(), *size, *chunks);
            let flood = std::thread::spawn(move || {
                let chunk = [
                    format!("{size:x}\r\n").into_bytes(),
                    vec![b' '; size],
                    b"\r\n".to_vec(),
                ]
                .concat();
                let _ = writer.write_all(&head);
                for _ in 0..chunks {
                    if writer.write_all(&chunk).is_err() {
                        return;
                    }
                }
                let _ = writer.write_all(b"0\r\n\r\n");
            });
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let heard = heard(&mut BufReader::new(stream), started);
            let _ = flood.join();
            heard
        }
        Send::Trickle { lines, every } => {
            let stream = desk.connect();
            let started = Instant::now();
            let mut writer = stream.try_clone().unwrap();
            let (lines, every) = (lines.clone(), *every);
            let trickle = std::thread::spawn(move || {
                for line in lines {
                    if writer.write_all(line.as_bytes()).is_err() {
                        return;
                    }
                    std::thread::sleep(every);
                }
            });
            let heard = heard(&mut BufReader::new(stream.try_clone().unwrap()), started);
            drop(stream);
            let _ = trickle.join();
            heard
        }
    }
}

fn check(expect: Expect, heard: &Heard) -> Result<String, String> {
    let answer = match heard {
        Heard::Answer(reply) => {
            let mut text = reply.describe();
            if String::from_utf8_lossy(&reply.body).contains(SECRET) {
                return Err(format!("{text} with the secret file's content"));
            }
            if reply.header("connection") == Some("close") {
                text.push_str(", closed");
            }
            text
        }
        Heard::Closed(after) => format!("closed after {:.1} s, no answer", after.as_secs_f64()),
        Heard::Silent => "nothing within 10 s, still open".to_owned(),
    };
    let ok = match (expect, heard) {
        (Expect::Status(s) | Expect::StatusOrClosed(s), Heard::Answer(r)) => s.contains(&r.status),
        (Expect::StatusOrClosed(_), Heard::Closed(_)) => true,
        (Expect::ClosedWithin(max), Heard::Closed(after)) => after <= &max,
        _ => false,
    };
    if ok {
        Ok(answer)
    } else {
        Err(format!("{answer}, expected {expect:?}"))
    }
}

fn print_table(rows: &[[String; 4]]) {
    let header = ["case", "answer", "stored nothing", "server alive"];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap()
        })
        .collect();
    let line = |cells: [&str; 4]| {
        let mut out = String::from("|");
        for (cell, width) in cells.iter().zip(&widths) {
            out.push_str(&format!(" {cell:<width$} |"));
        }
        out
    };
    let mut out =
        String::from("\nhostile input against oncekey-server (server/tests/hostile.rs)\n");
    out.push_str(&line(header));
    out.push('\n');
    out.push_str(&line(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .try_into()
            .unwrap(),
    ));
    out.push('\n');
    for row in rows {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3]]));
        out.push('\n');
    }
    // Straight to the process's stderr, past the test harness's capture.
    let _ = std::io::stderr().write_all(out.as_bytes());
}

#[test]
fn hostile_input_gets_a_clear_4xx_stores_nothing_and_leaves_the_server_serving() {
    let desk = Desk::start(|_| {});
    let panics_before = PANICS.load(Ordering::SeqCst);
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let desk = Arc::new(desk);
    for (i, case) in cases().into_iter().enumerate() {
        let tickets_before = desk.tickets(HOSTILE);
        let receipts_before = desk.receipts(HOSTILE);
        // The case runs on a thread of its own while a bystander is served.
        let hostile = {
            let desk = desk.clone();
            std::thread::spawn(move || (run(&desk, &case.send), case))
        };
        std::thread::sleep(Duration::from_millis(20));
        let bystander = desk.bystander(&format!("bystander-{i}"));
        let (heard, case) = hostile.join().unwrap();
        let answer = check(case.expect, &heard);
        let tickets = desk.tickets(HOSTILE) - tickets_before;
        let receipts = desk.receipts(HOSTILE) - receipts_before;
        let after = desk.get("/api/stats", "bystander").status;
        let stored = match (tickets, receipts) {
            (0, 0) => "yes".to_owned(),
            (0, r) if r <= case.receipts => "yes (its 400 kept as the key's answer)".to_owned(),
            (t, r) => format!("NO: {t} tickets, {r} receipts"),
        };
        let alive = if bystander == 201 && after == 200 {
            "yes".to_owned()
        } else {
            format!("NO: bystander {bystander}, then {after}")
        };
        if answer.is_err() || stored.starts_with("NO") || alive.starts_with("NO") {
            failures.push(format!(
                "{}: {answer:?}; stored nothing {stored}; alive {alive}",
                case.name
            ));
        }
        rows.push([
            case.name,
            answer.unwrap_or_else(|e| format!("WRONG: {e}")),
            stored,
            alive,
        ]);
    }
    print_table(&rows);
    assert_eq!(desk.tickets(HOSTILE), 0, "no hostile request made a ticket");
    assert_eq!(
        desk.tickets("bystander"),
        rows.len(),
        "every bystander got its ticket"
    );
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics_before,
        "the server panicked"
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A request line (or just its target) made of generated bytes, never a line break: one request
/// per case on a kept-alive connection.
fn request_line() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let no_break = |b: &u8| *b != b'\r' && *b != b'\n';
    let target = prop_oneof![
        proptest::collection::vec(any::<u8>().prop_filter("no line break", no_break), 0..80),
        "(/|/pkg/|/api/|/%2e%2e/)[a-zA-Z0-9%./\\\\;:?#=&+~-]{0,60}".prop_map(String::into_bytes),
    ];
    let method = prop_oneof![Just("GET"), Just("POST"), Just("OPTIONS"), Just("PUT")];
    prop_oneof![
        4 => (method, target.clone()).prop_map(|(m, t)| [m.as_bytes(), b" ", &t, b" HTTP/1.1"].concat()),
        1 => proptest::collection::vec(any::<u8>().prop_filter("no line break", no_break), 0..120),
    ]
}

#[test]
fn generated_request_lines_never_get_a_5xx() {
    use proptest::test_runner::{Config as Cases, TestCaseError, TestRunner};
    const CASES: u32 = 10_000;
    let desk = Desk::start(|_| {});
    let panics_before = PANICS.load(Ordering::SeqCst);
    #[derive(Default)]
    struct Tally {
        connection: Option<BufReader<TcpStream>>,
        sent: usize,
        answered: usize,
        closed: usize,
        reconnects: usize,
    }
    let tally = std::cell::RefCell::new(Tally::default());
    let mut runner = TestRunner::new(Cases {
        cases: CASES,
        failure_persistence: None,
        ..Cases::default()
    });
    let result = runner.run(&request_line(), |line| {
        let shown = || String::from_utf8_lossy(&line).into_owned();
        let mut t = tally.borrow_mut();
        let t = &mut *t;
        t.sent += 1;
        if t.connection.is_none() {
            t.reconnects += 1;
            t.connection = Some(BufReader::new(desk.connect()));
        }
        let reader = t.connection.as_mut().unwrap();
        let request = [
            &line[..],
            b"\r\nHost: t\r\nX-Tenant: fuzz\r\nContent-Length: 0\r\n\r\n",
        ]
        .concat();
        if reader.get_mut().write_all(&request).is_err() {
            t.connection = None;
            t.closed += 1;
            return Ok(());
        }
        match read_reply(reader) {
            Ok(Some(reply)) => {
                t.answered += 1;
                if reply.status >= 500 || reply.header("connection") == Some("close") {
                    t.connection = None;
                }
                if reply.status >= 500 {
                    return Err(TestCaseError::fail(format!(
                        "{} for {:?}",
                        reply.status,
                        shown()
                    )));
                }
                if String::from_utf8_lossy(&reply.body).contains(SECRET) {
                    return Err(TestCaseError::fail(format!(
                        "the secret file for {:?}",
                        shown()
                    )));
                }
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(TestCaseError::fail(format!(
                    "no answer within 10 s for {:?}",
                    shown()
                )))
            }
            // Closed with no answer: only where HTTP has none (an HTTP/2 preface).
            Ok(None) | Err(_) => {
                t.connection = None;
                t.closed += 1;
                Ok(())
            }
        }
    });
    let Tally {
        sent,
        answered,
        closed,
        reconnects,
        ..
    } = tally.into_inner();
    let _ = writeln!(
        std::io::stderr(),
        "property test: {sent} generated request lines, {answered} answered (none 5xx), {closed} closed with no answer, {reconnects} connections"
    );
    result.unwrap();
    assert!(sent >= CASES as usize, "only {sent} cases ran");
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics_before,
        "the server panicked"
    );
    // Still serving.
    assert_eq!(desk.bystander("after-the-fuzz"), 201);
    assert_eq!(desk.tickets("fuzz"), 0);
}

#[test]
fn an_idle_connection_is_closed_after_the_keep_alive_timeout_but_a_slow_answer_is_not() {
    let desk = Desk::start(|c| {
        c.keep_alive_timeout = Duration::from_secs(1);
        // Far from the keep-alive timeout, so that a loaded machine cannot blur the two.
        c.header_read_timeout = Duration::from_secs(60);
        c.send_timeout = Duration::from_secs(1);
    });
    let mut reader = BufReader::new(desk.connect());
    reader
        .get_mut()
        .write_all(b"GET /api/stats HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_reply(&mut reader).unwrap().unwrap().status, 200);
    let idle = Instant::now();
    assert!(
        read_reply(&mut reader).unwrap().is_none(),
        "closed, no answer"
    );
    let after = idle.elapsed();
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(30),
        "closed after {after:?}: the keep-alive timeout is 1 s, the header read timeout 60 s"
    );

    // A request the server holds for 2.5 s (longer than the keep-alive timeout) is in flight,
    // not idle: it is answered on its connection, and the connection is kept for the next one.
    // Nor is it cut by the send timeout (1 s), which runs only while the socket refuses bytes.
    let mut reader = BufReader::new(desk.connect());
    let held = format!(
        "POST /api/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: held\r\nIdempotency-Key: k-held\r\nX-Fault: delay=2500\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{TICKET}",
        TICKET.len()
    );
    reader.get_mut().write_all(held.as_bytes()).unwrap();
    assert_eq!(read_reply(&mut reader).unwrap().unwrap().status, 201);
    reader
        .get_mut()
        .write_all(b"GET /api/stats HTTP/1.1\r\nHost: t\r\nX-Tenant: held\r\n\r\n")
        .unwrap();
    assert_eq!(read_reply(&mut reader).unwrap().unwrap().status, 200);
}

#[test]
fn an_answer_whose_client_stops_reading_is_cut_after_the_send_timeout_and_the_log_says_so() {
    // Any answer, not only a download: a static file of 8 MiB, more than the socket buffers
    // of a client with a 16 KiB receive buffer that reads nothing take.
    const SIZE: usize = 8 * 1024 * 1024;
    let desk = Desk::start(|c| {
        c.send_timeout = Duration::from_secs(1);
        let www = c.www.as_ref().unwrap();
        std::fs::write(www.join("large.bin"), vec![b'x'; SIZE]).unwrap();
    });
    let mut stream = desk.runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 * 1024).unwrap();
        socket.connect(desk.addr).await.unwrap().into_std().unwrap()
    });
    stream.set_nonblocking(false).unwrap();
    let client = stream.local_addr().unwrap().to_string();
    stream
        .write_all(b"GET /large.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    // Nothing read until the server says it gave up on this client (bounded: 15 s).
    let asked = Instant::now();
    let said = loop {
        let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
        if let Some(line) = log.lines().find(|l| l.contains(&client)) {
            break line.to_owned();
        }
        assert!(
            asked.elapsed() < Duration::from_secs(15),
            "no log line for {client} in 15 s: {log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        said.contains("WARN")
            && said.contains("took no byte of an answer for 1s")
            && said.contains("(--send-timeout)"),
        "{said}"
    );
    assert!(asked.elapsed() >= Duration::from_secs(1), "{said}");
    // Reading on, the client finds the connection reset, short of the whole file.
    let mut heard = Vec::new();
    let read = stream.read_to_end(&mut heard);
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{read:?} after {} bytes",
        heard.len()
    );
    assert!(heard.len() < SIZE, "{} bytes", heard.len());
    assert_eq!(desk.bystander("after-the-send-timeout"), 201);
}

#[test]
fn at_the_connection_cap_new_connections_wait_and_the_log_says_so() {
    let desk = Desk::start(|c| {
        c.max_connections = 2;
        c.keep_alive_timeout = Duration::from_secs(5);
        c.header_read_timeout = Duration::from_secs(10);
    });
    let first = desk.connect();
    let _second = desk.connect();
    std::thread::sleep(Duration::from_millis(300));
    let mut third = BufReader::new(desk.connect());
    third
        .get_mut()
        .write_all(b"GET /api/stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    third
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    let waiting = read_reply(&mut third);
    assert!(
        matches!(&waiting, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "the third connection waits while two are open: {waiting:?}"
    );
    let log = String::from_utf8_lossy(&LOG.lock().unwrap()).into_owned();
    assert!(
        log.contains("connection limit reached: 2 connections open"),
        "{log}"
    );
    drop(first);
    third
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let reply = read_reply(&mut third)
        .unwrap()
        .expect("an answer once a slot is free");
    assert_eq!(reply.status, 200);
}

#[test]
fn limits_that_cannot_work_stop_the_server_at_start() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = |config: Config| match runtime.block_on(oncekey_server::start(config)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("the server started"),
    };
    let text = refused(Config {
        keep_alive_timeout: Duration::from_secs(20),
        ..Config::default()
    });
    assert!(
        text.contains("--keep-alive-timeout (20s)") && text.contains("--header-read-timeout (10s)"),
        "{text}"
    );
    let text = refused(Config {
        max_header_bytes: 1000,
        ..Config::default()
    });
    assert!(
        text.contains("--max-header-bytes must be at least 8192"),
        "{text}"
    );
    let text = refused(Config {
        max_connections: 0,
        ..Config::default()
    });
    assert!(text.contains("--max-connections"), "{text}");
    // Each timeout at zero, alone: the message names that one.
    type SetToZero = fn(&mut Config);
    let timeouts: [(&str, SetToZero); 4] = [
        ("--header-read-timeout", |c| {
            c.header_read_timeout = Duration::ZERO
        }),
        ("--keep-alive-timeout", |c| {
            c.keep_alive_timeout = Duration::ZERO
        }),
        ("--body-read-timeout", |c| {
            c.body_read_timeout = Duration::ZERO
        }),
        ("--send-timeout", |c| c.send_timeout = Duration::ZERO),
    ];
    for (flag, zero) in timeouts {
        let mut config = Config::default();
        zero(&mut config);
        let text = refused(config);
        assert!(text.contains(&format!("{flag} must be positive")), "{text}");
    }
    // Receipts kept for less than a claim holds: a claim at work would be taken over (and a
    // TTL of 0 makes every repeat a new ticket).
    for receipt_ttl in [Duration::ZERO, Duration::from_secs(5)] {
        let text = refused(Config {
            receipt_ttl,
            lease: Duration::from_secs(10),
            ..Config::default()
        });
        assert!(
            text.contains("--receipt-ttl") && text.contains("--lease (10s)"),
            "{text}"
        );
    }
}
