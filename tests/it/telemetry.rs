//! The OpenTelemetry export (issue 47, item 2): a real pipeline run against the fake API
//! exports to an in-process OTLP/HTTP receiver, and what it receives agrees with
//! `flower log --json` of the same run; a collector that is down costs the run nothing
//! but a count; without the switch no connection is made; a bad variable is exit 2.

use crate::support::FakeServer;
use crate::support::pipeline::{Project, REQUEST, refused_before_any_request, simple_reply, text};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every request a receiver got: its path and its body.
type Posts = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP collector on loopback: every request's path and body, kept.
struct Receiver {
    port: u16,
    posts: Posts,
    connections: Arc<AtomicUsize>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let posts: Posts = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let (kept, counted) = (posts.clone(), connections.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let kept = kept.clone();
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        Receiver {
            port,
            posts,
            connections,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn bodies(&self, path: &str) -> Vec<Vec<u8>> {
        self.posts
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Every metrics export, decoded.
    fn metrics(&self) -> Vec<ExportMetricsServiceRequest> {
        self.bodies("/v1/metrics")
            .iter()
            .map(|b| ExportMetricsServiceRequest::decode(&b[..]).unwrap())
            .collect()
    }

    /// Every span of every trace export, in the order received.
    fn spans(&self) -> Vec<Span> {
        self.bodies("/v1/traces")
            .iter()
            .flat_map(|b| {
                ExportTraceServiceRequest::decode(&b[..])
                    .unwrap()
                    .resource_spans
            })
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
            .collect()
    }

    /// Every log record (event) of every logs export, in the order received.
    fn log_records(&self) -> Vec<LogRecord> {
        self.bodies("/v1/logs")
            .iter()
            .flat_map(|b| {
                ExportLogsServiceRequest::decode(&b[..])
                    .unwrap()
                    .resource_logs
            })
            .flat_map(|rl| rl.scope_logs)
            .flat_map(|sl| sl.log_records)
            .collect()
    }
}

/// HTTP/1.1 requests on one connection (kept alive), each answered 200 with no body.
fn serve(stream: TcpStream, posts: &Mutex<Vec<(String, Vec<u8>)>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        posts.lock().unwrap().push((path, body));
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn string(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(list: &[KeyValue]) -> HashMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), string(&kv.value)))
        .collect()
}

/// A metric's data points as (attributes, value), from the last export that has it (the
/// sums are cumulative: the last is the total).
fn points(
    metrics: &[ExportMetricsServiceRequest],
    name: &str,
) -> Vec<(HashMap<String, String>, f64)> {
    let mut last = Vec::new();
    for request in metrics {
        for rm in &request.resource_metrics {
            for sm in &rm.scope_metrics {
                for m in sm.metrics.iter().filter(|m| m.name == name) {
                    let Some(metric::Data::Sum(sum)) = &m.data else {
                        panic!("{name} is not a sum");
                    };
                    last = sum
                        .data_points
                        .iter()
                        .map(|p| {
                            let value = match p.value {
                                Some(number_data_point::Value::AsInt(n)) => n as f64,
                                Some(number_data_point::Value::AsDouble(d)) => d,
                                None => 0.0,
                            };
                            (attrs(&p.attributes), value)
                        })
                        .collect();
                }
            }
        }
    }
    last
}

fn total(
    points: &[(HashMap<String, String>, f64)],
    filter: impl Fn(&HashMap<String, String>) -> bool,
) -> f64 {
    points
        .iter()
        .filter(|(a, _)| filter(a))
        .map(|(_, v)| v)
        .sum()
}

fn log_json(project: &Project) -> Value {
    crate::figures::log_json(project)
}

fn telemetry_on(receiver_endpoint: &str) -> Vec<(String, String)> {
    vec![
        ("CLAUDE_CODE_ENABLE_TELEMETRY".into(), "1".into()),
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
            receiver_endpoint.into(),
        ),
        (
            "OTEL_RESOURCE_ATTRIBUTES".into(),
            "team=core,deployment.environment=test".into(),
        ),
    ]
}

/// The pipeline in `project`, every agent answered at once, exporting to `endpoint`.
fn pipeline_run(project: &Project, endpoint: &str) -> Output {
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    project
        .command(&server, &[REQUEST])
        .envs(telemetry_on(endpoint))
        .output()
        .unwrap()
}

#[test]
fn a_pipeline_run_exports_what_flower_log_says() {
    let receiver = Receiver::start();
    let project = Project::new();
    let out = pipeline_run(&project, &receiver.endpoint());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let log = log_json(&project);
    let totals = &log["totals"];

    let metrics = receiver.metrics();
    assert!(!metrics.is_empty(), "no metrics exported");
    // The resource: service, host, run key, and OTEL_RESOURCE_ATTRIBUTES.
    let resource = attrs(
        &metrics[0].resource_metrics[0]
            .resource
            .as_ref()
            .unwrap()
            .attributes,
    );
    assert_eq!(resource["service.name"], "flower");
    assert_eq!(resource["team"], "core");
    assert_eq!(resource["deployment.environment"], "test");
    assert!(resource["flower.run_key"].ends_with("runs"), "{resource:?}");
    assert!(!resource["host.name"].is_empty());

    // Tokens by type, cost, requests: as `flower log --json` counts them.
    let tokens = points(&metrics, "claude_code.token.usage");
    for (kind, field) in [
        ("input", "input"),
        ("output", "output"),
        ("cacheRead", "cache_read"),
        ("cacheCreation", "cache_creation"),
    ] {
        let exported = total(&tokens, |a| a["type"] == kind);
        assert_eq!(
            exported,
            totals["tokens"][field].as_u64().unwrap() as f64,
            "tokens {kind}"
        );
    }
    assert!(tokens.iter().all(|(a, _)| !a["model"].is_empty()));
    let cost = total(&points(&metrics, "claude_code.cost.usage"), |_| true);
    let logged = totals["cost_usd"].as_f64().unwrap();
    assert!(logged > 0.0);
    assert!((cost - logged).abs() < 1e-9, "cost {cost} vs {logged}");
    let requests = total(&points(&metrics, "flower.request.count"), |_| true);
    assert_eq!(requests, totals["requests"].as_u64().unwrap() as f64);
    // The session ids on the points are the steps' own sessions, as the log lists them.
    let sessions: HashSet<String> = log["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["session_id"].as_str().map(str::to_string))
        .collect();
    assert!(
        tokens
            .iter()
            .all(|(a, _)| sessions.contains(&a["session.id"])),
        "{tokens:?}"
    );
    // Tool calls: the clarifier's, the goal setter's and the worker's Write, the
    // coordinator's Task, each a success.
    let calls = points(&metrics, "flower.tool.call.count");
    let mut by_tool = BTreeMap::new();
    for (a, v) in &calls {
        assert_eq!(a["success"], "true");
        *by_tool.entry(a["tool_name"].clone()).or_insert(0.0) += v;
    }
    assert_eq!(
        by_tool,
        BTreeMap::from([("Task".to_string(), 1.0), ("Write".to_string(), 3.0)])
    );
    // The gates: the brief's and the checklist's files, then the judge; each passed once.
    let verdicts = points(&metrics, "flower.gate.verdict.count");
    assert_eq!(total(&verdicts, |a| a["passed"] == "true"), 3.0);
    assert_eq!(total(&verdicts, |a| a["passed"] == "false"), 0.0);
    assert_eq!(total(&verdicts, |a| a["flower.step"] == "干活"), 1.0);

    // Spans: one per step attempt, per request (turn), per tool call, parent to child.
    let spans = receiver.spans();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let attempts = log["attempts"].as_array().unwrap();
    assert_eq!(named("step_attempt").len(), attempts.len());
    let mut attempt_names: Vec<String> = named("step_attempt")
        .iter()
        .map(|s| attrs(&s.attributes)["flower.attempt"].clone())
        .collect();
    let mut logged_names: Vec<String> = attempts
        .iter()
        .map(|a| a["step"].as_str().unwrap().to_string())
        .collect();
    attempt_names.sort();
    logged_names.sort();
    assert_eq!(attempt_names, logged_names);
    assert_eq!(
        named("turn").len() as u64,
        totals["requests"].as_u64().unwrap()
    );
    assert_eq!(named("tool").len(), 4);
    assert_eq!(named("flower").len(), 1);
    let by_id: HashMap<&[u8], &str> = spans
        .iter()
        .map(|s| (s.span_id.as_slice(), s.name.as_str()))
        .collect();
    for tool in named("tool") {
        assert_eq!(by_id[tool.parent_span_id.as_slice()], "turn");
    }
    for turn in named("turn") {
        let parent = by_id[turn.parent_span_id.as_slice()];
        assert!(parent == "step_attempt" || parent == "tool", "{parent}");
    }
    let trace_ids: HashSet<&[u8]> = spans.iter().map(|s| s.trace_id.as_slice()).collect();
    assert_eq!(trace_ids.len(), 1, "one trace per process");

    // Events: Claude Code's api_request, one per request, with the request's figures.
    let records = receiver.log_records();
    let api: Vec<_> = records
        .iter()
        .filter(|r| r.event_name == "claude_code.api_request")
        .collect();
    assert_eq!(api.len() as u64, totals["requests"].as_u64().unwrap());
    let input: u64 = api
        .iter()
        .map(|r| attrs(&r.attributes)["input_tokens"].parse::<u64>().unwrap())
        .sum();
    assert_eq!(input, totals["tokens"]["input"].as_u64().unwrap());
    assert!(
        api.iter()
            .all(|r| attrs(&r.attributes)["event.name"] == "api_request")
    );
    let results = records
        .iter()
        .filter(|r| r.event_name == "claude_code.tool_result")
        .count();
    assert_eq!(results, 4);
    assert!(!records.iter().any(|r| r.event_name == "flower.step_failed"));

    // Nothing dropped, and `flower log --json` says what was sent.
    let report = &log["telemetry"];
    assert_eq!(report["processes"], 1, "{log}");
    for dropped in ["spans_dropped", "logs_dropped", "metrics_dropped"] {
        assert_eq!(report[dropped], 0, "{report}");
    }
    assert_eq!(report["spans_sent"].as_u64().unwrap() as usize, spans.len());
}

#[test]
fn a_collector_that_is_down_costs_a_count_not_time() {
    // A port nobody listens on: every export is refused at once.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let project = Project::new();
    let started = Instant::now();
    let out = pipeline_run(&project, &format!("http://127.0.0.1:{port}"));
    let took = started.elapsed();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The exit waits for the last export at most SHUTDOWN_WAIT (3 s); the run itself
    // is a few seconds on a loaded machine.
    assert!(took < Duration::from_secs(40), "{took:?}");
    assert!(stderr.contains("遥测:收集器没收到"), "{stderr}");
    let report = &log_json(&project)["telemetry"];
    let dropped = ["spans_dropped", "logs_dropped", "metrics_dropped"]
        .iter()
        .map(|k| report[k].as_u64().unwrap())
        .sum::<u64>();
    assert!(dropped > 0, "{report}");
    assert_eq!(report["spans_sent"], 0);
}

#[test]
fn without_the_switch_nothing_connects() {
    let receiver = Receiver::start();
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project
        .command(&server, &[REQUEST])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(receiver.connections.load(Ordering::SeqCst), 0);
    assert!(log_json(&project).get("telemetry").is_none());
    assert!(!project.dir.join("runs/telemetry.json").exists());
}

#[test]
fn a_bad_telemetry_variable_is_refused_before_any_request() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let on = ("CLAUDE_CODE_ENABLE_TELEMETRY", "1");
    refused_before_any_request(
        &server,
        &project.dir,
        &[REQUEST],
        &[
            (
                vec![],
                vec![("CLAUDE_CODE_ENABLE_TELEMETRY", "yes")],
                "CLAUDE_CODE_ENABLE_TELEMETRY",
            ),
            (
                vec![],
                vec![on, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
                "不支持 grpc",
            ),
            (
                vec![],
                vec![on, ("OTEL_METRICS_EXPORTER", "prometheus")],
                "OTEL_METRICS_EXPORTER",
            ),
            (
                vec![],
                vec![on, ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                vec![],
                vec![on, ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization")],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
            (
                vec![],
                vec![on, ("OTEL_METRIC_EXPORT_INTERVAL", "0")],
                "OTEL_METRIC_EXPORT_INTERVAL",
            ),
            (
                vec![],
                vec![on, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
                "OTEL_EXPORTER_OTLP_COMPRESSION",
            ),
        ],
    );
}

/// A collector that takes connections and never answers.
fn blackhole() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            held.push(stream);
        }
    });
    port
}

/// `flower` (the pipeline) with telemetry to `endpoint`, killed by SIGTERM while the
/// coordinator's first reply is held: how long it took to die after the signal.
fn terminated_mid_step(project: &Project, endpoint: &str, env: &[(&str, &str)]) -> Duration {
    use crate::faults_support::{PATIENCE, signal, spawn_watched, wait_exit};
    use crate::support::Gate;
    use crate::support::pipeline::{Agent, agent_of};
    use std::os::unix::process::ExitStatusExt;
    use std::sync::atomic::AtomicBool;
    let gate = Gate::new();
    let held = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, held) = (gate.clone(), held.clone());
        FakeServer::with_handler(move |req, _| {
            if agent_of(req) == Agent::Coordinator && !held.swap(true, Ordering::SeqCst) {
                return simple_reply(req).gate_before(&gate);
            }
            simple_reply(req)
        })
    };
    let mut cmd = project.command(&server, &[REQUEST]);
    cmd.envs(telemetry_on(endpoint)).envs(env.iter().copied());
    let (mut child, stderr) = spawn_watched(cmd);
    assert!(gate.wait_reached(PATIENCE), "{}", stderr.all());
    let signalled = Instant::now();
    signal(&child, libc::SIGTERM);
    let status = wait_exit(&mut child, PATIENCE);
    let took = signalled.elapsed();
    gate.open();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{}", stderr.all());
    took
}

#[test]
fn sigterm_flushes_what_it_has_with_the_open_spans_cut_short() {
    let receiver = Receiver::start();
    let project = Project::new();
    terminated_mid_step(&project, &receiver.endpoint(), &[]);
    let spans = receiver.spans();
    // The two finished steps' attempts, and 干活's, cut short, with the process's span.
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "step_attempt").collect();
    assert_eq!(attempts.len(), 3, "{spans:#?}");
    let cut: Vec<_> = attempts
        .iter()
        .filter(|s| {
            s.status
                .as_ref()
                .is_some_and(|st| st.message == "cut short")
        })
        .collect();
    assert_eq!(cut.len(), 1);
    assert_eq!(attrs(&cut[0].attributes)["flower.step"], "干活");
    assert_eq!(spans.iter().filter(|s| s.name == "flower").count(), 1);
    let metrics = receiver.metrics();
    assert!(total(&points(&metrics, "flower.request.count"), |_| true) >= 3.0);
    let report = &log_json(&project)["telemetry"];
    assert_eq!(report["processes"], 1, "{report}");
}

#[test]
fn a_collector_that_never_answers_does_not_hold_up_the_exit() {
    let project = Project::new();
    // Each export would wait a minute for its answer; the exit waits 3 s at most.
    let took = terminated_mid_step(
        &project,
        &format!("http://127.0.0.1:{}", blackhole()),
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")],
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn the_collectors_credentials_stay_out_of_commands_and_json_is_spoken_on_request() {
    use crate::support::Reply;
    use crate::support::pipeline::{Agent, agent_or_once, turn_of};
    let receiver = Receiver::start();
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| match (agent_or_once(req), turn_of(req)) {
        (Agent::Worker, 0) => Reply::tool_use(
            "Bash",
            serde_json::json!({"command": "env > seen-env.txt && echo hello > hello.txt"}),
        ),
        _ => simple_reply(req),
    });
    let out = project
        .command(&server, &[REQUEST])
        .envs(telemetry_on(&receiver.endpoint()))
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Bearer%20collector-secret-1234",
        )
        .env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let seen = project.read("seen-env.txt");
    assert!(seen.contains("OTEL_RESOURCE_ATTRIBUTES="), "{seen}");
    assert!(!seen.contains("collector-secret"), "{seen}");
    assert!(!seen.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{seen}");
    // Metrics in OTLP/JSON, the other signals still protobuf.
    let metrics = receiver.bodies("/v1/metrics");
    assert!(!metrics.is_empty());
    let doc: Value = serde_json::from_slice(metrics.last().unwrap()).unwrap();
    let names: Vec<&str> = doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"claude_code.token.usage"), "{names:?}");
    assert!(names.contains(&"flower.tool.call.count"), "{names:?}");
    for body in receiver.bodies("/v1/traces") {
        ExportTraceServiceRequest::decode(&body[..]).unwrap();
    }
}

/// `flower once` exports like a pipeline run, with the same switch: its turns hang under
/// the process's span (it has no step attempts) and its points say `flower.step=once`.
#[test]
fn flower_once_exports_too() {
    let receiver = Receiver::start();
    let dir = tempfile::TempDir::new().unwrap();
    let server = FakeServer::start(vec![crate::support::Reply::text("好了").usage(120, 7)]);
    let out = crate::support::Flower::new(&["once", "说好了"])
        .server(&server)
        .dir(dir.path())
        .envs(telemetry_on(&receiver.endpoint()))
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let metrics = receiver.metrics();
    let tokens = points(&metrics, "claude_code.token.usage");
    assert_eq!(
        total(&tokens, |a| a["type"] == "input"),
        120.0,
        "{tokens:?}"
    );
    assert!(tokens.iter().all(|(a, _)| a["flower.step"] == "once"));
    assert!(tokens.iter().all(|(a, _)| !a["session.id"].is_empty()));

    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, ["flower", "turn"], "{names:?}");
    let root = spans.iter().find(|s| s.name == "flower").unwrap();
    let turn = spans.iter().find(|s| s.name == "turn").unwrap();
    assert_eq!(turn.parent_span_id, root.span_id);

    let api = receiver
        .log_records()
        .iter()
        .filter(|r| r.event_name == "claude_code.api_request")
        .count();
    assert_eq!(api, 1);
}
