//! The flower command line: the default command (the workflow), `once`, `state`, `store`,
//! and the read-only views of a run: `log`, `show`, `report`.

pub mod args;
pub mod config;
pub mod flow;
pub mod input;
pub mod log;
pub mod model_config;
pub mod once;
pub mod render;
pub mod report;
pub mod show;
pub mod state;
pub mod status;
pub mod store;

use std::path::Path;

/// A path for display: the home directory shown as `~`.
pub fn tilde(path: &Path) -> String {
    let text = path.to_string_lossy().into_owned();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
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
/// reason (never a panic, never a write).
pub fn open_run(run_dir: &Path) -> anyhow::Result<flower::inspect::Run> {
    let workspace = std::env::current_dir()?;
    Ok(flower::inspect::Run::open(&workspace, run_dir)?)
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
