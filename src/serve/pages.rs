//! The pages, rendered on the server: plain HTML and CSS, no external asset, one small
//! inline script (the run page's event stream). Text is escaped where it is written
//! (`report::esc`); the charts, the attempt table and the transcripts are the report's
//! and `flower show`'s own renderers.

use super::live::Live;
use super::summary::RunSummary;
use crate::cli::format::{cost, tokens};
use crate::cli::report::{self, ReportOptions, esc};
use flower::inspect::{Run, Session};
use serde::Deserialize;
use std::fmt::Write as _;

/// Entries on one page of a transcript.
pub const PAGE_ENTRIES: usize = 200;

const STYLE: &str = concat!(
    "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}",
    "h1{font-size:20px}h2{font-size:16px;margin-top:28px}a{color:#1a5fb4}",
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}",
    "td.n{text-align:right}tr.err td{background:#fff0f0}tr.wake td{border-top:2px solid #555}",
    "tr.running td{background:#f0fff3}th a{color:inherit}",
    "svg{background:#fafafa;border:1px solid #eee}svg text{font:11px sans-serif;fill:#555}",
    ".legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:3px;vertical-align:middle;margin-right:4px}",
    "pre{white-space:pre-wrap;font-size:12px;background:#f6f6f6;padding:8px}",
    ".status{font:13px ui-monospace,monospace;background:#f3f7ff;padding:8px;margin:0}",
    ".tool{font:13px ui-monospace,monospace;padding:4px 8px;margin:0;color:#555;min-height:1.4em}",
    "form.filter{margin:8px 0}.pager a{margin-right:10px}",
);

/// The start of every page, up to `<body>`.
fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"zh\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{}</title>\
         <style>{STYLE}</style></head><body>\n",
        esc(title)
    )
}

/// A path segment or query value, percent-encoded (all but the unreserved).
pub fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// An epoch-ms time as the local clock reads it.
fn when(ms: Option<i64>) -> String {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_default()
}

/// The run list's query: `?q=` (a word in the key, workspace, step or host),
/// `?running=1`, `?sort=<column>&desc=1`.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ListQuery {
    pub q: Option<String>,
    pub running: Option<String>,
    pub sort: Option<String>,
    pub desc: Option<String>,
}

impl ListQuery {
    fn descending(&self) -> bool {
        self.desc.as_deref().is_some_and(|d| d == "1")
    }

    /// The runs the query keeps, in its order (default: last activity, newest first).
    pub fn apply(&self, mut rows: Vec<RunSummary>) -> Vec<RunSummary> {
        let word = self.q.as_deref().unwrap_or("").trim().to_lowercase();
        let only_running = self.running.as_deref().is_some_and(|r| r == "1");
        rows.retain(|r| {
            let text = format!(
                "{} {} {} {}",
                r.key,
                r.workspace,
                r.step.as_deref().unwrap_or(""),
                r.host.as_deref().unwrap_or("")
            )
            .to_lowercase();
            (word.is_empty() || text.contains(&word)) && (!only_running || r.running)
        });
        let column = self.sort.as_deref().unwrap_or("activity");
        rows.sort_by(|a, b| {
            let f = |x: f64, y: f64| x.total_cmp(&y);
            match column {
                "key" => a.key.cmp(&b.key),
                "step" => a.step.cmp(&b.step),
                "round" => a.round.cmp(&b.round),
                "generation" => a.generation.cmp(&b.generation),
                "context" => f(a.context_share, b.context_share),
                "cost" => f(a.cost_usd, b.cost_usd),
                "tokens" => a.tokens_total.cmp(&b.tokens_total),
                "host" => a.host.cmp(&b.host),
                "running" => a.running.cmp(&b.running),
                _ => b.last_activity_ms.cmp(&a.last_activity_ms),
            }
        });
        if self.descending() {
            rows.reverse();
        }
        rows
    }

    /// A column header that sorts by `column` (again: the other way).
    fn header(&self, column: &str, label: &str) -> String {
        let again = self.sort.as_deref() == Some(column) && !self.descending();
        let mut href = format!("/?sort={column}");
        if again {
            href.push_str("&desc=1");
        }
        if let Some(q) = self.q.as_deref().filter(|q| !q.is_empty()) {
            let _ = write!(href, "&q={}", enc(q));
        }
        if self.running.as_deref() == Some("1") {
            href.push_str("&running=1");
        }
        format!("<th><a href=\"{}\">{}</a></th>", esc(&href), esc(label))
    }
}

/// `/`: the runs, sortable by each column, filterable.
pub fn list(all: &[RunSummary], query: &ListQuery, source: &str) -> String {
    let mut h = head("flower · 运行");
    let (nested, rows): (Vec<&RunSummary>, Vec<&RunSummary>) =
        all.iter().partition(|r| r.inside.is_some());
    let _ = writeln!(
        h,
        "<h1>flower 运行</h1><p>{} · {} 个运行</p>",
        esc(source),
        rows.len()
    );
    let _ = writeln!(
        h,
        "<form class=\"filter\" method=\"get\" action=\"/\"><input name=\"q\" value=\"{}\" placeholder=\"筛选:运行、工作区、步骤、主机\"> \
         <label><input type=\"checkbox\" name=\"running\" value=\"1\"{}> 只看运行中的</label> <button>筛选</button></form>",
        esc(query.q.as_deref().unwrap_or("")),
        if query.running.as_deref() == Some("1") {
            " checked"
        } else {
            ""
        },
    );
    h.push_str("<table id=\"runs\"><tr>");
    for (column, label) in [
        ("key", "运行"),
        ("step", "步骤"),
        ("round", "回合"),
        ("generation", "代"),
        ("context", "上下文"),
        ("cost", "花费"),
        ("tokens", "tokens"),
        ("activity", "最近活动"),
        ("host", "主机"),
        ("running", "运行中"),
    ] {
        h.push_str(&query.header(column, label));
    }
    h.push_str("</tr>\n");
    for r in rows {
        let _ = writeln!(
            h,
            "<tr class=\"run{}\" data-key=\"{}\"><td><a href=\"/runs/{}\">{}</a><br><small>{}</small></td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}({:.0}%)</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if r.running { " running" } else { "" },
            esc(&r.key),
            enc(&r.key),
            esc(&r.key),
            esc(&r.workspace),
            esc(r.step.as_deref().unwrap_or("-")),
            r.round,
            r.generation,
            tokens(r.context),
            r.context_share * 100.0,
            cost(Some(r.cost_usd)),
            tokens(r.tokens_total),
            when(r.last_activity_ms),
            esc(r.host.as_deref().unwrap_or("")),
            match (r.running, &r.holder) {
                (true, Some(holder)) => format!("是({})", esc(holder)),
                (true, None) => "是".to_string(),
                (false, _) => "否".to_string(),
            },
        );
    }
    h.push_str("</table>\n");
    nested_list(&mut h, &nested);
    h.push_str("</body></html>\n");
    h
}

/// The run directories found inside another run's workspace, apart from the table:
/// an agent of that run can write one, so it is not shown as the person's run.
fn nested_list(h: &mut String, nested: &[&RunSummary]) {
    if nested.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<h2>别的运行的工作区里的运行目录({} 个)</h2>\
         <p>它们在另一个运行的工作区里,可能是那个运行里的 agent 写出来的,不一定是你跑的。</p>\
         <table id=\"nested\"><tr><th>运行目录</th><th>在哪个运行的工作区里</th><th>步骤</th><th>最近活动</th></tr>",
        nested.len()
    );
    for r in nested {
        let parent = r.inside.as_deref().unwrap_or("");
        let _ = writeln!(
            h,
            "<tr class=\"nested\" data-key=\"{}\"><td><a href=\"/runs/{}\">{}</a></td><td><a href=\"/runs/{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
            esc(&r.key),
            enc(&r.key),
            esc(&r.key),
            enc(parent),
            esc(parent),
            esc(r.step.as_deref().unwrap_or("-")),
            when(r.last_activity_ms),
        );
    }
    h.push_str("</table>\n");
}

/// The run page's script: the status and tool elements follow the run's event stream
/// (the page is never reloaded); `data-updates` counts the events applied.
fn live_script(nonce: &str) -> String {
    format!(
        "<script nonce=\"{nonce}\">(function(){{\
         var s=document.getElementById('status'),t=document.getElementById('tool'),n=0;\
         var es=new EventSource(location.pathname.replace(/\\/$/,'')+'/events');\
         es.addEventListener('live',function(e){{var d=JSON.parse(e.data);\
         s.textContent=d.line;t.textContent=d.tool;n++;\
         document.documentElement.setAttribute('data-updates',String(n));}});\
         }})();</script>\n"
    )
}

/// `/runs/<key>`: the live status and current call, the context curve with its
/// handoffs, the cost curve, the timeline, the manifest's attempts, the sessions with
/// links to their transcripts.
pub fn run_page(key: &str, run: &Run, sessions: &[Session], live: &Live, nonce: &str) -> String {
    let mut h = head(&format!("flower · {key}"));
    let _ = writeln!(
        h,
        "<p><a href=\"/\">← 全部运行</a></p><h1>{}</h1><p>{} · 运行目录 {}</p>",
        esc(key),
        esc(&run.workspace.display().to_string()),
        esc(&run.run_dir.display().to_string())
    );
    let _ = writeln!(
        h,
        "<p id=\"status\" class=\"status\">{}</p><p id=\"tool\" class=\"tool\">{}</p>",
        esc(&live.line),
        esc(&live.tool)
    );
    let totals = run.totals(sessions);
    let _ = writeln!(
        h,
        "<p class=\"totals\">{}</p>",
        esc(&crate::cli::log::totals_line(&totals))
    );
    let options = &ReportOptions::for_run(run, sessions);
    let mains: Vec<&Session> = sessions.iter().filter(|s| !s.judge).collect();
    h.push_str("<h2>上下文(每轮)</h2>\n");
    report::context_chart(&mut h, &mains, options);
    h.push_str("<h2>累计花费</h2>\n");
    report::cost_chart(&mut h, sessions);
    h.push_str("<h2>时间线</h2>\n");
    report::timeline(
        &mut h,
        run,
        sessions,
        &report::subagent_spans(run, sessions),
    );
    h.push_str("<h2>每次尝试(运行清单)</h2>\n");
    report::attempt_table(&mut h, run);
    sessions_table(&mut h, key, sessions);
    if let Some(lineage) = &run.lineage {
        h.push_str("<h2>血缘</h2>\n<table class=\"lineage\"><tr><th>步骤</th><th>会话</th></tr>");
        for (step, id) in &lineage.steps {
            let _ = write!(
                h,
                "<tr><td>{}</td><td><a href=\"/runs/{}/sessions/{}\">{}</a></td></tr>",
                esc(step),
                enc(key),
                enc(id),
                esc(id)
            );
        }
        let _ = writeln!(h, "</table><p>唤醒 {} 次</p>", lineage.woke);
    }
    h.push_str(&live_script(nonce));
    h.push_str("</body></html>\n");
    h
}

fn sessions_table(h: &mut String, key: &str, sessions: &[Session]) {
    h.push_str("<h2>会话</h2>\n<table class=\"sessions\"><tr><th>会话</th><th>步骤</th><th>记录</th><th>轮</th><th>花费</th><th>峰值上下文</th><th>子代理</th></tr>\n");
    for s in sessions {
        let _ = writeln!(
            h,
            "<tr id=\"s-{}\"><td><a class=\"transcript\" href=\"/runs/{}/sessions/{}\">{}</a></td><td>{}{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&s.session_id),
            enc(key),
            enc(&s.session_id),
            esc(&s.session_id),
            esc(&s.step),
            if s.judge { " · 判定" } else { "" },
            s.entries,
            s.turns.len(),
            cost(s.all_cost_usd()),
            tokens(s.peak_context),
            s.subagents.len(),
        );
    }
    h.push_str("</table>\n");
}

/// A transcript page's query: `?page=N` (from 1), `?sub=NAME` (a sub-agent's).
#[derive(Debug, Default, Clone, Deserialize)]
pub struct PageQuery {
    pub page: Option<usize>,
    pub sub: Option<String>,
}

/// One page of a transcript, as `flower show` prints it.
pub struct TranscriptPage<'a> {
    pub key: &'a str,
    pub session_id: &'a str,
    pub sub: Option<&'a str>,
    pub page: usize,
    pub total: usize,
    pub text: &'a str,
    pub subagents: &'a [String],
}

/// `/runs/<key>/sessions/<id>`: [`PAGE_ENTRIES`] entries of a transcript, with links to
/// the other pages and to its sub-agents' transcripts.
pub fn transcript(p: &TranscriptPage<'_>) -> String {
    let mut h = head(&format!("flower · {}", p.session_id));
    let pages = p.total.div_ceil(PAGE_ENTRIES).max(1);
    let base = format!("/runs/{}/sessions/{}", enc(p.key), enc(p.session_id));
    let sub = p
        .sub
        .map(|s| format!("&sub={}", enc(s)))
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "<p><a href=\"/runs/{}\">← 运行 {}</a></p><h1>会话 {}{}</h1><p>{} 条记录 · 第 {} / {} 页(每页 {} 条)</p>",
        enc(p.key),
        esc(p.key),
        esc(p.session_id),
        p.sub
            .map(|s| format!(" · 子代理 {}", esc(s)))
            .unwrap_or_default(),
        p.total,
        p.page,
        pages,
        PAGE_ENTRIES
    );
    let mut pager = String::from("<p class=\"pager\">");
    let link = |n: usize, label: &str| {
        format!(
            "<a href=\"{}\">{}</a>",
            esc(&format!("{base}?page={n}{sub}")),
            label
        )
    };
    if p.page > 1 {
        pager.push_str(&link(1, "第一页"));
        pager.push_str(&link(p.page - 1, "← 上一页"));
    }
    if p.page < pages {
        pager.push_str(&link(p.page + 1, "下一页 →"));
        pager.push_str(&link(pages, "最后一页"));
    }
    pager.push_str("</p>\n");
    h.push_str(&pager);
    let _ = writeln!(h, "<pre id=\"transcript\">{}</pre>", esc(p.text));
    h.push_str(&pager);
    if !p.subagents.is_empty() {
        h.push_str("<h2>子代理</h2><ul>");
        for name in p.subagents {
            let _ = write!(
                h,
                "<li><a href=\"{}\">{}</a></li>",
                esc(&format!("{base}?sub={}", enc(name))),
                esc(name)
            );
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</body></html>\n");
    h
}
