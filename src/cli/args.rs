//! Command-line arguments.

use super::flags::{
    ModelArg, PromptFileArg, RunDirArg, RunKeyArg, SandboxArgs, StoreArg, ThinkingArg, flags_of,
};
use clap::{Args, Parser, Subcommand};
use flower::settings::Flags;

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

    #[command(flatten)]
    pub prompt_file: PromptFileArg,

    /// Archive the last run (lineage, 需求.md, 目标.md) and start something new.
    #[arg(long)]
    pub new: bool,

    /// Work and judge again although the judge passed last time and nothing new is
    /// said (without it such a wake says so and spends nothing).
    #[arg(long)]
    pub again: bool,

    /// Do not trim old large tool results when resuming (on by default here).
    #[arg(long)]
    pub no_trim: bool,

    /// Total 干活 rounds of this wake (the judge may send the work back rounds-1 times).
    #[arg(long, default_value_t = flower::workflow::flower::DEFAULT_ROUNDS, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub model: ModelArg,

    /// Also print the sandbox state under the banner, and what was loaded from the
    /// project's conventions (memory files, settings files, hooks).
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Leave CLAUDE.md / AGENTS.md out of the agents' system prompts (else
    /// FLOWER_MEMORY=off does).
    #[arg(long)]
    pub no_memory: bool,

    #[command(flatten)]
    pub sandbox: SandboxArgs,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub run_key: RunKeyArg,

    #[command(flatten)]
    pub thinking: ThinkingArg,

    /// If another flower is running in this run directory, wait for it to end instead of
    /// exiting with status 3.
    #[arg(long)]
    pub wait: bool,
    /// When a step's session hands off to a successor (换代): a token count (120000,
    /// 120K) or a percentage of the context window (60%). Else FLOWER_HANDOFF_AT, else 60%.
    #[arg(long, value_name = "TOKENS|PERCENT")]
    pub handoff_at: Option<String>,
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
            &self.thinking,
            &self.prompt_file,
        ]);
        flags.wait = self.wait;
        flags.again = self.again;
        flags.handoff_at = self.handoff_at.clone();
        flags.no_memory = self.no_memory;
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
    /// The prompt (or -f FILE).
    #[arg(required_unless_present = "prompt_file")]
    pub prompt: Option<String>,

    #[command(flatten)]
    pub prompt_file: PromptFileArg,

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
    pub model: ModelArg,

    #[command(flatten)]
    pub thinking: ThinkingArg,

    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,

    /// Leave CLAUDE.md / AGENTS.md out of the system prompt (else FLOWER_MEMORY=off does).
    #[arg(long)]
    pub no_memory: bool,

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
        let mut flags = flags_of(&[
            &self.model,
            &self.thinking,
            &self.sandbox,
            &self.run_dir,
            &self.store,
            &self.prompt_file,
        ]);
        flags.no_memory = self.no_memory;
        flags
    }
}

#[derive(Debug, Args)]
pub struct StateArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,

    /// Also list what the project's conventions load: memory files, settings files,
    /// permission rules, hooks.
    #[arg(short = 'v', long)]
    pub verbose: bool,

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
