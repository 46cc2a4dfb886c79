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
//! - `mcp__server` (or `mcp__server__*`): every tool of that MCP server
//!   (`mcp__server__tool`), in allow, deny and ask rules alike.
//! - `WebSearch`, `WebFetch` ([`Permissions::web_access`]): `WebFetch(domain:docs.rs)`
//!   names a domain; as server tools they are offered only when an allow rule names
//!   them, and their domain rules become the tool's domain lists; as client tools (the
//!   pipeline's agents) a call is checked like any other, a domain rule against the
//!   URL's host.
//! - Any other tool (`Task`, …): the content is a wildcard matched against the input's
//!   main string field (`Task`: `subagent_type`); for allowing, a tool with no known
//!   field never matches a content rule; for denying, any string field may match.
//!
//! # Decisions
//!
//! Deny rules win over allow rules. An empty allow list allows every tool (deny rules
//! still apply); a non-empty one allows only calls some allow rule matches.
//!
//! A shell command is parsed with a real bash grammar ([`super::bash_rules`]):
//! - A prefix, exact or wildcard rule allows a command only when all of it lies in a
//!   plain subset (simple commands of literal words and quoted strings joined by `&&`,
//!   `||`, `;`, `|` and newlines; redirections only to `/dev/null` or between
//!   descriptors), and every simple command in it matches some rule. Anything else
//!   (substitutions, here-documents, expansions, assignments, loops, subshells, `&`,
//!   file redirections, parse errors) is allowed only by a bare `Bash` rule. A rule's
//!   own command must lie in the plain subset too, else the rule is an error.
//! - Deny rules look at every simple command anywhere in the tree. Deny rules on
//!   `Bash` are a blacklist and can never be complete (`/bin/rm`, `find -delete`, a
//!   script …), but they try: a command is also checked with its program's directory
//!   stripped (`/bin/rm` → `rm`), from every word after a wrapper (`sudo`, `env`,
//!   `nohup`, `timeout`, `xargs`, `command`, `exec`, `nice`, …), with `find -exec`'s
//!   command, and with the scripts of `bash -c`/`sh -c`, `eval`, `trap`, `watch`,
//!   `su -c` and `env -S` parsed in turn. A word only known at run time matches any
//!   word of a rule. When a deny rule exists and a command cannot be checked (a
//!   program only known at run time such as `$CMD x` or `r*m`, a place where bash
//!   evaluates a value as code such as `$((x))` or `${!x}`, a parse error), it is
//!   denied. There is no cap on the work: a longer command costs more, never passes
//!   unchecked. Allow rules are the boundary to rely on, with the sandbox
//!   ([`crate::tools::sandbox`]) under them.
//! - Bad input (a command over 100,000 bytes, nesting deeper than 400 levels, a parse
//!   over 500 ms) is denied with the reason, unless nothing needs analysing (a bare
//!   `Bash` allow and no `Bash(…)` deny rule).
//! - Deny path rules also cover the sibling tools: `Read(…)` deny rules apply to Glob and
//!   Grep, `Edit(…)` and `Write(…)` deny rules to each other, so a denied file cannot be
//!   read with Grep or changed with Write instead. A Grep (or a Glob, for `Glob(…)`
//!   rules) whose search would reach into what a deny rule names (`Read(.env)` and a
//!   Grep of the whole workspace) is denied, since the tool cannot leave that part out;
//!   the message says to search a narrower path. Patterns with no literal start
//!   (`**/*.pem`) only deny the paths they match.
//! - A call whose path or command field is missing or not a string is let through to
//!   the tool if the tool is allowed at all: the tool rejects it without touching
//!   anything, and the model learns what is wrong with its input rather than seeing a
//!   permission denial.

use super::bash_rules::{self, DenyView, NotPlain, Part};
use crate::tools::paths;
use crate::tools::protected;
use crate::tools::sandbox::SandboxPolicy;
use crate::transcript::ToolInput;
use crate::transcript::tools as names;
use globset::GlobMatcher;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod parse;
use parse::parse_rule;

pub use crate::transcript::markers::DENIAL_PREFIX;

/// What the rules let a server tool (WebSearch, WebFetch) do; the API enforces it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebAccess {
    /// Only these domains; empty: any not blocked.
    pub allowed_domains: Vec<String>,
    /// Never these domains (empty when `allowed_domains` is not: the API takes one list).
    pub blocked_domains: Vec<String>,
}

/// The input field holding the path of a tool whose rules are path globs (the tool
/// table's `path_field`); `None` for the other tools.
fn path_field(tool: &str) -> Option<&'static str> {
    names::info_of(tool).and_then(|t| t.path_field)
}

/// How MCP tools' names start (`mcp__<server>__<tool>`); a rule `mcp__<server>`
/// names all of a server's tools.
const MCP_PREFIX: &str = crate::tools::mcp::TOOL_PREFIX;

/// Message length at which a command quoted in a denial is shortened.
const MAX_QUOTED: usize = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("权限规则 {rule:?} 不行:{why}")]
pub struct RuleError {
    pub rule: String,
    pub why: String,
    /// The glob parser's error, when that is what refused the rule (`why` quotes it).
    #[source]
    pub cause: Option<crate::error::Cause>,
}

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// `message` is the tool_result text the model gets (starts with "Permission to use ").
    /// `rule`: the rule that denied it, as written (`Bash(rm:*)`), for the person; `None`
    /// when no rule allows the call (or it cannot be checked against them).
    Deny {
        message: String,
        rule: Option<String>,
    },
    /// Allowed, but an `ask` rule (a settings file's `permissions.ask`) wants the person
    /// to confirm it first; `why` says which rule, for the question.
    Ask {
        why: String,
    },
}

#[derive(Debug, Clone)]
enum BashPattern {
    /// Exactly these words.
    Exact(Vec<String>),
    /// These words and any after them.
    Prefix(Vec<String>),
    /// `*` matches anything. With `or_arguments` (from `P:*` where `P` has a `*`), the
    /// pattern also matches when followed by a space and any arguments.
    Wildcard { pattern: String, or_arguments: bool },
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
    /// `WebFetch(domain:example.com)`, `WebSearch(domain:…)`: a server tool's domain.
    Domain(String),
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
    /// Calls these match (read as deny rules are) are asked about ([`Decision::Ask`]).
    ask: Vec<Rule>,
}

impl Permissions {
    /// Parses the rules; the first malformed one is the error. No home directory is
    /// known: a `~/` rule is refused (see [`Permissions::with_home`]).
    pub fn new(allowed: &[String], disallowed: &[String]) -> Result<Self, RuleError> {
        Permissions::with_home(allowed, disallowed, None)
    }

    /// [`Permissions::new`] with `home` for the rules that start with `~/` (the
    /// settings' `HOME`; the library never reads the environment itself).
    pub fn with_home(
        allowed: &[String],
        disallowed: &[String],
        home: Option<&Path>,
    ) -> Result<Self, RuleError> {
        let parse = |rules: &[String]| -> Result<Vec<Rule>, RuleError> {
            rules.iter().map(|r| parse_rule(r, home)).collect()
        };
        Ok(Permissions {
            allow: parse(allowed)?,
            deny: parse(disallowed)?,
            ask: Vec::new(),
        })
    }

    /// These rules with `ask` rules added: a call they allow that an ask rule matches
    /// (matched as a deny rule is, so an ask rule cannot be sidestepped either) is
    /// [`Decision::Ask`]. Deny rules still win; an ask rule never allows what the
    /// allow rules do not.
    pub fn with_ask(mut self, ask: &[String], home: Option<&Path>) -> Result<Self, RuleError> {
        for rule in ask {
            self.ask.push(parse_rule(rule, home)?);
        }
        Ok(self)
    }

    /// Whether some allow rule names this tool explicitly, and no whole-tool deny rule
    /// does. Tools such as `AskUser` are offered only then, never through an empty
    /// allow list.
    pub fn names(&self, tool: &str) -> bool {
        self.allow.iter().any(|rule| rule.tool == tool) && self.offers(tool)
    }

    /// Whether the allow rules allow every use of `tool`: the list is empty or a
    /// whole-tool rule covers it (deny rules are not consulted).
    pub fn allows_whole(&self, tool: &str) -> bool {
        self.allow.is_empty()
            || self
                .allow
                .iter()
                .any(|r| covers(&r.tool, tool) && matches!(r.content, Content::Whole))
    }

    /// Whether a tool is offered to the model at all: when the allow list is empty or
    /// some allow rule names it, and no whole-tool deny rule names it.
    pub fn offers(&self, tool: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|r| covers(&r.tool, tool)))
            && !self
                .deny
                .iter()
                .any(|r| covers(&r.tool, tool) && matches!(r.content, Content::Whole))
    }

    /// Whether a whole-tool deny rule names this tool: no call of it can ever run.
    pub fn withholds(&self, tool: &str) -> bool {
        self.deny
            .iter()
            .any(|r| covers(&r.tool, tool) && matches!(r.content, Content::Whole))
    }

    /// Whether some tool of the MCP server whose rule is `server_rule` (`mcp__name`)
    /// may be offered: the allow list is empty or names the server or one of its
    /// tools, and no deny rule forbids the whole server.
    pub fn offers_server(&self, server_rule: &str) -> bool {
        let named = |r: &Rule| {
            r.tool == server_rule
                || r.tool
                    .strip_prefix(server_rule)
                    .is_some_and(|rest| rest.starts_with("__"))
        };
        (self.allow.is_empty() || self.allow.iter().any(named))
            && !self
                .deny
                .iter()
                .any(|r| r.tool == server_rule && matches!(r.content, Content::Whole))
    }

    /// What a server tool (`WebSearch`, `WebFetch`) may do, or `None` when it is not
    /// offered. It runs at the API, so nobody can be asked about a call midway and no
    /// single call is checked here: an allow rule must name it (`WebFetch`, or
    /// `WebFetch(domain:example.com)` for those domains only); a whole-tool deny or
    /// ask rule keeps it away; deny and ask rules with a domain block that domain.
    pub fn web_access(&self, tool: &str) -> Option<WebAccess> {
        fn named<'r>(rules: &'r [Rule], tool: &str) -> impl Iterator<Item = &'r Content> {
            rules
                .iter()
                .filter(move |r| r.tool == tool)
                .map(|r| &r.content)
        }
        let allow: Vec<&Content> = named(&self.allow, tool).collect();
        let against: Vec<&Content> = named(&self.deny, tool)
            .chain(named(&self.ask, tool))
            .collect();
        if allow.is_empty() || against.iter().any(|c| matches!(c, Content::Whole)) {
            return None;
        }
        let domains = |contents: &[&Content]| -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            for c in contents {
                if let Content::Domain(d) = c
                    && !out.contains(d)
                {
                    out.push(d.clone());
                }
            }
            out
        };
        let blocked = domains(&against);
        if allow.iter().any(|c| matches!(c, Content::Whole)) {
            return Some(WebAccess {
                allowed_domains: Vec::new(),
                blocked_domains: blocked,
            });
        }
        let allowed: Vec<String> = domains(&allow)
            .into_iter()
            .filter(|d| !blocked.contains(d))
            .collect();
        (!allowed.is_empty()).then_some(WebAccess {
            allowed_domains: allowed,
            blocked_domains: Vec::new(),
        })
    }

    /// Whether a path rule of an allow rule for `tool` (not a whole-tool rule) names
    /// `path`: such a rule grants what the sandbox otherwise keeps read-only
    /// (`Edit(.git/hooks/**)`).
    pub fn names_path(&self, tool: &str, path: &Path, workspace: &Path) -> bool {
        self.allow.iter().any(|r| {
            covers(&r.tool, tool)
                && matches!(&r.content, Content::Path(p) if p.matches(path, workspace))
        })
    }

    /// The sandbox for this agent's Bash commands (and the write policy of its file
    /// tools): the workspace is writable only for an agent offered Write or Edit, and a
    /// protected path stays protected unless a Write or Edit rule names it
    /// ([`crate::tools::protected`]); a rule naming `.git/hooks` or `.git/config` turns
    /// the whole git protection off.
    pub fn sandbox(&self, base: &SandboxPolicy, workspace: &Path) -> SandboxPolicy {
        let writers = || names::ALL.iter().filter(|t| t.writes_files);
        let writes = writers().any(|t| self.offers(t.name));
        let named = |p: &Path| writers().any(|t| self.names_path(t.name, p, workspace));
        let mut protect = base.protect.clone();
        let mut git_granted = false;
        // Only a writer's path rule can name a protected path: without one, the probing
        // (a few dozen paths built for every call, #46) cannot change anything.
        let may_name = self.allow.iter().any(|r| {
            matches!(r.content, Content::Path(_)) && writers().any(|t| covers(&r.tool, t.name))
        });
        let candidates = match may_name {
            true => protected::candidates(base, workspace, base.protect.record.as_deref()),
            false => Vec::new(),
        };
        for target in candidates {
            if target.probes().iter().any(|p| named(p)) {
                git_granted |= matches!(target.kind, protected::Kind::Listed(e) if e.git);
                if !protect.allowed.contains(&target.path) {
                    protect.allowed.push(target.path);
                }
            }
        }
        SandboxPolicy {
            workspace_writable: base.workspace_writable && writes,
            protect_git: base.protect_git && !git_granted,
            protect,
            ..base.clone()
        }
    }

    /// Checks one call. `workspace` resolves relative paths for path rules.
    pub fn check(&self, tool: &str, input: &ToolInput, workspace: &Path) -> Decision {
        let subject = Subject::of(tool, input, workspace);
        if let Some(rule) = self
            .deny
            .iter()
            .find(|r| covers(&r.tool, tool) && matches!(r.content, Content::Whole))
        {
            return subject.deny(Why::rule(
                format!("the deny rule {} forbids {tool}", rule.text),
                rule,
            ));
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|r| covers(&r.tool, tool)) {
            return subject.deny(Why::text(format!(
                "no allow rule names {tool} (allowed: {})",
                list(self.allow.iter())
            )));
        }
        let rules = Applicable {
            deny: self
                .deny
                .iter()
                .filter(|r| deny_applies(&r.tool, tool))
                .collect(),
            allow: self
                .allow
                .iter()
                .filter(|r| covers(&r.tool, tool))
                .collect(),
            allow_whole: self.allow.is_empty()
                || self
                    .allow
                    .iter()
                    .any(|r| covers(&r.tool, tool) && matches!(r.content, Content::Whole)),
        };
        let why = match &subject.target {
            Target::Missing => None,
            Target::Command(cmd) => rules.check_bash(cmd),
            Target::Path { resolved, lexical } => {
                rules.check_path(tool, resolved.as_deref(), lexical, &subject.workspace)
            }
            Target::Other { field } => rules.check_other(field.as_deref(), input),
        };
        match why {
            None => self.ask_about(tool, input, workspace),
            Some(why) => subject.deny(why),
        }
    }

    /// [`Decision::Ask`] when an ask rule matches the call, else [`Decision::Allow`].
    fn ask_about(&self, tool: &str, input: &ToolInput, workspace: &Path) -> Decision {
        if self.ask.is_empty() {
            return Decision::Allow;
        }
        let as_deny = Permissions {
            allow: Vec::new(),
            deny: self.ask.clone(),
            ask: Vec::new(),
        };
        match as_deny.check(tool, input, workspace) {
            Decision::Deny { message, .. } => {
                // The deny check's reason, worded for an ask rule.
                let why = message
                    .split_once(" has been denied: ")
                    .map_or(message.as_str(), |(_, why)| why)
                    .trim_end_matches(" The call was not run.")
                    .replace("deny rule", "ask rule");
                Decision::Ask { why }
            }
            _ => Decision::Allow,
        }
    }
}

/// The rules that apply to one call; each check returns why the call is denied.
struct Applicable<'a> {
    deny: Vec<&'a Rule>,
    allow: Vec<&'a Rule>,
    /// A whole-tool allow rule (or an empty allow list).
    allow_whole: bool,
}

impl Applicable<'_> {
    fn no_allow_rule(&self) -> Why {
        Why::text(format!(
            "no allow rule matches (allowed: {})",
            list(self.allow.iter().copied())
        ))
    }

    fn check_path(
        &self,
        tool: &str,
        resolved: Option<&Path>,
        lexical: &Path,
        workspace: &Path,
    ) -> Option<Why> {
        for d in &self.deny {
            let Content::Path(p) = &d.content else {
                continue;
            };
            if resolved.is_some_and(|r| p.matches(r, workspace)) || p.matches(lexical, workspace) {
                return Some(Why::rule(format!("it matches the deny rule {}", d.text), d));
            }
            // Grep reads contents, so a deny rule reaching inside its search denies
            // it; Glob only lists names, so only its own rules do.
            let searches = tool == names::GREP || (tool == names::GLOB && d.tool == names::GLOB);
            let root = resolved.unwrap_or(lexical);
            if let Some(inside) = searches.then(|| p.inside_search(root, workspace)).flatten() {
                return Some(Why::rule(
                    format!(
                        "the search would reach {}, which the deny rule {} covers; \
                         search a narrower path",
                        inside.display(),
                        d.text
                    ),
                    d,
                ));
            }
        }
        if self.allow_whole {
            return None;
        }
        let Some(resolved) = resolved else {
            return Some(Why::text(format!(
                "the path cannot be resolved, so no allow rule can match (allowed: {})",
                list(self.allow.iter().copied())
            )));
        };
        let allowed = self.allow.iter().any(|r| match &r.content {
            Content::Path(p) => p.matches(resolved, workspace),
            _ => false,
        });
        (!allowed).then(|| self.no_allow_rule())
    }

    fn check_other(&self, field: Option<&str>, input: &ToolInput) -> Option<Why> {
        // A client WebFetch's URL against domain rules (a WebSearch has none: its
        // domains go to the search itself, `tools::web`).
        let host = input
            .str_field("url")
            .and_then(|url| reqwest::Url::parse(&url).ok())
            .and_then(|u| u.host_str().map(str::to_string));
        for d in &self.deny {
            if let (Content::Domain(domain), Some(host)) = (&d.content, &host)
                && crate::tools::web::within(host, domain)
            {
                return Some(Why::rule(format!("it matches the deny rule {}", d.text), d));
            }
            if let Content::Other(pat) = &d.content {
                let hit = match field {
                    Some(v) => wildcard(pat, v),
                    // Every string of the call, a repeated key's earlier values too.
                    None => input.string_values().iter().any(|v| wildcard(pat, v)),
                };
                if hit {
                    return Some(Why::rule(format!("it matches the deny rule {}", d.text), d));
                }
            }
        }
        let allowed = self.allow_whole
            || self.allow.iter().any(|r| match (&r.content, field) {
                (Content::Other(pat), Some(v)) => wildcard(pat, v),
                (Content::Domain(domain), _) => host
                    .as_deref()
                    .is_none_or(|h| crate::tools::web::within(h, domain)),
                _ => false,
            });
        (!allowed).then(|| self.no_allow_rule())
    }

    fn check_bash(&self, cmd: &str) -> Option<Why> {
        let deny: Vec<(&Rule, &BashPattern)> = self
            .deny
            .iter()
            .filter_map(|r| match &r.content {
                Content::Bash(p) => Some((*r, p)),
                _ => None,
            })
            .collect();
        if !deny.is_empty() {
            let view = match bash_rules::deny_view(cmd) {
                Ok(v) => v,
                Err(why) => {
                    return Some(Why::text(format!(
                        "it cannot be checked against the deny rules ({}): {why}",
                        list(deny.iter().map(|(r, _)| *r))
                    )));
                }
            };
            if let Some(why) = deny_hit(&view, &deny) {
                return Some(why);
            }
        }
        if self.allow_whole {
            return None;
        }
        let parts = match bash_rules::plain_parts(cmd) {
            Ok(parts) => parts,
            Err(NotPlain::Parse(e)) => {
                return Some(Why::text(format!(
                    "the command could not be analysed safely ({e}), so it cannot be \
                     checked against the permission rules"
                )));
            }
            Err(e) => {
                return Some(Why::text(format!(
                    "{} (allowed: {}); it uses {e}, which only a bare `Bash` rule allows",
                    "no allow rule matches",
                    list(self.allow.iter().copied())
                )));
            }
        };
        let compound = parts.len() > 1;
        let unmatched = parts.iter().find(|part| {
            !self.allow.iter().any(|r| match &r.content {
                Content::Bash(p) => p.matches_for_allow(part),
                _ => false,
            })
        })?;
        let mut why = String::from("no allow rule matches");
        if compound {
            let _ = write!(why, " its part {}", quote(&unmatched.source));
        }
        let _ = write!(why, " (allowed: {})", list(self.allow.iter().copied()));
        Some(Why::text(why))
    }
}

/// Why a call is denied: the model's words, and the rule that did it (for the person).
struct Why {
    text: String,
    rule: Option<String>,
}

impl Why {
    fn text(text: String) -> Why {
        Why { text, rule: None }
    }

    fn rule(text: String, rule: &Rule) -> Why {
        Why {
            text,
            rule: Some(rule.text.clone()),
        }
    }
}

/// The first deny rule some command of the view matches, as a reason.
fn deny_hit(view: &DenyView, deny: &[(&Rule, &BashPattern)]) -> Option<Why> {
    let compound = view.commands.len() > 1;
    for &(index, start) in &view.starts {
        let words = &view.commands[index][start..];
        if let Some((rule, _)) = deny.iter().find(|(_, p)| p.matches_for_deny(words)) {
            let who = if compound {
                format!("its part {} ", quote(&view.sources[index]))
            } else {
                "it ".into()
            };
            return Some(Why::rule(
                format!("{who}matches the deny rule {}", rule.text),
                rule,
            ));
        }
    }
    None
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
    fn of(tool: &str, input: &ToolInput, workspace: &Path) -> Self {
        let ws = paths::root(workspace);
        let (described, target) = if tool == names::BASH {
            match input.str_field("command") {
                Some(c) => (format!(" with command {}", quote(&c)), Target::Command(c)),
                None => (String::new(), Target::Missing),
            }
        } else if let Some(field) = path_field(tool) {
            let given = input.str_field(field);
            let raw = match given.as_deref() {
                // Glob and Grep search the workspace when `path` is absent (or one of
                // the placeholders the model sometimes sends instead of omitting it).
                Some("" | "undefined" | "null") if field == "path" => Some("."),
                None if field == "path" && input.lacks(field) => Some("."),
                Some(s) if !s.is_empty() => Some(s),
                _ => None,
            };
            match raw {
                None => (String::new(), Target::Missing),
                Some(raw) => {
                    let mut p = PathBuf::from(raw);
                    if tool == names::GLOB
                        && let Some(pat) = input.str_field("pattern")
                    {
                        p = glob_base(&p, &pat);
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
            let field = names::info_of(tool)
                .and_then(|t| t.rule_field)
                .and_then(|f| input.str_field(f));
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

    fn deny(&self, why: Why) -> Decision {
        Decision::Deny {
            message: format!(
                "{DENIAL_PREFIX}{}{} has been denied: {}. The call was not run.",
                self.tool, self.described, why.text
            ),
            rule: why.rule,
        }
    }
}

/// Whether a rule's tool names `tool`: the same name, or `mcp__<server>` (all of a
/// server's tools) for `mcp__<server>__<tool>`.
fn covers(rule_tool: &str, tool: &str) -> bool {
    rule_tool == tool || server_rule_covers(rule_tool, tool)
}

fn server_rule_covers(rule_tool: &str, tool: &str) -> bool {
    rule_tool
        .strip_prefix(MCP_PREFIX)
        .is_some_and(|server| !server.is_empty() && !server.contains("__"))
        && tool
            .strip_prefix(rule_tool)
            .is_some_and(|rest| rest.len() > 2 && rest.starts_with("__"))
}

/// Whether a deny rule written for `rule_tool` applies to a call of `tool`. Rules on
/// reading also cover the tools that search file contents and names (Read → Glob,
/// Grep), and rules on changing files cover both tools that change them (Edit ↔ Write):
/// a deny rule should not be sidestepped by picking the sibling tool.
fn deny_applies(rule_tool: &str, tool: &str) -> bool {
    covers(rule_tool, tool)
        || (rule_tool == names::READ && matches!(tool, names::GLOB | names::GREP))
        || (rule_tool == names::EDIT && tool == names::WRITE)
        || (rule_tool == names::WRITE && tool == names::EDIT)
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
    fn matches_for_allow(&self, part: &Part) -> bool {
        // From `part.open` on, bash replaces words by file names: only a prefix rule
        // that ends before them says nothing about them.
        match self {
            BashPattern::Exact(c) => part.open.is_none() && &part.words == c,
            BashPattern::Prefix(c) => {
                part.open.is_none_or(|i| i >= c.len()) && part.words.starts_with(c)
            }
            BashPattern::Wildcard { .. } if part.open.is_some() => false,
            BashPattern::Wildcard { .. } => {
                let words: Vec<&str> = part.words.iter().map(String::as_str).collect();
                self.wildcard_matches(&bash_rules::normalize(&words))
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

    /// Deny matching of the words from one start: a word only known at run time
    /// (`None`) may be anything, so it matches any word of the rule, and a wildcard
    /// rule matches any command holding one. The first word also counts with its
    /// directory stripped.
    fn matches_for_deny(&self, words: &[Option<String>]) -> bool {
        let Some(Some(first)) = words.first() else {
            return false;
        };
        let base = first.rsplit('/').next().unwrap_or(first);
        let word_eq = |i: usize, w: &Option<String>, r: &String| match w {
            None => true,
            Some(w) => w == r || (i == 0 && base == r),
        };
        match self {
            BashPattern::Exact(c) => {
                words.len() == c.len()
                    && words
                        .iter()
                        .zip(c)
                        .enumerate()
                        .all(|(i, (w, r))| word_eq(i, w, r))
            }
            BashPattern::Prefix(c) => {
                words.len() >= c.len()
                    && words
                        .iter()
                        .zip(c)
                        .enumerate()
                        .all(|(i, (w, r))| word_eq(i, w, r))
            }
            BashPattern::Wildcard { .. } => {
                if words.iter().any(Option::is_none) {
                    return true;
                }
                let mut texts: Vec<&str> = words.iter().flatten().map(String::as_str).collect();
                if self.wildcard_matches(&bash_rules::normalize(&texts)) {
                    return true;
                }
                texts[0] = base;
                self.wildcard_matches(&bash_rules::normalize(&texts))
            }
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
