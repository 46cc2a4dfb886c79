//! `FLOWER_TEST_REWIND_PAUSE`, the crash tests' pause in `flower rewind`: `N:MARKER`
//! pauses a restore after N files, `fork:MARKER` the conversation part after the first
//! fork's entries; either writes MARKER and waits to be killed. Read from the process
//! environment only: a settings file is something an agent can write, and this knob
//! makes a rewind hang.

use super::ConfigError;
use super::sources::Environment;
use crate::checkpoint::RestoreHook;
use std::path::PathBuf;

pub const REWIND_PAUSE: &str = "FLOWER_TEST_REWIND_PAUSE";

/// Where `flower rewind` pauses for a crash test.
#[derive(Debug, Clone)]
pub enum RewindPause {
    /// In the file restore, after `after_files` files.
    Files(RestoreHook),
    /// In the conversation part, once the first fork's entries are written.
    Fork { marker: PathBuf },
}

pub(super) fn rewind_pause(env: &Environment) -> Result<Option<RewindPause>, ConfigError> {
    let Some(value) = env.var(REWIND_PAUSE).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    let bad = || {
        ConfigError::invalid(
            REWIND_PAUSE,
            format!("{REWIND_PAUSE}={value:?}:要 文件数:标记文件 或 fork:标记文件(只给崩溃测试用)"),
        )
    };
    let (head, marker) = value.split_once(':').ok_or_else(bad)?;
    if marker.is_empty() {
        return Err(bad());
    }
    let marker = PathBuf::from(marker);
    if head == "fork" {
        return Ok(Some(RewindPause::Fork { marker }));
    }
    let after_files = head.parse().map_err(|_| bad())?;
    Ok(Some(RewindPause::Files(RestoreHook {
        after_files,
        marker,
    })))
}
