//! `flower report`: one self-contained HTML file (no network, no external script or
//! style) with the run's charts drawn as inline SVG here: context per turn (one curve
//! per step, markers at wakes, retries, outages and handoffs, lines at the window and
//! the handoff threshold), cumulative cost over time by step, a timeline of attempts,
//! judge rounds and outages, the attempt table, per-session totals and every
//! transcript one click away (a long one by its beginning and end, the whole text in
//! a file beside the page: `report.transcripts/`). Reads the run without writing to
//! it; writes only the report and those files.
//!
//! Curves longer than [`MAX_POINTS`] are downsampled by keeping each bucket's lowest
//! and highest point (the sawtooth of handoffs survives); markers are never dropped.

use super::format::duration;
use super::format::{cost, tokens};
use super::log::{clock, earlier_line, folded, kind_label, outcome, totals_line};
use super::open_run;
use crate::cli::out::errln;
use clap::Args;
use flower::continuity::handoff::{self, RunContext};
use flower::inspect::{AttemptKind, MarkKind, Run, Session, SubagentSpan, Totals};
use flower::run_dir::RunDir;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Points per curve above which it is downsampled.
pub const MAX_POINTS: usize = 1200;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 28.0;
const COLOURS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
];

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// 报告写到哪(默认:<运行目录>/report.html)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    #[command(flatten)]
    pub source: super::flags::RunSource,
}

/// Where the window and handoff-threshold lines go.
#[derive(Debug, Clone, Copy)]
pub struct ReportOptions {
    pub window: u64,
    pub handoff_threshold: u64,
}

impl ReportOptions {
    /// The window and threshold the run recorded in its manifest (its latest row that
    /// has them), so that the lines are where the run's own `--handoff-at` /
    /// `FLOWER_HANDOFF_AT` put them. A run of an older flower recorded neither: the
    /// window of the model its sessions used and the default threshold.
    pub fn for_run(run: &Run, sessions: &[Session]) -> ReportOptions {
        if let Some(recorded) = run.attempts.iter().rev().find_map(|a| {
            let window = a.context_window?;
            Some(ReportOptions {
                window,
                handoff_threshold: a
                    .handoff_threshold
                    .unwrap_or_else(|| handoff::default_threshold(window)),
            })
        }) {
            return recorded;
        }
        let model = sessions
            .iter()
            .rev()
            .find_map(|s| s.model.clone())
            .unwrap_or_default();
        // The same defaults a runtime of today would have recorded.
        let context = RunContext::default_for(&model);
        ReportOptions {
            window: context.window,
            handoff_threshold: context
                .handoff_threshold
                .unwrap_or_else(|| handoff::default_threshold(context.window)),
        }
    }
}

pub fn run(args: ReportArgs, env: &flower::settings::Environment) -> anyhow::Result<ExitCode> {
    let run = open_run(&args.source, env)?;
    let output = args
        .output
        .unwrap_or_else(|| RunDir::new(&run.run_dir).report());
    let folder = transcripts_dir(&output);
    let link = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut files = Vec::new();
    let html = render(&run, &link, &mut files);
    if !files.is_empty() {
        std::fs::create_dir_all(&folder)
            .map_err(|e| anyhow::anyhow!("建 {} 失败:{e}", folder.display()))?;
        for (name, text) in &files {
            write_report(&folder.join(name), text)?;
        }
    }
    write_report(&output, &html)?;
    errln!("报告已写到 {}({} 字节)", output.display(), html.len());
    Ok(ExitCode::SUCCESS)
}

/// Transcripts longer than this are shown in the page by their beginning and end; the
/// whole text goes to a file beside the page (a 10,000-turn run must not make a page
/// of many megabytes).
pub const EMBED_MAX_BYTES: usize = 48 * 1024;

/// Where the whole transcripts of a report at `output` go: `<name>.transcripts/`
/// beside it (`runs/report.transcripts/` for the default report).
fn transcripts_dir(output: &Path) -> PathBuf {
    let stem = output
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    output.with_file_name(format!("{stem}.transcripts"))
}

/// A transcript as the page shows it: whole when short, else its first and last part
/// with a link to the whole text, which is added to `files`.
fn embedded(text: &str, id: &str, link: &str, files: &mut Vec<(String, String)>) -> String {
    if text.len() <= EMBED_MAX_BYTES {
        return esc(text);
    }
    let floor = |mut i: usize| {
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let head = floor(EMBED_MAX_BYTES / 3);
    let tail = floor(text.len() - (EMBED_MAX_BYTES - EMBED_MAX_BYTES / 3));
    let name = format!("{}.txt", id.replace(['/', '\\'], "_"));
    let href = format!("{link}/{name}");
    let out = format!(
        "{}\n<a href=\"{}\">…中间 {} 字节略去,全文 {} 字节在 {}…</a>\n{}",
        esc(&text[..head]),
        esc(&href),
        tail - head,
        text.len(),
        esc(&href),
        esc(&text[tail..])
    );
    files.push((name, text.to_string()));
    out
}

fn write_report(path: &Path, html: &str) -> anyhow::Result<()> {
    flower::atomic::write(path, html.as_bytes())
        .map_err(|e| anyhow::anyhow!("写 {} 失败:{e}", path.display()))
}

/// The whole page; long transcripts' whole texts are added to `files` (names inside
/// the folder `link` beside the page).
pub fn render(run: &Run, link: &str, files: &mut Vec<(String, String)>) -> String {
    let sessions = run.sessions();
    let options = &ReportOptions::for_run(run, &sessions);
    let totals = run.totals(&sessions);
    let mut h = String::with_capacity(1 << 20);
    h.push_str(concat!(
        "<!DOCTYPE html>\n<html lang=\"zh\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width\">",
        "<title>flower report</title>",
        // Records script errors where a test (or a curious person) can read them.
        "<script>window.onerror=function(m){var d=document.documentElement;",
        "d.setAttribute('data-js-errors',(d.getAttribute('data-js-errors')||'')+m+';');};</script>",
        "<style>",
        "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}",
        "h1{font-size:20px}h2{font-size:16px;margin-top:28px}",
        "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}",
        "td.n{text-align:right}tr.err td{background:#fff0f0}tr.wake td{border-top:2px solid #555}",
        "svg{background:#fafafa;border:1px solid #eee}svg text{font:11px sans-serif;fill:#555}",
        ".legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:3px;vertical-align:middle;margin-right:4px}",
        "pre{white-space:pre-wrap;font-size:12px;background:#f6f6f6;padding:8px;max-height:600px;overflow:auto}",
        "summary{cursor:pointer}.totals{background:#f3f7ff;padding:8px}",
        "</style></head><body>\n",
    ));
    let _ = writeln!(
        h,
        "<h1>flower 运行报告</h1><p>{} · 运行目录 {}</p>",
        esc(&run.workspace.display().to_string()),
        esc(&run.run_dir.display().to_string())
    );
    let _ = writeln!(h, "<p class=\"totals\">{}</p>", esc(&totals_line(&totals)));
    if let Some(line) = earlier_line(run, false) {
        let _ = writeln!(h, "<p class=\"earlier\">{}</p>", esc(&line));
    }

    let mains: Vec<&Session> = sessions.iter().filter(|s| !s.judge).collect();
    h.push_str("<h2>上下文(每轮)</h2>\n");
    context_chart(&mut h, &mains, options);
    h.push_str("<h2>累计花费</h2>\n");
    cost_chart(&mut h, &sessions);
    h.push_str("<h2>时间线</h2>\n");
    timeline(&mut h, run, &sessions, &subagent_spans(run, &sessions));
    h.push_str("<h2>每次尝试</h2>\n");
    attempt_table(&mut h, run);
    h.push_str("<h2>会话</h2>\n");
    session_table(&mut h, run, &sessions, &totals, link, files);
    h.push_str("</body></html>\n");
    h
}

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Keeps at most ~`max` points: each bucket's first, lowest and highest point, in order.
pub fn downsample(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max || max < 4 {
        return points.to_vec();
    }
    let buckets = max / 2;
    let size = points.len().div_ceil(buckets);
    let mut out = Vec::with_capacity(max + 2);
    for chunk in points.chunks(size) {
        let (mut lo, mut hi) = (0, 0);
        for (i, p) in chunk.iter().enumerate() {
            if p.1 < chunk[lo].1 {
                lo = i;
            }
            if p.1 > chunk[hi].1 {
                hi = i;
            }
        }
        let (a, b) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        out.push(chunk[a]);
        if b != a {
            out.push(chunk[b]);
        }
    }
    if let (Some(last), Some(kept)) = (points.last(), out.last())
        && last != kept
    {
        out.push(*last);
    }
    out
}

struct Scale {
    x0: f64,
    x1: f64,
    y1: f64,
}

impl Scale {
    fn x(&self, x: f64) -> f64 {
        let span = (self.x1 - self.x0).max(1e-9);
        LEFT + (x - self.x0) / span * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, y: f64) -> f64 {
        HEIGHT - BOTTOM - y / self.y1.max(1e-9) * (HEIGHT - TOP - BOTTOM)
    }
}

/// One downsampled curve per step, each in its own colour; the legend's items.
fn curve_lines(
    h: &mut String,
    curves: &[(&str, Vec<(f64, f64)>)],
    s: &Scale,
) -> Vec<(String, &'static str)> {
    let mut items = Vec::new();
    for (i, (step, points)) in curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        polyline(h, "curve", step, colour, &downsample(points, MAX_POINTS), s);
        items.push((step.to_string(), colour));
    }
    items
}

fn polyline(
    h: &mut String,
    class: &str,
    step: &str,
    colour: &str,
    points: &[(f64, f64)],
    s: &Scale,
) {
    let _ = write!(
        h,
        "<polyline class=\"{class}\" data-step=\"{}\" data-points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"",
        esc(step),
        points.len()
    );
    for (x, y) in points {
        let _ = write!(h, "{:.1},{:.1} ", s.x(*x), s.y(*y));
    }
    h.push_str("\"/>\n");
}

fn axis(h: &mut String, s: &Scale, y_label: impl Fn(f64) -> String, x_label: &str) {
    for i in 0..=4 {
        let v = s.y1 * i as f64 / 4.0;
        let y = s.y(v);
        let _ = writeln!(
            h,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/><text x=\"4\" y=\"{:.1}\">{}</text>",
            WIDTH - RIGHT,
            y + 4.0,
            esc(&y_label(v))
        );
    }
    let _ = writeln!(
        h,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
        WIDTH - RIGHT,
        HEIGHT - 8.0,
        esc(x_label)
    );
}

fn mark_style(kind: MarkKind) -> (&'static str, &'static str, &'static str) {
    match kind {
        MarkKind::Wake => ("wake", "#2ca02c", "唤醒"),
        MarkKind::Retry => ("retry", "#ff7f0e", "重试"),
        MarkKind::Outage => ("outage", "#d62728", "断网"),
        MarkKind::Handoff => ("handoff", "#9467bd", "换代"),
    }
}

fn legend(h: &mut String, items: &[(String, &str)]) {
    h.push_str("<div class=\"legend\">");
    for (name, colour) in items {
        let _ = write!(
            h,
            "<span><i style=\"background:{colour}\"></i>{}</span>",
            esc(name)
        );
    }
    h.push_str("</div>\n");
}

// Long because it draws one SVG in document order: the curves, the window and threshold
// lines, the markers and the legend share one scale.
pub fn context_chart(h: &mut String, sessions: &[&Session], options: &ReportOptions) {
    // One curve per step: its sessions in order (a handoff's successor continues it).
    let mut steps: BTreeMap<&str, Vec<&Session>> = BTreeMap::new();
    let mut order = Vec::new();
    for s in sessions {
        if !steps.contains_key(s.step.as_str()) {
            order.push(s.step.as_str());
        }
        steps.entry(&s.step).or_default().push(s);
    }
    let mut curves = Vec::new();
    let mut marks = Vec::new();
    let mut max_x = 1.0f64;
    for step in &order {
        let mut points = Vec::new();
        for s in &steps[step] {
            let base = points.len();
            for m in &s.marks {
                let turn = base + m.turn;
                let y = s
                    .turns
                    .get(m.turn)
                    .or(s.turns.last())
                    .map_or(0, |t| t.context);
                marks.push((turn as f64 + 1.0, y as f64, m.kind, m.text.clone(), *step));
            }
            points.extend(
                s.turns
                    .iter()
                    .enumerate()
                    .map(|(i, t)| ((base + i) as f64 + 1.0, t.context as f64)),
            );
        }
        max_x = max_x.max(points.len() as f64);
        curves.push((*step, points));
    }
    let peak = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let s = Scale {
        x0: 1.0,
        x1: max_x.max(2.0),
        y1: (options.window as f64).max(peak) * 1.05,
    };
    let _ = writeln!(
        h,
        "<svg class=\"chart\" data-chart=\"context\" data-curves=\"{}\" data-markers=\"{}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\">",
        curves.len(),
        marks.len()
    );
    axis(h, &s, |v| tokens(v as u64), "轮");
    for (class, value, label, colour) in [
        ("window", options.window, "窗口", "#d62728"),
        (
            "threshold",
            options.handoff_threshold,
            "换代阈值",
            "#9467bd",
        ),
    ] {
        let y = s.y(value as f64);
        let _ = writeln!(
            h,
            "<line class=\"{class}\" data-tokens=\"{value}\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label} {}</text>",
            WIDTH - RIGHT,
            WIDTH - RIGHT - 4.0,
            y - 4.0,
            tokens(value)
        );
    }
    let mut items = curve_lines(h, &curves, &s);
    for (x, y, kind, text, step) in &marks {
        let (class, colour, label) = mark_style(*kind);
        let _ = writeln!(
            h,
            "<circle class=\"marker\" data-kind=\"{class}\" data-step=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{colour}\"><title>{label} · 第 {x} 轮 · {}</title></circle>",
            esc(step),
            s.x(*x),
            s.y(*y),
            esc(&text.chars().take(200).collect::<String>())
        );
    }
    h.push_str("</svg>\n");
    for kind in [
        MarkKind::Wake,
        MarkKind::Retry,
        MarkKind::Outage,
        MarkKind::Handoff,
    ] {
        let (_, colour, label) = mark_style(kind);
        items.push((format!("● {label}"), colour));
    }
    legend(h, &items);
}

pub fn cost_chart(h: &mut String, sessions: &[Session]) {
    let mut by_step: BTreeMap<&str, Vec<(i64, f64)>> = BTreeMap::new();
    let mut order = Vec::new();
    for s in sessions {
        if !by_step.contains_key(s.step.as_str()) {
            order.push(s.step.as_str());
        }
        let series = by_step.entry(&s.step).or_default();
        for t in &s.turns {
            if let (Some(at), Some(c)) = (t.at_ms, t.cost_usd) {
                series.push((at, c));
            }
        }
    }
    let start = by_step
        .values()
        .flat_map(|v| v.iter().map(|p| p.0))
        .min()
        .unwrap_or(0);
    let mut curves = Vec::new();
    let (mut max_x, mut max_y) = (1.0f64, 0.0f64);
    for step in &order {
        let mut series = by_step.remove(step).unwrap_or_default();
        series.sort_by_key(|p| p.0);
        let mut sum = 0.0;
        let points: Vec<(f64, f64)> = series
            .iter()
            .map(|(at, c)| {
                sum += c;
                ((at - start) as f64 / 1000.0, sum)
            })
            .collect();
        if let Some(last) = points.last() {
            max_x = max_x.max(last.0);
            max_y = max_y.max(last.1);
        }
        curves.push((*step, points));
    }
    let s = Scale {
        x0: 0.0,
        x1: max_x,
        y1: max_y.max(0.0001) * 1.05,
    };
    let _ = writeln!(
        h,
        "<svg class=\"chart\" data-chart=\"cost\" data-curves=\"{}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\">",
        curves.len()
    );
    axis(
        h,
        &s,
        |v| format!("${v:.3}"),
        &format!("秒(共 {})", duration(max_x)),
    );
    let items = curve_lines(h, &curves, &s);
    h.push_str("</svg>\n");
    legend(h, &items);
}

// Long because the rows, the time scale and the bars of one SVG are laid out together.
pub fn timeline(h: &mut String, run: &Run, sessions: &[Session], subagents: &[SubagentSpan]) {
    let start = run.attempts.iter().filter_map(|a| a.started_ms).min();
    let end = run.attempts.iter().filter_map(|a| a.ended_ms).max();
    let (Some(start), Some(end)) = (start, end) else {
        h.push_str("<p>(没有可画的尝试)</p>\n");
        return;
    };
    // Rows: each plain step, its judge, then outages.
    let mut rows: Vec<String> = Vec::new();
    for a in &run.attempts {
        let row = match a.kind {
            AttemptKind::Judge(_) => format!("{}·判定", a.base),
            _ => a.base.clone(),
        };
        if !rows.contains(&row) {
            rows.push(row);
        }
    }
    let outages: Vec<(i64, f64, &str)> = sessions
        .iter()
        .flat_map(|s| s.marks.iter())
        .filter(|m| m.kind == MarkKind::Outage)
        .filter_map(|m| m.at_ms.map(|at| (at, m.waited_s, m.text.as_str())))
        .collect();
    // A lane per sub-agent running at the same time as others (those one after
    // another share one), under the steps.
    let timed: Vec<&SubagentSpan> = subagents
        .iter()
        .filter(|s| s.started_ms.is_some() && s.ended_ms.is_some())
        .collect();
    let first_lane = rows.len();
    if let Some(lanes) = timed.iter().map(|s| s.lane + 1).max() {
        rows.extend((1..=lanes).map(|n| format!("子代理 {n}")));
    }
    let commands = background_spans(run);
    let first_command = rows.len();
    if let Some(lanes) = commands.iter().map(|c| c.0 + 1).max() {
        rows.extend((1..=lanes).map(|n| format!("后台 {n}")));
    }
    if !outages.is_empty() {
        rows.push("断网".into());
    }
    let row_h = 22.0;
    let height = TOP + BOTTOM + row_h * rows.len() as f64;
    let label_w = 120.0;
    let span = ((end - start).max(1)) as f64;
    let x = |ms: i64| label_w + ((ms - start) as f64 / span) * (WIDTH - label_w - RIGHT);
    let _ = writeln!(
        h,
        "<svg class=\"chart\" data-chart=\"timeline\" data-bars=\"{}\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" xmlns=\"http://www.w3.org/2000/svg\">",
        run.attempts.len() + outages.len() + timed.len() + commands.len()
    );
    for (i, row) in rows.iter().enumerate() {
        let _ = writeln!(
            h,
            "<text x=\"4\" y=\"{:.1}\">{}</text>",
            TOP + row_h * i as f64 + 15.0,
            esc(row)
        );
    }
    let row_of = |name: &str| rows.iter().position(|r| r == name).unwrap_or(0);
    for a in &run.attempts {
        let (Some(s0), Some(s1)) = (a.started_ms, a.ended_ms) else {
            continue;
        };
        let row = match a.kind {
            AttemptKind::Judge(_) => row_of(&format!("{}·判定", a.base)),
            _ => row_of(&a.base),
        };
        let (x0, x1) = (x(s0), x(s1).max(x(s0) + 2.0));
        let colour = if a.ok { "#6baed6" } else { "#fb6a4a" };
        let stroke = if a.wake { "#2ca02c" } else { "#fff" };
        let _ = writeln!(
            h,
            "<rect class=\"bar\" data-kind=\"attempt\" data-step=\"{}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" fill=\"{colour}\" stroke=\"{stroke}\"><title>{} · {} · {} · {}</title></rect>",
            esc(&a.step),
            TOP + row_h * row as f64 + 3.0,
            x1 - x0,
            esc(&a.step),
            esc(&clock(&a.started_at)),
            duration(a.duration_s),
            esc(&outcome(a))
        );
    }
    for span in &timed {
        let (Some(s0), Some(s1)) = (span.started_ms, span.ended_ms) else {
            continue;
        };
        let (x0, x1) = (x(s0), x(s1).max(x(s0) + 2.0));
        let _ = writeln!(
            h,
            "<rect class=\"bar\" data-kind=\"subagent\" data-lane=\"{}\" data-overlapped=\"{}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" fill=\"#9e9ac8\" stroke=\"#fff\"><title>{}</title></rect>",
            span.lane,
            span.overlapped.len(),
            TOP + row_h * (first_lane + span.lane) as f64 + 3.0,
            x1 - x0,
            esc(&subagent_title(span)),
        );
    }
    for (lane, s0, s1, record) in &commands {
        let (x0, x1) = (x(*s0), x(*s1).max(x(*s0) + 2.0));
        let how = record.end.as_ref().map_or("还在跑", |e| e.how.as_str());
        let _ = writeln!(
            h,
            "<rect class=\"bar\" data-kind=\"background\" data-lane=\"{lane}\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" fill=\"#74c476\" stroke=\"#fff\"><title>{} · {} · {how}</title></rect>",
            TOP + row_h * (first_command + lane) as f64 + 3.0,
            x1 - x0,
            esc(&record.id),
            esc(&record.command),
        );
    }
    let row = rows.len().saturating_sub(1);
    for (at, waited, text) in &outages {
        let x0 = x(*at);
        let x1 = x(*at + (*waited * 1000.0) as i64).max(x0 + 2.0);
        let _ = writeln!(
            h,
            "<rect class=\"bar\" data-kind=\"outage\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" fill=\"#d62728\"><title>断网 {} · {}</title></rect>",
            TOP + row_h * row as f64 + 3.0,
            x1 - x0,
            duration(*waited),
            esc(text)
        );
    }
    let _ = writeln!(
        h,
        "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">共 {}</text></svg>",
        WIDTH - RIGHT,
        height - 8.0,
        duration(span / 1000.0)
    );
}

pub fn attempt_table(h: &mut String, run: &Run) {
    h.push_str("<table class=\"attempts\"><tr><th>开始</th><th>步骤</th><th>类型</th><th>用时</th><th>请求</th><th>结果</th><th>花费</th><th>上下文</th><th>换代</th><th>会话</th></tr>\n");
    for a in &run.attempts {
        let class = match (a.ok, a.wake) {
            (false, true) => " class=\"err wake\"",
            (false, false) => " class=\"err\"",
            (true, true) => " class=\"wake\"",
            _ => "",
        };
        let _ = writeln!(
            h,
            "<tr{class}><td>{}{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td><a href=\"#s-{}\">{}</a></td></tr>",
            if a.wake { "唤醒 · " } else { "" },
            esc(&clock(&a.started_at)),
            esc(&a.step),
            esc(&kind_label(a.kind)),
            duration(a.duration_s),
            a.requests,
            esc(&outcome(a)),
            cost(a.cost_usd),
            tokens(a.context),
            esc(&handoffs(a)),
            esc(a.session_id.as_deref().unwrap_or("")),
            esc(&short_id(a.session_id.as_deref().unwrap_or("-"))),
        );
    }
    h.push_str("</table>\n");
}

fn session_table(
    h: &mut String,
    run: &Run,
    sessions: &[Session],
    totals: &Totals,
    link: &str,
    files: &mut Vec<(String, String)>,
) {
    h.push_str("<table class=\"sessions\"><caption>花费和 tokens 含子代理;轮只算会话自己的</caption><tr><th>会话</th><th>步骤</th><th>轮</th><th>花费</th><th>峰值上下文</th><th>输入</th><th>输出</th><th>缓存写</th><th>缓存读</th><th>子代理</th></tr>\n");
    for s in sessions {
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#s-{}\">{}</a>{}</td><td>{}{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&s.session_id),
            esc(&short_id(&s.session_id)),
            if s.missing {
                " (已不在 sessions.db)"
            } else {
                ""
            },
            esc(&s.step),
            if s.judge { " · 判定" } else { "" },
            s.turns.len(),
            cost(s.all_cost_usd()),
            tokens(s.peak_context),
            tokens(s.all_tokens().input),
            tokens(s.all_tokens().output),
            tokens(s.all_tokens().cache_creation),
            tokens(s.all_tokens().cache_read),
            s.subagents.len(),
        );
    }
    let _ = writeln!(
        h,
        "<tr><th colspan=\"2\">合计</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th class=\"n\">{}</th><th></th></tr></table>",
        totals.turns,
        cost(Some(totals.cost_usd)),
        tokens(totals.peak_context),
        tokens(totals.tokens.input),
        tokens(totals.tokens.output),
        tokens(totals.tokens.cache_creation),
        tokens(totals.tokens.cache_read),
    );
    if totals.tokens.web_search + totals.tokens.web_fetch > 0 {
        let _ = writeln!(
            h,
            "<p>服务端工具:网页搜索 {} 次,网页抓取 {} 次(API 端执行,已计入费用)</p>",
            totals.tokens.web_search, totals.tokens.web_fetch,
        );
    }
    for s in sessions {
        let _ = writeln!(
            h,
            "<details class=\"transcript\" id=\"s-{}\"><summary>{} · {} · {} 条记录</summary><pre>{}</pre></details>",
            esc(&s.session_id),
            esc(&s.step),
            esc(&s.session_id),
            s.entries,
            embedded(
                &super::show::transcript_text(run, &s.session_id),
                &s.session_id,
                link,
                files
            )
        );
    }
}

/// The 换代 column: the step's sessions in succession, ending in the one lineage holds
/// (short ids); empty when it did not hand off.
fn handoffs(a: &flower::inspect::Attempt) -> String {
    if a.retired.is_empty() {
        return String::new();
    }
    let short: Vec<String> = a.chain().into_iter().map(short_id).collect();
    folded(&short.iter().map(String::as_str).collect::<Vec<_>>())
}

fn short_id(id: &str) -> String {
    id.chars().take(8).collect()
}

/// A sub-agent bar's tooltip: `第 1 件 · 01:52:41 · 3.0s · 2 轮 · 同时 2 个`.
fn subagent_title(span: &SubagentSpan) -> String {
    let mut title = format!(
        "{} · {} · {} · {} 轮",
        span.name(),
        span.started_at.as_deref().map(clock).unwrap_or_default(),
        span.duration_s().map(duration).unwrap_or_default(),
        span.turns
    );
    if span.concurrent() {
        title.push_str(&format!(" · 同时 {} 个", span.overlapped.len()));
    }
    title
}

/// The sub-agents of the sessions, for the timeline's lanes.
pub fn subagent_spans(run: &Run, sessions: &[Session]) -> Vec<SubagentSpan> {
    sessions
        .iter()
        .flat_map(|s| run.subagent_spans(&s.session_id))
        .collect()
}

/// The run's background commands (their records in the run directory), each with its
/// lane (one after another share one), start and end in epoch ms (still running: now).
fn background_spans(run: &Run) -> Vec<(usize, i64, i64, flower::tools::background::Record)> {
    let dir = RunDir::new(&run.run_dir).background();
    let mut records = flower::tools::background::record::all(&dir);
    records.sort_by_key(|r| r.started_at);
    let now = flower::tools::background::record::now();
    let mut free_at: Vec<u64> = Vec::new();
    records
        .into_iter()
        .map(|record| {
            let (start, end) = (record.started_at, record.end.as_ref().map_or(now, |e| e.at));
            let lane = match free_at.iter().position(|free| *free < start) {
                Some(lane) => lane,
                None => {
                    free_at.push(end);
                    free_at.len() - 1
                }
            };
            free_at[lane] = end;
            (lane, start as i64 * 1000, end as i64 * 1000, record)
        })
        .collect()
}
