//! `space`: a lock space's directory, for the operator: the published layout and the
//! members (`show`), the first layout (`init`), and the two steps of a reshard (`reshard`,
//! `finish`), each refused while a member runs an older epoch than the published one.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use ydb_coordination::space::{Lagging, Layout, SpaceDirectory, SpaceMember};
use ydb_coordination::{Error, ErrorKind};

use super::admin::bounded;
use super::fail::{self, Failure, space_error};
use super::output::Out;
use super::signals::Signals;
use super::{Conn, duration};

pub(crate) const SPACE_HELP: &str = "\
Examples:
  # The first layout of the space \"billing\", published on the directory node /local/dir:
  ydb-coord space init --directory /local/dir --space billing --node n1 --node n2
  ydb-coord space show --directory /local/dir --space billing
  # Add a node: the transition first, then, once every member runs it, the new layout:
  ydb-coord space reshard --directory /local/dir --space billing --add n3
  ydb-coord space finish --directory /local/dir --space billing --wait 5m
  # Move to exactly these nodes, waiting up to a minute for the members to catch up:
  ydb-coord space reshard --directory /local/dir --space billing --to n2,n3 --wait 1m
  ydb-coord --json space show --directory /local/dir --space billing | jq -c .lagging

A lock space spreads lock names over coordination nodes. Its layout, an epoch and the names
the processes know the nodes by (not paths), is published on the directory node, where every
process of the space is a member reporting the oldest epoch it runs (its layout's, or that of
a lock it took before and still holds). A reshard from A to B is two steps: `reshard`
publishes the transition A+B (epoch +1), `finish` publishes B (epoch +1 again). Each step is
refused while a member lags (runs an epoch older than the published one): exit code 75, the
first such member named; with --wait, it waits until none lags, then takes the step. A step
interrupted after the wait may or may not have published: `show` tells.";

/// `space show|init|reshard|finish`.
#[derive(Debug, Subcommand)]
pub(crate) enum Action {
    /// Print the published layout, the members with the epochs they run, and which lag.
    #[command(after_help = SPACE_HELP)]
    Show {
        #[command(flatten)]
        at: SpaceArgs,
    },
    /// Publish the first layout (epoch 1) of a space.
    #[command(after_help = SPACE_HELP)]
    Init {
        #[command(flatten)]
        at: SpaceArgs,
        /// A node of the layout, by the name the processes know it by (not a path;
        /// repeatable).
        #[arg(long = "node", value_name = "NAME", required = true)]
        nodes: Vec<String>,
    },
    /// Start a reshard: publish the transition from the published layout to new nodes.
    #[command(after_help = SPACE_HELP)]
    Reshard {
        #[command(flatten)]
        step: StepArgs,
        #[command(flatten)]
        target: Target,
    },
    /// Finish the reshard in progress: publish its new layout.
    #[command(after_help = SPACE_HELP)]
    Finish {
        #[command(flatten)]
        step: StepArgs,
    },
}

/// The space a command is about.
#[derive(Debug, Args)]
pub(crate) struct SpaceArgs {
    /// The directory: the coordination node where the space's layout is published.
    #[arg(long, value_name = "PATH")]
    directory: String,
    /// The space's name on the directory.
    #[arg(long, value_name = "NAME")]
    space: String,
}

/// A reshard step: the space, and how long to wait for lagging members.
#[derive(Debug, Args)]
pub(crate) struct StepArgs {
    #[command(flatten)]
    at: SpaceArgs,
    /// Wait up to this long until no member lags, then take the step (exit code 75 if one
    /// still does). Default: refuse at once while one lags.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    wait: Option<Duration>,
}

/// The nodes a reshard moves to.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(crate) struct Target {
    /// Add this node to the published layout's.
    #[arg(long, value_name = "NAME")]
    add: Option<String>,
    /// Remove this node from the published layout's.
    #[arg(long, value_name = "NAME")]
    remove: Option<String>,
    /// Move to exactly these nodes.
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    to: Vec<String>,
}

/// A step from the published layout.
#[derive(Debug)]
enum Step {
    Add(String),
    Remove(String),
    To(Vec<String>),
    Finish,
}

impl Step {
    /// The layout the step publishes after `current` (pure: refuses a step that cannot
    /// follow it before anything waits).
    fn plan(&self, current: &Layout) -> ydb_coordination::Result<Layout> {
        match self {
            Self::Add(node) => current.add_node(node),
            Self::Remove(node) => current.remove_node(node),
            Self::To(nodes) => current.begin(nodes),
            Self::Finish => current.finish(),
        }
    }

    /// Takes the step on the directory (which checks the members again).
    async fn take(&self, directory: &SpaceDirectory) -> ydb_coordination::Result<Layout> {
        match self {
            Self::Add(node) => directory.begin_add(node).await,
            Self::Remove(node) => directory.begin_remove(node).await,
            Self::To(nodes) => directory.begin(nodes).await,
            Self::Finish => directory.finish().await,
        }
    }

    /// What the step did (the `action` of the output, and in words) and its verb (for
    /// errors).
    fn words(&self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Finish => ("finished", "finished resharding", "finish resharding"),
            _ => ("began", "began resharding", "start resharding"),
        }
    }
}

/// Node names given on the command line, checked as a layout checks them: the layout of
/// epoch 1 of them.
fn check_names<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> Result<Layout, Failure> {
    Layout::new(1, nodes).map_err(|e| Failure::with_code(fail::USAGE, fail::describe(&e)))
}

/// The directory of the space a command is about, and the words of its errors.
struct Space<'a> {
    directory: SpaceDirectory,
    path: String,
    name: &'a str,
    timeout: Duration,
}

impl Space<'_> {
    /// Awaits a directory call within `--timeout`, its error in the words of `verb`.
    async fn call<T>(
        &self,
        verb: &str,
        fut: impl Future<Output = ydb_coordination::Result<T>>,
    ) -> Result<T, Failure> {
        let fut = async { fut.await.map_err(|e| self.error(verb, &e)) };
        bounded(self.timeout, "space", fut).await
    }

    fn error(&self, verb: &str, err: &Error) -> Failure {
        space_error(verb, self.name, &self.path, err)
    }

    /// The layout as a JSON object, with the directory and the space.
    fn layout_json(&self, layout: &Layout) -> Map<String, Value> {
        let mut map = Map::new();
        map.insert("directory".into(), json!(self.path));
        map.insert("space".into(), json!(self.name));
        map.insert("epoch".into(), json!(layout.epoch()));
        map.insert("nodes".into(), json!(layout.nodes()));
        map.insert("next".into(), json!(layout.next()));
        map
    }

    /// Prints a step's result: the layout now published.
    fn done(&self, out: Out, action: &str, what: &str, layout: &Layout) {
        let mut map = self.layout_json(layout);
        map.insert("ok".into(), json!(true));
        map.insert("action".into(), json!(action));
        out.print(Value::Object(map), || {
            let then = if layout.is_transition() {
                "; `space finish` once every member runs it"
            } else {
                ""
            };
            format!(
                "{what} lock space {:?} on {} ({layout}){then}",
                self.name, self.path
            )
        });
    }
}

/// A command, checked: what it does on the directory.
enum Op {
    Show,
    Init(Layout),
    Step(Step, Option<Duration>),
}

/// Runs a `space` command; returns the exit code.
pub(crate) async fn run(conn: &Conn, action: Action, out: Out) -> Result<u8, Failure> {
    // Bad names are refused before connecting.
    let (at, op) = match action {
        Action::Show { at } => (at, Op::Show),
        Action::Init { at, nodes } => (at, Op::Init(check_names(&nodes)?)),
        Action::Reshard { step, target } => {
            let named = target.add.iter().chain(&target.remove).chain(&target.to);
            check_names(named)?;
            let next = match (target.add, target.remove) {
                (Some(node), _) => Step::Add(node),
                (_, Some(node)) => Step::Remove(node),
                (None, None) => Step::To(target.to),
            };
            (step.at, Op::Step(next, step.wait))
        }
        Action::Finish { step } => (step.at, Op::Step(Step::Finish, step.wait)),
    };
    let mut signals = Signals::install()?;
    let client = signals.interruptible(conn.client()).await?;
    let path = Conn::node(&client, &at.directory);
    let description = format!("ydb-coord space {}", at.space);
    let directory = SpaceDirectory::new(&client, &path, &at.space, conn.options(description))
        .map_err(|e| Failure::with_code(fail::USAGE, fail::describe(&e)))?;
    let space = Space {
        directory,
        path,
        name: &at.space,
        timeout: conn.args.timeout,
    };
    let work = async {
        match op {
            Op::Show => show(&space, out).await,
            Op::Init(layout) => {
                let init = space.directory.init(layout);
                let init = async { init.await.map_err(|e| space.error("initialize", &e)) };
                let bound = space.timeout + SpaceDirectory::ADMIN_WAIT;
                let published = bounded(bound, "space", init).await?;
                space.done(out, "initialized", "initialized", &published);
                Ok(())
            }
            Op::Step(step, wait) => advance(&space, &step, wait, out).await,
        }
    };
    let result = signals.interruptible(work).await;
    space.directory.shutdown().await;
    result.map(|()| 0)
}

/// `show`: the layout, the members and the epochs they run, which lag.
async fn show(space: &Space<'_>, out: Out) -> Result<(), Failure> {
    let layout = space.call("read", space.directory.layout()).await?;
    let mut members = space
        .call("list the members of", space.directory.members())
        .await?;
    members.sort_by_key(|m| m.session_id);
    let lag = layout.lagging(members.iter().map(|m| (m.session_id, m.epoch.unwrap_or(0))));
    let lags = |m: &SpaceMember| lag.iter().any(|l| l.session_id == m.session_id);
    let mut map = space.layout_json(&layout);
    let rows: Vec<Value> = members
        .iter()
        .map(|m| json!({"session_id": m.session_id, "epoch": m.epoch, "lagging": lags(m)}))
        .collect();
    map.insert("members".into(), Value::Array(rows));
    map.insert("lagging".into(), lagging_json(&lag));
    out.print(Value::Object(map), || {
        let next = layout.next().map_or("-".to_string(), |n| n.join(","));
        let mut text = [
            ("directory", space.path.clone()),
            ("space", space.name.to_string()),
            ("epoch", layout.epoch().to_string()),
            ("nodes", layout.nodes().join(",")),
            ("next", next),
        ]
        .iter()
        .map(|(k, v)| format!("{k:<10} {v}\n"))
        .collect::<String>();
        text.push_str(&format!("members ({})", members.len()));
        if !members.is_empty() {
            text.push_str(&format!("\n  {:<20} EPOCH", "SESSION"));
        }
        for m in &members {
            let epoch = m.epoch.map_or("?".to_string(), |e| e.to_string());
            let note = if lags(m) { "lagging" } else { "" };
            text.push_str(&format!("\n  {:<20} {epoch:<8} {note}", m.session_id));
        }
        text.trim_end().to_string()
    });
    Ok(())
}

/// The lagging members as JSON; one whose report is not an epoch (it counts as epoch 0,
/// which no layout has) has `"epoch": null`, as in `show`'s members.
fn lagging_json(lag: &[Lagging]) -> Value {
    lag.iter()
        .map(|l| json!({"session_id": l.session_id, "epoch": (l.epoch > 0).then_some(l.epoch)}))
        .collect()
}

/// The first pause between polls of the members while waiting, doubled up to the last.
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const LAST_PAUSE: Duration = Duration::from_secs(2);

/// `reshard` and `finish`: the step, once no member lags (within `wait`; at once without).
async fn advance(
    space: &Space<'_>,
    step: &Step,
    wait: Option<Duration>,
    out: Out,
) -> Result<(), Failure> {
    let (action, what, verb) = step.words();
    let deadline = wait.map(|w| Instant::now() + w);
    let mut pause = FIRST_PAUSE;
    let mut shown: Option<Vec<Lagging>> = None;
    let mut retried = false;
    loop {
        let current = space.call(verb, space.directory.layout()).await?;
        step.plan(&current).map_err(|e| space.error(verb, &e))?;
        let lag = space.call(verb, space.directory.lagging()).await?;
        if lag.is_empty() {
            let take = async { Ok(step.take(&space.directory).await) };
            // A step may wait for another operator's step first.
            let bound = space.timeout + SpaceDirectory::ADMIN_WAIT;
            match bounded(bound, "space", take).await? {
                Ok(published) => {
                    space.done(out, action, what, &published);
                    return Ok(());
                }
                // A member lagged or another operator stepped in between: look again, once.
                Err(e) if e.kind() == ErrorKind::PreconditionFailed && !retried => {
                    retried = true;
                    continue;
                }
                // Another operator's step held the directory past the wait: not now (75).
                Err(e) if e.kind() == ErrorKind::NotAcquired => {
                    let failure = space.error(verb, &e);
                    return Err(Failure::with_code(fail::NOT_ACQUIRED, failure.message));
                }
                Err(e) => return Err(space.error(verb, &e)),
            }
        }
        let left = deadline.map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if shown.as_ref() != Some(&lag) {
            let waiting = !left.is_zero();
            let mut map = space.layout_json(&current);
            map.insert("event".into(), json!("lagging"));
            map.insert("lagging".into(), lagging_json(&lag));
            if out.json {
                out.print(Value::Object(map), String::new);
            } else if waiting {
                eprintln!("waiting: {}", lag_text(&lag, current.epoch()));
            }
            shown = Some(lag.clone());
        }
        if left.is_zero() {
            let hint = match wait {
                Some(w) => format!("gave up after waiting {}", duration::format(w)),
                None => "try again later, or pass --wait".to_string(),
            };
            return Err(Failure::with_code(
                fail::NOT_ACQUIRED,
                format!(
                    "cannot {verb} lock space {:?} on {}: {}; {hint}",
                    space.name,
                    space.path,
                    lag_text(&lag, current.epoch())
                ),
            ));
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(LAST_PAUSE);
    }
}

/// `member session 7 runs epoch 1, older than the published 2 (and 2 more members)`.
fn lag_text(lag: &[Lagging], published: u64) -> String {
    let Some(first) = lag.first() else {
        return String::new();
    };
    let runs = match first.epoch {
        0 => "reports no epoch (counted as older than any)".to_string(),
        e => format!("runs epoch {e}, older than the published {published}"),
    };
    let more = match lag.len() {
        1 => String::new(),
        2 => " (and 1 more member)".to_string(),
        n => format!(" (and {} more members)", n - 1),
    };
    format!("member session {} {runs}{more}", first.session_id)
}
