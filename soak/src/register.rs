//! The fenced register: the resource the locks protect, served on loopback by the
//! controller. A fenced write carries a token and is refused unless its token is greater than
//! the last one accepted for the name; an unfenced write (the counter) is always accepted,
//! and the register notes when it overwrote an increment it was not based on (a lost update).
//!
//! The protocol is one JSON object a line each way over TCP: [`Request`] in, [`Reply`] out.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};

use crate::history::{Kind, Phase, Recorder, Token};

/// A request to the register.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Write `value` into `name`, fenced by `token` when one is given.
    Write {
        name: String,
        token: Option<Token>,
        value: u64,
        /// Who writes (process, its op id, the lease it writes under): for the history.
        process: String,
        id: u64,
        lease: u64,
    },
    /// Read the value of `name` (0 when never written).
    Read { name: String, process: String },
}

/// The register's answer: whether a write was accepted, and the value now.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Reply {
    pub(crate) ok: bool,
    pub(crate) value: u64,
}

#[derive(Debug, Default)]
struct Cell {
    last: Option<Token>,
    value: u64,
    writer: Option<String>,
    reader: Option<String>,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) accepted: bool,
    /// An unfenced write that did not build on the value it replaced.
    pub(crate) lost_update: bool,
    pub(crate) value: u64,
}

/// The register's state: a pure core, one cell per name.
#[derive(Debug, Default)]
pub(crate) struct Register {
    cells: HashMap<String, Cell>,
    lost_updates: u64,
}

impl Register {
    /// Applies a write by `writer`.
    pub(crate) fn write(
        &mut self,
        name: &str,
        token: Option<Token>,
        value: u64,
        writer: &str,
    ) -> Outcome {
        let cell = self.cells.entry(name.to_string()).or_default();
        match token {
            Some(token) => {
                if cell.last.is_some_and(|last| token <= last) {
                    return Outcome {
                        accepted: false,
                        lost_update: false,
                        value: cell.value,
                    };
                }
                cell.last = Some(token);
            }
            // The counter's writes are `read + 1`: anything not above the current value
            // overwrote someone's increment.
            None => {
                if value <= cell.value {
                    self.lost_updates += 1;
                    cell.value = value;
                    cell.writer = Some(writer.to_string());
                    return Outcome {
                        accepted: true,
                        lost_update: true,
                        value,
                    };
                }
            }
        }
        cell.value = value;
        cell.writer = Some(writer.to_string());
        Outcome {
            accepted: true,
            lost_update: false,
            value,
        }
    }

    /// The value of `name`, read by `reader`.
    pub(crate) fn read(&mut self, name: &str, reader: &str) -> u64 {
        let cell = self.cells.entry(name.to_string()).or_default();
        cell.reader = Some(reader.to_string());
        cell.value
    }

    /// How many unfenced writes overwrote an increment so far.
    pub(crate) fn lost_updates(&self) -> u64 {
        self.lost_updates
    }

    /// The process that read `name` last: for the counter, its holder now.
    pub(crate) fn last_reader(&self, name: &str) -> Option<String> {
        self.cells.get(name).and_then(|c| c.reader.clone())
    }

    /// The process whose write to `name` was accepted last: likely its holder now.
    pub(crate) fn last_writer(&self, name: &str) -> Option<String> {
        self.cells.get(name).and_then(|c| c.writer.clone())
    }
}

/// The register shared by its server and the controller.
pub(crate) type Shared = Arc<Mutex<Register>>;

/// Serves `register` on `listener` until the process ends, noting every write in `history`.
pub(crate) async fn serve(listener: TcpListener, register: Shared, history: Arc<Recorder>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(stream, register.clone(), history.clone()));
    }
}

async fn connection(stream: TcpStream, register: Shared, history: Arc<Recorder>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(request) = serde_json::from_str::<Request>(&line) else {
            return;
        };
        let reply = answer(&register, &history, request);
        if send(&mut write, &reply).await.is_err() {
            return;
        }
    }
}

#[allow(
    clippy::significant_drop_tightening,
    reason = "a request and its history line are one step of the register"
)]
fn answer(register: &Shared, history: &Recorder, request: Request) -> Reply {
    let mut register = register.lock().unwrap_or_else(PoisonError::into_inner);
    match request {
        Request::Read { name, process } => Reply {
            ok: true,
            value: register.read(&name, &process),
        },
        Request::Write {
            name,
            token,
            value,
            process,
            id,
            lease,
        } => {
            let outcome = register.write(&name, token, value, &process);
            // Recorded under the register's lock, so the file's order is the order of
            // acceptance.
            let phase = if outcome.accepted {
                Phase::Ok
            } else {
                Phase::Fail
            };
            let mut event = history
                .event(history.op(), Kind::Write, phase)
                .name(&name)
                .value(value)
                .target(&process)
                .target_op(id)
                .lease(lease);
            if let Some(token) = token {
                event = event.token(token);
            }
            if outcome.lost_update {
                event = event.detail("lost update");
            }
            history.record(&event);
            Reply {
                ok: outcome.accepted,
                value: outcome.value,
            }
        }
    }
}

async fn send(write: &mut OwnedWriteHalf, reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}

/// A worker's connection to the register; reconnects after an error.
#[derive(Debug)]
pub(crate) struct Client {
    addr: SocketAddr,
    conn: Option<(
        tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
        OwnedWriteHalf,
    )>,
}

/// The longest a register call may take: it is on loopback and never faulted.
const CALL_BOUND: Duration = Duration::from_secs(5);

impl Client {
    /// A client of the register at `addr` (connects on first use).
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Self { addr, conn: None }
    }

    /// One request and its reply; an error leaves the outcome unknown.
    pub(crate) async fn call(&mut self, request: &Request) -> std::io::Result<Reply> {
        match tokio::time::timeout(CALL_BOUND, self.call_once(request)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                self.conn = None;
                Err(e)
            }
            Err(_) => {
                self.conn = None;
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the register did not answer",
                ))
            }
        }
    }

    async fn call_once(&mut self, request: &Request) -> std::io::Result<Reply> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            let _ = stream.set_nodelay(true);
            let (read, write) = stream.into_split();
            self.conn = Some((BufReader::new(read).lines(), write));
        }
        let Some((lines, write)) = self.conn.as_mut() else {
            return Err(std::io::Error::other("no connection"));
        };
        let mut line = serde_json::to_vec(request).map_err(std::io::Error::other)?;
        line.push(b'\n');
        write.write_all(&line).await?;
        let answer = lines.next_line().await?.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the register closed")
        })?;
        serde_json::from_str(&answer).map_err(std::io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_writes_need_a_greater_token() {
        let mut r = Register::default();
        assert!(r.write("a", Some([0, 5, 0]), 1, "w0").accepted);
        assert!(r.write("a", Some([0, 5, 1]), 2, "w0").accepted);
        assert!(
            !r.write("a", Some([0, 5, 1]), 3, "w0").accepted,
            "equal is refused"
        );
        assert!(r.write("a", Some([0, 6, 0]), 4, "w1").accepted);
        assert!(
            !r.write("a", Some([0, 5, 9]), 5, "w0").accepted,
            "the old holder"
        );
        assert!(
            r.write("a", Some([1, 1, 0]), 6, "w2").accepted,
            "a later epoch"
        );
        assert_eq!(r.last_writer("a").as_deref(), Some("w2"));
        assert_eq!(r.read("a", "w3"), 6);
        assert_eq!(r.last_reader("a").as_deref(), Some("w3"));
    }

    #[test]
    fn unfenced_writes_are_accepted_and_lost_updates_noted() {
        let mut r = Register::default();
        let a = r.write("c", None, 1, "w0");
        assert!(a.accepted && !a.lost_update);
        let b = r.write("c", None, 2, "w1");
        assert!(b.accepted && !b.lost_update);
        // w0 read 1 before w1's write and writes 2: w1's increment is lost.
        let c = r.write("c", None, 2, "w0");
        assert!(c.accepted && c.lost_update);
        assert_eq!(r.lost_updates(), 1);
    }
}
