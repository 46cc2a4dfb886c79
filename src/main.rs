//! The flower command line. Minimal for now: only `flower store` (the full CLI replaces
//! this file and keeps calling `flower::cli::store::run` the same way).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "flower", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect and move the transcripts in sessions.db.
    Store(flower::cli::store::StoreArgs),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Store(args) => flower::cli::store::run(args).unwrap_or_else(|e| {
            eprintln!("flower store: {e:#}");
            ExitCode::FAILURE
        }),
    }
}
