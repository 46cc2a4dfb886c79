//! Per-model prices and cost computation.
//!
//! The built-in table is `src/model/prices.json`, compiled into the binary. Its prices
//! are Anthropic's published list prices (platform.claude.com, "Pricing" and the model
//! overview pages, read 2026-12-02), in USD per million tokens, for every id of the
//! official SDK's model list (anthropic-sdk-python `types/model_param.py`, 2026-08-07)
//! and the models released since. `cache_write` is the price of a 5-minute cache write
//! (what flower asks for), `cache_write_1h` of a 1-hour one.
//! Sonnet 5.5's cache reads follow the cut of 2026-10-07 ($0.20 → $0.10, 0.05× input).
//!
//! # The price file format
//!
//! One JSON object mapping a model id to its four prices, USD per million tokens:
//!
//! ```json
//! {
//!   "claude-sonnet-4-5": {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_read": 0.3},
//!   "my-gateway-model":  {"input": 1.0, "output": 2.0,  "cache_write": 1.25, "cache_read": 0.1}
//! }
//! ```
//!
//! All four fields are required, non-negative numbers; unknown fields are refused (a
//! typo must not silently price something at 0). Optional: `cache_write_1h`, and
//! `long_context`: `{"above_tokens": N, "input": …, "output": …, "cache_write": …,
//! "cache_read": …}`, the prices of a request whose prompt (input + cache reads + cache
//! writes) is over N tokens, for every token of that request (Sonnet 4/4.5 above 200K,
//! Haiku 5.5 above 100K).
//!
//! Optional too: `web_search` and `web_fetch`, USD per 1,000 server tool requests
//! (`usage.server_tool_use`); without them, web search costs [`WEB_SEARCH_PER_1K`] (10)
//! and web fetch 0 (the API charges only the tokens it adds).
//!
//! # Overriding
//!
//! `FLOWER_PRICES=/path/to/prices.json` names a file of that format; its entries are
//! merged over the built-in table (a model it names gets its prices, the others keep
//! the built-in ones). The settings resolution reads and validates it (a file that
//! cannot be read or parsed is a configuration error, exit 2 before any request) and
//! [`install`]s the merged table for the process; a process that never installs one
//! prices with the built-in table. Nothing here reads the environment.
//!
//! # Lookup
//!
//! The `[1m]` suffix is ignored; then an exact id first; else a dated or `-latest` id is
//! matched to its base (`claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`). An unknown
//! model has no price: its cost is `None`, never a guess.
//!
//! [`PriceTable::cost_usd`] prices tokens at the base rates (right for usage summed over
//! many requests); [`PriceTable::request_cost_usd`] prices one request and applies the
//! long-context rates when its prompt is over the threshold.

use crate::error::Cause;
use crate::model::Usage;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

const BUILTIN: &str = include_str!("prices.json");

/// One model's prices, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input: f64,
    pub output: f64,
    /// Writing the prompt cache (5-minute).
    pub cache_write: f64,
    /// Reading the prompt cache.
    pub cache_read: f64,
}

impl ModelPrice {
    /// The cost of `usage` at these prices, USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input
            + usage.output_tokens as f64 * self.output
            + usage.cache_creation_input_tokens as f64 * self.cache_write
            + usage.cache_read_input_tokens as f64 * self.cache_read)
            / 1_000_000.0
    }
}

/// The prices of a request whose prompt is over `above_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongContextPrice {
    pub above_tokens: u64,
    pub input: f64,
    pub output: f64,
    pub cache_write: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<f64>,
    pub cache_read: f64,
}

/// One row of the price file (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    input: f64,
    output: f64,
    cache_write: f64,
    #[serde(default)]
    cache_write_1h: Option<f64>,
    cache_read: f64,
    #[serde(default)]
    long_context: Option<LongContextPrice>,
    /// USD per 1,000 web searches; default [`WEB_SEARCH_PER_1K`].
    #[serde(default)]
    web_search: Option<f64>,
    /// USD per 1,000 web fetches; default 0 (the API charges only the tokens).
    #[serde(default)]
    web_fetch: Option<f64>,
}

/// Anthropic's price of web search: USD 10 per 1,000 searches, on every model.
pub const WEB_SEARCH_PER_1K: f64 = 10.0;

/// What a model costs beyond its base prices.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExtraPrices {
    /// A 1-hour cache write, USD per million tokens.
    pub cache_write_1h: Option<f64>,
    pub long_context: Option<LongContextPrice>,
    /// Server tools, USD per 1,000 requests: web search, web fetch.
    pub web_search: f64,
    pub web_fetch: f64,
}

impl ExtraPrices {
    /// What a turn's server tool requests cost, USD.
    pub fn server_tools_cost(&self, usage: &Usage) -> f64 {
        let server = &usage.server_tool_use;
        (server.web_search_requests as f64 * self.web_search
            + server.web_fetch_requests as f64 * self.web_fetch)
            / 1000.0
    }
}

/// A price file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("价格表 {source_name}:{why}")]
pub struct PriceError {
    /// The file's path, or "built-in".
    pub source_name: String,
    pub why: String,
    /// The reader's or the parser's error, when there is one (`why` quotes it).
    #[source]
    pub cause: Option<Cause>,
}

/// A table of model prices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    models: HashMap<String, ModelPrice>,
    extras: HashMap<String, ExtraPrices>,
}

impl PriceTable {
    /// The table compiled into flower.
    pub fn builtin() -> PriceTable {
        // The embedded file is checked by a unit test; an empty table (no costs) is the
        // harmless outcome should it ever be broken.
        PriceTable::from_json(BUILTIN, "built-in").unwrap_or_default()
    }

    /// Parses a table in the documented format. `source_name` names it in errors.
    pub fn from_json(text: &str, source_name: &str) -> Result<PriceTable, PriceError> {
        let error = |why: String| PriceError {
            source_name: source_name.to_string(),
            why,
            cause: None,
        };
        let rows: HashMap<String, Row> = serde_json::from_str(text).map_err(|e| PriceError {
            source_name: source_name.to_string(),
            why: format!("不是合法的价格表({e})"),
            cause: Some(Cause::new(e)),
        })?;
        let mut table = PriceTable::default();
        for (model, p) in rows {
            let mut all = vec![p.input, p.output, p.cache_write, p.cache_read];
            all.extend(p.cache_write_1h);
            all.extend(p.web_search);
            all.extend(p.web_fetch);
            if let Some(l) = &p.long_context {
                all.extend([l.input, l.output, l.cache_write, l.cache_read]);
                all.extend(l.cache_write_1h);
            }
            if all.iter().any(|x| !x.is_finite() || *x < 0.0) {
                return Err(error(format!("{model}:价格要是非负数")));
            }
            table.models.insert(
                model.clone(),
                ModelPrice {
                    input: p.input,
                    output: p.output,
                    cache_write: p.cache_write,
                    cache_read: p.cache_read,
                },
            );
            table.extras.insert(
                model,
                ExtraPrices {
                    cache_write_1h: p.cache_write_1h,
                    long_context: p.long_context,
                    web_search: p.web_search.unwrap_or(WEB_SEARCH_PER_1K),
                    web_fetch: p.web_fetch.unwrap_or(0.0),
                },
            );
        }
        Ok(table)
    }

    /// Reads and parses a price file.
    pub fn from_file(path: &Path) -> Result<PriceTable, PriceError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PriceError {
            source_name: name.clone(),
            why: format!("读不出来({e})"),
            cause: Some(Cause::new(e)),
        })?;
        PriceTable::from_json(&text, &name)
    }

    /// The built-in table with `override_file` merged over it.
    pub fn with_override(override_file: &Path) -> Result<PriceTable, PriceError> {
        let mut table = PriceTable::builtin();
        table.merge(PriceTable::from_file(override_file)?);
        Ok(table)
    }

    /// Adds `other`'s entries, replacing those of the same model.
    pub fn merge(&mut self, other: PriceTable) {
        for model in other.models.keys() {
            self.extras.remove(model);
        }
        self.models.extend(other.models);
        self.extras.extend(other.extras);
    }

    /// The id a model is priced under: `[1m]` dropped, then the exact id, else its base
    /// id without a date (or `-latest`) suffix.
    fn key<'m>(&self, model: &'m str) -> Option<&'m str> {
        let model = crate::model::models::wire_id(model).0;
        if self.models.contains_key(model) {
            return Some(model);
        }
        base_model_id(model).filter(|base| self.models.contains_key(*base))
    }

    /// A model's prices: the exact id, else its base id without a date (or `-latest`)
    /// suffix; `None` for an unknown model.
    pub fn get(&self, model: &str) -> Option<ModelPrice> {
        self.models.get(self.key(model)?).copied()
    }

    /// A model's 1-hour cache write and long-context prices.
    pub fn extras(&self, model: &str) -> Option<ExtraPrices> {
        Some(
            self.extras
                .get(self.key(model)?)
                .copied()
                .unwrap_or_default(),
        )
    }

    /// The cost of one request's `usage` on `model`, USD, with the long-context rates
    /// when its prompt is over their threshold (and the model's window, `[1m]` included,
    /// is larger than that); `None` for an unknown model.
    pub fn request_cost_usd(&self, model: &str, usage: &Usage) -> Option<f64> {
        let base = self.get(model)?;
        let prompt =
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
        // A prompt over the threshold only exists where the window is larger (Sonnet 4.5
        // with `[1m]`); usage reported beyond a model's window is priced as it comes.
        let window = crate::model::models::context_window(model);
        let price = match self.extras(model).and_then(|e| e.long_context) {
            Some(long) if prompt > long.above_tokens && window > long.above_tokens => ModelPrice {
                input: long.input,
                output: long.output,
                cache_write: long.cache_write,
                cache_read: long.cache_read,
            },
            _ => base,
        };
        Some(price.cost(usage) + self.server_tools_cost(model, usage))
    }

    /// The cost of `usage` on `model`, USD (server tool requests included); `None` for
    /// an unknown model.
    pub fn cost_usd(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.get(model)
            .map(|p| p.cost(usage) + self.server_tools_cost(model, usage))
    }

    /// What the server tool requests of `usage` cost on `model`, USD.
    fn server_tools_cost(&self, model: &str, usage: &Usage) -> f64 {
        if usage.server_tool_use.is_zero() {
            return 0.0;
        }
        self.extras(model)
            .unwrap_or_default()
            .server_tools_cost(usage)
    }

    /// The model ids in the table, sorted.
    pub fn models(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self.models.keys().map(String::as_str).collect();
        ids.sort_unstable();
        ids
    }
}

/// `claude-x-20250929` → `claude-x`, `claude-x-latest` → `claude-x`; `None` when the id
/// has no such suffix.
fn base_model_id(model: &str) -> Option<&str> {
    if let Some(base) = model.strip_suffix("-latest") {
        return Some(base);
    }
    let (base, suffix) = model.rsplit_once('-')?;
    (suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_digit())).then_some(base)
}

static TABLE: OnceLock<PriceTable> = OnceLock::new();

/// Makes `table` the process-wide table, before anything priced a request
/// (`Settings::install_prices` does this with the validated `FLOWER_PRICES`). `false`
/// when a table was already in use; it stays.
pub fn install(table: PriceTable) -> bool {
    TABLE.set(table).is_ok()
}

/// The process-wide table: the [`install`]ed one, else the built-in one.
pub fn table() -> &'static PriceTable {
    TABLE.get_or_init(PriceTable::builtin)
}

/// A model's prices from the process-wide [`table`].
pub fn price(model: &str) -> Option<ModelPrice> {
    table().get(model)
}

/// The cost of `usage` on `model`, USD, from the process-wide [`table`]; `None` for an
/// unknown model (never a guess).
pub fn cost_usd(model: &str, usage: &Usage) -> Option<f64> {
    table().cost_usd(model, usage)
}

/// The cost of one request on `model` ([`PriceTable::request_cost_usd`]) from the
/// process-wide [`table`].
pub fn request_cost_usd(model: &str, usage: &Usage) -> Option<f64> {
    table().request_cost_usd(model, usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_parses_and_has_the_current_models() {
        let table = PriceTable::from_json(BUILTIN, "built-in").unwrap();
        for model in [
            "claude-opus-4-5",
            "claude-opus-4-1",
            "claude-opus-4",
            "claude-sonnet-4-5",
            "claude-sonnet-4",
            "claude-3-7-sonnet",
            "claude-haiku-4-5",
            "claude-3-5-haiku",
        ] {
            assert!(table.get(model).is_some(), "{model} missing");
        }
    }

    #[test]
    fn base_ids() {
        assert_eq!(
            base_model_id("claude-opus-4-20250514"),
            Some("claude-opus-4")
        );
        assert_eq!(
            base_model_id("claude-3-7-sonnet-latest"),
            Some("claude-3-7-sonnet")
        );
        assert_eq!(base_model_id("claude-sonnet-4-5"), None);
        assert_eq!(base_model_id("model-2025092"), None);
        assert_eq!(base_model_id("nodash"), None);
    }
}
