//! Permission rules: which tool calls an agent may make. A security boundary.
//!
//! # Rules
//!
//! A rule is `Tool` or `Tool(content)`:
//! - `Tool`, `Tool(*)`: the whole tool.
//! - `Bash(git status)`: exactly that command (compared word by word after quote
//!   removal, so `git  "status"` is the same command).
//! - `Bash(git status:*)`: that command and any arguments after it, at a word boundary:
//!   `git status`, `git status -s`, not `git statusx`.
//! - `Bash(npm run *)`: a wildcard; `*` matches any characters. It is matched against
//!   the command's words joined by single spaces, a word holding blanks or shell
//!   metacharacters single-quoted (so `npm run *` does not match `npm run`, which has
//!   no trailing space, nor `"npm run" x`, a program called `npm run`).
//! - `Read(src/**)`, `Edit(…)`, `Write(…)`, `Glob(…)`, `Grep(…)`: a path glob
//!   (`globset`, `*` does not cross `/`, `**` does), relative to the workspace unless it
//!   starts with `/` (absolute) or `~/` (home). It is matched against the *resolved*
//!   path of `file_path` (Read/Write/Edit) or `path` (Glob/Grep; the workspace when
//!   absent; for Glob, the literal directories that start `pattern` count too): relative
//!   to the workspace, symlinks followed, `..` applied. A pattern ending in `/**` also
//!   matches the directory itself. `..` is not allowed inside a path rule.
//! - Any other tool (`Task`, …): the content is a wildcard matched against the input's
//!   main string field (`Task`: `subagent_type`); for allowing, a tool with no known
//!   field never matches a content rule; for denying, any string field may match.
//!
//! # Decisions
//!
//! Deny rules win over allow rules. An empty allow list allows every tool (deny rules
//! still apply); a non-empty one allows only calls some allow rule matches.
//!
//! A shell command is split into every simple command it runs
//! ([`super::shell::split_commands`]): lists, pipelines, substitutions (also inside
//! double quotes and here-documents), subshells, groups. It is allowed only if *every*
//! part is allowed, and denied if *any* part matches a deny rule. A command the
//! splitter cannot analyse is denied (unless `Bash` is allowed whole and no `Bash(…)`
//! deny rule exists: then nothing needs analysing).
//!
//! Conservative choices where the rules above leave room:
//! - A part that redirects output to a file (`>`, `>>`, `>|`, `&>`, `<>`, `>&file`;
//!   not `/dev/null` nor a descriptor like `2>&1`) or to bash's `/dev/tcp`/`/dev/udp`
//!   is never allowed by a prefix or wildcard rule: `Bash(git status:*)` is meant for
//!   a read-only command, and `git status > x` writes `x`. An exact rule that spells
//!   the redirection out, or the whole tool, allows it.
//! - A part with leading variable assignments (`FOO=1 git status`) is never allowed by
//!   a prefix or wildcard rule either (`PATH=…`, `GIT_DIR=…`, `LD_PRELOAD=…` change what
//!   runs); an exact rule spelling them out does. An assignment alone (`X=1`) is a part
//!   too and needs such a rule.
//! - A part with no words whose only redirections read (`< file`, the rest of
//!   `while …; done < file`) runs nothing and needs no rule; one that writes
//!   (`> file`, `( … ) > log`) needs the whole tool or an exact rule.
//! - Deny rules on `Bash` are a blacklist and can never be complete (`/bin/rm`,
//!   `find -delete`, a script …), but they try: a part is also checked with its
//!   program's directory stripped (`/bin/rm` → `rm`), with wrappers stripped
//!   (`sudo`, `env`, `nohup`, `timeout`, `xargs`, `command`, `exec`, `nice`, …; their
//!   options are skipped generously), with `find -exec`'s command, and with the
//!   scripts of `bash -c`/`sh -c`, `eval`, `trap`, `watch`, `su -c` and `env -S`
//!   parsed in turn. A part whose program is only
//!   known at run time (`$CMD x`, `$(…) x`, `r*m`) is denied when any `Bash(…)` deny
//!   rule exists, since it cannot be shown not to match. Allow rules are the
//!   boundary to rely on.
//! - Deny path rules also cover the sibling tools: `Read(…)` deny rules apply to Glob and
//!   Grep, `Edit(…)` and `Write(…)` deny rules to each other, so a denied file cannot be
//!   read with Grep or changed with Write instead. A Grep (or a Glob, for `Glob(…)`
//!   rules) whose search would reach into what a deny rule names (`Read(.env)` and a
//!   Grep of the whole workspace) is denied, since the tool cannot leave that part out;
//!   the message says to search a narrower path. Patterns with no literal start
//!   (`**/*.pem`) only deny the paths they match.
//! - Bash evaluates some *values* as code (an array subscript `a[$(cmd)]` inside
//!   arithmetic or a variable name, `${!x}`, `${x@P}`), and `for x in '…'` sets a
//!   value without any rule; the splitter refuses those evaluation points (arithmetic
//!   on variables, `read`/`printf -v`/`test -v`/`declare` with non-plain names …),
//!   see [`super::shell`].
//! - A call whose path or command field is missing or not a string is let through to
//!   the tool if the tool is allowed at all: the tool rejects it without touching
//!   anything, and the model learns what is wrong with its input rather than seeing a
//!   permission denial.

use super::shell::{self, ShellError, SimpleCommand, Word};
use crate::tools::paths;
use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use crate::transcript::markers::DENIAL_PREFIX;

/// The tools whose rules are path globs, and the input field holding the path.
const PATH_TOOLS: [(&str, &str); 5] = [
    ("Read", "file_path"),
    ("Write", "file_path"),
    ("Edit", "file_path"),
    ("Glob", "path"),
    ("Grep", "path"),
];

/// For other tools: the input field a content rule is matched against.
const CONTENT_FIELDS: [(&str, &str); 1] = [("Task", "subagent_type")];

/// Wrappers that run their arguments as a command (for deny matching).
const WRAPPERS: [&str; 20] = [
    "command", "builtin", "exec", "nohup", "time", "env", "sudo", "doas", "nice", "ionice",
    "timeout", "stdbuf", "xargs", "setsid", "chrt", "taskset", "unbuffer", "chroot", "watch",
    "flock",
];

/// Shells whose `-c` script (and `eval`, whose arguments) run as commands.
const SHELLS: [&str; 7] = ["bash", "sh", "zsh", "dash", "ksh", "fish", "busybox"];

/// Message length at which a command quoted in a denial is shortened.
const MAX_QUOTED: usize = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad permission rule {rule:?}: {why}")]
pub struct RuleError {
    pub rule: String,
    pub why: String,
}

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// `message` is the tool_result text the model gets (starts with "Permission to use ").
    Deny {
        message: String,
    },
}

#[derive(Debug, Clone)]
enum BashPattern {
    Exact(SimpleCommand),
    Prefix(SimpleCommand),
    /// `*` matches anything. With `or_arguments` (from `P:*` where `P` has a `*`), the
    /// pattern also matches when followed by a space and any arguments.
    Wildcard {
        pattern: String,
        or_arguments: bool,
    },
}

#[derive(Debug, Clone)]
struct PathPattern {
    /// Relative to the workspace, or absolute.
    absolute: bool,
    /// The literal directories (or file) the pattern starts with, before any glob
    /// character: what a directory search must not contain when the rule denies.
    literal: PathBuf,
    matcher: GlobMatcher,
    /// For `dir/**`: `dir` itself.
    base: Option<GlobMatcher>,
}

#[derive(Debug, Clone)]
enum Content {
    Whole,
    Bash(BashPattern),
    Path(PathPattern),
    Other(String),
}

#[derive(Debug, Clone)]
struct Rule {
    text: String,
    tool: String,
    content: Content,
}

/// Parsed allow and deny rules of one agent.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
}

impl Permissions {
    /// Parses the rules; the first malformed one is the error.
    pub fn new(allowed: &[String], disallowed: &[String]) -> Result<Self, RuleError> {
        Ok(Permissions {
            allow: allowed
                .iter()
                .map(|r| parse_rule(r))
                .collect::<Result<_, _>>()?,
            deny: disallowed
                .iter()
                .map(|r| parse_rule(r))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether some allow rule names this tool explicitly, and no whole-tool deny rule
    /// does. Tools such as `AskUser` are offered only then, never through an empty
    /// allow list.
    pub fn names(&self, tool: &str) -> bool {
        self.allow.iter().any(|rule| rule.tool == tool) && self.offers(tool)
    }

    /// Whether a tool is offered to the model at all: when the allow list is empty or
    /// some allow rule names it, and no whole-tool deny rule names it.
    pub fn offers(&self, tool: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|r| r.tool == tool))
            && !self
                .deny
                .iter()
                .any(|r| r.tool == tool && matches!(r.content, Content::Whole))
    }

    /// Checks one call. `workspace` resolves relative paths for path rules.
    pub fn check(&self, tool: &str, input: &Value, workspace: &Path) -> Decision {
        let subject = Subject::of(tool, input, workspace);
        if let Some(rule) = self
            .deny
            .iter()
            .find(|r| r.tool == tool && matches!(r.content, Content::Whole))
        {
            return subject.deny(&format!("the deny rule {} forbids {tool}", rule.text));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| r.tool == tool) {
            return subject.deny(&format!(
                "no allow rule names {tool} (allowed: {})",
                list(self.allow.iter())
            ));
        }
        let deny: Vec<&Rule> = self
            .deny
            .iter()
            .filter(|r| deny_applies(&r.tool, tool))
            .collect();
        let allow: Vec<&Rule> = self.allow.iter().filter(|r| r.tool == tool).collect();
        let allow_whole =
            self.allow.is_empty() || allow.iter().any(|r| matches!(r.content, Content::Whole));
        match &subject.target {
            Target::Missing => Decision::Allow,
            Target::Command(cmd) => self.check_bash(&subject, cmd, &allow, &deny, allow_whole),
            Target::Path { resolved, lexical } => {
                for d in &deny {
                    // Grep reads contents, so a deny rule reaching inside its search
                    // denies it; Glob only lists names, so only its own rules do.
                    let searches = tool == "Grep" || (tool == "Glob" && d.tool == "Glob");
                    if let Content::Path(p) = &d.content {
                        let hit = match resolved {
                            Some(r) => p.matches(r, &subject.workspace),
                            None => false,
                        } || p.matches(lexical, &subject.workspace);
                        if hit {
                            return subject.deny(&format!("it matches the deny rule {}", d.text));
                        }
                        let root = resolved.as_ref().unwrap_or(lexical);
                        if let Some(inside) = searches
                            .then(|| p.inside_search(root, &subject.workspace))
                            .flatten()
                        {
                            return subject.deny(&format!(
                                "the search would reach {}, which the deny rule {} covers; \
                                 search a narrower path",
                                inside.display(),
                                d.text
                            ));
                        }
                    }
                }
                if allow_whole {
                    return Decision::Allow;
                }
                let Some(resolved) = resolved else {
                    return subject.deny(&format!(
                        "the path cannot be resolved, so no allow rule can match (allowed: {})",
                        list(allow.iter().copied())
                    ));
                };
                if allow.iter().any(|r| match &r.content {
                    Content::Path(p) => p.matches(resolved, &subject.workspace),
                    _ => false,
                }) {
                    return Decision::Allow;
                }
                subject.deny(&format!(
                    "no allow rule matches (allowed: {})",
                    list(allow.iter().copied())
                ))
            }
            Target::Other { field } => {
                for d in &deny {
                    if let Content::Other(pat) = &d.content {
                        let hit = match field {
                            Some(v) => wildcard(pat, v),
                            None => string_values(input).iter().any(|v| wildcard(pat, v)),
                        };
                        if hit {
                            return subject.deny(&format!("it matches the deny rule {}", d.text));
                        }
                    }
                }
                if allow_whole
                    || allow.iter().any(|r| match (&r.content, field) {
                        (Content::Other(pat), Some(v)) => wildcard(pat, v),
                        _ => false,
                    })
                {
                    return Decision::Allow;
                }
                subject.deny(&format!(
                    "no allow rule matches (allowed: {})",
                    list(allow.iter().copied())
                ))
            }
        }
    }

    fn check_bash(
        &self,
        subject: &Subject,
        cmd: &str,
        allow: &[&Rule],
        deny: &[&Rule],
        allow_whole: bool,
    ) -> Decision {
        let deny_patterns: Vec<(&Rule, &BashPattern)> = deny
            .iter()
            .filter_map(|r| match &r.content {
                Content::Bash(p) => Some((*r, p)),
                _ => None,
            })
            .collect();
        if allow_whole && deny_patterns.is_empty() {
            return Decision::Allow;
        }
        let parts = match shell::split_commands(cmd) {
            Ok(p) => p,
            Err(e) => {
                return subject.deny(&format!(
                    "the command could not be analysed safely ({e}), so it cannot be checked \
                     against the permission rules"
                ));
            }
        };
        let compound = parts.len() > 1;
        let part_name = |p: &SimpleCommand| {
            if compound {
                format!("its part {} ", quote(&p.source))
            } else {
                String::new()
            }
        };
        if !deny_patterns.is_empty() {
            for part in &parts {
                match deny_candidates(part, 0) {
                    Ok(cands) => {
                        for c in &cands {
                            if let Some((rule, _)) =
                                deny_patterns.iter().find(|(_, p)| p.matches_for_deny(c))
                            {
                                return subject.deny(&format!(
                                    "{}matches the deny rule {}",
                                    if compound {
                                        part_name(part)
                                    } else {
                                        "it ".into()
                                    },
                                    rule.text
                                ));
                            }
                        }
                    }
                    Err(why) => {
                        return subject.deny(&format!(
                            "{}cannot be checked against the deny rules ({}): {why}",
                            if compound {
                                part_name(part)
                            } else {
                                "it ".into()
                            },
                            list(deny_patterns.iter().map(|(r, _)| *r))
                        ));
                    }
                }
            }
        }
        if allow_whole {
            return Decision::Allow;
        }
        for part in &parts {
            let runs_nothing =
                part.words.is_empty() && part.assignments.is_empty() && !part.writes_file();
            if runs_nothing {
                continue;
            }
            let ok = allow.iter().any(|r| match &r.content {
                Content::Bash(p) => p.matches_for_allow(part),
                _ => false,
            });
            if ok {
                continue;
            }
            let mut why = String::from("no allow rule matches");
            if compound {
                let _ = write!(why, " its part {}", quote(&part.source));
            }
            let _ = write!(why, " (allowed: {})", list(allow.iter().copied()));
            if part.writes_file() {
                why.push_str(
                    "; it redirects output to a file, which prefix and wildcard rules never allow",
                );
            } else if !part.assignments.is_empty() {
                why.push_str(
                    "; it starts with variable assignments, which prefix and wildcard rules \
                     never allow",
                );
            }
            return subject.deny(&why);
        }
        Decision::Allow
    }
}

/// What a call is about, for matching and for the message.
struct Subject {
    tool: String,
    workspace: PathBuf,
    described: String,
    target: Target,
}

enum Target {
    /// The relevant field is absent or not a string: the tool will reject the call.
    Missing,
    Command(String),
    Path {
        resolved: Option<PathBuf>,
        lexical: PathBuf,
    },
    Other {
        field: Option<String>,
    },
}

impl Subject {
    fn of(tool: &str, input: &Value, workspace: &Path) -> Self {
        let ws = paths::root(workspace);
        let (described, target) = if tool == "Bash" {
            match input.get("command").and_then(Value::as_str) {
                Some(c) => (
                    format!(" with command {}", quote(c)),
                    Target::Command(c.into()),
                ),
                None => (String::new(), Target::Missing),
            }
        } else if let Some((_, field)) = PATH_TOOLS.iter().find(|(t, _)| *t == tool) {
            let raw = match input.get(*field) {
                // Glob and Grep search the workspace when `path` is absent (or one of
                // the placeholders the model sometimes sends instead of omitting it).
                Some(Value::String(s))
                    if *field == "path" && matches!(s.as_str(), "" | "undefined" | "null") =>
                {
                    Some(".")
                }
                None | Some(Value::Null) if *field == "path" => Some("."),
                Some(Value::String(s)) if !s.is_empty() => Some(s.as_str()),
                _ => None,
            };
            match raw {
                None => (String::new(), Target::Missing),
                Some(raw) => {
                    let mut p = PathBuf::from(raw);
                    if tool == "Glob"
                        && let Some(pat) = input.get("pattern").and_then(Value::as_str)
                    {
                        p = glob_base(&p, pat);
                    }
                    let lexical = paths::lexical(&ws, &p);
                    let resolved = paths::resolve(&ws, &p).ok();
                    let mut d = format!(" on {}", quote(&p.to_string_lossy()));
                    if let Some(r) = &resolved
                        && r.as_os_str() != p.as_os_str()
                    {
                        let _ = write!(d, " (resolved to {})", r.display());
                    }
                    (d, Target::Path { resolved, lexical })
                }
            }
        } else {
            let field = CONTENT_FIELDS
                .iter()
                .find(|(t, _)| *t == tool)
                .and_then(|(_, f)| input.get(*f))
                .and_then(Value::as_str)
                .map(str::to_string);
            let d = field
                .as_ref()
                .map(|f| format!(" with {}", quote(f)))
                .unwrap_or_default();
            (d, Target::Other { field })
        };
        Subject {
            tool: tool.to_string(),
            workspace: ws,
            described,
            target,
        }
    }

    fn deny(&self, why: &str) -> Decision {
        Decision::Deny {
            message: format!(
                "{DENIAL_PREFIX}{}{} has been denied: {why}. The call was not run.",
                self.tool, self.described
            ),
        }
    }
}

/// Whether a deny rule written for `rule_tool` applies to a call of `tool`. Rules on
/// reading also cover the tools that search file contents and names (Read → Glob,
/// Grep), and rules on changing files cover both tools that change them (Edit ↔ Write):
/// a deny rule should not be sidestepped by picking the sibling tool.
fn deny_applies(rule_tool: &str, tool: &str) -> bool {
    rule_tool == tool
        || (rule_tool == "Read" && matches!(tool, "Glob" | "Grep"))
        || (rule_tool == "Edit" && tool == "Write")
        || (rule_tool == "Write" && tool == "Edit")
}

/// Glob's effective directory: `path` joined with the literal directories that start
/// the pattern (`src/**/*.rs` → `src`).
fn glob_base(path: &Path, pattern: &str) -> PathBuf {
    let is_glob = |c: &str| c.contains(['*', '?', '[', ']', '{', '}', '\\']);
    let parts: Vec<&str> = pattern.split('/').collect();
    let mut base = if pattern.starts_with('/') {
        PathBuf::from("/")
    } else if path == Path::new(".") {
        PathBuf::new()
    } else {
        path.to_path_buf()
    };
    for (i, part) in parts.iter().enumerate() {
        if is_glob(part) || i == parts.len() - 1 {
            break;
        }
        if !part.is_empty() {
            base.push(part);
        }
    }
    if base.as_os_str().is_empty() {
        base.push(".");
    }
    base
}

fn quote(s: &str) -> String {
    if s.chars().count() > MAX_QUOTED {
        let short: String = s.chars().take(MAX_QUOTED).collect();
        format!("{:?}…", short)
    } else {
        format!("{s:?}")
    }
}

fn list<'a>(rules: impl Iterator<Item = &'a Rule>) -> String {
    let v: Vec<&str> = rules.map(|r| r.text.as_str()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn string_values(v: &Value) -> Vec<String> {
    match v {
        Value::Object(m) => m
            .values()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

fn rule_error(rule: &str, why: impl Into<String>) -> RuleError {
    RuleError {
        rule: rule.to_string(),
        why: why.into(),
    }
}

fn parse_rule(text: &str) -> Result<Rule, RuleError> {
    let t = text.trim();
    let (tool, content) = match t.find('(') {
        None => {
            if t.contains(')') {
                return Err(rule_error(text, "a `)` without `(`"));
            }
            (t, None)
        }
        Some(open) => {
            if !t.ends_with(')') {
                return Err(rule_error(text, "the rule must end with `)`"));
            }
            let inner = &t[open + 1..t.len() - 1];
            let mut depth = 0i32;
            for c in inner.chars() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth < 0 {
                            return Err(rule_error(text, "unbalanced parentheses"));
                        }
                    }
                    _ => {}
                }
            }
            if depth != 0 {
                return Err(rule_error(text, "unbalanced parentheses"));
            }
            (t[..open].trim_end(), Some(inner.trim()))
        }
    };
    if tool.is_empty() {
        return Err(rule_error(text, "empty tool name"));
    }
    if !tool
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(rule_error(
            text,
            "a tool name has only letters, digits, `_`, `-` and `.`",
        ));
    }
    let content = match content {
        None => Content::Whole,
        Some("") => return Err(rule_error(text, "empty pattern inside `()`")),
        Some("*") | Some(":*") => Content::Whole,
        Some(c) if tool == "Bash" => Content::Bash(parse_bash(text, c)?),
        Some(c) if PATH_TOOLS.iter().any(|(t, _)| *t == tool) => {
            Content::Path(parse_path(text, c)?)
        }
        Some(c) => Content::Other(c.to_string()),
    };
    Ok(Rule {
        text: t.to_string(),
        tool: tool.to_string(),
        content,
    })
}

fn one_command(rule: &str, text: &str) -> Result<SimpleCommand, RuleError> {
    let mut cmds = shell::split_commands(text)
        .map_err(|e: ShellError| rule_error(rule, format!("cannot parse the command: {e}")))?;
    match cmds.len() {
        1 => Ok(cmds.remove(0)),
        0 => Err(rule_error(rule, "no command")),
        _ => Err(rule_error(
            rule,
            "a rule names one simple command; write one rule per command",
        )),
    }
}

fn parse_bash(rule: &str, content: &str) -> Result<BashPattern, RuleError> {
    if let Some(prefix) = content.strip_suffix(":*") {
        let prefix = prefix.trim();
        if prefix.contains('*') {
            // A wildcard that may also end at the prefix: `P` or `P *`.
            return Ok(BashPattern::Wildcard {
                pattern: squash(prefix),
                or_arguments: true,
            });
        }
        return Ok(BashPattern::Prefix(one_command(rule, prefix)?));
    }
    if content.contains('*') {
        return Ok(BashPattern::Wildcard {
            pattern: squash(content),
            or_arguments: false,
        });
    }
    Ok(BashPattern::Exact(one_command(rule, content)?))
}

/// Collapses runs of whitespace to one space.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn parse_path(rule: &str, content: &str) -> Result<PathPattern, RuleError> {
    let mut pat = content.to_string();
    let absolute;
    if let Some(rest) = pat.strip_prefix("~/") {
        let home = std::env::var_os("HOME")
            .ok_or_else(|| rule_error(rule, "`~/` needs $HOME, which is not set"))?;
        pat = format!(
            "{}/{}",
            globset::escape(&paths::root(Path::new(&home)).to_string_lossy()),
            rest
        );
        absolute = true;
    } else if pat.starts_with('/') {
        absolute = true;
        pat = canonical_literal_prefix(&pat);
    } else {
        absolute = false;
        while let Some(rest) = pat.strip_prefix("./") {
            pat = rest.to_string();
        }
    }
    if pat.split('/').any(|c| c == "..") {
        return Err(rule_error(rule, "`..` is not allowed in a path rule"));
    }
    let build = |p: &str| {
        GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map(|g| g.compile_matcher())
            .map_err(|e| rule_error(rule, format!("bad glob: {e}")))
    };
    let matcher = build(&pat)?;
    let base = match pat.strip_suffix("/**") {
        Some(b) if !b.is_empty() => Some(build(b)?),
        _ => None,
    };
    let literal: PathBuf = pat
        .split('/')
        .take_while(|c| !c.contains(['*', '?', '[', ']', '{', '}', '\\']))
        .collect::<Vec<_>>()
        .join("/")
        .into();
    Ok(PathPattern {
        absolute,
        literal,
        matcher,
        base,
    })
}

/// Resolves the literal directories that start an absolute pattern (so a rule naming
/// `/tmp/x/**` still matches when `/tmp` is a symlink), escaping them for the glob.
fn canonical_literal_prefix(pat: &str) -> String {
    let is_glob = |c: &str| c.contains(['*', '?', '[', ']', '{', '}', '\\']);
    let parts: Vec<&str> = pat.split('/').collect();
    let n = parts.iter().take_while(|p| !is_glob(p)).count();
    let literal = parts[..n].join("/");
    if literal.is_empty() {
        return pat.to_string();
    }
    let resolved = paths::root(Path::new(&literal));
    let mut out = globset::escape(&resolved.to_string_lossy());
    for p in &parts[n..] {
        out.push('/');
        out.push_str(p);
    }
    out
}

impl PathPattern {
    /// For a directory search rooted at `root`: the literal part of the pattern lies
    /// inside the search, so the search would reach what the pattern names.
    fn inside_search(&self, root: &Path, workspace: &Path) -> Option<PathBuf> {
        if self.literal.as_os_str().is_empty() || self.literal == Path::new("/") {
            return None;
        }
        let lit = if self.absolute {
            self.literal.clone()
        } else {
            workspace.join(&self.literal)
        };
        lit.starts_with(root).then_some(lit)
    }

    fn matches(&self, path: &Path, workspace: &Path) -> bool {
        let subject: &Path = if self.absolute {
            path
        } else {
            match path.strip_prefix(workspace) {
                Ok(rel) => rel,
                Err(_) => return false,
            }
        };
        self.matcher.is_match(subject) || self.base.as_ref().is_some_and(|b| b.is_match(subject))
    }
}

impl BashPattern {
    fn matches_for_allow(&self, part: &SimpleCommand) -> bool {
        match self {
            BashPattern::Exact(c) => c == part,
            BashPattern::Prefix(c) => {
                !part.writes_file()
                    && part.assignments == c.assignments
                    && part.words.len() >= c.words.len()
                    && part.words.iter().zip(&c.words).all(|(a, b)| a == b)
            }
            BashPattern::Wildcard { .. } => {
                !part.writes_file()
                    && part.assignments.is_empty()
                    && self.wildcard_matches(&part.normalized())
            }
        }
    }

    fn wildcard_matches(&self, text: &str) -> bool {
        match self {
            BashPattern::Wildcard {
                pattern,
                or_arguments,
            } => {
                wildcard(pattern, text)
                    || (*or_arguments && wildcard(&format!("{pattern} *"), text))
            }
            _ => false,
        }
    }

    /// Deny matching looks at the words only: assignments and redirections do not
    /// make a forbidden command acceptable.
    fn matches_for_deny(&self, words: &[Word]) -> bool {
        match self {
            BashPattern::Exact(c) => {
                words.len() == c.words.len()
                    && words.iter().zip(&c.words).all(|(a, b)| a.text == b.text)
            }
            BashPattern::Prefix(c) => {
                words.len() >= c.words.len()
                    && words.iter().zip(&c.words).all(|(a, b)| a.text == b.text)
            }
            BashPattern::Wildcard { .. } => self.wildcard_matches(&shell::normalize_words(words)),
        }
    }
}

/// `*` matches any run of characters (including none); everything else is literal.
fn wildcard(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The word lists a deny rule is tried against for one part: the part itself, with
/// the program's directory stripped, with wrappers stripped, and the commands of
/// `bash -c`/`eval` scripts and `find -exec`. `Err` when the program is only known
/// at run time.
fn deny_candidates(part: &SimpleCommand, depth: usize) -> Result<Vec<Vec<Word>>, String> {
    let mut out = Vec::new();
    let mut queue: Vec<Vec<Word>> = vec![part.words.clone()];
    let mut seen = 0;
    while let Some(words) = queue.pop() {
        seen += 1;
        if seen > 64 {
            break;
        }
        let Some(first) = words.first() else { continue };
        if first.dynamic {
            return Err(format!(
                "its program {} is only known when it runs",
                quote(&first.text)
            ));
        }
        let base = first
            .text
            .rsplit('/')
            .next()
            .unwrap_or(&first.text)
            .to_string();
        out.push(words.clone());
        if base != first.text {
            let mut w = words.clone();
            w[0].text = base.clone();
            queue.push(w);
        }
        let args = &words[1..];
        if WRAPPERS.contains(&base.as_str()) {
            // Options and their values are skipped generously: try the command
            // starting at each of the next few words.
            for k in 0..args.len().min(6) {
                if !args[k].text.starts_with('-') || k > 0 {
                    queue.push(args[k..].to_vec());
                }
            }
        }
        if base == "find" {
            for (k, a) in args.iter().enumerate() {
                if matches!(a.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")
                    && k + 1 < args.len()
                {
                    queue.push(args[k + 1..].to_vec());
                }
            }
        }
        let joined = |from: usize| {
            args[from.min(args.len())..]
                .iter()
                .map(|w| w.text.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let after_flag = |is_flag: &dyn Fn(&str) -> bool| {
            args.iter()
                .position(|a| is_flag(&a.text))
                .and_then(|k| args.get(k + 1))
                .map(|w| w.text.clone())
        };
        // Strings that these programs run as shell commands.
        let script = match base.as_str() {
            "eval" => Some(joined(0)),
            // `trap 'cmd' SIGNAL`: the first operand runs later.
            "trap" => args
                .iter()
                .find(|a| !a.text.starts_with('-'))
                .map(|w| w.text.clone()),
            // `watch` runs its arguments with `sh -c`.
            "watch" => {
                let first = args.iter().position(|a| !a.text.starts_with('-'));
                first.map(joined)
            }
            "su" => after_flag(&|t| t == "-c" || t == "--command"),
            "env" => after_flag(&|t| t == "-S" || t == "--split-string"),
            b if SHELLS.contains(&b) => {
                after_flag(&|t| t.starts_with('-') && !t.starts_with("--") && t.contains('c'))
            }
            _ => None,
        };
        if let Some(script) = script {
            if depth > 8 {
                return Err("shell scripts nested too deeply".into());
            }
            let inner = shell::split_commands(&script)
                .map_err(|e| format!("its script cannot be analysed ({e})"))?;
            for c in &inner {
                out.extend(deny_candidates(c, depth + 1)?);
            }
        }
    }
    Ok(out)
}
