//! A fleet shares one rate: eight workers, each with its own client as each pod of a service
//! has, call a (pretend) payment provider that allows 20 calls a second, taking one unit of a
//! rate-limiter resource before every call. Prints the calls made in each second and the rate
//! achieved next to the configured one, and fails if they differ by more than the
//! measurement allows.
//!
//! `cargo run --example rate_limit` (embedded emulator) or with `YDB_CONNECTION_STRING` set.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use common::{BoxError, bounded};
use tokio::time::Instant;
use ydb_coordination::{ErrorKind, RateLimiter, rate_limiter::ResourceSettings};

const RESOURCE: &str = "payments";
/// Calls a second the provider allows, for the whole fleet.
const RATE: f64 = 20.0;
const WORKERS: usize = 8;
/// How long the fleet calls.
const RUN: Duration = Duration::from_secs(5);
/// The node's prefetch bucket (`rate × 0.2` at the default prefetch coefficient): full at the
/// first acquire and granted at once, on top of the rate.
const BUCKET: f64 = RATE * 0.2;
/// The server hands the rate out in 100 ms ticks of `rate / 10` units, so the run's start and
/// its end can each cut one tick's units off or let them in.
const TOLERANCE_UNITS: f64 = 2.0 * RATE / 10.0;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let setup = bounded("the setup", common::setup("rate-limit"))
        .await?
        .map_err(|e| e.to_string())?;
    let settings = ResourceSettings::new().max_units_per_second(RATE);
    ensure_resource(&setup.client.rate_limiter(&setup.node), settings).await?;

    // Every worker connects before the clock starts, so the run measures only the calls.
    let mut limiters = Vec::new();
    for _ in 0..WORKERS {
        limiters.push(setup.connect().await?.rate_limiter(&setup.node));
    }
    let start = Instant::now();
    let workers: Vec<_> = limiters
        .into_iter()
        .map(|limiter| tokio::spawn(worker(limiter, start)))
        .collect();
    let mut calls = Vec::new();
    for (i, w) in workers.into_iter().enumerate() {
        let made = bounded("a worker", w).await???;
        println!("worker {i}: {} calls", made.len());
        calls.extend(made);
    }

    let seconds = RUN.as_secs() as usize;
    let mut per_second = vec![0u32; seconds];
    for t in &calls {
        // An answer that came just after the end is of a unit granted within the run.
        per_second[(t.as_secs() as usize).min(seconds - 1)] += 1;
    }
    for (second, n) in per_second.iter().enumerate() {
        let note = if second == 0 {
            format!(" (with the node's prefetch bucket of {BUCKET})")
        } else {
            String::new()
        };
        println!("second {second}: {n} calls{note}");
    }
    // Counted, not timed: every acquire waited at most until the run's end, so each call was
    // allowed within the run however late its answer came, and a stall of the machine cannot
    // move calls in or out.
    let achieved = (calls.len() as f64 - BUCKET) / RUN.as_secs_f64();
    let tolerance = TOLERANCE_UNITS / RUN.as_secs_f64();
    println!(
        "achieved {achieved:.2} calls/s over {RUN:?} ({} calls less the bucket of {BUCKET}), \
         configured {RATE:.2}/s, allowed ±{tolerance:.2}/s",
        calls.len()
    );
    setup.client.drop_node(&setup.node).await?;
    if (achieved - RATE).abs() > tolerance {
        return Err(format!("the achieved rate {achieved:.2}/s is not {RATE}/s").into());
    }
    println!("done: {WORKERS} workers kept to the shared rate");
    Ok(())
}

/// Creates the resource, or gives it `settings` when it exists already (a real cluster's node
/// kept from an earlier run).
async fn ensure_resource(
    limiter: &RateLimiter,
    settings: ResourceSettings,
) -> ydb_coordination::Result<()> {
    match limiter.describe_resource(RESOURCE).await {
        Ok(_) => limiter.alter_resource(RESOURCE, settings).await,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            limiter.create_resource(RESOURCE, settings).await
        }
        Err(e) => Err(e),
    }
}

/// Calls until the run ends, one unit before each call; returns when each call was allowed
/// (since `start`).
async fn worker(limiter: RateLimiter, start: Instant) -> ydb_coordination::Result<Vec<Duration>> {
    let mut calls = Vec::new();
    loop {
        let left = RUN.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Ok(calls);
        }
        // Waiting no longer than the run has left: a timeout takes nothing.
        if !limiter.acquire_timeout(RESOURCE, 1, left).await? {
            return Ok(calls);
        }
        calls.push(start.elapsed());
        // The call to the provider.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
