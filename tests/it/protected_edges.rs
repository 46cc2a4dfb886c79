//! The write policy's parts one at a time, through the library (issue #42, item 4: the
//! mutants of `src/tools/protected.rs` these tests kill are named in
//! docs/mutation-testing.md): the refusal's wording and rule for each kind of protected
//! path, the roots it covers, the files a hook runs, what a command gets bound
//! read-only or swept, the sweep itself, and the second line that puts a changed file
//! back when no mount could keep it read-only.

use flower::tools::protected::{
    Absent, Kept, Kind, Refusal, candidates, check_write, for_commands,
};
use flower::tools::sandbox::SandboxPolicy;
use std::fs;
use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

/// A canonical scratch root with `ws` (the workspace), `runs` (the record, inside it)
/// and `add` (an additional directory) beneath it.
struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    add: PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let add = root.join("add");
    fs::create_dir_all(ws.join("runs")).unwrap();
    fs::create_dir_all(&add).unwrap();
    Tree {
        _dir: dir,
        root,
        ws,
        add,
    }
}

/// The write policy's answer for `path` (as an agent writes it, relative to `ws`).
fn write(policy: &SandboxPolicy, t: &Tree, path: &str) -> Result<(), Refusal> {
    let resolved = flower::tools::paths::resolve(&t.ws, Path::new(path)).unwrap();
    check_write(policy, &t.ws, &t.ws.join("runs"), path, &resolved)
}

fn refusal(policy: &SandboxPolicy, t: &Tree, path: &str) -> Refusal {
    match write(policy, t, path) {
        Err(r) => r,
        Ok(()) => panic!("{path} was not refused"),
    }
}

/// Each kind of protected path is refused with what it is, and with the one rule that
/// opts it out: a file by its name, a directory with `/**`, git's parts by their
/// canonical rule (from an additional directory too: that rule turns git's whole
/// protection off), the record as a directory, a path in an additional directory by
/// its absolute name. A path reached through a link says what it resolved to.
#[test]
fn each_refusal_names_what_the_path_is_and_the_rule_that_opts_it_out() {
    let t = tree();
    let mut policy = SandboxPolicy::standard();
    policy.additional_dirs = vec![t.add.clone()];
    fs::create_dir_all(t.ws.join(".git/hooks")).unwrap();
    symlink(".mcp.json", t.ws.join("innocent")).unwrap();
    let cases: [(&str, &str, &str, &str); 6] = [
        (
            ".mcp.json",
            ".mcp.json",
            "Edit(.mcp.json)",
            "MCP 服务器配置",
        ),
        (
            ".vscode/tasks.json",
            ".vscode",
            "Edit(.vscode/**)",
            "VS Code 的工作区配置",
        ),
        (
            ".git/config",
            ".git/config",
            "Edit(.git/config)",
            "git 配置",
        ),
        (
            ".git/hooks/pre-commit",
            ".git/hooks",
            "Edit(.git/hooks/**)",
            "git 钩子",
        ),
        (
            "runs/sessions.db",
            "runs",
            "Edit(runs/**)",
            "本次运行的记录",
        ),
        (".zshrc", ".zshrc", "Edit(.zshrc)", "shell 的启动文件"),
    ];
    for (path, protected, rule, what) in cases {
        let r = refusal(&policy, &t, path);
        assert_eq!(
            (r.protected.as_str(), r.rule.as_str()),
            (protected, rule),
            "{path}"
        );
        let text = r.to_string();
        assert!(text.contains(what), "{path}: {text}");
        assert!(
            text.contains(&format!("--allowed-tools '{rule}'")),
            "{text}"
        );
        assert!(
            !text.contains("解析为"),
            "{path} is spelled directly: {text}"
        );
    }
    let r = refusal(&policy, &t, "innocent");
    assert_eq!(r.protected, ".mcp.json");
    assert!(
        r.to_string()
            .contains(&format!("解析为 {},", t.ws.join(".mcp.json").display())),
        "{r}"
    );

    // The additional directory is a root like the workspace.
    let add = |p: &str| t.add.join(p).display().to_string();
    let r = refusal(&policy, &t, &add(".claude/settings.json"));
    assert_eq!(r.protected, add(".claude/settings.json"));
    assert_eq!(r.rule, format!("Edit({})", add(".claude/settings.json")));
    let r = refusal(&policy, &t, &add(".idea/workspace.xml"));
    assert_eq!(r.rule, format!("Edit({}/**)", add(".idea")));
    let r = refusal(&policy, &t, &add(".git/hooks/post-checkout"));
    assert_eq!(r.rule, "Edit(.git/hooks/**)");
    let r = refusal(&policy, &t, &add(".git/config"));
    assert_eq!(r.rule, "Edit(.git/config)");
    assert!(write(&policy, &t, &add("notes.md")).is_ok());
}

/// A hook's file is protected only where an agent writes (inside a root, not a root
/// itself); its refusal says so and names the file's rule.
#[test]
fn a_hook_file_is_protected_inside_a_root_and_nowhere_else() {
    let t = tree();
    let mut policy = SandboxPolicy::standard();
    policy.additional_dirs = vec![t.add.clone()];
    let outside = t.root.join("elsewhere/check.sh");
    policy.protect.hook_files = vec![
        t.ws.join("scripts/check.sh"),
        t.add.join("lint.sh"),
        outside.clone(),
        t.ws.clone(),
    ];
    let hook_files: Vec<PathBuf> = candidates(&policy, &t.ws, None)
        .into_iter()
        .filter(|c| c.kind == Kind::HookFile)
        .map(|c| c.path)
        .collect();
    assert_eq!(
        hook_files,
        [t.ws.join("scripts/check.sh"), t.add.join("lint.sh")]
    );
    let r = refusal(&policy, &t, "scripts/check.sh");
    assert_eq!(r.rule, "Edit(scripts/check.sh)");
    assert!(r.to_string().contains("钩子命令运行的文件"), "{r}");
    assert!(write(&policy, &t, "scripts/other.sh").is_ok());
    assert!(write(&policy, &t, "README.md").is_ok());
}

/// The files git's own finder names (here the directory `core.hooksPath` points at)
/// are refused while git is protected, and not once it is not.
#[test]
fn the_files_gits_finder_names_are_refused_while_git_is_protected() {
    let t = tree();
    fs::create_dir_all(t.ws.join(".git")).unwrap();
    fs::write(t.ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(
        t.ws.join(".git/config"),
        "[core]\n\tbare = false\n\thooksPath = githooks\n",
    )
    .unwrap();
    fs::create_dir_all(t.ws.join("githooks")).unwrap();
    let policy = SandboxPolicy::standard();
    let r = refusal(&policy, &t, "githooks/pre-commit");
    assert_eq!(r.rule, "Edit(githooks/**)");
    assert!(
        r.to_string().contains("git 读取并据以执行程序的文件"),
        "{r}"
    );
    let unprotected = SandboxPolicy {
        protect_git: false,
        ..SandboxPolicy::standard()
    };
    assert!(write(&unprotected, &t, "githooks/pre-commit").is_ok());
    assert!(write(&unprotected, &t, ".git/config").is_ok());
}

/// For a command: the protected paths that exist are bound read-only where they lead
/// (a link's target, the record), the missing ones are swept both as spelled and as
/// resolved, and git's listed part is left to the sandbox's git finder.
#[test]
fn a_command_gets_existing_paths_read_only_and_missing_ones_swept_both_ways() {
    let t = tree();
    let mut policy = SandboxPolicy::standard();
    policy.protect.record = Some(t.ws.join("runs"));
    fs::create_dir_all(t.ws.join(".git/hooks")).unwrap();
    fs::write(t.ws.join(".git/config"), "[core]\n").unwrap();
    fs::write(t.ws.join(".mcp.json"), "{}").unwrap();
    fs::create_dir_all(t.ws.join("conf")).unwrap();
    symlink("conf", t.ws.join(".idea")).unwrap();
    fs::create_dir_all(t.ws.join("claude-real")).unwrap();
    symlink("claude-real", t.ws.join(".claude")).unwrap();
    let plan = for_commands(&policy, &t.ws);
    for bound in [t.ws.join(".mcp.json"), t.ws.join("conf"), t.ws.join("runs")] {
        assert!(plan.read_only.contains(&bound), "{bound:?}: {plan:?}");
    }
    for left in [
        t.ws.join(".idea"),
        t.ws.join(".git/config"),
        t.ws.join(".git/hooks"),
    ] {
        assert!(!plan.read_only.contains(&left), "{left:?}: {plan:?}");
    }
    let absent: Vec<&Path> = plan.absent.iter().map(|a| a.path.as_path()).collect();
    for swept in [
        t.ws.join(".vscode"),
        t.ws.join(".bashrc"),
        t.ws.join(".claude/settings.json"),
        t.ws.join("claude-real/settings.json"),
    ] {
        assert!(absent.contains(&swept.as_path()), "{swept:?}: {absent:?}");
    }
    assert!(!absent.contains(&t.ws.join(".mcp.json").as_path()));
    let mut unique = absent.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), absent.len(), "each swept once: {absent:?}");
}

/// What a command made at a missing protected path is removed, and the note says
/// whether it was the path itself or something in its way (a link, which is removed
/// and never followed); nothing there, nothing said.
#[test]
fn the_sweep_removes_what_a_command_made_and_says_what_it_was() {
    let t = tree();
    let vscode = Absent::new(&t.ws, t.ws.join(".vscode"), "VS Code 的工作区配置");
    assert_eq!(vscode.sweep(), None);
    fs::create_dir_all(t.ws.join(".vscode/deep")).unwrap();
    fs::write(t.ws.join(".vscode/deep/tasks.json"), "{}").unwrap();
    let note = vscode.sweep().expect("a note");
    assert_eq!(
        note,
        format!(
            "flower 删除了 {0}:命令运行时新建了受保护的路径 {0}(VS Code 的工作区配置)。",
            t.ws.join(".vscode").display()
        )
    );
    assert!(t.ws.join(".vscode").symlink_metadata().is_err());

    let settings = t.ws.join(".claude/settings.json");
    let absent = Absent::new(&t.ws, settings.clone(), "设置");
    fs::create_dir_all(t.ws.join(".claude")).unwrap();
    assert_eq!(
        absent.sweep(),
        None,
        "only its directory: nothing to remove"
    );
    fs::write(&settings, "{}").unwrap();
    let note = absent.sweep().expect("a note");
    assert!(
        note.starts_with(&format!("flower 删除了 {}:", settings.display())),
        "{note}"
    );
    assert!(!settings.exists() && t.ws.join(".claude").is_dir());

    fs::remove_dir(t.ws.join(".claude")).unwrap();
    fs::create_dir_all(t.root.join("elsewhere")).unwrap();
    fs::write(t.root.join("elsewhere/settings.json"), "{}").unwrap();
    symlink(t.root.join("elsewhere"), t.ws.join(".claude")).unwrap();
    let note = absent.sweep().expect("a note");
    assert_eq!(
        note,
        format!(
            "flower 删除了 {}:命令运行时新建了它,挡在受保护的路径 {}(设置)上。",
            t.ws.join(".claude").display(),
            settings.display()
        )
    );
    assert!(t.ws.join(".claude").symlink_metadata().is_err());
    assert!(t.root.join("elsewhere/settings.json").exists());
}

/// Reads `path`'s permission bits.
fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The second line (no mounts): each protected regular file up to 256 KiB is put back
/// byte for byte with its mode after a command changed, replaced or deleted it, or put
/// a directory in its place; a larger one and a directory are not kept; a link put in
/// place of a kept file's directory is not written through.
#[test]
fn a_changed_protected_file_is_put_back_whole_up_to_256_kib() {
    let t = tree();
    const MAX: usize = 256 * 1024;
    let files: Vec<(PathBuf, Vec<u8>)> = [
        ("small", 5),
        ("mid", 10_000),
        ("at-limit", MAX),
        ("over-limit", MAX + 1),
        ("deleted", 3),
        ("dir-in-place", 4),
    ]
    .iter()
    .map(|(name, len)| {
        let path = t.ws.join(name);
        let bytes: Vec<u8> = (0..*len).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &bytes).unwrap();
        (path, bytes)
    })
    .collect();
    fs::set_permissions(&files[0].0, fs::Permissions::from_mode(0o640)).unwrap();
    fs::create_dir_all(t.ws.join("a-dir")).unwrap();
    let mut paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    paths.push(t.ws.join("a-dir"));
    let kept = Kept::take(&paths);
    assert_eq!(kept.check(), Vec::<String>::new(), "nothing changed");

    // The command: replaces `small` by a new file of its own mode, rewrites the others.
    fs::remove_file(&files[0].0).unwrap();
    fs::write(&files[0].0, "planted").unwrap();
    fs::set_permissions(&files[0].0, fs::Permissions::from_mode(0o600)).unwrap();
    for (path, _) in &files[1..4] {
        fs::write(path, "planted").unwrap();
    }
    fs::remove_file(&files[4].0).unwrap();
    fs::remove_file(&files[5].0).unwrap();
    fs::create_dir_all(files[5].0.join("sub")).unwrap();
    fs::write(t.ws.join("a-dir/new"), "x").unwrap();

    let notes = kept.check();
    let restored = |p: &Path| {
        format!(
            "flower 把受保护的 {} 恢复成了命令运行前的内容:命令改动了它。",
            p.display()
        )
    };
    let expected: Vec<String> = [0, 1, 2, 4, 5]
        .iter()
        .map(|&i| restored(&files[i].0))
        .collect();
    assert_eq!(notes, expected);
    for i in [0, 1, 2, 4, 5] {
        assert_eq!(
            fs::read(&files[i].0).unwrap(),
            files[i].1,
            "{:?}",
            files[i].0
        );
    }
    assert_eq!(mode(&files[0].0), 0o640, "its mode is put back too");
    assert_eq!(
        fs::read(&files[3].0).unwrap(),
        b"planted",
        "over 256 KiB: bound only"
    );
    assert!(t.ws.join("a-dir/new").exists(), "a directory is not kept");
    assert!(kept.check().is_empty(), "put back: nothing left to do");

    // A link in place of the directory of a kept file: refused, nothing written there.
    let sub = t.ws.join("sub");
    fs::create_dir_all(&sub).unwrap();
    fs::write(sub.join("settings.json"), "mine").unwrap();
    let kept = Kept::take(&[sub.join("settings.json")]);
    fs::rename(&sub, t.ws.join("sub-moved")).unwrap();
    fs::create_dir_all(t.root.join("target")).unwrap();
    symlink(t.root.join("target"), &sub).unwrap();
    let notes = kept.check();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].starts_with("flower 没能恢复受保护的"), "{notes:?}");
    assert!(!t.root.join("target/settings.json").exists());
}
