//! The OTLP/HTTP exporters, each behind [`Counted`] (what an export sent or dropped),
//! and the SDK's providers around them: batch processors with bounded queues for spans
//! and records, a periodic reader for metrics, no retries (a collector that is down
//! costs one failed request per batch, and the batch is dropped and counted).

use super::{Config, Endpoint, Protocol, TelemetryError};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{BatchLogProcessor, LogBatch, LogExporter, SdkLoggerProvider};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Spans and records waiting for an export, at most (the SDK's default): past it the
/// newest are dropped, never waited for.
const QUEUE: usize = 2048;

/// What the export sent and dropped: spans, event records, metrics (one per instrument
/// in an export; a failed periodic export drops the cumulative values of that moment,
/// the next one carries them again).
#[derive(Debug, Default)]
pub struct Counts {
    spans_sent: AtomicU64,
    spans_dropped: AtomicU64,
    logs_sent: AtomicU64,
    logs_dropped: AtomicU64,
    metrics_sent: AtomicU64,
    metrics_dropped: AtomicU64,
}

/// [`Counts`] at one moment, as `runs/telemetry.json` and `flower log --json` say them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub spans_sent: u64,
    pub spans_dropped: u64,
    pub logs_sent: u64,
    pub logs_dropped: u64,
    pub metrics_sent: u64,
    pub metrics_dropped: u64,
}

impl Figures {
    /// Everything dropped, of every signal.
    pub fn dropped(&self) -> u64 {
        self.spans_dropped + self.logs_dropped + self.metrics_dropped
    }

    pub fn add(&mut self, other: &Figures) {
        self.spans_sent += other.spans_sent;
        self.spans_dropped += other.spans_dropped;
        self.logs_sent += other.logs_sent;
        self.logs_dropped += other.logs_dropped;
        self.metrics_sent += other.metrics_sent;
        self.metrics_dropped += other.metrics_dropped;
    }
}

impl Counts {
    pub fn snapshot(&self) -> Figures {
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Figures {
            spans_sent: get(&self.spans_sent),
            spans_dropped: get(&self.spans_dropped),
            logs_sent: get(&self.logs_sent),
            logs_dropped: get(&self.logs_dropped),
            metrics_sent: get(&self.metrics_sent),
            metrics_dropped: get(&self.metrics_dropped),
        }
    }
}

fn tally(result: &OTelSdkResult, n: u64, sent: &AtomicU64, dropped: &AtomicU64) {
    match result {
        Ok(()) => sent.fetch_add(n, Ordering::Relaxed),
        Err(_) => dropped.fetch_add(n, Ordering::Relaxed),
    };
}

/// An exporter `E` whose every export is counted into the shared [`Counts`].
#[derive(Debug, Clone)]
pub struct Counted<E = ()> {
    exporter: E,
    counts: Arc<Counts>,
}

impl Counted {
    pub fn new(counts: Arc<Counts>) -> Counted {
        Counted {
            exporter: (),
            counts,
        }
    }

    fn around<E>(&self, exporter: E) -> Counted<E> {
        Counted {
            exporter,
            counts: self.counts.clone(),
        }
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.exporter.export(batch).await;
        let c = &self.counts;
        tally(&result, n, &c.spans_sent, &c.spans_dropped);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

impl<E: LogExporter> LogExporter for Counted<E> {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let n = batch.iter().count() as u64;
        let result = self.exporter.export(batch).await;
        let c = &self.counts;
        tally(&result, n, &c.logs_sent, &c.logs_dropped);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Counted<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let n = metrics
            .scope_metrics()
            .map(|scope| scope.metrics().count() as u64)
            .sum();
        let result = self.exporter.export(metrics).await;
        let c = &self.counts;
        tally(&result, n, &c.metrics_sent, &c.metrics_dropped);
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.exporter.temporality()
    }
}

fn protocol(endpoint: &Endpoint) -> opentelemetry_otlp::Protocol {
    match endpoint.protocol {
        Protocol::Protobuf => opentelemetry_otlp::Protocol::HttpBinary,
        Protocol::Json => opentelemetry_otlp::Protocol::HttpJson,
    }
}

fn headers(endpoint: &Endpoint) -> HashMap<String, String> {
    endpoint.headers.iter().cloned().collect()
}

fn build_error(
    signal: &'static str,
) -> impl Fn(opentelemetry_otlp::ExporterBuildError) -> TelemetryError {
    move |source| TelemetryError::Build { signal, source }
}

/// What every signal's exporter is given: the endpoint, its protocol and headers, the
/// timeout, and no retries (a failed export is dropped and counted, never retried).
fn over_http<B: WithExportConfig + WithHttpConfig>(
    builder: B,
    endpoint: &Endpoint,
    config: &Config,
) -> B {
    builder
        .with_endpoint(endpoint.url.clone())
        .with_protocol(protocol(endpoint))
        .with_headers(headers(endpoint))
        .with_timeout(config.timeout)
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
}

/// Spans: a batch processor (bounded queue, its own thread) in front of the exporter.
pub fn tracer_provider(
    endpoint: &Endpoint,
    config: &Config,
    resource: &Resource,
    counted: &Counted,
) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = over_http(
        opentelemetry_otlp::SpanExporter::builder().with_http(),
        endpoint,
        config,
    )
    .build()
    .map_err(build_error("traces"))?;
    let batch = opentelemetry_sdk::trace::BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE)
        .with_scheduled_delay(config.logs_interval)
        .build();
    let processor = BatchSpanProcessor::builder(counted.around(exporter))
        .with_batch_config(batch)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_resource(resource.clone())
        .with_span_processor(processor)
        .build())
}

/// Metrics: a periodic reader (its own thread) with cumulative sums, as Claude Code's.
pub fn meter_provider(
    endpoint: &Endpoint,
    config: &Config,
    resource: &Resource,
    counted: &Counted,
) -> Result<SdkMeterProvider, TelemetryError> {
    let exporter = over_http(
        opentelemetry_otlp::MetricExporter::builder().with_http(),
        endpoint,
        config,
    )
    .build()
    .map_err(build_error("metrics"))?;
    let reader = PeriodicReader::builder(counted.around(exporter))
        .with_interval(config.metric_interval)
        .build();
    Ok(SdkMeterProvider::builder()
        .with_resource(resource.clone())
        .with_reader(reader)
        .build())
}

/// Events (OTLP logs): a batch processor as for spans.
pub fn logger_provider(
    endpoint: &Endpoint,
    config: &Config,
    resource: &Resource,
    counted: &Counted,
) -> Result<SdkLoggerProvider, TelemetryError> {
    let exporter = over_http(
        opentelemetry_otlp::LogExporter::builder().with_http(),
        endpoint,
        config,
    )
    .build()
    .map_err(build_error("logs"))?;
    let batch = opentelemetry_sdk::logs::BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE)
        .with_scheduled_delay(config.logs_interval)
        .build();
    let processor = BatchLogProcessor::builder(counted.around(exporter))
        .with_batch_config(batch)
        .build();
    Ok(SdkLoggerProvider::builder()
        .with_resource(resource.clone())
        .with_log_processor(processor)
        .build())
}
