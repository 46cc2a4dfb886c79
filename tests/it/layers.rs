//! The layer line of docs/architecture.md, checked from the source (parsed with `syn`):
//! no `crate::` path from a lower layer to a higher one, no import cycle among the
//! modules of `src/cli/`, no function over [`MAX_FN_LINES`] lines without a comment
//! just above it saying why (containing "long because"), no file over
//! [`MAX_FILE_LINES`] lines, no read of the process environment outside `src/settings/`.
//! Each rule is also shown to fail on a made-up snippet.

use proc_macro2::Span;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use syn::visit::Visit;

/// The layers, lowest first: each may use only itself and the ones before it.
const LAYERS: &[&[&str]] = &[
    // `content`: the content blocks and the lossless JSON objects they are built of
    // (what a reply streams in as, the transcript stores and a request sends back).
    &["future", "run_dir", "atomic", "error", "content", "lenient"],
    &["model"],
    &["transcript", "events"],
    &["stores", "checkpoint"],
    &["tools"],
    &["engine"],
    // `telemetry`: the OpenTelemetry export of the run's events (it names attempts as
    // continuity does; continuity does not use it).
    &["continuity", "telemetry"],
    // Every knob resolved once; it builds values of the layers below.
    &["settings"],
    // The run's lifecycle: takes the settings, opens the runtime.
    &["run"],
    &["workflow"],
    &["inspect"],
    &["cli"],
    // The binary's web view, which shows runs with the CLI's renderers, and `main`,
    // which dispatches to both.
    &["serve"],
    &["main"],
];

const MAX_FN_LINES: usize = 80;
const MAX_FILE_LINES: usize = 1000;

/// What a long function's comment must say.
const WHY_LONG: &str = "long because";

/// The functions of `std::env` that read the process environment.
const ENV_READERS: [&str; 5] = ["var", "var_os", "vars", "vars_os", "home_dir"];

/// Whether a file may read the process environment: the settings (`Environment::
/// from_process`) and nothing else.
fn may_read_env(rel: &str) -> bool {
    rel.starts_with("settings/")
}

/// A source file: its path under `src/` and its text.
struct Source {
    rel: String,
    text: String,
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Whether the file belongs to the binary (`crate::` there is the binary crate and
/// the library is `flower::`).
fn in_binary(rel: &str) -> bool {
    rel == "main.rs" || rel.starts_with("cli/") || rel.starts_with("serve/")
}

/// The top-level module a file belongs to; `None` for `lib.rs`, which declares and
/// re-exports every module.
fn top_module(rel: &str) -> Option<&str> {
    if rel == "lib.rs" {
        return None;
    }
    if rel == "main.rs" {
        return Some("main");
    }
    if rel.starts_with("serve/") {
        return Some("serve");
    }
    if in_binary(rel) {
        return Some("cli");
    }
    let first = rel.split('/').next()?;
    Some(first.strip_suffix(".rs").unwrap_or(first))
}

/// The module of `src/cli/` a file is (`flow` for cli/flow.rs); `None` for
/// `cli/mod.rs` and `main.rs`, which only declare them.
fn cli_module(rel: &str) -> Option<&str> {
    let rest = rel.strip_prefix("cli/")?;
    let first = rest.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "mod").then_some(name)
}

/// Every path a file names (`use` trees expanded), with its line; and its functions.
#[derive(Default)]
struct Collected {
    paths: Vec<(Vec<String>, usize)>,
    fns: Vec<Fn>,
}

struct Fn {
    name: String,
    /// The line of the `fn` keyword.
    line: usize,
    lines: usize,
}

impl Collected {
    fn function(&mut self, name: &syn::Ident, fn_token: Span, close: Span) {
        let line = fn_token.start().line;
        self.fns.push(Fn {
            name: name.to_string(),
            line,
            lines: close.start().line + 1 - line,
        });
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_path(prefix, Some(&n.ident)),
            syn::UseTree::Rename(r) => self.use_path(prefix, Some(&r.ident)),
            syn::UseTree::Glob(g) => {
                let line = g.star_token.spans[0].start().line;
                self.paths.push((prefix.clone(), line));
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn use_path(&mut self, prefix: &[String], last: Option<&syn::Ident>) {
        let mut path = prefix.to_vec();
        let mut line = 0;
        if let Some(ident) = last {
            path.push(ident.to_string());
            line = ident.span().start().line;
        }
        self.paths.push((path, line));
    }
}

impl<'ast> Visit<'ast> for Collected {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = path
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.paths.push((segments, line));
        syn::visit::visit_path(self, path);
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let close = item.block.brace_token.span.close();
        self.function(&item.sig.ident, item.sig.fn_token.span, close);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        let close = item.block.brace_token.span.close();
        self.function(&item.sig.ident, item.sig.fn_token.span, close);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            let close = block.brace_token.span.close();
            self.function(&item.sig.ident, item.sig.fn_token.span, close);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }
}

/// Whether the comment and attribute lines just above line `line` (1-based) of
/// `text` say why the function is long.
fn says_why_long(text: &str, line: usize) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = line.saturating_sub(1);
    let mut above = String::new();
    while i > 0 {
        let l = lines[i - 1].trim();
        if !(l.starts_with("//") || l.starts_with("#[")) {
            break;
        }
        above.push_str(l);
        above.push('\n');
        i -= 1;
    }
    above.to_lowercase().contains(WHY_LONG)
}

/// Every violation of the rules in `sources`, one line each.
fn violations(sources: &[Source]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cli_edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources {
        let rel = source.rel.as_str();
        let file = match syn::parse_file(&source.text) {
            Ok(file) => file,
            Err(e) => {
                out.push(format!("src/{rel}: does not parse: {e}"));
                continue;
            }
        };
        let mut seen = Collected::default();
        seen.visit_file(&file);
        let lines = source.text.lines().count();
        if lines > MAX_FILE_LINES {
            out.push(format!(
                "src/{rel}: {lines} lines, over {MAX_FILE_LINES}: cut where a name explains the piece"
            ));
        }
        for f in &seen.fns {
            if f.lines > MAX_FN_LINES && !says_why_long(&source.text, f.line) {
                out.push(format!(
                    "src/{rel}:{}: fn {} is {} lines, over {MAX_FN_LINES}, with no comment \
                     above it saying why (\"{WHY_LONG} …\")",
                    f.line, f.name, f.lines
                ));
            }
        }
        if !may_read_env(rel) {
            for (path, line) in &seen.paths {
                if let [.., env, read] = path.as_slice()
                    && env == "env"
                    && ENV_READERS.contains(&read.as_str())
                {
                    out.push(format!(
                        "src/{rel}:{line}: reads the environment ({}); only src/settings/ does",
                        path.join("::")
                    ));
                }
            }
        }
        let Some(top) = top_module(rel) else {
            continue;
        };
        let Some(layer) = layer_of(top) else {
            out.push(format!("src/{rel}: module {top} is on no layer"));
            continue;
        };
        // In the binary, `flower::` is the library and `crate::` the binary's own
        // modules (`cli`, `serve`): both are checked.
        let library = if in_binary(rel) { "flower" } else { "crate" };
        for (path, line) in &seen.paths {
            let (Some(first), Some(second)) = (path.first(), path.get(1)) else {
                continue;
            };
            if (first == library || (in_binary(rel) && first == "crate"))
                && let Some(target) = layer_of(second)
                && target > layer
            {
                out.push(format!(
                    "src/{rel}:{line}: {top} (layer {layer}) uses {} (layer {target})",
                    path.join("::")
                ));
            }
            if let Some(from) = cli_module(rel) {
                let to = match (first.as_str(), second.as_str()) {
                    ("crate", "cli") => path.get(2),
                    ("super", _) => Some(second),
                    _ => None,
                };
                if let Some(to) = to.filter(|to| *to != from) {
                    cli_edges
                        .entry(from.to_string())
                        .or_default()
                        .insert(to.clone());
                }
            }
        }
    }
    out.extend(cycles(&cli_edges));
    out
}

/// The import cycles among cli modules, each as `cli: a → b → a`.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn walk(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut BTreeSet<String>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            found.insert(format!("src/cli/: import cycle {}", cycle.join(" → ")));
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            walk(next, edges, stack, done, found);
        }
        stack.pop();
        done.insert(node.to_string());
    }
    let mut found = BTreeSet::new();
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        walk(node, edges, &mut Vec::new(), &mut done, &mut found);
    }
    found.into_iter().collect()
}

fn read_tree(dir: &Path, root: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_tree(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push(Source {
                rel,
                text: std::fs::read_to_string(&path).unwrap(),
            });
        }
    }
}

fn source(rel: &str, text: &str) -> Source {
    Source {
        rel: rel.to_string(),
        text: text.to_string(),
    }
}

#[test]
fn the_source_keeps_the_layer_line_and_the_size_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    read_tree(&root, &root, &mut sources);
    assert!(sources.len() > 50, "read {} files", sources.len());
    let found = violations(&sources);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn an_import_from_a_lower_layer_to_a_higher_one_is_found() {
    let found = violations(&[
        source("model/x.rs", "use crate::engine::Engine;\nfn f() {}\n"),
        source("stores/y.rs", "fn f() { crate::workflow::run(); }\n"),
        source("stores/z.rs", "use crate::{model::A, transcript::B};\n"),
        source("cli/z.rs", "use flower::engine::Engine;\n"),
        source("continuity/a.rs", "use crate::settings::Settings;\n"),
        source("settings/b.rs", "use crate::run::Run;\n"),
        source("run/c.rs", "use crate::settings::Settings;\n"),
    ]);
    assert_eq!(
        found,
        [
            "src/model/x.rs:1: model (layer 1) uses crate::engine::Engine (layer 5)",
            "src/stores/y.rs:1: stores (layer 3) uses crate::workflow::run (layer 9)",
            "src/continuity/a.rs:1: continuity (layer 6) uses crate::settings::Settings (layer 7)",
            "src/settings/b.rs:1: settings (layer 7) uses crate::run::Run (layer 8)",
        ]
    );
}

/// In the binary: the CLI's commands may not use the web view (which uses them), and
/// only `main` dispatches to both.
#[test]
fn the_binarys_cli_may_not_use_serve() {
    let found = violations(&[
        source("cli/report.rs", "use crate::serve::run;\n"),
        source("serve/mod.rs", "use crate::cli::show::render;\n"),
        source("main.rs", "fn main() { crate::serve::run(); }\n"),
    ]);
    assert_eq!(
        found,
        ["src/cli/report.rs:1: cli (layer 11) uses crate::serve::run (layer 12)"]
    );
}

#[test]
fn an_import_cycle_inside_cli_is_found() {
    let found = violations(&[
        source("cli/flow.rs", "use crate::cli::once::run;\n"),
        source("cli/once.rs", "use super::flow::Flow;\n"),
        source("cli/show.rs", "use crate::cli::once::run;\n"),
    ]);
    assert_eq!(found, ["src/cli/: import cycle flow → once → flow"]);
}

#[test]
fn a_long_function_needs_a_comment_saying_why() {
    let body = "    let _ = 1;\n".repeat(MAX_FN_LINES);
    let long = format!("/// Does a thing.\nfn long() {{\n{body}}}\n");
    let explained = format!(
        "// Long because the steps share one borrow.\n#[allow(unused)]\nfn long() {{\n{body}}}\n"
    );
    let short = format!(
        "fn short() {{\n{}}}\n",
        "    let _ = 1;\n".repeat(MAX_FN_LINES - 2)
    );
    let in_impl = format!("struct S;\nimpl S {{\n    fn long(&self) {{\n{body}    }}\n}}\n");
    let found = violations(&[
        source("engine/a.rs", &long),
        source("engine/b.rs", &explained),
        source("engine/c.rs", &short),
        source("engine/d.rs", &in_impl),
    ]);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("src/engine/a.rs:2: fn long is 82 lines"),
        "{}",
        found[0]
    );
    assert!(
        found[1].starts_with("src/engine/d.rs:3: fn long is 82 lines"),
        "{}",
        found[1]
    );
}

#[test]
fn reading_the_environment_outside_the_settings_is_found() {
    let found = violations(&[
        source(
            "tools/git.rs",
            "fn f() { let _ = std::env::var_os(\"HOME\"); }\n",
        ),
        source(
            "engine/x.rs",
            "use std::env;\nfn f() { let _ = env::var(\"X\"); }\n",
        ),
        source(
            "settings/sources.rs",
            "fn f() { let _ = std::env::vars_os(); }\n",
        ),
    ]);
    assert_eq!(
        found,
        [
            "src/tools/git.rs:1: reads the environment (std::env::var_os); only src/settings/ does",
            "src/engine/x.rs:2: reads the environment (env::var); only src/settings/ does",
        ]
    );
}

#[test]
fn a_file_over_the_limit_is_found() {
    let text = "// line\n".repeat(MAX_FILE_LINES + 1);
    let short = "// line\n".repeat(MAX_FILE_LINES);
    let found = violations(&[
        source("engine/big.rs", &text),
        source("stores/postgres.rs", &short),
    ]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("src/engine/big.rs: 1001 lines"),
        "{}",
        found[0]
    );
}

/// The transcript's facts read through its types (`flower::transcript::Entry`,
/// `Block`), not re-derived from JSON: what is left of the untyped reading is counted
/// and may only go down. #42's goal is [`GOAL_VALUE_SIGNATURES`] and [`GOAL_LOOKUPS`];
/// lower the ceilings as modules move to the types, never raise them.
const MAX_VALUE_SIGNATURES: usize = 2;
const MAX_LOOKUPS: usize = 1;
const GOAL_VALUE_SIGNATURES: usize = 30;
const GOAL_LOOKUPS: usize = 20;

/// What [`untyped`] counts in one file.
#[derive(Default)]
struct Untyped {
    /// Functions whose signature names `serde_json::Value` (or a type holding it).
    value_signatures: Vec<(String, usize)>,
    /// `x["key"]`, `.get("key")`, `.get_mut("key")`, `.pointer("/a/b")`.
    lookups: Vec<usize>,
}

impl Untyped {
    fn signature(&mut self, sig: &syn::Signature) {
        struct NamesValue(bool);
        impl<'ast> Visit<'ast> for NamesValue {
            fn visit_type_path(&mut self, path: &'ast syn::TypePath) {
                // `Self::Value` is a serde visitor's own type, not serde_json's.
                let associated = path
                    .path
                    .segments
                    .first()
                    .is_some_and(|s| s.ident == "Self");
                if !associated && path.path.segments.iter().any(|s| s.ident == "Value") {
                    self.0 = true;
                }
                syn::visit::visit_type_path(self, path);
            }
        }
        let mut names = NamesValue(false);
        names.visit_signature(sig);
        if names.0 {
            self.value_signatures
                .push((sig.ident.to_string(), sig.ident.span().start().line));
        }
    }
}

/// Whether an item is test code (`#[cfg(test)]`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Expr>()
                .is_ok_and(|e| matches!(&e, syn::Expr::Path(p) if p.path.is_ident("test")))
    })
}

fn is_str_literal(expr: &syn::Expr) -> bool {
    matches!(
        expr,
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(_),
            ..
        })
    )
}

impl<'ast> Visit<'ast> for Untyped {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test(&item.attrs) {
            self.signature(&item.sig);
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test(&item.attrs) {
            self.signature(&item.sig);
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        self.signature(&item.sig);
        syn::visit::visit_trait_item_fn(self, item);
    }

    fn visit_expr_index(&mut self, expr: &'ast syn::ExprIndex) {
        if is_str_literal(&expr.index) {
            self.lookups
                .push(expr.bracket_token.span.open().start().line);
        }
        syn::visit::visit_expr_index(self, expr);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let method = call.method.to_string();
        if matches!(
            method.as_str(),
            "get" | "get_mut" | "pointer" | "pointer_mut"
        ) && call.args.len() == 1
            && call.args.first().is_some_and(is_str_literal)
        {
            self.lookups.push(call.method.span().start().line);
        }
        syn::visit::visit_expr_method_call(self, call);
    }
}

/// The files that are a `#[cfg(test)] mod name;` of another (`cli/show/tests.rs`).
fn test_files(sources: &[Source]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for s in sources {
        let Ok(file) = syn::parse_file(&s.text) else {
            continue;
        };
        let dir = match s.rel.strip_suffix("mod.rs") {
            Some(dir) => dir.to_string(),
            None => format!("{}/", s.rel.trim_end_matches(".rs")),
        };
        for item in &file.items {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
                && is_test(&m.attrs)
            {
                out.insert(format!("{dir}{}.rs", m.ident));
            }
        }
    }
    out
}

/// The untyped readings of the sources outside test code, per file (path under `src/`).
fn untyped(sources: &[Source]) -> Vec<(String, Untyped)> {
    let tests = test_files(sources);
    sources
        .iter()
        .filter(|s| !tests.contains(&s.rel))
        .filter_map(|s| {
            let file = syn::parse_file(&s.text).ok()?;
            let mut seen = Untyped::default();
            seen.visit_file(&file);
            Some((s.rel.clone(), seen))
        })
        .collect()
}

#[test]
fn the_untyped_transcript_readings_do_not_creep_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = Vec::new();
    read_tree(&root, &root, &mut sources);
    let found = untyped(&sources);
    let signatures: usize = found.iter().map(|(_, u)| u.value_signatures.len()).sum();
    let lookups: usize = found.iter().map(|(_, u)| u.lookups.len()).sum();
    let per_file: Vec<String> = found
        .iter()
        .filter(|(_, u)| !u.value_signatures.is_empty() || !u.lookups.is_empty())
        .map(|(rel, u)| {
            format!(
                "src/{rel}: {} signatures, {} lookups",
                u.value_signatures.len(),
                u.lookups.len()
            )
        })
        .collect();
    let report = per_file.join("\n");
    // Shown with --nocapture: where the rest are, for whoever lowers the ceilings.
    eprintln!("{signatures} signatures, {lookups} lookups\n{report}");
    assert!(
        signatures <= MAX_VALUE_SIGNATURES,
        "{signatures} functions name serde_json::Value in their signature, over \
         {MAX_VALUE_SIGNATURES} (goal {GOAL_VALUE_SIGNATURES}): read the transcript through \
         flower::transcript::Entry\n{report}"
    );
    assert!(
        lookups <= MAX_LOOKUPS,
        "{lookups} string-key lookups, over {MAX_LOOKUPS} (goal {GOAL_LOOKUPS}): read the \
         transcript through flower::transcript::Entry\n{report}"
    );
}

#[test]
fn untyped_readings_are_counted_outside_tests_only() {
    let found = untyped(&[
        source(
            "engine/x.rs",
            "fn a(v: &serde_json::Value) -> Option<&str> { v[\"type\"].as_str() }\n\
         fn b(m: &Map<String, Value>) { m.get(\"uuid\"); m.pointer(\"/a\"); m.get(key); }\n\
         fn c(v: &Entry) -> u64 { v.usage[0] }\n\
         trait T { fn d(&self) -> Vec<Value>; }\n\
         impl V { fn visit_str<E>(self) -> Result<Self::Value, E> { x } }\n\
         #[cfg(test)]\nmod tests { fn e(v: Value) { v[\"x\"]; } }\n\
         #[cfg(test)]\nmod more;\n",
        ),
        source("engine/x/more.rs", "fn f(v: Value) { v[\"x\"]; }\n"),
    ]);
    assert_eq!(found.len(), 1);
    let (_, seen) = &found[0];
    let names: Vec<&str> = seen
        .value_signatures
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "d"]);
    assert_eq!(seen.lookups, [1, 2, 2]);
}
