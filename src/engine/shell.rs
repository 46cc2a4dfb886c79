//! Splitting a shell command line into the simple commands it runs.
//!
//! The permission checker ([`super::permissions`]) decides on each *simple command* of a
//! `Bash` call, so this module must find every command bash would run: the parts of
//! lists and pipelines (`;`, `&&`, `||`, `|`, `|&`, `&`, newlines), the insides of
//! command substitutions (`$(…)`, backticks, also inside double quotes and unquoted
//! here-documents), process substitutions (`<(…)`, `>(…)`), subshells `( … )`, brace
//! groups `{ …; }` and the bodies of `if`/`while`/`until`/`for`.
//!
//! It is deliberately conservative: whatever it cannot analyse with certainty is a
//! [`ShellError`], and the caller denies the call. That covers unbalanced quotes or
//! parentheses, `case`, function definitions, `coproc`, quotes or backslashes inside
//! `${…}` (where bash's quoting rules differ between contexts), and anything inside an
//! arithmetic expansion other than plain arithmetic.
//!
//! It also refuses the places where bash evaluates a *value* as code, because a value
//! like `a[$(cmd)]` runs `cmd` there and values are easy to choose without any rule
//! (`for x in 'a[$(cmd)]'`, a file name from a glob): arithmetic on variables
//! (`$((x))`, `((x))`, `${a[x]}`, `${s:x}`, `[[ x -eq 1 ]]`), indirection `${!x}`,
//! transformations `${x@P}`, and builtins given a name that is not a plain variable
//! name (`read`, `mapfile`, `printf -v`, `test -v`, `declare`/`local`, `let`).
//!
//! It is not a full bash parser: it only has to agree with bash on *where commands
//! are*, and on the literal text of their words.

use std::fmt;

/// Nesting deeper than this (substitutions inside substitutions …) is refused rather
/// than risk the stack.
const MAX_DEPTH: usize = 64;

/// Why a command line could not be analysed. The call it belongs to is denied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    #[error("unterminated {0}")]
    Unterminated(&'static str),
    #[error("unexpected {0}")]
    Unexpected(String),
    #[error("unsupported shell construct: {0}")]
    Unsupported(String),
    #[error("nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// One word of a command, after quote removal. Two words are equal when their text and
/// dynamic-ness are: how they were quoted does not change what runs.
#[derive(Debug, Clone, Eq)]
pub struct Word {
    /// The literal text after quote and backslash removal. Expansions (`$X`, `$(…)`,
    /// backticks) are kept as written, since their value is only known at run time.
    pub text: String,
    /// The word's final value is only known at run time: it holds a parameter, command,
    /// arithmetic or process substitution, an unquoted glob (`*`, `?`, `[…]`), a brace
    /// expansion or a leading `~`.
    pub dynamic: bool,
    /// Some part of the word was quoted or backslash-escaped (so it is never a keyword,
    /// and a here-document delimiter written this way disables expansion).
    pub quoted: bool,
}

impl PartialEq for Word {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.dynamic == other.dynamic
    }
}

impl Word {
    fn new() -> Self {
        Word {
            text: String::new(),
            dynamic: false,
            quoted: false,
        }
    }
}

/// A redirection of a simple command (or of a compound command, which then appears as
/// a simple command with no words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The explicit file descriptor (`2>`), if any.
    pub fd: Option<u32>,
    /// The operator: `<`, `>`, `>>`, `>|`, `<>`, `<&`, `>&`, `&>`, `&>>`, `<<`, `<<-`, `<<<`.
    pub op: &'static str,
    /// The target: a file, a descriptor (`1`, `-`), a here-document delimiter or a
    /// here-string.
    pub target: Word,
}

impl Redirect {
    /// Whether this redirection can write a file or open a network connection:
    /// output to anything but `/dev/null` (including `<>`, which creates the file) and
    /// any redirection from or to bash's `/dev/tcp/…` / `/dev/udp/…`. Duplicating or
    /// closing a descriptor (`2>&1`, `>&-`) and here-documents do not.
    pub fn writes_file(&self) -> bool {
        let t = &self.target;
        let network = t.text.starts_with("/dev/tcp/") || t.text.starts_with("/dev/udp/");
        let dev_null = !t.dynamic && t.text == "/dev/null";
        match self.op {
            ">" | ">>" | ">|" | "&>" | "&>>" | "<>" => network || !dev_null,
            ">&" => {
                let dup = !t.dynamic
                    && (t.text == "-"
                        || t.text
                            .trim_end_matches('-')
                            .chars()
                            .all(|c| c.is_ascii_digit())
                            && !t.text.trim_end_matches('-').is_empty());
                network || !(dup || dev_null)
            }
            "<<" | "<<-" | "<<<" => false,
            _ => network,
        }
    }
}

/// One simple command: what bash executes as one program or builtin.
#[derive(Debug, Clone, Default)]
pub struct SimpleCommand {
    /// The command as written (for messages).
    pub source: String,
    /// Leading `NAME=value` assignments.
    pub assignments: Vec<Word>,
    /// The program and its arguments.
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
}

/// Two commands are equal when they run the same thing; how they were written
/// (`source`) does not matter.
impl PartialEq for SimpleCommand {
    fn eq(&self, other: &Self) -> bool {
        self.assignments == other.assignments
            && self.words == other.words
            && self.redirects == other.redirects
    }
}
impl Eq for SimpleCommand {}

impl SimpleCommand {
    /// Whether any redirection of this command writes a file (see [`Redirect::writes_file`]).
    pub fn writes_file(&self) -> bool {
        self.redirects.iter().any(Redirect::writes_file)
    }

    /// The words' texts: program first.
    pub fn argv(&self) -> Vec<&str> {
        self.words.iter().map(|w| w.text.as_str()).collect()
    }

    /// The words joined by single spaces, each word that is empty or holds a blank or
    /// a shell metacharacter single-quoted. This is the text wildcard rules match, so
    /// that `npm" run" x` (the program `npm run`) is not mistaken for `npm run x`.
    pub fn normalized(&self) -> String {
        normalize_words(&self.words)
    }
}

/// See [`SimpleCommand::normalized`].
pub fn normalize_words(words: &[Word]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let plain = !w.text.is_empty()
            && w.text.chars().all(|c| {
                !c.is_whitespace()
                    && !matches!(c, ';' | '&' | '|' | '<' | '>' | '(' | ')')
                    && !matches!(c, '\'' | '"' | '\\' | '`')
            });
        if plain {
            out.push_str(&w.text);
        } else {
            out.push('\'');
            out.push_str(&w.text.replace('\'', r"'\''"));
            out.push('\'');
        }
    }
    out
}

impl fmt::Display for SimpleCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Splits `cmd` into every simple command bash would run for it, nested ones
/// included (a command substitution's commands come before the command holding it).
/// Empty commands (a blank line, a lone comment) are omitted.
///
/// Errors when the line cannot be analysed with certainty; see the module docs.
pub fn split_commands(cmd: &str) -> Result<Vec<SimpleCommand>, ShellError> {
    let mut p = Parser::new(cmd, 0);
    p.parse_list(None)?;
    Ok(p.out)
}

struct Heredoc {
    delimiter: String,
    strip_tabs: bool,
    expand: bool,
}

/// A command being assembled.
#[derive(Default)]
struct Builder {
    start: Option<usize>,
    end: usize,
    assignments: Vec<Word>,
    words: Vec<Word>,
    redirects: Vec<Redirect>,
    /// After a subshell or a closing keyword (`fi`, `done`, `}`): only redirections may
    /// follow.
    compound: bool,
    /// Inside a `for`/`select` header: words are a list, not a command.
    header: bool,
    /// After `time`: a following `-p` is its option.
    after_time: bool,
}

impl Builder {
    fn at_command_position(&self) -> bool {
        self.words.is_empty() && self.assignments.is_empty() && !self.compound && !self.header
    }

    fn touch(&mut self, start: usize, end: usize) {
        if self.start.is_none() {
            self.start = Some(start);
        }
        self.end = end;
    }
}

/// What [`Parser::read_word`] found.
struct WordRead {
    word: Word,
    start: usize,
    end: usize,
    /// Written with no quoting, escapes or expansions at all: may be a keyword, an
    /// assignment or a descriptor number.
    plain: bool,
}

struct Parser {
    s: Vec<char>,
    i: usize,
    depth: usize,
    out: Vec<SimpleCommand>,
    heredocs: Vec<Heredoc>,
    /// Inside `[[ … ]]` (which `&&`/`||` split into several parts).
    dbracket: DBracket,
}

/// What `[[ … ]]` expects next: its arithmetic comparisons and `-v` evaluate their
/// operands (`x -eq 1` evaluates the value of `x`, which may hold `a[$(cmd)]`).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum DBracket {
    #[default]
    Outside,
    Inside {
        /// The previous word was a literal number.
        prev_number: bool,
        /// The previous word was an operator whose right operand must be a number
        /// (`Some(true)`) or a plain name (`Some(false)`).
        need: Option<bool>,
    },
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_meta(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>'
    )
}

impl Parser {
    fn new(src: &str, depth: usize) -> Self {
        Parser {
            s: src.chars().collect(),
            i: 0,
            depth,
            out: Vec::new(),
            heredocs: Vec::new(),
            dbracket: DBracket::Outside,
        }
    }

    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.s.get(self.i + k).copied()
    }

    fn slice(&self, a: usize, b: usize) -> String {
        self.s[a.min(self.s.len())..b.min(self.s.len())]
            .iter()
            .collect()
    }

    fn enter(&mut self) -> Result<(), ShellError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ShellError::TooDeep);
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Skips blanks and line continuations.
    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(' ' | '\t') => self.i += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.i += 2,
                _ => return,
            }
        }
    }

    fn finish(&mut self, b: &mut Builder) -> Result<(), ShellError> {
        let b = std::mem::take(b);
        if b.header {
            return Ok(());
        }
        if b.words.is_empty() && b.assignments.is_empty() && b.redirects.is_empty() {
            return Ok(());
        }
        let start = b.start.unwrap_or(b.end);
        let cmd = SimpleCommand {
            source: self.slice(start, b.end).trim().to_string(),
            assignments: b.assignments,
            words: b.words,
            redirects: b.redirects,
        };
        check_name_arguments(&cmd)?;
        self.out.push(cmd);
        Ok(())
    }

    /// Parses a list of commands up to the end of input (`close == None`) or up to and
    /// including the matching `)`.
    fn parse_list(&mut self, close: Option<char>) -> Result<(), ShellError> {
        let mut b = Builder::default();
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else {
                if close.is_some() {
                    return Err(ShellError::Unterminated("parenthesis"));
                }
                self.finish(&mut b)?;
                return Ok(());
            };
            match c {
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.i += 1;
                    }
                }
                '\n' => {
                    self.finish(&mut b)?;
                    self.i += 1;
                    self.read_heredocs()?;
                }
                ';' => {
                    if self.peek_at(1) == Some(';') {
                        return Err(ShellError::Unsupported("`;;` outside case".into()));
                    }
                    self.finish(&mut b)?;
                    self.i += 1;
                }
                '&' if self.peek_at(1) == Some('>') => self.redirect(None, &mut b)?,
                '&' => {
                    self.finish(&mut b)?;
                    self.i += if self.peek_at(1) == Some('&') { 2 } else { 1 };
                }
                '|' => {
                    self.finish(&mut b)?;
                    self.i += if matches!(self.peek_at(1), Some('|' | '&')) {
                        2
                    } else {
                        1
                    };
                }
                ')' => {
                    if close == Some(')') {
                        self.finish(&mut b)?;
                        self.i += 1;
                        return Ok(());
                    }
                    return Err(ShellError::Unexpected("`)`".into()));
                }
                '(' => {
                    if !b.at_command_position() {
                        return Err(if b.words.len() == 1 {
                            ShellError::Unsupported("function definition".into())
                        } else {
                            ShellError::Unexpected("`(`".into())
                        });
                    }
                    if self.peek_at(1) == Some('(') && self.arithmetic(2, ')')? {
                        b.compound = true;
                        continue;
                    }
                    self.i += 1;
                    self.enter()?;
                    self.parse_list(Some(')'))?;
                    self.leave();
                    b.compound = true;
                }
                '<' | '>' if self.peek_at(1) != Some('(') => self.redirect(None, &mut b)?,
                _ => {
                    let w = self.read_word()?;
                    self.after_word(w, &mut b)?;
                }
            }
        }
    }

    /// Places a word read in command context: keyword, assignment, descriptor number
    /// of a redirection, or a word of the command.
    fn after_word(&mut self, w: WordRead, b: &mut Builder) -> Result<(), ShellError> {
        if w.plain
            && w.word.text.chars().all(|c| c.is_ascii_digit())
            && matches!(self.peek(), Some('<' | '>'))
            && !b.header
        {
            let fd = w.word.text.parse::<u32>().ok();
            b.touch(w.start, w.end);
            return self.redirect_with_fd(fd, b);
        }
        if b.header {
            return Ok(());
        }
        // Reserved words count at the start of a command, and also right after a
        // compound command (`{ { a; } }`, `if (a) then b; fi`).
        if w.plain && b.words.is_empty() && b.assignments.is_empty() {
            if b.after_time && w.word.text == "-p" {
                return Ok(());
            }
            b.after_time = false;
            match w.word.text.as_str() {
                "if" | "then" | "else" | "elif" | "do" | "while" | "until" | "!" | "{" => {
                    b.compound = false;
                    return Ok(());
                }
                "time" if !b.compound => {
                    b.after_time = true;
                    return Ok(());
                }
                "fi" | "done" | "}" => {
                    b.compound = true;
                    return Ok(());
                }
                "for" | "select" if !b.compound => {
                    b.header = true;
                    self.skip_blanks();
                    if self.peek() == Some('(')
                        && self.peek_at(1) == Some('(')
                        && !self.arithmetic(2, ')')?
                    {
                        return Err(ShellError::Unexpected("`(` after for".into()));
                    }
                    return Ok(());
                }
                "case" | "function" | "coproc" | "esac" | "in" => {
                    return Err(ShellError::Unsupported(format!("`{}`", w.word.text)));
                }
                _ => {}
            }
        }
        if b.compound {
            return Err(ShellError::Unexpected(format!("word {:?}", w.word.text)));
        }
        b.after_time = false;
        self.track_dbracket(&w, b)?;
        b.touch(w.start, w.end);
        if b.words.is_empty() && is_assignment(&self.s[w.start..w.end]) {
            if self.peek() == Some('(') {
                return Err(ShellError::Unsupported("array assignment".into()));
            }
            b.assignments.push(w.word);
        } else {
            b.words.push(w.word);
        }
        Ok(())
    }

    fn track_dbracket(&mut self, w: &WordRead, b: &Builder) -> Result<(), ShellError> {
        let text = w.word.text.as_str();
        let number = !w.word.dynamic && {
            let t = text.strip_prefix('-').unwrap_or(text);
            !t.is_empty() && t.chars().all(|c| c.is_ascii_digit())
        };
        match self.dbracket {
            DBracket::Outside => {
                if w.plain && text == "[[" && b.at_command_position() {
                    self.dbracket = DBracket::Inside {
                        prev_number: false,
                        need: None,
                    };
                }
            }
            DBracket::Inside { prev_number, need } => {
                let unsupported = || {
                    Err(ShellError::Unsupported(
                        "`[[ … ]]` comparing or testing something other than literal numbers \
                         and plain names (operands are evaluated and can run code)"
                            .into(),
                    ))
                };
                match need {
                    Some(true) if !number => return unsupported(),
                    Some(false) if w.word.dynamic || !is_plain_name(text) => return unsupported(),
                    _ => {}
                }
                let mut next_need = None;
                if w.plain && matches!(text, "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge") {
                    if !prev_number {
                        return unsupported();
                    }
                    next_need = Some(true);
                } else if w.plain && matches!(text, "-v" | "-R") {
                    next_need = Some(false);
                }
                self.dbracket = if w.plain && text == "]]" {
                    DBracket::Outside
                } else {
                    DBracket::Inside {
                        prev_number: number,
                        need: next_need,
                    }
                };
            }
        }
        Ok(())
    }

    fn redirect(&mut self, fd: Option<u32>, b: &mut Builder) -> Result<(), ShellError> {
        b.touch(self.i, self.i);
        self.redirect_with_fd(fd, b)
    }

    /// Parses a redirection operator at the cursor and its target word.
    fn redirect_with_fd(&mut self, fd: Option<u32>, b: &mut Builder) -> Result<(), ShellError> {
        if b.header {
            return Err(ShellError::Unexpected("redirection in a for header".into()));
        }
        const OPS: [&str; 12] = [
            "&>>", "<<<", "<<-", "&>", "<<", "<>", "<&", ">>", ">|", ">&", "<", ">",
        ];
        let op = OPS
            .iter()
            .find(|op| {
                op.chars()
                    .enumerate()
                    .all(|(k, c)| self.peek_at(k) == Some(c))
            })
            .copied()
            .ok_or_else(|| ShellError::Unexpected("redirection".into()))?;
        self.i += op.len();
        self.skip_blanks();
        match self.peek() {
            None => return Err(ShellError::Unexpected(format!("end of input after `{op}`"))),
            Some(c) if is_meta(c) && !(matches!(c, '<' | '>') && self.peek_at(1) == Some('(')) => {
                return Err(ShellError::Unexpected(format!("`{c}` after `{op}`")));
            }
            _ => {}
        }
        let w = self.read_word()?;
        if op == "<<" || op == "<<-" {
            self.heredocs.push(Heredoc {
                delimiter: w.word.text.clone(),
                strip_tabs: op == "<<-",
                expand: !w.word.quoted,
            });
        }
        b.touch(b.start.unwrap_or(w.start), w.end);
        b.redirects.push(Redirect {
            fd,
            op,
            target: w.word,
        });
        Ok(())
    }

    /// Reads the bodies of pending here-documents, which start after a newline.
    fn read_heredocs(&mut self) -> Result<(), ShellError> {
        let pending = std::mem::take(&mut self.heredocs);
        for h in pending {
            let mut body = String::new();
            loop {
                if self.i >= self.s.len() {
                    // bash warns and uses what it has; so do we.
                    break;
                }
                let start = self.i;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.i += 1;
                }
                let line = self.slice(start, self.i);
                if self.peek() == Some('\n') {
                    self.i += 1;
                }
                let cmp = if h.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if cmp == h.delimiter {
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            if h.expand {
                let mut sub = Parser::new(&body, self.depth);
                sub.enter()?;
                let mut w = Word::new();
                sub.scan_double_quoted(&mut w, None)?;
                self.out.append(&mut sub.out);
            }
        }
        Ok(())
    }

    /// Reads one word at the cursor (which is not a blank or an operator).
    fn read_word(&mut self) -> Result<WordRead, ShellError> {
        let start = self.i;
        let mut w = Word::new();
        let mut plain = true;
        // Unquoted `[` seen (a following `]` makes a glob); unquoted `{` seen, and
        // whether a `,` or `..` followed it (a `}` then makes a brace expansion).
        let mut bracket_open = false;
        let mut brace: Option<bool> = None;
        while let Some(c) = self.peek() {
            match c {
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    let s = self.i;
                    self.i += 2;
                    self.enter()?;
                    self.parse_list(Some(')'))?;
                    self.leave();
                    w.text.push_str(&self.slice(s, self.i));
                    w.dynamic = true;
                    plain = false;
                }
                c if is_meta(c) => break,
                '\\' => {
                    plain = false;
                    match self.peek_at(1) {
                        Some('\n') => self.i += 2,
                        Some(n) => {
                            w.text.push(n);
                            w.quoted = true;
                            self.i += 2;
                        }
                        None => {
                            w.text.push('\\');
                            self.i += 1;
                        }
                    }
                }
                '\'' => {
                    plain = false;
                    w.quoted = true;
                    self.i += 1;
                    loop {
                        match self.peek() {
                            None => return Err(ShellError::Unterminated("single quote")),
                            Some('\'') => {
                                self.i += 1;
                                break;
                            }
                            Some(c) => {
                                w.text.push(c);
                                self.i += 1;
                            }
                        }
                    }
                }
                '"' => {
                    plain = false;
                    w.quoted = true;
                    self.i += 1;
                    self.scan_double_quoted(&mut w, Some('"'))?;
                }
                '`' => {
                    plain = false;
                    self.backtick(&mut w, false)?;
                }
                '$' => {
                    let before = (w.dynamic, w.quoted);
                    self.dollar(&mut w, false)?;
                    if (w.dynamic, w.quoted) != before {
                        plain = false;
                    }
                }
                '*' | '?' => {
                    w.dynamic = true;
                    w.text.push(c);
                    self.i += 1;
                }
                '[' => {
                    bracket_open = true;
                    w.text.push(c);
                    self.i += 1;
                }
                ']' if bracket_open => {
                    // `[…]` is a glob.
                    w.dynamic = true;
                    w.text.push(c);
                    self.i += 1;
                }
                '{' => {
                    brace = Some(false);
                    w.text.push(c);
                    self.i += 1;
                }
                ',' if brace.is_some() => {
                    brace = Some(true);
                    w.text.push(c);
                    self.i += 1;
                }
                '.' if brace.is_some() && self.peek_at(1) == Some('.') => {
                    brace = Some(true);
                    w.text.push_str("..");
                    self.i += 2;
                }
                '}' if brace.is_some() => {
                    // `{a,b}` or `{1..3}` expand into several words.
                    if brace == Some(true) {
                        w.dynamic = true;
                    }
                    brace = None;
                    w.text.push(c);
                    self.i += 1;
                }
                '~' if self.i == start => {
                    w.dynamic = true;
                    w.text.push(c);
                    self.i += 1;
                }
                _ => {
                    w.text.push(c);
                    self.i += 1;
                }
            }
        }
        Ok(WordRead {
            word: w,
            start,
            end: self.i,
            plain,
        })
    }

    /// Scans double-quoted text (or an unquoted here-document body when `end` is None)
    /// after the opening quote, extracting the commands of its substitutions.
    fn scan_double_quoted(&mut self, w: &mut Word, end: Option<char>) -> Result<(), ShellError> {
        loop {
            let Some(c) = self.peek() else {
                return match end {
                    Some(_) => Err(ShellError::Unterminated("double quote")),
                    None => Ok(()),
                };
            };
            match c {
                '"' if end == Some('"') => {
                    self.i += 1;
                    return Ok(());
                }
                '\\' => match self.peek_at(1) {
                    Some('\n') => self.i += 2,
                    Some(n @ ('$' | '`' | '"' | '\\')) if n != '"' || end.is_some() => {
                        w.text.push(n);
                        self.i += 2;
                    }
                    _ => {
                        w.text.push('\\');
                        self.i += 1;
                    }
                },
                '$' => self.dollar(w, true)?,
                '`' => self.backtick(w, true)?,
                _ => {
                    w.text.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// A `$` at the cursor: an expansion of some kind, or a literal `$`.
    fn dollar(&mut self, w: &mut Word, in_dq: bool) -> Result<(), ShellError> {
        let start = self.i;
        match self.peek_at(1) {
            Some('(') => {
                if !(self.peek_at(2) == Some('(') && self.arithmetic(3, ')')?) {
                    self.i += 2;
                    self.enter()?;
                    self.parse_list(Some(')'))?;
                    self.leave();
                }
            }
            Some('[') => {
                if !self.arithmetic(2, ']')? {
                    return Err(ShellError::Unterminated("`$[`"));
                }
            }
            Some('{') => {
                self.i += 2;
                self.parameter_expansion()?;
            }
            Some('\'') if !in_dq => {
                self.i += 2;
                self.ansi_c(w)?;
                w.quoted = true;
                return Ok(());
            }
            Some('"') if !in_dq => {
                // `$"…"`: locale translation; a double-quoted string otherwise.
                self.i += 2;
                w.quoted = true;
                return self.scan_double_quoted(w, Some('"'));
            }
            Some(c) if is_name_start(c) => {
                self.i += 1;
                while self.peek().is_some_and(is_name_char) {
                    self.i += 1;
                }
            }
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => self.i += 2,
            _ => {
                w.text.push('$');
                self.i += 1;
                return Ok(());
            }
        }
        w.text.push_str(&self.slice(start, self.i));
        w.dynamic = true;
        Ok(())
    }

    /// `${…}` after the opening brace. Quotes and backslashes inside are refused: bash
    /// treats them differently inside and outside double quotes, and a mistake here
    /// could hide a command substitution.
    fn parameter_expansion(&mut self) -> Result<(), ShellError> {
        self.check_parameter_head()?;
        self.enter()?;
        let mut dummy = Word::new();
        loop {
            match self.peek() {
                None => return Err(ShellError::Unterminated("`${`")),
                Some('}') => {
                    self.i += 1;
                    break;
                }
                Some('\'' | '"' | '\\') => {
                    return Err(ShellError::Unsupported(
                        "quotes or backslashes inside `${…}`".into(),
                    ));
                }
                Some('$') => self.dollar(&mut dummy, true)?,
                Some('`') => self.backtick(&mut dummy, true)?,
                Some(_) => self.i += 1,
            }
        }
        self.leave();
        Ok(())
    }

    /// Refuses the forms of `${…}` that evaluate a variable's value as code: indirection
    /// `${!x}`, transformations `${x@P}`, array subscripts and substring offsets (both
    /// arithmetic) other than literal numbers, `@` and `*`.
    fn check_parameter_head(&self) -> Result<(), ShellError> {
        let unsupported = |what: &str| {
            Err(ShellError::Unsupported(format!(
                "{what} in `${{…}}` (it can run code held in a variable)"
            )))
        };
        let mut j = self.i;
        let at = |k: usize| self.s.get(k).copied();
        match at(j) {
            Some('!') => return unsupported("indirection `!`"),
            Some('#') if at(j + 1) != Some('}') => j += 1,
            _ => {}
        }
        match at(j) {
            Some(c) if is_name_start(c) => {
                while at(j).is_some_and(is_name_char) {
                    j += 1;
                }
            }
            Some(c) if c.is_ascii_digit() => {
                while at(j).is_some_and(|c| c.is_ascii_digit()) {
                    j += 1;
                }
            }
            Some(c) if "@*#?$!-".contains(c) => j += 1,
            _ => return Err(ShellError::Unsupported("bad `${…}` substitution".into())),
        }
        if at(j) == Some('[') {
            let close = self.s[j..].iter().position(|&c| c == ']').map(|k| j + k);
            let Some(close) = close else {
                return Err(ShellError::Unterminated("array subscript"));
            };
            let sub: String = self.s[j + 1..close].iter().collect();
            if !(sub == "@"
                || sub == "*"
                || (!sub.is_empty() && sub.chars().all(|c| c.is_ascii_digit())))
            {
                return unsupported("a computed array subscript");
            }
            j = close + 1;
        }
        match at(j) {
            Some('@') => unsupported("a `@` transformation"),
            Some(':') if !at(j + 1).is_some_and(|c| "-=?+".contains(c)) => {
                // Substring: offsets are arithmetic; literal numbers only.
                let end = self.s[j..]
                    .iter()
                    .position(|&c| c == '}')
                    .map_or(self.s.len(), |k| j + k);
                if self.s[j + 1..end]
                    .iter()
                    .all(|c| c.is_ascii_digit() || matches!(c, ' ' | ':' | '-'))
                {
                    Ok(())
                } else {
                    unsupported("a computed substring offset")
                }
            }
            _ => Ok(()),
        }
    }

    /// At `$((`, `((` or `$[` (the opener is `skip` characters long): decides, as bash
    /// does, whether this is arithmetic. `((…))` / `$((…))` is arithmetic when the first
    /// `)` at depth zero is immediately followed by another `)`; otherwise it is a
    /// (command substitution of a) subshell and `false` is returned with the cursor
    /// unmoved. Arithmetic is accepted only when plain: no quotes, backslashes, command
    /// substitutions or backticks inside, so that bash and this scanner cannot disagree.
    fn arithmetic(&mut self, skip: usize, close: char) -> Result<bool, ShellError> {
        let open = if close == ')' { '(' } else { '[' };
        let start = self.i + skip;
        let mut j = start;
        let mut depth = 0usize;
        // First find where it ends, as bash does; quotes could make bash see a different
        // end, so they are refused outright.
        let (content_end, end) = loop {
            let Some(&c) = self.s.get(j) else {
                return Err(ShellError::Unterminated("arithmetic expression"));
            };
            if matches!(c, '\'' | '"' | '\\' | '`') {
                return Err(ShellError::Unsupported(
                    "quotes, backslashes or backticks in arithmetic".into(),
                ));
            }
            if c == open {
                depth += 1;
            } else if c == close {
                if depth == 0 {
                    if close == ']' {
                        break (j, j + 1);
                    }
                    if self.s.get(j + 1) == Some(&')') {
                        break (j, j + 2);
                    }
                    return Ok(false);
                }
                depth -= 1;
            }
            j += 1;
        };
        // Bash evaluates a variable's *value* as arithmetic, and a value like
        // `a[$(cmd)]` runs `cmd`; values can come from anywhere (`for x in …`, file
        // names), so only arithmetic on literal numbers (and `$#`, `$?`, `$$`, `$!`,
        // positional parameters) is accepted.
        let content = &self.s[start..content_end];
        for (k, &c) in content.iter().enumerate() {
            let next = content.get(k + 1).copied();
            if c == '$' && next == Some('(') {
                return Err(ShellError::Unsupported(
                    "command substitution inside arithmetic".into(),
                ));
            }
            let special = |n: char| "#?$!".contains(n) || n.is_ascii_digit();
            if c.is_alphabetic() || c == '_' || (c == '$' && !next.is_some_and(special)) {
                return Err(ShellError::Unsupported(
                    "variables in arithmetic (a variable's value could run code)".into(),
                ));
            }
        }
        self.i = end;
        Ok(true)
    }

    /// A backtick substitution at the cursor: unescapes its text as bash does and
    /// parses it as a command list of its own.
    fn backtick(&mut self, w: &mut Word, in_dq: bool) -> Result<(), ShellError> {
        let start = self.i;
        self.i += 1;
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => return Err(ShellError::Unterminated("backtick")),
                Some('`') => {
                    self.i += 1;
                    break;
                }
                Some('\\') => match self.peek_at(1) {
                    Some(n) if n == '`' || n == '\\' || n == '$' || (in_dq && n == '"') => {
                        inner.push(n);
                        self.i += 2;
                    }
                    _ => {
                        inner.push('\\');
                        self.i += 1;
                    }
                },
                Some(c) => {
                    inner.push(c);
                    self.i += 1;
                }
            }
        }
        let mut sub = Parser::new(&inner, self.depth);
        sub.enter()?;
        sub.parse_list(None)?;
        self.out.append(&mut sub.out);
        w.text.push_str(&self.slice(start, self.i));
        w.dynamic = true;
        Ok(())
    }

    /// `$'…'` after the opening quote: ANSI-C escapes decoded.
    fn ansi_c(&mut self, w: &mut Word) -> Result<(), ShellError> {
        loop {
            match self.peek() {
                None => return Err(ShellError::Unterminated("`$'` quote")),
                Some('\'') => {
                    self.i += 1;
                    return Ok(());
                }
                Some('\\') => {
                    let Some(e) = self.peek_at(1) else {
                        return Err(ShellError::Unterminated("`$'` quote"));
                    };
                    self.i += 2;
                    let simple = match e {
                        'a' => Some('\x07'),
                        'b' => Some('\x08'),
                        'e' | 'E' => Some('\x1b'),
                        'f' => Some('\x0c'),
                        'n' => Some('\n'),
                        'r' => Some('\r'),
                        't' => Some('\t'),
                        'v' => Some('\x0b'),
                        '\\' | '\'' | '"' | '?' => Some(e),
                        _ => None,
                    };
                    if let Some(ch) = simple {
                        w.text.push(ch);
                        continue;
                    }
                    let (radix, max) = match e {
                        '0'..='7' => {
                            self.i -= 1;
                            (8, 3)
                        }
                        'x' => (16, 2),
                        'u' => (16, 4),
                        'U' => (16, 8),
                        'c' => {
                            // Control character: `\cx`.
                            let Some(x) = self.peek() else {
                                return Err(ShellError::Unterminated("`$'` quote"));
                            };
                            self.i += 1;
                            w.text.push(char::from((x as u32 & 0x1f) as u8));
                            continue;
                        }
                        other => {
                            w.text.push('\\');
                            w.text.push(other);
                            continue;
                        }
                    };
                    let mut v: u32 = 0;
                    let mut n = 0;
                    while n < max {
                        match self.peek().and_then(|c| c.to_digit(radix)) {
                            Some(d) => {
                                v = v * radix + d;
                                self.i += 1;
                                n += 1;
                            }
                            None => break,
                        }
                    }
                    if n == 0 {
                        w.text.push('\\');
                        w.text.push(e);
                    } else if radix == 8 || e == 'x' {
                        // A byte; bytes ≥ 0x80 are not valid text on their own.
                        w.text.push(char::from((v & 0xff) as u8));
                    } else {
                        w.text.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                    }
                }
                Some(c) => {
                    w.text.push(c);
                    self.i += 1;
                }
            }
        }
    }
}

/// A plain variable name: what builtins that take a name may be given.
fn is_plain_name(text: &str) -> bool {
    text.chars().next().is_some_and(is_name_start) && text.chars().all(is_name_char)
}

/// Builtins that take a variable *name* evaluate an array subscript in it as
/// arithmetic, so `read 'a[$(cmd)]'` or `test -v "$name"` can run a command hidden in a
/// literal or in a variable's value. Their name operands must be plain names (a
/// dynamic word's text keeps its `$…`, so it never is one), and the options that
/// evaluate values or run code (`declare -i`, namerefs `-n`, `mapfile -C`) are refused.
fn check_name_arguments(c: &SimpleCommand) -> Result<(), ShellError> {
    let Some(first) = c.words.first() else {
        return Ok(());
    };
    if first.dynamic {
        return Ok(());
    }
    let args = &c.words[1..];
    let refuse = |what: &str| {
        Err(ShellError::Unsupported(format!(
            "`{}` with {what} (a name like a[$(cmd)] runs cmd)",
            first.text
        )))
    };
    let not_plain = "a name that is not a plain variable name";
    match first.text.as_str() {
        "let" => return refuse("arguments (they are arithmetic)"),
        "declare" | "typeset" | "local" | "readonly" => {
            for a in args {
                if a.text.starts_with('-') || a.text.starts_with('+') {
                    if a.text.contains(['i', 'n']) {
                        return refuse("-i or -n");
                    }
                    continue;
                }
                let name = a.text.split_once('=').map_or(a.text.as_str(), |(n, _)| n);
                let name = name.strip_suffix('+').unwrap_or(name);
                if !is_plain_name(name) {
                    return refuse(not_plain);
                }
            }
        }
        "read" | "mapfile" | "readarray" => {
            // Options whose next word is a value, not a name.
            let takes_value = |c: char| "dinNptuOsc".contains(c);
            let mut k = 0;
            while k < args.len() {
                let t = &args[k].text;
                if let Some(opts) = t.strip_prefix('-').filter(|o| !o.is_empty()) {
                    if opts.contains('C') {
                        return refuse("a callback (-C)");
                    }
                    let last = opts.chars().last().unwrap_or('-');
                    if last == 'a' {
                        if args.get(k + 1).is_some_and(|n| !is_plain_name(&n.text)) {
                            return refuse(not_plain);
                        }
                        k += 2;
                        continue;
                    }
                    if takes_value(last) {
                        k += 2;
                        continue;
                    }
                    k += 1;
                    continue;
                }
                if !is_plain_name(t) {
                    return refuse(not_plain);
                }
                k += 1;
            }
        }
        "printf" | "test" | "["
            if args
                .windows(2)
                .any(|w| w[0].text == "-v" && !is_plain_name(&w[1].text)) =>
        {
            return refuse(not_plain);
        }
        _ => {}
    }
    Ok(())
}

/// `NAME=…` or `NAME+=…` with an unquoted name: an assignment when it precedes the
/// command word.
fn is_assignment(raw: &[char]) -> bool {
    let Some(&first) = raw.first() else {
        return false;
    };
    if !is_name_start(first) {
        return false;
    }
    let name_len = raw.iter().take_while(|c| is_name_char(**c)).count();
    match raw.get(name_len) {
        Some('=') => true,
        Some('+') => raw.get(name_len + 1) == Some(&'='),
        _ => false,
    }
}
