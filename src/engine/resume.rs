//! Resuming a main session whose last turn was cut short while a `Task` call's
//! sub-agent worked: the call goes on in the sub-agent's own session (see
//! [`super::recovery`]) instead of being answered as interrupted and sent out again.

use super::{Call, Engine, EngineError, RunResult, Totals};
use crate::stores::SessionKey;
use crate::transcript::{self, Kind, Loaded};

impl Engine {
    /// [`Engine::load_for_resume`] for a main session whose last turn's calls never got
    /// all their results because the process died (or the run was retried) while a
    /// `Task` call's sub-agent was working: the calls still unanswered are returned, in
    /// order, instead of the neutral answers pruning made up, so that each sub-agent is
    /// continued in its own session ([`Engine::continue_calls`]) rather than the task
    /// sent out again. The turn's results that were stored (calls of the turn that ran
    /// at the same time and finished) stay.
    pub(super) fn load_resumable(
        &self,
        key: &SessionKey,
    ) -> Result<(Vec<Loaded>, Vec<Call>), EngineError> {
        let store = &self.config.store;
        let id = || key.session_id.clone();
        let mut pruned = store
            .load_entries(key)
            .map_err(|source| EngineError::ReadSession { id: id(), source })?
            .ok_or_else(|| EngineError::NoSession(id()))?;
        let (made_up, calls) = self.continuable_calls(key, &pruned);
        if calls.is_empty() {
            self.store_synthesized(key, &pruned)?;
        } else {
            let mut n = 0;
            pruned.retain(|_| {
                n += 1;
                !made_up.contains(&(n - 1))
            });
        }
        Ok((pruned, calls))
    }

    /// The calls of the last turn that pruning answered with made-up results (where
    /// those are in `pruned`, and the calls in the order of the turn), when one of them
    /// is a `Task` whose sub-agent session exists; none otherwise. After the turn come
    /// only its results, made up or stored.
    fn continuable_calls(&self, key: &SessionKey, pruned: &[Loaded]) -> (Vec<usize>, Vec<Call>) {
        let none = || (Vec::new(), Vec::new());
        let synthesized = |e: &Loaded| {
            e.maybe_synthesized
                && e.json
                    .entry()
                    .is_some_and(|e| crate::stores::prune::is_synthesized_entry(&e))
        };
        let Some(turn_at) = pruned.iter().rposition(|e| e.kind == Kind::Assistant) else {
            return none();
        };
        let Some((made_up, answered)) = turn_results(pruned, turn_at, synthesized) else {
            return none();
        };
        if made_up.is_empty() {
            return none();
        }
        let Some(turn) = pruned[turn_at].json.entry() else {
            return none();
        };
        let unanswered: Vec<&str> = answered
            .iter()
            .filter(|(i, _)| made_up.contains(i))
            .map(|(_, id)| id.as_str())
            .collect();
        let calls: Vec<Call> = turn
            .tool_uses()
            .filter(|u| u.id.as_deref().is_some_and(|id| unanswered.contains(&id)))
            .map(|u| {
                let input = u.input.clone().unwrap_or_default();
                (
                    u.id.clone().unwrap_or_default(),
                    u.name.clone().unwrap_or_default(),
                    input,
                )
            })
            .collect();
        if calls.len() != unanswered.len() {
            return none();
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
        if continuable {
            (made_up, calls)
        } else {
            none()
        }
    }
}

/// The entries after the turn at `turn_at`: which are results pruning made up, and the
/// call each result answers (with where it is). `None` when one is not a result (a
/// prompt after the turn: it was over).
type TurnResults = (Vec<usize>, Vec<(usize, String)>);

fn turn_results(
    pruned: &[Loaded],
    turn_at: usize,
    synthesized: impl Fn(&Loaded) -> bool,
) -> Option<TurnResults> {
    let mut made_up = Vec::new();
    let mut answered = Vec::new();
    for (i, entry) in pruned.iter().enumerate().skip(turn_at + 1) {
        if entry.kind != Kind::User {
            continue;
        }
        let typed = entry.json.entry()?;
        let ids: Vec<String> = typed
            .blocks()
            .iter()
            .map(|b| match b {
                transcript::Block::ToolResult(r) => r.tool_use_id.clone(),
                _ => None,
            })
            .collect::<Option<_>>()
            .filter(|ids: &Vec<String>| !ids.is_empty())?;
        if synthesized(entry) {
            made_up.push(i);
        }
        answered.extend(ids.into_iter().map(|id| (i, id)));
    }
    Some((made_up, answered))
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
