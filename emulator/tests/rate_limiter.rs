//! Conformance of the emulated rate limiter through gRPC, with the generated client: the
//! scenarios of `SPEC-rate-limiter.md` §11 (`emulator/SPEC-rate-limiter.md`) that one server
//! node can serve, on paused time (statuses and virtual instants, never message text). A `§`
//! here is a section of `SPEC-rate-limiter.md`.

#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, timeout};
use tonic::transport::Channel;
use ydb_coordination_emulator::Emulator;
use ydb_coordination_proto::rate_limiter::v1::rate_limiter_service_client::RateLimiterServiceClient;
use ydb_coordination_proto::rate_limiter::*;
use ydb_grpc::ydb_proto::status_ids::StatusCode;

const NODE: &str = "/Root/node";
/// Longer than any wait in these tests: a hang fails instead of blocking.
const BOUND: Duration = Duration::from_secs(7_200);

type Client = RateLimiterServiceClient<Channel>;

async fn bounded<T>(f: impl Future<Output = T>) -> T {
    timeout(BOUND, f).await.unwrap()
}

async fn start() -> (Emulator, Client) {
    let emulator = bounded(Emulator::builder().database("/Root").node(NODE).start())
        .await
        .unwrap();
    let client = connect(&emulator).await;
    (emulator, client)
}

async fn connect(emulator: &Emulator) -> Client {
    let url = format!("http://{}", emulator.local_addr());
    bounded(RateLimiterServiceClient::connect(url))
        .await
        .unwrap()
}

fn hdrr(rate: f64, burst: f64) -> HierarchicalDrrSettings {
    HierarchicalDrrSettings {
        max_units_per_second: rate,
        max_burst_size_coefficient: burst,
        ..HierarchicalDrrSettings::default()
    }
}

fn resource(path: &str, settings: HierarchicalDrrSettings) -> Resource {
    Resource {
        resource_path: path.to_string(),
        r#type: Some(resource::Type::HierarchicalDrr(settings)),
        metering_config: None,
    }
}

fn status(operation: Option<Operation>) -> StatusCode {
    StatusCode::try_from(operation.unwrap().status).unwrap()
}

fn millis(ms: u64) -> Option<ydb_grpc::google_proto_workaround::protobuf::Duration> {
    Some(ydb_grpc::google_proto_workaround::protobuf::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    })
}

fn params(timeout_ms: u64, cancel_ms: u64) -> Option<OperationParams> {
    Some(OperationParams {
        operation_mode: 1,
        operation_timeout: (timeout_ms > 0).then(|| millis(timeout_ms)).flatten(),
        cancel_after: (cancel_ms > 0).then(|| millis(cancel_ms)).flatten(),
        ..OperationParams::default()
    })
}

async fn create(c: &mut Client, node: &str, r: Resource) -> StatusCode {
    let request = CreateResourceRequest {
        coordination_node_path: node.to_string(),
        resource: Some(r),
        ..CreateResourceRequest::default()
    };
    status(
        bounded(c.create_resource(request))
            .await
            .unwrap()
            .into_inner()
            .operation,
    )
}

async fn alter(c: &mut Client, r: Resource) -> StatusCode {
    let request = AlterResourceRequest {
        coordination_node_path: NODE.to_string(),
        resource: Some(r),
        ..AlterResourceRequest::default()
    };
    status(
        bounded(c.alter_resource(request))
            .await
            .unwrap()
            .into_inner()
            .operation,
    )
}

async fn drop_resource(c: &mut Client, path: &str) -> StatusCode {
    let request = DropResourceRequest {
        coordination_node_path: NODE.to_string(),
        resource_path: path.to_string(),
        ..DropResourceRequest::default()
    };
    status(
        bounded(c.drop_resource(request))
            .await
            .unwrap()
            .into_inner()
            .operation,
    )
}

/// The result a successful operation carries, or the operation's status.
fn result<R: prost::Message + Default>(
    operation: Option<Operation>,
    type_name: &str,
) -> Result<R, StatusCode> {
    let operation = operation.unwrap();
    if operation.status != StatusCode::Success as i32 {
        return Err(StatusCode::try_from(operation.status).unwrap());
    }
    let any = operation.result.unwrap();
    assert_eq!(any.type_url, format!("type.googleapis.com/{type_name}"));
    Ok(R::decode(any.value.as_slice()).unwrap())
}

async fn describe(c: &mut Client, path: &str) -> Result<Resource, StatusCode> {
    let request = DescribeResourceRequest {
        coordination_node_path: NODE.to_string(),
        resource_path: path.to_string(),
        ..DescribeResourceRequest::default()
    };
    let response = bounded(c.describe_resource(request)).await.unwrap();
    let result: DescribeResourceResult = result(
        response.into_inner().operation,
        "Ydb.RateLimiter.DescribeResourceResult",
    )?;
    Ok(result.resource.unwrap())
}

async fn list(c: &mut Client, path: &str, recursive: bool) -> Result<Vec<String>, StatusCode> {
    let request = ListResourcesRequest {
        coordination_node_path: NODE.to_string(),
        resource_path: path.to_string(),
        recursive,
        ..ListResourcesRequest::default()
    };
    let response = bounded(c.list_resources(request)).await.unwrap();
    let result: ListResourcesResult = result(
        response.into_inner().operation,
        "Ydb.RateLimiter.ListResourcesResult",
    )?;
    Ok(result.resource_paths)
}

fn acquire_request(
    path: &str,
    units: acquire_resource_request::Units,
    timeout_ms: u64,
    cancel_ms: u64,
) -> AcquireResourceRequest {
    AcquireResourceRequest {
        operation_params: params(timeout_ms, cancel_ms),
        coordination_node_path: NODE.to_string(),
        resource_path: path.to_string(),
        units: Some(units),
    }
}

async fn send_acquire(c: &mut Client, request: AcquireResourceRequest) -> StatusCode {
    status(
        bounded(c.acquire_resource(request))
            .await
            .unwrap()
            .into_inner()
            .operation,
    )
}

async fn required(c: &mut Client, path: &str, amount: u64, timeout_ms: u64) -> StatusCode {
    let units = acquire_resource_request::Units::Required(amount);
    send_acquire(c, acquire_request(path, units, timeout_ms, 0)).await
}

async fn used(c: &mut Client, path: &str, amount: u64) -> StatusCode {
    let units = acquire_resource_request::Units::Used(amount);
    send_acquire(c, acquire_request(path, units, 200, 0)).await
}

/// Milliseconds of virtual time since `start`.
fn since(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

#[tokio::test(start_paused = true)]
async fn create_describe_alter_echo_the_stored_settings() {
    let (_emulator, mut c) = start().await;
    // §11 #1, #2.
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(1.0, 42.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        describe(&mut c, "res").await.unwrap(),
        resource("res", hdrr(1.0, 42.0))
    );
    assert_eq!(
        create(&mut c, NODE, resource("/res/res2", hdrr(1.0, 0.0))).await,
        StatusCode::BadRequest
    );
    // §11 #17.
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(1.0, 42.0))).await,
        StatusCode::AlreadyExists
    );
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(2.0, 42.0))).await,
        StatusCode::BadRequest
    );
    // §11 #3, #4: alter replaces every setting.
    assert_eq!(
        alter(&mut c, resource("res", hdrr(-1.0, 0.0))).await,
        StatusCode::BadRequest
    );
    assert_eq!(
        describe(&mut c, "res").await.unwrap(),
        resource("res", hdrr(1.0, 42.0))
    );
    assert_eq!(
        alter(&mut c, resource("res", hdrr(100.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        describe(&mut c, "res").await.unwrap(),
        resource("res", hdrr(100.0, 0.0))
    );
    // §11 #20.
    assert_eq!(
        alter(&mut c, resource("Root/P", hdrr(1.0, 0.0))).await,
        StatusCode::NotFound
    );
    // §11 #7: a child shows what it was given, not what it inherits.
    assert_eq!(
        create(&mut c, NODE, resource("res/child", hdrr(0.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        describe(&mut c, "res/child").await.unwrap(),
        resource("res/child", hdrr(0.0, 0.0))
    );
    // §11 #16, #18.
    for bad in ["a/b", ":-)", ""] {
        assert_eq!(
            create(&mut c, NODE, resource(bad, hdrr(1.0, 0.0))).await,
            StatusCode::BadRequest
        );
    }
    assert_eq!(
        create(&mut c, NODE, resource("root", hdrr(0.0, 0.0))).await,
        StatusCode::BadRequest
    );
    let untyped = Resource {
        resource_path: "untyped".to_string(),
        ..Resource::default()
    };
    assert_eq!(create(&mut c, NODE, untyped).await, StatusCode::BadRequest);
}

#[tokio::test(start_paused = true)]
async fn drop_and_list_follow_the_tree() {
    let (_emulator, mut c) = start().await;
    // §11 #5, #6.
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(100500.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        drop_resource(&mut c, "non_existent_resource").await,
        StatusCode::NotFound
    );
    assert_eq!(
        drop_resource(&mut c, "not//canonized/resource/path").await,
        StatusCode::BadRequest
    );
    assert_eq!(drop_resource(&mut c, "res").await, StatusCode::Success);
    assert_eq!(list(&mut c, "", true).await.unwrap(), Vec::<String>::new());
    assert_eq!(describe(&mut c, "res").await, Err(StatusCode::NotFound));
    // §11 #8-#11.
    assert_eq!(
        list(&mut c, "no_resource", false).await,
        Err(StatusCode::NotFound)
    );
    assert_eq!(
        list(&mut c, "no_resource", true).await,
        Err(StatusCode::NotFound)
    );
    for (path, rate) in [
        ("parent1", 100500.0),
        ("parent2", 100500.0),
        ("parent1/child1", 0.0),
        ("parent1/child2", 0.0),
        ("parent2/child", 0.0),
    ] {
        assert_eq!(
            create(&mut c, NODE, resource(path, hdrr(rate, 0.0))).await,
            StatusCode::Success
        );
    }
    assert_eq!(list(&mut c, "", true).await.unwrap().len(), 5);
    assert_eq!(
        list(&mut c, "", false).await.unwrap(),
        ["parent1", "parent2"]
    );
    assert_eq!(
        list(&mut c, "parent1", true).await.unwrap(),
        ["parent1", "parent1/child1", "parent1/child2"]
    );
    assert_eq!(list(&mut c, "parent1", false).await.unwrap(), ["parent1"]);
    // §11 #21, #22: only leaves can be dropped.
    assert_eq!(
        drop_resource(&mut c, "parent1").await,
        StatusCode::BadRequest
    );
    assert_eq!(
        drop_resource(&mut c, "parent2/child").await,
        StatusCode::Success
    );
    assert_eq!(drop_resource(&mut c, "parent2").await, StatusCode::Success);
    assert_eq!(list(&mut c, "", false).await.unwrap(), ["parent1"]);
}

#[tokio::test(start_paused = true)]
async fn coordination_node_paths_are_checked_as_ydb_does() {
    let (emulator, mut c) = start().await;
    // Control plane: a missing node is SCHEME_ERROR; the path is split, so extra slashes
    // name the same node.
    assert_eq!(
        create(&mut c, "/Root/missing", resource("r", hdrr(1.0, 0.0))).await,
        StatusCode::SchemeError
    );
    assert_eq!(
        create(&mut c, "/Root//node/", resource("r", hdrr(1.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        create(&mut c, "", resource("r2", hdrr(1.0, 0.0))).await,
        StatusCode::BadRequest
    );
    // With a database header, the node must be inside it.
    let mut request = tonic::Request::new(CreateResourceRequest {
        coordination_node_path: "/Other/node".to_string(),
        resource: Some(resource("r", hdrr(1.0, 0.0))),
        ..CreateResourceRequest::default()
    });
    request
        .metadata_mut()
        .insert("x-ydb-database", "/Root".parse().unwrap());
    let operation = bounded(c.create_resource(request))
        .await
        .unwrap()
        .into_inner()
        .operation;
    assert_eq!(status(operation), StatusCode::BadRequest);
    // Acquire: a non-canonical node path is INTERNAL_ERROR (§11 #30; a relative one too, §13
    // C4); a missing node, an unknown resource (§11 #29) BAD_REQUEST; no units, status 0
    // (§11 #40).
    let units = acquire_resource_request::Units::Required(1);
    for path in ["/Root/node/", "//Root/node", "Root/node"] {
        let mut request = acquire_request("r", units, 1_000, 0);
        request.coordination_node_path = path.to_string();
        assert_eq!(
            send_acquire(&mut c, request).await,
            StatusCode::InternalError
        );
    }
    let mut request = acquire_request("r", units, 1_000, 0);
    request.coordination_node_path = "/Root/missing".to_string();
    assert_eq!(send_acquire(&mut c, request).await, StatusCode::BadRequest);
    for _ in 0..5 {
        assert_eq!(
            required(&mut c, "nope", 1, 1_000).await,
            StatusCode::BadRequest
        );
        assert_eq!(required(&mut c, "nope", 1, 0).await, StatusCode::BadRequest);
    }
    assert_eq!(
        required(&mut c, "/r", 1, 1_000).await,
        StatusCode::BadRequest
    );
    let mut request = acquire_request("r", units, 1_000, 0);
    request.units = None;
    assert_eq!(send_acquire(&mut c, request).await, StatusCode::Unspecified);
    emulator.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn sequential_acquires_at_ten_per_second_finish_at_0_0_then_every_100_ms() {
    // §7.4, §11 #39.
    let (_emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(10.0, 0.0))).await,
        StatusCode::Success
    );
    let start = Instant::now();
    let mut times = Vec::new();
    for _ in 0..6 {
        assert_eq!(
            required(&mut c, "res", 1, 10_000).await,
            StatusCode::Success
        );
        times.push(since(start));
    }
    assert_eq!(times, [0, 0, 100, 200, 300, 400]);
}

#[tokio::test(start_paused = true)]
async fn children_share_the_parents_rate() {
    // §11 #25, #26: two children of a 10/s root, each with a saturating acquirer, run at
    // 5/s each; a child capped at 1/s takes no more than that.
    let (emulator, mut c) = start().await;
    for (path, rate) in [
        ("root", 10.0),
        ("root/a", 0.0),
        ("root/b", 0.0),
        ("root/slow", 1.0),
    ] {
        assert_eq!(
            create(&mut c, NODE, resource(path, hdrr(rate, 0.0))).await,
            StatusCode::Success
        );
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for path in ["root/a", "root/b", "root/slow"] {
        let mut c = connect(&emulator).await;
        tasks.push(tokio::spawn(async move {
            let mut granted = 0u32;
            while since(start) < 10_000 {
                if required(&mut c, path, 1, 20_000).await == StatusCode::Success {
                    granted += 1;
                }
            }
            granted
        }));
    }
    let mut granted = Vec::new();
    for task in tasks {
        granted.push(bounded(task).await.unwrap());
    }
    // a and b share what slow leaves, (10 - 1) / 2 per second, after their 2-unit prefetch;
    // each loop's last call may end after the 10 s.
    for n in &granted[..2] {
        assert!((45..=49).contains(n), "{granted:?}");
    }
    assert!((10..=12).contains(&granted[2]), "{granted:?}");
}

#[tokio::test(start_paused = true)]
async fn required_over_the_bucket_is_granted_into_debt_and_used_never_waits() {
    // §11 #12, #13.
    let (_emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(1.0, 42.0))).await,
        StatusCode::Success
    );
    let start = Instant::now();
    assert_eq!(
        required(&mut c, "res", 10_000, 200).await,
        StatusCode::Success
    );
    assert_eq!(since(start), 0);
    for i in 1..=3 {
        assert_eq!(required(&mut c, "res", 1, 200).await, StatusCode::Timeout);
        assert_eq!(since(start), 200 * i);
        assert_eq!(used(&mut c, "res", 1).await, StatusCode::Success);
        assert_eq!(since(start), 200 * i);
    }
    // §11 #15: `used` first.
    assert_eq!(
        create(&mut c, NODE, resource("res2", hdrr(1.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(used(&mut c, "res2", 10_000).await, StatusCode::Success);
    for _ in 0..3 {
        assert_eq!(required(&mut c, "res2", 1, 200).await, StatusCode::Timeout);
        assert_eq!(used(&mut c, "res2", 1).await, StatusCode::Success);
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_after_below_the_timeout_answers_cancelled() {
    // §11 #14.
    let (_emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(1.0, 42.0))).await,
        StatusCode::Success
    );
    let units = acquire_resource_request::Units::Required(10_000);
    assert_eq!(
        send_acquire(&mut c, acquire_request("res", units, 3_600_000, 200)).await,
        StatusCode::Success
    );
    let start = Instant::now();
    let units = acquire_resource_request::Units::Required(1);
    assert_eq!(
        send_acquire(&mut c, acquire_request("res", units, 3_600_000, 200)).await,
        StatusCode::Cancelled
    );
    assert_eq!(since(start), 200);
    let units = acquire_resource_request::Units::Used(1);
    assert_eq!(
        send_acquire(&mut c, acquire_request("res", units, 3_600_000, 200)).await,
        StatusCode::Success
    );
}

#[tokio::test(start_paused = true)]
async fn without_an_operation_timeout_acquire_does_not_wait() {
    // §8.1, §10.4 item 3.
    let (_emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(10.0, 0.0))).await,
        StatusCode::Success
    );
    let start = Instant::now();
    assert_eq!(required(&mut c, "res", 1, 0).await, StatusCode::Success);
    assert_eq!(required(&mut c, "res", 1, 0).await, StatusCode::Success);
    assert_eq!(required(&mut c, "res", 1, 0).await, StatusCode::Timeout);
    let units = acquire_resource_request::Units::Required(1);
    assert_eq!(
        send_acquire(&mut c, acquire_request("res", units, 0, 5_000)).await,
        StatusCode::Timeout
    );
    assert_eq!(since(start), 0);
}

#[tokio::test(start_paused = true)]
async fn big_requests_wait_for_the_pace() {
    // §11 #31, #33, #35.
    let (_emulator, mut c) = start().await;
    for path in ["a", "b", "c"] {
        assert_eq!(
            create(&mut c, NODE, resource(path, hdrr(10.0, 0.0))).await,
            StatusCode::Success
        );
    }
    let start = Instant::now();
    assert_eq!(
        required(&mut c, "a", 1, 3_600_000).await,
        StatusCode::Success
    );
    assert_eq!(
        required(&mut c, "a", 30, 3_600_000).await,
        StatusCode::Success
    );
    assert_eq!(since(start), 500);
    assert_eq!(
        required(&mut c, "b", 1, 3_600_000).await,
        StatusCode::Success
    );
    assert_eq!(required(&mut c, "b", 40, 500).await, StatusCode::Timeout);
    assert_eq!(
        required(&mut c, "c", 12, 3_600_000).await,
        StatusCode::Success
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        required(&mut c, "c", 12, 3_600_000).await,
        StatusCode::Success
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_on_a_dropped_resource_gets_bad_request() {
    // §11 #36, then #37: the node dropped and created again has no resources until they
    // are created again.
    let (emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(10.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(required(&mut c, "res", 1, 1_000).await, StatusCode::Success);
    let mut waiter = c.clone();
    let waiting =
        tokio::spawn(async move { required(&mut waiter, "res", 100_500, 3_600_000).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(drop_resource(&mut c, "res").await, StatusCode::Success);
    assert_eq!(bounded(waiting).await.unwrap(), StatusCode::BadRequest);

    assert_eq!(
        create(&mut c, NODE, resource("Res", hdrr(10.0, 0.0))).await,
        StatusCode::Success
    );
    // The first acquire on a resource is granted whatever its size.
    assert_eq!(required(&mut c, "Res", 1, 1_000).await, StatusCode::Success);
    let mut waiter = c.clone();
    let waiting =
        tokio::spawn(async move { required(&mut waiter, "Res", 100_500, 3_600_000).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop_node(&emulator, NODE).await;
    assert_eq!(bounded(waiting).await.unwrap(), StatusCode::BadRequest);
    create_node(&emulator, NODE).await;
    assert_eq!(
        required(&mut c, "Res", 1, 1_000).await,
        StatusCode::BadRequest
    );
    assert_eq!(
        create(&mut c, NODE, resource("Res", hdrr(10.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(required(&mut c, "Res", 1, 1_000).await, StatusCode::Success);
}

async fn coordination(
    emulator: &Emulator,
) -> ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient<
    Channel,
> {
    let url = format!("http://{}", emulator.local_addr());
    bounded(
        ydb_grpc::ydb_proto::coordination::v1::coordination_service_client::CoordinationServiceClient::connect(url),
    )
    .await
    .unwrap()
}

async fn drop_node(emulator: &Emulator, path: &str) {
    let request = ydb_grpc::ydb_proto::coordination::DropNodeRequest {
        path: path.to_string(),
        ..Default::default()
    };
    let operation = bounded(coordination(emulator).await.drop_node(request))
        .await
        .unwrap();
    assert_eq!(
        status(operation.into_inner().operation),
        StatusCode::Success
    );
}

async fn create_node(emulator: &Emulator, path: &str) {
    let request = ydb_grpc::ydb_proto::coordination::CreateNodeRequest {
        path: path.to_string(),
        ..Default::default()
    };
    let operation = bounded(coordination(emulator).await.create_node(request))
        .await
        .unwrap();
    assert_eq!(
        status(operation.into_inner().operation),
        StatusCode::Success
    );
}

#[tokio::test(start_paused = true)]
async fn a_restart_keeps_resources_settings_and_debt() {
    // §5, §7.8.
    let (emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(1.0, 42.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        create(&mut c, NODE, resource("res/q", hdrr(0.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        required(&mut c, "res", 100, 1_000).await,
        StatusCode::Success
    );
    emulator.restart();
    assert_eq!(
        describe(&mut c, "res").await.unwrap(),
        resource("res", hdrr(1.0, 42.0))
    );
    assert_eq!(list(&mut c, "", true).await.unwrap(), ["res", "res/q"]);
    assert_eq!(required(&mut c, "res", 1, 200).await, StatusCode::Timeout);
}

#[tokio::test(start_paused = true)]
async fn with_authentication_on_a_call_needs_a_token() {
    let emulator = bounded(
        Emulator::builder()
            .database("/Root")
            .node(NODE)
            .token("T")
            .start(),
    )
    .await
    .unwrap();
    let mut c = connect(&emulator).await;
    let r = resource("res", hdrr(1.0, 0.0));
    assert_eq!(
        create(&mut c, NODE, r.clone()).await,
        StatusCode::Unauthorized
    );
    assert_eq!(
        required(&mut c, "res", 1, 0).await,
        StatusCode::Unauthorized
    );
    let mut request = tonic::Request::new(CreateResourceRequest {
        coordination_node_path: NODE.to_string(),
        resource: Some(r),
        ..CreateResourceRequest::default()
    });
    request
        .metadata_mut()
        .insert("x-ydb-auth-ticket", "T".parse().unwrap());
    let operation = bounded(c.create_resource(request))
        .await
        .unwrap()
        .into_inner()
        .operation;
    assert_eq!(status(operation), StatusCode::Success);
}

#[tokio::test(start_paused = true)]
async fn the_go_sdk_integration_flow() {
    // §11 #38 (ydb-go-sdk tests/integration/ratelimiter_test.go).
    let (_emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("res", hdrr(1.0, 2.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        describe(&mut c, "res").await.unwrap(),
        resource("res", hdrr(1.0, 2.0))
    );
    assert_eq!(
        alter(&mut c, resource("res", hdrr(3.0, 4.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        describe(&mut c, "res").await.unwrap(),
        resource("res", hdrr(3.0, 4.0))
    );
    assert_eq!(list(&mut c, "res", true).await.unwrap(), ["res"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let acquire = |units| acquire_request("res", units, 2_000, 2_000);
    use acquire_resource_request::Units;
    assert_eq!(
        send_acquire(&mut c, acquire(Units::Required(1))).await,
        StatusCode::Success
    );
    assert_eq!(
        send_acquire(&mut c, acquire(Units::Used(10_000))).await,
        StatusCode::Success
    );
    let start = Instant::now();
    assert_eq!(
        send_acquire(&mut c, acquire(Units::Required(10_000))).await,
        StatusCode::Timeout
    );
    assert_eq!(since(start), 2_000);
}

#[tokio::test(start_paused = true)]
async fn a_prefetch_coefficient_is_inherited_and_sizes_the_bucket() {
    // §11 #34.
    let (_emulator, mut c) = start().await;
    let root = HierarchicalDrrSettings {
        prefetch_coefficient: 1000.0,
        ..hdrr(100.0, 0.0)
    };
    assert_eq!(
        create(&mut c, NODE, resource("root", root)).await,
        StatusCode::Success
    );
    assert_eq!(
        create(&mut c, NODE, resource("root/leaf", hdrr(0.0, 0.0))).await,
        StatusCode::Success
    );
    assert_eq!(
        required(&mut c, "root/leaf", 1, 500).await,
        StatusCode::Success
    );
    assert_eq!(
        required(&mut c, "root/leaf", 90_000, 500).await,
        StatusCode::Success
    );
    assert_eq!(
        required(&mut c, "root/leaf", 20_000, 500).await,
        StatusCode::Success
    );
    assert_eq!(
        required(&mut c, "root/leaf", 1, 500).await,
        StatusCode::Timeout
    );
}

#[tokio::test(start_paused = true)]
async fn an_altered_rate_applies_to_a_saturating_consumer() {
    // §11 #28: 100/s, then 400/s from the next tick.
    let (_emulator, mut c) = start().await;
    assert_eq!(
        create(&mut c, NODE, resource("root", hdrr(100.0, 0.0))).await,
        StatusCode::Success
    );
    let start = Instant::now();
    let mut granted = 0;
    while since(start) < 1_000 {
        assert_eq!(
            required(&mut c, "root", 1, 10_000).await,
            StatusCode::Success
        );
        granted += 1;
    }
    // 20 of prefetch, then 10 per tick at 0.1 … 0.9 s, and the first of the tick at 1 s.
    assert_eq!(granted, 111);
    assert_eq!(
        alter(&mut c, resource("root", hdrr(400.0, 0.0))).await,
        StatusCode::Success
    );
    let mut granted = 0;
    while since(start) < 2_000 {
        assert_eq!(
            required(&mut c, "root", 1, 10_000).await,
            StatusCode::Success
        );
        granted += 1;
    }
    // The rest of the tick at 1 s, then 40 per tick at 1.1 … 1.9 s, and one at 2 s.
    assert_eq!(granted, 9 + 9 * 40 + 1);
}
