//! The `Edit` tool: exact string replacement in a file inside the workspace.

use super::input::{self, Field, numbered_line};
use super::names;
use super::{Tool, ToolContext, ToolOutput, paths};
use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

pub struct Edit;

/// Lines of context shown around the first replacement.
const SNIPPET_CONTEXT: usize = 3;
/// At most this many lines of the edited region are shown.
const SNIPPET_MAX_LINES: usize = 30;

const DESCRIPTION: &str = "Performs exact string replacements in files.

Usage:
- You must use your `Read` tool at least once in the conversation before editing.
- When editing text from Read tool output, ensure you preserve the exact indentation (tabs/\
spaces) as it appears AFTER the line number prefix. The line number prefix format is: spaces + \
line number + tab. Everything after that tab is the actual file content to match. Never \
include any part of the line number prefix in the old_string or new_string.
- The file_path parameter should be an absolute path; a relative path is resolved against \
the workspace. Edits are confined to the workspace, and the protected control files \
(.claude/settings*.json, .mcp.json, .git/hooks, .git/config, .vscode, …) and the run directory \
are refused.
- ALWAYS prefer editing existing files in the codebase. NEVER write new files unless \
explicitly required.
- Only use emojis if the user explicitly requests it. Avoid adding emojis to files unless asked.
- The edit will FAIL if `old_string` is not unique in the file. Either provide a larger string \
with more surrounding context to make it unique or use `replace_all` to change every instance \
of `old_string`.
- Use `replace_all` for replacing and renaming strings across the file. This parameter is \
useful if you want to rename a variable for instance.
- An empty `old_string` creates a new file containing `new_string` (the file must not exist \
or be empty).";

/// Edit's input.
#[derive(Deserialize)]
struct EditInput {
    #[serde(default)]
    file_path: Field<String>,
    #[serde(default)]
    old_string: Field<String>,
    #[serde(default)]
    new_string: Field<String>,
    #[serde(default)]
    replace_all: Field<bool>,
}

impl Tool for Edit {
    fn info(&self) -> &'static names::ToolInfo {
        &names::EDIT_INFO
    }

    fn description(&self) -> String {
        DESCRIPTION.to_string()
    }

    fn input_schema(&self) -> Raw {
        Raw::of_tree(&json!({
            "type": "object",
            "properties": {
                "file_path": {
                    "type": "string",
                    "description": "The absolute path to the file to modify"
                },
                "old_string": {
                    "type": "string",
                    "description": "The text to replace"
                },
                "new_string": {
                    "type": "string",
                    "description": "The text to replace it with (must be different from old_string)"
                },
                "replace_all": {
                    "type": "boolean",
                    "default": false,
                    "description": "Replace all occurrences of old_string (default false)"
                }
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        }))
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let parsed = (|| {
                let fields: EditInput = input::parse(names::EDIT, input)?;
                Ok::<_, ToolOutput>((
                    fields.file_path.required(names::EDIT, "file_path")?,
                    fields.old_string.required(names::EDIT, "old_string")?,
                    fields.new_string.required(names::EDIT, "new_string")?,
                    fields
                        .replace_all
                        .optional(names::EDIT, "replace_all")?
                        .unwrap_or(false),
                ))
            })();
            let (path, old, new, all) = match parsed {
                Ok(p) => p,
                Err(e) => return e,
            };
            if old == new {
                return ToolOutput::error(
                    "No changes to make: old_string and new_string are exactly the same.",
                );
            }
            let resolved = match paths::resolve_for_write(ctx, &path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            input::blocking(names::EDIT, move || edit_file(&resolved, &old, &new, all)).await
        })
    }
}

fn edit_file(path: &Path, old: &str, new: &str, replace_all: bool) -> ToolOutput {
    let shown = path.display();
    if let Ok(m) = std::fs::metadata(path)
        && !m.is_file()
        && !m.is_dir()
    {
        return ToolOutput::error(format!(
            "{shown} is not a regular file (a FIFO, socket or device); Edit only changes text files."
        ));
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(_) if path.is_dir() => {
            return ToolOutput::error(format!("{shown} is a directory, not a file."));
        }
        Err(e) => return ToolOutput::error(format!("Cannot read {shown}: {e}")),
    };
    let Some(bytes) = bytes else {
        if old.is_empty() {
            return create(path, new);
        }
        return ToolOutput::error(format!("File does not exist: {shown}"));
    };
    let Ok(content) = String::from_utf8(bytes) else {
        return ToolOutput::error(format!(
            "{shown} is not a UTF-8 text file; Edit only changes text files."
        ));
    };
    if old.is_empty() {
        if content.is_empty() {
            return create(path, new);
        }
        return ToolOutput::error(format!(
            "old_string is empty, which only creates a new file, but {shown} already exists and \
             is not empty. Give the text to replace, or use the Write tool to replace the whole file."
        ));
    }
    // A file with Windows line ends still matches an old_string written with `\n`.
    let (old, new) = if !content.contains(old) && content.contains("\r\n") && old.contains('\n') {
        (to_crlf(old), to_crlf(new))
    } else {
        (old.to_string(), new.to_string())
    };
    let count = content.matches(old.as_str()).count();
    if count == 0 {
        return ToolOutput::error(format!(
            "String to replace not found in {shown} (0 matches). old_string must match the file \
             exactly, including whitespace and indentation; Read the file again to check."
        ));
    }
    if count > 1 && !replace_all {
        return ToolOutput::error(format!(
            "Found {count} matches of old_string in {shown}, but replace_all is false. To \
             replace all of them, set replace_all to true. To replace only one, add more \
             surrounding context to old_string so that it matches exactly once."
        ));
    }
    let first = content.find(old.as_str()).unwrap_or(0);
    let updated = if replace_all {
        content.replace(old.as_str(), &new)
    } else {
        content.replacen(old.as_str(), &new, 1)
    };
    if let Err(e) = crate::atomic::write(path, updated.as_bytes()) {
        return ToolOutput::error(format!("Cannot write {shown}: {e}"));
    }
    let what = if count == 1 {
        "1 replacement".to_string()
    } else {
        format!("{count} replacements")
    };
    ToolOutput::ok(format!(
        "The file {shown} has been updated ({what}). The edited region (cat -n):\n{}",
        snippet(&updated, first, new.len())
    ))
}

fn create(path: &Path, content: &str) -> ToolOutput {
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "Cannot create the directory {}: {e}",
            parent.display()
        ));
    }
    match crate::atomic::write(path, content.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!(
            "File created successfully at: {} ({} lines).",
            path.display(),
            content.lines().count()
        )),
        Err(e) => ToolOutput::error(format!("Cannot write {}: {e}", path.display())),
    }
}

fn to_crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// The lines around the replaced text, numbered.
fn snippet(content: &str, start: usize, len: usize) -> String {
    let start = start.min(content.len());
    let end = (start + len).min(content.len());
    let first_line = content[..start].matches('\n').count();
    let last_line = first_line
        + content
            .get(start..end)
            .map_or(0, |s| s.matches('\n').count());
    let from = first_line.saturating_sub(SNIPPET_CONTEXT);
    let to = (last_line + SNIPPET_CONTEXT).min(from + SNIPPET_MAX_LINES - 1);
    let mut out = String::new();
    for (i, line) in content.lines().enumerate().skip(from).take(to + 1 - from) {
        numbered_line(
            &mut out,
            i as u64 + 1,
            line.strip_suffix('\r').unwrap_or(line),
        );
    }
    out
}
