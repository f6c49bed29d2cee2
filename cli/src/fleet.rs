//! `group join|members|watch`, `publish` and `subscribe`: membership and published values.

use futures::{Stream, StreamExt};
use serde_json::{Map, Value, json};
use ydb_coordination::{Session, SessionManager, recipes::Member, recipes::MembershipState};

use super::admin::Budget;
use super::fail::{self, Failure, semaphore_error, session_error};
use super::output::{self, Out};
use super::signals::Signals;

pub(crate) const GROUP_HELP: &str = "\
Examples:
  # Be a member (with this data) until interrupted; joins again after a session loss:
  ydb-coord group join /local/app web --data \"$(hostname):8080\"
  ydb-coord group members /local/app web
  ydb-coord --json group watch /local/app web | jq -c '[.members[].data]'

A group is a persistent semaphore with limit 2^64-1 (created if missing); each member owns
one token and its data is the owner data. A member whose process dies is removed when its
session times out (--session-timeout).";

pub(crate) const PUBLISH_HELP: &str = "\
Examples:
  ydb-coord publish /local/app config 'replicas=3'
  ydb-coord subscribe /local/app config --once
  ydb-coord --json subscribe /local/app config

The value is the data of a persistent semaphore (created if missing), up to 1 MiB. Concurrent
publishers overwrite each other (no compare-and-set). `subscribe` prints the value now and
each new one until interrupted; a slow reader skips values but always gets the newest.
With --json each value has \"published\": false while nothing was ever published under the
name (true for a value published empty); `subscribe --once` then exits with 3. A subscription
without --once creates the name's semaphore, empty: after it, the name reads as published
empty.";

/// The members as JSON objects.
fn members_json(set: &[Member]) -> Value {
    let members: Vec<Value> = set
        .iter()
        .map(|m| {
            let mut map = Map::new();
            map.insert("session_id".into(), json!(m.session_id));
            map.insert("order_id".into(), json!(m.order_id));
            output::put_data(&mut map, &m.data);
            Value::Object(map)
        })
        .collect();
    Value::Array(members)
}

/// The members for people, one per line, or a line saying there are none.
fn members_text(set: &[Member]) -> String {
    if set.is_empty() {
        return "no members".to_string();
    }
    set.iter()
        .map(|m| {
            format!(
                "member: {} (session {})",
                output::show_data(&m.data),
                m.session_id
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints a member set as an `event` (`members` for a listing).
fn print_members(out: Out, event: &str, node: &str, name: &str, set: &[Member]) {
    out.print(
        json!({"event": event, "node": node, "name": name, "members": members_json(set)}),
        || members_text(set),
    );
}

/// The manager's first session within `budget`, so that a missing node is reported as such.
pub(crate) async fn first_session(
    manager: &SessionManager,
    node: &str,
    budget: Budget,
) -> Result<(), Failure> {
    let first = async {
        let session = manager.current().await;
        session
            .map(drop)
            .map_err(|e| session_error(node, budget.total, &e))
    };
    budget
        .bound(&format!("open a session on {node}"), first)
        .await
}

/// `group members`: the members now.
pub(crate) async fn members(session: &Session, name: &str, out: Out) -> Result<(), Failure> {
    let node = session.path();
    let set = session
        .group(name)
        .members()
        .await
        .map_err(|e| semaphore_error("list the members of", name, node, &e))?;
    print_members(out, "members", node, name, &set);
    Ok(())
}

/// `group join`: a member until interrupted, reporting each state change.
pub(crate) async fn join(
    manager: &SessionManager,
    node: &str,
    name: &str,
    data: &[u8],
    out: Out,
    signals: &mut Signals,
) -> Result<(), Failure> {
    let membership = signals
        .interruptible(async {
            let r = manager.group(name).join(data).await;
            r.map_err(|e| semaphore_error("join", name, node, &e))
        })
        .await?;
    let mut changes = membership.state_changes();
    loop {
        let state = changes.borrow_and_update().clone();
        match state {
            MembershipState::Joined {
                session_id,
                order_id,
            } => out.print(
                json!({"event": "joined", "node": node, "name": name,
                       "session_id": session_id, "order_id": order_id}),
                || format!("joined group {name:?} on {node} (session {session_id})"),
            ),
            MembershipState::Joining => out.print(
                json!({"event": "joining", "node": node, "name": name}),
                || "session lost; joining again".to_string(),
            ),
            MembershipState::Ended(e) => {
                return Err(match e {
                    Some(e) => semaphore_error("join", name, node, &e),
                    None => Failure::new(format!("the membership of {name:?} on {node} ended")),
                });
            }
            _ => {}
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() {
                return Err(Failure::new(format!("the membership of {name:?} on {node} ended")));
            },
            _ = signals.recv() => break,
        }
    }
    let _ = membership.leave().await;
    out.print(json!({"event": "left", "node": node, "name": name}), || {
        format!("left group {name:?}")
    });
    Ok(())
}

/// Prints each item of a following stream until interrupted or an error.
async fn follow<T>(
    mut stream: impl Stream<Item = ydb_coordination::Result<T>> + Unpin,
    signals: &mut Signals,
    mut print: impl FnMut(&T),
    fail: impl Fn(&ydb_coordination::Error) -> Failure,
) -> Result<(), Failure> {
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = signals.recv() => return Ok(()),
        };
        match item {
            Some(Ok(value)) => print(&value),
            Some(Err(e)) => return Err(fail(&e)),
            None => return Ok(()),
        }
    }
}

/// `group watch`: the set now, then after each change.
pub(crate) async fn watch(
    manager: &SessionManager,
    node: &str,
    name: &str,
    out: Out,
    signals: &mut Signals,
) -> Result<(), Failure> {
    let stream = manager.group(name).watch();
    let print = |set: &Vec<Member>| print_members(out, "members", node, name, set);
    let fail = |e: &ydb_coordination::Error| semaphore_error("watch", name, node, e);
    follow(stream, signals, print, fail).await
}

/// `publish`: the value, replacing the last one.
pub(crate) async fn publish(
    session: &Session,
    name: &str,
    value: &[u8],
    out: Out,
) -> Result<(), Failure> {
    let node = session.path();
    session
        .published(name)
        .publish(value)
        .await
        .map_err(|e| semaphore_error("publish", name, node, &e))?;
    out.print(
        json!({"ok": true, "action": "published", "node": node, "name": name, "bytes": value.len()}),
        || format!("published {name:?} on {node} ({} bytes)", value.len()),
    );
    Ok(())
}

/// `subscribe`: the value now, then each new one (with `once`, the bound of its one read: only
/// the value now). A name never
/// published is a value event with `"published": false`; with `once` it ends the command
/// with [`fail::NOT_PUBLISHED`].
pub(crate) async fn subscribe(
    manager: &SessionManager,
    node: &str,
    name: &str,
    once: Option<Budget>,
    out: Out,
    signals: &mut Signals,
) -> Result<(), Failure> {
    let published = manager.published(name);
    let fail = |e: &ydb_coordination::Error| semaphore_error("subscribe to", name, node, e);
    // Read before the subscription, which creates the publication (empty).
    let lookup = async { published.lookup().await.map_err(|e| fail(&e)) };
    let now = match once {
        Some(budget) => {
            signals
                .interruptible(budget.bound("subscribe", lookup))
                .await?
        }
        None => signals.interruptible(lookup).await?,
    };
    let print = |value: &[u8], published: bool| {
        let mut map = Map::new();
        map.insert("event".into(), json!("value"));
        map.insert("node".into(), json!(node));
        map.insert("name".into(), json!(name));
        map.insert("published".into(), json!(published));
        if published {
            output::put_data(&mut map, value);
        }
        out.print(Value::Object(map), || match std::str::from_utf8(value) {
            Ok(text) => text.to_string(),
            Err(_) => output::show_data(value),
        });
    };
    if once.is_some() {
        return match now {
            Some(value) => {
                print(&value, true);
                Ok(())
            }
            None if out.json => {
                print(&[], false);
                Err(Failure::with_code(fail::NOT_PUBLISHED, ""))
            }
            None => Err(Failure::with_code(
                fail::NOT_PUBLISHED,
                format!("nothing was ever published under {name:?} on {node}"),
            )),
        };
    }
    let mut never = now.is_none();
    let print = |value: &Vec<u8>| {
        print(value, !(never && value.is_empty()));
        never = false;
    };
    follow(published.subscribe(), signals, print, fail).await
}
