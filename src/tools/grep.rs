//! The `Grep` tool: ripgrep's search (its own crates) over the workspace.
//!
//! Output follows ripgrep's: `path:line:text` for matches, `path-line-text` for context
//! lines, `--` between groups. It is capped (head_limit, and a character budget that
//! stops the search early) so a broad pattern cannot flood the context or memory.

use super::input::{self, Field};
use super::names;
use super::walk::{Newest, walker};
use super::{Tool, ToolContext, ToolOutput, paths};
use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use serde::Deserialize;
use serde_json::json;
use std::io;
use std::path::Path;
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// The result stays under this many characters; the search stops when it is reached.
pub const MAX_OUTPUT_CHARS: usize = 30_000;
/// files_with_matches keeps at most this many paths (newest first); the output cap
/// shows fewer anyway.
const MAX_LISTED_FILES: usize = 5000;
/// Longer matching lines are cut (minified files).
pub const MAX_LINE_CHARS: usize = 1000;
/// A file is searched with at most this much buffer (a giant line or a multiline
/// search of a giant file is skipped instead of exhausting memory).
const HEAP_LIMIT: usize = 64 << 20;

pub struct Grep;

const DESCRIPTION: &str = "A powerful search tool built on ripgrep

  Usage:
  - ALWAYS use Grep for search tasks. NEVER invoke `grep` or `rg` as a Bash command. The Grep \
tool has been optimized for correct permissions and access.
  - Supports full regex syntax (e.g., \"log.*Error\", \"function\\\\s+\\\\w+\")
  - Filter files with glob parameter (e.g., \"*.js\", \"**/*.tsx\") or type parameter (e.g., \
\"js\", \"py\", \"rust\")
  - Output modes: \"content\" shows matching lines, \"files_with_matches\" shows only file paths \
(default, newest first), \"count\" shows match counts
  - Honours .gitignore; hidden files are searched, the .git directory and binary files are not
  - Pattern syntax: Uses ripgrep (not grep) - literal braces need escaping (use `interface\\\\{\\\\}` \
to find `interface{}` in Go code)
  - Multiline matching: By default patterns match within single lines only. For cross-line \
patterns like `struct \\\\{[\\\\s\\\\S]*?field`, use `multiline: true`
  - Output is capped at about 30000 characters; narrow the search or use head_limit if it is cut
";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Files,
    Content,
    Count,
}

struct Options {
    pattern: String,
    glob: Option<String>,
    file_type: Option<String>,
    mode: Mode,
    case_insensitive: bool,
    line_numbers: bool,
    after: usize,
    before: usize,
    head_limit: Option<usize>,
    multiline: bool,
}

impl Tool for Grep {
    fn info(&self) -> &'static names::ToolInfo {
        &names::GREP_INFO
    }

    fn description(&self) -> String {
        DESCRIPTION.to_string()
    }

    fn input_schema(&self) -> Raw {
        Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "The regular expression pattern to search for in file contents"
                },
                "path": {
                    "type": "string",
                    "description": "File or directory to search in (rg PATH). Defaults to the workspace root."
                },
                "glob": {
                    "type": "string",
                    "description": "Glob pattern to filter files (e.g. \"*.js\", \"*.{ts,tsx}\") - maps to rg --glob"
                },
                "output_mode": {
                    "type": "string",
                    "enum": ["content", "files_with_matches", "count"],
                    "description": "Output mode: \"content\" shows matching lines (supports -A/-B/-C context, -n line numbers, head_limit), \"files_with_matches\" shows file paths (supports head_limit), \"count\" shows match counts (supports head_limit). Defaults to \"files_with_matches\"."
                },
                "-B": {
                    "type": "number",
                    "description": "Number of lines to show before each match (rg -B). Requires output_mode: \"content\", ignored otherwise."
                },
                "-A": {
                    "type": "number",
                    "description": "Number of lines to show after each match (rg -A). Requires output_mode: \"content\", ignored otherwise."
                },
                "-C": {
                    "type": "number",
                    "description": "Number of lines to show before and after each match (rg -C). Requires output_mode: \"content\", ignored otherwise."
                },
                "-n": {
                    "type": "boolean",
                    "description": "Show line numbers in output (rg -n). Requires output_mode: \"content\", ignored otherwise. Defaults to true."
                },
                "-i": {
                    "type": "boolean",
                    "description": "Case insensitive search (rg -i)"
                },
                "type": {
                    "type": "string",
                    "description": "File type to search (rg --type). Common types: js, py, rust, go, java, etc. More efficient than include for standard file types."
                },
                "head_limit": {
                    "type": "number",
                    "description": "Limit output to first N lines/entries, equivalent to \"| head -N\". Works across all output modes: content (limits output lines), files_with_matches (limits file paths), count (limits count entries). When unspecified, shows all results (up to the output cap)."
                },
                "multiline": {
                    "type": "boolean",
                    "description": "Enable multiline mode where . matches newlines and patterns can span lines (rg -U --multiline-dotall). Default: false."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        }))
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let (opts, path) = match parse(input) {
                Ok(o) => o,
                Err(e) => return e,
            };
            let root = match paths::resolve_for_read(ctx, path.as_deref().unwrap_or(".")) {
                Ok(r) => r,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            let cancel = ctx.cancel.clone();
            input::blocking(names::GREP, move || search(&root, &opts, &cancel)).await
        })
    }
}

/// Grep's input (the flag-like fields named as rg's flags).
#[derive(Deserialize)]
struct GrepInput {
    #[serde(default)]
    pattern: Field<String>,
    #[serde(default)]
    path: Field<String>,
    #[serde(default)]
    output_mode: Field<String>,
    #[serde(default, rename = "-C")]
    context: Field<u64>,
    #[serde(default, rename = "-A")]
    after: Field<u64>,
    #[serde(default, rename = "-B")]
    before: Field<u64>,
    #[serde(default)]
    glob: Field<String>,
    #[serde(default, rename = "type")]
    file_type: Field<String>,
    #[serde(default, rename = "-i")]
    case_insensitive: Field<bool>,
    #[serde(default, rename = "-n")]
    line_numbers: Field<bool>,
    #[serde(default)]
    head_limit: Field<u64>,
    #[serde(default)]
    multiline: Field<bool>,
}

fn parse(input: &ToolInput) -> Result<(Options, Option<String>), ToolOutput> {
    const T: &str = names::GREP;
    let fields: GrepInput = input::parse(T, input)?;
    let pattern = fields.pattern.required(T, "pattern")?;
    let path = fields
        .path
        .optional(T, "path")?
        .filter(|p| !p.is_empty() && p != "undefined" && p != "null");
    let mode = match fields.output_mode.optional(T, "output_mode")?.as_deref() {
        None | Some("files_with_matches") => Mode::Files,
        Some("content") => Mode::Content,
        Some("count") => Mode::Count,
        Some(other) => {
            return Err(ToolOutput::error(format!(
                "Invalid input for Grep: output_mode must be \"content\", \"files_with_matches\" \
                 or \"count\", got {other:?}."
            )));
        }
    };
    let ctx = fields.context.optional(T, "-C")?;
    let num = |field: Field<u64>, name: &str| -> Result<usize, ToolOutput> {
        Ok(field.optional(T, name)?.or(ctx).unwrap_or(0).min(10_000) as usize)
    };
    let opts = Options {
        pattern,
        glob: fields
            .glob
            .optional(T, "glob")?
            .filter(|g| !g.trim().is_empty()),
        file_type: fields
            .file_type
            .optional(T, "type")?
            .filter(|t| !t.trim().is_empty()),
        mode,
        case_insensitive: fields.case_insensitive.optional(T, "-i")?.unwrap_or(false),
        line_numbers: fields.line_numbers.optional(T, "-n")?.unwrap_or(true),
        after: num(fields.after, "-A")?,
        before: num(fields.before, "-B")?,
        head_limit: fields
            .head_limit
            .optional(T, "head_limit")?
            .filter(|n| *n > 0)
            .map(|n| n as usize),
        multiline: fields.multiline.optional(T, "multiline")?.unwrap_or(false),
    };
    Ok((opts, path))
}

/// Output lines, bounded by head_limit and the character budget.
struct Collector {
    lines: Vec<String>,
    chars: usize,
    head_limit: Option<usize>,
    /// Output was dropped (a limit was reached).
    cut_by_head: bool,
    cut_by_size: bool,
}

impl Collector {
    fn full(&self) -> bool {
        self.cut_by_head || self.cut_by_size
    }

    /// Adds a line unless a limit is reached; returns whether more may be added.
    fn push(&mut self, line: String) -> bool {
        if self.full() {
            return false;
        }
        if self.head_limit.is_some_and(|h| self.lines.len() >= h) {
            self.cut_by_head = true;
            return false;
        }
        if self.chars + line.len() + 1 > MAX_OUTPUT_CHARS && !self.lines.is_empty() {
            self.cut_by_size = true;
            return false;
        }
        self.chars += line.len() + 1;
        self.lines.push(line);
        true
    }
}

fn search(root: &Path, o: &Options, cancel: &CancellationToken) -> ToolOutput {
    let single_file = match std::fs::metadata(root) {
        Err(_) => return ToolOutput::error(format!("Path does not exist: {}", root.display())),
        Ok(meta) if !meta.is_file() && !meta.is_dir() => {
            return ToolOutput::error(format!(
                "{} is not a regular file or directory (a FIFO, socket or device).",
                root.display()
            ));
        }
        Ok(meta) => meta.is_file(),
    };
    let matcher = match build_matcher(o) {
        Ok(m) => m,
        Err(error) => return error,
    };
    let walker = match build_walker(root, o, single_file) {
        Ok(w) => w,
        Err(error) => return error,
    };
    let mut found = Found::new(o.head_limit);
    if !walk(walker, &matcher, o, single_file, cancel, &mut found) {
        return ToolOutput::error("Grep was interrupted.");
    }
    match o.mode {
        Mode::Files => found.files_report(),
        Mode::Count | Mode::Content => found.lines_report(o.mode),
    }
}

fn build_matcher(o: &Options) -> Result<grep_regex::RegexMatcher, ToolOutput> {
    let mut mb = RegexMatcherBuilder::new();
    mb.case_insensitive(o.case_insensitive).multi_line(true);
    if o.multiline {
        mb.dot_matches_new_line(true);
    } else {
        mb.line_terminator(Some(b'\n'));
    }
    mb.build(&o.pattern)
        .map_err(|e| ToolOutput::error(format!("Invalid regex {:?}: {e}", o.pattern)))
}

/// The walk over `root` with the file-type and glob filters of `o`.
fn build_walker(
    root: &Path,
    o: &Options,
    single_file: bool,
) -> Result<ignore::WalkBuilder, ToolOutput> {
    let mut wb = walker(root);
    wb.sort_by_file_name(|a, b| a.cmp(b));
    if let Some(t) = &o.file_type {
        let mut tb = TypesBuilder::new();
        tb.add_defaults();
        for name in t.split([',', ' ']).filter(|s| !s.is_empty()) {
            tb.select(name);
        }
        let types = tb.build().map_err(|e| {
            ToolOutput::error(format!(
                "Invalid file type {t:?}: {e}. Common types: js, ts, py, rust, go, java, c, \
                 cpp, rb, sh, md, json, yaml, toml."
            ))
        })?;
        wb.types(types);
    }
    if let Some(g) = &o.glob {
        let base = if single_file {
            root.parent().unwrap_or(root)
        } else {
            root
        };
        let mut ob = OverrideBuilder::new(base);
        for pat in split_globs(g) {
            ob.add(&pat)
                .map_err(|e| ToolOutput::error(format!("Invalid glob {pat:?}: {e}")))?;
        }
        let overrides = ob
            .build()
            .map_err(|e| ToolOutput::error(format!("Invalid glob {g:?}: {e}")))?;
        wb.overrides(overrides);
    }
    Ok(wb)
}

/// What a search found so far.
struct Found {
    out: Collector,
    /// `files_with_matches`: the newest files.
    files: Newest,
    /// `count`: matching lines and files.
    total_count: u64,
    files_matched: u64,
}

impl Found {
    fn new(head_limit: Option<usize>) -> Self {
        Found {
            out: Collector {
                lines: Vec::new(),
                chars: 0,
                head_limit,
                cut_by_head: false,
                cut_by_size: false,
            },
            files: Newest::new(MAX_LISTED_FILES),
            total_count: 0,
            files_matched: 0,
        }
    }

    fn files_report(mut self) -> ToolOutput {
        let out = &mut self.out;
        let total = self.files.total();
        if total == 0 {
            return ToolOutput::ok("No files found");
        }
        for p in self.files.into_sorted() {
            if !out.push(p.display().to_string()) {
                break;
            }
        }
        if total > MAX_LISTED_FILES && !out.full() {
            out.cut_by_size = true;
        }
        let mut text = format!("Found {total} file{}\n", if total == 1 { "" } else { "s" });
        text.push_str(&out.lines.join("\n"));
        if out.full() {
            text.push_str(&format!(
                "\n\n(Showing {} of {total} files. Use head_limit, a narrower path, glob or \
                 pattern to see others.)",
                out.lines.len()
            ));
        }
        ToolOutput::ok(text)
    }

    fn lines_report(self, mode: Mode) -> ToolOutput {
        let out = &self.out;
        if out.lines.is_empty() {
            return ToolOutput::ok("No matches found");
        }
        let mut text = out.lines.join("\n");
        if mode == Mode::Count && !out.full() {
            let (lines, files) = (self.total_count, self.files_matched);
            text.push_str(&format!(
                "\n\nFound {lines} matching line{} across {files} file{}.",
                if lines == 1 { "" } else { "s" },
                if files == 1 { "" } else { "s" }
            ));
        }
        if out.cut_by_head {
            text.push_str(&format!(
                "\n\n(Output limited to the first {} lines by head_limit; more results exist.)",
                out.lines.len()
            ));
        } else if out.cut_by_size {
            text.push_str(&format!(
                "\n\n(Output cut at about {MAX_OUTPUT_CHARS} characters and the search stopped; \
                 more results exist. Narrow the path, glob or pattern, or page with head_limit.)"
            ));
        }
        ToolOutput::ok(text)
    }
}

/// Searches every file of the walk into `found`, until the output is full. `false` when
/// cancelled.
fn walk(
    walker: ignore::WalkBuilder,
    matcher: &grep_regex::RegexMatcher,
    o: &Options,
    single_file: bool,
    cancel: &CancellationToken,
    found: &mut Found,
) -> bool {
    let content_context = if o.mode == Mode::Content {
        (o.before, o.after)
    } else {
        (0, 0)
    };
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .multi_line(o.multiline)
        .before_context(content_context.0)
        .after_context(content_context.1)
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(HEAP_LIMIT))
        .build();
    for entry in walker.build() {
        if cancel.is_cancelled() {
            return false;
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        match o.mode {
            Mode::Files => {
                let mut sink = FirstMatch(false);
                if searcher.search_path(matcher, path, &mut sink).is_ok() && sink.0 {
                    let mtime = entry
                        .metadata()
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    found.files.push(mtime, path.to_path_buf());
                }
            }
            Mode::Count => {
                let mut sink = CountLines(0);
                if searcher.search_path(matcher, path, &mut sink).is_ok() && sink.0 > 0 {
                    found.total_count += sink.0;
                    found.files_matched += 1;
                    let line = if single_file {
                        sink.0.to_string()
                    } else {
                        format!("{}:{}", path.display(), sink.0)
                    };
                    found.out.push(line);
                }
            }
            Mode::Content => {
                let mut sink = ContentSink {
                    out: &mut found.out,
                    prefix: (!single_file).then(|| path.display().to_string()),
                    line_numbers: o.line_numbers,
                    context: o.before > 0 || o.after > 0,
                    any: false,
                };
                let _ = searcher.search_path(matcher, path, &mut sink);
            }
        }
        if found.out.full() {
            break;
        }
    }
    true
}

/// `"*.rs *.toml"` → two globs; commas separate too, except inside `{…}`.
fn split_globs(g: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    for c in g.chars() {
        match c {
            '{' => {
                depth += 1;
                cur.push(c);
            }
            '}' => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            c if c.is_whitespace() => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.retain(|s| !s.is_empty());
    out
}

fn line_text(bytes: &[u8]) -> String {
    let mut b = bytes;
    while let Some((&last, rest)) = b.split_last() {
        if last == b'\n' || last == b'\r' {
            b = rest;
        } else {
            break;
        }
    }
    let s = String::from_utf8_lossy(b);
    let n = s.chars().count();
    if n > MAX_LINE_CHARS {
        let mut t: String = s.chars().take(MAX_LINE_CHARS).collect();
        t.push_str(&format!(" [… {} more characters]", n - MAX_LINE_CHARS));
        t
    } else {
        s.into_owned()
    }
}

struct FirstMatch(bool);

impl Sink for FirstMatch {
    type Error = io::Error;
    fn matched(&mut self, _: &Searcher, _: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.0 = true;
        Ok(false)
    }
}

struct CountLines(u64);

impl Sink for CountLines {
    type Error = io::Error;
    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.0 += m.lines().count() as u64;
        Ok(true)
    }
}

struct ContentSink<'a> {
    out: &'a mut Collector,
    prefix: Option<String>,
    line_numbers: bool,
    context: bool,
    /// Something of this file was printed already.
    any: bool,
}

impl ContentSink<'_> {
    fn emit(&mut self, sep: char, number: Option<u64>, text: &[u8]) -> bool {
        if self.context && !self.any && !self.out.lines.is_empty() && !self.out.push("--".into()) {
            return false;
        }
        self.any = true;
        let mut line = String::new();
        if let Some(p) = &self.prefix {
            line.push_str(p);
            line.push(sep);
        }
        if let (true, Some(n)) = (self.line_numbers, number) {
            line.push_str(&n.to_string());
            line.push(sep);
        }
        line.push_str(&line_text(text));
        self.out.push(line)
    }
}

impl Sink for ContentSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = m.line_number();
        for (k, line) in m.lines().enumerate() {
            if !self.emit(':', first.map(|n| n + k as u64), line) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        if matches!(c.kind(), SinkContextKind::Other) {
            return Ok(true);
        }
        Ok(self.emit('-', c.line_number(), c.bytes()))
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        Ok(self.out.push("--".into()))
    }
}
