//! The Rust twin of the Python package's per-turn bench (`crates/flower-py/bench`): one
//! step of up to N turns (`turns N`, the fake model calls a tool N-1 times, then
//! answers), in a new session, timed from the first request to the step's end.
//!
//! ```sh
//! cargo run --example turns -- 100
//! ```
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::{AgentSpec, Run, Settings, Step, Workflow};
use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let turns: u32 = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100);
    let agent = AgentSpec::new("reader", "读文件。")
        .allowed_tools(["Read"])
        .max_turns(turns);
    let wf = Workflow::new(vec![Step::new("读", agent, "读 seed.txt")]).continuous(false);
    let settings = Settings::from_env()?;
    let run = Run::open(&settings)?;
    let started = Instant::now();
    let ctx = wf.run(run.runtime()).await;
    let elapsed = started.elapsed();
    run.close();
    let ctx = ctx?;
    let turns_done: u32 = ctx.results.iter().map(|r| r.num_turns).sum();
    println!("{} {turns_done}", elapsed.as_secs_f64());
    Ok(())
}
