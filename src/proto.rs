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
// The client only reads issues off the wire; its tests build them.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn issue(message: impl Into<String>) -> IssueMessage {
    IssueMessage {
        message: message.into(),
        ..IssueMessage::default()
    }
}

/// Wraps a request variant into a [`SessionRequest`].
pub(crate) fn request(r: session_request::Request) -> SessionRequest {
    SessionRequest { request: Some(r) }
}
