//! The one place that imports the generated YDB protocol types.
//!
//! The emulator shares nothing with the client but these: the types `ydb-grpc` generates from
//! YDB's own `.proto` files (the crate the official `ydb` SDK uses), so every client speaks
//! exactly the wire format it serves.

pub(crate) use ydb_grpc::ydb_proto::coordination::session_request;
pub(crate) use ydb_grpc::ydb_proto::coordination::session_response;
pub(crate) use ydb_grpc::ydb_proto::coordination::{
    Config as NodeConfigProto, SemaphoreDescription as SemaphoreDescriptionProto,
    SemaphoreSession as SemaphoreSessionProto, SessionRequest, SessionResponse,
};
pub(crate) use ydb_grpc::ydb_proto::issue::IssueMessage;
pub(crate) use ydb_grpc::ydb_proto::status_ids::StatusCode;

/// Builds the single issue the server attaches to an error (YDB fills only `message`).
pub(crate) fn issue(message: impl Into<String>) -> IssueMessage {
    IssueMessage {
        message: message.into(),
        ..IssueMessage::default()
    }
}

/// Wraps a response variant into a [`SessionResponse`].
pub(crate) fn response(r: session_response::Response) -> SessionResponse {
    SessionResponse { response: Some(r) }
}

/// The `failure` message that ends a stream.
pub(crate) fn failure(status: StatusCode, message: impl Into<String>) -> SessionResponse {
    response(session_response::Response::Failure(
        session_response::Failure {
            status: status as i32,
            issues: vec![issue(message)],
        },
    ))
}
