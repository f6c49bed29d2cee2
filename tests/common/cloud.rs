//! Mock token endpoints on loopback for the cloud-credential tests: a tiny HTTP/1.1 server
//! (hyper) that records every request and answers with what the test's handler returns, and
//! the throwaway RSA key pair the tests sign and verify with.

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
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (rec, hand, del) = (rec.clone(), hand.clone(), del.clone());
                let answered_tx = answered_tx.clone();
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (rec, hand, del) = (rec.clone(), hand.clone(), del.clone());
                    let answered_tx = answered_tx.clone();
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
                        let response = hyper::Response::builder()
                            .status(reply.status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(reply.body)))
                            .unwrap();
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

    /// Replaces the handler.
    pub fn answer_with(&self, handler: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static) {
        *self.handler.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(handler);
    }
}

/// The token `provider` gives now.
pub async fn current(provider: &impl ydb_coordination::TokenProvider) -> String {
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
    credentials: ydb_coordination::Credentials,
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
    P: ydb_coordination::TokenProvider + 'static,
{
    use crate::common::within;
    let client = connect(
        emulator,
        ydb_coordination::Credentials::provider(provider.clone()),
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
    validation.set_audience(&[ydb_coordination::IAM_TOKEN_URL]);
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
