//! The same OAuth 2.0 config file read by this crate and by the official Python SDK
//! (`ydb.oauth2_token_exchange.Oauth2TokenExchangeCredentials.from_file`), both exchanging at
//! one mock token endpoint: the posted form fields, the JWT headers and claims (but the values
//! of `iat`, `exp` and `jti`) and the ticket must agree. Skipped, with the reason printed, when
//! `python3` or its `ydb` package (with `pyjwt`, `requests`; `cryptography` for the RSA and EC
//! cases) cannot be imported.
#![allow(clippy::unwrap_used)]

use crate::cloud;
use crate::oauth2;

use std::collections::BTreeMap;
use std::time::Duration;

use cloud::{MockHttp, Recorded, temp_file};
use oauth2::{SigningKey, TOKEN_PATH, claims_of, form, issue, sec1_signing_key, signing_key};
use ydb_coordination::{auth::OAuth2TokenExchangeCredentials, auth::TokenProvider};

/// A bound on everything that involves the Python process (real time: it is a real process).
const LIMIT: Duration = Duration::from_secs(60);

const PYTHON: &str = "
import sys
from ydb.oauth2_token_exchange import Oauth2TokenExchangeCredentials
print(Oauth2TokenExchangeCredentials.from_file(sys.argv[1]).get_auth_token())
";

/// Whether `python3` imports `modules`; why not if it does not.
async fn python_has(modules: &str) -> Result<(), String> {
    let run = tokio::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output();
    match tokio::time::timeout(LIMIT, run).await {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()),
        Ok(Err(e)) => Err(format!("python3 cannot be run: {e}")),
        Err(_) => Err("python3 did not answer".to_string()),
    }
}

/// The ticket the Python SDK makes of the config file at `path`.
async fn python_ticket(path: &std::path::Path) -> String {
    let run = tokio::process::Command::new("python3")
        .args(["-c", PYTHON])
        .arg(path)
        .output();
    let out = tokio::time::timeout(LIMIT, run).await.unwrap().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The form as a multiset of fields, the JWTs replaced by their header and claims with the
/// values that differ from run to run (`iat`, `exp`, `jti`) replaced by the JWT's lifetime.
fn comparable(r: &Recorded) -> BTreeMap<String, Vec<String>> {
    let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in form(r) {
        let value = if value.matches('.').count() == 2 && value.starts_with("eyJ") {
            let mut jwt = claims_of(&value);
            let claims = &mut jwt["claims"];
            let lifetime = claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap();
            for name in ["iat", "exp", "jti"] {
                if let Some(v) = claims.get_mut(name) {
                    *v = serde_json::json!("<varies>");
                }
            }
            jwt["lifetime"] = serde_json::json!(lifetime);
            jwt.to_string()
        } else {
            value
        };
        fields.entry(name).or_default().push(value);
    }
    fields
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_posts_the_same_form_and_jwt_for_the_same_config_file() {
    if let Err(why) = python_has("ydb.oauth2_token_exchange, jwt, requests").await {
        println!("skipped: the Python SDK is not importable ({why}); pip install ydb");
        return;
    }
    let crypto = python_has("cryptography").await;
    let mock = MockHttp::start(|r, _| issue(r, 0, Duration::from_secs(3600))).await;
    let mut keys: Vec<(&str, SigningKey)> = ["HS256", "HS512", "RS256", "PS384", "ES256", "ES384"]
        .into_iter()
        .map(|alg| (alg, signing_key(alg)))
        .collect();
    keys.push(("ES256 (SEC1 key)", sec1_signing_key()));
    for (alg, key) in keys {
        if !alg.starts_with("HS")
            && let Err(why) = &crypto
        {
            println!("{alg} skipped: Python has no cryptography package ({why})");
            continue;
        }
        let mut subject = oauth2::jwt_source(&key, "30m");
        // One audience, given as a string.
        subject["aud"] = serde_json::json!("jwt-aud");
        let config = serde_json::json!({
            "token-endpoint": mock.url(TOKEN_PATH),
            "aud": ["aud-1", "aud-2"],
            "scope": ["scope-1", "scope-2"],
            "res": "https://ydb.example.com/res",
            "requested-token-type": "urn:ietf:params:oauth:token-type:access_token",
            "subject-credentials": subject,
            "actor-credentials": {
                "type": "FIXED",
                "token": "actor token/with+signs&=",
                "token-type": "urn:ietf:params:oauth:token-type:access_token",
            },
        });
        let path = temp_file("oauth2.json", &config.to_string());
        let ours = OAuth2TokenExchangeCredentials::from_config_file(&path).unwrap();
        let ours = tokio::time::timeout(LIMIT, ours.token()).await.unwrap();
        let theirs = python_ticket(&path).await;
        assert_eq!(ours.unwrap().as_deref(), Some(theirs.as_str()), "{alg}");
        let requests = mock.requests();
        let [.., rust, python] = requests.as_slice() else {
            panic!("{alg}: two exchanges expected");
        };
        assert_eq!(rust.header("content-type"), python.header("content-type"));
        assert_eq!(comparable(rust), comparable(python), "{alg}");
        println!("{alg}: the same form, JWT header and claims as the Python SDK");
    }
}
