//! What the CLI says about a run, in the spec's words: the wake banner, who holds the
//! run or a session, and the refusals of [`RunError`] with their exit statuses. The
//! library decides; this only words it.

use super::args::EXIT_LOCKED;
use super::config::EXIT_USAGE;
use super::format::tokens;
use crate::cli::out::errln;
use flower::WakeState;
use flower::continuity::lock::Holder;
use flower::continuity::runtime::Held;
use flower::continuity::wake::{Afresh, Place, StoreSeen};
use flower::engine::AgentSpec;
use flower::run::{HoldLost, RunError, Waiting};
use flower::stores::postgres::hostname;
use flower::tools::sandbox::SandboxPolicy;
use flower::workflow::flower::WORK;
use std::path::Path;
use std::process::ExitCode;

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

/// `<- 在 ~/proj 接上上次  需求已确认 · 目标 15 条 · 干活上下文 80.2K · 第 3 次唤醒`
pub fn banner(place: &Place, state: &WakeState, home: Option<&Path>) -> String {
    let mut parts = vec!["需求已确认".to_string()];
    if state.checks > 0 {
        parts.push(format!("目标 {} 条", state.checks));
    }
    let work = state.steps.get(WORK);
    if let Some(context) = work.and_then(|id| place.context(id)) {
        parts.push(format!("干活上下文 {}", tokens(context)));
    }
    if let Some(generation) = work.map(|id| place.generation(id)).filter(|&g| g > 1) {
        parts.push(format!("第 {generation} 代"));
    }
    parts.push(format!("第 {} 次唤醒", state.woke + 1));
    // No session to continue (a lineage that does not fit, sessions gone): the spec's
    // silent fresh start, but not called a continuation.
    let how = match state.steps.is_empty() {
        true => "照确认好的需求开新对话",
        false => "接上上次",
    };
    format!(
        "<- 在 {} {how}  {}",
        tilde(place.workspace, home),
        parts.join(" · ")
    )
}

/// The sandbox line: `flower: 沙箱 landlock(工作区可写) · 网络 开`, for this agent.
pub fn sandbox_line(policy: &SandboxPolicy, spec: &AgentSpec, home: Option<&Path>) -> String {
    let agent = spec
        .permissions_in(home)
        .map(|p| p.sandbox(policy, Path::new(".")))
        .unwrap_or_else(|_| policy.clone());
    format!("flower: {}", agent.describe())
}

/// `另一个 flower 正在这里运行(pid N,HH:MM 起)`
pub fn running_here(holder: &Option<Holder>) -> String {
    format!("另一个 flower 正在这里运行({})", who(holder))
}

/// The line for a session another process appends to or reads.
pub fn session_busy(session_id: &str, holder: &Option<Holder>) -> String {
    let stop = holder
        .as_ref()
        .map(|h| match elsewhere(h) {
            Some(host) => format!(";停下它:在 {host} 上 kill {}", h.pid),
            None => format!(";停下它:kill {}", h.pid),
        })
        .unwrap_or_default();
    format!(
        "另一个 flower 正在用会话 {session_id}({})。等它跑完再来{stop}",
        who(holder)
    )
}

/// `pid N,HH:MM 起`, or `HOST 上,pid N,HH:MM 起` for a holder on another host.
pub fn who(holder: &Option<Holder>) -> String {
    let Some(holder) = holder else {
        return "pid 不详".into();
    };
    let at = format!("pid {},{} 起", holder.pid, holder.clock());
    match elsewhere(holder) {
        Some(host) => format!("{host} 上,{at}"),
        None => at,
    }
}

/// The holder's host, when it is not this one.
fn elsewhere(holder: &Holder) -> Option<&str> {
    holder.host.as_deref().filter(|host| *host != hostname())
}

/// `另一个 flower 正在跑运行 K(host pid N,HH:MM 起)`: the run held in the database.
fn running_elsewhere(run_key: &str, holder: &Option<String>) -> String {
    format!(
        "另一个 flower 正在跑运行 {run_key}({})",
        holder.as_deref().unwrap_or("不知道是谁")
    )
}

/// Said before the run waits for another holder (`--wait`).
pub fn waiting(what: &Waiting) -> String {
    let busy = match what {
        Waiting::RunDir { holder } => running_here(holder),
        Waiting::SharedRun { run_key, holder } => running_elsewhere(run_key, holder),
    };
    format!("flower: {busy},等它结束……")
}

/// Said when the database hold was lost to another process (the run then stops).
pub fn hold_lost(lost: &HoldLost) -> String {
    format!(
        "flower: 数据库断开期间,运行 {} 被另一个 flower 接手了({})。这里停下,免得两边同时写它",
        lost.run_key,
        lost.holder.as_deref().unwrap_or("不知道是谁")
    )
}

/// A run that cannot be opened: a refusal is printed here and ends with its exit status
/// (3: held by another flower; 2: a run key that names another workspace's run);
/// anything else goes up as an error (`main` prints it; a configuration error exits 2).
pub fn refused(error: RunError) -> anyhow::Result<ExitCode> {
    let (line, code) = match error {
        RunError::Held(Held::RunDir { holder, .. }) => {
            let stop = holder
                .as_ref()
                .map(|h| format!(";停下它:kill {}", h.pid))
                .unwrap_or_default();
            (
                format!(
                    "{}。等它跑完再接着做:flower --wait{stop}",
                    running_here(&holder)
                ),
                EXIT_LOCKED,
            )
        }
        RunError::RunBusy {
            run_key,
            holder,
            waited,
        } => {
            let busy = running_elsewhere(&run_key, &holder);
            let line = match waited {
                true => busy,
                false => format!("{busy}。等它跑完再接着做:flower --wait"),
            };
            (line, EXIT_LOCKED)
        }
        RunError::Held(Held::Session { session_id, holder }) => {
            (session_busy(&session_id, &holder), EXIT_LOCKED)
        }
        RunError::Foreign(e) => (e.to_string(), EXIT_USAGE),
        e @ RunError::WrongStore { .. } => (e.to_string(), EXIT_USAGE),
        e @ RunError::SettingsChanged(_) => (e.to_string(), EXIT_USAGE),
        RunError::Config(e) => return Err(e.into()),
        other => return Err(other.into()),
    };
    errln!("flower: {line}");
    Ok(ExitCode::from(code))
}

/// Why this wake starts (part of) the run afresh, one line each (`flower state`, `-v`).
pub fn afresh(reasons: &[Afresh], home: Option<&Path>) -> Vec<String> {
    let shown = |path: &Path| tilde(path, home);
    reasons
        .iter()
        .map(|reason| match reason {
            Afresh::LineageUnreadable { path } => format!(
                "从头开始:{} 读不出来(坏了或不完整);跑起来时原样另存为 {}.corrupt-<时间>",
                shown(path),
                shown(path)
            ),
            Afresh::LineageElsewhere { path, workspace } => format!(
                "从头开始:{} 是另一个目录({workspace})的:目录被搬走或拷贝过,那边的会话在这里接不上",
                shown(path)
            ),
            Afresh::SessionsGone {
                store: StoreSeen::Unreadable { path, bytes, why },
                ..
            } => format!(
                "接不上:{} 读不出来({why},{bytes} 字节);flower 不会在它上面接着跑:从备份恢复它,或者挪开它从头开始",
                shown(path)
            ),
            Afresh::SessionsGone { steps, store } => {
                let which = steps
                    .iter()
                    .map(|(step, id)| format!("{step} {id}"))
                    .collect::<Vec<_>>()
                    .join("、");
                let place = match store {
                    StoreSeen::Missing { path } => format!("{} 不存在", shown(path)),
                    StoreSeen::Empty { path, bytes } => {
                        format!("{} 是空的({bytes} 字节)", shown(path))
                    }
                    StoreSeen::Sqlite { path } => format!("{} 里没有它们", shown(path)),
                    StoreSeen::Unreadable { path, .. } => format!("{} 读不出来", shown(path)),
                    StoreSeen::Database => "数据库里没有它们".to_string(),
                };
                format!("从头开始:血缘记着的会话不在了({which}):{place}")
            }
        })
        .collect()
}

/// An error that ends a command, as the person reads it (see [`super::said::said`]).
pub fn error_text(error: &anyhow::Error) -> String {
    super::said::said(error.as_ref())
}
