//! Resilience: wait out the network, back off, and tell what to wait for from what to stop
//! at (spec 接续.md, 韧性; the numbers are DESIGN.md §6).
//!
//! The pieces the retry loop is built from:
//! - [`reachable`] probes with DNS + one TCP connect only: no HTTP, no credentials, no
//!   cost. [`endpoint_from`] says what to probe: the host of the client's base URL (a
//!   gateway, if one is configured).
//! - [`classify`] / [`classify_error`]: transient (wait and retry), fatal (stop and tell
//!   the user what to fix), unknown. Fatal is checked first: a 401 text often mentions
//!   "connection" too.
//! - [`Resilience`]: the numbers (read from `FLOWER_*` variables through an explicit
//!   lookup by the settings resolution, never from the process environment here), with
//!   the backoff delay and the offline wait.
//! - [`RESUME_PROMPT`]: what a retry that resumes its session says. It names no error:
//!   the model needs to know it was interrupted, not whether it was ENOTFOUND or a 503.

use std::fmt;
use std::time::{Duration, Instant};

pub use crate::model::classify::{ErrorClass, classify, classify_error, fatal_hint};

/// Sent when a retry resumes the session of an interrupted step (or sub-agent).
pub use crate::engine::recovery::RESUME_PROMPT;

/// The API the default endpoint stands for.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Retry and offline-wait settings. Seconds are `f64`, as in the environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Resilience {
    /// Attempts per step, the first included. `FLOWER_MAX_ATTEMPTS`, default 6.
    pub max_attempts: u32,
    /// Backoff before retry 1; doubles per attempt. `FLOWER_BASE_DELAY`, default 4.0.
    pub base_delay: f64,
    /// Backoff cap (before jitter). `FLOWER_MAX_DELAY`, default 120.0.
    pub max_delay: f64,
    /// One reachability probe's time limit. `FLOWER_PROBE_TIMEOUT`, default 5.0.
    pub probe_timeout: f64,
    /// Between probes while offline. `FLOWER_PROBE_INTERVAL`, default 15.0.
    pub probe_interval: f64,
    /// How long to wait for the network before giving up. `FLOWER_MAX_OFFLINE_WAIT`,
    /// default 3600.0 (an hour).
    pub max_offline_wait: f64,
    /// Whether an error that is neither transient nor fatal is retried.
    /// `FLOWER_RETRY_UNKNOWN`, default true.
    pub retry_unknown: bool,
}

impl Default for Resilience {
    fn default() -> Self {
        Resilience {
            max_attempts: 6,
            base_delay: 4.0,
            max_delay: 120.0,
            probe_timeout: 5.0,
            probe_interval: 15.0,
            max_offline_wait: 3600.0,
            retry_unknown: true,
        }
    }
}

/// What a seconds setting may be.
#[derive(Clone, Copy)]
enum Range {
    /// ≥ 0
    NonNegative,
    /// > 0 (a zero probe timeout or interval would make probing meaningless or spin)
    Positive,
}

impl Resilience {
    /// The defaults overridden by the `FLOWER_*` variables `lookup` finds (the settings
    /// resolution passes its environment snapshot). Bad values are ignored (the default
    /// stays) and each yields one warning line; the settings resolution refuses the
    /// first instead. An empty value counts as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Resilience, Vec<String>) {
        let mut r = Resilience::default();
        let mut warnings = Vec::new();
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };

        if let Some(value) = get("FLOWER_MAX_ATTEMPTS") {
            match value.parse::<u32>() {
                Ok(n) if n >= 1 => r.max_attempts = n,
                _ => warnings.push(format!(
                    "FLOWER_MAX_ATTEMPTS={value:?}:要一个 ≥ 1 的整数(尝试次数,含第一次);先用 {}",
                    r.max_attempts
                )),
            }
        }
        let mut seconds = |name: &str, range: Range, field: &mut f64| {
            let Some(value) = get(name) else { return };
            let valid = value.parse::<f64>().ok().filter(|x| {
                x.is_finite()
                    && match range {
                        Range::NonNegative => *x >= 0.0,
                        Range::Positive => *x > 0.0,
                    }
            });
            if let Some(x) = valid {
                *field = x;
            } else {
                let want = match range {
                    Range::NonNegative => "≥ 0",
                    Range::Positive => "> 0",
                };
                warnings.push(format!(
                    "{name}={value:?}:要一个 {want} 的秒数;先用 {}",
                    field
                ));
            }
        };
        seconds("FLOWER_BASE_DELAY", Range::NonNegative, &mut r.base_delay);
        seconds("FLOWER_MAX_DELAY", Range::NonNegative, &mut r.max_delay);
        seconds(
            "FLOWER_PROBE_TIMEOUT",
            Range::Positive,
            &mut r.probe_timeout,
        );
        seconds(
            "FLOWER_PROBE_INTERVAL",
            Range::Positive,
            &mut r.probe_interval,
        );
        seconds(
            "FLOWER_MAX_OFFLINE_WAIT",
            Range::NonNegative,
            &mut r.max_offline_wait,
        );

        if let Some(value) = get("FLOWER_RETRY_UNKNOWN") {
            match value.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => r.retry_unknown = true,
                "false" | "0" | "no" | "off" => r.retry_unknown = false,
                _ => warnings.push(format!(
                    "FLOWER_RETRY_UNKNOWN={value:?}:要 true/false/1/0;先用 {}",
                    r.retry_unknown
                )),
            }
        }
        (r, warnings)
    }

    /// The backoff before retrying after failed attempt number `attempt` (1-based),
    /// without jitter: `min(base_delay · 2^(attempt−1), max_delay)`.
    pub fn base_delay_for(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(1023) as i32;
        // Each side through `secs` first: `NaN.min(max)` is `max`, not 0.
        secs(self.base_delay * 2f64.powi(exponent)).min(secs(self.max_delay))
    }

    /// The backoff before the next attempt: [`base_delay_for`](Self::base_delay_for)
    /// times a uniform jitter in [0.75, 1.25], so that many clients do not retry in step
    /// (the cap applies before the jitter, as the spec's formula has it).
    /// A server's `retry-after` wins when given (capped at `max_offline_wait`, so an
    /// absurd header cannot park the run for days).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            return after.min(secs(self.max_offline_wait));
        }
        let jitter = 0.75 + 0.5 * fastrand::f64();
        secs(self.base_delay_for(attempt).as_secs_f64() * jitter)
    }

    /// Whether an error of this class is worth another attempt.
    pub fn should_retry(&self, class: ErrorClass) -> bool {
        match class {
            ErrorClass::Transient => true,
            ErrorClass::Fatal => false,
            ErrorClass::Unknown => self.retry_unknown,
        }
    }

    /// Waits for the network: true at once if `ep` is reachable now; otherwise probes
    /// every `probe_interval`, calling `on_wait(waited)` after each failed probe (for the
    /// live status line), until it is reachable (true) or `max_offline_wait` has passed
    /// (false). Waiting spends no attempt: that is the caller's rule.
    pub async fn wait_until_reachable(
        &self,
        ep: &Endpoint,
        mut on_wait: impl FnMut(Duration),
    ) -> bool {
        let started = Instant::now();
        let limit = secs(self.max_offline_wait);
        let timeout = secs(self.probe_timeout);
        loop {
            if reachable(&ep.host, ep.port, timeout).await {
                return true;
            }
            let waited = started.elapsed();
            on_wait(waited);
            if waited >= limit {
                return false;
            }
            let pause = secs(self.probe_interval).min(limit - waited);
            tokio::time::sleep(pause).await;
        }
    }
}

/// Seconds to a `Duration`, saturating: negative or NaN → 0, too large → the maximum.
fn secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        Duration::ZERO
    } else {
        Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
    }
}

/// Where the model API lives, for the reachability probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// A host name or an IP address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Endpoint {
    /// `host:port`; `[v6]:port` for an IPv6 address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The endpoint of a base URL: its host, and its explicit port, else 443 (80 for
/// `http`). The path is ignored; a URL without a scheme is taken as https. An empty or
/// unparseable URL gives the API's own endpoint.
pub fn endpoint_from(base_url: &str) -> Endpoint {
    let trimmed = base_url.trim();
    let default = || Endpoint {
        host: "api.anthropic.com".into(),
        port: 443,
    };
    if trimmed.is_empty() {
        return default();
    }
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_owned()
    } else {
        format!("https://{trimmed}")
    };
    let Ok(url) = reqwest::Url::parse(&with_scheme) else {
        return default();
    };
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return default();
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = url
        .port()
        .unwrap_or(if url.scheme() == "http" { 80 } else { 443 });
    Endpoint { host, port }
}

/// Whether `host:port` answers a TCP handshake within `timeout`: name resolution, then
/// a connect to each resolved address in turn until one accepts. No byte is sent; any
/// error means unreachable.
pub async fn reachable(host: &str, port: u16, timeout: Duration) -> bool {
    let probe = async {
        let Ok(addrs) = tokio::net::lookup_host((host, port)).await else {
            return false;
        };
        for addr in addrs {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return true;
            }
        }
        false
    };
    tokio::time::timeout(timeout, probe).await.unwrap_or(false)
}
