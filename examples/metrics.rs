//! The `mutex` workload with a Prometheus recorder installed: prints the scrape output at the end.
//!
//! `cargo run --example metrics` (embedded emulator) or with `YDB_CONNECTION_STRING` set.
//! `RUST_LOG=ydb_coordination=debug` also prints the library's events (at `info` the steady
//! state is quiet).

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tracing_subscriber::EnvFilter;
use ydb_coordination::SessionOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // The library records through the `metrics` facade; the application picks the exporter.
    // Histograms with buckets (the default would be summaries with quantiles).
    let prometheus = PrometheusBuilder::new()
        .set_buckets(&[
            0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])?
        .install_recorder()?;

    let setup = common::setup("metrics").await?;
    let inside = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..4 {
        let session = setup
            .client
            .session(&setup.node, SessionOptions::new())
            .await?;
        let inside = inside.clone();
        workers.push(tokio::spawn(async move {
            let mutex = session.mutex("nightly-job");
            // A try that finds the lock taken counts as `result="timed_out"`.
            if let Some(guard) = mutex.try_lock().await? {
                guard.unlock().await?;
            }
            for _round in 0..3 {
                let guard = mutex.lock().await?;
                let others = inside.fetch_add(1, Ordering::SeqCst);
                assert_eq!(others, 0, "critical sections overlapped");
                let work = tokio::time::sleep(Duration::from_millis(20));
                if guard.token().run_until_cancelled(work).await.is_none() {
                    println!("worker {worker}: lock lost, work stopped");
                }
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await?;
            }
            session.close().await;
            Ok::<_, ydb_coordination::Error>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    setup.client.drop_node(&setup.node).await?;

    println!("# scrape output after 12 critical sections in 4 sessions:");
    println!("{}", prometheus.render());
    Ok(())
}
