//! What a Bash command runs, read from a real parse (tree-sitter's bash grammar).
//!
//! The permission checker ([`super::permissions`]) needs two views of a command:
//!
//! - [`plain_parts`], for allow rules: the simple commands of a command that lies
//!   entirely in a *plain subset* of bash, or the reason it does not. The subset is
//!   simple commands made of literal words and quoted strings (no expansion of any
//!   kind, also none inside double quotes; no glob, brace or tilde characters), joined
//!   by `&&`, `||`, `;`, `|` and newlines, with comments, and redirections only to
//!   `/dev/null` or between descriptors (`2>&1`). Inside it bash and the grammar agree
//!   on every word, so a prefix, exact or wildcard rule can be matched against the
//!   words. Everything else (here-documents, substitutions, `$'…'`, expansions,
//!   other redirections, assignments, loops, functions, subshells, `&`, reserved
//!   words as programs, backslash-newline, control characters, parse errors) is
//!   outside it, and only a bare `Bash` rule allows it.
//! - [`deny_view`], for deny rules: every simple command anywhere in the tree
//!   (substitutions, loops, function bodies, here-document bodies, `bash -c` and
//!   `eval` scripts parsed in turn) with each word either known or dynamic, and the
//!   places the command could start (after wrappers such as `sudo` or `xargs`, after
//!   `find -exec`). It is an error, and the caller denies, when a part's program is
//!   only known at run time, when the parse has errors, or at the places where bash
//!   evaluates a *value* as code (arithmetic, `${!x}`, `${x@P}`, subscripts,
//!   `declare -i`, `read`/`printf -v`/`test -v` of a computed name, assignments to
//!   bash's special variables such as `OPTIND` or `PS4`), or where the grammar is
//!   known to read a here-document differently from bash.
//!
//! Parsing is bounded: commands over [`MAX_COMMAND_BYTES`], trees deeper than
//! [`MAX_DEPTH`] and parses over [`PARSE_BUDGET`] are errors, never a crash or a hang.

use std::ops::ControlFlow;
use std::ops::Range;
use std::time::{Duration, Instant};
use tree_sitter::{Node, ParseOptions, Parser, Tree, TreeCursor};

/// Longest command analysed. Linux refuses a single argument over 128 KiB
/// (`MAX_ARG_STRLEN`), so `bash -c` could not run a longer one anyway.
pub const MAX_COMMAND_BYTES: usize = 100_000;
/// Deepest syntax tree analysed (nesting of parentheses, substitutions …).
pub const MAX_DEPTH: usize = 400;
/// Longest a parse may take in [`plain_parts`] and [`deny_view`]
/// ([`plain_parts_within`] takes the caller's).
pub const PARSE_BUDGET: Duration = Duration::from_millis(500);
/// How deeply `bash -c '…'`/`eval` scripts inside scripts are followed.
const MAX_SCRIPT_DEPTH: usize = 8;

/// Why a command could not be parsed at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("the command is {0} bytes long, over the {MAX_COMMAND_BYTES}-byte limit")]
    TooLong(usize),
    #[error("the command nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// The budget the parse ran out of.
    #[error("parsing the command took longer than {} ms", .0.as_millis())]
    TimedOut(Duration),
    #[error("the bash grammar could not be loaded: {0}")]
    Grammar(String),
    #[error("bash syntax error near {0:?}")]
    Syntax(String),
}

/// One simple command of a plain command: its words after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub words: Vec<String>,
    /// The part as written.
    pub source: String,
}

/// Why a command is outside the plain subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPlain {
    Parse(ParseError),
    /// What construct, and the text where it is.
    Construct {
        what: String,
        at: String,
    },
}

impl std::fmt::Display for NotPlain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotPlain::Parse(e) => write!(f, "{e}"),
            NotPlain::Construct { what, at } => write!(f, "{what} ({})", short(at)),
        }
    }
}

/// A word of [`deny_view`]: its text, or `None` when only known at run time.
pub type DenyWord = Option<String>;

/// Every simple command of a command, for deny matching.
#[derive(Debug, Clone, Default)]
pub struct DenyView {
    /// The word lists of the simple commands (scripts' commands included).
    pub commands: Vec<Vec<DenyWord>>,
    /// Where a command may start: `(index into commands, first word)`. A candidate's
    /// first word also counts with its directory stripped (`/bin/rm` → `rm`).
    pub starts: Vec<(usize, usize)>,
    /// The source text of each command, for messages.
    pub sources: Vec<String>,
}

/// Parses `cmd` with the bounds above, within `budget`.
fn parse(cmd: &str, budget: Duration) -> Result<Tree, ParseError> {
    if cmd.len() > MAX_COMMAND_BYTES {
        return Err(ParseError::TooLong(cmd.len()));
    }
    // Refused before the C parser sees it: a grammar's deep nesting is where a parser
    // written in C can recurse, and a test thread's stack is small. Brackets in quotes
    // count too, which only ever refuses more.
    if bracket_depth(cmd) > MAX_DEPTH {
        return Err(ParseError::TooDeep);
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .map_err(|e| ParseError::Grammar(e.to_string()))?;
    let deadline = Instant::now() + budget;
    // The grammar's C scanner calls isdigit() and kin on decoded code points, which is
    // undefined (and crashed flower) for one above 255. The parser sees each non-ASCII
    // byte as `%` instead: bash's syntax is all ASCII and treats such bytes as word
    // characters, as it does `%` (and `$%` stays a literal, where a letter would make a
    // variable). Offsets are unchanged: every later walk reads the text from `cmd`.
    let bytes: Vec<u8> = cmd
        .bytes()
        .map(|b| if b.is_ascii() { b } else { b'%' })
        .collect();
    let mut input = |at: usize, _| bytes.get(at..).unwrap_or(&[]);
    let mut progress = |_: &tree_sitter::ParseState| {
        if Instant::now() > deadline {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let options = ParseOptions::new().progress_callback(&mut progress);
    let tree = parser
        .parse_with_options(&mut input, None, Some(options))
        .ok_or(ParseError::TimedOut(budget))?;
    check_depth(&tree)?;
    Ok(tree)
}

/// The deepest nesting of `(`, `{` and `[`, read as bytes.
fn bracket_depth(cmd: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for byte in cmd.bytes() {
        match byte {
            b'(' | b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Walks the tree without recursion: too deep is an error (the later walks recurse).
fn check_depth(tree: &Tree) -> Result<(), ParseError> {
    let mut cursor = tree.walk();
    let mut depth = 0usize;
    loop {
        if depth > MAX_DEPTH {
            return Err(ParseError::TooDeep);
        }
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return Ok(());
            }
            depth -= 1;
        }
    }
}

/// Parses and refuses a tree with syntax errors.
fn parse_clean(cmd: &str, budget: Duration) -> Result<Tree, ParseError> {
    let tree = parse(cmd, budget)?;
    let root = tree.root_node();
    if root.has_error() {
        let at = first_error(root)
            .map(|n| text(n, cmd).to_string())
            .unwrap_or_default();
        return Err(ParseError::Syntax(short(&at)));
    }
    Ok(tree)
}

fn first_error(node: Node) -> Option<Node> {
    if node.is_error() || node.is_missing() {
        return Some(node);
    }
    let mut c = node.walk();
    node.children(&mut c)
        .filter(|n| n.has_error() || n.is_missing())
        .find_map(first_error)
}

fn text<'a>(node: Node, src: &'a str) -> &'a str {
    src.get(node.byte_range()).unwrap_or("")
}

fn short(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() > MAX {
        format!("{:?}…", s.chars().take(MAX).collect::<String>())
    } else {
        format!("{s:?}")
    }
}

/// The byte ranges of single-quoted strings, inside which any byte is literal.
fn raw_ranges(root: Node) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut cursor = root.walk();
    loop {
        let n = cursor.node();
        let raw = n.kind() == "raw_string";
        if raw {
            out.push(n.byte_range());
        }
        if !next_node(&mut cursor, !raw) {
            return out;
        }
    }
}

/// Moves `cursor` to the next node in pre-order, into the current node's children
/// only when `descend`; `false` when the tree is done.
fn next_node(cursor: &mut TreeCursor, descend: bool) -> bool {
    if descend && cursor.goto_first_child() {
        return true;
    }
    loop {
        if cursor.goto_next_sibling() {
            return true;
        }
        if !cursor.goto_parent() {
            return false;
        }
    }
}

/// Backslash-newline and control characters outside single quotes: where the grammar
/// and bash are known to split differently (`EO\⏎F`, `"$\⏎(…)"`, `\r`).
fn risky_bytes(cmd: &str, root: Node) -> Option<&'static str> {
    let raw = raw_ranges(root);
    let inside = |i: usize| raw.iter().any(|r| r.contains(&i));
    let b = cmd.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'\\' && b.get(i + 1) == Some(&b'\n') && !inside(i) {
            return Some("a backslash-newline");
        }
        if c < 0x20 && c != b'\n' && c != b'\t' && !inside(i) || c == 0x7f {
            return Some("a control character");
        }
    }
    None
}

/// A redirection that the grammar reads differently from bash, with the node: bash
/// takes exactly one word after `>`, `<` and kin (`rm 2>/dev/null -rf x` runs
/// `rm -rf x`), where the grammar makes every following word a target; and it reads a
/// number written against `<` or `>` as the descriptor (`git 0</dev/null push` runs
/// `git push`), where the grammar can leave it a word of the command. Either way the
/// words a rule would see are not the ones bash runs.
fn misread_redirect<'t>(root: Node<'t>, src: &str) -> Option<(&'static str, Node<'t>)> {
    let mut cursor = root.walk();
    loop {
        let n = cursor.node();
        if matches!(
            n.kind(),
            "file_redirect" | "herestring_redirect" | "heredoc_redirect"
        ) {
            let mut c = n.walk();
            let has_descriptor = n.children(&mut c).any(|ch| ch.kind() == "file_descriptor");
            let head = src.get(..n.start_byte()).unwrap_or("");
            let digits = head.bytes().rev().take_while(u8::is_ascii_digit).count();
            let number_word = digits > 0
                && head[..head.len() - digits]
                    .bytes()
                    .next_back()
                    .is_none_or(|b| b.is_ascii_whitespace() || b";&|()".contains(&b));
            if !has_descriptor && number_word {
                return Some((
                    "a descriptor number the parser split from its redirection",
                    n,
                ));
            }
            // Only on the `<<` line: below it is the body, which `check_heredoc` reads
            // by bash's rules (the grammar may make a word of part of it).
            let line_end = src[n.start_byte()..]
                .find('\n')
                .map_or(src.len(), |i| n.start_byte() + i);
            let mut c = n.walk();
            let heredoc_words = n.kind() == "heredoc_redirect"
                && n.named_children(&mut c).any(|ch| {
                    ch.start_byte() < line_end
                        && !matches!(
                            ch.kind(),
                            "heredoc_start"
                                | "heredoc_body"
                                | "heredoc_end"
                                | "file_descriptor"
                                | "file_redirect"
                                | "herestring_redirect"
                                | "pipeline"
                                | "list"
                                | "command"
                                | "redirected_statement"
                                | "subshell"
                                | "compound_statement"
                                | "negated_command"
                        )
                });
            if heredoc_words {
                return Some((
                    "words after a here-document's delimiter, which bash passes to the command",
                    n,
                ));
            }
            let mut c = n.walk();
            let targets = n.children_by_field_name("destination", &mut c).count();
            if n.kind() != "heredoc_redirect" && targets > 1 {
                return Some((
                    "words after a redirection's target, which bash passes to the command",
                    n,
                ));
            }
        }
        if !next_node(&mut cursor, true) {
            return None;
        }
    }
}

/// Bash's reserved words: as a program name they change what the rest means.
const RESERVED: [&str; 22] = [
    "!", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if",
    "in", "select", "then", "until", "while", "{", "}", "time", "[[", "]]",
];

/// The value of a plain word node after quote removal; `None` when it is not plain.
fn literal(node: Node, src: &str) -> Option<String> {
    match node.kind() {
        "word" | "number" => unquoted(text(node, src)),
        "raw_string" => {
            let t = text(node, src);
            t.strip_prefix('\'')?.strip_suffix('\'').map(str::to_string)
        }
        "string" => {
            let mut c = node.walk();
            if node
                .named_children(&mut c)
                .any(|n| n.kind() != "string_content")
            {
                return None;
            }
            double_quoted(text(node, src))
        }
        "concatenation" if text(node, src) == "{}" => Some("{}".into()),
        "concatenation" => {
            let mut out = String::new();
            let mut c = node.walk();
            for ch in node.children(&mut c) {
                // A lone bracket or brace is only literal as a whole word: `[x]`.
                if matches!(text(ch, src), "[" | "]" | "{" | "}") {
                    return None;
                }
                out.push_str(&literal(ch, src)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// The first token of a simple command that is not a node of its own (`$` of a
/// `$"…"` string): the grammar then says less than bash does.
fn stray_token(node: Node) -> Option<Node> {
    let mut c = node.walk();
    node.children(&mut c).find(|n| !n.is_named())
}

/// An unquoted word: backslash escapes removed; `None` for anything bash would expand
/// or treat specially (globs, braces, tilde, `$`, quotes the grammar left inside).
fn unquoted(t: &str) -> Option<String> {
    // A lone `{}` (find -exec), `[` or `]` (test) cannot expand.
    if matches!(t, "{}" | "[" | "]") {
        return Some(t.to_string());
    }
    if t.is_empty() {
        return None;
    }
    let mut out = String::new();
    let mut prev = None;
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        let after = prev.replace(c);
        match c {
            // Tilde expansion happens at the start of a word and after `=` or `:`.
            '~' if after.is_some_and(|p| p != '=' && p != ':') => out.push(c),
            '\\' => match chars.next() {
                None | Some('\n') => return None,
                Some(e) => {
                    prev = Some(e);
                    out.push(e)
                }
            },
            c if c.is_ascii_alphanumeric() || !c.is_ascii() => out.push(c),
            '-' | '_' | '.' | '/' | ':' | '=' | '+' | ',' | '@' | '%' | '^' | '!' | '#' => {
                out.push(c)
            }
            _ => return None,
        }
    }
    Some(out)
}

/// A double-quoted string without expansions: `\$ \` \" \\` unescaped, other
/// backslashes kept; `None` if it holds `$`, a backquote or a backslash-newline.
fn double_quoted(t: &str) -> Option<String> {
    let inner = t.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                None | Some('\n') => return None,
                Some(e @ ('$' | '`' | '"' | '\\')) => out.push(e),
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
            },
            '$' | '`' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// The simple commands of `cmd` when all of it is in the plain subset (see the
/// module documentation).
pub fn plain_parts(cmd: &str) -> Result<Vec<Part>, NotPlain> {
    plain_parts_within(cmd, PARSE_BUDGET)
}

/// [`plain_parts`] with a parse budget of the caller's instead of [`PARSE_BUDGET`]: a
/// parse that takes longer is [`ParseError::TimedOut`].
pub fn plain_parts_within(cmd: &str, budget: Duration) -> Result<Vec<Part>, NotPlain> {
    let tree = parse_clean(cmd, budget).map_err(NotPlain::Parse)?;
    let root = tree.root_node();
    if let Some(what) = risky_bytes(cmd, root) {
        return Err(NotPlain::Construct {
            what: what.into(),
            at: cmd.into(),
        });
    }
    if let Some((what, at)) = misread_redirect(root, cmd) {
        return Err(NotPlain::Construct {
            what: what.into(),
            at: text(at, cmd).into(),
        });
    }
    let mut parts = Vec::new();
    plain_statement(root, cmd, &mut parts)?;
    Ok(parts)
}

fn not_plain(node: Node, src: &str) -> NotPlain {
    let what = match node.kind() {
        "heredoc_redirect" => "a here-document",
        "herestring_redirect" => "a here-string",
        "command_substitution" => "a command substitution",
        "process_substitution" => "a process substitution",
        "ansi_c_string" => "a $'…' string",
        "translated_string" => "a $\"…\" string",
        "simple_expansion" | "expansion" => "a parameter expansion",
        "arithmetic_expansion" => "an arithmetic expansion",
        "file_redirect" => {
            "a redirection that redirects output to a file or reads one (only /dev/null and \
             descriptors are plain)"
        }
        "variable_assignment" | "variable_assignments" => "a variable assignment",
        "declaration_command" | "unset_command" => "a declaration builtin",
        "subshell" => "a subshell",
        "compound_statement" => "a compound command",
        "function_definition" => "a function definition",
        "if_statement"
        | "case_statement"
        | "while_statement"
        | "for_statement"
        | "c_style_for_statement" => "a compound command (if, case, loop)",
        "negated_command" => "`!`",
        "test_command" => "a [[ … ]] test",
        "word" | "concatenation" | "string" | "number" => {
            "a word with an expansion, glob, brace, tilde or quote bash treats specially"
        }
        "&" => "a background `&`",
        "|&" => "`|&`",
        _ => "a construct outside the plain subset",
    };
    NotPlain::Construct {
        what: what.into(),
        at: text(node, src).into(),
    }
}

fn plain_statement(node: Node, src: &str, out: &mut Vec<Part>) -> Result<(), NotPlain> {
    match node.kind() {
        "program" | "list" | "pipeline" => {
            let mut c = node.walk();
            for ch in node.children(&mut c) {
                if ch.is_named() {
                    plain_statement(ch, src, out)?;
                } else if !matches!(ch.kind(), ";" | "&&" | "||" | "|" | "\n") {
                    return Err(not_plain(ch, src));
                }
            }
            Ok(())
        }
        "comment" => Ok(()),
        "redirected_statement" => {
            let mut c = node.walk();
            for ch in node.named_children(&mut c) {
                if ch.kind() == "file_redirect" {
                    if !harmless_redirect(ch, src) {
                        return Err(not_plain(ch, src));
                    }
                } else if matches!(ch.kind(), "command" | "pipeline" | "list") {
                    plain_statement(ch, src, out)?;
                } else {
                    return Err(not_plain(ch, src));
                }
            }
            Ok(())
        }
        "command" => {
            if let Some(t) = stray_token(node) {
                return Err(not_plain(t, src));
            }
            let mut words = Vec::new();
            let mut c = node.walk();
            for ch in node.named_children(&mut c) {
                match ch.kind() {
                    "command_name" => {
                        let Some(w) = ch.named_child(0) else {
                            return Err(not_plain(ch, src));
                        };
                        let is_reserved = w.kind() == "word" && RESERVED.contains(&text(w, src));
                        match literal(w, src) {
                            Some(v) if !is_reserved => words.push(v),
                            _ => return Err(not_plain(w, src)),
                        }
                    }
                    "file_redirect" if harmless_redirect(ch, src) => {}
                    "comment" => {}
                    _ => match literal(ch, src) {
                        Some(v) => words.push(v),
                        None => return Err(not_plain(ch, src)),
                    },
                }
            }
            if words.is_empty() {
                return Err(not_plain(node, src));
            }
            if NAME_BUILTINS.contains(&words[0].as_str()) && words.iter().any(|w| w.contains('[')) {
                return Err(NotPlain::Construct {
                    what: "a builtin that evaluates a subscripted variable name".into(),
                    at: text(node, src).into(),
                });
            }
            out.push(Part {
                words,
                source: text(node, src).to_string(),
            });
            Ok(())
        }
        _ => Err(not_plain(node, src)),
    }
}

/// Builtins that take a variable name and evaluate a subscript in it as arithmetic
/// (`printf -v 'a[$(cmd)]'` runs `cmd`).
const NAME_BUILTINS: [&str; 14] = [
    "printf",
    "read",
    "mapfile",
    "readarray",
    "test",
    "unset",
    "getopts",
    "wait",
    "let",
    "declare",
    "typeset",
    "local",
    "export",
    "readonly",
];

/// A redirection that writes nothing and reads nothing: to or from `/dev/null`, or
/// between descriptors (`2>&1`, `>&-`).
fn harmless_redirect(node: Node, src: &str) -> bool {
    let mut op = None;
    let mut dest = None;
    let mut c = node.walk();
    for ch in node.children(&mut c) {
        match ch.kind() {
            "file_descriptor" => {}
            k if !ch.is_named() => op = Some(k.to_string()),
            _ => {
                if dest.is_some() {
                    return false;
                }
                dest = Some(ch);
            }
        }
    }
    let dest_text = dest.and_then(|d| literal(d, src));
    match (op.as_deref(), dest_text.as_deref()) {
        (Some(">&-" | "<&-"), None) => dest.is_none(),
        (Some(">" | ">>" | "&>" | "&>>" | ">|" | "<" | ">&"), Some("/dev/null")) => true,
        (Some(">&" | "<&"), Some(d)) => {
            d == "-" || (!d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        }
        _ => false,
    }
}

/// Programs that run their arguments as a command, for deny matching.
const WRAPPERS: [&str; 28] = [
    "command", "builtin", "exec", "nohup", "time", "env", "sudo", "doas", "nice", "ionice",
    "timeout", "stdbuf", "xargs", "setsid", "chrt", "taskset", "unbuffer", "chroot", "watch",
    "flock", "coproc", "busybox", "strace", "ltrace", "runuser", "unshare", "nsenter", "parallel",
];

/// Shells whose `-c` script runs as commands.
const SHELLS: [&str; 7] = ["bash", "sh", "zsh", "dash", "ksh", "fish", "busybox"];

/// Variables whose assignment bash evaluates as arithmetic or prompt code, or that
/// change how later commands are read.
fn special_variable(name: &str) -> bool {
    const NAMES: [&str; 20] = [
        "OPTIND",
        "OPTERR",
        "RANDOM",
        "SRANDOM",
        "SECONDS",
        "LINENO",
        "HISTCMD",
        "EPOCHSECONDS",
        "EPOCHREALTIME",
        "COLUMNS",
        "LINES",
        "HISTSIZE",
        "HISTFILESIZE",
        "MAILCHECK",
        "TMOUT",
        "PROMPT_COMMAND",
        "ENV",
        "SHELLOPTS",
        "GLOBIGNORE",
        "FUNCNEST",
    ];
    NAMES.contains(&name) || name.starts_with("BASH") || name.starts_with("PS")
}

/// The deny view of `cmd` (see the module documentation). `Err` says why the command
/// cannot be checked against deny rules.
pub fn deny_view(cmd: &str) -> Result<DenyView, String> {
    let mut view = DenyView::default();
    collect(cmd, 0, &mut view)?;
    Ok(view)
}

fn collect(cmd: &str, depth: usize, view: &mut DenyView) -> Result<(), String> {
    if depth > MAX_SCRIPT_DEPTH {
        return Err("shell scripts nest too deeply".into());
    }
    let tree = parse_clean(cmd, PARSE_BUDGET).map_err(|e| e.to_string())?;
    let root = tree.root_node();
    if let Some(what) = risky_bytes(cmd, root) {
        return Err(format!("it holds {what}, which bash may read differently"));
    }
    if let Some((what, at)) = misread_redirect(root, cmd) {
        return Err(format!("it holds {what} ({})", short(text(at, cmd))));
    }
    heredoc_lines(root, cmd)?;
    let mut w = DenyWalk {
        src: cmd,
        depth,
        view,
    };
    w.walk(root)
}

/// A here-document's body starts on the line after its `<<`. When something that
/// starts on that line runs past its end (`<<EOF $(…⏎…)`, `<<EOF && (⏎…)`), bash and
/// the grammar disagree on which lines are the body.
fn heredoc_lines(root: Node, src: &str) -> Result<(), String> {
    let mut heredocs = Vec::new();
    let mut all = Vec::new();
    let mut cursor = root.walk();
    loop {
        let n = cursor.node();
        let body = matches!(n.kind(), "heredoc_body" | "heredoc_start" | "heredoc_end");
        if n.kind() == "heredoc_redirect" {
            heredocs.push(n.start_byte());
        } else if !body {
            all.push(n.byte_range());
        }
        if !next_node(&mut cursor, !body) {
            break;
        }
    }
    for p in heredocs {
        let Some(nl) = src[p..].find('\n').map(|i| p + i) else {
            continue;
        };
        if all
            .iter()
            .any(|r| r.start >= p && r.start < nl && r.end > nl)
        {
            return Err(
                "a here-document starts on a line whose next part runs past the line end, \
                 so its body cannot be located"
                    .into(),
            );
        }
    }
    Ok(())
}

/// A here-document is checked against bash's own rules rather than the grammar's
/// reading of it (which misses backquotes in bodies, among others): the body ends at
/// the first line that is exactly the delimiter (leading tabs stripped for `<<-`),
/// that line must be where the grammar ends it, and an unquoted body may hold no
/// substitution.
fn check_heredoc(node: Node, src: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("a here-document {why}, so it cannot be checked"));
    let mut c = node.walk();
    let children: Vec<Node> = node.children(&mut c).collect();
    let strip_tabs = children.iter().any(|n| n.kind() == "<<-");
    let Some(start) = children.iter().find(|n| n.kind() == "heredoc_start") else {
        return bad("has no delimiter");
    };
    let Some(end) = children.iter().find(|n| n.kind() == "heredoc_end") else {
        return bad("has no end line");
    };
    let raw = text(*start, src);
    let quoted = raw.contains(['\'', '"', '\\']);
    let delimiter: String = raw
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect();
    let line = |l: &str| -> String {
        if strip_tabs {
            l.trim_start_matches('\t').to_string()
        } else {
            l.to_string()
        }
    };
    // The end line as bash reads it.
    let line_start = src[..end.start_byte()].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[end.start_byte()..]
        .find('\n')
        .map_or(src.len(), |i| end.start_byte() + i);
    if line(&src[line_start..line_end]) != delimiter {
        return bad("ends on a line bash does not take as its end");
    }
    let body = children
        .iter()
        .find(|n| n.kind() == "heredoc_body")
        .map_or("", |b| text(*b, src));
    if body.split('\n').any(|l| line(l) == delimiter) {
        return bad("holds its delimiter line early");
    }
    if !quoted && has_substitution(body) {
        return bad("that is not quoted holds a substitution");
    }
    Ok(())
}

/// Whether text read like a double-quoted string (an unquoted here-document body)
/// holds a substitution or a non-plain expansion.
fn has_substitution(body: &str) -> bool {
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '`' => return true,
            '$' if matches!(chars.peek(), Some('(' | '{' | '[')) => return true,
            _ => {}
        }
    }
    false
}

struct DenyWalk<'a, 'v> {
    src: &'a str,
    depth: usize,
    view: &'v mut DenyView,
}

impl DenyWalk<'_, '_> {
    fn walk(&mut self, node: Node) -> Result<(), String> {
        let src = self.src;
        let kind = node.kind();
        if !node.is_named() {
            return Ok(());
        }
        match kind {
            "command" => return self.command(node),
            "declaration_command" | "unset_command" => return self.declaration(node),
            "arithmetic_expansion" | "c_style_for_statement" | "subscript" => {
                return Err(evaluates(node, src));
            }
            "compound_statement" => {
                if node.child(0).is_some_and(|c| c.kind() == "((") {
                    return Err(evaluates(node, src));
                }
            }
            "expansion" => {
                let mut c = node.walk();
                let names: Vec<Node> = node.children(&mut c).collect();
                let plain = names.len() == 3
                    && names[0].kind() == "${"
                    && matches!(names[1].kind(), "variable_name" | "special_variable_name")
                    && names[2].kind() == "}";
                if !plain {
                    return Err(format!(
                        "the expansion {} may evaluate a value as code",
                        short(text(node, src))
                    ));
                }
            }
            "for_statement" => {
                let mut c = node.walk();
                if !node.children(&mut c).any(|n| n.kind() == "in") {
                    return Err("a `for` loop without `in`".into());
                }
                if let Some(v) = node.child_by_field_name("variable")
                    && special_variable(text(v, src))
                {
                    return Err(format!(
                        "the loop sets bash's special variable {}",
                        text(v, src)
                    ));
                }
            }
            "variable_assignment" => {
                if let Some(name) = node.named_child(0) {
                    if name.kind() != "variable_name" {
                        return Err(evaluates(name, src));
                    }
                    if special_variable(text(name, src)) {
                        return Err(format!(
                            "it sets bash's special variable {}",
                            text(name, src)
                        ));
                    }
                }
            }
            "test_command" => {
                let t = text(node, src);
                let arithmetic = ["-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"]
                    .iter()
                    .any(|op| t.split_whitespace().any(|w| w == *op));
                if arithmetic && has_kind_other_than_numbers(node) {
                    return Err(evaluates(node, src));
                }
            }
            "heredoc_redirect" => {
                check_heredoc(node, src)?;
                let mut c = node.walk();
                for ch in node.children(&mut c).collect::<Vec<_>>() {
                    if !matches!(ch.kind(), "heredoc_body" | "heredoc_start" | "heredoc_end") {
                        self.walk(ch)?;
                    }
                }
                return Ok(());
            }
            "file_redirect" => {
                // Bash expands the target of `>&word` twice when it is not a number.
                let dup = {
                    let mut c = node.walk();
                    node.children(&mut c)
                        .any(|n| matches!(n.kind(), ">&" | "<&"))
                };
                if dup && !harmless_redirect(node, src) {
                    return Err(format!(
                        "bash expands the target of {} twice",
                        short(text(node, src))
                    ));
                }
            }
            "ansi_c_string" => {
                if text(node, src).contains('\\') {
                    return Err(format!(
                        "the $'…' string {} has escapes bash may read differently",
                        short(text(node, src))
                    ));
                }
            }
            "program"
            | "list"
            | "pipeline"
            | "subshell"
            | "if_statement"
            | "elif_clause"
            | "else_clause"
            | "while_statement"
            | "do_group"
            | "case_statement"
            | "case_item"
            | "redirected_statement"
            | "herestring_redirect"
            | "negated_command"
            | "comment"
            | "command_name"
            | "word"
            | "string"
            | "string_content"
            | "raw_string"
            | "concatenation"
            | "number"
            | "variable_name"
            | "special_variable_name"
            | "simple_expansion"
            | "command_substitution"
            | "process_substitution"
            | "file_descriptor"
            | "function_definition"
            | "brace_expression"
            | "array"
            | "translated_string"
            | "variable_assignments"
            | "binary_expression"
            | "unary_expression"
            | "parenthesized_expression"
            | "test_operator"
            | "regex"
            | "extglob_pattern" => {}
            _ => {
                return Err(format!(
                    "it uses {} ({}), which cannot be checked",
                    kind,
                    short(text(node, src))
                ));
            }
        }
        let mut c = node.walk();
        for ch in node.children(&mut c).collect::<Vec<_>>() {
            self.walk(ch)?;
        }
        Ok(())
    }

    fn command(&mut self, node: Node) -> Result<(), String> {
        let src = self.src;
        if let Some(t) = stray_token(node) {
            return Err(format!(
                "it uses {} in a way that cannot be checked",
                short(text(t, src))
            ));
        }
        let mut words: Vec<DenyWord> = Vec::new();
        let mut c = node.walk();
        for ch in node.named_children(&mut c).collect::<Vec<_>>() {
            match ch.kind() {
                "command_name" => {
                    let w = ch.named_child(0);
                    let v = w.and_then(|w| static_value(w, src));
                    if v.is_none() {
                        return Err(format!(
                            "its program {} is only known when it runs",
                            short(text(ch, src))
                        ));
                    }
                    words.push(v);
                }
                "variable_assignment" | "file_redirect" | "herestring_redirect" | "comment" => {}
                _ => words.push(static_value(ch, src)),
            }
            self.walk(ch)?;
        }
        self.add(words, text(node, src))
    }

    /// `declare`, `export`, `local`, `readonly`, `typeset`, `unset`: a computed or
    /// subscripted name, or `-i`/`-n`, evaluates a value as code.
    fn declaration(&mut self, node: Node) -> Result<(), String> {
        let src = self.src;
        let mut c = node.walk();
        for ch in node.named_children(&mut c).collect::<Vec<_>>() {
            let t = text(ch, src);
            let flag_evaluates =
                ch.kind() == "word" && t.starts_with(['-', '+']) && t.contains(['i', 'n']);
            let name_ok = match ch.kind() {
                "variable_assignment" => true,
                "variable_name" => !special_variable(t),
                _ => static_value(ch, src).is_some_and(|v| !v.contains('[')),
            };
            if flag_evaluates || !name_ok {
                return Err(evaluates(node, src));
            }
            self.walk(ch)?;
        }
        Ok(())
    }

    /// Records one simple command and where it may start; follows wrappers, `find
    /// -exec` and the scripts of shells, `eval`, `trap`, `watch`, `su -c`, `env -S`.
    fn add(&mut self, words: Vec<DenyWord>, source: &str) -> Result<(), String> {
        let index = self.view.commands.len();
        // Starts still to look at; each position is looked at once.
        let mut seen = vec![false; words.len()];
        let mut queue = vec![0usize];
        let mut scripts: Vec<String> = Vec::new();
        while let Some(start) = queue.pop() {
            if start >= words.len() || seen[start] {
                continue;
            }
            seen[start] = true;
            let Some(program) = &words[start] else {
                return Err(format!(
                    "a program it runs ({}) is only known when it runs",
                    short(source)
                ));
            };
            self.view.starts.push((index, start));
            let base = program.rsplit('/').next().unwrap_or(program);
            let args = &words[start + 1..];
            if WRAPPERS.contains(&base) {
                // Options and their values are skipped generously: any later word
                // may be the program.
                queue.extend(start + 1..words.len());
            }
            if base == "find" {
                for (k, a) in args.iter().enumerate() {
                    if matches!(a.as_deref(), Some("-exec" | "-execdir" | "-ok" | "-okdir")) {
                        queue.push(start + 2 + k);
                    }
                }
            }
            evaluation_builtin(base, args, source)?;
            scripts.extend(scripts_of(base, args, source)?);
        }
        self.view.commands.push(words);
        self.view.sources.push(source.to_string());
        for s in scripts {
            collect(&s, self.depth + 1, self.view)
                .map_err(|e| format!("its script {} cannot be checked: {e}", short(&s)))?;
        }
        Ok(())
    }
}

fn evaluates(node: Node, src: &str) -> String {
    format!(
        "{} evaluates a value as code, which cannot be checked",
        short(text(node, src))
    )
}

fn has_kind_other_than_numbers(node: Node) -> bool {
    let mut c = node.walk();
    node.named_children(&mut c).any(|ch| match ch.kind() {
        "number" | "test_operator" => false,
        "binary_expression" | "unary_expression" | "parenthesized_expression" => {
            has_kind_other_than_numbers(ch)
        }
        _ => true,
    })
}

/// Builtins that take a variable *name* and may evaluate a subscript in it.
fn evaluation_builtin(base: &str, args: &[DenyWord], source: &str) -> Result<(), String> {
    let names_evaluated = match base {
        "let" => true,
        "read" | "mapfile" | "readarray" | "getopts" | "unset" | "wait" => args
            .iter()
            .any(|a| a.as_ref().is_none_or(|a| a.contains('['))),
        "printf" | "test" | "[" => {
            let flags: &[&str] = if base == "printf" {
                &["-v"]
            } else {
                &["-v", "-R"]
            };
            args.iter()
                .any(|a| a.as_deref().is_some_and(|t| flags.contains(&t)))
                && args
                    .iter()
                    .any(|a| a.as_ref().is_none_or(|a| a.contains('[')))
        }
        _ => false,
    };
    if names_evaluated {
        Err(format!(
            "{} evaluates a value as code, which cannot be checked",
            short(source)
        ))
    } else {
        Ok(())
    }
}

/// The strings a program runs as shell code.
fn scripts_of(base: &str, args: &[DenyWord], source: &str) -> Result<Vec<String>, String> {
    let unknown = || format!("the script of {} is only known when it runs", short(source));
    let known = |w: &DenyWord| w.clone().ok_or_else(unknown);
    let mut out = Vec::new();
    match base {
        "eval" => {
            let v: Result<Vec<String>, String> = args.iter().map(known).collect();
            out.push(v?.join(" "));
        }
        // `trap 'cmd' SIGNAL`, `watch cmd…`, `su -c cmd`: any operand may be the code.
        "trap" | "su" => {
            for a in args {
                out.push(known(a)?);
            }
        }
        "watch" => {
            let v: Result<Vec<String>, String> = args.iter().map(known).collect();
            out.push(v?.join(" "));
        }
        "env" => {
            for (k, a) in args.iter().enumerate() {
                let a = known(a)?;
                if let Some(rest) = a
                    .strip_prefix("--split-string")
                    .or_else(|| a.strip_prefix("-S"))
                {
                    let rest = rest.trim_start_matches('=');
                    if rest.is_empty() {
                        if let Some(next) = args.get(k + 1) {
                            out.push(known(next)?);
                        }
                    } else {
                        out.push(rest.to_string());
                    }
                }
            }
        }
        b if SHELLS.contains(&b) => {
            // With any `-…c…` option, every later operand may be the script.
            let c_at = args.iter().position(|a| {
                a.as_deref()
                    .is_some_and(|t| t.starts_with('-') && !t.starts_with("--") && t.contains('c'))
            });
            if let Some(c_at) = c_at {
                for a in &args[c_at + 1..] {
                    out.push(known(a)?);
                }
            }
        }
        _ => {}
    }
    Ok(out)
}

/// A word's static value for deny matching: a plain literal, or a `$'…'` string
/// without escapes; `None` when it is only known at run time.
fn static_value(node: Node, src: &str) -> DenyWord {
    if let Some(v) = literal(node, src) {
        return Some(v);
    }
    match node.kind() {
        "ansi_c_string" => {
            let t = text(node, src);
            let inner = t.strip_prefix("$'")?.strip_suffix('\'')?;
            (!inner.contains('\\')).then(|| inner.to_string())
        }
        "concatenation" => {
            let mut out = String::new();
            let mut c = node.walk();
            for ch in node.children(&mut c) {
                out.push_str(&static_value(ch, src)?);
            }
            Some(out)
        }
        _ => None,
    }
}

/// Words joined by single spaces, a word with blanks or shell metacharacters
/// single-quoted: the text a wildcard rule is matched against.
pub fn normalize(words: &[&str]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let plain = !w.is_empty()
            && w.chars().all(|c| {
                !c.is_whitespace()
                    && !matches!(
                        c,
                        ';' | '&' | '|' | '<' | '>' | '(' | ')' | '\'' | '"' | '\\' | '`'
                    )
            });
        if plain {
            out.push_str(w);
        } else {
            out.push('\'');
            out.push_str(&w.replace('\'', r"'\''"));
            out.push('\'');
        }
    }
    out
}
