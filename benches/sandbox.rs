//! The sandbox's cost per Bash call: `bash -c true` through the Bash tool with the
//! sandbox off and on (namespaces joined, PID namespace and fresh /proc, Landlock,
//! capabilities, seccomp), the median difference being the cost; and the parent-side
//! preparation and the one-off namespace creation on their own. Goal: ≤ 5 ms median.
//!
//! `cargo bench --bench sandbox`
#![allow(clippy::disallowed_macros)] // figures are printed
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flower::tools::sandbox::{self, SandboxPolicy, Support};
use flower::tools::{ProcessGroups, Tool, ToolContext, bash::Bash};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn calls(sandbox: SandboxPolicy, ws: &Path, n: usize) -> Vec<Duration> {
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
    times
}

fn main() {
    if let Support::Missing(why) = sandbox::support() {
        println!("sandbox cost: skipped, this kernel has no Landlock ({why})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(&ws)
        .status();
    if !git.is_ok_and(|s| s.success()) {
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "").unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = 300;
    // The run directory inside the workspace, protected as the engine sets it.
    std::fs::create_dir_all(ws.join("runs")).unwrap();
    let mut standard = SandboxPolicy::standard();
    standard.protect.record = Some(ws.join("runs"));
    let offline = SandboxPolicy {
        network: false,
        ..standard.clone()
    };
    let judge = SandboxPolicy {
        workspace_writable: false,
        ..standard.clone()
    };
    // The same without the protected paths (every one opted out, no record): their
    // share of the cost, measured beside the rest under the same load.
    let mut unprotected = standard.clone();
    unprotected.protect.record = None;
    unprotected.protect.allowed = flower::tools::protected::candidates(&standard, &ws, None)
        .into_iter()
        .map(|t| t.path)
        .collect();

    println!("parent side, per call (median of {n}; the sweep after the command apart):");
    for (name, policy) in [
        ("standard", &standard),
        ("no network", &offline),
        ("unprotected", &unprotected),
    ] {
        // The first prepare makes the namespaces; later ones join them.
        sandbox::forget_namespaces();
        let t = Instant::now();
        let first = sandbox::prepare(policy, &ws).unwrap();
        let made = t.elapsed();
        drop(first);
        let mut sweeps = Vec::with_capacity(n);
        let times: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                let prepared = std::hint::black_box(sandbox::prepare(policy, &ws).unwrap());
                let took = t.elapsed();
                let sweep = prepared.map(|p| p.sweep()).unwrap_or_default();
                let t = Instant::now();
                std::hint::black_box(sweep.run());
                sweeps.push(t.elapsed());
                took
            })
            .collect();
        println!(
            "  {name:<12} prepare {:>7.3} ms   sweep {:>7.3} ms   (first, making the namespaces: {:.2} ms)",
            ms(median(times)),
            ms(median(sweeps)),
            ms(made)
        );
    }

    println!("\n`bash -c true` through the Bash tool, median of {n} (after 30 warm-up calls):");
    println!("  {:<28} {:>10} {:>12}", "sandbox", "median ms", "cost ms");
    rt.block_on(calls(SandboxPolicy::default(), &ws, 30));
    let base = median(rt.block_on(calls(SandboxPolicy::default(), &ws, n)));
    println!("  {:<28} {:>10.2} {:>12}", "off", ms(base), "-");
    for (name, policy) in [
        ("on (default)", standard),
        ("on, --no-network", offline),
        ("on, read-only workspace", judge),
        ("on, protected paths off", unprotected),
    ] {
        rt.block_on(calls(policy.clone(), &ws, 30));
        let m = median(rt.block_on(calls(policy, &ws, n)));
        println!("  {:<28} {:>10.2} {:>12.2}", name, ms(m), ms(m) - ms(base));
    }
}
