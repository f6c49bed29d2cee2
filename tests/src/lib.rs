//! The integration tests of `ydb-coordination`.
//!
//! This package holds no library code. Its test binary, `it/` (`cargo test -p
//! ydb-coordination-tests`), runs the client against the embedded emulator, or against a real
//! YDB when `YDB_CONNECTION_STRING` is set; `common/` is its shared setup (the emulator, the
//! scripted peer, the raw protocol, mock credential endpoints, test certificates) and `data/`
//! its test keys. They live apart from the client so that building one of its examples does
//! not build what only these tests use.
