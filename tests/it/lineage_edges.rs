//! Lineage seams that mutation testing showed unpinned (issue #16): the accessors, a
//! shared run's catch-up after a failed database write and its wake count, a file that
//! names the workspace by another spelling, the `-N` of a second and third aside in one
//! second, and `/new`'s archive across filesystems.
//!
//! The shared-run tests go through an in-memory [`RunStateStore`] whose writes can be
//! made to fail, standing in for PostgreSQL (`store_shared_run` tests the real one).

use crate::lineage::{Fixture, all_alive, file_of, fixture};
use flower::continuity::lineage::Lineage;
use flower::continuity::shared::{HoldResult, RunStateStore, SharedRun};
use flower::stores::StoreError;
use flower::stores::postgres::{OnLeaseLost, RunRow};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One run's state, as the database would keep it.
#[derive(Default)]
struct FakeRunStore {
    state: Mutex<RunState>,
}

#[derive(Default)]
struct RunState {
    row: Option<RunRow>,
    woke: u64,
    steps: BTreeMap<String, String>,
    /// Every `remember` that reached the database, in order.
    writes: Vec<(String, String)>,
    /// The database is away: every write fails.
    away: bool,
}

impl FakeRunStore {
    fn set_away(&self, away: bool) {
        self.state.lock().unwrap().away = away;
    }

    fn steps(&self) -> BTreeMap<String, String> {
        self.state.lock().unwrap().steps.clone()
    }

    fn writes(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().writes.clone()
    }

    fn write(&self) -> Result<std::sync::MutexGuard<'_, RunState>, StoreError> {
        let state = self.state.lock().unwrap();
        if state.away {
            return Err(StoreError::Unavailable {
                path: PathBuf::from("fake"),
                why: "the database is away".into(),
                source: None,
            });
        }
        Ok(state)
    }
}

impl RunStateStore for FakeRunStore {
    fn find_run(&self, _run_key: &str) -> Result<Option<RunRow>, StoreError> {
        Ok(self.state.lock().unwrap().row.clone())
    }

    fn register_run(&self, row: &RunRow) -> Result<RunRow, StoreError> {
        let mut state = self.write()?;
        Ok(state.row.get_or_insert_with(|| row.clone()).clone())
    }

    fn lineage(&self, _run_key: &str) -> Result<(u64, BTreeMap<String, String>), StoreError> {
        let state = self.state.lock().unwrap();
        Ok((state.woke, state.steps.clone()))
    }

    fn remember(&self, _run_key: &str, step: &str, session_id: &str) -> Result<(), StoreError> {
        let mut state = self.write()?;
        state.steps.insert(step.into(), session_id.into());
        state.writes.push((step.into(), session_id.into()));
        Ok(())
    }

    fn wake(&self, _run_key: &str) -> Result<u64, StoreError> {
        let mut state = self.write()?;
        state.woke += 1;
        Ok(state.woke)
    }

    fn reset(&self, _run_key: &str) -> Result<(), StoreError> {
        let mut state = self.write()?;
        state.woke = 0;
        state.steps.clear();
        Ok(())
    }

    fn merge_manifest(&self, _: &str, _: &str, _: Vec<String>) -> Result<Vec<String>, StoreError> {
        unreachable!("lineage never touches the manifest")
    }

    fn manifest(&self, _: &str) -> Result<Vec<String>, StoreError> {
        unreachable!("lineage never touches the manifest")
    }

    fn hold(&self, _: &str, _: &str, _: Option<Duration>, _: OnLeaseLost) -> HoldResult {
        unreachable!("lineage never holds a run")
    }
}

/// This workspace's run in `store` (registered on first use).
fn shared_run(f: &Fixture, store: &Arc<FakeRunStore>) -> SharedRun {
    SharedRun::open(store.clone(), &f.workspace, None)
        .unwrap()
        .expect("the workspace's own run")
}

/// A process's lineage of the shared run, as `flower` loads it at start.
fn shared_lineage(f: &Fixture, store: &Arc<FakeRunStore>) -> Lineage {
    Lineage::load_shared(&f.run_dir, &f.workspace, shared_run(f, store), |_| Ok(true)).unwrap()
}

fn steps_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(s, id)| (s.to_string(), id.to_string()))
        .collect()
}

#[test]
fn a_shared_lineage_names_the_run_it_is_kept_in_and_a_file_lineage_none() {
    let f = fixture();
    let store = Arc::new(FakeRunStore::default());
    let l = shared_lineage(&f, &store);
    let run = shared_run(&f, &store);
    assert_eq!(l.shared().map(SharedRun::run_key), Some(run.run_key()));
    assert_eq!(l.shared().map(SharedRun::origin), Some(run.origin()));

    let files_only = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert!(files_only.shared().is_none());
}

#[test]
fn a_lineage_reports_the_canonical_workspace_it_writes_into_the_file() {
    let f = fixture();
    let dotted = f.workspace.join(".").join("..").join("proj");
    let mut l = Lineage::load(&f.run_dir, &dotted, all_alive);
    let canonical = fs::canonicalize(&f.workspace).unwrap();
    assert_eq!(l.workspace(), canonical.to_str().unwrap());
    assert!(l.remember("干活", "s1"));
    assert_eq!(file_of(&f.run_dir)["workspace"], l.workspace());
}

#[test]
fn a_step_whose_database_write_failed_is_sent_again_with_the_next_write_that_works() {
    let f = fixture();
    let store = Arc::new(FakeRunStore::default());
    let mut l = shared_lineage(&f, &store);

    store.set_away(true);
    assert!(
        !l.remember("确认需求", "s1"),
        "a failed database write is reported"
    );
    assert_eq!(
        file_of(&f.run_dir)["steps"]["确认需求"],
        "s1",
        "the mirror still follows"
    );
    assert!(
        !l.remember("计划", "s2"),
        "still away: the catch-up fails too"
    );
    assert!(store.steps().is_empty());

    store.set_away(false);
    assert!(l.remember("干活", "s3"), "the database is back: it took");
    assert_eq!(
        store.steps(),
        steps_of(&[("确认需求", "s1"), ("计划", "s2"), ("干活", "s3")]),
        "every step missed while the database was away is sent again"
    );
}

#[test]
fn remembering_one_step_never_rewrites_the_other_steps_in_the_database() {
    // Two processes on one run (hosts in turn): each write sends its own step only, so
    // a step the other process moved on is not put back to this one's older session.
    let f = fixture();
    let store = Arc::new(FakeRunStore::default());
    let mut here = shared_lineage(&f, &store);
    assert!(here.remember("计划", "a1"));
    assert!(here.remember("干活", "a2"));
    let mut there = shared_lineage(&f, &store);
    assert!(there.remember("干活", "b2"));

    assert!(here.remember("检查", "a3"));
    assert_eq!(
        store.steps(),
        steps_of(&[("计划", "a1"), ("干活", "b2"), ("检查", "a3")])
    );
    assert_eq!(
        store.writes(),
        vec![
            ("计划".to_string(), "a1".to_string()),
            ("干活".to_string(), "a2".to_string()),
            ("干活".to_string(), "b2".to_string()),
            ("检查".to_string(), "a3".to_string()),
        ]
    );
}

#[test]
fn once_caught_up_after_an_outage_writes_send_only_their_own_step_again() {
    let f = fixture();
    let store = Arc::new(FakeRunStore::default());
    let mut here = shared_lineage(&f, &store);
    store.set_away(true);
    assert!(!here.remember("计划", "a1"));
    store.set_away(false);
    assert!(here.remember("干活", "a2"), "the catch-up");
    assert_eq!(store.steps(), steps_of(&[("计划", "a1"), ("干活", "a2")]));

    let mut there = shared_lineage(&f, &store);
    assert!(there.remember("计划", "b1"));
    assert!(here.remember("检查", "a3"));
    assert_eq!(
        store.steps(),
        steps_of(&[("计划", "b1"), ("干活", "a2"), ("检查", "a3")]),
        "no second catch-up puts 计划 back"
    );
}

#[test]
fn a_wake_after_a_failed_database_write_catches_the_database_up() {
    let f = fixture();
    let store = Arc::new(FakeRunStore::default());
    let mut l = shared_lineage(&f, &store);
    store.set_away(true);
    assert!(!l.remember("干活", "s1"));
    store.set_away(false);
    assert_eq!(l.wake(), 1);
    assert_eq!(store.steps(), steps_of(&[("干活", "s1")]));
}

#[test]
fn a_shared_wake_counts_in_the_database_and_offline_counts_on_from_what_it_knew() {
    let f = fixture();
    let store = Arc::new(FakeRunStore::default());
    let mut here = shared_lineage(&f, &store);
    assert_eq!(here.woke(), 0);
    // Another host wakes the run twice meanwhile.
    let mut there = shared_lineage(&f, &store);
    there.wake();
    there.wake();

    assert_eq!(here.wake(), 3, "the database's count, not this process's");
    assert_eq!(here.woke(), 3);
    assert_eq!(file_of(&f.run_dir)["woke"], 3, "and the mirror says so");

    store.set_away(true);
    assert_eq!(
        here.wake(),
        4,
        "offline, this process still counts its wake"
    );
}

#[test]
fn a_file_naming_the_workspace_through_a_symlink_still_matches() {
    // e.g. macOS's /var → /private/var, or a file written before paths were made
    // canonical: the same directory, spelled another way.
    let f = fixture();
    let link = f._tmp.path().join("link-to-proj");
    std::os::unix::fs::symlink(&f.workspace, &link).unwrap();
    fs::create_dir_all(&f.run_dir).unwrap();
    let file = serde_json::json!({
        "workspace": link.to_str().unwrap(),
        "woke": 2,
        "steps": {"干活": "s1"},
    });
    fs::write(f.run_dir.join("lineage.json"), file.to_string()).unwrap();

    let l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert_eq!(l.woke(), 2);
    assert_eq!(l.session("干活"), Some("s1"));
    assert!(Lineage::read(&f.run_dir, &f.workspace).is_some());
}

/// Names a directory squatting on `lineage.json` may be moved aside to, for each second
/// of the next ten minutes: `<path>.corrupt-<stamp>` and `…-1`, so that the next one
/// within whatever second the save falls in is `…-2`.
fn take_the_first_two_aside_names(run_dir: &Path) {
    let start = chrono::Local::now();
    for s in 0..600 {
        let stamp = (start + chrono::TimeDelta::seconds(s)).format("%Y%m%d-%H%M%S");
        let base = run_dir.join(format!("lineage.json.corrupt-{stamp}"));
        fs::write(&base, b"").unwrap();
        fs::write(format!("{}-1", base.display()), b"").unwrap();
    }
}

#[test]
fn asides_in_one_second_are_numbered_on_from_1() {
    let f = fixture();
    fs::create_dir_all(&f.run_dir).unwrap();
    take_the_first_two_aside_names(&f.run_dir);
    fs::create_dir(f.run_dir.join("lineage.json")).unwrap();
    fs::write(f.run_dir.join("lineage.json/keep.txt"), b"mine").unwrap();

    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert!(l.remember("干活", "s1"));
    let moved: Vec<PathBuf> = fs::read_dir(&f.run_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    let name = moved[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("lineage.json.corrupt-") && name.ends_with("-2"),
        "the third name of its second: {name}"
    );
    assert_eq!(fs::read(moved[0].join("keep.txt")).unwrap(), b"mine");
}

/// Whether `a` and `b` are on different filesystems.
fn different_devices(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(a).unwrap().dev() != fs::metadata(b).unwrap().dev()
}

#[test]
fn archive_moves_across_filesystems() {
    // The run dir on another filesystem than the archive (a mounted `runs/`): a rename
    // cannot do it, so the file is copied and the original removed.
    let f = fixture();
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || !different_devices(shm, f._tmp.path()) {
        crate::support::skip::skip(
            crate::support::skip::TMPFS,
            "/dev/shm is not a second filesystem here",
        );
        return;
    }
    let elsewhere = tempfile::tempdir_in(shm).unwrap();
    let run_dir = elsewhere.path().join("runs");
    let notes = f.workspace.join("notes");
    fs::create_dir_all(&notes).unwrap();
    fs::write(notes.join("需求.md"), "## 目标\nx\n").unwrap();
    let mut l = Lineage::load(&run_dir, &f.workspace, all_alive);
    l.wake();
    assert!(l.remember("干活", "s1"));
    let before = fs::read(run_dir.join("lineage.json")).unwrap();

    let into = notes.join("archive").join("20260907-015240");
    l.archive(&into, &[notes.join("需求.md")]).unwrap();
    assert_eq!(fs::read(into.join("lineage.json")).unwrap(), before);
    assert_eq!(
        fs::read_to_string(into.join("需求.md")).unwrap(),
        "## 目标\nx\n"
    );
    assert!(!run_dir.join("lineage.json").exists(), "moved, not copied");
    assert_eq!(l.woke(), 0);
    assert!(l.steps().is_empty());
}

/// Makes `dir` refuse to lose or gain entries, for root too, until dropped: mode 0555,
/// and for root the immutable attribute (`chattr +i`). `None` when neither holds here.
pub struct Refusing(PathBuf, bool);

impl Refusing {
    pub fn new(dir: &Path) -> Option<Refusing> {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
        let refuses = |dir: &Path| fs::write(dir.join("probe"), b"").is_err();
        if refuses(dir) {
            return Some(Refusing(dir.to_path_buf(), false));
        }
        let _ = fs::remove_file(dir.join("probe"));
        let chattr = |flag: &str| {
            std::process::Command::new("chattr")
                .arg(flag)
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success())
        };
        if chattr("+i") && refuses(dir) {
            return Some(Refusing(dir.to_path_buf(), true));
        }
        chattr("-i");
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        None
    }
}

impl Drop for Refusing {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.1 {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        }
        let _ = fs::set_permissions(&self.0, fs::Permissions::from_mode(0o755));
    }
}

#[test]
fn an_archive_move_that_fails_leaves_no_copy_behind() {
    // A rename refused for any reason but another filesystem is an error as it is:
    // copying first would leave the file in both places.
    let f = fixture();
    let mut l = Lineage::load(&f.run_dir, &f.workspace, all_alive);
    assert!(l.remember("干活", "s1"));
    let into = f.workspace.join("notes/archive/x");
    let Some(refusing) = Refusing::new(&f.run_dir) else {
        eprintln!(
            "skipped: neither mode 0555 nor chattr +i makes the run dir refuse a rename here"
        );
        return;
    };
    let result = l.archive(&into, &[]);
    drop(refusing);
    assert_eq!(
        result.unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied
    );
    assert!(
        !into.join("lineage.json").exists(),
        "no copy in the archive"
    );
    assert!(f.run_dir.join("lineage.json").exists());
    assert_eq!(l.session("干活"), Some("s1"), "nothing reset");
}
