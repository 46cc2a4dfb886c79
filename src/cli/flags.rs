//! The shared flags: each defined once here, flattened into the commands that take it
//! (`cli/args.rs` and the read-only views), and each adding itself to the one
//! [`Flags`] the settings resolution reads. Their help texts are the commands' help.

use clap::Args;
use flower::settings::{Flags, SandboxFlags};
use std::path::PathBuf;

/// `-r/--run-dir`: every command that reads or writes a run.
#[derive(Debug, Clone, Args)]
pub struct RunDirArg {
    /// 运行目录,相对当前目录(在工作区外面就写绝对路径)
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
    /// 从 FILE 读要说的话,而不是命令行(`-`:标准输入),用于命令行放不下的长文本(系统对一个参数的上限是几百 KB)
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
    /// transcript 存在哪:多台机器共享的 postgres://user@host:port/db,或 `sqlite`
    /// (runs/sessions.db,默认)。没给就看 FLOWER_STORE
    #[arg(id = "store", long = "store", value_name = "URL")]
    pub url: Option<String>,
}

/// `--run-key` of the commands that run or probe a run.
#[derive(Debug, Clone, Args)]
pub struct RunKeyArg {
    /// 运行在共享存储里的名字,给把工作区挂在不同路径的机器用(没给就看 FLOWER_RUN_KEY;默认:工作区的 project key)
    #[arg(id = "run_key", long = "run-key", value_name = "NAME")]
    pub name: Option<String>,
}

/// `--model`: the commands that talk to the model.
#[derive(Debug, Clone, Args)]
pub struct ModelArg {
    /// 模型(没给就看 ANTHROPIC_MODEL,再没有用内置默认):id 或别名(opus、sonnet、haiku);加 `[1m]` 要 1M 上下文窗口
    #[arg(long)]
    pub model: Option<String>,
}

/// `--thinking`: the commands that talk to the model.
#[derive(Debug, Clone, Args)]
pub struct ThinkingArg {
    /// 扩展思考,可带 token 预算(`--thinking=8000`;不带值:MAX_THINKING_TOKENS,再没有是 10000)。至少 1024,小于 max_tokens
    #[arg(long, value_name = "BUDGET", num_args = 0..=1, require_equals = true)]
    pub thinking: Option<Option<u32>>,

    /// 模型花 token 的力度:low、medium、high、xhigh 或 max(以模型表里那一行接受的为准)。设置:CLAUDE_CODE_EFFORT_LEVEL
    #[arg(long, value_name = "LEVEL")]
    pub effort: Option<String>,
}

/// The sandbox around Bash commands (see the README's "Permissions and sandbox"),
/// resolved with the `FLOWER_SANDBOX` and `FLOWER_NETWORK` settings.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Bash 命令没有网络(一个新的空网络命名空间)。设置:FLOWER_NETWORK=off
    #[arg(long)]
    pub no_network: bool,

    /// 内核没法给 Bash 命令上沙箱(没有 Landlock)时拒绝运行它们。设置:FLOWER_SANDBOX=require
    #[arg(long, conflicts_with = "no_sandbox")]
    pub require_sandbox: bool,

    /// 不用沙箱跑 Bash 命令。设置:FLOWER_SANDBOX=off
    #[arg(long)]
    pub no_sandbox: bool,
}

/// `--accept-settings`: the commands that start agents in a run directory.
#[derive(Debug, Clone, Args)]
pub struct AcceptSettingsArg {
    /// 工作区的设置文件(.claude/settings.json、.claude/settings.local.json、.mcp.json)和这个运行上次用的不一样时,照新的用(看过改动再加)。没有对应的环境变量:设置文件不能替你点头
    #[arg(long)]
    pub accept_settings: bool,
}

impl FlagGroup for AcceptSettingsArg {
    fn add_to(&self, flags: &mut Flags) {
        flags.accept_settings = self.accept_settings;
    }
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

    /// 从这个 PostgreSQL 存储(postgres://…)读运行,而不是运行目录;`sqlite` 是 runs/
    /// (默认)。没给就看 FLOWER_STORE
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,

    /// 和 --store 一起:运行在存储里的名字(没给就看 FLOWER_RUN_KEY;默认:这个工作区的 project key)
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
