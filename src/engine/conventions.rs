//! What a project's conventions (Claude Code's memory files and settings files) add to
//! every agent an engine runs. Built once by the settings resolution; the engine only
//! applies it.
//!
//! | convention                         | reaches                                  |
//! |------------------------------------|------------------------------------------|
//! | memory (`CLAUDE.md`, `AGENTS.md`)  | every agent's system prompt              |
//! | `permissions.deny`                 | every agent's deny rules                 |
//! | `permissions.ask`                  | every agent (asked, or denied unattended)|
//! | `hooks`                            | every agent's events, in its sandbox     |
//! | `env`                              | flower's variables, Bash commands, hooks |
//! | MCP servers                        | the agents whose rules allow `mcp__…`    |
//! | skills (`.claude/skills`)          | every system prompt; `Skill` loads one   |
//!
//! `permissions.allow` is not here: it widens only the agents a front end chooses
//! (flower's pipeline: the workers; `flower once`: its `--allowed-tools`), never an
//! agent whose allow list is its role's boundary (the judge stays read-only).
//! `permissions.additionalDirectories` travels in the sandbox policy.

use super::hooks::HookSet;
use super::memory::MemorySource;
use crate::tools::mcp::McpConfig;

/// See the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conventions {
    /// Where project memory is read from when a session starts; `None`: no memory
    /// (`--no-memory`, `FLOWER_MEMORY=off`).
    pub memory: Option<MemorySource>,
    /// Every hook of the settings files.
    pub hooks: HookSet,
    /// The settings files' `permissions.deny`, added to every agent's deny rules.
    pub deny: Vec<String>,
    /// The settings files' `permissions.ask`: a call one matches is asked about.
    pub ask: Vec<String>,
    /// Variables Bash commands and hooks get on top of flower's environment: the
    /// settings files' `env` that the environment does not set.
    pub env: Vec<(String, String)>,
    /// MCP servers (`.mcp.json`, the settings files' `mcpServers`): their tools are
    /// offered to the agents whose rules allow them (see [`crate::tools::mcp`]).
    pub mcp: McpConfig,
    /// Agent Skills: named in every session's system prompt, loaded by the `Skill`
    /// tool (see [`super::skills`]).
    pub skills: Vec<super::skills::Skill>,
}
