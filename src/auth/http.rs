//! A small HTTP/1.1 client for the token endpoints (IAM, the VM metadata service): one
//! request per connection, TLS through rustls with the system's roots, a size limit on the
//! answer and a time limit on the whole exchange. It connects directly: proxy variables
//! (`HTTPS_PROXY`, `NO_PROXY`) are not read (docs/credentials.md says what to do instead).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, pki_types::ServerName};

use crate::error::{Error, ErrorKind, Result, describe_cause};

/// How long one exchange (connect, TLS, request, answer) may take.
pub(crate) const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read.
const MAX_BODY: usize = 1024 * 1024;

/// An answer: status and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

/// A parsed `http://` or `https://` URL, with the TLS settings for it.
#[derive(Clone)]
pub(crate) struct Url {
    uri: Uri,
    tls: bool,
    host: String,
    port: u16,
    /// Trust besides the system's roots (a private cloud's CA); `None`: the system's roots.
    roots: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Url")
            .field("uri", &self.to_string())
            .field("custom_ca", &self.roots.is_some())
            .finish()
    }
}

impl Url {
    /// Parses and checks a URL; `what` names it in the error (`the IAM endpoint`).
    pub(crate) fn parse(url: &str, what: &str) -> Result<Self> {
        // `user:password@host`: refused without showing the URL, which holds a secret.
        let authority = url.split_once("://").map_or(url, |(_, rest)| rest);
        let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.contains('@') {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "{what} has credentials in its URL (user:password@host), which are not \
                     sent: remove them and give the credentials in the request instead"
                ),
            ));
        }
        // Without the query, which may hold a secret.
        let shown = url.split('?').next().unwrap_or_default();
        let invalid = |why: String| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("{what} {shown:?} is not a valid http:// or https:// URL: {why}"),
            )
        };
        let uri: Uri = url.parse().map_err(|e| invalid(describe_cause(&e)))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(invalid("the scheme must be http or https".into())),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid("it has no host".into()))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Self {
            uri,
            tls,
            host,
            port,
            roots: None,
        })
    }

    /// This URL with the trust settings of `other`.
    pub(crate) fn trusting_as(mut self, other: &Url) -> Self {
        self.roots = other.roots.clone();
        self
    }

    /// Trusts the PEM certificates in `pem` too, besides the system's roots.
    pub(crate) fn trust(mut self, pem: &[u8]) -> Result<Self> {
        self.roots = Some(tls_config_with(pem)?);
        Ok(self)
    }

    /// The query, which may carry a secret.
    pub(crate) fn query(&self) -> Option<&str> {
        self.uri.query()
    }

    fn authority(&self) -> String {
        match self.uri.authority() {
            Some(a) => a.as_str().to_string(),
            None => self.host.clone(),
        }
    }
}

/// The URL without its query, which may carry a secret (`?client_secret=...`): it is shown
/// in errors and logs.
impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority(), self.uri.path())?;
        if self.uri.query().is_some() {
            f.write_str("?<redacted>")?;
        }
        Ok(())
    }
}

/// Sends one request and reads the answer, within [`EXCHANGE_TIMEOUT`].
pub(crate) async fn exchange(
    url: &Url,
    method: hyper::Method,
    headers: &[(&'static str, &str)],
    body: Option<Vec<u8>>,
) -> Result<Answer> {
    match tokio::time::timeout(EXCHANGE_TIMEOUT, exchange_inner(url, method, headers, body)).await {
        Ok(result) => result,
        Err(_) => Err(Error::new(
            ErrorKind::Timeout,
            format!("{url} did not answer within {EXCHANGE_TIMEOUT:?}"),
        )),
    }
}

async fn exchange_inner(
    url: &Url,
    method: hyper::Method,
    headers: &[(&'static str, &str)],
    body: Option<Vec<u8>>,
) -> Result<Answer> {
    let unreachable = |e: std::io::Error| {
        let why = describe_cause(&e);
        Error::with_source(
            ErrorKind::Unavailable,
            format!("cannot reach {url}: {why}"),
            e,
        )
    };
    let tcp = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(unreachable)?;
    let _ = tcp.set_nodelay(true);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(url.uri.path_and_query().map_or("/", |p| p.as_str()))
        .header(hyper::header::HOST, url.authority())
        .header(hyper::header::CONNECTION, "close");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| {
            let why = describe_cause(&e);
            Error::with_source(
                ErrorKind::InvalidArgument,
                format!("cannot build the request to {url}: {why}"),
                e,
            )
        })?;
    if url.tls {
        let name = ServerName::try_from(url.host.clone()).map_err(|e| {
            let why = describe_cause(&e);
            Error::with_source(
                ErrorKind::InvalidArgument,
                format!("{url}: the host is not a valid TLS server name: {why}"),
                e,
            )
        })?;
        let config = match &url.roots {
            Some(config) => config.clone(),
            None => tls_config()?,
        };
        let tls = TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| {
                if is_certificate_error(&e) {
                    // The same certificate comes back on every try: not worth repeating.
                    let why = describe_cause(&e);
                    Error::with_source(
                        ErrorKind::Transport,
                        format!("{url} presented a certificate that is not trusted: {why}"),
                        e,
                    )
                } else {
                    unreachable(e)
                }
            })?;
        send(url, tls, request).await
    } else {
        send(url, tcp, request).await
    }
}

async fn send<S>(url: &Url, io: S, request: hyper::Request<Full<Bytes>>) -> Result<Answer>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let failed = |e: hyper::Error| {
        let why = describe_cause(&e);
        Error::with_source(
            ErrorKind::Unavailable,
            format!("the exchange with {url} failed: {why}"),
            e,
        )
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(failed)?;
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(failed)?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the answer of {url} could not be read: {}",
                        describe_cause(e.as_ref())
                    ),
                )
            })?
            .to_bytes();
        // Dropping the sender lets the connection task finish.
        drop(sender);
        Ok(Answer { status, body })
    };
    // The connection is driven here, beside the exchange, rather than in a spawned task.
    let (answer, _) = tokio::join!(exchange, conn);
    answer
}

fn is_certificate_error(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_)))
}

/// The system's root certificates.
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A certificate the store cannot use is skipped, as the system's tools do.
        let _ = roots.add(cert);
    }
    roots
}

fn client_config(roots: RootCertStore) -> std::result::Result<Arc<ClientConfig>, String> {
    // ring, the provider tonic's TLS (`tls-ring`) uses for the gRPC channels: one crypto
    // library in the tree, no C toolchain to build it. rustls 0.23.48 deprecates it for
    // lacking post-quantum key exchange, which needs aws-lc-rs; the token endpoints keep
    // the channels' provider.
    #[allow(deprecated)]
    let provider = rustls::crypto::ring::default_provider();
    ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
        .map_err(|e| describe_cause(&e))
}

fn tls_setup_error(why: String) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("cannot set up TLS for the token endpoint: {why}"),
    )
}

/// The TLS settings: rustls with ring, the system's root certificates.
fn tls_config() -> Result<Arc<ClientConfig>> {
    static CONFIG: OnceLock<std::result::Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| client_config(system_roots()))
        .clone()
        .map_err(tls_setup_error)
}

/// The TLS settings with the certificates in `pem` trusted besides the system's roots.
fn tls_config_with(pem: &[u8]) -> Result<Arc<ClientConfig>> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let invalid = |why: String| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("the CA certificate for the token endpoint is not usable: {why}"),
        )
    };
    let mut roots = system_roots();
    let mut added = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| invalid(describe_cause(&e)))?;
        roots.add(cert).map_err(|e| invalid(describe_cause(&e)))?;
        added += 1;
    }
    if added == 0 {
        return Err(invalid("no PEM certificate in it".to_string()));
    }
    client_config(roots).map_err(tls_setup_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_token_endpoint_urls() {
        let u = Url::parse("https://iam.api.cloud.yandex.net/iam/v1/tokens", "x").ok();
        assert_eq!(u.as_ref().map(|u| (u.tls, u.port)), Some((true, 443)));
        let u = Url::parse("http://169.254.169.254/computeMetadata/v1/x", "x").ok();
        assert_eq!(u.as_ref().map(|u| (u.tls, u.port)), Some((false, 80)));
        let u = Url::parse("http://[::1]:8080/t", "x").ok();
        assert_eq!(u.map(|u| (u.host, u.port)), Some(("::1".to_string(), 8080)));
        for bad in ["ftp://h/x", "iam.example/x", "http:///x", ""] {
            let kind = Url::parse(bad, "x").err().map(|e| e.kind());
            assert_eq!(kind, Some(ErrorKind::InvalidArgument), "{bad}");
        }
    }

    #[test]
    fn secrets_in_a_url_are_refused_or_never_shown() {
        for with_user in [
            "https://client:s3cret@idp.example/token",
            "https://s3cret@idp.example",
            "http://client:s3cret@[::1]:8080/t?x=1",
        ] {
            let err = Url::parse(with_user, "the token endpoint").err();
            assert_eq!(
                err.as_ref().map(Error::kind),
                Some(ErrorKind::InvalidArgument)
            );
            let shown = format!("{err:?}");
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        // An `@` in the path or the query is not userinfo.
        assert!(Url::parse("https://idp.example/a@b?c=d@e", "x").is_ok());
        let u = Url::parse("https://idp.example:8443/token?client_secret=s3cret", "x");
        let shown = u.map(|u| format!("{u} {u:?}")).unwrap_or_default();
        assert!(
            shown.starts_with("https://idp.example:8443/token?"),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
