//! gRPC over TLS end to end, against the emulator serving TLS with certificates made at run
//! time: a custom CA, a certificate from the wrong CA, the domain override, and the system
//! roots as the default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::certs;
use crate::common;

use std::time::Duration;

use certs::{Ca, ServerCert};
use common::within;
use tokio::time::Instant;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, ClientBuilder, ErrorKind, SessionOptions, config::NodeConfig};

const NODE: &str = "/local/app";

/// Well under the request timeout: a rejected certificate is reported at once, not retried.
const FAST: Duration = Duration::from_secs(1);

async fn tls_emulator(cert: &ServerCert) -> Emulator {
    within(
        Emulator::builder()
            .node(NODE)
            .tls(cert.cert_pem.clone(), cert.key_pem.clone())
            .start(),
    )
    .await
    .unwrap()
}

async fn build(builder: ClientBuilder) -> Client {
    within(builder.build()).await.unwrap()
}

/// What a describe, a session start and a lock give: the error kind of the first failure.
async fn use_it(client: &Client) -> Result<(), ErrorKind> {
    client.describe_node(NODE).await.map_err(|e| e.kind())?;
    let session = client
        .session(NODE, SessionOptions::new())
        .await
        .map_err(|e| e.kind())?;
    let guard = session.mutex("m").lock().await.map_err(|e| e.kind())?;
    assert!(!guard.is_lost());
    guard.unlock().await.map_err(|e| e.kind())?;
    session.close().await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn grpcs_with_a_custom_ca_serves_sessions_node_admin_and_discovery() {
    let ca = Ca::new("test CA");
    let cert = ca.server(&["127.0.0.1", "localhost"]);
    let emulator = tls_emulator(&cert).await;
    let cs = emulator.connection_string();
    assert!(cs.starts_with("grpcs://"), "{cs}");
    // Discovery names a second TLS listener; the first stops once the client knows it.
    let second = within(emulator.add_listener("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    emulator.advertise(vec![second]);
    let client = build(Client::builder(&cs).ca_certificate(ca.pem.clone())).await;
    assert!(emulator.stop_listener(emulator.local_addr()));

    within(client.create_node("other", NodeConfig::new()))
        .await
        .unwrap();
    within(client.alter_node("other", NodeConfig::new()))
        .await
        .unwrap();
    assert_eq!(within(use_it(&client)).await, Ok(()));
    within(client.drop_node("other")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_certificate_from_another_ca_fails_at_once_with_a_transport_error() {
    let ours = Ca::new("test CA");
    let theirs = Ca::new("someone else's CA");
    let emulator = tls_emulator(&theirs.server(&["127.0.0.1"])).await;
    let client = build(
        Client::builder(emulator.connection_string())
            .ca_certificate(ours.pem.clone())
            .request_timeout(Duration::from_secs(30)),
    )
    .await;

    let started = Instant::now();
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert!(err.grpc_code().is_some());
    let options = SessionOptions::new().connect_timeout(Duration::from_secs(30));
    let err = within(client.session(NODE, options)).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Transport,
        "not a timeout after retries"
    );
    assert!(started.elapsed() < FAST, "took {:?}", started.elapsed());
}

#[tokio::test(start_paused = true)]
async fn the_tls_domain_override_verifies_a_name_other_than_the_host() {
    let ca = Ca::new("test CA");
    let emulator = tls_emulator(&ca.server(&["coordination.test"])).await;
    let builder = Client::builder(emulator.connection_string())
        .ca_certificate(ca.pem.clone())
        .discovery(false);

    let by_host = build(builder.clone()).await;
    let started = Instant::now();
    assert_eq!(
        within(use_it(&by_host)).await,
        Err(ErrorKind::Transport),
        "the certificate does not name 127.0.0.1"
    );
    assert!(started.elapsed() < FAST);

    let by_domain = build(builder.tls_domain("coordination.test")).await;
    assert_eq!(within(use_it(&by_domain)).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn without_a_ca_certificate_only_the_system_roots_are_trusted() {
    let ca = Ca::new("test CA");
    let emulator = tls_emulator(&ca.server(&["127.0.0.1"])).await;
    let builder = Client::builder(emulator.connection_string()).discovery(false);

    let system_roots = build(builder.clone()).await;
    assert_eq!(
        within(use_it(&system_roots)).await,
        Err(ErrorKind::Transport),
        "a self-made CA is in no system store"
    );
    let with_ca = build(builder.ca_certificate(ca.pem.clone())).await;
    assert_eq!(within(use_it(&with_ca)).await, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_plaintext_client_and_a_tls_server_do_not_hang() {
    let ca = Ca::new("test CA");
    let emulator = tls_emulator(&ca.server(&["127.0.0.1"])).await;
    let plaintext = emulator
        .connection_string()
        .replacen("grpcs://", "grpc://", 1);
    let client = build(
        Client::builder(plaintext)
            .discovery(false)
            .request_timeout(Duration::from_secs(2)),
    )
    .await;
    let start = tokio::time::Instant::now();
    let err = within(client.describe_node(NODE)).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Transport | ErrorKind::Timeout),
        "{:?}",
        err.kind()
    );
    // Within the request timeout, not the test's own bound.
    assert!(start.elapsed() <= Duration::from_secs(2));
}
