#![cfg_attr(docsrs, feature(doc_cfg))]
//! Protocol types for YDB's rate limiter: the messages of package `Ydb.RateLimiter` and a
//! tonic client and server for `Ydb.RateLimiter.V1.RateLimiterService`.
//!
//! `ydb-grpc` (the crate of generated YDB protocol types the official `ydb` SDK uses) has no
//! rate-limiter types, so they are here, written as the prost derives `prost-build` would
//! emit from YDB's in-tree `ydb/public/api/protos/ydb_rate_limiter.proto`. That file is
//! newer than the one in `ydb-api-protos` (and in the Go, JS and Python SDKs): it adds
//! [`rate_limiter::Resource::metering_config`],
//! [`rate_limiter::HierarchicalDrrSettings::immediately_fill_up_to`] and
//! [`rate_limiter::HierarchicalDrrSettings::leaf_behavior`], wire-compatible additions an
//! older peer skips. The shared types (`Ydb.Operations.OperationParams` and `Operation`,
//! `google.protobuf.Struct`) are `ydb-grpc`'s, re-exported from [`rate_limiter`] for
//! convenience.
//!
//! # Examples
//!
//! ```
//! use prost::Message;
//! use ydb_coordination_proto::rate_limiter::{
//!     AcquireResourceRequest, acquire_resource_request::Units,
//! };
//!
//! let request = AcquireResourceRequest {
//!     coordination_node_path: "/local/quotas".to_string(),
//!     resource_path: "api/requests".to_string(),
//!     units: Some(Units::Used(0)), // a oneof arm keeps its presence, zero included
//!     ..AcquireResourceRequest::default()
//! };
//! let decoded = AcquireResourceRequest::decode(request.encode_to_vec().as_slice()).unwrap();
//! assert_eq!(decoded.units, Some(Units::Used(0)));
//! ```
//!
//! The service stubs, [`rate_limiter::v1::rate_limiter_service_client`] and
//! [`rate_limiter::v1::rate_limiter_service_server`], are `tonic-build`'s output for the
//! service with the `tonic-prost` codec, as `ydb-grpc` generates its own services.

pub mod rate_limiter;
