//! What a run spent before it proper began: a main session resumed with a `Task`
//! call cut short continues that sub-agent first (see [`super::recovery`] and
//! `Engine::continue_calls`), and its cost counts in the run's result.

use super::{RunResult, Totals};

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
