//! One configuration, read once: every bad flag or environment value stops the binary
//! with exit 2 and a message naming it, before any model request and before anything
//! is written.

use crate::support::pipeline::Project;
use crate::support::{FakeServer, Reply};

/// (variable, bad value, what the message must name).
const BAD: &[(&str, &str, &str)] = &[
    ("FLOWER_MAX_ATTEMPTS", "six", "FLOWER_MAX_ATTEMPTS"),
    ("FLOWER_MAX_ATTEMPTS", "0", "FLOWER_MAX_ATTEMPTS"),
    ("FLOWER_BASE_DELAY", "-1", "FLOWER_BASE_DELAY"),
    ("FLOWER_MAX_DELAY", "soon", "FLOWER_MAX_DELAY"),
    ("FLOWER_PROBE_TIMEOUT", "0", "FLOWER_PROBE_TIMEOUT"),
    ("FLOWER_PROBE_INTERVAL", "x", "FLOWER_PROBE_INTERVAL"),
    ("FLOWER_MAX_OFFLINE_WAIT", "-5", "FLOWER_MAX_OFFLINE_WAIT"),
    ("FLOWER_RETRY_UNKNOWN", "maybe", "FLOWER_RETRY_UNKNOWN"),
    (
        "FLOWER_STREAM_IDLE_TIMEOUT",
        "0",
        "FLOWER_STREAM_IDLE_TIMEOUT",
    ),
    ("FLOWER_MAX_TOKENS", "lots", "FLOWER_MAX_TOKENS"),
    ("FLOWER_PRICES", "/nonexistent/prices.json", "FLOWER_PRICES"),
    (
        "ANTHROPIC_BASE_URL",
        "ftp://example.com",
        "ANTHROPIC_BASE_URL",
    ),
];

#[test]
fn bad_values_exit_2_before_any_request_and_write_nothing() {
    let server = FakeServer::with_handler(|_, _| Reply::text("不该被问到"));
    for (command, args) in [
        ("pipeline", &["写个 hello 脚本"][..]),
        ("once", &["once", "hi"][..]),
    ] {
        for (name, value, named) in BAD {
            let project = Project::new();
            let out = project
                .command(&server, args)
                .env(name, value)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command} {name}={value}: {stderr}"
            );
            assert!(stderr.contains(named), "{command} {name}={value}: {stderr}");
            assert!(
                !project.dir.join("runs").exists() && !project.dir.join("notes").exists(),
                "{command} {name}={value} wrote something"
            );
        }
        let project = Project::new();
        let out = project
            .command(&server, args)
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{command} without a key: {stderr}"
        );
        assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
    }
    assert_eq!(server.request_count(), 0);
}

/// A good value is used, not just accepted: `FLOWER_MAX_TOKENS` reaches the request.
#[test]
fn good_values_reach_the_request() {
    let server = FakeServer::with_handler(|_, _| Reply::text("好"));
    let project = Project::new();
    let out = project
        .command(&server, &["once", "hi"])
        .env("FLOWER_MAX_TOKENS", "1234")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.requests()[0].body["max_tokens"], 1234);
}
