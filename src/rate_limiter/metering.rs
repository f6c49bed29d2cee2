//! A resource's billing settings ([`Metering`]), in this crate's own types, and their wire
//! form.

use std::collections::BTreeMap;
use std::time::Duration;

use ydb_coordination_proto::rate_limiter::{MeteringConfig, metering_config};
use ydb_grpc::google_proto_workaround::protobuf::{Struct, Value, value};

use crate::error::{Error, ErrorKind, Result};

/// Billing of a rate-limiter resource's consumption: YDB's metering records, sent by the
/// server to its billing; no effect on acquires. A setting left `None` (or zero) is
/// inherited from the parent resource (a root has YDB's defaults, named on each field).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ydb_coordination::rate_limiter::{Metering, MeteringMetric, ResourceSettings};
///
/// let mut on_demand = MeteringMetric::default();
/// on_demand.enabled = true;
/// on_demand.labels.insert("team".into(), "billing".into());
/// on_demand.metric_fields = Some([("folder_id".to_string(), "b1g2".to_string())].into());
/// let mut metering = Metering::default();
/// metering.enabled = true;
/// metering.report_period = Some(Duration::from_secs(5));
/// metering.on_demand = Some(on_demand);
/// let settings = ResourceSettings::new().max_units_per_second(100.0).metering(metering);
/// assert!(settings.get_metering().is_some_and(|m| m.enabled));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Metering {
    /// Meter the resource's consumption (not inherited; default off).
    pub enabled: bool,
    /// How often clients report their consumption to the node, in whole milliseconds
    /// (5 s for a root).
    pub report_period: Option<Duration>,
    /// The consumption period one billing message covers, in whole milliseconds (1 s for
    /// a root).
    pub meter_period: Option<Duration>,
    /// How late a client's report may come and still be metered, in whole seconds (30 s
    /// for a root; at most an hour).
    pub collect_period: Option<Duration>,
    /// The provisioned consumption, in units a second (not inherited; default none).
    pub provisioned_units_per_second: Option<f64>,
    /// The provisioned burst, as a multiple of `provisioned_units_per_second` (60 for a
    /// root).
    pub provisioned_coefficient: Option<f64>,
    /// The on-demand burst, as a multiple of the prefetch (1.1 for a root; at least 1).
    pub overshoot_coefficient: Option<f64>,
    /// Consumption within the provisioned rate (informative, not billed).
    pub provisioned: Option<MeteringMetric>,
    /// Consumption over the provisioned rate, billed on demand.
    pub on_demand: Option<MeteringMetric>,
    /// Consumption over even the on-demand limit (normally not billed).
    pub overshoot: Option<MeteringMetric>,
}

/// One billing metric of a [`Metering`].
///
/// # Examples
///
/// ```
/// use ydb_coordination::rate_limiter::MeteringMetric;
///
/// let mut metric = MeteringMetric::default();
/// metric.enabled = true;
/// metric.billing_period = Some(std::time::Duration::from_secs(60));
/// # let _ = metric;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MeteringMetric {
    /// Send this metric to billing (not inherited; default off).
    pub enabled: bool,
    /// The billing period, in whole seconds, aligned to the hour (60 s for a root).
    pub billing_period: Option<Duration>,
    /// Labels of the records (keys up to 256 bytes, values up to 10,240, at most 100).
    pub labels: BTreeMap<String, String>,
    /// The records' JSON fields (inherited when `None`). YDB keeps string values for the
    /// keys `version`, `schema`, `cloud_id`, `folder_id`, `resource_id` and `source_id`
    /// (newer servers also `database`) and drops any other, and describes every one of
    /// them, an unset one as an empty string: a described empty field is left out (and no
    /// field set at all reads as `None`), as is a null, list or object value; a number or
    /// boolean reads as its text.
    pub metric_fields: Option<BTreeMap<String, String>>,
}

/// `d` in whole `unit`s (`per_second`: units in a second) for the field `what`; `None` is
/// zero, the wire's "inherited".
fn whole(d: Option<Duration>, per_second: u128, what: &str) -> Result<u64> {
    let Some(d) = d else { return Ok(0) };
    let nanos = d.as_nanos();
    let unit = 1_000_000_000 / per_second;
    if nanos % unit != 0 {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!(
                "the metering {what} is counted in whole {}, not {d:?}",
                if per_second == 1 {
                    "seconds"
                } else {
                    "milliseconds"
                }
            ),
        ));
    }
    u64::try_from(nanos / unit).map_err(|_| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("the metering {what} of {d:?} is too long"),
        )
    })
}

/// `x` as the wire has it (`None`: zero, inherited), refused unless finite and not
/// negative.
fn rate(x: Option<f64>, what: &str) -> Result<f64> {
    match x {
        None => Ok(0.0),
        Some(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Some(v) => Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("the metering {what} must be a finite number, not negative, not {v}"),
        )),
    }
}

/// The wire's zero as unset.
fn set_f(v: f64) -> Option<f64> {
    (v != 0.0).then_some(v)
}

/// The wire's zero as unset, in `unit`s of a second (`per_second`).
fn set_d(v: u64, per_second: u64) -> Option<Duration> {
    match per_second {
        1 => (v != 0).then(|| Duration::from_secs(v)),
        _ => (v != 0).then(|| Duration::from_millis(v)),
    }
}

impl Metering {
    /// The wire message, or the first setting the server could not take.
    pub(crate) fn to_proto(&self) -> Result<MeteringConfig> {
        Ok(MeteringConfig {
            enabled: self.enabled,
            report_period_ms: whole(self.report_period, 1000, "report period")?,
            meter_period_ms: whole(self.meter_period, 1000, "meter period")?,
            collect_period_sec: whole(self.collect_period, 1, "collect period")?,
            provisioned_units_per_second: rate(
                self.provisioned_units_per_second,
                "provisioned rate",
            )?,
            provisioned_coefficient: rate(self.provisioned_coefficient, "provisioned coefficient")?,
            overshoot_coefficient: rate(self.overshoot_coefficient, "overshoot coefficient")?,
            provisioned: self
                .provisioned
                .as_ref()
                .map(MeteringMetric::to_proto)
                .transpose()?,
            on_demand: self
                .on_demand
                .as_ref()
                .map(MeteringMetric::to_proto)
                .transpose()?,
            overshoot: self
                .overshoot
                .as_ref()
                .map(MeteringMetric::to_proto)
                .transpose()?,
        })
    }

    /// What a describe read.
    pub(crate) fn from_proto(m: &MeteringConfig) -> Self {
        Self {
            enabled: m.enabled,
            report_period: set_d(m.report_period_ms, 1000),
            meter_period: set_d(m.meter_period_ms, 1000),
            collect_period: set_d(m.collect_period_sec, 1),
            provisioned_units_per_second: set_f(m.provisioned_units_per_second),
            provisioned_coefficient: set_f(m.provisioned_coefficient),
            overshoot_coefficient: set_f(m.overshoot_coefficient),
            provisioned: m.provisioned.as_ref().map(MeteringMetric::from_proto),
            on_demand: m.on_demand.as_ref().map(MeteringMetric::from_proto),
            overshoot: m.overshoot.as_ref().map(MeteringMetric::from_proto),
        }
    }
}

impl MeteringMetric {
    fn to_proto(&self) -> Result<metering_config::Metric> {
        let string = |s: &String| Value {
            kind: Some(value::Kind::StringValue(s.clone())),
        };
        Ok(metering_config::Metric {
            enabled: self.enabled,
            billing_period_sec: whole(self.billing_period, 1, "billing period")?,
            labels: self.labels.clone(),
            metric_fields: self.metric_fields.as_ref().map(|fields| Struct {
                fields: fields.iter().map(|(k, v)| (k.clone(), string(v))).collect(),
            }),
        })
    }

    fn from_proto(m: &metering_config::Metric) -> Self {
        let text = |v: &Value| match &v.kind {
            Some(value::Kind::StringValue(s)) if s.is_empty() => None,
            Some(value::Kind::StringValue(s)) => Some(s.clone()),
            Some(value::Kind::NumberValue(n)) => Some(n.to_string()),
            Some(value::Kind::BoolValue(b)) => Some(b.to_string()),
            _ => None,
        };
        Self {
            enabled: m.enabled,
            billing_period: set_d(m.billing_period_sec, 1),
            labels: m.labels.clone(),
            metric_fields: m.metric_fields.as_ref().and_then(|s| {
                let fields: BTreeMap<String, String> = s
                    .fields
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), text(v)?)))
                    .collect();
                (!fields.is_empty()).then_some(fields)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Metering {
        let mut metric = MeteringMetric {
            enabled: true,
            billing_period: Some(Duration::from_secs(3600)),
            ..MeteringMetric::default()
        };
        metric.labels.insert("team".into(), "a".into());
        metric.metric_fields = Some([("folder_id".to_string(), "f1".to_string())].into());
        Metering {
            enabled: true,
            report_period: Some(Duration::from_millis(2500)),
            meter_period: Some(Duration::from_secs(1)),
            collect_period: Some(Duration::from_secs(30)),
            provisioned_units_per_second: Some(10.0),
            provisioned_coefficient: Some(60.0),
            overshoot_coefficient: Some(1.1),
            provisioned: None,
            on_demand: Some(metric),
            overshoot: Some(MeteringMetric::default()),
        }
    }

    #[test]
    fn settings_go_to_the_wire_and_back_unchanged() {
        let m = full();
        let wire = m.to_proto().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wire.report_period_ms, 2500);
        assert_eq!(wire.collect_period_sec, 30);
        assert_eq!(Metering::from_proto(&wire), m);
        // Unset is the wire's zero, both ways.
        let wire = Metering::default()
            .to_proto()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (wire.report_period_ms, wire.overshoot_coefficient),
            (0, 0.0)
        );
        assert_eq!(Metering::from_proto(&wire), Metering::default());
    }

    #[test]
    fn what_the_wire_cannot_carry_is_refused_by_kind() {
        let kind = |m: Metering| m.to_proto().err().map(|e| e.kind());
        let invalid = Some(ErrorKind::InvalidArgument);
        let m = Metering {
            collect_period: Some(Duration::from_millis(1500)),
            ..Metering::default()
        };
        assert_eq!(kind(m), invalid);
        let m = Metering {
            report_period: Some(Duration::from_micros(1500)),
            ..Metering::default()
        };
        assert_eq!(kind(m), invalid);
        let m = Metering {
            overshoot_coefficient: Some(f64::NAN),
            ..Metering::default()
        };
        assert_eq!(kind(m), invalid);
        let m = Metering {
            provisioned_units_per_second: Some(-1.0),
            ..Metering::default()
        };
        assert_eq!(kind(m), invalid);
        let m = Metering {
            report_period: Some(Duration::MAX),
            ..Metering::default()
        };
        assert_eq!(kind(m), invalid);
    }

    #[test]
    fn described_fields_empty_or_of_other_kinds_read_as_text_or_are_left_out() {
        let number = Value {
            kind: Some(value::Kind::NumberValue(3.0)),
        };
        let null = Value {
            kind: Some(value::Kind::NullValue(0)),
        };
        let empty = Value {
            kind: Some(value::Kind::StringValue(String::new())),
        };
        let wire = metering_config::Metric {
            metric_fields: Some(Struct {
                fields: [
                    ("version".to_string(), number),
                    ("x".to_string(), null),
                    ("schema".to_string(), empty),
                ]
                .into(),
            }),
            ..metering_config::Metric::default()
        };
        let fields = MeteringMetric::from_proto(&wire).metric_fields;
        assert_eq!(
            fields,
            Some([("version".to_string(), "3".to_string())].into())
        );
    }
}
