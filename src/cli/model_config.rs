//! The model part of [`super::config::Config`]: the client's configuration (credential,
//! headers, betas, model), `max_tokens`, extended thinking and the prompt cache's
//! lifetime, from flags and environment. A bad value is a [`SettingsError::Usage`]
//! (exit 2) with a clear message that never quotes a credential or a header value.

use flower::model::ModelError;
use flower::model::anthropic::ClientConfig;
use flower::model::models::MIN_THINKING_BUDGET;
use flower::stores::CacheWindow;
use std::time::Duration;

/// The thinking budget of a bare `--thinking`, tokens.
pub const DEFAULT_THINKING_BUDGET: u32 = 10_000;

/// Everything the runtime and the client need, validated.
#[derive(Debug)]
pub struct ModelSettings {
    pub client: ClientConfig,
    pub max_tokens: u32,
    pub thinking_budget: Option<u32>,
    /// `None`: every resume prunes as if the cache were cold.
    pub cache_ttl: Option<Duration>,
    /// Worth a line on stderr (an unpriced model), not worth stopping for.
    pub warnings: Vec<String>,
}

/// What can go wrong building [`ModelSettings`].
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// No credential: the run cannot start (exit 1, as before).
    #[error(transparent)]
    Credential(ModelError),
    /// A bad flag or variable: exit 2.
    #[error("{0}")]
    Usage(String),
}

/// The model flags of a command.
#[derive(Debug, Default, Clone)]
pub struct ModelFlags {
    pub model: Option<String>,
    /// `--thinking` (`Some(None)`) or `--thinking=N` (`Some(Some(N))`).
    pub thinking: Option<Option<u32>>,
}

/// Builds the settings from `flags` and the variables `lookup` finds (the process
/// environment in the binary).
pub fn model_settings(
    flags: &ModelFlags,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<ModelSettings, SettingsError> {
    let client =
        ClientConfig::from_lookup(&lookup, flags.model.as_deref()).map_err(|e| match e {
            ModelError::MissingApiKey => SettingsError::Credential(e),
            ModelError::Config(why) => SettingsError::Usage(why),
            other => SettingsError::Usage(other.to_string()),
        })?;
    let usage = |why: String| SettingsError::Usage(why);

    let explicit_max = match lookup("FLOWER_MAX_TOKENS").filter(|v| !v.trim().is_empty()) {
        Some(raw) => Some(
            raw.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    usage(format!(
                        "FLOWER_MAX_TOKENS={raw:?}: expected a whole number ≥ 1"
                    ))
                })?,
        ),
        None => None,
    };
    let from_env = match lookup("MAX_THINKING_TOKENS").filter(|v| !v.trim().is_empty()) {
        Some(raw) => Some(raw.trim().parse::<u32>().map_err(|_| {
            usage(format!(
                "MAX_THINKING_TOKENS={raw:?} is not a whole number of tokens"
            ))
        })?),
        None => None,
    };
    // The flag wins; a bare flag takes the variable's budget, else the default.
    let thinking_budget = match flags.thinking {
        Some(Some(budget)) => Some(budget),
        Some(None) => Some(from_env.unwrap_or(DEFAULT_THINKING_BUDGET)),
        None => from_env.filter(|b| *b > 0),
    };
    if let Some(budget) = thinking_budget
        && budget < MIN_THINKING_BUDGET
    {
        return Err(usage(format!(
            "thinking budget {budget} is below the API minimum of {MIN_THINKING_BUDGET} tokens"
        )));
    }
    let max_tokens = match (explicit_max, thinking_budget) {
        (Some(max), Some(budget)) if budget >= max => {
            return Err(usage(format!(
                "thinking budget {budget} must be below max_tokens ({max}, FLOWER_MAX_TOKENS)"
            )));
        }
        (Some(max), _) => max,
        // Room to answer after thinking.
        (None, Some(budget)) => budget.saturating_add(flower::engine::DEFAULT_MAX_TOKENS),
        (None, None) => flower::engine::DEFAULT_MAX_TOKENS,
    };

    let cache_ttl = match lookup("FLOWER_CACHE_TTL").map(|v| v.trim().to_ascii_lowercase()) {
        None => Some(CacheWindow::DEFAULT_TTL),
        Some(v) if v.is_empty() || v == "5m" => Some(CacheWindow::DEFAULT_TTL),
        Some(v) if v == "1h" => Some(Duration::from_secs(3600)),
        Some(v) if v == "0" => None,
        Some(v) => {
            return Err(usage(format!(
                "FLOWER_CACHE_TTL={v:?}: expected 5m, 1h or 0 (0: prune every resume as if the cache were cold)"
            )));
        }
    };

    let mut warnings = Vec::new();
    if flower::model::prices::price(&client.default_model).is_none() {
        warnings.push(format!(
            "model {} has no price in the table: its cost is reported as null",
            client.default_model
        ));
    }
    Ok(ModelSettings {
        client,
        max_tokens,
        thinking_budget,
        cache_ttl,
        warnings,
    })
}
