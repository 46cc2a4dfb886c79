//! The engine's side of MCP servers ([`crate::tools::mcp`]): which sessions list
//! their tools, the pin, the offer and the calls.
//!
//! A new main session lists the tools of the servers its agents may use (its own
//! permission rules, or those of the sub-agents it can start) once, when it begins,
//! and pins the list in its transcript (a `system` entry, subtype `mcp_tools`). A
//! resumed session (a retry, a wake, a gate round) offers exactly the pinned tools,
//! so the tool definitions — part of the cached prefix — stay byte-identical whatever
//! the servers say since; a sub-agent gets its parent session's list. A changed list
//! takes effect at the next new session (a 换代 successor, the next step or round).

use super::permissions::Permissions;
use super::{AgentSpec, Engine, Event, Pending};
use crate::tools::ToolOutput;
use crate::tools::mcp::{McpServer, McpTool};
use crate::transcript::{Raw, ToolInput};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Engine {
    /// The MCP tools of a new session and the entry pinning them (none without
    /// servers, or when no agent of the session may use any).
    pub(super) async fn list_mcp_tools(
        &self,
        spec: &AgentSpec,
    ) -> (Arc<[McpTool]>, Option<Pending>) {
        let Some(hub) = &self.mcp else {
            return (Arc::from(Vec::new()), None);
        };
        let mut users: Vec<Permissions> = self.permissions_of(spec).into_iter().collect();
        let main = users.first().cloned();
        if main
            .as_ref()
            .is_some_and(|p| p.offers(super::subagent::TASK))
        {
            let default = super::subagent::general_purpose();
            let subagents = if self.config.subagents.is_empty() {
                std::slice::from_ref(&default)
            } else {
                self.config.subagents.as_slice()
            };
            let of_subagent = |s: &AgentSpec| self.permissions_of(&s.bound_by(spec)).ok();
            users.extend(subagents.iter().filter_map(of_subagent));
        }
        let wanted = |server: &McpServer| users.iter().any(|p| p.offers_server(&server.rule()));
        if !hub.config().servers.iter().any(wanted) {
            return (Arc::from(Vec::new()), None);
        }
        let listing = hub.list(&wanted).await;
        for (server, why) in &listing.failures {
            self.emit(Event::Warning {
                message: format!(
                    "MCP 服务器 {server} 没有列出工具({}),这段会话不提供它的工具",
                    why.lines().next().unwrap_or_default()
                ),
            });
        }
        for line in &listing.skipped {
            self.warn_once(line);
        }
        let failures: Vec<Value> = listing
            .failures
            .iter()
            .map(|(server, why)| json!({"server": server, "error": why}))
            .collect();
        let pin = Pending::McpTools {
            tools: Raw::of(&listing.tools).unwrap_or_else(|_| Raw::of_tree(&[(); 0])),
            failures: Raw::of_tree(&failures),
        };
        (Arc::from(listing.tools), Some(pin))
    }

    /// The MCP tools a resumed session was started with.
    pub(super) fn pinned_mcp_tools(history: &[crate::transcript::Loaded]) -> Arc<[McpTool]> {
        let tools = crate::transcript::pinned_mcp_tools(history)
            .and_then(|raw| raw.parse::<Vec<McpTool>>().ok())
            .unwrap_or_default();
        Arc::from(tools)
    }

    /// Calls an MCP tool; a server failure is told to the person in one line.
    pub(super) async fn call_mcp(
        &self,
        tool: &McpTool,
        input: &ToolInput,
        call_id: &str,
    ) -> ToolOutput {
        let Some(hub) = &self.mcp else {
            return ToolOutput::error(format!(
                "No MCP server is configured now, so {} cannot be called. Do without it.",
                tool.name
            ));
        };
        let cancel = CancellationToken::new();
        let call = hub.call(&tool.server, &tool.tool, input, call_id, &cancel);
        let call = async {
            let outcome = call.await;
            if let Some(notice) = &outcome.notice {
                self.emit(Event::Warning {
                    message: notice.clone(),
                });
            }
            outcome.output
        };
        self.until_interrupted(call, &cancel).await
    }
}
