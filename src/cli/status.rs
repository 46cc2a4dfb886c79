//! The live status line's content: what a run has done so far, folded from events, and
//! the one summary line printed when the pipeline ends. Drawing (where and when) is the
//! renderer's job (`render.rs`); this only knows what to say.

use super::format::display_width;
use super::format::duration;
use super::format::{cost, tokens};
use flower::engine::recovery::agent_id_for;
use flower::engine::{Event, GENERAL_PURPOSE};
use flower::tools::names::TASK;
use std::collections::BTreeMap;
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
    /// The run's cost so far: what the manifest said when this process began
    /// ([`Status::set_cost_before`]) plus what this process's turns reported. `None`
    /// once a model's price is unknown.
    pub cost: Option<f64>,
    /// What the current engine run had reported (its turns' costs are cumulative).
    reported: f64,
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
    /// When the outage began and what is probed, for the live wait.
    offline_since: Option<(Instant, String)>,
    /// The model request in flight (the main session's or a sub-agent's): when it was
    /// sent and how many characters of its reply have streamed back.
    pub request: Option<(Instant, usize)>,
    /// The sub-agents at work, in the order they started: several run at once when a
    /// reply dispatches several `Task` calls.
    pub subagents: Vec<Lane>,
    pub turns: u64,
    pub peak_context: u64,
    /// The step's own session is waiting for a reply: the turn shown is the one
    /// awaited (`第 1 轮` before the first reply, never `第 0 轮`).
    awaiting: bool,
    /// Per plain step: the context of its session's last turn and its generation, as
    /// the banner read them from the run (set by [`Status::know`]) and as this
    /// process's turns and handoffs moved them; a continued session starts from them.
    known: BTreeMap<String, (u64, u32)>,
    /// Background commands running now (id, command), oldest first.
    pub background: Vec<(String, String)>,
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
            cost: Some(0.0),
            reported: 0.0,
            window: None,
            generation: None,
            handoffs: 0,
            offline: None,
            offline_since: None,
            request: None,
            subagents: Vec::new(),
            turns: 0,
            peak_context: 0,
            awaiting: false,
            known: BTreeMap::new(),
            background: Vec::new(),
        }
    }

    /// Folds one event in.
    pub fn observe(&mut self, event: &Event) {
        self.observe_wait(event);
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
                self.awaiting = false;
                self.peak_context = self.peak_context.max(*context);
                self.turns += 1;
                let generation = self.generation.unwrap_or(1);
                self.known
                    .insert(base_of(&self.step), (*context, generation));
                // Cumulative per engine run: only what is new since its last turn.
                match (self.cost.as_mut(), cost_usd) {
                    (Some(total), Some(now)) => {
                        *total += now - self.reported;
                        self.reported = *now;
                    }
                    _ => self.cost = None,
                }
                self.offline = None;
            }
            Event::SessionStarted { depth: 0, .. } => self.reported = 0.0,
            Event::Requesting { depth: 0 } => self.awaiting = true,
            Event::StepStarted { step, resumed, .. } => {
                // A continued session shows where it stands before its first reply
                // (the banner's figures); a new one starts at nothing.
                let known = self.known.get(&base_of(step)).copied();
                let (context, generation) = match (resumed, known) {
                    (true, Some(known)) => known,
                    _ => (0, 1),
                };
                self.context = context;
                self.generation = (generation > 1).then_some(generation);
                self.step = step.clone();
                self.turn = 0;
                self.awaiting = false;
            }
            Event::Offline {
                waited_s,
                database,
                endpoint,
            } => {
                self.offline = Some((*waited_s, *database));
                if self.offline_since.is_none() {
                    let since = Instant::now()
                        .checked_sub(std::time::Duration::from_secs_f64(*waited_s))
                        .unwrap_or_else(Instant::now);
                    self.offline_since = Some((since, endpoint.clone()));
                }
            }
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
                self.known.insert(base_of(&self.step), (0, *generation));
            }
            Event::Online { .. } | Event::OfflineWaitInterrupted { .. } => {
                self.offline = None;
                self.offline_since = None;
            }
            Event::BackgroundStarted { id, command, .. } => {
                self.background.push((id.clone(), command.clone()))
            }
            Event::BackgroundEnded { id, .. } => self.background.retain(|(own, _)| own != id),
            _ => {}
        }
    }

    /// What is being waited for: the request in flight, the sub-agent at work.
    fn observe_wait(&mut self, event: &Event) {
        match event {
            Event::Requesting { .. } => self.request = Some((Instant::now(), 0)),
            Event::TextDelta { text, .. } | Event::ThinkingDelta { text, .. } => {
                if let Some((_, streamed)) = self.request.as_mut() {
                    *streamed += text.chars().count();
                }
            }
            Event::TurnDone { .. } | Event::Retrying { .. } | Event::Offline { .. } => {
                self.request = None
            }
            Event::StepStarted { .. } => {
                self.request = None;
                self.subagents.clear();
            }
            _ => self.observe_lanes(event),
        }
    }

    /// Which sub-agents are at work, and what each is doing.
    fn observe_lanes(&mut self, event: &Event) {
        match event {
            Event::ToolCall {
                name,
                summary,
                depth: 0,
                id,
                ..
            } if name == TASK => self.subagents.push(Lane {
                id: id.clone(),
                task: summary.clone(),
                role: None,
                tool: None,
            }),
            Event::ToolDone {
                name, depth: 0, id, ..
            } if name == TASK => self.subagents.retain(|lane| lane.id != *id),
            Event::SessionStarted {
                agent,
                session_id,
                depth: 1,
                ..
            } => {
                if let Some(i) = self.lane_of_session(session_id) {
                    self.subagents[i].role = (agent != GENERAL_PURPOSE).then(|| agent.clone());
                }
            }
            Event::ToolCall {
                name,
                task: Some(task),
                ..
            } => {
                if let Some(lane) = self.subagents.iter_mut().find(|l| l.id == *task) {
                    lane.tool = Some(name.clone());
                }
            }
            Event::ToolDone {
                task: Some(task), ..
            } => {
                if let Some(lane) = self.subagents.iter_mut().find(|l| l.id == *task) {
                    lane.tool = None;
                }
            }
            _ => {}
        }
    }

    /// The lane of the sub-agent whose session is `session_id` (`<parent>/<agent id>`).
    pub fn lane_of_session(&self, session_id: &str) -> Option<usize> {
        let own = session_id.rsplit('/').next().unwrap_or_default();
        self.subagents.iter().position(|lane| {
            let id = agent_id_for(&lane.id);
            own == id || own.starts_with(&format!("{id}-"))
        })
    }

    /// The live parts of the line while waiting: the request's wait and what has
    /// streamed back (≈ 4 characters a token), the sub-agents' tasks. While several
    /// sub-agents work, a request's wait is one of theirs: each lane says instead what
    /// its sub-agent does.
    fn waiting(&self) -> String {
        let mut parts = String::new();
        if let Some((since, streamed)) = self.request.filter(|_| self.subagents.len() < 2) {
            parts.push_str(&format!(" · 等回复 {}s", since.elapsed().as_secs()));
            if streamed > 0 {
                parts.push_str(&format!(
                    " · 已收 ~{} tokens",
                    tokens(streamed.div_ceil(4) as u64)
                ));
            }
        }
        parts.push_str(&lanes(&self.subagents));
        parts
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
            // Counted on between probes, so the line moves while it waits.
            let (waited, probe) = match &self.offline_since {
                Some((since, endpoint)) => {
                    (since.elapsed().as_secs_f64(), format!("(探测 {endpoint})"))
                }
                None => (waited, String::new()),
            };
            return format!("{step}{away},已等 {waited:.0}s · 用时 {elapsed}{probe}");
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
            "{step}第 {} 轮 · 上下文 {}{window}{generation} · {} · 用时 {elapsed}{}{}",
            self.turn + u32::from(self.awaiting),
            tokens(self.context),
            cost(self.cost),
            self.waiting(),
            background(&self.background)
        )
    }

    /// What the run knows of a step's session before this process runs it: the
    /// context of its last turn and its generation (the banner's figures).
    pub fn know(&mut self, step: &str, context: u64, generation: u32) {
        self.known.insert(step.to_owned(), (context, generation));
    }

    /// What the run had cost before this process began (the manifest's rows, as
    /// `flower log` sums them).
    pub fn set_cost_before(&mut self, before: f64) {
        if let Some(total) = self.cost.as_mut() {
            *total += before;
        }
    }

    /// The line printed when the pipeline ends: this wake's wall time, then the run's
    /// figures as `flower log` totals them (`run`), else as this process saw them.
    pub fn summary(&self, verdict: &str, run: Option<&flower::inspect::Totals>) -> String {
        let (spent, turns, peak, handoffs) = match run {
            Some(t) => (
                (!t.cost_partial).then_some(t.cost_usd),
                t.turns,
                t.peak_context,
                t.handoffs as u32,
            ),
            None => (self.cost, self.turns, self.peak_context, self.handoffs),
        };
        format!(
            "== {verdict} · 用时 {} · {} · {} 轮 · 峰值上下文 {} · 换代 {} ==",
            duration(self.started.elapsed().as_secs_f64()),
            cost(spent),
            turns,
            tokens(peak),
            handoffs
        )
    }
}

/// Characters of the newest background command shown (the line must fit a row).
const BACKGROUND_COMMAND_CHARS: usize = 20;

/// ` · 后台 2:npm run dev` (the count, then the newest command, cut): what runs in
/// the background; nothing when nothing does.
pub fn background(running: &[(String, String)]) -> String {
    let Some((_, newest)) = running.last() else {
        return String::new();
    };
    let line = newest.lines().next().unwrap_or_default();
    let mut shown: String = line.chars().take(BACKGROUND_COMMAND_CHARS).collect();
    if shown.len() < newest.len() {
        shown.push('…');
    }
    format!(" · 后台 {}:{shown}", running.len())
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

/// The session an attempt name continues: its plain step's (`干活#round2` → `干活`);
/// a judge's is its own (every round a new session).
fn base_of(step: &str) -> String {
    match flower::inspect::parse_step_name(step) {
        (_, flower::inspect::AttemptKind::Judge(_)) => step.to_owned(),
        (base, _) => base,
    }
}

/// A sub-agent at work, as the status line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    /// Its `Task` call's id.
    pub id: String,
    /// What it was asked to do (the call's description).
    pub task: String,
    /// Its agent's name, unless it is the default one.
    pub role: Option<String>,
    /// The tool it runs now; `None` while it waits on the model.
    pub tool: Option<String>,
}

/// Lanes shown by name; more are counted.
const LANES_SHOWN: usize = 3;
/// Columns of a lane's task shown (the line must fit one terminal row, or its
/// redraw leaves copies behind).
const LANE_TASK_COLUMNS: usize = 16;

/// The sub-agents' part of the status line: ` · 子代理在做:修解析器(Read)` for one,
/// ` · 3 个子代理在做:修解析器(Read) | 写测试 | 查文档(Bash)` for several (a lane
/// without a tool waits on the model), past [`LANES_SHOWN`] ` | 另 2 个`.
pub fn lanes(lanes: &[Lane]) -> String {
    let shown: Vec<String> = lanes.iter().take(LANES_SHOWN).map(lane).collect();
    if shown.is_empty() {
        return String::new();
    }
    let mut text = match lanes.len() {
        1 => " · 子代理在做:".to_string(),
        n => format!(" · {n} 个子代理在做:"),
    };
    text.push_str(&shown.join(" | "));
    if lanes.len() > LANES_SHOWN {
        text.push_str(&format!(" | 另 {} 个", lanes.len() - LANES_SHOWN));
    }
    text
}

fn lane(lane: &Lane) -> String {
    let mut text = fit(&lane.task, LANE_TASK_COLUMNS);
    if let Some(role) = &lane.role {
        text = format!("{}:{text}", fit(role, LANE_TASK_COLUMNS));
    }
    if let Some(tool) = &lane.tool {
        text.push_str(&format!("({tool})"));
    }
    text
}

/// `text` cut to `columns` display columns, with `…` when cut.
pub fn fit(text: &str, columns: usize) -> String {
    if display_width(text) <= columns {
        return text.to_string();
    }
    let mut out = String::new();
    let mut width = 0;
    for c in text.chars() {
        let wide = display_width(c.encode_utf8(&mut [0; 4]));
        // One column is kept for the `…`.
        if width + wide + 1 > columns {
            break;
        }
        width += wide;
        out.push(c);
    }
    out.push('…');
    out
}
