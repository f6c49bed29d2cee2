//! The emulator's network: a loopback TCP listener whose every connection is relayed to the
//! gRPC server through an in-memory pipe that the fault controls can cut, stall or slow down.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How large the in-memory pipe between a connection and the server is.
const PIPE_BYTES: usize = 256 * 1024;

/// Fault switches shared by the listener and every relay.
#[derive(Debug)]
pub(crate) struct Net {
    /// Cancelled to cut every current connection; replaced by a fresh token after each cut.
    cut: Mutex<CancellationToken>,
    stalled: watch::Sender<bool>,
    delay: watch::Sender<Duration>,
    refuse: Mutex<Refusal>,
    shutdown: CancellationToken,
}

#[derive(Debug, Default)]
struct Refusal {
    count: u64,
    until: Option<Instant>,
}

impl Net {
    pub(crate) fn new(shutdown: CancellationToken) -> Self {
        Self {
            cut: Mutex::new(shutdown.child_token()),
            stalled: watch::Sender::new(false),
            delay: watch::Sender::new(Duration::ZERO),
            refuse: Mutex::new(Refusal::default()),
            shutdown,
        }
    }

    /// Closes every open connection at once, as a broken network would.
    pub(crate) fn cut(&self) {
        let fresh = self.shutdown.child_token();
        let old = std::mem::replace(
            &mut *self.cut.lock().unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        old.cancel();
    }

    pub(crate) fn set_stalled(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }

    pub(crate) fn set_delay(&self, delay: Duration) {
        self.delay.send_replace(delay);
    }

    pub(crate) fn refuse_next(&self, count: u64) {
        self.refuse
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .count = count;
    }

    pub(crate) fn refuse_until(&self, until: Instant) {
        self.refuse
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .until = Some(until);
    }

    /// Whether a connection arriving now is to be refused (and counts it).
    fn refuses_now(&self) -> bool {
        let mut refuse = self.refuse.lock().unwrap_or_else(PoisonError::into_inner);
        if refuse.until.is_some_and(|t| Instant::now() < t) {
            return true;
        }
        refuse.until = None;
        let refused = refuse.count > 0;
        refuse.count = refuse.count.saturating_sub(1);
        drop(refuse);
        refused
    }

    fn current_cut(&self) -> CancellationToken {
        self.cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Where an accepted connection is relayed to.
pub(crate) enum Upstream {
    /// The emulator's own gRPC server, through an in-memory pipe.
    Server(mpsc::UnboundedSender<io::Result<DuplexStream>>),
    /// Another TCP address (a fault proxy in front of a server).
    Tcp(SocketAddr),
}

/// Accepts TCP connections and relays each one to `upstream` under the fault switches, until
/// `stop` is cancelled: then the listener closes (new connections are refused) and the
/// connections it accepted break, as when a server node goes down.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    net: Arc<Net>,
    upstream: Upstream,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, _peer): (TcpStream, SocketAddr) = match accepted {
            Ok(pair) => pair,
            Err(err) => {
                tracing::debug!(%err, "accept failed");
                continue;
            }
        };
        if net.refuses_now() {
            drop(tcp);
            continue;
        }
        let _ = tcp.set_nodelay(true);
        match &upstream {
            Upstream::Server(server) => {
                let (near, far) = tokio::io::duplex(PIPE_BYTES);
                if server.send(Ok(far)).is_err() {
                    return;
                }
                tokio::spawn(relay(tcp, near, net.clone(), stop.clone()));
            }
            Upstream::Tcp(target) => {
                let (target, net, stop) = (*target, net.clone(), stop.clone());
                tokio::spawn(async move {
                    if let Ok(up) = TcpStream::connect(target).await {
                        let _ = up.set_nodelay(true);
                        relay(tcp, up, net, stop).await;
                    }
                });
            }
        }
    }
}

/// Copies bytes both ways until either side closes, the connection is cut or its listener
/// stopped.
async fn relay<A, B>(a: A, b: B, net: Arc<Net>, stop: CancellationToken)
where
    A: AsyncRead + AsyncWrite + Send + 'static,
    B: AsyncRead + AsyncWrite + Send + 'static,
{
    let cut = net.current_cut();
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    let up = pump(a_read, b_write, &net);
    let down = pump(b_read, a_write, &net);
    tokio::select! {
        _ = cut.cancelled() => {}
        _ = stop.cancelled() => {}
        _ = futures::future::join(up, down) => {}
    }
}

async fn pump<R, W>(mut from: R, mut to: W, net: &Net) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut stalled = net.stalled.subscribe();
    let delay = net.delay.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let _ = stalled.wait_for(|s| !*s).await;
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        let pause = *delay.borrow();
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
        let _ = stalled.wait_for(|s| !*s).await;
        to.write_all(buf.get(..n).unwrap_or_default()).await?;
    }
}
