//! The integration tests of the fence crate, one binary (one link, and one server of each kind
//! for all its tests): the conformance kit against the reference store and planted bugs, and
//! each adapter, behind its feature, against its real server.

// The kit's futures over the YDB store nest the `ydb` crate's deep ones.
#![recursion_limit = "256"]

#[path = "../common/mod.rs"]
mod common;

mod kit;
#[cfg(feature = "object-store")]
mod objects;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "postgres")]
mod stale_holder;
#[cfg(feature = "ydb")]
mod ydb;
