//! The flower command line: the default command (the workflow), `once`, `state`, `store`,
//! and the read-only views of a run: `log`, `show`, `report` (and `serve`'s flags; the
//! server is `src/serve/`).

pub mod accept;
pub mod args;
pub mod config;
pub mod conventions;
pub mod flags;
pub mod flow;
pub mod format;
pub mod input;
pub mod lines;
pub mod log;
pub mod once;
pub mod out;
pub mod render;
pub mod report;
pub mod rewind;
pub mod said;
pub mod serve;
pub mod show;
pub mod state;
pub mod status;
pub mod store;
pub mod usage;

/// Writes `text` to stdout; a reader that went away (`| head`) is not an error.
pub fn print_out(text: &str) -> anyhow::Result<std::process::ExitCode> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(std::process::ExitCode::SUCCESS),
    }
}

/// Opens the run for a read-only view; a run that cannot be read exits 1 with the
/// reason (never a panic, never a write to the run directory). With a PostgreSQL
/// store the run is read from the database, where another host may have written it;
/// a run the database does not know is read from the run directory, as without one.
pub fn open_run(
    source: &flags::RunSource,
    env: &flower::settings::Environment,
) -> anyhow::Result<flower::inspect::Run> {
    let settings = config::settings(&source.flags(), env)?;
    inspect_run(&settings)
}

/// The run `settings` name, read as `flower log` reads it: the one source of the
/// figures a person is shown (cost, turns, peak context, handoffs, wakes, retries).
pub fn inspect_run(settings: &flower::settings::Settings) -> anyhow::Result<flower::inspect::Run> {
    use flower::run::{Peek, RunError};
    let (workspace, run_dir) = (&settings.workspace(), &settings.run_dir());
    let peek = Peek::open(settings).map_err(|error| match error {
        RunError::OpenStore(e) => anyhow::anyhow!("打不开存储:{e}"),
        RunError::ReadRun(e) => anyhow::anyhow!("{e}"),
        other => other.into(),
    })?;
    if let (Some(shared), Some(store)) = (peek.shared(), peek.store()) {
        return Ok(flower::inspect::Run::open_shared(
            workspace,
            run_dir,
            shared,
            store.clone(),
        )?);
    }
    Ok(flower::inspect::Run::open(workspace, run_dir)?)
}
