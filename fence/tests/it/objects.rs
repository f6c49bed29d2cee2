//! The object-store adapter against a real S3-compatible store (SeaweedFS), started once for
//! this test binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use ydb_coordination::FencingToken;
use ydb_coordination_fence::objects::ObjectFence;
use ydb_coordination_fence::{ErrorKind, FencedStore, Outcome, Token, Write, kit};

use crate::common::{self, within};

fn t(order: u64) -> Token {
    Token::new(FencingToken::new(0, order))
}

fn s3(server: &common::Server) -> Arc<dyn ObjectStore> {
    let s3 = AmazonS3Builder::new()
        .with_endpoint(server.s3_endpoint())
        .with_allow_http(true)
        .with_bucket_name(common::BUCKET)
        .with_region("us-east-1")
        .with_access_key_id("fence-test")
        .with_secret_access_key("fence-test")
        .build()
        .unwrap();
    Arc::new(s3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_passes_the_conformance_kit() {
    let Some(server) = common::seaweedfs() else {
        return;
    };
    let report = kit::run(&ObjectFence::new(s3(server))).await;
    assert!(report.passed(), "{report}");
}

#[tokio::test]
async fn a_claim_changes_the_objects_etag_so_an_older_write_cannot_slip_in() {
    let Some(server) = common::seaweedfs() else {
        return;
    };
    let store = s3(server);
    let fence = ObjectFence::new(store.clone());
    let path = Path::from("claimed/report.csv");
    let outcome = within(fence.write(path.as_ref(), t(1), Write::new(b"v1")))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Applied);
    let before = within(store.head(&path)).await.unwrap().e_tag;
    assert_eq!(
        within(fence.claim(path.as_ref(), t(2))).await.unwrap(),
        Outcome::Applied
    );
    let after = within(store.head(&path)).await.unwrap().e_tag;
    assert_ne!(
        before, after,
        "the same value, a new mark: the body and its ETag change"
    );
    let record = within(fence.read(path.as_ref())).await.unwrap();
    assert_eq!(
        (record.mark, record.value.as_deref()),
        (Some(t(2)), Some(&b"v1"[..]))
    );
}

#[tokio::test]
async fn an_object_written_without_the_fence_is_corrupt_and_left_alone() {
    let Some(server) = common::seaweedfs() else {
        return;
    };
    let store = s3(server);
    let fence = ObjectFence::new(store.clone());
    let path = Path::from("foreign/data.bin");
    within(store.put(&path, PutPayload::from_static(b"not fenced")))
        .await
        .unwrap();
    let err = within(fence.write(path.as_ref(), t(1), Write::new(b"x")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    let kept = within(within(store.get(&path)).await.unwrap().bytes())
        .await
        .unwrap();
    assert_eq!(&kept[..], b"not fenced");
}
