//! Properties of the Bash matcher over generated commands.

use crate::support::tool_input;
use flower::engine::bash_rules::deny_view;
use flower::engine::permissions::{Decision, Permissions};
use proptest::prelude::*;
use serde_json::json;
use std::path::Path;

fn perms() -> Permissions {
    let allow: Vec<String> = ["Bash(git status:*)", "Bash(npm run *)", "Bash(echo hi)"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Permissions::new(&allow, &[]).unwrap()
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

/// Commands the rules above allow.
fn allowed_command() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("git status".to_string()),
        Just("echo hi".to_string()),
        "[a-z -]{0,12}".prop_map(|a| format!("git status {a}")),
        "[a-z]{1,8}".prop_map(|a| format!("npm run {a}")),
        "[a-z;|& ]{0,10}".prop_map(|a| format!("git status '{a}'")),
    ]
}

/// Shell-ish text: heavy on metacharacters, quotes and keywords.
fn shellish() -> impl Strategy<Value = String> {
    let atoms = prop_oneof![
        "[a-z]{1,6}",
        Just(" ".to_string()),
        Just(";".to_string()),
        Just("&&".to_string()),
        Just("|".to_string()),
        Just("&".to_string()),
        Just("\n".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("`".to_string()),
        Just("$(".to_string()),
        Just(")".to_string()),
        Just("(".to_string()),
        Just("{ ".to_string()),
        Just(" }".to_string()),
        Just("\\".to_string()),
        // An escaped blank: the grammar skips it (and a newline before it) as if it
        // were blank, where bash makes it part of a word.
        Just("\\ ".to_string()),
        Just("\\\t".to_string()),
        Just("$'".to_string()),
        Just("${".to_string()),
        Just("<<EOF\n".to_string()),
        Just("\nEOF\n".to_string()),
        Just(">".to_string()),
        Just("<(".to_string()),
        Just("#".to_string()),
        Just("if ".to_string()),
        Just("then ".to_string()),
        Just("fi".to_string()),
        Just("rm -rf /".to_string()),
        Just("git status".to_string()),
        Just("echo hi".to_string()),
        Just("npm run x".to_string()),
    ];
    prop::collection::vec(atoms, 0..12).prop_map(|v| v.concat())
}

/// A simple command of plain words.
fn simple() -> impl Strategy<Value = String> {
    "[a-z]{1,8}( [a-z-]{1,8}){0,3}"
}

/// An escaped blank (`\ `, `\<tab>`) followed by a word: the grammar skips the escape
/// and the line break before it, where bash runs the word as a program of its own.
fn escaped_blank() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["\\ ", "\\\t"]),
        prop_oneof![simple(), shellish()],
    )
        .prop_map(|(e, s)| format!("{e}{s}"))
}

/// The known shapes of appended lines that once got through, as plain cases: they
/// fail on every run, whatever the seeds draw.
#[test]
fn the_known_shapes_of_a_hidden_line_are_not_allowed() {
    let p = perms();
    for cmd in [
        "git status\n\\ ./x",
        "git status \n\\ a",
        "git status\n\\\t./x",
        "git status\n \\ ./x",
        "echo hi\n\\ rm -rf /",
        "npm run x\n\\ ./x",
        "git status;\\ ./x",
        "git status && \\ ./x",
    ] {
        assert!(!allowed(&p, cmd), "{cmd:?} was allowed");
    }
}

proptest! {
    // Enough cases that a failure one draw in 3,000 finds (the escaped blank of
    // issue 40) fails CI 29 times in 30 (about 25 s in a loaded debug build); the
    // shapes found so far also replay from `tests/proptest-regressions/`, have a
    // property of their own below and stand as plain cases above.
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        max_global_rejects: 10_000,
        ..ProptestConfig::default()
    })]

    /// Appending `; <anything not allowed>` (or `&&`, `||`, `|`, `&`, a newline) to
    /// an allowed command never makes it allowed.
    #[test]
    fn appending_something_not_allowed_never_allows(
        a in allowed_command(),
        sep in prop::sample::select(vec![";", " ; ", "&&", "||", "|", "|&", "&", "\n", " && "]),
        s in prop_oneof![shellish(), any::<String>()],
    ) {
        let p = perms();
        prop_assert!(allowed(&p, &a), "base command {a:?} must be allowed");
        prop_assume!(!allowed(&p, &s));
        // `&` + `&git status` is `&&git status`: an operator that merges with the
        // separator makes another command line, not "something appended".
        prop_assume!(!s.starts_with(['&', '|', ';', '<', '>']));
        let combined = format!("{a}{sep}{s}");
        prop_assert!(!allowed(&p, &combined), "{combined:?} was allowed");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A line (or list element) that starts with an escaped blank is never allowed
    /// by the command before it.
    #[test]
    fn an_escaped_blank_never_joins_a_line_to_the_one_before(
        a in allowed_command(),
        sep in prop::sample::select(vec!["\n", " \n", "\n ", ";", "; ", "&&", "|", "||"]),
        s in escaped_blank(),
    ) {
        let p = perms();
        let combined = format!("{a}{sep}{s}");
        prop_assert!(!allowed(&p, &combined), "{combined:?} was allowed");
    }

    /// Running something not allowed inside a substitution of an allowed command
    /// never makes it allowed.
    #[test]
    fn substituting_something_not_allowed_never_allows(
        a in allowed_command(),
        s in simple(),
        wrap in prop::sample::select(vec![
            " $({})", " `{}`", " \"$({})\"", " \"`{}`\"", " <({})", " >({})",
            " ${{x:-$({})}}", "\n{}", " && {{ {}; }}", " | ({})",
        ]),
    ) {
        let p = perms();
        prop_assume!(!allowed(&p, &s));
        let combined = format!("{a}{}", wrap.replace("{}", &s));
        prop_assert!(!allowed(&p, &combined), "{combined:?} was allowed");
    }

    /// The splitter and the checker never panic, whatever the input.
    #[test]
    fn never_panics(s in prop_oneof![shellish(), any::<String>()]) {
        let _ = deny_view(&s);
        let p = perms();
        let _ = allowed(&p, &s);
        let deny = Permissions::new(&[], &["Bash(rm:*)".to_string()]).unwrap();
        let _ = deny.check("Bash", &tool_input(&json!({ "command": s })), Path::new("/ws"));
    }

    /// With a deny rule on `rm`, a command running `rm` somewhere is never allowed.
    #[test]
    fn a_denied_program_anywhere_denies(
        before in shellish(),
        sep in prop::sample::select(vec![";", "&&", "|", "\n", " $(", " `"]),
    ) {
        let deny = Permissions::new(&[], &["Bash(rm:*)".to_string()]).unwrap();
        let close = match sep { " $(" => ")", " `" => "`", _ => "" };
        let cmd = format!("{before}{sep}rm -rf x{close}");
        let d = deny.check("Bash", &tool_input(&json!({ "command": cmd })), Path::new("/ws"));
        // Either the text before swallowed `rm` into a quote or comment (then bash
        // would not run it either, or the splitter refuses), or the call is denied.
        if matches!(d, Decision::Allow) {
            let view = deny_view(&cmd).expect("allowed means it parsed");
            prop_assert!(
                !view.commands.iter().any(|c| c.first() == Some(&Some("rm".to_string()))),
                "{cmd:?} allowed although it runs rm"
            );
        }
    }
}
