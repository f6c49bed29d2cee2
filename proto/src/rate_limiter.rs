//! Package `Ydb.RateLimiter`: resources, their settings, and the requests, responses and
//! results of the six `RateLimiterService` calls.
//!
//! Every call is unary and operation-wrapped: a response carries one
//! [`Operation`] whose `status` is the outcome
//! and whose `result` (an `Any`) holds the call's `…Result` message, for the calls that
//! have one ([`ListResourcesResult`], [`DescribeResourceResult`]).

pub mod v1;

pub use ydb_grpc::google_proto_workaround::protobuf::Struct;
pub use ydb_grpc::ydb_proto::operations::{Operation, OperationParams};

/// Billing of a resource's consumption (`Ydb.RateLimiter.MeteringConfig`). YDB stores and
/// echoes it and bills from it; it does not change what `AcquireResource` grants.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct MeteringConfig {
    /// Meter consumed resources and send billing metrics (default false, not inherited).
    #[prost(bool, tag = "1")]
    pub enabled: bool,
    /// How often clients report consumption history to the coordination node, in ms
    /// (inherited; 5000 for a root).
    #[prost(uint64, tag = "2")]
    pub report_period_ms: u64,
    /// The consumption history period sent in one message to metering, in ms (inherited;
    /// 1000 for a root).
    #[prost(uint64, tag = "3")]
    pub meter_period_ms: u64,
    /// How late a client's report may arrive and still be metered, in seconds (inherited;
    /// 30 for a root; at most an hour).
    #[prost(uint64, tag = "4")]
    pub collect_period_sec: u64,
    /// Provisioned consumption limit in units per second (default 0, not inherited).
    #[prost(double, tag = "5")]
    pub provisioned_units_per_second: f64,
    /// The provisioned burst, as a multiple of `provisioned_units_per_second` (inherited;
    /// 60 for a root).
    #[prost(double, tag = "6")]
    pub provisioned_coefficient: f64,
    /// The on-demand burst, as a multiple of the prefetch (inherited; 1.1 for a root; at
    /// least 1 or zero).
    #[prost(double, tag = "7")]
    pub overshoot_coefficient: f64,
    /// Consumption within the provisioned limit (informative, not billed).
    #[prost(message, optional, tag = "8")]
    pub provisioned: ::core::option::Option<metering_config::Metric>,
    /// Consumption over the provisioned limit, billed as on-demand.
    #[prost(message, optional, tag = "9")]
    pub on_demand: ::core::option::Option<metering_config::Metric>,
    /// Consumption over even the on-demand limit (normally not billed).
    #[prost(message, optional, tag = "10")]
    pub overshoot: ::core::option::Option<metering_config::Metric>,
}

/// Nested types of [`MeteringConfig`].
pub mod metering_config {
    /// One billing metric (`Ydb.RateLimiter.MeteringConfig.Metric`).
    #[derive(Clone, PartialEq, ::prost::Message)]
    pub struct Metric {
        /// Send this metric to billing (default false, not inherited).
        #[prost(bool, tag = "1")]
        pub enabled: bool,
        /// The billing period, in seconds, aligned to the hour (inherited; 60 for a root).
        #[prost(uint64, tag = "2")]
        pub billing_period_sec: u64,
        /// User-defined labels (keys up to 256 bytes, values up to 10240, at most 100).
        /// A `BTreeMap`, so that encoding is deterministic (keys in order, as protobuf's
        /// deterministic serialization writes them).
        #[prost(btree_map = "string, string", tag = "3")]
        pub labels: ::prost::alloc::collections::BTreeMap<
            ::prost::alloc::string::String,
            ::prost::alloc::string::String,
        >,
        /// The billing record's JSON fields (inherited when unset). YDB accepts string values
        /// for the keys `version`, `schema`, `cloud_id`, `folder_id`, `resource_id`,
        /// `source_id` (newer servers also `database`).
        #[prost(message, optional, tag = "10")]
        pub metric_fields: ::core::option::Option<super::Struct>,
    }
}

/// The replicated-bucket leaf behaviour (`Ydb.RateLimiter.ReplicatedBucketSettings`),
/// experimental in YDB.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct ReplicatedBucketSettings {
    /// Interval between syncs with the coordination node and between consumption reports,
    /// in ms (5000 when unset, not inherited; must be positive when set).
    #[prost(uint64, optional, tag = "1")]
    pub report_interval_ms: ::core::option::Option<u64>,
}

/// Settings of the hierarchical deficit round robin (HDRR) algorithm
/// (`Ydb.RateLimiter.HierarchicalDrrSettings`). For the four doubles, 0 means "not set".
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct HierarchicalDrrSettings {
    /// The consumption rate limit, in units per second; required for a root resource,
    /// inherited by children (and a child's own value is capped by its parent's).
    #[prost(double, tag = "1")]
    pub max_units_per_second: f64,
    /// Documented as the burst divided by the rate; YDB stores and echoes it but does not
    /// act on it.
    #[prost(double, tag = "2")]
    pub max_burst_size_coefficient: f64,
    /// The node-local bucket holds up to `prefetch_coefficient × rate` units (inherited;
    /// 0.2 for a root); negative disables prefetching.
    #[prost(double, tag = "3")]
    pub prefetch_coefficient: f64,
    /// Refill of the node-local bucket starts below this fraction of it (inherited; 0.75
    /// for a root; within `[0, 1]`).
    #[prost(double, tag = "4")]
    pub prefetch_watermark: f64,
    /// How deep in debt a replicated bucket may go (negative when set; unset: no limit).
    /// Experimental in YDB.
    #[prost(double, optional, tag = "5")]
    pub immediately_fill_up_to: ::core::option::Option<f64>,
    /// How the leaves of the tree behave (not inherited). Experimental in YDB.
    #[prost(oneof = "hierarchical_drr_settings::LeafBehavior", tags = "6")]
    pub leaf_behavior: ::core::option::Option<hierarchical_drr_settings::LeafBehavior>,
}

/// Nested types of [`HierarchicalDrrSettings`].
pub mod hierarchical_drr_settings {
    /// The `leaf_behavior` oneof.
    #[derive(Clone, Copy, PartialEq, ::prost::Oneof)]
    pub enum LeafBehavior {
        /// Leaves behave as one bucket replicated from the coordination node.
        #[prost(message, tag = "6")]
        ReplicatedBucket(super::ReplicatedBucketSettings),
    }
}

/// A rate-limiter resource (`Ydb.RateLimiter.Resource`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Resource {
    /// The resource's path inside the coordination node: components separated by `/`, no
    /// leading slash; the first component is the root resource.
    #[prost(string, tag = "1")]
    pub resource_path: ::prost::alloc::string::String,
    /// The algorithm and its settings (YDB requires it on create and alter).
    #[prost(oneof = "resource::Type", tags = "2")]
    pub r#type: ::core::option::Option<resource::Type>,
    /// Billing settings, when metered.
    #[prost(message, optional, tag = "3")]
    pub metering_config: ::core::option::Option<MeteringConfig>,
}

/// Nested types of [`Resource`].
pub mod resource {
    /// The `type` oneof.
    #[derive(Clone, Copy, PartialEq, ::prost::Oneof)]
    pub enum Type {
        /// Settings for the hierarchical DRR algorithm.
        #[prost(message, tag = "2")]
        HierarchicalDrr(super::HierarchicalDrrSettings),
    }
}

/// `CreateResource`: creates one resource; its parent must exist.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CreateResourceRequest {
    /// Operation parameters (timeouts, mode).
    #[prost(message, optional, tag = "1")]
    pub operation_params: ::core::option::Option<OperationParams>,
    /// Path of the coordination node.
    #[prost(string, tag = "2")]
    pub coordination_node_path: ::prost::alloc::string::String,
    /// The resource to create.
    #[prost(message, optional, tag = "3")]
    pub resource: ::core::option::Option<Resource>,
}

/// The answer to [`CreateResourceRequest`].
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CreateResourceResponse {
    /// The completed operation (its `result`, when set, is a [`CreateResourceResult`]).
    #[prost(message, optional, tag = "1")]
    pub operation: ::core::option::Option<Operation>,
}

/// The (empty) result of `CreateResource`.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct CreateResourceResult {}

/// `AlterResource`: replaces a resource's settings (fields not sent become unset).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AlterResourceRequest {
    /// Operation parameters (timeouts, mode).
    #[prost(message, optional, tag = "1")]
    pub operation_params: ::core::option::Option<OperationParams>,
    /// Path of the coordination node.
    #[prost(string, tag = "2")]
    pub coordination_node_path: ::prost::alloc::string::String,
    /// The resource's new settings (its path names the resource).
    #[prost(message, optional, tag = "3")]
    pub resource: ::core::option::Option<Resource>,
}

/// The answer to [`AlterResourceRequest`].
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AlterResourceResponse {
    /// The completed operation (its `result`, when set, is an [`AlterResourceResult`]).
    #[prost(message, optional, tag = "1")]
    pub operation: ::core::option::Option<Operation>,
}

/// The (empty) result of `AlterResource`.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct AlterResourceResult {}

/// `DropResource`: deletes a resource without children.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DropResourceRequest {
    /// Operation parameters (timeouts, mode).
    #[prost(message, optional, tag = "1")]
    pub operation_params: ::core::option::Option<OperationParams>,
    /// Path of the coordination node.
    #[prost(string, tag = "2")]
    pub coordination_node_path: ::prost::alloc::string::String,
    /// Path of the resource inside the coordination node.
    #[prost(string, tag = "3")]
    pub resource_path: ::prost::alloc::string::String,
}

/// The answer to [`DropResourceRequest`].
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DropResourceResponse {
    /// The completed operation (its `result`, when set, is a [`DropResourceResult`]).
    #[prost(message, optional, tag = "1")]
    pub operation: ::core::option::Option<Operation>,
}

/// The (empty) result of `DropResource`.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct DropResourceResult {}

/// `ListResources`: the paths of a resource and (recursively) its descendants, or of the
/// roots (all resources, recursively) when `resource_path` is empty.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListResourcesRequest {
    /// Operation parameters (timeouts, mode).
    #[prost(message, optional, tag = "1")]
    pub operation_params: ::core::option::Option<OperationParams>,
    /// Path of the coordination node.
    #[prost(string, tag = "2")]
    pub coordination_node_path: ::prost::alloc::string::String,
    /// Path of the resource inside the coordination node; may be empty.
    #[prost(string, tag = "3")]
    pub resource_path: ::prost::alloc::string::String,
    /// List descendants too.
    #[prost(bool, tag = "4")]
    pub recursive: bool,
}

/// The answer to [`ListResourcesRequest`].
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListResourcesResponse {
    /// The completed operation; on success its `result` is a [`ListResourcesResult`].
    #[prost(message, optional, tag = "1")]
    pub operation: ::core::option::Option<Operation>,
}

/// The result of `ListResources`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListResourcesResult {
    /// The resources' paths, in no specified order.
    #[prost(string, repeated, tag = "1")]
    pub resource_paths: ::prost::alloc::vec::Vec<::prost::alloc::string::String>,
}

/// `DescribeResource`: a resource's stored settings.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DescribeResourceRequest {
    /// Operation parameters (timeouts, mode).
    #[prost(message, optional, tag = "1")]
    pub operation_params: ::core::option::Option<OperationParams>,
    /// Path of the coordination node.
    #[prost(string, tag = "2")]
    pub coordination_node_path: ::prost::alloc::string::String,
    /// Path of the resource inside the coordination node.
    #[prost(string, tag = "3")]
    pub resource_path: ::prost::alloc::string::String,
}

/// The answer to [`DescribeResourceRequest`].
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DescribeResourceResponse {
    /// The completed operation; on success its `result` is a [`DescribeResourceResult`].
    #[prost(message, optional, tag = "1")]
    pub operation: ::core::option::Option<Operation>,
}

/// The result of `DescribeResource`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DescribeResourceResult {
    /// The resource with its settings as stored (not the inherited, effective ones).
    #[prost(message, optional, tag = "1")]
    pub resource: ::core::option::Option<Resource>,
}

/// `AcquireResource`: takes units from a resource (`required`, waiting up to the
/// operation timeout) or reports units already spent (`used`, never waiting).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AcquireResourceRequest {
    /// Operation parameters. Without `operation_timeout` the server does not wait. A
    /// `cancel_after` above zero and below `operation_timeout` makes a request not granted
    /// by then end CANCELLED, with nothing spent.
    #[prost(message, optional, tag = "1")]
    pub operation_params: ::core::option::Option<OperationParams>,
    /// Path of the coordination node.
    #[prost(string, tag = "2")]
    pub coordination_node_path: ::prost::alloc::string::String,
    /// Path of the resource inside the coordination node.
    #[prost(string, tag = "3")]
    pub resource_path: ::prost::alloc::string::String,
    /// How many units, and whether they are to be granted or were used.
    #[prost(oneof = "acquire_resource_request::Units", tags = "4, 5")]
    pub units: ::core::option::Option<acquire_resource_request::Units>,
}

/// Nested types of [`AcquireResourceRequest`].
pub mod acquire_resource_request {
    /// The `units` oneof.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, ::prost::Oneof)]
    pub enum Units {
        /// Units to be granted before use.
        #[prost(uint64, tag = "4")]
        Required(u64),
        /// Units the client already used.
        #[prost(uint64, tag = "5")]
        Used(u64),
    }
}

/// The answer to [`AcquireResourceRequest`].
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AcquireResourceResponse {
    /// The completed operation (its `result`, when set, is an [`AcquireResourceResult`]).
    #[prost(message, optional, tag = "1")]
    pub operation: ::core::option::Option<Operation>,
}

/// The (empty) result of `AcquireResource`.
#[derive(Clone, Copy, PartialEq, ::prost::Message)]
pub struct AcquireResourceResult {}
