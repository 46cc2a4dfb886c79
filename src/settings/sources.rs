//! The low-level inputs of [`super::Settings::resolve`]: what the command line said
//! ([`Flags`]), the environment ([`Environment`]) and the settings files ([`FileLayer`]).
//! Nothing here is validated yet; everything here is plain data a caller can build by
//! hand (tests, the Python package).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

/// The flags of one command line, as parsed: `None` / `false` = not given. The CLI's
/// clap groups fill it; a library user sets what it means to say and leaves the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    /// The workspace; `None`: the current directory.
    pub workspace: Option<PathBuf>,
    /// `-r/--run-dir`; `None`: `runs`, relative to the current directory.
    pub run_dir: Option<PathBuf>,
    /// `--store` (a `postgres://` URL or `sqlite`).
    pub store: Option<String>,
    /// `--run-key`: the run's name in a shared store, given on purpose (it may adopt a
    /// run begun in another workspace).
    pub run_key: Option<String>,
    /// `--model`: an id or an alias, `[1m]` allowed.
    pub model: Option<String>,
    /// `--thinking` (`Some(None)`) or `--thinking=N` (`Some(Some(N))`).
    pub thinking: Option<Option<u32>>,
    /// `--effort`: `low`, `medium`, `high`, `xhigh`, `max`.
    pub effort: Option<String>,
    /// `--handoff-at`: tokens (`120000`, `120K`) or a share of the window (`60%`).
    pub handoff_at: Option<String>,
    /// `--no-network`, `--require-sandbox`, `--no-sandbox`.
    pub sandbox: SandboxFlags,
    /// `--wait`: wait for another flower holding the run instead of refusing.
    pub wait: bool,
    /// `--no-memory`: no `CLAUDE.md` / `AGENTS.md` in the system prompts.
    pub no_memory: bool,
    /// `-f/--prompt-file`: the prompt from this file, `-` for standard input.
    pub prompt_file: Option<PathBuf>,
    /// `--again`: work and judge again although the judge passed and nothing was said.
    pub again: bool,
    /// `--accept-settings`: apply settings files changed since the run pinned them.
    pub accept_settings: bool,
    /// Whether a resumed session's old large tool results are replaced by file
    /// pointers (`flower`: on unless `--no-trim`; the library: off).
    pub trim: Option<bool>,
    /// Whether results of one-shot snapshot commands are marked stale once run again
    /// (Python's `ephemeral`).
    pub ephemeral: Option<bool>,
    /// How many denied tool calls a resumed session still sees (Python's `keep_denials`).
    pub keep_denials: Option<usize>,
    /// Retry numbers given as a whole: win over the `FLOWER_MAX_ATTEMPTS` …
    /// variables, which are then not read (Python lays its given numbers over a first
    /// resolution's, so the variables still win over its defaults).
    pub resilience: Option<crate::continuity::resilience::Resilience>,
    /// Whether the workspace is checkpointed in a run (Python's
    /// `enable_file_checkpointing`); `None`: yes.
    pub checkpoints: Option<bool>,
    /// `flower serve --listen ADDR`.
    pub listen: Option<String>,
    /// `flower serve --token T`.
    pub serve_token: Option<String>,
}

/// The sandbox flags; each wins over `FLOWER_SANDBOX` / `FLOWER_NETWORK`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxFlags {
    pub no_network: bool,
    pub require_sandbox: bool,
    pub no_sandbox: bool,
}

/// A snapshot of the environment a process started with: its variables, home and
/// current directory. [`Environment::from_process`] is the one place in the library
/// that reads the process environment; everything else gets a snapshot passed down, so
/// that a test (or a library user) describes an environment instead of changing the
/// process's.
#[derive(Clone, Default)]
pub struct Environment {
    vars: HashMap<String, String>,
    /// Names of variables whose value is not UTF-8 (read as unset).
    undecodable: Vec<String>,
    home: Option<PathBuf>,
    current_dir: Option<PathBuf>,
}

impl fmt::Debug for Environment {
    // Names only: values hold credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.vars.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Environment")
            .field("vars", &names)
            .field("home", &self.home)
            .field("current_dir", &self.current_dir)
            .finish()
    }
}

impl Environment {
    /// The process's variables (those that are valid UTF-8; any other reads as unset,
    /// as `std::env::var` has it), `HOME`, and the current directory.
    pub fn from_process() -> Environment {
        let mut vars = HashMap::new();
        let mut undecodable = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Ok(name) = name.into_string() else {
                continue;
            };
            match value.into_string() {
                Ok(value) => {
                    vars.insert(name, value);
                }
                Err(_) => undecodable.push(name),
            }
        }
        Environment {
            vars,
            undecodable,
            home: std::env::var_os("HOME")
                .filter(|home| !home.is_empty())
                .map(PathBuf::from),
            current_dir: std::env::current_dir().ok(),
        }
    }

    /// An environment of exactly these variables (`HOME` among them sets the home
    /// directory), with no current directory: relative paths stay relative.
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Environment
    where
        K: Into<String>,
        V: Into<String>,
    {
        let vars: HashMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let home = vars
            .get("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from);
        Environment {
            vars,
            undecodable: Vec::new(),
            home,
            current_dir: None,
        }
    }

    /// This environment with `dir` as its current directory.
    pub fn with_current_dir(mut self, dir: impl Into<PathBuf>) -> Environment {
        self.current_dir = Some(dir.into());
        self
    }

    /// A variable as set (untrimmed; possibly empty).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Every variable, in no particular order.
    pub fn vars(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Names of the variables whose value is not UTF-8: they read as unset, and the
    /// processes flower starts do not inherit them (their value cannot be checked).
    pub fn undecodable(&self) -> &[String] {
        &self.undecodable
    }

    /// The home directory (`HOME`, when set and not empty).
    pub fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    /// The current directory, when known.
    pub fn current_dir(&self) -> Option<&Path> {
        self.current_dir.as_deref()
    }
}

/// What settings files say, below the environment and above the defaults.
///
/// Built by [`FileLayer::load`] from Claude Code's settings files
/// (`~/.claude/settings.json`, `.claude/settings.json`, `.claude/settings.local.json`;
/// see [`super::files`]) and handed to [`super::Settings::resolve`]; a library user may
/// build one by hand. Their `env` block goes into [`FileLayer::vars`]: every variable
/// flower knows is then read as "the environment's value, else the files'", with no
/// change to the parsers. A typed file setting (`model`, permission rules …) has its own
/// field here and is consulted by its resolver after the flag and the variable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileLayer {
    /// Variables the files set (`env` in Claude Code's settings files); the process
    /// environment wins over them.
    pub vars: BTreeMap<String, String>,
    /// `model`: below `--model` and `ANTHROPIC_MODEL`.
    pub model: Option<String>,
    /// `effortLevel`: below `--effort` and `CLAUDE_CODE_EFFORT_LEVEL`.
    pub effort: Option<String>,
    /// `permissions` of every file, merged.
    pub permissions: super::files::FilePermissions,
    /// `hooks` of every file, merged.
    pub hooks: crate::engine::hooks::HookSet,
    /// The files that were read, in precedence order (user, project, local), each
    /// typed and with its whole document: keys flower itself does not read are kept
    /// ([`super::document::SettingsFile::extra`]).
    pub files: Vec<super::files::LoadedFile>,
    /// `.mcp.json` at the workspace root (the project's MCP servers), when there is one.
    pub mcp_json: Option<super::files::LoadedFile>,
    /// The workspace's files as written (project, local, `.mcp.json`): what a run
    /// pins and a later run compares ([`super::pin`]).
    pub pin: super::pin::SettingsPin,
    /// What the workspace's files said and was not applied because it would widen
    /// the user's settings ([`super::strict`]), one line each.
    pub ignored: Vec<String>,
    /// Custom sub-agents (`.claude/agents/*.md`, `~/.claude/agents/*.md`) and the
    /// files left out ([`super::agents`]).
    pub agents: super::agents::AgentFiles,
    /// Agent Skills (`.claude/skills/*/SKILL.md`, `~/.claude/skills/`) and the ones
    /// left out ([`super::skills`]).
    pub skills: super::skills::SkillFiles,
    /// The sources read ([`FileLayer::load_from`]); `None`: all of them (the CLI's
    /// [`FileLayer::load`]) or none (`FileLayer::default()`, which reads no file).
    pub sources: Option<Vec<super::files::Scope>>,
}

/// The environment over the files: the one lookup every variable goes through.
pub(crate) struct Vars<'a> {
    pub env: &'a Environment,
    pub files: &'a FileLayer,
}

impl Vars<'_> {
    /// A variable as set: the environment's (even empty), else the files'.
    pub fn raw(&self, name: &str) -> Option<String> {
        self.env
            .var(name)
            .or_else(|| self.files.vars.get(name).map(String::as_str))
            .map(str::to_string)
    }

    /// A variable as set, unless it is blank (blank counts as unset).
    pub fn unblank(&self, name: &str) -> Option<String> {
        self.raw(name).filter(|v| !v.trim().is_empty())
    }

    /// A variable, trimmed; empty counts as unset.
    pub fn trimmed(&self, name: &str) -> Option<String> {
        self.raw(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }
}
