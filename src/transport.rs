//! Connection strings, endpoints, TLS, the tonic channels and the request headers. The
//! endpoints come from discovery (`discovery.rs`), which runs on this transport.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use ydb_grpc::ydb_proto::auth::v1::auth_service_client::AuthServiceClient;
use ydb_grpc::ydb_proto::auth::{LoginRequest, LoginResult};
use ydb_grpc::ydb_proto::operations::Operation;

use crate::auth::{Credentials, LoginCache, Source};
use crate::endpoints::{EndpointTable, Mark};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::StatusCode;

/// The value of `x-ydb-sdk-build-info`.
const BUILD_INFO: &str = concat!("ydb-coordination/", env!("CARGO_PKG_VERSION"));

/// The shortest default attempt timeout: a round trip to a busy node in another data
/// centre must fit in it.
const MIN_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// The attempt timeout when none is set: a third of the request timeout, so a hung endpoint
/// leaves room for two more attempts, but at least [`MIN_ATTEMPT_TIMEOUT`] and at most the
/// request timeout. A request timeout of `Duration::MAX` (no limit) gives attempts without
/// a limit too.
pub(crate) fn default_attempt_timeout(request_timeout: Duration) -> Duration {
    (request_timeout / 3)
        .max(MIN_ATTEMPT_TIMEOUT)
        .min(request_timeout)
}

/// A parsed connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectionInfo {
    /// `true` for `grpcs://`.
    pub(crate) tls: bool,
    /// `host:port`.
    pub(crate) authority: String,
    /// The database path, starting with `/`.
    pub(crate) database: String,
}

impl ConnectionInfo {
    /// Parses `grpc[s]://host:port/database` or `grpc[s]://host:port?database=/database`.
    pub(crate) fn parse(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("invalid connection string {s:?}: {why}"),
            )
        };
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("missing scheme"))?;
        let tls = match scheme {
            "grpc" | "http" => false,
            "grpcs" | "https" => true,
            _ => return Err(bad("scheme must be grpc or grpcs")),
        };
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.split_once('/') {
            Some((a, p)) => (a, p),
            None => (before_query, ""),
        };
        if authority.is_empty() {
            return Err(bad("missing host"));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            || authority.ends_with(']')
        {
            authority.to_string()
        } else if authority.contains(':') && !authority.starts_with('[') {
            return Err(bad("invalid port"));
        } else {
            format!("{authority}:2135")
        };
        let from_query = query.and_then(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == "database")
                .map(|(_, v)| v.to_string())
        });
        let database = match from_query {
            Some(db) if !db.is_empty() => db,
            _ if !path.is_empty() => path.to_string(),
            _ => return Err(bad("missing database (grpc://host:port/database)")),
        };
        let database = format!("/{}", database.trim_matches('/'));
        Ok(Self {
            tls,
            authority,
            database,
        })
    }

    pub(crate) fn uri(&self, tls: bool) -> String {
        format!(
            "{}://{}",
            if tls { "https" } else { "http" },
            self.authority
        )
    }
}

/// Client-wide transport settings.
#[derive(Debug, Clone)]
pub(crate) struct TransportConfig {
    pub(crate) info: ConnectionInfo,
    pub(crate) credentials: Credentials,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) tls_domain: Option<String>,
    pub(crate) discovery: bool,
    pub(crate) discovery_interval: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    /// How long one attempt of a retried unary call waits for its endpoint.
    pub(crate) attempt_timeout: Duration,
}

/// A channel chosen for one call or stream, with what names it when reporting how it went.
#[derive(Debug, Clone)]
pub(crate) struct Lane {
    pub(crate) channel: Channel,
    mark: Mark,
}

/// Channels to the cluster's endpoints and the headers every request carries.
#[derive(Debug)]
pub(crate) struct Transport {
    config: TransportConfig,
    endpoints: Mutex<EndpointTable<Channel>>,
    /// Wakes the discovery task early: many endpoints failed.
    rediscover: Arc<Notify>,
    login: LoginCache,
}

impl Transport {
    /// A channel (lazy) to the seed endpoint; discovery, if on, runs in
    /// [`Transport::discover`] and, once [`Transport::keep_discovering`] started it, again
    /// every discovery interval and whenever many endpoints fail.
    pub(crate) fn new(config: TransportConfig) -> Result<Arc<Self>> {
        let uri = config.info.uri(config.info.tls);
        let tls = config.info.tls;
        let channel = make_channel(&config, &uri, tls)?;
        Ok(Arc::new(Self {
            endpoints: Mutex::new(EndpointTable::new(uri, tls, channel)),
            rediscover: Arc::new(Notify::new()),
            login: LoginCache::default(),
            config,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EndpointTable<Channel>> {
        self.endpoints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn database(&self) -> &str {
        &self.config.info.database
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }

    pub(crate) fn attempt_timeout(&self) -> Duration {
        self.config.attempt_timeout
    }

    /// The channel to use now: a discovered endpoint that works, round robin; the
    /// connection string's own endpoint when all of them failed (see `endpoints.rs`).
    pub(crate) fn lane(&self) -> Lane {
        let picked = self.lock().pick();
        Lane {
            channel: picked.conn,
            mark: picked.mark,
        }
    }

    /// The lane's endpoint failed (it did not answer, refused, or broke a stream): it is
    /// preferred last from now on and gets a new connection, unless another caller already
    /// reported this one. When many endpoints failed, discovery runs again.
    pub(crate) fn reconnect(&self, lane: &Lane) {
        let ask_again = self.lock().failed(lane.mark, Instant::now(), |uri, tls| {
            make_channel(&self.config, uri, tls).ok()
        });
        if ask_again {
            self.rediscover.notify_one();
        }
    }

    /// The lane's endpoint answered: it is no longer pessimized.
    pub(crate) fn answered(&self, lane: &Lane) {
        self.lock().succeeded(lane.mark);
    }

    /// The settings the transport was made with.
    pub(crate) fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// Uses the endpoints discovery found (`uri`, `tls`), each with a lazy channel; endpoints
    /// that failed stay pessimized unless `forget_failures` (see `endpoints.rs`).
    pub(crate) fn use_endpoints(&self, endpoints: Vec<(String, bool)>, forget_failures: bool) {
        self.lock().replace(endpoints, forget_failures, |uri, tls| {
            make_channel(&self.config, uri, tls).ok()
        });
    }

    /// Notified when many endpoints failed: discovery should run early (`discovery.rs`).
    pub(crate) fn rediscover(&self) -> Arc<Notify> {
        self.rediscover.clone()
    }

    /// Wraps a message in a request with the YDB headers.
    pub(crate) async fn request<T>(&self, message: T) -> Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata().await?;
        Ok(request)
    }

    /// As [`Transport::request`], waiting at most `wait` for the token: a slow or hung token
    /// source (a login, an IAM endpoint) fails the call with [`ErrorKind::Timeout`], no
    /// fault of any endpoint.
    pub(crate) async fn request_within<T>(
        &self,
        message: T,
        wait: Duration,
        what: &str,
    ) -> Result<tonic::Request<T>> {
        match tokio::time::timeout(wait, self.request(message)).await {
            Ok(request) => request,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "{what}: the credentials gave no token within {wait:?}; check the token service"
                ),
            )),
        }
    }

    async fn metadata(&self) -> Result<MetadataMap> {
        let mut map = MetadataMap::new();
        map.insert("x-ydb-database", ascii("database path", self.database())?);
        map.insert(
            "x-ydb-sdk-build-info",
            AsciiMetadataValue::from_static(BUILD_INFO),
        );
        if let Some(token) = self.token().await? {
            // Sensitive: kept out of the HTTP/2 header compression table and of any debug
            // print of the request.
            let mut ticket = ascii("token", &token)?;
            ticket.set_sensitive(true);
            map.insert("x-ydb-auth-ticket", ticket);
        }
        Ok(map)
    }

    async fn token(&self) -> Result<Option<String>> {
        match &self.config.credentials.0 {
            Source::Anonymous => Ok(None),
            Source::Static(t) => Ok(Some(t.expose().to_string())),
            Source::Provider(p) => p.token().await,
            Source::Login { user, password } => self
                .login
                .get(|| self.login(user, password.expose()))
                .await
                .map(Some),
        }
    }

    /// Tells the credentials the server rejected their token: a cached one is forgotten.
    pub(crate) async fn token_rejected(&self) {
        match &self.config.credentials.0 {
            Source::Login { .. } => self.login.invalidate().await,
            Source::Provider(p) => p.invalidate(),
            Source::Anonymous | Source::Static(_) => {}
        }
    }

    async fn login(&self, user: &str, password: &str) -> Result<String> {
        let lane = self.lane();
        let mut client = AuthServiceClient::new(lane.channel);
        let mut request = tonic::Request::new(LoginRequest {
            operation_params: None,
            user: user.to_string(),
            password: password.to_string(),
        });
        request
            .metadata_mut()
            .insert("x-ydb-database", ascii("database path", self.database())?);
        let response = client
            .login(request)
            .await
            .map_err(|s| Error::from_grpc(s, "login"))?
            .into_inner();
        let result: LoginResult = unpack(response.operation, "login")?;
        Ok(result.token)
    }
}

/// A lazy channel to `uri`: nothing is dialled until the first call.
fn make_channel(config: &TransportConfig, uri: &str, tls: bool) -> Result<Channel> {
    let mut endpoint = Endpoint::from_shared(uri.to_string())
        .map_err(|e| {
            let why = crate::error::describe_cause(&e);
            Error::with_source(
                ErrorKind::InvalidArgument,
                format!("invalid endpoint {uri}: {why}"),
                e,
            )
        })?
        .connect_timeout(config.connect_timeout)
        .tcp_nodelay(true)
        .http2_adaptive_window(true);
    if tls {
        let mut tls_config = ClientTlsConfig::new().with_native_roots();
        if let Some(pem) = &config.ca_pem {
            tls_config = tls_config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(domain) = &config.tls_domain {
            tls_config = tls_config.domain_name(domain.clone());
        }
        endpoint = endpoint.tls_config(tls_config).map_err(|e| {
            let why = crate::error::describe_cause(&e);
            Error::with_source(
                ErrorKind::InvalidArgument,
                format!("invalid TLS settings: {why}"),
                e,
            )
        })?;
    }
    Ok(endpoint.connect_lazy())
}

/// `value` as a header value; `what` names it in the error. Nothing is sent when this
/// fails, and no retry can change it.
fn ascii(what: &str, value: &str) -> Result<AsciiMetadataValue> {
    value.parse().map_err(|e| {
        Error::with_source(
            ErrorKind::InvalidArgument,
            format!(
                "the {what} cannot be sent: a header value must be printable ASCII without \
                 line breaks"
            ),
            e,
        )
    })
}

/// Checks an operation's status and decodes its result.
pub(crate) fn unpack<M: prost::Message + Default>(
    operation: Option<Operation>,
    context: &str,
) -> Result<M> {
    let operation = check(operation, context)?;
    let Some(any) = operation.result else {
        return Ok(M::default());
    };
    M::decode(any.value.as_slice()).map_err(|e| {
        let why = crate::error::describe_cause(&e);
        Error::with_source(
            ErrorKind::Protocol,
            format!("{context}: cannot decode the server's answer: {why}"),
            e,
        )
    })
}

/// Checks an operation's status.
pub(crate) fn check(operation: Option<Operation>, context: &str) -> Result<Operation> {
    let operation = operation.ok_or_else(|| {
        Error::new(
            ErrorKind::Protocol,
            format!("{context}: no operation in the response"),
        )
    })?;
    if !operation.ready {
        return Err(Error::new(
            ErrorKind::Protocol,
            format!("{context}: the operation was not completed synchronously"),
        ));
    }
    if operation.status != StatusCode::Success as i32 {
        return Err(Error::from_ydb(
            operation.status,
            &operation.issues,
            context,
        ));
    }
    Ok(operation)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The credential header is sensitive: HTTP/2 never indexes it, and a debug print of
    /// the request does not show it.
    #[tokio::test]
    async fn the_auth_ticket_is_sensitive() {
        let transport = Transport::new(TransportConfig {
            info: ConnectionInfo::parse("grpc://localhost:2136/local").unwrap(),
            credentials: Credentials::token("secret-token"),
            ca_pem: None,
            tls_domain: None,
            discovery: false,
            discovery_interval: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            attempt_timeout: Duration::from_secs(1),
        })
        .unwrap();
        let map = transport.metadata().await.unwrap();
        let ticket = map.get("x-ydb-auth-ticket").unwrap();
        assert!(ticket.is_sensitive());
        assert!(!format!("{map:?}").contains("secret-token"));
        assert!(!map.get("x-ydb-database").unwrap().is_sensitive());
    }

    fn parse(s: &str) -> Option<ConnectionInfo> {
        ConnectionInfo::parse(s).ok()
    }

    #[test]
    fn parses_both_sdk_forms() {
        let a = parse("grpc://localhost:2136/local");
        let b = parse("grpc://localhost:2136?database=/local");
        assert_eq!(a, b);
        assert_eq!(
            a,
            Some(ConnectionInfo {
                tls: false,
                authority: "localhost:2136".into(),
                database: "/local".into()
            })
        );
        let c = parse("grpcs://ydb.example.com:2135/ru-central1/b1g/etn");
        assert_eq!(c.as_ref().map(|c| c.tls), Some(true));
        assert_eq!(
            c.map(|c| c.database),
            Some("/ru-central1/b1g/etn".to_string())
        );
        assert_eq!(
            parse("grpc://host/db").map(|c| c.authority),
            Some("host:2135".to_string())
        );
        assert_eq!(
            parse("grpc://[::1]:2136/db").map(|c| c.authority),
            Some("[::1]:2136".to_string())
        );
    }

    #[test]
    fn the_default_attempt_timeout_is_a_third_of_the_request_timeout_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(default_attempt_timeout(s(9)), s(3));
        assert_eq!(default_attempt_timeout(s(2)), s(1), "the floor");
        assert_eq!(
            default_attempt_timeout(Duration::from_millis(300)),
            Duration::from_millis(300),
            "never more than the request timeout"
        );
        assert_eq!(default_attempt_timeout(Duration::MAX), Duration::MAX / 3);
    }

    #[test]
    fn rejects_bad_strings() {
        for bad in [
            "localhost:2136/local",
            "ftp://h:1/db",
            "grpc://h:1",
            "grpc:///db",
            "grpc://h:x/db",
        ] {
            let kind = ConnectionInfo::parse(bad).err().map(|e| e.kind());
            assert_eq!(kind, Some(ErrorKind::InvalidArgument), "{bad}");
        }
    }
}
