//! The tasks that keep `top` informed: per node, a poll of its announcements (the records,
//! and the pages of the sessions whose names do not fit in theirs), a watch of each wanted
//! name (its items, at each change of owners or data, carry the queue too; a waiter that
//! comes without such a change is found by a poll of the queue, each interval, or in turn
//! over a few intervals for more than [`QUEUE_POLLS`] names), and a poll of its rate-limiter
//! resources. Everything they learn goes to one channel. For
//! `--once`, each name is described once, owners and queue together, and nothing is
//! watched.
//!
//! The announcements are polled, not watched: a watch is re-armed, and so re-read in full,
//! after every change of any session's announcement, while a poll reads them once an
//! interval however busy the node is. A session's pages are read again only when its
//! record names a new generation of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::{MissedTickBehavior, interval};
use tokio_util::sync::CancellationToken;
use ydb_coordination::Session;
use ydb_coordination::config::{DescribeOptions, WatchOptions};
use ydb_coordination::session::{
    ANNOUNCE_SEMAPHORE, Announced, Announcement, Gap, Page, SemaphoreDescription, page_semaphore,
};
use ydb_coordination::{Client, ErrorKind, SessionManager, SessionOptions};

use super::model::ResourceRow;
use super::track::Described;
use crate::fail;

/// What a task learnt.
#[derive(Debug)]
pub(crate) enum Event {
    /// The announcements of `node` (none when nobody announces), or why they could not be
    /// read, with the round trip of the read of the records.
    Announcements {
        node: String,
        read: Result<Announcements, String>,
        rtt: Option<Duration>,
    },
    /// A description of `name` on `node`: what `part` of it counts.
    Described {
        node: String,
        name: String,
        described: Described,
        part: Part,
    },
    /// The nodes of a space's layout, or why it could not be read.
    Layout(Result<Vec<String>, String>),
    /// The rate-limiter resources of `node`.
    Resources {
        node: String,
        rows: Result<Vec<ResourceRow>, String>,
    },
    /// A forced delete asked from the live view, done or why not.
    Deleted {
        node: String,
        name: String,
        result: Result<(), String>,
    },
}

/// Which part of a description a read is the news of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The owners (a watch's item; its waiters are not reported).
    Owners,
    /// The queue (a poll; its owners may be older than the watch's).
    Queue,
    /// Both (`--once`: one describe with owners and waiters).
    Whole,
}

/// What a node's announcements say.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Announcements {
    /// Every announcing session, by id.
    pub(crate) sessions: BTreeMap<u64, Announcer>,
    /// Sessions that hold or wait for an announcement's semaphore without being an
    /// announcement, one line each: they keep announcements from landing or hide names.
    pub(crate) intruders: Vec<String>,
}

/// One announcing session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Announcer {
    /// Its record.
    pub(crate) record: Announcement,
    /// Every name it announces, or why they cannot be told whole.
    pub(crate) names: Result<Vec<Announced>, String>,
    /// Its pages changed while they were read: the next read may tell them whole.
    pub(crate) torn: bool,
}

/// The tasks of one node; dropping it stops them and closes the node's session.
#[derive(Debug)]
pub(crate) struct NodeTasks {
    wanted: watch::Sender<BTreeSet<String>>,
    stop: CancellationToken,
    node: Node,
}

impl NodeTasks {
    /// Starts following the node `path`: its announcements and resources at once, names as
    /// [`NodeTasks::want`] gives them.
    pub(crate) fn start(
        client: &Client,
        path: &str,
        options: SessionOptions,
        poll: Duration,
        once: bool,
        events: mpsc::UnboundedSender<Event>,
    ) -> Self {
        let (wanted, wanted_rx) = watch::channel(BTreeSet::new());
        let stop = CancellationToken::new();
        let node = Node {
            manager: client.session_manager(path, options),
            client: client.clone(),
            path: path.to_string(),
            poll,
            once,
            events,
            followed: Arc::new(AtomicUsize::new(0)),
        };
        tokio::spawn(node.clone().run(wanted_rx, stop.clone()));
        Self { wanted, stop, node }
    }

    /// Deletes the semaphore `name` of the node even if it has owners or waiters (the live
    /// view's confirmed `D`); the outcome comes as [`Event::Deleted`].
    pub(crate) fn delete(&self, name: &str) {
        let (node, name, stop) = (self.node.clone(), name.to_string(), self.stop.clone());
        tokio::spawn(async move {
            let result = match node.session(&stop).await {
                None => return,
                Some(Err(Described::Failed(why))) => Err(why),
                Some(Err(_)) => Err("no session on the node".to_string()),
                Some(Ok(session)) => {
                    let delete = session.delete_semaphore(&name, true);
                    match tokio::time::timeout(node.patience(), delete).await {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(fail::describe(&e)),
                        Err(_) => Err(format!(
                            "no answer within {}",
                            crate::duration::format(node.patience())
                        )),
                    }
                }
            };
            let _ = node.events.send(Event::Deleted {
                node: node.path.clone(),
                name,
                result,
            });
        });
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
    /// `--once`: each name described once, nothing watched.
    once: bool,
    events: mpsc::UnboundedSender<Event>,
    /// How many names the node's tasks follow (for the spread of the queue polls).
    followed: Arc<AtomicUsize>,
}

/// The most queues of one node read per `--interval`: with more names, each queue is read
/// every few intervals, in turn, so that the view's load on the node stays bounded however
/// large the fleet (the owners come from watches, pushed, at every change).
pub(crate) const QUEUE_POLLS: usize = 2_000;

/// How often each followed name's queue is read, `followed` names being followed with
/// `--interval` `poll`: every interval up to [`QUEUE_POLLS`] names, then in turn.
fn queue_period(poll: Duration, followed: usize) -> Duration {
    let rounds = followed.div_ceil(QUEUE_POLLS).max(1);
    poll.saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX))
}

/// Where in the period a name's polls fall, as a fraction: names spread evenly, and each
/// always at the same place (FNV-1a of the name).
fn phase(name: &str) -> f64 {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    #[allow(clippy::cast_precision_loss)]
    let fraction = (hash % 10_000) as f64 / 10_000.0;
    fraction
}

impl Node {
    async fn run(self, mut wanted: watch::Receiver<BTreeSet<String>>, stop: CancellationToken) {
        tokio::spawn(self.clone().announcements(stop.child_token()));
        tokio::spawn(self.clone().resources(stop.child_token()));
        let mut names: HashMap<String, CancellationToken> = HashMap::new();
        loop {
            let now = wanted.borrow_and_update().clone();
            self.followed.store(now.len(), Ordering::Relaxed);
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

    fn send(&self, name: &str, described: Described, part: Part) {
        let _ = self.events.send(Event::Described {
            node: self.path.clone(),
            name: name.to_string(),
            described,
            part,
        });
    }

    /// The longest a read may take before it counts as failed (for `--once`, which reads
    /// each name once, longer: its `--timeout` bounds the whole).
    fn patience(&self) -> Duration {
        let patience = self.poll.max(Duration::from_secs(1));
        if self.once { patience * 5 } else { patience }
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

    /// Reads the announcements each poll interval until `stop`: the record semaphore's
    /// owners and waiters, then the pages of the sessions whose record names pages of a
    /// generation not read yet.
    async fn announcements(self, stop: CancellationToken) {
        let mut pages: HashMap<u64, (u64, Vec<Page>)> = HashMap::new();
        loop {
            let event = match self.session(&stop).await {
                None => return,
                Some(Ok(session)) => {
                    let started = tokio::time::Instant::now();
                    let whole = DescribeOptions::new().owners(true).waiters(true);
                    let Some(d) = self
                        .describe(&session, ANNOUNCE_SEMAPHORE, whole, &stop)
                        .await
                    else {
                        return;
                    };
                    let rtt = started.elapsed();
                    let read = match d {
                        Described::Found(d) => {
                            let Some(read) = self.read_pages(&session, d, &mut pages, &stop).await
                            else {
                                return;
                            };
                            Ok(read)
                        }
                        Described::Missing => Ok(Announcements::default()),
                        Described::Failed(why) => Err(why),
                    };
                    let rtt = read.is_ok().then_some(rtt);
                    Event::Announcements {
                        node: self.path.clone(),
                        read,
                        rtt,
                    }
                }
                Some(Err(Described::Failed(why))) => Event::Announcements {
                    node: self.path.clone(),
                    read: Err(why),
                    rtt: None,
                },
                Some(Err(_)) => Event::Announcements {
                    node: self.path.clone(),
                    read: Err("no session on the node".to_string()),
                    rtt: None,
                },
            };
            let _ = self.events.send(event);
            if !self.pause(&stop).await {
                return;
            }
        }
    }

    /// The announcements in the record semaphore's description `d`: each owner's record
    /// with its names whole (its pages read, from `cache` when the record names the
    /// generation read last), and what holds or waits for the semaphores that is not an
    /// announcement. `None` once `stop` fires.
    async fn read_pages(
        &self,
        session: &Session,
        d: SemaphoreDescription,
        cache: &mut HashMap<u64, (u64, Vec<Page>)>,
        stop: &CancellationToken,
    ) -> Option<Announcements> {
        let mut out = Announcements::default();
        for w in &d.waiters {
            out.intruders.push(format!(
                "session {} waits for the announcement semaphore {ANNOUNCE_SEMAPHORE:?}, \
                 which no announcement does: new sessions cannot announce while it waits",
                w.session_id
            ));
        }
        cache.retain(|id, _| d.owners.iter().any(|o| o.session_id == *id));
        for owner in &d.owners {
            let id = owner.session_id;
            let Some(record) = Announcement::parse(&owner.data) else {
                out.intruders.push(format!(
                    "session {id} holds the announcement semaphore with data that is not an \
                     announcement this version reads (an older client, another program, or a \
                     newer format): what it uses is unknown"
                ));
                continue;
            };
            if owner.count != 1 {
                out.intruders.push(format!(
                    "session {id} holds {} units of the announcement semaphore, where an \
                     announcement holds one",
                    owner.count
                ));
            }
            let mut torn = false;
            let names = match record.pages {
                None => record.names_with(&[]).map_err(|g| g.to_string()),
                Some(p) => {
                    let cached = cache
                        .get(&id)
                        .filter(|(generation, _)| *generation == p.generation);
                    let read = match cached {
                        Some((_, pages)) => Ok(pages.clone()),
                        None => {
                            let read = self.pages(session, id, p.count, stop).await?;
                            read.map(|(pages, intruders)| {
                                out.intruders.extend(intruders);
                                pages
                            })
                        }
                    };
                    match read.and_then(|pages| {
                        let names = record.names_with(&pages).map_err(|g| {
                            torn = g == Gap::Torn;
                            g.to_string()
                        })?;
                        cache.insert(id, (p.generation, pages));
                        Ok(names)
                    }) {
                        Ok(names) => Ok(names),
                        Err(why) => {
                            cache.remove(&id);
                            Err(why)
                        }
                    }
                }
            };
            out.sessions.insert(
                id,
                Announcer {
                    record,
                    names,
                    torn,
                },
            );
        }
        Some(out)
    }

    /// The `count` pages of session `id`'s announcement, and what else owns them; or why one
    /// could not be read. `None` once `stop` fires.
    #[allow(clippy::type_complexity)]
    async fn pages(
        &self,
        session: &Session,
        id: u64,
        count: u64,
        stop: &CancellationToken,
    ) -> Option<Result<(Vec<Page>, Vec<String>), String>> {
        let mut pages = Vec::new();
        let mut intruders = Vec::new();
        for k in 1..=count {
            let name = page_semaphore(id, k);
            let owners = DescribeOptions::new().owners(true).waiters(true);
            let d = match self.describe(session, &name, owners, stop).await? {
                Described::Found(d) => d,
                // Given back while read: read again next interval.
                Described::Missing => return Some(Ok((pages, intruders))),
                Described::Failed(why) => return Some(Err(format!("page {k}: {why}"))),
            };
            for other in d
                .owners
                .iter()
                .chain(&d.waiters)
                .filter(|o| o.session_id != id)
            {
                intruders.push(format!(
                    "session {} holds or waits for {name:?}, a page of session {id}'s \
                     announcement",
                    other.session_id
                ));
            }
            match d
                .owners
                .iter()
                .find(|o| o.session_id == id)
                .and_then(|o| Page::parse(&o.data))
            {
                Some(page) => pages.push(page),
                None => return Some(Ok((pages, intruders))),
            }
        }
        Some(Ok((pages, intruders)))
    }

    /// Watches `name` until `stop`: its owners as the watch gives them, and a full describe
    /// each poll interval for the waiters, which no watch reports (with more than
    /// [`QUEUE_POLLS`] names, every few intervals, in turn). A watch that ends (the
    /// semaphore is gone, the session was lost) or a describe that fails is made again a
    /// poll interval later.
    async fn follow(self, name: String, stop: CancellationToken) {
        if self.once {
            return self.describe_once(&name, &stop).await;
        }
        let queue = DescribeOptions::new().waiters(true);
        loop {
            let session = match self.session(&stop).await {
                None => return,
                Some(Ok(session)) => session,
                Some(Err(failed)) => {
                    self.send(&name, failed, Part::Owners);
                    if !self.pause(&stop).await {
                        return;
                    }
                    continue;
                }
            };
            // Each item of the watch carries the queue as it was then too; the polls add the
            // waiters that came without a change of owners.
            let whole = WatchOptions::new().describe(queue.owners(true));
            match session.watch_semaphore(&name, whole).await {
                Ok(mut stream) => {
                    // The first poll a spread part of the period after the watch's first
                    // item, which has the queue already.
                    let period = queue_period(self.poll, self.followed.load(Ordering::Relaxed));
                    let mut next = tokio::time::Instant::now() + period.mul_f64(phase(&name));
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            item = stream.next() => match item {
                                Some(Ok(update)) => self.send(&name, Described::Found(update.description), Part::Whole),
                                Some(Err(e)) => { self.send(&name, failed(&session, &e), Part::Owners); break }
                                None => break,
                            },
                            () = tokio::time::sleep_until(next) => {
                                let Some(d) = self.describe(&session, &name, queue, &stop).await else {
                                    return;
                                };
                                let ended = !matches!(d, Described::Found(_));
                                self.send(&name, d, Part::Queue);
                                if ended { break }
                                let period = queue_period(self.poll, self.followed.load(Ordering::Relaxed));
                                next = (next + period).max(tokio::time::Instant::now());
                            }
                        }
                    }
                }
                Err(e) => self.send(&name, failed(&session, &e), Part::Owners),
            }
            if !self.pause(&stop).await {
                return;
            }
        }
    }

    /// `--once`: one describe of `name`, owners and queue together.
    async fn describe_once(&self, name: &str, stop: &CancellationToken) {
        let described = match self.session(stop).await {
            None => return,
            Some(Ok(session)) => {
                let whole = DescribeOptions::new().owners(true).waiters(true);
                match self.describe(&session, name, whole, stop).await {
                    None => return,
                    Some(d) => d,
                }
            }
            Some(Err(failed)) => failed,
        };
        self.send(name, described, Part::Whole);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queues_are_read_every_interval_up_to_the_budget_then_in_turn() {
        let poll = Duration::from_secs(2);
        assert_eq!(queue_period(poll, 0), poll);
        assert_eq!(queue_period(poll, QUEUE_POLLS), poll);
        assert_eq!(queue_period(poll, QUEUE_POLLS + 1), poll * 2);
        assert_eq!(queue_period(poll, 20_000), poll * 10);
        let phases: Vec<f64> = (0..1000).map(|i| phase(&format!("job-{i}"))).collect();
        assert!(phases.iter().all(|p| (0.0..1.0).contains(p)));
        // Spread: every tenth of the period has some.
        for tenth in 0..10 {
            let lo = f64::from(tenth) / 10.0;
            assert!(phases.iter().any(|p| (lo..lo + 0.1).contains(p)), "{tenth}");
        }
    }
}
