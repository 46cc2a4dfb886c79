//! The spec's minimal example (`examples/continuation.rs`) as a real process against the
//! fake model: it continues across processes, whatever killed the last one, and falls
//! back to a fresh start, silently and successfully, when the lineage does not fit
//! (a copied directory, a deleted sessions.db, a corrupt lineage.json).
//!
//! The example prints `woke` on one line, then the sessions map as JSON.

use crate::support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;
use support::pipeline::{plain, text};
use support::{FakeServer, Gate, Recorded, Reply};
use tempfile::TempDir;

const PROMPT: &str = "读 seed.txt,只回文件里那个词。";
const WORD: &str = "向日葵";
/// Only reached when something is broken.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The example binary. `cargo test` builds examples next to the test binaries
/// (`target/<profile>/examples/`, the test being in `target/<profile>/deps/`); if it is
/// not there (a test binary run on its own after a clean), build it with cargo.
fn example() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let me = std::env::current_exe().expect("current exe");
        let profile_dir = me
            .parent()
            .and_then(Path::parent)
            .expect("test binary in target/<profile>/deps");
        let exe = profile_dir
            .join("examples")
            .join(format!("continuation{}", std::env::consts::EXE_SUFFIX));
        if exe.is_file() {
            return exe;
        }
        build_example(profile_dir)
    })
}

/// `cargo build --example continuation`, returning the executable cargo reports.
fn build_example(profile_dir: &Path) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args([
        "build",
        "--example",
        "continuation",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(env!("CARGO_MANIFEST_DIR"))
    .stderr(Stdio::inherit());
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .expect("run cargo build --example continuation");
    assert!(
        out.status.success(),
        "cargo build --example continuation failed"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "continuation")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported the example's executable")
}

/// A temp project with `seed.txt`.
fn project() -> TempDir {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("seed.txt"), format!("{WORD}\n")).unwrap();
    dir
}

fn command(server: &FakeServer, dir: &Path) -> Command {
    let mut cmd = Command::new(example());
    server.configure(&mut cmd);
    cmd.current_dir(dir)
        .env("FLOWER_MAX_ATTEMPTS", "1")
        .stdin(Stdio::null());
    cmd
}

/// What one run of the example printed.
#[derive(Debug)]
struct Printed {
    woke: u64,
    id: String,
}

/// Runs the example to its end; it must succeed and print exactly its two lines.
fn run(server: &FakeServer, dir: &Path) -> Printed {
    let out = command(server, dir).output().expect("run the example");
    parse(&out)
}

fn parse(out: &Output) -> Printed {
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "two lines: {stdout:?} (stderr: {stderr})");
    let woke = lines[0]
        .parse()
        .unwrap_or_else(|_| panic!("woke is a number: {:?}", lines[0]));
    let sessions: Value = serde_json::from_str(lines[1]).expect("sessions as JSON");
    let map = sessions.as_object().expect("a JSON map");
    assert_eq!(map.len(), 1, "{sessions}");
    let id = map["取词"].as_str().expect("取词's session id").to_string();
    assert!(uuid_like(&id), "{id}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    Printed { woke, id }
}

fn uuid_like(id: &str) -> bool {
    id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// The model of the spec's example: read seed.txt, then answer its word.
fn model(req: &Recorded, _: usize) -> Reply {
    if req.tool_results().is_empty() {
        Reply::tool_use("Read", json!({"file_path": "seed.txt"}))
    } else {
        Reply::text(WORD)
    }
}

fn lineage(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("runs/lineage.json")).expect("lineage.json");
    serde_json::from_str(&text).expect("lineage.json is JSON")
}

/// Runs the example against [`model`], except that request `held` is held at a gate and
/// never answered; once it is there (else fails with `what`), SIGKILLs the process and
/// reaps it.
fn killed_at_request(dir: &Path, held: usize, what: &str) -> (FakeServer, ExitStatus) {
    let gate = Gate::new();
    let holding = gate.clone();
    let server = FakeServer::with_handler(move |req, i| {
        if i == held {
            Reply::text("never delivered").gate_before(&holding)
        } else {
            model(req, i)
        }
    });
    let mut child = command(&server, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the example");
    assert!(gate.wait_reached(TIMEOUT), "{what}");
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    (server, status)
}

/// Whether a request carries no history: just the one prompt of a new session.
fn is_fresh(req: &Recorded) -> bool {
    req.messages().len() == 1 && req.last_user_text() == PROMPT
}

#[test]
fn run_twice_continues_the_same_session() {
    let dir = project();
    let server = FakeServer::with_handler(model);

    let first = run(&server, dir.path());
    assert_eq!(first.woke, 1);
    assert_eq!(server.request_count(), 2, "Read, then the word");
    assert!(is_fresh(&server.requests()[0]));

    let second = run(&server, dir.path());
    assert_eq!(second.woke, 2);
    assert_eq!(second.id, first.id, "取词 continued the last run's session");

    // The second run's request carries the first run's whole conversation.
    let requests = server.requests();
    let resumed = &requests[2];
    assert_eq!(
        plain(&resumed.messages()[..3]),
        plain(requests[1].messages()),
        "the earlier history, as sent before"
    );
    let history = Value::Array(resumed.messages().to_vec()).to_string();
    assert!(history.contains("toolu_fake_0000_0"), "the Read call");
    assert!(history.contains(WORD), "its result and the answer");
    assert_eq!(resumed.last_user_text(), PROMPT, "the prompt, sent again");

    let file = lineage(dir.path());
    assert_eq!(file["woke"], 2);
    assert_eq!(file["steps"], json!({"取词": first.id}));
}

/// SIGKILL right after the first model reply (a tool call): the Read ran and its result
/// was stored, the request that carries it is held; nothing of the process's own
/// cleanup runs. The next process resumes the same session, with all of that history.
#[test]
fn killed_after_the_first_reply_resumes_with_its_history() {
    let dir = project();
    let (server, status) = killed_at_request(dir.path(), 1, "the second request never came");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    let killed_id = lineage(dir.path())["steps"]["取词"]
        .as_str()
        .expect("the session id was on disk before the kill")
        .to_string();
    assert_eq!(lineage(dir.path())["woke"], 1);
    let in_flight = server.requests()[1].clone();

    let next = run(&server, dir.path());
    assert_eq!(next.woke, 2);
    assert_eq!(next.id, killed_id);
    let resumed = &server.requests()[2];
    // Everything the killed request carried (prompt, Read call, its result) is there.
    assert_eq!(
        plain(&resumed.messages()[..2]),
        plain(&in_flight.messages()[..2]),
        "prompt and the Read call"
    );
    let results = Value::Array(resumed.messages().to_vec()).to_string();
    assert!(results.contains("toolu_fake_0000_0") && results.contains(WORD));
    assert!(resumed.last_user_text().contains(PROMPT));
    assert_eq!(lineage(dir.path())["woke"], 2);
}

/// SIGKILL while the very first request is still unanswered: the session id was
/// written before the request went out, so the next process resumes it.
#[test]
fn killed_during_the_first_request_resumes() {
    let dir = project();
    let (server, _) = killed_at_request(dir.path(), 0, "the first request never came");
    let killed_id = lineage(dir.path())["steps"]["取词"]
        .as_str()
        .expect("written before the first request")
        .to_string();

    let next = run(&server, dir.path());
    assert_eq!(next.woke, 2);
    assert_eq!(next.id, killed_id);
    // The unanswered prompt is in the stored history; the re-sent prompt joins it, so
    // the first user message holds it twice (a fresh session would hold it once).
    let resumed = &server.requests()[1];
    assert!(!is_fresh(resumed), "{:#?}", resumed.messages());
    assert_eq!(
        resumed.messages()[0]["content"]
            .to_string()
            .matches(PROMPT)
            .count(),
        2,
        "{:#?}",
        resumed.messages()
    );
}

/// The directory copied elsewhere: its lineage names the old workspace, so the copy
/// starts fresh (woke 1, a new session), with no error; the original is untouched and
/// still continues.
#[test]
fn a_copied_directory_starts_fresh() {
    let home = TempDir::new().unwrap();
    let original = home.path().join("a");
    std::fs::create_dir(&original).unwrap();
    std::fs::write(original.join("seed.txt"), WORD).unwrap();
    let server = FakeServer::with_handler(model);
    let first = run(&server, &original);

    let copy = home.path().join("b");
    let status = Command::new("cp")
        .arg("-a")
        .arg(&original)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let before = server.request_count();
    let in_copy = run(&server, &copy);
    assert_eq!(
        in_copy.woke, 1,
        "the copy's lineage is not this workspace's"
    );
    assert_ne!(in_copy.id, first.id);
    assert!(is_fresh(&server.requests()[before]));
    let copied = lineage(&copy);
    assert_eq!(
        copied["workspace"],
        copy.canonicalize().unwrap().to_str().unwrap()
    );

    // The original directory is not affected by its copy.
    let again = run(&server, &original);
    assert_eq!((again.woke, again.id), (2, first.id));
}

/// sessions.db deleted: the remembered session is gone, so 取词 starts a new one
/// (silently; the wake count goes on).
#[test]
fn a_deleted_sessions_db_starts_fresh() {
    let dir = project();
    let server = FakeServer::with_handler(model);
    let first = run(&server, dir.path());
    for name in ["sessions.db", "sessions.db-wal", "sessions.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join("runs").join(name));
    }
    let before = server.request_count();
    let second = run(&server, dir.path());
    assert_ne!(second.id, first.id);
    assert_eq!(
        second.woke, 2,
        "lineage.json itself is fine: the wake counts"
    );
    assert!(is_fresh(&server.requests()[before]));
    assert_eq!(lineage(dir.path())["steps"]["取词"], second.id.as_str());
}

/// A broken lineage.json, in several ways: each run prints woke 1 and a new session,
/// exits 0, says nothing on stderr, and leaves a sound lineage.json behind.
#[test]
fn a_corrupt_lineage_starts_fresh() {
    /// Turns the good file's text into a broken one.
    type Corrupt = fn(&str) -> Vec<u8>;
    let cases: [(&str, Corrupt); 9] = [
        ("empty", |_| Vec::new()),
        ("truncated", |good| {
            good.as_bytes()[..good.len() / 2].to_vec()
        }),
        ("cut inside a multibyte character", |good| {
            let at = good.find("取词").unwrap() + 1;
            good.as_bytes()[..at].to_vec()
        }),
        ("NUL bytes (a crashed filesystem)", |good| {
            vec![0; good.len()]
        }),
        ("binary garbage", |_| {
            vec![0x00, 0x9f, 0x92, 0x96, 0xff, b'{']
        }),
        ("a JSON array", |_| b"[1, 2, 3]".to_vec()),
        ("null", |_| b"null".to_vec()),
        ("wrong types", |good| {
            let mut v: Value = serde_json::from_str(good).unwrap();
            v["woke"] = json!("one");
            v["steps"] = json!(["取词"]);
            v.to_string().into_bytes()
        }),
        ("no workspace field", |good| {
            let mut v: Value = serde_json::from_str(good).unwrap();
            v.as_object_mut().unwrap().remove("workspace");
            v.to_string().into_bytes()
        }),
    ];
    for (what, corrupt) in cases {
        let dir = project();
        let server = FakeServer::with_handler(model);
        let first = run(&server, dir.path());
        let path = dir.path().join("runs/lineage.json");
        let good = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, corrupt(&good)).unwrap();

        let before = server.request_count();
        let out = command(&server, dir.path()).output().unwrap();
        assert!(
            text(&out.stderr).is_empty(),
            "{what}: silent, but said {:?}",
            text(&out.stderr)
        );
        let second = parse(&out);
        assert_eq!(second.woke, 1, "{what}");
        assert_ne!(second.id, first.id, "{what}");
        assert!(is_fresh(&server.requests()[before]), "{what}");
        let file = lineage(dir.path());
        assert_eq!(file["woke"], 1, "{what}");
        assert_eq!(file["steps"], json!({"取词": second.id}), "{what}");

        // And from that fresh lineage on, it continues as ever.
        let third = run(&server, dir.path());
        assert_eq!((third.woke, &third.id), (2, &second.id), "{what}");
    }
}

/// A sound lineage.json that names a session sessions.db never had: that step starts
/// fresh (the wake still counts, the lineage file itself being fine).
#[test]
fn a_lineage_naming_an_unknown_session_starts_that_step_fresh() {
    let dir = project();
    let server = FakeServer::with_handler(model);
    let first = run(&server, dir.path());
    let path = dir.path().join("runs/lineage.json");
    let mut file = lineage(dir.path());
    file["steps"]["取词"] = json!("00000000-0000-4000-8000-000000000000");
    std::fs::write(&path, file.to_string()).unwrap();
    let before = server.request_count();
    let second = run(&server, dir.path());
    assert_eq!(second.woke, 2);
    assert_ne!(second.id, first.id);
    assert_ne!(second.id, "00000000-0000-4000-8000-000000000000");
    assert!(is_fresh(&server.requests()[before]));
}
