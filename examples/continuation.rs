//! The spec's minimal example (接续.md, 怎么用), in Rust.
//!
//! Run it twice in the same directory: the first run prints `1`, the second `2`, and
//! the `取词` step has the same session id both times: it continued the session of the
//! last run instead of opening a new one.
//!
//! ```sh
//! echo 向日葵 > seed.txt
//! cargo run --example continuation
//! cargo run --example continuation
//! ```
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::{AgentSpec, Run, Settings, Step, Workflow};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let terse = AgentSpec::new("terse", "回答极简,一行以内,不解释不寒暄。")
        .allowed_tools(["Read", "Glob"])
        .max_turns(4);
    // continuous is true by default
    let wf = Workflow::new(vec![Step::new(
        "取词",
        terse,
        "读 seed.txt,只回文件里那个词。",
    )]);
    // The library reads no environment by itself: the settings are resolved here, once
    // (workspace: the current directory; run_dir: "runs", relative to it).
    let settings = Settings::from_env()?;
    let run = Run::open(&settings)?;
    let ctx = wf.run(run.runtime()).await;
    run.close();
    let ctx = ctx?;
    println!("{}", ctx.woke); // which wake this is; 1 on the first run
    println!("{}", serde_json::to_string(&ctx.sessions)?); // {"取词": "<session_id>"}
    Ok(())
}
