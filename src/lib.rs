#![cfg_attr(docsrs, feature(doc_cfg))]
//! Distributed locks, semaphores and leader election on YDB coordination nodes.
//!
//! A [`Session`] is one YDB coordination session kept alive by a background task that
//! reattaches after a broken stream without losing what it holds. A [`Lease`] is a held
//! semaphore with a [`CancellationToken`](tokio_util::sync::CancellationToken) that fires
//! when the lease is released or may have been lost, and a fencing token. The
//! [`recipes`] ([`Mutex`], [`Semaphore`], [`RwLock`], [`Election`], [`MultiLock`]) use
//! tokio's and etcd's verbs; [`Group`] (membership, service discovery) and [`Published`](recipes::Published) (a
//! small value with subscribers) are what fleets build on them; a [`SessionManager`] replaces lost sessions and re-takes held locks.
//! [`Client::rate_limiter`] reaches the node's other half, YDB's distributed rate limiter
//! ([`RateLimiter`]: resources, and units a fleet takes from them). The
//! [`emulator`] (feature `emulator`) runs YDB's coordination service in process.
//!
//! # Quick start
//!
//! ```
//! # use ydb_coordination::emulator::Emulator;
//! use ydb_coordination::{Client, SessionOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let emulator = Emulator::builder().node("/local/jobs").start().await?;
//! # let connection_string = emulator.connection_string();
//! let client = Client::connect(&connection_string).await?;
//! let session = client.session("jobs", SessionOptions::new()).await?;
//!
//! let guard = session.mutex("charge-card-42").lock().await?;
//! let work = async { /* charge, passing guard.fencing_token() along */ };
//! if guard.token().run_until_cancelled(work).await.is_none() {
//!     eprintln!("lock lost: the work was stopped");
//! }
//! guard.unlock().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Behavior
//!
//! - **A broken stream is not a lost session.** When the gRPC stream fails (a reset, a
//!   proxy restart, `UNAVAILABLE` from a restarting tablet) or goes silent for two ping
//!   intervals, the session task opens a new connection and reattaches with the same
//!   session id and protection key and the next sequence number, with jittered exponential
//!   backoff. Leases stay held and their tokens do not fire; the state goes
//!   [`SessionState::Reattaching`](session::SessionState::Reattaching) then [`SessionState::Attached`](session::SessionState::Attached). Requests that were in
//!   flight are sent again (acquire, release, describe, update: the server answers from its
//!   current state); create and delete fail with [`ErrorKind::OutcomeUnknown`]; watches
//!   are re-armed and report [`WatchUpdate::resynced`](session::WatchUpdate::resynced).
//! - **When a lease token fires.** On release or drop of the lease; on
//!   [`Session::close`]; when the server ends the session (`SESSION_EXPIRED`,
//!   `BAD_SESSION`, `NOT_FOUND`, `UNAUTHORIZED`); and when the client has had no confirmed
//!   contact for `timeout - safety_margin`. *Confirmed contact* is the send time of the
//!   last request the server answered, so the token fires before the server, which counts
//!   from a later moment, can hand the semaphore to another session.
//! - **Per-request errors never end the session**: `ALREADY_EXISTS`, `NOT_FOUND`,
//!   `ABORTED`, `BAD_REQUEST` come back to the caller as [`ErrorKind`]s.
//! - **An acquire's timeout holds while the stream is down.** The server times out a
//!   waiter it can talk to ([`ErrorKind::NotAcquired`], the one kind the `try_` and
//!   `_timeout` forms read as `None`); while the stream is down the client answers
//!   [`ErrorKind::Unavailable`] at the acquire's own deadline (the node did not answer: the
//!   lock may be free) and withdraws the waiter after the reattach.
//! - **One cause for everything.** Once a session has ended, every handle, lease, pending
//!   acquire, watch and recipe guard reports the same error, with its kind:
//!   [`ErrorKind::SessionExpired`] when the server ended it or the deadline passed,
//!   [`ErrorKind::SessionClosed`] after [`Session::close`]. If the session task itself
//!   stops unexpectedly (a bug), every lease token still fires, the state becomes
//!   [`SessionState::Expired`](session::SessionState::Expired) and the cause is [`ErrorKind::Internal`].
//! - **Closing asks the server, even during an outage.** [`Session::close`] fires every
//!   token and fails pending acquires with [`ErrorKind::SessionClosed`] at once (a grant
//!   racing the close is given back, never returned); then it sends the queued releases and
//!   `SessionStop`. If the stream is down it keeps reattaching for up to
//!   [`SessionOptions::stop_timeout`] to do so, so the server frees the semaphores at once
//!   instead of after the session timeout.
//! - **Options are checked up front**: out-of-range durations (a session timeout over 30
//!   minutes, a ping interval longer than the timeout, a stop timeout over 30 minutes, an
//!   acquire timeout over a day) are [`ErrorKind::InvalidArgument`], never an overflow.
//!
//! # Reattach and timeouts
//!
//! With the defaults (timeout 10 s, ping interval 2 s, safety margin 1 s):
//!
//! ```text
//!  t=0     last ping answered (sent at t=0)          server: attached
//!  t=0.1   network breaks
//!  t=4     2 silent ping intervals: stream dead      state: Reattaching
//!  t=4..   reattach attempts, 50 ms .. 1 s backoff   leases held, tokens quiet
//!  t=6     network back: reattached                  state: Attached, nothing lost
//!
//!  ...or, if the network stays down:
//!  t=9     0 + 10 s - 1 s: every lease token fires  state: Expired
//!  t>=10   the server may expire the session (its clock starts when it notices the
//!          stream is gone, which is after t=0) and grant the semaphores to others
//! ```
//!
//! # Cancellation
//!
//! Every async function documents its cancel safety. Dropping an [`Acquiring`] (or a recipe's
//! `lock()` future) withdraws the request at any moment: a queued waiter is removed from
//! the server's queue, and a grant that had already arrived but was not yet taken (the
//! future lost a `select!`, a `tokio::time::timeout` fired, the task was aborted, or the
//! caller dropped it after [`Acquiring::queued`]) is released, its token fired. Dropping a
//! [`Lease`] or guard releases it without blocking (no task is spawned in `Drop`; the
//! release is queued on the session). Dropping every handle, lease and watch of a session
//! closes it: a live [`WatchStream`](session::WatchStream) keeps its session open.
//!
//! # Fencing
//!
//! [`Lease::fencing_token`] is a [`FencingToken`]: on one node, epoch 0 and the server's
//! `order_id` of the ownership as its order; in a lock space, the layout's epoch as well.
//! It guarantees:
//! - successive owners of one semaphore get strictly increasing fencing tokens (the server grants in
//!   queue order, and the counter is node-wide and persisted);
//! - one owner keeps one token for its whole tenure, across reattaches and server restarts;
//! - a new session after a loss gets a greater token for the same lock.
//!
//! It does not guarantee:
//! - exclusion for shared leases: concurrent holders of a counted semaphore have distinct,
//!   increasing tokens but hold at the same time;
//! - anything across a coordination node dropped and recreated (the counter restarts at 1);
//! - anything if the resource does not check: it must reject writes whose token is older
//!   than the newest it has accepted (a conditional write; see `examples/fencing.rs`).
//!
//! # Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `emulator` | no | [`emulator`]: the in-process coordination service and fault controls (the `ydb-coordination-emulator` crate) |
//! | `cloud` | no | [`auth::ServiceAccountCredentials`], [`auth::MetadataCredentials`], [`auth::OAuth2TokenExchangeCredentials`]: the credentials that fetch their tokens over HTTP (a JWT signer and an HTTP client); tokens, logins and your own providers need no feature |
//! | `tower` | no | [`rate_limiter::layer`]: a `tower` layer that takes rate-limiter units for each request (HTTP 429 when they are not available) |
//!
//! The command-line tool is its own package, `ydb-coord` (`cli/` in the repository).
#![doc(test(attr(deny(warnings))))]

pub mod auth;
mod bound;
mod client;
mod clock;
pub mod config;
mod discovery;
mod endpoints;
pub mod error;
mod keeper;
mod manager;
pub(crate) mod proto;
pub mod rate_limiter;
pub mod recipes;
mod retry;
pub mod session;
#[cfg(test)]
mod sim;
pub mod space;
mod transport;

#[cfg(feature = "emulator")]
#[cfg_attr(docsrs, doc(cfg(feature = "emulator")))]
#[doc(inline)]
pub use ydb_coordination_emulator as emulator;

/// The emulator's pure node core, which the simulator runs against the session core.
#[cfg(test)]
pub(crate) use crate::emulator::core as emulator_core;

pub use client::{Client, ClientBuilder};
pub use config::{AcquireOptions, SessionOptions};
pub use error::{Error, ErrorKind, Result};
pub use manager::{SessionManager, SessionStream};
pub use rate_limiter::RateLimiter;
pub use recipes::{
    Election, Group, Guard, Leadership, Membership, MultiLock, Mutex, MutexGuard, RwLock,
    RwLockReadGuard, RwLockWriteGuard, Semaphore, SemaphorePermit,
};
pub use session::{Acquiring, FencingToken, Lease, Session};
pub use space::LockSpace;

/// The README's code blocks, run as doctests against the emulator.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
