//! S3-compatible object stores (feature `object-store`, over the `object_store` crate): a
//! compare-and-swap on the object's ETag, the token stored in the object.
//!
//! A fenced object's body is a header line, then the value:
//!
//! ```text
//! fence1 <mark: 64 hex digits> <applied write ids, comma-separated, or ->\n
//! <value>
//! ```
//!
//! A write reads the object (its ETag, mark and write ids), judges the token against the mark
//! in the client, and puts the new body only if the object is still the one it read
//! (`If-Match: <etag>`, or `If-None-Match: *` when there was none). If another writer got in
//! between, the put fails and the write starts again from the read: the check and the write
//! take effect as one atomic step, the put, or not at all. The header is part of the body on
//! purpose: S3's ETag is the body's MD5, so a mark kept in user metadata would leave the ETag
//! unchanged when only the mark moved, and a claim could then be overwritten unseen.
//!
//! The store must support conditional puts (`If-Match`, `If-None-Match`): Amazon S3 does since
//! 2024, as do MinIO, Cloudflare R2 and SeaweedFS. A write costs two round trips (a read and a
//! put: S3 has no conditional on the content) and more under contention; the last
//! [`MAX_WRITE_IDS`] applied write ids are kept in the header.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::error::{Error, ErrorKind, Result};
use crate::kit::Subject;
use crate::outcome::Outcome;
use crate::rule::judge;
use crate::store::{FencedStore, Record, Write};
use crate::token::{Token, WriteId};

/// How many applied write ids a fenced object remembers.
pub const MAX_WRITE_IDS: usize = 16;
/// The first word of a fenced object's header.
const MAGIC: &str = "fence1";

/// A fenced object's header and value, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Body {
    mark: Token,
    writes: Vec<String>,
    value: Vec<u8>,
}

impl Body {
    fn encode(&self) -> Vec<u8> {
        let writes = if self.writes.is_empty() {
            "-".to_string()
        } else {
            self.writes.join(",")
        };
        let mut out = format!("{MAGIC} {} {writes}\n", self.mark.to_hex()).into_bytes();
        out.extend_from_slice(&self.value);
        out
    }

    fn decode(bytes: &[u8], path: &Path) -> Result<Self> {
        let corrupt = || {
            Error::new(
                ErrorKind::Corrupt,
                format!(
                    "the object {path} is not a fenced object (no \"{MAGIC}\" header): something else wrote it"
                ),
            )
        };
        let end = bytes.iter().position(|&b| b == b'\n').ok_or_else(corrupt)?;
        let header = std::str::from_utf8(&bytes[..end]).map_err(|_| corrupt())?;
        let mut words = header.split(' ');
        if words.next() != Some(MAGIC) {
            return Err(corrupt());
        }
        let mark = Token::from_hex(words.next().ok_or_else(corrupt)?)?;
        let writes = match words.next().ok_or_else(corrupt)? {
            "-" => Vec::new(),
            ids => ids.split(',').map(str::to_string).collect(),
        };
        if words.next().is_some() {
            return Err(corrupt());
        }
        Ok(Self {
            mark,
            writes,
            value: bytes[end + 1..].to_vec(),
        })
    }
}

/// The fence over an S3-compatible object store: each name is an object path.
///
/// # Examples
///
/// ```no_run
/// use std::sync::Arc;
/// use object_store::aws::AmazonS3Builder;
/// use ydb_coordination::FencingToken;
/// use ydb_coordination_fence::{FencedStore, Outcome, Token, Write, objects::ObjectFence};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let s3 = AmazonS3Builder::from_env().with_bucket_name("reports").build()?;
/// let fence = ObjectFence::new(Arc::new(s3));
/// let token = Token::new(FencingToken::new(0, 42)); // the guard's fencing_token()
/// match fence.write("daily/2026-01-01.csv", token, Write::new(b"a,b\n1,2\n")).await? {
///     Outcome::Applied => println!("published"),
///     Outcome::Stale { current } => println!("lost the lock to {current}; nothing written"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ObjectFence {
    store: Arc<dyn ObjectStore>,
    attempts: u32,
}

/// What a read of a fenced object found: nothing, or its body and version.
type Found = Option<(Body, UpdateVersion)>;

impl ObjectFence {
    /// The fence over `store`, trying a contended write up to 64 times.
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Self {
            store,
            attempts: 64,
        }
    }

    /// How many times a write whose compare-and-swap lost to other writers is tried before
    /// it fails with [`ErrorKind::Contended`] (at least once).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    fn path(name: &str) -> Result<Path> {
        Path::parse(name).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{name:?} is not an object path"),
            )
            .with_source(e)
        })
    }

    async fn fetch(&self, path: &Path) -> Result<Found> {
        let got = match self.store.get_opts(path, GetOptions::default()).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(store_error(e, &format!("read {path}"))),
        };
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        let bytes = got
            .bytes()
            .await
            .map_err(|e| store_error(e, &format!("read {path}")))?;
        Ok(Some((Body::decode(&bytes, path)?, version)))
    }

    /// The compare-and-swap loop: reads, lets `decide` judge the found body (`None`: the
    /// outcome is final, nothing to put), puts the body it returns if the object is unchanged.
    async fn swap(
        &self,
        name: &str,
        mut decide: impl FnMut(Option<&Body>) -> std::result::Result<Body, Outcome>,
    ) -> Result<Outcome> {
        let path = Self::path(name)?;
        for attempt in 0..self.attempts {
            let found = self.fetch(&path).await?;
            let body = match decide(found.as_ref().map(|(b, _)| b)) {
                Ok(body) => body,
                Err(outcome) => return Ok(outcome),
            };
            let mode = match found {
                None => PutMode::Create,
                Some((_, version)) => PutMode::Update(version),
            };
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            match self
                .store
                .put_opts(&path, PutPayload::from(body.encode()), opts)
                .await
            {
                Ok(_) => return Ok(Outcome::Applied),
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => {
                    // Another writer got in between: read again after a short random pause,
                    // so that contending writers spread out.
                    let ceiling = 1u64 << attempt.min(6);
                    let pause = rand::random_range(0..=ceiling);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                Err(e) => return Err(store_error(e, &format!("write {path}"))),
            }
        }
        Err(Error::new(
            ErrorKind::Contended,
            format!(
                "the write to {path} lost to other writers {} times in a row; nothing was written by it",
                self.attempts
            ),
        ))
    }
}

/// A write's new body: the found one's write ids plus `id`, the last [`MAX_WRITE_IDS`].
fn next_writes(found: Option<&Body>, id: Option<WriteId>) -> Vec<String> {
    let mut writes = found.map(|b| b.writes.clone()).unwrap_or_default();
    writes.extend(id.map(|id| id.to_string()));
    let excess = writes.len().saturating_sub(MAX_WRITE_IDS);
    writes.drain(..excess);
    writes
}

impl FencedStore for ObjectFence {
    /// Rewrites the object with its value and the new mark (an object that does not exist
    /// yet is created empty).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after a put was sent does not stop it.
    async fn claim(&self, name: &str, token: Token) -> Result<Outcome> {
        self.swap(name, |found| {
            let outcome = judge(found.map(|b| b.mark), token, false);
            if !outcome.is_applied() {
                return Err(outcome);
            }
            Ok(Body {
                mark: token,
                writes: next_writes(found, None),
                value: found.map(|b| b.value.clone()).unwrap_or_default(),
            })
        })
        .await
    }

    /// # Cancel safety
    ///
    /// Dropping the future after a put was sent does not stop it: retry with the same write
    /// id to learn its outcome.
    async fn write(&self, name: &str, token: Token, write: Write<'_>) -> Result<Outcome> {
        self.swap(name, |found| {
            let id = write.id.map(|id| id.to_string());
            let replayed = id
                .as_ref()
                .is_some_and(|id| found.is_some_and(|b| b.writes.contains(id)));
            let outcome = judge(found.map(|b| b.mark), token, replayed);
            if replayed || !outcome.is_applied() {
                return Err(outcome);
            }
            Ok(Body {
                mark: token,
                writes: next_writes(found, write.id),
                value: write.value.to_vec(),
            })
        })
        .await
    }

    /// # Cancel safety
    ///
    /// Cancel safe.
    async fn read(&self, name: &str) -> Result<Record> {
        let path = Self::path(name)?;
        Ok(match self.fetch(&path).await? {
            None => Record::default(),
            Some((body, _)) => Record {
                mark: Some(body.mark),
                value: Some(body.value),
            },
        })
    }
}

impl Subject for ObjectFence {
    /// Reads the object, as a write does first, and stops before the put: a client killed
    /// between its read and its put.
    async fn write_abandoned(&self, name: &str, _token: Token, _write: Write<'_>) -> Result<()> {
        self.fetch(&Self::path(name)?).await.map(drop)
    }
}

/// An object store error as this crate's.
fn store_error(e: object_store::Error, what: &str) -> Error {
    let kind = match e {
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. }
        | object_store::Error::NotSupported { .. }
        | object_store::Error::NotImplemented { .. } => ErrorKind::Store,
        _ => ErrorKind::Unavailable,
    };
    Error::new(kind, format!("could not {what} in the object store")).with_source(e)
}

#[cfg(test)]
mod tests {
    use ydb_coordination::FencingToken;

    use super::*;

    #[test]
    fn a_body_reads_back_as_written() {
        let body = Body {
            mark: Token::new(FencingToken::new(2, 9)),
            writes: vec!["a".into(), "b".into()],
            value: b"line one\nline two\n".to_vec(),
        };
        let path = Path::from("x");
        assert_eq!(Body::decode(&body.encode(), &path).unwrap(), body);
        let empty = Body {
            writes: Vec::new(),
            value: Vec::new(),
            ..body
        };
        assert_eq!(Body::decode(&empty.encode(), &path).unwrap(), empty);
    }

    #[test]
    fn an_object_without_the_header_is_corrupt() {
        let path = Path::from("x");
        for bad in [&b""[..], b"plain data", b"fence1 12 -\n", b"fence2 x -\nv"] {
            assert_eq!(
                Body::decode(bad, &path).unwrap_err().kind(),
                ErrorKind::Corrupt
            );
        }
    }

    #[test]
    fn the_newest_write_ids_are_kept() {
        let mut body: Option<Body> = None;
        for i in 0..40u128 {
            let writes = next_writes(body.as_ref(), Some(WriteId::new(i)));
            body = Some(Body {
                mark: Token::default(),
                writes,
                value: Vec::new(),
            });
        }
        let writes = body.map(|b| b.writes).unwrap_or_default();
        assert_eq!(writes.len(), MAX_WRITE_IDS);
        assert_eq!(writes.last(), Some(&WriteId::new(39).to_string()));
        assert_eq!(writes.first(), Some(&WriteId::new(24).to_string()));
    }
}
