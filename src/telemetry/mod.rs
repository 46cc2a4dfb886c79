//! OpenTelemetry export over OTLP/HTTP: metrics, spans and events (OTLP logs) made from
//! the run's [`Event`]s, with Claude Code's names where the meaning is the same
//! (`docs/telemetry.md`). Off unless the settings say so (`CLAUDE_CODE_ENABLE_TELEMETRY`).
//!
//! Never slows a turn: the sink only updates counters and hands finished spans and
//! records to the SDK's batch processors (bounded queues, their own threads). An export
//! that fails (the collector is down) is dropped and counted ([`Counts`]), never retried
//! in the run's way; shutdown flushes within [`SHUTDOWN_WAIT`] and then gives up.

mod export;
mod record;

use crate::events::{Event, EventSink};
use crate::run_dir::RunDir;
use export::Counted;
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use record::Recorder;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use export::{Counts, Figures};

/// How long an exit waits for the last export (all three signals at once).
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// What the settings resolved: which signals go where. `None` for a signal: not exported.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub traces: Option<Endpoint>,
    pub metrics: Option<Endpoint>,
    pub logs: Option<Endpoint>,
    /// `OTEL_RESOURCE_ATTRIBUTES`, decoded, in order.
    pub resource: Vec<(String, String)>,
    /// `OTEL_METRIC_EXPORT_INTERVAL` (Claude Code's default: 60 s).
    pub metric_interval: Duration,
    /// `OTEL_LOGS_EXPORT_INTERVAL` (Claude Code's default: 5 s); spans are batched alike.
    pub logs_interval: Duration,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`: one export's whole HTTP request.
    pub timeout: Duration,
}

/// One signal's destination: the full URL (`…/v1/metrics`), its encoding, its headers.
#[derive(Clone, PartialEq)]
pub struct Endpoint {
    pub url: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for Endpoint {
    // Header values are credentials: names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("protocol", &self.protocol)
            .field("headers", &names)
            .finish()
    }
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` (default) or `http/json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Protobuf,
    Json,
}

/// Who is exporting: the resource's attributes besides `OTEL_RESOURCE_ATTRIBUTES`.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The run's key in a shared store, else its run directory (canonical).
    pub run_key: String,
    pub host: String,
    pub workspace: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP 导出器建不起来({signal}):{source}")]
    Build {
        signal: &'static str,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// The running export. Cheap to clone; [`Telemetry::shutdown`] once at the end (a drop
/// of the last clone does it too).
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

struct Inner {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
    logs: Option<SdkLoggerProvider>,
    recorder: Mutex<Recorder>,
    counts: Arc<Counts>,
    /// Where the counts are added up at exit (`runs/telemetry.json`).
    record_file: PathBuf,
    shut: AtomicBool,
}

impl Telemetry {
    /// Builds the exporters and providers (no connection is made until the first
    /// export) and opens the process's root span. `single`: one session outside any
    /// workflow (`flower once`), whose turns hang under the root, with no step attempt.
    pub fn start(
        config: &Config,
        identity: &Identity,
        run_dir: &Path,
        single: bool,
    ) -> Result<Telemetry, TelemetryError> {
        // reqwest 0.13 is built without a TLS provider of its own: ring, as elsewhere
        // (already installed when MCP came first; then this changes nothing).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resource = resource(config, identity);
        let counts = Arc::new(Counts::default());
        let counted = Counted::new(counts.clone());
        let traces = match &config.traces {
            Some(endpoint) => Some(export::tracer_provider(
                endpoint, config, &resource, &counted,
            )?),
            None => None,
        };
        let metrics = match &config.metrics {
            Some(endpoint) => Some(export::meter_provider(
                endpoint, config, &resource, &counted,
            )?),
            None => None,
        };
        let logs = match &config.logs {
            Some(endpoint) => Some(export::logger_provider(
                endpoint, config, &resource, &counted,
            )?),
            None => None,
        };
        let mut recorder = Recorder::new(traces.as_ref(), metrics.as_ref(), logs.as_ref());
        if single {
            recorder.single();
        }
        Ok(Telemetry {
            inner: Arc::new(Inner {
                traces,
                metrics,
                logs,
                recorder: Mutex::new(recorder),
                counts,
                record_file: RunDir::new(run_dir).telemetry_file(),
                shut: AtomicBool::new(false),
            }),
        })
    }

    /// `events` with the export in front of it.
    pub fn sink(&self, events: EventSink) -> EventSink {
        let telemetry = self.clone();
        Arc::new(move |event: &Event| {
            telemetry.record(event);
            events(event);
        })
    }

    /// Turns one event into metrics, spans and records (deltas are skipped at once).
    pub fn record(&self, event: &Event) {
        if matches!(event, Event::TextDelta { .. } | Event::ThinkingDelta { .. }) {
            return;
        }
        if self.inner.shut.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(mut recorder) = self.inner.recorder.lock() {
            recorder.record(event);
        }
    }

    /// Ends the open spans, flushes every signal within [`SHUTDOWN_WAIT`] (a collector
    /// that does not answer is given up on), adds this process's counts to
    /// `runs/telemetry.json` and returns them. Only the first call does anything.
    pub fn shutdown(&self) -> Option<Figures> {
        if self.inner.shut.swap(true, Ordering::SeqCst) {
            return None;
        }
        if let Ok(mut recorder) = self.inner.recorder.lock() {
            recorder.close();
        }
        let (traces, metrics, logs) = (
            self.inner.traces.clone(),
            self.inner.metrics.clone(),
            self.inner.logs.clone(),
        );
        let (done, wait) = std::sync::mpsc::channel();
        // Off the caller's thread (it may be a tokio worker, or a signal's task): the
        // SDK blocks while it exports, and we wait only so long.
        let flushing = std::thread::Builder::new()
            .name("flower-otel-shutdown".into())
            .spawn(move || {
                let mut handles = Vec::new();
                if let Some(p) = traces {
                    handles.push(std::thread::spawn(move || {
                        let _ = p.shutdown_with_timeout(SHUTDOWN_WAIT);
                    }));
                }
                if let Some(p) = metrics {
                    handles.push(std::thread::spawn(move || {
                        let _ = p.shutdown_with_timeout(SHUTDOWN_WAIT);
                    }));
                }
                if let Some(p) = logs {
                    handles.push(std::thread::spawn(move || {
                        let _ = p.shutdown_with_timeout(SHUTDOWN_WAIT);
                    }));
                }
                for handle in handles {
                    let _ = handle.join();
                }
                let _ = done.send(());
            });
        if flushing.is_ok() {
            let _ = wait.recv_timeout(SHUTDOWN_WAIT + Duration::from_millis(500));
        }
        let counts = self.inner.counts.snapshot();
        let _ = Report::add(&self.inner.record_file, &counts);
        Some(counts)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.shut.load(Ordering::SeqCst) {
            // The last clone went without a shutdown (an error path): flush what we can.
            let telemetry = Telemetry {
                inner: Arc::new(Inner {
                    traces: self.traces.take(),
                    metrics: self.metrics.take(),
                    logs: self.logs.take(),
                    recorder: Mutex::new(Recorder::off()),
                    counts: self.counts.clone(),
                    record_file: self.record_file.clone(),
                    shut: AtomicBool::new(false),
                }),
            };
            telemetry.shutdown();
        }
    }
}

/// The resource: Claude Code's `service.name` (here `flower`) and version, the host, the
/// run; then `OTEL_RESOURCE_ATTRIBUTES` (which may override any of them).
fn resource(config: &Config, identity: &Identity) -> Resource {
    let mut attributes = vec![
        KeyValue::new("service.name", "flower"),
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("host.name", identity.host.clone()),
        KeyValue::new("flower.run_key", identity.run_key.clone()),
        KeyValue::new(
            "flower.workspace",
            identity.workspace.to_string_lossy().into_owned(),
        ),
    ];
    for (key, value) in &config.resource {
        attributes.retain(|kv| kv.key.as_str() != key);
        attributes.push(KeyValue::new(key.clone(), value.clone()));
    }
    Resource::builder_empty()
        .with_attributes(attributes)
        .build()
}

/// `runs/telemetry.json`: what every process of the run exported and dropped, added up
/// (`flower log --json` shows it as `telemetry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub processes: u64,
    #[serde(flatten)]
    pub counts: Figures,
}

impl Report {
    /// The run's report, when a process with telemetry on has ended there.
    pub fn read(run_dir: &Path) -> Option<Report> {
        let text = std::fs::read_to_string(RunDir::new(run_dir).telemetry_file()).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn add(file: &Path, counts: &Figures) -> std::io::Result<()> {
        let mut report: Report = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        report.processes += 1;
        report.counts.add(counts);
        let text = serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?;
        if let Some(dir) = file.parent()
            && !dir.is_dir()
        {
            return Ok(());
        }
        crate::atomic::write(file, text.as_bytes())
    }
}
