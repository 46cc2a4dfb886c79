//! flower's default pipeline: 确认需求 → 设定目标 → 干活, with a judge gating 干活.
//!
//! Each step leaves its output in a file (`notes/需求.md`, `notes/目标.md`, the work in
//! the workspace); transcripts are not the backup. Frozen steps are skipped: a complete
//! brief skips 确认需求, a non-empty checklist skips 设定目标 (unless the user said
//! something on waking, which re-derives it so the judge judges the new request too).

use super::gate::{Gate, Verdict};
use super::{Context, Prompt, Step, Workflow};
use crate::continuity::manifest::judge_name;
use crate::continuity::notes;
use crate::continuity::runtime::Runtime;
use crate::engine::{AgentSpec, SessionStart};
use crate::future::BoxFuture;
use crate::tools::names::{ASK_USER, BASH, EDIT, GLOB, GREP, READ, SKILL, TASK, WRITE};
use crate::transcript::tools::{WEB_FETCH, WEB_SEARCH};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const CLARIFY: &str = "确认需求";
pub const SET_GOAL: &str = "设定目标";
pub const WORK: &str = "干活";

/// Said to the clarifier when its step resumes after a crash: continue the unfinished
/// clarification, do not start over.
pub const CLARIFY_RESUME: &str = "接着刚才那次没问完的需求确认继续 —— 不是重新开始。已经问过、答过的不要再问;还缺什么就接着问,都清楚了就把 notes/需求.md 写完整。";

/// Said to the coordinator when 干活 resumes and the user said nothing new.
pub const WORK_RESUME: &str = "接着上次的活继续。先看一眼工作区里已经落盘的东西和 notes/ 下的确认书、清单,从上次停下的地方接着做,不要重头来过。";

/// Work rounds per wake when `--rounds` is not given: the first round plus two more
/// after a failed verdict.
pub const DEFAULT_ROUNDS: u32 = 3;

/// How the pipeline is set up for this process.
#[derive(Debug, Clone)]
pub struct FlowerOptions {
    /// The task, on a first run (sent to the clarifier).
    pub request: Option<String>,
    /// What the user said on waking (or said before and is not finished with): the
    /// prompt of the resumed 干活.
    pub utterance: Option<String>,
    /// Re-derive 目标.md even though it is there: something was said on waking and
    /// the checklist does not cover it yet.
    pub rederive: bool,
    /// The run directory whose `said.json` records what was said: once 目标.md is
    /// re-derived it is marked so ([`notes::Said::mark_derived`]).
    pub said_in: Option<crate::run_dir::RunDir>,
    /// Total 干活 rounds this wake (the judge's budget).
    pub rounds: u32,
    /// Whether someone can answer the clarifier's questions (stdin is a terminal).
    pub interactive: bool,
    /// The judge's effort; `None`: the run's.
    pub judge_effort: Option<crate::model::Effort>,
}

impl Default for FlowerOptions {
    fn default() -> Self {
        FlowerOptions {
            request: None,
            utterance: None,
            rederive: false,
            said_in: None,
            rounds: DEFAULT_ROUNDS,
            interactive: false,
            judge_effort: None,
        }
    }
}

const CLARIFIER: &str = "你是需求确认者。你的唯一产出是 notes/需求.md,一份需求确认书。\n\
它必须有四段,每段一个二级标题,都不能空:`## 目标`、`## 范围`、`## 约束`、`## 验收`。\n\
- 先读工作区(Read/Glob/Grep),弄清已经有什么。\n\
- 有拿不准、会影响做法的地方,用 AskUser 一次问一件事,并给出你的建议答案让人可以直接确认。问题要少而准。\n\
- 如果 AskUser 说没有人能回答,就不要再问:按最合理的理解定下来,把假设写进 `## 约束`。\n\
- 确认书写完整后,用一两句话说明你定下了什么,然后结束。不要动工作区里别的文件。\n\
你能用的工具:Read、Glob、Grep、AskUser,以及只用于 notes/ 下文件的 Write、Edit。其余工具对你不开放,调用会被拒绝。";

const GOAL_SETTER: &str = "你是目标设定者。读需求确认书,推导一份陌生人也能逐条验证的判定清单,写进 notes/目标.md。\n\
- 每条一行,格式 `- [ ] …`,一条只查一件事,写清楚怎么验(跑什么命令、看哪个文件、期望什么结果)。\n\
- 覆盖确认书的 `## 验收` 和 `## 唤醒时追加` 里的每一件事;不要加确认书里没有的要求。\n\
- 整个文件重写,不要保留旧清单里已经不适用的条目。写完就结束。\n\
你能用的工具:Read、Glob、Grep,以及只用于 notes/ 下文件的 Write、Edit。其余工具对你不开放,调用会被拒绝。";

const COORDINATOR: &str = "你是协调者,负责把需求确认书里的事做完,达到判定清单的每一条。\n\
- 你自己不写代码:用 Task 把具体的活派给子代理,prompt 里写清楚它需要知道的一切(它看不到这段对话)。互不相干的几件可以在同一条回复里一起派,它们同时跑;每件写明它只改哪些文件,两件不碰同一个文件。\n\
- 子代理交回后,自己用 Read/Glob/Grep 和只读的 git 命令检查结果,不对就再派。\n\
- 决定、进度和没解决的问题写进工作区的文件,不要只留在对话里。\n\
- 判定清单的每一条都做到了,就简短总结做了什么,然后结束。\n\
你能用的工具:Read、Glob、Grep、Task、WebSearch、WebFetch,只用于 notes/ 下文件的 Write、Edit,以及 Bash 里只读的 git status、git diff、git log、git show。其余工具和命令对你不开放,调用会被拒绝。";

const WORKER: &str = "你是协调者派来的子代理。在工作区里把交给你的这件事做完,用你有的工具,做完自己检查一遍(能跑测试就跑)。\n\
最后简短报告:做了什么、改了哪些文件、验证结果、还有什么没做。协调者只能看到这份报告。\n\
你能用的工具:Read、Write、Edit、Glob、Grep、Bash、WebSearch、WebFetch。Task 和 AskUser 对你不开放,调用会被拒绝。";

const JUDGE: &str = "你是判定者。你只根据工作区的实际状态判定,不听任何人的解释。\n\
- 逐条读 notes/目标.md 的判定清单,每一条都亲自去验:读文件、跑命令(可以跑测试),给出判定和证据(命令及输出、文件及行)。\n\
- 不要修改任何文件。\n\
- 最后一行只写结论:全部达成写 `判定:通过`,否则写 `判定:未通过`,并在前面列出没达成的条目和原因。\n\
你能用的工具:Read、Glob、Grep,以及用来跑命令和测试的 Bash。Write、Edit、Task、AskUser、WebSearch、WebFetch 对你不开放,调用会被拒绝。";

/// The built-in tools every agent of the pipeline is offered, whatever its rules: one
/// tool list, so the prompt cache's prefix (tools, then the memory) is written once per
/// run, not once per role. Each agent's rules refuse what it may not use, and its
/// instructions name what it may. The web tools are client tools here (each call a side
/// request with the API's server tool, `engine/web.rs`), so the rules refuse them too.
pub const PIPELINE_TOOLS: [&str; 11] = [
    READ, WRITE, EDIT, GLOB, GREP, BASH, TASK, ASK_USER, SKILL, WEB_SEARCH, WEB_FETCH,
];

/// The clarifier: reads the workspace, asks through AskUser, writes only the notes.
pub fn clarifier() -> AgentSpec {
    AgentSpec::new("clarifier", CLARIFIER)
        .offer(PIPELINE_TOOLS)
        .allowed_tools([
            READ,
            GLOB,
            GREP,
            ASK_USER,
            SKILL,
            "Write(notes/**)",
            "Edit(notes/**)",
        ])
}

pub fn goal_setter() -> AgentSpec {
    AgentSpec::new("goal-setter", GOAL_SETTER)
        .offer(PIPELINE_TOOLS)
        .allowed_tools([READ, GLOB, GREP, SKILL, "Write(notes/**)", "Edit(notes/**)"])
}

/// The coordinator: delegates through Task; its own Bash is read-only git. It and the
/// workers may search and fetch the web (side requests to the API); the judge may not.
pub fn coordinator() -> AgentSpec {
    AgentSpec::new("coordinator", COORDINATOR)
        .offer(PIPELINE_TOOLS)
        .allowed_tools([
            READ,
            GLOB,
            GREP,
            TASK,
            SKILL,
            WEB_SEARCH,
            WEB_FETCH,
            "Write(notes/**)",
            "Edit(notes/**)",
            "Bash(git status:*)",
            "Bash(git diff:*)",
            "Bash(git log:*)",
            "Bash(git show:*)",
        ])
}

/// The sub-agent the coordinator's Task starts: every file and shell tool.
pub fn worker() -> AgentSpec {
    AgentSpec::new("general-purpose", WORKER)
        .offer(PIPELINE_TOOLS)
        .allowed_tools([
            READ, WRITE, EDIT, GLOB, GREP, BASH, SKILL, WEB_SEARCH, WEB_FETCH,
        ])
}

/// The judge: read-only tools, and Bash to run tests.
pub fn judge() -> AgentSpec {
    AgentSpec::new("judge", JUDGE)
        .offer(PIPELINE_TOOLS)
        .allowed_tools([READ, GLOB, GREP, BASH, SKILL])
}

/// Builds the pipeline for `workspace` (canonical).
pub fn flower_workflow(workspace: &Path, options: &FlowerOptions) -> Workflow {
    let brief = notes::brief_path(workspace);
    let goal = notes::goal_path(workspace);

    let request = options.request.clone().unwrap_or_default();
    let clarify_prompt = format!(
        "用户的诉求:\n\n{request}\n\n{}",
        if options.interactive {
            "有拿不准的地方用 AskUser 问用户。"
        } else {
            "这次没有人能回答问题(不是终端):不要问,把你的假设写进确认书。"
        }
    );
    let brief_for_skip = brief.clone();
    // Resuming a clarification that died: what the user says now is a remark, not a
    // new request.
    let clarify_resume = match options.request.as_deref() {
        Some(said) if !said.trim().is_empty() => {
            format!("{CLARIFY_RESUME}\n\n用户又说了一句:{said}")
        }
        _ => CLARIFY_RESUME.to_string(),
    };
    let clarify = Step::new(CLARIFY, clarifier(), clarify_prompt)
        .resume_prompt(clarify_resume)
        .skip_when(Arc::new(move |_ctx: &Context| {
            notes::read(&brief_for_skip).filter(|text| notes::brief_complete(text))
        }))
        .gate(Arc::new(FileGate::brief(brief.clone())));

    let rederive = options.rederive;
    let brief_for_goal = brief.clone();
    let goal_for_skip = goal.clone();
    let set_goal = Step::new(
        SET_GOAL,
        goal_setter(),
        Prompt::Dynamic(Arc::new(move |_ctx: &Context| {
            let text = notes::read(&brief_for_goal).unwrap_or_default();
            format!("照这份需求确认书(notes/需求.md)推导判定清单,写进 notes/目标.md:\n\n{text}")
        })),
    )
    .skip_when(Arc::new(move |_ctx: &Context| {
        if rederive {
            return None;
        }
        notes::read(&goal_for_skip).filter(|text| notes::count_checks(text) > 0)
    }))
    .gate(Arc::new(FileGate::goal(
        goal.clone(),
        options.said_in.clone(),
    )));

    let (brief_for_work, goal_for_work) = (brief.clone(), goal.clone());
    let work_resume = options
        .utterance
        .clone()
        .unwrap_or_else(|| WORK_RESUME.to_string());
    let work = Step::new(
        WORK,
        coordinator(),
        Prompt::Dynamic(Arc::new(move |_ctx: &Context| {
            let brief = notes::read(&brief_for_work).unwrap_or_default();
            let goal = notes::read(&goal_for_work).unwrap_or_default();
            format!(
                "照这份需求做(notes/需求.md):\n\n{brief}\n\n做完要经得起这份判定清单(notes/目标.md)逐条检验:\n\n{goal}"
            )
        })),
    )
    .resume_prompt(work_resume)
    .gate(Arc::new(GoalGate {
        goal: goal.clone(),
        rounds: options.rounds.max(1),
        effort: options.judge_effort,
    }));

    Workflow::new(vec![clarify, set_goal, work])
}

/// Sends a note-writing step back until its file is there and well-formed. Runs no
/// session, so it costs nothing.
struct FileGate {
    path: PathBuf,
    check: fn(&str) -> bool,
    feedback: &'static str,
    /// Where a pending utterance is recorded: a pass marks it derived.
    said_in: Option<crate::run_dir::RunDir>,
}

impl FileGate {
    fn brief(path: PathBuf) -> Self {
        FileGate {
            path,
            check: notes::brief_complete,
            feedback: "notes/需求.md 还不完整:它必须有 `## 目标`、`## 范围`、`## 约束`、`## 验收` 四段,每段都不能空。把它写完整。",
            said_in: None,
        }
    }

    fn goal(path: PathBuf, said_in: Option<crate::run_dir::RunDir>) -> Self {
        FileGate {
            path,
            check: |text| notes::count_checks(text) > 0,
            feedback: "notes/目标.md 里还没有判定清单:每条一行 `- [ ] …`。把它写出来。",
            said_in,
        }
    }
}

impl Gate for FileGate {
    fn rounds(&self) -> u32 {
        3
    }

    fn check<'a>(
        &'a self,
        _rt: &'a Runtime,
        _step: &'a Step,
        _round: u32,
        _ctx: &'a Context,
    ) -> BoxFuture<'a, Verdict> {
        let done = notes::read(&self.path).is_some_and(|text| (self.check)(&text));
        // A failed mark only means the next run derives the checklist once more.
        if done && let Some(dir) = &self.said_in {
            let _ = notes::Said::mark_derived(dir);
        }
        Box::pin(async move {
            if done {
                Verdict::Pass
            } else {
                Verdict::Fail {
                    feedback: self.feedback.to_string(),
                }
            }
        })
    }
}

/// The judge (`with_goal`): after each 干活 round, a *new* session reads 目标.md and
/// checks the workspace. It is never a step and never resumed: every round and every
/// wake, a fresh pair of eyes that does not know how hard the worker tried.
pub struct GoalGate {
    pub goal: PathBuf,
    pub rounds: u32,
    /// The judge's effort; `None`: the run's.
    pub effort: Option<crate::model::Effort>,
}

/// Whether the judge's run failed because its context did not fit the window. The judge
/// never hands off (it is fresh every round): such a round is a clear failed verdict.
fn judge_overflowed(result: &crate::continuity::manifest::StepResult) -> bool {
    result.met(crate::model::classify::ErrorKind::ContextWindowFull)
}

/// The verdict line the judge ends with.
pub const PASS_LINE: &str = "判定:通过";
pub const FAIL_LINE: &str = "判定:未通过";

/// Whether the run's last word on 干活 was the judge passing it: the last manifest row of
/// 干活 (its attempts and its judge rounds) is a judge round that ran and passed. A
/// wake after it with nothing to say has nothing to do.
pub fn judge_passed(rows: &[crate::continuity::manifest::ManifestRow]) -> bool {
    use crate::continuity::attempt::{AttemptKind, AttemptName};
    rows.iter()
        .rev()
        .map(|row| (AttemptName::parse(&row.result.step), &row.result))
        // A rewind's row ends the judge's word: the work continues from the rewind.
        .find(|(name, result)| {
            name.step() == WORK
                || result.error.as_deref() == Some(crate::continuity::rewind::REWOUND)
        })
        .is_some_and(|(name, result)| {
            matches!(name.kind(), AttemptKind::Judge(_)) && result.ok && parse_verdict(&result.text)
        })
}

/// Reads the judge's verdict from its final text: the last line that carries one.
pub fn parse_verdict(text: &str) -> bool {
    text.lines()
        .rev()
        .map(|line| line.replace('\u{FF1A}', ":").replace(['`', '*'], ""))
        .find(|line| line.contains("判定:"))
        .is_some_and(|line| line.contains("通过") && !line.contains("未通过"))
}

impl Gate for GoalGate {
    fn rounds(&self) -> u32 {
        self.rounds
    }

    fn check<'a>(
        &'a self,
        rt: &'a Runtime,
        step: &'a Step,
        round: u32,
        _ctx: &'a Context,
    ) -> BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let goal = notes::read(&self.goal).unwrap_or_default();
            let prompt = format!(
                "判定清单(notes/目标.md):\n\n{goal}\n\n逐条到工作区里验证,最后一行写 `{PASS_LINE}` 或 `{FAIL_LINE}`。"
            );
            let name = judge_name(&step.name, round);
            rt.emit(crate::engine::Event::StepStarted {
                step: name.clone(),
                index: 0,
                total: 0,
                resumed: false,
                woke: 0,
            });
            let mut judge = judge();
            judge.effort = self.effort;
            let result = rt.run_step(&name, &judge, &prompt, SessionStart::New).await;
            if result.ok && parse_verdict(&result.text) {
                return Verdict::Pass;
            }
            let findings = if result.ok {
                result.text
            } else if judge_overflowed(&result) {
                format!(
                    "判定者的上下文超出了模型窗口,这一轮没能判完({}),按未通过处理。把工作区里无关的大文件、大输出收一收,判定者才看得完。",
                    result.error.unwrap_or_default()
                )
            } else {
                format!(
                    "判定者这一轮没能跑完({}),按未通过处理。",
                    result.error.unwrap_or_default()
                )
            };
            Verdict::Fail {
                feedback: format!(
                    "判定没过。判定者的意见:\n\n{findings}\n\n照这些意见把没做到的做完,做完再结束。"
                ),
            }
        })
    }
}
