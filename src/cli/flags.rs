//! The shared flags: each defined once here, flattened into the commands that take it
//! (`cli/args.rs` and the read-only views), and each adding itself to the one
//! [`Flags`] the settings resolution reads. Their help texts are the commands' help.

use clap::Args;
use flower::settings::{Flags, SandboxFlags};
use std::path::PathBuf;

/// `-r/--run-dir`: every command that reads or writes a run.
#[derive(Debug, Clone, Args)]
pub struct RunDirArg {
    /// Run directory, relative to the current directory.
    #[arg(
        id = "run_dir",
        short = 'r',
        long = "run-dir",
        value_name = "RUN_DIR",
        default_value = flower::settings::DEFAULT_RUN_DIR
    )]
    pub path: PathBuf,
}

/// `-f/--prompt-file`: the commands that take a prompt.
#[derive(Debug, Clone, Args)]
pub struct PromptFileArg {
    /// Read the prompt from FILE instead of the command line (`-`: standard input), for
    /// a prompt too long for a command line (the OS caps it at a few hundred KB).
    #[arg(
        id = "prompt_file",
        short = 'f',
        long = "prompt-file",
        value_name = "FILE",
        conflicts_with = "prompt"
    )]
    pub file: Option<PathBuf>,
}

impl FlagGroup for PromptFileArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.prompt_file = self.file.clone();
    }
}

/// `--store` of the commands that run or probe a run.
#[derive(Debug, Clone, Args)]
pub struct StoreArg {
    /// Where transcripts live: a postgres://user@host:port/db URL shared by hosts, or
    /// `sqlite` (runs/sessions.db, the default). Else FLOWER_STORE.
    #[arg(id = "store", long = "store", value_name = "URL")]
    pub url: Option<String>,
}

/// `--run-key` of the commands that run or probe a run.
#[derive(Debug, Clone, Args)]
pub struct RunKeyArg {
    /// The run's name in a shared store, for hosts that mount the workspace at
    /// different paths (else FLOWER_RUN_KEY; default: the workspace's project key).
    #[arg(id = "run_key", long = "run-key", value_name = "NAME")]
    pub name: Option<String>,
}

/// `--model`: the commands that talk to the model.
#[derive(Debug, Clone, Args)]
pub struct ModelArg {
    /// Model (else ANTHROPIC_MODEL, else the built-in default): an id, or an alias
    /// (opus, sonnet, haiku); `[1m]` asks for the 1M context window.
    #[arg(long)]
    pub model: Option<String>,
}

/// `--thinking`: the commands that talk to the model.
#[derive(Debug, Clone, Args)]
pub struct ThinkingArg {
    /// Extended thinking, with an optional budget in tokens (`--thinking=8000`; bare:
    /// MAX_THINKING_TOKENS, else 10000). At least 1024, below max_tokens.
    #[arg(long, value_name = "BUDGET", num_args = 0..=1, require_equals = true)]
    pub thinking: Option<Option<u32>>,

    /// How eagerly the model spends tokens: low, medium, high, xhigh or max (the
    /// levels the model's table row accepts). Setting: CLAUDE_CODE_EFFORT_LEVEL.
    #[arg(long, value_name = "LEVEL")]
    pub effort: Option<String>,
}

/// The sandbox around Bash commands (see the README's "Permissions and sandbox"),
/// resolved with the `FLOWER_SANDBOX` and `FLOWER_NETWORK` settings.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Bash commands get no network (a new, empty network namespace).
    /// Setting: FLOWER_NETWORK=off.
    #[arg(long)]
    pub no_network: bool,

    /// Refuse to run Bash commands when the kernel cannot sandbox them (no Landlock).
    /// Setting: FLOWER_SANDBOX=require.
    #[arg(long, conflicts_with = "no_sandbox")]
    pub require_sandbox: bool,

    /// Run Bash commands without the sandbox. Setting: FLOWER_SANDBOX=off.
    #[arg(long)]
    pub no_sandbox: bool,
}

/// A group of flags that says something to the settings resolution.
pub trait FlagGroup {
    /// Adds what this group says to `flags`.
    fn add_to(&self, flags: &mut Flags);
}

impl FlagGroup for RunDirArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.run_dir = Some(self.path.clone());
    }
}

impl FlagGroup for StoreArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.store = self.url.clone();
    }
}

impl FlagGroup for RunKeyArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.run_key = self.name.clone();
    }
}

impl FlagGroup for ModelArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.model = self.model.clone();
    }
}

impl FlagGroup for ThinkingArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.thinking = self.thinking;
        flags.effort = self.effort.clone();
    }
}

impl FlagGroup for SandboxArgs {
    fn add_to(&self, flags: &mut Flags) {
        flags.sandbox = SandboxFlags {
            no_network: self.no_network,
            require_sandbox: self.require_sandbox,
            no_sandbox: self.no_sandbox,
        };
    }
}

/// The settings flags of `groups`, in one [`Flags`].
pub fn flags_of(groups: &[&dyn FlagGroup]) -> Flags {
    let mut flags = Flags::default();
    for group in groups {
        group.add_to(&mut flags);
    }
    flags
}

/// Where `log`, `show` and `report` read a run from: the run directory (default), or
/// a PostgreSQL store that holds the run's lineage, manifest and transcripts.
#[derive(Debug, Clone, Args)]
pub struct RunSource {
    #[command(flatten)]
    pub run_dir: RunDirArg,

    /// Read the run from this PostgreSQL store (postgres://…) instead of the run
    /// directory, or `sqlite` for runs/ (the default). Else FLOWER_STORE.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// With --store: the run's name in the store (else FLOWER_RUN_KEY; default: this
    /// workspace's project key).
    #[arg(long, value_name = "NAME")]
    pub run_key: Option<String>,
}

impl RunSource {
    /// Everything these flags say to the settings resolution.
    pub fn flags(&self) -> Flags {
        let mut flags = flags_of(&[&self.run_dir]);
        flags.store = self.store.clone();
        flags.run_key = self.run_key.clone();
        flags
    }
}
