//! Running a WebSearch or WebFetch call that the checks let through: its side request
//! (`tools::web`) sent like any request (the run's pause, a Ctrl-C, the retry policy
//! through [`super::recovery::Recovery`]), its tokens and cost added to the run's, and
//! the exchange stored as a transcript of its own under the session
//! (`subagents/agent-<id>`), so that `log`, `show` and `report` count it from the one
//! place every figure comes from.

use super::recovery::{Retried, agent_id_for, retried_text};
use super::turn::Turn;
use super::{Call, Engine, EngineError, Totals, subagent};
use crate::model::{History, MessagesRequest, ModelReply};
use crate::stores::SessionStore;
use crate::tools::ToolOutput;
use crate::tools::web::{Domains, SideRequest};
use crate::transcript::{self, Chain};

impl Engine {
    /// Whether `name` is a web tool this agent is offered as a client tool (its spec
    /// offers it by name); else a web tool, if any, is the API's server tool.
    pub(super) fn client_web_tool(&self, offer: &[String], name: &str) -> bool {
        use crate::transcript::tools::{WEB_FETCH, WEB_SEARCH};
        self.config.web.enabled
            && (name == WEB_SEARCH || name == WEB_FETCH)
            && offer.iter().any(|o| o == name)
    }

    /// Runs a web call as its side request. Never fails: every problem is an error
    /// result (a model error worth retrying without a retry policy also stops the run,
    /// as a sub-agent's does).
    pub(super) async fn run_web(
        &self,
        parent: &subagent::Parent<'_>,
        permissions: &super::permissions::Permissions,
        call: &Call,
        totals: &mut Totals,
    ) -> ToolOutput {
        let (id, name, input) = call;
        let Some(access) = permissions.web_access(name) else {
            return ToolOutput::error(format!("no allow rule names {name}"));
        };
        let rules = Domains {
            allowed: access.allowed_domains,
            blocked: access.blocked_domains,
        };
        let side = match SideRequest::of(name, input, &rules) {
            Ok(side) => side,
            Err(message) => return ToolOutput::error(message),
        };
        let mut messages = History::new();
        messages.push(crate::model::RequestMessage::user_text(&side.prompt));
        let request = MessagesRequest {
            model: parent
                .spec
                .model
                .clone()
                .unwrap_or_else(|| self.config.model.default_model().to_string()),
            max_tokens: self.config.max_tokens,
            system_shared: String::new(),
            system: side.system.to_string(),
            messages,
            tools: Vec::new(),
            thinking: None,
            effort: None,
            server_tools: vec![side.tool.clone()],
        };
        let agent_id = agent_id_for(id);
        let mut tries = 1;
        let reply = loop {
            let error = match self.request(&request, parent.depth + 1).await {
                Turn::Reply(reply) => break reply,
                Turn::Interrupted => {
                    return ToolOutput::error(transcript::INTERRUPTED_TOOL_RESULT);
                }
                Turn::Failed(error) => EngineError::Model(error),
            };
            let Some(recovery) = &self.config.recovery else {
                return self.subagent_failed(error, totals);
            };
            if !recovery.retry(&agent_id, &error, tries).await {
                return ToolOutput::error(format!("{name} failed: {}", error.for_model()));
            }
            totals.subagent_retries.push(Retried {
                text: retried_text(&agent_id, &error),
                kind: error.kind(),
            });
            tries += 1;
        };
        self.count_side_reply(parent, &agent_id, &side, &request.model, &reply, totals);
        match side.result(&reply.content) {
            Ok(text) => ToolOutput::ok(text),
            Err(message) => ToolOutput::error(message),
        }
    }

    /// Adds a side reply's tokens and cost to the run's and stores the exchange under
    /// the session, where the figures read it.
    fn count_side_reply(
        &self,
        parent: &subagent::Parent<'_>,
        agent_id: &str,
        side: &SideRequest,
        model: &str,
        reply: &ModelReply,
        totals: &mut Totals,
    ) {
        totals.usage.add(&reply.usage);
        totals.add_cost(crate::model::prices::request_cost_usd(model, &reply.usage));
        let Ok(key) = parent.key.sub(&format!("subagents/agent-{agent_id}")) else {
            return;
        };
        let mut chain = Chain::sidechain(&parent.session_id, &self.config.workspace, agent_id);
        let prompt = chain.user_text(&side.prompt);
        let answer = chain.assistant(reply);
        // The result goes back to the model whatever happens here; a store that cannot
        // write fails the run's own next append, which says why.
        let _ = self.config.store.append(&key, &[prompt, answer]);
    }
}
