//! An in-process emulator of YDB's coordination service.
//!
//! It serves the real gRPC protocol (`Ydb.Coordination.V1.CoordinationService`,
//! `Ydb.RateLimiter.V1.RateLimiterService` and `Ydb.Discovery.V1.DiscoveryService`) on a
//! loopback TCP port, so the `ydb-coordination` client, the official `ydb` crate or any other
//! YDB SDK can talk to it unchanged. Its semaphores, sessions, queues, watches, timeouts and
//! status codes behave as a YDB coordination node's do, and so do the rate limiter's resources
//! on each node (see [Rate limiter](#rate-limiter)), with the few differences listed below.
//!
//! What "as YDB's do" means is written down in two specifications that ship with the crate:
//! [`SPEC.md`] for the coordination service and [`SPEC-rate-limiter.md`] for the rate limiter,
//! each numbered on its own. The code and the tests cite their sections: a `§` in a module
//! names a section of the document that module's documentation names.
//!
//! [`SPEC.md`]: https://github.com/ydb-coordination/ydb-coordination/blob/main/emulator/SPEC.md
//! [`SPEC-rate-limiter.md`]: https://github.com/ydb-coordination/ydb-coordination/blob/main/emulator/SPEC-rate-limiter.md
//!
//! It shares nothing with the client but the protocol types generated into `ydb-grpc`. The
//! `ydb-coordination` crate re-exports it as `ydb_coordination::emulator` under its `emulator`
//! feature; the `ydb-coord` command runs it standalone (`ydb-coord emulator --listen
//! 127.0.0.1:2136`).
//!
//! Time is `tokio::time`, so tests under `#[tokio::test(start_paused = true)]` see session and
//! acquire timeouts fire deterministically.
//!
//! As YDB serves each coordination node from a tablet of its own, each node here has a lock of
//! its own: sessions on different nodes are served in parallel, and a busy node never delays
//! another (the rate limiters of all nodes share one more lock, apart from the nodes').
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! use ydb_coordination_emulator::Emulator;
//!
//! let emulator = Emulator::builder().database("/local").node("/local/app").start().await?;
//! assert!(emulator.connection_string().starts_with("grpc://127.0.0.1:"));
//! emulator.net().cut(); // every open connection breaks, as on a network failure
//! emulator.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Differences from YDB
//!
//! - No access control: every request is allowed (YDB checks the node's ACL).
//! - A single server node in front of the tablets: no cross-node proxy races (on a multi-node
//!   YDB, a rejected steal can kick the legitimate stream first; the emulator behaves as the
//!   tablet, `SPEC.md` §2.4).
//! - An update with oversized data is rejected without being applied (YDB replies
//!   `BAD_REQUEST` but applies it, `SPEC.md` §3.2).
//! - Consistency modes and the node's rate-limiter counters mode are stored and reported, not
//!   acted on.
//! - Owners in a describe come sorted by `order_id` (YDB's order is unspecified, `SPEC.md`
//!   §3.4).
//!
//! # Rate limiter
//!
//! Each coordination node has a tree of rate-limiter resources (created with the node, dropped
//! with it), served by `Ydb.RateLimiter.V1.RateLimiterService` on the same listeners, following
//! [`SPEC-rate-limiter.md`]: resource paths and their checks, create (ALREADY_EXISTS
//! only for identical settings), alter as a full replacement, drop of leaves only, list
//! (recursive, or the path alone), describe of the stored (not the inherited) settings,
//! metering configs stored and described as YDB describes them (every known `metric_fields`
//! key, empty when unset), the statuses of every refusal; and `AcquireResource` as one YDB
//! server node answers it, with the faithful model of `SPEC-rate-limiter.md` §10.1: the tablet's
//! hierarchical DRR on 100 ms ticks (children share their parent's rate, each capped at its
//! own), the node's local bucket of `rate × prefetch` (full at first use, so the first
//! `required` is granted whatever its size), the quoter's pacing and overdraft (a `required`
//! amount over the bucket is granted into debt, later ones wait it off), `used` never waiting,
//! a FIFO queue per resource, deadlines (TIMEOUT, or CANCELLED when `0 < cancel_after <
//! operation_timeout`). At 10 units/s, sequential one-unit acquires finish at 0, 0, 0.1,
//! 0.2, … s. [`Emulator::restart`] keeps the resources, their settings and the node-side
//! balances (debt and waiting acquires included), as a YDB tablet restart does.
//!
//! Differences from YDB:
//!
//! - One server node: no per-node sharing of a resource between several proxies
//!   (`SPEC-rate-limiter.md` §10.3).
//! - The quoter's feeds of a queued resource run right after the tablet's tick (YDB's run on
//!   the quoter's own 100 ms chain, up to a tick later), messages between tablet, proxy and
//!   quoter take no time, and the local quota channel does not expire after two feeds: grant
//!   times can be earlier than YDB's by less than a tick.
//! - Without an operation timeout, an acquire that cannot be granted at once gets TIMEOUT at
//!   once (YDB's deadline is "now" rounded up to its 1 ms scheduler, so a grant within that
//!   millisecond is possible there).
//! - An acquire with an empty resource path gets BAD_REQUEST (YDB answers INTERNAL_ERROR, or
//!   fails an assertion on a node that has not seen the coordination node yet).
//! - Replicated-bucket leaves, `immediately_fill_up_to` and metering are stored and echoed, not
//!   acted on; there is no billing.
//! - List answers in sorted order (YDB's is unspecified); a missing coordination node is
//!   SCHEME_ERROR on the control plane, as in YDB since 2025-04 (INTERNAL_ERROR before).
//! - Administrator rights for metering are not checked (every caller may set it).
//!
//! Where YDB's source corrects a simpler reading of a rule, the emulator follows the source;
//! `SPEC-rate-limiter.md` §13 lists each correction with its place in YDB's source: the
//! quoter's pacing (C1, C3: paced grants land 2 ms early, so at 1 unit/s sequential one-unit
//! acquires finish at 0, 0.998, 1.998, … s), the debt kept by the proxy rather than the quoter
//! (C2), a relative coordination path refused by the quoter as INTERNAL_ERROR (C4), and the
//! `metric_fields` of a described metering config (C5).
//!
//! # Layout
//!
//! The node's rules are a pure state machine (`state.rs`: methods that take `now` and return
//! effects, unit-tested without a runtime, following [`SPEC.md`]), and so
//! are its rate limiter's (`quoter.rs`, following [`SPEC-rate-limiter.md`]); `world.rs`
//! holds the nodes, each behind its own lock with the streams bound to it, routes a node's
//! effects to its streams and gives the lock order; `service.rs` is the thin tonic shell (one
//! task per stream, which goes straight to its node once attached, and one timer task) and
//! `rate_limiter.rs` the rate limiter's, on the generated server of `ydb-coordination-proto`;
//! `net.rs` is the loopback TCP layer the fault controls act on.

mod net;
pub mod observe;
mod proto;
mod quoter;
mod rate_limiter;
mod service;
// Its public items are the `core` API, reachable only with the `simulation` feature.
#[cfg_attr(
    not(feature = "simulation"),
    allow(
        unreachable_pub,
        reason = "reachable through `core` with the `simulation` feature"
    )
)]
pub(crate) mod state;
mod world;
pub use world::Traffic;

/// The pure state machine of one coordination node, without the gRPC shell: for running
/// the emulator inside a deterministic simulation, where the caller moves the messages and
/// the clock. Every method takes `now` and returns the effects to carry out, in order.
/// Behind the `simulation` feature.
#[cfg(feature = "simulation")]
pub mod core {
    pub use crate::state::{Effect, NodeState, StreamId};
}

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::DuplexStream;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use ydb_coordination_proto::rate_limiter::v1::rate_limiter_service_server::RateLimiterServiceServer;

use self::net::Net;
use self::rate_limiter::RateLimiter;
use self::service::{CoordinationService, DiscoveryService, Shared};
use self::world::World;
use crate::proto::NodeConfigProto;

/// Namespace for [`Emulator::builder`]; a started emulator is an [`Emulator`] handle.
///
/// Dropping the handle without [`Emulator::shutdown`] also stops the server.
#[derive(Debug)]
pub struct Emulator {
    shared: Arc<Shared>,
    net: Arc<Net>,
    addr: SocketAddr,
    /// Where accepted connections go: the one gRPC server behind every listener.
    conns: mpsc::UnboundedSender<io::Result<DuplexStream>>,
    listeners: std::sync::Mutex<Vec<Listener>>,
    tasks: Vec<JoinHandle<()>>,
}

/// One listening address of an [`Emulator`]; stopping it closes the port and breaks the
/// connections it accepted.
#[derive(Debug)]
struct Listener {
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Configures and starts an [`Emulator`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use ydb_coordination_emulator::Emulator;
///
/// let emulator = Emulator::builder()
///     .database("/Root")
///     .listen("127.0.0.1:0".parse().unwrap())
///     .node("/Root/locks")
///     .start()
///     .await?;
/// assert_eq!(emulator.database(), "/Root");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct EmulatorBuilder {
    database: String,
    listen: SocketAddr,
    nodes: Vec<String>,
    users: Vec<(String, String)>,
    tokens: Vec<String>,
    tls: Option<Tls>,
    observer: Option<world::SharedObserver>,
    max_message: usize,
}

/// The largest gRPC message YDB receives or sends by default, in bytes: its
/// `DEFAULT_GRPC_MESSAGE_SIZE_LIMIT` (64,000,000; `GRpcConfig.MaxMessageSize` changes it).
/// See [`EmulatorBuilder::max_message_size`].
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 64_000_000;

/// A server certificate chain and its private key, both PEM.
#[derive(Clone)]
struct Tls {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Default for EmulatorBuilder {
    fn default() -> Self {
        Self {
            database: "/local".to_string(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            nodes: Vec::new(),
            users: Vec::new(),
            tokens: Vec::new(),
            tls: None,
            observer: None,
            max_message: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl EmulatorBuilder {
    /// The database the emulator serves (default `/local`); relative node paths are resolved
    /// against the `x-ydb-database` header, or this when the header is absent.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        let database = database.into();
        self.database = if database.starts_with('/') {
            database.trim_end_matches('/').to_string()
        } else {
            format!("/{}", database.trim_end_matches('/'))
        };
        self
    }

    /// The address to listen on (default `127.0.0.1:0`, a free loopback port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// A coordination node to create at start, with the default config. Relative paths are
    /// taken inside the database.
    pub fn node(mut self, path: impl Into<String>) -> Self {
        self.nodes.push(path.into());
        self
    }

    /// A user who can log in (`Ydb.Auth.V1.AuthService/Login`) and get a token. With any
    /// user or token configured, every coordination call must carry an accepted token in
    /// `x-ydb-auth-ticket`: sessions without one fail with `UNAUTHORIZED`, as on a YDB that
    /// enforces authentication. Discovery stays open.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.users.push((name.into(), password.into()));
        self
    }

    /// A fixed token to accept (as an OAuth or IAM token would be); turns checking on like
    /// [`EmulatorBuilder::user`].
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.tokens.push(token.into());
        self
    }

    /// The largest gRPC message the emulator receives or sends, in bytes (default
    /// [`DEFAULT_MAX_MESSAGE_SIZE`], YDB's): a larger request is refused, and a larger
    /// answer fails its call (a session's stream ends with `RESOURCE_EXHAUSTED`), as on a
    /// YDB whose `GRpcConfig.MaxMessageSize` is `bytes`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use ydb_coordination_emulator::Emulator;
    ///
    /// // gRPC's default limit, as some servers and proxies keep it.
    /// let emulator = Emulator::builder().max_message_size(4 << 20).start().await?;
    /// # drop(emulator);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Serves gRPC over TLS with this certificate chain and private key (both PEM), on
    /// every listener; discovery then advertises its endpoints with `ssl` set and the
    /// connection string starts with `grpcs://`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use ydb_coordination_emulator::Emulator;
    ///
    /// let key = rcgen::KeyPair::generate()?;
    /// let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])?.self_signed(&key)?;
    /// let emulator = Emulator::builder()
    ///     .tls(cert.pem(), key.serialize_pem())
    ///     .start()
    ///     .await?;
    /// assert!(emulator.connection_string().starts_with("grpcs://127.0.0.1:"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn tls(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls = Some(Tls {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
        });
        self
    }

    /// Tells `observer` every change of every coordination node's sessions and owners, in
    /// each node's order (see [`observe`] and [`observe::Observer`] for an example): a
    /// server-side history for a checker. Without one, nothing is recorded.
    pub fn observer(mut self, observer: impl observe::Observer) -> Self {
        self.observer = Some(world::SharedObserver(Arc::new(observer)));
        self
    }

    /// Binds the listener and starts serving.
    ///
    /// # Errors
    ///
    /// The listener could not be bound; with [`EmulatorBuilder::tls`], the certificate or
    /// the key could not be used ([`io::ErrorKind::InvalidInput`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes starts nothing.
    pub async fn start(self) -> io::Result<Emulator> {
        let listener = TcpListener::bind(self.listen).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let world = World::observed(self.observer);
        for path in &self.nodes {
            let path = if path.starts_with('/') {
                path.clone()
            } else {
                format!("{}/{path}", self.database)
            };
            // A repeated path in the builder is harmless: the node already exists.
            let _ = world.create_node(path, NodeConfigProto::default());
        }
        let auth = (!self.users.is_empty() || !self.tokens.is_empty()).then(|| service::Auth {
            users: self.users.into_iter().collect(),
            tokens: std::sync::Mutex::new(self.tokens.into_iter().collect()),
        });
        let shared = Arc::new(Shared {
            auth,
            database: self.database,
            advertised: std::sync::Mutex::new(vec![addr]),
            tls: self.tls.is_some(),
            world,
            changed: Notify::new(),
            shutdown: shutdown.clone(),
            max_message: self.max_message,
        });
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = &self.tls {
            let identity = tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem);
            server = server
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("the TLS certificate or key cannot be used: {e}"),
                    )
                })?;
        }
        let net = Arc::new(Net::new(shutdown.clone()));
        let (conn_tx, conn_rx) = mpsc::unbounded_channel();
        let timers = tokio::spawn(service::run_timers(shared.clone()));
        let server = server
            .add_service(CoordinationService(shared.clone()))
            .add_service(DiscoveryService(shared.clone()))
            .add_service(service::AuthService(shared.clone()))
            .add_service(
                RateLimiterServiceServer::new(RateLimiter(shared.clone()))
                    .max_decoding_message_size(self.max_message)
                    .max_encoding_message_size(self.max_message),
            )
            .serve_with_incoming_shutdown(
                UnboundedReceiverStream::new(conn_rx),
                shutdown.clone().cancelled_owned(),
            );
        let server = tokio::spawn(async move {
            if let Err(err) = server.await {
                tracing::warn!(%err, "emulator server stopped");
            }
        });
        let emulator = Emulator {
            shared,
            net,
            addr,
            conns: conn_tx,
            listeners: std::sync::Mutex::new(Vec::new()),
            tasks: vec![timers, server],
        };
        emulator.serve(listener, addr);
        Ok(emulator)
    }
}

impl Emulator {
    /// A builder with the defaults: database `/local`, a free loopback port, no nodes.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }

    /// The address the emulator listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint URL, `grpc://127.0.0.1:PORT` (`grpcs://` with TLS).
    pub fn endpoint(&self) -> String {
        format!("{}://{}", self.scheme(), self.addr)
    }

    /// The database path, e.g. `/local`.
    pub fn database(&self) -> &str {
        &self.shared.database
    }

    /// The connection string, `grpc://127.0.0.1:PORT/local` (`grpcs://` with TLS), on the
    /// first listener.
    pub fn connection_string(&self) -> String {
        format!("{}://{}{}", self.scheme(), self.addr, self.shared.database)
    }

    fn scheme(&self) -> &'static str {
        if self.shared.tls { "grpcs" } else { "grpc" }
    }

    /// Listens on one more address (port 0: a free one) with the same state behind it, as
    /// another node of one cluster; returns the bound address. Discovery does not advertise
    /// it until [`Emulator::advertise`] says so.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use ydb_coordination_emulator::Emulator;
    ///
    /// let emulator = Emulator::builder().start().await?;
    /// let second = emulator.add_listener("127.0.0.1:0".parse().unwrap()).await?;
    /// emulator.advertise(vec![second]);
    /// assert!(emulator.stop_listener(emulator.local_addr())); // the first node goes down
    /// assert_eq!(emulator.listeners(), vec![second]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The address could not be bound.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes adds nothing.
    pub async fn add_listener(&self, addr: SocketAddr) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        self.serve(listener, addr);
        Ok(addr)
    }

    /// Stops listening on `addr`, as when that server node goes down: the port closes (new
    /// connections are refused) and every connection accepted there breaks. The state and
    /// the other listeners are untouched. Returns whether it was listening there.
    pub fn stop_listener(&self, addr: SocketAddr) -> bool {
        let mut listeners = self.lock_listeners();
        let Some(at) = listeners.iter().position(|l| l.addr == addr) else {
            return false;
        };
        let stopped = listeners.remove(at);
        drop(listeners);
        stopped.stop.cancel();
        true
    }

    /// The addresses the emulator listens on now, in the order they were added.
    pub fn listeners(&self) -> Vec<SocketAddr> {
        self.lock_listeners().iter().map(|l| l.addr).collect()
    }

    fn serve(&self, listener: TcpListener, addr: SocketAddr) {
        let stop = self.shared.shutdown.child_token();
        let task = tokio::spawn(net::accept_loop(
            listener,
            self.net.clone(),
            net::Upstream::Server(self.conns.clone()),
            stop.clone(),
        ));
        self.lock_listeners().push(Listener { addr, stop, task });
    }

    fn lock_listeners(&self) -> std::sync::MutexGuard<'_, Vec<Listener>> {
        self.listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the coordination nodes were asked and answered since the emulator started (see
    /// [`Traffic`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use ydb_coordination_emulator::Emulator;
    ///
    /// let emulator = Emulator::builder().node("/local/locks").start().await?;
    /// assert_eq!(emulator.traffic().requests, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn traffic(&self) -> Traffic {
        self.shared.world.traffic()
    }

    /// The network fault controls.
    pub fn net(&self) -> NetFaults<'_> {
        NetFaults { net: &self.net }
    }

    /// Sets the endpoints discovery (`ListEndpoints`) returns, by default the emulator's own
    /// address; it can change at any time, as a cluster's membership does. Point it at
    /// listeners added with [`Emulator::add_listener`], or at [`FaultProxy`]s in front of the
    /// emulator, to play a cluster whose nodes fail or are replaced.
    pub fn advertise(&self, endpoints: Vec<SocketAddr>) {
        *self
            .shared
            .advertised
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = endpoints;
    }

    /// Simulates a restart of every coordination node's tablet: each open session stream gets
    /// `failure{UNAVAILABLE}` and closes; all state is kept; every session is detached with
    /// its timeout plus the node's grace period; the reattach sequence check is reset and
    /// waiting acquires' timers restart with their full timeout. The rate limiter carries on:
    /// its resources and settings are the tablet's persisted state, and balances, debt and
    /// waiting `AcquireResource` calls belong to the server node, which re-subscribes.
    pub fn restart(&self) {
        self.shared.with_world(|w| w.restart(Instant::now()));
    }

    /// Ends a session now, as if its timeout had passed: its semaphores are released and its
    /// stream (if attached) gets `failure{SESSION_EXPIRED}`. Returns whether it existed.
    /// `node` is an absolute path or one relative to the database.
    pub fn expire_session(&self, node: &str, session_id: u64) -> bool {
        let path = self.absolute(node);
        self.shared.with_world(|w| {
            w.on_node(&path, |n| {
                let (found, effects) = n.expire_session(Instant::now(), session_id);
                n.apply(effects);
                found
            })
            .unwrap_or(false)
        })
    }

    /// The ids of the sessions that exist on a node (attached or not), ascending.
    pub fn session_ids(&self, node: &str) -> Vec<u64> {
        let path = self.absolute(node);
        let mut ids = (self.shared.world)
            .on_node(&path, |n| n.session_ids())
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// The names of the semaphores that exist on a node (ephemeral ones included), sorted.
    pub fn semaphore_names(&self, node: &str) -> Vec<String> {
        let path = self.absolute(node);
        let mut names = (self.shared.world)
            .on_node(&path, |n| n.semaphore_names())
            .unwrap_or_default();
        names.sort_unstable();
        names
    }

    /// Stops serving: closes the listener and every connection, and waits for the tasks.
    ///
    /// # Cancel safety
    ///
    /// The server is stopped as soon as this is first polled; dropping the future only skips
    /// waiting for the tasks to finish.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.cancel();
        let listeners = std::mem::take(&mut *self.lock_listeners());
        let accepts = listeners.into_iter().map(|l| l.task);
        for task in accepts.chain(self.tasks.drain(..)).collect::<Vec<_>>() {
            let _ = task.await;
        }
    }

    fn absolute(&self, node: &str) -> String {
        if node.starts_with('/') {
            node.trim_end_matches('/').to_string()
        } else {
            format!("{}/{}", self.shared.database, node.trim_end_matches('/'))
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

/// Network fault controls of an [`Emulator`], from [`Emulator::net`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use std::time::Duration;
/// use ydb_coordination_emulator::Emulator;
///
/// let emulator = Emulator::builder().start().await?;
/// emulator.net().stall();          // traffic stops, connections stay open
/// emulator.net().resume();
/// emulator.net().refuse_for(Duration::from_secs(1)); // new connections are dropped
/// emulator.net().cut();            // open connections break
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NetFaults<'a> {
    net: &'a Net,
}

impl NetFaults<'_> {
    /// Breaks every open connection at once (both sides see the TCP connection close).
    /// Connections made afterwards work.
    pub fn cut(&self) {
        self.net.cut();
    }

    /// Stops moving bytes on every connection, current and new, without closing any; as a
    /// network partition or a stalled router does. Undo with [`NetFaults::resume`].
    pub fn stall(&self) {
        self.net.set_stalled(true);
    }

    /// Ends a [`NetFaults::stall`]; bytes held back are delivered.
    pub fn resume(&self) {
        self.net.set_stalled(false);
    }

    /// Delays every chunk of bytes, both ways, by `delay` (zero turns it off).
    pub fn delay(&self, delay: Duration) {
        self.net.set_delay(delay);
    }

    /// Drops the next `count` new connections right after accepting them.
    pub fn refuse_next(&self, count: u64) {
        self.net.refuse_next(count);
    }

    /// Drops every new connection for the given time.
    pub fn refuse_for(&self, duration: Duration) {
        self.net.refuse_until(Instant::now() + duration);
    }
}

/// A loopback TCP proxy with the same fault controls as [`Emulator::net`], for faults that
/// hit only the clients behind it (one worker's network fails while the others' works).
///
/// Clients behind a proxy must turn discovery off, or they would be told the server's own
/// address and bypass it.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use ydb_coordination_emulator::{Emulator, FaultProxy};
///
/// let emulator = Emulator::builder().node("/local/app").start().await?;
/// let proxy = FaultProxy::start(emulator.local_addr()).await?;
/// // One client gets this connection string, with discovery off (in `ydb-coordination`:
/// // `Client::builder(url).discovery(false)`); the others connect to the emulator directly.
/// let through_proxy = proxy.connection_string(emulator.database());
/// assert_ne!(through_proxy, emulator.connection_string());
/// proxy.net().stall(); // only the traffic through the proxy stops
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    net: Arc<Net>,
    addr: SocketAddr,
    shutdown: CancellationToken,
}

impl FaultProxy {
    /// Listens on a free loopback port and relays every connection to `target`.
    ///
    /// # Errors
    ///
    /// The listener could not be bound.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes starts nothing.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let net = Arc::new(Net::new(shutdown.clone()));
        tokio::spawn(net::accept_loop(
            listener,
            net.clone(),
            net::Upstream::Tcp(target),
            shutdown.child_token(),
        ));
        Ok(Self {
            net,
            addr,
            shutdown,
        })
    }

    /// The proxy's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A connection string through the proxy, `grpc://127.0.0.1:PORT{database}`.
    pub fn connection_string(&self, database: &str) -> String {
        format!("grpc://{}{}", self.addr, database)
    }

    /// The fault controls of this proxy's connections.
    pub fn net(&self) -> NetFaults<'_> {
        NetFaults { net: &self.net }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
