//! Here-documents, read by bash's rules rather than the grammar's.

use super::*;

/// A here-document's body starts on the line after its `<<`. When something that
/// starts on that line runs past its end (`<<EOF $(…⏎…)`, `<<EOF && (⏎…)`), bash and
/// the grammar disagree on which lines are the body.
pub(super) fn heredoc_lines(root: Node, src: &str) -> Result<(), Unchecked> {
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
            return Err(Unchecked::Construct(
                "a here-document starts on a line whose next part runs past the line end, \
                 so its body cannot be located"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// A here-document is checked against bash's own rules rather than the grammar's
/// reading of it (which misses backquotes in bodies, among others): the body ends at
/// the first line that is exactly the delimiter (leading tabs stripped for `<<-`),
/// that line must be where the grammar ends it, and an unquoted body may hold no
/// substitution.
pub(super) fn check_heredoc(node: Node, src: &str) -> Result<(), Unchecked> {
    let bad = |why: &str| {
        Err(Unchecked::Construct(format!(
            "a here-document {why}, so it cannot be checked"
        )))
    };
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
