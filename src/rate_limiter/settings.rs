//! A rate-limiter resource's settings (hierarchical DRR) and what a describe returns.

use std::time::Duration;

use ydb_coordination_proto::rate_limiter::{
    HierarchicalDrrSettings, ReplicatedBucketSettings, Resource,
    hierarchical_drr_settings::LeafBehavior, resource,
};

use super::Metering;

use crate::error::{Error, ErrorKind, Result};

/// The settings of a rate-limiter resource. Each is unset by default; an unset one is taken
/// from the parent resource (a root needs
/// [`max_units_per_second`](ResourceSettings::max_units_per_second)). On the wire zero is
/// unset for the four rates and coefficients, so one set to `0.0` reads back as unset.
///
/// # Examples
///
/// ```
/// use ydb_coordination::rate_limiter::ResourceSettings;
///
/// // 100 units a second, and a node may take a second's worth ahead.
/// let root = ResourceSettings::new()
///     .max_units_per_second(100.0)
///     .prefetch_coefficient(1.0);
/// // A child capped at 20 a second, sharing the root's rate with its siblings.
/// let tenant = ResourceSettings::new().max_units_per_second(20.0);
/// assert_eq!(tenant.get_max_units_per_second(), Some(20.0));
/// # let _ = root;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceSettings {
    max_units_per_second: Option<f64>,
    max_burst_size_coefficient: Option<f64>,
    prefetch_coefficient: Option<f64>,
    prefetch_watermark: Option<f64>,
    immediately_fill_up_to: Option<f64>,
    /// `Some(None)`: replicated with the server's report interval.
    replicated_bucket: Option<Option<Duration>>,
    metering: Option<Metering>,
}

impl ResourceSettings {
    /// No setting set: every one comes from the parent.
    pub fn new() -> Self {
        Self::default()
    }

    /// The rate: units a second (finite, not negative; a child's is capped at its parent's).
    pub fn max_units_per_second(mut self, units: f64) -> Self {
        self.max_units_per_second = Some(units);
        self
    }

    /// The burst, as a multiple of the rate (YDB stores it; its quoter does not act on it).
    pub fn max_burst_size_coefficient(mut self, coefficient: f64) -> Self {
        self.max_burst_size_coefficient = Some(coefficient);
        self
    }

    /// How many seconds' worth of the rate each YDB node takes ahead into its local bucket
    /// (YDB's default 0.2; negative: none).
    pub fn prefetch_coefficient(mut self, coefficient: f64) -> Self {
        self.prefetch_coefficient = Some(coefficient);
        self
    }

    /// The share of the local bucket below which a node takes more (0 to 1, YDB's default
    /// 0.75).
    pub fn prefetch_watermark(mut self, watermark: f64) -> Self {
        self.prefetch_watermark = Some(watermark);
        self
    }

    /// In a replicated bucket, the level (negative: a debt) the shared bucket is raised to
    /// after reports of consumption; YDB takes only negative values and marks it
    /// experimental.
    pub fn immediately_fill_up_to(mut self, units: f64) -> Self {
        self.immediately_fill_up_to = Some(units);
        self
    }

    /// Makes the resource a replicated bucket: nodes consume locally and report every
    /// `report_interval` (`None`: YDB's default, 5 s; else at least a millisecond).
    /// Experimental in YDB.
    pub fn replicated_bucket(mut self, report_interval: Option<Duration>) -> Self {
        self.replicated_bucket = Some(report_interval);
        self
    }

    /// Billing of the resource's consumption (YDB's metering records; no effect on
    /// acquires). A period that is not whole in its unit, or a coefficient that is not a
    /// finite number, is refused when the resource is created or altered.
    pub fn metering(mut self, config: Metering) -> Self {
        self.metering = Some(config);
        self
    }

    /// The rate, if set.
    pub fn get_max_units_per_second(&self) -> Option<f64> {
        self.max_units_per_second
    }

    /// The burst coefficient, if set.
    pub fn get_max_burst_size_coefficient(&self) -> Option<f64> {
        self.max_burst_size_coefficient
    }

    /// The prefetch coefficient, if set.
    pub fn get_prefetch_coefficient(&self) -> Option<f64> {
        self.prefetch_coefficient
    }

    /// The prefetch watermark, if set.
    pub fn get_prefetch_watermark(&self) -> Option<f64> {
        self.prefetch_watermark
    }

    /// The replicated bucket's fill-up floor, if set.
    pub fn get_immediately_fill_up_to(&self) -> Option<f64> {
        self.immediately_fill_up_to
    }

    /// `Some` for a replicated bucket, with its report interval if set.
    pub fn get_replicated_bucket(&self) -> Option<Option<Duration>> {
        self.replicated_bucket
    }

    /// The metering config, if set.
    pub fn get_metering(&self) -> Option<&Metering> {
        self.metering.as_ref()
    }

    /// The resource `path` with these settings, as sent; a setting that is not a finite
    /// number is refused here (the server would store some of them as they are).
    pub(crate) fn to_proto(&self, path: &str, what: &str) -> Result<Resource> {
        for (name, value) in [
            ("max_units_per_second", self.max_units_per_second),
            (
                "max_burst_size_coefficient",
                self.max_burst_size_coefficient,
            ),
            ("prefetch_coefficient", self.prefetch_coefficient),
            ("prefetch_watermark", self.prefetch_watermark),
            ("immediately_fill_up_to", self.immediately_fill_up_to),
        ] {
            if let Some(value) = value.filter(|v| !v.is_finite()) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("{what}: {name} is {value}: give a finite number"),
                ));
            }
        }
        if let Some(up_to) = self.immediately_fill_up_to.filter(|v| *v >= 0.0) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{what}: immediately_fill_up_to is {up_to}: YDB takes only a negative level"
                ),
            ));
        }
        if self.replicated_bucket == Some(Some(Duration::ZERO)) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{what}: the replicated bucket's report interval is zero: give a positive one, or none for YDB's default"
                ),
            ));
        }
        let millis = |d: Duration| {
            // Rounded up: 1.5 ms is reported every 2 ms, not 1.
            let ms = d.as_nanos().div_ceil(1_000_000);
            u64::try_from(ms).unwrap_or(u64::MAX)
        };
        let replicated = self.replicated_bucket.map(|interval| {
            LeafBehavior::ReplicatedBucket(ReplicatedBucketSettings {
                report_interval_ms: interval.map(millis),
            })
        });
        let drr = HierarchicalDrrSettings {
            max_units_per_second: self.max_units_per_second.unwrap_or(0.0),
            max_burst_size_coefficient: self.max_burst_size_coefficient.unwrap_or(0.0),
            prefetch_coefficient: self.prefetch_coefficient.unwrap_or(0.0),
            prefetch_watermark: self.prefetch_watermark.unwrap_or(0.0),
            immediately_fill_up_to: self.immediately_fill_up_to,
            leaf_behavior: replicated,
        };
        Ok(Resource {
            resource_path: path.to_string(),
            r#type: Some(resource::Type::HierarchicalDrr(drr)),
            metering_config: self.metering.as_ref().map(Metering::to_proto).transpose()?,
        })
    }

    fn from_proto(resource: &Resource) -> Self {
        let set = |v: f64| (v != 0.0).then_some(v);
        let Some(resource::Type::HierarchicalDrr(drr)) = &resource.r#type else {
            return Self {
                metering: resource.metering_config.as_ref().map(Metering::from_proto),
                ..Self::default()
            };
        };
        Self {
            max_units_per_second: set(drr.max_units_per_second),
            max_burst_size_coefficient: set(drr.max_burst_size_coefficient),
            prefetch_coefficient: set(drr.prefetch_coefficient),
            prefetch_watermark: set(drr.prefetch_watermark),
            immediately_fill_up_to: drr.immediately_fill_up_to,
            replicated_bucket: drr.leaf_behavior.as_ref().map(|b| match b {
                LeafBehavior::ReplicatedBucket(r) => {
                    r.report_interval_ms.map(Duration::from_millis)
                }
            }),
            metering: resource.metering_config.as_ref().map(Metering::from_proto),
        }
    }
}

/// A rate-limiter resource as [`RateLimiter::describe_resource`](crate::RateLimiter::describe_resource)
/// reads it: its path and the settings it was created or altered with.
///
/// # Examples
///
/// ```
/// # use ydb_coordination::emulator::Emulator;
/// use ydb_coordination::{Client, config::NodeConfig, rate_limiter::ResourceSettings};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let emulator = Emulator::builder().start().await?;
/// # let client = Client::connect(&emulator.connection_string()).await?;
/// # client.create_node("quotas", NodeConfig::new()).await?;
/// let limiter = client.rate_limiter("quotas");
/// limiter.create_resource("api", ResourceSettings::new().max_units_per_second(50.0)).await?;
/// let described = limiter.describe_resource("api").await?;
/// assert_eq!(described.path(), "api");
/// assert_eq!(described.settings().get_max_units_per_second(), Some(50.0));
/// // Alter replaces the settings as a whole: change one from what was read.
/// let faster = described.settings().clone().max_units_per_second(80.0);
/// limiter.alter_resource("api", faster).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDescription {
    path: String,
    settings: ResourceSettings,
}

impl ResourceDescription {
    pub(crate) fn from_proto(resource: Resource) -> Self {
        Self {
            settings: ResourceSettings::from_proto(&resource),
            path: resource.resource_path,
        }
    }

    /// The resource's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Its settings as stored (not the ones it inherits).
    pub fn settings(&self) -> &ResourceSettings {
        &self.settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_go_to_the_wire_and_back() {
        let settings = ResourceSettings::new()
            .max_units_per_second(10.0)
            .max_burst_size_coefficient(2.0)
            .prefetch_coefficient(-1.0)
            .prefetch_watermark(0.5)
            .immediately_fill_up_to(-3.0)
            .replicated_bucket(Some(Duration::from_millis(250)));
        assert!(settings.to_proto("a", "t").is_ok());
        let wire = settings.to_proto("a/b", "t").ok();
        let back = wire.map(ResourceDescription::from_proto);
        assert_eq!(back.as_ref().map(ResourceDescription::path), Some("a/b"));
        assert_eq!(back.map(|d| d.settings), Some(settings));
        // Unset stays unset, and zero reads as unset.
        let zero = ResourceSettings::new().max_units_per_second(0.0);
        let back = zero
            .to_proto("a", "t")
            .ok()
            .map(ResourceDescription::from_proto);
        assert_eq!(back.map(|d| d.settings), Some(ResourceSettings::new()));
        let replicated = ResourceSettings::new().replicated_bucket(None);
        let back = replicated
            .to_proto("a", "t")
            .ok()
            .map(ResourceDescription::from_proto);
        assert_eq!(back.map(|d| d.settings), Some(replicated));
    }

    #[test]
    fn numbers_ydb_would_refuse_or_misread_are_refused() {
        let refused = |settings: ResourceSettings| {
            settings.to_proto("a", "t").err().map(|e| e.kind()) == Some(ErrorKind::InvalidArgument)
        };
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(
                refused(ResourceSettings::new().prefetch_watermark(bad)),
                "{bad}"
            );
        }
        for not_negative in [0.0, 5.0] {
            assert!(refused(
                ResourceSettings::new().immediately_fill_up_to(not_negative)
            ));
        }
        assert!(refused(
            ResourceSettings::new().replicated_bucket(Some(Duration::ZERO))
        ));
        let odd = ResourceSettings::new().replicated_bucket(Some(Duration::from_micros(1500)));
        let sent = odd.to_proto("a", "t").ok().and_then(|r| match r.r#type {
            Some(resource::Type::HierarchicalDrr(d)) => d.leaf_behavior,
            None => None,
        });
        let Some(LeafBehavior::ReplicatedBucket(bucket)) = sent else {
            panic!("not replicated: {sent:?}");
        };
        assert_eq!(bucket.report_interval_ms, Some(2));
    }
}
