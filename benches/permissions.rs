//! Permission check time per command over the adversarial corpus, and the cost of
//! starting a sandboxed Bash command versus an unsandboxed one.
//!
//! `cargo bench --bench permissions`
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/data/bash_corpus.rs"]
#[allow(dead_code)]
mod data;

use flower::engine::permissions::Permissions;
use flower::tools::sandbox::{self, SandboxPolicy, Support};
use flower::tools::{ProcessGroups, Tool, ToolContext, bash::Bash};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn checks() {
    let cases = data::corpus();
    let mut commands: Vec<String> = cases.into_iter().map(|c| c.cmd).collect();
    // Plain commands too: what an agent mostly sends.
    for c in [
        "git status",
        "git diff --stat HEAD~1 -- src",
        "cargo test --test it -- permissions:: 2>&1",
        "ls -la src && wc -l src/*.rs",
        "npm run build | tail -n 20",
    ] {
        commands.push(c.to_string());
    }
    let rule_sets: [(&str, &[&str], &[&str]); 3] = [
        (
            "allow prefix",
            &["Bash(git status:*)", "Bash(echo:*)", "Bash(cargo test:*)"],
            &[],
        ),
        ("allow wildcard", &["Bash(git *)", "Bash(npm run *)"], &[]),
        (
            "deny",
            &[],
            &["Bash(rm:*)", "Bash(curl:*)", "Bash(git push:*)"],
        ),
    ];
    println!(
        "permission check per command ({} commands, 20 rounds):",
        commands.len()
    );
    println!(
        "{:<16} {:>10} {:>10} {:>10}",
        "rules", "median µs", "p99 µs", "max µs"
    );
    for (name, allow, deny) in rule_sets {
        let s = |v: &[&str]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
        let p = Permissions::new(&s(allow), &s(deny)).unwrap();
        let mut times = Vec::new();
        for _ in 0..20 {
            for c in &commands {
                let input = flower::transcript::ToolInput::of(&json!({ "command": c })).unwrap();
                let t = Instant::now();
                std::hint::black_box(p.check("Bash", &input, Path::new("/ws")));
                times.push(t.elapsed());
            }
        }
        times.sort();
        println!(
            "{:<16} {:>10.1} {:>10.1} {:>10.1}",
            name,
            us(percentile(&times, 0.5)),
            us(percentile(&times, 0.99)),
            us(*times.last().unwrap())
        );
    }
}

async fn spawn_times(sandbox: SandboxPolicy, ws: &Path, n: usize) -> Vec<Duration> {
    let ctx = ToolContext {
        workspace: ws.to_path_buf(),
        run_dir: ws.to_path_buf(),
        cancel: CancellationToken::new(),
        processes: ProcessGroups::new(),
        sandbox,
        env: Default::default(),
    };
    let input = json!({ "command": "true" });
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = Bash
            .call(&flower::content::ToolInput::of_tree(&input), &ctx)
            .await;
        times.push(t.elapsed());
        assert!(!out.is_error, "{}", out.content);
    }
    times.sort();
    times
}

fn sandbox_cost() {
    if let Support::Missing(why) = sandbox::support() {
        println!("sandbox start cost: skipped, this kernel has no Landlock ({why})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 200;
    let plain = SandboxPolicy::default();
    let landlock_only = SandboxPolicy {
        protect_git: false,
        ..SandboxPolicy::standard()
    };
    let standard = SandboxPolicy::standard();
    let offline = SandboxPolicy {
        network: false,
        ..SandboxPolicy::standard()
    };
    println!("\nstarting `bash -c true` through the Bash tool ({n} runs each):");
    println!("{:<34} {:>10} {:>12}", "sandbox", "median ms", "extra ms");
    // Warm up.
    rt.block_on(spawn_times(plain.clone(), &ws, 20));
    let base = percentile(&rt.block_on(spawn_times(plain, &ws, n)), 0.5);
    println!(
        "{:<34} {:>10.2} {:>12}",
        "none",
        base.as_secs_f64() * 1e3,
        "-"
    );
    for (name, policy) in [
        ("landlock", landlock_only),
        ("landlock + git mounts (default)", standard),
        ("landlock + git mounts + no network", offline),
    ] {
        let m = percentile(&rt.block_on(spawn_times(policy, &ws, n)), 0.5);
        println!(
            "{:<34} {:>10.2} {:>12.2}",
            name,
            m.as_secs_f64() * 1e3,
            (m.as_secs_f64() - base.as_secs_f64()) * 1e3
        );
    }
}

fn main() {
    checks();
    sandbox_cost();
}
