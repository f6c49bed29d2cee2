//! A mock OAuth 2.0 token endpoint (RFC 8693) on the mock HTTP server of `cloud.rs`, and what
//! the tests need around it: the posted form decoded, config files, signing keys of every
//! family, and JWTs verified with the public half.

#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::Duration;

use crate::cloud::{MockHttp, Recorded, Reply, TEST_ONLY_PRIVATE_KEY, TEST_ONLY_PUBLIC_KEY};

/// The path the mock endpoint answers on.
pub const TOKEN_PATH: &str = "/oauth2/token";

/// The form fields of a request, decoded, in the order sent.
pub fn form(r: &Recorded) -> Vec<(String, String)> {
    form_urlencoded::parse(&r.body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The first value of the form field `name`.
pub fn field(r: &Recorded, name: &str) -> Option<String> {
    form(r).into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// The answer of a token endpoint that issues `oauth-token-1`, `oauth-token-2`, ... living
/// `life`, to a form POST with a grant type; anything else gets a 400 with an OAuth error.
pub fn issue(r: &Recorded, n: usize, life: Duration) -> Reply {
    let is_form = r.header("content-type") == Some("application/x-www-form-urlencoded");
    if r.method != "POST" || r.path != TOKEN_PATH || !is_form || field(r, "grant_type").is_none() {
        return oauth_error(400, "invalid_request", "not a token exchange request");
    }
    Reply::json(serde_json::json!({
        "access_token": format!("oauth-token-{}", n + 1),
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer",
        "expires_in": life.as_secs(),
    }))
}

/// An OAuth error answer (RFC 6749 section 5.2).
pub fn oauth_error(status: u16, error: &str, description: &str) -> Reply {
    Reply {
        status,
        body: serde_json::json!({
            "error": error,
            "error_description": description,
            "error_uri": "https://auth.example.com/errors",
        })
        .to_string(),
    }
}

/// A token endpoint issuing tokens that live `life`.
pub async fn endpoint(life: Duration) -> MockHttp {
    MockHttp::start(move |r, n| issue(r, n, life)).await
}

/// A key to sign with and the key to verify with, for one algorithm.
pub struct SigningKey {
    pub alg: &'static str,
    /// As a config file gives it: PEM, or base64 for HMAC.
    pub private_key: String,
    pub verify: jsonwebtoken::DecodingKey,
}

/// A key for `alg`: the throwaway RSA key of the tests, an EC key generated now, or a random
/// HMAC secret.
pub fn signing_key(alg: &'static str) -> SigningKey {
    use base64::Engine as _;
    let ec = |curve: &'static rcgen::SignatureAlgorithm| {
        let pair = rcgen::KeyPair::generate_for(curve).unwrap();
        let verify = jsonwebtoken::DecodingKey::from_ec_pem(pair.public_key_pem().as_bytes());
        (pair.serialize_pem(), verify.unwrap())
    };
    let (private_key, verify) = match &alg[..2] {
        "RS" | "PS" => (
            TEST_ONLY_PRIVATE_KEY.to_string(),
            jsonwebtoken::DecodingKey::from_rsa_pem(TEST_ONLY_PUBLIC_KEY.as_bytes()).unwrap(),
        ),
        "ES" if alg == "ES384" => ec(&rcgen::PKCS_ECDSA_P384_SHA384),
        "ES" => ec(&rcgen::PKCS_ECDSA_P256_SHA256),
        _ => {
            let secret: [u8; 32] = rand::random();
            (
                base64::engine::general_purpose::STANDARD.encode(secret),
                jsonwebtoken::DecodingKey::from_secret(&secret),
            )
        }
    };
    SigningKey {
        alg,
        private_key,
        verify,
    }
}

/// The throwaway P-256 key of the tests in SEC1 PEM (`BEGIN EC PRIVATE KEY`, as `openssl
/// ecparam -genkey` writes it), for ES256.
pub fn sec1_signing_key() -> SigningKey {
    let public = include_str!("../data/test-only-ec-p256-public-key.pem");
    SigningKey {
        alg: "ES256",
        private_key: include_str!("../data/test-only-ec-p256-sec1-private-key.pem").to_string(),
        verify: jsonwebtoken::DecodingKey::from_ec_pem(public.as_bytes()).unwrap(),
    }
}

/// A JWT subject or actor source for a config file, signed with `key`, with every claim set.
pub fn jwt_source(key: &SigningKey, ttl: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "JWT",
        "alg": key.alg,
        "private-key": key.private_key,
        "kid": "kid-1",
        "iss": "issuer-1",
        "sub": "subject-1",
        "aud": ["jwt-aud-1", "jwt-aud-2"],
        "jti": "jti-1",
        "ttl": ttl,
    })
}

/// A JWT's header and claims after its signature was checked with `key`, or why not.
pub fn verify_jwt(
    jwt: &str,
    key: &SigningKey,
) -> Result<(jsonwebtoken::Header, serde_json::Value), String> {
    let header = jsonwebtoken::decode_header(jwt).map_err(|e| e.to_string())?;
    let alg: jsonwebtoken::Algorithm = key.alg.parse().map_err(|_| "alg".to_string())?;
    if header.alg != alg {
        return Err(format!("alg {:?}", header.alg));
    }
    let mut validation = jsonwebtoken::Validation::new(alg);
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data = jsonwebtoken::decode::<serde_json::Value>(jwt, &key.verify, &validation)
        .map_err(|e| e.to_string())?;
    Ok((header, data.claims))
}

/// The claims of a JWT, unchecked (to compare with another client's).
pub fn claims_of(jwt: &str) -> serde_json::Value {
    use base64::Engine as _;
    let part = |i: usize| {
        let text = jwt.split('.').nth(i).unwrap_or_default();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
    };
    serde_json::json!({"header": part(0), "claims": part(1)})
}

/// The wall clock in seconds since the epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
