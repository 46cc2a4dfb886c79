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
    "! git status || T",
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
    "s=abc; for x in 'a[$(T)]'; do echo ${s:x}; done",
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
    "a=(1); unset 'a[$(T)]'",
    "PS4='$(T)'; set -x; git status",
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
    "if ! git status; then git status; else T; fi",
    "while T; do break; done",
    "until T; do break; done",
    "case x in x) T;; esac",
    "git() { T; }; git status",
    "f() { T; }; f",
    "function f { T; }; f",
    "for f in a; do T; done",
    "select x in a; do T; break; done <<< 1",
    // The deny-rule gaps of issue 31: names assigned by builtins and wrappers, named
    // descriptors, names bound to code, clustered options, wrappers' command options.
    "true {b['a[$(T)]']}</dev/null",
    "read OPTIND <<< 'a[$(T)]'; getopts a o -a",
    "OPTIND='a[$(T)]'; getopts a o -a",
    "read RANDOM <<< 'a[$(T)]'",
    "read HISTCMD <<< 'a[$(T)]'",
    "read PS4 <<< '$(T)'; set -x; true",
    "printf -v PS4 '$(T)'; set -x; true",
    "printf -v 'x[$(T)]' 1",
    "env 'BASH_FUNC_ls%%=() { T; }' bash -c ls",
    "echo \"T\" > s.sh; env BASH_ENV=s.sh bash -c :",
    "hash -p /usr/bin/env x; x T",
    "shopt -s expand_aliases\nalias x='T'\nx",
    "shopt -s expand_aliases\nalias x=env\nx T",
    "env -iS 'T'",
    "env -vS 'T'",
    // Issue 40: env's own options, `-u NAME`, `-C DIR`, `\_` and a nested `-S` at the
    // start of a split string, and an abbreviated `--split-string`.
    "env -S'-v T'",
    "env -S'-i T'",
    "env -S'-u X T'",
    "env -S'-C . T'",
    "env -S'-v\\_\"\"T'",
    "env -S'-S\"-i T\"'",
    "env --split='-v T'",
    "flock . -c 'T'",
    "mapfile -C 'T #' -c 1 <<< x",
    "script -qc 'T' /dev/null",
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

/// One adversarial command and its effect: `marker` is created in the workspace when
/// the hidden command runs.
pub struct Case {
    pub cmd: String,
    pub marker: String,
}

/// The template with each standalone `T` (not part of a word such as `OPTIND` or
/// `EXIT`) replaced by `hidden`.
fn fill(template: &str, hidden: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| chars[j]);
        if c == 'T' && !word(before) && !word(chars.get(i + 1).copied()) {
            out.push_str(hidden);
        } else {
            out.push(c);
        }
    }
    out
}

pub fn corpus() -> Vec<Case> {
    let mut out = Vec::new();
    for spelling in 0..4 {
        for t in TEMPLATES {
            let marker = format!("m{}", out.len());
            out.push(Case {
                cmd: fill(t, &hidden(spelling, &marker)),
                marker,
            });
        }
    }
    out
}

/// Harmless commands and the allow rules under which each should run: a refusal is an
/// over-denial, counted in the corpus report. The parser should prove these safe.
pub const HARMLESS: &[(&str, &[&str])] = &[
    ("time git status", &["Bash(git status:*)"]),
    ("time -p git status", &["Bash(git status:*)"]),
    ("ls ./*", &["Bash(ls:*)"]),
    ("ls *.rs src/*", &["Bash(ls:*)"]),
    ("wc -l src/*.rs", &["Bash(wc:*)"]),
    ("git diff -- ./*.rs", &["Bash(git diff:*)"]),
    ("cat <<'EOF'\nhello $x `y`\nEOF", &["Bash(cat:*)"]),
    ("cat <<EOF\nplain text\nEOF", &["Bash(cat:*)"]),
    ("cat <<-'EOF'\n\tindented $x\n\tEOF", &["Bash(cat:*)"]),
    ("echo $'a;b'", &["Bash(echo:*)"]),
    ("echo $'line\\n'", &["Bash(echo:*)"]),
    ("git status <<< 'x'", &["Bash(git status:*)"]),
    (
        "git status 2>&1 | cat",
        &["Bash(git status:*)", "Bash(cat:*)"],
    ),
    ("git status >/dev/null 2>&1", &["Bash(git status:*)"]),
    ("git log --oneline -5", &["Bash(git log:*)"]),
    ("echo 'a;b' \"c|d\"", &["Bash(echo:*)"]),
    (
        "git status && git diff",
        &["Bash(git status:*)", "Bash(git diff:*)"],
    ),
    ("git status; git status", &["Bash(git status)"]),
    ("git status # why", &["Bash(git status)"]),
    ("echo a | tr a b", &["Bash(echo:*)", "Bash(tr:*)"]),
    ("cat ./README.md", &["Bash(cat:*)"]),
    ("echo 'it'\\''s'", &["Bash(echo:*)"]),
    ("find . -name '*.rs'", &["Bash(find:*)"]),
    ("cat < /dev/null", &["Bash(cat:*)"]),
    ("read -r line < /dev/null", &["Bash(read:*)"]),
    ("printf '%s\\n' a b", &["Bash(printf:*)"]),
    ("cargo test -- --nocapture", &["Bash(cargo test:*)"]),
    ("npm run build", &["Bash(npm run *)"]),
    ("echo \"$HOME\"", &["Bash(echo:*)"]),
    ("ls $HOME", &["Bash(ls:*)"]),
    ("echo ~", &["Bash(echo:*)"]),
    ("ls ~/src", &["Bash(ls:*)"]),
    ("ls {a,b}", &["Bash(ls:*)"]),
    ("VAR=1 git status", &["Bash(git status:*)"]),
    ("for f in a b; do echo $f; done", &["Bash(echo:*)"]),
    (
        "git commit -m \"$(cat <<'EOF'\nmsg\nEOF\n)\"",
        &["Bash(git commit:*)", "Bash(cat:*)"],
    ),
    ("git status &", &["Bash(git status:*)"]),
    ("(git status)", &["Bash(git status:*)"]),
    ("{ git status; }", &["Bash(git status:*)"]),
    ("git status 2> err.txt", &["Bash(git status:*)"]),
    ("echo $((1+2*3))", &["Bash(echo:*)"]),
    ("(cd src && ls)", &["Bash(cd:*)", "Bash(ls:*)"]),
];
