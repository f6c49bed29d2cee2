//! The rate limiter's tower layer against the emulator, on paused time: units taken per
//! request (fixed and from the request), a limit answered at once or after a bounded wait, a
//! wait that ends in a pass, a server that cannot be reached or a bad resource told apart
//! from a limit, the inner service's errors passed through, and its readiness respected.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use common::within;
use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::PollSemaphore;
use tower::{Layer, Service, ServiceExt, service_fn};
use ydb_coordination::emulator::Emulator;
use ydb_coordination::rate_limiter::layer::{RateLimitError, RateLimitLayer};
use ydb_coordination::{
    Client, ErrorKind, RateLimiter, config::NodeConfig, rate_limiter::ResourceSettings,
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

async fn resource(limiter: &RateLimiter, path: &str, units_per_second: f64) {
    let settings = ResourceSettings::new().max_units_per_second(units_per_second);
    within(limiter.create_resource(path, settings))
        .await
        .unwrap();
}

/// An inner service that echoes its request and counts its calls.
fn echo<Req: Send + 'static>(
    calls: &Arc<AtomicU64>,
) -> impl Service<Req, Response = Req, Error = Infallible, Future: Send> + Clone + Send + 'static {
    let calls = calls.clone();
    service_fn(move |req: Req| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, Infallible>(req) }
    })
}

/// How long one more unit of `path` takes to come, in ms: the debt that requests left.
async fn wait_for_one_more(limiter: &RateLimiter, path: &str) -> u128 {
    let start = Instant::now();
    assert!(
        within(limiter.acquire_timeout(path, 1, Duration::from_secs(30)))
            .await
            .unwrap()
    );
    start.elapsed().as_millis()
}

#[tokio::test(start_paused = true)]
async fn each_request_takes_the_fixed_units() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 10.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    // 20 units at 10 a second: granted into debt (the bucket was full), two seconds of it.
    let layer = RateLimitLayer::new(limiter.clone(), "api")
        .units(20)
        .wait(Duration::from_secs(1));
    let service = layer.layer(echo::<u32>(&calls));
    assert_eq!(within(service.oneshot(7)).await.unwrap(), 7);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let waited = wait_for_one_more(&limiter, "api").await;
    assert!((1_800..=2_200).contains(&waited), "{waited}");
}

#[tokio::test(start_paused = true)]
async fn each_request_takes_the_units_computed_from_it() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "upload", 10.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    let layer = RateLimitLayer::new(limiter.clone(), "upload")
        .units_from(|body: &Vec<u8>| body.len() as u64)
        .wait(Duration::from_secs(1));
    let service = layer.layer(echo::<Vec<u8>>(&calls));
    // Nothing to take: it passes without asking, and leaves no debt.
    assert!(
        within(service.clone().oneshot(Vec::new()))
            .await
            .unwrap()
            .is_empty()
    );
    // 30 units: three seconds of debt.
    assert_eq!(
        within(service.oneshot(vec![0; 30])).await.unwrap().len(),
        30
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let waited = wait_for_one_more(&limiter, "upload").await;
    assert!((2_800..=3_200).contains(&waited), "{waited}");
}

#[tokio::test(start_paused = true)]
async fn without_a_wait_a_request_over_the_rate_is_limited_at_once() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 1.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    let service = RateLimitLayer::new(limiter, "api").layer(echo::<u32>(&calls));
    // The first unit is there; the next one is a second away.
    assert_eq!(within(service.clone().oneshot(1)).await.unwrap(), 1);
    let start = Instant::now();
    let err = within(service.clone().oneshot(2)).await.unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(10));
    match &err {
        RateLimitError::Limited(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired),
        other => panic!("not limited: {other:?}"),
    }
    assert!(err.is_limited());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the limited request was not served"
    );
    // The rate comes back.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(within(service.oneshot(3)).await.unwrap(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_within_its_bound_then_passes() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 1.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    let service = RateLimitLayer::new(limiter, "api")
        .wait(Duration::from_secs(3))
        .layer(echo::<u32>(&calls));
    assert_eq!(within(service.clone().oneshot(1)).await.unwrap(), 1);
    let start = Instant::now();
    assert_eq!(within(service.oneshot(2)).await.unwrap(), 2);
    let waited = start.elapsed();
    assert!(
        waited > Duration::from_millis(500) && waited <= Duration::from_secs(1),
        "{waited:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_request_is_limited_when_its_bound_passes() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 1.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    let service = RateLimitLayer::new(limiter.clone(), "api")
        .wait(Duration::from_millis(300))
        .layer(echo::<u32>(&calls));
    assert_eq!(within(service.clone().oneshot(1)).await.unwrap(), 1);
    let start = Instant::now();
    let err = within(service.oneshot(2)).await.unwrap_err();
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(300),
        "gave up at the bound"
    );
    match &err {
        RateLimitError::Limited(e) => assert_eq!(e.kind(), ErrorKind::NotAcquired),
        other => panic!("not limited: {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Nothing was taken: the next unit still comes a second after the first.
    let waited = wait_for_one_more(&limiter, "api").await;
    assert!(waited <= 700, "{waited}");
}

#[tokio::test(start_paused = true)]
async fn a_server_that_cannot_be_reached_is_not_a_limit() {
    let (emulator, limiter) = limiter().await;
    resource(&limiter, "api", 100.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    emulator.net().refuse_for(Duration::from_secs(3600));
    emulator.net().cut();
    for wait in [Duration::ZERO, Duration::from_secs(1)] {
        let service = RateLimitLayer::new(limiter.clone(), "api")
            .wait(wait)
            .layer(echo::<u32>(&calls));
        let err = within(service.oneshot(1)).await.unwrap_err();
        assert!(!err.is_limited(), "{wait:?}: {err:?}");
        match &err {
            RateLimitError::LimiterFailed(e) => {
                assert_ne!(e.kind(), ErrorKind::NotAcquired, "{wait:?}")
            }
            other => panic!("{wait:?}: not a failure of the rate limiter: {other:?}"),
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_resource_that_does_not_exist_is_not_a_limit() {
    let (_emulator, limiter) = limiter().await;
    let calls = Arc::new(AtomicU64::new(0));
    for path in ["absent", "bad path"] {
        for wait in [Duration::ZERO, Duration::from_secs(1)] {
            let service = RateLimitLayer::new(limiter.clone(), path)
                .wait(wait)
                .layer(echo::<u32>(&calls));
            match within(service.oneshot(1)).await.unwrap_err() {
                RateLimitError::LimiterFailed(e) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{path} {wait:?}")
                }
                other => panic!("{path} {wait:?}: {other:?}"),
            }
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn the_inner_services_errors_pass_through() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 100.0).await;
    let failing = service_fn(|_: u32| async {
        Err::<u32, _>(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    });
    let service = RateLimitLayer::new(limiter.clone(), "api").layer(failing);
    match within(service.oneshot(1)).await.unwrap_err() {
        RateLimitError::Inner(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied),
        other => panic!("{other:?}"),
    }
    // An error of the inner service's readiness too.
    let mut broken = RateLimitLayer::new(limiter, "api").layer(Broken);
    match within(broken.ready()).await.unwrap_err() {
        RateLimitError::Inner(e) => assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe),
        other => panic!("{other:?}"),
    }
}

/// A service whose readiness fails.
#[derive(Debug, Clone)]
struct Broken;

impl Service<u32> for Broken {
    type Response = u32;
    type Error = std::io::Error;
    type Future = BoxFuture<'static, Result<u32, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
    }

    fn call(&mut self, req: u32) -> Self::Future {
        Box::pin(async move { Ok(req) })
    }
}

/// A service ready when it holds one of a few shared permits (as tower's concurrency limit
/// is), which its call keeps until the response.
struct Permits {
    semaphore: PollSemaphore,
    permit: Option<OwnedSemaphorePermit>,
}

impl Permits {
    fn new(permits: usize) -> Self {
        Self {
            semaphore: PollSemaphore::new(Arc::new(Semaphore::new(permits))),
            permit: None,
        }
    }
}

impl Clone for Permits {
    fn clone(&self) -> Self {
        // A clone is not ready: it waits for its own permit.
        Self {
            semaphore: self.semaphore.clone(),
            permit: None,
        }
    }
}

impl Service<u32> for Permits {
    type Response = u32;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<u32, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.permit.is_none() {
            match self.semaphore.poll_acquire(cx) {
                Poll::Ready(permit) => self.permit = permit,
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: u32) -> Self::Future {
        let permit = self.permit.take();
        assert!(permit.is_some(), "called before it was ready");
        Box::pin(async move {
            drop(permit);
            Ok(req)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn the_inner_services_readiness_is_respected() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 1.0).await;
    let layer = RateLimitLayer::new(limiter.clone(), "api").wait(Duration::from_secs(30));
    let mut service = layer.layer(Permits::new(1));
    // The first request takes the bucket's unit and is served.
    assert_eq!(
        within(service.ready().await.unwrap().call(1))
            .await
            .unwrap(),
        1
    );
    // The second holds the inner service's one permit while it waits for its unit (a
    // second away)...
    let mut waiting = within(service.ready()).await.unwrap().call(2);
    let short = Duration::from_millis(300);
    assert!(tokio::time::timeout(short, &mut waiting).await.is_err());
    // ...so the service is not ready for a third.
    let mut third = service.clone();
    assert!(
        tokio::time::timeout(short, third.ready()).await.is_err(),
        "ready without a permit"
    );
    // Dropping the waiting request gives its permit back.
    drop(waiting);
    within(third.ready()).await.unwrap();
    assert_eq!(within(third.call(3)).await.unwrap(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_its_first_poll_takes_no_units() {
    let (_emulator, limiter) = limiter().await;
    resource(&limiter, "api", 1.0).await;
    let calls = Arc::new(AtomicU64::new(0));
    let mut service = RateLimitLayer::new(limiter, "api").layer(echo::<u32>(&calls));
    let unpolled = within(service.ready()).await.unwrap().call(1);
    drop(unpolled);
    // The bucket's one unit is still there.
    assert_eq!(within(service.oneshot(2)).await.unwrap(), 2);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
