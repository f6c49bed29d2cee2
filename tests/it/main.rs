//! The integration tests, one binary: the client against the emulator (or a real YDB when
//! `YDB_CONNECTION_STRING` is set), scripted and hostile servers, mock credential endpoints.
//! Each module is one subject; the helpers they share are declared once here.
// Tests hold a guard to the end of the block that uses it; a lock across a call back into
// it is still caught (`significant_drop_in_scrutinee`).
#![allow(clippy::significant_drop_tightening)]

#[path = "../common/certs.rs"]
mod certs;
#[path = "../common/cloud.rs"]
mod cloud;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/oauth2.rs"]
mod oauth2;
#[path = "../common/peer.rs"]
mod peer;
#[path = "../common/raw.rs"]
mod raw;
#[path = "../common/unary.rs"]
mod unary;

mod announce;
mod auth;
mod bounded_and_multi;
mod bounds;
mod chaos;
mod cloud_credentials;
mod conformance;
mod conformance_bad_input;
mod driver_timer;
mod fleet;
mod forced_delete;
mod fuzz_messages;
mod hostile_server;
mod local_errors;
mod lock_delay;
mod oauth2_exchange;
mod oauth2_python;
mod observability;
mod rate_limiter;
mod recipes;
mod safety;
mod scale;
mod session;
mod shutdown;
mod smoke;
mod space;
mod space_lock_delay;
mod tls;
mod tower_layer;
mod transport;
