//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use flower::tools::sandbox::SandboxPolicy;
use std::path::PathBuf;

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

    /// Run directory, relative to the current directory.
    #[arg(short = 'r', long = "run-dir", default_value = "runs")]
    pub run_dir: PathBuf,

    /// Model (else ANTHROPIC_MODEL, else the built-in default).
    #[arg(long)]
    pub model: Option<String>,

    /// Also print the sandbox state under the banner.
    #[arg(short = 'v', long)]
    pub verbose: bool,

    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

/// The sandbox around Bash commands (see the README's Sandbox section).
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

impl SandboxArgs {
    /// The sandbox policy from the flags and the `FLOWER_SANDBOX` (`on`, `off`,
    /// `require`) and `FLOWER_NETWORK` (`on`, `off`) settings; flags win. A bad
    /// setting is an error (exit 2), checked before any model request.
    pub fn policy(&self) -> Result<SandboxPolicy, String> {
        self.policy_from(
            std::env::var("FLOWER_SANDBOX").ok().as_deref(),
            std::env::var("FLOWER_NETWORK").ok().as_deref(),
        )
    }

    fn policy_from(
        &self,
        sandbox: Option<&str>,
        network: Option<&str>,
    ) -> Result<SandboxPolicy, String> {
        let mut policy = SandboxPolicy::standard();
        match sandbox.map(str::trim) {
            None | Some("" | "on") => {}
            Some("off") => policy.enabled = false,
            Some("require") => policy.required = true,
            Some(other) => {
                return Err(format!(
                    "FLOWER_SANDBOX={other:?} is not one of on, off, require"
                ));
            }
        }
        match network.map(str::trim) {
            None | Some("" | "on") => {}
            Some("off") => policy.network = false,
            Some(other) => {
                return Err(format!("FLOWER_NETWORK={other:?} is not one of on, off"));
            }
        }
        if self.no_network {
            policy.network = false;
        }
        if self.no_sandbox {
            policy.enabled = false;
            policy.required = false;
        }
        if self.require_sandbox {
            policy.enabled = true;
            policy.required = true;
        }
        if !policy.enabled && !policy.network {
            return Err(
                "--no-network needs the sandbox; it cannot be combined with --no-sandbox or \
                 FLOWER_SANDBOX=off"
                    .into(),
            );
        }
        Ok(policy)
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

    /// Model (else ANTHROPIC_MODEL, else the built-in default).
    #[arg(long)]
    pub model: Option<String>,

    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub sandbox: SandboxArgs,

    /// Run directory, relative to the current directory.
    #[arg(short = 'r', long = "run-dir", default_value = "runs")]
    pub run_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct StateArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,

    /// Run directory, relative to the current directory.
    #[arg(short = 'r', long = "run-dir", default_value = "runs")]
    pub run_dir: PathBuf,
}
