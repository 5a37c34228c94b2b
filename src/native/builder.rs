//! # Builders
//!
//! [`ClientBuilder`] sets a [`Client`] up (store, retry policy, timeouts, the key header,
//! secrets); [`SubmissionBuilder`] describes one intended submission and checks it before
//! anything is stored or sent.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, COOKIE};

use super::client::{now, random_key_bytes, Client, HeaderProvider, Inner};
use super::drive::Parsed;
use super::error::{Error, Result};
use super::flight::{Flights, Job};
use super::owner;
use super::settlement::Settlement;
use super::store::Store;
use crate::core::{
    Encoding, Key, KeyFormat, Record, Request, RequestError, RetryPolicy, DEFAULT_KEY_HEADER,
};

/// The longest [`ClientBuilder::timeout`] and [`ClientBuilder::lease`]: 1 day.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Builds a [`Client`].
#[must_use]
pub struct ClientBuilder {
    store: Option<Arc<dyn Store>>,
    http: Option<reqwest::Client>,
    policy: RetryPolicy,
    key_lifetime: Option<Duration>,
    timeout: Duration,
    lease: Duration,
    key_header: String,
    key_format: KeyFormat,
    secret_names: Vec<String>,
    secrets: Vec<(String, String)>,
    provider: Option<Arc<dyn HeaderProvider>>,
    resume_concurrency: usize,
    max_response_bytes: usize,
    redirects_across_origins: bool,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("store", &self.store)
            .field("policy", &self.policy)
            .field("key_lifetime", &self.key_lifetime)
            .field("timeout", &self.timeout)
            .field("lease", &self.lease)
            .field("key_header", &self.key_header)
            .field("secret_names", &self.secret_names)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> ClientBuilder {
        ClientBuilder {
            store: None,
            http: None,
            policy: RetryPolicy::default(),
            key_lifetime: None,
            timeout: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            key_header: DEFAULT_KEY_HEADER.to_owned(),
            key_format: KeyFormat::Bare,
            secret_names: Vec::new(),
            secrets: Vec::new(),
            provider: None,
            resume_concurrency: 64,
            max_response_bytes: super::limits::DEFAULT_MAX_RESPONSE_BYTES,
            redirects_across_origins: false,
        }
    }
}

impl ClientBuilder {
    /// Where pending submissions are kept: [`SqliteStore`](crate::SqliteStore) for restart
    /// safety, [`MemoryStore`](crate::MemoryStore) for tests. Required.
    pub fn store(mut self, store: impl Store) -> ClientBuilder {
        self.store = Some(Arc::new(store));
        self
    }

    /// A store shared with other code.
    pub fn shared_store(mut self, store: Arc<dyn Store>) -> ClientBuilder {
        self.store = Some(store);
        self
    }

    /// Retry timing and limits (the core's [`RetryPolicy`]).
    pub fn retry(mut self, policy: RetryPolicy) -> ClientBuilder {
        self.policy = policy;
        self
    }

    /// How long the server keeps an idempotency key (24 h by default, as Stripe and Checkout.com
    /// do; Svix 12 h, Qonto 30 min, Adyen at least 31 days): no attempt is sent later than this
    /// after the submission's first attempt, less a safety margin of min(10 %, 5 min); such a
    /// submission settles [`Outcome::Expired`](crate::Outcome::Expired), kept in the store for
    /// [`Client::send_as_new`] or [`Client::discard`]. It wins over the policy's `key_lifetime`
    /// whatever the order of the calls. The round's budget must fit inside it.
    pub fn key_lifetime(mut self, lifetime: Duration) -> ClientBuilder {
        self.key_lifetime = Some(lifetime);
        self
    }

    /// How long one attempt may take, from its first byte sent to its answer's last byte read.
    /// No status by then is a timeout (retried with the same key); a status without its whole
    /// body decides the outcome, and the body is not kept ([`Settlement::body_error`]). 30 s by
    /// default; at most 1 day (`build` says so).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How long a lease outlives the step it covers (an attempt or a wait). A process that dies
    /// holds its submissions this long at most before another takes them over. 30 s by default;
    /// at most 1 day.
    pub fn lease(mut self, lease: Duration) -> ClientBuilder {
        self.lease = lease;
        self
    }

    /// The header that carries the key (`Idempotency-Key` by default).
    pub fn key_header(mut self, name: &str) -> ClientBuilder {
        self.key_header = name.to_owned();
        self
    }

    /// How the key is written in its header (bare by default).
    pub fn key_format(mut self, format: KeyFormat) -> ClientBuilder {
        self.key_format = format;
        self
    }

    /// Marks a header as secret: it may not be stored with a submission, only added on every
    /// attempt by [`ClientBuilder::secret_header`] or a [`HeaderProvider`]. `Authorization`,
    /// `Proxy-Authorization` and `Cookie` are always secret.
    pub fn secret_header_name(mut self, name: &str) -> ClientBuilder {
        self.secret_names.push(name.to_owned());
        self
    }

    /// A secret header sent on every attempt and never stored (an API token, say).
    pub fn secret_header(mut self, name: &str, value: &str) -> ClientBuilder {
        self.secret_names.push(name.to_owned());
        self.secrets.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds headers to every attempt from code (a token that rotates, a signature); never
    /// stored. Mark the names it adds with [`ClientBuilder::secret_header_name`] if they must
    /// never be stored either.
    pub fn header_provider(mut self, provider: impl HeaderProvider) -> ClientBuilder {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// How many stored submissions [`Client::resume_pending`] sends at once (64 by default).
    pub fn resume_concurrency(mut self, n: usize) -> ClientBuilder {
        self.resume_concurrency = n.max(1);
        self
    }

    /// The largest answer body kept, in bytes (16 MiB by default, [`DEFAULT_MAX_RESPONSE_BYTES`]).
    /// A larger one is not read further nor kept; its status still decides the outcome (a `201`
    /// is `succeeded`), and [`Settlement::body_error`] says so ([`Error::is_body_too_large`]).
    ///
    /// [`DEFAULT_MAX_RESPONSE_BYTES`]: crate::DEFAULT_MAX_RESPONSE_BYTES
    pub fn max_response_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_response_bytes = bytes;
        self
    }

    /// Follows `307` and `308` redirects to other origins too, sending the key and the body
    /// there (off by default: a redirect to another origin is the answer, not followed). Only
    /// for the client's own reqwest client, not one given with [`ClientBuilder::http_client`].
    pub fn follow_redirects_across_origins(mut self, follow: bool) -> ClientBuilder {
        self.redirects_across_origins = follow;
        self
    }

    /// The reqwest client to send with (proxies, roots, pools). Its own timeout, if any, also
    /// applies, and its redirect policy replaces oncekey's (see
    /// [`ClientBuilder::follow_redirects_across_origins`]).
    pub fn http_client(mut self, http: reqwest::Client) -> ClientBuilder {
        self.http = Some(http);
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<Client> {
        let store = self.store.ok_or_else(|| {
            Error::builder("a store is required: SqliteStore::open(path) to survive restarts, or MemoryStore::new() for tests")
        })?;
        let mut policy = self.policy;
        if let Some(lifetime) = self.key_lifetime {
            policy.key_lifetime = lifetime;
        }
        policy
            .validate()
            .map_err(|e| Error::builder(format!("the retry policy cannot work: {e}")))?;
        if self.timeout.is_zero() || self.lease.is_zero() {
            return Err(Error::builder(
                "the timeout and the lease must be more than 0",
            ));
        }
        if self.timeout > MAX_TIMEOUT || self.lease > MAX_TIMEOUT {
            return Err(Error::builder(
                "the timeout and the lease must be at most 1 day (no attempt waits longer, and a dead process's submissions are taken over within it)",
            ));
        }
        let header = |name: &str| {
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                Error::builder(format!("{name:?} is not a header name")).with_source(e)
            })
        };
        let key_header = header(&self.key_header)?;
        let mut secret_names = vec![AUTHORIZATION, COOKIE, reqwest::header::PROXY_AUTHORIZATION];
        for name in &self.secret_names {
            secret_names.push(header(name)?);
        }
        let mut secrets = HeaderMap::new();
        for (name, value) in &self.secrets {
            let mut value = HeaderValue::from_str(value).map_err(|e| {
                Error::builder(format!(
                    "the value of the secret header {name:?} cannot be sent"
                ))
                .with_source(e)
            })?;
            value.set_sensitive(true);
            secrets.append(header(name)?, value);
        }
        let http = match self.http {
            Some(http) => http,
            None => {
                install_crypto();
                reqwest::Client::builder()
                    .redirect(super::limits::redirect_policy(
                        self.redirects_across_origins,
                    ))
                    .build()
                    .map_err(|e| {
                        Error::builder("the HTTP client could not be built").with_source(e)
                    })?
            }
        };
        let owner = owner::new_id(u32::from_be_bytes(
            random_key_bytes()?[..4].try_into().unwrap_or_default(),
        ));
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                store,
                policy,
                timeout: self.timeout,
                lease: self.lease,
                owner,
                key_header,
                key_format: self.key_format,
                secret_names,
                secrets,
                provider: self.provider,
                resume_concurrency: self.resume_concurrency,
                max_response_bytes: self.max_response_bytes,
                flights: Flights::default(),
                removing: std::sync::Mutex::default(),
            }),
        })
    }
}

/// reqwest is built without a bundled crypto provider (`rustls-no-provider`, so that ring is used
/// and aws-lc's C build is not needed); install ring as the process default unless the
/// application installed one.
fn install_crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// One intended submission being described; [`SubmissionBuilder::send`] sends it.
#[must_use]
pub struct SubmissionBuilder {
    client: Client,
    name: String,
    key: Option<Key>,
    method: Option<String>,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<(String, Encoding)>,
    error: Option<Error>,
}

impl fmt::Debug for SubmissionBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmissionBuilder")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("method", &self.method)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl SubmissionBuilder {
    pub(super) fn new(client: Client, name: &str) -> SubmissionBuilder {
        SubmissionBuilder {
            client,
            name: name.to_owned(),
            key: None,
            method: None,
            url: String::new(),
            headers: Vec::new(),
            body: None,
            error: None,
        }
    }

    /// The key to use if the submission is new, typically derived from a durable id the caller
    /// owns ([`Key::derive`]) so that a restart recomputes it. Without one a random UUID v4 is
    /// made. A pending submission keeps its key; a different one here is a pending mismatch.
    pub fn key(mut self, key: Key) -> SubmissionBuilder {
        self.key = Some(key);
        self
    }

    /// Any method and URL (`http` or `https`).
    pub fn request(mut self, method: &str, url: &str) -> SubmissionBuilder {
        self.method = Some(method.to_owned());
        self.url = url.to_owned();
        self
    }

    /// `POST url`.
    pub fn post(self, url: &str) -> SubmissionBuilder {
        self.request("POST", url)
    }

    /// `PUT url`.
    pub fn put(self, url: &str) -> SubmissionBuilder {
        self.request("PUT", url)
    }

    /// `PATCH url`.
    pub fn patch(self, url: &str) -> SubmissionBuilder {
        self.request("PATCH", url)
    }

    /// A header stored with the submission and sent on every attempt. Secret headers
    /// (`Authorization`, `Cookie`, names marked secret) are refused here: give them to the
    /// client ([`ClientBuilder::secret_header`], [`HeaderProvider`]) so that a resume after a
    /// restart sends them too.
    pub fn header(mut self, name: &str, value: &str) -> SubmissionBuilder {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The body, serialized as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, body: &T) -> Result<SubmissionBuilder> {
        let text = serde_json::to_string(body)
            .map_err(|e| Error::request("the body cannot be serialized as JSON").with_source(e))?;
        self.body = Some((text, Encoding::Json));
        Ok(self)
    }

    /// The body as JSON text, sent byte for byte on every attempt.
    pub fn json_text(mut self, text: &str) -> SubmissionBuilder {
        self.body = Some((text.to_owned(), Encoding::Json));
        self
    }

    /// The body, sent form-encoded (`application/x-www-form-urlencoded`); it must serialize to
    /// a flat JSON object.
    pub fn form<T: serde::Serialize + ?Sized>(mut self, body: &T) -> Result<SubmissionBuilder> {
        let text = serde_json::to_string(body)
            .map_err(|e| Error::request("the body cannot be serialized").with_source(e))?;
        self.body = Some((text, Encoding::Form));
        Ok(self)
    }

    fn request_value(&mut self) -> Result<(Request, Option<Key>, Parsed)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let method = self.method.take().ok_or_else(|| {
            Error::request("no method and URL: call post(url) or request(method, url)")
        })?;
        let url = http_url(&self.url).map_err(Error::request)?;
        // Taken, not copied: the builder is spent by the call that asked for this.
        let (body, encoding) = self
            .body
            .take()
            .unwrap_or(("{}".to_owned(), Encoding::Json));
        // The text as parsed (normalized), which is most often the text given.
        let text = if url.as_str() == self.url {
            std::mem::take(&mut self.url)
        } else {
            url.as_str().to_owned()
        };
        let made = |e: RequestError| Error::request(format!("the request cannot be made: {e}"));
        let mut request = Request::from_owned(method, text, body, encoding).map_err(made)?;
        // Parsed here once, and kept for the first attempt (see `Parsed`).
        let inner = &self.client.inner;
        let mut parsed_headers =
            super::drive::attempt_headers(self.headers.len(), inner.secrets.len());
        for (name, value) in std::mem::take(&mut self.headers) {
            let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                Error::request(format!("{name:?} is not a header name")).with_source(e)
            })?;
            if inner.secret_names.contains(&parsed) {
                return Err(Error::request(format!(
                    "{name} is a secret header and is never stored; give it to the client (ClientBuilder::secret_header or header_provider) so a resume after a restart sends it too"
                )));
            }
            if parsed == inner.key_header || parsed == CONTENT_TYPE {
                return Err(Error::request(format!(
                    "{name} is set by oncekey itself on every attempt"
                )));
            }
            let value_parsed = HeaderValue::from_str(&value).map_err(|e| {
                Error::request(format!("the value of header {name:?} cannot be sent"))
                    .with_source(e)
            })?;
            request.push_header(name, value).map_err(made)?;
            parsed_headers.append(parsed, value_parsed);
        }
        let parsed = Parsed {
            url,
            headers: parsed_headers,
        };
        Ok((request, self.key.take(), parsed))
    }

    /// The record this submission would store, made without storing or sending anything: for
    /// `PostgresStore::enqueue` (feature `postgres`), which writes it in the
    /// caller's own transaction (a transactional outbox). Its key is the one given with
    /// [`SubmissionBuilder::key`], or a new random one; it has made no attempt yet.
    pub fn record(mut self) -> Result<Record> {
        let (request, key, _) = self.request_value().map_err(|e| e.with_name(&self.name))?;
        request.canonical_body().map_err(|e| {
            Error::request(format!("the body cannot be sent: {e}")).with_name(&self.name)
        })?;
        let key = match key {
            Some(k) => k,
            None => Key::from_random_bytes(random_key_bytes()?),
        };
        let t = now();
        Ok(Record {
            name: self.name,
            key,
            request,
            started_at: t,
            attempts: 0,
            round_started_at: t,
            round_attempts: 0,
            key_lifetime: self.client.inner.policy.key_lifetime,
            offline: Duration::ZERO,
            offline_since: None,
            not_before: None,
            stopped: None,
        })
    }

    /// Stores the submission and sends it until a definite answer or until its retries stop.
    /// A second send of the same name and body while one is under way in this client joins it;
    /// while one is pending in the store it goes on with the pending key ("Try again"); with
    /// another body, method, URL, headers (names in any case and order aside) or encoding it
    /// is refused ([`Error::is_pending_mismatch`]) and nothing is sent.
    pub async fn send(mut self) -> Result<Settlement> {
        let (request, key, parsed) = self.request_value().map_err(|e| e.with_name(&self.name))?;
        let job = Job::Send { request, key };
        self.client.run(&self.name, job, Some(parsed)).await
    }
}

/// `text` as an attempt's URL: an absolute `http` or `https` URL, or what is wrong with it.
pub(super) fn http_url(text: &str) -> std::result::Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("{text:?} is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{text:?} is not an http or https URL"));
    }
    Ok(url)
}
