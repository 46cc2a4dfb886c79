//! The Glob and Grep tools on a real tree: ordering, .gitignore, caps, output formats.

use crate::support;

use flower::tools::glob::Glob;
use flower::tools::grep::Grep;
use flower::tools::{Tool, ToolOutput};
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use support::{ToolEnv, tool_env};

fn put(ws: &Path, rel: &str, content: &str, age_s: u64) -> PathBuf {
    let p = ws.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, content).unwrap();
    let t = SystemTime::now() - Duration::from_secs(age_s);
    fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(t)
        .unwrap();
    p
}

async fn glob(e: &ToolEnv, input: Value) -> ToolOutput {
    Glob.call(&flower::content::ToolInput::of_tree(&input), &e.ctx)
        .await
}

async fn grep(e: &ToolEnv, input: Value) -> ToolOutput {
    Grep.call(&flower::content::ToolInput::of_tree(&input), &e.ctx)
        .await
}

#[tokio::test]
async fn glob_lists_newest_first_and_honours_gitignore() {
    let e = tool_env();
    let ws = &e.ctx.workspace;
    let old = put(ws, "src/old.rs", "", 300);
    let new = put(ws, "src/deep/new.rs", "", 10);
    let mid = put(ws, "mid.rs", "", 100);
    put(ws, "target/debug/gen.rs", "", 1);
    put(ws, ".gitignore", "target/\n", 1000);
    put(ws, "src/readme.md", "", 1);
    let out = glob(&e, json!({"pattern": "**/*.rs"})).await;
    assert!(!out.is_error, "{}", out.content);
    let want = [new, mid, old]
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(out.content, want);

    // `*` does not cross directories; a literal prefix narrows the walk.
    let out = glob(&e, json!({"pattern": "*.rs"})).await;
    assert_eq!(out.content, ws.join("mid.rs").display().to_string());
    let out = glob(&e, json!({"pattern": "src/*.rs"})).await;
    assert_eq!(out.content, ws.join("src/old.rs").display().to_string());
    let out = glob(&e, json!({"pattern": "*.rs", "path": "src/deep"})).await;
    assert_eq!(
        out.content,
        ws.join("src/deep/new.rs").display().to_string()
    );
    let abs = format!("{}/src/**/*.md", ws.display());
    let out = glob(&e, json!({"pattern": abs})).await;
    assert_eq!(out.content, ws.join("src/readme.md").display().to_string());

    let out = glob(&e, json!({"pattern": "**/*.py"})).await;
    assert_eq!(out.content, "No files found");
}

#[tokio::test]
async fn glob_caps_results_with_a_note() {
    let e = tool_env();
    for i in 0..150 {
        put(&e.ctx.workspace, &format!("f{i:03}.txt"), "", i);
    }
    let out = glob(&e, json!({"pattern": "*.txt"})).await;
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines.len(), 101, "100 paths and a note");
    assert!(lines[0].ends_with("f000.txt"), "newest first: {}", lines[0]);
    assert!(lines[100].contains("truncated"), "{}", lines[100]);
    assert!(lines[100].contains("150"), "{}", lines[100]);
}

#[tokio::test]
async fn glob_is_confined_and_checks_its_input() {
    let e = tool_env();
    let out = glob(&e, json!({"pattern": "*", "path": "/etc"})).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("outside the workspace"),
        "{}",
        out.content
    );
    let out = glob(&e, json!({"pattern": "../*"})).await;
    assert!(out.is_error, "{}", out.content);
    let out = glob(&e, json!({"path": "."})).await;
    assert!(out.is_error);
    assert!(out.content.contains("pattern"), "{}", out.content);
    put(&e.ctx.workspace, "file.txt", "", 0);
    let out = glob(&e, json!({"pattern": "*", "path": "file.txt"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("not a directory"), "{}", out.content);
}

fn tree(e: &ToolEnv) {
    let ws = &e.ctx.workspace;
    put(ws, "src/a.rs", "fn main() {\n    let Needle = 1;\n}\n", 30);
    put(ws, "src/b.rs", "// needle here\nfn b() {}\n", 10);
    put(ws, "src/c.py", "needle = 2\n", 20);
    put(
        ws,
        "notes.txt",
        "one\ntwo\nneedle\nfour\nfive\nsix\nneedle\n",
        40,
    );
    put(ws, "ignored/x.rs", "needle\n", 1);
    put(ws, ".gitignore", "ignored/\n", 100);
    fs::write(ws.join("bin.dat"), b"needle\0\x01\x02").unwrap();
}

#[tokio::test]
async fn grep_lists_files_newest_first_by_default() {
    let e = tool_env();
    tree(&e);
    let ws = &e.ctx.workspace;
    let out = grep(&e, json!({"pattern": "needle"})).await;
    assert!(!out.is_error, "{}", out.content);
    let want = format!(
        "Found 3 files\n{}\n{}\n{}",
        ws.join("src/b.rs").display(),
        ws.join("src/c.py").display(),
        ws.join("notes.txt").display()
    );
    assert_eq!(out.content, want);
    // -i finds the capitalised one too.
    let out = grep(&e, json!({"pattern": "needle", "-i": true})).await;
    assert!(
        out.content.starts_with("Found 4 files\n"),
        "{}",
        out.content
    );
    let out = grep(&e, json!({"pattern": "nothing-like-this"})).await;
    assert_eq!(out.content, "No files found");
}

#[tokio::test]
async fn grep_content_mode_prints_like_ripgrep() {
    let e = tool_env();
    tree(&e);
    let ws = &e.ctx.workspace;
    let out = grep(
        &e,
        json!({"pattern": "needle", "output_mode": "content", "path": "src"}),
    )
    .await;
    let b = ws.join("src/b.rs").display().to_string();
    let c = ws.join("src/c.py").display().to_string();
    assert_eq!(
        out.content,
        format!("{b}:1:// needle here\n{c}:1:needle = 2")
    );

    // Context lines, `--` between groups; a single file has no path prefix.
    let out = grep(
        &e,
        json!({"pattern": "needle", "output_mode": "content", "path": "notes.txt", "-B": 1, "-A": 1}),
    )
    .await;
    assert_eq!(out.content, "2-two\n3:needle\n4-four\n--\n6-six\n7:needle");
    let out = grep(
        &e,
        json!({"pattern": "needle", "output_mode": "content", "path": "notes.txt", "-C": 1, "-n": false}),
    )
    .await;
    assert_eq!(out.content, "two\nneedle\nfour\n--\nsix\nneedle");
}

#[tokio::test]
async fn grep_count_glob_type_and_head_limit() {
    let e = tool_env();
    tree(&e);
    let ws = &e.ctx.workspace;
    let out = grep(
        &e,
        json!({"pattern": "needle", "output_mode": "count", "path": "notes.txt"}),
    )
    .await;
    assert!(out.content.starts_with("2\n"), "{}", out.content);
    let out = grep(&e, json!({"pattern": "needle", "output_mode": "count"})).await;
    assert!(
        out.content
            .contains(&format!("{}:2", ws.join("notes.txt").display())),
        "{}",
        out.content
    );
    assert!(
        out.content.contains("4 matching lines across 3 files"),
        "{}",
        out.content
    );

    let out = grep(&e, json!({"pattern": "needle", "glob": "*.py"})).await;
    assert_eq!(
        out.content,
        format!("Found 1 file\n{}", ws.join("src/c.py").display())
    );
    let out = grep(&e, json!({"pattern": "needle", "glob": "*.{py,txt}"})).await;
    assert!(out.content.starts_with("Found 2 files"), "{}", out.content);
    let out = grep(&e, json!({"pattern": "needle", "type": "rust"})).await;
    assert_eq!(
        out.content,
        format!("Found 1 file\n{}", ws.join("src/b.rs").display())
    );
    let out = grep(&e, json!({"pattern": "needle", "type": "nosuchtype"})).await;
    assert!(out.is_error, "{}", out.content);

    let out = grep(&e, json!({"pattern": "needle", "head_limit": 1})).await;
    assert_eq!(
        out.content,
        format!(
            "Found 3 files\n{}\n\n(Showing 1 of 3 files. Use head_limit, a narrower path, glob \
             or pattern to see others.)",
            ws.join("src/b.rs").display()
        )
    );
    let out = grep(
        &e,
        json!({"pattern": "e", "output_mode": "content", "path": "notes.txt", "head_limit": 2}),
    )
    .await;
    assert!(
        out.content.starts_with("1:one\n3:needle\n"),
        "{}",
        out.content
    );
    assert!(out.content.contains("head_limit"), "{}", out.content);
    assert_eq!(out.content.lines().filter(|l| l.contains(':')).count(), 2);
}

#[tokio::test]
async fn grep_multiline_and_bad_regex() {
    let e = tool_env();
    tree(&e);
    let out = grep(
        &e,
        json!({"pattern": "fn main\\(\\) \\{.*Needle", "multiline": true, "output_mode": "content", "path": "src/a.rs"}),
    )
    .await;
    assert_eq!(out.content, "1:fn main() {\n2:    let Needle = 1;");
    let out = grep(
        &e,
        json!({"pattern": "fn main\\(\\) \\{.*Needle", "path": "src/a.rs"}),
    )
    .await;
    assert_eq!(
        out.content, "No files found",
        "without multiline, lines are separate"
    );

    let out = grep(&e, json!({"pattern": "(unclosed"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("Invalid regex"), "{}", out.content);
    let out = grep(&e, json!({"pattern": "x", "output_mode": "lines"})).await;
    assert!(out.is_error);
    assert!(out.content.contains("output_mode"), "{}", out.content);
}

#[tokio::test]
async fn grep_output_is_capped() {
    let e = tool_env();
    let text: String = (0..20_000).map(|i| format!("match line {i}\n")).collect();
    put(&e.ctx.workspace, "big.txt", &text, 0);
    let out = grep(&e, json!({"pattern": "match", "output_mode": "content"})).await;
    assert!(out.content.len() < 31_000, "{}", out.content.len());
    assert!(
        out.content.contains("Output cut"),
        "{}",
        &out.content[out.content.len() - 300..]
    );
}

#[tokio::test]
async fn grep_is_confined() {
    let e = tool_env();
    let out = grep(&e, json!({"pattern": "root", "path": "/etc/passwd"})).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("outside the workspace"),
        "{}",
        out.content
    );
}
