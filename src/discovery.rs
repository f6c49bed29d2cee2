//! Discovery: the cluster's endpoints, asked for with `ListEndpoints` (retried as an
//! idempotent call, `retry.rs`) and handed to the transport's endpoint table; again every
//! discovery interval and early when many endpoints fail.
//!
//! A caller of the retry loop like any node administration call, so it stands above both
//! the loop and the transport it runs on.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ydb_grpc::ydb_proto::discovery::v1::discovery_service_client::DiscoveryServiceClient;
use ydb_grpc::ydb_proto::discovery::{ListEndpointsRequest, ListEndpointsResult};

use crate::clock::later;
use crate::error::{Error, Result};
use crate::retry;
use crate::transport::{self, Transport};

/// The shortest time between two discoveries run early because endpoints failed.
const EARLY_DISCOVERY_GAP: Duration = Duration::from_secs(5);

impl Transport {
    /// Asks the cluster for its endpoints (`ListEndpoints`, retried as an idempotent call)
    /// and uses them; endpoints that failed stay pessimized unless `forget_failures`. The
    /// endpoints in use stay when discovery is off, fails or returns nothing.
    pub(crate) async fn discover(&self, forget_failures: bool) -> Result<()> {
        if !self.config().discovery {
            return Ok(());
        }
        let message = ListEndpointsRequest {
            database: self.database().to_string(),
            service: Vec::new(),
        };
        let result: ListEndpointsResult =
            retry::idempotent(self, "list endpoints", message, |channel, request| async {
                let response = DiscoveryServiceClient::new(channel)
                    .list_endpoints(request)
                    .await
                    .map_err(|s| Error::from_grpc(s, "list endpoints"))?
                    .into_inner();
                transport::unpack(response.operation, "list endpoints")
            })
            .await?;
        let mut endpoints = Vec::new();
        for e in result.endpoints {
            if e.address.is_empty() || e.port == 0 || e.port > u32::from(u16::MAX) {
                continue;
            }
            let host = if e.address.contains(':') && !e.address.starts_with('[') {
                format!("[{}]", e.address)
            } else {
                e.address.clone()
            };
            let tls = e.ssl || self.config().info.tls;
            let uri = format!("{}://{host}:{}", if tls { "https" } else { "http" }, e.port);
            endpoints.push((uri, tls));
        }
        tracing::debug!(endpoints = endpoints.len(), "discovered endpoints");
        self.use_endpoints(endpoints, forget_failures);
        Ok(())
    }

    /// Runs discovery again every discovery interval, and early when many endpoints failed,
    /// until the transport is dropped. Does nothing when discovery is off.
    pub(crate) fn keep_discovering(self: &Arc<Self>) {
        if !self.config().discovery {
            return;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        let wake = self.rediscover();
        let interval = self.config().discovery_interval;
        // An early discovery comes at most once per gap, so one client does not ask a
        // cluster that is down again and again.
        let gap = (interval / 6).min(EARLY_DISCOVERY_GAP);
        // Only a weak reference is held while waiting: once the client is dropped, the task
        // ends at its next wake-up.
        tokio::spawn(async move {
            let mut last: Option<tokio::time::Instant> = None;
            // The periodic run keeps its own clock: early runs do not postpone it, since only
            // it gives failed endpoints another turn.
            let mut next_periodic = later(tokio::time::Instant::now(), interval);
            loop {
                let periodic = tokio::select! {
                    () = tokio::time::sleep_until(next_periodic) => true,
                    () = wake.notified() => false,
                };
                if periodic {
                    next_periodic = later(tokio::time::Instant::now(), interval);
                } else if let Some(at) = last {
                    tokio::time::sleep_until(at + gap).await;
                }
                let Some(transport) = weak.upgrade() else {
                    return;
                };
                if let Err(err) = transport.discover(periodic).await {
                    tracing::debug!(%err, "rediscovery failed; the endpoints in use stay");
                }
                last = Some(tokio::time::Instant::now());
            }
        });
    }
}
