//! The client: connection, node administration, sessions.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;
use ydb_grpc::ydb_proto::coordination::{
    AlterNodeRequest, CreateNodeRequest, DescribeNodeRequest, DescribeNodeResult, DropNodeRequest,
};
use ydb_grpc::ydb_proto::operations::Operation;

use crate::auth::Credentials;
use crate::config::{NodeConfig, NodeIncarnation, SessionOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::session::core::{CoreConfig, SessionCore, Terminal, start_message};
use crate::session::driver::{self, DriverIo};
use crate::session::{Session, SessionState};
use crate::transport::{self, ConnectionInfo, Transport, TransportConfig};

/// A connection to a YDB database for coordination work.
///
/// Cheap to clone; all clones share the channels.
///
/// # Examples
///
/// ```no_run
/// use ydb_coordination::{Client, auth::Credentials};
///
/// # #[tokio::main]
/// # async fn main() -> ydb_coordination::Result<()> {
/// let client = Client::builder("grpcs://ydb.example.com:2135/prod")
///     .credentials(Credentials::from_env()?)
///     .build()
///     .await?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    transport: Arc<Transport>,
}

/// Builds a [`Client`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::{Client, auth::Credentials};
///
/// let builder = Client::builder("grpc://localhost:2136/local")
///     .credentials(Credentials::anonymous())
///     .discovery_interval(Duration::from_secs(30))
///     .request_timeout(Duration::from_secs(5));
/// # let _ = builder;
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build`"]
pub struct ClientBuilder {
    connection_string: String,
    credentials: Credentials,
    ca_pem: Option<Vec<u8>>,
    tls_domain: Option<String>,
    discovery: bool,
    discovery_interval: Duration,
    connect_timeout: Duration,
    request_timeout: Duration,
    attempt_timeout: Option<Duration>,
}

impl ClientBuilder {
    /// The credentials (default: anonymous).
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// A PEM-encoded CA certificate (or several) to trust for `grpcs://`, besides the
    /// system roots, which are trusted by default.
    pub fn ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// The TLS server name to verify, when it differs from the host name (an endpoint
    /// reached by IP address or through a tunnel); it applies to every endpoint.
    pub fn tls_domain(mut self, domain: impl Into<String>) -> Self {
        self.tls_domain = Some(domain.into());
        self
    }

    /// Whether to ask the cluster for its endpoints (`ListEndpoints`, default on). Turn it
    /// off behind proxies and load balancers to use only the given endpoint.
    pub fn discovery(mut self, on: bool) -> Self {
        self.discovery = on;
        self
    }

    /// How often discovery runs again while the client is in use (default 1 minute, as in
    /// ydb-go-sdk), so that sessions reattach to nodes that joined the cluster since. It
    /// also runs early when at least half of the discovered endpoints failed; a failing
    /// endpoint is preferred last, and when all of them fail the connection string's own
    /// endpoint is used.
    pub fn discovery_interval(mut self, interval: Duration) -> Self {
        self.discovery_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// The TCP connect timeout (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The time limit of a node administration call or a discovery, its retries included
    /// (default 10 s). `Duration::MAX` means no limit.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long one attempt of a node administration call or a discovery waits for its
    /// endpoint's answer (default: a third of the [request
    /// timeout](ClientBuilder::request_timeout), at least 1 s, at most the request timeout
    /// itself: 3.3 s by default, no limit for a request timeout of `Duration::MAX`).
    ///
    /// An endpoint that accepts the call and never answers costs one attempt, not the whole
    /// call: when the attempt's time is up the endpoint is preferred last, gets a new
    /// connection, and the call goes on to the next endpoint, all within the request timeout.
    /// The calls repeated this way are all idempotent: an attempt that timed out may have been
    /// carried out, and doing it again leaves the node as one attempt would. Its answer can
    /// differ: a [`drop_node`](Client::drop_node) whose first attempt was slower than this,
    /// but went through, reports [`NotFound`](ErrorKind::NotFound) on the next.
    ///
    /// A zero timeout is refused by [`build`](ClientBuilder::build) with
    /// [`ErrorKind::InvalidArgument`]: every attempt would fail before its answer.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ydb_coordination::Client;
    ///
    /// // Up to five attempts of 2 s each, on as many endpoints.
    /// let builder = Client::builder("grpc://localhost:2136/local")
    ///     .request_timeout(Duration::from_secs(10))
    ///     .attempt_timeout(Duration::from_secs(2));
    /// # let _ = builder;
    /// ```
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// Parses the connection string, runs discovery (falling back to the given endpoint if it
    /// fails) and returns the client.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad connection string or TLS settings, or a zero
    /// [attempt timeout](ClientBuilder::attempt_timeout).
    /// Discovery failures are not errors: the given endpoint is used.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn build(self) -> Result<Client> {
        let info = ConnectionInfo::parse(&self.connection_string)?;
        if self.attempt_timeout == Some(Duration::ZERO) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "the attempt timeout is zero: every attempt would time out before its answer; \
                 set a positive one, or leave it unset for a third of the request timeout",
            ));
        }
        let transport = Transport::new(TransportConfig {
            info,
            credentials: self.credentials,
            ca_pem: self.ca_pem,
            tls_domain: self.tls_domain,
            discovery: self.discovery,
            discovery_interval: self.discovery_interval,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
            attempt_timeout: self
                .attempt_timeout
                .unwrap_or_else(|| transport::default_attempt_timeout(self.request_timeout)),
        })?;
        // Bounded by the request timeout: discovery is an idempotent call.
        if let Err(err) = transport.discover(true).await {
            tracing::info!(%err, "discovery failed; using the given endpoint");
        }
        transport.keep_discovering();
        Ok(Client { transport })
    }
}

impl Client {
    /// A builder for the connection string `grpc[s]://host:port/database` (or
    /// `grpc[s]://host:port?database=/database`).
    pub fn builder(connection_string: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            connection_string: connection_string.into(),
            credentials: Credentials::anonymous(),
            ca_pem: None,
            tls_domain: None,
            discovery: true,
            discovery_interval: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            attempt_timeout: None,
        }
    }

    /// Connects with the defaults (anonymous, discovery on).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::Client;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// let client = Client::connect(&emulator.connection_string()).await?;
    /// assert_eq!(client.database(), "/local");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn connect(connection_string: &str) -> Result<Self> {
        Self::builder(connection_string).build().await
    }

    /// The database path.
    pub fn database(&self) -> &str {
        self.transport.database()
    }

    /// The rate-limiter resources of the coordination node `node` (absolute, or relative to
    /// the database).
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// client.create_node("quotas", NodeConfig::new()).await?;
    /// let limiter = client.rate_limiter("quotas");
    /// assert_eq!(limiter.node(), "/local/quotas");
    /// assert!(limiter.list_resources("", true).await?.is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn rate_limiter(&self, node: &str) -> crate::RateLimiter {
        crate::RateLimiter::new(self.clone(), node)
    }

    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }

    /// A node path as the server wants it: absolute, or made absolute inside the database.
    pub(crate) fn full_path(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{}", self.database().trim_end_matches('/'), path)
        }
    }

    /// One node administration call, retried as an idempotent call (`retry.rs`):
    /// `call` sends `message` on a coordination client and returns the response's
    /// operation.
    async fn node_call<M, F, Fut>(&self, what: &str, message: M, call: F) -> Result<Operation>
    where
        M: Clone,
        F: Fn(CoordinationServiceClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<Option<Operation>, tonic::Status>>,
    {
        let attempts = crate::retry::Attempts::idempotent(&self.transport);
        crate::retry::operation(
            &self.transport,
            what,
            message,
            attempts,
            |channel, request| call(CoordinationServiceClient::new(channel), request),
        )
        .await
    }

    /// Creates a coordination node.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// client.create_node("app", NodeConfig::new()).await?;
    /// let config = client.describe_node("/local/app").await?;
    /// assert_eq!(config, NodeConfig::new());
    /// client.drop_node("app").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Server errors. Creating a node that already exists succeeds and leaves its config as
    /// it was (YDB's behaviour); use [`Client::describe_node`] to check it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn create_node(&self, path: &str, config: NodeConfig) -> Result<()> {
        let message = CreateNodeRequest {
            path: self.full_path(path),
            config: Some(config.to_proto()?),
            operation_params: None,
        };
        self.node_call(
            &format!("create node {path:?}"),
            message,
            |mut c, r| async move { Ok(c.create_node(r).await?.into_inner().operation) },
        )
        .await
        .map(drop)
    }

    /// Changes the set fields of a node's config.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if the node does not exist.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn alter_node(&self, path: &str, config: NodeConfig) -> Result<()> {
        let message = AlterNodeRequest {
            path: self.full_path(path),
            config: Some(config.to_proto()?),
            operation_params: None,
        };
        self.node_call(
            &format!("alter node {path:?}"),
            message,
            |mut c, r| async move { Ok(c.alter_node(r).await?.into_inner().operation) },
        )
        .await
        .map(drop)
    }

    /// Drops a coordination node.
    ///
    /// Like every node call, it is retried after transient failures (unavailable,
    /// overloaded, no answer), with [`Backoff`](crate::config::Backoff)'s defaults, within
    /// [`ClientBuilder::request_timeout`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if the node does not exist, also when an earlier attempt
    /// dropped it but its answer was lost or came after the
    /// [attempt timeout](ClientBuilder::attempt_timeout).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn drop_node(&self, path: &str) -> Result<()> {
        let message = DropNodeRequest {
            path: self.full_path(path),
            operation_params: None,
        };
        self.node_call(
            &format!("drop node {path:?}"),
            message,
            |mut c, r| async move { Ok(c.drop_node(r).await?.into_inner().operation) },
        )
        .await
        .map(drop)
    }

    /// The config a node was created or altered with (fields never set are unset).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if the node does not exist.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn describe_node(&self, path: &str) -> Result<NodeConfig> {
        let result = self.describe_node_result(path).await?;
        Ok(result
            .config
            .as_ref()
            .map(NodeConfig::from_proto)
            .unwrap_or_default())
    }

    /// When the node was created, as the server reports it in the node's scheme entry
    /// (`created_at`): a node dropped and created again at the same path has a greater
    /// incarnation, and its fencing tokens start again at 1. `None` when the server does not
    /// report it.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::{Client, config::NodeConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let emulator = Emulator::builder().start().await?;
    /// # let client = Client::connect(&emulator.connection_string()).await?;
    /// client.create_node("app", NodeConfig::new()).await?;
    /// let first = client.node_incarnation("app").await?;
    /// client.drop_node("app").await?;
    /// client.create_node("app", NodeConfig::new()).await?;
    /// let again = client.node_incarnation("app").await?;
    /// assert!(again > first);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if the node does not exist.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn node_incarnation(&self, path: &str) -> Result<Option<NodeIncarnation>> {
        let result = self.describe_node_result(path).await?;
        Ok(result
            .self_
            .and_then(|entry| entry.created_at)
            .filter(|at| at.plan_step != 0 || at.tx_id != 0)
            .map(|at| NodeIncarnation {
                plan_step: at.plan_step,
                tx_id: at.tx_id,
            }))
    }

    async fn describe_node_result(&self, path: &str) -> Result<DescribeNodeResult> {
        let what = format!("describe node {path:?}");
        let message = DescribeNodeRequest {
            path: self.full_path(path),
            operation_params: None,
        };
        let operation = self
            .node_call(&what, message, |mut c, r| async move {
                Ok(c.describe_node(r).await?.into_inner().operation)
            })
            .await?;
        transport::unpack(Some(operation), &what)
    }

    /// Starts a session on a coordination node, retrying transient failures for up to
    /// [`SessionOptions::connect_timeout`]. An attempt waits at most two
    /// [ping intervals](SessionOptions::ping_interval) for the server's answer, as a reattach
    /// does; an endpoint that gives none is preferred last and the next one is tried.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] (no such node), [`ErrorKind::Unauthorized`],
    /// [`ErrorKind::InvalidArgument`] at once (options out of range, a token that is not a
    /// valid header value, a request the server rejects as malformed), [`ErrorKind::Transport`] at
    /// once when the server's TLS certificate is refused, [`ErrorKind::Timeout`] (no
    /// server answered in time; the error's source is the last failure).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves at most a session the server expires
    /// after its timeout.
    pub async fn session(&self, path: &str, options: SessionOptions) -> Result<Session> {
        options.validate()?;
        let path = self.full_path(path);
        let protection_key: Vec<u8> = options
            .protection_key
            .clone()
            .unwrap_or_else(|| rand::random::<[u8; 16]>().to_vec());
        let deadline = Instant::now() + options.get_connect_timeout();
        let attempt_limit = options.get_ping_interval().saturating_mul(2);
        let mut attempt = 0u32;
        let mut cfg = CoreConfig {
            path: path.clone(),
            options,
            protection_key,
            session_id: 0,
            seq_no: 1,
        };
        let attached = loop {
            // The same start message as every reattach, with session id 0: a new session.
            let start = start_message(&cfg, 0);
            // The server has what a reattach attempt has to answer, two ping intervals, so
            // an endpoint that accepts and never answers is left for the next one (the
            // attach pessimizes it) instead of using up the whole budget; the attempt as a
            // whole, slow credentials included, stays within the budget.
            let left = deadline.saturating_duration_since(Instant::now());
            let attach =
                driver::attach(&self.transport, self.transport.lane(), start, attempt_limit);
            let err = match tokio::time::timeout(left, attach).await {
                Ok(Ok(attached)) => break attached,
                Ok(Err(err)) if err.ends_session_start() => return Err(err),
                Ok(Err(err)) => err,
                Err(_) => Error::new(
                    ErrorKind::Timeout,
                    "the session start did not finish within the connect budget",
                ),
            };
            let delay = cfg.options.backoff.delay(attempt, rand::random::<f64>());
            attempt += 1;
            if Instant::now() + delay >= deadline {
                return Err(Error::caused_by(
                    ErrorKind::Timeout,
                    format!(
                        "could not start a session on {path} within {:?}: {err}",
                        cfg.options.get_connect_timeout()
                    ),
                    &err,
                ));
            }
            tokio::time::sleep(delay).await;
        };
        let session_id = attached.session_id;
        let timeout = cfg.options.get_timeout();
        cfg.session_id = session_id;
        let token = CancellationToken::new();
        let terminal = Arc::new(Terminal::default());
        let (handle, inbox) =
            crate::session::inbox::inbox(session_id, terminal.clone(), token.clone());
        let (state_tx, state_rx) = watch::channel(SessionState::Attached { session_id });
        let changed = cfg
            .options
            .announce
            .then(|| Arc::new(tokio::sync::Notify::new()));
        if let Some(changed) = &changed {
            let announcer = crate::session::announce::Announcer {
                description: cfg.options.description.clone(),
                timeout: cfg.options.timeout,
                interval: crate::session::announce::ANNOUNCE_INTERVAL,
            };
            tokio::spawn(crate::session::announce::run(
                handle.weak(),
                changed.clone(),
                announcer,
            ));
        }
        let io = DriverIo {
            inbox,
            state: state_tx,
            token: token.clone(),
            terminal: terminal.clone(),
            changed,
        };
        let core = SessionCore::new(
            cfg,
            token.clone(),
            terminal.clone(),
            attached.sent_at,
            Instant::now(),
        );
        let driver = driver::Driver::new(core, self.transport.clone(), attached, io);
        let span = tracing::info_span!("coordination_session", session_id, node = %path);
        tokio::spawn(tracing::Instrument::instrument(driver.run(), span));
        Ok(Session::new(path, timeout, handle, state_rx, token))
    }
}
