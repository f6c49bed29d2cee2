//! `lock` and `elect`: acquire, run a command under the lease (`child.rs`), stop it if the
//! lease may be lost, release.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::time::Duration;

use serde_json::json;
use tokio::time::{Instant, timeout};
use tokio_util::sync::CancellationToken;
use ydb_coordination::config::{DescribeOptions, NodeIncarnation};
use ydb_coordination::{
    Acquiring, Error, ErrorKind, FencingToken, Leadership, Lease, MutexGuard, RwLockReadGuard,
    SemaphorePermit, Session,
};
use ydb_coordination_fence::Token as FenceToken;

use super::child;
use super::duration;
use super::fail::{self, Failure, semaphore_error};
use super::output::Out;
use super::signals::{Signals, interrupted};

/// What to acquire.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// The ephemeral semaphore with all its units; with a lock delay, the one unit of a
    /// persistent semaphore of limit 1, as the library's `Mutex::lock_delay` takes it.
    Exclusive { lock_delay: Option<Duration> },
    /// One token of the ephemeral semaphore (shared with other `--shared` holders).
    Shared,
    /// `count` units of a persistent semaphore, created with `limit` when given.
    Counted { count: u64, limit: Option<u64> },
    /// The leadership of an election (a persistent semaphore with limit 1).
    Leadership,
}

/// How long to wait for the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    Forever,
    For(Duration),
    AtOnce,
}

/// A `lock` or `elect` request.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) node: String,
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) data: Vec<u8>,
    pub(crate) wait: Wait,
    pub(crate) kill_grace: Duration,
    pub(crate) command: Vec<OsString>,
    /// "lock" or "leadership", for messages.
    pub(crate) what: &'static str,
}

/// What was taken: the guard of the recipe the request names.
enum Held {
    Mutex(MutexGuard),
    Read(RwLockReadGuard),
    Permit(SemaphorePermit),
    Leader(Leadership),
}

/// `$e` of whichever guard `$held` is (every guard has the same verbs).
macro_rules! each {
    ($held:expr, |$g:ident| $e:expr) => {
        match $held {
            Held::Mutex($g) => $e,
            Held::Read($g) => $e,
            Held::Permit($g) => $e,
            Held::Leader($g) => $e,
        }
    };
}

impl Held {
    fn fencing_token(&self) -> FencingToken {
        each!(self, |g| g.fencing_token())
    }

    /// The units held.
    fn count(&self) -> u64 {
        each!(self, |g| g.lease().map_or(0, Lease::count))
    }

    fn is_lost(&self) -> bool {
        each!(self, |g| g.is_lost())
    }

    fn token(&self) -> CancellationToken {
        each!(self, |g| g.token())
    }

    /// Releases it, cleanly (a lock-delay lock's next holder does not wait).
    async fn release(self) -> ydb_coordination::Result<bool> {
        each!(self, |g| g.release().await)
    }
}

/// Acquires, runs the command, releases; returns the exit code.
pub(crate) async fn run(
    session: Session,
    req: &Request,
    incarnation: ydb_coordination::Result<Option<NodeIncarnation>>,
    out: Out,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let result = hold_and_run(&session, req, incarnation, out, signals).await;
    session.close().await;
    result
}

async fn hold_and_run(
    session: &Session,
    req: &Request,
    incarnation: ydb_coordination::Result<Option<NodeIncarnation>>,
    out: Out,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let progress = std::io::stderr().is_terminal() && !out.json;
    let lease = acquire(session, req, signals, progress).await?;
    out.event(
        json!({
            "event": "acquired",
            "node": req.node,
            "name": req.name,
            "session_id": session.id(),
            "fencing_token": lease.fencing_token().order,
            "count": lease.count(),
        }),
        String::new,
    );
    if lease.is_lost() {
        return Err(Failure::with_code(
            fail::LEASE_LOST,
            format!(
                "lost the {} {:?} on {} before the command started; it was not run",
                req.what, req.name, req.node
            ),
        ));
    }
    let mut env = vec![
        ("YDB_COORD_FENCING_TOKEN", lease.fencing_token().to_string()),
        ("YDB_COORD_SESSION_ID", session.id().to_string()),
    ];
    // The fence's form of the token, with the node's incarnation so that a node created
    // again (its order ids start at 1) still orders after the old one; left unset, with a
    // warning, when the node could not be described.
    match incarnation {
        Ok(incarnation) => {
            let token = FenceToken::new(lease.fencing_token())
                .incarnation(incarnation.unwrap_or_default());
            env.push(("YDB_COORD_FENCE_TOKEN", token.to_hex()));
        }
        Err(e) => out.event(
            json!({"event": "warning", "node": req.node, "unset": "YDB_COORD_FENCE_TOKEN", "error": e.to_string()}),
            || {
                format!(
                    "warning: YDB_COORD_FENCE_TOKEN is not set: the node {} could not be described ({e})",
                    req.node
                )
            },
        ),
    }
    let on_lost = || {
        out.event(
            json!({
                "event": "lost",
                "node": req.node,
                "name": req.name,
                "fencing_token": lease.fencing_token().order,
            }),
            || {
                format!(
                    "warning: the {} {:?} on {} may be lost; stopping the command \
                     (SIGTERM, SIGKILL after {})",
                    req.what,
                    req.name,
                    req.node,
                    duration::format(req.kill_grace)
                )
            },
        )
    };
    let end = child::run(
        &req.command,
        &env,
        lease.token(),
        req.kill_grace,
        signals,
        on_lost,
    )
    .await?;
    out.event(
        json!({"event": "exited", "code": end.code, "lost": end.lost}),
        String::new,
    );
    if end.lost {
        drop(lease);
        return Err(Failure::with_code(
            fail::LEASE_LOST,
            format!(
                "lost the {} {:?} on {} while the command ran; the command was stopped",
                req.what, req.name, req.node
            ),
        ));
    }
    // The server releases everything of a closed session anyway; waiting for the answer
    // only makes the next holder's start prompt (and, with a lock delay, tells it the
    // release was clean).
    let _ = timeout(Duration::from_secs(5), lease.release()).await;
    Ok(end.code)
}

/// The limit of the existing persistent semaphore a counted lock without `--limit` takes.
async fn existing_limit(session: &Session, req: &Request) -> Result<u64, Failure> {
    let (name, node) = (&req.name, &req.node);
    match session
        .describe_semaphore(name, DescribeOptions::new())
        .await
    {
        Ok(d) => Ok(d.limit),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(Failure::new(format!(
            "semaphore {name:?} not found on {node} (pass --limit N to create it)"
        ))),
        Err(e) => Err(semaphore_error("describe", name, node, &e)),
    }
}

/// Why a counted lock's semaphore was refused (the recipe's `PreconditionFailed`): an
/// ephemeral lock of that name is in use, or it exists with another limit.
async fn refused(session: &Session, req: &Request, limit: u64, err: &Error) -> Failure {
    let (name, node) = (&req.name, &req.node);
    match session
        .describe_semaphore(name, DescribeOptions::new())
        .await
    {
        Ok(d) if d.ephemeral => Failure::new(format!(
            "semaphore {name:?} on {node} is an ephemeral lock in use; \
             a counted lock needs a persistent semaphore of another name"
        )),
        Ok(d) if d.limit != limit => Failure::new(format!(
            "semaphore {name:?} on {node} exists with limit {}, not limit {limit}",
            d.limit
        )),
        _ => semaphore_error("acquire", name, node, err),
    }
}

/// Why an exclusive lock was refused as the other mode (the library's `ModeMismatch`): the
/// name is a lock with a lock delay (a persistent semaphore) and this one has none, or the
/// other way round; says which and what to do. Exit code [`fail::USAGE`]: the command line
/// must change.
async fn other_mode(session: &Session, req: &Request) -> Failure {
    let (name, node) = (&req.name, &req.node);
    let described = session
        .describe_semaphore(name, DescribeOptions::new())
        .await;
    let message = match (req.kind, described) {
        (Kind::Exclusive { lock_delay: None }, Ok(d)) if !d.ephemeral => format!(
            "{name:?} on {node} is a lock with a lock delay (a persistent semaphore of limit \
             {}): take it with --lock-delay (the delay its other users set), or use another name",
            d.limit
        ),
        (
            Kind::Exclusive {
                lock_delay: Some(_),
            },
            Ok(d),
        ) if d.ephemeral => format!(
            "{name:?} on {node} is held or waited for as a lock without a lock delay (an \
             ephemeral semaphore): take it without --lock-delay as its other users do, or use \
             another name"
        ),
        (
            Kind::Exclusive {
                lock_delay: Some(_),
            },
            Ok(d),
        ) => format!(
            "{name:?} on {node} is a semaphore of limit {} that another recipe made, not a \
             lock with a lock delay: use another name",
            d.limit
        ),
        // Gone meanwhile, or it cannot be read: what the library says.
        _ => format!(
            "{name:?} on {node} is a lock of the other mode (with or without --lock-delay): \
             take it as its other users do, or use another name"
        ),
    };
    Failure::with_code(fail::USAGE, message)
}

/// Waits for a recipe's acquire, showing the queue position on stderr when `progress` and
/// the request is queued; a signal ends the wait (and withdraws the request).
async fn wait_for<T>(
    mut acquiring: Acquiring<T>,
    session: &Session,
    req: &Request,
    signals: &mut Signals,
    progress: bool,
) -> Result<ydb_coordination::Result<T>, Failure> {
    let started = Instant::now();
    let queued = tokio::select! {
        q = acquiring.queued() => q,
        sig = signals.recv() => return Err(interrupted(sig)),
    };
    let mut tick =
        tokio::time::interval_at(started + Duration::from_millis(300), Duration::from_secs(1));
    let mut shown = false;
    let clear = |shown: bool| {
        if shown {
            eprint!("\r\x1b[2K");
        }
    };
    let result = loop {
        tokio::select! {
            r = &mut acquiring => break r,
            sig = signals.recv() => {
                clear(shown);
                return Err(interrupted(sig));
            }
            _ = tick.tick(), if progress && queued => {
                let line = queue_line(session, req, started).await;
                eprint!("\r\x1b[2K{line}");
                shown = true;
            }
        }
    };
    clear(shown);
    Ok(result)
}

/// Takes the lock or leadership with the recipe the request names: `Mutex` (exclusive),
/// `RwLock::read` (shared), `Semaphore` (counted) or `Election`, in the verb of its wait
/// (plain, `_timeout(d)`, or `try_` for `--no-wait`). `None`: not obtained in time.
async fn acquire(
    session: &Session,
    req: &Request,
    signals: &mut Signals,
    progress: bool,
) -> Result<Held, Failure> {
    // The plain verb, or the `_timeout`/`try_` one; both give the guard (`$held`: which
    // one it is).
    macro_rules! obtain {
        ($plain:expr, |$d:ident| $timed:expr, $try:expr, $held:path) => {
            match req.wait {
                Wait::Forever => wait_for($plain, session, req, signals, progress)
                    .await?
                    .map(|g| Some($held(g))),
                Wait::For($d) => wait_for($timed, session, req, signals, progress)
                    .await?
                    .map(|x| x.map($held)),
                Wait::AtOnce => wait_for($try, session, req, signals, progress)
                    .await?
                    .map(|x| x.map($held)),
            }
        };
    }
    let (name, node) = (&req.name, &req.node);
    let data = req.data.clone();
    let mut limit = None;
    let result = match req.kind {
        Kind::Exclusive { lock_delay: None } => {
            let mutex = session.mutex(name).data(data);
            obtain!(
                mutex.lock(),
                |d| mutex.lock_timeout(d),
                mutex.try_lock(),
                Held::Mutex
            )
        }
        Kind::Exclusive {
            lock_delay: Some(delay),
        } => {
            let mutex = session.mutex(name).data(data).lock_delay(delay);
            obtain!(
                mutex.lock(),
                |d| mutex.lock_timeout(d),
                mutex.try_lock(),
                Held::Mutex
            )
        }
        Kind::Shared => {
            let rwlock = session.rwlock(name).data(data);
            obtain!(
                rwlock.read(),
                |d| rwlock.read_timeout(d),
                rwlock.try_read(),
                Held::Read
            )
        }
        Kind::Counted {
            count,
            limit: given,
        } => {
            let n = match given {
                Some(n) => n,
                None => signals.interruptible(existing_limit(session, req)).await?,
            };
            limit = Some(n);
            let semaphore = session.semaphore(name, n).data(data);
            obtain!(
                semaphore.acquire(count),
                |d| semaphore.acquire_timeout(count, d),
                semaphore.try_acquire(count),
                Held::Permit
            )
        }
        Kind::Leadership => {
            let election = session.election(name);
            obtain!(
                election.campaign(&data),
                |d| election.campaign_timeout(&data, d),
                election.try_campaign(&data),
                Held::Leader
            )
        }
    };
    match result {
        Ok(Some(lease)) => Ok(lease),
        Ok(None) => {
            let message = match req.wait {
                Wait::For(d) => format!(
                    "{} {name:?} on {node} not obtained within {}",
                    req.what,
                    duration::format(d)
                ),
                _ => format!(
                    "{} {name:?} on {node} is held or waited for by another session (--no-wait)",
                    req.what
                ),
            };
            Err(Failure::with_code(fail::NOT_ACQUIRED, message))
        }
        Err(e) if e.kind() == ErrorKind::PreconditionFailed => Err(match limit {
            Some(limit) => refused(session, req, limit, &e).await,
            None => semaphore_error("acquire", name, node, &e),
        }),
        Err(e) if e.kind() == ErrorKind::ModeMismatch => Err(other_mode(session, req).await),
        Err(e) => Err(semaphore_error("acquire", name, node, &e)),
    }
}

/// The progress line: where this session stands in the queue.
async fn queue_line(session: &Session, req: &Request, started: Instant) -> String {
    let waited = duration::format(Duration::from_secs(started.elapsed().as_secs()));
    let head = format!("waiting for {:?} on {} ({waited})", req.name, req.node);
    let describe =
        session.describe_semaphore(&req.name, DescribeOptions::new().owners(true).waiters(true));
    let Ok(Ok(d)) = timeout(Duration::from_millis(800), describe).await else {
        return head;
    };
    let holders = match d.owners.len() {
        1 => "1 holder".to_string(),
        n => format!("{n} holders"),
    };
    match d.waiters.iter().position(|w| w.session_id == session.id()) {
        Some(i) => format!(
            "{head}: position {} of {} in queue, {holders}",
            i + 1,
            d.waiters.len()
        ),
        None => format!("{head}: {holders}"),
    }
}
