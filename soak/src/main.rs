//! A Jepsen-style soak of `ydb-coordination`: real worker processes lock, elect, count and
//! write through per-worker fault proxies while a controller pauses, kills, partitions and
//! restarts things from a seeded schedule and reshards a lock space; every process writes a
//! history, and a checker turns the histories into a verdict.
//!
//! `ydb-coordination-soak --seed 7 --duration 150s --workers 6` runs the controller; the
//! controller starts each worker as `ydb-coordination-soak worker ...`.

mod check;
mod controller;
mod history;
mod link;
mod register;
mod resource;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A seeded soak of ydb-coordination with real processes and faults; prints a verdict.
#[derive(Debug, Parser)]
#[command(name = "ydb-coordination-soak", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: controller::RunArgs,
}

// Parsed once per process: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Sub {
    /// One worker process (started by the controller).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Checks the histories a run kept, again, and prints the violations.
    Check(controller::CheckArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Sub::Worker(args)) => match worker::main(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker: {e}");
                ExitCode::from(2)
            }
        },
        Some(Sub::Check(args)) => ExitCode::from(controller::recheck(&args)),
        None => ExitCode::from(controller::main(cli.run)),
    }
}
