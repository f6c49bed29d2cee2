//! `ydb-coord`: coordination nodes, semaphores and locked commands from the shell.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ydb_coordination::emulator::Emulator;

/// Work with YDB coordination nodes from the command line.
#[derive(Debug, Parser)]
#[command(name = "ydb-coord", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an in-process YDB coordination-service emulator.
    ///
    /// Prints the connection string on one line of stdout when ready and serves until
    /// interrupted (SIGINT or SIGTERM).
    ///
    /// Example: ydb-coord emulator --listen 127.0.0.1:2136 --database /local
    Emulator {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:2136")]
        listen: SocketAddr,
        /// Database path served.
        #[arg(long, default_value = "/local")]
        database: String,
        /// Coordination nodes to create at start (repeatable; relative to the database).
        #[arg(long = "node")]
        nodes: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Emulator {
            listen,
            database,
            nodes,
        } => {
            let mut builder = Emulator::builder().listen(listen).database(database);
            for node in nodes {
                builder = builder.node(node);
            }
            let emulator = match builder.start().await {
                Ok(e) => e,
                Err(err) => {
                    eprintln!("error: cannot listen on {listen}: {err}");
                    return ExitCode::FAILURE;
                }
            };
            println!("{}", emulator.connection_string());
            wait_for_signal().await;
            emulator.shutdown().await;
            ExitCode::SUCCESS
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
