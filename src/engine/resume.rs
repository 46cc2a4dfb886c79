//! Resuming a main session whose last turn was cut short while a `Task` call's
//! sub-agent worked: the call goes on in the sub-agent's own session (see
//! [`super::recovery`]) instead of being answered as interrupted and sent out again.

use super::{Call, Engine, RunError, RunResult, Totals};
use crate::stores::SessionKey;
use crate::transcript::{self, Kind, Loaded};
use serde_json::Value;

impl Engine {
    /// [`Engine::load_for_resume`] for a main session whose last turn's calls never got
    /// their results because the process died (or the run was retried) while a `Task`
    /// call's sub-agent was working: those calls are returned, in order, instead of the
    /// neutral answers pruning made up, so that the sub-agent is continued in its own
    /// session ([`Engine::continue_calls`]) rather than the task sent out again.
    pub(super) fn load_resumable(
        &self,
        key: &SessionKey,
    ) -> Result<(Vec<Loaded>, Vec<Call>), RunError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        let mut pruned = store
            .load_entries(key)
            .map_err(|source| RunError::ReadSession { id: id(), source })?
            .ok_or_else(|| RunError::NoSession(id()))?;
        let calls = self.continuable_calls(key, &pruned);
        if calls.is_empty() {
            self.store_synthesized(key, &pruned)?;
        } else {
            pruned.truncate(pruned.len() - calls.len());
        }
        Ok((pruned, calls))
    }

    /// The calls answered by the synthesized results that end `pruned`, when one of
    /// them is a `Task` whose sub-agent session exists; none otherwise.
    fn continuable_calls(&self, key: &SessionKey, pruned: &[Loaded]) -> Vec<Call> {
        let synthesized = |e: &Loaded| {
            e.maybe_synthesized && crate::stores::prune::is_synthesized_result(&e.value())
        };
        let tail = pruned.iter().rev().take_while(|e| synthesized(e)).count();
        if tail == 0 || pruned.iter().filter(|e| synthesized(e)).count() != tail {
            return Vec::new();
        }
        let (before, synthesized) = pruned.split_at(pruned.len() - tail);
        let Some(turn) = before.iter().rev().find(|e| e.kind == Kind::Assistant) else {
            return Vec::new();
        };
        let turn = turn.value();
        let content = turn
            .pointer("/message/content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let uses = transcript::tool_uses(content);
        let mut calls = Vec::new();
        for entry in synthesized {
            let entry = entry.value();
            let Some(call_id) = entry
                .pointer("/message/content/0/tool_use_id")
                .and_then(Value::as_str)
            else {
                return Vec::new();
            };
            match uses.iter().find(|(id, _, _)| id == call_id) {
                Some(call) => calls.push(call.clone()),
                None => return Vec::new(),
            }
        }
        let continuable = calls.iter().any(|(id, name, _)| {
            name == super::subagent::TASK
                && key
                    .sub(&format!(
                        "subagents/agent-{}",
                        super::recovery::agent_id_for(id)
                    ))
                    .ok()
                    .and_then(|sub| self.config.store.load_raw(&sub).ok().flatten())
                    .is_some()
        });
        if continuable { calls } else { Vec::new() }
    }
}

impl RunResult {
    /// This failed result, with what was spent before the run failed.
    pub(super) fn carrying(mut self, resumed: bool, carried: Totals) -> Self {
        self.resumed = resumed;
        self.add_carried(carried);
        self
    }

    /// Adds what was spent before the run proper began (sub-agents continued on resume).
    pub(super) fn add_carried(&mut self, carried: Totals) {
        self.usage.add(&carried.usage);
        self.cost_usd = match (self.cost_usd, carried.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        let mut denials = carried.denials;
        denials.append(&mut self.permission_denials);
        self.permission_denials = denials;
        let mut retries = carried.subagent_retries;
        retries.append(&mut self.subagent_retries);
        self.subagent_retries = retries;
    }
}
