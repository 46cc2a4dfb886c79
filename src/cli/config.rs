//! One configuration, read once.
//!
//! Every knob of a run (flags and environment variables) is read here, validated, and
//! turned into the values that build the runtime and the engine. Nothing below the
//! binary reads the environment for a run the binary starts: a bad value is caught
//! here, before any request, and the user gets exit status 2 and a message saying
//! which variable and what it should look like (ripgrep's model: low-level arguments
//! become one validated high-level config, which then builds everything else).

use flower::continuity::resilience::Resilience;
use flower::continuity::runtime::RuntimeOptions;
use flower::engine::DEFAULT_MAX_TOKENS;
use flower::model::ModelClient;
use flower::model::anthropic::{AnthropicClient, DEFAULT_BASE_URL, DEFAULT_IDLE_TIMEOUT};
use flower::model::prices::{self, PriceTable};
use flower::stores::{PostgresStore, PostgresUrl, SessionStore};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Exit status for usage errors: bad flags, bad environment values.
pub const EXIT_USAGE: u8 = 2;

/// A setting that cannot be used. Printed as `flower: {message}`, exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// Everything a run of the pipeline or of `flower once` is configured by.
#[derive(Debug, Clone)]
pub struct Config {
    pub model: ModelConfig,
    /// Retry and offline-wait numbers (`FLOWER_MAX_ATTEMPTS` …).
    pub resilience: Resilience,
    /// `max_tokens` of each request (`FLOWER_MAX_TOKENS`).
    pub max_tokens: u32,
    /// Where transcripts live (`--store`, else `FLOWER_STORE`); `None`: SQLite in
    /// `runs/sessions.db`.
    pub store: Option<PostgresUrl>,
}

/// How to reach the model.
#[derive(Clone)]
pub struct ModelConfig {
    pub api_key: String,
    pub base_url: String,
    /// `--model`, else `ANTHROPIC_MODEL`, else the client's default.
    pub model: Option<String>,
    /// Silence after which a streaming request counts as lost
    /// (`FLOWER_STREAM_IDLE_TIMEOUT`).
    pub idle_timeout: Duration,
    /// `FLOWER_PRICES`: a price table merged over the built-in one.
    pub prices: Option<PathBuf>,
}

impl std::fmt::Debug for ModelConfig {
    // The key is never printed, not even in a debug dump.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelConfig")
            .field("api_key", &"<redacted>")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("idle_timeout", &self.idle_timeout)
            .field("prices", &self.prices)
            .finish()
    }
}

impl Config {
    /// The configuration from the process environment and the `--model` flag.
    pub fn from_env(model_flag: Option<&str>) -> Result<Config, ConfigError> {
        Config::from_lookup(model_flag, |name| std::env::var(name).ok())
    }

    /// The configuration from `lookup` (an environment) and the `--model` flag. Empty
    /// values count as unset. Every bad value is an error naming the variable.
    pub fn from_lookup(
        model_flag: Option<&str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let api_key = get("ANTHROPIC_API_KEY").ok_or_else(|| {
            ConfigError(
                "ANTHROPIC_API_KEY is not set: export your Anthropic API key, e.g. \
                 `export ANTHROPIC_API_KEY=sk-ant-…`, then run flower again."
                    .into(),
            )
        })?;
        let model = model_flag
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .or_else(|| get("ANTHROPIC_MODEL"));
        let idle_timeout = match get("FLOWER_STREAM_IDLE_TIMEOUT") {
            None => DEFAULT_IDLE_TIMEOUT,
            Some(raw) => match raw.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Duration::from_secs_f64(s),
                _ => {
                    return Err(ConfigError(format!(
                        "FLOWER_STREAM_IDLE_TIMEOUT={raw:?}: expected seconds as a number > 0"
                    )));
                }
            },
        };
        let max_tokens = match get("FLOWER_MAX_TOKENS") {
            None => DEFAULT_MAX_TOKENS,
            Some(raw) => match raw.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(ConfigError(format!(
                        "FLOWER_MAX_TOKENS={raw:?}: expected a whole number ≥ 1"
                    )));
                }
            },
        };
        let (resilience, bad) = Resilience::from_lookup(&lookup);
        if let Some(first) = bad.first() {
            // The library ignores a bad value with a warning; a run started here refuses
            // it, so that a typo never silently becomes the default.
            let first = first.strip_prefix("ignoring ").unwrap_or(first);
            return Err(ConfigError(first.to_string()));
        }
        let store = match get("FLOWER_STORE") {
            None => None,
            Some(raw) => parse_store(&raw)
                .map_err(|why| ConfigError(format!("FLOWER_STORE={}: {why}", shown_store(&raw))))?,
        };
        let model = ModelConfig {
            api_key,
            base_url: get("ANTHROPIC_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.into()),
            model,
            idle_timeout,
            prices: get("FLOWER_PRICES").map(PathBuf::from),
        };
        Ok(Config {
            model,
            resilience,
            max_tokens,
            store,
        })
    }

    /// This configuration with `--store` (which wins over `FLOWER_STORE`) applied.
    pub fn with_store_flag(mut self, flag: Option<&str>) -> Result<Config, ConfigError> {
        if let Some(raw) = flag {
            self.store = parse_store(raw)
                .map_err(|why| ConfigError(format!("--store {}: {why}", shown_store(raw))))?;
        }
        Ok(self)
    }

    /// Opens the chosen store: `None` for the default SQLite store (the runtime opens
    /// it). Connects, checks credentials and the schema now, before any model request.
    pub fn open_store(&self) -> anyhow::Result<Option<Arc<dyn SessionStore>>> {
        let Some(url) = &self.store else {
            return Ok(None);
        };
        let store = PostgresStore::open(url).map_err(|e| {
            anyhow::anyhow!("cannot open the store: {e}\nNothing was sent to the model.")
        })?;
        Ok(Some(Arc::new(store)))
    }

    /// The model client this configuration describes; also installs the price table.
    /// Errors (a base URL that is not one, a price file that cannot be read) are
    /// configuration errors: nothing has been sent yet.
    pub fn client(&self) -> Result<Arc<dyn ModelClient>, ConfigError> {
        if let Some(path) = &self.model.prices {
            let table = PriceTable::with_override(path)
                .map_err(|e| ConfigError(format!("FLOWER_PRICES={}: {e}", path.display())))?;
            prices::install(table);
        }
        let model = self
            .model
            .model
            .as_deref()
            .unwrap_or(flower::model::anthropic::DEFAULT_MODEL);
        let client = AnthropicClient::new(&self.model.base_url, &self.model.api_key, model)
            .map_err(|e| ConfigError(e.to_string()))?
            .with_idle_timeout(self.model.idle_timeout);
        Ok(Arc::new(client))
    }

    /// Runtime options with this configuration's client, retry policy and limits; the
    /// caller fills in events, prompts and sub-agents.
    pub fn runtime_options(&self) -> Result<RuntimeOptions, ConfigError> {
        Ok(RuntimeOptions {
            model: self.model.model.clone(),
            client: Some(self.client()?),
            resilience: Some(self.resilience.clone()),
            max_tokens: Some(self.max_tokens),
            ..RuntimeOptions::default()
        })
    }
}

/// The store chosen by `--store` (`flag`), else `FLOWER_STORE`, for commands that need
/// no model (`flower state`); `None`: the default SQLite store.
pub fn store_from_env(flag: Option<&str>) -> Result<Option<PostgresUrl>, ConfigError> {
    if let Some(raw) = flag {
        return parse_store(raw)
            .map_err(|why| ConfigError(format!("--store {}: {why}", shown_store(raw))));
    }
    match std::env::var("FLOWER_STORE")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        None => Ok(None),
        Some(raw) => parse_store(&raw)
            .map_err(|why| ConfigError(format!("FLOWER_STORE={}: {why}", shown_store(&raw)))),
    }
}

/// Opens a chosen PostgreSQL store (connects, checks credentials and schema).
pub fn open_postgres(url: &PostgresUrl) -> anyhow::Result<Arc<dyn SessionStore>> {
    let store = PostgresStore::open(url).map_err(|e| {
        anyhow::anyhow!("cannot open the store: {e}\nNothing was sent to the model.")
    })?;
    Ok(Arc::new(store))
}

/// `sqlite` (the default store) → `None`; a PostgreSQL URL → `Some`.
fn parse_store(raw: &str) -> Result<Option<PostgresUrl>, String> {
    let raw = raw.trim();
    if raw == "sqlite" {
        return Ok(None);
    }
    raw.parse::<PostgresUrl>().map(Some)
}

/// A store value as an error message shows it: a password is never repeated.
fn shown_store(raw: &str) -> String {
    match raw.parse::<PostgresUrl>() {
        Ok(url) => url.to_string(),
        Err(_) if raw.contains('@') => "<a URL with credentials, not shown>".into(),
        Err(_) => format!("{raw:?}"),
    }
}
