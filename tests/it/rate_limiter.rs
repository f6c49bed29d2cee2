//! The rate-limiter client against the emulator, on paused time: resources created, altered,
//! listed, described and dropped with their typed errors; acquires that wait, time out
//! without taking anything, or do not wait; used units that never wait and leave debt; a
//! stream paced by a resource; a fleet of acquirers sharing one rate.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::within;
use futures::StreamExt;
use tokio::time::Instant;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{
    Client, ErrorKind, RateLimiter,
    config::NodeConfig,
    rate_limiter::{MAX_ACQUIRE_WAIT, Metering, MeteringMetric, ResourceSettings},
};

const NODE: &str = "quotas";

async fn limiter() -> (Emulator, RateLimiter) {
    let emulator = within(Emulator::builder().start()).await.unwrap();
    let client = within(Client::connect(&emulator.connection_string()))
        .await
        .unwrap();
    within(client.create_node(NODE, NodeConfig::new()))
        .await
        .unwrap();
    (emulator, client.rate_limiter(NODE))
}

async fn client_of(emulator: &Emulator) -> Client {
    within(Client::connect(&emulator.connection_string()))
        .await
        .unwrap()
}

fn rate(units_per_second: f64) -> ResourceSettings {
    ResourceSettings::new().max_units_per_second(units_per_second)
}

fn millis_since(start: Instant) -> u128 {
    start.elapsed().as_millis()
}

/// A resource's billing settings, in the crate's own types, are described as they were
/// created; one the wire cannot carry is refused before anything is sent.
#[tokio::test(start_paused = true)]
async fn metering_settings_are_described_as_created() {
    let (_emulator, limiter) = limiter().await;
    let mut on_demand = MeteringMetric::default();
    on_demand.enabled = true;
    on_demand.billing_period = Some(Duration::from_secs(3600));
    on_demand.labels.insert("team".into(), "billing".into());
    on_demand.metric_fields = Some([("folder_id".to_string(), "f1".to_string())].into());
    let mut metering = Metering::default();
    metering.enabled = true;
    metering.report_period = Some(Duration::from_secs(5));
    metering.provisioned_units_per_second = Some(10.0);
    metering.on_demand = Some(on_demand);
    // A metric without fields is described with every field empty: still none set.
    let mut plain = Metering::default();
    plain.overshoot = Some(MeteringMetric::default());
    for (path, metering) in [("billed", metering), ("plain", plain)] {
        let settings = rate(100.0).metering(metering);
        within(limiter.create_resource(path, settings.clone()))
            .await
            .unwrap();
        let described = within(limiter.describe_resource(path)).await.unwrap();
        assert_eq!(described.settings(), &settings, "{path}");
    }

    let mut odd = Metering::default();
    odd.collect_period = Some(Duration::from_millis(1500));
    let err = within(limiter.create_resource("odd", rate(1.0).metering(odd)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let err = within(limiter.describe_resource("odd")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test(start_paused = true)]
async fn resources_are_created_altered_listed_described_and_dropped() {
    let (emulator, limiter) = limiter().await;
    within(limiter.create_resource("api", rate(100.0).prefetch_coefficient(0.5)))
        .await
        .unwrap();
    within(limiter.create_resource("api/tenant-a", rate(20.0)))
        .await
        .unwrap();
    within(limiter.create_resource("api/tenant-b", ResourceSettings::new()))
        .await
        .unwrap();

    let mut all = within(limiter.list_resources("", true)).await.unwrap();
    all.sort();
    assert_eq!(all, ["api", "api/tenant-a", "api/tenant-b"]);
    let mut children = within(limiter.list_resources("api", true)).await.unwrap();
    children.sort();
    assert_eq!(children, ["api", "api/tenant-a", "api/tenant-b"]);
    // Not recursive: the resource alone; the roots for an empty path.
    let alone = within(limiter.list_resources("api", false)).await.unwrap();
    assert_eq!(alone, ["api"]);
    let roots = within(limiter.list_resources("", false)).await.unwrap();
    assert_eq!(roots, ["api"]);
    // A node path in another spelling is the same node, for every call.
    let spelled = client_of(&emulator).await.rate_limiter("/local//quotas/");
    assert_eq!(spelled.node(), "/local/quotas");
    within(spelled.acquire("api", 1)).await.unwrap();

    let described = within(limiter.describe_resource("api")).await.unwrap();
    assert_eq!(described.path(), "api");
    assert_eq!(described.settings(), &rate(100.0).prefetch_coefficient(0.5));
    // Alter replaces the settings as a whole.
    within(limiter.alter_resource("api", rate(50.0)))
        .await
        .unwrap();
    let described = within(limiter.describe_resource("api")).await.unwrap();
    assert_eq!(described.settings(), &rate(50.0));
    let inheriting = within(limiter.describe_resource("api/tenant-b"))
        .await
        .unwrap();
    assert_eq!(inheriting.settings(), &ResourceSettings::new());

    // A parent with children stays; children first, then the parent.
    let err = within(limiter.drop_resource("api")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    for path in ["api/tenant-a", "api/tenant-b", "api"] {
        within(limiter.drop_resource(path)).await.unwrap();
    }
    assert!(
        within(limiter.list_resources("", true))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn bad_requests_get_their_kinds() {
    let (emulator, limiter) = limiter().await;
    within(limiter.create_resource("api", rate(10.0)))
        .await
        .unwrap();
    let kind = |r: ydb_coordination::Result<()>| r.unwrap_err().kind();
    // The server's answers.
    let again = limiter.create_resource("api", rate(10.0));
    assert_eq!(kind(within(again).await), ErrorKind::AlreadyExists);
    let rootless = limiter.create_resource("other", ResourceSettings::new());
    assert_eq!(kind(within(rootless).await), ErrorKind::InvalidArgument);
    let negative = limiter.create_resource("neg", rate(-1.0));
    assert_eq!(kind(within(negative).await), ErrorKind::InvalidArgument);
    let orphan = limiter.create_resource("missing/child", rate(1.0));
    assert_eq!(kind(within(orphan).await), ErrorKind::InvalidArgument);
    let absent = limiter.describe_resource("absent").await.map(drop);
    assert_eq!(kind(absent), ErrorKind::NotFound);
    assert_eq!(
        kind(within(limiter.drop_resource("absent")).await),
        ErrorKind::NotFound
    );
    // YDB answers an acquire of a resource that does not exist with BAD_REQUEST.
    assert_eq!(
        kind(within(limiter.acquire("absent", 1)).await),
        ErrorKind::InvalidArgument
    );
    // Refused here, nothing sent.
    for bad in ["", "/api", "api/", "a//b", "with space"] {
        assert_eq!(
            kind(within(limiter.acquire(bad, 1)).await),
            ErrorKind::InvalidArgument,
            "{bad:?}"
        );
        let created = limiter.create_resource(bad, rate(1.0));
        assert_eq!(kind(within(created).await), ErrorKind::InvalidArgument);
    }
    let nan = limiter.create_resource("nan", rate(f64::NAN));
    assert_eq!(kind(within(nan).await), ErrorKind::InvalidArgument);
    // A node that does not exist.
    let client = within(Client::connect(&emulator.connection_string()))
        .await
        .unwrap();
    let elsewhere = client.rate_limiter("nowhere");
    let listed = within(elsewhere.list_resources("", true)).await.map(drop);
    assert_eq!(kind(listed), ErrorKind::NotFound);
}

#[tokio::test(start_paused = true)]
async fn acquires_at_ten_a_second_are_granted_every_100_ms() {
    let (_emulator, limiter) = limiter().await;
    within(limiter.create_resource("api", rate(10.0)))
        .await
        .unwrap();
    let start = Instant::now();
    let mut times = Vec::new();
    for _ in 0..6 {
        within(limiter.acquire("api", 1)).await.unwrap();
        times.push(millis_since(start));
    }
    assert_eq!(times, [0, 0, 100, 200, 300, 400]);
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_cannot_be_granted_in_time_takes_nothing() {
    let (_emulator, limiter) = limiter().await;
    within(limiter.create_resource("api", rate(1.0)))
        .await
        .unwrap();
    // The bucket's first unit, then the next one is a second away.
    within(limiter.acquire("api", 1)).await.unwrap();
    let start = Instant::now();
    let taken = within(limiter.acquire_timeout("api", 1, Duration::from_millis(300)))
        .await
        .unwrap();
    assert!(!taken);
    assert_eq!(millis_since(start), 300, "the server gave up at the wait");
    // Nothing was taken: the next unit still comes on time.
    assert!(
        within(limiter.acquire_timeout("api", 1, Duration::from_secs(5)))
            .await
            .unwrap()
    );
    assert!(millis_since(start) <= 1000, "{}", millis_since(start));

    // A wait the server would cut short is refused, as a recipe refuses one.
    let err = within(limiter.acquire_timeout("api", 1, MAX_ACQUIRE_WAIT + Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);

    // try_acquire does not wait.
    let start = Instant::now();
    assert!(!within(limiter.try_acquire("api", 1)).await.unwrap());
    assert!(millis_since(start) < 10);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(within(limiter.try_acquire("api", 1)).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn used_units_never_wait_and_leave_debt_that_acquires_wait_off() {
    let (_emulator, limiter) = limiter().await;
    within(limiter.create_resource("api", rate(10.0)))
        .await
        .unwrap();
    let start = Instant::now();
    within(limiter.report_used("api", 20)).await.unwrap();
    assert_eq!(millis_since(start), 0);
    // Two seconds of debt: an acquire within one second is not granted.
    let taken = within(limiter.acquire_timeout("api", 1, Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(!taken);
    assert!(
        within(limiter.acquire_timeout("api", 1, Duration::from_secs(5)))
            .await
            .unwrap()
    );
    let waited = millis_since(start);
    assert!((1_800..=2_200).contains(&waited), "{waited}");
}

#[tokio::test(start_paused = true)]
async fn a_paced_stream_yields_at_the_resources_rate() {
    let (_emulator, limiter) = limiter().await;
    within(limiter.create_resource("emails", rate(10.0)))
        .await
        .unwrap();
    let start = Instant::now();
    let mut times = Vec::new();
    let mut paced = limiter.limit_stream("emails", 1, futures::stream::iter(0..5));
    while let Some(item) = within(paced.next()).await {
        times.push((item.unwrap(), millis_since(start)));
    }
    assert_eq!(times, [(0, 0), (1, 0), (2, 100), (3, 200), (4, 300)]);
    // Units that no try can take (no such resource, a bad path): the error, then the end.
    for path in ["absent", "bad path"] {
        let mut failing = limiter.limit_stream(path, 1, futures::stream::iter([7, 8]));
        let err = within(failing.next()).await.unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(within(failing.next()).await.is_none());
    }
    // Units not there in time: the error, and the item waits for another try.
    within(limiter.create_resource("slow", rate(1.0)))
        .await
        .unwrap();
    // 15 s of debt: more than an acquire's wait (the request timeout, 10 s).
    within(limiter.report_used("slow", 15)).await.unwrap();
    let mut retried = limiter.limit_stream("slow", 1, futures::stream::iter([9]));
    let err = within(retried.next()).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAcquired);
    assert_eq!(within(retried.next()).await.unwrap().unwrap(), 9);
    // `run` takes the units, then runs the work.
    let out = within(limiter.run("emails", 1, async { 42 }))
        .await
        .unwrap();
    assert_eq!(out, 42);
}

#[tokio::test(start_paused = true)]
async fn a_fleet_of_acquirers_shares_one_rate() {
    let (emulator, limiter) = limiter().await;
    within(limiter.create_resource("payments", rate(20.0)))
        .await
        .unwrap();
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..8 {
        // Each worker its own client, as each pod of a fleet has.
        let client = within(Client::connect(&emulator.connection_string()))
            .await
            .unwrap();
        let limiter = client.rate_limiter(NODE);
        workers.push(tokio::spawn(async move {
            let mut granted = 0u32;
            while start.elapsed() < Duration::from_secs(10) {
                if limiter
                    .acquire_timeout("payments", 1, Duration::from_secs(30))
                    .await
                    .is_ok_and(|taken| taken)
                {
                    granted += 1;
                }
            }
            granted
        }));
    }
    let mut total = 0;
    for worker in workers {
        total += within(worker).await.unwrap();
    }
    // 20 a second for 10 s, the first bucket's prefetch and each worker's last call on top.
    assert!((200..=215).contains(&total), "{total}");
}

#[tokio::test(start_paused = true)]
async fn an_acquire_is_repeated_only_when_it_was_not_carried_out() {
    let (emulator, limiter) = limiter().await;
    within(limiter.create_resource("api", rate(10.0)))
        .await
        .unwrap();
    // The connection broke (and the client saw it) and the next one is refused: nothing
    // was sent, so the acquire goes again and is granted.
    emulator.net().cut();
    emulator.net().refuse_next(1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    within(limiter.acquire("api", 1)).await.unwrap();

    // An acquire the server holds (the resource is 3 s in debt) when the connection
    // breaks: it may be granted there, so it is not sent again; the caller is told.
    within(limiter.report_used("api", 30)).await.unwrap();
    let waiting = tokio::spawn({
        let limiter = limiter.clone();
        async move {
            limiter
                .acquire_timeout("api", 1, Duration::from_secs(5))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    emulator.net().cut();
    let err = within(waiting).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown);
}
