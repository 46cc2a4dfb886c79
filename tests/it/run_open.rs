//! `flower::Run`: a run's lifecycle through the library, as the CLI and the Python
//! package use it: the run lock (a second open is refused with its holder), a busy
//! session refused before anything is shown, `/new` archiving, the wake state computed
//! under the lock, a missing credential refused before anything is created.

use crate::support::pipeline::{BRIEF, GOAL};
use crate::support::{FAKE_API_KEY, FakeServer, Reply};
use flower::continuity::lineage::Lineage;
use flower::continuity::lock::SessionLocks;
use flower::continuity::runtime::{FrontEnd, Held};
use flower::continuity::shared::SharedRun;
use flower::engine::SessionStart;
use flower::run::{Begin, Peek, Run, RunError, RunHooks, Waiting};
use flower::settings::{ConfigError, Environment, FileLayer, Flags, Settings};
use flower::stores::PostgresStore;
use flower::stores::postgres::Leased;
use flower::{AgentSpec, Step, Workflow};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn settings(dir: &Path, server: &FakeServer, key: bool) -> Settings {
    let mut vars = vec![
        ("ANTHROPIC_BASE_URL".to_string(), server.url()),
        ("FLOWER_MAX_ATTEMPTS".to_string(), "1".to_string()),
    ];
    if key {
        vars.push(("ANTHROPIC_API_KEY".into(), FAKE_API_KEY.into()));
    }
    let flags = Flags {
        workspace: Some(dir.to_path_buf()),
        run_dir: Some(dir.join("runs")),
        ..Flags::default()
    };
    Settings::resolve(&flags, &Environment::from_vars(vars), &FileLayer::default()).unwrap()
}

/// Writes a complete brief, `notes/需求.md`, in `dir`; returns the notes directory.
fn write_brief(dir: &Path) -> PathBuf {
    let notes = dir.join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("需求.md"), BRIEF).unwrap();
    notes
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_opens_once_and_a_second_open_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::text("向日葵")]);
    let settings = settings(dir.path(), &server, true);
    let run = Run::open(&settings).unwrap();
    assert!(!run.wake().waking && run.wake().steps.is_empty());
    assert_eq!(run.dir().path(), dir.path().join("runs"));
    match Run::open(&settings) {
        Err(RunError::Held(Held::RunDir { holder, .. })) => {
            assert_eq!(holder.map(|h| h.pid), Some(std::process::id()));
        }
        other => panic!("expected Locked, got {:?}", other.err()),
    }
    // The runtime is the run's: a step runs, lineage and manifest are written.
    let spec = AgentSpec::new("terse", "一行以内。");
    let workflow = Workflow::new(vec![Step::new("取词", spec, "说一个词。")]);
    let ctx = workflow.run(run.runtime()).await.unwrap();
    assert_eq!(ctx.woke, 1);
    let row = &flower::continuity::manifest::read_rows(run.dir()).unwrap()[0];
    let context = row.context.expect("the run's context is recorded");
    assert_eq!(context, settings.run_context());
    run.close();
    // Closed: the next process (here, the next open) continues it under the lock.
    let again = Run::open(&settings).unwrap();
    assert_eq!(again.wake().woke, 1);
    assert_eq!(again.wake().steps.keys().collect::<Vec<_>>(), ["取词"]);
}

#[test]
fn a_session_someone_else_appends_to_is_refused_before_the_wake() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![]);
    let settings = settings(dir.path(), &server, true);
    let workspace = dir.path().canonicalize().unwrap();
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let mut lineage = Lineage::empty(&runs, &workspace);
    lineage.remember("干活", "busy-session");
    let other = SessionLocks::new(&runs);
    other.claim("busy-session").unwrap();
    let opening = Run::prepare(&settings).unwrap();
    match opening.lock(Begin::Continue, RunHooks::default()) {
        Err(RunError::Held(Held::Session { session_id, holder })) => {
            assert_eq!(session_id, "busy-session");
            assert_eq!(holder.map(|h| h.pid), Some(std::process::id()));
        }
        other => panic!("expected SessionBusy, got {:?}", other.err()),
    }
    // Archiving it away (`--new`) does not need the session.
    let locked = Run::prepare(&settings)
        .unwrap()
        .lock(Begin::New, RunHooks::default())
        .unwrap();
    let into = locked.archived().expect("archived").to_path_buf();
    assert!(into.join("lineage.json").exists(), "{}", into.display());
    assert!(!runs.join("lineage.json").exists());
    assert_eq!(locked.wake(), &flower::WakeState::default());
}

#[test]
fn the_wake_state_is_read_under_the_lock_and_new_resets_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![]);
    let settings = settings(dir.path(), &server, true);
    let notes = write_brief(dir.path());
    std::fs::write(notes.join("目标.md"), GOAL).unwrap();
    let opening = Run::prepare(&settings).unwrap();
    // Nothing exists before the lock: the probe only reads.
    assert!(opening.probe().waking);
    assert!(!dir.path().join("runs").exists());
    let mut locked = opening.lock(Begin::Continue, RunHooks::default()).unwrap();
    assert!(locked.wake().waking);
    assert_eq!(locked.wake().checks, 2);
    let into = locked.archive().unwrap().expect("archived");
    assert!(into.join("需求.md").exists() && into.join("目标.md").exists());
    assert!(!locked.wake().waking);
    let run = locked.start(Vec::new(), FrontEnd::default()).unwrap();
    assert_eq!(run.wake(), &flower::WakeState::default());
    // Read-only, from outside: the running process is seen.
    let peek = Peek::open(&settings).unwrap();
    assert!(matches!(
        peek.running(),
        flower::continuity::lock::Probe::Held(_)
    ));
}

#[test]
fn a_missing_credential_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![]);
    let settings = settings(dir.path(), &server, false);
    match Run::open(&settings) {
        Err(RunError::Config(ConfigError::MissingCredential)) => {}
        other => panic!("expected MissingCredential, got {:?}", other.err()),
    }
    assert!(!dir.path().join("runs").exists());
    assert_eq!(server.connections(), 0);
}

/// Settings read from `dir`'s files (a project `.claude/settings.json` is written first),
/// with an empty home: what the CLI resolves, pin included.
fn settings_from_files(dir: &Path, home: &Path, server: &FakeServer) -> Settings {
    let claude = dir.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(
        claude.join("settings.json"),
        r#"{"env": {"FLOWER_MAX_TOKENS": "1234"}}"#,
    )
    .unwrap();
    let vars = vec![
        ("ANTHROPIC_BASE_URL".to_string(), server.url()),
        ("ANTHROPIC_API_KEY".to_string(), FAKE_API_KEY.to_string()),
        ("HOME".to_string(), home.display().to_string()),
    ];
    let flags = Flags {
        workspace: Some(dir.to_path_buf()),
        run_dir: Some(dir.join("runs")),
        ..Flags::default()
    };
    let files = FileLayer::load(dir, Some(home)).unwrap();
    Settings::resolve(&flags, &Environment::from_vars(vars), &files).unwrap()
}

/// A run with a history and no pin (it began before pinning, or the pin was deleted)
/// counts every settings file as new, whichever sign of history it has alone: a
/// complete brief, or a lineage whose sessions are gone. A fresh run compares nothing
/// and pins what is there.
#[test]
fn a_run_with_any_history_and_no_pin_counts_every_settings_file_as_new() {
    let server = FakeServer::start(vec![]);
    let home = tempfile::tempdir().unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let settings = settings_from_files(fresh.path(), home.path(), &server);
    let opening = Run::prepare(&settings).unwrap();
    assert!(opening.settings_drift().is_none(), "a fresh run");
    opening.lock(Begin::Continue, RunHooks::default()).unwrap();
    assert!(fresh.path().join("runs/settings-pin.json").exists());

    let briefed = tempfile::tempdir().unwrap();
    write_brief(briefed.path());
    let lineaged = tempfile::tempdir().unwrap();
    let runs = lineaged.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let workspace = lineaged.path().canonicalize().unwrap();
    Lineage::empty(&runs, &workspace).remember("干活", "gone-session");
    for (dir, history) in [(&briefed, "a complete brief"), (&lineaged, "a lineage")] {
        let settings = settings_from_files(dir.path(), home.path(), &server);
        let opening = Run::prepare(&settings).unwrap();
        let drift = opening.settings_drift().expect(history);
        assert!(
            drift
                .lines()
                .iter()
                .any(|l| l.contains(".claude/settings.json")),
            "{history}: {:?}",
            drift.lines()
        );
        match opening.lock(Begin::Continue, RunHooks::default()) {
            Err(RunError::SettingsChanged(_)) => {}
            other => panic!("{history}: expected SettingsChanged, got {:?}", other.err()),
        }
        assert!(
            !dir.path().join("runs/settings-pin.json").exists(),
            "{history}"
        );
    }
    assert_eq!(server.connections(), 0);
}

/// `--new` twice in one second: the second archive is numbered on (`<stamp>-2`, then
/// `-3`), never written into the first.
#[test]
fn archives_made_in_one_second_are_numbered_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![]);
    let settings = settings(dir.path(), &server, true);
    let notes = write_brief(dir.path());
    // Every second of the next minute already has an archive and its `-2`.
    let archive = notes.join("archive");
    let now = chrono::Local::now();
    for s in -2..60 {
        let stamp = (now + chrono::Duration::seconds(s)).format("%Y%m%d-%H%M%S");
        std::fs::create_dir_all(archive.join(stamp.to_string())).unwrap();
        std::fs::create_dir_all(archive.join(format!("{stamp}-2"))).unwrap();
    }
    let locked = Run::prepare(&settings)
        .unwrap()
        .lock(Begin::New, RunHooks::default())
        .unwrap();
    let into = locked.archived().expect("archived");
    let name = into.file_name().unwrap().to_string_lossy().into_owned();
    let stamp = name.strip_suffix("-3").expect(&name);
    assert!(archive.join(stamp).is_dir(), "{name}");
    assert!(into.join("需求.md").exists());
}

/// `--new` archives whatever of the last run is there, a lineage alone too, and with
/// nothing there archives nothing (no empty archive, `archived()` says so).
#[test]
fn new_archives_a_lineage_alone_and_nothing_when_there_is_nothing() {
    let server = FakeServer::start(vec![]);
    let fresh = tempfile::tempdir().unwrap();
    let locked = Run::prepare(&settings(fresh.path(), &server, true))
        .unwrap()
        .lock(Begin::New, RunHooks::default())
        .unwrap();
    assert_eq!(locked.archived(), None);
    assert!(!fresh.path().join("notes/archive").exists());

    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().canonicalize().unwrap();
    let runs = workspace.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let lineage = serde_json::json!({ "workspace": workspace, "woke": 1, "steps": {} });
    std::fs::write(runs.join("lineage.json"), lineage.to_string()).unwrap();
    let locked = Run::prepare(&settings(dir.path(), &server, true))
        .unwrap()
        .lock(Begin::New, RunHooks::default())
        .unwrap();
    let into = locked.archived().expect("the lineage alone is archived");
    assert!(into.join("lineage.json").exists(), "{}", into.display());
    assert_eq!(server.connections(), 0);
}

/// A session outside the pipeline (`flower::run::open_single`, what `flower once`
/// opens) over a run directory whose pin the settings files no longer match is refused
/// with the changes, and opens once they are accepted; the drift is still shown then.
#[tokio::test(flavor = "current_thread")]
async fn a_single_session_over_changed_settings_files_is_refused_until_accepted() {
    let server = FakeServer::start(vec![]);
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = settings_from_files(dir.path(), home.path(), &server);
    drop(
        Run::prepare(&settings)
            .unwrap()
            .lock(Begin::Continue, RunHooks::default())
            .unwrap(),
    );
    std::fs::write(
        dir.path().join(".claude/settings.local.json"),
        r#"{"env": {"FLOWER_MAX_TOKENS": "999"}}"#,
    )
    .unwrap();
    let mut settings = settings_from_files(dir.path(), home.path(), &server);
    let open = |settings: &Settings| {
        flower::run::open_single(
            settings,
            &SessionStart::New,
            Vec::new(),
            FrontEnd::default(),
        )
    };
    match open(&settings) {
        Err(RunError::SettingsChanged(drift)) => assert!(
            drift
                .lines()
                .iter()
                .any(|l| l.contains("settings.local.json")),
            "{:?}",
            drift.lines()
        ),
        other => panic!("expected SettingsChanged, got {:?}", other.err()),
    }
    settings.accept_settings_now();
    assert!(open(&settings).is_ok());
    assert!(flower::run::single_drift(&settings).is_none());
    assert!(
        flower::run::pinned_drift(&settings).is_some(),
        "shown, accepted or not"
    );
    assert_eq!(server.connections(), 0);
}

/// With `wait`, a run another host holds in the shared database is waited for (the
/// front end is told first, naming the run) and opened as soon as the holder lets go.
#[test]
fn with_wait_a_run_held_in_the_database_opens_once_its_holder_lets_go() {
    let Some(url) = crate::support::postgres::fresh_url() else {
        return;
    };
    let server = FakeServer::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let vars = vec![
        ("ANTHROPIC_BASE_URL".to_string(), server.url()),
        ("ANTHROPIC_API_KEY".to_string(), FAKE_API_KEY.to_string()),
    ];
    let flags = Flags {
        workspace: Some(dir.path().to_path_buf()),
        run_dir: Some(dir.path().join("runs")),
        store: Some(url.clone()),
        run_key: Some("k".into()),
        wait: true,
        ..Flags::default()
    };
    let settings =
        Settings::resolve(&flags, &Environment::from_vars(vars), &FileLayer::default()).unwrap();
    let opening = Run::prepare(&settings).unwrap();
    assert_eq!(opening.shared().map(SharedRun::run_key), Some("k"));
    // Another host holds run k until the waiter has said that it waits.
    let (held_tx, held) = std::sync::mpsc::channel();
    let (told_tx, told) = std::sync::mpsc::channel::<Waiting>();
    let holder = std::thread::spawn(move || {
        let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
        let lease = store
            .lease_run("k", "host b pid 1", Some(Duration::ZERO), Box::new(|_| {}))
            .unwrap();
        assert!(matches!(lease, Leased::Held(_)), "k was free");
        held_tx.send(()).unwrap();
        let waiting = told.recv_timeout(Duration::from_secs(60));
        drop(lease);
        waiting
    });
    held.recv_timeout(Duration::from_secs(60)).unwrap();
    let hooks = RunHooks {
        on_wait: Some(Box::new(move |waiting: &Waiting| {
            let _ = told_tx.send(waiting.clone());
        })),
        on_hold_lost: None,
    };
    let locked = opening.lock(Begin::Continue, hooks);
    let waiting = holder.join().unwrap().expect("told before waiting");
    assert_eq!(
        waiting,
        Waiting::SharedRun {
            run_key: "k".into(),
            holder: Some("host b pid 1".into()),
        }
    );
    let run = match locked {
        Ok(locked) => locked.start(Vec::new(), FrontEnd::default()).unwrap(),
        Err(e) => panic!("not opened: {e:?}"),
    };
    assert_eq!(run.shared().map(SharedRun::run_key), Some("k"));
}
