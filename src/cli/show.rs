//! `flower show [STEP | SESSION_ID]`: a transcript a person can read, turn by turn.
//! `--pruned` shows what a resume would feed the model instead of what is stored.
//! Read-only; the output is plain text (pager-friendly) wherever it goes.

use super::render::tokens;
use super::{open_run, print_out};
use clap::Args;
use flower::inspect::Run;
use flower::stores::SessionKey;
use flower::transcript::markers;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Lines of a tool result shown before it is cut.
const RESULT_LINES: usize = 4;
/// Characters of a tool call's input summary.
const SUMMARY_CHARS: usize = 120;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A step name (looked up in lineage.json) or a session id. Default: the last step run.
    pub target: Option<String>,

    /// Show what a resume would feed the model (errors, old denials and stale results
    /// removed; large old results trimmed unless --no-trim).
    #[arg(long)]
    pub pruned: bool,

    /// With --pruned: as `flower --no-trim` would resume (large results kept whole).
    #[arg(long, requires = "pruned")]
    pub no_trim: bool,

    /// Also show the sub-agents' transcripts.
    #[arg(long)]
    pub subagents: bool,

    /// Print one JSON document: the session and its entries.
    #[arg(long)]
    pub json: bool,

    /// Run directory, relative to the current directory.
    #[arg(short = 'r', long = "run-dir", default_value = "runs")]
    pub run_dir: PathBuf,
}

pub fn run(args: ShowArgs) -> anyhow::Result<ExitCode> {
    let run = open_run(&args.run_dir)?;
    let (id, step) = run.resolve(args.target.as_deref())?;
    let key = run.key(&id);
    let load = |key: &SessionKey| -> anyhow::Result<Vec<Value>> {
        let entries = if args.pruned {
            run.load_pruned(key, !args.no_trim)?
        } else {
            run.load(key)?
        };
        entries.ok_or_else(|| {
            anyhow::anyhow!(
                "会话 {} 不在这个目录的 sessions.db 里(换了目录跑?)",
                key.session_id
            )
        })
    };
    let entries = load(&key)?;
    let subs = if args.subagents {
        run.subagents(&key)
    } else {
        Vec::new()
    };
    let mut out = String::new();
    if args.json {
        let mut subagents = serde_json::Map::new();
        for sub in &subs {
            subagents.insert(sub.clone(), Value::Array(load(&key.sub(sub)?)?));
        }
        let doc = serde_json::json!({
            "session_id": id,
            "step": step,
            "pruned": args.pruned,
            "entries": entries,
            "subagents": subagents,
        });
        out = serde_json::to_string_pretty(&doc)?;
        out.push('\n');
        return print_out(&out);
    }
    let what = if args.pruned {
        "续跑时喂给模型的样子(已剪除)"
    } else {
        "原样"
    };
    let _ = writeln!(
        out,
        "会话 {id}{} · {} 条记录 · {what}",
        step.map(|s| format!(" · 步骤 {s}")).unwrap_or_default(),
        entries.len()
    );
    render(&mut out, &entries);
    for sub in &subs {
        let entries = load(&key.sub(sub)?)?;
        let _ = writeln!(out, "\n════ 子代理 {sub} · {} 条记录 ════", entries.len());
        render(&mut out, &entries);
    }
    if !args.subagents {
        let n = run.subagents(&key).len();
        if n > 0 {
            let _ = writeln!(out, "\n(还有 {n} 个子代理的记录:加 --subagents 一起看)");
        }
    }
    print_out(&out)
}

/// Renders a transcript: user text, assistant turns with usage, tool calls with their
/// input summarised, results cut to a few lines with the byte count, denials,
/// interruptions, synthetic API errors and unknown entries marked as such.
pub fn render(out: &mut String, entries: &[Value]) {
    let mut turn = 0;
    let mut tools: std::collections::HashMap<String, String> = Default::default();
    for entry in entries {
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
        let stamp = entry
            .get("timestamp")
            .and_then(Value::as_str)
            .map(short_time)
            .unwrap_or_default();
        let message = entry.get("message");
        match kind {
            "assistant" if markers::is_synthetic_error(entry) => {
                let text = message
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_array)
                    .map(|c| flower::transcript::text_of(c))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "⚠ [合成的 API 错误,不会喂回模型] {stamp} {}",
                    text.trim()
                );
            }
            "assistant" => {
                turn += 1;
                let usage = message.and_then(|m| m.get("usage"));
                let u = |k: &str| {
                    usage
                        .and_then(|u| u.get(k))
                        .and_then(Value::as_u64)
                        .unwrap_or(0)
                };
                let (input, output, cw, cr) = (
                    u("input_tokens"),
                    u("output_tokens"),
                    u("cache_creation_input_tokens"),
                    u("cache_read_input_tokens"),
                );
                let _ = writeln!(
                    out,
                    "\n── 第 {turn} 轮 · 助手 {stamp} · 上下文 {}(输入 {input} 输出 {output} 缓存写 {cw} 缓存读 {cr})──",
                    tokens(input + output + cw + cr)
                );
                match message.and_then(|m| m.get("content")) {
                    Some(Value::Array(blocks)) => {
                        for block in blocks {
                            assistant_block(out, block, &mut tools);
                        }
                    }
                    Some(Value::String(s)) => {
                        let block = serde_json::json!({"type": "text", "text": s});
                        assistant_block(out, &block, &mut tools);
                    }
                    _ => {}
                }
            }
            "user" => {
                let content = message.and_then(|m| m.get("content"));
                match content {
                    Some(Value::String(text)) => user_text(out, text, &stamp),
                    Some(Value::Array(blocks)) => {
                        for block in blocks {
                            user_block(out, block, &stamp, &tools);
                        }
                    }
                    _ => {
                        let _ = writeln!(out, "[无法显示的用户条目]");
                    }
                }
            }
            other => {
                let _ = writeln!(
                    out,
                    "[未知条目:type={}]",
                    if other.is_empty() { "?" } else { other }
                );
            }
        }
    }
}

fn user_text(out: &mut String, text: &str, stamp: &str) {
    if markers::is_interruption_text(text) {
        let _ = writeln!(out, "⚠ [中断] {}", text.trim());
    } else {
        let _ = writeln!(out, "\n── 用户 {stamp} ──\n{}", text.trim_end());
    }
}

fn assistant_block(
    out: &mut String,
    block: &Value,
    tools: &mut std::collections::HashMap<String, String>,
) {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => {
            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
            let _ = writeln!(out, "{}", text.trim_end());
        }
        "thinking" | "redacted_thinking" => {
            let _ = writeln!(out, "(思考,{} 字节)", block.to_string().len());
        }
        "tool_use" => {
            let name = block.get("name").and_then(Value::as_str).unwrap_or("?");
            let id = block.get("id").and_then(Value::as_str).unwrap_or("");
            tools.insert(id.to_owned(), name.to_owned());
            let input = block.get("input").unwrap_or(&Value::Null);
            let _ = writeln!(out, "⏺ {name} {}", summarise_input(name, input));
        }
        other => {
            let _ = writeln!(out, "[未知内容块:{other}]");
        }
    }
}

fn user_block(
    out: &mut String,
    block: &Value,
    stamp: &str,
    tools: &std::collections::HashMap<String, String>,
) {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => user_text(
            out,
            block.get("text").and_then(Value::as_str).unwrap_or(""),
            stamp,
        ),
        "tool_result" => {
            let text = result_text(block.get("content"));
            let error = block.get("is_error").and_then(Value::as_bool) == Some(true);
            let id = block
                .get("tool_use_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            let name = tools.get(id).map(String::as_str).unwrap_or("工具");
            if error && markers::is_denial_text(&text) {
                let _ = writeln!(out, "  ✗ [被拒] {}", first_line(&text));
                return;
            }
            if markers::is_interruption_text(&text) || text == markers::INTERRUPTED_BODY {
                let _ = writeln!(out, "  ⚠ [中断] {}", first_line(&text));
                return;
            }
            if text == markers::STALE_BODY {
                let _ = writeln!(out, "  ⎿ [过期] {}", text);
                return;
            }
            let tag = if error { " 出错" } else { "" };
            let _ = writeln!(out, "  ⎿ {name} 结果{tag}({} 字节)", text.len());
            let mut lines = text.lines();
            for line in lines.by_ref().take(RESULT_LINES) {
                let _ = writeln!(out, "    {}", cut(line, 200));
            }
            let more = lines.count();
            if more > 0 {
                let _ = writeln!(out, "    … 还有 {more} 行");
            }
        }
        "image" => {
            let _ = writeln!(out, "  [图片]");
        }
        other => {
            let _ = writeln!(out, "[未知内容块:{other}]");
        }
    }
}

/// A tool result's text, whether a string or a list of text blocks.
fn result_text(content: Option<&Value>) -> std::borrow::Cow<'_, str> {
    match content {
        Some(Value::String(s)) => s.as_str().into(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")
            .into(),
        _ => "".into(),
    }
}

/// The one field that says what a call does, else the input as compact JSON; cut.
pub fn summarise_input(name: &str, input: &Value) -> String {
    // flower's tools from their one description; Claude Code's others (imported
    // transcripts) by the field that names their target.
    let field = match flower::transcript::tools::info_of(name) {
        Some(info) => info.summary_field,
        None => match name {
            "MultiEdit" | "NotebookEdit" => "file_path",
            "AskUserQuestion" => "question",
            "WebFetch" => "url",
            _ => "",
        },
    };
    let text = input
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| input.to_string());
    cut(&text.replace('\n', "⏎"), SUMMARY_CHARS)
}

fn first_line(text: &str) -> String {
    cut(text.lines().next().unwrap_or(""), SUMMARY_CHARS)
}

fn cut(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// `01:52:40` from an entry's UTC timestamp, in local time.
fn short_time(stamp: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(stamp) {
        Ok(t) => t
            .with_timezone(&chrono::Local)
            .format("%m-%d %H:%M:%S")
            .to_string(),
        Err(_) => String::new(),
    }
}

/// The transcript of a session as `flower show` prints it (for the report).
pub fn transcript_text(run: &Run, session_id: &str) -> String {
    let mut out = String::new();
    match run.load(&run.key(session_id)) {
        Ok(Some(entries)) => render(&mut out, &entries),
        Ok(None) => out.push_str("[会话已不在 sessions.db 里]\n"),
        Err(e) => {
            let _ = writeln!(out, "[读不出:{e}]");
        }
    }
    out
}
