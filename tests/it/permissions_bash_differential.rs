//! Differential test against real bash: generated commands that the checker allows are
//! run by `bash -c` with a PATH holding only logging shims; the log must show that
//! bash ran nothing the rules do not allow. This checks the splitter against bash
//! itself, not against our own idea of bash.

use crate::support::tool_input;
use flower::engine::permissions::{Decision, Permissions};
use proptest::prelude::*;
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PROGRAMS: [&str; 5] = ["git", "npm", "rm", "curl", "evil"];

struct Sandbox {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    bin: PathBuf,
    log: PathBuf,
}

fn sandbox() -> Sandbox {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let bin = dir.join("bin");
    fs::create_dir(&bin).unwrap();
    for p in PROGRAMS {
        let shim = bin.join(p);
        // Logs its name and arguments, one NUL-terminated record per run (arguments
        // may hold newlines).
        fs::write(
            &shim,
            "#!/bin/sh\nprintf '%s\\0' \"${0##*/} $*\" >> \"$LOG\"\n",
        )
        .unwrap();
        fs::set_permissions(&shim, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let log = dir.join("log");
    Sandbox {
        _tmp: tmp,
        dir,
        bin,
        log,
    }
}

/// Runs `cmd` under bash with only the shims on PATH; returns the logged runs.
fn run(sb: &Sandbox, cmd: &str) -> Vec<String> {
    let _ = fs::remove_file(&sb.log);
    let work = sb.dir.join("work");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir(&work).unwrap();
    // `output()` waits for every process holding the pipes, background ones included.
    let _ = Command::new("/bin/bash")
        .arg("-c")
        .arg(cmd)
        .current_dir(&work)
        .env_clear()
        .env("PATH", &sb.bin)
        .env("LOG", &sb.log)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    fs::read_to_string(&sb.log)
        .unwrap_or_default()
        .split('\0')
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect()
}

fn allowed(p: &Permissions, cmd: &str) -> bool {
    matches!(
        p.check(
            "Bash",
            &tool_input(&json!({ "command": cmd })),
            Path::new("/ws")
        ),
        Decision::Allow
    )
}

fn command() -> impl Strategy<Value = String> {
    let atoms = prop_oneof![
        4 => Just("git status".to_string()),
        3 => Just("npm run x".to_string()),
        2 => Just("git".to_string()),
        2 => Just("rm".to_string()),
        1 => Just("curl".to_string()),
        1 => Just("evil".to_string()),
        1 => Just("status".to_string()),
        6 => Just(" ".to_string()),
        2 => Just(";".to_string()),
        1 => Just("&&".to_string()),
        1 => Just("||".to_string()),
        1 => Just("|".to_string()),
        1 => Just("&".to_string()),
        1 => Just("\n".to_string()),
        2 => Just("'".to_string()),
        2 => Just("\"".to_string()),
        1 => Just("`".to_string()),
        2 => Just("$(".to_string()),
        2 => Just(")".to_string()),
        1 => Just("(".to_string()),
        1 => Just("{ ".to_string()),
        1 => Just("; }".to_string()),
        1 => Just("\\".to_string()),
        1 => Just("$'".to_string()),
        1 => Just("${x:-".to_string()),
        1 => Just("}".to_string()),
        1 => Just("<<EOF\n".to_string()),
        1 => Just("<<'EOF'\n".to_string()),
        1 => Just("\nEOF\n".to_string()),
        1 => Just("<(".to_string()),
        1 => Just("#".to_string()),
        1 => Just("if ".to_string()),
        1 => Just("; then ".to_string()),
        1 => Just("; fi".to_string()),
        1 => Just("2>&1".to_string()),
        1 => Just(">/dev/null".to_string()),
        1 => Just("X=1 ".to_string()),
        1 => Just("$((".to_string()),
        1 => Just("))".to_string()),
        2 => Just("for x in 'a[$(rm)]' '$(curl)'; do ".to_string()),
        1 => Just("for x in 'a[`rm`]'\n do ".to_string()),
        2 => Just("; done".to_string()),
        1 => Just("((x))".to_string()),
        1 => Just("$((x))".to_string()),
        1 => Just("${!x}".to_string()),
        1 => Just("${x@P}".to_string()),
        1 => Just("${a[x]}".to_string()),
        1 => Just("[[ 1 -eq x ]]".to_string()),
        1 => Just("test -v x".to_string()),
        // The forms that beat the hand-written lexer (issue 13).
        1 => Just("<<EOF $(git status\nrm\nEOF\n)".to_string()),
        1 => Just("<<EOF\nx\nEO\\\nF\nrm\nEOF\n".to_string()),
        1 => Just("$'\\c'; rm; #'".to_string()),
        1 => Just("\"$\\\n(rm)\"".to_string()),
        1 => Just("for OPTIND in 'a[$(rm)]'; do ".to_string()),
        1 => Just("for x do ".to_string()),
        1 => Just("bash -c -- 'rm'".to_string()),
        1 => Just("env -S'rm x'".to_string()),
        1 => Just("sudo -a -b -c -d -e -f -g -h rm".to_string()),
        1 => Just("printf -v 'a[$(rm)]' x".to_string()),
        1 => Just("\r".to_string()),
        1 => Just("|&".to_string()),
        1 => Just(">x".to_string()),
        1 => Just("~".to_string()),
        1 => Just("*".to_string()),
        // Issue 31: what the plain subset now accepts, and the deny-rule gaps.
        1 => Just("time ".to_string()),
        1 => Just("time -p ".to_string()),
        1 => Just("$HOME".to_string()),
        1 => Just("\"$HOME\"".to_string()),
        1 => Just("./*".to_string()),
        1 => Just("<<< x".to_string()),
        1 => Just("<<'EOF'\n$(rm)\nEOF\n".to_string()),
        1 => Just("$'a;rm'".to_string()),
        1 => Just("{b['a[$(rm)]']}</dev/null".to_string()),
        1 => Just("read PS4 <<< '$(rm)'; set -x; ".to_string()),
        1 => Just("printf -v PS4 '$(curl)'; set -x; ".to_string()),
        1 => Just("env 'BASH_FUNC_git%%=() { rm; }' ".to_string()),
        1 => Just("hash -p rm git; ".to_string()),
        1 => Just("shopt -s expand_aliases\nalias git=rm\n".to_string()),
        1 => Just("env -iS 'rm' ".to_string()),
        1 => Just("flock . -c 'rm' ".to_string()),
    ];
    let random = prop::collection::vec(atoms, 1..14).prop_map(|v| v.concat());
    // Loops that put a chosen value into a variable, then use it somewhere bash might
    // evaluate it.
    let value = prop::sample::select(vec![
        "'a[$(rm)]'",
        "'$(curl)'",
        "\"a[\\$(rm)]\"",
        "$'a[\\x24(rm)]'",
        "a",
        "*",
    ]);
    let sink = prop::sample::select(vec![
        "((x))",
        "echo $((x))",
        "git status $((x + 1))",
        "npm run ${!x}",
        "npm run ${x@P}",
        "npm run ${a[x]}",
        "npm run ${y:x}",
        "[[ 1 -eq x ]]",
        "[[ -v $x ]]",
        "test -v \"$x\"",
        "git status \"$x\"",
        "npm run $x",
    ]);
    let structured = (value, sink, prop::sample::select(vec!["; ", "\n", " && "]))
        .prop_map(|(v, k, sep)| format!("for x in {v}; do git status{sep}{k}; done"));
    // Mostly plain pieces, so that many commands are allowed and really run.
    let plain_atoms = prop_oneof![
        4 => Just("git status".to_string()),
        3 => Just("npm run x".to_string()),
        2 => Just("rm".to_string()),
        1 => Just("curl".to_string()),
        4 => Just(" ".to_string()),
        2 => Just(";".to_string()),
        1 => Just("&&".to_string()),
        1 => Just("||".to_string()),
        1 => Just("|".to_string()),
        1 => Just("\n".to_string()),
        1 => Just("'a;rm'".to_string()),
        1 => Just("\"b|rm\"".to_string()),
        1 => Just("\\;".to_string()),
        1 => Just("\\\"".to_string()),
        1 => Just("#".to_string()),
        1 => Just("2>&1".to_string()),
        1 => Just(">/dev/null".to_string()),
        1 => Just("\"\\$(rm)\"".to_string()),
        1 => Just("$'".to_string()),
        1 => Just("'".to_string()),
    ];
    let plain = prop::collection::vec(plain_atoms, 1..10).prop_map(|v| v.concat());
    prop_oneof![3 => random, 1 => structured, 3 => plain]
}

/// Generates `n` commands, keeps those `p` allows, runs them in bash and checks each
/// run with `ok`. Returns how many were run (the test is only meaningful if many are).
fn differential(p: &Permissions, n: usize, ok: impl Fn(&str) -> bool) -> Result<usize, String> {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = command();
    let sb = sandbox();
    let mut ran = 0;
    for _ in 0..n {
        let cmd = strategy
            .new_tree(&mut runner)
            .map_err(|e| e.to_string())?
            .current();
        if !allowed(p, &cmd) {
            continue;
        }
        ran += 1;
        for line in run(&sb, &cmd) {
            if !ok(&line) {
                return Err(format!("{cmd:?} was allowed but bash ran `{line}`"));
            }
        }
    }
    Ok(ran)
}

/// Under allow rules, bash runs only what they allow.
#[test]
fn bash_runs_only_what_allow_rules_allow() {
    let p = Permissions::new(
        &[
            "Bash(git status:*)".to_string(),
            "Bash(npm run *)".to_string(),
        ],
        &[],
    )
    .unwrap();
    let ran = differential(&p, 2000, |line| {
        line.starts_with("git status") || line.starts_with("npm run ")
    })
    .unwrap();
    eprintln!("ran {ran} allowed commands in bash");
    assert!(
        ran >= 150,
        "only {ran} generated commands were allowed; the test is too weak"
    );
}

/// Under deny rules, bash never runs what they deny.
#[test]
fn bash_never_runs_what_deny_rules_deny() {
    let p = Permissions::new(
        &[],
        &[
            "Bash(rm:*)".to_string(),
            "Bash(curl:*)".to_string(),
            "Bash(evil)".to_string(),
        ],
    )
    .unwrap();
    let ran = differential(&p, 1000, |line| {
        let program = line.split(' ').next().unwrap_or("");
        !["rm", "curl"].contains(&program) && line != "evil "
    })
    .unwrap();
    eprintln!("ran {ran} allowed commands in bash");
    assert!(
        ran >= 150,
        "only {ran} generated commands were allowed; the test is too weak"
    );
}
