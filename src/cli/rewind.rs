//! `flower rewind` and `flower diff`: the workspace's checkpoints (issue #44).

use super::args::{DiffArgs, RewindArgs};
use super::config;
use super::lines;
use flower::Run;
use flower::checkpoint::{Checkpoint, CheckpointKind, Checkpoints, git::EMPTY_TREE};
use flower::continuity::rewind::{RewindError, RewindOptions, resolve};
use flower::settings::test_hooks::RewindPause;
use flower::settings::{Environment, Flags, Settings};
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::process::ExitCode;

/// Opens the run (its lock taken, an interrupted restore finished) and its checkpoints.
fn open(flags: &Flags, env: &Environment) -> anyhow::Result<Result<(Run, Settings), ExitCode>> {
    let settings = config::settings(flags, env)?;
    match Run::open(&settings) {
        Ok(run) => Ok(Ok((run, settings))),
        Err(e) => lines::refused(e).map(Err),
    }
}

pub fn run(args: RewindArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let (run, settings) = match open(&args.flags(), env)? {
        Ok(opened) => opened,
        Err(code) => return Ok(code),
    };
    let runtime = run.runtime();
    let Some(checkpoints) = runtime.checkpoints() else {
        return Err(RewindError::NoCheckpoints.into());
    };
    let Some(point) = args.point.clone() else {
        return super::print_out(&listing(checkpoints)?);
    };
    let list = checkpoints.list()?;
    let Some(target) = resolve(&list, &point) else {
        return Err(RewindError::NoSuchPoint(point).into());
    };
    if !args.yes && std::io::stdin().is_terminal() && !confirmed(target)? {
        return Ok(ExitCode::FAILURE);
    }
    let pause = settings.rewind_pause();
    let options = RewindOptions {
        files_only: args.files_only,
        discard: args.discard,
        hook: match pause {
            Some(RewindPause::Files(hook)) => Some(hook.clone()),
            _ => None,
        },
        fork_pause: match pause {
            Some(RewindPause::Fork { marker }) => Some(marker.clone()),
            _ => None,
        },
    };
    let rewound = runtime.rewind(&point, &options)?;
    let mut out = format!(
        "已回退到检查点 #{}({}):恢复了 {} 个文件\n",
        rewound.point.n,
        label(&rewound.point),
        rewound.files
    );
    for (step, session) in &rewound.sessions {
        match session {
            Some(id) => writeln!(out, "{step}:对话从这里分叉,接着用会话 {id}")?,
            None => writeln!(out, "{step}:那时还没开始,下次从头做")?,
        }
    }
    if !args.files_only {
        out.push_str("下次运行 flower 从这里接着做\n");
    }
    super::print_out(&out)
}

pub fn diff(args: DiffArgs, env: &Environment) -> anyhow::Result<ExitCode> {
    let (run, _) = match open(&args.flags(), env)? {
        Ok(opened) => opened,
        Err(code) => return Ok(code),
    };
    let Some(checkpoints) = run.runtime().checkpoints() else {
        return Err(RewindError::NoCheckpoints.into());
    };
    let list = checkpoints.list()?;
    let Some(target) = resolve(&list, &args.point) else {
        return Err(RewindError::NoSuchPoint(args.point).into());
    };
    let now = checkpoints.snapshot()?;
    let patch = checkpoints.patch(&target.tree, &now)?;
    super::print_out(&String::from_utf8_lossy(&patch))
}

fn confirmed(target: &Checkpoint) -> anyhow::Result<bool> {
    use std::io::Write as _;
    super::out::err!(
        "回退到检查点 #{}({})?工作区的文件会变回那时的样子 [y/N] ",
        target.n,
        label(target)
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "是"))
}

/// How a checkpoint is named in the list.
fn label(checkpoint: &Checkpoint) -> String {
    match checkpoint.kind {
        CheckpointKind::Attempt => format!("{} 开始前", checkpoint.step),
        CheckpointKind::Turn => format!("{} 第 {} 轮后", checkpoint.step, checkpoint.turn),
        CheckpointKind::Rewind => checkpoint.step.clone(),
        CheckpointKind::Background => format!(
            "{} 后台命令 {} 结束后",
            checkpoint.step,
            checkpoint.command.as_deref().unwrap_or("?")
        ),
    }
}

/// One line per checkpoint: its number, time, what it follows, what changed since the
/// one before (files added, modified, deleted; lines).
fn listing(checkpoints: &Checkpoints) -> anyhow::Result<String> {
    let list = checkpoints.list()?;
    let mut out = String::new();
    if list.is_empty() {
        out.push_str("还没有检查点(每次尝试之前、每个改了文件的轮次之后各记一个)\n");
        return Ok(out);
    }
    let mut before = EMPTY_TREE.to_string();
    for checkpoint in &list {
        let s = checkpoints.summary(&before, &checkpoint.tree)?;
        let time = checkpoint.time.get(11..19).unwrap_or(&checkpoint.time);
        writeln!(
            out,
            "#{:<4} {time}  {}  新增 {} 修改 {} 删除 {} · +{} -{} 行",
            checkpoint.n,
            label(checkpoint),
            s.added,
            s.modified,
            s.deleted,
            s.lines_added,
            s.lines_removed
        )?;
        before = checkpoint.tree.clone();
    }
    Ok(out)
}
