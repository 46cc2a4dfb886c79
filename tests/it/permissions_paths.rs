//! Path rules (Read/Write/Edit/Glob/Grep) against a real directory tree with
//! symlinks: paths are resolved before matching, so `..` and links cannot slip out.

use crate::support::tool_input;
use flower::engine::permissions::{Decision, Permissions};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

struct Tree {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

/// ws/src/main.rs, ws/src/deep/x/y.rs, ws/secret.txt, ws/.env, ws/docs/a.md,
/// ws/src/out -> outside/, ws/insrc -> ws/src, ws/envlink -> ws/.env,
/// ws/srcx/a.rs
fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    let ws = root.join("ws");
    let outside = root.join("outside");
    for d in ["src/deep/x", "docs", "srcx"] {
        fs::create_dir_all(ws.join(d)).unwrap();
    }
    fs::create_dir_all(&outside).unwrap();
    for f in [
        "src/main.rs",
        "src/deep/x/y.rs",
        "secret.txt",
        ".env",
        "docs/a.md",
        "srcx/a.rs",
    ] {
        fs::write(ws.join(f), "x").unwrap();
    }
    fs::write(outside.join("loot"), "x").unwrap();
    symlink(&outside, ws.join("src/out")).unwrap();
    symlink(ws.join("src"), ws.join("insrc")).unwrap();
    symlink(ws.join(".env"), ws.join("envlink")).unwrap();
    Tree {
        _tmp: tmp,
        ws,
        outside,
    }
}

fn rules(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// (tool, input, allowed?)
fn table(t: &Tree, allow: &[&str], deny: &[&str], rows: &[(&str, Value, bool)]) {
    let p = Permissions::new(&rules(allow), &rules(deny)).unwrap();
    let mut failures = Vec::new();
    for (tool, input, want) in rows {
        let d = p.check(tool, &tool_input(input), &t.ws);
        if matches!(d, Decision::Allow) != *want {
            failures.push(format!(
                "{tool} {input}: expected allowed={want}, got {d:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "allow={allow:?} deny={deny:?}:\n{}",
        failures.join("\n")
    );
}

fn fp(p: impl AsRef<Path>) -> Value {
    json!({ "file_path": p.as_ref().to_string_lossy() })
}

#[test]
fn allow_rules_match_the_resolved_path() {
    let t = tree();
    let ws = &t.ws;
    table(
        &t,
        &["Read(src/**)", "Edit(src/*.rs)", "Write(/tmp-not-there/**)"],
        &[],
        &[
            ("Read", fp("src/main.rs"), true),
            ("Read", fp("./src/main.rs"), true),
            ("Read", fp(ws.join("src/main.rs")), true),
            ("Read", fp("src/deep/x/y.rs"), true),
            ("Read", fp("src/new-file.rs"), true),
            ("Read", fp("src"), true),
            ("Read", fp("insrc/main.rs"), true),
            ("Read", fp("src/../secret.txt"), false),
            ("Read", fp("src/deep/../../secret.txt"), false),
            ("Read", fp("../outside/loot"), false),
            ("Read", fp(t.outside.join("loot")), false),
            ("Read", fp("src/out/loot"), false),
            ("Read", fp("/etc/passwd"), false),
            ("Read", fp("srcx/a.rs"), false),
            ("Read", fp("secret.txt"), false),
            ("Edit", fp("src/main.rs"), true),
            ("Edit", fp("src/deep/x/y.rs"), false),
            ("Edit", fp("src/main.txt"), false),
            ("Write", fp("src/main.rs"), false),
        ],
    );
}

#[test]
fn absolute_path_rules() {
    let t = tree();
    let docs = format!("Read({}/docs/**)", t.ws.display());
    table(
        &t,
        &[&docs],
        &[],
        &[
            ("Read", fp("docs/a.md"), true),
            ("Read", fp(t.ws.join("docs/a.md")), true),
            ("Read", fp("docs/../secret.txt"), false),
        ],
    );
    // A rule that names its directory through a symlink names the real directory.
    let through_link = format!("Read({}/insrc/**)", t.ws.display());
    table(
        &t,
        &[&through_link],
        &[],
        &[
            ("Read", fp("src/main.rs"), true),
            ("Read", fp("insrc/main.rs"), true),
            ("Read", fp("docs/a.md"), false),
        ],
    );
}

/// A deny rule that names no directory (`*.secret`) denies the files it matches, not
/// every search that could meet one: Grep of the workspace is still allowed.
#[test]
fn a_deny_rule_without_a_directory_does_not_deny_searches() {
    let t = tree();
    table(
        &t,
        &[],
        &["Read(*.txt)"],
        &[
            ("Read", fp("secret.txt"), false),
            ("Grep", json!({"pattern": "x"}), true),
            ("Grep", json!({"pattern": "x", "path": "docs"}), true),
        ],
    );
}

/// Write's deny rules cover Edit as Edit's cover Write, and reach no other tool.
#[test]
fn write_deny_rules_cover_edit_and_nothing_else() {
    let t = tree();
    table(
        &t,
        &[],
        &["Write(docs/**)"],
        &[
            ("Write", fp("docs/a.md"), false),
            ("Edit", fp("docs/a.md"), false),
            ("Edit", fp("src/main.rs"), true),
            ("Read", fp("docs/a.md"), true),
            ("Grep", json!({"pattern": "x", "path": "docs"}), true),
        ],
    );
}

#[test]
fn deny_rules_see_through_dots_and_links() {
    let t = tree();
    table(
        &t,
        &[],
        &["Read(.env)", "Edit(src/deep/**)"],
        &[
            ("Read", fp(".env"), false),
            ("Read", fp("./.env"), false),
            ("Read", fp(t.ws.join(".env")), false),
            ("Read", fp("src/../.env"), false),
            ("Read", fp("envlink"), false),
            ("Read", fp("secret.txt"), true),
            ("Edit", fp("src/deep/x/y.rs"), false),
            ("Edit", fp("insrc/deep/x/y.rs"), false),
            ("Edit", fp("src/main.rs"), true),
            // Edit's deny rules cover Write too: the same change by another tool.
            ("Write", fp("src/deep/new.rs"), false),
            ("Write", fp("src/new.rs"), true),
            // Read's deny rules cover Grep: a search reaching .env would read it.
            ("Grep", json!({"pattern": "x"}), false),
            ("Grep", json!({"pattern": "x", "path": "."}), false),
            ("Grep", json!({"pattern": "x", "path": "undefined"}), false),
            ("Grep", json!({"pattern": "x", "path": "src"}), true),
            ("Grep", json!({"pattern": "x", "path": ".env"}), false),
            // Glob only lists names: Read's rules deny listing the file itself only.
            ("Glob", json!({"pattern": "**/*"}), true),
            ("Glob", json!({"pattern": "*", "path": ".env"}), false),
        ],
    );
}

#[test]
fn directory_tools_use_path_and_pattern_base() {
    let t = tree();
    table(
        &t,
        &["Glob(src/**)", "Grep(src/**)"],
        &[],
        &[
            ("Glob", json!({"pattern": "**/*.rs", "path": "src"}), true),
            ("Glob", json!({"pattern": "src/**/*.rs"}), true),
            ("Glob", json!({"pattern": "src/deep/*.rs"}), true),
            ("Glob", json!({"pattern": "**/*.rs"}), false),
            ("Glob", json!({"pattern": "../**"}), false),
            ("Glob", json!({"pattern": "*", "path": "src/out"}), false),
            // A pattern's last part is what is matched, not where: `src` lists the
            // workspace root, `src/main.rs` the directory src.
            ("Glob", json!({"pattern": "src"}), false),
            ("Glob", json!({"pattern": "src/main.rs"}), true),
            ("Grep", json!({"pattern": "x", "path": "src"}), true),
            ("Grep", json!({"pattern": "x", "path": "src/main.rs"}), true),
            ("Grep", json!({"pattern": "x"}), false),
            ("Grep", json!({"pattern": "x", "path": "src/out"}), false),
        ],
    );
    table(
        &t,
        &["Glob(src/**)"],
        &["Glob(src/deep/**)"],
        &[
            (
                "Glob",
                json!({"pattern": "*.rs", "path": "src/deep"}),
                false,
            ),
            ("Glob", json!({"pattern": "src/deep/**"}), false),
            // A search from src would list src/deep, which a Glob rule denies.
            ("Glob", json!({"pattern": "**/*.rs", "path": "src"}), false),
            (
                "Glob",
                json!({"pattern": "*.rs", "path": "src/deep/../../srcx"}),
                false,
            ),
        ],
    );
}

/// A call that names no path (missing, or an empty string) is not a path the rules can
/// judge: it is let through to the tool, which refuses it with its own error ("file_path
/// is required"), rather than being judged as the workspace root.
#[test]
fn a_call_without_a_path_is_left_to_the_tool() {
    let t = tree();
    table(
        &t,
        &["Write(src/**)", "Read(src/**)"],
        &[],
        &[
            ("Write", json!({"file_path": ""}), true),
            ("Write", json!({"content": "x"}), true),
            ("Read", json!({"file_path": ""}), true),
            ("Write", fp("."), false),
        ],
    );
}

#[test]
fn single_star_does_not_cross_directories() {
    let t = tree();
    table(
        &t,
        &["Read(src/*)"],
        &[],
        &[
            ("Read", fp("src/main.rs"), true),
            ("Read", fp("src/deep/x/y.rs"), false),
        ],
    );
}

#[test]
fn path_denials_name_the_path_and_rule() {
    let t = tree();
    let p = Permissions::new(&rules(&["Read(src/**)"]), &rules(&["Read(src/deep/**)"])).unwrap();
    let Decision::Deny { message, .. } =
        p.check("Read", &tool_input(&fp("src/../secret.txt")), &t.ws)
    else {
        panic!("must be denied")
    };
    assert!(
        message.starts_with("Permission to use Read on \"src/../secret.txt\""),
        "{message}"
    );
    assert!(
        message.contains(&t.ws.join("secret.txt").display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("no allow rule matches (allowed: Read(src/**))"),
        "{message}"
    );
    let Decision::Deny { message, .. } =
        p.check("Read", &tool_input(&fp("src/deep/x/y.rs")), &t.ws)
    else {
        panic!("must be denied")
    };
    assert!(message.contains("deny rule Read(src/deep/**)"), "{message}");
}
