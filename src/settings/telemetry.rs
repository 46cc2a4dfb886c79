//! The OpenTelemetry export's variables (`docs/telemetry.md`): Claude Code's switch
//! `CLAUDE_CODE_ENABLE_TELEMETRY` and the standard `OTEL_*` ones, read from the process
//! environment only. A settings file's `env` is not read for them: a workspace's file
//! is something an agent can write, and an endpoint there would send the run elsewhere.
//! Checked only when the switch is on; a bad value is a [`ConfigError`].

use super::ConfigError;
use super::sources::Environment;
use crate::telemetry::{Config, Endpoint, Protocol};
use std::time::Duration;

pub const SWITCH: &str = "CLAUDE_CODE_ENABLE_TELEMETRY";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
const RESOURCE: &str = "OTEL_RESOURCE_ATTRIBUTES";
const METRIC_INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";
const LOGS_INTERVAL: &str = "OTEL_LOGS_EXPORT_INTERVAL";
/// The collector's default OTLP/HTTP address.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// The signals: their exporter variable, the per-signal variables' infix, the path.
const SIGNALS: [(&str, &str, &str); 3] = [
    ("OTEL_TRACES_EXPORTER", "TRACES", "/v1/traces"),
    ("OTEL_METRICS_EXPORTER", "METRICS", "/v1/metrics"),
    ("OTEL_LOGS_EXPORTER", "LOGS", "/v1/logs"),
];

/// The export, or `None` when the switch is off (the default).
pub fn resolve(env: &Environment) -> Result<Option<Config>, ConfigError> {
    let var = |name: &str| env.var(name).map(str::trim).filter(|v| !v.is_empty());
    match var(SWITCH) {
        None | Some("0") | Some("false") => return Ok(None),
        Some("1") | Some("true") => {}
        Some(other) => {
            return Err(ConfigError::invalid(
                SWITCH,
                format!("{SWITCH}={other:?}:要 1(打开)或 0(关闭)"),
            ));
        }
    }
    // The exporter crate reads these itself and cannot compress (no gzip/zstd built
    // in), and takes even `none` for a bad value: refused here, before anything runs.
    for infix in ["", "TRACES_", "METRICS_", "LOGS_"] {
        let name = format!("OTEL_EXPORTER_OTLP_{infix}COMPRESSION");
        if let Some(value) = var(&name) {
            return Err(ConfigError::invalid(
                &name,
                format!("{name}={value:?}:flower 的导出不压缩,去掉这个变量"),
            ));
        }
    }
    let mut endpoints = Vec::new();
    for (exporter, infix, path) in SIGNALS {
        endpoints.push(match var(exporter) {
            None | Some("otlp") => Some(endpoint(&var, infix, path)?),
            Some("none") => None,
            Some(other) => {
                return Err(ConfigError::invalid(
                    exporter,
                    format!("{exporter}={other:?}:flower 只会 otlp(OTLP/HTTP)或 none"),
                ));
            }
        });
    }
    let [traces, metrics, logs]: [Option<Endpoint>; 3] = match endpoints.try_into() {
        Ok(three) => three,
        Err(_) => return Ok(None),
    };
    Ok(Some(Config {
        traces,
        metrics,
        logs,
        resource: match var(RESOURCE) {
            Some(text) => pairs(RESOURCE, text)?,
            None => Vec::new(),
        },
        metric_interval: millis(METRIC_INTERVAL, var(METRIC_INTERVAL), 60_000)?,
        logs_interval: millis(LOGS_INTERVAL, var(LOGS_INTERVAL), 5_000)?,
        timeout: millis(TIMEOUT, var(TIMEOUT), 10_000)?,
    }))
}

/// The variables whose values the processes flower starts must not see: the export's
/// headers carry the collector's credentials.
pub fn secret_names(env: &Environment) -> Vec<String> {
    std::iter::once(HEADERS.to_string())
        .chain(
            SIGNALS
                .iter()
                .map(|(_, infix, _)| format!("OTEL_EXPORTER_OTLP_{infix}_HEADERS")),
        )
        .filter(|name| env.var(name).is_some())
        .collect()
}

/// One signal's endpoint: its own variables first, then the shared ones.
fn endpoint<'a>(
    var: &impl Fn(&str) -> Option<&'a str>,
    infix: &str,
    path: &str,
) -> Result<Endpoint, ConfigError> {
    let own = |name: &str| format!("OTEL_EXPORTER_OTLP_{infix}_{name}");
    let (url_name, url) = match var(&own("ENDPOINT")) {
        // A signal's own endpoint is the whole URL.
        Some(url) => (own("ENDPOINT"), url.to_string()),
        None => {
            let base = var(ENDPOINT).unwrap_or(DEFAULT_ENDPOINT);
            (
                ENDPOINT.to_string(),
                format!("{}{path}", base.trim_end_matches('/')),
            )
        }
    };
    match reqwest::Url::parse(&url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.has_host() => {}
        _ => {
            return Err(ConfigError::invalid(
                &url_name,
                format!("{url_name}:{url:?} 不是 http:// 或 https:// 的地址"),
            ));
        }
    }
    let (protocol_name, protocol) = match var(&own("PROTOCOL")) {
        Some(value) => (own("PROTOCOL"), Some(value)),
        None => (PROTOCOL.to_string(), var(PROTOCOL)),
    };
    let protocol = match protocol {
        None | Some("http/protobuf") => Protocol::Protobuf,
        Some("http/json") => Protocol::Json,
        Some(other) => {
            return Err(ConfigError::invalid(
                &protocol_name,
                format!(
                    "{protocol_name}={other:?}:flower 只会 http/protobuf 或 http/json(不支持 grpc)"
                ),
            ));
        }
    };
    let (headers_name, headers) = match var(&own("HEADERS")) {
        Some(value) => (own("HEADERS"), Some(value)),
        None => (HEADERS.to_string(), var(HEADERS)),
    };
    let headers = match headers {
        Some(text) => pairs(&headers_name, text)?,
        None => Vec::new(),
    };
    for (key, value) in &headers {
        let bad_name = key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if bad_name || value.bytes().any(|b| b < 0x20 && b != b'\t') {
            return Err(ConfigError::invalid(
                &headers_name,
                format!("{headers_name}:{key:?} 不是能发出去的 HTTP 头"),
            ));
        }
    }
    Ok(Endpoint {
        url,
        protocol,
        headers,
    })
}

/// `k1=v1,k2=v2` (W3C baggage's form, values percent-encoded), as the OTel
/// specification writes `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_EXPORTER_OTLP_HEADERS`.
fn pairs(name: &str, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for item in text.split(',') {
        if item.trim().is_empty() {
            continue;
        }
        let decoded = item
            .split_once('=')
            .and_then(|(k, v)| Some((percent_decoded(k.trim())?, percent_decoded(v.trim())?)));
        match decoded {
            Some((key, value)) if !key.is_empty() => out.push((key, value)),
            _ => {
                return Err(ConfigError::invalid(
                    name,
                    format!(
                        "{name}:{:?} 不是 键=值(逗号隔开,值可以 %XX 转义)",
                        item.trim()
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// `%XX` escapes decoded; `None` for a broken escape or bytes that are not UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A positive number of milliseconds (at most a day).
fn millis(name: &str, text: Option<&str>, default: u64) -> Result<Duration, ConfigError> {
    match text {
        None => Ok(Duration::from_millis(default)),
        Some(text) => match text.parse::<u64>() {
            Ok(ms) if (1..=86_400_000).contains(&ms) => Ok(Duration::from_millis(ms)),
            _ => Err(ConfigError::invalid(
                name,
                format!("{name}={text:?}:要一个正整数(毫秒)"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_decoded_and_broken_ones_refused() {
        assert_eq!(
            pairs("X", "a=b, c=d%20e,,").unwrap(),
            [("a".into(), "b".into()), ("c".into(), "d e".into())]
        );
        assert!(pairs("X", "a").is_err());
        assert!(pairs("X", "a=%2").is_err());
        assert!(pairs("X", "=b").is_err());
    }
}
