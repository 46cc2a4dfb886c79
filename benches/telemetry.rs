//! What the OpenTelemetry export costs a turn (issue #47 item 2: "never slows a turn").
//! Prints figures; asserts none. `cargo bench --bench telemetry`.
//!
//! One turn's events as the engine reports them (the request, 20 text deltas, the
//! finished turn with its usage, a Read call and its end) go through the event sink
//! with the export off (the front end's sink alone) and on (all three signals, to a
//! port nobody listens on, intervals long enough that nothing is exported while it is
//! timed). The difference over the turns is the export's cost per turn, next to the
//! harness's 2 ms goal per turn (docs/performance.md).
//!
//! Wall times on a loaded machine wait for a CPU; instruction counts do not:
//! `valgrind --tool=callgrind target/release/deps/telemetry-* --mode on --turns 2000`
//! (and `--mode off`, and each with `--turns 0`): (Ir(N) − Ir(0)) / N per mode.
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::events::{Event, EventSink, discard};
use flower::model::types::Usage;
use flower::telemetry::{Config, Endpoint, Identity, Protocol, Telemetry};
use std::time::{Duration, Instant};

const TURNS: usize = 20_000;
const ROUNDS: usize = 5;

fn config() -> Config {
    // A port nobody listens on: nothing is sent while the turns are timed anyway.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = |path: &str| Endpoint {
        url: format!("http://127.0.0.1:{port}{path}"),
        protocol: Protocol::Protobuf,
        headers: Vec::new(),
    };
    Config {
        traces: Some(endpoint("/v1/traces")),
        metrics: Some(endpoint("/v1/metrics")),
        logs: Some(endpoint("/v1/logs")),
        resource: Vec::new(),
        metric_interval: Duration::from_secs(3600),
        logs_interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(100),
    }
}

fn turn_events() -> Vec<Event> {
    let mut events = vec![Event::Requesting { depth: 0 }];
    for i in 0..20 {
        events.push(Event::TextDelta {
            text: format!("word {i} "),
            depth: 0,
        });
    }
    events.push(Event::TurnDone {
        turn: 1,
        usage: Usage {
            input_tokens: 12,
            output_tokens: 300,
            cache_creation_input_tokens: 800,
            cache_read_input_tokens: 40_000,
            ..Usage::default()
        },
        context: 41_112,
        cost_usd: Some(0.01),
        model: "claude-sonnet-4-5".into(),
        depth: 0,
    });
    events.push(Event::ToolCall {
        name: "Read".into(),
        summary: "src/main.rs".into(),
        depth: 0,
        id: "toolu_1".into(),
        task: None,
    });
    events.push(Event::ToolDone {
        name: "Read".into(),
        is_error: false,
        interrupted: false,
        depth: 0,
        id: "toolu_1".into(),
        task: None,
    });
    events
}

fn run(sink: &EventSink, events: &[Event], turns: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..turns {
        for event in events {
            sink(event);
        }
    }
    started.elapsed()
}

fn telemetry() -> (Telemetry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity {
        run_key: "bench".into(),
        host: "bench".into(),
        workspace: dir.path().to_path_buf(),
    };
    (
        Telemetry::start(&config(), &identity, dir.path(), false).unwrap(),
        dir,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let events = turn_events();
    // Under callgrind: one mode, one count, nothing printed but the count.
    if let Some(mode) = arg("--mode") {
        let turns: usize = arg("--turns").map_or(TURNS, |n| n.parse().unwrap());
        let kept = (mode == "on").then(telemetry);
        let sink = match &kept {
            Some((t, _)) => t.sink(discard()),
            None => discard(),
        };
        run(&sink, &events, turns);
        println!("{mode} {turns}");
        return;
    }
    let (t, _dir) = telemetry();
    let on = t.sink(discard());
    let off = discard();
    let per_turn = |sink: &EventSink| {
        let mut times: Vec<f64> = (0..ROUNDS)
            .map(|_| run(sink, &events, TURNS).as_secs_f64() * 1e9 / TURNS as f64)
            .collect();
        times.sort_by(f64::total_cmp);
        times[ROUNDS / 2]
    };
    let off_ns = per_turn(&off);
    let on_ns = per_turn(&on);
    println!("telemetry: {TURNS} turns × {ROUNDS} rounds, median ns per turn");
    println!("  off {off_ns:>10.0} ns");
    println!(
        "  on  {on_ns:>10.0} ns  (+{:.1} µs a turn; the goal for the whole harness is 2 ms a turn)",
        (on_ns - off_ns) / 1000.0
    );
    let shutdown = Instant::now();
    let figures = t.shutdown().unwrap();
    println!(
        "  shutdown {:.0} ms (collector refusing), dropped {} (spans {}, events {}, metrics {})",
        shutdown.elapsed().as_secs_f64() * 1000.0,
        figures.dropped(),
        figures.spans_dropped,
        figures.logs_dropped,
        figures.metrics_dropped
    );
}
