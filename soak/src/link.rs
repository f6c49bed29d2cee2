//! One worker's link to one server endpoint: a loopback TCP relay whose faults act on each
//! direction apart. Every worker has one per coordination node it uses and one to the
//! directory, so a fault can cut a worker off from the directory alone, from one node
//! alone, or in one direction only (its requests lost while the answers flow, or the
//! reverse).

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Which way a fault acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// The worker's requests to the server.
    Up,
    /// The server's answers to the worker.
    Down,
    /// Both.
    Both,
}

impl Dir {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dir::Up => "up",
            Dir::Down => "down",
            Dir::Both => "both",
        }
    }
}

/// How bytes flow in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flow {
    stalled: bool,
    delay: Duration,
}

#[derive(Debug)]
struct State {
    /// Cancelled to break every open connection; replaced after each cut.
    cut: Mutex<CancellationToken>,
    up: watch::Sender<Flow>,
    down: watch::Sender<Flow>,
    refuse_until: Mutex<Option<Instant>>,
    shutdown: CancellationToken,
}

/// A relay from a loopback port to the server, with its fault switches.
#[derive(Debug)]
pub(crate) struct Link {
    addr: SocketAddr,
    state: Arc<State>,
}

impl Link {
    /// Listens on a free loopback port and relays every connection to `target`.
    pub(crate) async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let state = Arc::new(State {
            cut: Mutex::new(shutdown.child_token()),
            up: watch::Sender::new(Flow::default()),
            down: watch::Sender::new(Flow::default()),
            refuse_until: Mutex::new(None),
            shutdown,
        });
        tokio::spawn(accept(listener, target, state.clone()));
        Ok(Self { addr, state })
    }

    /// `grpc://127.0.0.1:PORT{database}` through this link.
    pub(crate) fn connection_string(&self, database: &str) -> String {
        format!("grpc://{}{database}", self.addr)
    }

    /// Breaks every open connection (both ends see it close); new ones work.
    pub(crate) fn cut(&self) {
        let fresh = self.state.shutdown.child_token();
        let old = std::mem::replace(
            &mut *self
                .state
                .cut
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        old.cancel();
    }

    /// Drops every new connection for `d`.
    pub(crate) fn refuse_for(&self, d: Duration) {
        *self
            .state
            .refuse_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now() + d);
    }

    /// Stops moving bytes `dir`, on open and new connections, closing nothing.
    pub(crate) fn stall(&self, dir: Dir) {
        self.each(dir, |f| f.stalled = true);
    }

    /// Every chunk `dir` waits `delay` (zero: none).
    pub(crate) fn delay(&self, dir: Dir, delay: Duration) {
        self.each(dir, |f| f.delay = delay);
    }

    /// Back to normal both ways: no stall, no delay (bytes held back are delivered).
    pub(crate) fn heal(&self) {
        self.each(Dir::Both, |f| *f = Flow::default());
    }

    fn each(&self, dir: Dir, change: impl Fn(&mut Flow)) {
        if dir != Dir::Down {
            self.state.up.send_modify(&change);
        }
        if dir != Dir::Up {
            self.state.down.send_modify(&change);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, state: Arc<State>) {
    loop {
        let accepted = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((worker, _)) = accepted else { continue };
        let refused = state
            .refuse_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| Instant::now() < until);
        if refused {
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else {
                return;
            };
            let _ = worker.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let cut = state
                .cut
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let (worker_read, worker_write) = worker.into_split();
            let (server_read, server_write) = server.into_split();
            let up = pump(worker_read, server_write, state.up.subscribe());
            let down = pump(server_read, worker_write, state.down.subscribe());
            tokio::select! {
                _ = cut.cancelled() => {}
                _ = futures::future::join(up, down) => {}
            }
        });
    }
}

/// Copies one direction, holding each chunk while the direction is stalled and for its
/// delay.
async fn pump<R, W>(mut from: R, mut to: W, mut flow: watch::Receiver<Flow>) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        let delay = flow.borrow().delay;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let _ = flow.wait_for(|f| !f.stalled).await;
        to.write_all(buf.get(..n).unwrap_or_default()).await?;
    }
}
