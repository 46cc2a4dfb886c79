//! The deny view: every simple command anywhere in a command, for deny rules (see the
//! parent module's documentation).

use super::env_split;
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
pub fn deny_view(cmd: &str) -> Result<DenyView, Unchecked> {
    let mut view = DenyView::default();
    collect(cmd, 0, &mut view)?;
    bound_names(&mut view)?;
    Ok(view)
}

/// Every command whose program is a name bound to code (an alias, a `hash -p`) is
/// checked again as that code followed by its arguments, until nothing new appears.
fn bound_names(view: &mut DenyView) -> Result<(), Unchecked> {
    let mut done: Vec<(usize, usize, usize)> = Vec::new();
    for _ in 0..=MAX_SCRIPT_DEPTH {
        let mut todo = Vec::new();
        for &(index, start) in &view.starts {
            let words = &view.commands[index][start..];
            let Some(Some(program)) = words.first() else {
                continue;
            };
            for (b, (name, code)) in view.bindings.iter().enumerate() {
                if name == program && !done.contains(&(index, start, b)) {
                    done.push((index, start, b));
                    let mut script = code.clone();
                    for w in &words[1..] {
                        script.push(' ');
                        // A word only known at run time stays one.
                        script.push_str(&w.as_deref().map_or("\"$_\"".into(), |w| normalize(&[w])));
                    }
                    todo.push(script);
                }
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        for script in todo {
            collect(&script, 1, view).map_err(|e| Unchecked::Script {
                script: short(&script),
                source: Box::new(e),
            })?;
        }
    }
    Err(Unchecked::Construct(
        "names bound to code nest too deeply".into(),
    ))
}

fn collect(cmd: &str, depth: usize, view: &mut DenyView) -> Result<(), Unchecked> {
    if depth > MAX_SCRIPT_DEPTH {
        return Err(Unchecked::Construct("shell scripts nest too deeply".into()));
    }
    let tree = parse_clean(cmd, PARSE_BUDGET)?;
    let root = tree.root_node();
    if let Some(what) = risky_bytes(cmd, root) {
        return Err(Unchecked::Construct(format!(
            "it holds {what}, which bash may read differently"
        )));
    }
    if let Some(at) = skipped_text(cmd, root) {
        return Err(Unchecked::Construct(format!(
            "it holds text the parser skipped ({}), which bash runs",
            short(cmd.get(at).unwrap_or(cmd))
        )));
    }
    if let Some((what, at)) = misread_redirect(root, cmd) {
        return Err(Unchecked::Construct(format!(
            "it holds {what} ({})",
            short(text(at, cmd))
        )));
    }
    heredoc_lines(root, cmd)?;
    // `{name}>file` assigns the descriptor's number to `name`: a subscript in it is
    // evaluated, as in any assignment.
    for (_, name) in named_descriptors(root, cmd) {
        if let Some(why) = assignment_hazard(&name) {
            return Err(Unchecked::Construct(why));
        }
    }
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
    fn walk(&mut self, node: Node) -> Result<(), Unchecked> {
        if !node.is_named() {
            return Ok(());
        }
        match node.kind() {
            "command" => return self.command(node),
            "declaration_command" | "unset_command" => return self.declaration(node),
            "heredoc_redirect" => {
                check_heredoc(node, self.src)?;
                let mut c = node.walk();
                for ch in node.children(&mut c).collect::<Vec<_>>() {
                    if !matches!(ch.kind(), "heredoc_body" | "heredoc_start" | "heredoc_end") {
                        self.walk(ch)?;
                    }
                }
                return Ok(());
            }
            kind => check(node, kind, self.src)?,
        }
        let mut c = node.walk();
        for ch in node.children(&mut c).collect::<Vec<_>>() {
            self.walk(ch)?;
        }
        Ok(())
    }

    fn command(&mut self, node: Node) -> Result<(), Unchecked> {
        let src = self.src;
        if let Some(t) = stray_token(node) {
            return Err(Unchecked::Construct(format!(
                "it uses {} in a way that cannot be checked",
                short(text(t, src))
            )));
        }
        let mut words: Vec<DenyWord> = Vec::new();
        let mut c = node.walk();
        for ch in node.named_children(&mut c).collect::<Vec<_>>() {
            match ch.kind() {
                "command_name" => {
                    let w = ch.named_child(0);
                    let v = w.and_then(|w| static_value(w, src));
                    if v.is_none() {
                        return Err(Unchecked::Construct(format!(
                            "its program {} is only known when it runs",
                            short(text(ch, src))
                        )));
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

    /// `declare`, `export`, `local`, `readonly`, `typeset`, `unset`: a computed,
    /// subscripted or special name, or `-i`/`-n`, evaluates a value as code.
    fn declaration(&mut self, node: Node) -> Result<(), Unchecked> {
        let src = self.src;
        let mut c = node.walk();
        for ch in node.named_children(&mut c).collect::<Vec<_>>() {
            let t = text(ch, src);
            let flag_evaluates =
                ch.kind() == "word" && t.starts_with(['-', '+']) && t.contains(['i', 'n']);
            if flag_evaluates {
                return Err(evaluates(node, src));
            }
            match ch.kind() {
                "variable_assignment" => {}
                "variable_name" if special_variable(t) => {
                    return Err(Unchecked::Construct(format!(
                        "it sets bash's special variable {t}"
                    )));
                }
                "variable_name" => {}
                _ => match static_value(ch, src) {
                    Some(v) if !v.starts_with(['-', '+']) => {
                        let name = v.split_once('=').map_or(v.as_str(), |(n, _)| n);
                        if let Some(why) = assignment_hazard(name) {
                            return Err(Unchecked::Construct(why));
                        }
                    }
                    Some(_) => {}
                    None => return Err(evaluates(node, src)),
                },
            }
            self.walk(ch)?;
        }
        Ok(())
    }

    /// Records one simple command and where it may start; follows wrappers, `find
    /// -exec`, the names builtins assign, and the code programs run (see [`scripts_of`]).
    fn add(&mut self, words: Vec<DenyWord>, source: &str) -> Result<(), Unchecked> {
        let index = self.view.commands.len();
        // Starts still to look at; each position is looked at once.
        let mut seen = vec![false; words.len()];
        let mut queue = vec![0usize];
        let mut scripts: Vec<String> = Vec::new();
        let mut respelled: Vec<Vec<DenyWord>> = Vec::new();
        while let Some(start) = queue.pop() {
            if start >= words.len() || seen[start] {
                continue;
            }
            seen[start] = true;
            let Some(program) = &words[start] else {
                return Err(Unchecked::Construct(format!(
                    "a program it runs ({}) is only known when it runs",
                    short(source)
                )));
            };
            self.view.starts.push((index, start));
            let base = program.rsplit('/').next().unwrap_or(program);
            let args = &words[start + 1..];
            if WRAPPERS.contains(&base) {
                // Options and their values are skipped generously: any later word
                // may be the program, and any `NAME=value` an assignment (`env`,
                // `sudo`), checked like one.
                queue.extend(start + 1..words.len());
                wrapper_assignments(args)?;
            }
            if base == "find" {
                for (k, a) in args.iter().enumerate() {
                    if matches!(a.as_deref(), Some("-exec" | "-execdir" | "-ok" | "-okdir")) {
                        queue.push(start + 2 + k);
                    }
                }
            }
            assigned_names(base, args, source)?;
            self.bind(base, args);
            scripts.extend(scripts_of(base, args, source)?);
            if base == "env" {
                respelled.extend(env_command_line(args, source)?);
            }
        }
        self.view.commands.push(words);
        self.view.sources.push(source.to_string());
        // `env -S…` reads its split string as its own command line again.
        for line in respelled {
            if self.depth > MAX_SCRIPT_DEPTH {
                return Err(Unchecked::Construct("env -S nests too deeply".into()));
            }
            self.depth += 1;
            let added = self.add(line, source);
            self.depth -= 1;
            added?;
        }
        for s in scripts {
            collect(&s, self.depth + 1, self.view).map_err(|e| Unchecked::Script {
                script: format!("its script {}", short(&s)),
                source: Box::new(e),
            })?;
        }
        Ok(())
    }
}

impl DenyWalk<'_, '_> {
    /// Records the names `alias` and `hash -p` bind to code (see [`bound_names`]).
    fn bind(&mut self, base: &str, args: &[DenyWord]) {
        match base {
            "alias" => {
                for a in args.iter().flatten() {
                    if let Some((name, value)) = a.split_once('=') {
                        self.view
                            .bindings
                            .push((name.to_string(), value.to_string()));
                    }
                }
            }
            "hash" => {
                let paths = option_values(args, 'p', "p");
                for (path, name) in paths.iter().zip(operands(args, "p")) {
                    if let (Some(path), Some(name)) = (path, name) {
                        self.view.bindings.push((name, normalize(&[path.as_str()])));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Node kinds walked into without a check of their own.
const WALKED: [&str; 37] = [
    "program",
    "list",
    "pipeline",
    "subshell",
    "if_statement",
    "elif_clause",
    "else_clause",
    "while_statement",
    "do_group",
    "case_statement",
    "case_item",
    "redirected_statement",
    "herestring_redirect",
    "negated_command",
    "comment",
    "command_name",
    "word",
    "string",
    "string_content",
    "raw_string",
    "concatenation",
    "number",
    "variable_name",
    "special_variable_name",
    "simple_expansion",
    "command_substitution",
    "process_substitution",
    "file_descriptor",
    "function_definition",
    "brace_expression",
    "array",
    "translated_string",
    "variable_assignments",
    "binary_expression",
    "unary_expression",
    "parenthesized_expression",
    "test_operator",
];

/// The check of one node that is not a command: `Err` where bash evaluates a value as
/// code, or where the grammar says less than bash does.
fn check(node: Node, kind: &str, src: &str) -> Result<(), Unchecked> {
    match kind {
        "arithmetic_expansion" | "c_style_for_statement" | "subscript" => Err(evaluates(node, src)),
        "compound_statement" if node.child(0).is_some_and(|c| c.kind() == "((") => {
            Err(evaluates(node, src))
        }
        "expansion" => {
            let mut c = node.walk();
            let names: Vec<Node> = node.children(&mut c).collect();
            let plain = names.len() == 3
                && names[0].kind() == "${"
                && matches!(names[1].kind(), "variable_name" | "special_variable_name")
                && names[2].kind() == "}";
            if plain {
                Ok(())
            } else {
                Err(Unchecked::Construct(format!(
                    "the expansion {} may evaluate a value as code",
                    short(text(node, src))
                )))
            }
        }
        "for_statement" => {
            let mut c = node.walk();
            if !node.children(&mut c).any(|n| n.kind() == "in") {
                return Err(Unchecked::Construct("a `for` loop without `in`".into()));
            }
            match node.child_by_field_name("variable") {
                Some(v) => assignment_hazard(text(v, src))
                    .map_or(Ok(()), |why| Err(Unchecked::Construct(why))),
                None => Ok(()),
            }
        }
        "variable_assignment" => match node.named_child(0) {
            Some(name) if name.kind() != "variable_name" => Err(evaluates(name, src)),
            Some(name) => assignment_hazard(text(name, src))
                .map_or(Ok(()), |why| Err(Unchecked::Construct(why))),
            None => Ok(()),
        },
        "test_command" => {
            let t = text(node, src);
            let arithmetic = ["-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"]
                .iter()
                .any(|op| t.split_whitespace().any(|w| w == *op));
            if arithmetic && has_kind_other_than_numbers(node) {
                Err(evaluates(node, src))
            } else {
                Ok(())
            }
        }
        "file_redirect" => {
            // Bash expands the target of `>&word` twice when it is not a number.
            let mut c = node.walk();
            let dup = node
                .children(&mut c)
                .any(|n| matches!(n.kind(), ">&" | "<&"));
            if dup && !harmless_redirect(node, src) {
                Err(Unchecked::Construct(format!(
                    "bash expands the target of {} twice",
                    short(text(node, src))
                )))
            } else {
                Ok(())
            }
        }
        "ansi_c_string" if ansi_c(text(node, src)).is_none() => Err(Unchecked::Construct(format!(
            "the $'…' string {} has escapes bash may read differently",
            short(text(node, src))
        ))),
        "ansi_c_string" | "compound_statement" | "regex" | "extglob_pattern" => Ok(()),
        k if WALKED.contains(&k) => Ok(()),
        _ => Err(Unchecked::Construct(format!(
            "it uses {} ({}), which cannot be checked",
            kind,
            short(text(node, src))
        ))),
    }
}

fn evaluates(node: Node, src: &str) -> Unchecked {
    Unchecked::Construct(format!(
        "{} evaluates a value as code, which cannot be checked",
        short(text(node, src))
    ))
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

/// The command line env reads after splitting its first `-S` string (see
/// [`env_split`]): `env`, the split words, the arguments after the option.
fn env_command_line(args: &[DenyWord], source: &str) -> Result<Option<Vec<DenyWord>>, Unchecked> {
    let unreadable = |why: String| {
        Unchecked::Construct(format!("{why}, in {}: it cannot be checked", short(source)))
    };
    let Some((value, rest)) = env_split::first_split(args).map_err(unreadable)? else {
        return Ok(None);
    };
    let Some(value) = value else {
        return Err(Unchecked::Construct(format!(
            "the -S string of {} is only known when it runs",
            short(source)
        )));
    };
    let mut line = vec![Some("env".to_string())];
    line.extend(env_split::split(&value).map_err(unreadable)?);
    line.extend(args.get(rest..).unwrap_or_default().iter().cloned());
    Ok(Some(line))
}

/// `NAME=value` arguments of a wrapper (`env BASH_ENV=x bash`, `sudo PS4=… cmd`) are
/// assignments in the program's environment: checked like any assignment, so that
/// `BASH_FUNC_…`, `BASH_ENV`, `ENV`, `PS4` … are refused. A word only known at run time
/// is a program position, which `add` refuses anyway.
fn wrapper_assignments(args: &[DenyWord]) -> Result<(), Unchecked> {
    for a in args.iter().flatten() {
        if let Some((name, _)) = a.split_once('=')
            && !name.is_empty()
            && !name.starts_with('-')
            && !name.contains('/')
            && let Some(why) = assignment_hazard(name)
        {
            return Err(Unchecked::Construct(format!(
                "{why} (in the environment of {})",
                short(a)
            )));
        }
    }
    Ok(())
}

/// Builtins that assign the variables they are given the names of (`read NAME`,
/// `printf -v NAME`, `mapfile NAME`, `getopts OPTS NAME`, `wait -p NAME`): each name is
/// checked like an assignment, so that a subscript (evaluated as arithmetic) or a
/// special variable (`OPTIND`, `PS4` …) is refused; `let` evaluates its arguments.
pub(super) fn assigned_names(base: &str, args: &[DenyWord], source: &str) -> Result<(), Unchecked> {
    let evaluates = || {
        Unchecked::Construct(format!(
            "{} evaluates a value as code, which cannot be checked",
            short(source)
        ))
    };
    let names: Vec<DenyWord> = match base {
        "let" => return Err(evaluates()),
        "read" => {
            let mut n = operands(args, "adinNptu");
            n.extend(option_values(args, 'a', "adinNptu"));
            n
        }
        "mapfile" | "readarray" => operands(args, "dnOsuCc"),
        "getopts" => operands(args, "").into_iter().skip(1).take(1).collect(),
        "printf" => option_values(args, 'v', "v"),
        "wait" => option_values(args, 'p', "p"),
        // `test -v 'a[$(cmd)]'` evaluates the subscript.
        "test" | "[" => {
            let named = args
                .iter()
                .any(|a| matches!(a.as_deref(), Some("-v" | "-R")));
            if named
                && args
                    .iter()
                    .any(|a| a.as_ref().is_none_or(|a| a.contains('[')))
            {
                return Err(evaluates());
            }
            Vec::new()
        }
        _ => Vec::new(),
    };
    for name in names {
        match name {
            None => {
                return Err(Unchecked::Construct(format!(
                    "{} assigns a variable whose name is only known when it runs",
                    short(source)
                )));
            }
            Some(n) => {
                if let Some(why) = assignment_hazard(&n) {
                    return Err(Unchecked::Construct(why));
                }
            }
        }
    }
    Ok(())
}

/// The operands among `args` (options and their values skipped; `takes_value` lists
/// the letters that take one). A word only known at run time could be anything, an
/// option included, so it counts as an operand.
fn operands(args: &[DenyWord], takes_value: &str) -> Vec<DenyWord> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        match &args[i] {
            Some(a) if !options_done && a == "--" => options_done = true,
            Some(a) if !options_done && a.starts_with('-') && a.len() > 1 => {
                // A value-taking letter ends the cluster; without a rest, the next
                // word is its value.
                if let Some((k, c)) = a
                    .char_indices()
                    .skip(1)
                    .find(|(_, c)| takes_value.contains(*c))
                    && k + c.len_utf8() == a.len()
                {
                    i += 1;
                }
            }
            other => out.push(other.clone()),
        }
        i += 1;
    }
    out
}

/// The values of a short option among `args`, wherever it stands and however it is
/// clustered: `-x V`, `-xV`, `-abx V`, `-abxV`. `takes_value` lists the letters of the
/// program that take a value (a cluster ends at the first of them). A value only known
/// at run time comes back as `None`.
fn option_values(args: &[DenyWord], letter: char, takes_value: &str) -> Vec<DenyWord> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if let Some(a) = &args[i]
            && a.starts_with('-')
            && !a.starts_with("--")
        {
            for (k, c) in a.char_indices().skip(1) {
                if takes_value.contains(c) {
                    let rest = &a[k + c.len_utf8()..];
                    let value = if rest.is_empty() {
                        i += 1;
                        args.get(i).cloned()
                    } else {
                        Some(Some(rest.to_string()))
                    };
                    // A missing value (the option ends the words) runs nothing.
                    if c == letter
                        && let Some(value) = value
                    {
                        out.push(value);
                    }
                    break;
                }
            }
        }
        i += 1;
    }
    out
}

/// The values of a long option: `--name V` or `--name=V`.
fn long_option_values(args: &[DenyWord], name: &str) -> Vec<DenyWord> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let Some(a) = a else { continue };
        if let Some(rest) = a.strip_prefix(name) {
            if rest.is_empty() {
                if let Some(v) = args.get(i + 1) {
                    out.push(v.clone());
                }
            } else if let Some(v) = rest.strip_prefix('=') {
                out.push(Some(v.to_string()));
            }
        }
    }
    out
}

/// Programs that run an option's value as shell code: (program, short letter, the
/// letters that take a value, long option).
const SCRIPT_OPTIONS: [(&str, char, &str, &str); 7] = [
    ("env", 'S', "uCS", "--split-string"),
    ("flock", 'c', "cEw", "--command"),
    ("runuser", 'c', "cgGlsuw", "--command"),
    ("script", 'c', "cEIOBTtm", "--command"),
    ("mapfile", 'C', "dnOsuCc", "--"),
    ("readarray", 'C', "dnOsuCc", "--"),
    ("sudo", 'c', "CDghpRrTUu", "--"),
];

/// The strings a program runs as shell code: `eval`'s arguments, a shell's `-c`
/// operands, an option's value that is a command (`env -S`, `flock -c`, `su -c`,
/// `mapfile -C` …), `trap`'s and `watch`'s operands, alias values, and the program a
/// `hash -p` binds to a name.
fn scripts_of(base: &str, args: &[DenyWord], source: &str) -> Result<Vec<String>, Unchecked> {
    let unknown = || {
        Unchecked::Construct(format!(
            "the script of {} is only known when it runs",
            short(source)
        ))
    };
    let known = |w: &DenyWord| w.clone().ok_or_else(unknown);
    let mut out = Vec::new();
    if let Some((_, letter, takes, long)) = SCRIPT_OPTIONS.iter().find(|(p, ..)| *p == base) {
        let mut values = option_values(args, *letter, takes);
        if *long != "--" {
            values.extend(long_option_values(args, long));
        }
        for v in &values {
            // `env -S=cmd` reads as `-S` with `=cmd`; the script is `cmd`.
            out.push(known(v)?.trim_start_matches('=').to_string());
        }
    }
    match base {
        "eval" | "watch" | "parallel" => {
            let v: Result<Vec<String>, Unchecked> = args.iter().map(known).collect();
            out.push(v?.join(" "));
        }
        // `trap 'cmd' SIGNAL`, `su user cmd`: any operand may be the code.
        "trap" | "su" => {
            for a in args {
                out.push(known(a)?);
            }
        }
        // `alias name='code'`: with expand_aliases, the value runs where the name is a
        // command.
        "alias" => {
            for a in args {
                if let Some((_, value)) = known(a)?.split_once('=') {
                    out.push(value.to_string());
                }
            }
        }
        // `hash -p PATH name`: `name` then runs PATH.
        "hash" => {
            for v in option_values(args, 'p', "p") {
                out.push(normalize(&[known(&v)?.as_str()]));
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
        "ansi_c_string" => ansi_c(text(node, src)),
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
