//! Tool names (they appear in every `tool_use` block of a transcript) and what the
//! harness needs to know about each tool besides its code:
//! spelled once, here. The names and input fields follow Claude Code's (models are
//! trained on them), so they are part of the contract with the model.

/// Reads a file.
pub const READ: &str = "Read";
/// Creates or replaces a file.
pub const WRITE: &str = "Write";
/// Replaces a string in a file.
pub const EDIT: &str = "Edit";
/// Finds files by glob.
pub const GLOB: &str = "Glob";
/// Searches file contents.
pub const GREP: &str = "Grep";
/// Runs a shell command.
pub const BASH: &str = "Bash";
/// Starts a sub-agent (the engine's, not a `tools::Tool`).
pub const TASK: &str = "Task";
/// Asks the user a question (the engine's, not a `tools::Tool`).
pub const ASK_USER: &str = "AskUser";
/// Loads an Agent Skill's instructions (the engine's, not a `tools::Tool`).
pub const SKILL: &str = "Skill";
/// Reads a background command's new output (`tools::background`).
pub const TASK_OUTPUT: &str = "TaskOutput";
/// Stops a background command.
pub const TASK_STOP: &str = "TaskStop";
/// Older Claude Code's name of [`TASK_OUTPUT`] (in imported transcripts).
pub const BASH_OUTPUT: &str = "BashOutput";
/// Older Claude Code's name of [`TASK_STOP`].
pub const KILL_SHELL: &str = "KillShell";

/// Searches the web: a server tool, run by the API (`web_search`), never by flower.
pub const WEB_SEARCH: &str = "WebSearch";
/// Fetches a web page or PDF: a server tool, run by the API (`web_fetch`).
pub const WEB_FETCH: &str = "WebFetch";

/// The permission-rule name (Claude Code's) of a server tool the API names `api_name`
/// in its `server_tool_use` blocks; `None` for other names.
pub fn server_tool_rule_name(api_name: &str) -> Option<&'static str> {
    match api_name {
        "web_search" => Some(WEB_SEARCH),
        "web_fetch" => Some(WEB_FETCH),
        _ => None,
    }
}

/// What the harness knows about a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolInfo {
    pub name: &'static str,
    /// The input field that says what a call is about, for one-line progress output.
    pub summary_field: &'static str,
    /// The input field holding the path the call works on, if any: path rules
    /// (`Read(src/**)`) match it, and it is confined to the workspace.
    pub path_field: Option<&'static str>,
    /// Whether the tool changes files (the agents without it get a read-only workspace).
    pub writes_files: bool,
    /// For a tool without a path: the input field a content rule (`Task(reviewer)`)
    /// is matched against.
    pub rule_field: Option<&'static str>,
}

pub const READ_INFO: ToolInfo = info(READ, "file_path", Some("file_path"), false);
pub const WRITE_INFO: ToolInfo = info(WRITE, "file_path", Some("file_path"), true);
pub const EDIT_INFO: ToolInfo = info(EDIT, "file_path", Some("file_path"), true);
pub const GLOB_INFO: ToolInfo = info(GLOB, "pattern", Some("path"), false);
pub const GREP_INFO: ToolInfo = info(GREP, "pattern", Some("path"), false);
pub const BASH_INFO: ToolInfo = info(BASH, "command", None, false);
pub const TASK_INFO: ToolInfo = ToolInfo {
    rule_field: Some("subagent_type"),
    ..info(TASK, "description", None, false)
};
pub const ASK_USER_INFO: ToolInfo = info(ASK_USER, "question", None, false);
pub const SKILL_INFO: ToolInfo = ToolInfo {
    rule_field: Some("skill"),
    ..info(SKILL, "skill", None, false)
};

pub const TASK_OUTPUT_INFO: ToolInfo = info(TASK_OUTPUT, "task_id", None, false);
pub const TASK_STOP_INFO: ToolInfo = info(TASK_STOP, "task_id", None, false);

/// Every tool an agent can be given, built-in and engine-level, in offer order.
pub const ALL: [ToolInfo; 11] = [
    READ_INFO,
    WRITE_INFO,
    EDIT_INFO,
    GLOB_INFO,
    GREP_INFO,
    BASH_INFO,
    TASK_INFO,
    ASK_USER_INFO,
    SKILL_INFO,
    TASK_OUTPUT_INFO,
    TASK_STOP_INFO,
];

const fn info(
    name: &'static str,
    summary_field: &'static str,
    path_field: Option<&'static str>,
    writes_files: bool,
) -> ToolInfo {
    ToolInfo {
        name,
        summary_field,
        path_field,
        writes_files,
        rule_field: None,
    }
}

/// What the harness knows about the tool called `name`; `None` for an unknown tool.
pub fn info_of(name: &str) -> Option<&'static ToolInfo> {
    ALL.iter().find(|t| t.name == name)
}
