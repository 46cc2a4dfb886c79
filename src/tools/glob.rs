//! The `Glob` tool: files matching a glob pattern, newest first.

use super::input::{self, Field};
use super::names;
use super::walk::{Newest, walker};
use super::{Tool, ToolContext, ToolOutput, paths};
use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use globset::GlobBuilder;
use serde::Deserialize;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// At most this many paths are listed.
pub const MAX_RESULTS: usize = 100;

pub struct Glob;

const DESCRIPTION: &str = "- Fast file pattern matching tool that works with any codebase size
- Supports glob patterns like \"**/*.js\" or \"src/**/*.ts\"
- Returns matching file paths sorted by modification time (newest first), at most 100
- Honours .gitignore; hidden files are included, the .git directory is not
- Use this tool when you need to find files by name patterns
- You can call multiple tools in a single response. It is always better to speculatively \
perform multiple searches in parallel if they are potentially useful.";

/// Glob's input.
#[derive(Deserialize)]
struct GlobInput {
    #[serde(default)]
    pattern: Field<String>,
    #[serde(default)]
    path: Field<String>,
}

impl Tool for Glob {
    fn info(&self) -> &'static names::ToolInfo {
        &names::GLOB_INFO
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
                    "description": "The glob pattern to match files against"
                },
                "path": {
                    "type": "string",
                    "description": "The directory to search in. If not specified, the workspace root will be used. IMPORTANT: Omit this field to use the default directory. DO NOT enter \"undefined\" or \"null\" - simply omit it for the default behavior. Must be a valid directory path if provided."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        }))
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let parsed = (|| {
                let fields: GlobInput = input::parse(names::GLOB, input)?;
                let pattern = fields.pattern.required(names::GLOB, "pattern")?;
                let path = fields.path.optional(names::GLOB, "path")?;
                Ok::<_, ToolOutput>((pattern, path))
            })();
            let (pattern, path) = match parsed {
                Ok(p) => p,
                Err(e) => return e,
            };
            let path = path
                .as_deref()
                .filter(|p| !p.is_empty() && *p != "undefined" && *p != "null");
            let (prefix, rest) = split_pattern(&pattern);
            let base = match (prefix.is_absolute(), path) {
                (true, _) => prefix,
                (false, Some(p)) => Path::new(p).join(prefix),
                (false, None) => prefix,
            };
            let base_str = base.to_string_lossy().into_owned();
            let base_str = if base_str.is_empty() { "." } else { &base_str };
            let root = match paths::resolve_for_read(ctx, base_str) {
                Ok(r) => r,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            let cancel = ctx.cancel.clone();
            input::blocking(names::GLOB, move || glob(&root, &rest, &pattern, &cancel)).await
        })
    }
}

/// Splits a pattern into its leading literal directories (no glob characters) and
/// the rest: `src/**/*.rs` → (`src`, `**/*.rs`). The literal part is resolved and
/// confined like any path; the walk then starts there.
fn split_pattern(pattern: &str) -> (PathBuf, String) {
    let is_glob = |c: &str| c.contains(['*', '?', '[', ']', '{', '}', '\\']);
    let parts: Vec<&str> = pattern.split('/').collect();
    let mut prefix = PathBuf::new();
    if pattern.starts_with('/') {
        prefix.push("/");
    }
    let mut i = 0;
    // The last component names files, so it stays in the pattern unless it is the
    // whole literal path.
    while i < parts.len() && !is_glob(parts[i]) {
        if i == parts.len() - 1 {
            break;
        }
        if !parts[i].is_empty() {
            prefix.push(parts[i]);
        }
        i += 1;
    }
    (prefix, parts[i..].join("/"))
}

fn glob(root: &Path, rest: &str, original: &str, cancel: &CancellationToken) -> ToolOutput {
    let meta = match std::fs::metadata(root) {
        Ok(m) => m,
        Err(_) => return ToolOutput::ok("No files found"),
    };
    if !meta.is_dir() {
        return ToolOutput::error(format!(
            "{} is not a directory. Glob's path must be a directory.",
            root.display()
        ));
    }
    let matcher = match GlobBuilder::new(rest).literal_separator(true).build() {
        Ok(g) => g.compile_matcher(),
        Err(e) => return ToolOutput::error(format!("Invalid glob pattern {original:?}: {e}")),
    };
    let mut found = Newest::new(MAX_RESULTS);
    for (k, entry) in walker(root).build().enumerate() {
        if k % 1024 == 0 && cancel.is_cancelled() {
            return ToolOutput::error("Glob was interrupted.");
        }
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        if rel.as_os_str().is_empty() || !matcher.is_match(rel) {
            continue;
        }
        // Regular files, and links to them.
        let Ok(m) = std::fs::metadata(path) else {
            continue;
        };
        if !m.is_file() {
            continue;
        }
        let mtime = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        found.push(mtime, path.to_path_buf());
    }
    let total = found.total();
    if total == 0 {
        return ToolOutput::ok("No files found");
    }
    let mut out: Vec<String> = found
        .into_sorted()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if total > MAX_RESULTS {
        out.push(format!(
            "(Results are truncated: showing the {MAX_RESULTS} most recently modified of {total} \
             files. Use a more specific path or pattern.)"
        ));
    }
    ToolOutput::ok(out.join("\n"))
}
