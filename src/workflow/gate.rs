//! Gates: a check after a step that can send it back. The judge of flower's default
//! pipeline is one ([`super::flower::GoalGate`]).
//!
//! A gate is not a step: it runs its sessions straight through `Runtime::run_step`,
//! after the step's on-session hook was removed, so nothing it runs ever enters lineage.

use super::{Context, Step};
use crate::continuity::runtime::Runtime;
use crate::future::BoxFuture;

/// The outcome of one gate round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Not yet: `feedback` is sent to the step's session for the next round.
    Fail {
        feedback: String,
    },
}

pub trait Gate: Send + Sync {
    /// How many rounds of the step this wake may run in total (the first included).
    fn rounds(&self) -> u32;

    /// Checks the step's work; `round` counts from 1 within this wake.
    fn check<'a>(
        &'a self,
        rt: &'a Runtime,
        step: &'a Step,
        round: u32,
        ctx: &'a Context,
    ) -> BoxFuture<'a, Verdict>;
}
