//! Credentials: where the `x-ydb-auth-ticket` header comes from.
//!
//! `mod.rs` has the provider trait, [`Credentials`] and the environment conventions;
//! `cloud.rs` the Yandex Cloud providers (service account key, metadata service), `oauth2.rs`
//! the OAuth 2.0 token exchange, `cache.rs` their token cache and renewal schedule, `http.rs`
//! the small HTTP client they use, `redact.rs` what keeps the secrets they send out of the
//! errors their answers lead to.

#[cfg(feature = "cloud")]
mod cache;
#[cfg(feature = "cloud")]
mod cloud;
#[cfg(feature = "cloud")]
mod http;
#[cfg(feature = "cloud")]
mod oauth2;
#[cfg(feature = "cloud")]
mod redact;

#[cfg(feature = "cloud")]
#[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
pub use cloud::{
    IAM_TOKEN_URL, KeyFileError, METADATA_TOKEN_URL, MetadataCredentials, ServiceAccountCredentials,
};
#[cfg(feature = "cloud")]
#[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
pub use oauth2::{
    ACCESS_TOKEN_TYPE, DEFAULT_JWT_TTL, JWT_TOKEN_TYPE, JwtTokenSource, OAUTH2_JWT_ALGORITHMS,
    OAuth2TokenExchangeCredentials, OAuth2TokenSource, TOKEN_EXCHANGE_GRANT_TYPE,
    TokenExchangeError,
};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

#[cfg(any(doc, all(test, feature = "cloud")))]
use crate::error::ErrorKind;
use crate::error::Result;

/// A boxed future returned by [`TokenProvider::token`].
pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = Result<Option<String>>> + Send + 'a>>;

/// Supplies the auth token sent with every request (`None`: no token header).
///
/// Implement it for your own token source, or use [`Credentials::from_fn`].
///
/// # Examples
///
/// ```
/// use ydb_coordination::{auth::Credentials, auth::TokenFuture, auth::TokenProvider};
///
/// #[derive(Debug)]
/// struct Vault;
///
/// impl TokenProvider for Vault {
///     fn token(&self) -> TokenFuture<'_> {
///         Box::pin(async { Ok(Some("t0ken".to_string())) })
///     }
/// }
///
/// let credentials = Credentials::provider(Vault);
/// # let _ = credentials;
/// ```
pub trait TokenProvider: Send + Sync + fmt::Debug {
    /// The current token. Called before every unary call and every stream attach (the first
    /// one and every reattach), so cache inside when fetching is expensive.
    fn token(&self) -> TokenFuture<'_>;

    /// The server rejected the last token (`UNAUTHENTICATED`, `UNAUTHORIZED`): a caching
    /// provider forgets it, so that the next [`TokenProvider::token`] fetches a new one. The
    /// client then tries once more before it reports the rejection. The default does nothing.
    fn invalidate(&self) {}
}

/// A shared provider: the client and your code can hold the same one.
impl<T: TokenProvider + ?Sized> TokenProvider for Arc<T> {
    fn token(&self) -> TokenFuture<'_> {
        (**self).token()
    }

    fn invalidate(&self) {
        (**self).invalidate();
    }
}

/// A string that is never shown: `Debug` prints `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Source {
    Anonymous,
    Static(Secret),
    Provider(Arc<dyn TokenProvider>),
    Login { user: String, password: Secret },
}

/// How the client authenticates.
///
/// The same environment variables as the YDB SDKs are understood by [`Credentials::from_env`].
/// Secrets (tokens, passwords, keys) are never shown by `Debug`, logged, or put in errors.
///
/// # Examples
///
/// ```
/// use ydb_coordination::auth::Credentials;
///
/// let anonymous = Credentials::anonymous();
/// let token = Credentials::token("my-oauth-token");
/// let login = Credentials::login("root", "secret");
/// let custom = Credentials::from_fn(|| async { Ok(Some("fresh".to_string())) });
/// # let _ = (anonymous, token, login, custom);
/// ```
#[derive(Debug, Clone)]
pub struct Credentials(pub(crate) Source);

impl Default for Credentials {
    fn default() -> Self {
        Self::anonymous()
    }
}

impl Credentials {
    /// No token.
    pub fn anonymous() -> Self {
        Self(Source::Anonymous)
    }

    /// A fixed token (an OAuth or IAM token obtained elsewhere).
    pub fn token(token: impl Into<String>) -> Self {
        Self(Source::Static(Secret::new(token)))
    }

    /// A Yandex Cloud service account's authorized key file, exchanged for IAM tokens at
    /// [`IAM_TOKEN_URL`] (see [`ServiceAccountCredentials`] for another endpoint).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when the file cannot be read or is not a valid key; the
    /// source is a [`KeyFileError`] naming the file and the field.
    #[cfg(feature = "cloud")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
    pub fn service_account_key_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        ServiceAccountCredentials::from_key_file(path).map(Self::from)
    }

    /// An OAuth 2.0 token exchange (RFC 8693) configured by the YDB SDKs' JSON file, the one
    /// `YDB_OAUTH2_KEY_FILE` names (see [`OAuth2TokenExchangeCredentials::from_config_file`]
    /// for its fields, and [`OAuth2TokenExchangeCredentials`] for settings in code).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ydb_coordination::auth::Credentials;
    ///
    /// let credentials = Credentials::oauth2_key_file("/etc/app/oauth2.json")?;
    /// # let _ = credentials;
    /// # Ok::<(), ydb_coordination::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when the file cannot be read or a field is missing or
    /// malformed; the source is a [`KeyFileError`] naming the file and the field.
    #[cfg(feature = "cloud")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
    pub fn oauth2_key_file(path: impl AsRef<std::path::Path>) -> Result<Self> {
        OAuth2TokenExchangeCredentials::from_config_file(path).map(Self::from)
    }

    /// The VM's service account, through the metadata service at [`METADATA_TOKEN_URL`] (see
    /// [`MetadataCredentials`] for another endpoint).
    #[cfg(feature = "cloud")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
    pub fn metadata() -> Self {
        Self::from(MetadataCredentials::new())
    }

    /// User and password, exchanged for a token through YDB's `AuthService/Login`; the
    /// token is renewed every hour and after an `UNAUTHORIZED` answer.
    pub fn login(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self(Source::Login {
            user: user.into(),
            password: Secret::new(password),
        })
    }

    /// Your own provider.
    pub fn provider(provider: impl TokenProvider + 'static) -> Self {
        Self(Source::Provider(Arc::new(provider)))
    }

    /// A closure returning a future of the token.
    pub fn from_fn<F, Fut>(f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<String>>> + Send + 'static,
    {
        Self::provider(FnProvider(f))
    }

    /// Reads the YDB SDKs' environment variables, in the order YDB's documentation gives for
    /// every SDK (the `ydb` crate's order too); the first that applies wins:
    ///
    /// 1. `YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS=PATH`: a service account's authorized key
    ///    file ([`Credentials::service_account_key_file`]); `YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS`
    ///    holds the key's JSON itself instead (as in `ydb-go-sdk-auth-environ`);
    /// 2. `YDB_ANONYMOUS_CREDENTIALS=1`: anonymous;
    /// 3. `YDB_METADATA_CREDENTIALS=1`: the VM metadata service ([`Credentials::metadata`]);
    /// 4. `YDB_ACCESS_TOKEN_CREDENTIALS=TOKEN`: a fixed token;
    /// 5. `YDB_STATIC_CREDENTIALS_USER` (and `YDB_STATIC_CREDENTIALS_PASSWORD`, empty if
    ///    unset): login with user and password (placed here as in `ydb-go-sdk-auth-environ`);
    /// 6. `YDB_OAUTH2_KEY_FILE=PATH`: an OAuth 2.0 token exchange configured by the SDKs'
    ///    JSON file ([`Credentials::oauth2_key_file`]).
    ///
    /// With none of them: anonymous, as in `ydb-go-sdk-auth-environ` (YDB's documentation and
    /// the `ydb` crate fall back to the metadata service, which would make every run outside
    /// a cloud VM wait for a service that is not there). An empty variable counts as unset.
    ///
    /// The endpoints can be overridden, for private clouds and tests: `YDB_IAM_ENDPOINT` (the
    /// URL the JWT is posted to, default [`IAM_TOKEN_URL`]) and `YDB_METADATA_ENDPOINT` (the
    /// token URL, default [`METADATA_TOKEN_URL`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use ydb_coordination::{Client, auth::Credentials};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> ydb_coordination::Result<()> {
    /// let client = Client::builder(std::env::var("YDB_CONNECTION_STRING").unwrap_or_default())
    ///     .credentials(Credentials::from_env()?)
    ///     .build()
    ///     .await?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad service account key or OAuth 2.0 config file
    /// (the source is a [`KeyFileError`] naming the file and the field), or an invalid
    /// endpoint URL.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let set = |name: &str| get(name).filter(|v| !v.is_empty());
        if let Some(path) = set("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS") {
            return cloud_env::service_account_file(&set, path);
        }
        if let Some(json) = set("YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS") {
            return cloud_env::service_account_json(&set, &json);
        }
        if set("YDB_ANONYMOUS_CREDENTIALS").is_some_and(|v| v == "1") {
            return Ok(Self::anonymous());
        }
        if set("YDB_METADATA_CREDENTIALS").is_some_and(|v| v == "1") {
            return cloud_env::metadata(&set);
        }
        if let Some(token) = set("YDB_ACCESS_TOKEN_CREDENTIALS") {
            return Ok(Self::token(token));
        }
        if let Some(user) = set("YDB_STATIC_CREDENTIALS_USER") {
            let password = get("YDB_STATIC_CREDENTIALS_PASSWORD").unwrap_or_default();
            return Ok(Self::login(user, password));
        }
        if let Some(path) = set("YDB_OAUTH2_KEY_FILE") {
            return cloud_env::oauth2_file(path);
        }
        Ok(Self::anonymous())
    }
}

/// The variables of [`Credentials::from_env`] whose credentials fetch their tokens over
/// HTTP: built with the `cloud` feature, refused by kind without it.
#[cfg(feature = "cloud")]
mod cloud_env {
    use super::{Credentials, MetadataCredentials, ServiceAccountCredentials};
    use crate::error::Result;

    type Set<'a> = dyn Fn(&str) -> Option<String> + 'a;

    fn service_account(
        set: &Set<'_>,
        key: Result<ServiceAccountCredentials>,
    ) -> Result<Credentials> {
        let mut key = key?;
        if let Some(url) = set("YDB_IAM_ENDPOINT") {
            key = key.iam_endpoint(url)?;
        }
        Ok(Credentials::from(key))
    }

    pub(super) fn service_account_file(set: &Set<'_>, path: String) -> Result<Credentials> {
        service_account(set, ServiceAccountCredentials::from_key_file(path))
    }

    pub(super) fn service_account_json(set: &Set<'_>, json: &str) -> Result<Credentials> {
        service_account(set, ServiceAccountCredentials::from_key_json(json))
    }

    pub(super) fn metadata(set: &Set<'_>) -> Result<Credentials> {
        let mut metadata = MetadataCredentials::new();
        if let Some(url) = set("YDB_METADATA_ENDPOINT") {
            metadata = metadata.endpoint(url)?;
        }
        Ok(Credentials::from(metadata))
    }

    pub(super) fn oauth2_file(path: String) -> Result<Credentials> {
        Credentials::oauth2_key_file(path)
    }
}

/// Without the `cloud` feature: each variable that needs it is refused, naming the feature.
#[cfg(not(feature = "cloud"))]
mod cloud_env {
    use super::Credentials;
    use crate::error::{Error, ErrorKind, Result};

    type Set<'a> = dyn Fn(&str) -> Option<String> + 'a;

    fn needs_cloud(variable: &str) -> Result<Credentials> {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "{variable} is set, but this build of ydb-coordination has no `cloud` feature; \
                 enable it (features = [\"cloud\"]) or unset the variable"
            ),
        ))
    }

    pub(super) fn service_account_file(_: &Set<'_>, _: String) -> Result<Credentials> {
        needs_cloud("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS")
    }

    pub(super) fn service_account_json(_: &Set<'_>, _: &str) -> Result<Credentials> {
        needs_cloud("YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS")
    }

    pub(super) fn metadata(_: &Set<'_>) -> Result<Credentials> {
        needs_cloud("YDB_METADATA_CREDENTIALS")
    }

    pub(super) fn oauth2_file(_: String) -> Result<Credentials> {
        needs_cloud("YDB_OAUTH2_KEY_FILE")
    }
}

#[cfg(feature = "cloud")]
#[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
impl From<ServiceAccountCredentials> for Credentials {
    fn from(credentials: ServiceAccountCredentials) -> Self {
        Self::provider(credentials)
    }
}

#[cfg(feature = "cloud")]
#[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
impl From<OAuth2TokenExchangeCredentials> for Credentials {
    fn from(credentials: OAuth2TokenExchangeCredentials) -> Self {
        Self::provider(credentials)
    }
}

#[cfg(feature = "cloud")]
#[cfg_attr(docsrs, doc(cfg(feature = "cloud")))]
impl From<MetadataCredentials> for Credentials {
    fn from(credentials: MetadataCredentials) -> Self {
        Self::provider(credentials)
    }
}

struct FnProvider<F>(F);

impl<F> fmt::Debug for FnProvider<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnProvider")
    }
}

impl<F, Fut> TokenProvider for FnProvider<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<String>>> + Send + 'static,
{
    fn token(&self) -> TokenFuture<'_> {
        Box::pin((self.0)())
    }
}

/// How long a login token is used before it is renewed.
pub(crate) const LOGIN_RENEW_AFTER: Duration = Duration::from_secs(3600);

/// The cached state of a login token.
#[derive(Default)]
pub(crate) struct LoginCache {
    token: Mutex<Option<(String, Instant)>>,
}

impl fmt::Debug for LoginCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginCache").finish_non_exhaustive()
    }
}

impl LoginCache {
    /// The cached token if still fresh, else the result of `fetch`, cached.
    #[allow(
        clippy::significant_drop_tightening,
        reason = "one login at a time: the others wait for its token"
    )]
    pub(crate) async fn get<F, Fut>(&self, fetch: F) -> Result<String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String>>,
    {
        // Held across the fetch on purpose: one login at a time, the others wait for it.
        let mut slot = self.token.lock().await;
        if let Some((token, at)) = slot.as_ref()
            && at.elapsed() < LOGIN_RENEW_AFTER
        {
            return Ok(token.clone());
        }
        let token = fetch().await?;
        *slot = Some((token.clone(), Instant::now()));
        Ok(token)
    }

    /// Forgets the token (after the server rejected it).
    pub(crate) async fn invalidate(&self) {
        *self.token.lock().await = None;
    }
}

#[cfg(all(test, feature = "cloud"))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn kind_of(c: &Credentials) -> String {
        match &c.0 {
            Source::Anonymous => "anonymous".into(),
            Source::Static(t) => format!("token {}", t.expose()),
            Source::Login { user, password } => format!("login {user} {}", password.expose()),
            Source::Provider(p) => {
                let debug = format!("{p:?}");
                debug
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_string()
            }
        }
    }

    fn pick(pairs: &[(&str, &str)]) -> Result<String> {
        Credentials::from_lookup(env(pairs)).map(|c| kind_of(&c))
    }

    /// A throwaway key, generated for the tests (never used anywhere else).
    const TEST_KEY: &str = include_str!("../../tests/data/test-only-rsa-private-key.pem");

    fn key_file() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ydb-coord-auth-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        // A file of its own for each test: tests run at once, and one must not read another's
        // half-written file.
        let path = dir.join(format!("key-{}.json", rand::random::<u64>()));
        let json = serde_json::json!({
            "id": "key-1", "service_account_id": "sa-1", "private_key": TEST_KEY,
        });
        let _ = std::fs::write(&path, json.to_string());
        path
    }

    #[test]
    fn env_selects_credentials_in_the_documented_order() {
        let key = key_file();
        let key = key.to_string_lossy();
        let all = [
            ("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS", &*key),
            ("YDB_ANONYMOUS_CREDENTIALS", "1"),
            ("YDB_METADATA_CREDENTIALS", "1"),
            ("YDB_ACCESS_TOKEN_CREDENTIALS", "t"),
            ("YDB_STATIC_CREDENTIALS_USER", "u"),
            ("YDB_STATIC_CREDENTIALS_PASSWORD", "p"),
        ];
        let expected = [
            "ServiceAccountCredentials",
            "anonymous",
            "MetadataCredentials",
            "token t",
            "login u p",
        ];
        // Each variable wins over every one after it.
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(
                pick(&all[i..]).ok().as_deref(),
                Some(*want),
                "from {}",
                all[i].0
            );
        }
        assert_eq!(pick(&[]).ok().as_deref(), Some("anonymous"));
        assert_eq!(
            pick(&[("YDB_STATIC_CREDENTIALS_USER", "u")])
                .ok()
                .as_deref(),
            Some("login u ")
        );
        // "0" and empty values do not select anything.
        let off = [
            ("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS", ""),
            ("YDB_ANONYMOUS_CREDENTIALS", "0"),
            ("YDB_METADATA_CREDENTIALS", "0"),
            ("YDB_ACCESS_TOKEN_CREDENTIALS", "t"),
        ];
        assert_eq!(pick(&off).ok().as_deref(), Some("token t"));
        let json = std::fs::read_to_string(&*key).unwrap_or_default();
        assert_eq!(
            pick(&[("YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS", &json)])
                .ok()
                .as_deref(),
            Some("ServiceAccountCredentials")
        );
    }

    #[test]
    fn env_endpoint_overrides_are_checked() {
        let key = key_file();
        let key = key.to_string_lossy();
        let bad_iam = pick(&[
            ("YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS", &*key),
            ("YDB_IAM_ENDPOINT", "iam.example:443"),
        ]);
        assert_eq!(
            bad_iam.err().map(|e| e.kind()),
            Some(ErrorKind::InvalidArgument)
        );
        let bad_metadata = pick(&[
            ("YDB_METADATA_CREDENTIALS", "1"),
            ("YDB_METADATA_ENDPOINT", "ftp://x/y"),
        ]);
        assert_eq!(
            bad_metadata.err().map(|e| e.kind()),
            Some(ErrorKind::InvalidArgument)
        );
        let good = pick(&[
            ("YDB_METADATA_CREDENTIALS", "1"),
            ("YDB_METADATA_ENDPOINT", "http://127.0.0.1:1/token"),
        ]);
        assert_eq!(good.ok().as_deref(), Some("MetadataCredentials"));
    }

    #[test]
    fn oauth2_key_file_comes_last_and_a_bad_one_names_the_file() {
        let dir = std::env::temp_dir().join(format!("ydb-coord-oauth2-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let config = dir.join("oauth2.json");
        let _ = std::fs::write(&config, r#"{"token-endpoint": "http://127.0.0.1:1/token"}"#);
        let config = config.to_string_lossy();
        let oauth2 = ("YDB_OAUTH2_KEY_FILE", &*config);
        assert_eq!(
            pick(&[oauth2]).ok().as_deref(),
            Some("OAuth2TokenExchangeCredentials")
        );
        let login = [("YDB_STATIC_CREDENTIALS_USER", "u"), oauth2];
        assert_eq!(pick(&login).ok().as_deref(), Some("login u "));
        let missing = dir.join("missing.json");
        let err = pick(&[("YDB_OAUTH2_KEY_FILE", &*missing.to_string_lossy())]).err();
        assert_eq!(
            err.as_ref().map(|e| e.kind()),
            Some(ErrorKind::InvalidArgument)
        );
        let detail = err
            .as_ref()
            .and_then(|e| std::error::Error::source(e))
            .and_then(|s| s.downcast_ref::<KeyFileError>());
        assert_eq!(detail.and_then(|d| d.path()), Some(missing.as_path()));
    }

    #[test]
    fn debug_never_shows_secrets() {
        let shown = [
            format!("{:?}", Credentials::token("tok-SECRET")),
            format!("{:?}", Credentials::login("root", "pw-SECRET")),
            format!("{:?}", LoginCache::default()),
        ];
        for s in shown {
            assert!(!s.contains("SECRET"), "{s}");
        }
    }
}
