//! Reading permission rules: `Tool`, `Tool(content)`, the Bash patterns, the path
//! globs (with `~/` and symlinked prefixes resolved), the web tools' domains.

use super::{BashPattern, Content, MCP_PREFIX, PathPattern, Rule, RuleError, path_field};
use crate::engine::bash_rules;
use crate::tools::paths;
use crate::transcript::tools as names;
use globset::GlobBuilder;
use std::path::{Path, PathBuf};

fn rule_error(rule: &str, why: impl Into<String>) -> RuleError {
    RuleError {
        rule: rule.to_string(),
        why: why.into(),
        cause: None,
    }
}

/// A host name as the web tools' domain lists take it (`example.com`, `docs.rs`).
fn valid_domain(domain: &str) -> bool {
    !domain.is_empty()
        && domain.len() <= 253
        && domain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*'))
}

pub(super) fn parse_rule(text: &str, home: Option<&Path>) -> Result<Rule, RuleError> {
    let t = text.trim();
    let (tool, content) = match t.find('(') {
        None => {
            if t.contains(')') {
                return Err(rule_error(text, "有 `)` 没有 `(`"));
            }
            (t, None)
        }
        Some(open) => {
            if !t.ends_with(')') {
                return Err(rule_error(text, "规则要以 `)` 结尾"));
            }
            let inner = &t[open + 1..t.len() - 1];
            let mut depth = 0i32;
            for c in inner.chars() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth < 0 {
                            return Err(rule_error(text, "括号不配对"));
                        }
                    }
                    _ => {}
                }
            }
            if depth != 0 {
                return Err(rule_error(text, "括号不配对"));
            }
            (t[..open].trim_end(), Some(inner.trim()))
        }
    };
    // `mcp__server__*` is `mcp__server`: every tool of the server.
    let tool = match tool.strip_suffix("__*") {
        Some(server) if server.starts_with(MCP_PREFIX) => server,
        _ => tool,
    };
    if tool.is_empty() {
        return Err(rule_error(text, "工具名是空的"));
    }
    if !tool
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(rule_error(text, "工具名只能有字母、数字、`_`、`-` 和 `.`"));
    }
    let content = match content {
        None => Content::Whole,
        Some("") => return Err(rule_error(text, "`()` 里是空的")),
        Some("*") | Some(":*") => Content::Whole,
        Some(c) if tool == names::BASH => Content::Bash(parse_bash(text, c)?),
        Some(c) if path_field(tool).is_some() => Content::Path(parse_path(text, c, home)?),
        Some(c) if tool == names::WEB_FETCH || tool == names::WEB_SEARCH => {
            match c.strip_prefix("domain:") {
                Some(domain) if valid_domain(domain.trim()) => {
                    Content::Domain(domain.trim().to_ascii_lowercase())
                }
                _ => {
                    return Err(rule_error(
                        text,
                        "网络工具的规则只能是工具名本身或 `(domain:example.com)`",
                    ));
                }
            }
        }
        Some(c) => Content::Other(c.to_string()),
    };
    Ok(Rule {
        text: t.to_string(),
        tool: tool.to_string(),
        content,
    })
}

fn one_command(rule: &str, text: &str) -> Result<Vec<String>, RuleError> {
    let mut cmds = bash_rules::plain_parts(text)
        .map_err(|e| rule_error(rule, format!("不是一条普通的简单命令({e})")))?;
    match cmds.len() {
        1 => Ok(cmds.remove(0).words),
        0 => Err(rule_error(rule, "没有命令")),
        _ => Err(rule_error(rule, "一条规则只写一条简单命令;多条命令分开写")),
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

fn parse_path(rule: &str, content: &str, home: Option<&Path>) -> Result<PathPattern, RuleError> {
    let mut pat = content.to_string();
    let absolute;
    if let Some(rest) = pat.strip_prefix("~/") {
        let home = home.ok_or_else(|| rule_error(rule, "`~/` 要靠 $HOME,可 $HOME 没有设置"))?;
        pat = format!(
            "{}/{}",
            globset::escape(&paths::root(home).to_string_lossy()),
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
        return Err(rule_error(rule, "路径规则里不能有 `..`"));
    }
    let build = |p: &str| {
        GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map(|g| g.compile_matcher())
            .map_err(|e| {
                let why = format!("glob 写错了({e})");
                RuleError {
                    cause: Some(crate::error::Cause::new(e)),
                    ..rule_error(rule, why)
                }
            })
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
