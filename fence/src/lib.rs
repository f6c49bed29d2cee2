//! Fenced writes checked by the resource: the protected store keeps, per name, the greatest
//! fencing token it has accepted, and applies a write carrying a token in one atomic step
//! with the check against it, or refuses it as stale.
//!
//! A lock alone cannot keep two holders apart: a holder that stalls past its lease (a GC
//! pause, a SIGSTOP, a slow disk) wakes up still believing it holds the lock. Every guard of
//! [`ydb_coordination`] hands out a [`FencingToken`](ydb_coordination::FencingToken); this crate
//! is the other half, on the resource's side. The guide, with when a lock suffices, which
//! adapter to take and the pitfalls, is `docs/fencing.md` in the repository.
//!
//! # Quick start
//!
//! ```
//! use ydb_coordination::FencingToken;
//! use ydb_coordination_fence::{FencedStore, Outcome, Token, Write, memory::MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), ydb_coordination_fence::Error> {
//! let store = MemoryStore::new(); // or PostgreSQL, Redis, an S3 bucket, a YDB table
//! // The holder that stalled had token 41; the lock passed to the holder of token 42, which
//! // claimed the name as soon as it had the lock.
//! let (stalled, current) = (Token::new(FencingToken::new(0, 41)), Token::new(FencingToken::new(0, 42)));
//! assert_eq!(store.claim("ledger", current).await?, Outcome::Applied);
//! match store.write("ledger", stalled, Write::new(b"balance=0")).await? {
//!     Outcome::Applied => unreachable!("a stale holder's write must be refused"),
//!     Outcome::Stale { current } => println!("lost the lock to {current}: stop"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What the store guarantees
//!
//! - **One atomic step**: the check and the write happen together on the store (a conditional
//!   upsert in the same transaction, one Lua script, a compare-and-swap), never as a read, a
//!   comparison in the client and a write.
//! - **An equal token is accepted** (the same holder writing again), **a lower one refused**
//!   with [`Outcome::Stale`] and the token that superseded it. [`Outcome`] is `#[must_use]`.
//! - **Claim on acquire**: [`FencedStore::claim`] raises the mark before the new holder's
//!   first write, so that an old holder cannot write between the grant and that write (as
//!   HDFS JournalNodes, Kafka producer epochs and SlateDB writers do).
//! - **Idempotent writes**: a write carrying a [`WriteId`] that is retried after an unknown
//!   outcome returns its first outcome instead of being applied twice.
//! - **Node recreation**: a [`Token`] can carry the coordination node's incarnation
//!   ([`Client::node_incarnation`](ydb_coordination::Client::node_incarnation)); a node dropped
//!   and created again restarts its order ids at 1, but its incarnation is greater, so its
//!   holders win and the old node's lose.
//! - **No lost bits**: tokens are 256 bits (incarnation, epoch, order id) and every adapter
//!   stores them whole, as 64 hex digits, never as a double or a 64-bit integer.
//!
//! # What it does not do
//!
//! - **A counted semaphore's permits are not fenced by one mark.** Holders of a semaphore with
//!   more than one unit hold at the same time, with distinct, increasing tokens: one mark per
//!   name would refuse every holder but the newest. Fence each permit's own resource (its own
//!   name), or fence only what one holder at a time may write.
//! - It does not make the lock unnecessary: the lock decides who should write, the fence only
//!   stops the ones who no longer should.
//!
//! # Adapters
//!
//! | feature | module | store | one atomic step |
//! |---|---|---|---|
//! | (always) | [`memory`] | one process | a lock around the check and the write |
//! | (always) | [`kit`] | yours | the conformance kit every adapter passes |
//! | `postgres` | `postgres` | PostgreSQL (tokio-postgres) | a conditional upsert in the caller's transaction; a stale check aborts it |
//! | `redis` | `redis` | Redis, Valkey (redis) | one Lua script checks the mark and runs the caller's writes (a failover can lose the mark) |
//! | `object-store` | `objects` | S3-compatible stores (object_store) | a compare-and-swap on the object's ETag, the token in the object |
//! | `ydb` | `ydb` | YDB tables (ydb) | one serializable transaction reads the mark and writes |
//!
//! No feature is on by default: the client's build gains no database driver.
// The `ydb` crate's futures nest deeply: without the higher limit, the doctests merged into one
// crate do not compile, and rustdoc builds and links each one alone (a minute more).
#![doc(test(attr(deny(warnings), recursion_limit = "256")))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod kit;
pub mod memory;
#[cfg(feature = "object-store")]
#[cfg_attr(docsrs, doc(cfg(feature = "object-store")))]
pub mod objects;
mod outcome;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod rule;
mod store;
mod token;
#[cfg(feature = "ydb")]
#[cfg_attr(docsrs, doc(cfg(feature = "ydb")))]
pub mod ydb;

pub use error::{Error, ErrorKind, Result};
pub use outcome::{Admission, Outcome, StaleToken};
pub use store::{FencedStore, Record, Write};
pub use token::{Token, WriteId};

/// The guide's examples (`docs/fencing.md`), compiled with the doctests.
#[cfg(all(
    doctest,
    feature = "postgres",
    feature = "redis",
    feature = "object-store",
    feature = "ydb"
))]
#[doc = include_str!("../../docs/fencing.md")]
struct Guide;
