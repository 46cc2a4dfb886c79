//! The deny view: every simple command anywhere in a command, for deny rules (see the
//! parent module's documentation).

use super::heredoc::{check_heredoc, heredoc_lines};
use super::*;

/// Programs that run their arguments as a command, for deny matching.
const WRAPPERS: [&str; 28] = [
    "command", "builtin", "exec", "nohup", "time", "env", "sudo", "doas", "nice", "ionice",
    "timeout", "stdbuf", "xargs", "setsid", "chrt", "taskset", "unbuffer", "chroot", "watch",
    "flock", "coproc", "busybox", "strace", "ltrace", "runuser", "unshare", "nsenter", "parallel",
];

/// Shells whose `-c` script runs as commands.
const SHELLS: [&str; 7] = ["bash", "sh", "zsh", "dash", "ksh", "fish", "busybox"];

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

