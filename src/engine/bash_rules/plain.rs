//! The plain subset, for allow rules (see the parent module's documentation).

use super::*;

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
    if let Some(at) = skipped_text(cmd, root) {
        return Err(NotPlain::Construct {
            what: "text the parser skipped (an escaped blank)".into(),
            at: cmd.get(at).unwrap_or(cmd).into(),
        });
    }
    if let Some((what, at)) = misread_redirect(root, cmd) {
        return Err(NotPlain::Construct {
            what: what.into(),
            at: text(at, cmd).into(),
        });
    }
    if has_heredoc(root) {
        super::heredoc::heredoc_lines(root, cmd).map_err(|what| NotPlain::Construct {
            what: what.to_string(),
            at: cmd.into(),
        })?;
    }
    if let Some((at, _)) = named_descriptors(root, cmd).first() {
        return Err(NotPlain::Construct {
            what: "a named descriptor, which assigns a variable".into(),
            at: text(*at, cmd).into(),
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
                } else if !matches!(ch.kind(), ";" | "&" | "&&" | "||" | "|" | "\n") {
                    // `&` only runs the command before it without waiting: each command
                    // is still matched on its own.
                    return Err(not_plain(ch, src));
                }
            }
            Ok(())
        }
        "comment" => Ok(()),
        "redirected_statement" => {
            let mut c = node.walk();
            for ch in node.named_children(&mut c) {
                match ch.kind() {
                    "file_redirect" if harmless_redirect(ch, src) => {}
                    "heredoc_redirect" if literal_heredoc(ch, src) => {}
                    "herestring_redirect" if literal_herestring(ch, src) => {}
                    "command" | "pipeline" | "list" => plain_statement(ch, src, out)?,
                    _ => return Err(not_plain(ch, src)),
                }
            }
            Ok(())
        }
        "command" => plain_command(node, src, out),
        // `( … )` and `{ …; }` run their commands as they are; `(( … ))` evaluates.
        "subshell" | "compound_statement"
            if node.child(0).is_some_and(|c| matches!(c.kind(), "(" | "{")) =>
        {
            let mut c = node.walk();
            for ch in node.children(&mut c) {
                if ch.is_named() {
                    plain_statement(ch, src, out)?;
                } else if !matches!(ch.kind(), "(" | ")" | "{" | "}" | ";" | "&" | "\n") {
                    return Err(not_plain(ch, src));
                }
            }
            Ok(())
        }
        _ => Err(not_plain(node, src)),
    }
}

/// An argument whose value is only known when it runs but whose making runs nothing
/// outside the plain subset: `"$(plain command)"` (its commands join the parts, each
/// to be allowed on its own; the quotes keep the output one word of data) and
/// `$((…))` of numbers only.
fn computed_word(node: Node, src: &str, out: &mut Vec<Part>) -> Result<bool, NotPlain> {
    match node.kind() {
        "arithmetic_expansion" => Ok(numbers_only(node, src)),
        "string" => {
            let mut c = node.walk();
            let children: Vec<Node> = node.named_children(&mut c).collect();
            if !children
                .iter()
                .all(|n| matches!(n.kind(), "string_content" | "command_substitution"))
                || !children.iter().any(|n| n.kind() == "command_substitution")
            {
                return Ok(false);
            }
            // The text outside the substitutions must be plain inside double quotes.
            let mut rest = text(node, src).to_string();
            for n in children.iter().rev() {
                if n.kind() == "command_substitution" {
                    let r = n.start_byte() - node.start_byte()..n.end_byte() - node.start_byte();
                    rest.replace_range(r, "x");
                }
            }
            if double_quoted(&rest).is_none() {
                return Ok(false);
            }
            for n in children
                .iter()
                .filter(|n| n.kind() == "command_substitution")
            {
                let mut c = n.walk();
                let inner: Vec<Node> = n.children(&mut c).collect();
                // `$(` … `)` only: a backquoted one reads backslashes differently.
                if inner.first().map(|f| f.kind()) != Some("$(") {
                    return Ok(false);
                }
                for ch in inner.iter().filter(|ch| ch.is_named()) {
                    plain_statement(*ch, src, out)?;
                }
            }
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// An arithmetic expression of decimal literals and operators only: nothing in it
/// names a variable (`base#digits` and `0x…` are left out), so nothing is evaluated as
/// code.
fn numbers_only(node: Node, src: &str) -> bool {
    let mut c = node.walk();
    node.named_children(&mut c).all(|ch| match ch.kind() {
        "number" => {
            let t = text(ch, src);
            !t.is_empty() && t.len() <= 18 && t.bytes().all(|b| b.is_ascii_digit())
        }
        "binary_expression" | "unary_expression" | "parenthesized_expression" => {
            numbers_only(ch, src)
        }
        _ => false,
    })
}

/// One simple command of plain words. A leading `time` (and its `-p`) is dropped: it
/// only measures. A glob, a plain variable or `~` is allowed as an argument (see
/// [`Part::open`]).
fn plain_command(node: Node, src: &str, out: &mut Vec<Part>) -> Result<(), NotPlain> {
    if let Some(t) = stray_token(node) {
        return Err(not_plain(t, src));
    }
    let mut words = Vec::new();
    let mut open = None;
    let mut timed = false;
    let mut c = node.walk();
    for ch in node.named_children(&mut c) {
        match ch.kind() {
            "command_name" => {
                let Some(w) = ch.named_child(0) else {
                    return Err(not_plain(ch, src));
                };
                let name = text(w, src);
                let is_reserved = w.kind() == "word" && RESERVED.contains(&name);
                match literal(w, src) {
                    _ if w.kind() == "word" && name == "time" => timed = true,
                    Some(v) if !is_reserved => words.push(v),
                    _ => return Err(not_plain(w, src)),
                }
            }
            "file_redirect" if harmless_redirect(ch, src) => {}
            "herestring_redirect" if literal_herestring(ch, src) => {}
            "comment" => {}
            _ => match literal(ch, src) {
                // `time -p cmd`: the option belongs to `time`.
                Some(v) if timed && words.is_empty() && (v == "-p" || v == "--") => {}
                Some(v) => words.push(v),
                None if !words.is_empty()
                    && (glob_word(ch, src) || brace_word(ch, src) || variable_word(ch, src)) =>
                {
                    open.get_or_insert(words.len());
                    words.push(text(ch, src).to_string());
                }
                None if !words.is_empty() && computed_word(ch, src, out)? => {
                    open.get_or_insert(words.len());
                    words.push(text(ch, src).to_string());
                }
                None => return Err(not_plain(ch, src)),
            },
        }
    }
    if words.is_empty() {
        return Err(not_plain(node, src));
    }
    let args: Vec<DenyWord> = words[1..].iter().cloned().map(Some).collect();
    if let Err(why) = super::deny::assigned_names(&words[0], &args, text(node, src)) {
        return Err(NotPlain::Construct {
            what: format!("a builtin that assigns a variable bash treats as code: {why}"),
            at: text(node, src).into(),
        });
    }
    out.push(Part {
        words,
        source: text(node, src).to_string(),
        open,
    });
    Ok(())
}

/// An unquoted word that is a plain word but for glob characters (`*.rs`, `./*`,
/// `file?.txt`, `[ab].c`): bash replaces it with file names, which are only data (no
/// expansion of any kind happens in them).
fn glob_word(node: Node, src: &str) -> bool {
    let t = text(node, src);
    node.kind() == "word"
        && t.contains(['*', '?', '['])
        && unquoted(&t.replace(['*', '?', '[', ']'], "x")).is_some()
}

/// An unquoted word with brace expansion of plain parts (`{a,b}`, `src/{x,y}.rs`,
/// `{1..3}`), globs allowed too: bash makes words of data from it, runs nothing.
fn brace_word(node: Node, src: &str) -> bool {
    let t = text(node, src);
    matches!(node.kind(), "word" | "concatenation" | "brace_expression")
        && t.contains('{')
        && unquoted(&t.replace(['{', '}', ',', '*', '?', '[', ']'], "x")).is_some()
}

/// An argument that only reads a variable or the home directory: `$NAME`, `"$NAME"`,
/// `${NAME}`, `"${NAME}"`, `~`, `~/path`. Bash replaces it by words it does not run;
/// nothing in it is evaluated.
fn variable_word(node: Node, src: &str) -> bool {
    let t = text(node, src);
    let plain_expansion = |n: Node| match n.kind() {
        "simple_expansion" => {
            n.named_child(0)
                .is_some_and(|v| v.kind() == "variable_name")
                && n.named_child_count() == 1
        }
        "expansion" => {
            let mut c = n.walk();
            let kinds: Vec<&str> = n.children(&mut c).map(|k| k.kind()).collect();
            kinds == ["${", "variable_name", "}"]
        }
        _ => false,
    };
    match node.kind() {
        "simple_expansion" | "expansion" => plain_expansion(node),
        "string" => {
            let mut c = node.walk();
            node.named_children(&mut c)
                .all(|n| n.kind() == "string_content" || plain_expansion(n))
                && double_quoted(&t.replace('$', "")).is_some()
        }
        "word" => (t == "~" || t.starts_with("~/")) && unquoted(&t.replacen('~', "x", 1)).is_some(),
        _ => false,
    }
}

/// A here-document whose body bash passes as it is: a quoted delimiter, or a body
/// without `$`, backquote or backslash; read where bash reads it ([`check_heredoc`]),
/// with nothing else on its line.
fn literal_heredoc(node: Node, src: &str) -> bool {
    let mut c = node.walk();
    let only_parts = node
        .named_children(&mut c)
        .all(|ch| matches!(ch.kind(), "heredoc_start" | "heredoc_body" | "heredoc_end"));
    let mut c = node.walk();
    let quoted = node
        .named_children(&mut c)
        .find(|ch| ch.kind() == "heredoc_start")
        .is_some_and(|s| text(s, src).contains(['\'', '"', '\\']));
    let mut c = node.walk();
    let body_plain = node
        .named_children(&mut c)
        .filter(|ch| ch.kind() == "heredoc_body")
        .all(|b| !text(b, src).contains(['$', '`', '\\']));
    only_parts && (quoted || body_plain) && super::heredoc::check_heredoc(node, src).is_ok()
}

/// `<<< word` with a plain word: data on standard input.
fn literal_herestring(node: Node, src: &str) -> bool {
    let mut c = node.walk();
    let words: Vec<Node> = node.named_children(&mut c).collect();
    words.len() == 1 && literal(words[0], src).is_some()
}

fn has_heredoc(root: Node) -> bool {
    let mut cursor = root.walk();
    loop {
        if cursor.node().kind() == "heredoc_redirect" {
            return true;
        }
        if !next_node(&mut cursor, true) {
            return false;
        }
    }
}
