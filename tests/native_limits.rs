//! The native client against misbehaving servers (a raw TCP peer on loopback): huge and endless
//! bodies, bodies and statuses that trickle, redirects (303 after a POST, another origin, loops,
//! long chains), absurd `Retry-After`. What a user checks: the outcome, what was kept, what the
//! peer received, and that the client came back in time.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncekey::{Client, MemoryStore, Outcome, RetryPolicy, Settlement};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One request as the peer read it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    key: Option<String>,
    body: Vec<u8>,
}

/// What the peer does with a request.
#[derive(Debug, Clone)]
enum Reply {
    /// A whole answer.
    Plain(u16, Vec<(String, String)>, &'static str),
    /// A status and `Content-Length: len`, then zeros for as long as the client reads.
    Huge(u16, u64),
    /// A status, chunked, then chunks for as long as the client reads.
    Endless(u16),
    /// A status and a length, then one byte every 50 ms.
    TrickleBody(u16),
    /// The status line, then nothing.
    TrickleHead,
}

fn redirect(status: u16, to: &str) -> Reply {
    Reply::Plain(status, vec![("Location".into(), to.into())], "")
}

type Script = Arc<dyn Fn(usize, &Seen) -> Reply + Send + Sync>;

/// A peer on a free loopback port answering from `script` (request number, request).
struct Peer {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Peer {
    async fn start(script: impl Fn(usize, &Seen) -> Reply + Send + Sync + 'static) -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script: Script = Arc::new(script);
        let s = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, s.clone(), script.clone()));
            }
        });
        Peer { url, seen, task }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, script: Script) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split(' ');
        let (method, path) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let (mut length, mut key) = (0usize, None);
        loop {
            let mut header = String::new();
            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "idempotency-key" => key = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if stream.read_exact(&mut body).await.is_err() {
            return;
        }
        let request = Seen {
            method,
            path,
            key,
            body,
        };
        let n = {
            let mut all = seen.lock().unwrap();
            all.push(request.clone());
            all.len() - 1
        };
        let out = stream.get_mut();
        let head = |status: u16, extra: &str| format!("HTTP/1.1 {status} X\r\n{extra}\r\n");
        match script(n, &request) {
            Reply::Plain(status, headers, body) => {
                let extra: String = headers
                    .iter()
                    .map(|(n, v)| format!("{n}: {v}\r\n"))
                    .collect();
                let text = format!(
                    "{}{body}",
                    head(
                        status,
                        &format!(
                            "{extra}Content-Type: application/json\r\nContent-Length: {}\r\n",
                            body.len()
                        )
                    )
                );
                if out.write_all(text.as_bytes()).await.is_err() {
                    return;
                }
            }
            Reply::Huge(status, len) => {
                let _ = out
                    .write_all(head(status, &format!("Content-Length: {len}\r\n")).as_bytes())
                    .await;
                let zeros = vec![0u8; 64 * 1024];
                while out.write_all(&zeros).await.is_ok() {}
                return;
            }
            Reply::Endless(status) => {
                let _ = out
                    .write_all(head(status, "Transfer-Encoding: chunked\r\n").as_bytes())
                    .await;
                let chunk = [b"10000\r\n".as_slice(), &[b'x'; 0x10000], b"\r\n"].concat();
                while out.write_all(&chunk).await.is_ok() {}
                return;
            }
            Reply::TrickleBody(status) => {
                let _ = out
                    .write_all(head(status, "Content-Length: 1000000\r\n").as_bytes())
                    .await;
                while out.write_all(b"x").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                return;
            }
            Reply::TrickleHead => {
                let _ = out.write_all(b"HTTP/1.1 201 Created\r\n").await;
                tokio::time::sleep(Duration::from_secs(600)).await;
                return;
            }
        }
    }
}

fn policy(attempts: u32, cap: Duration) -> RetryPolicy {
    RetryPolicy {
        attempts,
        base: Duration::from_millis(20),
        cap,
        budget: Duration::from_secs(60),
        ..RetryPolicy::default()
    }
}

fn client(configure: impl FnOnce(oncekey::ClientBuilder) -> oncekey::ClientBuilder) -> Client {
    configure(
        Client::builder()
            .store(MemoryStore::new())
            .retry(policy(3, Duration::from_millis(200)))
            .timeout(Duration::from_secs(5)),
    )
    .build()
    .unwrap()
}

const TICKET: &str = r#"{"subject":"Printer","body":"On fire","email":"a@b.c"}"#;

async fn send(client: &Client, url: &str) -> Settlement {
    client
        .submission("limits")
        .post(url)
        .json_text(TICKET)
        .send()
        .await
        .unwrap()
}

async fn nothing_pending(client: &Client) {
    assert!(
        client.pending().await.unwrap().is_empty(),
        "the record was removed"
    );
}

#[tokio::test]
async fn a_201_with_a_300_mb_body_is_succeeded_and_its_body_is_not_kept() {
    let peer = Peer::start(|_, _| Reply::Huge(201, 300 * 1024 * 1024)).await;
    let client = client(|b| b);
    let settled = send(&client, &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert_eq!(settled.status(), Some(201));
    assert_eq!(settled.attempts(), 1);
    assert!(settled.body().is_empty());
    let why = settled.body_error().expect("says why there is no body");
    assert!(why.is_body_too_large(), "{why}");
    assert!(why.to_string().contains("314572800 bytes"), "{why}");
    assert!(
        why.to_string().contains("max_response_bytes (16777216)"),
        "{why}"
    );
    assert_eq!(peer.seen().len(), 1);
    nothing_pending(&client).await;
}

#[tokio::test]
async fn an_endless_body_is_cut_at_max_response_bytes_and_the_status_decides() {
    let peer = Peer::start(|n, _| {
        if n == 0 {
            Reply::Endless(201)
        } else {
            Reply::Endless(503)
        }
    })
    .await;
    let client = client(|b| b.max_response_bytes(1024 * 1024));
    let settled = send(&client, &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert!(settled.body().is_empty());
    assert!(settled.body_error().unwrap().is_body_too_large());
    assert_eq!(peer.seen().len(), 1);

    // A 503 with an endless body is still a 503: retried with the same key.
    let settled = client
        .submission("limits-503")
        .post(&format!("{}/tickets", peer.url))
        .json_text(TICKET)
        .send()
        .await
        .unwrap();
    assert_eq!(settled.outcome(), Outcome::Unsure);
    assert_eq!(settled.attempts(), 3);
    let keys: Vec<_> = peer.seen()[1..]
        .iter()
        .map(|s| s.key.clone().unwrap())
        .collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
}

#[tokio::test]
async fn a_body_that_trickles_ends_at_the_attempts_deadline() {
    let peer = Peer::start(|_, _| Reply::TrickleBody(201)).await;
    let client = client(|b| b.timeout(Duration::from_millis(800)));
    let started = Instant::now();
    let settled = send(&client, &format!("{}/tickets", peer.url)).await;
    let took = started.elapsed();
    assert_eq!(settled.outcome(), Outcome::Succeeded, "the 201 decides");
    assert!(settled.body().is_empty());
    let why = settled.body_error().unwrap();
    assert!(why.is_timeout(), "{why}");
    // The body would take 14 hours at this pace; the deadline is 0.8 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    nothing_pending(&client).await;
}

#[tokio::test]
async fn a_status_that_trickles_is_a_timeout_retried_with_the_same_key() {
    let peer = Peer::start(|_, _| Reply::TrickleHead).await;
    let client = client(|b| {
        b.timeout(Duration::from_millis(500))
            .retry(policy(2, Duration::from_millis(50)))
    });
    let settled = send(&client, &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.outcome(), Outcome::Unsure);
    assert_eq!(settled.status(), None);
    assert_eq!(settled.attempts(), 2);
    let seen = peer.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].key, seen[1].key);
    assert_eq!(
        client.pending().await.unwrap().len(),
        1,
        "unsure: still stored"
    );
}

#[tokio::test]
async fn a_303_after_a_post_is_the_answer_not_followed() {
    let peer = Peer::start(|n, _| {
        if n == 0 {
            redirect(303, "/tickets/1")
        } else {
            Reply::Plain(200, vec![], "{}")
        }
    })
    .await;
    let c = client(|b| b);
    let settled = send(&c, &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.status(), Some(303));
    assert_eq!(settled.headers()["location"], "/tickets/1");
    let seen = peer.seen();
    assert_eq!(seen.len(), 1, "no GET, no second POST: {seen:?}");
    assert_eq!(seen[0].method, "POST");
    // The server's answer to the POST, to be seen at the Location: succeeded, the record gone.
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    nothing_pending(&c).await;
    // A 301 or 302 says nothing of the request, which may have been carried out (a framework's
    // POST-redirect-GET answers 302): unsure, not refused, the record kept with its key, which
    // "Try again" sends again.
    for status in [301, 302] {
        let peer = Peer::start(move |n, _| {
            if n == 0 {
                redirect(status, "/elsewhere")
            } else {
                Reply::Plain(200, vec![], "{}")
            }
        })
        .await;
        let c = client(|b| b);
        let settled = send(&c, &format!("{}/tickets", peer.url)).await;
        assert_eq!(settled.status(), Some(status));
        assert_eq!(settled.outcome(), Outcome::Unsure, "{status}");
        assert_eq!(peer.seen().len(), 1, "{status}");
        assert_eq!(c.pending().await.unwrap().len(), 1);
        let again = c.try_again("limits").await.unwrap();
        assert_eq!(again.outcome(), Outcome::Succeeded);
        let seen = peer.seen();
        assert_eq!((seen.len(), &seen[1].key), (2, &seen[0].key), "{status}");
    }
}

#[tokio::test]
async fn a_307_within_the_origin_is_followed_with_the_same_key_and_body() {
    let peer = Peer::start(|n, _| {
        if n == 0 {
            redirect(307, "/v2/tickets")
        } else {
            Reply::Plain(201, vec![], r#"{"id":7}"#)
        }
    })
    .await;
    let client = client(|b| b);
    let settled = send(&client, &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert_eq!(settled.body(), br#"{"id":7}"#);
    let seen = peer.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[1].method.as_str(), seen[1].path.as_str()),
        ("POST", "/v2/tickets")
    );
    assert_eq!(seen[0].key, seen[1].key);
    assert_eq!(seen[1].body, TICKET.as_bytes());
}

#[tokio::test]
async fn a_redirect_to_another_origin_does_not_take_the_key_there_unless_configured() {
    let elsewhere = Peer::start(|_, _| Reply::Plain(201, vec![], r#"{"id":9}"#)).await;
    let target = format!("{}/tickets", elsewhere.url);
    let t = target.clone();
    let peer = Peer::start(move |_, _| redirect(307, &t)).await;
    let settled = send(&client(|b| b), &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.status(), Some(307));
    assert_eq!(settled.headers()["location"], target.as_str());
    assert!(elsewhere.seen().is_empty(), "the other origin got nothing");

    let settled = send(
        &client(|b| b.follow_redirects_across_origins(true)),
        &format!("{}/tickets", peer.url),
    )
    .await;
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    let there = elsewhere.seen();
    assert_eq!(there.len(), 1);
    assert_eq!(
        there[0].key,
        peer.seen()[1].key,
        "configured: the same key goes there"
    );
}

#[tokio::test]
async fn redirect_loops_and_long_chains_stop() {
    // To itself.
    let peer = Peer::start(|_, _| redirect(307, "/tickets")).await;
    let settled = send(&client(|b| b), &format!("{}/tickets", peer.url)).await;
    assert_eq!(settled.status(), Some(307));
    assert_eq!(settled.attempts(), 1);
    assert_eq!(peer.seen().len(), 1);
    // Between two paths.
    let peer = Peer::start(|_, s| redirect(308, if s.path == "/a" { "/b" } else { "/a" })).await;
    let settled = send(&client(|b| b), &format!("{}/a", peer.url)).await;
    assert_eq!(settled.status(), Some(308));
    assert_eq!(peer.seen().len(), 2);
    // Ever onwards: 5 redirects followed at most.
    let peer = Peer::start(|n, _| redirect(307, &format!("/hop/{}", n + 1))).await;
    let settled = send(&client(|b| b), &format!("{}/hop/0", peer.url)).await;
    assert_eq!(settled.status(), Some(307));
    assert_eq!(peer.seen().len(), 6);
}

/// CONTRACT.md section 2: never retry earlier than `Retry-After` says, and never wait longer than
/// the cap. A hint past the cap stops the retries at once (`unsure`, still stored, for "Try
/// again"); a hint that is not one is ignored. Either way the client comes back at once.
#[tokio::test]
async fn an_absurd_retry_after_is_never_waited_out() {
    for (hint, obeyable) in [
        (("Retry-After", "99999999999999999999"), false),
        (("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"), false),
        (("retry-after-ms", "18446744073709551616"), false),
        (("Retry-After", "-5"), true),
        (("Retry-After", "soon"), true),
        (("retry-after-ms", "NaN"), true),
    ] {
        let peer = Peer::start(move |n, _| {
            if n == 0 {
                Reply::Plain(503, vec![(hint.0.into(), hint.1.into())], "{}")
            } else {
                Reply::Plain(201, vec![], r#"{"id":1}"#)
            }
        })
        .await;
        let client = client(|b| b.retry(policy(3, Duration::from_millis(300))));
        let started = Instant::now();
        let settled = send(&client, &format!("{}/tickets", peer.url)).await;
        let took = started.elapsed();
        // The cap is 0.3 s; the first hints are 3 * 10^12 years and 8,000 years away.
        assert!(took < Duration::from_secs(10), "{hint:?}: took {took:?}");
        if obeyable {
            assert_eq!(settled.outcome(), Outcome::Succeeded, "{hint:?}");
            assert_eq!(settled.attempts(), 2, "{hint:?}");
        } else {
            assert_eq!(settled.outcome(), Outcome::Unsure, "{hint:?}");
            assert_eq!(settled.attempts(), 1, "{hint:?}");
            assert!(settled.gave_up().is_some(), "{hint:?}");
            assert_eq!(
                client.pending().await.unwrap().len(),
                1,
                "{hint:?}: kept for Try again"
            );
        }
    }
}
