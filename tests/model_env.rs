//! `AnthropicClient::from_env`: the environment variables and their precedence.
//! One test in its own binary, because it changes the process environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::model::ModelClient;
use flower::model::ModelError;
use flower::model::anthropic::{
    AnthropicClient, DEFAULT_BASE_URL, DEFAULT_IDLE_TIMEOUT, DEFAULT_MODEL,
};
use std::time::Duration;

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary has a single test, so no other thread reads the environment.
    unsafe {
        match value {
            Some(v) => std::env::set_var(name, v),
            None => std::env::remove_var(name),
        }
    }
}

#[test]
fn from_env_reads_key_base_url_model_and_idle_timeout() {
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_MODEL",
        "FLOWER_STREAM_IDLE_TIMEOUT",
    ] {
        set(var, None);
    }

    // No key: refused before anything else, even with a model override.
    assert_eq!(
        AnthropicClient::from_env(Some("claude-opus-4-5")).unwrap_err(),
        ModelError::MissingApiKey
    );
    set("ANTHROPIC_API_KEY", Some("   "));
    assert_eq!(
        AnthropicClient::from_env(None).unwrap_err(),
        ModelError::MissingApiKey
    );
    assert!(
        ModelError::MissingApiKey
            .to_string()
            .contains("ANTHROPIC_API_KEY")
    );

    set("ANTHROPIC_API_KEY", Some("sk-ant-test"));
    let client = AnthropicClient::from_env(None).unwrap();
    assert_eq!(client.base_url(), DEFAULT_BASE_URL);
    assert_eq!(client.default_model(), DEFAULT_MODEL);
    assert_eq!(client.idle_timeout(), DEFAULT_IDLE_TIMEOUT);
    assert_eq!(DEFAULT_IDLE_TIMEOUT, Duration::from_secs(300));

    // Trailing slash tolerated; ANTHROPIC_MODEL used; the override wins over it.
    set("ANTHROPIC_BASE_URL", Some("http://127.0.0.1:8080/gateway/"));
    set("ANTHROPIC_MODEL", Some("claude-haiku-4-5"));
    let client = AnthropicClient::from_env(None).unwrap();
    assert_eq!(client.base_url(), "http://127.0.0.1:8080/gateway");
    assert_eq!(client.default_model(), "claude-haiku-4-5");
    let client = AnthropicClient::from_env(Some("claude-opus-4-1")).unwrap();
    assert_eq!(client.default_model(), "claude-opus-4-1");
    // An empty override is no override.
    assert_eq!(
        AnthropicClient::from_env(Some("")).unwrap().default_model(),
        "claude-haiku-4-5"
    );

    set("FLOWER_STREAM_IDLE_TIMEOUT", Some("2.5"));
    assert_eq!(
        AnthropicClient::from_env(None).unwrap().idle_timeout(),
        Duration::from_millis(2500)
    );
    set("FLOWER_STREAM_IDLE_TIMEOUT", Some("soon"));
    assert_eq!(
        AnthropicClient::from_env(None).unwrap().idle_timeout(),
        DEFAULT_IDLE_TIMEOUT
    );
    set("FLOWER_STREAM_IDLE_TIMEOUT", Some("0"));
    assert_eq!(
        AnthropicClient::from_env(None).unwrap().idle_timeout(),
        DEFAULT_IDLE_TIMEOUT
    );

    // A base URL that cannot work is a configuration error, not a network one.
    set("ANTHROPIC_BASE_URL", Some("api.anthropic.com"));
    assert!(matches!(
        AnthropicClient::from_env(None),
        Err(ModelError::Config(_))
    ));
    set("ANTHROPIC_BASE_URL", Some("ftp://example.com"));
    assert!(matches!(
        AnthropicClient::from_env(None),
        Err(ModelError::Config(_))
    ));
}
