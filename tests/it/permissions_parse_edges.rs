//! The bounds of the bash parse, at their edges (issue #16: each was a surviving mutant
//! of `src/engine/bash_rules.rs`): the byte limit, the bracket pre-check, the tree
//! depth walk, the parse deadline, and the reasons a refusal gives.

use crate::permissions_parse::check;
use flower::engine::bash_rules::{
    MAX_COMMAND_BYTES, MAX_DEPTH, NotPlain, PARSE_BUDGET, ParseError, plain_parts,
    plain_parts_within,
};
use flower::engine::permissions::Decision;
use std::time::Duration;

/// Allowed by an `echo` prefix rule, and not caught by a deny rule for another program.
fn allowed_as_echo(cmd: &str) -> bool {
    check(&["Bash(echo:*)"], &[], cmd) == Decision::Allow
        && check(&["Bash"], &["Bash(rm:*)"], cmd) == Decision::Allow
}

/// The reason an `echo` prefix rule refuses `cmd` (the text of the denial).
fn refusal(cmd: &str) -> String {
    match check(&["Bash(echo:*)"], &[], cmd) {
        Decision::Deny { message, .. } => message,
        other => panic!("{} bytes: {other:?}", cmd.len()),
    }
}

/// `echo 'x…x'` of exactly `len` bytes.
fn echo_of_len(len: usize) -> String {
    let head = "echo '";
    format!("{head}{}'", "x".repeat(len - head.len() - 1))
}

#[test]
fn a_command_of_exactly_the_byte_limit_is_analysed_and_one_byte_more_is_not() {
    let at = echo_of_len(MAX_COMMAND_BYTES);
    assert_eq!(at.len(), MAX_COMMAND_BYTES);
    assert!(allowed_as_echo(&at));
    let over = echo_of_len(MAX_COMMAND_BYTES + 1);
    assert!(refusal(&over).contains("over the 100000-byte limit"));
}

#[test]
fn brackets_count_even_in_quotes_up_to_the_depth_limit() {
    // The pre-check reads bytes: quoted brackets count, which only ever refuses more.
    let at = format!("echo '{}'", "(".repeat(MAX_DEPTH));
    assert!(allowed_as_echo(&at), "{MAX_DEPTH} quoted brackets");
    for open in ["(", "{", "["] {
        let over = format!("echo '{}'", open.repeat(MAX_DEPTH + 1));
        assert!(
            refusal(&over).contains("nests deeper than 400 levels"),
            "{open}"
        );
    }
    // Closed brackets are not nesting: many pairs in a row stay shallow.
    for pair in ["()", "{}", "[]"] {
        let flat = format!("echo '{}'", pair.repeat(3 * MAX_DEPTH));
        assert!(allowed_as_echo(&flat), "{pair} pairs");
    }
}

/// `echo a; true && true && …` with `n` commands joined by `&&`: the grammar nests each
/// `&&` one level deeper, with no bracket at all.
fn and_chain(n: usize) -> String {
    format!("echo a; {}", vec!["echo b"; n].join(" && "))
}

#[test]
fn a_tree_nested_deeper_than_the_limit_without_brackets_is_refused() {
    // Where the walk's limit falls for this shape (MAX_DEPTH levels of tree; found by
    // bisection on the pinned grammar): one `&&` more is refused.
    let deepest = (1..2 * MAX_DEPTH)
        .find(|&n| !allowed_as_echo(&and_chain(n + 1)))
        .expect("some chain is too deep");
    assert!(allowed_as_echo(&and_chain(deepest)));
    assert!(refusal(&and_chain(deepest + 1)).contains("nests deeper than 400 levels"));
    // Each `&&` nests one level deeper; on the grammar pinned in Cargo.lock, 398 of
    // them fill the MAX_DEPTH levels exactly. An off-by-one in the walk's limit moves it.
    assert_eq!(
        deepest, 398,
        "the limit is {MAX_DEPTH} levels, not one fewer or more"
    );
    assert!(matches!(
        plain_parts(&and_chain(MAX_DEPTH + 1)),
        Err(NotPlain::Parse(_))
    ));
}

#[test]
fn a_wide_flat_command_is_not_deep() {
    // Thousands of nodes side by side (long enough that the parse deadline is checked
    // during the parse): the walk climbs back up after each one.
    let words = format!("echo {}", "w ".repeat(3_000));
    assert!(allowed_as_echo(&words));
    let parts = format!("{}echo z", "echo y; ".repeat(1_000));
    assert!(allowed_as_echo(&parts));
    assert_eq!(plain_parts(&parts).unwrap().len(), 1_001);
}

#[test]
fn a_parse_past_its_budget_is_refused_and_says_so() {
    // Long enough that the parser reports progress (and so checks the deadline) many
    // times: with no budget at all the first check is already past it.
    let words = format!("echo {}", "w ".repeat(3_000));
    let refused = plain_parts_within(&words, Duration::ZERO).unwrap_err();
    assert_eq!(
        refused,
        NotPlain::Parse(ParseError::TimedOut(Duration::ZERO))
    );
    // The same command within a budget no machine runs out of is plain.
    assert_eq!(
        plain_parts_within(&words, Duration::from_secs(3_600))
            .unwrap()
            .len(),
        1
    );
    // The message names the budget that ran out; the default one is 500 ms.
    let shown = ParseError::TimedOut(PARSE_BUDGET).to_string();
    assert_eq!(shown, "parsing the command took longer than 500 ms");
}

#[test]
fn refusals_name_the_construct_and_the_syntax_error() {
    let not_plain = plain_parts("echo $(whoami)").unwrap_err();
    let shown = not_plain.to_string();
    assert!(shown.contains("$(whoami)"), "{shown}");
    assert!(!shown.trim().is_empty());

    let syntax = plain_parts("echo 'a' )").unwrap_err();
    let NotPlain::Parse(error) = &syntax else {
        panic!("{syntax:?}")
    };
    let shown = error.to_string();
    assert!(shown.starts_with("bash syntax error near "), "{shown}");
    assert!(shown.contains(')'), "names where: {shown}");
    assert_eq!(syntax.to_string(), shown);
}
