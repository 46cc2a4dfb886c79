//! Model settings from flags and environment, parsed and validated in one place before
//! any request (to be folded into the one `Config`): the client's configuration
//! (credential, headers, betas, model), `max_tokens`, extended thinking and the prompt
//! cache's lifetime. A bad value is a [`UsageError`]: exit 2 with a clear message that
//! never quotes a credential or a header value.

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
    /// The resolved `--model`, when one was given (the agent's model).
    pub model_flag: Option<String>,
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
    let model_flag = flags.model.as_ref().map(|_| client.default_model.clone());

    let explicit_max = match lookup("FLOWER_MAX_TOKENS").filter(|v| !v.trim().is_empty()) {
        Some(raw) => Some(
            raw.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    usage(format!(
                        "FLOWER_MAX_TOKENS={raw:?} is not a positive whole number of tokens"
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
        model_flag,
        max_tokens,
        thinking_budget,
        cache_ttl,
        warnings,
    })
}

/// [`model_settings`] from the process environment.
pub fn from_env(flags: &ModelFlags) -> Result<ModelSettings, SettingsError> {
    model_settings(flags, |name| std::env::var(name).ok())
}

/// The settings, or the exit code of a usage error (after saying what is wrong).
pub fn or_exit(
    flags: &ModelFlags,
) -> anyhow::Result<Result<ModelSettings, std::process::ExitCode>> {
    match from_env(flags) {
        Ok(settings) => {
            for warning in &settings.warnings {
                eprintln!("flower: {warning}");
            }
            Ok(Ok(settings))
        }
        Err(SettingsError::Usage(why)) => {
            eprintln!("flower: {why}");
            Ok(Err(std::process::ExitCode::from(2)))
        }
        Err(SettingsError::Credential(e)) => Err(e.into()),
    }
}

impl ModelSettings {
    /// Puts these settings into runtime options (the client built from them).
    pub fn apply(
        &self,
        options: &mut flower::continuity::runtime::RuntimeOptions,
    ) -> Result<(), ModelError> {
        let client = flower::model::anthropic::AnthropicClient::with_config(self.client.clone())?;
        options.client = Some(std::sync::Arc::new(client));
        options.max_tokens = Some(self.max_tokens);
        options.thinking_budget = self.thinking_budget;
        options.cache_ttl = self.cache_ttl;
        Ok(())
    }
}
