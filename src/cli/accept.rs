//! Settings files changed since the run pinned them (`flower::settings::pin`): shown,
//! and applied only when a person says so: `--accept-settings`, or `y` at the
//! terminal. Nobody at the terminal and no flag: exit 2, nothing sent or written.

use super::config::EXIT_USAGE;
use super::input;
use crate::cli::out::errln;
use flower::run::RunError;
use flower::settings::pin::Drift;
use std::process::ExitCode;

/// The question at the terminal.
pub const ASK_ACCEPT: &str = "照这些改动用吗?输入 y 采用,其他不采用(不采用就退出,什么都不改)";

/// `Ok`: apply the changed files; `Err`: stop with this exit status (said already).
pub async fn confirm(drift: &Drift, accepted: bool, interactive: bool) -> Result<(), ExitCode> {
    if !accepted && !interactive {
        errln!("flower: {}", RunError::SettingsChanged(drift.clone()));
        return Err(ExitCode::from(EXIT_USAGE));
    }
    let why = if accepted {
        ",按 --accept-settings 照新的用"
    } else {
        ""
    };
    errln!("flower: 设置文件和这个运行上次用的不一样{why}:");
    for line in drift.lines() {
        errln!("{line}");
    }
    if accepted {
        return Ok(());
    }
    match input::ask_line(ASK_ACCEPT).await {
        Some(answer) if matches!(answer.trim(), "y" | "Y" | "yes" | "YES") => Ok(()),
        _ => {
            errln!("flower: 不采用,退出。什么都没发给模型,什么都没有改动。");
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}
