//! What the deny walk makes of each construct, and what the plain check calls it
//! (issue #16: the mutation run of `src/engine/bash_rules.rs` showed that the
//! proptests, corpus and differential tests pin that a construct is refused, not which
//! construct a refusal names, and not the commands a deny rule is matched against
//! inside declarations, loops, here-documents, wrappers and scripts).
//!
//! Each deny-view case states every simple command a deny rule sees (`?` for a word
//! only known at run time) and where a program may start in it, or the reason the
//! command cannot be checked: that reason is the text of the denial the model reads.

use flower::engine::bash_rules::{deny_view, plain_parts};

/// A deny view as text (see [`view`]), or why there is none.
type Viewed = Result<(String, String), String>;

/// The deny view as text: the commands (`;`-separated) and the sorted starts
/// (`command:word`), or the reason it cannot be built.
fn view(cmd: &str) -> Viewed {
    let v = deny_view(cmd).map_err(|why| why.to_string())?;
    let commands = v
        .commands
        .iter()
        .map(|words| {
            words
                .iter()
                .map(|w| w.as_deref().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join(" ; ");
    let mut starts = v.starts.clone();
    starts.sort_unstable();
    let starts = starts
        .iter()
        .map(|(c, w)| format!("{c}:{w}"))
        .collect::<Vec<_>>()
        .join(" ");
    Ok((commands, starts))
}

fn seen(commands: &str, starts: &str) -> Viewed {
    Ok((commands.to_string(), starts.to_string()))
}

fn refused(why: &str) -> Viewed {
    Err(why.to_string())
}

fn assert_views(cases: &[(&str, Viewed)]) {
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(cmd, want)| {
            let got = view(cmd);
            (&got != want).then(|| format!("{cmd:?}\n  want {want:?}\n  got  {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn declarations_are_walked_and_refused_when_they_evaluate_a_name() {
    assert_views(&[
        ("export A=1", seen("", "")),
        ("export X=$(rm -rf /)", seen("rm -rf /", "0:0")),
        ("export A B=$(rm x)", seen("rm x", "0:0")),
        (
            "declare -i A=1",
            refused("\"declare -i A=1\" evaluates a value as code, which cannot be checked"),
        ),
        (
            "declare +n A",
            refused("\"declare +n A\" evaluates a value as code, which cannot be checked"),
        ),
        ("declare -x A=1", seen("", "")),
        (
            "unset 'a[0]'",
            refused(
                "it assigns \"a[0]\", whose subscript or form bash evaluates as code, which cannot be checked",
            ),
        ),
        ("unset a", seen("", "")),
        (
            "export 'a[0]=1'",
            refused(
                "it assigns \"a[0]\", whose subscript or form bash evaluates as code, which cannot be checked",
            ),
        ),
        (
            "local PS1=x",
            refused("it sets bash's special variable PS1"),
        ),
        (
            "export RANDOM",
            refused("it sets bash's special variable RANDOM"),
        ),
    ]);
}

#[test]
fn expansions_and_arithmetic_that_evaluate_code_are_refused_and_plain_ones_are_not() {
    assert_views(&[
        (
            "echo $((1))",
            refused("\"$((1))\" evaluates a value as code, which cannot be checked"),
        ),
        (
            "for ((i=0; i<1; i++)); do ls; done",
            refused(
                "\"for ((i=0; i<1; i++)); do ls; done\" evaluates a value as code, which \
                 cannot be checked",
            ),
        ),
        (
            "((x+1))",
            refused("\"((x+1))\" evaluates a value as code, which cannot be checked"),
        ),
        ("echo ${HOME}", seen("echo ?", "0:0")),
        ("echo ${@}", seen("echo ?", "0:0")),
        ("echo $@ \"$x\"", seen("echo ? ?", "0:0")),
        (
            "echo ${HOME:-x}",
            refused("the expansion \"${HOME:-x}\" may evaluate a value as code"),
        ),
        (
            "echo ${#HOME}",
            refused("the expansion \"${#HOME}\" may evaluate a value as code"),
        ),
        (
            "echo ${!x}",
            refused("the expansion \"${!x}\" may evaluate a value as code"),
        ),
        (
            "echo ${x[0]}",
            refused("the expansion \"${x[0]}\" may evaluate a value as code"),
        ),
        ("[[ 1 -eq 1 ]]", seen("", "")),
        // Not arithmetic: a file test and a string comparison.
        ("[[ -f x ]]", seen("", "")),
        ("[[ a == b ]]", seen("", "")),
        (
            "[[ a -eq 1 ]]",
            refused("\"[[ a -eq 1 ]]\" evaluates a value as code, which cannot be checked"),
        ),
    ]);
}

#[test]
fn loops_and_assignments_are_walked_and_special_variables_refused() {
    assert_views(&[
        ("for x in a; do rm $x; done", seen("rm ?", "0:0")),
        ("for x; do ls; done", refused("a `for` loop without `in`")),
        (
            "for RANDOM in 1; do ls; done",
            refused("it sets bash's special variable RANDOM"),
        ),
        ("X=1 rm a", seen("rm a", "0:0")),
        ("x=1 # c", seen("", "")),
        (
            "RANDOM=1 ls",
            refused("it sets bash's special variable RANDOM"),
        ),
        ("PS1=x ls", refused("it sets bash's special variable PS1")),
        (
            "BASH_ENV=x ls",
            refused("it sets bash's special variable BASH_ENV"),
        ),
        (
            "OPTIND=1 ls",
            refused("it sets bash's special variable OPTIND"),
        ),
        (
            "a[0]=1 ls",
            refused("\"a[0]\" evaluates a value as code, which cannot be checked"),
        ),
    ]);
}

#[test]
fn here_documents_are_checked_by_bash_rules_and_their_commands_walked() {
    assert_views(&[
        ("cat <<'EOF'\n$(rm x)\nEOF", seen("cat", "0:0")),
        ("cat <<\"EOF\"\n`rm x`\nEOF", seen("cat", "0:0")),
        ("cat <<\\EOF\n${x}\nEOF", seen("cat", "0:0")),
        ("cat <<EOF\nrm\nEOF", seen("cat", "0:0")),
        ("cat <<EOF\n$x and \\`ls\\`\nEOF", seen("cat", "0:0")),
        ("cat <<-EOF\n\tx\n\tEOF", seen("cat", "0:0")),
        (
            "cat <<EOF > $(rm x)\nbody\nEOF",
            seen("cat ; rm x", "0:0 1:0"),
        ),
        (
            "cat <<EOF\n$(rm x)\nEOF",
            refused(
                "a here-document that is not quoted holds a substitution, so it cannot be checked",
            ),
        ),
        (
            "cat <<EOF\n`rm x`\nEOF",
            refused(
                "a here-document that is not quoted holds a substitution, so it cannot be checked",
            ),
        ),
        (
            "cat <<EOF\n${x}\nEOF",
            refused(
                "a here-document that is not quoted holds a substitution, so it cannot be checked",
            ),
        ),
        (
            "cat <<EOF\nx\n EOF\nEOF",
            refused(
                "a here-document ends on a line bash does not take as its end, so it cannot be checked",
            ),
        ),
        (
            "cat <<EOF\nx\n\tEOF\nEOF",
            refused(
                "a here-document ends on a line bash does not take as its end, so it cannot be checked",
            ),
        ),
    ]);
}

#[test]
fn redirections_and_quoting_show_the_program_bash_runs() {
    assert_views(&[
        ("ls >&2", seen("ls", "0:0")),
        ("ls 2> out", seen("ls", "0:0")),
        ("ls > $(rm x)", seen("ls ; rm x", "0:0 1:0")),
        ("ls <<< $(rm x)", seen("rm x ; ls", "0:0 1:0")),
        (
            "ls >&$x",
            refused("bash expands the target of \">&$x\" twice"),
        ),
        ("echo $'rm'", seen("echo rm", "0:0")),
        (
            "echo $'r\\x6d'",
            refused("the $'…' string \"$'r\\\\x6d'\" has escapes bash may read differently"),
        ),
        ("$'rm' x", seen("rm x", "0:0")),
        ("r$'m' x", seen("rm x", "0:0")),
        ("'r'm x", seen("rm x", "0:0")),
        ("echo a'b'\"c\"", seen("echo abc", "0:0")),
        ("/bin/rm x", seen("/bin/rm x", "0:0")),
    ]);
}

#[test]
fn builtins_that_evaluate_a_variable_name_are_refused() {
    let evaluates = |cmd: &str| {
        refused(&format!(
            "{cmd:?} evaluates a value as code, which cannot be checked"
        ))
    };
    assert_views(&[
        ("let a=1", evaluates("let a=1")),
        ("read x", seen("read x", "0:0")),
        (
            "read 'a[0]'",
            refused(
                "it assigns \"a[0]\", whose subscript or form bash evaluates as code, which cannot be checked",
            ),
        ),
        (
            "mapfile -t 'a[1]'",
            refused(
                "it assigns \"a[1]\", whose subscript or form bash evaluates as code, which cannot be checked",
            ),
        ),
        (
            "read $x",
            refused("\"read $x\" assigns a variable whose name is only known when it runs"),
        ),
        ("printf -v x y", seen("printf -v x y", "0:0")),
        (
            "printf -v 'a[0]' y",
            refused(
                "it assigns \"a[0]\", whose subscript or form bash evaluates as code, which cannot be checked",
            ),
        ),
        ("printf x 'a[0]'", seen("printf x a[0]", "0:0")),
        ("test -v 'a[0]'", evaluates("test -v 'a[0]'")),
        ("test -R 'a[0]'", evaluates("test -R 'a[0]'")),
        ("test 'a[0]'", seen("test a[0]", "0:0")),
        ("printf -R 'a[0]'", seen("printf -R a[0]", "0:0")),
        ("[ -v 'a[0]' ]", evaluates("[ -v 'a[0]' ]")),
    ]);
}

#[test]
fn wrappers_and_scripts_expose_every_program_they_may_run() {
    assert_views(&[
        ("bash -c 'rm x'", seen("bash -c rm x ; rm x", "0:0 1:0")),
        ("sh -xc 'rm x'", seen("sh -xc rm x ; rm x", "0:0 1:0")),
        ("bash --c 'rm x'", seen("bash --c rm x", "0:0")),
        ("bash x -c", seen("bash x -c", "0:0")),
        ("python -c 'rm x'", seen("python -c rm x", "0:0")),
        (
            "zsh -c 'ls' 'rm y'",
            seen("zsh -c ls rm y ; ls ; rm y", "0:0 1:0 2:0"),
        ),
        ("eval rm x", seen("eval rm x ; rm x", "0:0 1:0")),
        (
            "eval \"$x\"",
            refused("the script of \"eval \\\"$x\\\"\" is only known when it runs"),
        ),
        (
            "trap 'rm x' EXIT",
            seen("trap rm x EXIT ; rm x ; EXIT", "0:0 1:0 2:0"),
        ),
        (
            "su -c 'rm x'",
            seen("su -c rm x ; -c ; rm x", "0:0 1:0 2:0"),
        ),
        ("watch rm x", seen("watch rm x ; rm x", "0:0 0:1 0:2 1:0")),
        // The split string is read twice: as env's own command line (`env rm x`) and,
        // to be safe, as shell code.
        (
            "env -S 'rm x'",
            seen(
                "env -S rm x ; env rm x ; rm x",
                "0:0 0:1 0:2 1:0 1:1 1:2 2:0",
            ),
        ),
        (
            "env --split-string='rm x'",
            seen(
                "env --split-string=rm x ; env rm x ; rm x",
                "0:0 0:1 1:0 1:1 1:2 2:0",
            ),
        ),
        ("env -S", seen("env -S", "0:0 0:1")),
        (
            "env -S=rm",
            seen("env -S=rm ; env =rm ; rm", "0:0 0:1 1:0 1:1 2:0"),
        ),
        // env's options, `-u NAME`, `\_`, a nested `-S` inside the string (issue 40).
        (
            "env -S'-u X rm v'",
            seen(
                "env -S-u X rm v ; env -u X rm v ; -u X rm v",
                "0:0 0:1 1:0 1:1 1:2 1:3 1:4 2:0",
            ),
        ),
        (
            "env -S'-i\\_rm'",
            seen(
                "env -S-i\\_rm ; env -i rm ; -i_rm",
                "0:0 0:1 1:0 1:1 1:2 2:0",
            ),
        ),
        (
            "env -S'-S\"rm v\"'",
            seen(
                "env -S-S\"rm v\" ; env -Srm v ; env rm v ; rm v ; -Srm v",
                "0:0 0:1 1:0 1:1 2:0 2:1 2:2 3:0 4:0",
            ),
        ),
        (
            "env -S'${X} v'",
            refused("a program it runs (\"env -S'${X} v'\") is only known when it runs"),
        ),
        (
            "env -S'\\q'",
            refused("env -S: invalid sequence \\q, in \"env -S'\\\\q'\": it cannot be checked"),
        ),
        ("env -i rm x", seen("env -i rm x", "0:0 0:1 0:2 0:3")),
        ("sudo rm x", seen("sudo rm x", "0:0 0:1 0:2")),
        (
            "nice -n 5 rm x",
            seen("nice -n 5 rm x", "0:0 0:1 0:2 0:3 0:4"),
        ),
        (
            "find . -exec rm {} ;",
            seen("find . -exec rm {}", "0:0 0:3"),
        ),
        (
            "find . -name x -delete",
            seen("find . -name x -delete", "0:0"),
        ),
        (
            "$x rm",
            refused("its program \"$x\" is only known when it runs"),
        ),
        (
            "sudo $x",
            refused("a program it runs (\"sudo $x\") is only known when it runs"),
        ),
    ]);
}

#[test]
fn each_construct_outside_the_plain_subset_is_named_in_the_refusal() {
    let cases = [
        (
            "cat <<EOF\n$x\nEOF",
            "a here-document (\"<<EOF\\n$x\\nEOF\")",
        ),
        ("cat <<< $x", "a here-string (\"<<< $x\")"),
        ("echo $(ls)", "a command substitution (\"$(ls)\")"),
        ("diff <(ls) x", "a process substitution (\"<(ls)\")"),
        ("echo $'a\\x41'", "a $'…' string (\"$'a\\\\x41'\")"),
        ("echo $@", "a parameter expansion (\"$@\")"),
        ("echo ${HOME:-x}", "a parameter expansion (\"${HOME:-x}\")"),
        ("echo $((x+2))", "an arithmetic expansion (\"$((x+2))\")"),
        ("echo $((8#17))", "an arithmetic expansion (\"$((8#17))\")"),
        (
            "echo \"`ls`\"",
            "a word with an expansion, glob, brace, tilde or quote bash treats specially (\"\\\"`ls`\\\"\")",
        ),
        ("X=1 ls", "a variable assignment (\"X=1\")"),
        ("X=1", "a variable assignment (\"X=1\")"),
        ("export X=1", "a declaration builtin (\"export X=1\")"),
        ("unset X", "a declaration builtin (\"unset X\")"),
        ("(ls) > f", "a subshell (\"(ls)\")"),
        ("((1))", "a compound command (\"((1))\")"),
        ("f() { ls; }", "a function definition (\"f() { ls; }\")"),
        (
            "if true; then ls; fi",
            "a compound command (if, case, loop) (\"if true; then ls; fi\")",
        ),
        (
            "while true; do ls; done",
            "a compound command (if, case, loop) (\"while true; do ls; done\")",
        ),
        ("! ls", "`!` (\"! ls\")"),
        ("[[ -f x ]]", "a [[ … ]] test (\"[[ -f x ]]\")"),
        (
            "echo ~root",
            "a word with an expansion, glob, brace, tilde or quote bash treats specially (\"~root\")",
        ),
        ("ls |& cat", "`|&` (\"|&\")"),
        (
            "ls > out",
            "a redirection that redirects output to a file or reads one (only /dev/null and \
             descriptors are plain) (\"> out\")",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(cmd, want)| {
            let got = plain_parts(cmd).map_err(|e| e.to_string());
            (got.as_ref().err().map(String::as_str) != Some(*want))
                .then(|| format!("{cmd:?}\n  want {want:?}\n  got  {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // What is plain stays plain: a comment, a harmless redirection, quotes that only
    // join a word.
    let words =
        |cmd: &str| plain_parts(cmd).map(|p| p.into_iter().map(|p| p.words).collect::<Vec<_>>());
    assert_eq!(words("ls # hi"), Ok(vec![vec!["ls".to_string()]]));
    assert_eq!(words("ls 2>/dev/null"), Ok(vec![vec!["ls".to_string()]]));
    assert_eq!(words(">/dev/null ls"), Ok(vec![vec!["ls".to_string()]]));
    assert_eq!(
        plain_parts(">out ls").map_err(|e| e.to_string()),
        Err(
            "a redirection that redirects output to a file or reads one (only /dev/null and \
             descriptors are plain) (\">out\")"
                .to_string()
        )
    );
    assert_eq!(
        words("ls 'a b'c"),
        Ok(vec![vec!["ls".to_string(), "a bc".to_string()]])
    );
}

#[test]
fn control_bytes_and_line_continuations_are_refused_outside_single_quotes_only() {
    assert_views(&[
        ("echo 'a\x01b'", seen("echo a\x01b", "0:0")),
        ("echo 'a\\\nb'", seen("echo a\\\nb", "0:0")),
        ("echo 'a\tb'", seen("echo a\tb", "0:0")),
        (
            "echo a\x01b",
            refused("it holds a control character, which bash may read differently"),
        ),
        (
            "echo \x7f",
            refused("it holds a control character, which bash may read differently"),
        ),
        (
            "echo a\\\nb",
            refused("it holds a backslash-newline, which bash may read differently"),
        ),
    ]);
    assert_eq!(
        plain_parts("echo 'a\x01b'").map(|p| p[0].words.clone()),
        Ok(vec!["echo".to_string(), "a\x01b".to_string()])
    );
}

#[test]
fn scripts_nest_eight_deep_and_no_deeper() {
    let evals = |n: usize| format!("{}rm x", "eval ".repeat(n));
    let eight = view(&evals(8)).map(|(commands, _)| commands.split(" ; ").count());
    assert_eq!(eight, Ok(9), "eight scripts inside the command");
    let nine = view(&evals(9)).unwrap_err();
    assert!(
        nine.ends_with("its script \"rm x\" cannot be checked: shell scripts nest too deeply"),
        "{nine}"
    );
}

#[test]
fn a_long_construct_is_quoted_whole_up_to_80_characters_in_a_refusal() {
    // `${x:-a…a}` of exactly 80 characters, then of 81.
    let expansion = |len: usize| format!("${{x:-{}}}", "a".repeat(len - 6));
    let refusal = |len: usize| view(&format!("echo {}", expansion(len))).unwrap_err();
    assert_eq!(
        refusal(80),
        format!(
            "the expansion \"{}\" may evaluate a value as code",
            expansion(80)
        )
    );
    let cut: String = expansion(81).chars().take(80).collect();
    assert_eq!(
        refusal(81),
        format!("the expansion \"{cut}\"… may evaluate a value as code")
    );
}

#[test]
fn a_here_document_whose_first_line_runs_on_is_refused() {
    let runs_on = "a here-document starts on a line whose next part runs past the line end, so \
                   its body cannot be located";
    assert_views(&[
        ("cat <<EOF && (ls\n)\nbody\nEOF", refused(runs_on)),
        (
            "cat <<EOF $(echo\nx)\nbody\nEOF",
            refused(
                "it holds words after a here-document's delimiter, which bash passes to the \
                 command (\"<<EOF $(echo\\nx)\\nbody\\nEOF\")",
            ),
        ),
        (
            "cat <<EOF >/dev/null && (ls\n)\nbody\nEOF",
            refused(runs_on),
        ),
        ("cat <<EOF\nbody\nEOF\nls", seen("cat ; ls", "0:0 1:0")),
        ("cat <<EOF\na\nEOF\nEOF", seen("cat ; EOF", "0:0 1:0")),
        ("cat << EOF\na\nEOF", seen("cat", "0:0")),
        ("cat <<EOF >/dev/null\nx\nEOF", seen("cat", "0:0")),
        ("cat <<EOF\n\\`x\\`\nEOF", seen("cat", "0:0")),
    ]);
}

#[test]
fn words_the_grammar_hides_in_a_redirection_cannot_slip_past_a_deny_rule() {
    // Bash runs `rm -rf x` for each of these: a redirection takes one word, a number
    // against `<` or `>` is its descriptor, and words after a here-document's
    // delimiter are arguments. The grammar reads the `-rf x` as redirection targets or
    // the `0` as an argument, so the deny rule would not see `rm -rf`.
    use crate::permissions_parse::check;
    use flower::engine::permissions::Decision;
    for cmd in [
        "rm 2>/dev/null -rf x",
        "rm >/dev/null -rf x",
        "rm 0</dev/null -rf x",
        "rm <<EOF -rf x\nbody\nEOF",
    ] {
        let decision = check(&["Bash"], &["Bash(rm -rf:*)"], cmd);
        assert!(
            matches!(decision, Decision::Deny { .. }),
            "{cmd:?}: {decision:?}"
        );
    }
    let decision = check(&["Bash"], &["Bash(git push:*)"], "git 0</dev/null push");
    assert!(matches!(decision, Decision::Deny { .. }), "{decision:?}");
    assert_views(&[
        (
            "rm 2>/dev/null -rf x",
            refused(
                "it holds words after a redirection's target, which bash passes to the \
                 command (\"2>/dev/null -rf x\")",
            ),
        ),
        (
            "git 0</dev/null push",
            refused(
                "it holds a descriptor number the parser split from its redirection \
                 (\"</dev/null push\")",
            ),
        ),
        (
            "cat <<EOF -n\nx\nEOF",
            refused(
                "it holds words after a here-document's delimiter, which bash passes to the \
                 command (\"<<EOF -n\\nx\\nEOF\")",
            ),
        ),
        // What bash reads the same way stays checkable.
        ("ls 2>/dev/null >/dev/null", seen("ls", "0:0")),
        ("echo 1>/dev/null", seen("echo", "0:0")),
        ("echo a1>/dev/null", seen("echo a1", "0:0")),
        ("cat <<< a b", seen("cat b", "0:0")),
        (
            "cat <<EOF | rm -rf x\nx\nEOF",
            seen("cat ; rm -rf x", "0:0 1:0"),
        ),
        ("cat <<EOF 2>/dev/null\nx\nEOF", seen("cat", "0:0")),
    ]);
    assert_eq!(
        plain_parts("git 0</dev/null push").map_err(|e| e.to_string()),
        Err(
            "a descriptor number the parser split from its redirection (\"</dev/null push\")"
                .into()
        )
    );
}
