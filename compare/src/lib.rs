//! The side-by-side comparison of `ydb-coordination` with the official `ydb` crate.
//!
//! This package holds no library code. Its members:
//! - `tests/interop_ydb.rs`: the official `ydb` crate, unchanged, against the emulator
//!   (discovery, node admin, sessions, semaphores, contention);
//! - `benches/compare.rs`: the benchmark table of `compare/README.md`, this crate vs `ydb` vs the
//!   protocol floor (`cargo bench -p ydb-coordination-compare --bench compare`).
