//! Where transcripts live (`--store`, `FLOWER_STORE`) and the run's name in a shared
//! store (`--run-key`, `FLOWER_RUN_KEY`): parsed here, once. An error message never
//! repeats a password.

use super::ConfigError;
use super::sources::{Flags, Vars};
use crate::continuity::shared::{RunName, check_run_name};
use crate::stores::{PostgresUrl, UrlError};

/// `--store`, else `FLOWER_STORE`: `None` for SQLite (`sqlite` or unset).
pub(super) fn store(flags: &Flags, vars: &Vars<'_>) -> Result<Option<PostgresUrl>, ConfigError> {
    if let Some(raw) = &flags.store {
        return parse_store(raw).map_err(|why| {
            let message = format!("--store {}:{why}", shown_store(raw));
            ConfigError::invalid_because("--store", message, why)
        });
    }
    match vars.trimmed("FLOWER_STORE") {
        None => Ok(None),
        Some(raw) => parse_store(&raw).map_err(|why| {
            let message = format!("FLOWER_STORE={}:{why}", shown_store(&raw));
            ConfigError::invalid_because("FLOWER_STORE", message, why)
        }),
    }
}

/// `--run-key` (which may adopt a run begun in another workspace), else
/// `FLOWER_RUN_KEY`; checked, and only with a PostgreSQL store.
pub(super) fn run_key(
    flags: &Flags,
    vars: &Vars<'_>,
    store: Option<&PostgresUrl>,
) -> Result<Option<RunName>, ConfigError> {
    let name = match &flags.run_key {
        Some(raw) => Some(run_name(raw, true)?),
        None => vars
            .trimmed("FLOWER_RUN_KEY")
            .map(|raw| run_name(&raw, false))
            .transpose()?,
    };
    match (name, store) {
        (Some(name), None) => {
            let setting = source(name.adopt);
            Err(ConfigError::invalid(
                setting,
                format!(
                    "{setting} {}:运行名指的是共享数据库里的运行,要和 --store postgres://…(或 FLOWER_STORE)一起用",
                    name.name
                ),
            ))
        }
        (name, _) => Ok(name),
    }
}

fn source(adopt: bool) -> &'static str {
    if adopt { "--run-key" } else { "FLOWER_RUN_KEY" }
}

/// A run key as given (`adopt`: on the command line), checked.
fn run_name(raw: &str, adopt: bool) -> Result<RunName, ConfigError> {
    let name = raw.trim();
    let setting = source(adopt);
    check_run_name(name).map_err(|why| {
        ConfigError::invalid_because(setting, format!("{setting} {name:?}:{why}"), why)
    })?;
    Ok(RunName {
        name: name.to_string(),
        adopt,
    })
}

/// `sqlite` (the default store) → `None`; a PostgreSQL URL → `Some`.
fn parse_store(raw: &str) -> Result<Option<PostgresUrl>, UrlError> {
    let raw = raw.trim();
    if raw == "sqlite" {
        return Ok(None);
    }
    raw.parse::<PostgresUrl>().map(Some)
}

/// A store value as an error message shows it: a password is never repeated.
fn shown_store(raw: &str) -> String {
    match raw.parse::<PostgresUrl>() {
        Ok(url) => url.to_string(),
        Err(_) if raw.contains('@') => "<a URL with credentials, not shown>".into(),
        Err(_) => format!("{raw:?}"),
    }
}
