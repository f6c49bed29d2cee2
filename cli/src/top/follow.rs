//! The tasks that keep `top` informed: per node, a poll of its announcements, a watch of
//! each wanted name (owners and data changes, owners only; the queue, which no watch
//! reports, polled), and a poll of its rate-limiter resources. Everything they learn goes to
//! one channel.
//!
//! The announcements are polled, not watched: a watch is re-armed, and so re-read in full,
//! after every change of any session's announcement, while a poll reads them once an
//! interval however busy the node is.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::{MissedTickBehavior, interval};
use tokio_util::sync::CancellationToken;
use ydb_coordination::Session;
use ydb_coordination::config::{DescribeOptions, WatchOptions};
use ydb_coordination::session::ANNOUNCE_SEMAPHORE;
use ydb_coordination::{Client, ErrorKind, SessionManager, SessionOptions};

use super::model::ResourceRow;
use super::track::Described;
use crate::fail;

/// What a task learnt.
#[derive(Debug)]
pub(crate) enum Event {
    /// A description of `name` on `node` (the announcement semaphore's included); with
    /// `queue` it carries the waiters, otherwise the owners only.
    Described {
        node: String,
        name: String,
        described: Described,
        queue: bool,
    },
    /// The nodes of a space's layout, or why it could not be read.
    Layout(Result<Vec<String>, String>),
    /// The rate-limiter resources of `node`.
    Resources {
        node: String,
        rows: Result<Vec<ResourceRow>, String>,
    },
}

/// The tasks of one node; dropping it stops them and closes the node's session.
#[derive(Debug)]
pub(crate) struct NodeTasks {
    wanted: watch::Sender<BTreeSet<String>>,
    stop: CancellationToken,
}

impl NodeTasks {
    /// Starts following the node `path`: its announcements and resources at once, names as
    /// [`NodeTasks::want`] gives them.
    pub(crate) fn start(
        client: &Client,
        path: &str,
        options: SessionOptions,
        poll: Duration,
        events: mpsc::UnboundedSender<Event>,
    ) -> Self {
        let (wanted, wanted_rx) = watch::channel(BTreeSet::new());
        let stop = CancellationToken::new();
        let node = Node {
            manager: client.session_manager(path, options),
            client: client.clone(),
            path: path.to_string(),
            poll,
            events,
        };
        tokio::spawn(node.run(wanted_rx, stop.clone()));
        Self { wanted, stop }
    }

    /// The names to follow now (the others are let go).
    pub(crate) fn want(&self, names: BTreeSet<String>) {
        self.wanted.send_if_modified(|now| {
            let changed = *now != names;
            *now = names;
            changed
        });
    }
}

impl Drop for NodeTasks {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the tasks of one node share.
#[derive(Debug, Clone)]
struct Node {
    manager: SessionManager,
    client: Client,
    path: String,
    poll: Duration,
    events: mpsc::UnboundedSender<Event>,
}

impl Node {
    async fn run(self, mut wanted: watch::Receiver<BTreeSet<String>>, stop: CancellationToken) {
        tokio::spawn(self.clone().announcements(stop.child_token()));
        tokio::spawn(self.clone().resources(stop.child_token()));
        let mut names: HashMap<String, CancellationToken> = HashMap::new();
        loop {
            let now = wanted.borrow_and_update().clone();
            names.retain(|name, token| {
                let keep = now.contains(name);
                if !keep {
                    token.cancel();
                }
                keep
            });
            for name in now {
                if names.contains_key(&name) {
                    continue;
                }
                let token = stop.child_token();
                tokio::spawn(self.clone().follow(name.clone(), token.clone()));
                names.insert(name, token);
            }
            tokio::select! {
                changed = wanted.changed() => if changed.is_err() { break },
                () = stop.cancelled() => break,
            }
        }
        stop.cancel();
        self.manager.shutdown().await;
    }

    fn send(&self, name: &str, described: Described, queue: bool) {
        let _ = self.events.send(Event::Described {
            node: self.path.clone(),
            name: name.to_string(),
            described,
            queue,
        });
    }

    /// The longest a read may take before it counts as failed.
    fn patience(&self) -> Duration {
        self.poll.max(Duration::from_secs(1))
    }

    /// The node's session, or why there is none (the node, not a name, is at fault); `None`
    /// once `stop` fires.
    async fn session(&self, stop: &CancellationToken) -> Option<Result<Session, Described>> {
        let session = tokio::select! {
            () = stop.cancelled() => return None,
            s = tokio::time::timeout(self.patience() * 5, self.manager.current()) => s,
        };
        Some(match session {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(e)) => Err(Described::Failed(fail::describe(&e))),
            Err(_) => Err(Described::Failed(
                "no session on the node in time".to_string(),
            )),
        })
    }

    /// Describes `name` with `options`, bounded by the poll's patience; `None` once `stop`
    /// fires.
    async fn describe(
        &self,
        session: &Session,
        name: &str,
        options: DescribeOptions,
        stop: &CancellationToken,
    ) -> Option<Described> {
        let patience = self.patience();
        let described = tokio::select! {
            () = stop.cancelled() => return None,
            d = tokio::time::timeout(patience, session.describe_semaphore(name, options)) => d,
        };
        Some(match described {
            Ok(Ok(d)) => Described::Found(d),
            Ok(Err(e)) => failed(session, &e),
            Err(_) => Described::Failed(format!(
                "no answer within {}",
                crate::duration::format(patience)
            )),
        })
    }

    /// Waits a poll interval; false once `stop` fires.
    async fn pause(&self, stop: &CancellationToken) -> bool {
        tokio::select! {
            () = stop.cancelled() => false,
            () = tokio::time::sleep(self.poll) => true,
        }
    }

    /// Reads the announcement semaphore's owners each poll interval until `stop`.
    async fn announcements(self, stop: CancellationToken) {
        let owners = DescribeOptions::new().owners(true);
        loop {
            let described = match self.session(&stop).await {
                None => return,
                Some(Ok(session)) => {
                    match self
                        .describe(&session, ANNOUNCE_SEMAPHORE, owners, &stop)
                        .await
                    {
                        None => return,
                        Some(d) => d,
                    }
                }
                Some(Err(failed)) => failed,
            };
            self.send(ANNOUNCE_SEMAPHORE, described, false);
            if !self.pause(&stop).await {
                return;
            }
        }
    }

    /// Watches `name` until `stop`: its owners as the watch gives them, and a full describe
    /// each poll interval for the waiters, which no watch reports. A watch that ends (the
    /// semaphore is gone, the session was lost) or a describe that fails is made again a
    /// poll interval later.
    async fn follow(self, name: String, stop: CancellationToken) {
        let queue = DescribeOptions::new().waiters(true);
        loop {
            let session = match self.session(&stop).await {
                None => return,
                Some(Ok(session)) => session,
                Some(Err(failed)) => {
                    self.send(&name, failed, false);
                    if !self.pause(&stop).await {
                        return;
                    }
                    continue;
                }
            };
            match session.watch_semaphore(&name, WatchOptions::new()).await {
                Ok(mut stream) => {
                    let mut tick = interval(self.poll);
                    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            item = stream.next() => match item {
                                Some(Ok(update)) => self.send(&name, Described::Found(update.description), false),
                                Some(Err(e)) => { self.send(&name, failed(&session, &e), false); break }
                                None => break,
                            },
                            _ = tick.tick() => {
                                let Some(d) = self.describe(&session, &name, queue, &stop).await else {
                                    return;
                                };
                                let ended = !matches!(d, Described::Found(_));
                                self.send(&name, d, true);
                                if ended { break }
                            }
                        }
                    }
                }
                Err(e) => self.send(&name, failed(&session, &e), false),
            }
            if !self.pause(&stop).await {
                return;
            }
        }
    }

    /// Reads the node's rate-limiter resources each poll interval until `stop`.
    async fn resources(self, stop: CancellationToken) {
        let limiter = self.client.rate_limiter(&self.path);
        let mut tick = interval(self.poll);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let read = async {
                let mut rows = Vec::new();
                for path in limiter.list_resources("", true).await? {
                    let d = match limiter.describe_resource(&path).await {
                        Ok(d) => d,
                        // Dropped between the list and the describe.
                        Err(e) if e.kind() == ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    };
                    rows.push(ResourceRow {
                        node: self.path.clone(),
                        path,
                        rate: d.settings().get_max_units_per_second(),
                    });
                }
                rows.sort_by(|a, b| a.path.cmp(&b.path));
                Ok(rows)
            };
            let patience = self.patience();
            let rows = tokio::select! {
                () = stop.cancelled() => return,
                r = tokio::time::timeout(patience, read) => match r {
                    Ok(r) => r.map_err(|e| fail::describe(&e)),
                    Err(_) => Err(format!("no answer within {}", crate::duration::format(patience))),
                },
            };
            let _ = self.events.send(Event::Resources {
                node: self.path.clone(),
                rows,
            });
        }
    }
}

/// A failed read of a name: `NotFound` from a session still in use means there is no such
/// semaphore; from a session that has ended (the node was dropped, say) it says nothing.
fn failed(session: &Session, e: &ydb_coordination::Error) -> Described {
    let usable = !session.state().is_terminal() && session.error().is_none();
    if e.kind() == ErrorKind::NotFound && usable {
        Described::Missing
    } else {
        Described::Failed(fail::describe(e))
    }
}
