//! Command-line arguments.

use super::flags::{
    AcceptSettingsArg, ModelArg, PromptFileArg, RunDirArg, RunKeyArg, SandboxArgs, StoreArg,
    ThinkingArg, flags_of,
};
use clap::{Args, Parser, Subcommand};
use flower::settings::Flags;

/// Exit status when another process holds the run directory (or the session).
pub const EXIT_LOCKED: u8 = 3;

/// flower:一个永远不丢对话的 LLM 编程代理。
///
/// 在一个目录里给它一件事。之后在同一个目录再跑一次 —— 按过 Ctrl-C、终端崩了、机器重启,都一样 —— 它接着上次那段对话往下说。
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
    /// 要做什么(第一次),或者唤醒时再说一句。什么都不说 = 接着做
    pub prompt: Vec<String>,

    #[command(flatten)]
    pub prompt_file: PromptFileArg,

    /// 归档上一件事(血缘、需求.md、目标.md),重开一件事
    #[arg(long)]
    pub new: bool,

    /// 上次判定已经通过、这次也没说新的,仍然再干活、再判定一次(不加它,这样的唤醒只说一句,一分钱不花)
    #[arg(long)]
    pub again: bool,

    /// 续跑时不裁剪旧的大工具结果(这条路径默认裁剪)
    #[arg(long)]
    pub no_trim: bool,

    /// 这次唤醒干活的总轮数(判定最多打回 rounds-1 次),默认 3
    #[arg(long, default_value_t = flower::workflow::flower::DEFAULT_ROUNDS, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub model: ModelArg,

    /// 在横幅下面也报沙箱状态,以及从项目约定里装载了什么(记忆文件、设置文件、hooks)
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// 不把 CLAUDE.md / AGENTS.md 放进代理的系统提示(也可以设 FLOWER_MEMORY=off)
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

    /// 另一个 flower 正在这个运行目录里跑时,等它结束,而不是以状态 3 退出
    #[arg(long)]
    pub wait: bool,

    #[command(flatten)]
    pub accept_settings: AcceptSettingsArg,

    /// 一步的会话什么时候换代:token 数(120000、120K)或上下文窗口的百分比(60%)。没给就看 FLOWER_HANDOFF_AT,再没有就是 60%
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
            &self.accept_settings,
        ]);
        flags.wait = self.wait;
        flags.again = self.again;
        flags.handoff_at = self.handoff_at.clone();
        flags.no_memory = self.no_memory;
        // A pipeline's resumes are trimmed unless said otherwise.
        flags.trim = Some(!self.no_trim);
        flags
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// 一个代理、一条会话,不走流程(没有血缘,没有运行清单)
    Once(OnceArgs),
    /// 这个目录接不接得上(只读)
    State(StateArgs),
    /// 查看、搬动 sessions.db 里的 transcript
    Store(super::store::StoreArgs),
    /// 这次运行发生了什么:每次尝试一行,最后是合计(只读)
    Log(super::log::LogArgs),
    /// 一条会话的 transcript,读得懂的样子(只读)
    Show(super::show::ShowArgs),
    /// 一页自带一切的 HTML:这次运行的图表和 transcript
    Report(super::report::ReportArgs),
    /// 列出工作区的检查点,或回到一个检查点(文件,以及对话)
    Rewind(RewindArgs),
    /// 从一个检查点到现在,工作区改了什么
    Diff(DiffArgs),
    /// 一个只读的网页:这个目录下(或 --store 数据库里)的运行,实时更新
    Serve(super::serve::ServeArgs),
}

#[derive(Debug, Args)]
pub struct OnceArgs {
    /// 要说的话(或用 -f FILE)
    #[arg(required_unless_present = "prompt_file")]
    pub prompt: Option<String>,

    #[command(flatten)]
    pub prompt_file: PromptFileArg,

    /// 接着这条会话
    #[arg(long, value_name = "SESSION_ID")]
    pub resume: Option<String>,

    /// 和 --resume 一起:分叉出一条新会话,原会话不动
    #[arg(long, requires = "resume")]
    pub fork: bool,

    /// 放行调用的权限规则,例如 Read "Bash(git status:*)"。默认:所有工具
    #[arg(long, num_args = 1.., value_name = "RULE")]
    pub allowed_tools: Vec<String>,

    /// 拒绝调用的权限规则(压过放行规则)
    #[arg(long, num_args = 1.., value_name = "RULE")]
    pub disallowed_tools: Vec<String>,

    /// 模型跑满这么多轮就停
    #[arg(long)]
    pub max_turns: Option<u32>,

    #[command(flatten)]
    pub model: ModelArg,

    #[command(flatten)]
    pub thinking: ThinkingArg,

    /// 打印一个 JSON 对象,而不是流式文本
    #[arg(long)]
    pub json: bool,

    /// 不把 CLAUDE.md / AGENTS.md 放进系统提示(也可以设 FLOWER_MEMORY=off)
    #[arg(long)]
    pub no_memory: bool,

    #[command(flatten)]
    pub sandbox: SandboxArgs,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub accept_settings: AcceptSettingsArg,
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
            &self.accept_settings,
        ]);
        flags.no_memory = self.no_memory;
        flags
    }
}

#[derive(Debug, Args)]
pub struct StateArgs {
    /// 打印 JSON
    #[arg(long)]
    pub json: bool,

    /// 也列出项目约定装载了什么:记忆文件、设置文件、权限规则、hooks
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

#[derive(Debug, Args)]
pub struct RewindArgs {
    /// 回到哪个检查点:编号(`flower rewind` 列出),或步骤名(`干活` = 它第一次尝试之前,`干活#round2` = 那次尝试之前)。不给就列出检查点
    pub point: Option<String>,

    /// 只恢复文件,对话照旧接着
    #[arg(long)]
    pub files_only: bool,

    /// 丢掉上一个检查点之后 flower 之外的改动(它们先存成一个检查点,还能找回)
    #[arg(long)]
    pub discard: bool,

    /// 不问,直接回退(标准输入不是终端时本来就不问)
    #[arg(short = 'y', long)]
    pub yes: bool,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub run_key: RunKeyArg,
}

impl RewindArgs {
    pub fn flags(&self) -> Flags {
        flags_of(&[&self.run_dir, &self.store, &self.run_key])
    }
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// 从哪个检查点算起(编号或步骤名,同 `flower rewind`)
    pub point: String,

    #[command(flatten)]
    pub run_dir: RunDirArg,

    #[command(flatten)]
    pub store: StoreArg,

    #[command(flatten)]
    pub run_key: RunKeyArg,
}

impl DiffArgs {
    pub fn flags(&self) -> Flags {
        flags_of(&[&self.run_dir, &self.store, &self.run_key])
    }
}
