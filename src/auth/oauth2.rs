//! OAuth 2.0 token exchange (RFC 8693): a subject token (and an actor token), fixed or a JWT
//! signed here, posted as a form to a token endpoint; the access token that comes back is sent
//! as `Bearer <token>`, cached and renewed in the background like the cloud tokens (see
//! `cache.rs`). The config file is the one every YDB SDK reads from `YDB_OAUTH2_KEY_FILE`.
//!
//! The config reading, the form, the JWT claims and the reading of the answer are plain
//! functions, unit-tested below; the exchange itself is one call of `http.rs`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Map, Value};

use super::cache::{Fetch, Fetched, TokenCache};
use super::cloud::{KeyFileError, bad_answer, expires_in, json_object, token_field, unix_now};
use super::http::{self, Url};
use super::redact::Sent;
use super::{Secret, TokenFuture, TokenProvider};
use crate::error::{Error, ErrorKind, Result};

/// The grant type sent by default: RFC 8693 token exchange.
pub const TOKEN_EXCHANGE_GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// The token type asked for by default: an access token.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The token type of a JWT subject or actor token.
pub const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// The JWT signing algorithms a [`JwtTokenSource`] (and a config file's `alg`) takes. The
/// YDB SDKs also take `ES512`, which the JWT library of this crate cannot sign.
pub const OAUTH2_JWT_ALGORITHMS: &[&str] = &[
    "ES256", "ES384", "HS256", "HS384", "HS512", "PS256", "PS384", "PS512", "RS256", "RS384",
    "RS512",
];

/// How long a JWT source's JWTs are valid unless told otherwise (the SDKs' default).
pub const DEFAULT_JWT_TTL: Duration = Duration::from_secs(3600);

/// How a config file names itself in errors.
const CONFIG_FILE: &str = "OAuth 2.0 token exchange config";

/// Credentials from an OAuth 2.0 token exchange (RFC 8693), the `YDB_OAUTH2_KEY_FILE`
/// credentials of the YDB SDKs.
///
/// Every exchange posts `grant_type`, `requested_token_type`, `audience`, `scope`, `resource`
/// and the subject and actor tokens as `application/x-www-form-urlencoded` to the token
/// endpoint. The answer's `access_token` (its `token_type` must be `Bearer`) is sent to YDB as
/// `Bearer <access_token>`, cached, and renewed in the background after half its `expires_in`
/// (at most an hour). A JWT subject or actor token is signed afresh for every exchange, so it
/// is never sent close to its expiry. An endpoint that fails (5xx, 429, 408, unreachable) is
/// tried again with backoff while no valid token is at hand.
///
/// # Examples
///
/// From the SDKs' JSON config file:
///
/// ```
/// use ydb_coordination::{auth::Credentials, auth::OAuth2TokenExchangeCredentials};
///
/// let config = r#"{
///     "token-endpoint": "https://auth.example.com/oauth2/token",
///     "aud": "ydb",
///     "subject-credentials": {
///         "type": "FIXED",
///         "token": "subject-token",
///         "token-type": "urn:ietf:params:oauth:token-type:id_token"
///     }
/// }"#;
/// let credentials = Credentials::from(OAuth2TokenExchangeCredentials::from_config_json(config)?);
/// # let _ = credentials;
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
///
/// Or built in code:
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::{auth::JwtTokenSource, auth::OAuth2TokenExchangeCredentials};
///
/// let jwt = JwtTokenSource::new("HS256", b"a secret shared with the token service")?
///     .issuer("my-service")
///     .subject("my-service")
///     .audience(["token-service"])
///     .ttl(Duration::from_secs(600));
/// let credentials = OAuth2TokenExchangeCredentials::new("https://auth.example.com/token")?
///     .audience("ydb")
///     .scope("ydb.read")
///     .scope("ydb.write")
///     .subject_token(jwt);
/// # let _ = credentials;
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
#[derive(Debug)]
pub struct OAuth2TokenExchangeCredentials {
    cache: TokenCache<Exchange>,
}

/// What is posted, and where.
#[derive(Clone)]
struct Exchange {
    endpoint: Url,
    grant_type: String,
    requested_token_type: String,
    audience: Vec<String>,
    scope: Vec<String>,
    resource: Vec<String>,
    subject: Option<OAuth2TokenSource>,
    actor: Option<OAuth2TokenSource>,
    /// The endpoint granted a token before: a refusal now is taken as passing (see
    /// [`Exchange::exchange`]).
    granted: Arc<AtomicBool>,
}

impl fmt::Debug for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("endpoint", &self.endpoint.to_string())
            .field("grant_type", &self.grant_type)
            .field("requested_token_type", &self.requested_token_type)
            .field("audience", &self.audience)
            .field("scope", &self.scope)
            .field("resource", &self.resource)
            .field("subject", &self.subject)
            .field("actor", &self.actor)
            .finish()
    }
}

impl OAuth2TokenExchangeCredentials {
    /// Exchanges at `token_endpoint`, with the default grant type
    /// ([`TOKEN_EXCHANGE_GRANT_TYPE`]) and requested token type ([`ACCESS_TOKEN_TYPE`]), no
    /// audience, scope, resource, subject or actor token: set those with the other methods.
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::auth::OAuth2TokenExchangeCredentials;
    ///
    /// let credentials = OAuth2TokenExchangeCredentials::new("https://auth.example.com/token")?;
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when `token_endpoint` is not an `http://` or `https://`
    /// URL.
    pub fn new(token_endpoint: impl AsRef<str>) -> Result<Self> {
        let endpoint = Url::parse(token_endpoint.as_ref(), "the OAuth 2.0 token endpoint")?;
        Ok(Self {
            cache: TokenCache::new(Exchange {
                endpoint,
                grant_type: TOKEN_EXCHANGE_GRANT_TYPE.to_string(),
                requested_token_type: ACCESS_TOKEN_TYPE.to_string(),
                audience: Vec::new(),
                scope: Vec::new(),
                resource: Vec::new(),
                subject: None,
                actor: None,
                granted: Arc::default(),
            }),
        })
    }

    /// Reads the YDB SDKs' JSON config file (the one `YDB_OAUTH2_KEY_FILE` names).
    ///
    /// Its fields: `token-endpoint` (required); `grant-type` and `requested-token-type` (the
    /// defaults above); `aud`, `scope` and `res`, each a string or a list of strings (scopes
    /// are joined by spaces); `subject-credentials` and `actor-credentials`, each either
    /// `{"type": "FIXED", "token": ..., "token-type": ...}` or `{"type": "JWT", "alg": ...,
    /// "private-key": ..., "kid", "iss", "sub", "aud" (a string or a list), "jti", "ttl"}`:
    /// `alg` one of [`OAUTH2_JWT_ALGORITHMS`], `private-key` a PEM key (RSA, EC) or
    /// for `HS*` the secret in base64, `ttl` a duration such as `"1h"`, `"30m"`, `"1h30m"` or
    /// `"90s"` (default an hour). Fields of other names are ignored.
    ///
    /// A path starting with `~/` is read from the home directory (`$HOME`), as the other
    /// YDB SDKs read it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ydb_coordination::auth::OAuth2TokenExchangeCredentials;
    ///
    /// let credentials = OAuth2TokenExchangeCredentials::from_config_file("/etc/app/oauth2.json")?;
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when the file cannot be read or a field is missing or
    /// malformed; its source is a [`KeyFileError`] with the path and the field
    /// (`token-endpoint`, `subject-credentials.alg`, ...).
    pub fn from_config_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = &home_expanded(path.as_ref());
        let text = std::fs::read_to_string(path).map_err(|e| {
            KeyFileError::error(
                CONFIG_FILE,
                Some(path),
                None,
                format!("cannot be read: {}", crate::error::describe_cause(&e)),
            )
        })?;
        Config { path: Some(path) }.parse(&text)
    }

    /// Parses the config given as JSON text (as in [`from_config_file`]).
    ///
    /// [`from_config_file`]: OAuth2TokenExchangeCredentials::from_config_file
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::auth::OAuth2TokenExchangeCredentials;
    ///
    /// let credentials = OAuth2TokenExchangeCredentials::from_config_json(
    ///     r#"{"token-endpoint": "https://auth.example.com/token", "scope": ["a", "b"]}"#,
    /// )?;
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_config_file`], without a path.
    ///
    /// [`from_config_file`]: OAuth2TokenExchangeCredentials::from_config_file
    pub fn from_config_json(json: &str) -> Result<Self> {
        Config { path: None }.parse(json)
    }

    /// Where the tokens are exchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::auth::OAuth2TokenExchangeCredentials;
    ///
    /// let credentials = OAuth2TokenExchangeCredentials::new("https://auth.example.com/token")?
    ///     .token_endpoint("https://auth.example.com/v2/token")?;
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when `url` is not an `http://` or `https://` URL.
    pub fn token_endpoint(mut self, url: impl AsRef<str>) -> Result<Self> {
        let parsed = Url::parse(url.as_ref(), "the OAuth 2.0 token endpoint")?;
        let source = self.cache.source_mut();
        source.endpoint = parsed.trusting_as(&source.endpoint);
        Ok(self)
    }

    /// Trusts the PEM-encoded CA certificate(s) in `pem` for an `https://` token endpoint,
    /// besides the system's roots.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ydb_coordination::auth::OAuth2TokenExchangeCredentials;
    ///
    /// let ca = std::fs::read("/etc/app/auth-ca.pem").unwrap_or_default();
    /// let credentials = OAuth2TokenExchangeCredentials::from_config_file("/etc/app/oauth2.json")?
    ///     .ca_certificate(ca)?;
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when `pem` holds no usable certificate.
    pub fn ca_certificate(mut self, pem: impl AsRef<[u8]>) -> Result<Self> {
        let source = self.cache.source_mut();
        source.endpoint = source.endpoint.clone().trust(pem.as_ref())?;
        Ok(self)
    }

    /// The `grant_type` sent (default [`TOKEN_EXCHANGE_GRANT_TYPE`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    /// let credentials = credentials.grant_type("urn:example:grant");
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn grant_type(mut self, grant_type: impl Into<String>) -> Self {
        self.cache.source_mut().grant_type = grant_type.into();
        self
    }

    /// The `requested_token_type` sent (default [`ACCESS_TOKEN_TYPE`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    /// let credentials = credentials.requested_token_type("urn:ietf:params:oauth:token-type:jwt");
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn requested_token_type(mut self, token_type: impl Into<String>) -> Self {
        self.cache.source_mut().requested_token_type = token_type.into();
        self
    }

    /// Adds an `audience` (each is sent as a field of its own).
    ///
    /// # Examples
    ///
    /// ```
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    /// let credentials = credentials.audience("ydb").audience("monitoring");
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.cache.source_mut().audience.push(audience.into());
        self
    }

    /// Adds a scope (all are sent in one `scope` field, separated by spaces).
    ///
    /// # Examples
    ///
    /// ```
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    /// let credentials = credentials.scope("ydb.read").scope("ydb.write");
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.cache.source_mut().scope.push(scope.into());
        self
    }

    /// Adds a `resource` (each is sent as a field of its own).
    ///
    /// # Examples
    ///
    /// ```
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    /// let credentials = credentials.resource("https://ydb.example.com");
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.cache.source_mut().resource.push(resource.into());
        self
    }

    /// The subject token (`subject_token`, `subject_token_type`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::auth::OAuth2TokenSource;
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    ///
    /// let credentials = credentials
    ///     .subject_token(OAuth2TokenSource::fixed("id-token", "urn:ietf:params:oauth:token-type:id_token"));
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn subject_token(mut self, source: impl Into<OAuth2TokenSource>) -> Self {
        self.cache.source_mut().subject = Some(source.into());
        self
    }

    /// The actor token (`actor_token`, `actor_token_type`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::auth::OAuth2TokenSource;
    /// # let credentials = ydb_coordination::auth::OAuth2TokenExchangeCredentials::new("http://h/t")?;
    ///
    /// let credentials = credentials
    ///     .actor_token(OAuth2TokenSource::fixed("actor", "urn:ietf:params:oauth:token-type:access_token"));
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    pub fn actor_token(mut self, source: impl Into<OAuth2TokenSource>) -> Self {
        self.cache.source_mut().actor = Some(source.into());
        self
    }
}

impl TokenProvider for OAuth2TokenExchangeCredentials {
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async move { self.cache.get().await.map(Some) })
    }

    fn invalidate(&self) {
        self.cache.forget();
    }
}

/// `path` with a leading `~/` read as `$HOME/` (unchanged without a home).
fn home_expanded(path: &Path) -> std::path::PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) if !home.is_empty() => Path::new(&home).join(rest),
        _ => path.to_path_buf(),
    }
}

impl Fetch for Exchange {
    fn fetch(&self) -> BoxFuture<'_, Result<Fetched>> {
        Box::pin(self.exchange())
    }
}

impl Exchange {
    /// One exchange. Once the endpoint has granted a token, a refusal is taken as passing
    /// (an identity provider rotating its keys, a clock skew on a JWT's `iat`) and reads as
    /// [`ErrorKind::Unavailable`], so that it is tried again with a backoff, as ydb-go-sdk
    /// does, instead of failing every session start (and stopping a session manager) for
    /// good: what was accepted once is likely to be accepted again.
    async fn exchange(&self) -> Result<Fetched> {
        let (form, secrets) = self.form()?;
        let sent = Sent::new(&self.endpoint, &secrets);
        let what = format!("the OAuth 2.0 token endpoint {}", self.endpoint);
        let answer = http::exchange(
            &self.endpoint,
            hyper::Method::POST,
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(form.into_bytes()),
        )
        .await
        .and_then(|answer| {
            // Only what the answer led to is guarded: a connection's own error keeps its
            // cause (a refused certificate, say).
            sent.guard(
                &what,
                token_answer(&what, &answer, &scope_param(&self.scope), &sent),
            )
        });
        match answer {
            Ok(fetched) => {
                self.granted.store(true, Ordering::Relaxed);
                Ok(fetched)
            }
            Err(err)
                if err.kind() == ErrorKind::Unauthorized
                    && self.granted.load(Ordering::Relaxed) =>
            {
                Err(Error::caused_by(
                    ErrorKind::Unavailable,
                    format!(
                        "{what} refused an exchange it granted before; it is tried again, \
                         since such a refusal usually passes: {err}"
                    ),
                    &err,
                ))
            }
            Err(err) => Err(err),
        }
    }

    /// The form to post, and the secrets in it (kept out of any error the answer leads to).
    fn form(&self) -> Result<(String, Vec<Secret>)> {
        let mut form = form_urlencoded::Serializer::new(String::new());
        let mut sent = Vec::new();
        form.append_pair("grant_type", &self.grant_type);
        form.append_pair("requested_token_type", &self.requested_token_type);
        for audience in self.audience.iter().filter(|a| !a.is_empty()) {
            form.append_pair("audience", audience);
        }
        let scope = scope_param(&self.scope);
        if !scope.is_empty() {
            form.append_pair("scope", &scope);
        }
        for resource in self.resource.iter().filter(|r| !r.is_empty()) {
            form.append_pair("resource", resource);
        }
        for (source, token_name, type_name) in [
            (&self.subject, "subject_token", "subject_token_type"),
            (&self.actor, "actor_token", "actor_token_type"),
        ] {
            if let Some(source) = source {
                let (token, token_type) = source.token()?;
                form.append_pair(token_name, token.expose());
                form.append_pair(type_name, token_type);
                sent.push(token);
            }
        }
        Ok((form.finish(), sent))
    }
}

/// The scopes as the one `scope` field: the non-empty ones, separated by spaces.
fn scope_param(scope: &[String]) -> String {
    let scopes: Vec<&str> = scope
        .iter()
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .collect();
    scopes.join(" ")
}

/// Reads the token endpoint's answer: the access token as the header value, or why not.
fn token_answer(
    what: &str,
    answer: &http::Answer,
    expected_scope: &str,
    sent: &Sent,
) -> Result<Fetched> {
    if answer.status != 200 {
        return Err(refusal(what, answer.status, &answer.body, sent));
    }
    let body = json_object(what, &answer.body)?;
    let access_token = token_field(what, &body, "access_token")?;
    match body.get("token_type") {
        Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
        Some(Value::String(t)) => {
            return Err(bad_answer(
                what,
                &format!(
                    "with token_type {:?} where Bearer was asked for",
                    sent.quote(t)
                ),
            ));
        }
        _ => return Err(bad_answer(what, "without a token_type string")),
    }
    let lifetime = expires_in(what, &body)?;
    match body.get("scope") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() || s == expected_scope => {}
        Some(Value::String(s)) => {
            return Err(bad_answer(
                what,
                &format!(
                    "with the scope {:?} where {expected_scope:?} was asked for",
                    sent.quote(s)
                ),
            ));
        }
        Some(_) => return Err(bad_answer(what, "with a scope that is not a string")),
    }
    Ok(Fetched {
        token: Secret::new(format!("Bearer {}", access_token.expose())),
        lifetime,
    })
}

/// The token endpoint's refusal (RFC 6749 section 5.2), reachable through
/// [`Error::source`](std::error::Error::source) of the error a failed exchange gives: the HTTP
/// status and the `error`, `error_description` and `error_uri` of the answer, when it had
/// them. A secret sent (a token, the URL's query) that any of them quotes is redacted.
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use ydb_coordination::{Error, auth::TokenExchangeError};
///
/// fn explain(err: &Error) -> Option<String> {
///     let refusal = err.source()?.downcast_ref::<TokenExchangeError>()?;
///     Some(format!("HTTP {}: {}", refusal.status(), refusal.error().unwrap_or("no code")))
/// }
/// # let _ = explain;
/// ```
#[derive(Debug, Clone)]
pub struct TokenExchangeError {
    status: u16,
    error: Option<String>,
    description: Option<String>,
    uri: Option<String>,
}

impl TokenExchangeError {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The OAuth error code (`invalid_request`, `invalid_grant`, `invalid_target`, ...).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The `error_description`.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The `error_uri`.
    pub fn uri(&self) -> Option<&str> {
        self.uri.as_deref()
    }
}

impl fmt::Display for TokenExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}", self.status)?;
        if let Some(error) = &self.error {
            write!(f, ", error {error}")?;
        }
        if let Some(description) = &self.description {
            write!(f, ": {description}")?;
        }
        if let Some(uri) = &self.uri {
            write!(f, " (see {uri})")?;
        }
        Ok(())
    }
}

impl std::error::Error for TokenExchangeError {}

/// A non-200 answer as an error: 5xx, 429 and 408 are worth retrying, the rest is a refusal.
fn refusal(what: &str, status: u16, body: &[u8], sent: &Sent) -> Error {
    let body: Option<Map<String, Value>> = serde_json::from_slice(body).ok();
    let text = |name: &str| {
        let value = sent.quote(body.as_ref()?.get(name)?.as_str()?);
        (!value.is_empty()).then_some(value)
    };
    let detail = TokenExchangeError {
        status,
        error: text("error"),
        description: text("error_description"),
        uri: text("error_uri"),
    };
    let (kind, hint) = match status {
        408 | 504 => (ErrorKind::Timeout, "it is tried again"),
        429 => (ErrorKind::Overloaded, "it is tried again"),
        500..=599 => (ErrorKind::Unavailable, "it is tried again"),
        400..=499 => (
            ErrorKind::Unauthorized,
            "check the subject and actor credentials, the audience, scope and resource",
        ),
        _ => (
            ErrorKind::Protocol,
            "check that the config points at a token endpoint",
        ),
    };
    Error::with_source(
        kind,
        format!("{what} refused the token exchange ({detail}); {hint}"),
        detail,
    )
}

/// Where a subject or actor token comes from: a fixed token, or a JWT signed for every
/// exchange.
///
/// # Examples
///
/// ```
/// use ydb_coordination::{auth::JwtTokenSource, auth::OAuth2TokenSource};
///
/// let fixed = OAuth2TokenSource::fixed("t0ken", "urn:ietf:params:oauth:token-type:access_token");
/// let jwt = OAuth2TokenSource::from(JwtTokenSource::new("HS256", b"secret")?);
/// # let _ = (fixed, jwt);
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
#[derive(Clone)]
pub struct OAuth2TokenSource(TokenKind);

#[derive(Clone)]
enum TokenKind {
    Fixed { token: Secret, token_type: String },
    Jwt(Arc<JwtTokenSource>),
}

impl fmt::Debug for OAuth2TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            TokenKind::Fixed { token, token_type } => f
                .debug_struct("Fixed")
                .field("token", token)
                .field("token_type", token_type)
                .finish(),
            TokenKind::Jwt(jwt) => jwt.fmt(f),
        }
    }
}

impl OAuth2TokenSource {
    /// A fixed token of the given type (an RFC 8693 token type URI, such as
    /// `urn:ietf:params:oauth:token-type:id_token`).
    pub fn fixed(token: impl Into<String>, token_type: impl Into<String>) -> Self {
        Self(TokenKind::Fixed {
            token: Secret::new(token),
            token_type: token_type.into(),
        })
    }

    /// The token to send now, and its type.
    fn token(&self) -> Result<(Secret, &str)> {
        match &self.0 {
            TokenKind::Fixed { token, token_type } => Ok((token.clone(), token_type)),
            TokenKind::Jwt(jwt) => Ok((jwt.sign(unix_now())?, JWT_TOKEN_TYPE)),
        }
    }
}

impl From<JwtTokenSource> for OAuth2TokenSource {
    fn from(jwt: JwtTokenSource) -> Self {
        Self(TokenKind::Jwt(Arc::new(jwt)))
    }
}

/// A JWT signed with a private key (or a shared secret), sent as the subject or actor token
/// with the type [`JWT_TOKEN_TYPE`]. Each exchange gets a fresh one, issued now and valid for
/// the [`ttl`](JwtTokenSource::ttl).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::auth::JwtTokenSource;
///
/// let jwt = JwtTokenSource::new("HS512", b"shared secret")?
///     .key_id("key-1")
///     .issuer("my-service")
///     .subject("my-service")
///     .audience(["https://auth.example.com"])
///     .id("my-jwt-id")
///     .ttl(Duration::from_secs(300));
/// # let _ = jwt;
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
#[derive(Clone)]
pub struct JwtTokenSource {
    algorithm: Algorithm,
    key: EncodingKey,
    key_id: Option<String>,
    issuer: Option<String>,
    subject: Option<String>,
    audience: Vec<String>,
    /// The audience was given as one string: the claim is a string, not a list.
    audience_is_one: bool,
    id: Option<String>,
    ttl: Duration,
}

impl fmt::Debug for JwtTokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jwt")
            .field("algorithm", &self.algorithm)
            .field("key_id", &self.key_id)
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("audience", &self.audience)
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl JwtTokenSource {
    /// Signs with `algorithm` (one of [`OAUTH2_JWT_ALGORITHMS`], in any case) and `key`: a
    /// PEM-encoded private key for `RS*` and `PS*` (RSA, PKCS #1 or #8) and `ES*` (EC, PKCS
    /// #8 or SEC1), the secret's bytes themselves for `HS*`. The JWT has no claims but `iat` and
    /// `exp` until the other methods add them; it lives [`DEFAULT_JWT_TTL`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::auth::JwtTokenSource;
    ///
    /// let jwt = JwtTokenSource::new("hs256", b"shared secret")?;
    /// # let _ = jwt;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for an algorithm not in the list, or a key that cannot
    /// sign with it.
    pub fn new(algorithm: &str, key: impl AsRef<[u8]>) -> Result<Self> {
        let invalid = |problem: String| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("the JWT token source {problem}"),
            )
        };
        let algorithm = parse_algorithm(algorithm).map_err(invalid)?;
        Self::with_key(algorithm, key.as_ref()).map_err(invalid)
    }

    fn with_key(algorithm: Algorithm, key: &[u8]) -> std::result::Result<Self, String> {
        let key = signing_key(algorithm, key)?;
        let source = Self {
            algorithm,
            key,
            key_id: None,
            issuer: None,
            subject: None,
            audience: Vec::new(),
            audience_is_one: false,
            id: None,
            ttl: DEFAULT_JWT_TTL,
        };
        // A key that does not fit the algorithm (an RSA key too short, an EC key of another
        // curve) is found now, not at the first exchange.
        source.sign(0).map_err(|_| {
            format!("cannot sign {algorithm:?} JWTs with this private key; check `alg` and the key")
        })?;
        Ok(source)
    }

    /// The `kid` header.
    pub fn key_id(mut self, key_id: impl Into<String>) -> Self {
        self.key_id = Some(key_id.into());
        self
    }

    /// The `iss` claim.
    pub fn issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// The `sub` claim.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The `aud` claim: one audience is sent as a string, several as a list.
    pub fn audience<I, S>(mut self, audience: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.audience = audience.into_iter().map(Into::into).collect();
        self.audience_is_one = self.audience.len() == 1;
        self
    }

    /// The `jti` claim.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How long each JWT is valid (`exp` - `iat`, default [`DEFAULT_JWT_TTL`], at least a
    /// second).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// A JWT issued at `now` (seconds since the epoch).
    fn sign(&self, now: u64) -> Result<Secret> {
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        enum Audience<'a> {
            One(&'a str),
            Many(&'a [String]),
        }
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            iss: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            sub: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            aud: Option<Audience<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            jti: Option<&'a str>,
            iat: u64,
            exp: u64,
        }
        fn present(s: &Option<String>) -> Option<&str> {
            s.as_deref().filter(|s| !s.is_empty())
        }
        let aud = match self.audience.as_slice() {
            [] => None,
            [one] if self.audience_is_one => Some(Audience::One(one)),
            many => Some(Audience::Many(many)),
        };
        let claims = Claims {
            iss: present(&self.issuer),
            sub: present(&self.subject),
            aud,
            jti: present(&self.id),
            iat: now,
            exp: now.saturating_add(self.ttl.as_secs().max(1)),
        };
        let mut header = Header::new(self.algorithm);
        header.kid = present(&self.key_id).map(str::to_string);
        jsonwebtoken::encode(&header, &claims, &self.key)
            .map(Secret::new)
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::Unauthorized,
                    "cannot sign the JWT of the OAuth 2.0 token source with its key",
                    e,
                )
            })
    }
}

/// An algorithm name as the SDKs take it (any case), or why not.
fn parse_algorithm(name: &str) -> std::result::Result<Algorithm, String> {
    let upper = name.to_ascii_uppercase();
    if upper == "ES512" {
        return Err(format!(
            "algorithm {name:?} is not supported by this crate (its JWT library cannot sign \
             with P-521); use ES384 or ES256"
        ));
    }
    if !OAUTH2_JWT_ALGORITHMS.contains(&upper.as_str()) {
        return Err(format!(
            "algorithm {name:?} is unknown; use one of {}",
            OAUTH2_JWT_ALGORITHMS.join(", ")
        ));
    }
    upper
        .parse::<Algorithm>()
        .map_err(|_| format!("algorithm {name:?} is unknown"))
}

/// The signing key for `algorithm` from the bytes given, or why not.
fn signing_key(algorithm: Algorithm, key: &[u8]) -> std::result::Result<EncodingKey, String> {
    use Algorithm::*;
    match algorithm {
        HS256 | HS384 | HS512 if key.is_empty() => Err("has an empty HMAC secret".to_string()),
        HS256 | HS384 | HS512 => Ok(EncodingKey::from_secret(key)),
        RS256 | RS384 | RS512 | PS256 | PS384 | PS512 => EncodingKey::from_rsa_pem(key)
            .map_err(|_| "has a private key that is not a PEM-encoded RSA key".to_string()),
        ES256 | ES384 => match sec1_to_pkcs8(key) {
            Some(pkcs8) => Ok(EncodingKey::from_ec_der(&pkcs8)),
            None => EncodingKey::from_ec_pem(key).map_err(|_| {
                "has a private key that is not a PEM-encoded EC key (`BEGIN PRIVATE KEY` or \
                 `BEGIN EC PRIVATE KEY`)"
                    .to_string()
            }),
        },
        EdDSA => Err("algorithm EdDSA is not one the YDB SDKs take".to_string()),
    }
}

/// An EC private key in SEC1 PEM (`BEGIN EC PRIVATE KEY`, what `openssl ecparam -genkey`
/// writes, which the Go and Python SDKs take) as the PKCS #8 DER the JWT library signs with:
/// `SEQUENCE { 0, SEQUENCE { id-ecPublicKey, curve }, OCTET STRING { the SEC1 key } }`, the
/// curve taken from the key's own parameters. `None` for anything else. The PEM and DER
/// codecs are the ones the JWT library reads its own keys with.
fn sec1_to_pkcs8(pem: &[u8]) -> Option<Vec<u8>> {
    use simple_asn1::{ASN1Block, ASN1Class, BigInt, oid};
    // The key's block, wherever it is: `openssl ecparam -genkey` writes the curve's
    // parameters before it.
    let pem = pem::parse_many(pem)
        .ok()?
        .into_iter()
        .find(|block| block.tag() == "EC PRIVATE KEY")?;
    // ECPrivateKey ::= SEQUENCE { version 1, privateKey OCTET STRING, [0] curve OID, ... }
    let [ASN1Block::Sequence(_, fields)] = &simple_asn1::from_der(pem.contents()).ok()?[..] else {
        return None;
    };
    let curve = fields.iter().find_map(|field| match field {
        ASN1Block::Explicit(ASN1Class::ContextSpecific, _, tag, curve)
            if *tag == 0u8.into() && matches!(**curve, ASN1Block::ObjectIdentifier(..)) =>
        {
            Some((**curve).clone())
        }
        _ => None,
    })?;
    let ec_public_key = ASN1Block::ObjectIdentifier(0, oid!(1, 2, 840, 10045, 2, 1));
    simple_asn1::to_der(&ASN1Block::Sequence(
        0,
        vec![
            ASN1Block::Integer(0, BigInt::from(0)),
            ASN1Block::Sequence(0, vec![ec_public_key, curve]),
            ASN1Block::OctetString(0, pem.into_contents()),
        ],
    ))
    .ok()
}

/// A duration of a config file, in the crate's one grammar
/// ([`parse_duration`](crate::config::parse_duration): Go's, as the SDKs read it, and `d`).
fn parse_duration(text: &str) -> Option<Duration> {
    crate::config::parse_duration(text).ok()
}

/// Reads a config file (`path` names it in errors).
struct Config<'a> {
    path: Option<&'a Path>,
}

impl Config<'_> {
    fn error(&self, field: Option<String>, problem: String) -> Error {
        KeyFileError::error(CONFIG_FILE, self.path, field, problem)
    }

    fn field_error(&self, field: &str, problem: &str) -> Error {
        self.error(
            Some(field.to_string()),
            format!("the field `{field}` {problem}"),
        )
    }

    /// An optional string field (`null` counts as absent).
    fn string(&self, object: &Map<String, Value>, field: &str) -> Result<Option<String>> {
        match object.get(local(field)) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.field_error(field, "is not a string")),
        }
    }

    /// A string field that must be there and not empty.
    fn required(&self, object: &Map<String, Value>, field: &str) -> Result<String> {
        match self.string(object, field)? {
            Some(s) if !s.is_empty() => Ok(s),
            Some(_) => Err(self.field_error(field, "is empty")),
            None => Err(self.field_error(field, "is missing")),
        }
    }

    /// A field of one string or a list of strings; whether it was one string.
    fn strings(&self, object: &Map<String, Value>, field: &str) -> Result<(Vec<String>, bool)> {
        match object.get(local(field)) {
            None | Some(Value::Null) => Ok((Vec::new(), false)),
            Some(Value::String(s)) => Ok((vec![s.clone()], true)),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(self.field_error(field, "is not a string or a list of strings")),
                })
                .collect::<Result<Vec<_>>>()
                .map(|list| (list, false)),
            Some(_) => Err(self.field_error(field, "is not a string or a list of strings")),
        }
    }

    fn parse(&self, text: &str) -> Result<OAuth2TokenExchangeCredentials> {
        let config = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(self.error(None, "is not a JSON object".to_string())),
            Err(e) => {
                return Err(self.error(
                    None,
                    format!("is not JSON (line {}, column {})", e.line(), e.column()),
                ));
            }
        };
        let endpoint = self.required(&config, "token-endpoint")?;
        let mut credentials = OAuth2TokenExchangeCredentials::new(&endpoint)
            .map_err(|_| self.field_error("token-endpoint", "is not an http:// or https:// URL"))?;
        let exchange = credentials.cache.source_mut();
        if let Some(grant_type) = self
            .string(&config, "grant-type")?
            .filter(|s| !s.is_empty())
        {
            exchange.grant_type = grant_type;
        }
        if let Some(token_type) = self
            .string(&config, "requested-token-type")?
            .filter(|s| !s.is_empty())
        {
            exchange.requested_token_type = token_type;
        }
        exchange.audience = self.strings(&config, "aud")?.0;
        exchange.scope = self.strings(&config, "scope")?.0;
        exchange.resource = self.strings(&config, "res")?.0;
        exchange.subject = self.token_source(&config, "subject-credentials")?;
        exchange.actor = self.token_source(&config, "actor-credentials")?;
        Ok(credentials)
    }

    fn token_source(
        &self,
        config: &Map<String, Value>,
        name: &str,
    ) -> Result<Option<OAuth2TokenSource>> {
        let source = match config.get(name) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(source)) => source,
            Some(_) => return Err(self.field_error(name, "is not a JSON object")),
        };
        let field = |f: &str| format!("{name}.{f}");
        let kind = self.required(source, &field("type"))?;
        if kind.eq_ignore_ascii_case("FIXED") {
            let token = self.required(source, &field("token"))?;
            let token_type = self.required(source, &field("token-type"))?;
            return Ok(Some(OAuth2TokenSource::fixed(token, token_type)));
        }
        if !kind.eq_ignore_ascii_case("JWT") {
            return Err(self.field_error(&field("type"), "is neither \"FIXED\" nor \"JWT\""));
        }
        let alg_field = field("alg");
        let alg = self.required(source, &alg_field)?;
        let algorithm = parse_algorithm(&alg)
            .map_err(|why| self.error(Some(alg_field.clone()), format!("the {why}")))?;
        let key_field = field("private-key");
        let key = self.required(source, &key_field)?;
        let key = match algorithm {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => base64_secret(&key)
                .ok_or_else(|| self.field_error(&key_field, "is not a base64-encoded secret"))?,
            _ => key.into_bytes(),
        };
        let mut jwt = JwtTokenSource::with_key(algorithm, &key)
            .map_err(|why| self.error(Some(key_field.clone()), format!("the source {why}")))?;
        jwt.key_id = self.string(source, &field("kid"))?;
        jwt.issuer = self.string(source, &field("iss"))?;
        jwt.subject = self.string(source, &field("sub"))?;
        (jwt.audience, jwt.audience_is_one) = self.strings(source, &field("aud"))?;
        jwt.id = self.string(source, &field("jti"))?;
        let ttl_field = field("ttl");
        if let Some(ttl) = self.string(source, &ttl_field)? {
            jwt.ttl = parse_duration(&ttl)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    self.field_error(
                        &ttl_field,
                        "is not a positive duration such as \"1h\", \"30m\" or \"90s\"",
                    )
                })?;
        }
        Ok(Some(jwt.into()))
    }
}

/// The JSON name of a field named `source.name` or `name`.
fn local(field: &str) -> &str {
    field.rsplit_once('.').map_or(field, |(_, name)| name)
}

/// A base64 secret (standard alphabet, padded or not).
fn base64_secret(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let engine = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    engine.decode(text.trim()).ok().filter(|k| !k.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go_does() {
        let secs = |s: &str| parse_duration(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("1h"), Some(3600.0));
        assert_eq!(secs("1h30m"), Some(5400.0));
        assert_eq!(secs("1.5h"), Some(5400.0));
        assert_eq!(secs("90s"), Some(90.0));
        assert_eq!(secs("+10m"), Some(600.0));
        assert_eq!(secs("1d"), Some(86400.0));
        assert_eq!(secs("0"), Some(0.0));
        assert_eq!(parse_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_duration("2us"), Some(Duration::from_micros(2)));
        for bad in [
            "", "1", "h", "-1h", "1x", "1..5h", ".h", "1h-", "one hour", "1e3s",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn algorithms_are_read_in_any_case_and_es512_is_refused() {
        for name in OAUTH2_JWT_ALGORITHMS {
            assert!(parse_algorithm(name).is_ok(), "{name}");
            assert!(parse_algorithm(&name.to_lowercase()).is_ok(), "{name}");
        }
        for bad in ["ES512", "es512", "EdDSA", "none", "HS1024", ""] {
            assert!(parse_algorithm(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sec1_ec_keys_are_rewrapped_as_pkcs8_and_sign() {
        let sec1 = include_str!("../../tests/data/test-only-ec-p256-sec1-private-key.pem");
        let public = include_str!("../../tests/data/test-only-ec-p256-public-key.pem");
        let source = JwtTokenSource::new("ES256", sec1).map(|s| s.issuer("i"));
        let jwt = source.and_then(|s| s.sign(unix_now()));
        let jwt = jwt.map(|j| j.expose().to_string()).unwrap_or_default();
        let key = jsonwebtoken::DecodingKey::from_ec_pem(public.as_bytes());
        let mut validation = jsonwebtoken::Validation::new(Algorithm::ES256);
        validation.required_spec_claims.clear();
        let verified = key.map(|k| jsonwebtoken::decode::<Value>(&jwt, &k, &validation));
        assert!(matches!(verified, Ok(Ok(_))), "{verified:?}");
        // Of another curve than the algorithm's, or broken: refused.
        assert!(JwtTokenSource::new("ES384", sec1).is_err());
        let broken = sec1.replace(
            "BEGIN EC PRIVATE KEY-----\n",
            "BEGIN EC PRIVATE KEY-----\nAAAA",
        );
        assert!(JwtTokenSource::new("ES256", broken).is_err());
        // A PKCS #8 key is not rewrapped (the JWT library reads it as it is), nor is a SEC1
        // key that does not name its curve.
        let pkcs8 = include_str!("../../tests/data/test-only-ec-p256-private-key.pem");
        assert_eq!(sec1_to_pkcs8(pkcs8.as_bytes()), None);
        assert!(JwtTokenSource::new("ES256", pkcs8).is_ok());
        let unnamed = pem::encode(&pem::Pem::new(
            "EC PRIVATE KEY",
            simple_asn1::to_der(&simple_asn1::ASN1Block::Sequence(
                0,
                vec![
                    simple_asn1::ASN1Block::Integer(0, 1.into()),
                    simple_asn1::ASN1Block::OctetString(0, vec![7; 32]),
                ],
            ))
            .unwrap_or_default(),
        ));
        assert_eq!(sec1_to_pkcs8(unnamed.as_bytes()), None);
        // What `openssl ecparam -genkey` writes by default: the curve's parameters first.
        let with_parameters = format!(
            "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n{sec1}"
        );
        assert!(JwtTokenSource::new("ES256", with_parameters).is_ok());
    }

    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        for same in [
            "/etc/oauth2.json",
            "oauth2.json",
            "~user/oauth2.json",
            "a/~/b",
        ] {
            assert_eq!(home_expanded(Path::new(same)), Path::new(same));
        }
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            let expanded = home_expanded(Path::new("~/.ydb/oauth2.json"));
            assert_eq!(expanded, Path::new(&home).join(".ydb/oauth2.json"));
        }
    }

    #[test]
    fn secrets_decode_padded_or_not() {
        assert_eq!(base64_secret("c2VjcmV0"), Some(b"secret".to_vec()));
        assert_eq!(base64_secret("c2VjcmV0MQ=="), Some(b"secret1".to_vec()));
        assert_eq!(base64_secret("c2VjcmV0MQ"), Some(b"secret1".to_vec()));
        assert_eq!(base64_secret("not base64!"), None);
        assert_eq!(base64_secret(""), None);
    }

    fn exchange(config: &str) -> Exchange {
        let credentials = OAuth2TokenExchangeCredentials::from_config_json(config);
        let credentials = credentials.unwrap_or_else(|e| panic!("{e}"));
        credentials.cache.source().clone()
    }

    fn pairs(form: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(form.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    #[test]
    fn the_form_has_the_fields_in_order_with_lists_repeated_and_scopes_joined() {
        let config = serde_json::json!({
            "token-endpoint": "http://127.0.0.1:1/token",
            "aud": ["a1", "", "a2"],
            "scope": ["s1", "s2"],
            "res": "r 1",
            "subject-credentials": {"type": "fixed", "token": "st&=", "token-type": "tt"},
            "actor-credentials": {"type": "FIXED", "token": "at", "token-type": "att"},
        });
        let (form, sent) = exchange(&config.to_string()).form().unwrap_or_default();
        let want = [
            ("grant_type", TOKEN_EXCHANGE_GRANT_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("audience", "a1"),
            ("audience", "a2"),
            ("scope", "s1 s2"),
            ("resource", "r 1"),
            ("subject_token", "st&="),
            ("subject_token_type", "tt"),
            ("actor_token", "at"),
            ("actor_token_type", "att"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(pairs(&form), want);
        assert_eq!(sent.len(), 2);
        let minimal = exchange(r#"{"token-endpoint": "http://h/t", "grant-type": ""}"#);
        let (form, _) = minimal.form().unwrap_or_default();
        assert_eq!(pairs(&form).len(), 2, "{form}");
    }

    fn answer(status: u16, body: serde_json::Value) -> http::Answer {
        http::Answer {
            status,
            body: bytes::Bytes::from(body.to_string()),
        }
    }

    fn kind_of(status: u16, body: serde_json::Value, scope: &str) -> Option<ErrorKind> {
        token_answer("x", &answer(status, body), scope, &Sent::default())
            .err()
            .map(|e| e.kind())
    }

    #[test]
    fn answers_are_checked_as_the_sdks_check_them() {
        use serde_json::json;
        let ok = token_answer(
            "x",
            &answer(
                200,
                json!({"access_token": "at", "token_type": "bearer", "expires_in": 60}),
            ),
            "",
            &Sent::default(),
        );
        let ok = ok.ok().map(|f| (f.token.expose().to_string(), f.lifetime));
        assert_eq!(ok, Some(("Bearer at".to_string(), Duration::from_secs(60))));
        let good = |extra: serde_json::Value| {
            let mut body = json!({"access_token": "at", "token_type": "Bearer", "expires_in": 60});
            if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
                b.extend(e.clone());
            }
            body
        };
        assert_eq!(kind_of(200, good(json!({"scope": "a b"})), "a b"), None);
        assert_eq!(kind_of(200, good(json!({"scope": ""})), "a b"), None);
        for (body, scope) in [
            (good(json!({"token_type": "MAC"})), ""),
            (good(json!({"token_type": null})), ""),
            (good(json!({"expires_in": 0})), ""),
            (good(json!({"expires_in": -5})), ""),
            (good(json!({"expires_in": "60"})), ""),
            (good(json!({"access_token": ""})), ""),
            (good(json!({"scope": "c"})), "a b"),
            (good(json!({"scope": 7})), ""),
            (json!(["at"]), ""),
        ] {
            assert_eq!(
                kind_of(200, body.clone(), scope),
                Some(ErrorKind::Protocol),
                "{body}"
            );
        }
        let refusal = json!({"error": "invalid_grant"});
        for (status, kind) in [
            (400, ErrorKind::Unauthorized),
            (401, ErrorKind::Unauthorized),
            (403, ErrorKind::Unauthorized),
            (408, ErrorKind::Timeout),
            (429, ErrorKind::Overloaded),
            (500, ErrorKind::Unavailable),
            (503, ErrorKind::Unavailable),
            (504, ErrorKind::Timeout),
            (201, ErrorKind::Protocol),
            (302, ErrorKind::Protocol),
        ] {
            assert_eq!(kind_of(status, refusal.clone(), ""), Some(kind), "{status}");
        }
    }

    #[test]
    fn a_refusal_keeps_the_oauth_error_and_redacts_the_tokens_sent() {
        use std::error::Error as _;
        let body = serde_json::json!({
            "error": "invalid_grant",
            "error_description": "subject token tok-SECRET expired",
            "error_uri": "https://auth.example.com/errors",
        });
        let url = Url::parse("http://h/t", "x").unwrap_or_else(|e| panic!("{e}"));
        let sent = Sent::new(&url, &[Secret::new("tok-SECRET")]);
        let err = refusal("x", 400, body.to_string().as_bytes(), &sent);
        assert_eq!(err.kind(), ErrorKind::Unauthorized);
        let detail = err
            .source()
            .and_then(|s| s.downcast_ref::<TokenExchangeError>());
        assert_eq!(detail.map(|d| d.status()), Some(400));
        assert_eq!(detail.and_then(|d| d.error()), Some("invalid_grant"));
        assert_eq!(
            detail.and_then(|d| d.uri()),
            Some("https://auth.example.com/errors")
        );
        assert!(detail.and_then(|d| d.description()).is_some());
        assert!(!format!("{err} {err:?}").contains("SECRET"));
        let bare = refusal("x", 502, b"<html>bad gateway</html>", &sent);
        let detail = bare
            .source()
            .and_then(|s| s.downcast_ref::<TokenExchangeError>());
        assert_eq!(detail.and_then(|d| d.error()), None);
    }

    #[test]
    fn debug_never_shows_tokens_or_keys() {
        let credentials = OAuth2TokenExchangeCredentials::new("http://h/t")
            .map(|c| {
                c.subject_token(OAuth2TokenSource::fixed("tok-SECRET", "tt"))
                    .actor_token(
                        JwtTokenSource::new("HS256", b"key-SECRET").unwrap_or_else(|e| {
                            panic!("{e}");
                        }),
                    )
            })
            .map(|c| format!("{c:?}"));
        let shown = credentials.unwrap_or_default();
        assert!(shown.contains("HS256"), "{shown}");
        assert!(!shown.contains("SECRET"), "{shown}");
    }
}
