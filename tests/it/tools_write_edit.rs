//! The Write and Edit tools: confinement to the workspace, exact-match editing.

use crate::support;

use flower::tools::Tool;
use flower::tools::edit::Edit;
use flower::tools::write::Write;
use serde_json::json;
use std::fs;
use std::os::unix::fs::symlink;
use support::{ToolEnv, tool_env};

#[tokio::test]
async fn write_creates_parent_directories() {
    let e = tool_env();
    let out = Write
        .call(
            &flower::content::ToolInput::of_tree(
                &json!({"file_path": "a/b/c.txt", "content": "hello\n"}),
            ),
            &e.ctx,
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("created"), "{}", out.content);
    assert_eq!(
        fs::read_to_string(e.ctx.workspace.join("a/b/c.txt")).unwrap(),
        "hello\n"
    );
    let abs = e.ctx.workspace.join("a/b/c.txt");
    let out = Write
        .call(
            &flower::content::ToolInput::of_tree(&json!({"file_path": abs, "content": "again"})),
            &e.ctx,
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("overwritten"), "{}", out.content);
    assert_eq!(fs::read_to_string(&abs).unwrap(), "again");
}

#[tokio::test]
async fn writes_cannot_leave_the_workspace() {
    let e = tool_env();
    let outside = e.root.join("outside");
    fs::create_dir(&outside).unwrap();
    symlink(&outside, e.ctx.workspace.join("escape")).unwrap();
    symlink(outside.join("f.txt"), e.ctx.workspace.join("filelink")).unwrap();
    let cases = [
        json!("../outside/f.txt"),
        json!("sub/../../outside/f.txt"),
        json!(outside.join("f.txt")),
        json!("escape/f.txt"),
        json!("escape/new/dir/f.txt"),
        json!("filelink"),
        json!(e.ctx.run_dir.join("f.txt")),
        json!("~/f.txt"),
    ];
    for path in cases {
        let out = Write
            .call(
                &flower::content::ToolInput::of_tree(&json!({"file_path": path, "content": "x"})),
                &e.ctx,
            )
            .await;
        assert!(out.is_error, "{path}: {}", out.content);
        if !path.as_str().unwrap().starts_with('~') {
            assert!(
                out.content.contains("outside the workspace"),
                "{}",
                out.content
            );
            assert!(out.content.contains(&e.ctx.workspace.display().to_string()));
        }
        let out = Edit
            .call(
                &flower::content::ToolInput::of_tree(
                    &json!({"file_path": path, "old_string": "", "new_string": "x"}),
                ),
                &e.ctx,
            )
            .await;
        assert!(out.is_error, "Edit {path}: {}", out.content);
    }
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing was written outside"
    );
    assert!(!e.ctx.workspace.join("sub").exists());
}

#[tokio::test]
async fn a_symlink_inside_the_workspace_is_followed() {
    let e = tool_env();
    fs::create_dir(e.ctx.workspace.join("real")).unwrap();
    symlink(e.ctx.workspace.join("real"), e.ctx.workspace.join("alias")).unwrap();
    let out = Write
        .call(
            &flower::content::ToolInput::of_tree(
                &json!({"file_path": "alias/f.txt", "content": "x"}),
            ),
            &e.ctx,
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        fs::read_to_string(e.ctx.workspace.join("real/f.txt")).unwrap(),
        "x"
    );
}

async fn edit(e: &ToolEnv, input: serde_json::Value) -> flower::tools::ToolOutput {
    Edit.call(&flower::content::ToolInput::of_tree(&input), &e.ctx)
        .await
}

#[tokio::test]
async fn edit_replaces_a_unique_match() {
    let e = tool_env();
    let f = e.ctx.workspace.join("m.rs");
    fs::write(&f, "fn a() {}\nfn b() {}\nfn c() {}\n").unwrap();
    let out = edit(
        &e,
        json!({"file_path": "m.rs", "old_string": "fn b() {}", "new_string": "fn b() { 1 }"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        fs::read_to_string(&f).unwrap(),
        "fn a() {}\nfn b() { 1 }\nfn c() {}\n"
    );
    assert!(
        out.content.contains("     2\tfn b() { 1 }"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn edit_refuses_zero_or_several_matches_with_the_count() {
    let e = tool_env();
    let f = e.ctx.workspace.join("t.txt");
    fs::write(&f, "x = 1\nx = 1\ny = 2\n").unwrap();
    let out = edit(
        &e,
        json!({"file_path": "t.txt", "old_string": "z", "new_string": "w"}),
    )
    .await;
    assert!(out.is_error);
    assert!(out.content.contains("0 matches"), "{}", out.content);
    let out = edit(
        &e,
        json!({"file_path": "t.txt", "old_string": "x = 1", "new_string": "x = 3"}),
    )
    .await;
    assert!(out.is_error);
    assert!(out.content.contains("Found 2 matches"), "{}", out.content);
    assert!(out.content.contains("replace_all"), "{}", out.content);
    assert_eq!(
        fs::read_to_string(&f).unwrap(),
        "x = 1\nx = 1\ny = 2\n",
        "untouched"
    );

    let out = edit(
        &e,
        json!({"file_path": "t.txt", "old_string": "x = 1", "new_string": "x = 3", "replace_all": true}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("2 replacements"), "{}", out.content);
    assert_eq!(fs::read_to_string(&f).unwrap(), "x = 3\nx = 3\ny = 2\n");
}

#[tokio::test]
async fn edit_errors() {
    let e = tool_env();
    fs::write(e.ctx.workspace.join("f.txt"), "abc").unwrap();
    let out = edit(
        &e,
        json!({"file_path": "f.txt", "old_string": "a", "new_string": "a"}),
    )
    .await;
    assert!(out.is_error);
    assert!(out.content.contains("exactly the same"), "{}", out.content);

    let out = edit(
        &e,
        json!({"file_path": "gone.txt", "old_string": "a", "new_string": "b"}),
    )
    .await;
    assert!(out.is_error);
    assert!(out.content.contains("does not exist"), "{}", out.content);
    assert!(out.content.contains("gone.txt"), "{}", out.content);

    let out = edit(
        &e,
        json!({"file_path": "f.txt", "old_string": "", "new_string": "b"}),
    )
    .await;
    assert!(
        out.is_error,
        "an empty old_string does not overwrite a file"
    );
    assert_eq!(
        fs::read_to_string(e.ctx.workspace.join("f.txt")).unwrap(),
        "abc"
    );

    for (input, field) in [
        (json!({"old_string": "a", "new_string": "b"}), "file_path"),
        (
            json!({"file_path": "f.txt", "new_string": "b"}),
            "old_string",
        ),
        (
            json!({"file_path": "f.txt", "old_string": "a"}),
            "new_string",
        ),
        (
            json!({"file_path": "f.txt", "old_string": "a", "new_string": "b", "replace_all": "yes"}),
            "replace_all",
        ),
    ] {
        let out = edit(&e, input.clone()).await;
        assert!(out.is_error, "{input}");
        assert!(out.content.contains(field), "{input}: {}", out.content);
    }
}

#[tokio::test]
async fn edit_with_empty_old_string_creates_a_file() {
    let e = tool_env();
    let out = edit(
        &e,
        json!({"file_path": "new/n.txt", "old_string": "", "new_string": "hi\n"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        fs::read_to_string(e.ctx.workspace.join("new/n.txt")).unwrap(),
        "hi\n"
    );
}

#[tokio::test]
async fn edit_matches_lf_text_in_a_crlf_file() {
    let e = tool_env();
    let f = e.ctx.workspace.join("w.txt");
    fs::write(&f, "one\r\ntwo\r\nthree\r\n").unwrap();
    let out = edit(
        &e,
        json!({"file_path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(fs::read_to_string(&f).unwrap(), "1\r\n2\r\nthree\r\n");
}

/// Write and Edit replace a file atomically (temp file + rename): a concurrent reader
/// never sees half of it, no temp file is left behind, and permissions are kept.
#[tokio::test]
async fn writes_are_atomic_and_keep_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::TempDir::new().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let ctx = flower::tools::ToolContext {
        workspace: ws.clone(),
        run_dir: ws.join("runs"),
        cancel: tokio_util::sync::CancellationToken::new(),
        processes: flower::tools::ProcessGroups::new(),
        sandbox: Default::default(),
        env: Default::default(),
    };
    let path = ws.join("script.sh");
    std::fs::write(&path, "a".repeat(1 << 20)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();

    // A reader that keeps reading while the file is rewritten sees only whole versions.
    let reader_path = path.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader_stop = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut seen = std::collections::HashSet::new();
        while !reader_stop.load(std::sync::atomic::Ordering::SeqCst) {
            let text = std::fs::read_to_string(&reader_path).unwrap();
            seen.insert(text.len());
        }
        seen
    });
    for round in 0..20 {
        let content = if round % 2 == 0 { "b" } else { "c" }.repeat(1 << 20);
        let out = flower::tools::write::Write
            .call(
                &flower::content::ToolInput::of_tree(
                    &serde_json::json!({"file_path": path, "content": content}),
                ),
                &ctx,
            )
            .await;
        assert!(!out.is_error, "{}", out.content);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reader.join().unwrap();
    assert_eq!(
        seen,
        std::collections::HashSet::from([1 << 20]),
        "never a partial file"
    );

    // The temp file is made while the old file still exists, so a replacement always
    // has a different inode; an in-place rewrite keeps it.
    let inode_before = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    let out = flower::tools::edit::Edit
        .call(
            &flower::content::ToolInput::of_tree(&serde_json::json!({"file_path": path, "old_string": "c".repeat(1 << 20), "new_string": "#!/bin/sh\n"})),
            &ctx,
        )
        .await;
    assert!(!out.is_error, "{}", out.content);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o750);
    assert_ne!(
        std::os::unix::fs::MetadataExt::ino(&meta),
        inode_before,
        "replaced, not rewritten in place"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
