//! Yandex Cloud credentials: a service account's authorized key exchanged for IAM tokens, and
//! the VM metadata service. Both cache their token and renew it well before it expires (see
//! `cache.rs`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};

use futures::future::BoxFuture;

use super::cache::{Fetch, Fetched, TokenCache};
use super::http::{self, Url};
use super::redact::Sent;
use super::{Secret, TokenFuture, TokenProvider};
use crate::error::{Error, ErrorKind, Result};

/// Yandex Cloud's IAM token endpoint, and the audience of the service account's JWT.
pub const IAM_TOKEN_URL: &str = "https://iam.api.cloud.yandex.net/iam/v1/tokens";

/// The VM metadata service's token URL (Yandex Cloud VMs and functions, GCE-compatible).
pub const METADATA_TOKEN_URL: &str =
    "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token";

/// How long the JWT sent to IAM is valid (IAM accepts at most an hour).
pub(crate) const JWT_LIFETIME: Duration = Duration::from_secs(600);

/// What is wrong with a credentials file (a service account's authorized key, an OAuth 2.0
/// token exchange config), reachable through [`Error::source`](std::error::Error::source) of
/// the [`ErrorKind::InvalidArgument`] error.
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use ydb_coordination::{ErrorKind, auth::KeyFileError, auth::ServiceAccountCredentials};
///
/// let err = ServiceAccountCredentials::from_key_json(r#"{"id": "k1"}"#).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidArgument);
/// let detail = err.source().and_then(|s| s.downcast_ref::<KeyFileError>()).unwrap();
/// assert_eq!(detail.field(), Some("service_account_id"));
/// assert_eq!(detail.path(), None);
/// ```
#[derive(Debug, Clone)]
pub struct KeyFileError {
    /// What the file is ("service account key").
    what: &'static str,
    path: Option<PathBuf>,
    field: Option<String>,
    problem: String,
}

impl KeyFileError {
    /// The key file, when the key was read from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The JSON field at fault, if one is: `id`, `service_account_id`, `private_key` in a
    /// service account key; `token-endpoint`, `aud`, ... in an OAuth 2.0 config, where a field
    /// of a token source is named with the source (`subject-credentials.alg`).
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The [`ErrorKind::InvalidArgument`] error for a problem with the file `what` ("service
    /// account key"). `problem` says what is wrong; it never quotes a secret.
    pub(super) fn error(
        what: &'static str,
        path: Option<&Path>,
        field: Option<String>,
        problem: String,
    ) -> Error {
        let detail = KeyFileError {
            what,
            path: path.map(Path::to_path_buf),
            field,
            problem,
        };
        Error::with_source(ErrorKind::InvalidArgument, detail.to_string(), detail)
    }
}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{} file {}: ", self.what, path.display())?,
            None => write!(f, "{}: ", self.what)?,
        }
        f.write_str(&self.problem)
    }
}

impl std::error::Error for KeyFileError {}

fn key_error(path: Option<&Path>, field: Option<&'static str>, problem: String) -> Error {
    KeyFileError::error(
        "service account key",
        path,
        field.map(str::to_string),
        problem,
    )
}

/// A service account's authorized key (the JSON file `yc iam key create` writes), exchanged
/// for IAM tokens: a PS256 JWT signed with the key goes to the IAM endpoint, the IAM token
/// that comes back is cached and renewed in the background after half its life (at most an
/// hour).
///
/// # Examples
///
/// ```no_run
/// use ydb_coordination::{Client, auth::Credentials, auth::ServiceAccountCredentials};
///
/// # #[tokio::main]
/// # async fn main() -> ydb_coordination::Result<()> {
/// let credentials = ServiceAccountCredentials::from_key_file("/etc/app/sa-key.json")?
///     .iam_endpoint("https://iam.private-cloud.example/iam/v1/tokens")?;
/// let client = Client::builder("grpcs://ydb.serverless.yandexcloud.net:2135/ru-central1/b1g/etn")
///     .credentials(Credentials::from(credentials))
///     .build()
///     .await?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ServiceAccountCredentials {
    cache: TokenCache<ServiceAccount>,
}

/// The key and where it is exchanged.
#[derive(Clone)]
struct ServiceAccount {
    key_id: String,
    service_account_id: String,
    signing_key: EncodingKey,
    endpoint: Url,
    audience: String,
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("key_id", &self.key_id)
            .field("service_account_id", &self.service_account_id)
            .field("endpoint", &self.endpoint.to_string())
            .finish_non_exhaustive()
    }
}

impl ServiceAccountCredentials {
    /// Reads an authorized key file (JSON with `id`, `service_account_id`, `private_key`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when the file cannot be read or a field is missing or
    /// malformed; its source is a [`KeyFileError`] with the path and the field.
    pub fn from_key_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            key_error(
                Some(path),
                None,
                format!("cannot be read: {}", crate::error::describe_cause(&e)),
            )
        })?;
        Self::parse(&text, Some(path))
    }

    /// Parses an authorized key given as JSON text.
    ///
    /// # Errors
    ///
    /// As [`ServiceAccountCredentials::from_key_file`], without a path.
    pub fn from_key_json(json: &str) -> Result<Self> {
        Self::parse(json, None)
    }

    fn parse(text: &str, path: Option<&Path>) -> Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
            key_error(
                path,
                None,
                format!(
                    "is not JSON (line {}, column {}); download the key again",
                    e.line(),
                    e.column()
                ),
            )
        })?;
        let field = |name: &'static str| -> Result<&str> {
            match value.get(name) {
                Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s.as_str()),
                Some(_) => Err(key_error(
                    path,
                    Some(name),
                    format!("the field `{name}` is not a non-empty string"),
                )),
                None => Err(key_error(
                    path,
                    Some(name),
                    format!("the field `{name}` is missing"),
                )),
            }
        };
        let key_id = field("id")?.to_string();
        let service_account_id = field("service_account_id")?.to_string();
        let signing_key =
            EncodingKey::from_rsa_pem(field("private_key")?.as_bytes()).map_err(|_| {
                key_error(
                    path,
                    Some("private_key"),
                    "the field `private_key` is not a PEM-encoded RSA private key".to_string(),
                )
            })?;
        Ok(Self {
            cache: TokenCache::new(ServiceAccount {
                key_id,
                service_account_id,
                signing_key,
                endpoint: Url::parse(IAM_TOKEN_URL, "the IAM endpoint")?,
                audience: IAM_TOKEN_URL.to_string(),
            }),
        })
    }

    /// Where the JWT is exchanged for an IAM token (default [`IAM_TOKEN_URL`]), for private
    /// clouds and tests. The JWT's audience stays [`IAM_TOKEN_URL`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when `url` is not an `http://` or `https://` URL.
    pub fn iam_endpoint(mut self, url: impl AsRef<str>) -> Result<Self> {
        let parsed = Url::parse(url.as_ref(), "the IAM endpoint")?;
        let source = self.cache.source_mut();
        source.endpoint = parsed.trusting_as(&source.endpoint);
        Ok(self)
    }

    /// Trusts the PEM-encoded CA certificate(s) in `pem` for an `https://` IAM endpoint,
    /// besides the system's roots (a private cloud's CA).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when `pem` holds no usable certificate.
    pub fn iam_ca_certificate(mut self, pem: impl AsRef<[u8]>) -> Result<Self> {
        let source = self.cache.source_mut();
        source.endpoint = source.endpoint.clone().trust(pem.as_ref())?;
        Ok(self)
    }

    /// The key's id (the JWT's `kid`).
    pub fn key_id(&self) -> &str {
        &self.cache.source().key_id
    }

    /// The service account's id (the JWT's `iss`).
    pub fn service_account_id(&self) -> &str {
        &self.cache.source().service_account_id
    }
}

impl ServiceAccount {
    fn jwt(&self) -> Result<Secret> {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            aud: &'a str,
            iss: &'a str,
            iat: u64,
            exp: u64,
        }
        let iat = unix_now();
        let mut header = Header::new(Algorithm::PS256);
        header.kid = Some(self.key_id.clone());
        let claims = Claims {
            aud: &self.audience,
            iss: &self.service_account_id,
            iat,
            exp: iat + JWT_LIFETIME.as_secs(),
        };
        jsonwebtoken::encode(&header, &claims, &self.signing_key)
            .map(Secret::new)
            .map_err(|e| {
                Error::with_source(
                    ErrorKind::Unauthorized,
                    "cannot sign the service account's JWT with its private key",
                    e,
                )
            })
    }

    async fn exchange(&self) -> Result<Fetched> {
        let jwt = self.jwt()?;
        let body =
            serde_json::to_vec(&serde_json::json!({ "jwt": jwt.expose() })).map_err(|e| {
                Error::with_source(ErrorKind::Internal, "cannot encode the IAM request", e)
            })?;
        let sent = Sent::new(&self.endpoint, [&jwt]);
        let what = format!("the IAM endpoint {}", self.endpoint);
        let answer = http::exchange(
            &self.endpoint,
            hyper::Method::POST,
            &[("content-type", "application/json")],
            Some(body),
        )
        .await?;
        // Only what the answer led to is guarded: a connection's own error carries none of
        // it, and keeps its cause (a refused certificate, say).
        let answer = check_status(&what, &answer, &sent)
            .and_then(|()| iam_answer(&what, &answer.body, SystemTime::now()));
        sent.guard(&what, answer)
    }
}

impl Fetch for ServiceAccount {
    fn fetch(&self) -> BoxFuture<'_, Result<Fetched>> {
        Box::pin(self.exchange())
    }
}

impl TokenProvider for ServiceAccountCredentials {
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async move { self.cache.get().await.map(Some) })
    }

    fn invalidate(&self) {
        self.cache.forget();
    }
}

/// The token of the VM's service account from the metadata service (Yandex Cloud VMs and
/// functions; the Google-compatible `computeMetadata` API), cached and renewed after half
/// its life.
///
/// # Examples
///
/// ```
/// use ydb_coordination::{auth::Credentials, auth::MetadataCredentials};
///
/// let default = Credentials::metadata();
/// let custom = MetadataCredentials::new().endpoint("http://127.0.0.1:8080/token")?;
/// let custom = Credentials::from(custom);
/// # let _ = (default, custom);
/// # Ok::<(), ydb_coordination::Error>(())
/// ```
#[derive(Debug)]
pub struct MetadataCredentials {
    cache: TokenCache<Metadata>,
}

/// The token URL.
#[derive(Debug, Clone)]
struct Metadata {
    url: String,
}

impl Default for MetadataCredentials {
    fn default() -> Self {
        Self::new()
    }
}

impl MetadataCredentials {
    /// The metadata service at [`METADATA_TOKEN_URL`].
    pub fn new() -> Self {
        Self {
            cache: TokenCache::new(Metadata {
                url: METADATA_TOKEN_URL.to_string(),
            }),
        }
    }

    /// The token URL to ask instead (default [`METADATA_TOKEN_URL`]), for tests and
    /// non-standard environments.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when `url` is not an `http://` or `https://` URL.
    pub fn endpoint(mut self, url: impl AsRef<str>) -> Result<Self> {
        let url = url.as_ref();
        Url::parse(url, "the metadata endpoint")?;
        self.cache.source_mut().url = url.to_string();
        Ok(self)
    }
}

impl Metadata {
    async fn ask(&self) -> Result<Fetched> {
        let url = Url::parse(&self.url, "the metadata endpoint")?;
        let sent = Sent::new(&url, []);
        let what = format!("the metadata service {url}");
        let answer = http::exchange(
            &url,
            hyper::Method::GET,
            &[("metadata-flavor", "Google")],
            None,
        )
        .await?;
        let answer =
            check_status(&what, &answer, &sent).and_then(|()| metadata_answer(&what, &answer.body));
        sent.guard(&what, answer)
    }
}

impl Fetch for Metadata {
    fn fetch(&self) -> BoxFuture<'_, Result<Fetched>> {
        Box::pin(self.ask())
    }
}

impl TokenProvider for MetadataCredentials {
    fn token(&self) -> TokenFuture<'_> {
        Box::pin(async move { self.cache.get().await.map(Some) })
    }

    fn invalidate(&self) {
        self.cache.forget();
    }
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A non-2xx answer as an error: 429 and 5xx are worth retrying, the rest is a refusal. Its
/// `message` is quoted with the secrets `sent` redacted.
fn check_status(what: &str, answer: &http::Answer, sent: &Sent) -> Result<()> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let reason = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(|m| sent.quote(m))
        })
        .filter(|m| !m.is_empty())
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    let status = answer.status;
    let (kind, hint) = match status {
        429 => (ErrorKind::Overloaded, ""),
        500..=599 => (ErrorKind::Unavailable, ""),
        _ => (
            ErrorKind::Unauthorized,
            "; check the key or the service account's roles",
        ),
    };
    Err(Error::new(
        kind,
        format!("{what} answered HTTP {status}{reason}{hint}"),
    ))
}

// The answers of token servers are read as untrusted input: any field may be missing, of
// another type, or out of every sensible range, and none of that may panic. A lifetime too long
// for the clock is taken (the schedule saturates, see `cache.rs`); one already over is refused.

/// IAM's answer: `iamToken`, and `expiresAt` as an RFC 3339 instant (`now` is the wall clock).
fn iam_answer(what: &str, body: &[u8], now: SystemTime) -> Result<Fetched> {
    let answer = json_object(what, body)?;
    let token = token_field(what, &answer, "iamToken")?;
    let expires_at = match answer.get("expiresAt") {
        Some(serde_json::Value::String(s)) => s.as_str(),
        _ => return Err(bad_answer(what, "without an expiresAt string")),
    };
    let lifetime = lifetime_until(what, expires_at, now)?;
    Ok(Fetched { token, lifetime })
}

/// The metadata service's answer: `access_token`, and `expires_in` in seconds (a whole or a
/// fractional number).
fn metadata_answer(what: &str, body: &[u8]) -> Result<Fetched> {
    let answer = json_object(what, body)?;
    let token = token_field(what, &answer, "access_token")?;
    let lifetime = expires_in(what, &answer)?;
    Ok(Fetched { token, lifetime })
}

/// `expires_in` in seconds (a whole or a fractional number), more than none.
pub(super) fn expires_in(
    what: &str,
    answer: &serde_json::Map<String, serde_json::Value>,
) -> Result<Duration> {
    let seconds = answer.get("expires_in");
    let lifetime = match seconds.and_then(serde_json::Value::as_u64) {
        Some(secs) => Duration::from_secs(secs),
        None => match seconds.and_then(serde_json::Value::as_f64) {
            Some(secs) if secs > 0.0 => Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
            Some(_) => return Err(expired(what, "an expires_in of no time left")),
            None => return Err(bad_answer(what, "without an expires_in number")),
        },
    };
    if lifetime.is_zero() {
        return Err(expired(what, "an expires_in of no time left"));
    }
    Ok(lifetime)
}

/// The answer as a JSON object. Serde's own message is left out: it may quote the answer.
pub(super) fn json_object(
    what: &str,
    body: &[u8],
) -> Result<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_slice(body) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(bad_answer(what, "with JSON that is not an object")),
        Err(e) => Err(bad_answer(
            what,
            &format!(
                "with something other than JSON (line {}, column {})",
                e.line(),
                e.column()
            ),
        )),
    }
}

/// The token in `name`: a non-empty string that can be sent as a header value.
pub(super) fn token_field(
    what: &str,
    answer: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Result<Secret> {
    match answer.get(name) {
        Some(serde_json::Value::String(s))
            if !s.is_empty() && s.parse::<tonic::metadata::AsciiMetadataValue>().is_ok() =>
        {
            Ok(Secret::new(s.clone()))
        }
        Some(serde_json::Value::String(_)) => Err(bad_answer(
            what,
            &format!("with a {name} that is empty or not printable ASCII"),
        )),
        _ => Err(bad_answer(what, &format!("without a {name} string"))),
    }
}

/// `answer` says what was wrong ("without an expires_in number").
pub(super) fn bad_answer(what: &str, answer: &str) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!(
            "{what} answered {answer}, which is not a token answer; check that the credentials point at the right token service"
        ),
    )
}

pub(super) fn expired(what: &str, answer: &str) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("{what} answered a token that expired already ({answer}); check the clock"),
    )
}

/// How long from `now` until an RFC 3339 instant.
fn lifetime_until(what: &str, expires_at: &str, now: SystemTime) -> Result<Duration> {
    let at =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
            .map_err(|_| bad_answer(what, "with an expiresAt that is not an RFC 3339 time"))?;
    // A clock out of `time`'s range (years 1 to 9999) has no sensible lifetime to offer.
    let now = time::OffsetDateTime::UNIX_EPOCH
        .checked_add(
            now.duration_since(UNIX_EPOCH)
                .ok()
                .and_then(|d| time::Duration::try_from(d).ok())
                .unwrap_or(time::Duration::ZERO),
        )
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let left = at - now;
    // The instant as parsed, not the answer's text.
    let past = || {
        let at = at.format(&time::format_description::well_known::Rfc3339);
        expired(what, &format!("expiresAt {}", at.unwrap_or_default()))
    };
    Duration::try_from(left)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(past)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_come_from_rfc3339_instants() {
        let now = SystemTime::now();
        let in_an_hour = time::OffsetDateTime::from(now + Duration::from_secs(3600))
            .format(&time::format_description::well_known::Rfc3339);
        let d = in_an_hour
            .ok()
            .and_then(|s| lifetime_until("x", &s, now).ok());
        assert_eq!(d, Some(Duration::from_secs(3600)));
        for bad in ["2001-01-01T00:00:00Z", "tomorrow", ""] {
            let kind = lifetime_until("x", bad, now).err().map(|e| e.kind());
            assert_eq!(kind, Some(ErrorKind::Protocol), "{bad}");
        }
    }

    fn iam(body: serde_json::Value) -> Result<Duration> {
        let body = body.to_string();
        iam_answer("x", body.as_bytes(), SystemTime::now()).map(|f| f.lifetime)
    }

    fn metadata(body: serde_json::Value) -> Result<Duration> {
        let body = body.to_string();
        metadata_answer("x", body.as_bytes()).map(|f| f.lifetime)
    }

    fn kind(r: Result<Duration>) -> Option<ErrorKind> {
        r.err().map(|e| e.kind())
    }

    #[test]
    fn absurd_iam_expiry_times_are_taken_or_refused_without_panicking() {
        use serde_json::json;
        let year_9999 =
            iam(json!({"iamToken": "t", "expiresAt": "9999-12-31T23:59:59.999999999Z"}));
        assert!(year_9999.is_ok_and(|d| d > Duration::from_secs(7000 * 365 * 24 * 3600)));
        let offset = iam(json!({"iamToken": "t", "expiresAt": "9999-12-31T23:59:59+23:59"}));
        assert!(offset.is_ok());
        for expires_at in [
            json!("0000-01-01T00:00:00Z"),
            json!("0001-01-01T00:00:00-23:59"),
            json!("1970-01-01T00:00:00Z"),
            json!("+10000-01-01T00:00:00Z"),
            json!("99999999999999999999-01-01T00:00:00Z"),
            json!("2100-13-45T99:99:99Z"),
            json!("2100-01-01T00:00:00"),
            json!("1e999"),
            json!(""),
            json!(u64::MAX),
            json!(-1),
            json!(1e308),
            json!(null),
            json!(["2100-01-01T00:00:00Z"]),
        ] {
            let answer = iam(json!({"iamToken": "t", "expiresAt": expires_at}));
            assert_eq!(kind(answer), Some(ErrorKind::Protocol), "{expires_at}");
        }
    }

    #[test]
    fn iam_answers_without_their_fields_are_refused() {
        use serde_json::json;
        let later = "2100-01-01T00:00:00Z";
        for body in [
            json!({"expiresAt": later}),
            json!({"iamToken": "t"}),
            json!({"iamToken": 7, "expiresAt": later}),
            json!({"iamToken": "", "expiresAt": later}),
            json!({"iamToken": "line\nbreak", "expiresAt": later}),
            json!({"iamToken": null, "expiresAt": later}),
            json!([{"iamToken": "t", "expiresAt": later}]),
            json!("t"),
            json!(null),
        ] {
            assert_eq!(kind(iam(body.clone())), Some(ErrorKind::Protocol), "{body}");
        }
        for body in ["", "{", "\u{0}", "{\"iamToken\": \"t\", \"expiresAt\": }"] {
            let answer = iam_answer("x", body.as_bytes(), SystemTime::now());
            assert_eq!(
                answer.err().map(|e| e.kind()),
                Some(ErrorKind::Protocol),
                "{body}"
            );
        }
    }

    #[test]
    fn metadata_lifetimes_saturate_and_expired_ones_are_refused() {
        use serde_json::json;
        let with = |expires_in: serde_json::Value| {
            metadata(json!({"access_token": "t", "expires_in": expires_in}))
        };
        assert_eq!(with(json!(3600)).ok(), Some(Duration::from_secs(3600)));
        assert_eq!(
            with(json!(u64::MAX)).ok(),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(with(json!(1.5)).ok(), Some(Duration::from_millis(1500)));
        assert_eq!(with(json!(1e308)).ok(), Some(Duration::MAX));
        assert_eq!(with(json!(f64::MAX)).ok(), Some(Duration::MAX));
        for expires_in in [
            json!(0),
            json!(-1),
            json!(i64::MIN),
            json!(-1e308),
            json!(0.0),
            json!("3600"),
            json!(null),
            json!(true),
            json!({"seconds": 3600}),
        ] {
            assert_eq!(
                kind(with(expires_in.clone())),
                Some(ErrorKind::Protocol),
                "{expires_in}"
            );
        }
        for body in [
            json!({"expires_in": 3600}),
            json!({"access_token": "t"}),
            json!({"access_token": 1, "expires_in": 3600}),
            json!({"access_token": "", "expires_in": 3600}),
            json!({"access_token": "t\r\nx-other: 1", "expires_in": 3600}),
            json!([]),
        ] {
            assert_eq!(
                kind(metadata(body.clone())),
                Some(ErrorKind::Protocol),
                "{body}"
            );
        }
    }

    #[test]
    fn a_bad_answer_never_quotes_the_token() {
        let body = br#"{"access_token": "secret-token", "expires_in": -5}"#;
        let err = metadata_answer("x", body)
            .err()
            .map(|e| format!("{e:#} {e:?}"));
        assert!(err.is_some_and(|e| !e.contains("secret-token")));
    }

    #[test]
    fn statuses_split_into_retryable_and_refusals() {
        let answer = |status: u16| http::Answer {
            status,
            body: bytes::Bytes::from_static(br#"{"message":"no such key"}"#),
        };
        let kind = |status| {
            let sent = Sent::default();
            check_status("x", &answer(status), &sent)
                .err()
                .map(|e| e.kind())
        };
        assert_eq!(kind(200), None);
        assert_eq!(kind(503), Some(ErrorKind::Unavailable));
        assert_eq!(kind(429), Some(ErrorKind::Overloaded));
        assert_eq!(kind(401), Some(ErrorKind::Unauthorized));
        assert_eq!(kind(400), Some(ErrorKind::Unauthorized));
    }
}
