//! The rate limiter's rules, without a runtime: control-plane statuses (§4, §6), and the
//! timings of §7.4 and §11 on a virtual clock in milliseconds. A `§` here is a section of
//! `emulator/SPEC-rate-limiter.md`.

use super::*;
use ydb_coordination_proto::rate_limiter::ReplicatedBucketSettings;

/// A quoter and a clock: `ms` is the time since the start.
struct Rig {
    quoter: Quoter,
    start: Instant,
    next_call: CallId,
    /// Answers collected by `run_until`, with the ms they came at.
    answers: Vec<(CallId, StatusCode, u64)>,
}

fn hdrr(rate: f64) -> HierarchicalDrrSettings {
    HierarchicalDrrSettings {
        max_units_per_second: rate,
        ..HierarchicalDrrSettings::default()
    }
}

fn res(path: &str, settings: HierarchicalDrrSettings) -> Resource {
    Resource {
        resource_path: path.to_string(),
        r#type: Some(resource::Type::HierarchicalDrr(settings)),
        metering_config: None,
    }
}

fn status<T>(r: Result<T, Rejection>) -> StatusCode {
    match r {
        Ok(_) => StatusCode::Success,
        Err(e) => e.status,
    }
}

fn wait(ms: u64) -> AcquireTimeouts {
    AcquireTimeouts {
        operation_timeout: Duration::from_millis(ms),
        cancel_after: Duration::ZERO,
    }
}

const HOUR: u64 = 3_600_000;

impl Rig {
    fn new() -> Self {
        Rig {
            quoter: Quoter::default(),
            start: Instant::from_std(std::time::Instant::now()),
            next_call: 0,
            answers: Vec::new(),
        }
    }

    fn with(resources: &[(&str, HierarchicalDrrSettings)]) -> Self {
        let mut rig = Rig::new();
        for (path, settings) in resources {
            rig.quoter.create(&res(path, *settings)).unwrap();
        }
        rig
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// Runs the clock to `ms`, collecting answers with their times.
    fn run_until(&mut self, ms: u64) {
        self.run_until_answered(ms, None);
    }

    /// Runs the clock to `ms`, or only until `call` is answered.
    fn run_until_answered(&mut self, ms: u64, call: Option<CallId>) {
        let until = self.at(ms);
        while let Some(next) = self.quoter.next_deadline().filter(|t| *t <= until) {
            let at = next.duration_since(self.start).as_millis() as u64;
            for (answered, status) in self.quoter.advance(next) {
                self.answers.push((answered, status, at));
            }
            if call.is_some_and(|c| self.answers.iter().any(|a| a.0 == c)) {
                return;
            }
        }
    }

    /// An acquire at `ms`; returns the call id and what it got at once.
    fn acquire(
        &mut self,
        ms: u64,
        path: &str,
        units: Units,
        t: AcquireTimeouts,
    ) -> (CallId, Acquired) {
        self.run_until(ms);
        self.next_call += 1;
        let call = self.next_call;
        (call, self.quoter.acquire(self.at(ms), call, path, units, t))
    }

    /// A `required` acquire at `ms` with timeout `t_ms`, waited for: its status and the ms
    /// it was answered at.
    fn required(&mut self, ms: u64, path: &str, amount: u64, t_ms: u64) -> (StatusCode, u64) {
        let (call, now) = self.acquire(ms, path, Units::Required(amount), wait(t_ms));
        match now {
            Acquired::Now(status) => (status, ms),
            Acquired::Waiting => {
                self.run_until_answered(ms + t_ms, Some(call));
                let &(_, status, at) = self.answers.iter().find(|a| a.0 == call).unwrap();
                (status, at)
            }
        }
    }

    /// `n` sequential one-unit acquires from `ms` on, each after the previous answer: the
    /// answer times.
    fn sequential(&mut self, mut ms: u64, path: &str, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let (status, at) = self.required(ms, path, 1, 10_000);
                assert_eq!(status, StatusCode::Success);
                ms = at;
                at
            })
            .collect()
    }
}

#[test]
fn paths_must_be_canonical_and_of_allowed_characters() {
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    let q = &mut rig.quoter;
    // §11 #2, #6, #16.
    assert_eq!(
        status(q.create(&res("/res/res2", hdrr(1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("a/b", hdrr(1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res(":-)", hdrr(1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("", hdrr(1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("a b", hdrr(1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("res/", hdrr(1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("Res.1:_-#", hdrr(1.0)))),
        StatusCode::Success
    );
    assert_eq!(status(q.drop_resource("no_resource")), StatusCode::NotFound);
    assert_eq!(
        status(q.drop_resource("not//canonized/resource/path")),
        StatusCode::BadRequest
    );
    assert_eq!(status(q.drop_resource("")), StatusCode::BadRequest);
    assert_eq!(status(q.drop_resource("a b")), StatusCode::BadRequest);
    assert_eq!(status(q.describe("")), StatusCode::NotFound);
    assert_eq!(status(q.describe("a b")), StatusCode::NotFound);
    assert_eq!(status(q.describe("/res")), StatusCode::BadRequest);
    assert_eq!(status(q.list("res/", false)), StatusCode::BadRequest);
}

#[test]
fn create_twice_is_already_exists_only_with_the_same_settings() {
    // §11 #17.
    let mut q = Quoter::default();
    assert_eq!(
        status(q.create(&res("RootQuoter", hdrr(42.0)))),
        StatusCode::Success
    );
    assert_eq!(
        status(q.create(&res("RootQuoter", hdrr(42.0)))),
        StatusCode::AlreadyExists
    );
    assert_eq!(
        status(q.create(&res("RootQuoter", hdrr(100500.0)))),
        StatusCode::BadRequest
    );
    // NaN burst: byte-equal, so the same settings.
    let nan = HierarchicalDrrSettings {
        max_burst_size_coefficient: f64::NAN,
        ..hdrr(1.0)
    };
    assert_eq!(status(q.create(&res("n", nan))), StatusCode::Success);
    assert_eq!(status(q.create(&res("n", nan))), StatusCode::AlreadyExists);
}

#[test]
fn settings_are_validated_as_the_tablet_does() {
    // §11 #18 and the §3 rules.
    let mut q = Quoter::default();
    assert_eq!(
        status(q.create(&res("root", hdrr(0.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("root", hdrr(-100.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("root", hdrr(f64::INFINITY)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.create(&res("root", hdrr(1.0)))),
        StatusCode::Success
    );
    assert_eq!(
        status(q.create(&res("root/child", hdrr(0.0)))),
        StatusCode::Success
    );
    let with = |f: fn(&mut HierarchicalDrrSettings)| {
        let mut s = hdrr(1.0);
        f(&mut s);
        res("root/other", s)
    };
    for bad in [
        with(|s| s.prefetch_coefficient = f64::NAN),
        with(|s| s.prefetch_watermark = 1.5),
        with(|s| s.prefetch_watermark = -0.1),
        with(|s| s.immediately_fill_up_to = Some(0.0)),
        with(|s| {
            s.leaf_behavior = Some(hierarchical_drr_settings::LeafBehavior::ReplicatedBucket(
                ReplicatedBucketSettings {
                    report_interval_ms: Some(0),
                },
            ))
        }),
    ] {
        assert_eq!(status(q.create(&bad)), StatusCode::BadRequest);
    }
    let fine = with(|s| {
        s.prefetch_coefficient = -1.0;
        s.max_burst_size_coefficient = -3.0;
        s.immediately_fill_up_to = Some(-5.0);
    });
    assert_eq!(status(q.create(&fine)), StatusCode::Success);
    let untyped = Resource {
        resource_path: "root/untyped".to_string(),
        ..Resource::default()
    };
    assert_eq!(status(q.create(&untyped)), StatusCode::BadRequest);
}

#[test]
fn metering_is_stored_and_checked() {
    use std::collections::HashMap;
    use ydb_grpc::google_proto_workaround::protobuf::{Struct, Value, value::Kind};
    let metric = |key: &str, kind: Kind| metering_config::Metric {
        enabled: true,
        metric_fields: Some(Struct {
            fields: [(key.to_string(), Value { kind: Some(kind) })].into(),
        }),
        ..metering_config::Metric::default()
    };
    let metered = |config: MeteringConfig| Resource {
        metering_config: Some(config),
        ..res("m", hdrr(1.0))
    };
    let mut q = Quoter::default();
    let bad = [
        MeteringConfig {
            on_demand: Some(metric("nope", Kind::StringValue("x".into()))),
            ..MeteringConfig::default()
        },
        MeteringConfig {
            provisioned: Some(metric("cloud_id", Kind::NumberValue(1.0))),
            ..MeteringConfig::default()
        },
        MeteringConfig {
            collect_period_sec: 3601,
            ..MeteringConfig::default()
        },
        MeteringConfig {
            overshoot_coefficient: 0.5,
            ..MeteringConfig::default()
        },
        MeteringConfig {
            provisioned_coefficient: -1.0,
            ..MeteringConfig::default()
        },
    ];
    for config in bad {
        assert_eq!(status(q.create(&metered(config))), StatusCode::BadRequest);
    }
    let good = MeteringConfig {
        enabled: true,
        overshoot_coefficient: 1.1,
        overshoot: Some(metric("cloud_id", Kind::StringValue("c".into()))),
        ..MeteringConfig::default()
    };
    q.create(&metered(good.clone())).unwrap();
    let described = q.describe("m").unwrap().metering_config.unwrap();
    // Everything but the metrics' `metric_fields` comes back as sent.
    let fields_of = |metric: &Option<metering_config::Metric>| {
        metric
            .as_ref()
            .map(|m| m.metric_fields.clone().unwrap_or_default().fields)
    };
    let strip = |mut config: MeteringConfig| {
        for metric in [
            &mut config.provisioned,
            &mut config.on_demand,
            &mut config.overshoot,
        ]
        .into_iter()
        .flatten()
        {
            metric.metric_fields = None;
        }
        config
    };
    assert_eq!(strip(described.clone()), strip(good));
    // SPEC-rate-limiter.md §13 C5: every known key, empty when unset; only stored metrics.
    let expected: HashMap<String, Value> = METRIC_KEYS
        .iter()
        .map(|key| {
            let value = if *key == "cloud_id" { "c" } else { "" };
            let kind = Some(Kind::StringValue(value.to_string()));
            (key.to_string(), Value { kind })
        })
        .collect();
    assert_eq!(fields_of(&described.overshoot), Some(expected));
    assert_eq!(fields_of(&described.provisioned), None);
    assert_eq!(fields_of(&described.on_demand), None);

    // A metric sent without `metric_fields` is described with all of them, empty.
    let bare = MeteringConfig {
        provisioned: Some(metering_config::Metric::default()),
        ..MeteringConfig::default()
    };
    q.alter(&metered(bare)).unwrap();
    let described = q.describe("m").unwrap().metering_config.unwrap();
    let empty = fields_of(&described.provisioned).unwrap();
    assert_eq!(empty.len(), METRIC_KEYS.len());
    assert!(
        empty
            .values()
            .all(|v| v.kind == Some(Kind::StringValue(String::new())))
    );
}

#[test]
fn alter_replaces_all_settings() {
    // §11 #3, #4, #19, #20.
    let mut q = Quoter::default();
    let burst = HierarchicalDrrSettings {
        max_burst_size_coefficient: 2.0,
        ..hdrr(100500.0)
    };
    q.create(&res("res", burst)).unwrap();
    assert_eq!(
        status(q.alter(&res("res", hdrr(-1.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(q.describe("res").unwrap(), res("res", burst));
    q.alter(&res("res", hdrr(100.0))).unwrap();
    assert_eq!(q.describe("res").unwrap(), res("res", hdrr(100.0)));
    assert_eq!(
        status(q.alter(&res("res", hdrr(0.0)))),
        StatusCode::BadRequest
    );
    assert_eq!(
        status(q.alter(&res("Root/P", hdrr(1.0)))),
        StatusCode::NotFound
    );
    assert_eq!(status(q.alter(&res("", hdrr(1.0)))), StatusCode::BadRequest);
    q.create(&res("res/q", hdrr(100.0))).unwrap();
    q.alter(&res("res/q", hdrr(5.0))).unwrap();
    q.alter(&res("res", hdrr(5.0))).unwrap();
    assert_eq!(q.describe("res/q").unwrap(), res("res/q", hdrr(5.0)));
}

#[test]
fn describe_echoes_stored_not_effective_settings() {
    // §11 #7, #24.
    let q = Rig::with(&[("resource", hdrr(100.0)), ("resource/child", hdrr(200.0))]).quoter;
    assert_eq!(
        q.describe("resource/child").unwrap(),
        res("resource/child", hdrr(200.0))
    );
    assert_eq!(q.effective("resource/child").rate, 100.0);
    let q = Rig::with(&[("r", hdrr(7.0)), ("r/c", hdrr(0.0))]).quoter;
    assert_eq!(q.describe("r/c").unwrap(), res("r/c", hdrr(0.0)));
    assert_eq!(q.effective("r/c").rate, 7.0);
}

#[test]
fn drop_refuses_resources_with_children() {
    // §11 #5, #21, #22.
    let mut q = Rig::with(&[
        ("Root", hdrr(100.0)),
        ("Root/Q", hdrr(0.0)),
        ("Root/Folder", hdrr(0.0)),
        ("Root/Folder/Q1", hdrr(0.0)),
    ])
    .quoter;
    assert_eq!(
        status(q.drop_resource("Root/Folder")),
        StatusCode::BadRequest
    );
    q.drop_resource("Root/Folder/Q1").unwrap();
    assert_eq!(q.list("", true).unwrap().len(), 3);
    q.drop_resource("Root/Folder").unwrap();
    assert_eq!(q.list("", true).unwrap(), ["Root", "Root/Q"]);
    // Dropped and created again, as new.
    q.create(&res("Root/Folder", hdrr(3.0))).unwrap();
    assert_eq!(
        q.describe("Root/Folder").unwrap(),
        res("Root/Folder", hdrr(3.0))
    );
}

#[test]
fn list_is_recursive_or_the_path_alone() {
    // §11 #8-#11, #23.
    let q = Rig::with(&[
        ("parent1", hdrr(100500.0)),
        ("parent2", hdrr(100500.0)),
        ("parent1/child1", hdrr(0.0)),
        ("parent1/child2", hdrr(0.0)),
        ("parent2/child", hdrr(0.0)),
    ])
    .quoter;
    assert_eq!(status(q.list("no_resource", false)), StatusCode::NotFound);
    assert_eq!(status(q.list("no_resource", true)), StatusCode::NotFound);
    assert_eq!(q.list("", true).unwrap().len(), 5);
    assert_eq!(q.list("", false).unwrap(), ["parent1", "parent2"]);
    assert_eq!(
        q.list("parent1", true).unwrap(),
        ["parent1", "parent1/child1", "parent1/child2"]
    );
    assert_eq!(q.list("parent1", false).unwrap(), ["parent1"]);
}

#[test]
fn sequential_acquires_at_ten_per_second_finish_at_0_0_then_every_100_ms() {
    // §7.4 table, §11 #39.
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    assert_eq!(rig.sequential(0, "res", 6), [0, 0, 100, 200, 300, 400]);
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    // Paced grants land 2 ms early (§13 C3): YDB's `LastAllocated = max(now - 2 ms, fulfil)`.
    assert_eq!(rig.sequential(0, "res", 4), [0, 998, 1998, 2998]);
    let mut rig = Rig::with(&[("res", hdrr(100.0))]);
    let times = rig.sequential(0, "res", 40);
    assert!(times[..20].iter().all(|t| *t == 0), "{times:?}");
    assert_eq!(&times[20..30], [100; 10]);
    assert_eq!(&times[30..40], [200; 10]);
}

#[test]
fn after_a_long_pause_the_bucket_holds_its_prefetch_and_no_more() {
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    rig.sequential(0, "res", 5);
    assert_eq!(
        rig.sequential(10_000, "res", 4),
        [10_000, 10_000, 10_100, 10_200]
    );
}

#[test]
fn children_share_the_parents_rate() {
    // §11 #25-#27, as throughput: sequential one-unit acquires on two children of a root of
    // 10/s run at 5/s each; a child capped at 3/s under 100/s runs at 3/s.
    let mut rig = Rig::with(&[
        ("root", hdrr(10.0)),
        ("root/a", hdrr(0.0)),
        ("root/b", hdrr(0.0)),
    ]);
    let mut calls = BTreeMap::new();
    let mut done = BTreeMap::from([("root/a", 0u32), ("root/b", 0u32)]);
    // Each child keeps one acquire waiting at all times, for 10 s.
    fn wait_one(
        rig: &mut Rig,
        ms: u64,
        path: &'static str,
        calls: &mut BTreeMap<CallId, &'static str>,
        done: &mut BTreeMap<&'static str, u32>,
    ) {
        loop {
            let (call, got) = rig.acquire(ms, path, Units::Required(1), wait(HOUR));
            if got == Acquired::Waiting {
                calls.insert(call, path);
                return;
            }
            *done.get_mut(path).unwrap() += 1;
        }
    }
    wait_one(&mut rig, 0, "root/a", &mut calls, &mut done);
    wait_one(&mut rig, 0, "root/b", &mut calls, &mut done);
    for ms in (100..=10_000).step_by(100) {
        rig.run_until(ms);
        for (call, status, _) in std::mem::take(&mut rig.answers) {
            assert_eq!(status, StatusCode::Success);
            let path = calls.remove(&call).unwrap();
            *done.get_mut(path).unwrap() += 1;
            wait_one(&mut rig, ms, path, &mut calls, &mut done);
        }
    }
    // 0.2 s of prefetch each, then 5/s each.
    for path in ["root/a", "root/b"] {
        let n = done[path];
        assert!((50..=53).contains(&n), "{path}: {n}");
    }

    let mut rig = Rig::with(&[("root", hdrr(100.0)), ("root/res", hdrr(3.0))]);
    let times = rig.sequential(0, "root/res", 31);
    // 0.6 units of prefetch, then 0.3 per tick: the 31st unit after ≈ 10 s.
    let last = *times.last().unwrap();
    assert!((9_800..=10_200).contains(&last), "{times:?}");
}

#[test]
fn required_over_the_bucket_is_granted_into_debt_and_waited_off() {
    // §11 #12, #13, #15.
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    assert_eq!(
        rig.required(0, "res", 10_000, 200),
        (StatusCode::Success, 0)
    );
    for i in 0..3 {
        let ms = 200 + i * 400;
        assert_eq!(
            rig.required(ms, "res", 1, 200),
            (StatusCode::Timeout, ms + 200)
        );
        let (_, used) = rig.acquire(ms + 200, "res", Units::Used(1), wait(200));
        assert_eq!(used, Acquired::Now(StatusCode::Success));
    }
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    let (_, used) = rig.acquire(0, "res", Units::Used(10_000), wait(200));
    assert_eq!(used, Acquired::Now(StatusCode::Success));
    assert_eq!(rig.required(0, "res", 1, 200), (StatusCode::Timeout, 200));
    // The debt of 10 units at 10/s is waited off in about a second.
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    rig.acquire(0, "res", Units::Used(12), wait(0));
    let (status, at) = rig.required(0, "res", 1, 10_000);
    assert_eq!(status, StatusCode::Success);
    assert!((1_000..=1_200).contains(&at), "{at}");
}

#[test]
fn big_requests_wait_for_the_pace() {
    // §11 #31-#35 (UT-KQ).
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    rig.required(0, "res", 1, HOUR);
    assert_eq!(rig.required(0, "res", 30, HOUR), (StatusCode::Success, 500));
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    rig.required(0, "res", 1, HOUR);
    let (status, at) = rig.required(0, "res", 20, 3_000);
    assert_eq!(status, StatusCode::Success);
    assert!((300..=400).contains(&at), "{at}");
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    rig.required(0, "res", 1, HOUR);
    assert_eq!(rig.required(0, "res", 40, 500), (StatusCode::Timeout, 500));
    let prefetch = HierarchicalDrrSettings {
        prefetch_coefficient: 1000.0,
        ..hdrr(100.0)
    };
    let mut rig = Rig::with(&[("root", prefetch), ("root/leaf", hdrr(0.0))]);
    assert_eq!(rig.required(0, "root/leaf", 1, 500).0, StatusCode::Success);
    assert_eq!(
        rig.required(0, "root/leaf", 90_000, 500).0,
        StatusCode::Success
    );
    let (status, at) = rig.required(0, "root/leaf", 20_000, 500);
    assert_eq!(status, StatusCode::Success);
    assert_eq!(rig.required(at, "root/leaf", 1, 500).0, StatusCode::Timeout);
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    assert_eq!(rig.required(0, "res", 12, HOUR).0, StatusCode::Success);
    assert_eq!(rig.required(1_000, "res", 12, HOUR).0, StatusCode::Success);
}

#[test]
fn chunks_are_paced() {
    // §7.4, §13 C3: 5-unit requests at 10/s are granted at 0, 0.5, 1.0, …, each 2 ms early.
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    let mut ms = 0;
    let times: Vec<u64> = (0..4)
        .map(|_| {
            let (status, at) = rig.required(ms, "res", 5, 10_000);
            assert_eq!(status, StatusCode::Success);
            ms = at;
            at
        })
        .collect();
    assert_eq!(times, [0, 498, 998, 1_498]);
}

#[test]
fn without_a_timeout_an_acquire_does_not_wait() {
    // §8.1: no operation_timeout: TIMEOUT at once; cancel_after alone changes nothing.
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    let (_, first) = rig.acquire(0, "res", Units::Required(1), AcquireTimeouts::default());
    assert_eq!(first, Acquired::Now(StatusCode::Success));
    let cancel_only = AcquireTimeouts {
        operation_timeout: Duration::ZERO,
        cancel_after: Duration::from_secs(5),
    };
    let (_, second) = rig.acquire(0, "res", Units::Required(1), cancel_only);
    assert_eq!(second, Acquired::Now(StatusCode::Timeout));
    assert_eq!(
        rig.quoter.next_deadline().map(|t| t > rig.at(0)),
        Some(true)
    );
}

#[test]
fn cancel_after_below_the_timeout_answers_cancelled() {
    // §11 #14.
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    rig.required(0, "res", 10_000, 200);
    let timeouts = AcquireTimeouts {
        operation_timeout: Duration::from_millis(HOUR),
        cancel_after: Duration::from_millis(200),
    };
    let (call, got) = rig.acquire(0, "res", Units::Required(1), timeouts);
    assert_eq!(got, Acquired::Waiting);
    rig.run_until(1_000);
    assert_eq!(rig.answers, [(call, StatusCode::Cancelled, 200)]);
    // cancel_after not below the timeout: TIMEOUT at the timeout.
    let timeouts = AcquireTimeouts {
        operation_timeout: Duration::from_millis(300),
        cancel_after: Duration::from_millis(300),
    };
    let (call, _) = rig.acquire(1_000, "res", Units::Required(1), timeouts);
    rig.run_until(2_000);
    assert_eq!(rig.answers[1], (call, StatusCode::Timeout, 1_300));
}

#[test]
fn the_queue_is_fifo_and_a_big_head_blocks_the_rest() {
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    rig.required(0, "res", 2, HOUR);
    let (big, _) = rig.acquire(0, "res", Units::Required(10), wait(HOUR));
    let (small, got) = rig.acquire(0, "res", Units::Required(1), wait(HOUR));
    assert_eq!(got, Acquired::Waiting);
    rig.run_until(5_000);
    let order: Vec<CallId> = rig.answers.iter().map(|a| a.0).collect();
    assert_eq!(order, [big, small]);
    // `used` jumps the queue.
    let (_, used) = rig.acquire(5_000, "res", Units::Used(1), wait(0));
    assert_eq!(used, Acquired::Now(StatusCode::Success));
}

#[test]
fn unknown_resources_and_dropped_ones_answer_bad_request() {
    // §11 #29, #36.
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    let (_, got) = rig.acquire(0, "nope", Units::Required(1), wait(HOUR));
    assert_eq!(got, Acquired::Now(StatusCode::BadRequest));
    let (_, got) = rig.acquire(0, "", Units::Used(1), wait(0));
    assert_eq!(got, Acquired::Now(StatusCode::BadRequest));
    rig.required(0, "res", 1, HOUR);
    let (call, got) = rig.acquire(0, "res", Units::Required(100_500), wait(HOUR));
    assert_eq!(got, Acquired::Waiting);
    assert_eq!(
        rig.quoter.drop_resource("res").unwrap(),
        [(call, StatusCode::BadRequest)]
    );
    // Nothing is left to fire for it.
    rig.run_until(HOUR);
    assert!(rig.answers.is_empty());
    assert_eq!(rig.quoter.next_deadline(), None);
}

#[test]
fn alter_applies_the_new_rate_from_the_next_tick() {
    // §11 #28: a saturating consumer at 100/s, then 400/s.
    let mut rig = Rig::with(&[("root", hdrr(100.0))]);
    let before = rig.sequential(0, "root", 120);
    assert_eq!(*before.last().unwrap(), 1_000);
    rig.quoter.alter(&res("root", hdrr(400.0))).unwrap();
    let after = rig.sequential(1_000, "root", 400);
    let last = *after.last().unwrap();
    assert!((1_900..=2_100).contains(&last), "{last}");
}

#[test]
fn required_zero_waits_out_debt_and_used_zero_never_waits() {
    // §4.5.
    let mut rig = Rig::with(&[("res", hdrr(10.0))]);
    assert_eq!(rig.required(0, "res", 0, 100), (StatusCode::Success, 0));
    rig.acquire(0, "res", Units::Used(5), wait(0));
    assert_eq!(rig.required(0, "res", 0, 100), (StatusCode::Timeout, 100));
    let (_, used) = rig.acquire(100, "res", Units::Used(0), wait(0));
    assert_eq!(used, Acquired::Now(StatusCode::Success));
}

#[test]
fn a_dropped_node_answers_its_waiters() {
    let mut rig = Rig::with(&[("res", hdrr(1.0))]);
    rig.required(0, "res", 5, HOUR);
    let (call, _) = rig.acquire(0, "res", Units::Required(1), wait(HOUR));
    assert_eq!(rig.quoter.shutdown(), [(call, StatusCode::BadRequest)]);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Required {
            child: bool,
            amount: u64,
            timeout_ms: u64,
            cancel_ms: u64,
        },
        Used {
            child: bool,
            amount: u64,
        },
        Pause(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<bool>(), 0u64..30, 0u64..3_000, 0u64..3_000).prop_map(
                |(child, amount, timeout_ms, cancel_ms)| Op::Required {
                    child,
                    amount,
                    timeout_ms,
                    cancel_ms
                }
            ),
            (any::<bool>(), 0u64..30).prop_map(|(child, amount)| Op::Used { child, amount }),
            (0u64..700).prop_map(Op::Pause),
        ]
    }

    proptest! {
        /// Whatever the calls, every waiting acquire is answered exactly once, by its
        /// deadline; and the `required` units granted never exceed the two buckets, the root's
        /// rate over the time passed and one overdraft per bucket.
        #[test]
        fn every_waiter_is_answered_once_and_the_rate_holds(
            rate in 1u32..50,
            child_rate in 0u32..60,
            ops in prop::collection::vec(op(), 1..60),
        ) {
            let rate = f64::from(rate);
            let mut rig = Rig::with(&[("r", hdrr(rate)), ("r/c", hdrr(f64::from(child_rate)))]);
            let mut ms = 0;
            let mut waiting = BTreeMap::new();
            let mut spent = 0u64;
            let mut biggest = 0u64;
            for op in ops {
                match op {
                    Op::Pause(d) => ms += d,
                    Op::Used { child, amount } => {
                        let path = if child { "r/c" } else { "r" };
                        let (_, got) = rig.acquire(ms, path, Units::Used(amount), wait(0));
                        // Reports of use are never refused, nor bounded.
                        prop_assert_eq!(got, Acquired::Now(StatusCode::Success));
                    }
                    Op::Required { child, amount, timeout_ms, cancel_ms } => {
                        let path = if child { "r/c" } else { "r" };
                        let t = AcquireTimeouts {
                            operation_timeout: Duration::from_millis(timeout_ms),
                            cancel_after: Duration::from_millis(cancel_ms),
                        };
                        biggest = biggest.max(amount);
                        match rig.acquire(ms, path, Units::Required(amount), t) {
                            (_, Acquired::Now(StatusCode::Success)) => spent += amount,
                            (_, Acquired::Now(_)) => {}
                            (call, Acquired::Waiting) => {
                                let (wait, _) = t.deadline();
                                waiting.insert(call, (amount, ms + wait.as_millis() as u64));
                            }
                        }
                    }
                }
            }
            rig.run_until(ms + 3_000);
            let mut answered = BTreeSet::new();
            for &(call, status, at) in &rig.answers {
                prop_assert!(answered.insert(call), "answered twice: {}", call);
                let (amount, deadline) = waiting[&call];
                prop_assert!(at <= deadline, "answered at {} after its deadline {}", at, deadline);
                if status == StatusCode::Success {
                    spent += amount;
                }
            }
            prop_assert_eq!(answered.len(), waiting.len());
            prop_assert_eq!(rig.quoter.next_deadline().is_some(), rig.quoter.any_consuming());
            // Both buckets' prefetch, the root's quantum per tick since the start, one overdraft.
            let ticks = (ms + 3_000) / 100 + 1;
            let bound = 2.0 * rate * DEFAULT_PREFETCH + rate / 10.0 * ticks as f64 + 2.0 * biggest as f64;
            prop_assert!(spent as f64 <= bound + 1e-6, "spent {} > {}", spent, bound);
        }
    }
}

#[test]
fn extreme_amounts_and_rates_do_not_break_the_clock() {
    let mut rig = Rig::with(&[("r", hdrr(f64::MAX)), ("r/slow", hdrr(1e-300))]);
    for path in ["r", "r/slow"] {
        for units in [
            Units::Required(u64::MAX),
            Units::Used(u64::MAX),
            Units::Required(u64::MAX),
        ] {
            let t = AcquireTimeouts {
                operation_timeout: Duration::from_secs(61),
                cancel_after: Duration::from_secs(60),
            };
            rig.acquire(0, path, units, t);
        }
    }
    rig.run_until(120_000);
    assert!(rig.answers.iter().all(|a| a.1 == StatusCode::Cancelled));
    assert_eq!(rig.answers.len(), 2);
    assert!(rig.answers.iter().all(|a| a.2 == 60_000));
}
