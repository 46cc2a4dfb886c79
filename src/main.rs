//! The `flower` binary.

mod cli;
mod serve;

use cli::args::{Cli, Command};
use cli::out::errln;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::usage::parse::<Cli>() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // The one read of the process environment; every command resolves its settings from it.
    let env = flower::settings::Environment::from_process();
    let result = match cli.command {
        Some(Command::Store(args)) => {
            return cli::store::run(args, &env).unwrap_or_else(|e| {
                errln!("flower store: {}", said(&e));
                ExitCode::FAILURE
            });
        }
        Some(Command::State(args)) => cli::state::run(args, &env),
        Some(Command::Log(args)) => cli::log::run(args, &env),
        Some(Command::Show(args)) => cli::show::run(args, &env),
        Some(Command::Report(args)) => cli::report::run(args, &env),
        Some(Command::Rewind(args)) => cli::rewind::run(args, &env),
        Some(Command::Diff(args)) => cli::rewind::diff(args, &env),
        Some(Command::Serve(args)) => serve::run(&args, &env),
        Some(Command::Once(args)) => block_on(cli::once::run(args, &env)),
        None => block_on(cli::flow::run(cli.flow, &env)),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            errln!("flower: {}", said(&error));
            // Usage errors: nothing was sent or written.
            let usage = matches!(
                error.downcast_ref::<flower::run::RunError>(),
                Some(flower::run::RunError::Foreign(_) | flower::run::RunError::WrongStore { .. })
            );
            if usage || error.downcast_ref::<flower::ConfigError>().is_some() {
                ExitCode::from(cli::config::EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// An error and its causes, each said once (the library's errors may quote their cause).
fn said(error: &anyhow::Error) -> String {
    cli::lines::error_text(error)
}

/// One thread is plenty: the work is waiting on the model and on tools.
fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    future: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future)
}
