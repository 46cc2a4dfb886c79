//! Answering a reply's tool calls: which tools are offered, the checks (input,
//! hooks, permission rules) before a call runs, running it until done or interrupted.

use super::permissions::{Decision, Permissions};
use super::{
    CUT_BY_MAX_TOKENS, Call, Conversation, Denial, Engine, Event, Totals, hooks, subagent,
};
use crate::content::Raw;
use crate::events::DeniedBy;
use crate::model::ToolDef;
use crate::tools::background::tools as background;
use crate::tools::bash::wants_background;
use crate::tools::names::{BASH, SKILL};
use crate::tools::{Tool, ToolContext, ToolOutput};
use crate::transcript::{self, Entry, ToolInput};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The result for a call whose input was cut off or was not JSON: nothing is run.
fn invalid_input(name: &str, input: &ToolInput) -> Option<ToolOutput> {
    let why = input.str_field(crate::model::types::INVALID_TOOL_INPUT)?;
    let what = if why.starts_with(CUT_BY_MAX_TOKENS) {
        "was cut off"
    } else {
        "was not valid JSON"
    };
    Some(ToolOutput::error(format!(
        "The input of this {name} call {what} ({why}); nothing was run. \
         Send the call again with a complete JSON object."
    )))
}

impl Engine {
    /// The entry holding a tool call's result; a `Task` result names its sub-agent
    /// (`toolUseResult.agentId`, as Claude Code records it).
    pub(super) fn result_entry(
        &self,
        conv: &mut Conversation<'_>,
        id: &str,
        name: &str,
        output: &ToolOutput,
    ) -> Entry {
        let mut entry = conv
            .chain
            .tool_result_content(id, output.content(), output.is_error);
        if name == subagent::TASK && conv.depth == 0 {
            let result = json!({
                "agentId": super::recovery::agent_id_for(id),
                "status": if output.is_error { "failed" } else { "completed" },
            });
            entry.rest.insert("toolUseResult", Raw::of_tree(&result));
        }
        entry
    }

    /// The tool definitions an agent is offered. `Task` only at the top level (no
    /// nested sub-agents); `AskUser` only when a rule names it explicitly and there is
    /// someone to ask.
    /// The conversation's MCP tools its rules allow come last.
    pub(super) fn offered_tools(
        &self,
        permissions: &Permissions,
        conv: &Conversation<'_>,
    ) -> Vec<ToolDef> {
        let depth = conv.depth;
        let offer = &conv.spec.offer;
        // With a fixed offer, the tools in it that no deny rule withholds, at any depth
        // (the permission layer refuses the rest); else those the rules allow.
        let offered = |name: &str| {
            if offer.is_empty() {
                permissions.offers(name)
            } else {
                offer.iter().any(|o| o == name) && !permissions.withholds(name)
            }
        };
        let mut defs: Vec<ToolDef> = self
            .tools
            .iter()
            .filter(|tool| offered(tool.name()))
            .map(|tool| tool.definition())
            .collect();
        defs.extend(self.background_definitions(permissions, conv));
        if (depth == 0 || !offer.is_empty()) && offered(subagent::TASK) {
            defs.push(subagent::task_definition(&self.config.subagents));
        }
        // Only when someone can answer: a tool that can never work is noise.
        let ask_user = if offer.is_empty() {
            permissions.names(subagent::ASK_USER)
        } else {
            offered(subagent::ASK_USER)
        };
        if self.config.asker.is_some() && ask_user {
            defs.push(subagent::ask_user_definition());
        }
        if !self.config.conventions.skills.is_empty() && offered(SKILL) {
            defs.push(super::skills::definition());
        }
        // The web tools as client tools, where the spec offers them by name (the
        // pipeline's agents): the same list for every role, refused by the rules.
        use crate::transcript::tools::{WEB_FETCH, WEB_SEARCH};
        if self.client_web_tool(offer, WEB_SEARCH) && offered(WEB_SEARCH) {
            defs.push(crate::tools::web::search_definition());
        }
        if self.client_web_tool(offer, WEB_FETCH) && offered(WEB_FETCH) {
            defs.push(crate::tools::web::fetch_definition());
        }
        defs.extend(
            conv.mcp_tools
                .iter()
                .filter(|tool| permissions.offers(&tool.name))
                .map(crate::tools::mcp::McpTool::definition),
        );
        defs
    }

    /// The server tools an agent's rules give it, with their limits; none of those
    /// offered as client tools (`offer`, see [`Engine::client_web_tool`]).
    pub(super) fn server_tools(
        &self,
        permissions: &Permissions,
        offer: &[String],
    ) -> Vec<crate::model::ServerTool> {
        use crate::model::{ServerTool, ServerToolKind};
        use crate::transcript::tools::{WEB_FETCH, WEB_SEARCH};
        let limits = self.config.web;
        if !limits.enabled {
            return Vec::new();
        }
        [
            (
                WEB_SEARCH,
                ServerToolKind::WebSearch,
                limits.search_max_uses,
            ),
            (WEB_FETCH, ServerToolKind::WebFetch, limits.fetch_max_uses),
        ]
        .into_iter()
        .filter(|(name, _, _)| !self.client_web_tool(offer, name))
        .filter_map(|(name, kind, max_uses)| {
            let access = permissions.web_access(name)?;
            Some(ServerTool {
                kind,
                max_uses: Some(max_uses),
                allowed_domains: access.allowed_domains,
                blocked_domains: access.blocked_domains,
            })
        })
        .collect()
    }

    /// Checks and runs one tool call. Never fails: every problem becomes an error result.
    pub(super) async fn call_tool(
        &self,
        conv: &mut Conversation<'_>,
        permissions: &Permissions,
        call: &Call,
        totals: &mut Totals,
    ) -> ToolOutput {
        if let Some(refused) = self.check_call(conv, permissions, call, totals).await {
            return refused;
        }
        let parent = subagent::Parent::of(conv);
        let output = self.execute(&parent, permissions, call, totals).await;
        let (id, name, input) = call;
        self.emit_done(conv.task.as_deref(), id, name, &output, conv.depth);
        self.post_tool_use(conv, permissions, id, name, input, &output)
            .await;
        output
    }

    /// The checks before a call runs (its input, `PreToolUse` hooks, permission rules,
    /// the person when a rule asks): `Some(result)` when the call is not to run. When
    /// it is, the front end is told it starts.
    pub(super) async fn check_call(
        &self,
        conv: &mut Conversation<'_>,
        permissions: &Permissions,
        call: &Call,
        totals: &mut Totals,
    ) -> Option<ToolOutput> {
        let (id, name, input) = call;
        let depth = conv.depth;
        if let Some(refused) = invalid_input(name, input) {
            return Some(refused);
        }
        let hook_decision = match self.pre_tool_use(conv, permissions, id, name, input).await {
            Ok(decision) => decision,
            Err((blocked, reason)) => {
                // Shown while it runs, not only in the transcript.
                let by = DeniedBy::Hook { reason };
                self.emit_denied(name, input, &blocked.content, by, depth);
                return Some(blocked);
            }
        };
        let asked = |denied: Option<String>| denied.map(|message| (message, DeniedBy::Person));
        let decision = if background::is_background_tool(name)
            && permissions.offers(BASH)
            && !permissions.withholds(name)
        {
            Decision::Allow
        } else {
            permissions.check(name, input, &self.config.workspace)
        };
        let denied = match decision {
            Decision::Deny { message, rule } => Some((message, DeniedBy::Rule { rule })),
            Decision::Ask { why } if hook_decision != Some(hooks::PermissionDecision::Allow) => {
                asked(self.confirm(conv.spec, name, input, &why).await)
            }
            Decision::Allow | Decision::Ask { .. } => match &hook_decision {
                Some(hooks::PermissionDecision::Ask(why)) => {
                    asked(self.confirm(conv.spec, name, input, why).await)
                }
                _ => None,
            },
        };
        if let Some((message, by)) = denied {
            self.emit_denied(name, input, &message, by, depth);
            totals.denials.push(Denial {
                tool_name: name.to_string(),
                tool_use_id: id.to_string(),
                tool_input: input.clone(),
            });
            return Some(ToolOutput::error(message));
        }
        self.emit(Event::ToolCall {
            name: name.to_string(),
            summary: summarize_input(name, input),
            depth,
            id: id.to_string(),
            task: conv.task.clone(),
        });
        None
    }

    /// Runs a call its checks let through. Borrows nothing of the conversation but
    /// what `parent` copied, so that several can run at once ([`super::concurrent`]).
    pub(super) async fn execute(
        &self,
        parent: &subagent::Parent<'_>,
        permissions: &Permissions,
        call: &Call,
        totals: &mut Totals,
    ) -> ToolOutput {
        let (id, name, input) = call;
        let name = name.as_str();
        let mcp_tool = parent.mcp_tools.iter().find(|t| t.name == name).cloned();
        match (name, mcp_tool) {
            (_, Some(tool)) => self.call_mcp(&tool, input, id).await,
            (subagent::TASK, _) if parent.depth == 0 => {
                self.run_subagent(parent, id, input, totals).await
            }
            (subagent::ASK_USER, _) => self.ask_user(input).await,
            _ if self.client_web_tool(&parent.spec.offer, name) => {
                self.run_web(parent, permissions, call, totals).await
            }
            (SKILL, _) => super::skills::invoke(
                &self.config.conventions.skills,
                // Through a tree, so that an error reads as it always has (no position).
                input
                    .parse::<serde_json::Value>()
                    .and_then(serde_json::from_value),
            ),
            (name, _) if background::is_background_tool(name) => {
                self.background_call(name, input).await
            }
            (BASH, _) if wants_background(input) => {
                self.start_background(parent, permissions, input)
            }
            _ => match self.tools.iter().find(|tool| tool.name() == name) {
                Some(tool) => {
                    let sandbox = permissions.sandbox(&self.config.sandbox, &self.config.workspace);
                    self.run_tool(tool.as_ref(), input, sandbox).await
                }
                None => ToolOutput::error(format!("No such tool available: {name}")),
            },
        }
    }

    /// Tells the front end call `id` finished (made by the sub-agent of `task`, if any).
    pub(super) fn emit_done(
        &self,
        task: Option<&str>,
        id: &str,
        name: &str,
        output: &ToolOutput,
        depth: u32,
    ) {
        self.emit(Event::ToolDone {
            name: name.to_string(),
            is_error: output.is_error,
            interrupted: output.is_interrupted(),
            depth,
            id: id.to_string(),
            task: task.map(str::to_owned),
        });
    }

    /// Tells the front end a call was not run: the call as the person sees it and what
    /// stopped it.
    fn emit_denied(&self, name: &str, input: &ToolInput, message: &str, by: DeniedBy, depth: u32) {
        self.emit(Event::ToolDenied {
            name: name.to_string(),
            message: message.to_string(),
            summary: summarize_input(name, input),
            by,
            depth,
        });
    }

    /// Runs a built-in tool; a Ctrl-C cancels it and its result says so.
    pub(super) async fn run_tool(
        &self,
        tool: &dyn Tool,
        input: &ToolInput,
        sandbox: crate::tools::sandbox::SandboxPolicy,
    ) -> ToolOutput {
        // The tool reads its own struct from the call's JSON.
        let cancel = CancellationToken::new();
        let ctx = self.tool_context(cancel.clone(), sandbox);
        self.until_interrupted(tool.call(input, &ctx), &cancel)
            .await
    }

    /// What a built-in tool (or a background command) started by this engine may use.
    pub(super) fn tool_context(
        &self,
        cancel: CancellationToken,
        sandbox: crate::tools::sandbox::SandboxPolicy,
    ) -> ToolContext {
        ToolContext {
            workspace: self.config.workspace.clone(),
            run_dir: self.config.run_dir.clone(),
            cancel,
            processes: self.config.processes.clone(),
            sandbox,
            env: self.tool_env(),
        }
    }

    /// Runs a tool call until it finishes or the user presses Ctrl-C. On an interrupt,
    /// `cancel` fires and the call gets a moment to clean up (kill its process group);
    /// its result then says it was interrupted. Sub-agents (Task) are not wrapped: their
    /// own model requests and tools see the interrupt.
    pub(super) async fn until_interrupted(
        &self,
        call: impl std::future::Future<Output = ToolOutput>,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        tokio::pin!(call);
        tokio::select! {
            biased;
            _ = self.config.interrupt.wait() => {
                cancel.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut call).await;
                ToolOutput::error(transcript::INTERRUPTED_TOOL_RESULT)
            }
            output = &mut call => output,
        }
    }
}

/// A short, one-line description of a tool call for progress output.
pub fn summarize_input(name: &str, input: &ToolInput) -> String {
    let field = crate::tools::names::info_of(name).map_or("", |t| t.summary_field);
    let text = input
        .str_field(field)
        .unwrap_or_else(|| input.text().to_string());
    let line = text.lines().next().unwrap_or_default();
    let mut short: String = line.chars().take(100).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}
