//! OAuth 2.0 token exchange (RFC 8693) against a mock token endpoint on loopback: the form that
//! is posted, the JWTs of JWT sources (signatures checked with the public key for every
//! algorithm family), the `Bearer` ticket an emulator that enforces tokens accepts, caching and
//! renewal at half life, retries of a failing endpoint, the typed errors of refusals and bad
//! answers, secrets an endpoint echoes kept out of every error, and config files whose errors
//! name the field.
#![allow(clippy::unwrap_used)]

use crate::certs;
use crate::cloud;
use crate::common;
use crate::oauth2;

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use cloud::{
    Echo, MockHttp, Reply, assert_echoed_secrets_never_shown, connect, current, echo_reply,
    emulator_accepting, secrets_sent, temp_file,
};
use common::within;
use oauth2::{TOKEN_PATH, endpoint, field, form, issue, oauth_error, signing_key, verify_jwt};
use ydb_coordination::{
    ErrorKind, auth::Credentials, auth::JwtTokenSource, auth::KeyFileError,
    auth::OAuth2TokenExchangeCredentials, auth::OAuth2TokenSource, auth::TokenExchangeError,
    auth::TokenProvider,
};

const HOUR: Duration = Duration::from_secs(3600);

/// A config file for `mock`'s endpoint with `extra` fields.
fn config_file(mock: &MockHttp, extra: serde_json::Value) -> std::path::PathBuf {
    let mut config = serde_json::json!({ "token-endpoint": mock.url(TOKEN_PATH) });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    temp_file("oauth2.json", &config.to_string())
}

fn fixed_subject() -> serde_json::Value {
    serde_json::json!({
        "subject-credentials": {
            "type": "FIXED",
            "token": "subject-token",
            "token-type": "urn:ietf:params:oauth:token-type:id_token",
        }
    })
}

fn credentials_of(mock: &MockHttp, extra: serde_json::Value) -> OAuth2TokenExchangeCredentials {
    OAuth2TokenExchangeCredentials::from_config_file(config_file(mock, extra)).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_config_file_is_exchanged_and_the_bearer_token_opens_a_session_on_the_emulator() {
    let mock = endpoint(HOUR).await;
    let rsa = signing_key("RS256");
    let mut extra = fixed_subject();
    extra["aud"] = serde_json::json!(["aud-1", "aud-2"]);
    extra["scope"] = serde_json::json!(["scope-1", "scope-2"]);
    extra["res"] = serde_json::json!("https://ydb.example.com/res");
    extra["actor-credentials"] = oauth2::jwt_source(&rsa, "10m");
    // What `YDB_OAUTH2_KEY_FILE` leads to.
    let credentials = Credentials::oauth2_key_file(config_file(&mock, extra)).unwrap();
    let emulator = emulator_accepting(&["Bearer oauth-token-1"]).await;
    let client = connect(&emulator, credentials).await;
    cloud::session_and_node_call(&client).await;

    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "one exchange served every call");
    let r = &requests[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", TOKEN_PATH));
    assert_eq!(
        r.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let mut sent = form(r);
    let actor = sent.iter().position(|(k, _)| k == "actor_token").unwrap();
    let (_, jwt) = sent.remove(actor);
    let want = [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
        ("audience", "aud-1"),
        ("audience", "aud-2"),
        ("scope", "scope-1 scope-2"),
        ("resource", "https://ydb.example.com/res"),
        ("subject_token", "subject-token"),
        (
            "subject_token_type",
            "urn:ietf:params:oauth:token-type:id_token",
        ),
        ("actor_token_type", "urn:ietf:params:oauth:token-type:jwt"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(sent, want);
    let (header, claims) = verify_jwt(&jwt, &rsa).unwrap();
    assert_eq!(header.kid.as_deref(), Some("kid-1"));
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        600
    );
}

#[tokio::test(start_paused = true)]
async fn jwt_sources_sign_with_every_algorithm_family_and_the_signatures_verify() {
    let mock = endpoint(HOUR).await;
    for alg in [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "HS256", "HS384",
        "HS512",
    ] {
        let key = signing_key(alg);
        let mut source = oauth2::jwt_source(&key, "1h30m");
        // The algorithm's name is taken in any case, as the SDKs take it.
        source["alg"] = serde_json::json!(alg.to_lowercase());
        let credentials =
            credentials_of(&mock, serde_json::json!({ "subject-credentials": source }));
        let before = oauth2::unix_now();
        current(&credentials).await;
        let r = mock.requests().pop().unwrap();
        assert_eq!(
            field(&r, "subject_token_type").as_deref(),
            Some("urn:ietf:params:oauth:token-type:jwt")
        );
        let jwt = field(&r, "subject_token").unwrap();
        let (header, claims) = verify_jwt(&jwt, &key).unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert_eq!(header.typ.as_deref(), Some("JWT"), "{alg}");
        assert_eq!(header.kid.as_deref(), Some("kid-1"), "{alg}");
        assert_eq!(claims["iss"], "issuer-1", "{alg}");
        assert_eq!(claims["sub"], "subject-1", "{alg}");
        assert_eq!(claims["jti"], "jti-1", "{alg}");
        assert_eq!(claims["aud"], serde_json::json!(["jwt-aud-1", "jwt-aud-2"]));
        let iat = claims["iat"].as_u64().unwrap();
        assert!(iat >= before && iat <= oauth2::unix_now(), "issued now");
        assert_eq!(claims["exp"].as_u64().unwrap() - iat, 5400, "{alg}");
    }
    // An EC key in SEC1 PEM, as `openssl ecparam -genkey` writes it, signs too.
    let key = oauth2::sec1_signing_key();
    let source = oauth2::jwt_source(&key, "1h");
    let credentials = credentials_of(&mock, serde_json::json!({ "subject-credentials": source }));
    current(&credentials).await;
    let jwt = field(&mock.requests().pop().unwrap(), "subject_token").unwrap();
    verify_jwt(&jwt, &key).unwrap();

    // One audience is sent as a string; unset claims and headers are left out.
    let key = signing_key("HS256");
    let jwt = JwtTokenSource::new("HS256", {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(&key.private_key)
            .unwrap()
    })
    .unwrap()
    .audience(["only"]);
    let credentials = OAuth2TokenExchangeCredentials::new(mock.url(TOKEN_PATH))
        .unwrap()
        .subject_token(jwt);
    current(&credentials).await;
    let jwt = field(&mock.requests().pop().unwrap(), "subject_token").unwrap();
    let (header, claims) = verify_jwt(&jwt, &key).unwrap();
    assert_eq!(header.kid, None);
    let mut names: Vec<&String> = claims.as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(names, ["aud", "exp", "iat"]);
    assert_eq!(claims["aud"], "only");
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        3600
    );
}

#[tokio::test(start_paused = true)]
async fn the_token_is_cached_and_renewed_at_half_life_with_a_fresh_jwt() {
    let mock = endpoint(HOUR).await;
    let key = signing_key("ES256");
    let credentials = Arc::new(credentials_of(
        &mock,
        serde_json::json!({ "subject-credentials": oauth2::jwt_source(&key, "1h") }),
    ));
    let emulator = emulator_accepting(&["Bearer oauth-token-1", "Bearer oauth-token-2"]).await;
    let tokens = ["Bearer oauth-token-1", "Bearer oauth-token-2"];
    cloud::renewed_at_half_life(&emulator, &mock, credentials, tokens).await;
    // Each exchange carried a JWT of its own, valid and issued for it.
    let jwts: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| field(r, "subject_token").unwrap())
        .collect();
    assert_ne!(jwts[0], jwts[1]);
    for jwt in &jwts {
        verify_jwt(jwt, &key).unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_endpoint_is_retried_with_backoff_then_succeeds() {
    let mock = MockHttp::start(|r, n| {
        if n < 2 {
            oauth_error(500, "server_error", "try later")
        } else {
            issue(r, 0, HOUR)
        }
    })
    .await;
    let credentials = credentials_of(&mock, fixed_subject());
    let started = tokio::time::Instant::now();
    assert_eq!(current(&credentials).await, "Bearer oauth-token-1");
    assert_eq!(mock.count(), 3);
    // Full-jitter backoff: below 100 + 200 ms in all.
    assert!(started.elapsed() <= Duration::from_millis(300));

    // An endpoint that keeps failing: five tries, then Unavailable, the refusal in the chain.
    let failing = MockHttp::start(|_, _| Reply::status(503)).await;
    let credentials = credentials_of(&failing, fixed_subject());
    let err = within(credentials.token()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(failing.count(), 5);
    assert_eq!(refusal_of(&err).map(|r| r.status()), Some(503));
}

#[tokio::test(start_paused = true)]
async fn a_refusal_after_a_grant_is_tried_again_with_backoff_as_passing() {
    // A grant, then five refusals (a key rotation at the identity provider), then grants.
    let mock = MockHttp::start(|r, n| {
        if (1..=5).contains(&n) {
            oauth_error(401, "invalid_client", "the signing key is not known yet")
        } else {
            issue(r, n, Duration::from_secs(60))
        }
    })
    .await;
    let credentials = credentials_of(&mock, fixed_subject());
    assert_eq!(current(&credentials).await, "Bearer oauth-token-1");
    tokio::time::advance(Duration::from_secs(61)).await;
    // The token expired: the refusals are retried with backoff, then reported as passing.
    let err = within(credentials.token()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert!(err.is_retryable());
    assert_eq!(mock.count(), 6);
    assert_eq!(refusal_of(&err).map(|r| r.status()), Some(401));
    // The next try gets a token again.
    assert_eq!(current(&credentials).await, "Bearer oauth-token-7");
}

/// A token endpoint that quotes what it was sent (the subject token, the actor's JWT, the
/// client secret in the URL) in any field of any answer, in its body, headers and reason
/// phrase: no error shows any of it, and each keeps the kind of the answer.
#[tokio::test(start_paused = true)]
async fn secrets_the_endpoint_echoes_never_show_in_errors() {
    let mock = MockHttp::start(|_, _| Reply::status(500)).await;
    let url = mock.url(&format!(
        "{TOKEN_PATH}?client_secret=SECRET%20client%2Fsecret%2B1"
    ));
    let credentials = || {
        let actor = JwtTokenSource::new("HS256", b"SECRET-hmac-key").unwrap();
        OAuth2TokenExchangeCredentials::new(&url)
            .unwrap()
            .subject_token(OAuth2TokenSource::fixed(
                "SECRET subject/token+1",
                "urn:ietf:params:oauth:token-type:id_token",
            ))
            .actor_token(actor.issuer("me"))
    };
    assert_echoed_secrets_never_shown(&mock, 3, credentials, &[]).await;

    // A refusal after a grant reads as passing and is retried: shown once the retries are
    // through, it quotes no secret either.
    let credentials = credentials();
    mock.answer_with(|r, _| echo_reply(r, 200, Echo::Field("refresh_token"), 0));
    current(&credentials).await;
    credentials.invalidate();
    mock.answer_with(|r, _| echo_reply(r, 400, Echo::EveryField, 2));
    let err = within(credentials.token()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    let sent: Vec<String> = mock.requests().iter().flat_map(secrets_sent).collect();
    let shown = cloud::shown(&err);
    assert!(sent.iter().all(|s| !shown.contains(s.as_str())));
    assert!(!shown.contains("SECRET"), "a secret was shown");
}

/// The token endpoint's refusal somewhere in the source chain of `err`.
fn refusal_of(err: &ydb_coordination::Error) -> Option<&TokenExchangeError> {
    let mut source = err.source();
    while let Some(s) = source {
        if let Some(refusal) = s.downcast_ref::<TokenExchangeError>() {
            return Some(refusal);
        }
        source = s.source();
    }
    None
}

#[tokio::test(start_paused = true)]
async fn an_oauth_error_answer_is_unauthorized_not_retried_and_keeps_its_fields() {
    let mock = MockHttp::start(|_, _| {
        oauth_error(400, "invalid_grant", "subject-token is not valid here")
    })
    .await;
    let credentials = credentials_of(&mock, fixed_subject());
    let err = within(credentials.token()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
    assert_eq!(mock.count(), 1, "a refusal is not repeated");
    let refusal = refusal_of(&err).unwrap();
    assert_eq!(refusal.status(), 400);
    assert_eq!(refusal.error(), Some("invalid_grant"));
    assert_eq!(refusal.uri(), Some("https://auth.example.com/errors"));
    // The description quoted the subject token: it is redacted wherever it shows.
    let shown = format!("{err} {err:?} {refusal} {refusal:?} {credentials:?}");
    assert!(!shown.contains("subject-token"), "{shown}");

    // The same through a client: the session start reports the refusal's kind.
    let emulator = emulator_accepting(&["Bearer oauth-token-1"]).await;
    let client = connect(&emulator, Credentials::from(credentials)).await;
    let err = within(client.describe_node("/local/app"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthorized);
}

#[tokio::test(start_paused = true)]
async fn answers_that_are_not_bearer_tokens_are_protocol_errors_and_not_retried() {
    for body in [
        serde_json::json!({"access_token": "t", "token_type": "MAC", "expires_in": 60}).to_string(),
        serde_json::json!({"access_token": "t", "token_type": "Bearer"}).to_string(),
        serde_json::json!({"access_token": "t", "token_type": "Bearer", "expires_in": 60,
            "scope": "something else"})
        .to_string(),
        "{\"access_token\": ".to_string(),
        "<html>token</html>".to_string(),
    ] {
        let answer = Reply {
            status: 200,
            body: body.clone(),
        };
        let mock = MockHttp::start(move |_, _| answer.clone()).await;
        let credentials = credentials_of(&mock, fixed_subject());
        let err = within(credentials.token()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol, "{body}");
        assert_eq!(mock.count(), 1, "{body}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_https_token_endpoint_is_trusted_through_its_ca_and_refused_without_it() {
    let ca = certs::Ca::new("test token endpoint CA");
    let cert = ca.server(&["127.0.0.1"]);
    let mock = MockHttp::start_tls(&cert.cert_pem, &cert.key_pem, |r, n| issue(r, n, HOUR)).await;
    let url = mock.https_url(TOKEN_PATH);
    let subject = OAuth2TokenSource::fixed("t", "urn:ietf:params:oauth:token-type:id_token");
    let trusted = OAuth2TokenExchangeCredentials::new("https://placeholder.invalid/")
        .unwrap()
        .ca_certificate(&ca.pem)
        .unwrap()
        .token_endpoint(&url)
        .unwrap()
        .subject_token(subject.clone());
    assert_eq!(current(&trusted).await, "Bearer oauth-token-1");
    let untrusted = OAuth2TokenExchangeCredentials::new(&url)
        .unwrap()
        .subject_token(subject);
    let err = within(untrusted.token()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert_eq!(mock.count(), 1, "the refused handshake sent no request");
}

#[test]
fn bad_config_files_name_the_file_and_the_field() {
    let rsa = signing_key("RS256").private_key;
    let ec = signing_key("ES256").private_key;
    let endpoint = serde_json::json!("http://127.0.0.1:1/token");
    let jwt = |edit: serde_json::Value| {
        let mut source = serde_json::json!({"type": "JWT", "alg": "RS256", "private-key": rsa});
        if let (Some(s), Some(e)) = (source.as_object_mut(), edit.as_object()) {
            s.extend(e.clone());
        }
        serde_json::json!({"token-endpoint": endpoint, "subject-credentials": source})
    };
    let cases: Vec<(serde_json::Value, Option<&str>)> = vec![
        (serde_json::json!({"aud": "x"}), Some("token-endpoint")),
        (
            serde_json::json!({"token-endpoint": ""}),
            Some("token-endpoint"),
        ),
        (
            serde_json::json!({"token-endpoint": "ftp://h/x"}),
            Some("token-endpoint"),
        ),
        (
            serde_json::json!({"token-endpoint": 7}),
            Some("token-endpoint"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint, "aud": 7}),
            Some("aud"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint, "scope": [1]}),
            Some("scope"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint, "res": {}}),
            Some("res"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint, "grant-type": 1}),
            Some("grant-type"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint, "subject-credentials": "FIXED"}),
            Some("subject-credentials"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint,
                "actor-credentials": {"type": "OIDC", "token": "t", "token-type": "tt"}}),
            Some("actor-credentials.type"),
        ),
        (
            serde_json::json!({"token-endpoint": endpoint,
                "actor-credentials": {"type": "FIXED", "token": "t"}}),
            Some("actor-credentials.token-type"),
        ),
        (
            jwt(serde_json::json!({"type": null})),
            Some("subject-credentials.type"),
        ),
        (
            jwt(serde_json::json!({"alg": "RS1024"})),
            Some("subject-credentials.alg"),
        ),
        (
            jwt(serde_json::json!({"alg": "ES512"})),
            Some("subject-credentials.alg"),
        ),
        (
            jwt(serde_json::json!({"alg": "none"})),
            Some("subject-credentials.alg"),
        ),
        (
            jwt(serde_json::json!({"private-key": "not a key"})),
            Some("subject-credentials.private-key"),
        ),
        (
            jwt(serde_json::json!({"private-key": ""})),
            Some("subject-credentials.private-key"),
        ),
        // An RSA key for an EC algorithm, an EC key for an RSA one, an HMAC secret not in base64.
        (
            jwt(serde_json::json!({"alg": "ES256"})),
            Some("subject-credentials.private-key"),
        ),
        (
            jwt(serde_json::json!({"private-key": ec})),
            Some("subject-credentials.private-key"),
        ),
        (
            jwt(serde_json::json!({"alg": "HS256", "private-key": "*not base64*"})),
            Some("subject-credentials.private-key"),
        ),
        (
            jwt(serde_json::json!({"ttl": "soon"})),
            Some("subject-credentials.ttl"),
        ),
        (
            jwt(serde_json::json!({"ttl": "-1h"})),
            Some("subject-credentials.ttl"),
        ),
        (
            jwt(serde_json::json!({"ttl": "0s"})),
            Some("subject-credentials.ttl"),
        ),
        (
            jwt(serde_json::json!({"ttl": 3600})),
            Some("subject-credentials.ttl"),
        ),
        (
            jwt(serde_json::json!({"aud": [1]})),
            Some("subject-credentials.aud"),
        ),
        (
            jwt(serde_json::json!({"kid": 1})),
            Some("subject-credentials.kid"),
        ),
        (serde_json::json!(["token-endpoint"]), None),
    ];
    for (config, want) in cases {
        let path = temp_file("oauth2.json", &config.to_string());
        let err = Credentials::oauth2_key_file(&path).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{config}");
        let detail = err
            .source()
            .and_then(|s| s.downcast_ref::<KeyFileError>())
            .unwrap();
        assert_eq!(detail.path(), Some(path.as_path()), "{config}");
        assert_eq!(detail.field(), want, "{config}");
        // No key material in the error.
        assert!(
            !format!("{err:?}").contains("PRIVATE KEY-----\nMI"),
            "{config}"
        );
    }
    let not_json = OAuth2TokenExchangeCredentials::from_config_json("{ token-endpoint: ");
    let detail = not_json.as_ref().err().and_then(|e| e.source());
    let detail = detail
        .and_then(|s| s.downcast_ref::<KeyFileError>())
        .unwrap();
    assert_eq!((detail.path(), detail.field()), (None, None));
    let missing = std::env::temp_dir().join("ydb-coordination-no-such-oauth2.json");
    let err = Credentials::oauth2_key_file(&missing).unwrap_err();
    let detail = err.source().and_then(|s| s.downcast_ref::<KeyFileError>());
    assert_eq!(detail.and_then(|d| d.path()), Some(missing.as_path()));
    assert_eq!(
        JwtTokenSource::new("ES512", b"k").err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument)
    );
}
