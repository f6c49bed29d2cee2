//! `ydb-coord group join|members|watch`, `publish` and `subscribe` against an emulator in
//! the test process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

/// The members' data in a `members` event.
fn member_data(event: &Value) -> Vec<String> {
    assert_eq!(event["event"], "members", "{event}");
    event["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"].as_str().unwrap().to_string())
        .collect()
}

/// Reads `members` events until the set's data is `want`.
fn until_members(rx: &std::sync::mpsc::Receiver<String>, want: &[&str]) {
    loop {
        if member_data(&next_json(rx)) == want {
            return;
        }
    }
}

#[test]
fn group_join_members_and_watch_follow_the_set() {
    let env = Env::new("group");
    let mut watch = env.spawn(&["--json", "group", "watch", NODE, "web"]);
    let watched = lines(&mut watch);
    assert!(member_data(&next_json(&watched)).is_empty());

    let mut a = env.spawn(&["--json", "group", "join", NODE, "web", "--data", "a:8080"]);
    let a_out = lines(&mut a);
    let joined = next_json(&a_out);
    assert_eq!(joined["event"], "joined", "{joined}");
    assert!(joined["session_id"].as_u64().is_some());
    let mut b = env.spawn(&["group", "join", NODE, "web", "--data", "b:8080"]);
    let b_out = lines(&mut b);
    assert!(
        b_out
            .recv_timeout(LIMIT)
            .unwrap()
            .starts_with("joined group")
    );
    until_members(&watched, &["a:8080", "b:8080"]);

    let listed = env.run(&["--json", "group", "members", NODE, "web"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed: Value = serde_json::from_str(stdout(&listed).trim()).unwrap();
    assert_eq!(member_data(&listed), ["a:8080", "b:8080"]);
    let text = env.run(&["group", "members", NODE, "web"]);
    assert_eq!(stdout(&text).lines().count(), 2, "{}", stdout(&text));

    // An interrupted member leaves at once.
    signal(&a, Signal::SIGTERM);
    assert_eq!(wait_exit(&mut a).code(), Some(0));
    assert_eq!(next_json(&a_out)["event"], "left");
    until_members(&watched, &["b:8080"]);
    signal(&b, Signal::SIGINT);
    assert_eq!(wait_exit(&mut b).code(), Some(0));
    until_members(&watched, &[]);
    signal(&watch, Signal::SIGINT);
    assert_eq!(wait_exit(&mut watch).code(), Some(0));
}

#[test]
fn publish_and_subscribe_converge_on_the_newest_value() {
    let env = Env::new("publish");
    // Nothing published yet: exit code 3, and `published: false` without data.
    let none = env.run(&["--json", "subscribe", NODE, "config", "--once"]);
    assert_eq!(none.status.code(), Some(3), "{}", stderr(&none));
    let none: Value = serde_json::from_str(stdout(&none).trim()).unwrap();
    assert_eq!(none["event"], "value");
    assert_eq!(none["published"], false);
    assert!(none.get("data").is_none(), "{none}");

    let published = env.run(&["--json", "publish", NODE, "config", "replicas=3"]);
    assert!(published.status.success(), "{}", stderr(&published));
    let published: Value = serde_json::from_str(stdout(&published).trim()).unwrap();
    assert_eq!(published["action"], "published");

    let mut sub = env.spawn(&["--json", "subscribe", NODE, "config"]);
    let values = lines(&mut sub);
    assert_eq!(next_json(&values)["data"], "replicas=3");
    for n in 4..=6 {
        let value = format!("replicas={n}");
        assert!(
            env.run(&["publish", NODE, "config", &value])
                .status
                .success()
        );
    }
    loop {
        if next_json(&values)["data"] == "replicas=6" {
            break;
        }
    }
    signal(&sub, Signal::SIGINT);
    assert_eq!(wait_exit(&mut sub).code(), Some(0));

    let text = env.run(&["subscribe", NODE, "config", "--once"]);
    assert_eq!(stdout(&text).trim(), "replicas=6");
}

#[test]
fn fleet_commands_on_a_missing_node_give_a_one_line_error() {
    let env = Env::new("fleet-missing");
    for args in [
        &["publish", "/local/missing", "config", "v"][..],
        &["subscribe", "/local/missing", "config", "--once"],
        &["group", "members", "/local/missing", "web"],
        &["group", "join", "/local/missing", "web"],
        &["group", "watch", "/local/missing", "web"],
    ] {
        let out = env.run(args);
        assert_one_line_error(&out, 1, "/local/missing");
    }
    // A group over a semaphore of another kind is refused too.
    assert!(
        env.run(&["semaphore", "create", NODE, "pool", "--limit", "3"])
            .status
            .success()
    );
    let out = env.run(&["group", "join", NODE, "pool"]);
    assert_one_line_error(&out, 1, "pool");
}
