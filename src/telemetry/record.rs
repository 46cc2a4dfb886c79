//! From the run's events to metrics, spans and event records (`docs/telemetry.md` lists
//! each with its attributes).
//!
//! Spans: `flower` (the process) → `step_attempt` → `turn` → `tool`; a sub-agent's
//! turns hang under the newest open tool call of the depth above (its `Task`). Events
//! carry no call ids, so a tool call's end is matched to the oldest open call of the
//! same name and depth, and a turn's end to the oldest open turn of its depth.

use crate::continuity::attempt::AttemptName;
use crate::events::{DeniedBy, Event};
use crate::model::Usage;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::metrics::{Counter, MeterProvider as _};
use opentelemetry::trace::{Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::time::Instant;

/// The instrumentation scope's name, of every signal.
const SCOPE: &str = "flower";

struct Instruments {
    sessions: Counter<u64>,
    tokens: Counter<u64>,
    cost: Counter<f64>,
    edit_decisions: Counter<u64>,
    requests: Counter<u64>,
    retries: Counter<u64>,
    outages: Counter<u64>,
    outage_time: Counter<f64>,
    handoffs: Counter<u64>,
    wakes: Counter<u64>,
    tool_calls: Counter<u64>,
    denials: Counter<u64>,
    attempts: Counter<u64>,
    verdicts: Counter<u64>,
}

impl Instruments {
    fn new(provider: &SdkMeterProvider) -> Instruments {
        let meter = provider.meter(SCOPE);
        let count = |name: &'static str, about: &'static str| {
            meter
                .u64_counter(name)
                .with_unit("count")
                .with_description(about)
                .build()
        };
        Instruments {
            sessions: count("claude_code.session.count", "Sessions started"),
            tokens: meter
                .u64_counter("claude_code.token.usage")
                .with_unit("tokens")
                .with_description("Tokens used, by type and model")
                .build(),
            cost: meter
                .f64_counter("claude_code.cost.usage")
                .with_unit("USD")
                .with_description("Cost of the model requests, by model")
                .build(),
            edit_decisions: count(
                "claude_code.code_edit_tool.decision",
                "Edit and Write calls allowed or refused",
            ),
            requests: count("flower.request.count", "Model requests sent"),
            retries: count("flower.retry.count", "Failed requests that are tried again"),
            outages: count("flower.outage.count", "Outages waited out"),
            outage_time: meter
                .f64_counter("flower.outage.time")
                .with_unit("s")
                .with_description("Time spent waiting for the API or the database to return")
                .build(),
            handoffs: count(
                "flower.handoff.count",
                "Handoffs to a successor session (换代)",
            ),
            wakes: count(
                "flower.wake.count",
                "Processes that continued a run (wakes)",
            ),
            tool_calls: count("flower.tool.call.count", "Tool calls run"),
            denials: count("flower.tool.denial.count", "Tool calls refused"),
            attempts: count("flower.step.attempt.count", "Step attempts ended"),
            verdicts: count(
                "flower.gate.verdict.count",
                "Gate verdicts (the judge's among them)",
            ),
        }
    }
}

struct OpenTool {
    /// The call's `tool_use` id: its end is matched by it.
    id: String,
    name: String,
    depth: u32,
    cx: Context,
    started: Instant,
}

struct OpenTurn {
    depth: u32,
    cx: Context,
    started: Instant,
}

/// The export's side of the run: the instruments and what is open.
pub struct Recorder {
    tracer: Option<SdkTracer>,
    instruments: Option<Instruments>,
    logger: Option<SdkLogger>,
    root: Context,
    attempt: Option<Context>,
    /// The current step (its base name, `干活` for `干活#round2`).
    step: String,
    /// The current step's own session (sub-agents' usage is counted under it, as
    /// Claude Code counts a sub-agent's under its session).
    session: String,
    turns: Vec<OpenTurn>,
    /// The newest finished turn of each depth: the parent of the calls it asked for.
    last_turn: Vec<(u32, Context)>,
    tools: Vec<OpenTool>,
    /// The outage being waited out: waited so far, whether it is the database.
    outage: Option<(f64, bool)>,
    woke_counted: bool,
    /// `flower once`: no step attempts; the turns hang under the root.
    single: bool,
}

impl Recorder {
    pub fn new(
        traces: Option<&SdkTracerProvider>,
        metrics: Option<&SdkMeterProvider>,
        logs: Option<&SdkLoggerProvider>,
    ) -> Recorder {
        let tracer = traces.map(|p| p.tracer(SCOPE));
        let root = match &tracer {
            Some(tracer) => Context::new().with_span(tracer.start("flower")),
            None => Context::new(),
        };
        Recorder {
            tracer,
            instruments: metrics.map(Instruments::new),
            logger: logs.map(|p| p.logger(SCOPE)),
            root,
            attempt: None,
            step: String::new(),
            session: String::new(),
            turns: Vec::new(),
            last_turn: Vec::new(),
            tools: Vec::new(),
            outage: None,
            woke_counted: false,
            single: false,
        }
    }

    /// One session outside any workflow (`flower once`): its step is `once`.
    pub fn single(&mut self) {
        self.single = true;
        self.step = "once".to_string();
    }

    /// Records nothing.
    pub fn off() -> Recorder {
        Recorder::new(None, None, None)
    }

    /// Session id and step: on every metric point and record.
    fn common(&self) -> Vec<KeyValue> {
        vec![
            KeyValue::new("session.id", self.session.clone()),
            KeyValue::new("flower.step", self.step.clone()),
        ]
    }

    fn count(&self, which: impl Fn(&Instruments) -> &Counter<u64>, n: u64, extra: &[KeyValue]) {
        if let Some(instruments) = &self.instruments {
            let mut attributes = self.common();
            attributes.extend_from_slice(extra);
            which(instruments).add(n, &attributes);
        }
    }

    // Long because: one arm per event the export reads, each only unpacking its fields.
    pub fn record(&mut self, event: &Event) {
        match event {
            Event::SessionStarted {
                agent,
                session_id,
                resumed,
                depth,
            } => {
                if *depth == 0 {
                    self.session = session_id.clone();
                    self.ensure_attempt();
                }
                let extra = [
                    KeyValue::new("agent", agent.clone()),
                    KeyValue::new("resumed", *resumed),
                    KeyValue::new("flower.depth", i64::from(*depth)),
                ];
                self.count(|i| &i.sessions, 1, &extra);
            }
            Event::Requesting { depth } => self.requesting(*depth),
            Event::TurnDone {
                turn,
                usage,
                context,
                model,
                depth,
                ..
            } => self.turn_done(*turn, usage, *context, model, *depth),
            Event::ToolCall {
                name, depth, id, ..
            } => self.tool_call(name, *depth, id),
            Event::ToolDone {
                name,
                is_error,
                interrupted,
                depth,
                id,
                ..
            } => self.tool_done(name, *is_error, *interrupted, *depth, id),
            Event::ToolDenied { name, by, .. } => self.denied(name, by),
            Event::Retrying {
                attempt,
                error,
                depth,
                ..
            } => self.retrying(*attempt, error, *depth),
            Event::Offline {
                waited_s,
                endpoint,
                database,
            } => self.offline(*waited_s, endpoint, *database),
            Event::Online { .. } | Event::OfflineWaitInterrupted { .. } => self.online(event),
            Event::StepStarted { step, woke, .. } => {
                self.step = AttemptName::parse(step).step().to_string();
                if !self.woke_counted && *woke > 1 {
                    self.woke_counted = true;
                    self.count(|i| &i.wakes, 1, &[]);
                }
            }
            Event::Handoff {
                generation,
                context,
                mechanical,
                ..
            } => self.handoff(*generation, *context, *mechanical),
            Event::AttemptDone {
                step,
                ok,
                error,
                attempts,
                ..
            } => self.attempt_done(step, *ok, error.as_deref(), *attempts),
            Event::Judged {
                step,
                round,
                rounds,
                passed,
            } => self.judged(step, *round, *rounds, *passed),
            _ => {}
        }
    }

    /// The step attempt's span, opened by the first event of the attempt.
    fn ensure_attempt(&mut self) -> Context {
        if self.single {
            return self.root.clone();
        }
        if let Some(cx) = &self.attempt {
            return cx.clone();
        }
        let cx = match &self.tracer {
            Some(tracer) => {
                let span = tracer.start_with_context("step_attempt", &self.root);
                let cx = Context::new().with_span(span);
                cx.span()
                    .set_attribute(KeyValue::new("flower.step", self.step.clone()));
                cx
            }
            None => Context::new(),
        };
        self.attempt = Some(cx.clone());
        cx
    }

    fn child(&self, name: &'static str, parent: &Context) -> Context {
        match &self.tracer {
            Some(tracer) => Context::new().with_span(tracer.start_with_context(name, parent)),
            None => Context::new(),
        }
    }

    fn requesting(&mut self, depth: u32) {
        self.count(|i| &i.requests, 1, &[]);
        let attempt = self.ensure_attempt();
        let parent = match depth {
            0 => attempt,
            _ => self
                .tools
                .iter()
                .rev()
                .find(|t| t.depth + 1 == depth)
                .map_or(attempt, |t| t.cx.clone()),
        };
        let cx = self.child("turn", &parent);
        cx.span()
            .set_attribute(KeyValue::new("flower.depth", i64::from(depth)));
        self.turns.push(OpenTurn {
            depth,
            cx,
            started: Instant::now(),
        });
    }

    fn turn_done(&mut self, turn: u32, usage: &Usage, context: u64, model: &str, depth: u32) {
        let open = self
            .turns
            .iter()
            .position(|t| t.depth == depth)
            .map(|i| self.turns.remove(i));
        let cost = crate::model::prices::request_cost_usd(model, usage);
        let duration_ms = open
            .as_ref()
            .map_or(0, |t| t.started.elapsed().as_millis() as i64);
        let by_model = [KeyValue::new("model", model.to_string())];
        if let Some(instruments) = &self.instruments {
            let mut attributes = self.common();
            attributes.extend_from_slice(&by_model);
            for (kind, n) in [
                ("input", usage.input_tokens),
                ("output", usage.output_tokens),
                ("cacheRead", usage.cache_read_input_tokens),
                ("cacheCreation", usage.cache_creation_input_tokens),
            ] {
                let mut with_type = attributes.clone();
                with_type.push(KeyValue::new("type", kind));
                instruments.tokens.add(n, &with_type);
            }
            if let Some(cost) = cost {
                instruments.cost.add(cost, &attributes);
            }
        }
        let figures = [
            ("input_tokens", usage.input_tokens),
            ("output_tokens", usage.output_tokens),
            ("cache_read_tokens", usage.cache_read_input_tokens),
            ("cache_creation_tokens", usage.cache_creation_input_tokens),
        ];
        let mut attributes: Vec<(&'static str, AnyValue)> = vec![
            ("model", model.to_string().into()),
            ("duration_ms", duration_ms.into()),
            ("flower.depth", i64::from(depth).into()),
        ];
        attributes.extend(figures.iter().map(|(k, n)| (*k, AnyValue::from(*n as i64))));
        if let Some(cost) = cost {
            attributes.push(("cost_usd", cost.into()));
        }
        self.emit("claude_code.api_request", Severity::Info, attributes);
        if let Some(open) = open {
            let span = open.cx.span();
            span.set_attribute(KeyValue::new("model", model.to_string()));
            span.set_attribute(KeyValue::new("flower.turn", i64::from(turn)));
            span.set_attribute(KeyValue::new("flower.context", context as i64));
            for (k, n) in figures {
                span.set_attribute(KeyValue::new(k, n as i64));
            }
            if let Some(cost) = cost {
                span.set_attribute(KeyValue::new("cost_usd", cost));
            }
            span.end();
            self.last_turn.retain(|(d, _)| *d != depth);
            self.last_turn.push((depth, open.cx));
        }
    }

    fn tool_call(&mut self, name: &str, depth: u32, id: &str) {
        let parent = match self.last_turn.iter().find(|(d, _)| *d == depth) {
            Some((_, cx)) => cx.clone(),
            None => self.ensure_attempt(),
        };
        let cx = self.child("tool", &parent);
        cx.span()
            .set_attribute(KeyValue::new("tool_name", name.to_string()));
        self.tools.push(OpenTool {
            id: id.to_string(),
            name: name.to_string(),
            depth,
            cx,
            started: Instant::now(),
        });
        self.decision(name, "accept", "config");
    }

    fn tool_done(&mut self, name: &str, is_error: bool, interrupted: bool, depth: u32, id: &str) {
        let success = !is_error && !interrupted;
        self.count(
            |i| &i.tool_calls,
            1,
            &[
                KeyValue::new("tool_name", name.to_string()),
                KeyValue::new("success", success),
            ],
        );
        // By the call's id; by name and depth only for an event without one.
        let open = self
            .tools
            .iter()
            .position(|t| t.id == id)
            .or_else(|| {
                self.tools
                    .iter()
                    .position(|t| id.is_empty() && t.depth == depth && t.name == name)
            })
            .map(|i| self.tools.remove(i));
        let duration_ms = open
            .as_ref()
            .map_or(0, |t| t.started.elapsed().as_millis() as i64);
        self.emit(
            "claude_code.tool_result",
            Severity::Info,
            vec![
                ("tool_name", name.to_string().into()),
                ("success", success.into()),
                ("duration_ms", duration_ms.into()),
                ("interrupted", interrupted.into()),
            ],
        );
        if let Some(open) = open {
            let span = open.cx.span();
            span.set_attribute(KeyValue::new("success", success));
            if !success {
                span.set_status(Status::error(if interrupted {
                    "interrupted"
                } else {
                    "tool error"
                }));
            }
            span.end();
        }
    }

    fn denied(&mut self, name: &str, by: &DeniedBy) {
        let (by, source) = match by {
            DeniedBy::Rule { .. } => ("rule", "config"),
            DeniedBy::Person => ("person", "user_reject"),
            DeniedBy::Hook { .. } => ("hook", "hook"),
        };
        self.count(
            |i| &i.denials,
            1,
            &[
                KeyValue::new("tool_name", name.to_string()),
                KeyValue::new("by", by),
            ],
        );
        self.decision(name, "reject", source);
    }

    /// Claude Code's `tool_decision` event, and its edit-tool metric for Edit and Write.
    fn decision(&self, name: &str, decision: &'static str, source: &'static str) {
        if matches!(name, "Edit" | "Write" | "NotebookEdit") {
            self.count(
                |i| &i.edit_decisions,
                1,
                &[
                    KeyValue::new("tool", name.to_string()),
                    KeyValue::new("decision", decision),
                    KeyValue::new("source", source),
                ],
            );
        }
        self.emit(
            "claude_code.tool_decision",
            Severity::Info,
            vec![
                ("tool_name", name.to_string().into()),
                ("decision", decision.into()),
                ("source", source.into()),
            ],
        );
    }

    fn retrying(&mut self, attempt: u32, error: &str, depth: u32) {
        self.count(|i| &i.retries, 1, &[KeyValue::new("subagent", depth > 0)]);
        // The failed request's turn ends here (no reply came).
        if let Some(i) = self.turns.iter().position(|t| (t.depth > 0) == (depth > 0)) {
            let open = self.turns.remove(i);
            open.cx.span().set_status(Status::error(error.to_string()));
            open.cx.span().end();
        }
        self.emit(
            "claude_code.api_error",
            Severity::Warn,
            vec![
                ("error", error.to_string().into()),
                ("attempt", i64::from(attempt).into()),
            ],
        );
    }

    fn offline(&mut self, waited_s: f64, endpoint: &str, database: bool) {
        if self.outage.is_none() {
            self.emit(
                "flower.offline",
                Severity::Warn,
                vec![
                    ("endpoint", endpoint.to_string().into()),
                    ("database", database.into()),
                ],
            );
        }
        self.outage = Some((waited_s, database));
    }

    fn online(&mut self, event: &Event) {
        let (waited_s, database, interrupted) = match event {
            Event::Online { database } => match self.outage {
                Some((waited, _)) => (waited, *database, false),
                None => (0.0, *database, false),
            },
            Event::OfflineWaitInterrupted { waited_s, database } => (*waited_s, *database, true),
            _ => return,
        };
        self.outage = None;
        let what = KeyValue::new("what", if database { "database" } else { "api" });
        self.count(|i| &i.outages, 1, std::slice::from_ref(&what));
        if let Some(instruments) = &self.instruments {
            let mut attributes = self.common();
            attributes.push(what);
            instruments.outage_time.add(waited_s, &attributes);
        }
        self.emit(
            "flower.online",
            Severity::Info,
            vec![
                ("waited_s", waited_s.into()),
                ("database", database.into()),
                ("interrupted", interrupted.into()),
            ],
        );
    }

    fn handoff(&mut self, generation: u32, context: u64, mechanical: bool) {
        self.count(
            |i| &i.handoffs,
            1,
            &[KeyValue::new("mechanical", mechanical)],
        );
        self.emit(
            "flower.handoff",
            Severity::Info,
            vec![
                ("generation", i64::from(generation).into()),
                ("context", (context as i64).into()),
                ("mechanical", mechanical.into()),
            ],
        );
    }

    fn attempt_done(&mut self, name: &str, ok: bool, error: Option<&str>, attempts: u32) {
        let cx = self.ensure_attempt();
        self.attempt = None;
        let span = cx.span();
        span.set_attribute(KeyValue::new("flower.attempt", name.to_string()));
        span.set_attribute(KeyValue::new("session.id", self.session.clone()));
        span.set_attribute(KeyValue::new("success", ok));
        span.set_attribute(KeyValue::new("flower.tries", i64::from(attempts)));
        if !ok {
            span.set_status(Status::error(error.unwrap_or_default().to_string()));
        }
        span.end();
        self.count(|i| &i.attempts, 1, &[KeyValue::new("success", ok)]);
        if !ok {
            self.emit(
                "flower.step_failed",
                Severity::Error,
                vec![
                    ("flower.attempt", name.to_string().into()),
                    ("error", error.unwrap_or_default().to_string().into()),
                    ("flower.tries", i64::from(attempts).into()),
                ],
            );
        }
    }

    fn judged(&mut self, step: &str, round: u32, rounds: u32, passed: bool) {
        self.count(|i| &i.verdicts, 1, &[KeyValue::new("passed", passed)]);
        if passed {
            return;
        }
        let exhausted = round >= rounds;
        self.emit(
            "flower.gate_failed",
            if exhausted {
                Severity::Error
            } else {
                Severity::Warn
            },
            vec![
                ("flower.gated_step", step.to_string().into()),
                ("round", i64::from(round).into()),
                ("rounds", i64::from(rounds).into()),
                ("exhausted", exhausted.into()),
            ],
        );
    }

    /// One event record: Claude Code's shape (`event.name` without its prefix,
    /// `event.timestamp`, the session), the full name as the record's event name and body.
    fn emit(
        &self,
        name: &'static str,
        severity: Severity,
        attributes: Vec<(&'static str, AnyValue)>,
    ) {
        let Some(logger) = &self.logger else {
            return;
        };
        let mut record = logger.create_log_record();
        record.set_event_name(name);
        record.set_body(name.into());
        record.set_severity_number(severity);
        record.set_severity_text(severity.name());
        record.set_timestamp(std::time::SystemTime::now());
        let short = name.split_once('.').map_or(name, |(_, rest)| rest);
        record.add_attribute("event.name", short);
        record.add_attribute(
            "event.timestamp",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        );
        record.add_attribute("session.id", self.session.clone());
        record.add_attribute("flower.step", self.step.clone());
        record.add_attributes(attributes);
        logger.emit(record);
    }

    /// The process ends: what is still open ends, cut short.
    pub fn close(&mut self) {
        for tool in self.tools.drain(..) {
            tool.cx.span().set_status(Status::error("cut short"));
            tool.cx.span().end();
        }
        for turn in self.turns.drain(..) {
            turn.cx.span().set_status(Status::error("cut short"));
            turn.cx.span().end();
        }
        if let Some(cx) = self.attempt.take() {
            cx.span().set_status(Status::error("cut short"));
            cx.span().end();
        }
        self.root.span().end();
    }
}
