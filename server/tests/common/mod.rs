//! Starts the server in-process on a free port and talks to it over real HTTP.
#![allow(dead_code)]

pub mod pg;
pub mod process;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use oncekey_server::{Config, Server};
use serde_json::Value;

/// A server for one test, and a tenant of its own.
pub struct Desk {
    pub server: Server,
    pub client: reqwest::Client,
    pub tenant: String,
}

pub const TICKET: &str =
    r#"{"subject":"Printer on fire","body":"Third floor, again.","email":"ada@example.com"}"#;

static NEXT_TENANT: AtomicUsize = AtomicUsize::new(0);

pub fn tenant_name(test: &str) -> String {
    format!("{test}-{}", NEXT_TENANT.fetch_add(1, Ordering::Relaxed))
}

pub fn client() -> reqwest::Client {
    // The workspace builds reqwest with `rustls-no-provider` (the native driver picks its
    // provider), so a client needs one installed even for plain http.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

impl Desk {
    /// A server with faults on and a short lease.
    pub async fn start(test: &str) -> Desk {
        Desk::with(
            test,
            Config {
                faults: true,
                lease: Duration::from_millis(300),
                ..Config::default()
            },
        )
        .await
    }

    pub async fn with(test: &str, config: Config) -> Desk {
        let server = oncekey_server::start(config).await.expect("server starts");
        Desk {
            server,
            client: client(),
            tenant: tenant_name(test),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// A keyed JSON ticket request, not yet sent.
    pub fn post(&self, key: Option<&str>, body: &str) -> reqwest::RequestBuilder {
        self.request("/api/tickets", &self.tenant, key, "application/json", body)
    }

    /// A keyed form ticket request, not yet sent.
    pub fn post_form(&self, key: Option<&str>, body: &str) -> reqwest::RequestBuilder {
        let form = "application/x-www-form-urlencoded";
        self.request("/api/tickets", &self.tenant, key, form, body)
    }

    pub fn post_to(&self, path: &str, key: Option<&str>, body: &str) -> reqwest::RequestBuilder {
        self.request(path, &self.tenant, key, "application/json", body)
    }

    /// Any request; reqwest's `header` adds a value rather than replacing one, so every
    /// header that a test may vary is set here once.
    pub fn request(
        &self,
        path: &str,
        tenant: &str,
        key: Option<&str>,
        content_type: &str,
        body: &str,
    ) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(self.url(path))
            .header("X-Tenant", tenant)
            .header("Content-Type", content_type)
            .body(body.to_owned());
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request
    }

    /// A GET for this desk's tenant, its answer read as JSON.
    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        get_json(&self.client, &self.url(path), &self.tenant).await
    }

    pub async fn stats(&self) -> Value {
        self.get_json("/api/stats").await
    }

    pub async fn stat(&self, name: &str) -> i64 {
        self.stats().await[name]
            .as_i64()
            .unwrap_or_else(|| panic!("no stat {name}"))
    }

    pub async fn tickets(&self) -> Vec<Value> {
        self.get_json("/api/tickets?limit=500").await
    }

    /// Polls the stats until `name` reaches `value` (bounded: 2000 polls).
    pub async fn wait_for_stat(&self, name: &str, value: i64) {
        for _ in 0..2000 {
            if self.stat(name).await == value {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{name} never reached {value}: {}", self.stats().await);
    }
}

/// An answer read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub content_type: String,
    pub retry_after: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub async fn read(response: reqwest::Response) -> Answer {
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        let replayed = header("idempotent-replayed").as_deref() == Some("true");
        let content_type = header("content-type").unwrap_or_default();
        let retry_after = header("retry-after");
        let status = response.status().as_u16();
        let body = response.bytes().await.unwrap().to_vec();
        Answer {
            status,
            replayed,
            content_type,
            retry_after,
            body,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// The names in a problem document's `invalid-params`.
    pub fn invalid_names(&self) -> Vec<String> {
        self.json()["invalid-params"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> Answer {
    Answer::read(request.send().await.expect("an answer")).await
}

/// Sends until the answer is definite (not 409, not 5xx, not a transport error), as a client
/// following the contract would, with the same key and body every time (bounded: 500 tries).
pub async fn send_until_definite(make: impl Fn() -> reqwest::RequestBuilder) -> Answer {
    for _ in 0..500 {
        // A transport error is "unknown": retry, like a 409 or a 5xx.
        if let Ok(response) = make().send().await {
            let answer = Answer::read(response).await;
            if answer.status != 409 && answer.status < 500 {
                return answer;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no definite answer after 500 tries");
}

/// A GET of `url` for `tenant`, its answer read as JSON.
pub async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    tenant: &str,
) -> T {
    client
        .get(url)
        .header("X-Tenant", tenant)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The answers that came back from a burst's tasks, by request number; the requests the kill cut
/// off are left out.
pub async fn answered(
    tasks: Vec<tokio::task::JoinHandle<Option<Answer>>>,
) -> std::collections::HashMap<usize, Answer> {
    let mut answers = std::collections::HashMap::new();
    for (i, task) in tasks.into_iter().enumerate() {
        if let Some(answer) = task.await.unwrap() {
            answers.insert(i, answer);
        }
    }
    answers
}

/// Sends `requests` at once and returns, with their tasks still running, as soon as a quarter of
/// them have an answer: the moment the crash tests kill a server, with the rest in flight. Each
/// task ends with its answer, or `None` when its connection failed.
pub async fn burst_until_a_quarter_answered(
    requests: Vec<reqwest::RequestBuilder>,
) -> Vec<tokio::task::JoinHandle<Option<Answer>>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let quarter = requests.len() / 4;
    let answered = std::sync::Arc::new(AtomicUsize::new(0));
    let (kill_now, mut kill_signal) = tokio::sync::mpsc::channel::<()>(1);
    let mut tasks = Vec::new();
    for request in requests {
        let answered = answered.clone();
        let kill_now = kill_now.clone();
        tasks.push(tokio::spawn(async move {
            let answer = match request.send().await {
                Ok(response) => Some(Answer::read(response).await),
                Err(_) => None,
            };
            if answer.is_some() && answered.fetch_add(1, Ordering::SeqCst) + 1 == quarter {
                let _ = kill_now.try_send(());
            }
            answer
        }));
    }
    drop(kill_now);
    kill_signal.recv().await;
    tasks
}
