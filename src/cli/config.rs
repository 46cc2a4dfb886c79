//! One configuration, read once.
//!
//! Every knob of a run (flags and environment variables) is read here, validated, and
//! turned into the values that build the runtime and the engine. Nothing below the
//! binary reads the environment for a run the binary starts: a bad value is caught
//! here, before any request, and the user gets exit status 2 and a message saying
//! which variable and what it should look like (ripgrep's model: low-level arguments
//! become one validated high-level config, which then builds everything else).

use super::args::SandboxArgs;
use super::model_config::{ModelFlags, SettingsError, model_settings};
use flower::continuity::handoff::{self, HandoffOptions, Threshold};
use flower::continuity::resilience::Resilience;
use flower::continuity::runtime::RuntimeOptions;
use flower::continuity::shared::{RunName, RunStateStore, check_run_name};
use flower::model::ModelClient;
use flower::model::anthropic::{AnthropicClient, ClientConfig, DEFAULT_IDLE_TIMEOUT};
use flower::model::prices::{self, PriceTable};
use flower::stores::{PostgresStore, PostgresUrl, SessionStore};
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
    /// `max_tokens` of each request (`FLOWER_MAX_TOKENS`; above the thinking budget).
    pub max_tokens: u32,
    /// The sandbox of Bash commands (`FLOWER_SANDBOX`, `FLOWER_NETWORK`, and the
    /// flags through [`Config::with_sandbox_flags`]).
    pub sandbox: SandboxPolicy,
    /// Where transcripts live (`--store`, else `FLOWER_STORE`); `None`: SQLite in
    /// `runs/sessions.db`.
    pub store: Option<PostgresUrl>,
    /// The run's name in the shared store (`--run-key`, else `FLOWER_RUN_KEY`); `None`:
    /// the workspace's project key. Needs a PostgreSQL store.
    pub run_key: Option<RunName>,
    /// Extended thinking budget (`--thinking`, `MAX_THINKING_TOKENS`).
    pub thinking_budget: Option<u32>,
    /// The prompt cache's lifetime pruning respects (`FLOWER_CACHE_TTL`); `None`: every
    /// resume prunes as if the cache were cold.
    pub cache_ttl: Option<Duration>,
    /// Worth a line on stderr, not worth stopping for (an unpriced model).
    pub warnings: Vec<String>,
    /// When a step's session hands off (换代): `FLOWER_HANDOFF_AT`, `FLOWER_CONTEXT_WINDOW`,
    /// and for the pipeline `--handoff-at` ([`Config::with_handoff_flag`]).
    pub handoff: HandoffOptions,
    /// The raw `FLOWER_HANDOFF_AT`, kept so that a flag given later can replace it.
    handoff_env: HandoffEnv,
}

/// The handoff variables as read, for [`Config::with_handoff_flag`].
#[derive(Debug, Clone, Default)]
struct HandoffEnv {
    at: Option<String>,
    window: Option<String>,
}

/// How to reach the model. Its `Debug` never shows a credential or a header value.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Credential, base URL, default model (aliases resolved), custom headers, betas,
    /// idle timeout (`FLOWER_STREAM_IDLE_TIMEOUT`).
    pub client: ClientConfig,
    /// The resolved `--model`, else `ANTHROPIC_MODEL`, when one was named.
    pub model: Option<String>,
    /// `FLOWER_PRICES`: a price table merged over the built-in one.
    pub prices: Option<PathBuf>,
}

impl Config {
    /// The configuration from the process environment and the model flags.
    pub fn from_env(flags: &ModelFlags) -> Result<Config, ConfigError> {
        Config::from_lookup(flags, |name| std::env::var(name).ok())
    }

    /// The configuration from `lookup` (an environment) and the model flags. Empty
    /// values count as unset. Every bad value is an error naming the variable.
    pub fn from_lookup(
        flags: &ModelFlags,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let settings = model_settings(flags, &lookup).map_err(|e| match e {
            SettingsError::Credential(_) => ConfigError(
                "ANTHROPIC_API_KEY is not set: export your Anthropic API key, e.g. \
                 `export ANTHROPIC_API_KEY=sk-ant-…` (or ANTHROPIC_AUTH_TOKEN for a gateway), \
                 then run flower again."
                    .into(),
            ),
            SettingsError::Usage(why) => ConfigError(why),
        })?;
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
        let run_key = run_name(get("FLOWER_RUN_KEY").as_deref(), false)?;
        let mut client = settings.client;
        client.idle_timeout = idle_timeout;
        let model = flags
            .model
            .as_ref()
            .or(get("ANTHROPIC_MODEL").as_ref())
            .map(|_| client.default_model.clone());
        let handoff_env = HandoffEnv {
            at: lookup("FLOWER_HANDOFF_AT"),
            window: lookup("FLOWER_CONTEXT_WINDOW"),
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
        let handoff =
            handoff_options(None, &handoff_env, &client.default_model).map_err(ConfigError)?;
        Ok(Config {
            model: ModelConfig {
                client,
                model,
                prices: get("FLOWER_PRICES").map(PathBuf::from),
            },
            resilience,
            max_tokens: settings.max_tokens,
            sandbox,
            thinking_budget: settings.thinking_budget,
            cache_ttl: settings.cache_ttl,
            warnings: settings.warnings,
            handoff,
            handoff_env,
            store,
            run_key,
        })
    }

    /// `--run-key` (which wins over `FLOWER_RUN_KEY`, and may continue a run begun in
    /// another workspace) applied, then checked: a run key needs a PostgreSQL store.
    /// Call after [`Config::with_store_flag`].
    pub fn with_run_key_flag(mut self, flag: Option<&str>) -> Result<Config, ConfigError> {
        if let Some(name) = run_name(flag, true)? {
            self.run_key = Some(name);
        }
        check_run_key_store(self.run_key.as_ref(), self.store.as_ref())?;
        Ok(self)
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

    /// The pipeline's `--handoff-at`, which wins over `FLOWER_HANDOFF_AT`; checked
    /// against the model's window like the variable.
    pub fn with_handoff_flag(mut self, flag: Option<&str>) -> Result<Config, ConfigError> {
        if flag.is_some() {
            let model = self
                .model
                .model
                .clone()
                .unwrap_or_else(|| flower::model::anthropic::DEFAULT_MODEL.to_string());
            self.handoff = handoff_options(flag, &self.handoff_env, &model).map_err(ConfigError)?;
        }
        Ok(self)
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

    /// [`Config::open_store`], and the same database as the store of the run's
    /// lineage and manifest (`None` with SQLite).
    pub fn open_stores(&self) -> anyhow::Result<Stores> {
        let Some(url) = &self.store else {
            return Ok(Stores::default());
        };
        let store = Arc::new(PostgresStore::open(url).map_err(|e| {
            anyhow::anyhow!("cannot open the store: {e}\nNothing was sent to the model.")
        })?);
        Ok(Stores {
            sessions: Some(store.clone()),
            runs: Some(store),
        })
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
        let client = AnthropicClient::with_config(self.model.client.clone())
            .map_err(|e| ConfigError(e.to_string()))?;
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
            thinking_budget: self.thinking_budget,
            cache_ttl: self.cache_ttl,
            handoff: self.handoff.clone(),
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

/// The stores a command opened: `None`s for the default SQLite files.
#[derive(Default, Clone)]
pub struct Stores {
    pub sessions: Option<Arc<dyn SessionStore>>,
    pub runs: Option<Arc<dyn RunStateStore>>,
}

/// The run key chosen by `--run-key` (`flag`), else `FLOWER_RUN_KEY`, for commands that
/// need no model (`flower state`), checked against the chosen store.
pub fn run_key_from_env(
    flag: Option<&str>,
    store: Option<&PostgresUrl>,
) -> Result<Option<RunName>, ConfigError> {
    let name = match run_name(flag, true)? {
        Some(name) => Some(name),
        None => run_name(
            std::env::var("FLOWER_RUN_KEY")
                .ok()
                .as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty()),
            false,
        )?,
    };
    check_run_key_store(name.as_ref(), store)?;
    Ok(name)
}

/// A run key as given (`adopt`: on the command line), checked.
fn run_name(raw: Option<&str>, adopt: bool) -> Result<Option<RunName>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let name = raw.trim();
    let what = if adopt { "--run-key" } else { "FLOWER_RUN_KEY" };
    check_run_name(name).map_err(|why| ConfigError(format!("{what} {name:?}: {why}")))?;
    Ok(Some(RunName {
        name: name.to_string(),
        adopt,
    }))
}

fn check_run_key_store(
    name: Option<&RunName>,
    store: Option<&PostgresUrl>,
) -> Result<(), ConfigError> {
    match (name, store) {
        (Some(name), None) => Err(ConfigError(format!(
            "{} {}: a run key names a run in a shared database; it needs --store postgres://… (or FLOWER_STORE)",
            if name.adopt {
                "--run-key"
            } else {
                "FLOWER_RUN_KEY"
            },
            name.name
        ))),
        _ => Ok(()),
    }
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

/// The handoff settings from `--handoff-at`, `FLOWER_HANDOFF_AT` and
/// `FLOWER_CONTEXT_WINDOW` (as read into `env`), checked against the model's window.
/// An error is a message for the user: the run stops before any request (exit 2).
fn handoff_options(
    flag: Option<&str>,
    env: &HandoffEnv,
    model: &str,
) -> Result<HandoffOptions, String> {
    let mut options = HandoffOptions::default();
    let set = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.trim().is_empty());
    let window = env.window.clone();
    if set(&window) {
        let value = window.unwrap_or_default();
        options.window =
            Some(handoff::parse_window(&value).map_err(|e| format!("FLOWER_CONTEXT_WINDOW: {e}"))?);
    }
    let (source, at) = match flag {
        Some(value) => ("--handoff-at", Some(value.to_string())),
        None => ("FLOWER_HANDOFF_AT", env.at.clone()),
    };
    if let Some(value) = at.filter(|v| flag.is_some() || !v.trim().is_empty()) {
        options.at = value
            .parse::<Threshold>()
            .map_err(|e| format!("{source}: {e}"))?;
    }
    options
        .limit_for(model)
        .map_err(|e| format!("{source}: {e}"))?;
    Ok(options)
}
