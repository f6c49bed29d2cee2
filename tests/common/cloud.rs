//! Mock token endpoints on loopback for the cloud-credential tests: a tiny HTTP/1.1 server
//! (hyper) that records every request and answers with what the test's handler returns, the
//! throwaway RSA key pair the tests sign and verify with, and answers that echo the secrets a
//! request carried in every place an answer has.

#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A throwaway key generated for these tests only; it signs nothing anywhere else.
pub const TEST_ONLY_PRIVATE_KEY: &str = include_str!("../data/test-only-rsa-private-key.pem");
/// Its public half, with which the mock IAM verifies the JWT.
pub const TEST_ONLY_PUBLIC_KEY: &str = include_str!("../data/test-only-rsa-public-key.pem");

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When it arrived (tokio time, paused in the tests).
    pub at: tokio::time::Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the handler answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    pub fn json(value: serde_json::Value) -> Self {
        Self {
            status: 200,
            body: value.to_string(),
        }
    }

    pub fn status(status: u16) -> Self {
        Self {
            status,
            body: r#"{"message":"scripted failure"}"#.to_string(),
        }
    }
}

type Handler = Arc<dyn Fn(&Recorded, usize) -> Reply + Send + Sync>;

/// The server. Dropping it stops accepting.
pub struct MockHttp {
    addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Recorded>>>,
    handler: Arc<Mutex<Handler>>,
    /// How many requests have been answered.
    answered: tokio::sync::watch::Receiver<usize>,
    /// How long each answer is held back.
    delay: Arc<Mutex<Duration>>,
    /// How many TCP connections were accepted.
    connections: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether each answer echoes the secrets of its request in headers and its reason phrase.
    echo_in_headers: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockHttp {
    /// Starts on `127.0.0.1:0`; `handler` gets each request and its 0-based number.
    pub async fn start(
        handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::serve(handler, None).await
    }

    /// The same over TLS, with a server certificate and key (PEM).
    pub async fn start_tls(
        cert_pem: &str,
        key_pem: &str,
        handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Self {
        use tokio_rustls::rustls::{
            self,
            pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
        };
        let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        Self::serve(handler, Some(acceptor)).await
    }

    async fn serve(
        handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Mutex<Handler>> = Arc::new(Mutex::new(Arc::new(handler)));
        let (answered_tx, answered) = tokio::sync::watch::channel(0usize);
        let answered_tx = Arc::new(answered_tx);
        let delay = Arc::new(Mutex::new(Duration::ZERO));
        let (rec, hand, del) = (recorded.clone(), handler.clone(), delay.clone());
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        let echo_in_headers = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let echoing = echo_in_headers.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (rec, hand, del) = (rec.clone(), hand.clone(), del.clone());
                let (answered_tx, echoing) = (answered_tx.clone(), echoing.clone());
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (rec, hand, del) = (rec.clone(), hand.clone(), del.clone());
                    let (answered_tx, echoing) = (answered_tx.clone(), echoing.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let recorded = Recorded {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_string(),
                            query: parts.uri.query().map(str::to_string),
                            headers: parts
                                .headers
                                .iter()
                                .map(|(k, v)| {
                                    (k.to_string(), v.to_str().unwrap_or_default().to_string())
                                })
                                .collect(),
                            body: body.to_vec(),
                            at: tokio::time::Instant::now(),
                        };
                        let n = {
                            let mut all = rec.lock().unwrap_or_else(PoisonError::into_inner);
                            all.push(recorded.clone());
                            all.len() - 1
                        };
                        let handler = hand.lock().unwrap_or_else(PoisonError::into_inner).clone();
                        let reply = handler(&recorded, n);
                        let delay = *del.lock().unwrap_or_else(PoisonError::into_inner);
                        tokio::time::sleep(delay).await;
                        answered_tx.send_modify(|a| *a += 1);
                        let mut response = hyper::Response::builder()
                            .status(reply.status)
                            .header("content-type", "application/json");
                        if echoing.load(std::sync::atomic::Ordering::SeqCst) {
                            response = echoed_in_headers(response, &recorded);
                        }
                        let response = response.body(Full::new(Bytes::from(reply.body))).unwrap();
                        Ok::<_, Infallible>(response)
                    }
                });
                let tls = tls.clone();
                tokio::spawn(async move {
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                        }
                        // A client that refuses the certificate ends here.
                        Some(tls) => {
                            if let Ok(stream) = tls.accept(tcp).await {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                    }
                });
            }
        });
        Self {
            addr,
            recorded,
            handler,
            answered,
            delay,
            connections,
            echo_in_headers,
            task,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn https_url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.recorded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many TCP connections were accepted (one per exchange).
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn count(&self) -> usize {
        self.requests().len()
    }

    /// Waits until `n` requests have been answered (bounded by the tests' guard).
    pub async fn answered(&self, n: usize) {
        let mut rx = self.answered.clone();
        crate::common::within(rx.wait_for(|a| *a >= n))
            .await
            .unwrap();
    }

    /// Holds each answer back for `d`.
    pub fn delay_answers(&self, d: Duration) {
        *self.delay.lock().unwrap_or_else(PoisonError::into_inner) = d;
    }

    /// Makes every answer echo the secrets of its request in headers (`x-echo-N`,
    /// `www-authenticate`) and in its reason phrase.
    pub fn echo_in_headers(&self) {
        self.echo_in_headers
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Replaces the handler.
    pub fn answer_with(&self, handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static) {
        *self.handler.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(handler);
    }
}

/// The token `provider` gives now.
pub async fn current(provider: &impl ydb_coordination::auth::TokenProvider) -> String {
    crate::common::within(provider.token())
        .await
        .unwrap()
        .unwrap()
}

/// An emulator with the node `/local/app` that accepts only `tokens`.
pub async fn emulator_accepting(tokens: &[&str]) -> ydb_coordination::emulator::Emulator {
    let mut builder = ydb_coordination::emulator::Emulator::builder().node("/local/app");
    for t in tokens {
        builder = builder.token(*t);
    }
    crate::common::within(builder.start()).await.unwrap()
}

/// A client with discovery at build only: the periodic discovery would ask for tokens at
/// times of its own, and these tests count the exchanges.
pub async fn connect(
    emulator: &ydb_coordination::emulator::Emulator,
    credentials: ydb_coordination::auth::Credentials,
) -> ydb_coordination::Client {
    let builder = ydb_coordination::Client::builder(emulator.connection_string())
        .credentials(credentials)
        .discovery_interval(Duration::from_secs(24 * 3600));
    crate::common::within(builder.build()).await.unwrap()
}

/// A session with a semaphore created in it, and a node call: both need a token.
pub async fn session_and_node_call(client: &ydb_coordination::Client) {
    use crate::common::within;
    let session = within(client.session("/local/app", Default::default()))
        .await
        .unwrap();
    within(session.create_semaphore("sem", 1, b""))
        .await
        .unwrap();
    within(client.describe_node("/local/app")).await.unwrap();
}

/// Checks that `provider`, whose endpoint `mock` issues tokens living an hour and whose first
/// token `emulator` accepts with the second, caches its token for half its life, then renews it
/// in the background while the calls go on with the old one, and caches the new one.
pub async fn renewed_at_half_life<P>(
    emulator: &ydb_coordination::emulator::Emulator,
    mock: &MockHttp,
    provider: Arc<P>,
    [old, new]: [&str; 2],
) where
    P: ydb_coordination::auth::TokenProvider + 'static,
{
    use crate::common::within;
    let client = connect(
        emulator,
        ydb_coordination::auth::Credentials::provider(provider.clone()),
    )
    .await;
    within(client.describe_node("/local/app")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(29 * 60)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(mock.count(), 1, "the token is fresh for half its life");

    // Past half life, a renewal starts; the call does not wait for it, even when the endpoint
    // is slow.
    mock.delay_answers(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    let started = tokio::time::Instant::now();
    within(client.describe_node("/local/app")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(current(&provider).await, old);
    mock.answered(2).await;
    // The renewed token is cached and used: no further exchange.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(current(&provider).await, new);
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(mock.count(), 2);
}

/// An RFC 3339 instant `d` from now (wall clock: what IAM would answer).
pub fn rfc3339_in(d: Duration) -> String {
    time::OffsetDateTime::from(SystemTime::now() + d)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

/// The claims the mock IAM checks.
#[derive(Debug, serde::Deserialize)]
pub struct Claims {
    pub aud: String,
    pub iss: String,
    pub iat: u64,
    pub exp: u64,
}

/// Verifies the JWT of an IAM request the way IAM does (PS256 signature with the key's
/// public half, audience, issuer, key id): the claims and the key id, or why not.
pub fn verify_iam_request(r: &Recorded) -> Result<(Claims, String), String> {
    if r.method != "POST" || r.path != "/iam/v1/tokens" {
        return Err(format!("{} {}", r.method, r.path));
    }
    let body: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
    let jwt = body["jwt"].as_str().ok_or("no jwt")?;
    let header = jsonwebtoken::decode_header(jwt).map_err(|e| e.to_string())?;
    if header.alg != jsonwebtoken::Algorithm::PS256 {
        return Err(format!("alg {:?}", header.alg));
    }
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(TEST_ONLY_PUBLIC_KEY.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::PS256);
    validation.set_audience(&[ydb_coordination::auth::IAM_TOKEN_URL]);
    validation.set_issuer(&["sa-test"]);
    let data = jsonwebtoken::decode::<Claims>(jwt, &key, &validation).map_err(|e| e.to_string())?;
    Ok((data.claims, header.kid.unwrap_or_default()))
}

/// The authorized key JSON for the test key (`id` `key-test`, service account `sa-test`),
/// with the line Yandex Cloud puts before the PEM.
pub fn key_json() -> serde_json::Value {
    serde_json::json!({
        "id": "key-test",
        "service_account_id": "sa-test",
        "created_at": "2026-01-01T00:00:00Z",
        "key_algorithm": "RSA_2048",
        "public_key": TEST_ONLY_PUBLIC_KEY,
        "private_key": format!(
            "PLEASE DO NOT REMOVE THIS LINE! Yandex.Cloud SA Key ID <key-test>\n{TEST_ONLY_PRIVATE_KEY}"
        ),
    })
}

/// Writes `contents` to a fresh file in a temporary directory and returns its path.
pub fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ydb-coordination-tests-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// `response` with the secrets `r` carried in headers and in the reason phrase.
fn echoed_in_headers(
    mut response: hyper::http::response::Builder,
    r: &Recorded,
) -> hyper::http::response::Builder {
    let sent = secrets_sent(r);
    for (i, secret) in sent.iter().enumerate() {
        if let Ok(value) = hyper::header::HeaderValue::from_str(secret) {
            response = response.header(format!("x-echo-{i}"), value);
        }
        let challenge = format!("Bearer error=\"invalid_token\", error_description=\"{secret}\"");
        if let Ok(value) = hyper::header::HeaderValue::from_str(&challenge) {
            response = response.header("www-authenticate", value);
        }
    }
    let reason = sent.join(" ");
    if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.into_bytes()) {
        response = response.extension(reason);
    }
    response
}

/// The secrets a request to a token endpoint carried, decoded: the `subject_token` and
/// `actor_token` of an OAuth 2.0 form, the `jwt` of an IAM request, the values of the query.
pub fn secrets_sent(r: &Recorded) -> Vec<String> {
    let mut sent: Vec<String> = form_urlencoded::parse(&r.body)
        .filter(|(k, _)| k == "subject_token" || k == "actor_token")
        .map(|(_, v)| v.into_owned())
        .collect();
    let json: Option<serde_json::Value> = serde_json::from_slice(&r.body).ok();
    sent.extend(json.and_then(|j| j["jwt"].as_str().map(str::to_string)));
    let query = r.query.as_deref().unwrap_or_default();
    sent.extend(form_urlencoded::parse(query.as_bytes()).map(|(_, v)| v.into_owned()));
    sent
}

/// Every field of a token answer of any kind (OAuth 2.0, IAM, metadata), and of an error
/// answer.
pub const ANSWER_FIELDS: &[&str] = &[
    "access_token",
    "token_type",
    "expires_in",
    "scope",
    "issued_token_type",
    "refresh_token",
    "iamToken",
    "expiresAt",
    "error",
    "error_description",
    "error_uri",
    "message",
    "code",
];

/// A valid token answer of every kind at once.
fn valid_answer() -> serde_json::Value {
    serde_json::json!({
        "access_token": "echo-token",
        "token_type": "Bearer",
        "expires_in": 3600,
        "scope": "",
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "refresh_token": "echo-refresh",
        "iamToken": "echo-token",
        "expiresAt": rfc3339_in(Duration::from_secs(3600)),
        "error": "invalid_grant",
        "error_description": "refused",
        "error_uri": "https://auth.example.com/errors",
        "message": "refused",
        "code": 16,
    })
}

/// Where an answer echoes a secret of its request.
#[derive(Debug, Clone, Copy)]
pub enum Echo {
    /// In this field of an otherwise valid answer.
    Field(&'static str),
    /// In every field.
    EveryField,
    /// Inside objects and lists in the fields.
    Nested,
    /// As the whole body, which is not JSON.
    RawBody,
    /// As the whole body, a JSON string.
    JsonString,
    /// The request's body and query as sent (encoded), in every field.
    Request,
}

/// Every place and status an echoing endpoint answers with: each field, then the rest, each
/// as a 200, a refusal (400) and a failure (503).
pub fn echo_cases() -> Vec<(u16, Echo)> {
    let places = ANSWER_FIELDS.iter().map(|f| Echo::Field(f)).chain([
        Echo::EveryField,
        Echo::Nested,
        Echo::RawBody,
        Echo::JsonString,
        Echo::Request,
    ]);
    let places: Vec<Echo> = places.collect();
    [200, 400, 503]
        .into_iter()
        .flat_map(|status| places.iter().map(move |p| (status, *p)))
        .collect()
}

/// The kind of error an answer of `status` gives (when it is not a token).
pub fn kind_of_status(status: u16) -> ydb_coordination::ErrorKind {
    use ydb_coordination::ErrorKind;
    match status {
        200 => ErrorKind::Protocol,
        503 => ErrorKind::Unavailable,
        _ => ErrorKind::Unauthorized,
    }
}

/// The answer of `status` that echoes the `secret`-th secret `r` carried as `echo` says.
pub fn echo_reply(r: &Recorded, status: u16, echo: Echo, secret: usize) -> Reply {
    let s = secrets_sent(r).get(secret).cloned().unwrap_or_default();
    let every = |value: serde_json::Value| {
        let fields = ANSWER_FIELDS.iter().map(|f| (f.to_string(), value.clone()));
        serde_json::Value::Object(fields.collect()).to_string()
    };
    let body = match echo {
        Echo::Field(name) => {
            let mut answer = valid_answer();
            answer[name] = serde_json::json!(s);
            answer.to_string()
        }
        Echo::EveryField => every(serde_json::json!(s)),
        Echo::Nested => every(serde_json::json!({"message": s, "details": [s, {"value": s}]})),
        Echo::RawBody => s,
        Echo::JsonString => serde_json::json!(s).to_string(),
        Echo::Request => {
            let body = String::from_utf8_lossy(&r.body);
            every(serde_json::json!(format!(
                "{body}?{}",
                r.query.as_deref().unwrap_or_default()
            )))
        }
    };
    Reply { status, body }
}

/// Everything `err` shows: its message (with its causes), its `Debug`, and the message and
/// `Debug` of each source.
pub fn shown(err: &ydb_coordination::Error) -> String {
    use std::error::Error as _;
    let mut shown = format!("{err}\n{err:#}\n{err:?}\n");
    let mut source = err.source();
    while let Some(s) = source {
        shown.push_str(&format!("{s}\n{s:?}\n"));
        source = s.source();
    }
    shown
}

/// Asks a fresh provider from `provider` for a token while `mock` answers each of
/// [`echo_cases`] with each of the `secrets` secrets a request carries, its headers echoing
/// them all: every error has the kind of the answer's status and shows none of the secrets
/// sent, nor `never` (the keys that signed what was sent, which no request carried).
pub async fn assert_echoed_secrets_never_shown<P>(
    mock: &MockHttp,
    secrets: usize,
    provider: impl Fn() -> P,
    never: &[&str],
) where
    P: ydb_coordination::auth::TokenProvider,
{
    mock.echo_in_headers();
    for (status, echo) in echo_cases() {
        for secret in 0..secrets {
            mock.answer_with(move |r, _| echo_reply(r, status, echo, secret));
            let before = mock.count();
            let result = crate::common::within(provider().token()).await;
            let requests = mock.requests().split_off(before);
            let last = requests.last().unwrap();
            assert_eq!(secrets_sent(last).len(), secrets, "{echo:?}");
            let err = match result {
                Ok(_) => {
                    assert_eq!(status, 200, "{echo:?}: a token from a refusal");
                    continue;
                }
                Err(err) => err,
            };
            let case = format!("HTTP {status}, {echo:?}, secret {secret}");
            assert_eq!(err.kind(), kind_of_status(status), "{case}");
            let shown = shown(&err);
            let sent = requests.iter().flat_map(secrets_sent);
            for s in sent.chain(never.iter().map(|s| s.to_string())) {
                // A JWT's signature alone would give the JWT away.
                let signature = s.rsplit('.').next().unwrap_or_default().to_string();
                assert!(!shown.contains(&s), "{case}: a secret was shown");
                assert!(!shown.contains(&signature), "{case}: a signature was shown");
            }
            assert!(!shown.contains("SECRET"), "{case}: a secret was shown");
        }
    }
}
