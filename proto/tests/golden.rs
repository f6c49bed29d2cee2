//! Wire compatibility: golden vectors encoded by protobuf's own runtime (with the descriptors
//! of YDB's Python SDK, extended with the in-tree fields; `golden_vectors.py` regenerates
//! them) decode into our structs with every field where it belongs, and re-encode to the
//! same bytes.

#![allow(clippy::unwrap_used)]

use prost::Message;
use ydb_coordination_proto::rate_limiter::*;

/// `CreateResourceRequest`.
const CREATE_RESOURCE_REQUEST: &[&str] = &[
    "0a250801120808011080cab5ee011a051080e59a77220e0a047465616d120671756f7461732801120a2f526f",
    "6f742f6e6f64651a88020a0c6170692f72657175657374731232090000000000002440110000000000004540",
    "19000000000000f0bf21000000000000e83f2900000000002059c032030888271ac301080110882718e80720",
    "1e290000000000001e40310000000000004e40399a9999999999f13f42330801103c1a0b0a03656e76120474",
    "6573741a090a047a6f6e6512016152150a130a09736f757263655f696412061a0470726f764a36080110901c",
    "1a0b0a03656e761204746573741a090a047a6f6e6512016152170a150a09736f757263655f696412081a0664",
    "656d616e64522f1a0b0a03656e761204746573741a090a047a6f6e6512016152150a130a09736f757263655f",
    "696412061a046f766572",
];

/// `AlterResourceRequest`.
const ALTER_RESOURCE_REQUEST: &[&str] = &[
    "0a250801120808011080cab5ee011a051080e59a77220e0a047465616d120671756f7461732801120a2f526f",
    "6f742f6e6f64651a120a03612f62120b2900000000000000003200",
];

/// `DropResourceRequest`.
const DROP_RESOURCE_REQUEST: &[&str] = &[
    "0a250801120808011080cab5ee011a051080e59a77220e0a047465616d120671756f7461732801120a2f526f",
    "6f742f6e6f64651a03612f62",
];

/// `ListResourcesRequest`.
const LIST_RESOURCES_REQUEST: &[&str] = &[
    "0a250801120808011080cab5ee011a051080e59a77220e0a047465616d120671756f7461732801120a2f526f",
    "6f742f6e6f64651a01612001",
];

/// `DescribeResourceRequest`.
const DESCRIBE_RESOURCE_REQUEST: &[&str] = &[
    "0a250801120808011080cab5ee011a051080e59a77220e0a047465616d120671756f7461732801120a2f526f",
    "6f742f6e6f64651a0161",
];

/// `AcquireResourceRequest.required`.
const ACQUIRE_RESOURCE_REQUEST_REQUIRED: &[&str] = &[
    "0a250801120808011080cab5ee011a051080e59a77220e0a047465616d120671756f7461732801120a2f526f",
    "6f742f6e6f64651a016120904e",
];

/// `AcquireResourceRequest.used0`.
const ACQUIRE_RESOURCE_REQUEST_USED0: &[&str] = &["120a2f526f6f742f6e6f64651a01612800"];

/// `ListResourcesResult`.
const LIST_RESOURCES_RESULT: &[&str] = &["0a01610a03612f620a03612f63"];

/// `DescribeResourceResult`.
const DESCRIBE_RESOURCE_RESULT: &[&str] = &[
    "0a88020a0c6170692f7265717565737473123209000000000000244011000000000000454019000000000000",
    "f0bf21000000000000e83f2900000000002059c032030888271ac301080110882718e807201e290000000000",
    "001e40310000000000004e40399a9999999999f13f42330801103c1a0b0a03656e761204746573741a090a04",
    "7a6f6e6512016152150a130a09736f757263655f696412061a0470726f764a36080110901c1a0b0a03656e76",
    "1204746573741a090a047a6f6e6512016152170a150a09736f757263655f696412081a0664656d616e64522f",
    "1a0b0a03656e761204746573741a090a047a6f6e6512016152150a130a09736f757263655f696412061a046f",
    "766572",
];

/// `DescribeResourceResponse`.
const DESCRIBE_RESOURCE_RESPONSE: &[&str] = &[
    "0ae50210011880b51822100a020803120661206e6f7465200728022aca020a3a747970652e676f6f676c6561",
    "7069732e636f6d2f5964622e526174654c696d697465722e44657363726962655265736f7572636552657375",
    "6c74128b020a88020a0c6170692f726571756573747312320900000000000024401100000000000045401900",
    "0000000000f0bf21000000000000e83f2900000000002059c032030888271ac301080110882718e807201e29",
    "0000000000001e40310000000000004e40399a9999999999f13f42330801103c1a0b0a03656e761204746573",
    "741a090a047a6f6e6512016152150a130a09736f757263655f696412061a0470726f764a36080110901c1a0b",
    "0a03656e761204746573741a090a047a6f6e6512016152170a150a09736f757263655f696412081a0664656d",
    "616e64522f1a0b0a03656e761204746573741a090a047a6f6e6512016152150a130a09736f757263655f6964",
    "12061a046f766572",
];

/// `ListResourcesResponse`.
const LIST_RESOURCES_RESPONSE: &[&str] = &[
    "0a5810011880b51822100a020803120661206e6f7465200728022a3e0a37747970652e676f6f676c65617069",
    "732e636f6d2f5964622e526174654c696d697465722e4c6973745265736f7572636573526573756c7412030a",
    "0161",
];

/// `CreateResourceResponse`.
const CREATE_RESOURCE_RESPONSE: &[&str] = &["0a181001188ab51822100a020803120661206e6f746520072802"];

/// `AlterResourceResponse`.
const ALTER_RESOURCE_RESPONSE: &[&str] = &["0a181001188ab51822100a020803120661206e6f746520072802"];

/// `DropResourceResponse`.
const DROP_RESOURCE_RESPONSE: &[&str] = &["0a181001188ab51822100a020803120661206e6f746520072802"];

/// `AcquireResourceResponse`.
const ACQUIRE_RESOURCE_RESPONSE: &[&str] =
    &["0a181001188ab51822100a020803120661206e6f746520072802"];

fn bytes(chunks: &[&str]) -> Vec<u8> {
    let hex: String = chunks.concat();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Decodes `chunks` as `M`, checks that re-encoding gives the same bytes, returns the value.
fn round_trip<M: Message + Default>(chunks: &[&str]) -> M {
    let wire = bytes(chunks);
    let message = M::decode(wire.as_slice()).unwrap();
    assert_eq!(message.encode_to_vec(), wire, "re-encoding differs");
    message
}

fn assert_params(params: Option<&OperationParams>) {
    let params = params.unwrap();
    assert_eq!(params.operation_mode, 1);
    let timeout = params.operation_timeout.unwrap();
    assert_eq!((timeout.seconds, timeout.nanos), (1, 500_000_000));
    let cancel = params.cancel_after.unwrap();
    assert_eq!((cancel.seconds, cancel.nanos), (0, 250_000_000));
    assert_eq!(
        params.labels.get("team").map(String::as_str),
        Some("quotas")
    );
    assert_eq!(params.report_cost_info, 1);
}

fn assert_full_resource(resource: &Resource) {
    use ydb_grpc::google_proto_workaround::protobuf::value::Kind;

    assert_eq!(resource.resource_path, "api/requests");
    let Some(resource::Type::HierarchicalDrr(hdrr)) = resource.r#type else {
        panic!("no hierarchical_drr");
    };
    assert_eq!(hdrr.max_units_per_second, 10.0);
    assert_eq!(hdrr.max_burst_size_coefficient, 42.0);
    assert_eq!(hdrr.prefetch_coefficient, -1.0);
    assert_eq!(hdrr.prefetch_watermark, 0.75);
    assert_eq!(hdrr.immediately_fill_up_to, Some(-100.5));
    assert_eq!(
        hdrr.leaf_behavior,
        Some(hierarchical_drr_settings::LeafBehavior::ReplicatedBucket(
            ReplicatedBucketSettings {
                report_interval_ms: Some(5000)
            }
        ))
    );
    let metering = resource.metering_config.as_ref().unwrap();
    assert!(metering.enabled);
    assert_eq!(
        (
            metering.report_period_ms,
            metering.meter_period_ms,
            metering.collect_period_sec
        ),
        (5000, 1000, 30)
    );
    assert_eq!(metering.provisioned_units_per_second, 7.5);
    assert_eq!(metering.provisioned_coefficient, 60.0);
    assert_eq!(metering.overshoot_coefficient, 1.1);
    let metrics = [
        (&metering.provisioned, true, 60, "prov"),
        (&metering.on_demand, true, 3600, "demand"),
        (&metering.overshoot, false, 0, "over"),
    ];
    for (metric, enabled, period, source) in metrics {
        let metric = metric.as_ref().unwrap();
        assert_eq!(
            (metric.enabled, metric.billing_period_sec),
            (enabled, period)
        );
        let labels: Vec<_> = metric
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(labels, [("env", "test"), ("zone", "a")]);
        let fields = &metric.metric_fields.as_ref().unwrap().fields;
        assert_eq!(
            fields.get("source_id").and_then(|v| v.kind.clone()),
            Some(Kind::StringValue(source.to_string()))
        );
    }
}

#[test]
fn create_request_with_every_field_round_trips() {
    let r: CreateResourceRequest = round_trip(CREATE_RESOURCE_REQUEST);
    assert_params(r.operation_params.as_ref());
    assert_eq!(r.coordination_node_path, "/Root/node");
    assert_full_resource(r.resource.as_ref().unwrap());
}

#[test]
fn alter_request_keeps_a_present_zero_and_an_empty_leaf_behavior() {
    let r: AlterResourceRequest = round_trip(ALTER_RESOURCE_REQUEST);
    assert_params(r.operation_params.as_ref());
    let resource = r.resource.unwrap();
    assert_eq!(resource.resource_path, "a/b");
    let Some(resource::Type::HierarchicalDrr(hdrr)) = resource.r#type else {
        panic!("no hierarchical_drr");
    };
    assert_eq!(hdrr.max_units_per_second, 0.0);
    assert_eq!(hdrr.immediately_fill_up_to, Some(0.0));
    assert_eq!(
        hdrr.leaf_behavior,
        Some(hierarchical_drr_settings::LeafBehavior::ReplicatedBucket(
            ReplicatedBucketSettings::default()
        ))
    );
    assert_eq!(resource.metering_config, None);
}

#[test]
fn path_requests_round_trip() {
    let drop: DropResourceRequest = round_trip(DROP_RESOURCE_REQUEST);
    assert_params(drop.operation_params.as_ref());
    assert_eq!(
        (
            drop.coordination_node_path.as_str(),
            drop.resource_path.as_str()
        ),
        ("/Root/node", "a/b")
    );
    let list: ListResourcesRequest = round_trip(LIST_RESOURCES_REQUEST);
    assert_params(list.operation_params.as_ref());
    assert_eq!((list.resource_path.as_str(), list.recursive), ("a", true));
    let describe: DescribeResourceRequest = round_trip(DESCRIBE_RESOURCE_REQUEST);
    assert_params(describe.operation_params.as_ref());
    assert_eq!(describe.resource_path, "a");
}

#[test]
fn acquire_request_oneof_arms_round_trip() {
    use acquire_resource_request::Units;

    let required: AcquireResourceRequest = round_trip(ACQUIRE_RESOURCE_REQUEST_REQUIRED);
    assert_params(required.operation_params.as_ref());
    assert_eq!(required.resource_path, "a");
    assert_eq!(required.units, Some(Units::Required(10000)));
    let used: AcquireResourceRequest = round_trip(ACQUIRE_RESOURCE_REQUEST_USED0);
    assert_eq!(used.operation_params, None);
    // A zero in a oneof is still on the wire: the arm is set.
    assert_eq!(used.units, Some(Units::Used(0)));
}

#[test]
fn results_round_trip() {
    let list: ListResourcesResult = round_trip(LIST_RESOURCES_RESULT);
    assert_eq!(list.resource_paths, ["a", "a/b", "a/c"]);
    let describe: DescribeResourceResult = round_trip(DESCRIBE_RESOURCE_RESULT);
    assert_full_resource(describe.resource.as_ref().unwrap());
    assert!(CreateResourceResult::default().encode_to_vec().is_empty());
}

fn assert_operation(operation: &Operation, status: i32) {
    assert!(operation.ready);
    assert_eq!(operation.status, status);
    let issue = operation.issues.first().unwrap();
    assert_eq!(
        (issue.message.as_str(), issue.issue_code, issue.severity),
        ("a note", 7, 2)
    );
    assert_eq!(issue.position.as_ref().map(|p| p.row), Some(3));
}

#[test]
fn responses_round_trip_with_packed_results() {
    let describe: DescribeResourceResponse = round_trip(DESCRIBE_RESOURCE_RESPONSE);
    let operation = describe.operation.unwrap();
    assert_operation(&operation, 400000);
    let any = operation.result.unwrap();
    assert_eq!(
        any.type_url,
        "type.googleapis.com/Ydb.RateLimiter.DescribeResourceResult"
    );
    let result = DescribeResourceResult::decode(any.value.as_slice()).unwrap();
    assert_full_resource(result.resource.as_ref().unwrap());

    let list: ListResourcesResponse = round_trip(LIST_RESOURCES_RESPONSE);
    let any = list.operation.unwrap().result.unwrap();
    let result = ListResourcesResult::decode(any.value.as_slice()).unwrap();
    assert_eq!(result.resource_paths, ["a"]);

    let create: CreateResourceResponse = round_trip(CREATE_RESOURCE_RESPONSE);
    let alter: AlterResourceResponse = round_trip(ALTER_RESOURCE_RESPONSE);
    let drop: DropResourceResponse = round_trip(DROP_RESOURCE_RESPONSE);
    let acquire: AcquireResourceResponse = round_trip(ACQUIRE_RESOURCE_RESPONSE);
    for operation in [
        create.operation,
        alter.operation,
        drop.operation,
        acquire.operation,
    ] {
        let operation = operation.unwrap();
        assert_operation(&operation, 400010);
        assert_eq!(operation.result, None);
    }
}
