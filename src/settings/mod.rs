//! One settings resolution: every knob of flower read once, validated, and turned into
//! resolved values that build the client, the runtime and the engine.
//!
//! # The model: ripgrep's low-level arguments → high-level arguments
//!
//! The low-level inputs ([`sources`]) are plain data, nothing checked yet:
//! - [`Flags`]: what the command line said (the CLI's clap groups fill it; a library
//!   user sets what it means and leaves the rest `None`);
//! - [`Environment`]: a snapshot of the variables, `HOME` and the current directory.
//!   [`Environment::from_process`] is the one place in the library that reads the
//!   process environment;
//! - [`FileLayer`]: what settings files say (empty today; the seam for issue #32).
//!
//! [`Settings::resolve`] turns them, once, into [`Settings`]: resolved values only
//! (no `Option` meaning "go and look elsewhere"), or a [`ConfigError`] that names the
//! flag, variable or file key and says what it should look like. The binary prints it
//! and exits 2 before anything is sent or written. [`Settings::from_env`] is the
//! explicit "defaults for a library user": no flags, the process environment.
//!
//! **Precedence: flags > environment > files > defaults.** A variable is read as "the
//! environment's value, else the files'" (see [`FileLayer`]); a flag, when given,
//! replaces its variable, which is then not even parsed.
//!
//! # Where this sits in the layer line
//!
//! A layer of its own (DESIGN.md §2), above `continuity` and below `run`: it imports the
//! value types of `model`, `stores`, `tools`, `engine` and `continuity`, and is imported
//! by `run` ([`crate::Run::open`] takes a `&Settings`), the workflow and the front ends.
//! None of the modules it imports imports it back.
//!
//! # Adding a setting
//!
//! 1. A flag: a field on [`Flags`] (and on the CLI's clap group that fills it).
//! 2. A variable: read it in the resolver of its area (`model.rs`, `store.rs`, or
//!    [`Settings::resolve`]) through the one lookup (`Vars::get` / `Vars::raw`), so
//!    that settings files can set it too. A file-only setting: a field on
//!    [`FileLayer`].
//! 3. A resolved field on [`Settings`] (or [`ModelSettings`]) holding the value the
//!    rest of flower uses, and a [`ConfigError::invalid`] naming the source when the
//!    value cannot be used. Thread it down as a value (e.g. into
//!    [`RuntimeOptions`] in [`Settings::runtime_options`]); nothing below reads it again.

pub mod agents;
pub mod child_env;
pub mod document;
pub mod files;
pub mod model;
pub mod network;
pub mod pin;
pub mod serve;
pub mod skills;
pub mod sources;
mod store;
mod strict;
pub mod telemetry;
pub mod test_hooks;

pub use model::{DEFAULT_THINKING_BUDGET, ModelSettings};
pub use serve::ServeSettings;
pub use sources::{Environment, FileLayer, Flags, SandboxFlags};

use crate::continuity::handoff::{self, HandoffOptions, RunContext, Threshold};
use crate::continuity::resilience::Resilience;
use crate::continuity::runtime::RuntimeOptions;
use crate::continuity::shared::RunName;
use crate::engine::Conventions;
use crate::engine::memory::MemorySource;
use crate::error::Cause;
use crate::model::ModelClient;
use crate::model::anthropic::AnthropicClient;
use crate::stores::{PostgresStore, PostgresUrl, PruneOptions, StoreError};
use crate::tools::sandbox::{self, SandboxPolicy, Support};
use sources::Vars;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The run directory when `--run-dir` is not given, relative to the current directory.
pub const DEFAULT_RUN_DIR: &str = "runs";

/// A setting that cannot be used. The binary prints `flower: {self}` and exits 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A flag, variable or file key with a value that cannot be used; `message` names
    /// it and says what it should look like.
    #[error("{message}")]
    Invalid {
        /// The flag (`--store`) or variable (`FLOWER_MAX_TOKENS`) at fault.
        setting: String,
        message: String,
        /// The parse error behind it, when there is one (`message` quotes it).
        #[source]
        cause: Option<Cause>,
    },
    /// No credential: neither `ANTHROPIC_API_KEY` nor `ANTHROPIC_AUTH_TOKEN` is set,
    /// and this needs the model.
    #[error(
        "没有设置 ANTHROPIC_API_KEY:先 export 你的 Anthropic API key,例如 `export ANTHROPIC_API_KEY=sk-ant-…`(走网关就设 ANTHROPIC_AUTH_TOKEN),再跑 flower。"
    )]
    MissingCredential,
}

impl ConfigError {
    /// A bad value of `setting`, explained by `message`.
    pub fn invalid(setting: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            setting: setting.to_string(),
            message: message.into(),
            cause: None,
        }
    }

    /// A bad value of `setting`, explained by `message`, which quotes `cause`.
    pub fn invalid_because(
        setting: &str,
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> ConfigError {
        ConfigError::Invalid {
            setting: setting.to_string(),
            message: message.into(),
            cause: Some(Cause::new(cause)),
        }
    }

    /// The flag or variable at fault.
    pub fn setting(&self) -> &str {
        match self {
            ConfigError::Invalid { setting, .. } => setting,
            ConfigError::MissingCredential => "ANTHROPIC_API_KEY",
        }
    }
}

/// What the terminal asked for: `NO_COLOR`, `TERM`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terminal {
    /// `NO_COLOR` is set and not empty: no colours.
    pub no_color: bool,
    /// `TERM` (`dumb`: no redrawn status line).
    pub term: Option<String>,
}

/// Everything flower is configured by, resolved and validated (see the module doc).
/// The fields are private: read through the accessors of the same name, so that a
/// resolved value cannot be changed after the fact (the one exception: a person's
/// late yes to changed settings files, [`Settings::accept_settings_now`]).
#[derive(Debug, Clone)]
pub struct Settings {
    workspace: PathBuf,
    run_dir: PathBuf,
    model: ModelSettings,
    resilience: Resilience,
    sandbox: SandboxPolicy,
    store: Option<PostgresUrl>,
    run_key: Option<RunName>,
    handoff: HandoffOptions,
    run_context: RunContext,
    serve: ServeSettings,
    wait: bool,
    prompt_file: Option<PromptFile>,
    again: bool,
    accept_settings: bool,
    home: Option<PathBuf>,
    terminal: Terminal,
    warnings: Vec<String>,
    memory: bool,
    checkpoint_max_file_bytes: u64,
    checkpoints: bool,
    resume: Resume,
    files: FileLayer,
    child_env: Vec<(String, String)>,
    pass_env: Vec<String>,
    mcp: crate::tools::mcp::McpConfig,
    concurrency: Concurrency,
    /// The OpenTelemetry export; `None`: off (the default).
    telemetry: Option<crate::telemetry::Config>,
    /// `FLOWER_TEST_REWIND_PAUSE`: crash tests only.
    rewind_pause: Option<test_hooks::RewindPause>,
}

/// Which calls of one reply run at the same time (see `docs/concurrency.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency {
    /// At most this many at once (1..=100; default Claude Code's 10); 1: in order.
    pub max_tools: usize,
    /// MCP tools (full names, `mcp__server__tool`) the person says only read.
    pub mcp_tools: Vec<String>,
    /// The output kept of one background command, bytes (`FLOWER_BACKGROUND_OUTPUT_CAP`).
    pub background_output_cap: u64,
}

/// `FLOWER_MAX_TOOL_USE_CONCURRENCY` and `FLOWER_CONCURRENT_MCP_TOOLS`.
fn concurrency(vars: &Vars<'_>) -> Result<Concurrency, ConfigError> {
    const MAX: &str = "FLOWER_MAX_TOOL_USE_CONCURRENCY";
    let max_tools = match vars.unblank(MAX) {
        None => crate::engine::DEFAULT_MAX_TOOL_CONCURRENCY,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => n,
            _ => {
                return Err(ConfigError::invalid(
                    MAX,
                    format!("{MAX}={text:?}:要 1 到 100 之间的整数(1 就是一个接一个)"),
                ));
            }
        },
    };
    const MCP: &str = "FLOWER_CONCURRENT_MCP_TOOLS";
    let mut mcp_tools = Vec::new();
    for name in vars.unblank(MCP).iter().flat_map(|v| v.split(',')) {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        if !name.starts_with("mcp__") {
            return Err(ConfigError::invalid(
                MCP,
                format!("{MCP}:{name:?} 不是 MCP 工具的全名(mcp__服务器__工具)"),
            ));
        }
        mcp_tools.push(name.to_string());
    }
    Ok(Concurrency {
        max_tools,
        mcp_tools,
        background_output_cap: background_output_cap(vars)?,
    })
}

/// `FLOWER_BACKGROUND_OUTPUT_CAP`: bytes, at least 1024 (default 8 MiB).
fn background_output_cap(vars: &Vars<'_>) -> Result<u64, ConfigError> {
    use crate::tools::background::{DEFAULT_OUTPUT_CAP, MIN_OUTPUT_CAP};
    const CAP: &str = "FLOWER_BACKGROUND_OUTPUT_CAP";
    match vars.unblank(CAP) {
        None => Ok(DEFAULT_OUTPUT_CAP),
        Some(text) => match text.parse::<u64>() {
            Ok(n) if n >= MIN_OUTPUT_CAP => Ok(n),
            _ => Err(ConfigError::invalid(
                CAP,
                format!("{CAP}={text:?}:要不小于 {MIN_OUTPUT_CAP} 的整数(字节)"),
            )),
        },
    }
}

impl Settings {
    /// The workspace (not canonicalised; the run canonicalises it).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// `-r/--run-dir`, else [`DEFAULT_RUN_DIR`]; relative to the current directory,
    /// not to the workspace.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// `flower serve`'s address and token.
    pub fn serve(&self) -> &ServeSettings {
        &self.serve
    }

    /// Where `flower rewind` pauses for a crash test (`FLOWER_TEST_REWIND_PAUSE`).
    pub fn rewind_pause(&self) -> Option<&test_hooks::RewindPause> {
        self.rewind_pause.as_ref()
    }

    pub fn model(&self) -> &ModelSettings {
        &self.model
    }

    /// Retry and offline-wait numbers (`FLOWER_MAX_ATTEMPTS` …).
    pub fn resilience(&self) -> &Resilience {
        &self.resilience
    }

    /// The sandbox of Bash commands (`FLOWER_SANDBOX`, `FLOWER_NETWORK`, the flags).
    pub fn sandbox(&self) -> &SandboxPolicy {
        &self.sandbox
    }

    /// Where transcripts live (`--store`, else `FLOWER_STORE`); `None`: SQLite in the
    /// run directory. Opened by [`Settings::open_store`].
    pub fn store(&self) -> Option<&PostgresUrl> {
        self.store.as_ref()
    }

    /// The run's name in the shared store (`--run-key`, else `FLOWER_RUN_KEY`); `None`:
    /// the workspace's project key. Only with a PostgreSQL store.
    /// The OpenTelemetry export (`CLAUDE_CODE_ENABLE_TELEMETRY` and the `OTEL_*`
    /// variables); `None`: off.
    pub fn telemetry(&self) -> Option<&crate::telemetry::Config> {
        self.telemetry.as_ref()
    }

    pub fn run_key(&self) -> Option<&RunName> {
        self.run_key.as_ref()
    }

    /// 换代 (`--handoff-at`, `FLOWER_HANDOFF_AT`, `FLOWER_CONTEXT_WINDOW`), checked
    /// against the model's window.
    pub fn handoff(&self) -> &HandoffOptions {
        &self.handoff
    }

    /// `--wait`: wait for another flower holding the run instead of refusing.
    pub fn wait(&self) -> bool {
        self.wait
    }

    /// `-f/--prompt-file`: where the prompt is read from, instead of the command line
    /// (checked to be a readable file; read by the front end).
    pub fn prompt_file(&self) -> Option<&PromptFile> {
        self.prompt_file.as_ref()
    }

    /// `--again`: a wake with nothing to say works and judges again even when the
    /// judge passed last time (else it says so and spends nothing).
    pub fn again(&self) -> bool {
        self.again
    }

    /// `--accept-settings`: the workspace's settings files changed since the run pinned
    /// them, and the person says to apply them (see [`pin`]). A flag only: no variable,
    /// which a settings file could set, says yes for the person.
    pub fn accept_settings(&self) -> bool {
        self.accept_settings
    }

    /// The person said yes to the changed settings files when asked (as
    /// `--accept-settings` says it up front).
    pub fn accept_settings_now(&mut self) {
        self.accept_settings = true;
    }

    /// The home directory (`HOME`): `~/` in permission rules, `~` in printed paths.
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    pub fn terminal(&self) -> &Terminal {
        &self.terminal
    }

    /// Worth a line on stderr, not worth stopping for (an unpriced model, a hook of
    /// an event flower does not have).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Project memory in the system prompts (`--no-memory`, else `FLOWER_MEMORY`
    /// `on`/`off`, else on).
    pub fn memory(&self) -> bool {
        self.memory
    }

    /// Files over this many bytes are left out of the workspace's checkpoints
    /// (`FLOWER_CHECKPOINT_MAX_FILE_MB`, a positive whole number of MiB; default 10).
    pub fn checkpoint_max_file_bytes(&self) -> u64 {
        self.checkpoint_max_file_bytes
    }

    /// What a resumed session is fed: trimmed or not, stale snapshots marked, how
    /// many denials kept (flags only; the store's defaults otherwise).
    pub fn resume(&self) -> Resume {
        self.resume
    }

    /// Whether a run checkpoints the workspace (a library user may say no).
    pub fn checkpoints(&self) -> bool {
        self.checkpoints
    }

    /// What the settings files said (the files read, their permission rules, hooks,
    /// every key as written).
    pub fn files(&self) -> &FileLayer {
        &self.files
    }

    /// What Bash commands, hooks and MCP servers get explicitly, on top of flower's
    /// environment without its secrets (`sandbox.withheld_env`): the settings files'
    /// `env` variables the environment does not set.
    pub fn child_env(&self) -> &[(String, String)] {
        &self.child_env
    }

    /// `FLOWER_PASS_ENV`: names or `*` patterns of variables children inherit although
    /// they look secret (see `docs/sandbox.md`); the rest are in `sandbox.withheld_env`.
    pub fn pass_env(&self) -> &[String] {
        &self.pass_env
    }

    /// MCP servers (`.mcp.json`, the settings files' `mcpServers`, `${VAR}` expanded)
    /// and their timeouts (`MCP_TIMEOUT`, `MCP_TOOL_TIMEOUT`, milliseconds).
    pub fn mcp(&self) -> &crate::tools::mcp::McpConfig {
        &self.mcp
    }

    /// How many of a reply's calls may run at once, and which MCP tools may run
    /// alongside (`FLOWER_MAX_TOOL_USE_CONCURRENCY`, `FLOWER_CONCURRENT_MCP_TOOLS`).
    pub fn concurrency(&self) -> &Concurrency {
        &self.concurrency
    }

    /// The model's context window and handoff threshold (`None`: no 换代), tokens:
    /// what the runtime hands off at, the manifest records and the report draws.
    pub fn run_context(&self) -> RunContext {
        self.run_context
    }

    /// The settings of a library user: no flags, the process environment, no files.
    pub fn from_env() -> Result<Settings, ConfigError> {
        Settings::resolve(
            &Flags::default(),
            &Environment::from_process(),
            &FileLayer::default(),
        )
    }

    /// The settings of a command line: the settings files of the workspace and the
    /// home ([`FileLayer::load`], read once, here), then [`Settings::resolve`]. A bad
    /// file is a [`ConfigError`] naming the file and the key.
    pub fn load(flags: &Flags, env: &Environment) -> Result<Settings, ConfigError> {
        let workspace = workspace_of(flags, env);
        let files = FileLayer::load(&workspace, env.home())?;
        Settings::resolve(flags, env, &files)
    }

    /// The one resolution: `flags` over `env` over `files` over the defaults, every
    /// value checked. Reads no file except the price table `FLOWER_PRICES` names, and
    /// touches nothing.
    /// Long because it is the one place every knob is read, in precedence order: a
    /// flat list of knobs reads better whole than split by accident of length.
    pub fn resolve(
        flags: &Flags,
        env: &Environment,
        files: &FileLayer,
    ) -> Result<Settings, ConfigError> {
        let vars = Vars { env, files };
        let model = model::resolve(flags, &vars)?;
        let resilience = match &flags.resilience {
            Some(given) => given.clone(),
            None => resilience(&vars)?,
        };
        let resume = Resume::of(flags);
        let store = store::store(flags, &vars)?;
        let run_key = store::run_key(flags, &vars, store.as_ref())?;
        let sandbox = sandbox_policy(flags, &vars)?;
        let handoff = handoff_options(flags, &vars)?;
        let source = if flags.handoff_at.is_some() {
            "--handoff-at"
        } else {
            "FLOWER_HANDOFF_AT"
        };
        let run_context = handoff
            .context_for(&model.id)
            .map_err(|e| ConfigError::invalid_because(source, format!("{source}:{e}"), e))?;
        let mut warnings: Vec<String> = model.price_warning().into_iter().collect();
        warnings.extend(files.hooks.ignored.iter().cloned());
        warnings.extend(files.ignored.iter().cloned());
        let workspace = workspace_of(flags, env);
        let mut sandbox = sandbox;
        sandbox.additional_dirs = files.permissions.additional_directories.clone();
        sandbox.net = network::rules(files, env.home())?;
        let memory = match vars.trimmed("FLOWER_MEMORY").as_deref() {
            _ if flags.no_memory => false,
            None | Some("on") => true,
            Some("off") => false,
            Some(other) => {
                return Err(ConfigError::invalid(
                    "FLOWER_MEMORY",
                    format!("FLOWER_MEMORY={other:?}:要 on 或 off"),
                ));
            }
        };
        let checkpoint_max_file_bytes = match vars.unblank("FLOWER_CHECKPOINT_MAX_FILE_MB") {
            None => crate::checkpoint::DEFAULT_MAX_FILE_BYTES,
            Some(text) => match text.parse::<u64>() {
                Ok(mb) if (1..=1 << 20).contains(&mb) => mb << 20,
                _ => {
                    return Err(ConfigError::invalid(
                        "FLOWER_CHECKPOINT_MAX_FILE_MB",
                        format!("FLOWER_CHECKPOINT_MAX_FILE_MB={text:?}:要一个正整数(MiB)"),
                    ));
                }
            },
        };
        let concurrency = concurrency(&vars)?;
        let serve = serve::serve(flags, &vars)?;
        let lookup = |name: &str| vars.raw(name);
        let (mut mcp, mcp_warnings) = files::mcp_config(files, &lookup)?;
        warnings.extend(mcp_warnings);
        for (name, slot) in [
            ("MCP_TIMEOUT", &mut mcp.startup_timeout),
            ("MCP_TOOL_TIMEOUT", &mut mcp.tool_timeout),
        ] {
            if let Some(value) = vars.trimmed(name) {
                match value.parse::<u64>() {
                    Ok(ms) if ms > 0 => *slot = std::time::Duration::from_millis(ms),
                    _ => {
                        return Err(ConfigError::invalid(
                            name,
                            format!("{name}={value:?}:要一个 > 0 的毫秒数"),
                        ));
                    }
                }
            }
        }
        let pass_env = child_env::pass_env(env)?;
        let child_env = child_env::child_env(env, files);
        sandbox.withheld_env = crate::tools::process::withheld_names(env.vars(), &pass_env);
        sandbox.withheld_env.extend(
            env.undecodable()
                .iter()
                .filter(|name| {
                    !pass_env
                        .iter()
                        .any(|p| crate::tools::process::name_matches(p, name))
                })
                .cloned(),
        );
        let telemetry = telemetry::resolve(env)?;
        sandbox.withheld_env.extend(telemetry::secret_names(env));
        let run_dir = flags
            .run_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_RUN_DIR));
        check_run_dir(&run_dir)?;
        Ok(Settings {
            workspace,
            run_dir,
            model,
            resilience,
            sandbox,
            store,
            run_key,
            handoff,
            run_context,
            serve,
            wait: flags.wait,
            prompt_file: flags.prompt_file.as_deref().map(prompt_file).transpose()?,
            again: flags.again,
            accept_settings: flags.accept_settings,
            memory,
            checkpoint_max_file_bytes,
            checkpoints: flags.checkpoints.unwrap_or(true),
            resume,
            files: files.clone(),
            child_env,
            pass_env,
            mcp,
            concurrency,
            telemetry,
            rewind_pause: test_hooks::rewind_pause(env)?,
            home: env.home().map(Path::to_path_buf),
            terminal: Terminal {
                no_color: env.var("NO_COLOR").is_some_and(|v| !v.is_empty()),
                term: env.var("TERM").map(str::to_string),
            },
            warnings,
        })
    }

    /// The model client these settings describe. [`ConfigError::MissingCredential`]
    /// without a credential. Sends nothing.
    pub fn client(&self) -> Result<Arc<dyn ModelClient>, ConfigError> {
        let config = self.model.client_config()?;
        let client = AnthropicClient::with_config(config)
            .map_err(|e| ConfigError::invalid_because("ANTHROPIC_BASE_URL", e.to_string(), e))?;
        Ok(Arc::new(client))
    }

    /// Runtime options with these settings' client, retry policy, limits, sandbox,
    /// handoff and resume pruning; the run layer ([`crate::run`]) adds the stores, the
    /// lock and the sub-agents, and a front end only its callbacks
    /// ([`crate::continuity::runtime::FrontEnd`]).
    pub fn runtime_options(&self) -> Result<RuntimeOptions, ConfigError> {
        Ok(RuntimeOptions {
            trim: self.resume.trim,
            ephemeral: self.resume.ephemeral,
            keep_denials: self.resume.keep_denials,
            resilience: self.resilience.clone(),
            max_tokens: self.model.max_tokens,
            sandbox: self.sandbox.clone(),
            thinking_budget: self.model.thinking_budget,
            effort: self.model.effort,
            web: self.model.web,
            cache_ttl: self.model.cache_ttl,
            handoff: self.handoff.clone(),
            home: self.home.clone(),
            conventions: self.conventions(),
            max_tool_concurrency: self.concurrency.max_tools,
            concurrent_mcp_tools: self.concurrency.mcp_tools.clone(),
            background_output_cap: self.concurrency.background_output_cap,
            ..RuntimeOptions::new(self.client()?)
        })
    }

    /// What the project's memory and settings files add to every agent (see
    /// [`Conventions`]): memory (unless off), the files' deny and ask rules and hooks,
    /// and their variables the environment does not set.
    pub fn conventions(&self) -> Conventions {
        let permissions = &self.files.permissions;
        Conventions {
            memory: self.memory.then(|| self.memory_source()),
            hooks: self.files.hooks.clone(),
            deny: files::FilePermissions::rules(&permissions.deny),
            ask: files::FilePermissions::rules(&permissions.ask),
            env: self.child_env.clone(),
            mcp: self.mcp.clone(),
            skills: self.files.skills.engine_skills(),
        }
    }

    /// Where project memory is read from (whether or not it is on).
    pub fn memory_source(&self) -> MemorySource {
        MemorySource {
            workspace: self
                .workspace
                .canonicalize()
                .unwrap_or_else(|_| self.workspace.clone()),
            home: self.home.clone(),
            kinds: self.files.sources.as_ref().map(|sources| {
                use crate::engine::memory::MemoryKind;
                sources
                    .iter()
                    .map(|scope| match scope {
                        files::Scope::User => MemoryKind::User,
                        files::Scope::Project => MemoryKind::Project,
                        files::Scope::Local => MemoryKind::Local,
                    })
                    .collect()
            }),
        }
    }

    /// The settings files' `permissions.allow` rules: what a front end adds to the
    /// agents it lets them widen (see [`Conventions`]).
    pub fn allow_rules(&self) -> Vec<String> {
        files::FilePermissions::rules(&self.files.permissions.allow)
    }

    /// The user's own file's `permissions.allow` rules: all that may add to a list the
    /// command line gave (`flower once --allowed-tools`); a workspace file's rules do
    /// not widen what the person said there.
    pub fn user_allow_rules(&self) -> Vec<String> {
        let permissions = &self.files.permissions;
        permissions
            .allow
            .iter()
            .filter(|rule| rule.scope == files::Scope::User)
            .map(|rule| rule.rule.clone())
            .collect()
    }

    /// The workspace files' `permissions.allow` rules (project, local), with their file.
    pub fn workspace_allow_rules(&self) -> Vec<&files::FileRule> {
        let permissions = &self.files.permissions;
        permissions
            .allow
            .iter()
            .filter(|rule| rule.scope != files::Scope::User)
            .collect()
    }

    /// `mcp__<server>` for every configured MCP server: what a front end adds to the
    /// agents it gives MCP tools (flower's pipeline: the workers).
    pub fn mcp_rules(&self) -> Vec<String> {
        self.mcp.servers.iter().map(|s| s.rule()).collect()
    }

    /// The sub-agents `Task` may start for an agent whose default sub-agent is `role`:
    /// `role` first (the default), then the team's custom agents
    /// (`.claude/agents/*.md`), each within `role`'s boundary ([`crate::engine::AgentSpec::within`]).
    /// The second list names the custom agents left out: nothing they may use is
    /// inside the role.
    pub fn subagents_for(
        &self,
        role: &crate::engine::AgentSpec,
    ) -> (Vec<crate::engine::AgentSpec>, Vec<String>) {
        let mut specs = vec![role.clone()];
        let mut left_out = Vec::new();
        for agent in &self.files.agents.agents {
            match agent.spec().within(role) {
                Some(spec) => specs.push(spec),
                None => left_out.push(format!(
                    "{}:代理 {} 的 tools 没有一个在 {} 的权限之内,不提供它",
                    agent.path.display(),
                    agent.name,
                    role.name
                )),
            }
        }
        (specs, left_out)
    }

    /// Makes the price table of these settings (`FLOWER_PRICES` over the built-in one)
    /// the process's, unless one is in use already. Call it once, early.
    pub fn install_prices(&self) {
        if let Some(table) = &self.model.prices {
            crate::model::prices::install(table.clone());
        }
    }

    /// Opens the PostgreSQL store of `--store` / `FLOWER_STORE` (connects, checks the
    /// credentials and the schema): `None` for the default SQLite store, which the
    /// runtime opens in the run directory. The one place a run's store is opened.
    pub fn open_store(&self) -> Result<Option<Arc<PostgresStore>>, StoreError> {
        match &self.store {
            None => Ok(None),
            Some(url) => Ok(Some(Arc::new(PostgresStore::open(url)?))),
        }
    }
}

/// What a resumed session is fed (see [`crate::stores::PruneOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Old large tool results replaced by file pointers.
    pub trim: bool,
    /// Results of one-shot snapshot commands marked stale once run again.
    pub ephemeral: bool,
    /// How many denied tool calls stay.
    pub keep_denials: usize,
}

impl Resume {
    /// The flags over the store's defaults ([`PruneOptions::new`], one source).
    fn of(flags: &Flags) -> Resume {
        let defaults = PruneOptions::new(PathBuf::new());
        Resume {
            trim: flags.trim.unwrap_or(defaults.trim),
            ephemeral: flags.ephemeral.unwrap_or(defaults.ephemeral),
            keep_denials: flags.keep_denials.unwrap_or(defaults.keep_denials),
        }
    }
}

/// Where `-f/--prompt-file` reads the prompt from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptFile {
    /// `-f -`: standard input, to its end.
    Stdin,
    /// `-f FILE`.
    File(PathBuf),
}

impl PromptFile {
    /// The prompt, as UTF-8 text. A read that fails names the flag (exit 2).
    pub fn read(&self) -> Result<String, ConfigError> {
        use std::io::Read as _;
        let mut text = String::new();
        let read = match self {
            PromptFile::Stdin => std::io::stdin().read_to_string(&mut text).map(|_| ()),
            PromptFile::File(path) => std::fs::read_to_string(path).map(|t| text = t),
        };
        read.map_err(|e| {
            let from = match self {
                PromptFile::Stdin => "-".to_string(),
                PromptFile::File(path) => path.display().to_string(),
            };
            ConfigError::invalid("--prompt-file", format!("-f {from}:读不出来({e})"))
        })?;
        Ok(text)
    }
}

/// `-f FILE` checked: `-` is standard input; a file must be there and be a file.
fn prompt_file(path: &Path) -> Result<PromptFile, ConfigError> {
    if path.as_os_str() == "-" {
        return Ok(PromptFile::Stdin);
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(PromptFile::File(path.to_path_buf())),
        Ok(_) => Err(ConfigError::invalid(
            "--prompt-file",
            format!("-f {}:不是文件", path.display()),
        )),
        Err(e) => Err(ConfigError::invalid(
            "--prompt-file",
            format!("-f {}:读不出来({e})", path.display()),
        )),
    }
}

/// A relative run directory stays inside the current directory (the workspace): a typo
/// like `-r ../runs` must not create a run directory somewhere else. A run directory
/// outside is given on purpose, as an absolute path. Checked lexically (no file is read).
fn check_run_dir(run_dir: &Path) -> Result<(), ConfigError> {
    if run_dir.is_absolute() {
        return Ok(());
    }
    let mut depth = 0usize;
    for part in run_dir.components() {
        match part {
            std::path::Component::ParentDir if depth == 0 => {
                return Err(ConfigError::invalid(
                    "--run-dir",
                    format!(
                        "-r {}:相对路径的运行目录只能在当前目录(工作区)之内,免得无意中在别处建出一个;确实要放在外面,写绝对路径(例如 -r /srv/runs/proj)",
                        run_dir.display()
                    ),
                ));
            }
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    Ok(())
}

/// The workspace: `flags.workspace`, else the current directory, else `.`.
fn workspace_of(flags: &Flags, env: &Environment) -> PathBuf {
    flags
        .workspace
        .clone()
        .or_else(|| env.current_dir().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The retry numbers; a bad value is refused (the library's lenient reading would
/// warn and use the default, and a typo must never silently become the default).
fn resilience(vars: &Vars<'_>) -> Result<Resilience, ConfigError> {
    let (resilience, bad) = Resilience::from_lookup(|name| vars.raw(name));
    match bad.first() {
        None => Ok(resilience),
        Some(first) => {
            // The lenient reading's "先用 <default>" does not hold here: the value is refused.
            let first = first.split(";先用").next().unwrap_or(first);
            let setting = first.split('=').next().unwrap_or_default();
            Err(ConfigError::invalid(setting, first))
        }
    }
}

/// `FLOWER_SANDBOX`, `FLOWER_NETWORK` and the sandbox flags (which win), checked: no
/// network needs the sandbox, and a required sandbox needs Landlock.
fn sandbox_policy(flags: &Flags, vars: &Vars<'_>) -> Result<SandboxPolicy, ConfigError> {
    let mut policy = SandboxPolicy::standard();
    // What git itself reads: the process's environment, not the settings files'.
    policy.user_git = sandbox::UserGitConfig {
        home: vars.env.home().map(Path::to_path_buf),
        xdg_config_home: vars.env.var("XDG_CONFIG_HOME").map(PathBuf::from),
        global: vars.env.var("GIT_CONFIG_GLOBAL").map(PathBuf::from),
    };
    match vars.trimmed("FLOWER_SANDBOX").as_deref() {
        None | Some("on") => {}
        Some("off") => policy.enabled = false,
        Some("require") => policy.required = true,
        Some(other) => {
            return Err(ConfigError::invalid(
                "FLOWER_SANDBOX",
                format!("FLOWER_SANDBOX={other:?}:要 on、off 或 require"),
            ));
        }
    }
    match vars.trimmed("FLOWER_NETWORK").as_deref() {
        None | Some("on") => {}
        Some("off") => policy.network = false,
        Some(other) => {
            return Err(ConfigError::invalid(
                "FLOWER_NETWORK",
                format!("FLOWER_NETWORK={other:?}:要 on 或 off"),
            ));
        }
    }
    let given = flags.sandbox;
    if given.no_network {
        policy.network = false;
    }
    if given.no_sandbox {
        policy.enabled = false;
        policy.required = false;
    }
    if given.require_sandbox {
        policy.enabled = true;
        policy.required = true;
    }
    if !policy.enabled && !policy.network {
        return Err(ConfigError::invalid(
            "--no-network",
            "--no-network(FLOWER_NETWORK=off)靠沙箱断网,不能和 --no-sandbox 或 FLOWER_SANDBOX=off 一起用",
        ));
    }
    if policy.enabled
        && policy.required
        && let Support::Missing(why) = sandbox::support()
    {
        return Err(ConfigError::invalid(
            "--require-sandbox",
            format!("沙箱不可用({why}),--require-sandbox 不允许不受限地运行命令"),
        ));
    }
    Ok(policy)
}

/// `--handoff-at` (else `FLOWER_HANDOFF_AT`) and `FLOWER_CONTEXT_WINDOW`, parsed; the
/// caller checks the threshold against the model's window.
fn handoff_options(flags: &Flags, vars: &Vars<'_>) -> Result<HandoffOptions, ConfigError> {
    let mut options = HandoffOptions::default();
    if let Some(value) = vars.unblank("FLOWER_CONTEXT_WINDOW") {
        options.window = Some(handoff::parse_window(&value).map_err(|e| {
            ConfigError::invalid(
                "FLOWER_CONTEXT_WINDOW",
                format!("FLOWER_CONTEXT_WINDOW:{e}"),
            )
        })?);
    }
    let (source, at) = match &flags.handoff_at {
        // Given on the command line, even empty, it is meant.
        Some(value) => ("--handoff-at", Some(value.clone())),
        None => ("FLOWER_HANDOFF_AT", vars.unblank("FLOWER_HANDOFF_AT")),
    };
    if let Some(value) = at {
        options.at = value
            .parse::<Threshold>()
            .map_err(|e| ConfigError::invalid_because(source, format!("{source}:{e}"), e))?;
    }
    Ok(options)
}
