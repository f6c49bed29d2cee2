//! `ydb-coord space` against an emulator in the test process: a layout published with
//! `init`, shown in text and JSON, resharded in two steps (`reshard`, then `finish`) with the
//! epoch growing by one each; the refusal (exit code 75, the member named in `--json`) while a
//! `LockSpace` opened here holds a lock taken in an older epoch, and the step once it is
//! released, at once or by `--wait`; bad input with the usage and error exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use ydb_coordination::space::{LockSpace, SpaceDirectory};
use ydb_coordination::{Client, MutexGuard, SessionOptions};

/// The space's name; its directory is the test node.
const SPACE: &str = "billing";

/// `space ACTION --directory NODE --space SPACE EXTRA`.
fn space_args<'a>(action: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["space", action, "--directory", NODE, "--space", SPACE];
    args.extend_from_slice(extra);
    args
}

/// `--json space ACTION ... EXTRA`.
fn json_args<'a>(action: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [&["--json"][..], &space_args(action, extra)].concat()
}

/// `--json space ACTION ... EXTRA`, which must succeed: the one object it printed.
fn step(env: &Env, action: &str, extra: &[&str]) -> Value {
    let mut objects = json(env, &space_args(action, extra));
    assert_eq!(objects.len(), 1, "{objects:?}");
    objects.remove(0)
}

fn show(env: &Env) -> Value {
    step(env, "show", &[])
}

/// The node names of a JSON layout's `nodes` or `next`.
fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a node list: {v}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

/// Asserts a step's JSON result: `action`, and the layout published.
fn assert_step(v: &Value, action: &str, epoch: u64, nodes: &[&str], next: Option<&[&str]>) {
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["action"], action, "{v}");
    assert_eq!(v["directory"], NODE, "{v}");
    assert_eq!(v["space"], SPACE, "{v}");
    assert_layout(v, epoch, nodes, next);
}

fn assert_layout(v: &Value, epoch: u64, nodes: &[&str], next: Option<&[&str]>) {
    assert_eq!(v["epoch"], epoch, "{v}");
    assert_eq!(names(&v["nodes"]), nodes, "{v}");
    match next {
        Some(next) => assert_eq!(names(&v["next"]), next, "{v}"),
        None => assert_eq!(v["next"], Value::Null, "{v}"),
    }
}

#[test]
fn init_show_reshard_and_finish_step_the_epoch() {
    let env = Env::new("space-steps");
    let o = env.run(&space_args("show", &[]));
    assert_one_line_error(&o, 1, "");

    let init = step(&env, "init", &["--node", "n2", "--node", "n1"]);
    assert_step(&init, "initialized", 1, &["n1", "n2"], None);
    // The same layout again is no change; another is refused.
    let again = step(&env, "init", &["--node", "n1", "--node", "n2"]);
    assert_step(&again, "initialized", 1, &["n1", "n2"], None);
    let o = env.run(&space_args("init", &["--node", "n3"]));
    assert_one_line_error(&o, 1, "");

    let shown = show(&env);
    assert_layout(&shown, 1, &["n1", "n2"], None);
    assert_eq!(shown["directory"], NODE);
    assert_eq!(shown["space"], SPACE);
    assert_eq!(shown["members"], Value::Array(vec![]));
    assert_eq!(shown["lagging"], Value::Array(vec![]));
    // The text form: directory, space, epoch, nodes, next, and the members' count.
    let text = ok(&env, &space_args("show", &[]));
    assert_eq!(text.lines().count(), 6, "{text}");

    let began = step(&env, "reshard", &["--add", "n3"]);
    assert_step(&began, "began", 2, &["n1", "n2"], Some(&["n1", "n2", "n3"]));
    assert_layout(&show(&env), 2, &["n1", "n2"], Some(&["n1", "n2", "n3"]));
    let finished = step(&env, "finish", &[]);
    assert_step(&finished, "finished", 3, &["n1", "n2", "n3"], None);
    assert_layout(&show(&env), 3, &["n1", "n2", "n3"], None);

    // --remove and --to, in text: the epoch goes on from 3.
    ok(&env, &space_args("reshard", &["--remove", "n1"]));
    assert_layout(&show(&env), 4, &["n1", "n2", "n3"], Some(&["n2", "n3"]));
    ok(&env, &space_args("finish", &[]));
    let began = step(&env, "reshard", &["--to", "n3,n4"]);
    assert_step(&began, "began", 6, &["n2", "n3"], Some(&["n3", "n4"]));
    let finished = step(&env, "finish", &["--wait", "1s"]);
    assert_step(&finished, "finished", 7, &["n3", "n4"], None);
}

#[test]
fn bad_input_exits_with_the_usage_and_error_codes() {
    let env = Env::new("space-bad");
    // The command line: no --node, no or two targets, a bad duration, a bad name.
    for args in [
        space_args("init", &[]),
        space_args("reshard", &[]),
        space_args("reshard", &["--add", "n2", "--remove", "n1"]),
        space_args("finish", &["--wait", "soon"]),
        space_args("init", &["--node", ""]),
        space_args("reshard", &["--to", ""]),
        vec!["space", "show", "--directory", NODE, "--space", "a/b"],
        vec!["space", "show", "--space", SPACE],
    ] {
        let o = env.run(&args);
        assert_one_line_error(&o, 2, "");
    }
    // Steps the published layout does not allow, and a missing directory node.
    ok(&env, &space_args("init", &["--node", "n1"]));
    for args in [
        space_args("finish", &[]),
        space_args("reshard", &["--add", "n1"]),
        space_args("reshard", &["--remove", "n2"]),
        space_args("reshard", &["--remove", "n1"]),
        vec![
            "space",
            "show",
            "--directory",
            "/local/nope",
            "--space",
            SPACE,
        ],
    ] {
        let o = env.run(&args);
        assert_one_line_error(&o, 1, "");
    }
    ok(&env, &space_args("reshard", &["--add", "n2"]));
    let o = env.run(&space_args("reshard", &["--add", "n3"]));
    assert_one_line_error(&o, 1, "");
    assert_eq!(show(&env)["epoch"], 2);
}

/// A `LockSpace` of the nodes `n1`..`n3` (coordination nodes `/local/n1`..), following the
/// space's layout on the test node, opened on the test's runtime.
fn open_space(env: &Env) -> (Client, LockSpace) {
    for n in ["n1", "n2", "n3"] {
        ok(env, &["node", "create", &format!("/local/{n}")]);
    }
    env._rt.block_on(async {
        let client = Client::connect(&env.cs).await.unwrap();
        let mut builder = LockSpace::builder();
        for n in ["n1", "n2", "n3"] {
            builder = builder.node(n, &client, &format!("/local/{n}"));
        }
        let space = builder
            .directory(&client, NODE, SPACE)
            .open()
            .await
            .unwrap();
        (client, space)
    })
}

/// Waits until the space runs the layout of `epoch`.
fn follows(env: &Env, space: &LockSpace, epoch: u64) {
    let mut changes = space.layout_changes();
    env._rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            while changes.borrow_and_update().epoch() < epoch {
                changes.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the space did not follow epoch {epoch} within {LIMIT:?}"));
    });
}

/// Releases `guard`, then waits until every member reports `epoch`.
fn release(env: &Env, client: &Client, guard: MutexGuard, epoch: u64) {
    let deadline = Instant::now() + LIMIT;
    env._rt.block_on(async {
        guard.release().await.unwrap();
        let directory = SpaceDirectory::new(client, NODE, SPACE, SessionOptions::new()).unwrap();
        loop {
            let members = directory.members().await.unwrap();
            if !members.is_empty() && members.iter().all(|m| m.epoch == Some(epoch)) {
                break;
            }
            assert!(Instant::now() < deadline, "members still {members:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        directory.shutdown().await;
    });
}

/// The one lagging member of a `show` or a `lagging` event: its session and epoch.
fn lagging_member(v: &Value) -> (u64, u64) {
    let lagging = v["lagging"].as_array().unwrap();
    assert_eq!(lagging.len(), 1, "{v}");
    (
        lagging[0]["session_id"].as_u64().unwrap(),
        lagging[0]["epoch"].as_u64().unwrap(),
    )
}

/// The `lagging` event a refused or waiting step printed with `--json`.
fn lagging_event(event: &Value) -> (u64, u64) {
    assert_eq!(event["event"], "lagging", "{event}");
    lagging_member(event)
}

/// A refused step: exit code 75, the `lagging` event on stdout and the error on stderr.
fn refused(o: &Output) -> (u64, u64) {
    assert_one_line_error(o, NOT_ACQUIRED, "");
    let events = json_lines(&stdout(o));
    assert_eq!(events.len(), 1, "{events:?}");
    lagging_event(&events[0])
}

#[test]
fn a_step_waits_for_a_member_holding_a_lock_of_an_older_epoch() {
    let env = Env::new("space-lag");
    ok(&env, &space_args("init", &["--node", "n1"]));
    let (client, space) = open_space(&env);
    let guard = env._rt.block_on(space.mutex("x").lock()).unwrap();
    let shown = show(&env);
    let members = shown["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{shown}");
    let member = members[0]["session_id"].as_u64().unwrap();
    assert_eq!(members[0]["epoch"], 1);
    assert_eq!(members[0]["lagging"], false);

    // The transition is published (every member runs epoch 1), and followed; the lock
    // keeps the member at epoch 1, so finishing is refused, at once or after --wait.
    let began = step(&env, "reshard", &["--add", "n2"]);
    assert_step(&began, "began", 2, &["n1"], Some(&["n1", "n2"]));
    follows(&env, &space, 2);
    assert_eq!(space.running_epoch(), 1);
    let o = env.run(&json_args("finish", &[]));
    assert_eq!(refused(&o), (member, 1));
    let o = env.run(&json_args("finish", &["--wait", "300ms"]));
    assert_eq!(refused(&o), (member, 1));
    let o = env.run(&space_args("finish", &[]));
    assert_one_line_error(&o, NOT_ACQUIRED, "");
    let shown = show(&env);
    assert_eq!(shown["epoch"], 2);
    assert_eq!(shown["members"][0]["lagging"], true, "{shown}");
    assert_eq!(lagging_member(&shown), (member, 1));

    // Released, the member reports epoch 2 and the step is taken.
    release(&env, &client, guard, 2);
    let finished = step(&env, "finish", &[]);
    assert_step(&finished, "finished", 3, &["n1", "n2"], None);
    follows(&env, &space, 3);

    // Again with --wait: started while a lock of epoch 3 is held, done once it is released.
    let guard = env._rt.block_on(space.mutex("x").lock()).unwrap();
    let began = step(&env, "reshard", &["--remove", "n1", "--wait", "10s"]);
    assert_step(&began, "began", 4, &["n1", "n2"], Some(&["n2"]));
    follows(&env, &space, 4);
    let mut waiting = env.spawn(&json_args("finish", &["--wait", "10s"]));
    let printed = lines(&mut waiting);
    assert_eq!(lagging_event(&next_json(&printed)), (member, 3));
    release(&env, &client, guard, 4);
    let status = wait_exit(&mut waiting);
    assert!(status.success(), "{status:?}");
    assert_step(&next_json(&printed), "finished", 5, &["n2"], None);
    env._rt.block_on(space.shutdown());
}
