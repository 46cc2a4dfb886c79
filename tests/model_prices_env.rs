//! `FLOWER_PRICES` overrides the process-wide price table. One test in its own binary:
//! the table is read once per process, from the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::model::Usage;
use flower::model::prices;
use std::io::Write;

#[test]
fn flower_prices_env_overrides_the_builtin_table() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        r#"{{"claude-opus-4-5": {{"input": 100.0, "output": 0, "cache_write": 0, "cache_read": 0}},
            "my-gateway-model": {{"input": 2.0, "output": 4.0, "cache_write": 0, "cache_read": 0}}}}"#
    )
    .unwrap();
    // SAFETY: the only test in this binary; nothing else reads the environment.
    unsafe { std::env::set_var("FLOWER_PRICES", file.path()) };
    let u = Usage {
        input_tokens: 1_000_000,
        output_tokens: 1_000_000,
        ..Usage::default()
    };
    assert_eq!(prices::cost_usd("claude-opus-4-5", &u), Some(100.0));
    assert_eq!(
        prices::cost_usd("claude-opus-4-5-20251101", &u),
        Some(100.0)
    );
    assert_eq!(prices::cost_usd("my-gateway-model", &u), Some(6.0));
    // Built-in entries the file does not name are still there.
    assert_eq!(prices::cost_usd("claude-haiku-4-5", &u), Some(6.0));
    assert_eq!(prices::cost_usd("unknown-model", &u), None);
}
