//! Row 11: the rate limiter on the in-process emulator in real time: the rate that 1, 10 and
//! 100 concurrent acquirers achieve against the configured one, and what an acquire that does
//! not wait costs next to one unary call.
//!
//! The `ydb` crate has no rate-limiter client, so this row has no side by side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ydb_coordination::emulator::Emulator;
use ydb_coordination::{Client, RateLimiter, rate_limiter::ResourceSettings};

use super::stats::quantile;
use super::{Config, R, STEP, within};

const NODE: &str = "/local/rate";
/// The configured rate of the achieved-rate runs.
pub(crate) const RATE: f64 = 200.0;
/// The acquirers of each achieved-rate run.
pub(crate) const CONCURRENCY: [usize; 3] = [1, 10, 100];
/// Subtracted from the units granted: the node's prefetch bucket (`rate × 0.2` at the default
/// prefetch coefficient, 40 units at 200/s), full at the first acquire and granted at once.
pub(crate) const BUCKET: f64 = RATE * 0.2;
/// A rate no acquire of the latency runs waits for.
pub(crate) const UNLIMITED: f64 = 1e12;

/// One achieved-rate run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Achieved {
    pub(crate) acquirers: usize,
    /// Units granted from the first acquire to the window's end.
    pub(crate) units: usize,
    pub(crate) window: Duration,
}

impl Achieved {
    /// Achieved ÷ configured: the units granted less the prefetch bucket, over the window.
    pub(crate) fn ratio(&self) -> f64 {
        (self.units as f64 - BUCKET) / self.window.as_secs_f64() / RATE
    }
}

/// Round trips of acquires that do not wait, and of `describe_node` on the same client.
#[derive(Debug, Clone)]
pub(crate) struct Latency {
    pub(crate) acquire: Vec<Duration>,
    pub(crate) describe: Vec<Duration>,
}

impl Latency {
    /// The `q` quantile of the acquires (nearest rank).
    pub(crate) fn acquire_at(&self, q: f64) -> Duration {
        quantile(&self.acquire, q)
    }

    pub(crate) fn describe_median(&self) -> Duration {
        quantile(&self.describe, 0.5)
    }
}

/// Row 11's results.
#[derive(Debug, Clone)]
pub(crate) struct Rate {
    pub(crate) achieved: Vec<Achieved>,
    pub(crate) latency: Latency,
}

/// Runs row 11: the achieved-rate runs one after another, each on a fresh resource, then the
/// latency runs.
pub(crate) async fn row(cfg: &Config) -> R<Rate> {
    let emulator = within(
        "start the emulator",
        STEP,
        Emulator::builder().node(NODE).start(),
    )
    .await?;
    let client = within(
        "connect",
        STEP,
        Client::connect(&emulator.connection_string()),
    )
    .await?;
    let limiter = client.rate_limiter(NODE);
    let window = cfg.duration(Duration::from_millis(2500));
    let mut achieved = Vec::new();
    for acquirers in CONCURRENCY {
        let resource = format!("rate-{acquirers}");
        let settings = ResourceSettings::new().max_units_per_second(RATE);
        within(
            "create_resource",
            STEP,
            limiter.create_resource(&resource, settings),
        )
        .await?;
        let units = run(&limiter, &resource, acquirers, window).await?;
        achieved.push(Achieved {
            acquirers,
            units,
            window,
        });
    }
    let latency = latency(&client, &limiter, cfg.count(2000, 200)).await?;
    Ok(Rate { achieved, latency })
}

/// `acquirers` loops of one-unit acquires of `resource` for `window`: the units granted.
/// Each acquire waits at most until the window's end (the server gives up then, taking
/// nothing), so every unit counted was granted within the window, whenever its answer came.
async fn run(
    limiter: &RateLimiter,
    resource: &str,
    acquirers: usize,
    window: Duration,
) -> R<usize> {
    let to = Instant::now() + window;
    let resource: Arc<str> = resource.into();
    let tasks: Vec<_> = (0..acquirers)
        .map(|_| {
            let (limiter, resource) = (limiter.clone(), resource.clone());
            tokio::spawn(async move {
                let mut granted = 0;
                loop {
                    let left = to.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok::<_, ydb_coordination::Error>(granted);
                    }
                    // Waiting no longer than the window has left; a timeout takes nothing.
                    if !limiter.acquire_timeout(&resource, 1, left).await? {
                        return Ok(granted);
                    }
                    granted += 1;
                }
            })
        })
        .collect();
    let mut units = 0;
    for task in tasks {
        // Every acquire waits at most until the window's end (and the client's answer margin).
        units += within("an acquirer", window + STEP, task).await??;
    }
    Ok(units)
}

/// `n` one-unit acquires of a resource that never makes them wait, and `n` describes of the
/// node, alternating in batches so that both see the same moments of the machine.
async fn latency(client: &Client, limiter: &RateLimiter, n: usize) -> R<Latency> {
    let settings = ResourceSettings::new().max_units_per_second(UNLIMITED);
    within(
        "create_resource",
        STEP,
        limiter.create_resource("unlimited", settings),
    )
    .await?;
    let batch = 50;
    let (mut acquire, mut describe) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // The first batch of each warms up the connection and is not kept.
    for round in 0..=n.div_ceil(batch) {
        let keep = round > 0;
        for _ in 0..batch {
            let t = Instant::now();
            within("acquire", STEP, limiter.acquire("unlimited", 1)).await?;
            if keep {
                acquire.push(t.elapsed());
            }
        }
        for _ in 0..batch {
            let t = Instant::now();
            within("describe_node", STEP, client.describe_node(NODE)).await?;
            if keep {
                describe.push(t.elapsed());
            }
        }
    }
    Ok(Latency { acquire, describe })
}
