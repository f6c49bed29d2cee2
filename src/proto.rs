//! The one place that imports the generated YDB protocol types.
//!
//! Everything the crate sends or receives is a type from `ydb-grpc`, the crate the official
//! `ydb` SDK generates its protocol code into, so both speak exactly the same wire format.

pub(crate) use ydb_grpc::ydb_proto::coordination::session_request;
pub(crate) use ydb_grpc::ydb_proto::coordination::session_response;
pub(crate) use ydb_grpc::ydb_proto::coordination::{
    Config as NodeConfigProto, SemaphoreDescription as SemaphoreDescriptionProto,
    SemaphoreSession as SemaphoreSessionProto, SessionRequest, SessionResponse,
};
pub(crate) use ydb_grpc::ydb_proto::issue::IssueMessage;
pub(crate) use ydb_grpc::ydb_proto::status_ids::StatusCode;

/// Builds the single issue the server attaches to an error (YDB fills only `message`).
#[cfg_attr(not(feature = "emulator"), allow(dead_code))]
pub(crate) fn issue(message: impl Into<String>) -> IssueMessage {
    IssueMessage {
        message: message.into(),
        ..IssueMessage::default()
    }
}

/// Wraps a response variant into a [`SessionResponse`].
#[cfg_attr(not(feature = "emulator"), allow(dead_code))]
pub(crate) fn response(r: session_response::Response) -> SessionResponse {
    SessionResponse { response: Some(r) }
}

/// Wraps a request variant into a [`SessionRequest`].
pub(crate) fn request(r: session_request::Request) -> SessionRequest {
    SessionRequest { request: Some(r) }
}

/// The `failure` message that ends a stream.
#[cfg_attr(not(feature = "emulator"), allow(dead_code))]
pub(crate) fn failure(status: StatusCode, message: impl Into<String>) -> SessionResponse {
    response(session_response::Response::Failure(
        session_response::Failure {
            status: status as i32,
            issues: vec![issue(message)],
        },
    ))
}
