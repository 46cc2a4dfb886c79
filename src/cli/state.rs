//! `flower state`: the read-only wake probe, for people and scripts.

use super::args::StateArgs;
use flower::wake_state;
use std::process::ExitCode;

pub fn run(args: StateArgs) -> anyhow::Result<ExitCode> {
    let state = wake_state(".", &args.run_dir);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&state)?);
        return Ok(ExitCode::SUCCESS);
    }
    let brief = match (&state.brief, state.waking) {
        (Some(_), true) => "已确认(四段齐全)",
        (Some(_), false) => "不完整",
        (None, _) => "没有",
    };
    println!("接得上:{}", if state.waking { "是" } else { "否" });
    println!("需求.md:{brief}");
    println!("目标:{} 条", state.checks);
    println!("已唤醒:{} 次", state.woke);
    for (step, session) in &state.steps {
        println!("步骤 {step}:{session}");
    }
    Ok(ExitCode::SUCCESS)
}
