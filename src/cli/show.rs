//! `flower show [STEP | SESSION_ID]`: a transcript a person can read, turn by turn.
//! `--pruned` shows what a resume would feed the model instead of what is stored.
//! Read-only; the output is plain text (pager-friendly) wherever it goes.

use super::format::tokens;
use super::{open_run, print_out};
use clap::Args;
use flower::inspect::{InspectError, Run};
use flower::stores::SessionKey;
use flower::transcript::{Block, Content, Entry, MessageUsage, Raw, markers};
use serde_json::value::RawValue;
use std::fmt::Write as _;
use std::process::ExitCode;

/// Lines of a tool result shown before it is cut.
const RESULT_LINES: usize = 4;
/// Characters of a tool call's input summary.
const SUMMARY_CHARS: usize = 120;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// 步骤名(到 lineage.json 里查)或会话 id。默认:最后跑的那一步
    pub target: Option<String>,

    /// 显示续跑时喂给模型的样子(摘掉报错、旧的被拒调用和过期结果;旧的大结果被裁剪,除非 --no-trim)
    #[arg(long)]
    pub pruned: bool,

    /// 和 --pruned 一起:按 `flower --no-trim` 的续跑方式(大结果整个留着)
    #[arg(long, requires = "pruned")]
    pub no_trim: bool,

    /// 也显示子代理的 transcript
    #[arg(long)]
    pub subagents: bool,

    /// 打印一个 JSON 文档:会话和它的条目
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub source: super::flags::RunSource,
}

// Long because the JSON and the text view share one run's loaders (raw, pruned) and
// its sub-agents' order.
pub fn run(args: ShowArgs, env: &flower::settings::Environment) -> anyhow::Result<ExitCode> {
    let run = open_run(&args.source, env)?;
    let (id, step) = run.resolve(args.target.as_deref())?;
    let key = run.key(&id);
    let load = |key: &SessionKey| -> anyhow::Result<Vec<Entry>> {
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
    // In the order they started; which ran at the same time is marked.
    let spans = if args.subagents {
        run.subagent_spans(&id)
    } else {
        Vec::new()
    };
    // The background commands the session (or its sub-agents) started, with sub-agents.
    let commands = if args.subagents {
        super::log::background_of(&run, |session| session == id)
    } else {
        Vec::new()
    };
    let mut out = String::new();
    if args.json {
        let entries = load(&key)?;
        let mut subagents = serde_json::Map::new();
        for sub in spans.iter().map(|s| &s.subpath) {
            subagents.insert(sub.clone(), serde_json::to_value(load(&key.sub(sub)?)?)?);
        }
        let doc = serde_json::json!({
            "session_id": id,
            "step": step,
            "pruned": args.pruned,
            "entries": entries,
            "subagents": subagents,
            "subagent_spans": spans,
            "background": commands,
        });
        out = serde_json::to_string_pretty(&doc)?;
        out.push('\n');
        return print_out(&out);
    }
    // The transcript with its entry count: raw rows unless pruned (pruning needs them
    // whole), and the usual load when the raw read fails, for its message.
    let transcript = |key: &SessionKey| -> anyhow::Result<(usize, String)> {
        let mut body = String::new();
        if !args.pruned
            && let Ok(count) = render_raw(&run, key, &mut body)
            && count > 0
        {
            return Ok((count, body));
        }
        body.clear();
        let entries = load(key)?;
        render(&mut body, &entries);
        Ok((entries.len(), body))
    };
    let (count, body) = transcript(&key)?;
    let what = if args.pruned {
        "续跑时喂给模型的样子(已剪除)"
    } else {
        "原样"
    };
    let _ = writeln!(
        out,
        "会话 {id}{} · {count} 条记录 · {what}",
        step.map(|s| format!(" · 步骤 {s}")).unwrap_or_default(),
    );
    out.push_str(&body);
    for span in &spans {
        let (count, body) = transcript(&key.sub(&span.subpath)?)?;
        let _ = writeln!(
            out,
            "\n════ 子代理 {} · {count} 条记录{} ════",
            span.subpath,
            subagent_heading(span, &spans)
        );
        out.push_str(&body);
    }
    if !commands.is_empty() {
        let _ = writeln!(out, "\n════ 后台命令 · {} 个 ════", commands.len());
        for command in &commands {
            let _ = writeln!(out, "{}", super::log::background_line(command));
            let _ = writeln!(out, "      输出:{}", command.output.display());
        }
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
/// input summarised, results cut to a few lines with the byte count, denials,interruptions, synthetic API errors and unknown entries marked as such.
pub fn render(out: &mut String, entries: &[Entry]) {
    let mut r = Renderer::default();
    for entry in entries {
        r.entry(out, entry);
    }
}

/// A session's transcript rendered straight from the store's raw rows: each entry is
/// read into the few borrowed fields the renderer needs ([`lite`]); one that does not
/// fit that shape (or holds thinking, whose size is that of its `Value`) is parsed
/// whole and rendered as [`render`] would. The number of entries, 0 when the session is
/// not stored; `Err` when a row is not JSON (the caller loads the usual way, for the
/// store's message).
fn render_raw(run: &Run, key: &SessionKey, out: &mut String) -> Result<usize, ()> {
    let mut r = Renderer::default();
    let mut bad = false;
    let count = run
        .for_each_raw(key, |row| bad = bad || r.row(out, row).is_err())
        .map_err(|_| ())?;
    if bad { Err(()) } else { Ok(count) }
}

/// What rendering carries from entry to entry.
#[derive(Default)]
struct Renderer {
    turn: usize,
    /// Tool names by call id, for the results.
    tools: std::collections::HashMap<String, String>,
}

impl Renderer {
    /// One entry from its JSON text: [`Self::raw`], else parsed whole; `Err`: not JSON.
    fn row(&mut self, out: &mut String, row: &[u8]) -> Result<(), ()> {
        if self.raw(out, row).is_ok() {
            return Ok(());
        }
        let entry = Entry::from_json(row).map_err(|_| ())?;
        self.entry(out, &entry);
        Ok(())
    }

    fn entry(&mut self, out: &mut String, entry: &Entry) {
        let kind = entry.kind.as_deref().unwrap_or("");
        let stamp = entry
            .timestamp
            .as_deref()
            .map(short_time)
            .unwrap_or_default();
        match kind {
            "assistant" if entry.is_synthetic_error() => {
                let text: String = match entry.content() {
                    Some(Content::Blocks(blocks)) => {
                        blocks.iter().filter_map(Block::text).collect()
                    }
                    _ => String::new(),
                };
                synthetic(out, &stamp, &text);
            }
            "assistant" => {
                let usage = entry.message.as_ref().and_then(|m| m.usage.as_ref());
                let u = |f: fn(&MessageUsage) -> Option<u64>| usage.and_then(f).unwrap_or(0);
                self.turn_header(
                    out,
                    &stamp,
                    [
                        u(|u| u.input_tokens),
                        u(|u| u.output_tokens),
                        u(|u| u.cache_creation_input_tokens),
                        u(|u| u.cache_read_input_tokens),
                    ],
                );
                match entry.content() {
                    Some(Content::Blocks(blocks)) => {
                        for block in blocks {
                            self.assistant_block(out, block);
                        }
                    }
                    Some(Content::Text(s)) => text_line(out, s),
                    None => {}
                }
            }
            "user" => match entry.content() {
                Some(Content::Text(text)) => user_text(out, text, &stamp),
                Some(Content::Blocks(blocks)) => {
                    for block in blocks {
                        self.user_block(out, block, &stamp);
                    }
                }
                None => unshowable_user(out),
            },
            "system" => system_entry(out, entry, &stamp),
            other => unknown_entry(out, other),
        }
    }

    /// [`Self::entry`] from an entry's JSON text without building a `Value`; `Err` when
    /// the entry does not fit [`lite::Entry`] or holds thinking (nothing written then).
    // Long because it is the fast path of `entry` for every entry kind, field by field, on
    // the borrowed entry; its arms mirror `entry`'s, which reads easier side by side.
    fn raw(&mut self, out: &mut String, row: &[u8]) -> Result<(), ()> {
        let lite::Obj(entry) =
            serde_json::from_slice::<lite::Obj<lite::Entry>>(row).map_err(|_| ())?;
        let kind = entry.kind.as_deref().unwrap_or("");
        if kind == "system" {
            // Hook records and the memory pin: rendered from the whole entry.
            return Err(());
        }
        let message = entry.message.map(|m| m.0);
        let synthetic_error = entry.api_error.is_some_and(|f| f.get() == "true")
            || message
                .as_ref()
                .is_some_and(|m| m.model.as_deref() == Some(markers::SYNTHETIC_MODEL));
        let content = message.as_ref().and_then(|m| m.content.as_ref());
        if kind == "assistant"
            && !synthetic_error
            && let Some(lite::Content::Blocks(blocks)) = content
            && blocks
                .iter()
                .any(|b| matches!(b.kind.as_deref(), Some("thinking" | "redacted_thinking")))
        {
            return Err(());
        }
        let stamp = entry
            .timestamp
            .as_deref()
            .map(short_time)
            .unwrap_or_default();
        match kind {
            "assistant" if synthetic_error => {
                let mut text = String::new();
                if let Some(lite::Content::Blocks(blocks)) = content {
                    for b in blocks {
                        if b.kind.as_deref() == Some("text")
                            && let Some(t) = &b.text
                        {
                            text.push_str(t);
                        }
                    }
                }
                synthetic(out, &stamp, &text);
            }
            "assistant" => {
                let usage = message.as_ref().and_then(|m| m.usage.as_ref());
                let u =
                    |f: fn(&lite::Usage) -> Option<u64>| usage.and_then(|u| f(&u.0)).unwrap_or(0);
                self.turn_header(
                    out,
                    &stamp,
                    [
                        u(|u| u.input),
                        u(|u| u.output),
                        u(|u| u.cache_creation),
                        u(|u| u.cache_read),
                    ],
                );
                match content {
                    Some(lite::Content::Blocks(blocks)) => {
                        for b in blocks {
                            match b.kind.as_deref().unwrap_or("") {
                                "text" => text_line(out, b.text.as_deref().unwrap_or("")),
                                "tool_use" => {
                                    let name = b.name.as_deref().unwrap_or("?");
                                    let id = b.id.as_deref().unwrap_or("");
                                    self.tools.insert(id.to_owned(), name.to_owned());
                                    let summary = summarise_raw(name, b.input);
                                    tool_call(out, name, &summary);
                                }
                                "server_tool_use" => {
                                    let name = server_tool_name(b.name.as_deref().unwrap_or("?"));
                                    server_tool_call(out, name, &summarise_raw(name, b.input));
                                }
                                kind if kind.ends_with("_tool_result") => {
                                    let results = match &b.content {
                                        Some(lite::Content::Blocks(list)) => Some(list.len()),
                                        _ => None,
                                    };
                                    server_tool_result(out, kind, results);
                                }
                                other => unknown_block(out, other),
                            }
                        }
                    }
                    Some(lite::Content::Text(s)) => text_line(out, s),
                    _ => {}
                }
            }
            "user" => match content {
                Some(lite::Content::Text(text)) => user_text(out, text, &stamp),
                Some(lite::Content::Blocks(blocks)) => {
                    for b in blocks {
                        match b.kind.as_deref().unwrap_or("") {
                            "text" => user_text(out, b.text.as_deref().unwrap_or(""), &stamp),
                            "tool_result" => {
                                let text: std::borrow::Cow<'_, str> = match &b.content {
                                    Some(lite::Content::Text(s)) => s.as_ref().into(),
                                    Some(lite::Content::Blocks(parts)) => parts
                                        .iter()
                                        .filter_map(|p| p.text.as_deref())
                                        .collect::<Vec<_>>()
                                        .join("\n")
                                        .into(),
                                    _ => "".into(),
                                };
                                let error = b.is_error.is_some_and(|f| f.get() == "true");
                                let id = b.tool_use_id.as_deref().unwrap_or("");
                                self.tool_result(out, &text, error, id);
                            }
                            "image" => image(out),
                            other => unknown_block(out, other),
                        }
                    }
                }
                _ => unshowable_user(out),
            },
            other => unknown_entry(out, other),
        }
        Ok(())
    }

    fn turn_header(&mut self, out: &mut String, stamp: &str, [input, output, cw, cr]: [u64; 4]) {
        self.turn += 1;
        let turn = self.turn;
        // Wrapping: a corrupt count must not panic (release builds always wrapped).
        let context = input.wrapping_add(output).wrapping_add(cw).wrapping_add(cr);
        let _ = writeln!(
            out,
            "\n── 第 {turn} 轮 · 助手 {stamp} · 上下文 {}(输入 {input} 输出 {output} 缓存写 {cw} 缓存读 {cr})──",
            tokens(context)
        );
    }

    fn assistant_block(&mut self, out: &mut String, block: &Block) {
        match block {
            Block::Text(b) => text_line(out, b.text.as_deref().unwrap_or("")),
            Block::Thinking(_) | Block::RedactedThinking(_) => {
                let size = serde_json::to_string(block).map_or(0, |j| j.len());
                let _ = writeln!(out, "(思考,{size} 字节)");
            }
            Block::ToolUse(call) => {
                let name = call.name.as_deref().unwrap_or("?");
                let id = call.id.as_deref().unwrap_or("");
                self.tools.insert(id.to_owned(), name.to_owned());
                tool_call(
                    out,
                    name,
                    &summarise(name, call.input.as_ref().map(|input| input.raw())),
                );
            }
            Block::ServerToolUse(call) => {
                let name = server_tool_name(call.name.as_deref().unwrap_or("?"));
                server_tool_call(
                    out,
                    name,
                    &summarise(name, call.input.as_ref().map(|input| input.raw())),
                );
            }
            Block::ServerToolResult(result) => {
                let results = result
                    .content
                    .as_ref()
                    .and_then(|c| c.parse::<Vec<serde::de::IgnoredAny>>().ok())
                    .map(|list| list.len());
                server_tool_result(out, result.kind.as_deref().unwrap_or(""), results);
            }
            other => {
                let kind = other.type_name().unwrap_or_default();
                if kind.ends_with("_tool_result") {
                    server_tool_result(out, &kind, None);
                } else {
                    unknown_block(out, &kind);
                }
            }
        }
    }

    fn user_block(&self, out: &mut String, block: &Block, stamp: &str) {
        match block {
            Block::Text(b) => user_text(out, b.text.as_deref().unwrap_or(""), stamp),
            Block::ToolResult(result) => {
                let text = result_text(result.content.as_ref());
                let error = result.is_error == Some(true);
                let id = result.tool_use_id.as_deref().unwrap_or("");
                self.tool_result(out, &text, error, id);
            }
            Block::Media(media) if media.kind.as_deref() == Some("image") => image(out),
            other => unknown_block(out, &other.type_name().unwrap_or_default()),
        }
    }

    fn tool_result(&self, out: &mut String, text: &str, error: bool, id: &str) {
        let name = self.tools.get(id).map(String::as_str).unwrap_or("工具");
        if error && markers::is_denial_text(text) {
            let _ = writeln!(out, "  ✗ [被拒] {}", first_line(text));
            return;
        }
        if markers::is_interruption_text(text) || text == markers::INTERRUPTED_BODY {
            let _ = writeln!(out, "  ⚠ [中断] {}", first_line(text));
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
}

fn synthetic(out: &mut String, stamp: &str, text: &str) {
    let _ = writeln!(
        out,
        "⚠ [合成的 API 错误,不会喂回模型] {stamp} {}",
        text.trim()
    );
}

fn text_line(out: &mut String, text: &str) {
    let _ = writeln!(out, "{}", text.trim_end());
}

fn tool_call(out: &mut String, name: &str, summary: &str) {
    let _ = writeln!(out, "⏺ {name} {summary}");
}

/// A server tool's name as permission rules spell it (`web_search` → `WebSearch`).
fn server_tool_name(api_name: &str) -> &str {
    flower::transcript::tools::server_tool_rule_name(api_name).unwrap_or(api_name)
}

/// A call the API ran itself (web search, web fetch).
fn server_tool_call(out: &mut String, name: &str, summary: &str) {
    let _ = writeln!(out, "⏺ {name} {summary}(API 端执行)");
}

/// A server tool's result: how many search results, or that a page came back.
fn server_tool_result(out: &mut String, kind: &str, results: Option<usize>) {
    let _ = match (kind, results) {
        ("web_search_tool_result", Some(n)) => writeln!(out, "  ⎿ {n} 条搜索结果"),
        ("web_fetch_tool_result", _) => writeln!(out, "  ⎿ 网页已取回"),
        (_, _) => writeln!(out, "  ⎿ {kind}"),
    };
}

fn image(out: &mut String) {
    let _ = writeln!(out, "  [图片]");
}

fn unknown_block(out: &mut String, kind: &str) {
    let _ = writeln!(out, "[未知内容块:{kind}]");
}

fn unshowable_user(out: &mut String) {
    let _ = writeln!(out, "[无法显示的用户条目]");
}

/// `PreToolUse:Bash 的 hook 拦下了这次调用`: a hook record's headline in the person's
/// language (the entry's content is the transcript's English, kept for Claude Code). An
/// entry without `hookOutcome` (an older flower) keeps its content.
fn hook_headline(entry: &Entry, content: &str) -> String {
    let field = |f: &Option<String>| f.as_deref().unwrap_or("").to_string();
    let label = match (field(&entry.hook_event), field(&entry.hook_subject)) {
        (event, _) if event.is_empty() => return first_line(content),
        (event, subject) if subject.is_empty() => event,
        (event, subject) => format!("{event}:{subject}"),
    };
    match entry.hook_outcome.as_deref().unwrap_or("") {
        "blocked" => format!("{label} 的 hook 拦下了它"),
        "failed" => format!("{label} 的 hook 出错了"),
        "ran" => format!("{label} 的 hook 跑过了"),
        _ => first_line(content),
    }
}

/// One hook command of a hook record (`hookRuns`), each field as written: a field of
/// an unexpected type reads as absent.
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookRun {
    command: Option<Raw>,
    outcome: Option<Raw>,
    code: Option<Raw>,
    duration_ms: Option<Raw>,
    stdout: Option<Raw>,
    stderr: Option<Raw>,
}

/// A field of a record read leniently: its string, or "".
fn string_of(raw: &Option<Raw>) -> String {
    raw.as_ref()
        .and_then(|r| r.parse::<String>().ok())
        .unwrap_or_default()
}

/// A list kept as written, read leniently: its items (none if it is not a list).
fn items<T: serde::de::DeserializeOwned + Default>(raw: Option<&Raw>) -> Vec<T> {
    let Some(list) = raw.and_then(|r| r.parse::<Vec<Raw>>().ok()) else {
        return Vec::new();
    };
    list.iter()
        .map(|item| {
            let object = item.get().starts_with('{');
            object
                .then(|| item.parse::<T>().ok())
                .flatten()
                .unwrap_or_default()
        })
        .collect()
}

/// A `system` entry: what hooks did (each command, how it ended, what it said), the
/// memory a session began with, or any other kind as one line.
fn system_entry(out: &mut String, entry: &Entry, stamp: &str) {
    let subtype = entry.subtype.as_deref().unwrap_or("");
    let content = entry.content.as_deref().unwrap_or("");
    match subtype {
        markers::HOOK_SUBTYPE => {
            let _ = writeln!(out, "  ⚑ [hook {stamp}] {}", hook_headline(entry, content));
            for run in items::<HookRun>(entry.hook_runs.as_ref()) {
                let ended = match (string_of(&run.outcome).as_str(), &run.code) {
                    ("exit", Some(code)) => format!("退出码 {}", code.get()),
                    ("signal", Some(code)) => format!("信号 {}", code.get()),
                    ("timeout", _) => "超时".to_string(),
                    ("failed", Some(_)) => format!("没能运行:{}", string_of(&run.code)),
                    (other, _) => other.to_string(),
                };
                let ms = run
                    .duration_ms
                    .as_ref()
                    .and_then(|r| r.parse::<u64>().ok())
                    .unwrap_or(0);
                let _ = writeln!(
                    out,
                    "    `{}` · {ended} · {ms} ms",
                    cut(&string_of(&run.command), 120)
                );
                for (name, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
                    let text = string_of(text);
                    if !text.trim().is_empty() {
                        let _ = writeln!(out, "    {name}: {}", cut(&first_line(&text), 200));
                    }
                }
            }
        }
        markers::MEMORY_SUBTYPE => {
            let files = entry.memory_files.as_ref().map_or(0, Vec::len);
            let _ = writeln!(
                out,
                "  ⚑ [项目记忆] {files} 个文件,{} 字节,放在这条会话的系统提示里",
                content.len()
            );
        }
        markers::MCP_TOOLS_SUBTYPE => {
            let tools = entry
                .mcp_tools
                .as_ref()
                .and_then(|r| r.parse::<Vec<serde::de::IgnoredAny>>().ok())
                .map_or(0, |list| list.len());
            let _ = writeln!(
                out,
                "  ⚑ [MCP 工具] {tools} 个,这条会话一直提供这些(会话开始时列出)"
            );
            for failure in items::<McpFailure>(entry.mcp_failures.as_ref()) {
                let server = failure
                    .server
                    .as_ref()
                    .and_then(|r| r.parse::<String>().ok())
                    .unwrap_or_else(|| "?".into());
                let _ = writeln!(
                    out,
                    "    服务器 {server} 没有列出工具:{}",
                    cut(&first_line(&string_of(&failure.error)), 200)
                );
            }
        }
        other => {
            let _ = writeln!(out, "  ⚑ [system {other}] {}", first_line(content));
        }
    }
}

/// An MCP server that listed no tools (`mcpFailures`).
#[derive(Default, serde::Deserialize)]
struct McpFailure {
    server: Option<Raw>,
    error: Option<Raw>,
}

fn unknown_entry(out: &mut String, kind: &str) {
    let _ = writeln!(
        out,
        "[未知条目:type={}]",
        if kind.is_empty() { "?" } else { kind }
    );
}

fn user_text(out: &mut String, text: &str, stamp: &str) {
    if markers::is_interruption_text(text) {
        let _ = writeln!(out, "⚠ [中断] {}", text.trim());
    } else {
        let _ = writeln!(out, "\n── 用户 {stamp} ──\n{}", text.trim_end());
    }
}

/// A tool result's text, whether a string or a list of text blocks.
fn result_text(content: Option<&Content>) -> std::borrow::Cow<'_, str> {
    match content {
        Some(Content::Text(s)) => s.as_str().into(),
        Some(Content::Blocks(parts)) => parts
            .iter()
            .filter_map(part_text)
            .collect::<Vec<_>>()
            .join("\n")
            .into(),
        None => "".into(),
    }
}

/// A part of a tool result's content: its `text`, whatever its type says.
fn part_text(part: &Block) -> Option<std::borrow::Cow<'_, str>> {
    #[derive(serde::Deserialize)]
    struct Text {
        text: Option<Raw>,
    }
    match part {
        Block::Text(b) => b.text.as_deref().map(Into::into),
        Block::Unknown(raw) if raw.get().starts_with('{') => {
            let text = raw.parse::<Text>().ok()?.text?;
            text.parse::<String>().ok().map(Into::into)
        }
        _ => None,
    }
}

/// The one field that says what a call does, else the input as compact JSON; cut.
/// Only the one field is read, unless it is missing or not a string.
fn summarise(name: &str, input: Option<&Raw>) -> String {
    let field = summary_field(name);
    let found = |json: &str| {
        lite::field(json, field)
            .ok()
            .flatten()
            .map(|t| t.into_owned())
    };
    let text = match input {
        None => "null".to_string(),
        Some(raw) => found(raw.get()).unwrap_or_else(|| {
            // Odd JSON (a repeated key) reads as serde_json reads it.
            let json = compact(raw.get());
            found(&json).unwrap_or(json)
        }),
    };
    cut(&text.replace('\n', "⏎"), SUMMARY_CHARS)
}

/// [`summarise`] from the input's JSON text as the fast path borrows it.
fn summarise_raw(name: &str, input: Option<&RawValue>) -> String {
    let input = input.and_then(|raw| Raw::from_text(raw.get().to_string()).ok());
    summarise(name, input.as_ref())
}

/// JSON text as serde_json writes it (compact, a repeated key once).
fn compact(json: &str) -> String {
    if flower::model::canonical::is_canonical(json) {
        return json.to_string();
    }
    // A tree only to re-write odd JSON (spaces, repeated keys), as before.
    serde_json::from_str::<serde_json::Value>(json)
        .map_or_else(|_| json.to_string(), |v| v.to_string())
}

/// The input field that names a call's target ("" when there is none).
fn summary_field(name: &str) -> &'static str {
    // flower's tools from their one description; Claude Code's others (imported
    // transcripts) by the field that names their target.
    match flower::transcript::tools::info_of(name) {
        Some(info) => info.summary_field,
        None => match name {
            "MultiEdit" | "NotebookEdit" => "file_path",
            "AskUserQuestion" => "question",
            "WebFetch" => "url",
            "WebSearch" => "query",
            _ => "",
        },
    }
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

/// Entries `range` of a session as `flower show` prints them (`flower serve`'s pages):
/// the entries before it go through the renderer too, so that turn numbers and tool
/// names are those of the whole transcript, but their text is dropped. The number of
/// entries, 0 when the session is not stored.
pub fn transcript_page(
    run: &Run,
    key: &SessionKey,
    range: std::ops::Range<usize>,
) -> Result<(usize, String), InspectError> {
    let mut out = String::new();
    let mut scratch = String::new();
    let mut r = Renderer::default();
    let mut at = 0;
    let mut bad = false;
    let count = run.for_each_raw(key, |row| {
        let sink = if range.contains(&at) {
            &mut out
        } else {
            scratch.clear();
            &mut scratch
        };
        // Past the page only the count is wanted.
        if at < range.end {
            bad = bad || r.row(sink, row).is_err();
        }
        at += 1;
    })?;
    if bad {
        // A row that is not JSON: the usual load, whose error names it.
        out.clear();
        let entries = run.load(key)?.unwrap_or_default();
        let mut r = Renderer::default();
        for (i, entry) in entries.iter().enumerate() {
            let sink = if range.contains(&i) {
                &mut out
            } else {
                scratch.clear();
                &mut scratch
            };
            r.entry(sink, entry);
        }
        return Ok((entries.len(), out));
    }
    Ok((count, out))
}

/// A tool call's input as `flower show` summarises it (`flower serve`'s current call).
pub fn call_summary(name: &str, input: Option<&Raw>) -> String {
    summarise(name, input)
}

/// The transcript of a session as `flower show` prints it (for the report).
pub fn transcript_text(run: &Run, session_id: &str) -> String {
    let mut out = String::new();
    let key = run.key(session_id);
    match render_raw(run, &key, &mut out) {
        Ok(0) => out.push_str("[会话已不在 sessions.db 里]\n"),
        Ok(_) => {}
        Err(()) => {
            out.clear();
            match run.load(&key) {
                Ok(Some(entries)) => render(&mut out, &entries),
                Ok(None) => out.push_str("[会话已不在 sessions.db 里]\n"),
                Err(e) => {
                    let _ = writeln!(out, "[读不出:{e}]");
                }
            }
        }
    }
    out
}

mod lite;

#[cfg(test)]
mod tests;

/// What the heading of a sub-agent's transcript says besides its name: its task, its
/// time, and the sub-agents it ran alongside (` · 第 1 件 · 01:52:41 → 01:52:44 · 同时:
/// agent-task_2、agent-task_3`).
fn subagent_heading(
    span: &flower::inspect::SubagentSpan,
    all: &[flower::inspect::SubagentSpan],
) -> String {
    let mut text = String::new();
    if let Some(task) = &span.description {
        let _ = write!(text, " · {task}");
    }
    if let (Some(start), Some(end)) = (&span.started_at, &span.ended_at) {
        let _ = write!(text, " · {} → {}", short_time(start), short_time(end));
    }
    if span.concurrent() {
        let names = super::log::overlapped_names(span, all);
        let _ = write!(text, " · 同时:{}", names.join("、"));
    }
    text
}
