//! `top`: a live view of a coordination node or a lock space: the semaphores in use, their
//! owners and queues, the sessions, the rate-limiter resources.
//!
//! The protocol lists neither a node's semaphores nor its sessions. The names come from the
//! sessions that announce what they use (`SessionOptions::announce`) and from the command
//! line. Owners and data are followed by watches; the queues, which no watch reports, the
//! announcements, polled so that a busy node costs no more, and the resources, which have
//! no watch, are read each `--interval`. `--once` describes each name once instead.

mod follow;
pub(crate) mod model;
mod prometheus;
mod track;
mod view;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use clap::Args;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyEventKind};
use tokio::sync::mpsc;
use ydb_coordination::Client;
use ydb_coordination::space::SpaceDirectory;

use self::follow::{Event, NodeTasks};
use self::model::Snapshot;
use self::track::{Clock, Selection, Tracker};
use self::view::{Action, ViewState};
use super::fail::{self, Failure};
use super::output::Out;
use super::signals::{Signals, interrupted};
use super::{Conn, duration};

pub(crate) const TOP_HELP: &str = "\
Examples:
  ydb-coord top /local/app
  ydb-coord top /local/app 'job-*' config
  ydb-coord top /local/app --once
  ydb-coord --json top /local/app --once | jq '.semaphores[] | {name, queue}'
  ydb-coord top /local/app --once --prometheus > /var/lib/node_exporter/ydb_coord.prom
  ydb-coord top /local/dir --space billing

Keys: q quit, p or space pause, s sort, r reverse, / filter, Tab or 1-3 switch tables,
up/down select (on Sessions: what the session holds and waits for), D force-delete the
selected semaphore (asks first), Esc clear the filter.

Names: the protocol cannot list a node's semaphores, so top shows those that sessions
announce (SessionOptions::announce(true) in the library; every session of this tool
announces) and the names given here, exact or with * and ?. With names given, only
those are shown. Announcing sessions say who they are (host, pid, program, age, session
timeout, last contact) and since when they hold or wait; for the others, held-for and
waiting-for times count from when top first saw the owner or waiter, and a time shown with
>= started before top did. Consumed units of a rate-limiter resource are not reported by the
protocol and are not shown.

--once exits 1 whenever the snapshot is not whole (a node, a name, a session's names or the
resources could not be read, or something that is not an announcement holds or waits for
the announcements' semaphore), with the reasons in its notes. In JSON, 64-bit numbers (ids,
tokens, limits, units) are strings of digits, so that u64::MAX stays exact in jq.

With --space the path is the lock space's directory; its layout's nodes are watched, each
taken as a node of that name in the database unless --node-path maps it.";

/// `ydb-coord top`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Coordination node path; with --space, the space's directory node.
    path: String,
    /// Semaphore names or patterns (`*`, `?`) to show; none: every announced name.
    names: Vec<String>,
    /// Watch the lock space of this name, whose layout is published on PATH.
    #[arg(long)]
    space: Option<String>,
    /// Where a lock-space node lives, as NAME=PATH (repeatable; default: the node of that
    /// name in the database).
    #[arg(long = "node-path", value_name = "NAME=PATH", value_parser = parse_node_path)]
    node_paths: Vec<(String, String)>,
    /// How often the queues, the announcements, the resources and a space's layout are read
    /// (at least 100ms).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_interval)]
    interval: Duration,
    /// Print one snapshot and exit, once everything was read (within --timeout); exit 1 if
    /// anything could not be.
    #[arg(long)]
    once: bool,
    /// With --once: print the snapshot in Prometheus's text format (for node_exporter's
    /// textfile collector, or a scrape through a script).
    #[arg(long, requires = "once", conflicts_with = "json")]
    prometheus: bool,
}

/// The shortest `--interval`: each one reads every followed queue and resource.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(100);

fn parse_interval(value: &str) -> Result<Duration, String> {
    let d = duration::parse(value)?;
    if d < SHORTEST_INTERVAL {
        return Err(format!(
            "give an interval of at least {}",
            duration::format(SHORTEST_INTERVAL)
        ));
    }
    Ok(d)
}

fn parse_node_path(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), path.to_string()))
        }
        _ => Err("expected NAME=PATH, both not empty".to_string()),
    }
}

/// The nodes a run watches: one, or a space's, read from its directory.
#[derive(Clone)]
enum Scope {
    Node(String),
    Space {
        directory: SpaceDirectory,
        paths: BTreeMap<String, String>,
    },
}

/// Everything a run holds: the tracker, the nodes' tasks, and where their news arrives.
struct Top {
    client: Client,
    conn_options: ydb_coordination::SessionOptions,
    interval: Duration,
    tracker: Tracker,
    tasks: BTreeMap<String, NodeTasks>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    scope: Scope,
    /// Why the space's layout could not be read, if it could not.
    layout_note: Option<String>,
    /// A read of the space's layout is under way.
    layout_reading: bool,
    /// `--once`: each name is described once.
    once: bool,
    /// What the last forced delete did, for the live view.
    deleted: Option<String>,
}

impl Top {
    /// Reads the nodes to watch now: the one node, or the published layout's (both sides of
    /// a transition), within the interval (at least a second).
    fn read_nodes(&self) -> impl Future<Output = Result<Vec<String>, String>> + 'static {
        let scope = self.scope.clone();
        let client = self.client.clone();
        let patience = self.interval.max(Duration::from_secs(1));
        async move {
            let (directory, paths) = match scope {
                Scope::Node(path) => return Ok(vec![path]),
                Scope::Space { directory, paths } => (directory, paths),
            };
            let layout = match tokio::time::timeout(patience, directory.layout()).await {
                Ok(Ok(layout)) => layout,
                Ok(Err(e)) => {
                    return Err(format!(
                        "the layout could not be read: {}",
                        fail::describe(&e)
                    ));
                }
                Err(_) => return Err("the layout could not be read in time".to_string()),
            };
            let mut names: Vec<&String> = layout.nodes().iter().collect();
            names.extend(layout.next().into_iter().flatten());
            let mut out: Vec<String> = names
                .into_iter()
                .map(|n| {
                    paths
                        .get(n)
                        .cloned()
                        .unwrap_or_else(|| Conn::node(&client, n))
                })
                .collect();
            out.sort();
            out.dedup();
            Ok(out)
        }
    }

    /// Starts a read of a space's layout whose answer comes as an event (one at a time), so
    /// that a slow read holds up neither keys nor news.
    fn refresh_layout(&mut self) {
        if !matches!(self.scope, Scope::Space { .. }) || self.layout_reading {
            return;
        }
        self.layout_reading = true;
        let read = self.read_nodes();
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let _ = events.send(Event::Layout(read.await));
        });
    }

    /// Follows the nodes read: new ones start, gone ones stop. A layout that could not be
    /// read keeps the nodes followed so far.
    fn set_nodes(&mut self, nodes: Result<Vec<String>, String>) {
        let nodes = match nodes {
            Ok(nodes) => {
                self.layout_note = None;
                nodes
            }
            Err(why) => {
                self.layout_note = Some(why);
                return;
            }
        };
        self.tracker.set_nodes(&nodes);
        self.tasks.retain(|path, _| nodes.contains(path));
        for path in nodes {
            if !self.tasks.contains_key(&path) {
                let tasks = NodeTasks::start(
                    &self.client,
                    &path,
                    self.conn_options.clone(),
                    self.interval,
                    self.once,
                    self.events_tx.clone(),
                );
                self.tasks.insert(path, tasks);
            }
        }
        self.want();
    }

    /// Tells each node's tasks which names to follow.
    fn want(&mut self) {
        let now = Instant::now();
        for (path, tasks) in &self.tasks {
            self.tracker.prune(now, path);
            tasks.want(self.tracker.wanted(path));
        }
    }

    /// Takes in one piece of news.
    fn apply(&mut self, event: Event) {
        let now = Instant::now();
        match event {
            Event::Announcements { node, read, rtt } => {
                self.tracker.announced(&node, read, rtt);
                self.want();
            }
            Event::Described {
                node,
                name,
                described,
                part,
            } => self.tracker.described(now, &node, &name, part, described),
            Event::Resources { node, rows } => self.tracker.resources(&node, rows),
            Event::Layout(nodes) => {
                self.layout_reading = false;
                self.set_nodes(nodes);
            }
            Event::Deleted { node, name, result } => {
                self.deleted = Some(match result {
                    Ok(()) => format!("deleted {name:?} on {node}"),
                    Err(why) => format!("{name:?} on {node} was not deleted: {why}"),
                });
            }
        }
    }

    /// Force-deletes `name` on `node` (confirmed in the live view).
    fn delete(&mut self, node: &str, name: &str) {
        match self.tasks.get(node) {
            Some(tasks) => {
                self.deleted = Some(format!("deleting {name:?} on {node}..."));
                tasks.delete(name);
            }
            None => self.deleted = Some(format!("{node} is no longer watched")),
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = self.tracker.snapshot(Instant::now());
        if let Some(why) = &self.layout_note {
            s.notes.push(why.clone());
            s.complete = false;
        }
        s
    }
}

/// Who the sessions `ids` of the node of `session` are, as their announcements say (`host
/// web-3 pid 4411 ydb-coord`); those that do not announce are left out. Bounded by the
/// caller.
pub(crate) async fn who(session: &ydb_coordination::Session, ids: &[u64]) -> BTreeMap<u64, String> {
    use ydb_coordination::config::DescribeOptions;
    use ydb_coordination::session::{ANNOUNCE_SEMAPHORE, Announcement};
    let owners = DescribeOptions::new().owners(true);
    let Ok(d) = session.describe_semaphore(ANNOUNCE_SEMAPHORE, owners).await else {
        return BTreeMap::new();
    };
    d.owners
        .iter()
        .filter(|o| ids.contains(&o.session_id))
        .filter_map(|o| {
            let a = Announcement::parse(&o.data)?;
            let mut words = Vec::new();
            if !a.host.is_empty() {
                words.push(format!("host {}", a.host));
            }
            if let Some(pid) = a.pid {
                words.push(format!("pid {pid}"));
            }
            if !a.tool.is_empty() {
                words.push(a.tool.clone());
            }
            if words.is_empty() {
                words.push(a.description.clone());
            }
            Some((o.session_id, fail::one_line(&words.join(" "))))
        })
        .collect()
}

/// Runs `top`; returns the exit code.
pub(crate) async fn run(conn: &Conn, args: TopArgs, out: Out) -> Result<u8, Failure> {
    let mut signals = Signals::install()?;
    let client = signals.interruptible(conn.client()).await?;
    let path = Conn::node(&client, &args.path);
    // The view's own sessions do not announce: it would list itself.
    let options = conn.options("ydb-coord top".to_string()).announce(false);
    let (scope, target) = match &args.space {
        None => (Scope::Node(path.clone()), path.clone()),
        Some(space) => {
            let directory = SpaceDirectory::new(&client, &path, space, options.clone())
                .map_err(|e| Failure::with_code(fail::USAGE, fail::describe(&e)))?;
            let paths = args
                .node_paths
                .iter()
                .map(|(name, p)| (name.clone(), Conn::node(&client, p)))
                .collect();
            (
                Scope::Space { directory, paths },
                format!("space {space} in {path}"),
            )
        }
    };
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut top = Top {
        tracker: Tracker::new(target, Selection::new(&args.names), &[], Clock::now()),
        client,
        conn_options: options,
        interval: args.interval,
        tasks: BTreeMap::new(),
        events_tx,
        events,
        scope,
        layout_note: None,
        layout_reading: false,
        once: args.once,
        deleted: None,
    };
    let nodes = signals
        .interruptible(async { Ok(top.read_nodes().await) })
        .await?;
    top.set_nodes(nodes);
    if args.once {
        return once(&mut top, conn, out, args.prometheus, &mut signals).await;
    }
    if out.json || !std::io::stdout().is_terminal() {
        return stream(&mut top, out, &mut signals).await;
    }
    live(&mut top, &mut signals).await
}

/// `--once`: everything read once (or `--timeout` passed), then one snapshot; exit 1 unless
/// it is whole.
async fn once(
    top: &mut Top,
    conn: &Conn,
    out: Out,
    prometheus: bool,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let deadline = tokio::time::sleep(conn.budget.left());
    tokio::pin!(deadline);
    // Without its layout a space has no nodes to wait for.
    let settled = top.layout_note.is_none()
        && loop {
            if top.tracker.settled() {
                break true;
            }
            tokio::select! {
                e = top.events.recv() => match e {
                    Some(e) => {
                        top.apply(e);
                        // Take what else is there before looking again (a walk of every
                        // name), so that a large node costs one walk per batch.
                        while let Ok(e) = top.events.try_recv() {
                            top.apply(e);
                        }
                    }
                    None => break false,
                },
                () = &mut deadline => break false,
                sig = signals.recv() => return Err(interrupted(sig)),
            }
        };
    let mut snapshot = top.snapshot();
    if !settled {
        snapshot.complete = false;
        snapshot.notes.push(format!(
            "not everything could be read within {} (--timeout)",
            duration::format(conn.budget.total)
        ));
    }
    if prometheus {
        let _ = out.try_print_raw(&prometheus::render(&snapshot));
    } else {
        out.print(snapshot.to_json(), || view::text(&snapshot));
    }
    if snapshot.complete {
        return Ok(0);
    }
    let mut problems = top.tracker.problems();
    if top.layout_note.is_some() {
        problems.insert(0, "the space's layout".to_string());
    }
    Err(Failure::new(if problems.is_empty() {
        format!(
            "not everything could be read within {} (--timeout): the snapshot above is partial",
            duration::format(conn.budget.total)
        )
    } else {
        format!(
            "{} could not be read whole (see the notes above): the snapshot above is partial",
            problems.join(", ")
        )
    }))
}

/// Not a terminal, or `--json`: a snapshot each interval until interrupted (exit 0). The
/// first waits until everything was read once (or failed, which its notes say), so that a
/// reader of one snapshot never takes a view still loading for an idle node.
async fn stream(top: &mut Top, out: Out, signals: &mut Signals) -> Result<u8, Failure> {
    let mut tick = tokio::time::interval(top.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.reset();
    let mut loaded = false;
    loop {
        tokio::select! {
            e = top.events.recv() => if let Some(e) = e { top.apply(e) },
            _ = tick.tick() => {
                top.refresh_layout();
                loaded |= top.tracker.settled() || top.layout_note.is_some();
                if !loaded {
                    continue;
                }
                let snapshot = top.snapshot();
                match out.try_print(snapshot.to_json(), || view::text(&snapshot)) {
                    Ok(()) => {}
                    // The reader is gone (e.g. `| head -1`): nothing more to do.
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                    Err(e) => return Err(Failure::new(format!("cannot write the snapshot, check where the output goes: {e}"))),
                }
            }
            _ = signals.recv() => return Ok(0),
        }
    }
}

/// How often the live view redraws without news: the held and waited times move on.
const REDRAW: Duration = Duration::from_secs(1);

/// The live view on the terminal until `q`.
async fn live(top: &mut Top, signals: &mut Signals) -> Result<u8, Failure> {
    let (keys_tx, mut keys) = mpsc::unbounded_channel();
    // Terminal input blocks: one thread reads it for the whole run.
    std::thread::spawn(move || {
        while let Ok(e) = event::read() {
            if keys_tx.send(e).is_err() {
                break;
            }
        }
    });
    let mut terminal = ratatui::try_init().map_err(|e| {
        // Raw mode may be on already.
        ratatui::restore();
        Failure::new(format!("cannot set up the terminal: {e}"))
    })?;
    let result = live_loop(top, &mut terminal, &mut keys, signals).await;
    ratatui::restore();
    result
}

async fn live_loop(
    top: &mut Top,
    terminal: &mut ratatui::DefaultTerminal,
    keys: &mut mpsc::UnboundedReceiver<TermEvent>,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let mut state = ViewState::default();
    let mut shown = top.snapshot();
    let mut redraw = tokio::time::interval(REDRAW);
    redraw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut layout = tokio::time::interval(top.interval);
    layout.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    layout.reset();
    let draw =
        |terminal: &mut ratatui::DefaultTerminal, shown: &Snapshot, state: &mut ViewState| {
            terminal
                .draw(|frame| view::draw(frame, shown, state))
                .map(drop)
                .map_err(|e| Failure::new(format!("cannot draw on the terminal: {e}")))
        };
    loop {
        if !state.paused {
            shown = top.snapshot();
        }
        if let Some(news) = top.deleted.take() {
            state.message = Some(news);
        }
        draw(terminal, &shown, &mut state)?;
        tokio::select! {
            e = top.events.recv() => {
                if let Some(e) = e { top.apply(e) }
                // Take what else is there before drawing again.
                while let Ok(e) = top.events.try_recv() { top.apply(e) }
            }
            key = keys.recv() => match key {
                Some(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => {
                    match state.on_key(k) {
                        Action::Quit => return Ok(0),
                        Action::AskDelete => state.ask_delete(&shown),
                        Action::Delete { node, name } => top.delete(&node, &name),
                        Action::None | Action::Redraw => {}
                    }
                }
                Some(_) => {}
                None => return Ok(0),
            },
            _ = redraw.tick() => {}
            _ = layout.tick() => top.refresh_layout(),
            sig = signals.recv() => return Err(interrupted(sig)),
        }
    }
}
