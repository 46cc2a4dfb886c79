//! Resilience primitives: error classes on real error texts, backoff, settings from the
//! environment, the endpoint, and the loopback-only reachability probe and offline wait.

use flower::continuity::resilience::{
    DEFAULT_BASE_URL, Endpoint, ErrorClass, RESUME_PROMPT, Resilience, classify, classify_error,
    endpoint_from, reachable,
};
use flower::model::ModelError;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

use ErrorClass::{Fatal, Transient, Unknown};

/// Texts as they really come: Anthropic error bodies, Claude Code's lines, reqwest/hyper/
/// rustls and OS errors, Node's (for gateways that relay them), and ours.
const TEXTS: &[(&str, ErrorClass)] = &[
    // Anthropic bodies.
    (
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.12: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01A09q90qw90lq917835lq9"}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-opus-9-20990101"}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
        Fatal,
    ),
    (
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        Transient,
    ),
    (
        r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
        Transient,
    ),
    (
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (b9b1d8bd-5b0f-4d5a-9a3c-0e9b7c3d2f1a) of 50,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}}"#,
        Transient,
    ),
    // Claude Code's lines.
    (
        r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        Transient,
    ),
    ("API Error: Connection error.", Transient),
    ("API Error: Request timed out.", Transient),
    ("API Error: Can't reach the API server", Transient),
    ("Invalid API key · Please run /login", Fatal),
    ("Credit balance is too low", Fatal),
    (
        "Could not resolve authentication method. Expected either apiKey or authToken to be set.",
        Fatal,
    ),
    // reqwest / hyper / rustls / OS.
    (
        "error sending request for url (https://api.anthropic.com/v1/messages): client error (Connect): tcp connect error: Connection refused (os error 111)",
        Transient,
    ),
    (
        "error sending request for url (https://api.anthropic.com/v1/messages): client error (Connect): dns error: failed to lookup address information: Name or service not known",
        Transient,
    ),
    (
        "dns error: failed to lookup address information: Temporary failure in name resolution",
        Transient,
    ),
    ("Connection reset by peer (os error 104)", Transient),
    ("Broken pipe (os error 32)", Transient),
    ("Network is unreachable (os error 101)", Transient),
    ("No route to host (os error 113)", Transient),
    ("operation timed out", Transient),
    ("deadline has elapsed", Transient),
    ("connection closed before message completed", Transient),
    ("error decoding response body", Transient),
    (
        "peer closed connection without sending TLS close_notify",
        Transient,
    ),
    ("unexpected EOF", Transient),
    (
        "HTTP status server error (500 Internal Server Error) for url (https://gw.example.com/v1/messages)",
        Transient,
    ),
    ("502 Bad Gateway", Transient),
    ("503 Service Unavailable", Transient),
    ("504 Gateway Timeout", Transient),
    (
        "HTTP status client error (429 Too Many Requests) for url (https://api.anthropic.com/v1/messages)",
        Transient,
    ),
    (
        "HTTP status client error (401 Unauthorized) for url (https://api.anthropic.com/v1/messages)",
        Fatal,
    ),
    (
        "HTTP status client error (403 Forbidden) for url (https://gw.example.com/v1/messages)",
        Fatal,
    ),
    (
        "HTTP status client error (413 Payload Too Large) for url (https://gw.example.com/v1/messages)",
        Fatal,
    ),
    // Node, relayed by gateways.
    ("getaddrinfo ENOTFOUND api.anthropic.com", Transient),
    ("getaddrinfo EAI_AGAIN api.anthropic.com", Transient),
    ("connect ECONNREFUSED 127.0.0.1:443", Transient),
    ("read ECONNRESET", Transient),
    ("connect ETIMEDOUT 160.79.104.10:443", Transient),
    // Fatal wins over transient words in the same text.
    ("401 Unauthorized: connection closed by gateway", Fatal),
    (
        r#"authentication_error: invalid x-api-key (connection reset)"#,
        Fatal,
    ),
    (
        "API Error: 400 invalid_request_error: request timed out waiting for tool_result",
        Fatal,
    ),
    // Numbers inside ids, ports and durations are not statuses.
    ("request req_011CV4013xyz failed in an odd way", Unknown),
    ("odd answer from 127.0.0.1:5000", Unknown),
    ("slept 5290ms, then something odd", Unknown),
    // Neither.
    (
        "API Error: malformed response: expected value at line 1 column 1",
        Unknown,
    ),
    ("", Unknown),
];

#[test]
fn classify_table() {
    for (text, want) in TEXTS {
        assert_eq!(classify(text), *want, "{text}");
        assert_eq!(
            classify(&text.to_uppercase()),
            *want,
            "case-insensitive: {text}"
        );
    }
}

#[test]
fn class_names() {
    assert_eq!(Transient.as_str(), "transient");
    assert_eq!(Fatal.as_str(), "fatal");
    assert_eq!(Unknown.as_str(), "unknown");
    assert_eq!(Fatal.to_string(), "fatal");
}

fn io(kind: ErrorKind, text: &str) -> std::io::Error {
    std::io::Error::new(kind, text)
}

fn api(status: Option<u16>, kind: &str, message: &str) -> ModelError {
    ModelError::Api {
        status,
        kind: kind.into(),
        message: message.into(),
        retry_after: None,
    }
}

#[test]
fn classify_error_trusts_the_typed_error_first() {
    let cases = [
        (ModelError::MissingApiKey, Fatal),
        (
            api(Some(401), "authentication_error", "invalid x-api-key"),
            Fatal,
        ),
        (api(Some(403), "permission_error", "no"), Fatal),
        (
            api(
                Some(400),
                "invalid_request_error",
                "the connection to the tool was reset",
            ),
            Fatal,
        ),
        (api(Some(404), "not_found_error", "model: x"), Fatal),
        (api(Some(413), "request_too_large", "too big"), Fatal),
        (api(Some(408), "timeout", "request timeout"), Transient),
        (api(Some(409), "conflict", "try again"), Transient),
        (api(Some(429), "rate_limit_error", "slow down"), Transient),
        (
            api(Some(500), "api_error", "Internal server error"),
            Transient,
        ),
        (api(Some(503), "whatever", "unavailable"), Transient),
        (api(Some(529), "overloaded_error", "Overloaded"), Transient),
        // `event: error` inside a 200 stream: no status, the kind decides.
        (api(None, "overloaded_error", "Overloaded"), Transient),
        (api(None, "api_error", "Internal server error"), Transient),
        (api(None, "invalid_request_error", "bad"), Fatal),
        (api(Some(402), "billing_error", "pay"), Fatal),
        // No typed answer: the text decides.
        (api(Some(418), "teapot", "I'm a teapot"), Unknown),
        (
            api(None, "odd_error", "connection reset by peer"),
            Transient,
        ),
        (
            ModelError::connection(io(
                ErrorKind::ConnectionRefused,
                "tcp connect error: Connection refused (os error 111)",
            )),
            Transient,
        ),
        // By the variant, whatever the cause says.
        (
            ModelError::connection(io(
                ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            )),
            Transient,
        ),
        (
            ModelError::Incomplete {
                why: "stream closed".into(),
                cause: None,
            },
            Transient,
        ),
        (ModelError::protocol("expected `event:` line"), Unknown),
        (
            ModelError::config("invalid x-api-key connection refused"),
            Fatal,
        ),
    ];
    for (err, want) in cases {
        assert_eq!(classify_error(&err), want, "{err:?}");
    }
    // Every error's display text classifies the same way as the typed error, where
    // the text carries enough to tell.
    assert_eq!(classify(&ModelError::MissingApiKey.to_string()), Fatal);
    assert_eq!(
        classify(&ModelError::connection(io(ErrorKind::Other, "dns error")).to_string()),
        Transient
    );
    assert_eq!(
        classify(
            &ModelError::Incomplete {
                why: "cut".into(),
                cause: None
            }
            .to_string()
        ),
        Transient
    );
}

#[test]
fn resume_prompt_is_exact_and_names_no_error() {
    assert_eq!(
        RESUME_PROMPT,
        "上一轮在中途被打断,没有跑完。检查一下工作台里已经落盘的东西,从中断处接着做,不要重头来过。"
    );
    assert_eq!(classify(RESUME_PROMPT), Unknown);
}

#[test]
fn defaults_are_the_contract() {
    let r = Resilience::default();
    assert_eq!(r.max_attempts, 6);
    assert_eq!(r.base_delay, 4.0);
    assert_eq!(r.max_delay, 120.0);
    assert_eq!(r.probe_timeout, 5.0);
    assert_eq!(r.probe_interval, 15.0);
    assert_eq!(r.max_offline_wait, 3600.0);
    assert!(r.retry_unknown);
    assert!(r.should_retry(Transient));
    assert!(!r.should_retry(Fatal));
    assert!(r.should_retry(Unknown));
    let strict = Resilience {
        retry_unknown: false,
        ..Resilience::default()
    };
    assert!(!strict.should_retry(Unknown));
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let r = Resilience::default();
    let secs: Vec<f64> = (1..=8).map(|a| r.base_delay_for(a).as_secs_f64()).collect();
    assert_eq!(secs, [4.0, 8.0, 16.0, 32.0, 64.0, 120.0, 120.0, 120.0]);
    assert_eq!(
        r.base_delay_for(0),
        Duration::from_secs(4),
        "attempt 0 counts as the first"
    );
    assert_eq!(
        r.base_delay_for(u32::MAX),
        Duration::from_secs(120),
        "no overflow"
    );
}

#[test]
fn a_nan_base_delay_waits_nothing_not_the_cap() {
    let r = Resilience {
        base_delay: f64::NAN,
        ..Resilience::default()
    };
    assert_eq!(r.base_delay_for(1), Duration::ZERO);
    assert_eq!(r.delay(3, None), Duration::ZERO);
}

#[test]
fn jitter_stays_within_a_quarter_and_spreads() {
    let r = Resilience::default();
    for attempt in 1..=8 {
        let base = r.base_delay_for(attempt).as_secs_f64();
        let samples: Vec<f64> = (0..2000)
            .map(|_| r.delay(attempt, None).as_secs_f64())
            .collect();
        let (lo, hi) = (0.75 * base - 1e-9, 1.25 * base + 1e-9);
        assert!(
            samples.iter().all(|s| (lo..=hi).contains(s)),
            "attempt {attempt}: outside ±25 %"
        );
        let min = samples.iter().cloned().fold(f64::MAX, f64::min);
        let max = samples.iter().cloned().fold(0.0, f64::max);
        assert!(
            min < 0.8 * base && max > 1.2 * base,
            "attempt {attempt}: jitter spans the range"
        );
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        assert!(
            (mean / base - 1.0).abs() < 0.05,
            "attempt {attempt}: centred, mean {mean}"
        );
    }
    // The cap applies before the jitter.
    assert!(r.delay(30, None) <= Duration::from_secs_f64(150.0));
}

#[test]
fn retry_after_wins() {
    let r = Resilience::default();
    for attempt in [1, 3, 6] {
        assert_eq!(
            r.delay(attempt, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
    }
    assert_eq!(r.delay(1, Some(Duration::ZERO)), Duration::ZERO);
    assert_eq!(
        r.delay(1, Some(Duration::from_secs(86_400))),
        Duration::from_secs(3600),
        "capped"
    );
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn env_overrides() {
    let (r, warnings) = Resilience::from_lookup(env(&[
        ("FLOWER_MAX_ATTEMPTS", "3"),
        ("FLOWER_BASE_DELAY", "0.5"),
        ("FLOWER_MAX_DELAY", "10"),
        ("FLOWER_PROBE_TIMEOUT", "1.5"),
        ("FLOWER_PROBE_INTERVAL", " 0.25 "),
        ("FLOWER_MAX_OFFLINE_WAIT", "30"),
        ("FLOWER_RETRY_UNKNOWN", "false"),
    ]));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        r,
        Resilience {
            max_attempts: 3,
            base_delay: 0.5,
            max_delay: 10.0,
            probe_timeout: 1.5,
            probe_interval: 0.25,
            max_offline_wait: 30.0,
            retry_unknown: false,
        }
    );
    for (value, want) in [("1", true), ("0", false), ("TRUE", true), ("False", false)] {
        let (r, w) = Resilience::from_lookup(env(&[("FLOWER_RETRY_UNKNOWN", value)]));
        assert_eq!(r.retry_unknown, want, "{value}");
        assert!(w.is_empty());
    }
    let (r, w) = Resilience::from_lookup(env(&[
        ("FLOWER_BASE_DELAY", "0"),
        ("FLOWER_MAX_OFFLINE_WAIT", "0"),
    ]));
    assert!(w.is_empty(), "zero delays are allowed (tests use them)");
    assert_eq!((r.base_delay, r.max_offline_wait), (0.0, 0.0));
}

#[test]
fn bad_env_values_warn_and_keep_the_default() {
    let cases = [
        ("FLOWER_MAX_ATTEMPTS", "0"),
        ("FLOWER_MAX_ATTEMPTS", "six"),
        ("FLOWER_MAX_ATTEMPTS", "-1"),
        ("FLOWER_MAX_ATTEMPTS", "2.5"),
        ("FLOWER_BASE_DELAY", "-1"),
        ("FLOWER_BASE_DELAY", "abc"),
        ("FLOWER_MAX_DELAY", "inf"),
        ("FLOWER_MAX_DELAY", "NaN"),
        ("FLOWER_PROBE_TIMEOUT", "0"),
        ("FLOWER_PROBE_INTERVAL", "0"),
        ("FLOWER_PROBE_INTERVAL", "15s"),
        ("FLOWER_MAX_OFFLINE_WAIT", "1h"),
        ("FLOWER_RETRY_UNKNOWN", "maybe"),
    ];
    for (name, value) in cases {
        let (r, warnings) = Resilience::from_lookup(env(&[(name, value)]));
        assert_eq!(r, Resilience::default(), "{name}={value}");
        assert_eq!(warnings.len(), 1, "{name}={value}");
        assert!(warnings[0].contains(name), "{}", warnings[0]);
    }
    // Several bad ones: one warning each; good ones beside them still apply.
    let (r, warnings) = Resilience::from_lookup(env(&[
        ("FLOWER_MAX_ATTEMPTS", "x"),
        ("FLOWER_BASE_DELAY", "y"),
        ("FLOWER_MAX_DELAY", "60"),
    ]));
    assert_eq!(warnings.len(), 2);
    assert_eq!(r.max_delay, 60.0);
    // Empty means unset.
    let (r, warnings) = Resilience::from_lookup(env(&[("FLOWER_MAX_ATTEMPTS", "")]));
    assert!(warnings.is_empty());
    assert_eq!(r, Resilience::default());
}

#[test]
fn endpoint_table() {
    let cases = [
        ("", "api.anthropic.com", 443),
        ("   ", "api.anthropic.com", 443),
        ("https://api.anthropic.com", "api.anthropic.com", 443),
        ("https://api.anthropic.com/", "api.anthropic.com", 443),
        ("http://gateway.internal", "gateway.internal", 80),
        ("http://localhost:8080/v1", "localhost", 8080),
        (
            "https://gw.example.com:8443/anthropic/v1?x=1",
            "gw.example.com",
            8443,
        ),
        ("https://gw.example.com:443", "gw.example.com", 443),
        ("http://gw.example.com:443", "gw.example.com", 443),
        ("https://gw.example.com:80", "gw.example.com", 80),
        ("HTTPS://GW.Example.COM", "gw.example.com", 443),
        ("http://127.0.0.1:5000", "127.0.0.1", 5000),
        ("http://[::1]:9000/x", "::1", 9000),
        (
            "https://user:secret@gw.example.com/x",
            "gw.example.com",
            443,
        ),
        ("gw.example.com:9999", "gw.example.com", 9999),
        ("gw.example.com", "gw.example.com", 443),
        ("://", "api.anthropic.com", 443),
    ];
    for (url, host, port) in cases {
        assert_eq!(
            endpoint_from(url),
            Endpoint {
                host: host.into(),
                port
            },
            "{url:?}"
        );
    }
    assert_eq!(endpoint_from("").to_string(), "api.anthropic.com:443");
    assert_eq!(endpoint_from(DEFAULT_BASE_URL), endpoint_from(""));
    assert_eq!(
        endpoint_from("http://127.0.0.1:5000").to_string(),
        "127.0.0.1:5000"
    );
    assert_eq!(endpoint_from("http://[::1]:9000").to_string(), "[::1]:9000");
}

/// A loopback port with nothing listening on it.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn reachable_when_something_listens_and_no_byte_is_sent() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).await.unwrap();
        got
    });
    assert!(reachable("127.0.0.1", port, Duration::from_secs(5)).await);
    let got = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    assert!(got.is_empty(), "the probe sent {} bytes", got.len());
}

#[tokio::test]
async fn reachable_through_a_name_that_resolves() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // `localhost` may resolve to ::1 first, where nothing listens: the next address counts.
    assert!(reachable("localhost", port, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn unreachable_when_the_port_is_closed() {
    assert!(!reachable("127.0.0.1", closed_port(), Duration::from_secs(5)).await);
}

#[tokio::test]
async fn unreachable_for_a_host_that_does_not_resolve() {
    let timeout = Duration::from_secs(3);
    let started = Instant::now();
    assert!(!reachable("nonexistent.invalid", 443, timeout).await);
    assert!(
        started.elapsed() < timeout + Duration::from_secs(2),
        "gave up within the timeout"
    );
}

fn fast(max_offline_wait: f64) -> Resilience {
    Resilience {
        probe_interval: 0.05,
        probe_timeout: 2.0,
        max_offline_wait,
        ..Resilience::default()
    }
}

#[tokio::test]
async fn no_wait_when_reachable_now() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port: listener.local_addr().unwrap().port(),
    };
    let mut waits = 0;
    assert!(fast(30.0).wait_until_reachable(&ep, |_| waits += 1).await);
    assert_eq!(waits, 0);
}

#[tokio::test]
async fn waits_for_a_listener_that_appears_later() {
    let port = closed_port();
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port,
    };
    let mut listener = None;
    let mut waited = Vec::new();
    let ok = fast(60.0)
        .wait_until_reachable(&ep, |w| {
            waited.push(w);
            // The network "comes back" after the third failed probe.
            if waited.len() == 3 {
                listener = Some(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap());
            }
        })
        .await;
    assert!(ok);
    assert!(listener.is_some());
    assert_eq!(
        waited.len(),
        3,
        "one call per failed probe, none after it came back"
    );
    assert!(
        waited.windows(2).all(|w| w[0] < w[1]),
        "waited grows: {waited:?}"
    );
    assert!(
        waited[2] >= Duration::from_millis(100),
        "probes are probe_interval apart: {waited:?}"
    );
}

#[tokio::test]
async fn gives_up_after_max_offline_wait() {
    let ep = Endpoint {
        host: "127.0.0.1".into(),
        port: closed_port(),
    };
    let limit = Duration::from_millis(300);
    let mut waited = Vec::new();
    let started = Instant::now();
    let ok = fast(limit.as_secs_f64())
        .wait_until_reachable(&ep, |w| waited.push(w))
        .await;
    assert!(!ok);
    assert!(started.elapsed() >= limit);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        waited.len() >= 3,
        "probed every interval meanwhile: {waited:?}"
    );
    assert!(*waited.last().unwrap() >= limit);

    // Zero patience: one probe, then give up.
    let mut calls = 0;
    assert!(!fast(0.0).wait_until_reachable(&ep, |_| calls += 1).await);
    assert_eq!(calls, 1);
}
