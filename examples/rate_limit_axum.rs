//! Three HTTP servers share one fleet-wide rate: each is its own process serving `axum` behind
//! the rate limiter's tower layer (`ydb_coordination::rate_limiter::layer`), taking one unit of the same
//! resource for each request and answering `429 Too Many Requests` when it is not there. A
//! burst of requests goes to all three; the example prints how many each served and refused,
//! and fails if the fleet served more than the resource's rate allows.
//!
//! The example starts the servers itself: it runs its own binary again with `serve` for each.
//!
//! `cargo run --example rate_limit_axum` (embedded emulator) or with `YDB_CONNECTION_STRING`
//! set.

#[path = "common/mod.rs"]
mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::routing::get;
use bytes::Bytes;
use common::{BoxError, bounded};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tower::ServiceBuilder;
use ydb_coordination::rate_limiter::layer::{RateLimitError, RateLimitLayer};
use ydb_coordination::{ErrorKind, rate_limiter::ResourceSettings};

const RESOURCE: &str = "api";
/// Requests a second the whole fleet may serve.
const RATE: f64 = 20.0;
const SERVERS: usize = 3;
/// Clients sending requests one after another to each server.
const CLIENTS_PER_SERVER: usize = 4;
/// How long the burst lasts.
const RUN: Duration = Duration::from_secs(3);
/// A client's pause between its requests: twelve clients offer far more than the rate.
const PAUSE: Duration = Duration::from_millis(20);
/// The node's prefetch bucket (`rate × 0.2` at the default prefetch coefficient): granted at
/// once, on top of the rate.
const BUCKET: f64 = RATE * 0.2;
/// What the bound allows on top of the rate and the bucket: a second of the rate, more than
/// the server's 100 ms ticks can let in at the burst's start and end.
const SLACK: f64 = RATE;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => match (args.get(2), args.get(3)) {
            (Some(connection), Some(node)) => serve(connection, node).await,
            _ => Err("usage: rate_limit_axum serve CONNECTION_STRING NODE".into()),
        },
        _ => fleet().await,
    }
}

/// One server of the fleet: `axum` on a loopback port behind the layer, until its standard
/// input closes. Prints `listening on ADDRESS` first.
async fn serve(connection: &str, node: &str) -> Result<(), BoxError> {
    // Each server its own client, as each pod of a service has.
    let client = bounded("the connection", common::connect(connection)).await??;
    let limiter = client.rate_limiter(node);
    // One unit a request, answered at once: a request over the rate is refused, not queued.
    let rate_limit = RateLimitLayer::new(limiter, RESOURCE);
    let app = Router::new()
        .route("/", get(|| async { "served\n" }))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(status_of))
                .layer(rate_limit),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    let closed = async {
        let mut rest = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut rest).await;
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(closed)
        .await?;
    Ok(())
}

/// The answer to a request the layer did not let through.
async fn status_of(err: RateLimitError<Infallible>) -> (StatusCode, String) {
    match err {
        RateLimitError::Limited(_) => (StatusCode::TOO_MANY_REQUESTS, "over the rate\n".into()),
        // Not a limit: the rate limiter could not be asked, or the resource is wrong.
        RateLimitError::LimiterFailed(e) if e.kind() == ErrorKind::InvalidArgument => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
        }
        RateLimitError::LimiterFailed(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        RateLimitError::Inner(never) => match never {},
    }
}

/// What one server answered.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    served: u64,
    limited: u64,
    other: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.served += other.served;
        self.limited += other.limited;
        self.other += other.other;
    }
}

/// Sets up the resource, starts the servers, sends the burst, and checks the fleet's rate.
async fn fleet() -> Result<(), BoxError> {
    let setup = bounded("the setup", common::setup("rate-limit-axum"))
        .await?
        .map_err(|e| e.to_string())?;
    let limiter = setup.client.rate_limiter(&setup.node);
    let settings = ResourceSettings::new().max_units_per_second(RATE);
    bounded("the resource", limiter.create_resource(RESOURCE, settings)).await??;

    let mut servers = Vec::new();
    for _ in 0..SERVERS {
        servers.push(bounded("a server", Server::start(&setup.connection, &setup.node)).await??);
    }
    let addresses: Vec<SocketAddr> = servers.iter().map(|s| s.address).collect();
    println!("servers on {addresses:?}, sharing {RATE} requests/s");

    // The grants all fall between the first request and the last answer: the window.
    let start = Instant::now();
    let mut clients = Vec::new();
    for (i, address) in addresses.iter().enumerate() {
        for _ in 0..CLIENTS_PER_SERVER {
            clients.push((i, tokio::spawn(requests(*address, start))));
        }
    }
    let mut tallies = [Tally::default(); SERVERS];
    for (i, client) in clients {
        tallies[i].add(bounded("a client", client).await???);
    }
    let window = start.elapsed();

    let mut overall = Tally::default();
    for (i, tally) in tallies.iter().enumerate() {
        println!(
            "server {i}: {} served, {} answered 429",
            tally.served, tally.limited
        );
        overall.add(*tally);
    }
    let allowed = BUCKET + RATE * window.as_secs_f64() + SLACK;
    println!(
        "overall: {} served, {} answered 429, in {:.1} s: {:.1} served/s for a fleet-wide \
         rate of {RATE}/s (at most {allowed:.0} served allowed)",
        overall.served,
        overall.limited,
        window.as_secs_f64(),
        overall.served as f64 / window.as_secs_f64(),
    );

    for server in servers {
        bounded("a server to stop", server.stop()).await??;
    }
    if setup.emulator.is_none() {
        bounded("the node's removal", setup.client.drop_node(&setup.node)).await??;
    }
    if overall.other > 0 {
        return Err(format!("{} answers were neither served nor 429", overall.other).into());
    }
    if overall.served == 0 {
        return Err("no request was served".into());
    }
    if overall.served as f64 > allowed {
        return Err(format!(
            "the fleet served {} requests, more than the {allowed:.0} its rate allows",
            overall.served
        )
        .into());
    }
    println!("done: {SERVERS} servers kept to the shared rate");
    Ok(())
}

/// A server process of the fleet.
struct Server {
    child: Child,
    address: SocketAddr,
}

impl Server {
    /// Runs this example's binary as a server and waits for its address.
    async fn start(connection: &str, node: &str) -> Result<Self, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["serve", connection, node])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no standard output")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next_line()
            .await?
            .ok_or("the server ended before it listened")?;
        let address = line
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("unexpected first line: {line:?}"))?
            .parse()?;
        Ok(Self { child, address })
    }

    /// Closes the server's standard input, its signal to stop, and waits for it to exit.
    async fn stop(mut self) -> Result<(), BoxError> {
        drop(self.child.stdin.take());
        let status = self.child.wait().await?;
        if !status.success() {
            return Err(format!("a server exited with {status}").into());
        }
        Ok(())
    }
}

/// Sends requests to `address` one after another until the burst ends.
async fn requests(address: SocketAddr, start: Instant) -> Result<Tally, BoxError> {
    let stream = TcpStream::connect(address).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let connection = tokio::spawn(connection);
    let mut tally = Tally::default();
    while start.elapsed() < RUN {
        let request = hyper::Request::get("/")
            .header(hyper::header::HOST, address.to_string())
            .body(Empty::<Bytes>::new())?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        // Read to its end: the connection carries the next request only then.
        response.into_body().collect().await?;
        match status {
            StatusCode::OK => tally.served += 1,
            StatusCode::TOO_MANY_REQUESTS => tally.limited += 1,
            other => {
                eprintln!("{address}: {other}");
                tally.other += 1;
            }
        }
        tokio::time::sleep(PAUSE).await;
    }
    drop(sender);
    let _ = connection.await;
    Ok(tally)
}
