#!/usr/bin/env python3
"""Regenerates the golden vectors of `golden.rs` with protobuf's own runtime.

The messages come from the descriptors YDB's Python SDK bundles (`pip install ydb`:
`ydb/_grpc/v5/protos/ydb_rate_limiter_pb2.py`). Those are generated from ydb-api-protos,
which lacks the in-tree fields `Resource.metering_config` (3),
`HierarchicalDrrSettings.immediately_fill_up_to` (5) and `.replicated_bucket` (6); this
script adds them to a copy of the descriptor, exactly as YDB's in-tree
`ydb/public/api/protos/ydb_rate_limiter.proto` declares them, so every field is covered.

Prints one `("Name", "hex"),` line per vector, to paste into `golden.rs`. Maps are written
with deterministic serialization (keys in order); `OperationParams.labels` (a `HashMap` in
`ydb-grpc`, so in no fixed order) and `Struct` get one entry each.
"""

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
from google.protobuf import struct_pb2

from ydb._grpc.v5.protos import ydb_rate_limiter_pb2

POOL = descriptor_pool.DescriptorPool()


def add_file(fd, seen):
    """Adds a file of the default pool, and first its dependencies, to POOL."""
    if fd.name in seen:
        return
    seen.add(fd.name)
    for dep in fd.dependencies:
        add_file(dep, seen)
    proto = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(proto)
    if fd.name == ydb_rate_limiter_pb2.DESCRIPTOR.name:
        extend(proto)
    POOL.Add(proto)


def field(msg, name, number, ftype, type_name=None, label=F.LABEL_OPTIONAL, oneof=None, optional=False):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    if optional:
        f.proto3_optional = True
    return f


def extend(proto):
    """The in-tree additions: MeteringConfig, ReplicatedBucketSettings, fields 3, 5, 6."""
    proto.dependency.append("google/protobuf/struct.proto")
    messages = {m.name: m for m in proto.message_type}

    metering = proto.message_type.add(name="MeteringConfig")
    metric = metering.nested_type.add(name="Metric")
    entry = metric.nested_type.add(name="LabelsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    field(metric, "enabled", 1, F.TYPE_BOOL)
    field(metric, "billing_period_sec", 2, F.TYPE_UINT64)
    field(metric, "labels", 3, F.TYPE_MESSAGE, ".Ydb.RateLimiter.MeteringConfig.Metric.LabelsEntry",
          label=F.LABEL_REPEATED)
    field(metric, "metric_fields", 10, F.TYPE_MESSAGE, ".google.protobuf.Struct")
    field(metering, "enabled", 1, F.TYPE_BOOL)
    field(metering, "report_period_ms", 2, F.TYPE_UINT64)
    field(metering, "meter_period_ms", 3, F.TYPE_UINT64)
    field(metering, "collect_period_sec", 4, F.TYPE_UINT64)
    field(metering, "provisioned_units_per_second", 5, F.TYPE_DOUBLE)
    field(metering, "provisioned_coefficient", 6, F.TYPE_DOUBLE)
    field(metering, "overshoot_coefficient", 7, F.TYPE_DOUBLE)
    metric_type = ".Ydb.RateLimiter.MeteringConfig.Metric"
    field(metering, "provisioned", 8, F.TYPE_MESSAGE, metric_type)
    field(metering, "on_demand", 9, F.TYPE_MESSAGE, metric_type)
    field(metering, "overshoot", 10, F.TYPE_MESSAGE, metric_type)

    replicated = proto.message_type.add(name="ReplicatedBucketSettings")
    replicated.oneof_decl.add(name="_report_interval_ms")
    field(replicated, "report_interval_ms", 1, F.TYPE_UINT64, oneof=0, optional=True)

    hdrr = messages["HierarchicalDrrSettings"]
    hdrr.oneof_decl.add(name="leaf_behavior")
    hdrr.oneof_decl.add(name="_immediately_fill_up_to")
    field(hdrr, "immediately_fill_up_to", 5, F.TYPE_DOUBLE, oneof=1, optional=True)
    field(hdrr, "replicated_bucket", 6, F.TYPE_MESSAGE, ".Ydb.RateLimiter.ReplicatedBucketSettings",
          oneof=0)

    field(messages["Resource"], "metering_config", 3, F.TYPE_MESSAGE, ".Ydb.RateLimiter.MeteringConfig")


SEEN = set()
add_file(struct_pb2.DESCRIPTOR, SEEN)
add_file(ydb_rate_limiter_pb2.DESCRIPTOR, SEEN)


def new(name, **fields):
    cls = message_factory.GetMessageClass(POOL.FindMessageTypeByName(name))
    return cls(**fields)


def rl(name, **fields):
    return new("Ydb.RateLimiter." + name, **fields)


def params():
    p = new("Ydb.Operations.OperationParams")
    p.operation_mode = 1  # SYNC
    p.operation_timeout.seconds = 1
    p.operation_timeout.nanos = 500_000_000
    p.cancel_after.nanos = 250_000_000
    p.labels["team"] = "quotas"
    p.report_cost_info = 1  # ENABLED
    return p


def metric(enabled, period, source):
    m = rl("MeteringConfig.Metric", enabled=enabled, billing_period_sec=period)
    m.labels["zone"] = "a"
    m.labels["env"] = "test"
    m.metric_fields.fields["source_id"].string_value = source
    return m


def full_resource():
    hdrr = rl("HierarchicalDrrSettings", max_units_per_second=10.0, max_burst_size_coefficient=42.0,
              prefetch_coefficient=-1.0, prefetch_watermark=0.75, immediately_fill_up_to=-100.5)
    hdrr.replicated_bucket.report_interval_ms = 5000
    metering = rl("MeteringConfig", enabled=True, report_period_ms=5000, meter_period_ms=1000,
                  collect_period_sec=30, provisioned_units_per_second=7.5, provisioned_coefficient=60.0,
                  overshoot_coefficient=1.1)
    metering.provisioned.CopyFrom(metric(True, 60, "prov"))
    metering.on_demand.CopyFrom(metric(True, 3600, "demand"))
    metering.overshoot.CopyFrom(metric(False, 0, "over"))
    return rl("Resource", resource_path="api/requests", hierarchical_drr=hdrr, metering_config=metering)


def operation(result):
    op = new("Ydb.Operations.Operation", id="", ready=True, status=400000)
    issue = op.issues.add(message="a note", issue_code=7, severity=2)
    issue.position.row = 3
    if result is not None:
        op.result.Pack(result)
    return op


def vectors():
    node = "/Root/node"
    yield "CreateResourceRequest", rl("CreateResourceRequest", operation_params=params(),
                                      coordination_node_path=node, resource=full_resource())
    # A zero with presence (field 5) and an empty replicated bucket (field 6 only).
    hdrr = rl("HierarchicalDrrSettings", immediately_fill_up_to=0.0)
    hdrr.replicated_bucket.SetInParent()
    yield "AlterResourceRequest", rl("AlterResourceRequest", operation_params=params(),
                                     coordination_node_path=node,
                                     resource=rl("Resource", resource_path="a/b", hierarchical_drr=hdrr))
    yield "DropResourceRequest", rl("DropResourceRequest", operation_params=params(),
                                    coordination_node_path=node, resource_path="a/b")
    yield "ListResourcesRequest", rl("ListResourcesRequest", operation_params=params(),
                                     coordination_node_path=node, resource_path="a", recursive=True)
    yield "DescribeResourceRequest", rl("DescribeResourceRequest", operation_params=params(),
                                        coordination_node_path=node, resource_path="a")
    yield "AcquireResourceRequest.required", rl("AcquireResourceRequest", operation_params=params(),
                                                coordination_node_path=node, resource_path="a",
                                                required=10000)
    yield "AcquireResourceRequest.used0", rl("AcquireResourceRequest", coordination_node_path=node,
                                             resource_path="a", used=0)
    yield "ListResourcesResult", rl("ListResourcesResult", resource_paths=["a", "a/b", "a/c"])
    yield "DescribeResourceResult", rl("DescribeResourceResult", resource=full_resource())
    yield "DescribeResourceResponse", rl("DescribeResourceResponse", operation=operation(
        rl("DescribeResourceResult", resource=full_resource())))
    yield "ListResourcesResponse", rl("ListResourcesResponse", operation=operation(
        rl("ListResourcesResult", resource_paths=["a"])))
    failed = operation(None)
    failed.status = 400010
    for name in ["CreateResourceResponse", "AlterResourceResponse", "DropResourceResponse",
                 "AcquireResourceResponse"]:
        yield name, rl(name, operation=failed)


for name, message in vectors():
    print(f'("{name}", "{message.SerializeToString(deterministic=True).hex()}"),')
