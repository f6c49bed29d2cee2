//! The YDB adapter against a real YDB, when `YDB_CONNECTION_STRING` names one (no YDB server
//! runs on the CI machines: there the test says it skipped, by name). The statements are
//! unit-tested in `src/ydb.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;

use ydb::ClientBuilder;
use ydb_coordination_fence::kit;
use ydb_coordination_fence::ydb::{YdbFence, YdbStore};

use crate::common::within;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_conformance_kit() {
    let Ok(connection) = std::env::var("YDB_CONNECTION_STRING") else {
        // Past the test harness's capture, so that the skip shows in every run's output.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: ydb::the_store_passes_the_conformance_kit needs a YDB: set YDB_CONNECTION_STRING (docker/README.md starts one)"
        );
        return;
    };
    let client = within(
        ClientBuilder::new_from_connection_string(connection)
            .unwrap()
            .build(),
    )
    .await
    .unwrap();
    let fence = YdbFence::with_table("fence_kit/fence").unwrap();
    let store = within(YdbStore::setup(client.query_client(), fence))
        .await
        .unwrap();
    let report = kit::run(&store).await;
    assert!(report.passed(), "{report}");
}
