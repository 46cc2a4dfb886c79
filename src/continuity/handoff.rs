//! 换代 (generation handoff): when a step's main session nears the end of its context
//! window, it writes a handoff document and a new session (the successor) takes the
//! step over from that document and the frozen notes. Not compaction: the document is a
//! file a person can read and edit (`notes/交接/<step>-<generation>.md`), so what was
//! dropped is visible, and the context falls back instead of climbing to the wall.
//!
//! This module holds the pieces with no I/O policy of their own: the window table and
//! the threshold (with their validation), the document's fixed sections and its gate,
//! the fixed prompts, the mechanical fallback document (written without any model call
//! when the window was hit anyway), and the generation count read from the manifest.
//! The runtime drives the handoff with them.

use crate::continuity::notes;
use crate::transcript::{Block, Entry, Kind, Raw, ToolUseBlock};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The window of current Claude models, tokens.
pub const DEFAULT_WINDOW: u64 = 200_000;
/// The window with the 1M-context option (a model name ending in `[1m]`).
pub const WINDOW_1M: u64 = 1_000_000;
/// The default threshold: this share of the window, percent.
pub const DEFAULT_PERCENT: f64 = 60.0;
/// Where the documents live, under `notes/`.
pub const HANDOFF_DIR: &str = "交接";
/// How often the retiring session is asked to write the document: once, then at most
/// twice again; after that the mechanical fallback.
pub const MAX_ASKS: u32 = 3;
/// Turn limit of one ask (writing one file needs two or three).
pub const ASK_TURNS: u32 = 8;

/// The document's fixed `## ` sections, in order: goal and what "done" means; done so
/// far, with evidence; in progress; decisions and why; dead ends not to retry; next
/// steps; key files. Complete = every one present and non-empty.
pub const SECTIONS: [&str; 7] = [
    "目标与完成标准",
    "已完成与证据",
    "进行中",
    "决定与理由",
    "死路",
    "下一步",
    "关键文件",
];

/// The first line of a mechanical document's note, so that a reader (and a test) can
/// tell it from one the model wrote.
pub const MECHANICAL_MARK: &str = "> 机械交接";

/// The context window of a model, tokens: 1M for a model name with the 1M-context
/// option (`…[1m]`, Claude Code's spelling), else 200K.
pub fn context_window(model: &str) -> u64 {
    if model.trim().to_ascii_lowercase().ends_with("[1m]") {
        WINDOW_1M
    } else {
        DEFAULT_WINDOW
    }
}

/// A bad handoff setting. Its text is shown to the user as is.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandoffError {
    #[error("换代阈值 {value:?} 不行:{why}(写 token 数,如 120000 或 120K;或窗口的百分比,如 60%)")]
    BadThreshold { value: String, why: String },
    #[error("上下文窗口 {value:?} 不行:{why}(写 token 数,如 200000 或 200K)")]
    BadWindow { value: String, why: String },
    #[error("上下文窗口({window} token)比换代阈值({threshold} token)还小")]
    ThresholdAboveWindow { threshold: u64, window: u64 },
}

/// When a session hands off: a token count, or a percentage of the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Tokens(u64),
    Percent(f64),
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold::Percent(DEFAULT_PERCENT)
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Tokens(n) => write!(f, "{n}"),
            Threshold::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A token count: digits, optionally with a `K` (thousand) or `M` (million) suffix and
/// a decimal point (`120K`, `1.5M`). `None` when it is not one.
fn parse_tokens(text: &str) -> Option<u64> {
    let t = text.trim();
    let (number, scale) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1_000.0),
        'm' | 'M' => (&t[..t.len() - 1], 1_000_000.0),
        _ => (t, 1.0),
    };
    let number = number.trim();
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if scale == 1.0 {
        return number.parse::<u64>().ok();
    }
    let value = number.parse::<f64>().ok()? * scale;
    (value.is_finite() && value < u64::MAX as f64).then_some(value.round() as u64)
}

impl FromStr for Threshold {
    type Err = HandoffError;

    /// `120000`, `120K`, `1.5M` (tokens) or `60%` (of the window). Zero, a percentage
    /// above 100 and anything else are errors.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| HandoffError::BadThreshold {
            value: value.to_string(),
            why: why.to_string(),
        };
        let t = value.trim();
        if let Some(percent) = t.strip_suffix('%') {
            let p: f64 = percent.trim().parse().map_err(|_| bad("% 前面不是数"))?;
            if !p.is_finite() || p <= 0.0 {
                return Err(bad("要大于 0%"));
            }
            if p > 100.0 {
                return Err(bad("不能超过窗口的 100%"));
            }
            return Ok(Threshold::Percent(p));
        }
        match parse_tokens(t) {
            Some(0) => Err(bad("要大于 0 token")),
            Some(n) => Ok(Threshold::Tokens(n)),
            None => Err(bad("既不是 token 数也不是百分比")),
        }
    }
}

impl Threshold {
    /// The threshold in tokens for a window; an error when it does not fit in it.
    pub fn resolve(self, window: u64) -> Result<u64, HandoffError> {
        let tokens = match self {
            Threshold::Tokens(n) => n,
            Threshold::Percent(p) => share(window, p),
        };
        if tokens > window {
            return Err(HandoffError::ThresholdAboveWindow {
                threshold: tokens,
                window,
            });
        }
        Ok(tokens)
    }
}

/// Parses a context window (`FLOWER_CONTEXT_WINDOW`): a token count above 0.
pub fn parse_window(value: &str) -> Result<u64, HandoffError> {
    let bad = |why: &str| HandoffError::BadWindow {
        value: value.to_string(),
        why: why.to_string(),
    };
    match parse_tokens(value) {
        Some(0) => Err(bad("要大于 0 token")),
        Some(n) => Ok(n),
        None => Err(bad("不是 token 数")),
    }
}

/// The handoff knob of [`RuntimeOptions`](super::runtime::RuntimeOptions). Default:
/// on, the model's window from [`context_window`], threshold 60 %.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffOptions {
    /// Whether step sessions hand off at all.
    pub enabled: bool,
    /// The context window, tokens; `None` takes it from the model table.
    pub window: Option<u64>,
    pub at: Threshold,
}

impl Default for HandoffOptions {
    fn default() -> Self {
        HandoffOptions {
            enabled: true,
            window: None,
            at: Threshold::default(),
        }
    }
}

impl HandoffOptions {
    /// The window for `model`: the override, else the table.
    pub fn window_for(&self, model: &str) -> u64 {
        self.window.unwrap_or_else(|| context_window(model))
    }

    /// The threshold in tokens for `model`, checked against its window.
    pub fn limit_for(&self, model: &str) -> Result<u64, HandoffError> {
        self.at.resolve(self.window_for(model))
    }

    /// The run's window and threshold for its default model, checked: what the
    /// settings resolve once ([`crate::settings::Settings::run_context`]), the runtime
    /// hands off at and every manifest row records.
    pub fn context_for(&self, model: &str) -> Result<RunContext, HandoffError> {
        Ok(RunContext {
            window: self.window_for(model),
            handoff_threshold: match self.enabled {
                true => Some(self.limit_for(model)?),
                false => None,
            },
        })
    }

    /// The threshold of an agent whose own model may differ from the run's: its
    /// threshold when it fits in that model's window, else the default share of that
    /// window (an absolute `--handoff-at` checked against the default model's larger
    /// window cannot refuse a sub-step's model once the run is under way).
    pub fn limit_for_agent(&self, model: &str) -> u64 {
        self.limit_for(model)
            .unwrap_or_else(|_| default_threshold(self.window_for(model)))
    }
}

/// The run's context window and handoff threshold (see
/// [`super::manifest::RunContext`], which records it in every row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunContext {
    /// Tokens.
    pub window: u64,
    /// Tokens; `None` when the run does not hand off.
    pub handoff_threshold: Option<u64>,
}

impl RunContext {
    /// What a run recorded nothing about had (a row of an older flower): `model`'s
    /// window from the table and the default threshold.
    pub fn default_for(model: &str) -> RunContext {
        let window = context_window(model);
        RunContext {
            window,
            handoff_threshold: Some(default_threshold(window)),
        }
    }
}

/// The default threshold ([`DEFAULT_PERCENT`] of `window`).
pub fn default_threshold(window: u64) -> u64 {
    share(window, DEFAULT_PERCENT)
}

/// `percent` of `window`, tokens (at least one).
fn share(window: u64, percent: f64) -> u64 {
    ((window as f64) * percent / 100.0).floor().max(1.0) as u64
}

/// A step name as a file-name part: path separators and control characters become `-`.
fn file_part(step: &str) -> String {
    step.chars()
        .map(|c| {
            if c == '/' || c == '\\' || c.is_control() {
                '-'
            } else {
                c
            }
        })
        .collect()
}

/// `notes/交接/<step>-<generation>.md`, relative to the workspace: the document the
/// session of `generation` writes when it retires.
pub fn doc_rel(step: &str, generation: u32) -> String {
    format!(
        "{}/{HANDOFF_DIR}/{}-{generation}.md",
        notes::NOTES_DIR,
        file_part(step)
    )
}

/// [`doc_rel`] under `workspace`.
pub fn doc_path(workspace: &Path, step: &str, generation: u32) -> PathBuf {
    workspace.join(doc_rel(step, generation))
}

/// `notes/交接/` under `workspace` (archived by `/new` with the other notes).
pub fn handoff_dir(workspace: &Path) -> PathBuf {
    workspace.join(notes::NOTES_DIR).join(HANDOFF_DIR)
}

/// The sections of [`SECTIONS`] that are missing or empty in `text`, in order.
pub fn missing_sections(text: &str) -> Vec<&'static str> {
    let found = notes::sections(text);
    SECTIONS
        .iter()
        .copied()
        .filter(|wanted| {
            !found
                .iter()
                .any(|(heading, body)| heading == wanted && !body.trim().is_empty())
        })
        .collect()
}

/// The gate: every section present and non-empty.
pub fn doc_complete(text: &str) -> bool {
    missing_sections(text).is_empty()
}

fn section_list() -> String {
    SECTIONS
        .iter()
        .map(|s| format!("## {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Said to the retiring session: write the document, then stop.
pub fn handoff_prompt(rel: &str, generation: u32) -> String {
    format!(
        "上下文快满了,这一步要换代:你是第 {generation} 代,马上会有一条新会话接手,它看不到这段对话,只能看到你写的交接书。\n\
         现在停下手上的活,用 Write 把交接书写到 {rel},只写这一个文件。它必须有下面七段,每段一个二级标题,原样照抄,都不能空:\n\n{}\n\n\
         - 目标与完成标准:这一步要做成什么,怎样算做完。\n\
         - 已完成与证据:做完了什么,每件附上证据(文件、命令及结果)。\n\
         - 进行中:手上正做到一半的事,停在哪里。\n\
         - 决定与理由:做过的关键决定和为什么。\n\
         - 死路:试过但走不通、别再试的路,各自为什么不行。\n\
         - 下一步:接手的人应该先做什么,按顺序。\n\
         - 关键文件:最要紧的文件路径,每个一句话说它是什么。\n\n\
         写完就结束,不要再做别的。",
        section_list()
    )
}

/// Said again when the document was not there or not complete.
pub fn retry_prompt(rel: &str, missing: &[&str]) -> String {
    let missing = if missing.is_empty() {
        "文件不存在或读不出来".to_string()
    } else {
        format!(
            "缺少或空着的段:{}",
            missing
                .iter()
                .map(|s| format!("## {s}"))
                .collect::<Vec<_>>()
                .join("、")
        )
    };
    format!(
        "交接书 {rel} 还不完整({missing})。把它写完整:七段都要有,标题原样照抄,每段都不能空:\n\n{}\n\n写完就结束。",
        section_list()
    )
}

/// The successor's first prompt: it takes over from `generation - 1`, the document in
/// full, where the frozen notes are, and to look at the workspace before going on.
pub fn successor_prompt(generation: u32, rel: &str, doc: &str) -> String {
    format!(
        "你接手这一步,是第 {generation} 代:第 {} 代的上下文快满了,它把交接书写在 {rel},全文如下。\n\n\
         <交接书>\n{}\n</交接书>\n\n\
         需求确认书在 notes/需求.md,判定清单在 notes/目标.md。\n\
         先检查工作区里实际落盘的东西(交接书可能漏写或写错,以工作区为准),再从交接书的「下一步」接着做,不要重头来过。",
        generation.saturating_sub(1),
        doc.trim_end()
    )
}

/// What the mechanical document is made of: what flower has without asking a model.
pub struct MechanicalInput<'a> {
    pub step: &'a str,
    /// The retiring session's generation.
    pub generation: u32,
    pub session_id: &'a str,
    /// Why no model was asked (the window was hit, …).
    pub reason: &'a str,
    /// What this step attempt was told.
    pub prompt: &'a str,
    pub brief: Option<String>,
    pub goal: Option<String>,
    /// The retiring session's raw transcript.
    pub entries: &'a [Entry],
    /// Its sub-agents' transcripts.
    pub subagents: &'a [Vec<Entry>],
}

/// Keeps at most `max` characters of `text`, saying how much was cut.
fn clip(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.trim().to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{}\n…(后面还有 {} 字,略)", kept.trim_end(), count - max)
}

/// An assistant entry the model wrote (not a synthetic API error line).
fn is_assistant(entry: &Entry) -> bool {
    entry.kind() == Kind::Assistant && entry.is_api_error_message != Some(true)
}

/// The last `n` non-empty assistant texts of a transcript, oldest first.
fn last_texts(entries: &[Entry], n: usize) -> Vec<String> {
    let mut texts: Vec<String> = entries
        .iter()
        .rev()
        .filter(|e| is_assistant(e))
        .map(|e| {
            e.blocks()
                .iter()
                .filter_map(Block::text)
                .collect::<String>()
        })
        .filter(|t| !t.trim().is_empty())
        .take(n)
        .collect();
    texts.reverse();
    texts
}

/// The file a tool call names: its input's `file_path`, else its `path`.
fn path_of(call: &ToolUseBlock) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Input {
        file_path: Option<Raw>,
        path: Option<Raw>,
    }
    let input = call.input.as_ref()?;
    if !input.text().starts_with('{') {
        return None;
    }
    let input = input.parse::<Input>().ok()?;
    input.file_path.or(input.path)?.parse::<String>().ok()
}

/// The files the tools of these transcripts touched, first use first, with the tools.
fn touched_files<'a>(transcripts: impl Iterator<Item = &'a [Entry]>) -> Vec<(String, Vec<String>)> {
    let mut files: Vec<(String, Vec<String>)> = Vec::new();
    for entries in transcripts {
        for entry in entries.iter().filter(|e| is_assistant(e)) {
            for call in entry.tool_uses() {
                let Some(path) = path_of(call) else {
                    continue;
                };
                let name = call.name.clone().unwrap_or_default();
                match files.iter_mut().find(|(p, _)| *p == path) {
                    Some((_, tools)) if !tools.contains(&name) => tools.push(name),
                    Some(_) => {}
                    None => files.push((path, vec![name])),
                }
            }
        }
    }
    files
}

/// The mechanical handoff document: every section filled from what is on disk, marked
/// as mechanical. No model is asked (the session that would be asked is over-long).
pub fn mechanical_doc(input: &MechanicalInput<'_>) -> String {
    let MechanicalInput {
        step,
        generation,
        session_id,
        reason,
        ..
    } = *input;
    let mut doc = format!(
        "# 交接书:{step} 第 {generation} 代(机械生成)\n\n\
         {MECHANICAL_MARK}:{reason}。没有再问那条会话,这份交接书是 flower 从现有材料直接拼出来的,没有经过模型总结。\
         原会话 {session_id} 完整保存在 runs/sessions.db(`flower store` 可查)。\n\n"
    );
    doc.push_str(&format!(
        "## {}\n\n这一步这次被交代的话:\n\n{}\n\n",
        SECTIONS[0],
        clip(input.prompt, 6_000)
    ));
    match &input.brief {
        Some(brief) => doc.push_str(&format!("notes/需求.md:\n\n{}\n\n", clip(brief, 6_000))),
        None => doc.push_str("notes/需求.md:(没有)\n\n"),
    }
    match &input.goal {
        Some(goal) => doc.push_str(&format!(
            "notes/目标.md(判定清单,全部达成才算做完):\n\n{}\n\n",
            clip(goal, 6_000)
        )),
        None => doc.push_str("notes/目标.md:(没有)\n\n"),
    }
    let texts = last_texts(input.entries, 5);
    doc.push_str(&format!("## {}\n\n", SECTIONS[1]));
    if texts.is_empty() {
        doc.push_str("上一代没有留下文字说明;以工作区里实际落盘的东西为准。\n\n");
    } else {
        doc.push_str("上一代最后说的几段话(旧的在前):\n\n");
        for text in &texts[..texts.len() - 1] {
            doc.push_str(&format!("---\n{}\n\n", clip(text, 2_000)));
        }
        doc.push_str("以工作区里实际落盘的东西为准。\n\n");
    }
    doc.push_str(&format!("## {}\n\n", SECTIONS[2]));
    match texts.last() {
        Some(last) => doc.push_str(&format!("上一代的最后一段话:\n\n{}\n\n", clip(last, 3_000))),
        None => doc.push_str("不知道:上一代没有留下文字。先看工作区。\n\n"),
    }
    doc.push_str(&format!(
        "## {}\n\n机械交接没有整理决定;需要时查原会话 {session_id} 的 transcript。\n\n",
        SECTIONS[3]
    ));
    doc.push_str(&format!(
        "## {}\n\n机械交接没有整理死路;动手前先看原会话 {session_id} 的 transcript 里失败过什么。\n\n",
        SECTIONS[4]
    ));
    doc.push_str(&format!(
        "## {}\n\n1. 检查工作区和 notes/,弄清已经做到哪里。\n2. 对照 notes/目标.md 找出还没做到的条目。\n3. 从那里接着做,不要重头来过。\n\n",
        SECTIONS[5]
    ));
    doc.push_str(&format!("## {}\n\n", SECTIONS[6]));
    let files = touched_files(
        std::iter::once(input.entries).chain(input.subagents.iter().map(Vec::as_slice)),
    );
    doc.push_str("- notes/需求.md、notes/目标.md:需求确认书和判定清单\n");
    for (path, tools) in files.iter().take(60) {
        doc.push_str(&format!("- {path}({})\n", tools.join("、")));
    }
    if files.len() > 60 {
        doc.push_str(&format!("- …还有 {} 个文件\n", files.len() - 60));
    }
    doc
}

/// The generation of a session: 1, plus one per predecessor that the manifest's rows
/// record, given as each row's `(session_id, retired[])` (`retired[]` lists an attempt's
/// predecessors, oldest first, before its `session_id`). Chains across rows (several
/// processes) are followed.
pub fn generation_of<'a>(
    chains: impl IntoIterator<Item = (&'a str, &'a [String])>,
    session_id: &str,
) -> u32 {
    let mut predecessor: HashMap<&str, &str> = HashMap::new();
    for (current, retired) in chains {
        if retired.is_empty() {
            continue;
        }
        let chain: Vec<&str> = retired
            .iter()
            .map(String::as_str)
            .chain([current])
            .collect();
        for pair in chain.windows(2) {
            if pair[0] != pair[1] {
                predecessor.insert(pair[1], pair[0]);
            }
        }
    }
    let mut generation = 1;
    let mut seen = HashSet::from([session_id]);
    let mut current = session_id;
    while let Some(&before) = predecessor.get(current) {
        if !seen.insert(before) {
            break;
        }
        generation += 1;
        current = before;
    }
    generation
}
