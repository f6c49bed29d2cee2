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
use super::{Secret, TokenFuture, TokenProvider};
use crate::error::{Error, ErrorKind, Result};

/// Yandex Cloud's IAM token endpoint, and the audience of the service account's JWT.
pub const IAM_TOKEN_URL: &str = "https://iam.api.cloud.yandex.net/iam/v1/tokens";

/// The VM metadata service's token URL (Yandex Cloud VMs and functions, GCE-compatible).
pub const METADATA_TOKEN_URL: &str =
    "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token";

/// How long the JWT sent to IAM is valid (IAM accepts at most an hour).
pub(crate) const JWT_LIFETIME: Duration = Duration::from_secs(600);

/// What is wrong with a service account's authorized key, reachable through
/// [`Error::source`](std::error::Error::source) of the [`ErrorKind::InvalidArgument`] error.
///
/// # Examples
///
/// ```
/// use std::error::Error as _;
/// use ydb_coordination::{ErrorKind, KeyFileError, ServiceAccountCredentials};
///
/// let err = ServiceAccountCredentials::from_key_json(r#"{"id": "k1"}"#).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidArgument);
/// let detail = err.source().and_then(|s| s.downcast_ref::<KeyFileError>()).unwrap();
/// assert_eq!(detail.field(), Some("service_account_id"));
/// assert_eq!(detail.path(), None);
/// ```
#[derive(Debug, Clone)]
pub struct KeyFileError {
    path: Option<PathBuf>,
    field: Option<&'static str>,
    problem: String,
}

impl KeyFileError {
    /// The key file, when the key was read from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The JSON field at fault (`id`, `service_account_id`, `private_key`), if one is.
    pub fn field(&self) -> Option<&str> {
        self.field
    }
}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "service account key file {}: ", path.display())?,
            None => f.write_str("service account key: ")?,
        }
        f.write_str(&self.problem)
    }
}

impl std::error::Error for KeyFileError {}

fn key_error(path: Option<&Path>, field: Option<&'static str>, problem: String) -> Error {
    let detail = KeyFileError {
        path: path.map(Path::to_path_buf),
        field,
        problem,
    };
    Error::with_source(ErrorKind::InvalidArgument, detail.to_string(), detail)
}

/// A service account's authorized key (the JSON file `yc iam key create` writes), exchanged
/// for IAM tokens: a PS256 JWT signed with the key goes to the IAM endpoint, the IAM token
/// that comes back is cached and renewed in the background after half its life (at most an
/// hour).
///
/// # Examples
///
/// ```no_run
/// use ydb_coordination::{Client, Credentials, ServiceAccountCredentials};
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
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Answer {
            iam_token: String,
            expires_at: String,
        }
        let jwt = self.jwt()?;
        let body =
            serde_json::to_vec(&serde_json::json!({ "jwt": jwt.expose() })).map_err(|e| {
                Error::with_source(ErrorKind::Internal, "cannot encode the IAM request", e)
            })?;
        let answer = http::exchange(
            &self.endpoint,
            hyper::Method::POST,
            &[("content-type", "application/json")],
            Some(body),
        )
        .await?;
        let what = format!("the IAM endpoint {}", self.endpoint);
        check_status(&what, &answer)?;
        let parsed: Answer = parse_answer(&what, &answer, "iamToken and expiresAt")?;
        let lifetime = lifetime_until(&what, &parsed.expires_at)?;
        Ok(Fetched {
            token: Secret::new(parsed.iam_token),
            lifetime,
        })
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
/// use ydb_coordination::{Credentials, MetadataCredentials};
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
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: String,
            expires_in: u64,
        }
        let url = Url::parse(&self.url, "the metadata endpoint")?;
        let answer = http::exchange(
            &url,
            hyper::Method::GET,
            &[("metadata-flavor", "Google")],
            None,
        )
        .await?;
        let what = format!("the metadata service {url}");
        check_status(&what, &answer)?;
        let parsed: Answer = parse_answer(&what, &answer, "access_token and expires_in")?;
        Ok(Fetched {
            token: Secret::new(parsed.access_token),
            lifetime: Duration::from_secs(parsed.expires_in),
        })
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

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A non-2xx answer as an error: 429 and 5xx are worth retrying, the rest is a refusal.
fn check_status(what: &str, answer: &http::Answer) -> Result<()> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let reason = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| {
            v.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
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

/// Decodes the JSON answer. Serde's own message is left out: it may quote the answer.
fn parse_answer<T: serde::de::DeserializeOwned>(
    what: &str,
    answer: &http::Answer,
    fields: &str,
) -> Result<T> {
    serde_json::from_slice(&answer.body).map_err(|e| {
        Error::new(
            ErrorKind::Protocol,
            format!(
                "{what} answered something other than JSON with {fields} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })
}

/// How long from now until an RFC 3339 instant.
fn lifetime_until(what: &str, expires_at: &str) -> Result<Duration> {
    let at =
        time::OffsetDateTime::parse(expires_at, &time::format_description::well_known::Rfc3339)
            .map_err(|_| {
                Error::new(
                    ErrorKind::Protocol,
                    format!("{what} answered an expiresAt that is not an RFC 3339 time"),
                )
            })?;
    let left = at - time::OffsetDateTime::from(SystemTime::now());
    Duration::try_from(left)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!(
                    "{what} answered a token that expired already ({expires_at}); check the clock"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_come_from_rfc3339_instants() {
        let in_an_hour = time::OffsetDateTime::from(SystemTime::now() + Duration::from_secs(3600))
            .format(&time::format_description::well_known::Rfc3339);
        let d = in_an_hour.ok().and_then(|s| lifetime_until("x", &s).ok());
        assert!(d.is_some_and(|d| d > Duration::from_secs(3590) && d <= Duration::from_secs(3600)));
        for bad in ["2001-01-01T00:00:00Z", "tomorrow", ""] {
            let kind = lifetime_until("x", bad).err().map(|e| e.kind());
            assert_eq!(kind, Some(ErrorKind::Protocol), "{bad}");
        }
    }

    #[test]
    fn statuses_split_into_retryable_and_refusals() {
        let answer = |status: u16| http::Answer {
            status,
            body: bytes::Bytes::from_static(br#"{"message":"no such key"}"#),
        };
        let kind = |status| check_status("x", &answer(status)).err().map(|e| e.kind());
        assert_eq!(kind(200), None);
        assert_eq!(kind(503), Some(ErrorKind::Unavailable));
        assert_eq!(kind(429), Some(ErrorKind::Overloaded));
        assert_eq!(kind(401), Some(ErrorKind::Unauthorized));
        assert_eq!(kind(400), Some(ErrorKind::Unauthorized));
    }
}
