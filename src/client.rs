//! The client: connection, node administration, sessions.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient;
use ydb_grpc::ydb_proto::coordination::{
    AlterNodeRequest, CreateNodeRequest, DescribeNodeRequest, DescribeNodeResult, DropNodeRequest,
};

use crate::auth::Credentials;
use crate::config::{NodeConfig, SessionOptions};
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
/// use ydb_coordination::{Client, Credentials};
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
/// use ydb_coordination::{Client, Credentials};
///
/// let builder = Client::builder("grpc://localhost:2136/local")
///     .credentials(Credentials::anonymous())
///     .discovery(false)
///     .request_timeout(Duration::from_secs(5));
/// # let _ = builder;
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    connection_string: String,
    credentials: Credentials,
    ca_pem: Option<Vec<u8>>,
    tls_domain: Option<String>,
    discovery: bool,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl ClientBuilder {
    /// The credentials (default: anonymous).
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// A PEM-encoded CA certificate to trust for `grpcs://`, besides the system roots.
    pub fn ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// The TLS server name to verify, when it differs from the host name.
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

    /// The TCP connect timeout (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The timeout of node administration calls and discovery (default 10 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Parses the connection string, runs discovery (falling back to the given endpoint if it
    /// fails) and returns the client.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a bad connection string or TLS settings.
    /// Discovery failures are not errors: the given endpoint is used.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn build(self) -> Result<Client> {
        let info = ConnectionInfo::parse(&self.connection_string)?;
        let transport = Transport::new(TransportConfig {
            info,
            credentials: self.credentials,
            ca_pem: self.ca_pem,
            tls_domain: self.tls_domain,
            discovery: self.discovery,
            connect_timeout: self.connect_timeout,
            request_timeout: self.request_timeout,
        })?;
        match tokio::time::timeout(self.request_timeout, transport.discover()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::info!(%err, "discovery failed; using the given endpoint"),
            Err(_) => tracing::info!("discovery timed out; using the given endpoint"),
        }
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
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
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

    /// A node path as the server wants it: absolute, or made absolute inside the database.
    fn full_path(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            format!("{}/{}", self.database().trim_end_matches('/'), path)
        }
    }

    fn coordination(&self) -> Result<CoordinationServiceClient<tonic::transport::Channel>> {
        Ok(CoordinationServiceClient::new(
            self.transport.lane()?.channel,
        ))
    }

    async fn unary<F, Fut, R>(&self, what: &str, call: F) -> Result<R>
    where
        F: FnOnce(CoordinationServiceClient<tonic::transport::Channel>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<R>, tonic::Status>>,
    {
        let client = self.coordination()?;
        match tokio::time::timeout(self.transport.request_timeout(), call(client)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(status)) => Err(Error::from_grpc(status, what)),
            Err(_) => Err(Error::new(ErrorKind::Timeout, format!("{what}: timed out"))),
        }
    }

    /// Creates a coordination node.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::emulator::Emulator;
    /// use ydb_coordination::{Client, NodeConfig};
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
        let request = self
            .transport
            .request(CreateNodeRequest {
                path: self.full_path(path),
                config: Some(config.to_proto()?),
                operation_params: None,
            })
            .await?;
        let r = self
            .unary(&format!("create node {path:?}"), |mut c| async move {
                c.create_node(request).await
            })
            .await?;
        transport::check(r.operation, &format!("create node {path:?}")).map(drop)
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
        let request = self
            .transport
            .request(AlterNodeRequest {
                path: self.full_path(path),
                config: Some(config.to_proto()?),
                operation_params: None,
            })
            .await?;
        let r = self
            .unary(&format!("alter node {path:?}"), |mut c| async move {
                c.alter_node(request).await
            })
            .await?;
        transport::check(r.operation, &format!("alter node {path:?}")).map(drop)
    }

    /// Drops a coordination node.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] if the node does not exist.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not withdraw a request already sent.
    pub async fn drop_node(&self, path: &str) -> Result<()> {
        let request = self
            .transport
            .request(DropNodeRequest {
                path: self.full_path(path),
                operation_params: None,
            })
            .await?;
        let r = self
            .unary(&format!("drop node {path:?}"), |mut c| async move {
                c.drop_node(request).await
            })
            .await?;
        transport::check(r.operation, &format!("drop node {path:?}")).map(drop)
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
        let request = self
            .transport
            .request(DescribeNodeRequest {
                path: self.full_path(path),
                operation_params: None,
            })
            .await?;
        let r = self
            .unary(&format!("describe node {path:?}"), |mut c| async move {
                c.describe_node(request).await
            })
            .await?;
        let result: DescribeNodeResult =
            transport::unpack(r.operation, &format!("describe node {path:?}"))?;
        Ok(result
            .config
            .as_ref()
            .map(NodeConfig::from_proto)
            .unwrap_or_default())
    }

    /// Starts a session on a coordination node, retrying transient failures for up to
    /// [`SessionOptions::connect_timeout`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] (no such node), [`ErrorKind::Unauthorized`],
    /// [`ErrorKind::InvalidArgument`] (options out of range), [`ErrorKind::Timeout`] (no
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
            let lane = self.transport.lane()?;
            let left = deadline.saturating_duration_since(Instant::now());
            let err = match tokio::time::timeout(
                left,
                driver::attach(&self.transport, lane.clone(), start),
            )
            .await
            {
                Ok(Ok(attached)) => break attached,
                Ok(Err(err)) if err.ends_session() => return Err(err),
                Ok(Err(err)) => err,
                Err(_) => {
                    self.transport.reconnect(&lane);
                    Error::new(ErrorKind::Timeout, "session start timed out")
                }
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
        cfg.session_id = session_id;
        let (commands_tx, commands_rx) = mpsc::channel(1024);
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let (state_tx, state_rx) = watch::channel(SessionState::Attached { session_id });
        let token = CancellationToken::new();
        let terminal = Arc::new(Terminal::default());
        let io = DriverIo {
            commands: commands_rx,
            control: control_rx,
            state: state_tx,
            token: token.clone(),
            terminal: terminal.clone(),
        };
        let core = SessionCore::new(
            cfg,
            token.clone(),
            terminal.clone(),
            attached.sent_at,
            Instant::now(),
        );
        let driver = driver::Driver::new(core, self.transport.clone(), attached, &io);
        let span = tracing::info_span!("coordination_session", session_id, node = %path);
        tokio::spawn(tracing::Instrument::instrument(driver.run(io), span));
        Ok(Session::new(
            session_id,
            path,
            commands_tx,
            control_tx,
            state_rx,
            token,
            terminal,
        ))
    }
}
