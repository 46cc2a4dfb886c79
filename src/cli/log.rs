//! `flower log`: one line per step attempt of manifest.json, in time order, then the
//! run's totals. Read-only.

use super::format::duration;
use super::format::{cost, tokens};
use super::{open_run, print_out};
use crate::cli::out::errln;
use clap::Args;
use flower::inspect::{Attempt, AttemptKind, Run, SubagentSpan, Totals};
use flower::tools::background::Record;
use std::fmt::Write as _;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct LogArgs {
    /// 打印一个 JSON 文档(`{"attempts": […], "totals": {…}, "earlier": N}`,开过遥测的还有 `telemetry`)
    #[arg(long)]
    pub json: bool,

    /// 连 flower --new 归档掉的早先任务也列出来(合计仍只算当前任务)
    #[arg(long)]
    pub all: bool,

    #[command(flatten)]
    pub source: super::flags::RunSource,
}

pub fn run(args: LogArgs, env: &flower::settings::Environment) -> anyhow::Result<ExitCode> {
    let mut incomplete = false;
    let run = match open_run(&args.source, env) {
        Ok(run) => run,
        // The transcripts cannot be read: the manifest's attempts are still shown.
        Err(error) => match error.downcast_ref::<flower::inspect::InspectError>() {
            Some(flower::inspect::InspectError::Store(store)) => {
                let settings = super::config::settings(&args.source.flags(), env)?;
                let run = flower::inspect::Run::open_without_store(
                    settings.workspace(),
                    settings.run_dir(),
                )?;
                errln!(
                    "flower: {};下面只有 manifest.json 记下的尝试,tokens 和上下文数不全",
                    super::said::said(store)
                );
                incomplete = true;
                run
            }
            _ => return Err(error),
        },
    };
    let sessions = run.sessions();
    let totals = run.totals(&sessions);
    let subagents: Vec<SubagentSpan> = sessions
        .iter()
        .flat_map(|s| run.subagent_spans(&s.session_id))
        .collect();
    let shown_sessions: Vec<&str> = match args.all {
        true => run.earlier.iter().chain(&run.attempts).collect::<Vec<_>>(),
        false => run.attempts.iter().collect(),
    }
    .into_iter()
    .filter_map(|a| a.session_id.as_deref())
    .collect();
    let commands = background_of(&run, |session| shown_sessions.contains(&session));
    let out = if args.json {
        let mut doc = serde_json::json!({
            "attempts": run.attempts,
            "totals": totals,
            "earlier": run.earlier.len(),
            "subagents": subagents,
            "background": commands,
        });
        // What the OpenTelemetry export sent and dropped, when it was ever on here.
        if let Some(report) = flower::telemetry::Report::read(&run.run_dir)
            && let Some(doc) = doc.as_object_mut()
        {
            doc.insert("telemetry".into(), serde_json::to_value(report)?);
        }
        if args.all
            && let Some(doc) = doc.as_object_mut()
        {
            doc.insert(
                "earlier_attempts".into(),
                serde_json::to_value(&run.earlier)?,
            );
        }
        format!("{}\n", serde_json::to_string_pretty(&doc)?)
    } else {
        text(&run, &totals, &subagents, &commands, args.all)
    };
    let printed = print_out(&out)?;
    // Shown, but not the whole run: a script must not take the totals for complete.
    Ok(if incomplete {
        ExitCode::FAILURE
    } else {
        printed
    })
}

/// What kind of attempt a step name is, in words.
pub fn kind_label(kind: AttemptKind) -> String {
    match kind {
        AttemptKind::First => String::new(),
        AttemptKind::Retry(n) => format!("重试 {n}"),
        AttemptKind::Round(n) => format!("第 {n} 轮返工"),
        AttemptKind::Judge(n) => format!("判定 {n}"),
    }
}

/// `2026-09-07 01:52:40` from an RFC 3339 stamp (as written, local time).
pub fn clock(stamp: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(stamp) {
        Ok(t) => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => "????-??-?? ??:??:??".into(),
    }
}

/// The outcome column: `ok`, or `出错:<first line of the error>`.
pub fn outcome(a: &Attempt) -> String {
    if a.ok {
        return "ok".into();
    }
    let error = a.error.as_deref().unwrap_or("没跑完");
    let first = error.lines().next().unwrap_or("");
    let mut short: String = first.chars().take(60).collect();
    if short.len() < first.len() {
        short.push('…');
    }
    format!("出错:{short}")
}

fn text(
    run: &Run,
    t: &Totals,
    subagents: &[SubagentSpan],
    commands: &[Record],
    all: bool,
) -> String {
    let mut out = String::new();
    let shown: Vec<&Attempt> = match all {
        true => run.earlier.iter().chain(&run.attempts).collect(),
        false => run.attempts.iter().collect(),
    };
    if let Some(line) = earlier_line(run, all) {
        let _ = writeln!(out, "{line}");
    }
    if run.attempts.is_empty() && run.earlier.is_empty() {
        out.push_str("manifest.json 里还没有任何步骤记录。\n");
    }
    let width = shown
        .iter()
        .map(|a| super::format::display_width(&a.step))
        .max()
        .unwrap_or(0);
    let mut task = shown.first().map_or(0, |a| a.task);
    for a in shown {
        if a.task != task {
            task = a.task;
            let _ = writeln!(out, "── 新任务 #{}(进程 {})──", a.task, a.run);
        }
        out.push_str(&row(a, width));
        for span in concurrent_under(a, subagents) {
            let _ = writeln!(out, "{}", subagent_line(span, subagents));
        }
        for command in commands
            .iter()
            .filter(|c| Some(c.owner.session_id.as_str()) == a.session_id.as_deref())
            .filter(|c| began_within(a, c))
        {
            let _ = writeln!(out, "{}", background_line(command));
        }
    }
    let _ = writeln!(out, "{}", totals_line(t));
    out
}

/// The line saying that earlier tasks' rows exist and are not shown or counted (or,
/// with `--all`, shown but not counted); `None` when there are none.
pub fn earlier_line(run: &Run, all: bool) -> Option<String> {
    let first = run.earlier.first()?;
    let last = run.earlier.last()?;
    let tasks = last.task + 1 - first.task;
    Some(match all {
        true => format!(
            "(早先 {tasks} 个任务的 {} 次尝试也列在下面;合计只算当前任务)",
            run.earlier.len()
        ),
        false => format!(
            "(早先还有 {tasks} 个任务的 {} 次尝试(flower --new 归档了它们,或这里重新开始过),不列在下面,也不计入合计;看全部:flower log --all)",
            run.earlier.len()
        ),
    })
}

/// One attempt's line.
fn row(a: &Attempt, width: usize) -> String {
    let mut out = String::new();
    if a.wake {
        let _ = writeln!(out, "── 唤醒 #{}(进程 {})──", a.woke, a.run);
    }
    let pad = width.saturating_sub(super::format::display_width(&a.step));
    let kind = kind_label(a.kind);
    let kind = if kind.is_empty() {
        String::new()
    } else {
        format!(" ({kind})")
    };
    let _ = write!(
        out,
        "{}  {}{}  {:>7}  请求 {}  {}  {}  上下文 {}{}",
        clock(&a.started_at),
        a.step,
        " ".repeat(pad),
        duration(a.duration_s),
        a.requests,
        cost(a.cost_usd),
        outcome(a),
        tokens(a.context),
        kind,
    );
    if a.resumed {
        out.push_str("  接上次会话");
    }
    if !a.retired.is_empty() {
        let _ = write!(out, "  换代 {} 次:{}", a.retired.len(), folded(&a.chain()));
    }
    out.push('\n');
    out
}

/// A step's chain of sessions (those it handed over from, then the one lineage holds),
/// folded past a few: the first and the last two, and how many are left out between
/// them (a long run retires a hundred).
pub fn folded(ids: &[&str]) -> String {
    const SHOWN: usize = 3;
    if ids.len() <= SHOWN {
        return ids.join(" → ");
    }
    let last = &ids[ids.len() - 2..];
    format!(
        "{} → …另 {} 个… → {}",
        ids[0],
        ids.len() - SHOWN,
        last.join(" → ")
    )
}

/// The totals line of `flower log`.
pub fn totals_line(t: &Totals) -> String {
    let partial = if t.cost_partial {
        "(部分价格未知)"
    } else {
        ""
    };
    format!(
        "合计:用时 {} · {}{partial} · {} 轮 · 请求 {}(其中子代理 {})· tokens(含子代理)输入 {} 输出 {} 缓存写 {} 缓存读 {} · 峰值上下文 {} · 换代 {} · 唤醒 {} · 重试 {} · 断网 {} 次共等 {}",
        duration(t.wall_s),
        cost(Some(t.cost_usd)),
        t.turns,
        t.requests,
        t.subagent_requests,
        tokens(t.tokens.input),
        tokens(t.tokens.output),
        tokens(t.tokens.cache_creation),
        tokens(t.tokens.cache_read),
        tokens(t.peak_context),
        t.handoffs,
        t.wakes,
        t.retries,
        t.outages,
        duration(t.outage_waited_s),
    )
}

/// The sub-agents an attempt started, when some of them ran at the same time (one
/// after another they are only counted, in the totals): those of its session that
/// began within it.
pub fn concurrent_under<'a>(a: &Attempt, subagents: &'a [SubagentSpan]) -> Vec<&'a SubagentSpan> {
    let Some(session) = a.session_id.as_deref() else {
        return Vec::new();
    };
    let within = |s: &SubagentSpan| {
        s.session_id == session
            && s.started_ms.is_some_and(|t| {
                a.started_ms.is_none_or(|start| t >= start) && a.ended_ms.is_none_or(|end| t <= end)
            })
    };
    let under: Vec<&SubagentSpan> = subagents.iter().filter(|s| within(s)).collect();
    if under.iter().any(|s| s.concurrent()) {
        under
    } else {
        Vec::new()
    }
}

/// `    ↳ 子代理 第 1 件  01:52:41 → 01:52:44  3.0s  2 轮  同时:第 2 件、第 3 件`.
pub fn subagent_line(span: &SubagentSpan, all: &[SubagentSpan]) -> String {
    let agent = span
        .agent
        .as_deref()
        .map(|a| format!(" ({a})"))
        .unwrap_or_default();
    let at = |stamp: &Option<String>| stamp.as_deref().map(clock).unwrap_or_else(|| "?".into());
    let ended = at(&span.ended_at);
    // The end's date only when it differs from the start's.
    let ended = match (at(&span.started_at).split_once(' '), ended.split_once(' ')) {
        (Some((day, _)), Some((end_day, time))) if day == end_day => time.to_string(),
        _ => ended,
    };
    let mut line = format!(
        "    ↳ 子代理 {}{agent}  {} → {ended}  {}  {} 轮",
        span.name(),
        at(&span.started_at),
        span.duration_s()
            .map(duration)
            .unwrap_or_else(|| "?".into()),
        span.turns,
    );
    if span.concurrent() {
        let names = overlapped_names(span, all);
        let _ = write!(line, "  同时:{}", names.join("、"));
    }
    line
}

/// The run's background commands (their records in the run directory) whose session
/// `wanted` names, oldest first.
pub fn background_of(run: &Run, wanted: impl Fn(&str) -> bool) -> Vec<Record> {
    let dir = flower::run_dir::RunDir::new(&run.run_dir).background();
    flower::tools::background::record::all(&dir)
        .into_iter()
        .filter(|r| wanted(&r.owner.session_id))
        .collect()
}

/// Whether `command` was started during attempt `a` (an attempt without times takes
/// every command of its session).
fn began_within(a: &Attempt, command: &Record) -> bool {
    let at = command.started_at as i64 * 1000;
    // Whole seconds: a command started in the attempt's first second counts.
    a.started_ms.is_none_or(|start| at >= start - start % 1000)
        && a.ended_ms.is_none_or(|end| at <= end)
}

/// `    ↳ 后台 b1f3  sleep 600  01:52:41 → 01:52:44  3.0s  session-ended`: a background
/// command, its times and how it ended (`还在跑` while it runs).
pub fn background_line(command: &Record) -> String {
    let clock_of = |secs: u64| {
        chrono::DateTime::from_timestamp(secs as i64, 0).map_or_else(
            || "?".to_string(),
            |t| {
                t.with_timezone(&chrono::Local)
                    .format("%H:%M:%S")
                    .to_string()
            },
        )
    };
    let mut shown: String = command.command.chars().take(40).collect();
    if shown.len() < command.command.len() {
        shown.push('…');
    }
    let shown = shown.replace('\n', " ");
    let (until, how) = match &command.end {
        Some(end) => {
            let mut how = end.how.clone();
            if let Some(code) = end.exit_code {
                let _ = write!(how, " {code}");
            }
            (
                format!(
                    "{}  {}",
                    clock_of(end.at),
                    duration(end.at.saturating_sub(command.started_at) as f64)
                ),
                how,
            )
        }
        None => ("…".to_string(), "还在跑".to_string()),
    };
    let whose = command
        .owner
        .subpath
        .as_deref()
        .map(|sub| format!("({sub})"))
        .unwrap_or_default();
    format!(
        "    ↳ 后台 {}{whose}  {shown}  {} → {until}  {how}",
        command.id,
        clock_of(command.started_at)
    )
}

/// The names of the sub-agents `span` ran alongside (their subpaths where `all` lacks them).
pub fn overlapped_names<'a>(span: &'a SubagentSpan, all: &'a [SubagentSpan]) -> Vec<&'a str> {
    span.overlapped
        .iter()
        .map(|sub| {
            all.iter()
                .find(|s| s.session_id == span.session_id && s.subpath == *sub)
                .map_or(sub.as_str(), |s| s.name())
        })
        .collect()
}
