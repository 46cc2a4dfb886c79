//! `runs/lineage.json`: round trip, atomic writes, plain names only, "对不上就当没有",
//! swallowed write errors, and `/new`'s archive.

use flower::continuity::lineage::{Lineage, LineageFile, is_plain_step_name};
use flower::continuity::manifest::{judge_name, retry_name, round_name};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// A workspace and a run dir beside it, both inside one temp dir.
pub(crate) struct Fixture {
    pub(crate) _tmp: tempfile::TempDir,
    pub(crate) workspace: PathBuf,
    pub(crate) run_dir: PathBuf,
}

pub(crate) fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let workspace = tmp.path().join("proj");
    fs::create_dir(&workspace).unwrap();
    let run_dir = workspace.join("runs");
    Fixture {
        workspace,
        run_dir,
        _tmp: tmp,
    }
}

pub(crate) fn all_alive(_: &str) -> bool {
    true
}

pub(crate) fn file_of(run_dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(run_dir.join("lineage.json")).unwrap()).unwrap()
}

#[test]
fn round_trip_across_loads() {
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert_eq!(l.woke(), 0);
    assert!(l.steps().is_empty());
    assert_eq!(l.wake(), 1);
    assert!(l.remember("确认需求", "sess-a"));
    assert!(l.remember("干活", "sess-b"));
    assert!(
        l.remember("干活", "sess-c"),
        "a successor replaces the step's session"
    );

    let again = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert_eq!(again.woke(), 1);
    assert_eq!(again.session("确认需求"), Some("sess-a"));
    assert_eq!(again.session("干活"), Some("sess-c"));
    assert_eq!(again.session("判定"), None);
    assert_eq!(again.path(), f.run_dir.join("lineage.json"));

    // The on-disk shape is the spec's, with the canonical workspace path.
    let json = file_of(&f.run_dir);
    let canonical = fs::canonicalize(&f.workspace).unwrap();
    assert_eq!(json["workspace"], canonical.to_str().unwrap());
    assert_eq!(json["woke"], 1);
    assert_eq!(
        json["steps"],
        serde_json::json!({"确认需求": "sess-a", "干活": "sess-c"})
    );
    assert_eq!(json.as_object().unwrap().len(), 3);

    let read = Lineage::read(&f.run_dir, &f.workspace).unwrap();
    assert_eq!(read.woke, 1);
    assert_eq!(read.steps.len(), 2);
}

#[test]
fn woke_counts_each_wake() {
    let f = fixture();
    for n in 1..=3 {
        let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
        assert_eq!(l.woke(), n - 1);
        assert_eq!(l.wake(), n);
    }
    assert_eq!(file_of(&f.run_dir)["woke"], 3);
}

#[test]
fn workspace_given_by_another_spelling_still_matches() {
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    l.remember("干活", "s1");
    let dotted = f.workspace.join(".").join("..").join("proj");
    let again = Lineage::load(&f.run_dir, &dotted, all_alive);
    assert_eq!(again.session("干活"), Some("s1"));
}

#[test]
fn saves_are_atomic_and_leave_no_tmp() {
    let f = fixture();
    fs::create_dir_all(&f.run_dir).unwrap();
    // Garbage from a writer killed mid-write must not break loading or the next save.
    fs::write(
        f.run_dir.join("lineage.json.tmp"),
        b"{\"workspace\": \"/x\", \"wo",
    )
    .unwrap();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert!(l.steps().is_empty());
    assert!(l.remember("干活", "s1"));
    assert!(
        !f.run_dir.join("lineage.json.tmp").exists(),
        "the tmp file is renamed, not left"
    );
    let names: Vec<_> = fs::read_dir(&f.run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("lineage.json")]);
    assert_eq!(
        Lineage::load(&f.run_dir, &f.workspace, all_alive).session("干活"),
        Some("s1")
    );
}

#[test]
fn save_creates_the_run_dir() {
    let f = fixture();
    let deep = f.run_dir.join("a").join("b");
    let mut l = Lineage::load(&deep, &f.workspace, all_alive);
    assert!(l.remember("干活", "s1"));
    assert!(deep.join("lineage.json").is_file());
}

#[test]
fn concurrent_saves_never_leave_half_a_file() {
    // Threads stand in for processes here: each save opens the file anew, so the flock
    // on the tmp file serialises them exactly as it would across processes.
    let f = fixture();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (run_dir, ws) = (f.run_dir.clone(), f.workspace.clone());
            std::thread::spawn(move || {
                let mut l = Lineage::load(&run_dir, &ws, all_alive);
                for i in 0..50 {
                    assert!(l.remember(&format!("step{t}"), &format!("s{i}")));
                    // Every read in between sees a whole file.
                    assert!(Lineage::read(&run_dir, &ws).is_some());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let file = Lineage::read(&f.run_dir, &f.workspace).expect("a whole, valid file");
    assert!(file.steps.values().any(|v| v == "s49"));
    assert!(!f.run_dir.join("lineage.json.tmp").exists());
}

#[test]
fn suffixed_names_never_enter() {
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    for name in [
        retry_name("干活", 2),
        round_name("干活", 3),
        judge_name("干活", 1),
        String::new(),
    ] {
        assert!(!is_plain_step_name(&name), "{name}");
        assert!(!l.remember(&name, "s-x"), "{name}");
    }
    assert!(is_plain_step_name("干活"));
    assert!(is_plain_step_name("确认需求"));
    assert!(l.steps().is_empty());
    assert!(
        !f.run_dir.join("lineage.json").exists(),
        "nothing was written for them"
    );

    // A hand-edited file with suffixed names: those are dropped on load.
    fs::create_dir_all(&f.run_dir).unwrap();
    let canonical = fs::canonicalize(&f.workspace).unwrap();
    let mut steps = BTreeMap::new();
    steps.insert("干活".to_string(), "s1".to_string());
    steps.insert("干活#retry2".to_string(), "s2".to_string());
    steps.insert("干活·判定#1".to_string(), "s3".to_string());
    let file = LineageFile {
        workspace: canonical.to_string_lossy().into(),
        woke: 2,
        steps,
        store: None,
        run_key: None,
    };
    fs::write(
        f.run_dir.join("lineage.json"),
        serde_json::to_vec(&file).unwrap(),
    )
    .unwrap();
    let l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert_eq!(l.steps().keys().collect::<Vec<_>>(), vec!["干活"]);
    assert_eq!(l.woke(), 2);
}

#[test]
fn dead_sessions_are_dropped() {
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    l.wake();
    l.remember("确认需求", "alive-1");
    l.remember("干活", "gone-2");
    let asked = std::cell::RefCell::new(Vec::new());
    let l = Lineage::load(&f.run_dir, &f.workspace, |id: &str| {
        asked.borrow_mut().push(id.to_string());
        id.starts_with("alive")
    });
    assert_eq!(l.session("确认需求"), Some("alive-1"));
    assert_eq!(l.session("干活"), None);
    assert_eq!(l.woke(), 1, "woke survives; only dead sessions go");
    assert_eq!(
        asked.borrow().len(),
        2,
        "every remembered session is checked"
    );
}

#[test]
fn another_workspace_means_no_lineage() {
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    l.wake();
    l.remember("干活", "s1");

    // The whole directory copied elsewhere: the file now names the old place.
    let copy = f._tmp.path().join("copy");
    fs::create_dir_all(copy.join("runs")).unwrap();
    fs::copy(
        f.run_dir.join("lineage.json"),
        copy.join("runs/lineage.json"),
    )
    .unwrap();
    let moved = Lineage::load(&copy.join("runs"), &copy, all_alive);
    assert_eq!(moved.woke(), 0);
    assert!(moved.steps().is_empty());
    assert!(Lineage::read(&copy.join("runs"), &copy).is_none());

    // And the next save there works, for the new workspace.
    let mut moved = moved;
    assert!(moved.remember("干活", "s9"));
    let json = file_of(&copy.join("runs"));
    assert_eq!(
        json["workspace"],
        fs::canonicalize(&copy).unwrap().to_str().unwrap()
    );
}

/// Writes `lineage.json` from a template in which `WS` stands for this fixture's
/// workspace path as a JSON string, so that only the defect a case names is wrong.
fn write_template(f: &Fixture, template: &[u8]) {
    fs::create_dir_all(&f.run_dir).unwrap();
    let ws =
        serde_json::to_string(fs::canonicalize(&f.workspace).unwrap().to_str().unwrap()).unwrap();
    let bytes = match std::str::from_utf8(template) {
        Ok(text) => text.replace("WS", &ws).into_bytes(),
        Err(_) => template.to_vec(),
    };
    fs::write(f.run_dir.join("lineage.json"), bytes).unwrap();
}

#[test]
fn a_hand_written_file_of_the_right_shape_loads() {
    // The control for the broken cases below: the same template, without a defect.
    let f = fixture();
    write_template(
        &f,
        r#"{"workspace": WS, "woke": 2, "steps": {"干活": "s1"}, "later": 1}"#.as_bytes(),
    );
    let l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert_eq!(l.woke(), 2);
    assert_eq!(l.session("干活"), Some("s1"));
}

/// Each broken file loads as an empty lineage, silently, and the next save replaces it.
#[test]
fn broken_files_mean_no_lineage() {
    let garbage: Vec<u8> = (0..=255u8).rev().cycle().take(4096).collect();
    let cases: Vec<(&str, &[u8])> = vec![
        ("empty file", b""),
        ("whitespace", b"  \n"),
        (
            "truncated",
            r#"{"workspace": WS, "woke": 2, "steps": {"干活": "s"#.as_bytes(),
        ),
        (
            "woke is a string",
            br#"{"workspace": WS, "woke": "2", "steps": {}}"#,
        ),
        (
            "woke negative",
            br#"{"workspace": WS, "woke": -1, "steps": {}}"#,
        ),
        (
            "woke fractional",
            br#"{"workspace": WS, "woke": 1.5, "steps": {}}"#,
        ),
        (
            "steps is a list",
            br#"{"workspace": WS, "woke": 2, "steps": ["s1"]}"#,
        ),
        (
            "session id a number",
            r#"{"workspace": WS, "woke": 2, "steps": {"干活": 7}}"#.as_bytes(),
        ),
        (
            "workspace a number",
            br#"{"workspace": 7, "woke": 2, "steps": {}}"#,
        ),
        (
            "no workspace",
            r#"{"woke": 2, "steps": {"干活": "s1"}}"#.as_bytes(),
        ),
        ("top level array", b"[1, 2, 3]"),
        ("null", b"null"),
        ("binary garbage", &garbage),
        (
            "invalid utf-8 inside",
            b"{\"workspace\": \"\xff\xfe\", \"woke\": 1, \"steps\": {}}",
        ),
    ];
    for (name, template) in cases {
        let f = fixture();
        write_template(&f, template);
        let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
        assert_eq!(l.woke(), 0, "{name}");
        assert!(l.steps().is_empty(), "{name}");
        assert!(Lineage::read(&f.run_dir, &f.workspace).is_none(), "{name}");
        assert_eq!(l.wake(), 1, "{name}");
        assert!(l.remember("干活", "fresh"), "{name}: the next save works");
        assert_eq!(
            Lineage::load(&f.run_dir, &f.workspace, all_alive).session("干活"),
            Some("fresh"),
            "{name}"
        );
    }
}

#[test]
fn a_directory_named_lineage_json_is_moved_aside_not_deleted() {
    let f = fixture();
    fs::create_dir_all(f.run_dir.join("lineage.json")).unwrap();
    fs::write(f.run_dir.join("lineage.json/keep.txt"), b"mine").unwrap();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert!(l.steps().is_empty());
    assert!(Lineage::read(&f.run_dir, &f.workspace).is_none());
    assert!(l.remember("干活", "s1"), "the next save works");
    assert_eq!(
        Lineage::load(&f.run_dir, &f.workspace, all_alive).session("干活"),
        Some("s1")
    );
    let aside: Vec<_> = fs::read_dir(&f.run_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("lineage.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(fs::read(aside[0].join("keep.txt")).unwrap(), b"mine");
}

#[test]
fn an_unwritable_run_dir_does_not_stop_the_run() {
    let f = fixture();
    // A run dir under a regular file cannot be created, even by root.
    let blocker = f.workspace.join("not-a-dir");
    fs::write(&blocker, b"x").unwrap();
    let run_dir = blocker.join("runs");
    let mut l = Lineage::load(&run_dir, &f.workspace, all_alive);
    assert_eq!(l.wake(), 1, "wake still counts");
    assert!(
        !l.remember("干活", "s1"),
        "reports that nothing was written"
    );
    assert_eq!(l.session("干活"), Some("s1"), "the pair is kept in memory");
    assert!(l.save().is_err(), "save itself does report the error");
}

#[test]
fn a_read_only_run_dir_is_swallowed() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    fs::create_dir_all(&f.run_dir).unwrap();
    fs::set_permissions(&f.run_dir, fs::Permissions::from_mode(0o555)).unwrap();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    let written = l.remember("干活", "s1");
    let probe = fs::write(f.run_dir.join("probe"), b"").is_ok();
    // Root ignores the mode; otherwise the write fails and is swallowed.
    assert_eq!(written, probe);
    assert_eq!(l.session("干活"), Some("s1"));
    fs::set_permissions(&f.run_dir, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn read_writes_nothing() {
    let f = fixture();
    assert!(Lineage::read(&f.run_dir, &f.workspace).is_none());
    let _ = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert!(
        !f.run_dir.exists(),
        "neither read nor load creates anything"
    );
}

#[test]
fn archive_moves_the_three_files_and_resets() {
    let f = fixture();
    let notes = f.workspace.join("notes");
    fs::create_dir_all(&notes).unwrap();
    fs::write(notes.join("需求.md"), "## 目标\nx\n").unwrap();
    fs::write(notes.join("目标.md"), "- [ ] a\n").unwrap();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    l.wake();
    l.wake();
    l.remember("干活", "s1");
    let before = fs::read(f.run_dir.join("lineage.json")).unwrap();

    let into = notes.join("archive").join("20260907-015240");
    let missing = notes.join("交接书.md");
    l.archive(
        &into,
        &[notes.join("需求.md"), notes.join("目标.md"), missing],
    )
    .unwrap();

    assert_eq!(
        fs::read(into.join("lineage.json")).unwrap(),
        before,
        "moved verbatim"
    );
    assert_eq!(
        fs::read_to_string(into.join("需求.md")).unwrap(),
        "## 目标\nx\n"
    );
    assert_eq!(
        fs::read_to_string(into.join("目标.md")).unwrap(),
        "- [ ] a\n"
    );
    assert!(
        !into.join("交接书.md").exists(),
        "missing extras are skipped"
    );
    assert!(!f.run_dir.join("lineage.json").exists());
    assert!(!notes.join("需求.md").exists());
    assert!(!notes.join("目标.md").exists());
    assert_eq!(l.woke(), 0);
    assert!(l.steps().is_empty());
    assert!(
        !f.run_dir.join("lineage.json").exists(),
        "not re-written until the next write"
    );

    assert_eq!(l.wake(), 1);
    let fresh = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert_eq!(fresh.woke(), 1);
    assert!(fresh.steps().is_empty());
}

#[test]
fn archive_never_overwrites_an_archive() {
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    l.remember("干活", "s1");
    let into = f.workspace.join("notes/archive/x");
    fs::create_dir_all(&into).unwrap();
    fs::write(into.join("lineage.json"), b"older").unwrap();
    let err = l.archive(&into, &[]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(fs::read(into.join("lineage.json")).unwrap(), b"older");
    assert!(f.run_dir.join("lineage.json").exists(), "nothing moved");
    assert_eq!(l.session("干活"), Some("s1"), "nothing reset");
}

#[test]
fn archive_without_a_file_still_resets() {
    let f = fixture();
    let mut l = Lineage::empty(&f.run_dir, &f.workspace);
    l.wake();
    fs::remove_file(f.run_dir.join("lineage.json")).unwrap();
    l.archive(&f.workspace.join("notes/archive/y"), &[])
        .unwrap();
    assert_eq!(l.woke(), 0);
    assert!(f.workspace.join("notes/archive/y").is_dir());
}

#[test]
fn lineage_is_send_and_sync() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Lineage>();
    shareable::<std::sync::Arc<std::sync::Mutex<Lineage>>>();
}

/// Attempt names print and parse in the spec's four forms, and only the plain form is
/// a step name; a `#` alone does not make an attempt name.
#[test]
fn attempt_names_round_trip() {
    use flower::continuity::attempt::{AttemptKind, AttemptName};
    for (name, step, kind) in [
        ("干活", "干活", AttemptKind::First),
        ("干活#retry2", "干活", AttemptKind::Retry(2)),
        ("干活#round3", "干活", AttemptKind::Round(3)),
        ("干活·判定#1", "干活", AttemptKind::Judge(1)),
        ("C#", "C#", AttemptKind::First),
        ("写 C# 代码#retry10", "写 C# 代码", AttemptKind::Retry(10)),
        ("干活#retry", "干活#retry", AttemptKind::First),
        ("干活#retryx", "干活#retryx", AttemptKind::First),
    ] {
        let parsed = AttemptName::parse(name);
        assert_eq!((parsed.step(), parsed.kind()), (step, kind), "{name}");
        assert_eq!(parsed.to_string(), name);
        assert_eq!(
            is_plain_step_name(name),
            kind == AttemptKind::First,
            "{name}"
        );
    }
}
