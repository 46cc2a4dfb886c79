//! `TaskOutput` and `TaskStop`, with Claude Code's names and inputs. Older Claude Code
//! transcripts call them `BashOutput` (`bash_id`) and `KillShell` (`shell_id`): those
//! names and fields are accepted too, never offered.

use super::Background;
use crate::content::{Raw, ToolInput};
use crate::model::ToolDef;
use crate::tools::ToolOutput;
use crate::tools::input::{self, Field};
use crate::tools::names::{BASH_OUTPUT, KILL_SHELL, TASK_OUTPUT, TASK_STOP};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// How long `TaskOutput` waits when the model gives no `timeout` (Claude Code's).
pub const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest wait the model may ask for.
pub const MAX_WAIT_MS: u64 = 600_000;

/// Whether `name` is one of these tools (new or old name).
pub fn is_background_tool(name: &str) -> bool {
    matches!(name, TASK_OUTPUT | TASK_STOP | BASH_OUTPUT | KILL_SHELL)
}

/// The definitions offered, in order, to an agent that has Bash.
pub fn definitions() -> [ToolDef; 2] {
    [
        ToolDef {
            name: TASK_OUTPUT.into(),
            description: "Retrieves the output of a background command started with Bash \
                          `run_in_background`: what it printed since the last read, and \
                          whether it still runs.\n- Takes a task_id parameter identifying the \
                          command\n- block (default true) waits until the command ends or the \
                          timeout passes; block=false returns at once\n- timeout is in \
                          milliseconds (default 30000, max 600000)\n- Background commands are \
                          stopped when the session that started them ends"
                .into(),
            input_schema: Raw::of_tree(&json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The task ID to get output from"},
                    "block": {"type": "boolean", "default": true, "description": "Whether to wait for completion"},
                    "timeout": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_MS, "default": DEFAULT_WAIT_MS, "description": "Max wait time in ms"}
                },
                "required": ["task_id"],
                "additionalProperties": false,
                "$schema": "http://json-schema.org/draft-07/schema#"
            })),
        },
        ToolDef {
            name: TASK_STOP.into(),
            description: "- Stops a running background task by its ID\n- Takes a task_id \
                          parameter identifying the task to stop\n- Returns a success or \
                          failure status\n- Use this tool when you need to terminate a \
                          long-running task"
                .into(),
            input_schema: Raw::of_tree(&json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The ID of the background task to stop"}
                },
                "required": ["task_id"],
                "additionalProperties": false,
                "$schema": "http://json-schema.org/draft-07/schema#"
            })),
        },
    ]
}

#[derive(Deserialize)]
struct OutputInput {
    #[serde(default)]
    task_id: Field<String>,
    /// `BashOutput`'s name for it.
    #[serde(default)]
    bash_id: Field<String>,
    #[serde(default)]
    block: Field<bool>,
    #[serde(default)]
    timeout: Field<u64>,
    // `BashOutput`'s `filter` (a regular expression over the lines) is ignored.
}

#[derive(Deserialize)]
struct StopInput {
    #[serde(default)]
    task_id: Field<String>,
    /// `KillShell`'s name for it.
    #[serde(default)]
    shell_id: Field<String>,
}

/// The id a call names under the new field or the old one.
fn id_of(
    tool: &str,
    new: Field<String>,
    old: Field<String>,
    old_name: &str,
) -> Result<String, ToolOutput> {
    match new.optional(tool, "task_id")? {
        Some(id) => Ok(id),
        None => old.required(tool, old_name).map_err(|_| {
            ToolOutput::error(format!(
                "Invalid input for {tool}: the required field \"task_id\" is missing."
            ))
        }),
    }
}

impl Background {
    /// Runs a call of `TaskOutput`, `TaskStop` or their older names.
    pub async fn call(&self, name: &str, input: &ToolInput) -> ToolOutput {
        let result = match name {
            TASK_OUTPUT | BASH_OUTPUT => self.call_output(name, input).await,
            _ => self.call_stop(name, input).await,
        };
        result.unwrap_or_else(|refused| refused)
    }

    async fn call_output(&self, name: &str, input: &ToolInput) -> Result<ToolOutput, ToolOutput> {
        let fields: OutputInput = input::parse(name, input)?;
        let id = id_of(name, fields.task_id, fields.bash_id, "bash_id")?;
        // The old tool never waited.
        let block = fields
            .block
            .optional(name, "block")?
            .unwrap_or(name == TASK_OUTPUT);
        let timeout = fields
            .timeout
            .optional(name, "timeout")?
            .unwrap_or(DEFAULT_WAIT_MS)
            .min(MAX_WAIT_MS);
        Ok(self.read(&id, block, Duration::from_millis(timeout)).await)
    }

    async fn call_stop(&self, name: &str, input: &ToolInput) -> Result<ToolOutput, ToolOutput> {
        let fields: StopInput = input::parse(name, input)?;
        let id = id_of(name, fields.task_id, fields.shell_id, "shell_id")?;
        Ok(self.stop(&id).await)
    }
}
