//! Prices: the built-in table, dated ids, unknown models, and user override files.

use flower::model::Usage;
use flower::model::prices::{ModelPrice, PriceTable};
use std::io::Write;

fn usage(input: u64, output: u64, write: u64, read: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_creation_input_tokens: write,
        cache_read_input_tokens: read,
        ..Usage::default()
    }
}

/// The built-in table (not `prices::cost_usd`, which a `FLOWER_PRICES` in the caller's
/// environment would change; that path is tested in `model_prices_env.rs`).
fn builtin() -> PriceTable {
    PriceTable::builtin()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn known_models_cost_their_published_prices() {
    let million = usage(1_000_000, 1_000_000, 1_000_000, 1_000_000);
    // input + output + cache write (5 min) + cache read, per million tokens.
    let expected = [
        ("claude-opus-4-5", 5.0 + 25.0 + 6.25 + 0.5),
        ("claude-opus-4-1", 15.0 + 75.0 + 18.75 + 1.5),
        ("claude-opus-4", 15.0 + 75.0 + 18.75 + 1.5),
        ("claude-sonnet-4-5", 3.0 + 15.0 + 3.75 + 0.3),
        ("claude-sonnet-4", 3.0 + 15.0 + 3.75 + 0.3),
        ("claude-3-7-sonnet", 3.0 + 15.0 + 3.75 + 0.3),
        ("claude-haiku-4-5", 1.0 + 5.0 + 1.25 + 0.1),
        ("claude-3-5-haiku", 0.8 + 4.0 + 1.0 + 0.08),
    ];
    for (model, dollars) in expected {
        let cost = builtin()
            .cost_usd(model, &million)
            .unwrap_or_else(|| panic!("{model}"));
        assert!(close(cost, dollars), "{model}: {cost} != {dollars}");
    }
    // Each kind of token is priced separately.
    let sonnet = builtin().get("claude-sonnet-4-5").unwrap();
    assert_eq!(
        sonnet,
        ModelPrice {
            input: 3.0,
            output: 15.0,
            cache_write: 3.75,
            cache_read: 0.3
        }
    );
    let cost = builtin()
        .cost_usd("claude-sonnet-4-5", &usage(1000, 200, 3000, 40_000))
        .unwrap();
    assert!(close(
        cost,
        (1000.0 * 3.0 + 200.0 * 15.0 + 3000.0 * 3.75 + 40_000.0 * 0.3) / 1e6
    ));
    assert_eq!(
        builtin().cost_usd("claude-haiku-4-5", &Usage::default()),
        Some(0.0)
    );
}

#[test]
fn dated_ids_match_their_base_and_unknown_models_have_no_price() {
    let u = usage(1_000_000, 0, 0, 0);
    for (dated, base) in [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-3-7-sonnet-20250219", "claude-3-7-sonnet"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
    ] {
        assert_eq!(
            builtin().cost_usd(dated, &u),
            builtin().cost_usd(base, &u),
            "{dated}"
        );
        assert!(builtin().cost_usd(dated, &u).is_some(), "{dated}");
    }
    for unknown in [
        "gpt-4o",
        "claude-sonnet-9",
        "claude-sonnet-4-5-2025",
        "",
        "llama3:8b-20250101",
    ] {
        assert_eq!(builtin().cost_usd(unknown, &u), None, "{unknown:?}");
    }
}

#[test]
fn an_override_file_is_merged_over_the_builtin_table() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        r#"{{"claude-sonnet-4-5": {{"input": 1.0, "output": 2.0, "cache_write": 0.5, "cache_read": 0.25}},
            "local-llama": {{"input": 0, "output": 0, "cache_write": 0, "cache_read": 0}}}}"#
    )
    .unwrap();
    let table = PriceTable::with_override(file.path()).unwrap();
    let u = usage(1_000_000, 1_000_000, 1_000_000, 1_000_000);
    assert_eq!(table.cost_usd("claude-sonnet-4-5", &u), Some(3.75));
    // The dated id follows its overridden base.
    assert_eq!(table.cost_usd("claude-sonnet-4-5-20250929", &u), Some(3.75));
    assert_eq!(table.cost_usd("local-llama", &u), Some(0.0));
    // Models the file does not name keep their built-in prices.
    assert_eq!(
        table.get("claude-opus-4-5"),
        PriceTable::builtin().get("claude-opus-4-5")
    );
    assert!(table.models().len() == PriceTable::builtin().models().len() + 1);
}

#[test]
fn a_bad_override_file_is_a_clear_error() {
    let missing = std::path::Path::new("/nonexistent/prices.json");
    let e = PriceTable::with_override(missing).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/prices.json"), "{e}");

    for (content, hint) in [
        ("not json", "expected"),
        (r#"{"m": {"input": 1, "output": 2}}"#, "missing field"),
        (
            r#"{"m": {"input": 1, "output": 2, "cache_write": 1, "cache_read": 1, "cache_wirte": 3}}"#,
            "unknown field",
        ),
        (
            r#"{"m": {"input": -1, "output": 2, "cache_write": 1, "cache_read": 1}}"#,
            "非负数",
        ),
    ] {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(content.as_bytes()).unwrap();
        let e = PriceTable::with_override(file.path()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&file.path().display().to_string()), "{text}");
        assert!(text.contains(hint), "{content}: {text}");
    }
}

/// Server tool requests are priced per use: web search at USD 10 per 1,000 on every
/// model unless the table says otherwise, web fetch free (only its tokens cost).
#[test]
fn server_tool_requests_are_priced_per_use() {
    let table = PriceTable::builtin();
    let mut searches = Usage::default();
    searches.server_tool_use.web_search_requests = 1000;
    searches.server_tool_use.web_fetch_requests = 7;
    assert_eq!(table.cost_usd("claude-sonnet-5-5", &searches), Some(10.0));
    assert_eq!(
        table.request_cost_usd("claude-opus-4-6", &searches),
        Some(10.0)
    );
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        r#"{{"claude-sonnet-5-5": {{"input": 0, "output": 0, "cache_write": 0, "cache_read": 0, "web_search": 5.0, "web_fetch": 1.0}}}}"#
    )
    .unwrap();
    let table = PriceTable::with_override(file.path()).unwrap();
    assert_eq!(table.cost_usd("claude-sonnet-5-5", &searches), Some(5.007));
}
