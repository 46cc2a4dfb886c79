//! What a Bash command runs, read from a real parse (tree-sitter's bash grammar).
//!
//! The permission checker ([`super::permissions`]) needs two views of a command:
//!
//! - [`plain_parts`], for allow rules: the simple commands of a command that lies
//!   entirely in a *plain subset* of bash, or the reason it does not. The subset is
//!   simple commands made of literal words and quoted strings (no expansion of any
//!   kind, also none inside double quotes; no glob, brace or tilde characters), joined
//!   by `&&`, `||`, `;`, `|`, `&` and newlines, with comments, and redirections only to
//!   `/dev/null` or between descriptors (`2>&1`), also inside `( … )` and `{ …; }`.
//!   Inside it bash and the grammar agree on every word, so a prefix, exact or
//!   wildcard rule can be matched against the words. An argument only known when it
//!   runs but made without running anything outside the subset (a glob, brace
//!   expansion of plain parts, a plain variable, `"$(plain commands)"`, `$((…))` of numbers) leaves the words from it on
//!   open: only a prefix rule that ends before it matches. Everything else
//!   (here-documents bash would expand, other substitutions, `$'…'` escapes, other
//!   expansions, other redirections, assignments, loops, functions, reserved
//!   words as programs, backslash-newline, text the grammar skips, control
//!   characters, parse errors) is outside it, and only a bare `Bash` rule allows it.
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

mod deny;
mod env_split;
mod heredoc;
mod plain;

pub use deny::deny_view;
pub use plain::{plain_parts, plain_parts_within};

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

/// Why a command cannot be checked against deny rules ([`deny_view`]): what the
/// refusal tells the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unchecked {
    /// A construct whose effect is only known when it runs (the text says which).
    #[error("{0}")]
    Construct(String),
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// Code the command runs (`bash -c '…'`, an alias's value) cannot be checked.
    #[error("{script} cannot be checked: {source}")]
    Script {
        /// How the script is named (`its script 'rm …'`).
        script: String,
        #[source]
        source: Box<Unchecked>,
    },
}

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
    Grammar(#[source] crate::error::Cause),
    #[error("bash syntax error near {0:?}")]
    Syntax(String),
}

/// One simple command of a plain command: its words after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub words: Vec<String>,
    /// The index of the first word bash replaces by file names (a glob argument,
    /// kept as written): from there on the words are only known when it runs, so only
    /// a prefix rule that ends before it can match.
    pub open: Option<usize>,
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

impl std::error::Error for NotPlain {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NotPlain::Parse(e) => Some(e),
            NotPlain::Construct { .. } => None,
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
    /// Names bound to code (`alias x=…`, `hash -p PATH x`): a command run by that name
    /// is checked as the code it stands for.
    bindings: Vec<(String, String)>,
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
        .map_err(|e| ParseError::Grammar(crate::error::Cause::new(e)))?;
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

/// Text the grammar skipped as if it were blank: every byte of a plain command must
/// lie in a token of the parse or be a space, tab or newline. The grammar drops an
/// escaped blank (`\ ./x`) and the newline before it, where bash runs the program
/// ` ./x` on a line of its own.
fn skipped_text(cmd: &str, root: Node) -> Option<Range<usize>> {
    // Kinds whose text is one unit to the plain subset, whatever their children.
    const WHOLE: [&str; 5] = ["string", "raw_string", "heredoc_body", "comment", "word"];
    let mut covered = Vec::new();
    let mut cursor = root.walk();
    loop {
        let n = cursor.node();
        let whole = n.child_count() == 0 || WHOLE.contains(&n.kind());
        if whole {
            covered.push(n.byte_range());
        }
        if !next_node(&mut cursor, !whole) {
            break;
        }
    }
    covered.sort_by_key(|r| r.start);
    let mut at = 0;
    let blank = |r: Range<usize>| {
        cmd.as_bytes()
            .get(r.clone())
            .is_none_or(|b| b.iter().all(|c| matches!(c, b' ' | b'\t' | b'\n')))
    };
    for r in covered
        .into_iter()
        .chain(std::iter::once(cmd.len()..cmd.len()))
    {
        if r.start > at && !blank(at..r.start) {
            return Some(at..r.start);
        }
        at = at.max(r.end);
    }
    None
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
        "ansi_c_string" => ansi_c(text(node, src)),
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

/// A variable name bash assigns without evaluating anything: letters, digits and `_`,
/// not starting with a digit.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Why assigning the variable `name` may run code, whoever assigns it (an assignment,
/// `for`, `read`, `printf -v`, `env NAME=…`, a named descriptor …): a subscript is
/// evaluated as arithmetic, a special variable changes how bash reads later code.
/// `None` for a plain name.
fn assignment_hazard(name: &str) -> Option<String> {
    if !is_identifier(name) {
        Some(format!(
            "it assigns {}, whose subscript or form bash evaluates as code, which cannot be \
             checked",
            short(name)
        ))
    } else if special_variable(name) {
        Some(format!("it sets bash's special variable {name}"))
    } else {
        None
    }
}

/// Named-descriptor words: `{name}` written right before a redirection operator, which
/// bash does not pass to the command but assigns the new descriptor's number to
/// (`exec {fd}>file`); with the name inside the braces.
fn named_descriptors<'t>(root: Node<'t>, src: &str) -> Vec<(Node<'t>, String)> {
    let mut redirect_starts = Vec::new();
    let mut words = Vec::new();
    let mut cursor = root.walk();
    loop {
        let n = cursor.node();
        match n.kind() {
            "file_redirect" | "heredoc_redirect" | "herestring_redirect" => {
                redirect_starts.push(n.start_byte());
            }
            "word" | "concatenation" if text(n, src).starts_with('{') => words.push(n),
            _ => {}
        }
        if !next_node(&mut cursor, true) {
            break;
        }
    }
    words
        .into_iter()
        .filter(|w| redirect_starts.contains(&w.end_byte()))
        .filter_map(|w| {
            let t = text(w, src);
            let name = t.strip_prefix('{')?.strip_suffix('}')?;
            Some((w, name.to_string()))
        })
        .collect()
}

/// The value of a `$'…'` string whose escapes bash and the grammar surely read alike
/// (none, `\n`, `\t`); `None` for any other escape (`\c'` takes the quote as its
/// argument in bash and ends the string for the grammar).
fn ansi_c(t: &str) -> Option<String> {
    let inner = t.strip_prefix("$'")?.strip_suffix('\'')?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}
