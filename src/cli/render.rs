//! Rendering engine events for a person: the assistant's text streams to stdout, one
//! short line per tool call goes to stderr, and on a terminal a live status line (step,
//! turn, context, cost) is redrawn in place. `NO_COLOR` and non-terminal output are
//! respected: no colours, no redrawn lines.

use super::format::{display_width, tokens};
use super::out::{self, err, errln};
use super::status::{self, Status};
use flower::engine::{Event, EventSink};
use flower::settings::Terminal;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// How often the live status line is redrawn while nothing else is printed (a request
/// in flight, a sub-agent at work, an outage): its seconds move at least once a second.
const TICK: Duration = Duration::from_millis(500);

/// Set while a line is read from the terminal: the live line is not drawn over what
/// the user types.
static PAUSED: AtomicBool = AtomicBool::new(false);

/// Stops (`true`) or resumes the live line's redraws, around reading a line.
pub fn pause(paused: bool) {
    PAUSED.store(paused, Ordering::SeqCst);
}

/// Width of a step header up to the step counter: `== 干活 ` plus 30 `=`.
const HEADER_WIDTH: usize = 38;

/// `== 干活 ==============================  3/3  <- 接上次 · 第 3 次唤醒`.
pub fn step_header(step: &str, index: usize, total: usize, resumed: bool, woke: u64) -> String {
    let head = format!("== {step} ");
    let fill = HEADER_WIDTH.saturating_sub(display_width(&head)).max(3);
    let mut line = format!("{head}{}", "=".repeat(fill));
    if total > 0 {
        line.push_str(&format!("  {index}/{total}"));
    }
    if resumed {
        line.push_str(&format!("  <- 接上次 · 第 {woke} 次唤醒"));
    }
    line
}

/// `== 干活 换代 → 第 2 代 (上下文 121.4K) ==`: a step's session hands off.
pub fn handoff_line(step: &str, generation: u32, context: u64) -> String {
    format!(
        "== {step} 换代 → 第 {generation} 代 (上下文 {}) ==",
        tokens(context)
    )
}

/// Under the handoff line when the window was hit and nobody was asked.
pub const MECHANICAL_NOTE: &str =
    "  上下文撞到了窗口:交接书由 flower 从现有材料机械拼出,没有再问那条会话";

#[derive(Default)]
struct State {
    /// What the live status line says (`status.rs`).
    status: Status,
    /// stdout ended without a newline (text mid-stream).
    mid_line: bool,
    /// A status line is drawn on stderr.
    status_shown: bool,
    /// The thinking marker of the current reply was shown.
    thinking_shown: bool,
    /// The output was ended ([`Renderer::finish`]): no more redraws.
    finished: bool,
    /// Each plain step's place in the workflow (`3/3`), from its header: its retries,
    /// rounds and judges are shown at the same place.
    places: std::collections::BTreeMap<String, (usize, usize)>,
}

/// Renders events; shared by the event sink.
pub struct Renderer {
    color: bool,
    live: bool,
    /// Whether step headers are printed (the workflow) or not (`flower once`).
    headers: bool,
    state: Mutex<State>,
}

impl Renderer {
    /// A renderer for this process's terminal, as `terminal` (the settings' `NO_COLOR`
    /// and `TERM`) describes it.
    pub fn new(headers: bool, terminal: &Terminal) -> Arc<Self> {
        let err_tty = std::io::stderr().is_terminal();
        let renderer = Arc::new(Renderer {
            color: err_tty && !terminal.no_color,
            live: status::live(
                std::io::stdout().is_terminal(),
                err_tty,
                terminal.term.as_deref(),
            ),
            headers,
            state: Mutex::new(State::default()),
        });
        if renderer.live {
            let weak = Arc::downgrade(&renderer);
            std::thread::spawn(move || tick_until_finished(weak));
        }
        renderer
    }

    /// Redraws the live line with what it says now (the waits' seconds move).
    fn tick(&self) {
        if PAUSED.load(Ordering::SeqCst) {
            return;
        }
        let mut state = self.lock();
        // Never into streamed text, never before a step began (the first question).
        if state.finished || state.mid_line || state.status.step.is_empty() {
            return;
        }
        let text = state.status.line();
        self.draw_status(&mut state, &text);
    }

    /// Whether a live status line is drawn (a terminal, see [`status::live`]).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The event sink that renders through this renderer.
    pub fn sink(self: &Arc<Self>) -> EventSink {
        let renderer = self.clone();
        Arc::new(move |event| renderer.render(event))
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Prints a line on stdout (banner, headers), ending any text mid-line first.
    pub fn line(&self, text: &str) {
        let mut state = self.lock();
        self.clear_status(&mut state);
        let lead = if state.mid_line { "\n" } else { "" };
        state.mid_line = false;
        out::to_stdout(format_args!("{lead}{text}\n"));
    }

    /// Prints a note on stderr.
    pub fn note(&self, text: &str) {
        let mut state = self.lock();
        self.clear_status(&mut state);
        self.end_text_line(&mut state);
        errln!("{text}");
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn clear_status(&self, state: &mut State) {
        if state.status_shown {
            err!("\r\x1b[2K");
            state.status_shown = false;
        }
    }

    fn end_text_line(&self, state: &mut State) {
        if state.mid_line {
            out::to_stdout(format_args!("\n"));
            state.mid_line = false;
        }
    }

    fn draw_status(&self, state: &mut State, text: &str) {
        if !self.live {
            return;
        }
        self.clear_status(state);
        err!("{}", self.paint("2", text));
        state.status_shown = true;
    }

    pub fn render(&self, event: &Event) {
        let mut state = self.lock();
        state.status.observe(event);
        match event {
            Event::TextDelta { .. } | Event::ThinkingDelta { .. } => {
                self.render_stream(&mut state, event)
            }
            Event::SessionStarted { .. }
            | Event::ToolCall { .. }
            | Event::ToolDenied { .. }
            | Event::ToolDone { .. } => self.render_tool(&mut state, event),
            Event::TurnDone { .. } => self.render_turn(&mut state, event),
            Event::Retrying { .. }
            | Event::Offline { .. }
            | Event::Warning { .. }
            | Event::Online { .. }
            | Event::OfflineWaitInterrupted { .. } => self.render_resilience(&mut state, event),
            Event::StepStarted { .. } | Event::Handoff { .. } | Event::StepSkipped { .. } => {
                self.render_workflow(state, event)
            }
            // Shown by the ticker: the line's wait starts now; the status line lists
            // what runs in the background.
            Event::Requesting { .. }
            | Event::BackgroundStarted { .. }
            | Event::BackgroundEnded { .. } => {}
            // The manifest and the verdict line say these (for the export).
            Event::AttemptDone { .. } | Event::Judged { .. } => {}
        }
    }

    /// Text and thinking deltas: text streams to stdout; thinking is never mixed into
    /// the answer, one dim line on stderr per block.
    fn render_stream(&self, state: &mut State, event: &Event) {
        match event {
            Event::TextDelta { text, depth: 0 } => {
                state.thinking_shown = false;
                self.clear_status(state);
                out::to_stdout(format_args!("{text}"));
                state.mid_line = !text.ends_with('\n');
            }
            Event::ThinkingDelta { depth, .. } if !state.thinking_shown => {
                state.thinking_shown = true;
                self.clear_status(state);
                self.end_text_line(state);
                errln!(
                    "{}",
                    self.paint("2", &format!("{}✻ 思考中…", indent(*depth)))
                );
            }
            _ => {}
        }
    }

    /// Sub-agent starts and tool calls, denials and errors: one short line on stderr.
    fn render_tool(&self, state: &mut State, event: &Event) {
        match event {
            Event::SessionStarted {
                agent,
                depth,
                session_id,
                ..
            } if *depth > 0 => {
                self.clear_status(state);
                self.end_text_line(state);
                let task = state
                    .status
                    .lane_of_session(session_id)
                    .map(|i| state.status.subagents[i].id.clone());
                let whose = whose(&state.status, task.as_deref());
                errln!(
                    "{}",
                    self.paint(
                        "2",
                        &format!("{}{whose}↳ 子代理 {agent}", indent(*depth - 1))
                    )
                );
            }
            Event::ToolCall {
                name,
                summary,
                depth,
                task,
                ..
            } => {
                state.thinking_shown = false;
                self.clear_status(state);
                self.end_text_line(state);
                errln!(
                    "{}{}{} {}",
                    indent(*depth),
                    whose(&state.status, task.as_deref()),
                    self.paint("36", &format!("⏺ {name}")),
                    summary
                );
            }
            Event::ToolDenied {
                name,
                summary,
                by,
                depth,
                ..
            } => {
                self.clear_status(state);
                self.end_text_line(state);
                errln!(
                    "{}{}",
                    indent(*depth),
                    self.paint("33", &denied_line(name, summary, by))
                );
            }
            Event::ToolDone {
                name,
                is_error: true,
                interrupted,
                depth,
                task,
                ..
            } => {
                self.clear_status(state);
                // A Ctrl-C is the person's doing, not the tool's failure.
                let said = match (*interrupted, name.as_str()) {
                    (true, flower::tools::names::ASK_USER) => "  问题取消了(Ctrl-C)".to_string(),
                    (true, _) => format!("  {name} 被打断了(Ctrl-C)"),
                    (false, _) => format!("  {name} 出错"),
                };
                let whose = whose(&state.status, task.as_deref());
                errln!("{}{whose}{}", indent(*depth), self.paint("2", &said));
            }
            _ => {}
        }
    }

    /// The end of a top-level turn redraws the status line.
    fn render_turn(&self, state: &mut State, event: &Event) {
        if let Event::TurnDone { depth: 0, .. } = event {
            state.thinking_shown = false;
            let text = state.status.line();
            // Never into streamed text: the line waits for the text's line end.
            if !state.mid_line {
                self.draw_status(state, &text);
            }
        }
    }

    /// Retries, offline waits, warnings and the network coming back.
    fn render_resilience(&self, state: &mut State, event: &Event) {
        match event {
            Event::Retrying {
                attempt,
                max_attempts,
                delay_s,
                error,
                depth,
            } => {
                self.clear_status(state);
                self.end_text_line(state);
                let who = if *depth > 0 { "子代理" } else { "" };
                errln!(
                    "{}{}",
                    indent(*depth),
                    self.paint(
                        "33",
                        &format!(
                            "↻ {delay_s:.0}s 后{who}第 {attempt}/{max_attempts} 次尝试({error})"
                        )
                    )
                );
            }
            Event::Offline {
                waited_s,
                endpoint,
                database,
            } => {
                self.end_text_line(state);
                if self.live {
                    let text = state.status.line();
                    self.draw_status(state, &text);
                } else {
                    let away = super::status::away(*database);
                    errln!("  {away},已等 {waited_s:.0}s(探测 {endpoint})");
                }
            }
            Event::Warning { message } => {
                self.clear_status(state);
                self.end_text_line(state);
                errln!("{}", self.paint("33", &format!("flower: {message}")));
            }
            Event::Online { database } => {
                self.clear_status(state);
                let back = if *database {
                    "数据库恢复"
                } else {
                    "网络恢复"
                };
                errln!("  {back},接着跑");
            }
            Event::OfflineWaitInterrupted { waited_s, database } => {
                self.clear_status(state);
                self.end_text_line(state);
                let away = super::status::away(*database);
                errln!(
                    "  已打断等待({away},等了 {waited_s:.0}s),现在再试一次;再按一次 Ctrl-C 退出"
                );
            }
            _ => {}
        }
    }

    /// Step headers and handoff lines; they print through `line`/`note`, so the state
    /// lock is released first.
    fn render_workflow(&self, state: MutexGuard<'_, State>, event: &Event) {
        match event {
            Event::StepStarted {
                step,
                index,
                total,
                resumed,
                woke,
            } if self.headers => {
                let mut state = state;
                let base = flower::inspect::parse_step_name(step).0;
                let (index, total) = match *total {
                    0 => state.places.get(&base).copied().unwrap_or((0, 0)),
                    total => {
                        state.places.insert(base, (*index, total));
                        (*index, total)
                    }
                };
                drop(state);
                self.line(&step_header(step, index, total, *resumed, *woke));
            }
            Event::Handoff {
                step,
                generation,
                context,
                mechanical,
            } => {
                // The status folded it in (a new generation starts at turn 0).
                drop(state);
                self.line(&handoff_line(step, *generation, *context));
                if *mechanical {
                    self.note(MECHANICAL_NOTE);
                }
            }
            Event::StepSkipped { step, index, total } if self.headers => {
                drop(state);
                let mut line = step_header(step, *index, *total, false, 0);
                line.push_str("  <- 已冻结,跳过");
                self.line(&line);
            }
            _ => {}
        }
    }

    /// What the run had cost before this process (see [`Status::set_cost_before`]).
    pub fn set_cost_before(&self, before: f64) {
        self.lock().status.set_cost_before(before);
    }

    /// The context window the status line shows context against.
    pub fn set_window(&self, window: u64) {
        self.lock().status.window = Some(window);
    }

    /// How the finished pipeline ended, said once: on a live terminal the summary line
    /// (verdict, wall time, cost, turns, peak context, handoffs) and then `advice`;
    /// otherwise `plain`, as piped output always said it.
    pub fn verdict(
        &self,
        plain: &str,
        verdict: &str,
        advice: Option<&str>,
        run: Option<&flower::inspect::Totals>,
    ) {
        if !self.live {
            self.note(plain);
            return;
        }
        let mut state = self.lock();
        self.clear_status(&mut state);
        self.end_text_line(&mut state);
        let line = state.status.summary(verdict, run);
        errln!("{}", self.paint("1", &line));
        if let Some(advice) = advice {
            errln!("{advice}");
        }
    }

    /// What the run knows of a step's session before this process runs it (the
    /// banner's context and generation): the status line starts from it.
    pub fn know(&self, step: &str, context: u64, generation: u32) {
        self.lock().status.know(step, context, generation);
    }

    /// Ends the output cleanly (final newline, no status line left behind).
    pub fn finish(&self) {
        let mut state = self.lock();
        state.finished = true;
        self.clear_status(&mut state);
        self.end_text_line(&mut state);
    }
}

/// The ticker's loop: redraws until the renderer is finished or gone.
fn tick_until_finished(renderer: Weak<Renderer>) {
    loop {
        std::thread::sleep(TICK);
        let Some(renderer) = renderer.upgrade() else {
            return;
        };
        if renderer.lock().finished {
            return;
        }
        renderer.tick();
    }
}

fn indent(depth: u32) -> String {
    "  ".repeat(depth as usize + 1)
}

/// `✗ Bash 被拒:rm x(规则 Bash(rm:*))`: the call and what stopped it.
fn denied_line(name: &str, summary: &str, by: &flower::events::DeniedBy) -> String {
    use flower::events::DeniedBy;
    let call = match summary.trim() {
        "" => name.to_string(),
        summary => format!("{name} {summary}"),
    };
    match by {
        DeniedBy::Rule { rule: Some(rule) } => format!("✗ {call} 被拒(权限规则 {rule})"),
        DeniedBy::Rule { rule: None } => format!("✗ {call} 被拒(没有允许它的权限规则)"),
        DeniedBy::Person => format!("✗ {call} 被拒(要人确认,没有得到允许)"),
        DeniedBy::Hook { reason } => {
            // The hook's own words: after `:` when Chinese, else in parentheses.
            let first = reason.lines().next().unwrap_or_default().trim();
            match first {
                "" => format!("✗ {call} 被 PreToolUse hook 拦下"),
                said => format!(
                    "✗ {call} 被 PreToolUse hook 拦下{}",
                    super::said::reason(said)
                ),
            }
        }
    }
}

/// `[修解析器] ` before a sub-agent's tool line while several sub-agents work, so that
/// their interleaved lines say whose they are; nothing otherwise.
fn whose(status: &Status, task: Option<&str>) -> String {
    if status.subagents.len() < 2 {
        return String::new();
    }
    status
        .subagents
        .iter()
        .find(|lane| Some(lane.id.as_str()) == task)
        .map(|lane| format!("[{}] ", status::fit(&lane.task, 16)))
        .unwrap_or_default()
}
