//! Where a run stands, as the list shows it and `/api/runs` gives it: every figure
//! from `flower::inspect` (the one source of `flower log`'s and the report's), and the
//! session at work from the store's newest write.

use super::source::Holding;
use crate::cli::report::ReportOptions;
use flower::inspect::{AttemptKind, Run, Tokens};
use serde::Serialize;

/// One run, summed up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    pub key: String,
    pub workspace: String,
    /// The step at work (the one whose session was written last), else the last one
    /// the manifest recorded.
    pub step: Option<String>,
    /// The work round (`干活#round<N>`; 1 before any was sent back).
    pub round: u32,
    /// The step's session generation (1 = its first session; each 换代 adds one).
    pub generation: u32,
    /// The context of the step's session at its last turn, tokens.
    pub context: u64,
    pub window: u64,
    /// `context / window`.
    pub context_share: f64,
    pub cost_usd: f64,
    /// A model's price was unknown: the cost is a floor.
    pub cost_partial: bool,
    pub turns: u64,
    pub tokens: Tokens,
    /// Input, output and cache tokens together.
    pub tokens_total: u64,
    /// The newest write to the run's transcripts or manifest, ms since the epoch.
    pub last_activity_ms: Option<i64>,
    pub host: Option<String>,
    /// A process holds the run's lock now.
    pub running: bool,
    pub holder: Option<String>,
    /// The last attempt's outcome: passed, failed (with its error) or none yet.
    pub last_ok: Option<bool>,
    pub attempts: usize,
    /// The session written last.
    pub session: Option<String>,
    /// The run in whose workspace this run directory lies (an agent of that run may
    /// have written it): listed apart from the person's runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inside: Option<String>,
}

impl RunSummary {
    // Long because it reads each of the list's columns off the inspected run in turn,
    // which is clearer in one place than split by column.
    pub fn of(key: &str, run: &Run) -> RunSummary {
        let sessions = run.sessions();
        let totals = run.totals(&sessions);
        let recent = run.recent_sessions();
        let newest = recent.first();
        let last = run.attempts.last();
        let at_work = newest.and_then(|(id, _)| sessions.iter().find(|s| &s.session_id == id));
        // A session neither the manifest nor lineage names yet is a judge's: every
        // other step's session is in lineage from its first write
        // (`workflow::attempt`), a judge's only once its row is written.
        let base = at_work
            .map(|s| s.step.clone())
            .or_else(|| last.map(|a| a.base.clone()));
        let judging = at_work.map_or(newest.is_some() && last.is_some(), |s| s.judge);
        let step = base.as_ref().map(|b| {
            if judging {
                format!("{b}·判定")
            } else {
                b.clone()
            }
        });
        let context = at_work
            .and_then(|s| s.turns.last())
            .map(|t| t.context)
            .or_else(|| last.map(|a| a.context))
            .unwrap_or(0);
        let generation = base.as_deref().map_or(1, |step| {
            let chain = sessions
                .iter()
                .filter(|s| !s.judge && s.step == step)
                .count();
            chain.max(1) as u32
        });
        let round = run
            .attempts
            .iter()
            .filter_map(|a| match a.kind {
                AttemptKind::Round(n) => Some(n),
                _ => None,
            })
            .max()
            .unwrap_or(1);
        let window = ReportOptions::for_run(run, &sessions).window;
        let tokens = totals.tokens;
        let last_activity_ms = newest
            .map(|(_, at)| *at)
            .into_iter()
            .chain(run.attempts.iter().filter_map(|a| a.ended_ms))
            .max();
        RunSummary {
            key: key.to_string(),
            workspace: run.workspace.display().to_string(),
            step,
            round,
            generation,
            context,
            window,
            context_share: if window > 0 {
                context as f64 / window as f64
            } else {
                0.0
            },
            cost_usd: totals.cost_usd,
            cost_partial: totals.cost_partial,
            turns: totals.turns,
            tokens,
            tokens_total: tokens.input + tokens.output + tokens.cache_creation + tokens.cache_read,
            last_activity_ms,
            host: None,
            running: false,
            holder: None,
            last_ok: last.map(|a| a.ok),
            attempts: run.attempts.len(),
            session: newest.map(|(id, _)| id.clone()),
            inside: None,
        }
    }

    /// The summary with who holds the run now (asked on every look, never cached).
    pub fn held(mut self, holding: Holding) -> RunSummary {
        self.running = holding.running;
        self.holder = holding.holder;
        self.host = holding.host;
        self
    }

    /// A run that could not be read: its key and why, nothing else.
    pub fn unreadable(key: &str, workspace: &str) -> RunSummary {
        RunSummary {
            key: key.to_string(),
            workspace: workspace.to_string(),
            round: 1,
            generation: 1,
            ..RunSummary::default()
        }
    }
}
