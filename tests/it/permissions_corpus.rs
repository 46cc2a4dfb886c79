//! An adversarial corpus through the real binary: a few hundred commands that each
//! hide `touch <marker>` behind something an allow rule might be fooled by, replayed
//! by a scripted model through `flower once` under several rule sets. Under a bare
//! `Bash` rule (the control) bash really creates the markers; under every other rule
//! set no marker may exist afterwards. Each rule set is one `flower once` run with
//! every command as a tool call of one turn.

use crate::support;
use crate::support::tool_input;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use support::{FakeServer, Reply};

#[path = "../data/bash_corpus.rs"]
mod data;
use crate::support::Flower;
use data::{Case, HARMLESS, corpus};

/// Runs every case as a Bash call of one turn in a fresh workspace; returns the
/// workspace and the tool results.
fn replay(cases: &[Case], extra: &[&str]) -> (tempfile::TempDir, Vec<Value>) {
    let ws = tempfile::tempdir().unwrap();
    // A repository, so that `git status` succeeds and what follows `&&` runs.
    let init = Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(ws.path())
        .status()
        .unwrap();
    assert!(init.success());
    let mut reply = Reply::blocks(vec![]);
    for c in cases {
        reply = reply.then_tool_use("Bash", json!({ "command": c.cmd, "timeout": 20000 }));
    }
    let server = FakeServer::start(vec![reply.stop_reason("tool_use"), Reply::text("done")]);
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(ws.path())
        .env("FLOWER_MAX_ATTEMPTS", "1")
        // The rules alone: with the sandbox on, an agent without Write rights gets a
        // read-only workspace and no marker could appear, whatever the rules let through.
        .args(["once", "run them", "--json", "--no-sandbox"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let results = requests[1].tool_results();
    assert_eq!(results.len(), cases.len());
    (ws, results)
}

fn created(ws: &Path, cases: &[Case]) -> Vec<usize> {
    (0..cases.len())
        .filter(|&i| ws.join(&cases[i].marker).exists())
        .collect()
}

#[test]
fn no_rule_set_lets_a_hidden_command_run() {
    let cases = corpus();
    assert!(cases.len() >= 400, "{}", cases.len());

    // The control: with the whole tool allowed, bash really runs every hidden command:
    // each case's effect (its marker) is seen, so each case tests something.
    let (ws, _) = replay(&cases, &["--allowed-tools", "Bash"]);
    let effective = created(ws.path(), &cases);
    let inert: Vec<&str> = (0..cases.len())
        .filter(|i| !effective.contains(i))
        .map(|i| cases[i].cmd.as_str())
        .collect();
    eprintln!(
        "corpus report: {} cases, {} with their effect seen under a bare Bash rule",
        cases.len(),
        effective.len()
    );
    assert!(
        inert.is_empty(),
        "cases without an effect under a bare Bash rule:\n{}",
        inert.join("\n")
    );

    let rule_sets: [(&[&str], &[&str]); 5] = [
        (&["Bash(git status)"], &[]),
        (&["Bash(git status:*)", "Bash(echo:*)", "Bash(cat:*)"], &[]),
        (&["Bash(git *)", "Bash(echo *)", "Bash(cat *)"], &[]),
        (&["Bash(git:*)", "Bash(echo:*)", "Read"], &["Bash(rm:*)"]),
        (&[], &["Bash(touch:*)"]),
    ];
    for (allow, deny) in rule_sets {
        let mut args: Vec<&str> = Vec::new();
        if !allow.is_empty() {
            args.push("--allowed-tools");
            args.extend(allow);
        }
        if !deny.is_empty() {
            args.push("--disallowed-tools");
            args.extend(deny);
        }
        let (ws, results) = replay(&cases, &args);
        let leaked: Vec<String> = created(ws.path(), &cases)
            .into_iter()
            .map(|i| format!("{:?} -> {}", cases[i].cmd, results[i]["content"]))
            .collect();
        assert!(
            leaked.is_empty(),
            "allow={allow:?} deny={deny:?}: hidden commands ran:\n{}",
            leaked.join("\n")
        );
    }
}

/// The over-denial report: harmless commands refused under the allow rules that name
/// them. The parser proves most safe; the rest (an assignment prefix, loops, file
/// redirections) only a bare `Bash` rule allows.
#[test]
fn over_denial_report() {
    use flower::engine::permissions::{Decision, Permissions};
    let mut refused = Vec::new();
    for (cmd, allow) in HARMLESS {
        let rules: Vec<String> = allow.iter().map(|r| r.to_string()).collect();
        let p = Permissions::new(&rules, &[]).unwrap();
        if let Decision::Deny { .. } = p.check(
            "Bash",
            &tool_input(&json!({ "command": cmd })),
            Path::new("/ws"),
        ) {
            refused.push(*cmd);
        }
    }
    eprintln!(
        "corpus report: over-denied {} of {} harmless commands:\n  {}",
        refused.len(),
        HARMLESS.len(),
        refused.join("\n  ")
    );
    // The ones the parser cannot prove safe today; a change that refuses more fails.
    assert!(refused.len() <= 3, "{refused:#?}");
    for proven in [
        "time git status",
        "ls ./*",
        "cat <<'EOF'\nhello $x `y`\nEOF",
        "echo $'a;b'",
        // Issue 40: a quoted here-document in a quoted substitution (its commands
        // allowed on their own), numbers-only arithmetic, a subshell, a group.
        "git commit -m \"$(cat <<'EOF'\nmsg\nEOF\n)\"",
        "echo $((1+2*3))",
        "(git status)",
        "{ git status; }",
        "(cd src && ls)",
        // Brace expansion of plain parts makes data; `&` runs a matched command.
        "ls {a,b}",
        "git status &",
    ] {
        assert!(!refused.contains(&proven), "{proven:?} is refused");
    }
}
