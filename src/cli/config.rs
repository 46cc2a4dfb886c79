//! One configuration, read once.
//!
//! Every knob of a run (flags and environment variables) is read here, validated, and
//! turned into the values that build the runtime and the engine. Nothing below the
//! binary reads the environment for a run the binary starts: a bad value is caught
//! here, before any request, and the user gets exit status 2 and a message saying
//! which variable and what it should look like (ripgrep's model: low-level arguments
//! become one validated high-level config, which then builds everything else).

use super::args::SandboxArgs;
use flower::continuity::resilience::Resilience;
use flower::continuity::runtime::RuntimeOptions;
use flower::engine::DEFAULT_MAX_TOKENS;
use flower::model::ModelClient;
use flower::model::anthropic::{AnthropicClient, DEFAULT_BASE_URL, DEFAULT_IDLE_TIMEOUT};
use flower::model::prices::{self, PriceTable};
use flower::tools::sandbox::{self, SandboxPolicy, Support};
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
    /// The sandbox of Bash commands (`FLOWER_SANDBOX`, `FLOWER_NETWORK`, and the
    /// flags through [`Config::with_sandbox_flags`]).
    pub sandbox: SandboxPolicy,
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
        let model = ModelConfig {
            api_key,
            base_url: get("ANTHROPIC_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.into()),
            model,
            idle_timeout,
            prices: get("FLOWER_PRICES").map(PathBuf::from),
        };
        let mut sandbox = SandboxPolicy::standard();
        match get("FLOWER_SANDBOX").as_deref() {
            None | Some("on") => {}
            Some("off") => sandbox.enabled = false,
            Some("require") => sandbox.required = true,
            Some(other) => {
                return Err(ConfigError(format!(
                    "FLOWER_SANDBOX={other:?}: expected on, off or require"
                )));
            }
        }
        match get("FLOWER_NETWORK").as_deref() {
            None | Some("on") => {}
            Some("off") => sandbox.network = false,
            Some(other) => {
                return Err(ConfigError(format!(
                    "FLOWER_NETWORK={other:?}: expected on or off"
                )));
            }
        }
        Ok(Config {
            model,
            resilience,
            max_tokens,
            sandbox,
        })
    }

    /// Applies the sandbox flags (they win over the settings) and checks the result:
    /// no network needs the sandbox, and a required sandbox needs Landlock.
    pub fn with_sandbox_flags(mut self, flags: &SandboxArgs) -> Result<Config, ConfigError> {
        let s = &mut self.sandbox;
        if flags.no_network {
            s.network = false;
        }
        if flags.no_sandbox {
            s.enabled = false;
            s.required = false;
        }
        if flags.require_sandbox {
            s.enabled = true;
            s.required = true;
        }
        if !s.enabled && !s.network {
            return Err(ConfigError(
                "--no-network (FLOWER_NETWORK=off) needs the sandbox; it cannot be combined \
                 with --no-sandbox or FLOWER_SANDBOX=off"
                    .into(),
            ));
        }
        if s.enabled
            && s.required
            && let Support::Missing(why) = sandbox::support()
        {
            return Err(ConfigError(format!(
                "沙箱不可用({why}),--require-sandbox 不允许不受限地运行命令"
            )));
        }
        Ok(self)
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
            sandbox: self.sandbox.clone(),
            ..RuntimeOptions::default()
        })
    }
}
