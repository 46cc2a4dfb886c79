//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use flower::settings::{Flags, SandboxFlags};
use std::path::PathBuf;

/// Exit status when another process holds the run directory (or the session).
pub const EXIT_LOCKED: u8 = 3;

/// flower: an LLM coding agent that never loses the conversation.
///
/// Run it in a directory with a task. Run it again in the same directory, after Ctrl-C,
/// a killed terminal or a reboot, and it continues the same conversation.
#[derive(Debug, Parser)]
#[command(name = "flower", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub flow: FlowArgs,
}

/// The default command: clarify → set goal → work → judge, continuing the last run.
#[derive(Debug, Args)]
pub struct FlowArgs {
    /// What to do (first run), or something to add (on waking). Nothing = carry on.
    pub prompt: Vec<String>,

    /// Archive the last run (lineage, 需求.md, 目标.md) and start something new.
    #[arg(long)]
    pub new: bool,

    /// Do not trim old large tool results when resuming (on by default here).
    #[arg(long)]
    pub no_trim: bool,

    /// Total 干活 rounds of this wake (the judge may send the work back rounds-1 times).
    #[arg(long, default_value_t = flower::workflow::flower::DEFAULT_ROUNDS, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub model: ModelArgs,

    /// Also print the sandbox state under the banner.
    #[arg(short = 'v', long)]
    pub verbose: bool,

    #[command(flatten)]
    pub sandbox: SandboxArgs,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub run_key: RunKeyArg,

    /// If another flower is running in this run directory, wait for it to end instead of
    /// exiting with status 3.
    #[arg(long)]
    pub wait: bool,
    /// When a step's session hands off to a successor (换代): a token count (120000,
    /// 120K) or a percentage of the context window (60%). Else FLOWER_HANDOFF_AT, else 60%.
    #[arg(long, value_name = "TOKENS|PERCENT")]
    pub handoff_at: Option<String>,
}

// The shared flags: each defined once here, flattened into the commands that take it,
// and each adds itself to the one `Flags` the settings resolution reads.

/// `-r/--run-dir`: every command that reads or writes a run.
#[derive(Debug, Clone, Args)]
pub struct RunDirArg {
    /// Run directory, relative to the current directory.
    #[arg(id = "run_dir", short = 'r', long = "run-dir", default_value = flower::settings::DEFAULT_RUN_DIR)]
    pub path: PathBuf,
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

/// `--model` and `--thinking`: the commands that talk to the model.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Model (else ANTHROPIC_MODEL, else the built-in default): an id, or an alias
    /// (opus, sonnet, haiku); `[1m]` asks for the 1M context window.
    #[arg(long)]
    pub model: Option<String>,

    /// Extended thinking, with an optional budget in tokens (`--thinking=8000`; bare:
    /// MAX_THINKING_TOKENS, else 10000). At least 1024, below max_tokens.
    #[arg(long, value_name = "BUDGET", num_args = 0..=1, require_equals = true)]
    pub thinking: Option<Option<u32>>,
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

impl FlagGroup for ModelArgs {
    fn add_to(&self, flags: &mut Flags) {
        flags.model = self.model.clone();
        flags.thinking = self.thinking;
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

impl FlowArgs {
    /// Everything this command line says to the settings resolution.
    pub fn flags(&self) -> Flags {
        let mut flags = flags_of(&[
            &self.run_dir,
            &self.model,
            &self.sandbox,
            &self.store,
            &self.run_key,
        ]);
        flags.wait = self.wait;
        flags.handoff_at = self.handoff_at.clone();
        flags
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One agent, one session, outside any workflow (no lineage, no manifest).
    Once(OnceArgs),
    /// Whether this directory can be woken (read-only).
    State(StateArgs),
    /// Inspect and move transcripts in sessions.db.
    Store(super::store::StoreArgs),
    /// What happened in this run: one line per step attempt, then totals (read-only).
    Log(super::log::LogArgs),
    /// A session's transcript, readable (read-only).
    Show(super::show::ShowArgs),
    /// One self-contained HTML page with the run's charts and transcripts.
    Report(super::report::ReportArgs),
}

#[derive(Debug, Args)]
pub struct OnceArgs {
    /// The prompt.
    pub prompt: String,

    /// Continue this session.
    #[arg(long, value_name = "SESSION_ID")]
    pub resume: Option<String>,

    /// With --resume: branch into a new session, leaving the original untouched.
    #[arg(long, requires = "resume")]
    pub fork: bool,

    /// Permission rules that allow calls, e.g. Read "Bash(git status:*)". Default: all tools.
    #[arg(long, num_args = 1.., value_name = "RULE")]
    pub allowed_tools: Vec<String>,

    /// Permission rules that deny calls (they win over allow rules).
    #[arg(long, num_args = 1.., value_name = "RULE")]
    pub disallowed_tools: Vec<String>,

    /// Stop after this many model turns.
    #[arg(long)]
    pub max_turns: Option<u32>,

    #[command(flatten)]
    pub model: ModelArgs,

    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub sandbox: SandboxArgs,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub store: StoreArg,
}

impl OnceArgs {
    /// Everything this command line says to the settings resolution.
    pub fn flags(&self) -> Flags {
        flags_of(&[&self.model, &self.sandbox, &self.run_dir, &self.store])
    }
}

#[derive(Debug, Args)]
pub struct StateArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub run_key: RunKeyArg,
}

impl StateArgs {
    /// Everything this command line says to the settings resolution.
    pub fn flags(&self) -> Flags {
        flags_of(&[&self.run_dir, &self.store, &self.run_key])
    }
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
