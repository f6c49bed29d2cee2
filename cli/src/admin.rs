//! `node`, `semaphore`, `watch` and `elect --observe`: administration and observation.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;
use ydb_coordination::{
    Client, ErrorKind, Session, config::DescribeOptions, config::NodeConfig, config::WatchOptions,
};

use super::fail::{Failure, node_error, semaphore_error};
use super::output::{self, Out};
use super::signals::Signals;

/// Awaits an admin call within `limit`.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, Failure>>,
) -> Result<T, Failure> {
    Budget::start(limit).bound(what, fut).await
}

/// One `--timeout`: a deadline set when the command starts, shared by connecting and the
/// work after it, so that an endpoint that never answers costs the time limit once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// The whole limit, as given (for messages).
    pub(crate) total: Duration,
    at: Instant,
}

impl Budget {
    /// A budget of `total` from now.
    pub(crate) fn start(total: Duration) -> Self {
        Self {
            total,
            at: Instant::now() + total,
        }
    }

    /// What is left of it (at least a millisecond: the library refuses a zero bound).
    pub(crate) fn left(&self) -> Duration {
        self.at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// Awaits `fut` until the deadline; past it, a failure naming `what` and the limit. The
    /// library's own bounds, set from [`left`](Budget::left), end first and say why (e.g.
    /// connection refused); this one, a moment later, is the backstop.
    pub(crate) async fn bound<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        const BACKSTOP: Duration = Duration::from_millis(300);
        tokio::time::timeout_at(self.at + BACKSTOP, fut)
            .await
            .unwrap_or_else(|_| Err(self.elapsed(what)))
    }

    /// The failure of running out of it while doing `what`.
    pub(crate) fn elapsed(&self, what: &str) -> Failure {
        Failure::new(format!(
            "{what}: no answer within {} (see --timeout)",
            super::duration::format(self.total)
        ))
    }
}

/// `node create|alter|describe|drop`.
#[derive(Debug)]
pub(crate) enum NodeOp {
    Create(NodeConfig),
    Alter(NodeConfig),
    Describe,
    Drop,
}

/// Runs a node command.
pub(crate) async fn node(client: &Client, node: &str, op: NodeOp, out: Out) -> Result<(), Failure> {
    let done = |action: &str| {
        out.print(json!({"ok": true, "action": action, "node": node}), || {
            format!("{action} coordination node {node}")
        })
    };
    match op {
        NodeOp::Create(config) => {
            let r = client.create_node(node, config).await;
            r.map_err(|e| node_error("create", node, &e))?;
            done("created");
        }
        NodeOp::Alter(config) => {
            let r = client.alter_node(node, config).await;
            r.map_err(|e| node_error("alter", node, &e))?;
            done("altered");
        }
        NodeOp::Describe => {
            let c = client
                .describe_node(node)
                .await
                .map_err(|e| node_error("describe", node, &e))?;
            out.print(output::node_json(node, &c), || output::node_text(node, &c));
        }
        NodeOp::Drop => {
            let r = client.drop_node(node).await;
            r.map_err(|e| node_error("drop", node, &e))?;
            done("dropped");
        }
    }
    Ok(())
}

/// `semaphore create|update|describe|delete`.
#[derive(Debug)]
pub(crate) enum SemaphoreOp {
    Create {
        limit: u64,
        data: Vec<u8>,
    },
    Update {
        data: Vec<u8>,
    },
    Describe {
        owners: bool,
        waiters: bool,
    },
    /// `ask`: without `--yes` (the question is asked before, see [`confirm_delete`]).
    Delete {
        force: bool,
        ask: bool,
    },
}

/// Runs a semaphore command in `session`.
pub(crate) async fn semaphore(
    session: &Session,
    name: &str,
    op: SemaphoreOp,
    out: Out,
) -> Result<(), Failure> {
    let node = session.path();
    let done = |action: &str| {
        out.print(
            json!({"ok": true, "action": action, "node": node, "name": name}),
            || format!("{action} semaphore {name:?} on {node}"),
        )
    };
    match op {
        SemaphoreOp::Create { limit, data } => {
            let r = session.create_semaphore(name, limit, &data).await;
            r.map_err(|e| semaphore_error("create", name, node, &e))?;
            done("created");
        }
        SemaphoreOp::Update { data } => {
            let r = session.update_semaphore(name, &data).await;
            r.map_err(|e| semaphore_error("update", name, node, &e))?;
            done("updated");
        }
        SemaphoreOp::Describe { owners, waiters } => {
            let options = DescribeOptions::new().owners(owners).waiters(waiters);
            let d = session
                .describe_semaphore(name, options)
                .await
                .map_err(|e| semaphore_error("describe", name, node, &e))?;
            out.print(Value::Object(output::semaphore_json(node, &d)), || {
                output::semaphore_text(node, &d, owners, waiters)
            });
        }
        SemaphoreOp::Delete { force, .. } => {
            let r = session.delete_semaphore(name, force).await;
            r.map_err(|e| match e.kind() {
                ErrorKind::PreconditionFailed if !force => Failure::new(format!(
                    "semaphore {name:?} on {node} is in use or ephemeral \
                     (--force deletes one in use)"
                )),
                ErrorKind::PreconditionFailed => ephemeral(name, node, ""),
                _ => semaphore_error("delete", name, node, &e),
            })?;
            done("deleted");
        }
    }
    Ok(())
}

/// The refusal to delete an ephemeral semaphore, which the server cannot: it goes with its
/// last holder and waiter (`holders`: who they are, if known).
fn ephemeral(name: &str, node: &str, holders: &str) -> Failure {
    Failure::new(format!(
        "semaphore {name:?} on {node} is ephemeral: the server cannot delete it; it goes when \
         its holders and waiters do{holders}: stop them, or wait for their session timeout \
         (ydb-coord top {node} {name:?} --once shows who they are)"
    ))
}

/// Before `semaphore delete --force` without `--yes`: says what the delete would break (its
/// owners, who are not told, and its waiters, who are aborted) and asks on the terminal; a
/// semaphore nobody holds or waits for is deleted without asking. Without a terminal,
/// refuses (exit code 2): a script passes `--yes`. The describe is bounded by `budget`, the
/// question is not.
pub(crate) async fn confirm_delete(
    session: &Session,
    name: &str,
    budget: &Budget,
) -> Result<(), Failure> {
    use std::io::IsTerminal;
    let node = session.path();
    let whole = DescribeOptions::new().owners(true).waiters(true);
    let d = budget
        .bound("describe", async {
            session
                .describe_semaphore(name, whole)
                .await
                .map_err(|e| semaphore_error("describe", name, node, &e))
        })
        .await?;
    if d.owners.is_empty() && d.waiters.is_empty() {
        return Ok(());
    }
    let ids: Vec<u64> = d
        .owners
        .iter()
        .chain(&d.waiters)
        .map(|o| o.session_id)
        .collect();
    let who = budget
        .bound("describe the announcements", async {
            Ok(super::top::who(session, &ids).await)
        })
        .await?;
    let list = |entries: &[ydb_coordination::session::SemaphoreSession]| {
        entries
            .iter()
            .map(|o| match who.get(&o.session_id) {
                Some(w) => format!("session {} ({w})", o.session_id),
                None => format!("session {}", o.session_id),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if d.ephemeral {
        return Err(ephemeral(name, node, &format!(" ({})", list(&d.owners))));
    }
    let summary = format!(
        "semaphore {name:?} on {node} has {} owners ({}), who are not told, and {} waiters, \
         whose acquires are aborted",
        d.owners.len(),
        list(&d.owners),
        d.waiters.len()
    );
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(Failure::with_code(
            super::fail::USAGE,
            format!("{summary}: pass --yes to force-delete it without a question"),
        ));
    }
    eprint!("{summary}.\nDelete it? [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_default();
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "semaphore {name:?} on {node} was not deleted"
        )))
    }
}

/// `watch`: the description, then one line per change, until interrupted or deleted.
pub(crate) async fn watch(
    session: &Session,
    name: &str,
    waiters: bool,
    out: Out,
    signals: &mut Signals,
) -> Result<(), Failure> {
    let node = session.path();
    let describe = DescribeOptions::new().owners(true).waiters(waiters);
    let options = WatchOptions::new().describe(describe);
    let mut stream = session
        .watch_semaphore(name, options)
        .await
        .map_err(|e| semaphore_error("watch", name, node, &e))?;
    let mut first = true;
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = signals.recv() => return Ok(()),
        };
        let update = match item {
            Some(Ok(update)) => update,
            Some(Err(e)) if e.kind() == ErrorKind::NotFound && !first => {
                out.print(
                    json!({"event": "deleted", "node": node, "name": name}),
                    || "deleted".to_string(),
                );
                return Ok(());
            }
            Some(Err(e)) => return Err(semaphore_error("watch", name, node, &e)),
            None => return Ok(()),
        };
        let d = &update.description;
        let event = if first { "initial" } else { "changed" };
        let mut map = output::semaphore_json(node, d);
        map.insert("event".into(), json!(event));
        map.insert("resynced".into(), json!(update.resynced));
        out.print(Value::Object(map), || {
            if first {
                output::semaphore_text(node, d, true, waiters)
            } else {
                let resynced = if update.resynced {
                    " (after reconnect; changes in between may be missed)"
                } else {
                    ""
                };
                format!("changed: {}{resynced}", output::semaphore_line(d))
            }
        });
        first = false;
    }
}

/// `elect --observe`: the leader now, then each change, until interrupted.
pub(crate) async fn observe(
    session: &Session,
    name: &str,
    out: Out,
    signals: &mut Signals,
) -> Result<(), Failure> {
    let node = session.path();
    let election = session.election(name);
    let mut stream = election.observe();
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = signals.recv() => return Ok(()),
        };
        match item {
            Some(Ok(Some(leader))) => {
                let mut map = serde_json::Map::new();
                map.insert("event".into(), json!("leader"));
                map.insert("node".into(), json!(node));
                map.insert("name".into(), json!(name));
                map.insert("session_id".into(), json!(leader.session_id));
                map.insert("fencing_token".into(), json!(leader.fencing_token.order));
                output::put_data(&mut map, &leader.data);
                out.print(Value::Object(map), || {
                    format!(
                        "leader: {} (session {}, fencing token {})",
                        output::show_data(&leader.data),
                        leader.session_id,
                        leader.fencing_token
                    )
                });
            }
            Some(Ok(None)) => out.print(
                json!({"event": "no_leader", "node": node, "name": name}),
                || "no leader".to_string(),
            ),
            Some(Err(e)) => return Err(semaphore_error("observe", name, node, &e)),
            None => return Ok(()),
        }
    }
}
