//! Exit codes and the one-line error a command ends with.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ydb_coordination::{Error, ErrorKind, error::StatusCode};

/// Exit code: the command could not be carried out (connection, missing node, server error).
pub(crate) const ERROR: u8 = 1;
/// Exit code: bad command line (unknown flag, bad duration, missing `--`).
pub(crate) const USAGE: u8 = 2;
/// Exit code: `subscribe --once` on a name nothing was ever published under (a value
/// published empty exits 0).
pub(crate) const NOT_PUBLISHED: u8 = 3;
/// Exit code: `lock`/`elect` did not get the lock or leadership within `--wait`, or at once
/// with `--no-wait`; `space reshard|finish` refused while a member lags (sysexits'
/// `EX_TEMPFAIL`: try again later).
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// Exit code: the lease may have been lost while the command ran; the command was stopped.
pub(crate) const LEASE_LOST: u8 = 76;
/// Exit code: the command was found but could not be executed (shell convention).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// Exit code: the command was not found (shell convention).
pub(crate) const NOT_FOUND: u8 = 127;

/// Why a command failed: printed as `error: {message}`, the process exits with `code`.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    /// A failure with exit code [`ERROR`].
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self::with_code(ERROR, message)
    }

    /// A failure with the given exit code.
    pub(crate) fn with_code(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: one_line(&message.into()),
        }
    }

    /// A library error, in the context of `what` (e.g. `connect to grpc://host:2136/db`),
    /// unless its message already names `subject` (the node, the connection string).
    pub(crate) fn lib(what: &str, subject: &str, err: &Error) -> Self {
        let message = describe(err);
        if message.contains(subject) {
            Self::new(message)
        } else {
            Self::new(format!("{what}: {message}"))
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)
    }
}

/// Whether errors are printed with their causes (`--verbose`).
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Prints errors with their chain of causes from now on (`--verbose`).
pub(crate) fn set_verbose(on: bool) {
    VERBOSE.store(on, Ordering::Relaxed);
}

/// The library error on one line: its message, which says what failed and why; with
/// `--verbose`, followed by the chain of its causes.
pub(crate) fn describe(err: &Error) -> String {
    if VERBOSE.load(Ordering::Relaxed) {
        one_line(&format!("{err:#}"))
    } else {
        one_line(&err.to_string())
    }
}

/// Collapses whitespace runs containing newlines so the message stays on one line.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The errors of operations on a semaphore, named the way an operator thinks of them.
pub(crate) fn semaphore_error(verb: &str, name: &str, node: &str, err: &Error) -> Failure {
    match err.kind() {
        ErrorKind::NotFound => Failure::new(format!("semaphore {name:?} not found on {node}")),
        ErrorKind::AlreadyExists => {
            Failure::new(format!("semaphore {name:?} already exists on {node}"))
        }
        _ => {
            // The library's message usually names the operation already.
            let message = describe(err);
            if message.starts_with(&format!("{verb} semaphore")) {
                Failure::new(format!("{message} (on {node})"))
            } else {
                Failure::new(format!("{verb} semaphore {name:?} on {node}: {message}"))
            }
        }
    }
}

/// The errors of operations on a rate-limiter resource: a missing node (`SCHEME_ERROR`) or
/// resource (`NOT_FOUND`) named as such.
pub(crate) fn resource_error(verb: &str, resource: &str, node: &str, err: &Error) -> Failure {
    match (err.kind(), err.status()) {
        (ErrorKind::NotFound, Some(StatusCode::SchemeError)) => {
            Failure::new(format!("coordination node {node} not found"))
        }
        (ErrorKind::NotFound, _) => Failure::new(format!(
            "rate-limiter resource {resource:?} not found on {node}"
        )),
        (ErrorKind::AlreadyExists, _) => Failure::new(format!(
            "rate-limiter resource {resource:?} already exists on {node}"
        )),
        _ => {
            // The library's message names the operation and the resource already.
            let message = describe(err);
            if message.contains(&format!("{resource:?}")) {
                Failure::new(format!("{message} (on {node})"))
            } else {
                Failure::new(format!(
                    "{verb} rate-limiter resource {resource:?} on {node}: {message}"
                ))
            }
        }
    }
}

/// The errors of a lock space's directory calls: a missing directory node (a server's
/// `NOT_FOUND` or `SCHEME_ERROR`) and a space without a layout (the library's `NotFound`)
/// named as such, the others in the context of `verb`.
pub(crate) fn space_error(verb: &str, space: &str, directory: &str, err: &Error) -> Failure {
    match (err.kind(), err.status()) {
        (ErrorKind::NotFound, Some(_)) => {
            Failure::new(format!("coordination node {directory} not found"))
        }
        (ErrorKind::NotFound, None) => Failure::new(format!(
            "lock space {space:?} has no layout on {directory}; publish one with `ydb-coord space init`"
        )),
        _ => Failure::lib(
            &format!("{verb} lock space {space:?} on {directory}"),
            directory,
            err,
        ),
    }
}

/// The errors of opening a session (or any node-level call) on `node`.
pub(crate) fn node_error(verb: &str, node: &str, err: &Error) -> Failure {
    match err.kind() {
        ErrorKind::NotFound => Failure::new(format!("coordination node {node} not found")),
        ErrorKind::AlreadyExists => {
            Failure::new(format!("coordination node {node} already exists"))
        }
        _ => Failure::lib(&format!("{verb} {node}"), node, err),
    }
}

/// The errors of starting a session on `node` within `limit` (`--timeout`): running out of
/// time names the limit as given and the last failure; the others as [`node_error`].
pub(crate) fn session_error(node: &str, limit: Duration, err: &Error) -> Failure {
    if !matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable) {
        return node_error("open a session on", node, err);
    }
    let within = format!(
        "could not open a session on {node} within {} (see --timeout)",
        super::duration::format(limit)
    );
    match std::error::Error::source(err) {
        Some(cause) => Failure::new(format!("{within}: {cause}")),
        None => Failure::new(within),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_stay_on_one_line() {
        let f = Failure::new("first\n  second\tthird");
        assert_eq!(f.to_string(), "error: first second third");
    }

    #[test]
    fn a_missing_resource_is_told_from_a_missing_node() {
        let err = Error::from_status(StatusCode::NotFound, "describe");
        let f = resource_error("describe", "api", "/local/app", &err);
        assert_eq!(
            f.to_string(),
            r#"error: rate-limiter resource "api" not found on /local/app"#
        );
        let err = Error::from_status(StatusCode::SchemeError, "describe");
        let f = resource_error("describe", "api", "/local/app", &err);
        assert_eq!(
            f.to_string(),
            "error: coordination node /local/app not found"
        );
    }

    #[test]
    fn not_found_names_the_semaphore_and_node() {
        let err = Error::new(ErrorKind::NotFound, "describe semaphore: NOT_FOUND");
        let f = semaphore_error("describe", "x", "/local/app", &err);
        assert_eq!(
            f.to_string(),
            r#"error: semaphore "x" not found on /local/app"#
        );
    }
}
