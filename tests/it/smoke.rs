//! A minimal end-to-end check: one session, one semaphore.
use std::time::Duration;

use tokio::time::timeout;
use ydb_coordination::emulator::Emulator;
use ydb_coordination::{AcquireOptions, Client, SessionOptions, config::DescribeOptions};

const T: Duration = Duration::from_secs(30);

#[tokio::test(start_paused = true)]
async fn acquire_describe_release_round_trip() {
    let emu = Emulator::builder()
        .node("/local/app")
        .start()
        .await
        .unwrap();
    let client = timeout(T, Client::connect(&emu.connection_string()))
        .await
        .unwrap()
        .unwrap();
    let s = timeout(T, client.session("/local/app", SessionOptions::new()))
        .await
        .unwrap()
        .unwrap();
    timeout(T, s.create_semaphore("sem", 5, b"x"))
        .await
        .unwrap()
        .unwrap();
    let lease = timeout(T, s.acquire("sem", AcquireOptions::new().count(3)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.fencing_token().order, 1);
    let d = timeout(
        T,
        s.describe_semaphore("sem", DescribeOptions::new().owners(true)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(d.count, 3);
    assert_eq!(d.owners.len(), 1);
    assert!(timeout(T, lease.release()).await.unwrap().unwrap());
    timeout(T, s.close()).await.unwrap();
}
