//! The tasks that keep `top` informed: per node, a watch of its announcements, a watch of
//! each wanted name (owners and data changes; the queue, which no watch reports, polled),
//! and a poll of its rate-limiter resources. Everything they learn goes to one channel.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::{MissedTickBehavior, interval};
use tokio_util::sync::CancellationToken;
use ydb_coordination::config::{DescribeOptions, WatchOptions};
use ydb_coordination::session::ANNOUNCE_SEMAPHORE;
use ydb_coordination::{Client, ErrorKind, SessionManager, SessionOptions};

use super::model::ResourceRow;
use super::track::Described;
use crate::fail;

/// What a task learnt.
#[derive(Debug)]
pub(crate) enum Event {
    /// A description of `name` on `node` (the announcement semaphore's included).
    Described {
        node: String,
        name: String,
        described: Described,
    },
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
        let announcements =
            WatchOptions::owners_changes().describe(DescribeOptions::new().owners(true));
        tokio::spawn(self.clone().follow(
            ANNOUNCE_SEMAPHORE.to_string(),
            announcements,
            false,
            stop.child_token(),
        ));
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
                let options =
                    WatchOptions::new().describe(DescribeOptions::new().owners(true).waiters(true));
                tokio::spawn(
                    self.clone()
                        .follow(name.clone(), options, true, token.clone()),
                );
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

    fn send(&self, name: &str, described: Described) {
        let _ = self.events.send(Event::Described {
            node: self.path.clone(),
            name: name.to_string(),
            described,
        });
    }

    /// Watches `name` until `stop`: every description the watch gives, and with `queue` a
    /// describe each poll interval for the waiters, which no watch reports. A watch that
    /// ends (the semaphore is gone, the session was lost) is made again a poll interval later.
    async fn follow(
        self,
        name: String,
        options: WatchOptions,
        queue: bool,
        stop: CancellationToken,
    ) {
        let describe = DescribeOptions::new().owners(true).waiters(true);
        loop {
            let session = tokio::select! {
                () = stop.cancelled() => return,
                s = tokio::time::timeout(self.poll.max(Duration::from_secs(1)) * 5, self.manager.current()) => s,
            };
            let stream = match session {
                Ok(Ok(session)) => match session.watch_semaphore(&name, options).await {
                    Ok(stream) => Ok((session, stream)),
                    Err(e) => {
                        self.send(&name, failed(&e));
                        Err(None)
                    }
                },
                Ok(Err(e)) => Err(Some(e)),
                Err(_) => Err(Some(ydb_coordination::Error::new(
                    ErrorKind::Timeout,
                    "no session on the node in time",
                ))),
            };
            match stream {
                Ok((session, mut stream)) => {
                    let mut tick = interval(self.poll);
                    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    // The watch's first item is the description now.
                    tick.reset();
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            item = stream.next() => match item {
                                Some(Ok(update)) => self.send(&name, Described::Found(update.description)),
                                Some(Err(e)) => { self.send(&name, failed(&e)); break }
                                None => break,
                            },
                            _ = tick.tick(), if queue => {
                                match session.describe_semaphore(&name, describe).await {
                                    Ok(d) => self.send(&name, Described::Found(d)),
                                    Err(e) => { self.send(&name, failed(&e)); break }
                                }
                            }
                        }
                    }
                }
                // No session: the node, not the name, is at fault.
                Err(Some(e)) => self.send(&name, Described::Failed(fail::describe(&e))),
                Err(None) => {}
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.poll) => {}
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
                        consumed: None,
                    });
                }
                rows.sort_by(|a, b| a.path.cmp(&b.path));
                Ok(rows)
            };
            let rows = tokio::select! {
                () = stop.cancelled() => return,
                r = read => r.map_err(|e| fail::describe(&e)),
            };
            let _ = self.events.send(Event::Resources {
                node: self.path.clone(),
                rows,
            });
        }
    }
}

fn failed(e: &ydb_coordination::Error) -> Described {
    if e.kind() == ErrorKind::NotFound {
        Described::Missing
    } else {
        Described::Failed(fail::describe(e))
    }
}
