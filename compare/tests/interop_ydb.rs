//! Interoperability: the official YDB Rust SDK (`ydb` crate) works unchanged against the
//! in-process emulator, going through discovery (`ListEndpoints`), the node scheme calls
//! (`CreateNode`, `DescribeNode`, `DropNode`) and the bidirectional `Session` stream.
//!
//! The `ydb` crate's coordination session ends its receive loop on any non-SUCCESS reply and
//! never reconnects, so these tests stay on the happy path; error paths need a raw gRPC
//! client.
//!
//! Time: the tests run on paused time (`start_paused = true`), which works with the `ydb`
//! crate: its timers (discovery interval, retry back-offs) and the emulator's (ping period,
//! session and acquire timeouts) all use the tokio clock, and the runtime only auto-advances
//! when every task is idle, i.e. never while a loopback message is readable. Stress-checked
//! with a few hundred runs, including 16 test processes in parallel. `ydb::Client` spawns a
//! `spawn_blocking` token fetch, which merely pauses auto-advance while it runs. Every await
//! has a timeout.

use std::error::Error;
use std::future::Future;
use std::time::Duration;

use tokio::time::timeout;
use ydb::{
    AcquireOptionsBuilder, ClientBuilder, CoordinationClient, CoordinationSession,
    DescribeOptionsBuilder, NodeConfigBuilder, SchemeEntryType, SessionOptionsBuilder,
};
use ydb_coordination::emulator::Emulator;

type TestResult = Result<(), Box<dyn Error + Send + Sync>>;

/// The bound on every single await.
const STEP: Duration = Duration::from_secs(10);

/// Awaits `fut` for at most [`STEP`], turning both a timeout and an error into an error that
/// names the step.
async fn step<T, E, F>(what: &str, fut: F) -> Result<T, Box<dyn Error + Send + Sync>>
where
    F: Future<Output = Result<T, E>>,
    E: std::fmt::Debug,
{
    match timeout(STEP, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(format!("{what}: {err:?}").into()),
        Err(_) => Err(format!("{what}: no answer within {STEP:?}").into()),
    }
}

/// The `host:port?database=...` connection-string form the SDK documents; it also accepts
/// the path form `grpc://host:port/local` that [`Emulator::connection_string`] returns
/// (`ClientBuilder::parse_host_and_path` takes the database from the path, a `database`
/// query parameter overrides it). The port must be explicit.
fn query_form(emu: &Emulator) -> String {
    format!("grpc://{}?database={}", emu.local_addr(), emu.database())
}

/// Builds a `ydb` client with its default discovery (`TimerDiscovery`, which calls
/// `ListEndpoints` and then connects to the endpoint the emulator advertises).
///
/// `ydb` 0.18.2 has no public `Client::wait`: `ClientBuilder::build` itself awaits the token
/// cache, the first successful discovery round and the load balancer before returning.
async fn ydb_client(connection_string: &str) -> Result<ydb::Client, Box<dyn Error + Send + Sync>> {
    let builder = ClientBuilder::new_from_connection_string(connection_string)?;
    step(
        "ClientBuilder::build (waits for discovery)",
        builder.build(),
    )
    .await
}

/// One owner or waiter, copied out of the SDK's description.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    session_id: u64,
    count: u64,
    data: Vec<u8>,
}

/// The SDK's `SemaphoreDescription` lives in a private module of `ydb` 0.18.2 (it is returned
/// but cannot be named), so the tests copy it into this.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Description {
    name: String,
    data: Vec<u8>,
    count: u64,
    limit: u64,
    ephemeral: bool,
    owners: Vec<Holder>,
    waiters: Vec<Holder>,
}

/// Describes `name` with the given SDK options.
async fn describe_with(
    session: &CoordinationSession,
    name: &str,
    owners: bool,
    waiters: bool,
) -> Result<Description, Box<dyn Error + Send + Sync>> {
    let options = DescribeOptionsBuilder::default()
        .with_owners(owners)
        .with_waiters(waiters)
        .build()?;
    let d = step(
        "describe_semaphore",
        session.describe_semaphore_with_params(name, options),
    )
    .await?;
    Ok(Description {
        name: d.name,
        data: d.data,
        count: d.count,
        limit: d.limit,
        ephemeral: d.ephemeral,
        owners: d
            .owners
            .into_iter()
            .map(|o| Holder {
                session_id: o.session_id,
                count: o.count,
                data: o.data,
            })
            .collect(),
        waiters: d
            .waiters
            .into_iter()
            .map(|w| Holder {
                session_id: w.session_id,
                count: w.count,
                data: w.data,
            })
            .collect(),
    })
}

/// Describes `name` with owners and waiters.
async fn describe(
    session: &CoordinationSession,
    name: &str,
) -> Result<Description, Box<dyn Error + Send + Sync>> {
    describe_with(session, name, true, true).await
}

/// Describes `name` until `done` holds. Needed because `ydb::Lease::release` only spawns the
/// release request, and because two sessions are two streams with no ordering between them.
async fn describe_until(
    session: &CoordinationSession,
    name: &str,
    what: &str,
    done: impl Fn(&Description) -> bool,
) -> Result<Description, Box<dyn Error + Send + Sync>> {
    let wait = async {
        loop {
            let d = describe(session, name).await?;
            if done(&d) {
                return Ok::<_, Box<dyn Error + Send + Sync>>(d);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    match timeout(STEP, wait).await {
        Ok(result) => result,
        Err(_) => Err(format!("{what}: not reached within {STEP:?}").into()),
    }
}

async fn create_and_describe_node(coordination: &mut CoordinationClient, path: &str) -> TestResult {
    let config = NodeConfigBuilder::default()
        .self_check_period_millis(1000)
        .session_grace_period_millis(10_000)
        .build()?;
    step(
        "create_node",
        coordination.create_node(path.to_string(), config),
    )
    .await?;
    let node = step(
        "describe_node",
        coordination.describe_node(path.to_string()),
    )
    .await?;
    let leaf = path.rsplit('/').next().unwrap_or(path);
    assert_eq!(node.entry.name, leaf, "describe_node entry name");
    assert!(
        matches!(node.entry.r#type, SchemeEntryType::CoordinationNode),
        "describe_node entry type: {:?}",
        node.entry.r#type
    );
    assert_eq!(node.config.self_check_period_millis, 1000);
    assert_eq!(node.config.session_grace_period_millis, 10_000);
    Ok(())
}

async fn open_session(
    coordination: &mut CoordinationClient,
    path: &str,
    description: &str,
) -> Result<CoordinationSession, Box<dyn Error + Send + Sync>> {
    let options = SessionOptionsBuilder::default()
        .timeout(Duration::from_secs(20))
        .description(description.to_string())
        .build()?;
    step(
        "create_session",
        coordination.create_session(path.to_string(), options),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn ydb_sdk_node_session_semaphore_round_trip() -> TestResult {
    let emu = step(
        "emulator start",
        Emulator::builder().database("/local").start(),
    )
    .await?;
    let client = ydb_client(&query_form(&emu)).await?;
    let mut coordination = client.coordination_client();
    let node = "/local/ydb_interop";

    create_and_describe_node(&mut coordination, node).await?;

    let session = open_session(&mut coordination, node, "ydb-sdk interop").await?;
    assert_ne!(session.id(), 0, "session id");
    assert!(!session.alive().is_cancelled(), "session alive after start");
    assert_eq!(emu.session_ids(node), vec![session.id()]);

    step(
        "create_semaphore",
        session.create_semaphore("sem", 5, b"sem-data".to_vec()),
    )
    .await?;
    assert_eq!(emu.semaphore_names(node), vec!["sem".to_string()]);

    let fresh = describe(&session, "sem").await?;
    assert_eq!(fresh.name, "sem");
    assert_eq!(fresh.limit, 5);
    assert_eq!(fresh.count, 0);
    assert_eq!(fresh.data, b"sem-data");
    assert!(!fresh.ephemeral);
    assert!(fresh.owners.is_empty() && fresh.waiters.is_empty());

    let acquire = AcquireOptionsBuilder::default()
        .timeout(Duration::from_secs(5))
        .data(b"owner-data".to_vec())
        .build()?;
    let lease = step(
        "acquire_semaphore",
        session.acquire_semaphore_with_params("sem", 3, acquire),
    )
    .await?;
    assert!(!lease.alive().is_cancelled(), "lease alive after acquire");

    let held = describe(&session, "sem").await?;
    assert_eq!(held.count, 3, "count after acquiring 3 of 5");
    assert_eq!(held.limit, 5);
    assert_eq!(held.owners.len(), 1, "owners: {:?}", held.owners);
    assert_eq!(held.owners[0].session_id, session.id());
    assert_eq!(held.owners[0].count, 3);
    assert_eq!(held.owners[0].data, b"owner-data");
    assert!(held.waiters.is_empty(), "waiters: {:?}", held.waiters);

    // The describe without owners/waiters: the SDK's default-built options.
    let bare = describe_with(&session, "sem", false, false).await?;
    assert_eq!(bare.count, 3);
    assert!(
        bare.owners.is_empty(),
        "owners not asked for: {:?}",
        bare.owners
    );

    // `Lease::release` only spawns the release request (and `Drop` sends a second one, which
    // is answered `released=false` with SUCCESS), so wait for the effect.
    lease.release();
    describe_until(&session, "sem", "owners empty after release", |d| {
        d.count == 0 && d.owners.is_empty()
    })
    .await?;
    assert!(
        !session.alive().is_cancelled(),
        "the session survives the duplicate release"
    );

    step("delete_semaphore", session.delete_semaphore("sem")).await?;
    assert!(emu.semaphore_names(node).is_empty(), "semaphore deleted");
    assert!(
        !session.alive().is_cancelled(),
        "session alive after delete"
    );

    // The SDK's session cannot be closed explicitly; dropping it leaves its stream open until
    // the emulator shuts down, and dropping the node ends it.
    drop(session);
    step("drop_node", coordination.drop_node(node.to_string())).await?;
    assert!(emu.semaphore_names(node).is_empty());
    assert!(emu.session_ids(node).is_empty(), "node gone");

    drop(client);
    timeout(STEP, emu.shutdown())
        .await
        .map_err(|_| "emulator shutdown timed out")?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn ydb_sdk_path_form_connection_string() -> TestResult {
    let emu = step(
        "emulator start",
        Emulator::builder()
            .database("/local")
            .node("/local/by_path")
            .start(),
    )
    .await?;
    // The path form the emulator hands out.
    let client = ydb_client(&emu.connection_string()).await?;
    let mut coordination = client.coordination_client();
    let node = step(
        "describe_node",
        coordination.describe_node("/local/by_path".to_string()),
    )
    .await?;
    assert_eq!(node.entry.name, "by_path");
    let session = open_session(&mut coordination, "/local/by_path", "path form").await?;
    step(
        "create_semaphore",
        session.create_semaphore("s", 1, Vec::new()),
    )
    .await?;
    let lease = step("acquire_semaphore", session.acquire_semaphore("s", 1)).await?;
    let d = describe(&session, "s").await?;
    assert_eq!((d.count, d.owners.len()), (1, 1));
    lease.release();
    describe_until(&session, "s", "released", |d| d.owners.is_empty()).await?;
    drop(session);
    drop(client);
    timeout(STEP, emu.shutdown())
        .await
        .map_err(|_| "emulator shutdown timed out")?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn ydb_sdk_two_sessions_contend_for_limit_one() -> TestResult {
    let emu = step(
        "emulator start",
        Emulator::builder().database("/local").start(),
    )
    .await?;
    let client = ydb_client(&query_form(&emu)).await?;
    let mut coordination = client.coordination_client();
    let node = "/local/ydb_contend";
    create_and_describe_node(&mut coordination, node).await?;

    let first = open_session(&mut coordination, node, "first").await?;
    let second = open_session(&mut coordination, node, "second").await?;
    assert_ne!(first.id(), second.id());

    step(
        "create_semaphore",
        first.create_semaphore("lock", 1, Vec::new()),
    )
    .await?;
    let first_lease = step("first acquire", first.acquire_semaphore("lock", 1)).await?;

    // The second acquire (60 s server-side timeout) must queue: the emulator answers
    // `acquire_semaphore_pending`, which the SDK ignores, and no result yet.
    let wait_long = AcquireOptionsBuilder::default()
        .timeout(Duration::from_secs(60))
        .build()?;
    let mut second_acquire = Box::pin(second.acquire_semaphore_with_params("lock", 1, wait_long));
    assert!(
        timeout(Duration::from_millis(500), &mut second_acquire)
            .await
            .is_err(),
        "the second acquire must wait while the first session holds the lock"
    );

    let queued = describe_until(&first, "lock", "second session queued as waiter", |d| {
        d.waiters.len() == 1
    })
    .await?;
    assert_eq!(queued.count, 1);
    assert_eq!(queued.owners.len(), 1);
    assert_eq!(queued.owners[0].session_id, first.id());
    assert_eq!(queued.waiters[0].session_id, second.id());
    assert_eq!(queued.waiters[0].count, 1);

    // Still waiting 30 s (virtual) later, well past the 20 s session timeout: both SDK
    // sessions stay alive only because they answer the emulator's pings (every 5 s).
    assert!(
        timeout(Duration::from_secs(30), &mut second_acquire)
            .await
            .is_err(),
        "the second acquire completed before the first release"
    );
    assert!(
        !first.alive().is_cancelled(),
        "first session died while holding"
    );
    assert!(
        !second.alive().is_cancelled(),
        "second session died while waiting"
    );
    let still = describe(&first, "lock").await?;
    assert_eq!(still.owners.len(), 1);
    assert_eq!(still.owners[0].session_id, first.id());
    assert_eq!(still.waiters.len(), 1);
    assert_eq!(still.waiters[0].session_id, second.id());
    assert_eq!(emu.session_ids(node).len(), 2, "both sessions still exist");

    first_lease.release();
    let second_lease = step("second acquire after release", second_acquire).await?;
    assert!(!second_lease.alive().is_cancelled());

    let handed_over = describe(&second, "lock").await?;
    assert_eq!(handed_over.count, 1);
    assert_eq!(
        handed_over.owners.len(),
        1,
        "owners: {:?}",
        handed_over.owners
    );
    assert_eq!(handed_over.owners[0].session_id, second.id());
    assert!(handed_over.waiters.is_empty());

    second_lease.release();
    describe_until(&first, "lock", "released by the second session", |d| {
        d.owners.is_empty() && d.waiters.is_empty()
    })
    .await?;
    assert!(!first.alive().is_cancelled(), "first session still alive");
    assert!(!second.alive().is_cancelled(), "second session still alive");

    step("delete_semaphore", second.delete_semaphore("lock")).await?;
    assert!(emu.semaphore_names(node).is_empty());
    drop((first, second));
    step("drop_node", coordination.drop_node(node.to_string())).await?;

    drop(client);
    timeout(STEP, emu.shutdown())
        .await
        .map_err(|_| "emulator shutdown timed out")?;
    Ok(())
}
