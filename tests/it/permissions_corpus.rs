//! An adversarial corpus through the real binary: a few hundred commands that each
//! hide `touch <marker>` behind something an allow rule might be fooled by, replayed
//! by a scripted model through `flower once` under several rule sets. Under a bare
//! `Bash` rule (the control) bash really creates the markers; under every other rule
//! set no marker may exist afterwards. Each rule set is one `flower once` run with
//! every command as a tool call of one turn.

use crate::support;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use support::{FakeServer, Reply};

/// Templates; `T` is replaced by the hidden command (`touch <marker>`).
const TEMPLATES: &[&str] = &[
    // The forms that beat the hand-written lexer (issue 13).
    "git status <<EOF $(git status\nT\nEOF\n)",
    "git status <<EOF\nx\nEO\\\nF\nT\nEOF",
    "git status $'\\c'; T; #'",
    "git status \"$\\\n(T)\"",
    "for OPTIND in 'a[$(T)]'; do git status; done",
    "for x do git status; done\nT",
    "bash -c -- 'T'",
    "env -S'T'",
    "env --split-string='T'",
    "nice -n 1 nice -n 1 nice -n 1 nice -n 1 nice -n 1 nice -n 1 nice -n 1 T",
    "timeout -k 1 -s TERM --foreground --preserve-status 50 T",
    // Lists and pipelines.
    "git status; T",
    "git status;T",
    "git status && T",
    "git status&&T",
    "git status || T",
    "git status | T",
    "git status |& T",
    "git status & T",
    "git status\nT",
    "git status # x\nT",
    "git status \\\n; T",
    // Substitutions everywhere.
    "git status $(T)",
    "git status `T`",
    "git status \"$(T)\"",
    "git status \"`T`\"",
    "git status \"a $(T) b\"",
    "git status $(echo `T`)",
    "git status <(T)",
    "git status >(T)",
    "git status ${x:-$(T)}",
    "git status \"${x:-$(T)}\"",
    "git status ${x:-'}'$(T)'}'}",
    "git status $((0 $(T)))",
    "echo $(T)",
    "echo \"$(T)\"",
    "X=$(T) git status",
    "GIT_DIR=$(T) git status",
    "git status --$(T)",
    "git status -- \"$(T)\"x",
    // Here-documents and strings.
    "git status <<EOF\n$(T)\nEOF",
    "git status <<EOF\n`T`\nEOF",
    "git status <<-EOF\n\t$(T)\n\tEOF",
    "git status <<< $(T)",
    "git status <<< \"$(T)\"",
    "cat <<EOF && (\nT\n)\nbody\nEOF",
    "git commit -m \"$(cat <<EOF\nmsg $(T)\nEOF\n)\"",
    // Redirections that run code.
    "git status >&\"\\$(T)\"",
    "git status >& '$(T)'",
    "git status > \"$(T)\"",
    "git status 2> >(T)",
    // Values evaluated as code.
    "for x in 'a[$(T)]'; do echo $((x)); done",
    "for x in 'a[$(T)]'; do ((x)); done",
    "for x in 'a[$(T)]'; do echo ${arr[x]}; done",
    "for x in 'a[$(T)]'; do echo ${s:x}; done",
    "for x in 'a[$(T)]'; do [[ 1 -eq x ]]; done",
    "for x in '$(T)'; do echo ${x@P}; done",
    "x='a[$(T)]'; echo ${!x}",
    "printf -v 'a[$(T)]' x",
    "read 'a[$(T)]' <<< x",
    "test -v 'a[$(T)]'",
    "[[ -v a[$(T)] ]]",
    "declare 'a[$(T)]=1'",
    "declare -i n='a[$(T)]'",
    "let 'a[$(T)]'",
    "unset 'a[$(T)]'",
    "PS4='$(T)' bash -xc 'git status'",
    "(( a[$(T)] ))",
    // Code runners.
    "eval T",
    "eval 'T'",
    "git status; eval \"T\"",
    "bash -c 'T'",
    "sh -c \"T\"",
    "bash -lc 'T'",
    "trap 'T' EXIT",
    "git status; trap 'T' EXIT",
    "echo x | xargs -I{} T",
    "find . -maxdepth 0 -exec T \\;",
    "exec T",
    "command T",
    "builtin eval T",
    "nohup T",
    "env T",
    "env FOO=1 T",
    "time T",
    "coproc T",
    "! T",
    // Compound commands and functions.
    "{ T; }",
    "(T)",
    "if true; then T; fi",
    "if git status; then git status; else T; fi",
    "while T; do break; done",
    "until T; do break; done",
    "case x in x) T;; esac",
    "git() { T; }; git status",
    "f() { T; }; f",
    "function f { T; }; f",
    "for f in a; do T; done",
    "select x in a; do T; break; done < /dev/null",
    // Program names spelled differently.
    "/usr/bin/env T",
    "$(echo T)",
    "`echo T`",
];

/// The hidden command, spelled several ways, each `touch`ing `marker`.
fn hidden(spelling: usize, marker: &str) -> String {
    match spelling {
        0 => format!("touch {marker}"),
        1 => format!("touch ./{marker}"),
        2 => format!("/usr/bin/touch {marker}"),
        _ => format!("'touch' {marker}"),
    }
}

struct Case {
    cmd: String,
    marker: String,
}

fn corpus() -> Vec<Case> {
    let mut out = Vec::new();
    for spelling in 0..4 {
        for t in TEMPLATES {
            let marker = format!("m{}", out.len());
            out.push(Case {
                cmd: t.replace('T', &hidden(spelling, &marker)),
                marker,
            });
        }
    }
    out
}

/// Runs every case as a Bash call of one turn in a fresh workspace; returns the
/// workspace and the tool results.
fn replay(cases: &[Case], extra: &[&str]) -> (tempfile::TempDir, Vec<Value>) {
    let ws = tempfile::tempdir().unwrap();
    let mut reply = Reply::blocks(vec![]);
    for c in cases {
        reply = reply.then_tool_use("Bash", json!({ "command": c.cmd, "timeout": 20000 }));
    }
    let server = FakeServer::start(vec![reply.stop_reason("tool_use"), Reply::text("done")]);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flower"));
    server.configure(&mut cmd);
    let out = cmd
        .current_dir(ws.path())
        .env("FLOWER_MAX_ATTEMPTS", "1")
        .args(["once", "run them", "--json"])
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
    assert!(cases.len() >= 300, "{}", cases.len());

    // The control: with the whole tool allowed, bash really runs the hidden command
    // in most cases (some forms are syntax errors or run nothing in bash itself).
    let (ws, _) = replay(&cases, &["--allowed-tools", "Bash"]);
    let effective = created(ws.path(), &cases);
    eprintln!(
        "{} of {} commands created their marker under a bare Bash rule",
        effective.len(),
        cases.len()
    );
    assert!(
        effective.len() >= 300,
        "only {} commands are effective; the corpus is too weak",
        effective.len()
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
