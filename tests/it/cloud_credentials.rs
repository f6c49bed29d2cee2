//! Cloud credentials against mock IAM and metadata endpoints on loopback, and tokens on long
//! sessions: the token goes out as `x-ydb-auth-ticket` (checked by an emulator that enforces
//! tokens, and by a scripted peer that records the header), is renewed before it expires, a
//! failing IAM is retried and then reported, a bad key file names the file and the field, a
//! reattach asks for a fresh token and a rejected one is renewed once, and no secret shows in
//! `Debug`, logs or errors, not even one an endpoint echoes anywhere in its answer.
#![allow(clippy::unwrap_used)]

use crate::certs;
use crate::cloud;
use crate::common;
use crate::peer;

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cloud::{
    MockHttp, Recorded, Reply, assert_echoed_secrets_never_shown, connect, current,
    emulator_accepting, key_json, rfc3339_in, temp_file, verify_iam_request,
};
use common::within;
use peer::{Peer, Rs, StatusCode, session_response};
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{
    Client, ErrorKind, SessionOptions, auth::Credentials, auth::KeyFileError,
    auth::MetadataCredentials, auth::ServiceAccountCredentials, auth::TokenFuture,
    auth::TokenProvider, session::SessionState,
};

const HOUR: Duration = Duration::from_secs(3600);

/// A mock IAM that checks the JWT and issues `iam-token-1`, `iam-token-2`, ... living `life`.
async fn iam(life: Duration) -> MockHttp {
    MockHttp::start(move |r, n| iam_answer(r, n, life)).await
}

fn iam_answer(r: &Recorded, n: usize, life: Duration) -> Reply {
    match verify_iam_request(r) {
        Ok((claims, kid)) if kid == "key-test" && claims.exp > claims.iat => {
            Reply::json(serde_json::json!({
                "iamToken": format!("iam-token-{}", n + 1),
                "expiresAt": rfc3339_in(life),
            }))
        }
        _ => Reply::status(401),
    }
}

fn service_account_of(iam: &MockHttp) -> ServiceAccountCredentials {
    let key = temp_file("key.json", &key_json().to_string());
    ServiceAccountCredentials::from_key_file(key)
        .unwrap()
        .iam_endpoint(iam.url("/iam/v1/tokens"))
        .unwrap()
}

fn service_account(iam: &MockHttp) -> Credentials {
    Credentials::from(service_account_of(iam))
}

#[tokio::test(start_paused = true)]
async fn a_service_account_key_is_exchanged_for_an_iam_token_sent_as_the_ticket() {
    let iam = iam(12 * HOUR).await;
    let emulator = emulator_accepting(&["iam-token-1"]).await;
    let client = connect(&emulator, service_account(&iam)).await;
    cloud::session_and_node_call(&client).await;
    // One exchange served the session and the unary call; the JWT was valid and short-lived.
    let requests = iam.requests();
    assert_eq!(requests.len(), 1);
    let (claims, kid) = verify_iam_request(&requests[0]).unwrap();
    assert_eq!(kid, "key-test");
    assert_eq!(claims.iss, "sa-test");
    assert_eq!(claims.aud, ydb_coordination::auth::IAM_TOKEN_URL);
    assert!(claims.exp - claims.iat <= 3600);
    assert_eq!(requests[0].header("content-type"), Some("application/json"));
}

#[tokio::test(start_paused = true)]
async fn the_iam_token_is_renewed_at_half_life_in_the_background() {
    let iam = iam(HOUR).await;
    let emulator = emulator_accepting(&["iam-token-1", "iam-token-2"]).await;
    let sa = Arc::new(service_account_of(&iam));
    cloud::renewed_at_half_life(&emulator, &iam, sa, ["iam-token-1", "iam-token-2"]).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_keeps_the_valid_token_and_is_tried_again_later() {
    let iam = iam(HOUR).await;
    let emulator = emulator_accepting(&["iam-token-1", "iam-token-2"]).await;
    let sa = Arc::new(service_account_of(&iam));
    let client = connect(&emulator, Credentials::provider(sa.clone())).await;
    within(client.describe_node("/local/app")).await.unwrap();

    iam.answer_with(|_, _| Reply::status(503));
    tokio::time::sleep(Duration::from_secs(31 * 60)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    iam.answered(2).await;
    // One attempt, no retries while the current token is valid; the calls go on with it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(current(&sa).await, "iam-token-1");
    assert_eq!(iam.count(), 2, "no new try before the retry pause");

    iam.answer_with(|r, n| iam_answer(r, n - 1, HOUR));
    tokio::time::sleep(Duration::from_secs(6)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    iam.answered(3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(current(&sa).await, "iam-token-2");
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(iam.count(), 3, "the renewed token is cached");
}

#[tokio::test(start_paused = true)]
async fn a_failing_iam_endpoint_is_retried_with_backoff_then_reported_as_unavailable() {
    let iam = MockHttp::start(|_, _| Reply::status(503)).await;
    let emulator = emulator_accepting(&["iam-token-1"]).await;
    // Discovery at build already tried (and gave up, keeping the seed endpoint).
    let client = connect(&emulator, service_account(&iam)).await;
    let before = iam.count();
    let started = tokio::time::Instant::now();
    let err = within(client.describe_node("/local/app"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let requests = iam.requests().split_off(before);
    assert_eq!(requests.len(), 5);
    // Full-jitter backoff below 100 + 200 + 400 + 800 ms in all.
    assert!(started.elapsed() <= Duration::from_millis(1500));
    assert!(requests.windows(2).all(|w| w[0].at <= w[1].at));

    // Two failures, then IAM answers: the caller gets the token.
    let before = iam.count();
    iam.answer_with(move |r, n| {
        if n < before + 2 {
            Reply::status(500)
        } else {
            iam_answer(r, 0, HOUR)
        }
    });
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(iam.count(), before + 3);
}

#[tokio::test(start_paused = true)]
async fn an_iam_refusal_is_unauthorized_and_not_retried() {
    let iam = MockHttp::start(|_, _| Reply::status(403)).await;
    let emulator = emulator_accepting(&["iam-token-1"]).await;
    let client = connect(&emulator, service_account(&iam)).await;
    let before = iam.count();
    let err = within(client.describe_node("/local/app"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(iam.count(), before + 1);
}

#[tokio::test(start_paused = true)]
async fn an_https_iam_endpoint_is_trusted_through_its_ca_and_refused_without_it() {
    let ca = certs::Ca::new("test IAM CA");
    let cert = ca.server(&["127.0.0.1"]);
    let iam =
        MockHttp::start_tls(&cert.cert_pem, &cert.key_pem, |r, n| iam_answer(r, n, HOUR)).await;
    let url = iam.https_url("/iam/v1/tokens");
    let key = key_json().to_string();

    let trusted = ServiceAccountCredentials::from_key_json(&key)
        .unwrap()
        .iam_ca_certificate(&ca.pem)
        .unwrap()
        .iam_endpoint(&url)
        .unwrap();
    assert_eq!(current(&trusted).await, "iam-token-1");

    // The system's roots do not know the test CA: a typed error at once, not retried.
    let untrusted = ServiceAccountCredentials::from_key_json(&key)
        .unwrap()
        .iam_endpoint(&url)
        .unwrap();
    let before = iam.connections();
    let err = within(untrusted.token()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert_eq!(iam.connections(), before + 1, "one handshake, not retried");
    assert_eq!(iam.count(), 1, "the refused handshake sent no request");

    let not_pem = ServiceAccountCredentials::from_key_json(&key)
        .unwrap()
        .iam_ca_certificate("not a certificate");
    assert_eq!(
        not_pem.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument)
    );
}

#[tokio::test(start_paused = true)]
async fn the_metadata_service_token_is_sent_and_renewed() {
    let metadata = MockHttp::start(|r, n| {
        if r.method != "GET" || r.header("metadata-flavor") != Some("Google") {
            return Reply::status(403);
        }
        Reply::json(serde_json::json!({
            "access_token": format!("md-token-{}", n + 1),
            "expires_in": 3600,
            "token_type": "Bearer",
        }))
    })
    .await;
    let path = "/computeMetadata/v1/instance/service-accounts/default/token";
    let credentials = MetadataCredentials::new()
        .endpoint(metadata.url(path))
        .unwrap();
    let emulator = emulator_accepting(&["md-token-1", "md-token-2"]).await;
    let client = connect(&emulator, Credentials::from(credentials)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(29 * 60)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(metadata.count(), 1);
    tokio::time::sleep(Duration::from_secs(2 * 60)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    metadata.answered(2).await;
    let requests = metadata.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == path));
}

#[tokio::test(start_paused = true)]
async fn a_metadata_token_that_lives_for_ever_is_used_and_never_overflows_the_clock() {
    let metadata = MockHttp::start(|_, _| {
        Reply::json(serde_json::json!({
            "access_token": "md-token",
            "expires_in": u64::MAX,
            "token_type": "Bearer",
        }))
    })
    .await;
    let credentials = MetadataCredentials::new()
        .endpoint(metadata.url("/token"))
        .unwrap();
    let emulator = emulator_accepting(&["md-token"]).await;
    let client = connect(&emulator, Credentials::from(credentials)).await;
    within(client.describe_node("/local/app")).await.unwrap();
    let session = within(client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap();
    assert_eq!(metadata.count(), 1);
    // Renewed after an hour at the latest, like any token.
    tokio::time::sleep(2 * HOUR).await;
    within(client.describe_node("/local/app")).await.unwrap();
    metadata.answered(2).await;
    let err = within(session.describe_semaphore("none", Default::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

/// An IAM endpoint that quotes what it was sent (the JWT, the query of its URL) in any field
/// of any answer, in its body, headers and reason phrase: no error shows any of it, nor the
/// key, and each keeps the kind of the answer.
#[tokio::test(start_paused = true)]
async fn secrets_an_iam_endpoint_echoes_never_show_in_errors() {
    let iam = MockHttp::start(|_, _| Reply::status(500)).await;
    let url = iam.url("/iam/v1/tokens?client_secret=SECRET-iam-query");
    let key = key_json().to_string();
    let credentials = || {
        ServiceAccountCredentials::from_key_json(&key)
            .unwrap()
            .iam_endpoint(&url)
            .unwrap()
    };
    let key_lines: Vec<&str> = cloud::TEST_ONLY_PRIVATE_KEY
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    assert_echoed_secrets_never_shown(&iam, 2, credentials, &key_lines).await;
}

/// The same for the metadata service, whose requests carry a secret only in the URL's query.
#[tokio::test(start_paused = true)]
async fn secrets_a_metadata_service_echoes_never_show_in_errors() {
    let metadata = MockHttp::start(|_, _| Reply::status(500)).await;
    let url = metadata.url("/token?audience=SECRET%20metadata%2Fquery");
    let credentials = || MetadataCredentials::new().endpoint(&url).unwrap();
    assert_echoed_secrets_never_shown(&metadata, 1, credentials, &[]).await;
}

#[test]
fn bad_key_files_name_the_file_and_the_field() {
    let with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut key = key_json();
        edit(&mut key);
        key.to_string()
    };
    let cases: Vec<(&str, String, Option<&str>)> = vec![
        ("not-json.json", "{ id: ".to_string(), None),
        (
            "no-id.json",
            with(&|k| {
                k.as_object_mut().unwrap().remove("id");
            }),
            Some("id"),
        ),
        (
            "numeric-sa.json",
            with(&|k| k["service_account_id"] = serde_json::json!(42)),
            Some("service_account_id"),
        ),
        (
            "bad-pem.json",
            with(&|k| k["private_key"] = serde_json::json!("-----BEGIN PRIVATE KEY-----\nAAAA\n")),
            Some("private_key"),
        ),
        (
            "no-key.json",
            with(&|k| {
                k.as_object_mut().unwrap().remove("private_key");
            }),
            Some("private_key"),
        ),
    ];
    for (name, contents, field) in cases {
        let path = temp_file(name, &contents);
        let err = Credentials::service_account_key_file(&path).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}");
        let detail = err
            .source()
            .and_then(|s| s.downcast_ref::<KeyFileError>())
            .unwrap();
        assert_eq!(detail.path(), Some(path.as_path()), "{name}");
        assert_eq!(detail.field(), field, "{name}");
    }
    let missing = std::env::temp_dir().join("ydb-coordination-no-such-key.json");
    let err = Credentials::service_account_key_file(&missing).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let detail = err.source().and_then(|s| s.downcast_ref::<KeyFileError>());
    assert_eq!(detail.and_then(|d| d.path()), Some(missing.as_path()));
    assert_eq!(detail.and_then(|d| d.field()), None);
}

/// A provider that caches a token and renews it only when told the server rejected it.
#[derive(Debug, Default)]
struct Renewing {
    generation: AtomicU64,
    asked: AtomicU64,
}

impl TokenProvider for Renewing {
    fn token(&self) -> TokenFuture<'_> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let token = format!("tok-{}", self.generation.load(Ordering::SeqCst));
        Box::pin(async move { Ok(Some(token)) })
    }

    fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// A client of `emulator` (discovery off) with a fresh [`Renewing`] provider.
async fn renewing_client(emulator: &Emulator) -> (Client, Arc<Renewing>) {
    let provider = Arc::new(Renewing::default());
    let credentials = Credentials::provider(provider.clone());
    let client = common::client_with(emulator.connection_string(), false, credentials).await;
    (client, provider)
}

/// A session on the scripted peer as `session_id` 7, with `credentials`.
async fn peer_session(
    peer: &mut Peer,
    credentials: Credentials,
) -> (Client, ydb_coordination::Session) {
    let client = common::client_with(peer.connection_string(), false, credentials).await;
    let c = client.clone();
    let pending = tokio::spawn(async move { c.session(peer::NODE, SessionOptions::new()).await });
    let (index, _) = peer.accept_start(7).await;
    assert_eq!(index, 0);
    (client, within(pending).await.unwrap().unwrap())
}

/// Waits for the next `session_start`, on stream `index`.
async fn expect_start(peer: &mut Peer, index: usize) {
    let (i, r) = peer.recv().await;
    assert_eq!(i, index);
    assert!(
        matches!(&r, peer::Rq::SessionStart(s) if s.session_id == 7),
        "{r:?}"
    );
}

fn started() -> Rs {
    Rs::SessionStarted(session_response::SessionStarted {
        session_id: 7,
        timeout_millis: 10_000,
    })
}

#[tokio::test(start_paused = true)]
async fn every_reattach_asks_the_credentials_for_a_fresh_token() {
    let mut peer = Peer::start().await;
    let counter = Arc::new(AtomicU64::new(0));
    let c = counter.clone();
    let credentials = Credentials::from_fn(move || {
        let n = c.fetch_add(1, Ordering::SeqCst);
        async move { Ok(Some(format!("tok-{n}"))) }
    });
    let (_client, session) = peer_session(&mut peer, credentials).await;
    let mut seen = vec![peer.ticket(0).unwrap()];
    for index in 1..=2 {
        peer.cut();
        expect_start(&mut peer, index).await;
        peer.send(index, started());
        common::wait_state(&session, |s| matches!(s, SessionState::Attached { .. })).await;
        seen.push(peer.ticket(index).unwrap());
    }
    // Each attach carried the token the provider gave at that moment.
    let mut distinct = seen.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{seen:?}");
    assert!(!session.token().is_cancelled());
}

async fn rejected_once_then_accepted(reject: impl Fn(&Peer, usize)) {
    let mut peer = Peer::start().await;
    let provider = Arc::new(Renewing::default());
    let (_client, session) = peer_session(&mut peer, Credentials::provider(provider.clone())).await;
    assert_eq!(peer.ticket(0).as_deref(), Some("tok-0"));
    peer.cut();
    expect_start(&mut peer, 1).await;
    assert_eq!(peer.ticket(1).as_deref(), Some("tok-0"));
    reject(&peer, 1);
    // At once (no backoff): the provider was told, and the next attach has a fresh token.
    expect_start(&mut peer, 2).await;
    assert_eq!(peer.ticket(2).as_deref(), Some("tok-1"));
    assert_eq!(provider.generation.load(Ordering::SeqCst), 1);
    peer.send(2, started());
    let state =
        common::wait_state(&session, |s| !matches!(s, SessionState::Reattaching { .. })).await;
    assert_eq!(state, SessionState::Attached { session_id: 7 });
    assert!(!session.token().is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn a_token_rejected_at_reattach_with_a_failure_is_renewed_once_and_the_session_kept() {
    rejected_once_then_accepted(|peer, index| peer.fail(index, StatusCode::Unauthorized)).await;
}

#[tokio::test(start_paused = true)]
async fn a_token_rejected_at_reattach_with_unauthenticated_is_renewed_once_and_the_session_kept() {
    rejected_once_then_accepted(|peer, index| {
        peer.error(index, tonic::Status::unauthenticated("token expired"));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_token_rejected_at_session_start_is_renewed_once_on_the_emulator() {
    // The emulator accepts only the second token the provider gives.
    let emulator = emulator_accepting(&["tok-1"]).await;
    let (client, provider) = renewing_client(&emulator).await;
    let session = within(client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap();
    assert_eq!(provider.generation.load(Ordering::SeqCst), 1);
    within(session.create_semaphore("sem", 1, b""))
        .await
        .unwrap();
    // A provider that cannot renew gets one retry, then the rejection.
    let stuck = common::client_with(
        emulator.connection_string(),
        false,
        Credentials::token("tok-0"),
    )
    .await;
    let started = tokio::time::Instant::now();
    let err = within(stuck.session("/local/app", SessionOptions::new()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    // At once, not after the connect budget (10 s): a renewed token that is rejected again
    // is rejected for good.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_call_whose_token_is_rejected_is_sent_again_once_with_a_fresh_one() {
    let emulator = emulator_accepting(&["tok-1"]).await;
    let (client, provider) = renewing_client(&emulator).await;
    within(client.describe_node("/local/app")).await.unwrap();
    assert_eq!(provider.generation.load(Ordering::SeqCst), 1);
    assert_eq!(provider.asked.load(Ordering::SeqCst), 2);
    // Rejected again after the renewal: reported, not sent a third time.
    let strict = emulator_accepting(&["never"]).await;
    let (client, stuck) = renewing_client(&strict).await;
    let err = within(client.describe_node("/local/app"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(stuck.asked.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_token_rejected_twice_at_reattach_ends_the_session_as_unauthorized() {
    let mut peer = Peer::start().await;
    let provider = Arc::new(Renewing::default());
    let (_client, session) = peer_session(&mut peer, Credentials::provider(provider.clone())).await;
    peer.cut();
    for index in 1..=2 {
        expect_start(&mut peer, index).await;
        peer.fail(index, StatusCode::Unauthorized);
    }
    within(session.token().cancelled()).await;
    let state = common::wait_state(&session, |s| matches!(s, SessionState::Expired)).await;
    assert_eq!(state, SessionState::Expired);
    let err = within(session.describe_semaphore("x", Default::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(peer.stream_count(), 3);
    assert_eq!(provider.generation.load(Ordering::SeqCst), 1);
}

/// Collects everything the crate logs, at every level.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn secrets_never_show_in_debug_logs_or_errors() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // IAM tokens that the server first rejects, then accepts after one renewal.
    let iam = MockHttp::start(|r, n| {
        let mut reply = iam_answer(r, n, HOUR);
        reply.body = reply.body.replace("iam-token-", "SECRET-iam-");
        reply
    })
    .await;
    let mut peer = Peer::start().await;
    let (client, session) = peer_session(&mut peer, service_account(&iam)).await;
    peer.cut();
    expect_start(&mut peer, 1).await;
    peer.fail(1, StatusCode::Unauthorized);
    expect_start(&mut peer, 2).await;
    peer.send(2, started());
    common::wait_state(&session, |s| matches!(s, SessionState::Attached { .. })).await;
    let tickets = [peer.ticket(0), peer.ticket(2)];
    assert_eq!(
        tickets.map(|t| t.unwrap_or_default()),
        ["SECRET-iam-1".to_string(), "SECRET-iam-2".to_string()]
    );

    // Errors on the way: a refused IAM, a rejected static token, a failed login.
    iam.answer_with(|_, _| Reply::status(401));
    let refused = {
        let client =
            common::client_with(peer.connection_string(), false, service_account(&iam)).await;
        within(client.describe_node("/local/app"))
            .await
            .unwrap_err()
    };
    let emulator = emulator_accepting(&["SECRET-accepted"]).await;
    let wrong = connect(&emulator, Credentials::token("SECRET-static")).await;
    let rejected = within(wrong.describe_node("/local/app")).await.unwrap_err();
    let login = connect(&emulator, Credentials::login("root", "SECRET-password")).await;
    let login_err = within(login.session("/local/app", SessionOptions::new()))
        .await
        .unwrap_err();

    let mut shown = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    for err in [&refused, &rejected, &login_err] {
        shown.push_str(&format!("{err}\n{err:?}\n"));
        let mut source = err.source();
        while let Some(s) = source {
            shown.push_str(&format!("{s}\n{s:?}\n"));
            source = s.source();
        }
    }
    let sa = ServiceAccountCredentials::from_key_json(&key_json().to_string()).unwrap();
    shown.push_str(&format!(
        "{client:?}\n{session:?}\n{wrong:?}\n{login:?}\n{sa:?}\n{:?}\n",
        service_account(&iam)
    ));
    assert!(!shown.is_empty());
    assert!(!shown.contains("SECRET"), "a secret was shown");
    // Nor the private key, nor the JWT (its header is the same for every request).
    let key_line = cloud::TEST_ONLY_PRIVATE_KEY.lines().nth(1).unwrap();
    assert!(!shown.contains(key_line));
    assert!(!shown.contains("eyJ"), "a JWT was shown");
}

/// A provider whose every token takes `delay` to come (a slow token service, no cache).
#[derive(Debug)]
struct Slow {
    delay: Duration,
}

impl TokenProvider for Slow {
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            Ok(Some("slow-token".to_string()))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_token_slower_than_an_attach_attempt_does_not_fail_the_session_start() {
    let emulator = within(Emulator::builder().node("/local/app").start())
        .await
        .unwrap();
    // Longer than the two ping intervals (2 s) the server has to answer an attach, and
    // longer than the session timeout less its margin (4.5 s): the session's deadline
    // counts from when the start could be written, not from when the token was asked for.
    let credentials = Credentials::provider(Slow {
        delay: Duration::from_secs(6),
    });
    let client = common::client_with(emulator.connection_string(), false, credentials).await;
    let options = SessionOptions::new()
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(20));
    let session = within(client.session("/local/app", options)).await.unwrap();
    // A few ping intervals on, the session and a lock in it are alive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!session.state().is_terminal());
    let guard = within(session.mutex("m").lock()).await.unwrap();
    assert!(!guard.is_lost());
}

/// A provider whose `hang`-th token (counting from 1) never comes; the others come at once.
#[derive(Debug)]
struct HangsOnce {
    hang: u64,
    asked: AtomicU64,
}

impl TokenProvider for HangsOnce {
    fn token(&self) -> TokenFuture<'_> {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let hang = n == self.hang;
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(Some("tok".to_string()))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_token_that_never_comes_costs_a_reattach_attempt_not_the_session() {
    let emulator = within(Emulator::builder().node("/local/app").start())
        .await
        .unwrap();
    let proxy = within(ydb_coordination::emulator::FaultProxy::start(
        emulator.local_addr(),
    ))
    .await
    .unwrap();
    // The first token starts the session; the second, for the reattach, never comes.
    let provider = Arc::new(HangsOnce {
        hang: 2,
        asked: AtomicU64::new(0),
    });
    let client = within(
        Client::builder(proxy.connection_string(emulator.database()))
            .discovery(false)
            .credentials(Credentials::provider(provider.clone()))
            .request_timeout(Duration::from_secs(2))
            .build(),
    )
    .await
    .unwrap();
    let session = within(client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap();
    let guard = within(session.mutex("m").lock()).await.unwrap();
    proxy.net().cut();
    // The first reattach gives up on its token after the request timeout (2 s); the next
    // one gets a token and reattaches, well within the session timeout (10 s).
    let mut states = session.state_changes();
    within(states.wait_for(|s| {
        matches!(
            s,
            ydb_coordination::session::SessionState::Reattaching { .. }
        )
    }))
    .await
    .unwrap();
    within(
        states.wait_for(|s| matches!(s, ydb_coordination::session::SessionState::Attached { .. })),
    )
    .await
    .unwrap();
    assert!(!guard.is_lost(), "the lock survived the reattach");
    assert!(provider.asked.load(Ordering::SeqCst) >= 3);
}
