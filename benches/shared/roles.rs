//! The prompt cache across the pipeline's roles (#46 item 1), against the fake's cache
//! model fed the real request bytes: the run of `support::roles` (30 coordinator turns,
//! two handoffs, a SIGKILL at the coordinator's turn 15 and a wake).

use crate::child::flower_cmd;
use crate::support::roles::{self, COORDINATOR_TURNS, HANDOFFS, KILLED_AT, Shares};

/// The judge's refused calls in this run before #46 (the goal: no more).
const JUDGE_DENIED_BEFORE: usize = 0;

/// Dollars at list prices for `read`, `written` and `uncached` prompt tokens.
fn dollars(model: &str, read: u64, written: u64, uncached: u64) -> f64 {
    let usage = flower::model::Usage {
        input_tokens: uncached,
        cache_creation_input_tokens: written,
        cache_read_input_tokens: read,
        ..Default::default()
    };
    flower::model::prices::table()
        .cost_usd(model, &usage)
        .unwrap_or(0.0)
}

pub fn cache_across_roles(flower: &str) {
    for (label, memory, goal) in [
        ("a 32 KB CLAUDE.md", Some(roles::big_memory()), 0.96),
        ("no CLAUDE.md", None, 0.94),
    ] {
        let home = tempfile::tempdir().expect("temp dir");
        let dir = home.path().join("proj");
        std::fs::create_dir_all(&dir).expect("project dir");
        let requests = roles::run(&dir, memory.as_deref(), &|server, args| {
            let mut cmd = flower_cmd(flower, server, &dir, args);
            cmd.env("HOME", home.path());
            cmd
        });
        let shares = Shares::of(&requests);
        let share = shares.share();
        let model = requests[0].body["model"].as_str().unwrap_or_default();
        let (mut read, mut written, mut uncached) = (0, 0, 0);
        for t in shares.parts.values() {
            (read, written, uncached) = (read + t.read, written + t.written, uncached + t.uncached);
        }
        let cost = dollars(model, read, written, uncached);
        // The same prompt tokens with the goal's share read and the rest written.
        let prompt = shares.prompt;
        let at_goal_read = (prompt as f64 * goal) as u64;
        let at_goal = dollars(model, at_goal_read, prompt - at_goal_read, 0);
        let uncached_all = dollars(model, 0, 0, prompt);
        println!();
        println!(
            "prompt cache across the roles, {label}: {COORDINATOR_TURNS} coordinator turns, {} of {HANDOFFS} handoffs, SIGKILL at its turn {KILLED_AT} and a wake ({} requests, {prompt} prompt tokens as the fake counts them):",
            shares.handoffs,
            requests.len(),
        );
        println!(
            "  cache reads {:.1} % of prompt tokens; goal >= {:.0} %: {}",
            share * 100.0,
            goal * 100.0,
            crate::verdict(share >= goal)
        );
        println!(
            "  written by role (goal: the tools and the memory written once, by the run's first request):"
        );
        for (part, t) in &shares.parts {
            println!(
                "    {}: {} requests, wrote {}, read {}, uncached {} tokens",
                part.label(),
                t.requests,
                t.written,
                t.read,
                t.uncached
            );
        }
        println!(
            "  the prompt's cost at list prices ({model}, output left out): ${cost:.4} per pipeline; goal <= ${at_goal:.4} (these tokens at the goal's share; uncached: ${uncached_all:.4}): {}",
            crate::verdict(cost <= at_goal)
        );
        println!(
            "  the judge's refused calls: {}; goal: {JUDGE_DENIED_BEFORE}, as before #46: {}",
            shares.judge_denied,
            crate::verdict(shares.judge_denied == JUDGE_DENIED_BEFORE)
        );
    }
}
