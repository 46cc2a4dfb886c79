//! The bash parse behind the rules (`engine::bash_rules`): the plain subset, the deny
//! view, and the bounds on bad input.

use crate::support::tool_input;
use flower::engine::bash_rules::{MAX_COMMAND_BYTES, NotPlain, deny_view, plain_parts};
use flower::engine::permissions::{Decision, Permissions};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn words(cmd: &str) -> Vec<Vec<String>> {
    plain_parts(cmd)
        .unwrap_or_else(|e| panic!("{cmd:?} should be plain: {e}"))
        .into_iter()
        .map(|p| p.words)
        .collect()
}

pub(crate) fn check(allow: &[&str], deny: &[&str], cmd: &str) -> Decision {
    let s = |v: &[&str]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    Permissions::new(&s(allow), &s(deny)).unwrap().check(
        "Bash",
        &tool_input(&json!({ "command": cmd })),
        Path::new("/ws"),
    )
}

#[test]
fn plain_commands_split_into_their_words() {
    assert_eq!(
        words("a b; c && d || e | f\ng # note"),
        vec![
            vec!["a", "b"],
            vec!["c"],
            vec!["d"],
            vec!["e"],
            vec!["f"],
            vec!["g"]
        ]
    );
    assert_eq!(
        words("echo 'a;b' \"c|d\" e\\&f \"\\$x\" HEAD~1 {} 2>&1 >/dev/null"),
        vec![vec!["echo", "a;b", "c|d", "e&f", "$x", "HEAD~1", "{}"]]
    );
}

/// Issue 40's over-denials the parser proves safe: a quoted substitution of plain
/// commands (which join the parts, to be allowed on their own; the word it makes is
/// only known when it runs), a subshell, a group, arithmetic of numbers only.
#[test]
fn quoted_substitutions_groups_and_number_arithmetic_are_plain() {
    assert_eq!(
        words("git commit -m \"$(cat <<'EOF'\nmsg $x\nEOF\n)\""),
        vec![
            vec!["cat"],
            vec!["git", "commit", "-m", "\"$(cat <<'EOF'\nmsg $x\nEOF\n)\""]
        ]
    );
    assert_eq!(words("(cd src && ls)"), vec![vec!["cd", "src"], vec!["ls"]]);
    assert_eq!(words("{ ls; ls -a; }"), vec![vec!["ls"], vec!["ls", "-a"]]);
    assert_eq!(
        words("echo $((1+2*(3-1)))"),
        vec![vec!["echo", "$((1+2*(3-1)))"]]
    );
    let open = |cmd: &str| plain_parts(cmd).unwrap().last().unwrap().open;
    assert_eq!(open("echo a \"$(ls)\""), Some(2));
    assert_eq!(open("echo a $((1))"), Some(2));
    assert_eq!(open("(echo a)"), None);
    // `&` runs a command without waiting; brace expansion of plain parts makes data.
    assert_eq!(words("a & b &"), vec![vec!["a"], vec!["b"]]);
    assert_eq!(open("ls src/{a,b}.rs x"), Some(1));
    assert_eq!(open("ls x {1..3}"), Some(2));
}

#[test]
fn everything_else_is_not_plain() {
    for cmd in [
        "a |& b",
        "(a) > f",
        "((a))",
        "a $(b)",
        "a `b`",
        "a \"$@\"",
        "a $#",
        "a ${x:1}",
        "a $((b))",
        "a $((0x1))",
        "a \"$(b > f)\"",
        "a \"`b`\"",
        "a <(b)",
        "a $'x\\x41'",
        "a $\"x\"",
        "a > f",
        "a < f",
        "a >& f",
        "a <<< $x",
        "a <<EOF\n$x\nEOF",
        "X=1 a",
        "X=1",
        "* a",
        "? a",
        "a [x$y]",
        "{a,b} c",
        "a ~root",
        "~/x a",
        "a x=~/y",
        "if a; then b; fi",
        "for x in a; do b; done",
        "while a; do b; done",
        "case x in a) b;; esac",
        "f() { a; }",
        "! a",
        "time",
        "coproc a",
        "[[ a ]]",
        "a\\\nb",
        "a \"b\\\nc\"",
        "a\rb",
        "printf -v 'a[$(b)]' x",
        "read 'a[1]'",
        "a 'unterminated",
        "a )",
    ] {
        assert!(plain_parts(cmd).is_err(), "{cmd:?} must not be plain");
    }
}

/// The forms of issue 13 that got past the old lexer under `Bash(git status)`.
#[test]
fn the_forms_that_beat_the_lexer_are_denied() {
    let forms = [
        "git status <<EOF $(git status\ntouch m\nEOF\n)",
        "git status <<EOF\nx\nEO\\\nF\ntouch m\nEOF",
        "git status $'\\c'; touch m; #'",
        "git status \"$\\\n(touch m)\"",
        "for OPTIND in 'a[$(touch m)]'; do git status; done",
        "for x do git status; done",
        "git status >&\"\\$(touch m)\"",
    ];
    for cmd in forms {
        for allow in [
            &["Bash(git status)"][..],
            &["Bash(git status:*)"],
            &["Bash(git *)"],
        ] {
            assert!(
                matches!(check(allow, &[], cmd), Decision::Deny { .. }),
                "{cmd:?} allowed under {allow:?}"
            );
        }
        assert!(
            matches!(check(&[], &["Bash(touch:*)"], cmd), Decision::Deny { .. }),
            "{cmd:?} allowed under a deny rule on touch"
        );
    }
    // Wrappers with many options, `bash -c --`, `env -S'…'`.
    for cmd in [
        "sudo -a -b -c -d -e -f -g -h -i touch m",
        "bash -c -- 'touch m'",
        "env -S'touch m'",
        "env --split-string='touch m'",
        "xargs -a -b -c -d -e -f -g touch",
        "find . -exec touch m ';'",
        "eval 'eval \"touch m\"'",
    ] {
        assert!(
            matches!(check(&[], &["Bash(touch:*)"], cmd), Decision::Deny { .. }),
            "{cmd:?} allowed under a deny rule on touch"
        );
    }
}

#[test]
fn deny_view_sees_every_command_without_a_cap() {
    let v = deny_view("a $(b) | (c; { d; }) && e <(f) \"$(g)\"").unwrap();
    let programs: Vec<String> = v.commands.iter().map(|c| c[0].clone().unwrap()).collect();
    for p in ["a", "b", "c", "d", "e", "f", "g"] {
        assert!(programs.iter().any(|x| x == p), "{p} missing: {programs:?}");
    }
    // 200 wrappers in a row and the denied program at the end: no cap lets it through.
    let cmd = format!("{} touch m", "nice ".repeat(200));
    assert!(matches!(
        check(&[], &["Bash(touch:*)"], &cmd),
        Decision::Deny { .. }
    ));
    // 500 harmless parts then the denied one.
    let cmd = format!("{}touch m", "true; ".repeat(500));
    assert!(matches!(
        check(&[], &["Bash(touch:*)"], &cmd),
        Decision::Deny { .. }
    ));
}

fn denied_quickly(cmd: &str, reason: &str) {
    denied_quickly_any(cmd, &[reason]);
}

fn denied_quickly_any(cmd: &str, reasons: &[&str]) {
    for (allow, deny) in [
        (&["Bash(git status:*)"][..], &[][..]),
        (&[][..], &["Bash(rm:*)"][..]),
    ] {
        let started = Instant::now();
        let d = check(allow, deny, cmd);
        assert!(started.elapsed() < Duration::from_secs(20));
        let Decision::Deny { message, .. } = d else {
            panic!("a {}-byte command was allowed", cmd.len())
        };
        assert!(reasons.iter().any(|r| message.contains(r)), "{message}");
    }
}

#[test]
fn huge_and_deep_commands_are_denied_with_a_reason() {
    let mega = format!("git status {}", "a".repeat(1 << 20));
    denied_quickly(&mega, "over the 100000-byte limit");
    let parens = format!("{}git status{}", "(".repeat(100_000), ")".repeat(100_000));
    denied_quickly(&parens, "byte limit");
    // Under the byte limit but too deep.
    let deep = format!("{}git status{}", "(".repeat(2_000), ")".repeat(2_000));
    denied_quickly(&deep, "nests deeper than");
    let subst = format!("{}x{}", "$(".repeat(2_000), ")".repeat(2_000));
    denied_quickly(&subst, "nests deeper than");
    // Deeper still, under the byte limit: the depth check or the parse deadline
    // (500 ms) stops it.
    let deeper = format!("{}git status{}", "(".repeat(40_000), ")".repeat(40_000));
    assert!(deeper.len() < MAX_COMMAND_BYTES);
    denied_quickly_any(&deeper, &["nests deeper than", "longer than 500 ms"]);
    assert!(matches!(plain_parts(&deep), Err(NotPlain::Parse(_))));
    // A bare Bash rule with no deny rule needs no analysis.
    assert_eq!(check(&["Bash"], &[], &mega), Decision::Allow);
}

#[test]
fn rules_must_name_a_plain_command() {
    let s = |v: &[&str]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    for bad in [
        "Bash(git status $(x))",
        "Bash(a > f)",
        "Bash(X=1 a)",
        "Bash(a <<EOF:*)",
        "Bash(a; b)",
        "Bash(echo 'x)",
    ] {
        let e = Permissions::new(&s(&[bad]), &[]).expect_err(bad);
        assert_eq!(e.rule, bad);
        assert!(!e.why.is_empty());
    }
}
