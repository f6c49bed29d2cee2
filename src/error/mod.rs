//! The crate's one error type. Beside it: its words, the kinds and retry rules (`kind.rs`),
//! and the table of which status reads as which (`classify.rs`).

mod classify;
mod kind;
mod status;

use std::error::Error as StdError;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use self::classify::Class;
pub use self::kind::{ErrorKind, RetryRule};
pub use self::status::{StatusCode, UnknownStatus};
use crate::proto::IssueMessage;

/// One issue attached to a YDB status. More fields may come (a severity, a position), so it
/// is read, not built, outside this crate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Issue {
    /// The server's message.
    pub message: String,
    /// The server's issue code (0 when unset).
    pub code: u32,
    /// Nested issues.
    pub issues: Vec<Issue>,
}

impl From<&IssueMessage> for Issue {
    fn from(m: &IssueMessage) -> Self {
        Self {
            message: m.message.clone(),
            code: m.issue_code,
            issues: m.issues.iter().map(Issue::from).collect(),
        }
    }
}

type Source = Arc<dyn StdError + Send + Sync + 'static>;

/// The error of every fallible operation in this crate.
///
/// Cheap to clone: one cause is shared by every caller it reaches (a lost session fails all
/// of its pending requests with the same error).
///
/// `Display` is one short line a person can act on, such as
/// `describe node "/local/app": cannot reach 127.0.0.1:2136: connection refused`. The
/// causes stay available through [`source()`](std::error::Error::source); the alternate
/// form (`{:#}`) appends them to the line, the way `anyhow` does, and `Debug` shows them
/// all. The gRPC status of a failed call is [`Error::grpc_code`].
///
/// # Examples
///
/// ```
/// use ydb_coordination::{Error, ErrorKind};
///
/// fn handle(err: &Error) -> &'static str {
///     match err.kind() {
///         ErrorKind::AlreadyExists => "fine, someone created it first",
///         ErrorKind::SessionExpired => "locks are gone: stop the work",
///         _ if err.is_retryable() => "try again",
///         _ => "give up",
///     }
/// }
/// # let _ = handle;
/// ```
///
/// Printing one line, or the line with its causes:
///
/// ```
/// use ydb_coordination::{Error, error::StatusCode};
///
/// let err = Error::from_status(StatusCode::NotFound, "semaphore \"jobs\" not found");
/// assert_eq!(err.to_string(), "semaphore \"jobs\" not found");
/// assert_eq!(format!("{err:#}"), err.to_string()); // this one has no causes
/// ```
#[derive(Clone)]
pub struct Error(Arc<Inner>);

struct Inner {
    kind: ErrorKind,
    /// May the request go again, and is the endpoint at fault (`classify.rs`).
    retry: RetryRule,
    blames_endpoint: bool,
    message: String,
    status: Option<StatusCode>,
    issues: Vec<Issue>,
    grpc: Option<GrpcCause>,
    source: Option<Source>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of the given kind with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::classified(classify::client_side(kind), message)
    }

    fn classified(class: Class, message: impl Into<String>) -> Self {
        Self(Arc::new(Inner {
            kind: class.kind,
            retry: class.retry,
            blames_endpoint: class.blames_endpoint,
            message: message.into(),
            status: None,
            issues: Vec::new(),
            grpc: None,
            source: None,
        }))
    }

    /// The error for a YDB status with a message.
    pub fn from_status(status: StatusCode, message: impl Into<String>) -> Self {
        let mut err = Self::classified(classify::ydb_status(status), message);
        if let Some(inner) = Arc::get_mut(&mut err.0) {
            inner.status = Some(status);
        }
        err
    }

    /// The error for a YDB status as the server reported it (raw status code and issues):
    /// `{context}: {status in words} ({the issues' messages})`.
    pub(crate) fn from_ydb(status: i32, issues: &[IssueMessage], context: &str) -> Self {
        let code = StatusCode::try_from(status).ok();
        let issues: Vec<Issue> = issues.iter().map(Issue::from).collect();
        let mut messages = Vec::new();
        collect_messages(&issues, &mut messages);
        let words = match code {
            Some(code) if code != StatusCode::Unspecified => {
                code.as_str().to_ascii_lowercase().replace('_', " ")
            }
            _ => format!("unknown status {status}"),
        };
        let message = if messages.is_empty() {
            format!("{context}: {words}")
        } else {
            format!("{context}: {words} ({})", messages.join("; "))
        };
        let code = code.unwrap_or(StatusCode::Unspecified);
        let class = classify::ydb_status(code);
        Self(Arc::new(Inner {
            kind: class.kind,
            retry: class.retry,
            blames_endpoint: class.blames_endpoint,
            message,
            status: Some(code),
            issues,
            grpc: None,
            source: None,
        }))
    }

    /// A failed gRPC call: `{context}: {what failed}`, phrased from the transport failure
    /// under the status (`cannot reach 127.0.0.1:1: connection refused`) or from the status
    /// the server sent (`not authenticated: invalid token`).
    ///
    /// A status tonic built from a failure of the client's own transport keeps that failure
    /// as its source: it is classified as a transport failure whatever its code (tonic
    /// reports a cut connection as `UNKNOWN`). Any other status, one a server sent or one
    /// tonic made up for a stream that ended without a status, is classified by its code
    /// (`classify.rs`).
    pub(crate) fn from_grpc(status: tonic::Status, context: &str) -> Self {
        let class = match status.source() {
            Some(cause) => {
                let scan = Scan::of(cause);
                let sent = !(scan.connect || scan.tcp || scan.unsent);
                classify::transport_failure(sent, scan.tls_handshake())
            }
            None => classify::grpc_code(status.code()),
        };
        let message = format!("{context}: {}", grpc_reason(&status));
        Self(Arc::new(Inner {
            kind: class.kind,
            retry: class.retry,
            blames_endpoint: class.blames_endpoint,
            message,
            status: None,
            issues: Vec::new(),
            grpc: Some(GrpcCause(status)),
            source: None,
        }))
    }

    /// Attaches a source error. The message should say what went wrong on its own (see
    /// [`describe_cause`] to phrase the cause in it).
    pub(crate) fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        let class = classify::client_side(kind);
        Self(Arc::new(Inner {
            kind,
            retry: class.retry,
            blames_endpoint: class.blames_endpoint,
            message: message.into(),
            status: None,
            issues: Vec::new(),
            grpc: None,
            source: Some(Arc::new(source)),
        }))
    }

    /// The same cause as another error, re-labelled with a different kind and context (for
    /// example "session expired" caused by a transport failure). The message is shown as
    /// given: include `{cause}` in it when the reader needs the reason.
    pub(crate) fn caused_by(kind: ErrorKind, message: impl Into<String>, cause: &Error) -> Self {
        let class = classify::client_side(kind);
        Self(Arc::new(Inner {
            kind,
            retry: class.retry,
            blames_endpoint: class.blames_endpoint,
            message: message.into(),
            status: cause.status(),
            issues: cause.issues().to_vec(),
            grpc: None,
            source: Some(Arc::new(cause.clone())),
        }))
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The YDB status, when the server reported one.
    pub fn status(&self) -> Option<StatusCode> {
        self.0.status
    }

    /// The issues the server attached to its status.
    pub fn issues(&self) -> &[Issue] {
        &self.0.issues
    }

    /// The gRPC status code (`0` OK to `16` UNAUTHENTICATED), for errors the gRPC layer
    /// answered rather than YDB. Its message and cause are the first links of the
    /// [`source()`](std::error::Error::source) chain.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ydb_coordination::{Error, ErrorKind};
    /// let err = Error::new(ErrorKind::Internal, "not from gRPC");
    /// assert_eq!(err.grpc_code(), None);
    /// ```
    pub fn grpc_code(&self) -> Option<i32> {
        self.grpc_status().map(|s| s.code() as i32)
    }

    /// The gRPC status, for transport-level errors.
    pub(crate) fn grpc_status(&self) -> Option<&tonic::Status> {
        self.0.grpc.as_ref().map(|g| &g.0)
    }

    /// Whether the same operation may succeed if tried again later (on this or a new session):
    /// its [`retry_rule`](Error::retry_rule) allows an idempotent request to be sent again,
    /// or the session expired (a new one may do). A TLS handshake the client rejected is
    /// not: the same certificate comes back.
    pub fn is_retryable(&self) -> bool {
        self.retry_rule() != RetryRule::Never
            || (self.0.kind == ErrorKind::SessionExpired && !self.is_tls_rejection())
    }

    /// Whether the request may be sent again as it is, by the rules of YDB's SDKs (the
    /// table of [`ErrorKind`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use ydb_coordination::{Error, error::RetryRule, error::StatusCode};
    ///
    /// let err = Error::from_status(StatusCode::Overloaded, "try later");
    /// assert_eq!(err.retry_rule(), RetryRule::Always);
    /// let err = Error::from_status(StatusCode::NotFound, "no such node");
    /// assert_eq!(err.retry_rule(), RetryRule::Never);
    /// ```
    pub fn retry_rule(&self) -> RetryRule {
        if self.is_tls_rejection() {
            RetryRule::Never
        } else {
            self.0.retry
        }
    }

    /// Whether the failure says the endpoint itself is at fault (a transport failure, a
    /// gRPC `UNAVAILABLE` or `RESOURCE_EXHAUSTED`, an attempt nobody answered), so it is
    /// to be preferred last and reconnected, rather than a server answering with an error.
    pub(crate) fn blames_endpoint(&self) -> bool {
        self.0.blames_endpoint
    }

    /// Whether the error means the session is gone (expired, closed or taken over), so its
    /// leases are lost and a new session is needed.
    pub fn is_session_lost(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::SessionExpired | ErrorKind::SessionClosed | ErrorKind::BadSession
        )
    }

    /// Whether a server's answer to an attach (or a failure on the stream) ends the
    /// session for good, rather than being worth another attempt on a new stream: the
    /// server's session verdicts and the statuses no retry can change.
    pub(crate) fn ends_session(&self) -> bool {
        matches!(
            self.0.status,
            Some(
                StatusCode::SessionExpired
                    | StatusCode::BadSession
                    | StatusCode::NotFound
                    | StatusCode::Unauthorized
                    | StatusCode::BadRequest
                    | StatusCode::PreconditionFailed
            )
        )
    }

    /// Whether a session start must end at once instead of trying again: the server's
    /// verdicts of [`Error::ends_session`], a TLS certificate the client refuses, a token
    /// rejected by the gRPC layer ([`ErrorKind::Unauthorized`] without a YDB status: the
    /// attach has already renewed it once), and a request that is invalid as it stands
    /// ([`ErrorKind::InvalidArgument`], such as a token that is not a valid header value,
    /// found before anything is sent): another attempt would send the same request and fail
    /// the same way.
    pub(crate) fn ends_session_start(&self) -> bool {
        self.ends_session()
            || self.is_tls_rejection()
            || matches!(
                self.0.kind,
                ErrorKind::InvalidArgument | ErrorKind::Unauthorized
            )
    }

    /// Whether the client refused the server's TLS certificate (not trusted, or for another
    /// name): the handshake fails the same way every time, so it is not worth repeating.
    pub(crate) fn is_tls_rejection(&self) -> bool {
        Scan::of(self).tls_handshake()
    }

    /// Whether a session manager (or `Client::sessions`) must stop instead of trying to
    /// start another session: no such node, rejected credentials, invalid options.
    pub(crate) fn stops_manager(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::NotFound | ErrorKind::Unauthorized | ErrorKind::InvalidArgument
        )
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.0.kind)
            .field("message", &self.0.message);
        if let Some(status) = self.0.status {
            d.field("status", &status);
        }
        if !self.0.issues.is_empty() {
            d.field("issues", &self.0.issues);
        }
        if let Some(grpc) = &self.0.grpc {
            d.field("grpc", &grpc.0);
        }
        if let Some(source) = &self.0.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    /// The message; with `{:#}`, followed by each cause not already in the line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.message)?;
        if f.alternate() {
            let mut shown = self.0.message.clone();
            let mut next = StdError::source(self);
            while let Some(cause) = next {
                let text = match cause.downcast_ref::<tonic::Status>() {
                    Some(status) => grpc_line(status),
                    None => one_line(&cause.to_string()),
                };
                if !text.is_empty() && !shown.contains(&text) {
                    write!(f, ": {text}")?;
                    shown.push_str(": ");
                    shown.push_str(&text);
                }
                next = cause.source();
            }
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        if let Some(source) = &self.0.source {
            return Some(source.as_ref());
        }
        self.0.grpc.as_ref().map(|g| g as &(dyn StdError + 'static))
    }
}

/// A gRPC status as a link of a source chain. tonic's own `Display` of a status is
/// `code: '…', message: "…", source: tonic::transport::Error(…)`, the `Debug` form of its
/// cause included; this one is a single line, and `source()` goes on with the status's
/// cause.
#[derive(Clone)]
struct GrpcCause(tonic::Status);

impl fmt::Debug for GrpcCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for GrpcCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&grpc_line(&self.0))
    }
}

impl StdError for GrpcCause {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// `gRPC status unavailable: tcp connect error`.
fn grpc_line(status: &tonic::Status) -> String {
    format!("gRPC status {}", status_words(status))
}

/// The status's code in words, and its message if it has one.
fn status_words(status: &tonic::Status) -> String {
    let message = one_line(status.message());
    let words = code_words(status.code());
    if message.is_empty() {
        words.to_string()
    } else {
        format!("{words}: {message}")
    }
}

fn code_words(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "ok",
        C::Cancelled => "cancelled",
        C::Unknown => "unknown error",
        C::InvalidArgument => "invalid argument",
        C::DeadlineExceeded => "deadline exceeded",
        C::NotFound => "not found",
        C::AlreadyExists => "already exists",
        C::PermissionDenied => "permission denied",
        C::ResourceExhausted => "resource exhausted",
        C::FailedPrecondition => "failed precondition",
        C::Aborted => "aborted",
        C::OutOfRange => "out of range",
        C::Unimplemented => "not implemented by the server",
        C::Internal => "internal error",
        C::Unavailable => "unavailable",
        C::DataLoss => "data loss",
        C::Unauthenticated => "not authenticated",
    }
}

/// What failed in a gRPC call, in a few words: the transport failure under the status if
/// there is one, else the status the server sent.
fn grpc_reason(status: &tonic::Status) -> String {
    status
        .source()
        .and_then(transport_reason)
        .unwrap_or_else(|| status_words(status))
}

/// Phrases a transport failure (connect, DNS, TLS, a broken connection) from its source
/// chain, or `None` if the chain holds none.
fn transport_reason(top: &(dyn StdError + 'static)) -> Option<String> {
    let scan = Scan::of(top);
    if !(scan.connect || scan.transport || scan.timeout || scan.tcp) {
        return None;
    }
    let why = describe_cause(top);
    Some(if scan.dns {
        format!("cannot resolve the server's host name: {why}")
    } else if let Some(addr) = scan.addr {
        format!("cannot reach {addr}: {why}")
    } else if scan.tcp {
        format!("cannot reach the server: {why}")
    } else if scan.tls_handshake() {
        format!("TLS handshake with the server failed: {why}")
    } else if scan.connect {
        format!("cannot connect to the server: {why}")
    } else if scan.timeout {
        "the server did not answer in time".to_string()
    } else {
        format!("the connection to the server failed: {why}")
    })
}

/// What a transport failure's source chain holds.
#[derive(Debug, Default)]
struct Scan {
    connect: bool,
    transport: bool,
    timeout: bool,
    tcp: bool,
    dns: bool,
    addr: Option<SocketAddr>,
    bad_data: bool,
    /// hyper gave the request up before writing it (its connection had closed).
    unsent: bool,
}

impl Scan {
    fn of(top: &(dyn StdError + 'static)) -> Self {
        let mut scan = Self::default();
        let mut next = Some(top);
        while let Some(e) = next {
            scan.connect |= e.is::<tonic::ConnectError>();
            scan.bad_data |= e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData);
            scan.transport |= e.is::<tonic::transport::Error>();
            scan.timeout |= e.is::<tonic::TimeoutExpired>();
            scan.unsent |= e
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_canceled);
            if let Some(hyper) = HyperConnectError::parse(e) {
                scan.tcp = true;
                scan.dns |= hyper.dns;
                scan.addr = scan.addr.or(hyper.addr);
            }
            next = e.source();
        }
        scan
    }

    /// Past TCP, tonic's connector only runs the TLS handshake (rustls reports through
    /// `InvalidData` I/O errors).
    fn tls_handshake(&self) -> bool {
        self.connect && self.bad_data && !self.tcp
    }
}

/// What hyper-util's `ConnectError` (the TCP connector's failure) tells. It has no
/// accessors: its `Display` is the step that failed (`tcp connect error`, `dns error`) and
/// its `Debug` form `ConnectError("tcp connect error", 127.0.0.1:1, Os { .. })` carries the
/// address. Best effort: a format this does not recognise only loses the address.
struct HyperConnectError {
    dns: bool,
    addr: Option<SocketAddr>,
}

impl HyperConnectError {
    fn parse(e: &(dyn StdError + 'static)) -> Option<Self> {
        let debug = format!("{e:?}");
        let rest = debug.strip_prefix("ConnectError(\"")?;
        let addr = rest.split_once("\", ").and_then(|(_, rest)| {
            let end = rest.find([',', ')']).unwrap_or(rest.len());
            rest.get(..end)?.trim().parse().ok()
        });
        Some(Self {
            dns: e.to_string() == "dns error",
            addr,
        })
    }
}

/// The root cause of an error in a few words: an I/O error by its kind (`connection
/// refused`, `timed out`), otherwise the innermost message on one line.
pub(crate) fn describe_cause(top: &(dyn StdError + 'static)) -> String {
    let mut innermost = top;
    let mut next = Some(top);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io_words(io);
        }
        if !e.to_string().trim().is_empty() {
            innermost = e;
        }
        next = e.source();
    }
    tidy(&innermost.to_string())
}

fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    let words = match e.kind() {
        K::ConnectionRefused => "connection refused",
        K::ConnectionReset => "connection reset",
        K::ConnectionAborted => "connection aborted",
        K::TimedOut => "timed out",
        K::BrokenPipe | K::UnexpectedEof => "connection closed",
        K::NotConnected => "not connected",
        K::AddrNotAvailable => "address not available",
        K::HostUnreachable => "host unreachable",
        K::NetworkUnreachable => "network unreachable",
        K::NetworkDown => "network down",
        K::PermissionDenied => "permission denied",
        _ => return tidy(&e.to_string()),
    };
    words.to_string()
}

/// One line, without the `(os error N)` tail, the resolver's boilerplate and a leading
/// capital (`Name or service not known` reads `name or service not known` mid-sentence).
fn tidy(s: &str) -> String {
    let mut s = one_line(s);
    if let Some(i) = s.rfind(" (os error ")
        && s.ends_with(')')
    {
        s.truncate(i);
    }
    if let Some(rest) = s.strip_prefix("failed to lookup address information: ") {
        s = rest.to_string();
    }
    let mut chars = s.chars();
    if let (Some(first), Some(second)) = (chars.next(), chars.next())
        && first.is_uppercase()
        && !second.is_uppercase()
    {
        let rest = s.get(first.len_utf8()..).unwrap_or_default();
        return first.to_lowercase().chain(rest.chars()).collect();
    }
    s
}

/// Collapses whitespace (newlines included) to single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The issues' messages, depth first, each once.
fn collect_messages(issues: &[Issue], out: &mut Vec<String>) {
    for issue in issues {
        let message = one_line(&issue.message);
        if !message.is_empty() && !out.contains(&message) {
            out.push(message);
        }
        collect_messages(&issue.issues, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(
            ErrorKind::from_status(StatusCode::SchemeError),
            ErrorKind::NotFound
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::BadRequest),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            ErrorKind::from_status(StatusCode::Success),
            ErrorKind::Internal
        );
    }

    #[test]
    fn ydb_errors_keep_status_and_issues() {
        let err = Error::from_ydb(
            StatusCode::PreconditionFailed as i32,
            &[crate::proto::issue("Semaphore not empty")],
            "delete semaphore \"a\"",
        );
        assert_eq!(err.kind(), ErrorKind::PreconditionFailed);
        assert_eq!(err.status(), Some(StatusCode::PreconditionFailed));
        assert_eq!(err.issues().len(), 1);
        assert!(!err.is_retryable());
    }

    #[test]
    fn unknown_status_numbers_are_internal() {
        let err = Error::from_ydb(123, &[], "x");
        assert_eq!(err.kind(), ErrorKind::Internal);
    }

    #[test]
    fn caused_by_keeps_the_chain() {
        let cause = Error::new(ErrorKind::Transport, "reset");
        let err = Error::caused_by(ErrorKind::SessionExpired, "lost", &cause);
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("reset"));
        assert!(err.is_session_lost());
    }

    /// A real failed call: nothing listens on port 1 of the loopback interface.
    async fn refused_status() -> tonic::Status {
        use ydb_grpc::ydb_proto::discovery::ListEndpointsRequest;
        use ydb_grpc::ydb_proto::discovery::v1::discovery_service_client::DiscoveryServiceClient;

        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:1")
            .connect_timeout(std::time::Duration::from_secs(5))
            .connect_lazy();
        let mut client = DiscoveryServiceClient::new(channel);
        match client.list_endpoints(ListEndpointsRequest::default()).await {
            Ok(_) => panic!("something answers on 127.0.0.1:1"),
            Err(status) => status,
        }
    }

    fn chain(err: &Error) -> Vec<&(dyn StdError + 'static)> {
        std::iter::successors(StdError::source(err), |&e| e.source()).collect()
    }

    fn assert_one_clean_line(text: &str) {
        assert!(!text.contains("code:"), "{text}");
        assert!(!text.contains("tonic::"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    #[tokio::test]
    async fn transport_failures_read_as_one_line_and_keep_the_chain() {
        let err = Error::from_grpc(refused_status().await, "list endpoints");
        assert_eq!(err.kind(), ErrorKind::Transport);
        assert!(err.is_retryable());
        assert!(err.grpc_status().is_some());
        assert_one_clean_line(&err.to_string());
        assert_one_clean_line(&format!("{err:#}"));
        // The chain goes on down to the operating system's error.
        let causes = chain(&err);
        assert!(!causes.is_empty());
        assert!(causes.iter().any(|e| {
            e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        }));
        // The address is read from hyper-util's connect error, the one place it is kept.
        let addr = causes
            .iter()
            .find_map(|e| HyperConnectError::parse(*e).and_then(|h| h.addr));
        assert_eq!(addr, "127.0.0.1:1".parse().ok());
    }

    #[tokio::test]
    async fn errors_caused_by_a_transport_failure_keep_its_chain() {
        let cause = Error::from_grpc(refused_status().await, "session stream");
        let err = Error::caused_by(
            ErrorKind::Timeout,
            format!("could not start a session: {cause}"),
            &cause,
        );
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert_one_clean_line(&err.to_string());
        assert_one_clean_line(&format!("{err:#}"));
        let causes = chain(&err);
        assert!(causes.first().is_some_and(|e| e.is::<Error>()));
        assert!(causes.iter().any(|e| e.is::<std::io::Error>()));
    }

    #[test]
    fn server_statuses_read_as_one_line() {
        let err = Error::from_grpc(
            tonic::Status::unauthenticated("token\nexpired"),
            "describe node",
        );
        assert_eq!(err.kind(), ErrorKind::Unauthorized);
        assert_one_clean_line(&err.to_string());
        assert_one_clean_line(&format!("{err:#}"));
        assert!(StdError::source(&err).is_some());
    }

    #[test]
    fn classification_table() {
        // (status, retryable, ends the session at attach, stops a manager)
        let table = [
            (StatusCode::Unavailable, true, false, false),
            (StatusCode::Overloaded, true, false, false),
            (StatusCode::SessionExpired, true, true, false),
            (StatusCode::BadSession, true, true, false),
            (StatusCode::NotFound, false, true, true),
            (StatusCode::SchemeError, false, false, true),
            (StatusCode::Unauthorized, false, true, true),
            (StatusCode::BadRequest, false, true, true),
            (StatusCode::PreconditionFailed, false, true, false),
            (StatusCode::Aborted, true, false, false),
            (StatusCode::InternalError, false, false, false),
        ];
        for (status, retryable, ends, stops) in table {
            let err = Error::from_status(status, "x");
            assert_eq!(err.is_retryable(), retryable, "{status:?} retryable");
            assert_eq!(err.ends_session(), ends, "{status:?} ends the session");
            assert_eq!(err.ends_session_start(), ends, "{status:?} ends a start");
            assert_eq!(err.stops_manager(), stops, "{status:?} stops a manager");
        }
        // Without a server status (a transport failure) nothing is final.
        let err = Error::new(ErrorKind::Transport, "cut");
        assert!(err.is_retryable() && !err.ends_session() && !err.stops_manager());
        assert!(!err.ends_session_start());
        // A request the client cannot send as it stands is final before any server is asked.
        let err = Error::new(ErrorKind::InvalidArgument, "token is not a header value");
        assert!(!err.is_retryable() && err.ends_session_start() && err.stops_manager());
        // A token the gRPC layer rejects (after the attach renewed it once) is final too.
        let err = Error::from_grpc(tonic::Status::unauthenticated("bad token"), "session");
        assert!(!err.ends_session() && err.ends_session_start() && err.stops_manager());
    }
}
