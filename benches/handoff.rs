//! 换代 benchmark (issue 10). Prints figures next to their goals; asserts none.
//! Run with `cargo bench --bench handoff`.
//!
//! A scripted 1,000-turn 干活 step, in process, through the library (`Workflow` on a
//! `Runtime` with SQLite under a temporary directory): a model client that answers at
//! once, whose reported usage grows by 2.2K tokens per turn (the slope the manual page
//! measured, starting at its 28.7K first turn) against a 200K window with the default
//! threshold (60 % = 120K). Each work turn is a `Read` of a small file. Asked to hand
//! off, the session writes a complete document with `Write` and ends its turn; each
//! successor starts again at 28.7K.
//!
//! Reported:
//! - peak context over the work turns (goal: ≤ threshold + one turn's growth) and over
//!   the handoff exchanges too (the document is written on top of a full context);
//! - the number of handoffs;
//! - harness time per handoff excluding the model: from the session stopping at the
//!   threshold (the `Handoff` event) to the successor's first request, minus the time
//!   spent inside the model client (goal ≤ 20 ms);
//! - harness overhead per turn: the step's wall time minus the time inside the model
//!   client, over every model turn (goal ≤ 2 ms).
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::continuity::handoff::{DEFAULT_WINDOW, SECTIONS};
use flower::continuity::runtime::{FrontEnd, Runtime, RuntimeOptions};
use flower::engine::{AgentSpec, Event};
use flower::model::{MessagesRequest, ModelClient, ModelError, ModelReply, StreamDelta, Usage};
use flower::{BoxFuture, Step, Workflow};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WORK_TURNS: u64 = 1_000;
const FIRST_TURN: u64 = 28_700;
const SLOPE: u64 = 2_200;

/// What the scripted model saw and spent.
#[derive(Default)]
struct Tally {
    /// Work turns answered so far (over every generation).
    work_turns: AtomicU64,
    /// Nanoseconds spent inside `stream`.
    model_ns: AtomicU64,
    /// Every turn's context, with whether it was part of a handoff exchange.
    contexts: Mutex<Vec<(u64, bool)>>,
    /// When each successor's first request arrived, with the model time until then.
    successor_starts: Mutex<Vec<(Instant, u64)>>,
}

struct Scripted {
    tally: Arc<Tally>,
    doc: String,
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Scripted {
    fn reply(&self, request: &MessagesRequest) -> ModelReply {
        let messages = &serde_json::from_str::<Vec<Value>>(
            &serde_json::to_string(&request.messages.to_messages()).unwrap(),
        )
        .unwrap();
        let turn = messages.iter().filter(|m| m["role"] == "assistant").count() as u64;
        let first = messages.first().map(text_of).unwrap_or_default();
        let asked = messages
            .iter()
            .any(|m| m["role"] == "user" && text_of(m).contains("这一步要换代"));
        let context = FIRST_TURN + SLOPE * turn;
        if first.contains("你接手这一步") && turn == 0 {
            self.tally
                .successor_starts
                .lock()
                .unwrap()
                .push((Instant::now(), self.tally.model_ns.load(Ordering::SeqCst)));
        }
        let (content, handoff) = if asked {
            let last = messages.last().map(text_of).unwrap_or_default();
            if last.contains("这一步要换代") {
                let input = json!({"file_path": "notes/交接/干活-1.md", "content": self.doc});
                (tool_use("Write", input, turn), true)
            } else {
                (vec![json!({"type": "text", "text": "写好了。"})], true)
            }
        } else if self.tally.work_turns.fetch_add(1, Ordering::SeqCst) < WORK_TURNS {
            (
                tool_use("Read", json!({"file_path": "seed.txt"}), turn),
                false,
            )
        } else {
            (vec![json!({"type": "text", "text": "做完了。"})], false)
        };
        self.tally.contexts.lock().unwrap().push((context, handoff));
        let tool = content.iter().any(|b| b["type"] == "tool_use");
        ModelReply {
            id: format!("msg_{turn}"),
            model: request.model.clone(),
            content: blocks(content),
            stop_reason: Some(if tool { "tool_use" } else { "end_turn" }.into()),
            stop_details: None,
            usage: Usage {
                input_tokens: context - 100,
                output_tokens: 100,
                ..Usage::default()
            },
        }
    }
}

fn tool_use(name: &str, input: Value, turn: u64) -> Vec<Value> {
    let id = format!("toolu_{turn}_{}", uuid::Uuid::new_v4().simple());
    vec![json!({"type": "tool_use", "id": id, "name": name, "input": input})]
}

impl ModelClient for Scripted {
    fn stream<'a>(
        &'a self,
        request: &'a MessagesRequest,
        _on_delta: &'a mut (dyn FnMut(StreamDelta<'_>) + Send),
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let started = Instant::now();
            let reply = self.reply(request);
            self.tally
                .model_ns
                .fetch_add(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
            Ok(reply)
        })
    }

    fn default_model(&self) -> &str {
        "claude-sonnet-4-5"
    }
}

fn main() {
    let dir = tempfile::TempDir::new().unwrap();
    let workspace = dir.path().join("proj");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("seed.txt"), "seed\n").unwrap();
    let mut doc = String::new();
    for section in SECTIONS {
        doc.push_str(&format!("## {section}\n这一段的内容。\n\n"));
    }
    let tally = Arc::new(Tally::default());
    let client = Arc::new(Scripted {
        tally: tally.clone(),
        doc,
    });
    let handoffs: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let events = {
        let handoffs = handoffs.clone();
        let tally = tally.clone();
        Arc::new(move |event: &Event| {
            if let Event::Handoff { .. } = event {
                handoffs
                    .lock()
                    .unwrap()
                    .push((Instant::now(), tally.model_ns.load(Ordering::SeqCst)));
            }
        })
    };
    let options = RuntimeOptions {
        resilience: Default::default(),
        ..RuntimeOptions::new(client)
    };
    let front = FrontEnd {
        events,
        ..FrontEnd::default()
    };
    let runtime =
        Runtime::with_front_end(&workspace, workspace.join("runs"), options, front).unwrap();
    let coordinator =
        AgentSpec::new("coordinator", "你是协调者。").allowed_tools(["Read", "Write(notes/**)"]);
    let workflow = Workflow::new(vec![Step::new("干活", coordinator, "做这件事。")]);
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let ctx = tokio.block_on(workflow.run(&runtime)).unwrap();
    let wall = started.elapsed();
    let result = &ctx.results[0];
    assert!(result.ok, "{result:?}");

    let contexts = tally.contexts.lock().unwrap().clone();
    let turns = contexts.len() as u64;
    let threshold = DEFAULT_WINDOW * 60 / 100;
    let work_peak = contexts.iter().filter(|c| !c.1).map(|c| c.0).max().unwrap();
    let all_peak = contexts.iter().map(|c| c.0).max().unwrap();
    let model = Duration::from_nanos(tally.model_ns.load(Ordering::SeqCst));
    let handoffs = handoffs.lock().unwrap().clone();
    let starts = tally.successor_starts.lock().unwrap().clone();
    let per_handoff: Vec<Duration> = handoffs
        .iter()
        .zip(&starts)
        .map(|((at, model_before), (start, model_after))| {
            (*start - *at).saturating_sub(Duration::from_nanos(model_after - model_before))
        })
        .collect();
    let mean = per_handoff.iter().sum::<Duration>() / per_handoff.len().max(1) as u32;
    let worst = per_handoff.iter().max().copied().unwrap_or_default();
    println!(
        "handoff: {WORK_TURNS} work turns, +{:.1}K per turn from {:.1}K, window {}K, threshold {}K",
        SLOPE as f64 / 1000.0,
        FIRST_TURN as f64 / 1000.0,
        DEFAULT_WINDOW / 1000,
        threshold / 1000
    );
    println!(
        "  peak context, work turns:      {:.1}K (goal ≤ {:.1}K = threshold + one turn)",
        work_peak as f64 / 1000.0,
        (threshold + SLOPE) as f64 / 1000.0
    );
    println!(
        "  peak context, with handoffs:   {:.1}K (the document written on a full context)",
        all_peak as f64 / 1000.0
    );
    println!(
        "  handoffs:                      {} (retired[] lists {})",
        handoffs.len(),
        result.retired.len()
    );
    println!(
        "  harness time per handoff:      {:.2} ms mean, {:.2} ms worst (goal ≤ 20 ms)",
        mean.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3
    );
    println!(
        "  harness overhead per turn:     {:.3} ms over {turns} model turns (goal ≤ 2 ms)",
        (wall.saturating_sub(model)).as_secs_f64() * 1e3 / turns as f64
    );
}

/// Content blocks from their JSON.
fn blocks(values: Vec<serde_json::Value>) -> Vec<flower::transcript::Block> {
    values
        .iter()
        .map(|v| serde_json::from_str(&v.to_string()).expect("a block"))
        .collect()
}
