//! Distributed locks, semaphores and leader election on YDB coordination nodes.
#![doc(test(attr(deny(warnings))))]

mod auth;
mod client;
mod config;
mod error;
mod manager;
pub(crate) mod proto;
pub mod recipes;
mod session;
mod transport;

#[cfg(feature = "emulator")]
pub mod emulator;

pub use auth::{Credentials, TokenFuture, TokenProvider};
pub use client::{Client, ClientBuilder};
pub use config::{
    AcquireOptions, Backoff, ConsistencyMode, DescribeOptions, MAX_ACQUIRE_TIMEOUT, MAX_DATA_LEN,
    MAX_DESCRIPTION_LEN, MAX_NAME_LEN, MAX_SESSION_TIMEOUT, NodeConfig, RateLimiterCountersMode,
    SessionOptions, WatchOptions,
};
pub use error::{Error, ErrorKind, Issue, Result, StatusCode};
pub use manager::{SessionManager, SessionStream};
pub use recipes::{
    Election, Leader, Leadership, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    Semaphore, SemaphorePermit,
};
pub use session::{
    Acquire, Lease, SemaphoreDescription, SemaphoreSession, Session, SessionState, WatchStream,
    WatchUpdate,
};
