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
    if let Some((what, at)) = misread_redirect(root, cmd) {
        return Err(NotPlain::Construct {
            what: what.into(),
            at: text(at, cmd).into(),
        });
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

