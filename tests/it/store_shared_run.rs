//! A run's lineage and manifest in the PostgreSQL store, beside its transcripts: two
//! hosts (two paths, two run directories) continue one run by its run key, a run key
//! from the environment never takes over another workspace's run, manifest rows of
//! many processes merge by `run` in the database, and the database going away mid-run
//! is waited out and the step resumed. Skipped (saying why) without
//! `FLOWER_TEST_POSTGRES_URL`.
//!
//! Tests that need several processes re-run this test binary with `FLOWER_SHARED_ROLE`
//! set; [`child_process_entry_point`] then plays that role instead of testing.

use crate::flow::{Script, held_first};
use crate::support::Flower;
use crate::support::LoadJson;
use crate::support::pipeline::{
    Agent, ONE_ATTEMPT, Project, Refused, agent_of, plain, refused_before_any_request, text,
    turn_of,
};
use crate::support::postgres as pg;
use crate::support::{FakeServer, Gate, Reply};
use flower::continuity::manifest::{Manifest, StepResult};
use flower::continuity::shared::{RunName, RunStateStore, SharedRun};
use flower::stores::{PostgresStore, SessionKey, SessionStore, project_key};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tempfile::TempDir;

/// Only reached when something is broken.
const TIMEOUT: Duration = Duration::from_secs(60);

const ROLE: &str = "FLOWER_SHARED_ROLE";

fn open(url: &str) -> Arc<PostgresStore> {
    Arc::new(PostgresStore::open(&url.parse().unwrap()).unwrap())
}

fn named(name: &str, adopt: bool) -> RunName {
    RunName {
        name: name.into(),
        adopt,
    }
}

/// Copies the files of `from` into `to` (made), leaving out `skip` (the run directory).
fn copy_tree(from: &Path, to: &Path, skip: &str) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == skip {
            continue;
        }
        let dest = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest, "");
        } else {
            std::fs::copy(entry.path(), dest).unwrap();
        }
    }
}

/// A workspace on host A at `~/a/proj` is killed inside 干活; host B mounts a copy at
/// another path (`~/b/mnt/proj`, its own run directory, nothing of A's `runs/`) and,
/// with the same store and run key, continues the same 干活 session: same id, the
/// request carries A's history, the mirrors in B's `runs/` name it, and the
/// transcript stays under A's project key.
#[test]
fn two_hosts_with_one_run_key_continue_the_same_work_session() {
    let Some(url) = pg::fresh_url() else { return };
    let host_a = Project::with("a/proj", ONE_ATTEMPT);
    let host_b = Project::with("b/mnt/proj", ONE_ATTEMPT);
    let script = Script::new(0);
    // 干活's second request (after its first tool call): A dies with it in flight.
    let (server, gate) = held_first(
        &script,
        |req| agent_of(req) == Agent::Coordinator && turn_of(req) == 1,
        "never delivered",
    );
    let key = "team-md2html";
    let mut child = host_a
        .command(
            &server,
            &["写个 hello 脚本", "--store", &url, "--run-key", key],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(TIMEOUT), "干活 was never asked");
    child.kill().unwrap();
    child.wait().unwrap();
    let held = server
        .requests()
        .into_iter()
        .rfind(|r| agent_of(r) == Agent::Coordinator)
        .unwrap();
    let id = host_a.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();
    let store = open(&url);
    let a_key = SessionKey::main(project_key(&host_a.dir), &id);
    let before = store.load_json(&a_key).unwrap().unwrap().len();

    // Host B: the workspace's files, not A's run directory.
    copy_tree(&host_a.dir, &host_b.dir, "runs");
    assert_ne!(project_key(&host_a.dir), project_key(&host_b.dir));
    let asked = server.request_count();
    let out = host_b.run(&server, &["--store", &url, "--run-key", key]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("接上上次"),
        "the wake banner: {}",
        text(&out.stdout)
    );
    let resumed = server.requests()[asked].clone();
    assert_eq!(agent_of(&resumed), Agent::Coordinator, "干活 goes on first");
    // The same conversation: A's prompt and first turn come first, as A sent them.
    assert_eq!(
        plain(&resumed.messages()[..2]),
        plain(&held.messages()[..2]),
        "the resumed request carries A's history"
    );
    assert_eq!(
        host_b.json("runs/lineage.json")["steps"]["干活"],
        id.as_str()
    );
    assert_eq!(host_b.read("hello.txt"), "hello");
    assert!(!host_b.dir.join("runs/sessions.db").exists());
    // B appended to A's transcript, under A's project key.
    assert!(store.load_json(&a_key).unwrap().unwrap().len() > before);
    let b_key = SessionKey::main(project_key(&host_b.dir), &id);
    assert_eq!(store.load_json(&b_key).unwrap(), None);
    // The run's manifest is one: B's mirror lists A's rows before its own.
    let steps: Vec<String> = host_b
        .manifest()
        .iter()
        .map(|r| r["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        steps.first().map(String::as_str),
        Some("确认需求"),
        "{steps:?}"
    );
    assert!(steps.iter().any(|s| s == "干活"), "{steps:?}");
    let runs: std::collections::BTreeSet<String> = host_b
        .manifest()
        .iter()
        .map(|r| r["run"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(runs.len(), 2, "A's process and B's: {runs:?}");
    assert_eq!(host_b.json("runs/lineage.json")["woke"], 2);

    // A third place with no runs/ at all reads the run from the database: log, show.
    let viewer = Project::with("c/laptop", ONE_ATTEMPT);
    let db_args = ["--store", url.as_str(), "--run-key", key];
    let log = viewer.run(&server, &[&["log", "--json"][..], &db_args].concat());
    assert_eq!(log.status.code(), Some(0), "{}", text(&log.stderr));
    let doc: Value = serde_json::from_slice(&log.stdout).unwrap();
    let logged: Vec<&str> = doc["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["step"].as_str().unwrap())
        .collect();
    assert_eq!(logged.len(), steps.len(), "{logged:?} vs {steps:?}");
    let show = viewer.run(&server, &[&["show", "干活"][..], &db_args].concat());
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    assert!(text(&show.stdout).contains(&id), "{}", text(&show.stdout));
    // The coordinator's first prompt, as A sent it: the transcript came from the database.
    assert!(
        text(&show.stdout).contains("照这份需求做"),
        "{}",
        text(&show.stdout)
    );
    assert!(
        !viewer.dir.join("runs").exists(),
        "a view writes no run directory"
    );
    // Without the store, the same place has no run to show.
    let alone = viewer.run(&server, &["log"]);
    assert_eq!(alone.status.code(), Some(1), "{}", text(&alone.stderr));
}

/// One run, one process, across hosts: while host A runs K, host B's `flower --run-key
/// K` stops with one line naming A (exit 3), sends nothing and writes no lineage or
/// manifest; once A is done, the run is free again.
#[test]
fn a_run_held_on_one_host_is_refused_on_another() {
    let Some(url) = pg::fresh_url() else { return };
    let host_a = Project::with("a/proj", ONE_ATTEMPT);
    let host_b = Project::with("b/proj", ONE_ATTEMPT);
    let (server, gate) = held_at_work();
    let mut a = host_a
        .command(
            &server,
            &["写个 hello 脚本", "--store", &url, "--run-key", "k"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(TIMEOUT), "干活 was never asked");
    let asked = server.request_count();
    let out = host_b.run(&server, &["--store", &url, "--run-key", "k"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(said.contains("另一个 flower 正在跑运行 k"), "{said}");
    assert!(said.contains(&format!("pid {}", a.id())), "{said}");
    assert_eq!(server.request_count(), asked, "B sent nothing");
    assert!(!host_b.dir.join("runs/lineage.json").exists());
    assert!(!host_b.dir.join("runs/manifest.json").exists());

    gate.open();
    assert!(a.wait().unwrap().success());
    let store = open(&url);
    let free = store
        .lease_run("k", "test", Some(Duration::ZERO), Box::new(|_| {}))
        .unwrap();
    assert!(
        matches!(free, flower::stores::postgres::Leased::Held(_)),
        "A let go of the run when it ended"
    );
}

/// A run key that only comes from `FLOWER_RUN_KEY` and names a run begun in another
/// workspace is refused before anything is sent or written (exit 2, one line saying
/// how to mean it); `--run-key` with the same name continues it.
#[test]
fn a_run_key_from_the_environment_never_takes_over_another_workspaces_run() {
    let Some(url) = pg::fresh_url() else { return };
    let store = open(&url);
    let origin = TempDir::new().unwrap();
    let shared = SharedRun::open(store.clone(), origin.path(), Some(&named("k1", true)))
        .unwrap()
        .unwrap();
    shared.remember("干活", "s-1").unwrap();

    let elsewhere = Project::new();
    let server = FakeServer::start(vec![]);
    let out = elsewhere
        .command(&server, &["做点别的"])
        .env("FLOWER_STORE", &url)
        .env("FLOWER_RUN_KEY", "k1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(said.contains("另一个工作区"), "{said}");
    assert!(said.contains("--run-key k1"), "{said}");
    assert_eq!(server.request_count(), 0);
    assert!(!elsewhere.dir.join("runs").exists(), "nothing written");
    let (woke, steps) = shared.lineage().unwrap();
    assert_eq!(
        (woke, steps),
        (0, BTreeMap::from([("干活".to_string(), "s-1".to_string())]))
    );

    // Given on purpose, it is the same run, read from any path (read-only here).
    let state = elsewhere
        .command(&server, &["state", "--json", "--run-key", "k1"])
        .env("FLOWER_STORE", &url)
        .output()
        .unwrap();
    assert!(state.status.success(), "{}", text(&state.stderr));
    let state: Value = serde_json::from_slice(&state.stdout).unwrap();
    // `s-1` has no transcript: the guard drops it, as it would a deleted session.
    assert_eq!(state["steps"], serde_json::json!({}));
    assert!(!elsewhere.dir.join("runs").exists(), "state writes nothing");
}

/// Run keys are checked before anything happens, and need a shared store.
#[test]
fn a_bad_run_key_or_one_without_a_store_exits_2() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![]);
    let cases: Vec<Refused> = vec![
        (vec!["--run-key=-dash"], vec![], "--run-key"),
        (vec!["--run-key", "a/b"], vec![], "--run-key"),
        (vec!["--run-key", "ok"], vec![], "要和 --store"),
        (
            vec![],
            vec![("FLOWER_RUN_KEY", "bad key")],
            "FLOWER_RUN_KEY",
        ),
    ];
    refused_before_any_request(&server, &dir, &["x"], &cases);
    assert!(!dir.path().join("runs").exists());
}

/// A path's run is that path's: a workspace whose project key collides with it (the
/// path differs only in `_` vs `-`) sees no run in the database and overwrites none.
#[test]
fn a_colliding_project_key_neither_reads_nor_overwrites_the_other_paths_run() {
    let Some(url) = pg::fresh_url() else { return };
    let store = open(&url);
    let home = TempDir::new().unwrap();
    let first = home.path().join("my_proj");
    let second = home.path().join("my-proj");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    assert_eq!(project_key(&first), project_key(&second));
    let run = SharedRun::open(store.clone(), &first, None)
        .unwrap()
        .unwrap();
    run.remember("干活", "s-1").unwrap();
    assert!(
        SharedRun::open(store.clone(), &second, None)
            .unwrap()
            .is_none()
    );
    assert_eq!(run.lineage().unwrap().1["干活"], "s-1");
}

/// Eight processes, each its own "host" (run directory), record rows of one run at
/// once: every row of every process is in the database, each process's mirror is a
/// whole JSON array with its own rows, and the last one's holds them all.
#[test]
fn eight_processes_on_one_run_lose_no_manifest_row() {
    let Some(url) = pg::fresh_url() else { return };
    let dirs = TempDir::new().unwrap();
    let workspace = dirs.path().join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let children: Vec<_> = (0..8)
        .map(|i| {
            let run_dir = dirs.path().join(format!("host{i}/runs"));
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "store_shared_run::child_process_entry_point",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, "record")
                .env("FLOWER_SHARED_URL", &url)
                .env("FLOWER_SHARED_WS", &workspace)
                .env("FLOWER_SHARED_RUN_DIR", &run_dir)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let store = open(&url);
    let run = SharedRun::find(store.clone(), &workspace, Some(&named("many", true)))
        .unwrap()
        .unwrap();
    let rows = flower::continuity::manifest::shared_rows(&run).unwrap();
    assert_eq!(rows.len(), 8 * ROWS);
    let mut per_run: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in &rows {
        per_run
            .entry(row.run.clone())
            .or_default()
            .push(row.result.step.clone());
    }
    assert_eq!(per_run.len(), 8);
    let want: Vec<String> = (0..ROWS).map(|i| format!("步骤{i}")).collect();
    for steps in per_run.values() {
        assert_eq!(steps, &want, "each process's rows, whole and in order");
    }
    let mut longest = 0;
    for i in 0..8 {
        let mirror =
            std::fs::read_to_string(dirs.path().join(format!("host{i}/runs/manifest.json")))
                .unwrap();
        let mirror: Vec<Value> = serde_json::from_str(&mirror).unwrap();
        assert!(mirror.len() >= ROWS);
        longest = longest.max(mirror.len());
    }
    assert_eq!(
        longest,
        8 * ROWS,
        "the last writer's mirror holds every row"
    );
}

const ROWS: usize = 6;

/// Not a test: the body of the child processes the other tests start. Does nothing
/// in a normal test run.
#[test]
fn child_process_entry_point() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap();
    match role.as_str() {
        // Records ROWS attempts of one run, one write each.
        "record" => {
            let store = open(&var("FLOWER_SHARED_URL"));
            let workspace = std::path::PathBuf::from(var("FLOWER_SHARED_WS"));
            let run = SharedRun::open(
                store as Arc<dyn RunStateStore>,
                &workspace,
                Some(&named("many", true)),
            )
            .unwrap()
            .unwrap();
            let run_dir = std::path::PathBuf::from(var("FLOWER_SHARED_RUN_DIR"));
            let mut manifest =
                Manifest::shared(&run_dir, flower::continuity::manifest::new_run_id(), run);
            for i in 0..ROWS {
                let mut result = StepResult::started(&format!("步骤{i}"));
                result.finish();
                manifest.record(&result).unwrap();
            }
        }
        other => panic!("unknown role {other}"),
    }
}

/// A TCP proxy on loopback in front of the database, which the test cuts (every
/// connection dropped, new ones refused) and restores.
struct Proxy {
    port: u16,
    target: SocketAddr,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    up: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut proxy = Proxy {
            port: listener.local_addr().unwrap().port(),
            target,
            conns: Arc::default(),
            up: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&mut self, listener: TcpListener) {
        self.up.store(true, Ordering::SeqCst);
        let (target, conns, up) = (self.target, self.conns.clone(), self.up.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if !up.load(Ordering::SeqCst) {
                    // The listener closes with this thread: connects are refused.
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let mut list = conns.lock().unwrap();
                list.push(client.try_clone().unwrap());
                list.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
    }

    /// Every connection dropped; connecting is refused until [`Proxy::restore`].
    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        // Wakes the acceptor, which then closes the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for conn in self.conns.lock().unwrap().drain(..) {
            let _ = conn.shutdown(Shutdown::Both);
        }
        // Refused from now on: the acceptor has closed its listener.
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            std::thread::yield_now();
        }
    }

    fn restore(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        self.serve(listener);
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{scheme}://{user}@127.0.0.1:{}/{path}", self.port)
    }
}

/// The host and port of a test URL (`postgres://user@host:port/db…`).
pub fn address(url: &str) -> SocketAddr {
    let rest = url.split_once('@').unwrap().1;
    let host_port = rest.split_once('/').unwrap().0;
    host_port.parse().unwrap()
}

/// The database goes away while a reply is on its way: the transcript write fails, the
/// run waits (probing the database, not the model) instead of failing, and once the
/// database is back the step resumes the same session; what was acknowledged before
/// the outage is all there.
#[test]
fn a_database_outage_mid_run_is_waited_out_and_the_session_resumed() {
    let Some(url) = pg::fresh_url() else { return };
    // Tables made directly, so the proxy only carries the run's own connections.
    drop(open(&url));
    let mut proxy = Proxy::start(address(&url));
    let gate = Gate::new();
    let server = FakeServer::start(vec![
        Reply::text("第一次回答").gate_before(&gate),
        Reply::text("接着做完了"),
    ]);
    let dir = TempDir::new().unwrap();
    let mut cmd = Flower::bin().server(&server).command();
    let mut child = cmd
        .current_dir(dir.path())
        .args(["once", "干点活", "--store", &proxy.url(&url)])
        .env("FLOWER_PROBE_INTERVAL", "0.1")
        .env("FLOWER_PROBE_TIMEOUT", "1")
        .env("FLOWER_BASE_DELAY", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(TIMEOUT), "the model was never asked");
    proxy.cut();
    gate.open();
    // Waits until flower says it is waiting for the database, then brings it back.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let probing = format!("127.0.0.1:{}", proxy.port);
    let mut said = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "flower ended without waiting for the database: {said}"
        );
        said.push_str(&line);
        if line.contains("数据库连不上,已等 ") && line.contains(&probing) {
            break;
        }
    }
    // It names what is away: the database, not the network.
    assert!(!said.contains("网络不通"), "{said}");
    proxy.restore();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{said}{rest}");
    assert!(stdout.contains("接着做完了"), "{stdout}");
    // Greeted as what came back: the database (issue 29 item 5).
    assert!(rest.contains("数据库恢复,接着跑"), "{said}{rest}");
    assert!(!rest.contains("网络恢复"), "{said}{rest}");

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{said}{rest}");
    // The reply that could not be stored is not in it: the prompt, then the resume.
    assert!(
        requests[1]
            .last_user_text()
            .ends_with(flower::continuity::resilience::RESUME_PROMPT),
        "{}",
        requests[1].last_user_text()
    );
    assert!(
        plain(requests[1].messages()).to_string().contains("干点活"),
        "the retry resumes the same conversation"
    );
    // Straight from the database: the session with its first prompt and its end.
    let store = open(&url);
    let sessions = store
        .list_sessions(&project_key(&dir.path().canonicalize().unwrap()))
        .unwrap();
    assert_eq!(sessions.len(), 1);
    let key = SessionKey::main(
        project_key(&dir.path().canonicalize().unwrap()),
        &sessions[0].session_id,
    );
    let entries = store.load_json(&key).unwrap().unwrap().to_vec();
    let all = Value::Array(entries).to_string();
    assert!(
        all.contains("干点活") && all.contains("接着做完了"),
        "{all}"
    );
}

/// A database of schema version 1 (transcripts only) is migrated in place: its
/// transcripts stay, the run tables appear.
#[test]
fn a_version_1_database_is_migrated_and_keeps_its_transcripts() {
    let Some(url) = pg::fresh_url() else { return };
    let key = SessionKey::main("-p", "s");
    {
        let store = open(&url);
        store
            .append(
                &key,
                &crate::support::typed(&[serde_json::json!({"type": "user", "uuid": "u1"})]),
            )
            .unwrap();
    }
    // Back to what version 1 had.
    pg::execute(
        &url,
        &format!(
            "{} DROP TABLE flower_manifest, flower_lineage, flower_runs; \
             UPDATE flower_meta SET value = '1' WHERE key = 'schema_version';",
            crate::store_migrate::TO_POSTGRES_2
        ),
    );
    let store = open(&url);
    assert_eq!(store.load_json(&key).unwrap().unwrap().len(), 1);
    let dir = TempDir::new().unwrap();
    let run = SharedRun::open(store.clone(), dir.path(), None)
        .unwrap()
        .unwrap();
    run.remember("干活", "s").unwrap();
    assert_eq!(run.lineage().unwrap().1["干活"], "s");
}

/// `/new` on a shared run: the database forgets the steps and wakes (the mirror is
/// archived like the file), so the next process starts fresh on every host.
#[test]
fn archiving_a_shared_lineage_resets_it_in_the_database() {
    let Some(url) = pg::fresh_url() else { return };
    let store = open(&url);
    let dir = TempDir::new().unwrap();
    let run_dir = dir.path().join("runs");
    let run = SharedRun::open(store.clone(), dir.path(), Some(&named("n", true)))
        .unwrap()
        .unwrap();
    let mut lineage =
        flower::Lineage::load_shared(&run_dir, dir.path(), run.clone(), |_| Ok(true)).unwrap();
    assert_eq!(lineage.wake(), 1);
    assert!(lineage.remember("干活", "s-1"));
    let mirror: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("lineage.json")).unwrap())
            .unwrap();
    assert_eq!(mirror["steps"]["干活"], "s-1");
    assert_eq!(mirror["woke"], 1);
    let into = dir.path().join("notes/archive/x");
    lineage.archive(&into, &[]).unwrap();
    assert!(into.join("lineage.json").exists());
    assert_eq!(run.lineage().unwrap(), (0, BTreeMap::new()));
    let again = flower::Lineage::load_shared(&run_dir, dir.path(), run, |_| Ok(true)).unwrap();
    assert!(again.steps().is_empty());
}

/// Whether a session-level advisory lock on `what` (`/run/KEY`, `/hold/SESSION`, after
/// the schema) is held in `url`'s database, asked on a connection of the test's own.
fn advisory_lock_taken(url: &str, what: &str) -> bool {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND objsubid = 1 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND ((classid::bigint << 32) | objid::bigint) \
                 = hashtextextended(current_schema() || $1, 0)",
            &[&what],
        )
        .unwrap()
        .get(0);
    n == 1
}

fn run_hold_is_taken(url: &str, run_key: &str) -> bool {
    advisory_lock_taken(url, &format!("/run/{run_key}"))
}

/// Polls `what` until it holds; panics with `why` after [`TIMEOUT`].
fn wait_until(why: &str, mut what: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !what() {
        assert!(std::time::Instant::now() < deadline, "timed out: {why}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A scripted model for a whole pipeline whose first 干活 request waits at the gate
/// (and is then answered `先停一下`).
fn held_at_work() -> (FakeServer, Gate) {
    held_first(
        &Script::new(0),
        |req| agent_of(req) == Agent::Coordinator,
        "先停一下",
    )
}

/// Host A's pipeline on run `k`, connected through `proxy`, stopped at its first 干活
/// request (`gate`) while it holds the run; then the database goes away for it: the
/// proxy is cut, and the server has let go of A's hold.
fn holding_then_cut(
    url: &str,
    proxy: &Proxy,
    host_a: &Project,
    server: &FakeServer,
    gate: &Gate,
) -> std::process::Child {
    let through_proxy = proxy.url(url);
    let a = host_a
        .command(
            server,
            &[
                "写个 hello 脚本",
                "--store",
                &through_proxy,
                "--run-key",
                "k",
            ],
        )
        .env("FLOWER_PROBE_INTERVAL", "0.1")
        .env("FLOWER_BASE_DELAY", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(TIMEOUT), "A's 干活 was never asked");
    wait_until("A holds the run", || run_hold_is_taken(url, "k"));
    proxy.cut();
    wait_until("the server let go of A's lock with its connection", || {
        !run_hold_is_taken(url, "k")
    });
    a
}

/// A run's hold lives on a database connection, so a database that goes away takes it
/// along; the run takes it again once the database is back, and another host is still
/// refused. The run itself goes on to the end.
#[test]
fn a_hold_the_database_dropped_is_taken_again_when_it_is_back() {
    let Some(url) = pg::fresh_url() else { return };
    drop(open(&url));
    let mut proxy = Proxy::start(address(&url));
    let host_a = Project::with("a/proj", &[]);
    let host_b = Project::with("b/proj", ONE_ATTEMPT);
    let (server, gate) = held_at_work();
    let a = holding_then_cut(&url, &proxy, &host_a, &server, &gate);
    proxy.restore();
    wait_until("A took the run again", || run_hold_is_taken(&url, "k"));
    let asked = server.request_count();
    let out = host_b.run(&server, &["--store", &url, "--run-key", "k"]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(said.contains("另一个 flower 正在跑运行 k"), "{said}");
    assert!(said.contains(&format!("pid {}", a.id())), "{said}");
    assert_eq!(server.request_count(), asked, "B sent nothing");

    gate.open();
    let out = a.wait_with_output().unwrap();
    let said = text(&out.stderr);
    assert!(out.status.success(), "{said}");
    // Its pooled connections died with the cut too: they are found dead and opened
    // anew before use, not failed on (which would cost a retry of the model call).
    assert!(!said.contains("次尝试"), "{said}");
}

/// When another host took the run while the database was away, the run that lost its
/// hold says so and stops as on SIGTERM, instead of writing on beside the new holder.
#[test]
fn a_run_whose_hold_another_host_took_meanwhile_stops() {
    use std::os::unix::process::ExitStatusExt as _;
    let Some(url) = pg::fresh_url() else { return };
    drop(open(&url));
    let mut proxy = Proxy::start(address(&url));
    let host_a = Project::with("a/proj", ONE_ATTEMPT);
    let host_b = Project::with("b/proj", ONE_ATTEMPT);
    let (server_a, gate_a) = held_at_work();
    let (server_b, gate_b) = held_at_work();
    let a = holding_then_cut(&url, &proxy, &host_a, &server_a, &gate_a);
    let asked_a = server_a.request_count();
    // B, on the database directly, takes the run nobody holds now.
    let b = host_b
        .command(&server_b, &["--store", &url, "--run-key", "k"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(gate_b.wait_reached(TIMEOUT), "B's 干活 was never asked");
    proxy.restore();
    let out = a.wait_with_output().unwrap();
    let said = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{said}");
    assert!(
        said.contains("数据库断开期间,运行 k 被另一个 flower 接手了"),
        "{said}"
    );
    assert!(said.contains(&format!("pid {}", b.id())), "{said}");
    assert_eq!(server_a.request_count(), asked_a, "A asked nothing more");

    gate_b.open();
    let out = b.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Two hosts that mount a workspace at one path share its project key, so each reaches
/// the other's sessions, and neither sees the other's lock files: the lock on a session
/// lives in the database too. `once --resume` of the session a pipeline on "another
/// host" (here: another run directory, so other lock files) is appending to is refused,
/// saying who holds it, and sends nothing; once the pipeline is done it continues it.
#[test]
fn a_session_in_use_on_another_host_is_refused_to_once_resume() {
    let Some(url) = pg::fresh_url() else { return };
    let host = Project::with("proj", ONE_ATTEMPT);
    let (server, gate) = held_at_work();
    let a = host
        .command(&server, &["写个 hello 脚本", "--store", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(TIMEOUT), "干活 was never asked");
    let id = host.json("runs/lineage.json")["steps"]["干活"]
        .as_str()
        .unwrap()
        .to_string();
    let other = TempDir::new().unwrap();
    let other_runs = other.path().join("runs");
    let once = |server: &FakeServer| {
        host.run(
            server,
            &[
                "once",
                "--resume",
                &id,
                "再看一眼",
                "--store",
                &url,
                "--run-dir",
                other_runs.to_str().unwrap(),
            ],
        )
    };
    let elsewhere = FakeServer::start(vec![Reply::text("看过了")]);
    let out = once(&elsewhere);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!("另一个 flower 正在用会话 {id}")),
        "{said}"
    );
    assert!(said.contains(&format!("kill {}", a.id())), "{said}");
    assert_eq!(elsewhere.request_count(), 0, "nothing was sent");

    gate.open();
    let out = a.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = once(&elsewhere);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let asked = elsewhere.requests();
    assert_eq!(asked.len(), 1);
    assert!(
        plain(asked[0].messages()).to_string().contains("先停一下"),
        "the resume continues the pipeline's 干活 conversation"
    );
}

/// A session's lock in the database lives on the process's lock connection: when the
/// database drops it, the lock is taken again once the database is back, and let go
/// when its guard is dropped. Who holds it is told to whoever is refused.
#[test]
fn a_session_hold_the_database_dropped_is_taken_again() {
    use flower::stores::SessionHold;
    let Some(url) = pg::fresh_url() else { return };
    drop(open(&url));
    let mut proxy = Proxy::start(address(&url));
    let store = open(&proxy.url(&url));
    let SessionHold::Held(guard) = store.hold_session("s1", false).unwrap() else {
        panic!("a free session is held")
    };
    let taken = || advisory_lock_taken(&url, "/hold/s1");
    assert!(taken());
    let other = open(&url);
    match other.hold_session("s1", false).unwrap() {
        SessionHold::Busy(Some(tag)) => {
            let me = format!("flower {} ", std::process::id());
            assert!(tag.starts_with(&me), "{tag}");
        }
        _ => panic!("a held session is refused, naming its holder"),
    }
    assert!(
        matches!(
            other.hold_session("s1", true).unwrap(),
            SessionHold::Busy(_)
        ),
        "a reader waits for the writer too"
    );
    proxy.cut();
    wait_until("the server let go of the lock with its connection", || {
        !taken()
    });
    proxy.restore();
    wait_until("the lock was taken again", taken);
    drop(guard);
    wait_until("the dropped guard let go of it", || !taken());
    let SessionHold::Held(_reader) = other.hold_session("s1", true).unwrap() else {
        panic!("a free session can be read")
    };
    let SessionHold::Held(_second) = store.hold_session("s1", true).unwrap() else {
        panic!("readers share")
    };
}

/// Issue 29 item 5: a database outage in a pipeline run is counted as an outage (断网)
/// in the step's row and by `flower log`, said as the database's, and greeted as
/// 数据库恢复, not 网络恢复.
#[test]
fn a_database_outage_in_a_pipeline_is_counted_by_flower_log() {
    let _ = database_outage_during(Agent::Coordinator);
}

/// Issue 29 item 1: the database goes away while a sub-agent works: the sub-agent
/// waits it out and goes on in its own session; the coordinator is not retried and
/// gets one result.
#[test]
fn a_database_outage_in_a_sub_agent_is_waited_out_by_the_sub_agent() {
    let Some(server) = database_outage_during(Agent::Worker) else {
        return;
    };
    let requests = server.requests();
    let coordinator: Vec<_> = requests
        .iter()
        .filter(|r| agent_of(r) == Agent::Coordinator)
        .collect();
    assert_eq!(coordinator.len(), 2, "the coordinator was not retried");
    let results = coordinator[1].tool_results();
    assert_eq!(results.len(), 1, "{results:#?}");
    assert_eq!(results[0]["content"], "写好了 hello.txt。");
}

/// The database is cut while `victim`'s first reply is on its way, and restored once
/// flower says it waits for it. Returns the model server (`None`: no PostgreSQL).
fn database_outage_during(victim: Agent) -> Option<FakeServer> {
    use crate::faults_support::{self as faults, PATIENCE};
    let url = pg::fresh_url()?;
    drop(open(&url));
    let mut proxy = Proxy::start(address(&url));
    let store = proxy.url(&url);
    let project = Project::resilient();
    project.freeze_notes();
    let gate = Gate::new();
    let held = Arc::new(AtomicBool::new(false));
    let server = {
        let (gate, held) = (gate.clone(), held.clone());
        FakeServer::with_handler(move |req, _| {
            let reply = crate::support::pipeline::simple_reply(req);
            if agent_of(req) == victim && !held.swap(true, Ordering::SeqCst) {
                return reply.gate_before(&gate);
            }
            reply
        })
    };
    let mut cmd = project.command(&server, &["--store", &store]);
    cmd.env("FLOWER_PROBE_INTERVAL", "0.1");
    let (mut child, stderr) = faults::spawn_watched(cmd);
    assert!(gate.wait_reached(TIMEOUT), "{}", stderr.all());
    proxy.cut();
    gate.open();
    assert!(
        stderr.wait_for("数据库连不上,已等 ", 1, PATIENCE),
        "{}",
        stderr.all()
    );
    proxy.restore();
    let status = faults::wait_exit(&mut child, PATIENCE);
    assert!(stderr.wait_closed(PATIENCE));
    assert_eq!(status.code(), Some(0), "{}", stderr.all());
    let said = stderr.all();
    assert!(said.contains("数据库恢复,接着跑"), "{said}");
    assert!(!said.contains("网络恢复"), "{said}");

    let out = project
        .command(&server, &["log", "--json", "--store", &store])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(log["totals"]["outages"], 1, "{log:#}");
    assert!(log["totals"]["outage_waited_s"].as_f64().unwrap() > 0.0);
    let work = log["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["step"] == "干活")
        .unwrap();
    assert_eq!(work["outages"][0]["database"], true, "{work:#}");
    // Each pooled connection may meet its dead socket once: a retry or two, each
    // counted once, from the row.
    let retries = work["attempts"].as_u64().unwrap() - 1;
    assert!(retries >= 1, "{work:#}");
    assert_eq!(log["totals"]["retries"], retries, "{log:#}");
    Some(server)
}
