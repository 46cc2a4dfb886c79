//! The live status line's content: what a run has done so far, folded from events, and
//! the one summary line printed when the pipeline ends. Drawing (where and when) is the
//! renderer's job (`render.rs`); this only knows what to say.

use super::format::duration;
use super::format::{cost, tokens};
use flower::engine::Event;
use std::time::Instant;

/// Whether a live status line may be drawn: both stdout and stderr are terminals and
/// the terminal is not `dumb`. (`NO_COLOR` only takes the colours away.)
pub fn live(stdout_tty: bool, stderr_tty: bool, term: Option<&str>) -> bool {
    stdout_tty && stderr_tty && term != Some("dumb")
}

/// What the status line shows.
#[derive(Debug, Clone)]
pub struct Status {
    started: Instant,
    pub step: String,
    pub turn: u32,
    pub context: u64,
    pub cost: Option<f64>,
    /// The model's context window (set by the pipeline from its handoff settings).
    pub window: Option<u64>,
    /// The session generation of the step (1 = its first session), once a handoff
    /// said it; the step's own counter, so a new step starts again unknown.
    pub generation: Option<u32>,
    /// Handoffs seen (`Event::Handoff`).
    pub handoffs: u32,
    /// While the model's API or the store's database is away: seconds waited so far,
    /// and whether it is the database.
    pub offline: Option<(f64, bool)>,
    pub turns: u64,
    pub peak_context: u64,
}

impl Default for Status {
    fn default() -> Self {
        Status::new(Instant::now())
    }
}

impl Status {
    pub fn new(started: Instant) -> Self {
        Status {
            started,
            step: String::new(),
            turn: 0,
            context: 0,
            cost: None,
            window: None,
            generation: None,
            handoffs: 0,
            offline: None,
            turns: 0,
            peak_context: 0,
        }
    }

    /// Folds one event in.
    pub fn observe(&mut self, event: &Event) {
        match event {
            Event::TurnDone {
                turn,
                context,
                cost_usd,
                depth: 0,
                ..
            } => {
                self.turn = *turn;
                self.context = *context;
                self.peak_context = self.peak_context.max(*context);
                self.turns += 1;
                if cost_usd.is_some() {
                    self.cost = *cost_usd;
                }
                self.offline = None;
            }
            Event::StepStarted { step, .. } => {
                if *step != self.step {
                    self.generation = None;
                }
                self.step = step.clone();
                self.turn = 0;
            }
            Event::Offline {
                waited_s, database, ..
            } => self.offline = Some((*waited_s, *database)),
            Event::Handoff {
                generation,
                context,
                ..
            } => {
                self.handoffs += 1;
                self.generation = Some(*generation);
                self.peak_context = self.peak_context.max(*context);
                self.context = 0;
                self.turn = 0;
            }
            Event::Online { .. } => self.offline = None,
            _ => {}
        }
    }

    /// `[干活] 第 3 轮 · 上下文 80.2K/200.0K · 第 2 代 · $0.0123 · 用时 1m02s`, or the
    /// outage wait while the network is down.
    pub fn line(&self) -> String {
        let step = if self.step.is_empty() {
            String::new()
        } else {
            format!("[{}] ", self.step)
        };
        let elapsed = duration(self.started.elapsed().as_secs_f64());
        if let Some((waited, database)) = self.offline {
            let away = away(database);
            return format!("{step}{away},已等 {waited:.0}s · 用时 {elapsed}");
        }
        let window = self
            .window
            .map(|w| format!("/{}", tokens(w)))
            .unwrap_or_default();
        let generation = self
            .generation
            .map(|g| format!(" · 第 {g} 代"))
            .unwrap_or_default();
        format!(
            "{step}第 {} 轮 · 上下文 {}{window}{generation} · {} · 用时 {elapsed}",
            self.turn,
            tokens(self.context),
            cost(self.cost)
        )
    }

    /// The line printed when the pipeline ends.
    pub fn summary(&self, verdict: &str) -> String {
        format!(
            "== {verdict} · 用时 {} · {} · {} 轮 · 峰值上下文 {} · 换代 {} ==",
            duration(self.started.elapsed().as_secs_f64()),
            cost(self.cost),
            self.turns,
            tokens(self.peak_context),
            self.handoffs
        )
    }
}

/// What an outage line says is away: `数据库连不上` while the store's database cannot be
/// reached, else `网络不通` (the model's API).
pub fn away(database: bool) -> &'static str {
    if database {
        "数据库连不上"
    } else {
        "网络不通"
    }
}
