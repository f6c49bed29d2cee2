//! Credentials: where the `x-ydb-auth-ticket` header comes from.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};

/// A boxed future returned by [`TokenProvider::token`].
pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = Result<Option<String>>> + Send + 'a>>;

/// Supplies the auth token sent with every request (`None`: no token header).
///
/// Implement it for your own token source, or use [`Credentials::from_fn`].
///
/// # Examples
///
/// ```
/// use ydb_coordination::{Credentials, TokenFuture, TokenProvider};
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
    /// The current token. Called before every unary call and every stream attach, so cache
    /// inside when fetching is expensive.
    fn token(&self) -> TokenFuture<'_>;
}

#[derive(Debug, Clone)]
pub(crate) enum Source {
    Anonymous,
    Static(String),
    Provider(Arc<dyn TokenProvider>),
    Login { user: String, password: String },
}

/// How the client authenticates.
///
/// The same environment variables as the YDB SDKs are understood by [`Credentials::from_env`].
///
/// # Examples
///
/// ```
/// use ydb_coordination::Credentials;
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
        Self(Source::Static(token.into()))
    }

    /// User and password, exchanged for a token through YDB's `AuthService/Login`; the
    /// token is renewed every hour and after an `UNAUTHORIZED` answer.
    pub fn login(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self(Source::Login {
            user: user.into(),
            password: password.into(),
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

    /// Reads the YDB SDKs' environment variables, in this order:
    /// `YDB_ANONYMOUS_CREDENTIALS=1` (anonymous), `YDB_ACCESS_TOKEN_CREDENTIALS` (a token),
    /// `YDB_STATIC_CREDENTIALS_USER` with `YDB_STATIC_CREDENTIALS_PASSWORD` (login).
    /// With none of them set: anonymous.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Unauthorized`] when a cloud-IAM variable
    /// (`YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS`, `YDB_METADATA_CREDENTIALS`,
    /// `YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS`, `YDB_OAUTH2_KEY_FILE`) is set: those are not
    /// supported; obtain a token yourself and pass it with [`Credentials::token`].
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let set = |name: &str| get(name).filter(|v| !v.is_empty());
        if set("YDB_ANONYMOUS_CREDENTIALS").is_some_and(|v| v == "1") {
            return Ok(Self::anonymous());
        }
        if let Some(token) = set("YDB_ACCESS_TOKEN_CREDENTIALS") {
            return Ok(Self::token(token));
        }
        if let Some(user) = set("YDB_STATIC_CREDENTIALS_USER") {
            let password = get("YDB_STATIC_CREDENTIALS_PASSWORD").unwrap_or_default();
            return Ok(Self::login(user, password));
        }
        for unsupported in [
            "YDB_SERVICE_ACCOUNT_KEY_FILE_CREDENTIALS",
            "YDB_SERVICE_ACCOUNT_KEY_CREDENTIALS",
            "YDB_METADATA_CREDENTIALS",
            "YDB_OAUTH2_KEY_FILE",
        ] {
            if set(unsupported).is_some() {
                return Err(Error::new(
                    ErrorKind::Unauthorized,
                    format!(
                        "{unsupported} is set, but cloud IAM credentials are not supported; \
                         pass a token with YDB_ACCESS_TOKEN_CREDENTIALS instead"
                    ),
                ));
            }
        }
        Ok(Self::anonymous())
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
#[derive(Debug, Default)]
pub(crate) struct LoginCache {
    token: Mutex<Option<(String, Instant)>>,
}

impl LoginCache {
    /// The cached token if still fresh, else the result of `fetch`, cached.
    pub(crate) async fn get<F, Fut>(&self, fetch: F) -> Result<String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String>>,
    {
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

#[cfg(test)]
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

    #[test]
    fn env_selects_credentials_in_sdk_order() {
        let c = Credentials::from_lookup(env(&[])).ok();
        assert!(matches!(c.map(|c| c.0), Some(Source::Anonymous)));
        let c = Credentials::from_lookup(env(&[("YDB_ACCESS_TOKEN_CREDENTIALS", "t")])).ok();
        assert!(matches!(c.map(|c| c.0), Some(Source::Static(t)) if t == "t"));
        let c = Credentials::from_lookup(env(&[
            ("YDB_STATIC_CREDENTIALS_USER", "u"),
            ("YDB_STATIC_CREDENTIALS_PASSWORD", "p"),
        ]))
        .ok();
        assert!(
            matches!(c.map(|c| c.0), Some(Source::Login { user, password }) if user == "u" && password == "p")
        );
        let c = Credentials::from_lookup(env(&[
            ("YDB_ANONYMOUS_CREDENTIALS", "1"),
            ("YDB_ACCESS_TOKEN_CREDENTIALS", "t"),
        ]))
        .ok();
        assert!(matches!(c.map(|c| c.0), Some(Source::Anonymous)));
    }

    #[test]
    fn unsupported_cloud_credentials_are_a_clear_error() {
        let err = Credentials::from_lookup(env(&[("YDB_METADATA_CREDENTIALS", "1")])).err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Unauthorized));
    }
}
