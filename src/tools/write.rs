//! The `Write` tool: creates or overwrites a file inside the workspace.

use super::input::{self, Field};
use super::names;
use super::{Tool, ToolContext, ToolOutput, paths};
use crate::content::{Raw, ToolInput};
use crate::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

pub struct Write;

const DESCRIPTION: &str = "Writes a file to the workspace.

Usage:
- This tool will overwrite the existing file if there is one at the provided path.
- The file_path parameter should be an absolute path; a relative path is resolved against \
the workspace. Missing parent directories are created.
- Writes are confined to the workspace: a path outside it (directly, through `..` or through \
a symbolic link) is refused, and so are the protected control files (.claude/settings*.json, \
.mcp.json, .claude/commands, .git/hooks, .git/config, .vscode, shell rc files, …) and the run \
directory.
- If this is an existing file, read it with the Read tool first, and prefer the Edit tool for \
changing part of a file.
- ALWAYS prefer editing existing files in the codebase. NEVER write new files unless \
explicitly required.
- NEVER proactively create documentation files (*.md) or README files. Only create \
documentation files if explicitly requested by the User.
- Only use emojis if the user explicitly requests it. Avoid writing emojis to files unless \
asked.";

/// Write's input.
#[derive(Deserialize)]
struct WriteInput {
    #[serde(default)]
    file_path: Field<String>,
    #[serde(default)]
    content: Field<String>,
}

impl Tool for Write {
    fn info(&self) -> &'static names::ToolInfo {
        &names::WRITE_INFO
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
                    "description": "The absolute path to the file to write (must be absolute, not relative)"
                },
                "content": {
                    "type": "string",
                    "description": "The content to write to the file"
                }
            },
            "required": ["file_path", "content"],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#"
        }))
    }

    fn call<'a>(&'a self, input: &'a ToolInput, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let parsed = (|| {
                let fields: WriteInput = input::parse(names::WRITE, input)?;
                let path = fields.file_path.required(names::WRITE, "file_path")?;
                let content = fields.content.required(names::WRITE, "content")?;
                Ok::<_, ToolOutput>((path, content))
            })();
            let (path, content) = match parsed {
                Ok(p) => p,
                Err(e) => return e,
            };
            let resolved = match paths::resolve_for_write(ctx, &path) {
                Ok(p) => p,
                Err(e) => return ToolOutput::error(e.to_string()),
            };
            input::blocking(names::WRITE, move || write_file(&resolved, &content)).await
        })
    }
}

fn write_file(path: &Path, content: &str) -> ToolOutput {
    let shown = path.display();
    let existed = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return ToolOutput::error(format!(
                "{shown} is a directory; cannot write a file there."
            ));
        }
        Ok(m) if !m.is_file() => {
            return ToolOutput::error(format!(
                "{shown} is not a regular file (a FIFO, socket or device); refusing to write it."
            ));
        }
        Ok(_) => true,
        Err(_) => false,
    };
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "Cannot create the directory {}: {e}",
            parent.display()
        ));
    }
    if let Err(e) = crate::atomic::write(path, content.as_bytes()) {
        return ToolOutput::error(format!("Cannot write {shown}: {e}"));
    }
    let lines = content.lines().count();
    if existed {
        ToolOutput::ok(format!(
            "The file {shown} has been overwritten ({lines} lines, {} bytes).",
            content.len()
        ))
    } else {
        ToolOutput::ok(format!(
            "File created successfully at: {shown} ({lines} lines, {} bytes).",
            content.len()
        ))
    }
}
