//! The marker strings of the transcript format, and how to recognise them. Written by
//! the engine, read by pruning and the stores: spelled once, here.

/// The text a tool result gets when the user interrupted the tool (Claude Code's
/// wording, which the pruning layer recognises).
pub const INTERRUPTED_TOOL_RESULT: &str = "[Request interrupted by user for tool use]";

/// The user entry written when the user interrupted a streaming reply.
pub const INTERRUPTED_TURN: &str = "[Request interrupted by user]";

/// Every interruption marker starts with this.
const INTERRUPTION_PREFIX: &str = "[Request interrupted by user";

/// Every flower denial message starts with this; pruning recognises denials by it.
pub const DENIAL_PREFIX: &str = "Permission to use ";

/// The entry field that marks a synthetic API-error message (Claude Code's name).
pub const API_ERROR_FLAG: &str = "isApiErrorMessage";

/// The `message.model` of a synthetic API-error message.
pub const SYNTHETIC_MODEL: &str = "<synthetic>";

/// The body of a tool result that an interruption left, or that never came.
pub const INTERRUPTED_BODY: &str = "[上一轮在此处被中断,该工具结果未产生]";

/// The body of a snapshot command's result that a later run of the same command made
/// stale.
pub const STALE_BODY: &str = "[过期:这条命令之后又跑过一次,以最新那次为准]";

/// How a trim pointer starts; a result that starts with it is never trimmed again.
pub const TRIM_POINTER_PREFIX: &str = "[结果过大,已移出上下文";

/// The `subtype` of the `system` entry that holds the memory text a session was
/// started with (see [`crate::engine::memory`]).
pub const MEMORY_SUBTYPE: &str = "memory";

/// The `subtype` of the `system` entry that pins the MCP tools a session was started
/// with (see [`crate::tools::mcp`]).
pub const MCP_TOOLS_SUBTYPE: &str = "mcp_tools";

/// The `subtype` of a `system` entry recording what hooks did.
pub const HOOK_SUBTYPE: &str = "hook";

/// The field marking a user entry whose text a hook added (context, feedback): not
/// something the user said, so a retry looking for its unanswered prompt skips it.
pub const HOOK_CONTEXT_FLAG: &str = "isHookContext";

/// The field marking the user entry that asks the model to go on with a reply cut by
/// `max_tokens` (on models that refuse a prefill, or with thinking on): not something
/// the user said. Unanswered, it is dropped on resume (the resume's prompt follows).
pub const CONTINUATION_FLAG: &str = "isContinuation";

/// Whether a tool result's text is a permission denial: flower's ("Permission to use
/// …") or Claude Code's ("… requested permissions to use …", "… needs approval …",
/// "… has been denied …"). Only results with `is_error: true` count as denials.
pub fn is_denial_text(text: &str) -> bool {
    text.trim_start().starts_with(DENIAL_PREFIX)
        || text.contains("requested permissions to use")
        || text.contains("needs approval")
        || text.contains("has been denied")
}

/// Whether a tool result's text was left by an interruption
/// (`[Request interrupted by user for tool use]` and its kin).
pub fn is_interruption_text(text: &str) -> bool {
    text.trim_start().starts_with(INTERRUPTION_PREFIX)
}
