//! The session's observable state.

use tokio::time::Instant;

/// Where a session stands.
///
/// # Examples
///
/// ```
/// use ydb_coordination::session::SessionState;
///
/// fn describe(state: &SessionState) -> &'static str {
///     match state {
///         SessionState::Attached { .. } => "healthy",
///         SessionState::Reattaching { .. } => "connection lost, leases still valid",
///         SessionState::Expired | SessionState::Closed => "gone",
///         _ => "other",
///     }
/// }
/// # let _ = describe;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionState {
    /// The session is attached to a live stream.
    Attached {
        /// The server's id of the session.
        session_id: u64,
    },
    /// The stream broke; the client is reattaching. Leases are still held on the server and
    /// their tokens have not fired.
    Reattaching {
        /// When the stream was lost.
        since: Instant,
    },
    /// The session is lost: the server expired it, refused it, or the safety deadline passed
    /// without contact. Every lease token has fired.
    Expired,
    /// The session was closed by the client. Every lease token has fired.
    Closed,
}

impl SessionState {
    /// Whether the session is gone for good.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Expired | Self::Closed)
    }
}
