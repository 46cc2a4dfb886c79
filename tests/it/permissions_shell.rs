//! The shell splitter: which simple commands a command line runs.

use flower::engine::shell::{ShellError, split_commands};

fn argvs(cmd: &str) -> Vec<Vec<String>> {
    split_commands(cmd)
        .unwrap_or_else(|e| panic!("{cmd:?} should parse: {e}"))
        .iter()
        .map(|c| c.words.iter().map(|w| w.text.clone()).collect())
        .collect()
}

fn has(cmd: &str, argv: &[&str]) -> bool {
    argvs(cmd)
        .iter()
        .any(|a| a.iter().map(String::as_str).eq(argv.iter().copied()))
}

#[test]
fn lists_and_pipelines_split_into_parts() {
    assert_eq!(
        argvs("a b; c && d || e | f |& g & h\ni"),
        vec![
            vec!["a", "b"],
            vec!["c"],
            vec!["d"],
            vec!["e"],
            vec!["f"],
            vec!["g"],
            vec!["h"],
            vec!["i"]
        ]
    );
}

#[test]
fn quotes_and_escapes_are_removed_and_do_not_split() {
    assert_eq!(
        argvs("echo 'a;b' \"c|d\" e\\&f"),
        vec![vec!["echo", "a;b", "c|d", "e&f"]]
    );
    assert_eq!(argvs(r"echo $'a\x41\n\'b'"), vec![vec!["echo", "aA\n'b"]]);
    assert_eq!(argvs("ec\"ho\" x"), vec![vec!["echo", "x"]]);
    assert_eq!(argvs("echo a\\\nb"), vec![vec!["echo", "ab"]]);
}

#[test]
fn substitutions_are_found_wherever_they_hide() {
    let cases = [
        "echo $(rm a)",
        "echo `rm a`",
        "echo \"x $(rm a) y\"",
        "echo \"x `rm a` y\"",
        "echo <(rm a)",
        "echo >(rm a)",
        "echo ${x:-$(rm a)}",
        "echo \"${x:-$(rm a)}\"",
        "X=$(rm a) echo",
        "echo > $(rm a)",
        "for i in $(rm a); do :; done",
        "cat <<EOF\n$(rm a)\nEOF",
        "cat <<EOF\n`rm a`\nEOF",
        "echo $(echo $(rm a))",
        "echo `echo \\`rm a\\``",
        "(rm a)",
        "{ rm a; }",
        "if rm a; then :; fi",
        "while rm a; do :; done",
        "! rm a",
        "time rm a",
        "$(rm a)",
    ];
    for c in cases {
        assert!(has(c, &["rm", "a"]), "{c:?} runs `rm a`: {:?}", argvs(c));
    }
}

#[test]
fn literal_text_hides_nothing() {
    for c in [
        "echo '$(rm a)'",
        "echo '`rm a`'",
        "echo \\$(rm a) ",
        "cat <<'EOF'\n$(rm a)\nEOF",
        "echo # $(rm a)",
        "echo $((1 + 2))",
        "echo $(( (1 + 2) * 3 )) $[4*5] $(($# + $?))",
        "echo ${x} ${x:-d} ${x:=d} ${x:1:2} ${x: -1} ${#x} ${a[@]} ${a[0]} ${#a[*]} ${x/a/b} ${x%.*}",
        "read -r line",
        "read -p prompt -d x -a arr name",
        "declare x=$(pwd)",
        "printf -v out '%s' x",
        "test -v HOME",
        "[[ -f a && 1 -eq 1 ]]",
        "[[ -v HOME ]]",
    ] {
        let Ok(cmds) = split_commands(c) else {
            // An error is also safe; but these are ordinary and should parse.
            if c.contains("\\$(") {
                continue;
            }
            panic!("{c:?} should parse");
        };
        assert!(
            !cmds.iter().any(|x| x.argv().first() == Some(&"rm")),
            "{c:?}: {cmds:?}"
        );
    }
}

#[test]
fn redirections_and_assignments_are_separated_from_words() {
    let cmds = split_commands("FOO=1 BAR=\"x y\" make all 2>&1 > log").unwrap();
    assert_eq!(cmds.len(), 1);
    let c = &cmds[0];
    assert_eq!(
        c.assignments
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>(),
        ["FOO=1", "BAR=x y"]
    );
    assert_eq!(c.argv(), ["make", "all"]);
    assert_eq!(c.redirects.len(), 2);
    assert_eq!((c.redirects[0].fd, c.redirects[0].op), (Some(2), ">&"));
    assert!(!c.redirects[0].writes_file());
    assert!(c.redirects[1].writes_file());
    assert!(c.writes_file());
    assert_eq!(c.source, "FOO=1 BAR=\"x y\" make all 2>&1 > log");

    // `2 >x`: 2 is an argument, not a descriptor.
    let c = &split_commands("echo 2 >x").unwrap()[0];
    assert_eq!(c.argv(), ["echo", "2"]);
    // An assignment after the command word is an argument.
    let c = &split_commands("make FOO=1").unwrap()[0];
    assert_eq!(c.argv(), ["make", "FOO=1"]);
    assert!(c.assignments.is_empty());
}

#[test]
fn normalized_text_quotes_what_needs_it() {
    let c = &split_commands("npm   run \"a b\" 'x;y' '' plain").unwrap()[0];
    assert_eq!(c.normalized(), "npm run 'a b' 'x;y' '' plain");
}

#[test]
fn what_cannot_be_analysed_is_an_error() {
    let cases = [
        "echo 'x",
        "echo \"x",
        "echo `x",
        "echo $(x",
        "echo ${x",
        "echo )",
        "echo (x)",
        "f() { x; }",
        "function f { x; }",
        "case a in a) x;; esac",
        "coproc x",
        "a=(1 2)",
        "echo ${x:-'y'}",
        "echo $(( $(x) ))",
        "echo $(( 'x' ))",
        "echo >",
        "(x) y",
        // Code hidden in values that bash evaluates.
        "for ((i=0;i<3;i++)); do y; done",
        "echo $((x))",
        "echo $((x + 1))",
        "((x))",
        "echo $[x]",
        "echo $(( ${x} ))",
        "echo ${!x}",
        "echo ${x@P}",
        "echo ${a[x]}",
        "echo ${a[$i]}",
        "echo ${y:x}",
        "echo ${y:0:n}",
        "let x=1",
        "declare -i x=1",
        "declare -n r=x",
        "declare 'a[$(x)]=1'",
        "local \"$n\"=1",
        "read 'a[$(x)]'",
        "read -r \"$name\"",
        "read -a \"$name\"",
        "mapfile -C cb arr",
        "printf -v \"$n\" x",
        "printf -v 'a[$(x)]' x",
        "test -v 'a[$(x)]'",
        "[ -v \"$n\" ]",
        "[[ -v $n ]]",
        "[[ $x -eq 1 ]]",
        "[[ 1 -eq x ]]",
        "[[ 1 -eq 1 && 2 -eq x ]]",
    ];
    for c in cases {
        assert!(split_commands(c).is_err(), "{c:?} should be refused");
    }
    let deep = format!("{}x{}", "$(".repeat(200), ")".repeat(200));
    assert_eq!(split_commands(&deep).unwrap_err(), ShellError::TooDeep);
}

#[test]
fn compound_commands_and_keywords() {
    assert_eq!(
        argvs("if a; then b; elif c; then d; else e; fi"),
        vec![vec!["a"], vec!["b"], vec!["c"], vec!["d"], vec!["e"]]
    );
    assert_eq!(argvs("for x in 1 2; do y $x; done"), vec![vec!["y", "$x"]]);
    assert_eq!(argvs("for ((;;)); do y; done"), vec![vec!["y"]]);
    assert_eq!(argvs("{ { a; } }"), vec![vec!["a"]]);
    assert_eq!(argvs("if (a) then b; fi"), vec![vec!["a"], vec!["b"]]);
    // Quoted keywords are commands.
    assert_eq!(argvs("'if' x"), vec![vec!["if", "x"]]);
    // A keyword only counts at the start of a command.
    assert_eq!(
        argvs("echo if then fi"),
        vec![vec!["echo", "if", "then", "fi"]]
    );
    // `$((…)` closed by `) )` is a subshell in a command substitution, as in bash.
    assert!(has("echo $((rm a) )", &["rm", "a"]));
    assert!(has("echo $((echo a);(rm a))", &["rm", "a"]));
}

#[test]
fn dynamic_words_are_marked() {
    let c = &split_commands("$CMD a* 'b*' ~/x {a,b} plain \"$(x)\"").unwrap();
    let main = c.iter().find(|c| c.words.len() == 7).unwrap();
    let dynamic: Vec<bool> = main.words.iter().map(|w| w.dynamic).collect();
    assert_eq!(dynamic, [true, true, false, true, true, false, true]);
}

#[test]
fn long_inputs_are_split_in_linear_time() {
    // Quadratic scanning would take minutes on these.
    let n = 200_000;
    for cmd in [
        format!("echo {}", "[".repeat(n)),
        format!("echo {{{}", "}".repeat(n)),
        format!("echo {}", "{,".repeat(n)),
        format!("echo {}", "a ".repeat(n)),
        "a;".repeat(n),
        format!("echo '{}'", "x".repeat(n)),
    ] {
        let _ = split_commands(&cmd);
    }
}
