//! `flower::Run`: a run's lifecycle through the library, as the CLI and the Python
//! package use it: the run lock (a second open is refused with its holder), a busy
//! session refused before anything is shown, `/new` archiving, the wake state computed
//! under the lock, a missing credential refused before anything is created.

use crate::support::pipeline::{BRIEF, GOAL};
use crate::support::{FAKE_API_KEY, FakeServer, Reply};
use flower::continuity::lineage::Lineage;
use flower::continuity::lock::SessionLocks;
use flower::continuity::runtime::{FrontEnd, Held};
use flower::run::{Begin, Peek, Run, RunError, RunHooks};
use flower::settings::{ConfigError, Environment, FileLayer, Flags, Settings};
use flower::{AgentSpec, Step, Workflow};
use std::path::Path;

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
    let notes = dir.path().join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("需求.md"), BRIEF).unwrap();
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
