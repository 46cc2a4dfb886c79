//! The exception hierarchy, and the library's refusals in the CLI's words.

use flower::continuity::lock::Holder;
use flower::continuity::runtime::Held;
use flower::run::RunError;
use flower::stores::StoreError;
use flower::stores::postgres::hostname;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::path::Path;

create_exception!(
    flower,
    FlowerError,
    PyException,
    "Every error flower raises."
);
create_exception!(
    flower,
    LockedError,
    FlowerError,
    "The run (or one of its sessions) is held by another process: another flower, the CLI or Python."
);
create_exception!(
    flower,
    ConfigError,
    FlowerError,
    "A setting (an environment variable, an argument) cannot be used; nothing was sent or written."
);
create_exception!(
    flower,
    StepFailedError,
    FlowerError,
    "A step failed after its retries; `.context` holds the context so far."
);

/// A run that cannot be opened, as a Python exception. The refusals read as the CLI
/// prints them (`src/cli/lines.rs`, without its `flower: ` prefix), except a run held
/// by this very process: another `Runtime` of the script, which `kill` would not help.
pub fn run_error(error: RunError, run_dir: &Path) -> PyErr {
    let own = |holder: &Option<Holder>| holder.as_ref().is_some_and(is_this_process);
    match error {
        RunError::Held(Held::RunDir { holder, .. }) if own(&holder) => held_here(run_dir),
        RunError::Held(Held::Session { session_id, holder }) if own(&holder) => {
            LockedError::new_err(format!(
                "session {session_id} is in use by another Runtime of this process; close() it first"
            ))
        }
        RunError::Held(Held::RunDir { holder, .. }) => {
            let stop = holder
                .as_ref()
                .map(|h| format!(";停下它:kill {}", h.pid))
                .unwrap_or_default();
            LockedError::new_err(format!(
                "另一个 flower 正在这里运行({})。等它跑完再接着做:flower --wait{stop}",
                who(&holder)
            ))
        }
        RunError::RunBusy {
            run_key,
            holder,
            waited,
        } => {
            let busy = format!(
                "另一个 flower 正在跑运行 {run_key}({})",
                holder.as_deref().unwrap_or("不知道是谁")
            );
            LockedError::new_err(match waited {
                true => busy,
                false => format!("{busy}。等它跑完再接着做:flower --wait"),
            })
        }
        RunError::Held(Held::Session { session_id, holder }) => {
            let stop = holder
                .as_ref()
                .map(|h| match elsewhere(h) {
                    Some(host) => format!(";停下它:在 {host} 上 kill {}", h.pid),
                    None => format!(";停下它:kill {}", h.pid),
                })
                .unwrap_or_default();
            LockedError::new_err(format!(
                "另一个 flower 正在用会话 {session_id}({})。等它跑完再来{stop}",
                who(&holder)
            ))
        }
        RunError::Config(e) => ConfigError::new_err(e.to_string()),
        other => FlowerError::new_err(flower::error::chain(&other)),
    }
}

/// The run in `run_dir` is held by another `Runtime` of this process.
pub fn held_here(run_dir: &Path) -> PyErr {
    LockedError::new_err(format!(
        "the run in {:?} is already open in this process (another Runtime holds it); close() that Runtime first, or use one Runtime at a time (`with Runtime(...) as rt:`)",
        run_dir.display().to_string()
    ))
}

/// Whether `holder` is this process.
pub fn is_this_process(holder: &Holder) -> bool {
    holder.pid == std::process::id() && elsewhere(holder).is_none()
}

pub fn store_error(error: StoreError) -> PyErr {
    FlowerError::new_err(flower::error::chain(&error))
}

/// `pid N,HH:MM 起`, or `HOST 上,pid N,HH:MM 起` for a holder on another host.
fn who(holder: &Option<Holder>) -> String {
    let Some(holder) = holder else {
        return "pid 不详".into();
    };
    let at = format!("pid {},{} 起", holder.pid, holder.clock());
    match elsewhere(holder) {
        Some(host) => format!("{host} 上,{at}"),
        None => at,
    }
}

fn elsewhere(holder: &Holder) -> Option<&str> {
    holder.host.as_deref().filter(|host| *host != hostname())
}
