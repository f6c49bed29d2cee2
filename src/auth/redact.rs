//! The secrets a token request carried, kept out of every error its answer leads to.
//!
//! A token endpoint may echo what it was sent: a subject token in an `error_description`, the
//! JWT in a `token_type`, the URL's query in a `message`. Errors are shown to people and
//! written to logs, so every text of an answer that goes into an error passes through
//! [`Sent::quote`] (control characters dropped, each secret replaced, the length bounded), and
//! every error an exchange ends with passes through [`Sent::guard`], which withholds the
//! answer altogether should a secret get into the error some other way.

use std::error::Error as StdError;

use super::Secret;
use super::http::Url;
use crate::error::{Error, Result};

/// What a secret is replaced with.
const REDACTED: &str = "<redacted>";

/// The longest text of an answer quoted in an error, in characters.
const MAX_QUOTED: usize = 512;

/// What was sent (a token, the URL's query or one of its values, a JWT's signature) shorter
/// than this is not taken for a secret (`?v=1`): no secret is that short, and redacting every
/// `1` would garble every error.
const MIN_PART: usize = 8;

/// The secrets one request carried, in every spelling an answer may echo them in, the
/// longest first (a token inside a longer one is redacted with it).
#[derive(Default)]
pub(crate) struct Sent(Vec<String>);

impl Sent {
    /// The secrets sent to `url`: `secrets` (tokens, the JWT) and the URL's query.
    pub(crate) fn new<'a>(url: &Url, secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        let mut plain: Vec<String> = secrets
            .into_iter()
            .map(|s| s.expose().to_string())
            .collect();
        if let Some(query) = url.query() {
            let raw = query
                .split('&')
                .filter_map(|p| p.split_once('='))
                .map(|(_, v)| v.to_string());
            let decoded = form_urlencoded::parse(query.as_bytes()).map(|(_, v)| v.into_owned());
            plain.extend([query.to_string()].into_iter().chain(raw).chain(decoded));
        }
        plain.retain(|v| v.chars().count() >= MIN_PART);
        let mut spellings = Vec::new();
        for secret in &plain {
            // A JWT's signature alone, with its header and claims, which are no secret, is
            // the whole JWT.
            let signature = secret.split('.').nth(2).filter(|s| s.len() >= MIN_PART);
            let encoded: String = form_urlencoded::byte_serialize(secret.as_bytes()).collect();
            let json = serde_json::to_string(secret).unwrap_or_default();
            let json = json.strip_prefix('"').and_then(|j| j.strip_suffix('"'));
            for spelling in [secret.as_str(), &encoded]
                .into_iter()
                .chain(json)
                .chain(signature)
            {
                spellings.push(spelling.to_string());
                spellings.push(printable(spelling));
            }
        }
        spellings.retain(|s| !s.is_empty());
        spellings.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        spellings.dedup();
        Self(spellings)
    }

    /// `text` of the answer, fit for an error: its control characters dropped, then each
    /// secret replaced (the spellings include each secret without its control characters,
    /// so none hides behind one), at most [`MAX_QUOTED`] characters.
    pub(crate) fn quote(&self, text: &str) -> String {
        self.redact(&printable(text))
            .chars()
            .take(MAX_QUOTED)
            .collect()
    }

    fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.0 {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        text
    }

    /// `result`, unless it is an error that shows a secret sent in its message, its `Debug`
    /// or any of its sources: then an error of the same kind that shows nothing of the
    /// answer. `what` names the endpoint.
    pub(crate) fn guard<T>(&self, what: &str, result: Result<T>) -> Result<T> {
        let err = match result {
            Err(err) if self.shown_in(&err) => err,
            other => return other,
        };
        Err(Error::new(
            err.kind(),
            format!(
                "{what} quoted a secret it was sent in its answer, which is therefore not \
                 shown; check that the credentials point at the right token service"
            ),
        ))
    }

    fn shown_in(&self, err: &Error) -> bool {
        let mut shown = format!("{err:#}\n{err:?}\n");
        let mut next = err.source();
        while let Some(cause) = next {
            shown.push_str(&format!("{cause}\n{cause:?}\n"));
            next = cause.source();
        }
        self.0.iter().any(|secret| shown.contains(secret.as_str()))
    }
}

/// `text` without control characters.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn sent(url: &str, secrets: &[&str]) -> Sent {
        let url = Url::parse(url, "x").unwrap_or_else(|e| panic!("{e}"));
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        Sent::new(&url, &secrets)
    }

    #[test]
    fn quotes_never_hold_a_secret_in_any_spelling() {
        let sent = sent(
            "http://h/t?client_secret=cs-SECRET%2B1&v=1",
            &[
                "tok-SECRET",
                "a&b=c SECRET",
                "q\"uote\\SECRET",
                "eyJh.eyJp.sig-SECRET-sig",
            ],
        );
        for echoed in [
            "tok-SECRET",
            "tok-\u{0}SECRET\n",
            "a%26b%3Dc+SECRET",
            "q\\\"uote\\\\SECRET",
            "cs-SECRET+1",
            "cs-SECRET%2B1",
            "client_secret=cs-SECRET%2B1&v=1",
            "bad signature sig-SECRET-sig",
        ] {
            let quoted = sent.quote(&format!("before {echoed} after"));
            assert!(!quoted.contains("SECRET"), "{quoted}");
            assert!(quoted.starts_with("before "), "{quoted}");
        }
        // A short query value is no secret; long text is cut.
        assert_eq!(sent.quote("v1"), "v1");
        assert_eq!(sent.quote(&"x".repeat(10_000)).len(), MAX_QUOTED);
    }

    #[test]
    fn an_error_showing_a_secret_is_withheld_with_its_kind() {
        use std::error::Error as _;
        let sent = sent("http://h/t", &["tok-SECRET"]);
        let inner = Error::new(ErrorKind::Protocol, "answered tok-SECRET");
        let outer = Error::caused_by(ErrorKind::Unavailable, "failed", &inner);
        for err in [inner, outer] {
            let kind = err.kind();
            let guarded = sent.guard::<()>("the endpoint", Err(err)).err();
            assert_eq!(guarded.as_ref().map(Error::kind), Some(kind));
            let shown = format!("{guarded:?}");
            assert!(!shown.contains("SECRET"), "{shown}");
            assert!(guarded.and_then(|e| e.source().map(|_| ())).is_none());
        }
        let clean = Error::new(ErrorKind::Protocol, "answered nonsense");
        let shown = format!("{clean:?}");
        let kept = sent.guard::<()>("the endpoint", Err(clean)).err();
        assert_eq!(kept.map(|e| format!("{e:?}")), Some(shown));
    }
}
