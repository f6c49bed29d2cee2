//! `ydb-coord ratelimit` against an emulator in the test process (on real time: the rates are
//! such that nothing waits long, and no assertion depends on timing): resources created,
//! described, altered with and without `--keep`, listed and dropped in text and JSON; `run`
//! passing the command's exit code and environment, or exiting 75 without running it;
//! `acquire`; one-line errors and usage exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

/// `ratelimit describe` as JSON.
fn describe(env: &Env, resource: &str) -> Value {
    let mut objects = json(env, &["ratelimit", "describe", NODE, resource]);
    assert_eq!(objects.len(), 1, "{objects:?}");
    objects.remove(0)
}

/// The resource paths `ratelimit list EXTRA` prints as JSON.
fn list(env: &Env, extra: &[&str]) -> Vec<String> {
    let args = [&["ratelimit", "list", NODE][..], extra].concat();
    json(env, &args)
        .iter()
        .map(|v| {
            assert_eq!(v["node"], NODE);
            v["resource"].as_str().unwrap().to_string()
        })
        .collect()
}

/// A resource of 100 units a second: its bucket starts with 20 units, plenty for one test.
fn fast(env: &Env, resource: &str) {
    ok(
        env,
        &["ratelimit", "create", NODE, resource, "--rate", "100"],
    );
}

/// A resource of 1 unit a second in a debt of 1000 units: nothing is granted for minutes.
fn used_up(env: &Env, resource: &str) {
    ok(env, &["ratelimit", "create", NODE, resource, "--rate", "1"]);
    let reported = json(
        env,
        &[
            "ratelimit",
            "acquire",
            NODE,
            resource,
            "--used",
            "--units",
            "1000",
        ],
    );
    assert_eq!(reported[0]["mode"], "used");
    assert_eq!(reported[0]["units"], 1000);
}

fn run_with(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut cmd = env.command(args);
    cmd.envs(vars.iter().copied());
    assert_cmd::Command::from_std(cmd)
        .timeout(LIMIT)
        .output()
        .unwrap()
}

#[test]
fn resources_are_created_described_altered_listed_and_dropped() {
    let env = Env::new("rl-admin");
    let created = json(
        &env,
        &[
            "ratelimit",
            "create",
            NODE,
            "api",
            "--rate",
            "100",
            "--prefetch",
            "0.5",
            "--burst",
            "2",
        ],
    );
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["ok"], true);
    assert_eq!(created[0]["action"], "created");
    assert_eq!(created[0]["resource"], "api");
    ok(
        &env,
        &[
            "ratelimit",
            "create",
            NODE,
            "api/tenant-a",
            "--rate",
            "20",
            "--replicated",
            "--report-interval",
            "250ms",
        ],
    );
    ok(&env, &["ratelimit", "create", NODE, "api/tenant-b"]);

    let api = describe(&env, "api");
    assert_eq!(api["node"], NODE);
    assert_eq!(api["resource"], "api");
    assert_eq!(api["max_units_per_second"], 100.0);
    assert_eq!(api["prefetch_coefficient"], 0.5);
    assert_eq!(api["max_burst_size_coefficient"], 2.0);
    assert_eq!(api["prefetch_watermark"], Value::Null);
    assert_eq!(api["immediately_fill_up_to"], Value::Null);
    assert_eq!(api["replicated_bucket"], false);
    assert_eq!(api["report_interval_ms"], Value::Null);
    let tenant = describe(&env, "api/tenant-a");
    assert_eq!(tenant["max_units_per_second"], 20.0);
    assert_eq!(tenant["replicated_bucket"], true);
    assert_eq!(tenant["report_interval_ms"], 250);
    let inheriting = describe(&env, "api/tenant-b");
    assert_eq!(inheriting["max_units_per_second"], Value::Null);
    // The text form is a table of as many rows as the settings, and the node and path.
    let text = ok(&env, &["ratelimit", "describe", NODE, "api"]);
    assert_eq!(text.lines().count(), 9, "{text}");

    // --keep changes only the flags given.
    ok(
        &env,
        &[
            "ratelimit",
            "alter",
            NODE,
            "api",
            "--keep",
            "--rate",
            "50",
            "--watermark",
            "0.5",
        ],
    );
    let api = describe(&env, "api");
    assert_eq!(api["max_units_per_second"], 50.0);
    assert_eq!(api["prefetch_watermark"], 0.5);
    assert_eq!(api["prefetch_coefficient"], 0.5);
    assert_eq!(api["max_burst_size_coefficient"], 2.0);
    // Without it, alter replaces them all.
    let altered = json(&env, &["ratelimit", "alter", NODE, "api", "--rate", "70"]);
    assert_eq!(altered[0]["action"], "altered");
    let api = describe(&env, "api");
    assert_eq!(api["max_units_per_second"], 70.0);
    assert_eq!(api["prefetch_coefficient"], Value::Null);
    assert_eq!(api["prefetch_watermark"], Value::Null);
    assert_eq!(api["max_burst_size_coefficient"], Value::Null);
    // A root left without a rate is refused before asking the server.
    let o = env.run(&["ratelimit", "alter", NODE, "api", "--prefetch", "1"]);
    assert_one_line_error(&o, 2, "--rate");
    assert_eq!(describe(&env, "api")["max_units_per_second"], 70.0);

    assert_eq!(list(&env, &[]), ["api"]);
    assert_eq!(
        list(&env, &["--recursive"]),
        ["api", "api/tenant-a", "api/tenant-b"]
    );
    assert_eq!(
        list(&env, &["api", "--recursive"]),
        ["api", "api/tenant-a", "api/tenant-b"]
    );
    let text = ok(&env, &["ratelimit", "list", NODE, "--recursive"]);
    assert_eq!(text.lines().count(), 3, "{text}");

    // A parent with children stays.
    let o = env.run(&["ratelimit", "drop", NODE, "api"]);
    assert_one_line_error(&o, 1, "api");
    ok(&env, &["ratelimit", "drop", NODE, "api/tenant-a"]);
    let dropped = json(&env, &["ratelimit", "drop", NODE, "api/tenant-b"]);
    assert_eq!(dropped[0]["action"], "dropped");
    ok(&env, &["ratelimit", "drop", NODE, "api"]);
    assert!(list(&env, &["--recursive"]).is_empty());
    let o = env.run(&["ratelimit", "describe", NODE, "api"]);
    assert_one_line_error(
        &o,
        1,
        r#"rate-limiter resource "api" not found on /local/app"#,
    );
}

#[test]
fn run_passes_the_exit_code_and_the_environment() {
    let env = Env::new("rl-run");
    fast(&env, "jobs");
    let script = "echo \"$YDB_COORD_RESOURCE $YDB_COORD_UNITS $FROM_PARENT\"; exit 7";
    let o = run_with(
        &env,
        &[
            "ratelimit",
            "run",
            NODE,
            "jobs",
            "--units",
            "2",
            "--",
            "sh",
            "-c",
            script,
        ],
        &[("FROM_PARENT", "inherited")],
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(stdout(&o), "jobs 2 inherited\n");

    // With --json the events go to stderr; stdout stays the command's.
    let o = env.run(&[
        "--json",
        "ratelimit",
        "run",
        NODE,
        "jobs",
        "--wait",
        "5s",
        "--",
        "echo",
        "out",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "out\n");
    let events = stderr_json(&o);
    assert_eq!(events.len(), 2, "{}", stderr(&o));
    assert_eq!(events[0]["event"], "acquired");
    assert_eq!(events[0]["resource"], "jobs");
    assert_eq!(events[0]["units"], 1);
    assert_eq!(events[0]["mode"], "required");
    assert_eq!(events[1]["event"], "exited");
    assert_eq!(events[1]["code"], 0);

    // --used runs the command at once, even on a resource in debt.
    used_up(&env, "debt");
    let o = env.run(&[
        "ratelimit",
        "run",
        NODE,
        "debt",
        "--used",
        "--units",
        "5",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));

    let o = env.run(&[
        "ratelimit",
        "run",
        NODE,
        "jobs",
        "--",
        "no-such-command-ydb-coord",
    ]);
    assert_one_line_error(&o, 127, "no-such-command-ydb-coord");
}

#[test]
fn units_not_available_in_time_exit_75_without_running_the_command() {
    let env = Env::new("rl-busy");
    used_up(&env, "slow");
    let marker = env.path("ran");
    let touch = format!("touch {marker}");
    let o = env.run(&[
        "ratelimit",
        "run",
        NODE,
        "slow",
        "--wait",
        "300ms",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_one_line_error(&o, NOT_ACQUIRED, "slow");
    let o = env.run(&[
        "ratelimit",
        "run",
        NODE,
        "slow",
        "--no-wait",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_one_line_error(&o, NOT_ACQUIRED, "--no-wait");
    let o = env.run(&["ratelimit", "acquire", NODE, "slow", "--wait", "200ms"]);
    assert_one_line_error(&o, NOT_ACQUIRED, "slow");

    // Waiting as long as it takes (the default) ends with a signal, the command not run.
    let mut waiting = env.spawn(&["ratelimit", "run", NODE, "slow", "--", "sh", "-c", &touch]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(waiting.try_wait().unwrap().is_none(), "it did not wait");
    signal(&waiting, Signal::SIGTERM);
    let status = wait_exit(&mut waiting);
    assert!(!status.success());
    assert!(!Path::new(&marker).exists(), "the command ran");
}

#[test]
fn acquire_no_wait_takes_available_units_or_exits_75() {
    let env = Env::new("rl-acquire");
    fast(&env, "api");
    let o = env.run(&["ratelimit", "acquire", NODE, "api", "--no-wait"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let granted = json(
        &env,
        &[
            "ratelimit",
            "acquire",
            NODE,
            "api",
            "--no-wait",
            "--units",
            "3",
        ],
    );
    assert_eq!(granted.len(), 1);
    assert_eq!(granted[0]["event"], "acquired");
    assert_eq!(granted[0]["units"], 3);
    ok(&env, &["ratelimit", "acquire", NODE, "api", "--wait", "5s"]);

    used_up(&env, "slow");
    let o = env.run(&["ratelimit", "acquire", NODE, "slow", "--no-wait"]);
    assert_one_line_error(&o, NOT_ACQUIRED, "--no-wait");
    assert!(stdout(&o).is_empty());
}

#[test]
fn bad_input_gives_a_one_line_error() {
    let env = Env::new("rl-bad");
    let marker = env.path("ran");
    let touch = format!("touch {marker}");
    // A missing resource or node: exit 1.
    let o = env.run(&["ratelimit", "describe", NODE, "nope"]);
    assert_one_line_error(&o, 1, r#"rate-limiter resource "nope" not found"#);
    let o = env.run(&["ratelimit", "acquire", NODE, "nope", "--no-wait"]);
    assert_one_line_error(&o, 1, r#"rate-limiter resource "nope" not found"#);
    let o = env.run(&["ratelimit", "run", NODE, "nope", "--", "sh", "-c", &touch]);
    assert_one_line_error(&o, 1, "not found");
    assert!(!Path::new(&marker).exists(), "the command ran");
    let o = env.run(&["ratelimit", "alter", NODE, "nope", "--keep", "--rate", "1"]);
    assert_one_line_error(&o, 1, "not found");
    let o = env.run(&["ratelimit", "drop", NODE, "nope"]);
    assert_one_line_error(&o, 1, "not found");
    let o = env.run(&["ratelimit", "describe", "/local/nope", "api"]);
    assert_one_line_error(&o, 1, "/local/nope not found");
    fast(&env, "api");
    let o = env.run(&["ratelimit", "create", NODE, "api", "--rate", "5"]);
    assert_one_line_error(&o, 1, "already exists");
    let o = env.run(&["ratelimit", "describe", NODE, "/api"]);
    assert_one_line_error(&o, 1, "not a resource path");

    // Bad rates, settings and durations: usage errors.
    for rate in ["abc", "0", "-5", "inf", "NaN"] {
        let o = env.run(&["ratelimit", "create", NODE, "x", "--rate", rate]);
        assert_one_line_error(&o, 2, "--rate");
    }
    let usage: [(&[&str], &str); 10] = [
        (&["create", NODE, "x"], "--rate"),
        (
            &["create", NODE, "x", "--rate", "1", "--watermark", "2"],
            "--watermark",
        ),
        (
            &[
                "create",
                NODE,
                "x",
                "--rate",
                "1",
                "--report-interval",
                "1s",
            ],
            "--replicated",
        ),
        (
            &["run", NODE, "api", "--wait", "soon", "--", "true"],
            "invalid duration",
        ),
        (&["acquire", NODE, "api", "--wait", "10"], "needs a unit"),
        (&["acquire", NODE, "api", "--units", "0"], "--units"),
        (&["acquire", NODE, "api", "--used", "--no-wait"], "--used"),
        (&["run", NODE, "api", "echo", "hi"], "missing `--`"),
        (&["run", NODE, "api"], "missing the command"),
        (&["acquire", NODE], "RESOURCE"),
    ];
    for (args, says) in usage {
        let o = env.run(&[&["ratelimit"][..], args].concat());
        assert_one_line_error(&o, 2, says);
    }
    assert_eq!(list(&env, &["--recursive"]), ["api"]);
}
