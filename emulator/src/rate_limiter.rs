//! The async shell of the rate limiter: `Ydb.RateLimiter.V1.RateLimiterService` on the
//! generated tonic server, over the pure [`Quoter`](crate::quoter::Quoter) of each node in the
//! [`World`](crate::world::World). Each call checks the token and the coordination-node path,
//! runs the core under the rate limiters' lock (the [`Quoters`](crate::world::Quoters), apart
//! from the nodes' locks) and wraps the outcome in a completed operation; a waiting acquire
//! awaits its answer, which the timer task's `advance` delivers.
//!
//! A `§` in this file is a section of `emulator/SPEC-rate-limiter.md`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::{Request, Response, Status};
use ydb_coordination_proto::rate_limiter::v1::rate_limiter_service_server::RateLimiterService;
use ydb_coordination_proto::rate_limiter::{
    AcquireResourceRequest, AcquireResourceResponse, AlterResourceRequest, AlterResourceResponse,
    CreateResourceRequest, CreateResourceResponse, DescribeResourceRequest,
    DescribeResourceResponse, DescribeResourceResult, DropResourceRequest, DropResourceResponse,
    ListResourcesRequest, ListResourcesResponse, ListResourcesResult, Operation,
    acquire_resource_request,
};

use crate::proto::StatusCode;
use crate::quoter::{AcquireTimeouts, Acquired, Quoter, Units};
use crate::service::{Any, Shared, database_of, operation, pack};
use crate::world::AdminError;

/// The rate-limiter service.
#[derive(Debug, Clone)]
pub(crate) struct RateLimiter(pub(crate) Arc<Shared>);

/// A completed operation with a status and no issues (how YDB answers a missing node and
/// every quoter outcome, §4.2 step 5, §4.4).
fn bare(status: StatusCode) -> Operation {
    Operation {
        ready: true,
        status: status as i32,
        ..Operation::default()
    }
}

/// What a control-plane call fails with before reaching a node's resources.
enum Refused {
    /// Answered with this error and its issue.
    Error(AdminError),
    /// Answered with this status alone.
    Bare(StatusCode),
}

impl From<AdminError> for Refused {
    fn from(e: AdminError) -> Self {
        Refused::Error(e)
    }
}

fn refused_operation(r: Refused) -> Operation {
    match r {
        Refused::Error(e) => operation(Err(e)),
        Refused::Bare(status) => bare(status),
    }
}

impl RateLimiter {
    /// §4.2 steps 1 and 5 for the control plane: the token, the database prefix, the node
    /// (its path split, so that `/Root//node/` names `/Root/node`); then `f` on its resources.
    fn control<T, R>(
        &self,
        req: Request<T>,
        path: impl FnOnce(&T) -> &str,
        f: impl FnOnce(&mut Quoter, T) -> Result<R, AdminError>,
    ) -> Result<R, Refused> {
        if !self.0.authorized(&req) {
            return Err(AdminError {
                status: StatusCode::Unauthorized,
                message: "Access denied".to_string(),
            }
            .into());
        }
        let database = database_of(&req);
        let req = req.into_inner();
        let node = path(&req).to_string();
        if let Some(db) = database
            && !node.starts_with(&db)
        {
            return Err(AdminError {
                status: StatusCode::BadRequest,
                message: format!(
                    "Coordination node path: {node} does not belong to current database: {db}."
                ),
            }
            .into());
        }
        let components: Vec<&str> = node.split('/').filter(|c| !c.is_empty()).collect();
        if components.is_empty() {
            return Err(AdminError {
                status: StatusCode::BadRequest,
                message: "Empty path.".to_string(),
            }
            .into());
        }
        let node = format!("/{}", components.join("/"));
        self.0.with_world(|w| {
            let mut quoters = w.quoters();
            let quoter = quoters
                .get_mut(&node)
                .ok_or(Refused::Bare(StatusCode::SchemeError))?;
            let answer = f(quoter, req).map_err(Refused::from);
            drop(quoters);
            answer
        })
    }
}

/// An operation without a result value, or the refusal.
fn done(r: Result<(), Refused>) -> Option<Operation> {
    Some(match r {
        Ok(()) => operation(Ok(None)),
        Err(e) => refused_operation(e),
    })
}

/// An operation with a packed result, or the refusal.
fn done_with(r: Result<Option<Any>, Refused>) -> Option<Operation> {
    Some(match r {
        Ok(value) => operation(Ok(value)),
        Err(e) => refused_operation(e),
    })
}

/// A `google.protobuf.Duration` as a `Duration`: negative is zero, and anything beyond a
/// day (the quoter's cap, §7.3) is a day and a second.
fn duration(d: Option<&ydb_grpc::google_proto_workaround::protobuf::Duration>) -> Duration {
    let Some(d) = d else {
        return Duration::ZERO;
    };
    let seconds = u64::try_from(d.seconds).unwrap_or(0).min(86_401);
    let nanos = u32::try_from(d.nanos).unwrap_or(0).min(999_999_999);
    Duration::new(seconds, nanos)
}

/// §4.4 step 4: the quoter wants `/a/b`: a leading slash, no empty component (so a relative
/// path is refused too, C4 of §13).
fn canonical_node(path: &str) -> bool {
    path.strip_prefix('/')
        .is_some_and(|rest| !rest.is_empty() && rest.split('/').all(|c| !c.is_empty()))
}

#[tonic::async_trait]
impl RateLimiterService for RateLimiter {
    async fn create_resource(
        &self,
        request: Request<CreateResourceRequest>,
    ) -> Result<Response<CreateResourceResponse>, Status> {
        let r = self.control(
            request,
            |r| &r.coordination_node_path,
            |q, r| Ok(q.create(&r.resource.unwrap_or_default())?),
        );
        Ok(Response::new(CreateResourceResponse { operation: done(r) }))
    }

    async fn alter_resource(
        &self,
        request: Request<AlterResourceRequest>,
    ) -> Result<Response<AlterResourceResponse>, Status> {
        let r = self.control(
            request,
            |r| &r.coordination_node_path,
            |q, r| Ok(q.alter(&r.resource.unwrap_or_default())?),
        );
        Ok(Response::new(AlterResourceResponse { operation: done(r) }))
    }

    async fn drop_resource(
        &self,
        request: Request<DropResourceRequest>,
    ) -> Result<Response<DropResourceResponse>, Status> {
        let shared = self.0.clone();
        let r = self.control(
            request,
            |r| &r.coordination_node_path,
            |q, r| Ok(q.drop_resource(&r.resource_path)?),
        );
        // §6.3: the dropped resource's waiters fail.
        let r = r.map(|answers| shared.with_world(|w| w.quoters().answer(answers)));
        Ok(Response::new(DropResourceResponse { operation: done(r) }))
    }

    async fn list_resources(
        &self,
        request: Request<ListResourcesRequest>,
    ) -> Result<Response<ListResourcesResponse>, Status> {
        let r = self.control(
            request,
            |r| &r.coordination_node_path,
            |q, r| {
                let resource_paths = q.list(&r.resource_path, r.recursive)?;
                let result = ListResourcesResult { resource_paths };
                Ok(pack("Ydb.RateLimiter.ListResourcesResult", &result))
            },
        );
        Ok(Response::new(ListResourcesResponse {
            operation: done_with(r),
        }))
    }

    async fn describe_resource(
        &self,
        request: Request<DescribeResourceRequest>,
    ) -> Result<Response<DescribeResourceResponse>, Status> {
        let r = self.control(
            request,
            |r| &r.coordination_node_path,
            |q, r| {
                let resource = Some(q.describe(&r.resource_path)?);
                let result = DescribeResourceResult { resource };
                Ok(pack("Ydb.RateLimiter.DescribeResourceResult", &result))
            },
        );
        Ok(Response::new(DescribeResourceResponse {
            operation: done_with(r),
        }))
    }

    /// §4.4, §8: answered when the units are granted or the deadline passes. Dropping the
    /// call does not withdraw it (§8.1): it stays queued and may still consume.
    async fn acquire_resource(
        &self,
        request: Request<AcquireResourceRequest>,
    ) -> Result<Response<AcquireResourceResponse>, Status> {
        let operation = if self.0.authorized(&request) {
            let r = request.into_inner();
            acquire(&self.0, r).await
        } else {
            operation(Err(AdminError {
                status: StatusCode::Unauthorized,
                message: "Access denied".to_string(),
            }))
        };
        Ok(Response::new(AcquireResourceResponse {
            operation: Some(operation),
        }))
    }
}

async fn acquire(shared: &Shared, r: AcquireResourceRequest) -> Operation {
    if let Err(e) = Quoter::check_resource_path(&r.resource_path) {
        return operation(Err(e.into()));
    }
    let units = match r.units {
        Some(acquire_resource_request::Units::Required(n)) => Units::Required(n),
        Some(acquire_resource_request::Units::Used(n)) => Units::Used(n),
        // §4.4 step 3: the validator fails without setting a status.
        None => return bare(StatusCode::Unspecified),
    };
    if !canonical_node(&r.coordination_node_path) {
        return bare(StatusCode::InternalError);
    }
    let params = r.operation_params.unwrap_or_default();
    let timeouts = AcquireTimeouts {
        operation_timeout: duration(params.operation_timeout.as_ref()),
        cancel_after: duration(params.cancel_after.as_ref()),
    };
    let (tx, rx) = oneshot::channel();
    let acquired = shared.with_world(|w| {
        w.quoters().acquire(
            Instant::now(),
            &r.coordination_node_path,
            &r.resource_path,
            units,
            timeouts,
            tx,
        )
    });
    match acquired {
        Acquired::Now(status) => bare(status),
        // The sender goes only with the world: the emulator is stopping.
        Acquired::Waiting => bare(rx.await.unwrap_or(StatusCode::Unavailable)),
    }
}
