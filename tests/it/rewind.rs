//! Issue #44: checkpoints of the workspace and `flower rewind` / `flower diff`, through
//! the binary: files back byte for byte (Write, Edit and `sed -i` alike), a mid-step
//! rewind that forks the conversation and is continued by the next `flower`, a restore
//! killed mid-way, and a workspace the person changed.

use crate::support::pipeline::{
    Agent, BRIEF, GOAL, Project, REQUEST, agent_or_once, text, turn_of,
};
use crate::support::{FakeServer, Recorded, Reply};
use flower::checkpoint::{Checkpoint, CheckpointKind, Checkpoints, DEFAULT_MAX_FILE_BYTES};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The coordinator sends two workers: the first writes new.txt and edits keep.txt, the
/// second runs `sed -i` on data.txt. The judge passes.
fn reply(req: &Recorded) -> Reply {
    match (agent_or_once(req), turn_of(req)) {
        (Agent::Clarifier, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/需求.md", "content": BRIEF}),
        ),
        (Agent::GoalSetter, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/目标.md", "content": GOAL}),
        ),
        (Agent::Coordinator, 0) => Reply::tool_use(
            "Task",
            json!({"description": "第一件", "prompt": "第一件:写 new.txt,改 keep.txt"}),
        ),
        (Agent::Coordinator, 1) => Reply::tool_use(
            "Task",
            json!({"description": "第二件", "prompt": "第二件:改 data.txt"}),
        ),
        (Agent::Worker, turn) if req.first_prompt().contains("第一件") => match turn {
            0 => Reply::tool_use(
                "Write",
                json!({"file_path": "new.txt", "content": "new\nlines\n"}),
            ),
            1 => Reply::tool_use(
                "Edit",
                json!({"file_path": "keep.txt", "old_string": "b\n", "new_string": "B\nB2\n"}),
            ),
            _ => Reply::text("第一件做完了。"),
        },
        (Agent::Worker, 0) => Reply::tool_use(
            "Bash",
            json!({"command": "sed -i 's/x/y/' data.txt && rm gone.txt && head -c 2100000 /dev/zero > big.bin"}),
        ),
        (Agent::Judge, _) => Reply::text("都在。\n判定:通过"),
        _ => Reply::text("好了。"),
    }
}

/// A project with files of its own (one ignored) and the copy of what it holds.
fn project() -> Project {
    let project = Project::new();
    let files: &[(&str, &[u8])] = &[
        ("keep.txt", b"a\nb\nc\n"),
        ("data.txt", b"x\nx2\n"),
        ("gone.txt", b"to be removed\n"),
        ("bin/run.sh", b"#!/bin/sh\necho hi\n"),
        ("blob.bin", &[0, 159, 146, 150, 255]),
        (".gitignore", b"*.log\n"),
        ("build.log", b"ignored\n"),
    ];
    for (rel, bytes) in files {
        let path = project.dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        project.dir.join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    project
}

/// Every file under `dir` but `runs/`: its bytes and mode.
fn tree(dir: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == "runs" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let mode = std::fs::metadata(&path).unwrap().permissions().mode();
                files.insert(rel, (std::fs::read(&path).unwrap(), mode & 0o777));
            }
        }
    }
    files
}

fn ok(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The number of the listed checkpoint whose line contains `label`.
fn point(listing: &str, label: &str) -> String {
    let line = listing
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label} in\n{listing}"));
    line.split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches('#')
        .to_string()
}

#[test]
fn rewind_to_before_a_step_restores_every_byte_of_write_edit_and_sed() {
    let project = project();
    let original = tree(&project.dir);
    let server = FakeServer::with_handler(|req, _| reply(req));
    ok(&project.run(&server, &[REQUEST]));
    assert_eq!(project.read("data.txt"), "y\ny2\n");
    assert_eq!(project.read("keep.txt"), "a\nB\nB2\nc\n");
    assert!(!project.dir.join("gone.txt").exists());

    let listing = ok(&project.run(&server, &["rewind"]));
    assert!(listing.contains("确认需求 开始前"), "{listing}");
    assert!(listing.contains("干活 开始前"), "{listing}");
    // The first worker's turn: one file added (2 lines), one modified (+2 -1).
    let first = listing
        .lines()
        .find(|l| l.contains("干活 第 1 轮后"))
        .unwrap();
    assert!(
        first.contains("新增 1 修改 1 删除 0 · +4 -1 行"),
        "{listing}"
    );
    let second = listing
        .lines()
        .find(|l| l.contains("干活 第 2 轮后"))
        .unwrap();
    assert!(
        second.contains("新增 1 修改 1 删除 1 · +2 -3 行"),
        "{listing}"
    );

    let diff = ok(&project.run(&server, &["diff", "干活"]));
    assert!(diff.contains("+y") && diff.contains("-x"), "{diff}");

    let requests = server.request_count();
    let out = ok(&project.run(&server, &["rewind", "干活"]));
    assert!(out.contains("干活:那时还没开始"), "{out}");
    let mut expected = original.clone();
    for (rel, body) in [("notes/需求.md", BRIEF), ("notes/目标.md", GOAL)] {
        expected.insert(rel.into(), (body.as_bytes().to_vec(), 0o644));
    }
    assert_eq!(tree(&project.dir), expected);
    assert_eq!(server.request_count(), requests, "a rewind asks no model");
    // Lineage forgets the step; the manifest records the rewind.
    assert!(
        project.json("runs/lineage.json")["steps"]
            .get("干活")
            .is_none()
    );
    let rows = project.manifest();
    assert_eq!(rows.last().unwrap()["error"], "rewound");

    // Before the first step: the workspace as it was, every byte and mode.
    ok(&project.run(&server, &["rewind", "确认需求"]));
    assert_eq!(tree(&project.dir), original);
}

#[test]
fn rewind_to_a_mid_step_turn_forks_the_conversation_and_flower_continues_the_fork() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| reply(req));
    ok(&project.run(&server, &[REQUEST]));
    let old = project.json("runs/lineage.json")["steps"]["干活"].clone();
    let listing = ok(&project.run(&server, &["rewind"]));
    let n = point(&listing, "干活 第 1 轮后");

    let out = ok(&project.run(&server, &["rewind", &n]));
    assert!(out.contains("干活:对话从这里分叉"), "{out}");
    assert_eq!(project.read("keep.txt"), "a\nB\nB2\nc\n");
    assert_eq!(project.read("data.txt"), "x\nx2\n");
    assert!(project.dir.join("gone.txt").exists());
    let fork = project.json("runs/lineage.json")["steps"]["干活"].clone();
    assert_ne!(fork, old);

    let before = server.request_count();
    ok(&project.run(&server, &[]));
    let requests = server.requests();
    let coordinator: Vec<&Recorded> = requests[before..]
        .iter()
        .filter(|r| agent_or_once(r) == Agent::Coordinator)
        .collect();
    // The fork holds the first Task and its result, not the second.
    let first = coordinator.first().expect("the next flower continues 干活");
    assert_eq!(turn_of(first), 1);
    let said = serde_json::to_string(first.messages()).unwrap();
    assert!(
        said.contains("第一件") && !said.contains("第二件"),
        "{said}"
    );
    assert_eq!(project.read("data.txt"), "y\ny2\n");
    assert_eq!(project.json("runs/lineage.json")["steps"]["干活"], fork);
}

#[test]
fn a_rewind_killed_mid_restore_is_finished_by_the_next_flower() {
    let project = project();
    let original = tree(&project.dir);
    let server = FakeServer::with_handler(|req, _| reply(req));
    ok(&project.run(&server, &[REQUEST]));
    let marker = project.home.join("paused");
    let mut child = project
        .command(&server, &["rewind", "确认需求"])
        .env(
            "FLOWER_TEST_REWIND_PAUSE",
            format!("2:{}", marker.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the restore never paused");
        assert!(child.try_wait().unwrap().is_none(), "exited before pausing");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Half restored now: the journal is there, and the next flower command finishes it.
    assert!(project.dir.join("runs/checkpoints/journal.json").exists());
    assert_ne!(tree(&project.dir), original);
    ok(&project.run(&server, &["rewind"]));
    assert!(!project.dir.join("runs/checkpoints/journal.json").exists());
    assert_eq!(tree(&project.dir), original);
    // The conversation part was finished too: the rewind's own journal is gone and
    // its manifest row written.
    assert!(!project.dir.join("runs/checkpoints/rewind.json").exists());
    let rows = project.manifest();
    assert_eq!(rows.last().unwrap()["error"], "rewound");
}

#[test]
fn the_rewind_pause_is_a_validated_setting_of_the_process_environment_only() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| reply(req));
    ok(&project.run(&server, &[REQUEST]));
    let requests = server.request_count();
    // A bad value is exit 2 naming the variable, before anything is restored.
    let before = tree(&project.dir);
    let out = project
        .command(&server, &["rewind", "确认需求"])
        .env("FLOWER_TEST_REWIND_PAUSE", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("FLOWER_TEST_REWIND_PAUSE"));
    assert_eq!(tree(&project.dir), before);
    // A settings file (which an agent may write) cannot make a rewind hang.
    let marker = project.home.join("paused");
    let user = project.home.join(".claude/settings.json");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    let env = json!({"env": {"FLOWER_TEST_REWIND_PAUSE": format!("1:{}", marker.display())}});
    std::fs::write(&user, env.to_string()).unwrap();
    ok(&project.run(&server, &["rewind", "确认需求"]));
    assert!(!marker.exists());
    assert_eq!(server.request_count(), requests);
}

/// Spawns `flower rewind POINT` with the test pause `pause` (`N:` or `fork:`), waits
/// for its marker and kills it.
fn kill_paused_rewind(project: &Project, server: &FakeServer, point: &str, pause: &str) {
    let marker = project.home.join("paused");
    let mut child = project
        .command(server, &["rewind", point])
        .env(
            "FLOWER_TEST_REWIND_PAUSE",
            format!("{pause}{}", marker.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the rewind never paused");
        assert!(child.try_wait().unwrap().is_none(), "exited before pausing");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn a_rewind_killed_in_its_conversation_part_is_finished_before_the_next_flower_continues() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| reply(req));
    ok(&project.run(&server, &[REQUEST]));
    let old = project.json("runs/lineage.json")["steps"]["干活"].clone();
    let listing = ok(&project.run(&server, &["rewind"]));
    let n = point(&listing, "干活 第 1 轮后");
    let rewound_rows = |project: &Project| {
        let rows = project.manifest();
        rows.iter().filter(|r| r["error"] == "rewound").count()
    };

    kill_paused_rewind(&project, &server, &n, "fork:");
    // Killed with the fork written and lineage not yet pointing at it: a mix on disk,
    // which the rewind's journal names.
    assert!(project.dir.join("runs/checkpoints/rewind.json").exists());
    assert_eq!(project.json("runs/lineage.json")["steps"]["干活"], old);
    assert_eq!(rewound_rows(&project), 0);
    assert_eq!(project.read("data.txt"), "x\nx2\n");

    // The next flower finishes the rewind first, then continues the fork.
    let before = server.request_count();
    let out = project.run(&server, &[]);
    ok(&out);
    assert!(
        !project.dir.join("runs/checkpoints/rewind.json").exists(),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(rewound_rows(&project), 1, "the rewind is recorded once");
    let requests = server.requests();
    let first = requests[before..]
        .iter()
        .find(|r| agent_or_once(r) == Agent::Coordinator)
        .expect("the next flower continues 干活");
    assert_eq!(turn_of(first), 1);
    let said = serde_json::to_string(first.messages()).unwrap();
    assert!(
        said.contains("第一件") && !said.contains("第二件"),
        "{said}"
    );
    assert_ne!(project.json("runs/lineage.json")["steps"]["干活"], old);
}

#[test]
fn a_workspace_the_person_changed_refuses_until_told_to_discard() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| reply(req));
    ok(&project.run(&server, &[REQUEST]));
    std::fs::write(project.dir.join("mine.txt"), "the person's\n").unwrap();
    let out = project.run(&server, &["rewind", "干活"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("flower 之外的改动") && stderr.contains("mine.txt"),
        "{stderr}"
    );
    assert_eq!(project.read("mine.txt"), "the person's\n");
    assert_eq!(project.read("data.txt"), "y\ny2\n");

    ok(&project.run(&server, &["rewind", "干活", "--discard"]));
    assert!(!project.dir.join("mine.txt").exists());
    // Not lost: the state before the rewind is a checkpoint of its own.
    let listing = ok(&project.run(&server, &["rewind"]));
    let n = point(&listing, "回退前的样子");
    ok(&project.run(&server, &["rewind", &n, "--files-only"]));
    assert_eq!(project.read("mine.txt"), "the person's\n");
}

#[test]
fn files_over_the_size_cap_are_neither_kept_nor_removed_and_a_bad_cap_is_refused() {
    let project = project();
    let server = FakeServer::with_handler(|req, _| reply(req));
    let run = |args: &[&str]| {
        project
            .command(&server, args)
            .env("FLOWER_CHECKPOINT_MAX_FILE_MB", "1")
            .output()
            .unwrap()
    };
    ok(&run(&[REQUEST]));
    assert_eq!(
        std::fs::metadata(project.dir.join("big.bin"))
            .unwrap()
            .len(),
        2_100_000
    );
    ok(&run(&["rewind", "干活"]));
    assert_eq!(project.read("data.txt"), "x\nx2\n");
    // Over 1 MiB: never in a checkpoint, so the rewind leaves it where it is.
    assert!(project.dir.join("big.bin").exists());

    let requests = server.request_count();
    let out = project
        .command(&server, &["rewind"])
        .env("FLOWER_CHECKPOINT_MAX_FILE_MB", "lots")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("要一个正整数"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(server.request_count(), requests);
}

/// `git add -A && git write-tree` in `ws` with a git directory and index of the test's
/// own (`runs/` left out as flower leaves it out).
fn git_tree(ws: &Path, scratch: &Path) -> String {
    let git_dir = scratch.join("git");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "core.autocrlf=false", "-c", "core.filemode=true"])
            .args(args)
            .env("GIT_DIR", &git_dir)
            .env("GIT_WORK_TREE", ws)
            .env("GIT_INDEX_FILE", scratch.join("index"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .current_dir(ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    if !git_dir.exists() {
        let init = std::process::Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&git_dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap();
        assert!(init.success());
        std::fs::write(git_dir.join("info/exclude"), "/runs/\n").unwrap();
    }
    // A fresh index each time: git keeps a tracked file that became ignored.
    let _ = std::fs::remove_file(scratch.join("index"));
    git(&["add", "-A"]);
    git(&["write-tree"])
}

/// A workspace `ws` in a temporary home whose checkpoints are compared with the trees
/// git writes of it (its git directory and index kept in `scratch`, beside `ws`).
struct BesideGit {
    home: tempfile::TempDir,
    ws: PathBuf,
    scratch: PathBuf,
}

impl BesideGit {
    fn new() -> BesideGit {
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("ws");
        let scratch = home.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        BesideGit { home, ws, scratch }
    }

    /// Writes `ws/rel`, its directories made.
    fn write(&self, rel: &str, body: &str) {
        let path = self.ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }

    fn git_tree(&self) -> String {
        git_tree(&self.ws, &self.scratch)
    }

    /// `ws`'s checkpoints, as a process opens them (`runs/` inside `ws`).
    fn open(&self) -> Checkpoints {
        Checkpoints::open(&self.ws, &self.ws.join("runs"), DEFAULT_MAX_FILE_BYTES).unwrap()
    }
}

/// The attempt's checkpoint, the first of a step.
fn attempt(checkpoints: &Checkpoints) -> Checkpoint {
    checkpoints
        .record(CheckpointKind::Attempt, "干活", None, 0)
        .unwrap()
        .unwrap()
}

#[test]
fn a_snapshot_written_in_process_is_the_tree_git_itself_writes() {
    use std::os::unix::fs::PermissionsExt as _;
    let beside = BesideGit::new();
    let ws = &beside.ws;
    let write = |rel: &str, body: &str| beside.write(rel, body);
    // Names whose order differs between a directory walk and git's trees.
    for rel in [
        "a.txt",
        "a/b.txt",
        "a-b/c.txt",
        "a/b/c/d.txt",
        "a0",
        "名字.txt",
    ] {
        write(rel, &format!("{rel}\n"));
    }
    write("exec.sh", "#!/bin/sh\n");
    std::fs::set_permissions(ws.join("exec.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a.txt", ws.join("link")).unwrap();
    write(".gitignore", "*.log\n!keep.log\nbuild/\n");
    write("x.log", "ignored\n");
    write("keep.log", "kept\n");
    write("build/out.o", "ignored\n");
    write("sub/.gitignore", "*.tmp\n");
    write("sub/y.tmp", "ignored\n");
    write("sub/z.txt", "kept\n");
    write("runs/sessions.db", "never kept\n");

    let checkpoints = beside.open();
    let first = attempt(&checkpoints);
    assert_eq!(first.tree, beside.git_tree());

    // Changed, removed, a mode changed, a new directory, a new ignored file: the trees
    // on their paths written again, the others reused.
    write("a/b.txt", "changed\n");
    std::fs::remove_file(ws.join("a-b/c.txt")).unwrap();
    std::fs::set_permissions(ws.join("exec.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
    write("q/r/s.txt", "new\n");
    write("q/t.log", "ignored\n");
    let second = checkpoints.snapshot().unwrap();
    assert_ne!(second, first.tree);
    assert_eq!(second, beside.git_tree());
    let turn = |n| {
        checkpoints
            .record(CheckpointKind::Turn, "干活", Some("s"), n)
            .unwrap()
    };
    assert_eq!(turn(1).unwrap().tree, second);
    assert!(turn(2).is_none(), "nothing changed since: not listed");

    // Another process (the index read back): the same tree, and git reads its objects.
    drop(checkpoints);
    write("a.txt", "also changed\n");
    let checkpoints = beside.open();
    let third = checkpoints.snapshot().unwrap();
    assert_eq!(third, beside.git_tree());
    let patch = String::from_utf8(checkpoints.patch(&first.tree, &third).unwrap()).unwrap();
    assert!(
        patch.contains("+also changed") && patch.contains("+changed"),
        "{patch}"
    );
}

/// Issue #44's speed: a turn's checkpoint looks only at what the change feed (inotify)
/// reported. Every kind of change a turn makes must still be in its tree: the tree is
/// compared with git's own after each, and with a full walk's.
#[test]
fn turn_checkpoints_from_the_change_feed_are_the_trees_git_writes() {
    use std::os::unix::fs::PermissionsExt as _;
    let beside = BesideGit::new();
    let ws = &beside.ws;
    let write = |rel: &str, body: &str| beside.write(rel, body);
    for d in 0..5 {
        for f in 0..20 {
            write(&format!("d{d}/f{f}.txt"), &format!("{d} {f}\n"));
        }
    }
    write(".gitignore", "*.log\nbuild/\n");
    write("d1/.gitignore", "*.tmp\n!keep.log\n");
    write("exec.sh", "#!/bin/sh\n");
    let outside = beside.home.path().join("outside.txt");
    std::fs::write(&outside, "linked 1\n").unwrap();

    let checkpoints = beside.open();
    let first = attempt(&checkpoints);
    assert!(checkpoints.last_scan().full_walk);
    assert_eq!(first.tree, beside.git_tree());

    let mut turn = 0;
    // After each change: the turn's tree is git's; `feed`: found from the feed alone.
    let mut check = |what: &str, feed: bool| {
        turn += 1;
        let taken = checkpoints
            .record(CheckpointKind::Turn, "干活", Some("s"), turn)
            .unwrap();
        let scan = checkpoints.last_scan();
        let tree = taken.map(|c| c.tree);
        let want = beside.git_tree();
        assert_eq!(scan.full_walk, !feed, "{what}: {scan:?}");
        if feed {
            assert!(scan.looked_at < 10, "{what}: {scan:?}");
        }
        let full = checkpoints.snapshot().unwrap();
        assert_eq!(full, want, "{what}: a full walk");
        if let Some(tree) = tree {
            assert_eq!(tree, want, "{what}");
        }
    };
    let edit = |rel: &str| {
        let path = ws.join(rel);
        let mut body = std::fs::read_to_string(&path).unwrap();
        body.push_str("more\n");
        std::fs::write(&path, body).unwrap();
    };
    edit("d0/f1.txt");
    edit("d3/f19.txt");
    check("files edited in place", true);
    let sed = std::process::Command::new("sed")
        .args(["-i", "s/2/two/", "d2/f2.txt"])
        .current_dir(ws)
        .status()
        .unwrap();
    assert!(sed.success());
    check("sed -i (a new file renamed over)", true);
    write("d4/new.txt", "new\n");
    write("d4/x.log", "ignored\n");
    write("d1/y.tmp", "ignored below\n");
    write("d1/keep.log", "kept below\n");
    std::fs::remove_file(ws.join("d0/f0.txt")).unwrap();
    std::fs::set_permissions(ws.join("exec.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("d0/f1.txt", ws.join("link")).unwrap();
    check("new, ignored, removed, chmod, symlink", true);
    // The same size again at once: the racily clean rule still reads it.
    write("d4/new.txt", "NEW\n");
    check("the same size again", true);
    write("n/m/k/deep.txt", "nested\n");
    check("a new nested directory: a full walk", false);
    write("n/m/k/deep.txt", "nested, edited\n");
    check("an edit in the new directory", true);
    std::fs::rename(ws.join("d2"), ws.join("moved")).unwrap();
    check("a directory renamed: a full walk", false);
    edit("moved/f3.txt");
    check("an edit in the renamed directory", true);
    write(".gitignore", "*.log\nbuild/\nd3/\n");
    check("a .gitignore changed: a full walk", false);
    std::fs::hard_link(&outside, ws.join("d4/hard.txt")).unwrap();
    check("a hard link to a file outside", true);
    std::fs::write(&outside, "linked 2, longer\n").unwrap();
    check("written through the link outside", true);
    check("nothing changed", true);
}

/// A background command's writes after the turn that started it are a checkpoint of
/// their own, taken when it ends (#44's "a background command's lifetime"), and
/// `flower rewind` takes them back.
#[test]
fn a_file_a_background_command_wrote_is_restorable_by_rewind() {
    let project = project();
    let ws = project.dir.clone();
    let list = ws.join("runs/checkpoints/list.jsonl");
    let workspace = ws.clone();
    let wait_for = |what: &str, ready: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready() {
            assert!(Instant::now() < deadline, "never happened: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let server = FakeServer::with_handler(move |req, _| match (agent_or_once(req), turn_of(req)) {
        (Agent::Coordinator, 0) => Reply::tool_use(
            "Task",
            json!({"description": "后台", "prompt": "在后台生成 made.txt"}),
        ),
        // The command writes only once this turn's checkpoint is taken (`go` appears).
        (Agent::Worker, 0) => Reply::tool_use(
            "Bash",
            json!({
                "command": "while [ ! -e go ]; do sleep 0.02; done; printf 'from the background\\n' > made.txt",
                "run_in_background": true,
                "description": "后台生成",
            }),
        ),
        (Agent::Worker, 1) => {
            std::fs::write(workspace.join("go"), "").unwrap();
            wait_for("a checkpoint at the command's end", &|| {
                std::fs::read_to_string(&list).is_ok_and(|l| l.contains("\"background\""))
            });
            Reply::text("生成好了。")
        }
        (Agent::Judge, _) => Reply::text("都在。\n判定:通过"),
        _ => reply(req),
    });
    ok(&project.run(&server, &[REQUEST]));
    assert_eq!(project.read("made.txt"), "from the background\n");

    let listing = ok(&project.run(&server, &["rewind"]));
    let line = listing
        .lines()
        .find(|l| l.contains("后台命令") && l.contains("结束后"))
        .unwrap_or_else(|| panic!("{listing}"));
    // made.txt, and the go file the test wrote for it.
    assert!(
        line.contains("干活") && line.contains("新增 2"),
        "{listing}"
    );
    let n = point(&listing, "后台命令");

    // Back to before the step: made.txt is gone; then to the command's end: it is back.
    ok(&project.run(&server, &["rewind", "干活"]));
    assert!(!ws.join("made.txt").exists());
    ok(&project.run(&server, &["rewind", &n, "--files-only"]));
    assert_eq!(project.read("made.txt"), "from the background\n");
}
