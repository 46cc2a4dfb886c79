//! The flower command line: the default command (the workflow), `once`, `state`, `store`,
//! and the read-only views of a run: `log`, `show`, `report`.

pub mod args;
pub mod config;
pub mod flow;
pub mod input;
pub mod log;
pub mod once;
pub mod render;
pub mod report;
pub mod show;
pub mod state;
pub mod status;
pub mod store;

use std::path::Path;

/// A path for display: the home directory (the settings' `HOME`) shown as `~`.
pub fn tilde(path: &Path, home: Option<&Path>) -> String {
    let text = path.to_string_lossy().into_owned();
    if let Some(home) = home {
        let home = home.to_string_lossy().trim_end_matches('/').to_string();
        if !home.is_empty() {
            if text == home {
                return "~".into();
            }
            if let Some(rest) = text.strip_prefix(&format!("{home}/")) {
                return format!("~/{rest}");
            }
        }
    }
    text
}

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
    source: &args::RunSource,
    env: &flower::settings::Environment,
) -> anyhow::Result<flower::inspect::Run> {
    use flower::continuity::shared::SharedRun;
    use flower::stores::SessionStore;
    let settings = config::settings(&source.flags(), env)?;
    let workspace = &settings.workspace;
    let run_dir = &settings.run_dir;
    let opened = settings
        .open_store()
        .map_err(|e| anyhow::anyhow!("cannot open the store: {e}"))?;
    if let Some(store) = opened {
        let canonical = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.clone());
        let shared = SharedRun::find(store.clone(), &canonical, settings.run_key.as_ref())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(shared) = shared {
            let store: std::sync::Arc<dyn SessionStore> = store;
            return Ok(flower::inspect::Run::open_shared(
                workspace, run_dir, &shared, store,
            )?);
        }
    }
    Ok(flower::inspect::Run::open(workspace, run_dir)?)
}

/// `1h02m`, `3m05s`, `12.3s`.
pub fn duration(secs: f64) -> String {
    let s = secs.max(0.0);
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}
