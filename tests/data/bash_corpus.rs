//! The adversarial Bash corpus, shared by the corpus test and the permissions
//! benchmark.

/// Templates; `T` is replaced by the hidden command (`touch <marker>`).
pub const TEMPLATES: &[&str] = &[
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

pub struct Case {
    pub cmd: String,
    pub marker: String,
}

pub fn corpus() -> Vec<Case> {
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
