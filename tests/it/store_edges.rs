//! Edges of the session stores (`src/stores/sqlite.rs`, `src/stores/postgres.rs`) that
//! the conformance and store tests left open, each found by a mutant those tests let
//! through (README, "Mutation testing"): what a store shows of itself, errors that must
//! not pass for "no store", and the limits of a store that is only read.

use crate::lineage_edges::Refusing;
use crate::store_shared_run::address;
use crate::support::LoadJson;
use crate::support::postgres as pg;
use flower::stores::{PostgresStore, PostgresUrl, SessionKey, SessionStore, SqliteSessionStore};
use serde_json::json;

/// Says why a test did not run, past the harness's capture.
fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "skipped: {why}");
}

#[test]
fn a_sqlite_store_shows_its_file_and_whether_it_only_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    let store = SqliteSessionStore::open(&db).unwrap();
    let shown = format!("{store:?}");
    assert!(shown.starts_with("SqliteSessionStore"), "{shown}");
    assert!(shown.contains(db.to_str().unwrap()), "{shown}");
    assert!(shown.contains("read_only: false"), "{shown}");
    store
        .append(
            &SessionKey::main("p", "s"),
            &crate::support::typed(&[json!({"type": "x", "uuid": "u"})]),
        )
        .unwrap();
    drop(store);
    let reader = SqliteSessionStore::open_read_only(&db).unwrap().unwrap();
    assert!(format!("{reader:?}").contains("read_only: true"));
    assert!(reader.is_read_only());
    assert!(!SqliteSessionStore::open(&db).unwrap().is_read_only());
}

#[test]
fn a_directory_is_no_store_to_read_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let error = SqliteSessionStore::open_read_only(dir.path()).unwrap_err();
    let shown = error.to_string();
    assert!(shown.contains(dir.path().to_str().unwrap()), "{shown}");
    assert!(shown.contains("是目录,不是数据库文件"), "{shown}");
}

/// A path that cannot be looked at is an error naming it, not "no store yet": a reader
/// that took it for a missing store would tell the user there is nothing to continue.
#[test]
fn a_read_only_open_through_a_file_is_an_error_not_an_absent_store() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs");
    std::fs::write(&file, "not a directory").unwrap();
    let db = file.join("sessions.db");
    let error = SqliteSessionStore::open_read_only(&db).unwrap_err();
    let shown = error.to_string();
    assert!(shown.contains(db.to_str().unwrap()), "{shown}");
    assert!(shown.contains("读不了"), "{shown}");
}

#[test]
fn a_postgres_url_shows_itself_without_its_password_in_both_forms() {
    let url: PostgresUrl = "postgres://me:s3cret@db.example:6543/runs?sslmode=disable"
        .parse()
        .unwrap();
    let want = "postgres://me:***@db.example:6543/runs?sslmode=disable";
    assert_eq!(url.to_string(), want);
    assert_eq!(format!("{url:?}"), want);
}

#[test]
fn a_postgres_store_shows_its_url_without_the_password() {
    let Some(url) = pg::fresh_url() else { return };
    let parsed: PostgresUrl = url.parse().unwrap();
    let store = PostgresStore::open(&parsed).unwrap();
    let shown = format!("{store:?}");
    assert!(shown.starts_with("PostgresStore"), "{shown}");
    assert!(shown.contains(&parsed.to_string()), "{shown}");
    // A store that opened is one that works.
    let key = SessionKey::main("p", "s");
    store
        .append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "u"})]),
        )
        .unwrap();
    assert_eq!(store.load_json(&key).unwrap().unwrap().len(), 1);
}

/// Three entries of a main transcript and one of a sub-agent's, for the raw readers.
fn store_with_a_transcript(dir: &std::path::Path) -> (SqliteSessionStore, SessionKey) {
    let store = SqliteSessionStore::open(&dir.join("sessions.db")).unwrap();
    let key = SessionKey::main("p", "s");
    let entries = [
        json!({"type": "user", "uuid": "u1", "n": 1}),
        json!({"type": "assistant", "uuid": "a1", "n": 2}),
        json!({"type": "assistant", "uuid": "a2", "n": 3}),
    ];
    store
        .append(&key, &crate::support::typed(&entries))
        .unwrap();
    let sub = SessionKey::parse("p/s/subagents/agent-x").unwrap();
    store
        .append(
            &sub,
            &crate::support::typed(&[json!({"type": "assistant", "uuid": "b1", "n": 9})]),
        )
        .unwrap();
    (store, key)
}

fn field_n(raw: &[u8]) -> i64 {
    serde_json::from_slice::<serde_json::Value>(raw).unwrap()["n"]
        .as_i64()
        .unwrap()
}

/// What `flower log` reads: the rows of one type in order, and how many rows the key
/// holds in all; nothing for a key that holds none.
#[test]
fn scan_type_hands_over_one_types_rows_in_order_with_the_keys_total() {
    let dir = tempfile::tempdir().unwrap();
    let (store, key) = store_with_a_transcript(dir.path());
    let (total, seen) = store
        .scan_type(&key, "assistant", field_n)
        .unwrap()
        .unwrap();
    assert_eq!((total, seen), (3, vec![2, 3]));
    let (total, seen) = store.scan_type(&key, "summary", field_n).unwrap().unwrap();
    assert_eq!((total, seen), (3, vec![]));
    let unknown = SessionKey::main("p", "nobody");
    assert!(
        store
            .scan_type(&unknown, "assistant", field_n)
            .unwrap()
            .is_none()
    );
}

/// What `flower show` reads: every row of the key, in order, counted.
#[test]
fn for_each_raw_hands_over_every_row_of_the_key_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (store, key) = store_with_a_transcript(dir.path());
    let mut seen = Vec::new();
    assert_eq!(
        store
            .for_each_raw(&key, |raw| seen.push(field_n(raw)))
            .unwrap(),
        3
    );
    assert_eq!(seen, [1, 2, 3]);
    let unknown = SessionKey::main("p", "nobody");
    assert_eq!(
        store.for_each_raw(&unknown, |_| panic!("no rows")).unwrap(),
        0
    );
}

/// A store opened to read refuses writes itself, saying so, before SQLite is asked.
#[test]
fn a_read_only_store_refuses_writes_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (store, key) = store_with_a_transcript(dir.path());
    drop(store);
    let reader = SqliteSessionStore::open_read_only(&dir.path().join("sessions.db"))
        .unwrap()
        .unwrap();
    for refused in [
        reader.append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "new"})]),
        ),
        reader.delete(&key),
    ] {
        let shown = refused.unwrap_err().to_string();
        assert!(shown.contains("是只读打开的,不能写"), "{shown}");
    }
    assert_eq!(reader.load_json(&key).unwrap().unwrap().len(), 3);
}

/// An empty path is SQLite's private temporary database, which cannot be in WAL mode
/// and is gone when closed: refused, not silently taken as a store that keeps nothing.
#[test]
fn a_store_that_cannot_be_in_wal_mode_is_refused() {
    let error = SqliteSessionStore::open(std::path::Path::new("")).unwrap_err();
    let shown = error.to_string();
    assert!(shown.contains("切不到 WAL 模式"), "{shown}");
}

/// An empty `sessions.db` (made by hand, or left by a tool that created the file and
/// stopped) is made a store in place, WAL switch included, by whichever of several
/// processes opening it at once comes first: none of them fails on the others' locks.
#[test]
fn processes_opening_an_empty_database_at_once_all_get_the_store() {
    const OPENERS: usize = 6;
    for round in 0..15 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("sessions.db");
        std::fs::write(&db, b"").unwrap();
        let start = std::sync::Arc::new(std::sync::Barrier::new(OPENERS));
        let openers: Vec<_> = (0..OPENERS)
            .map(|i| {
                let (db, start) = (db.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let store = SqliteSessionStore::open(&db)
                        .unwrap_or_else(|e| panic!("round {round}, opener {i}: {e}"));
                    let uuid = format!("u{i}");
                    store
                        .append(
                            &SessionKey::main("p", "s"),
                            &crate::support::typed(&[json!({"type": "x", "uuid": uuid})]),
                        )
                        .unwrap();
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap();
        }
        let store = SqliteSessionStore::open(&db).unwrap();
        let key = SessionKey::main("p", "s");
        assert_eq!(store.load_json(&key).unwrap().unwrap().len(), OPENERS);
    }
}

/// A database whose directory refuses new files cannot get its write-ahead log: an
/// error that says where to look (not a retry until the busy timeout, nor a hang).
#[test]
fn a_database_whose_directory_refuses_its_log_says_to_check_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let db = runs.join("sessions.db");
    std::fs::write(&db, b"").unwrap();
    let Some(refusing) = Refusing::new(&runs) else {
        skipped("neither mode 0555 nor chattr +i makes a directory refuse files here");
        return;
    };
    let result = SqliteSessionStore::open(&db);
    drop(refusing);
    let shown = result.unwrap_err().to_string();
    assert!(shown.contains(db.to_str().unwrap()), "{shown}");
    assert!(shown.contains("它的目录可写吗?"), "{shown}");
}

const FULL_DISK_ROLE: &str = "FLOWER_EDGE_FULL_DISK";

/// A full disk is named as such, and the appends acknowledged before it stay whole.
/// The child runs this test binary in its own user and mount namespaces, its store on a
/// 256 KiB tmpfs, so nothing outside it fills up.
#[test]
fn a_full_disk_is_said_plainly_and_loses_no_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"mount -t tmpfs -o size=256k flowertest "$0" && exec "$@""#;
    let output = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", script])
        .arg(dir.path())
        .arg(std::env::current_exe().unwrap())
        .args([
            "store_edges::full_disk_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(FULL_DISK_ROLE, dir.path())
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        other => {
            skipped(&format!(
                "no user and mount namespace with a tmpfs here ({other:?})"
            ));
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = stdout
        .lines()
        .find_map(|l| l.split_once("full-disk: ").map(|(_, report)| report))
        .unwrap_or_else(|| panic!("no report from the child: {stdout}"));
    assert!(report.contains("磁盘满了"), "{report}");
    assert!(report.contains("acknowledged and loaded alike"), "{report}");
}

/// Not a test: the child of the one above. Does nothing in a normal test run.
#[test]
fn full_disk_child() {
    let Ok(dir) = std::env::var(FULL_DISK_ROLE) else {
        return;
    };
    let store = SqliteSessionStore::open(&std::path::Path::new(&dir).join("sessions.db")).unwrap();
    let key = SessionKey::main("p", "s");
    let mut acknowledged = 0;
    let error = loop {
        let entry =
            json!({"type": "x", "uuid": format!("u{acknowledged}"), "pad": "x".repeat(4000)});
        match store.append(&key, &crate::support::typed(&[entry])) {
            Ok(()) => acknowledged += 1,
            Err(e) => break e,
        }
        assert!(acknowledged < 1_000, "the tmpfs never filled up");
    };
    let loaded = store.load_json(&key).unwrap().map_or(0, |l| l.len());
    let same = if loaded == acknowledged {
        "acknowledged and loaded alike"
    } else {
        "acknowledged and loaded differ"
    };
    println!("full-disk: {error}; {acknowledged} {same} ({loaded} loaded)");
}

/// Holders of a run or a session describe themselves by this machine's name, which
/// must be the name the kernel gives (what `uname -n` prints), never empty.
#[test]
fn a_holder_names_this_machine_as_the_kernel_does() {
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::uname(&mut name) }, 0);
    let nodename = unsafe { std::ffi::CStr::from_ptr(name.nodename.as_ptr()) };
    let nodename = nodename.to_str().unwrap();
    assert!(!nodename.is_empty());
    assert_eq!(flower::stores::postgres::hostname(), nodename);
}

/// A run's lease is let go by the time dropping it returns: the holder is cleared and
/// the lock released, so the next `flower` on any host takes the run at once. Here the
/// release is held up (the test holds the run's row), and the drop must wait for it.
#[test]
fn dropping_a_run_lease_returns_only_once_the_run_is_released() {
    use flower::stores::postgres::Leased;
    let Some(url) = pg::fresh_url() else { return };
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let mut sql = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    sql.batch_execute(
        "INSERT INTO flower_runs (run_key, named, project_key, workspace, created_at, \
         updated_at) VALUES ('k', true, 'p', '/w', 0, 0)",
    )
    .unwrap();
    let Leased::Held(lease) = store
        .lease_run("k", "me", Some(std::time::Duration::ZERO), Box::new(|_| {}))
        .unwrap()
    else {
        panic!("a run nobody holds is taken")
    };
    let holder = |sql: &mut postgres::Client| -> Option<String> {
        sql.query_one("SELECT holder FROM flower_runs WHERE run_key = 'k'", &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(holder(&mut sql).as_deref(), Some("me"));

    let mut row = sql.transaction().unwrap();
    row.batch_execute("SELECT * FROM flower_runs WHERE run_key = 'k' FOR UPDATE")
        .unwrap();
    let (dropped_tx, dropped) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(lease);
        let _ = dropped_tx.send(());
    });
    // Not back while its release waits behind the row (a missing drop returns at once).
    assert!(
        dropped
            .recv_timeout(std::time::Duration::from_millis(500))
            .is_err(),
        "the drop returned before the run was released"
    );
    row.rollback().unwrap();
    dropped.recv().unwrap();
    dropper.join().unwrap();
    assert_eq!(holder(&mut sql), None);
    let again = store
        .lease_run(
            "k",
            "next",
            Some(std::time::Duration::ZERO),
            Box::new(|_| {}),
        )
        .unwrap();
    assert!(matches!(again, Leased::Held(_)), "the lock was let go");
}

/// A TCP proxy in front of the database that can freeze the connections it carries:
/// nothing more passes either way and neither end learns of it, as when a host's
/// network hangs; the server keeps such a connection, and its locks, until
/// [`Freezer::end_frozen`]. Connections made after a freeze pass as usual.
struct Freezer {
    port: u16,
    accepted: Arc<AtomicUsize>,
    /// New connections are closed at once (the database is away).
    refusing: Arc<AtomicBool>,
    frozen: Arc<Mutex<Vec<Carried>>>,
}

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One connection the proxy carries: whether it is frozen, and its two ends.
type Carried = (Arc<AtomicBool>, [TcpStream; 2]);

impl Freezer {
    fn start(target: std::net::SocketAddr) -> Freezer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let freezer = Freezer {
            port: listener.local_addr().unwrap().port(),
            accepted: Arc::default(),
            refusing: Arc::default(),
            frozen: Arc::default(),
        };
        let (accepted, all) = (freezer.accepted.clone(), freezer.frozen.clone());
        let refusing = freezer.refusing.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if refusing.load(Ordering::SeqCst) {
                    continue;
                }
                let (Ok(client), Ok(server)) = (client, TcpStream::connect(target)) else {
                    continue;
                };
                let frozen = Arc::new(AtomicBool::new(false));
                let ends = [client.try_clone().unwrap(), server.try_clone().unwrap()];
                all.lock().unwrap().push((frozen.clone(), ends));
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let frozen = frozen.clone();
                    std::thread::spawn(move || pass(from, to, &frozen));
                }
                accepted.fetch_add(1, Ordering::SeqCst);
            }
        });
        freezer
    }

    /// Every connection open now stops passing anything.
    fn freeze(&self) {
        for (frozen, _) in self.frozen.lock().unwrap().iter() {
            frozen.store(true, Ordering::SeqCst);
        }
    }

    /// The frozen connections end at both sides: the server frees their locks.
    fn end_frozen(&self) {
        for (frozen, ends) in self.frozen.lock().unwrap().iter() {
            if frozen.load(Ordering::SeqCst) {
                for end in ends {
                    let _ = end.shutdown(Shutdown::Both);
                }
            }
        }
    }

    /// From now on every new connection is closed as soon as it is made.
    fn refuse(&self) {
        self.refusing.store(true, Ordering::SeqCst);
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{scheme}://{user}@127.0.0.1:{}/{path}", self.port)
    }
}

/// Copies `from` to `to` until either ends, holding what it read while `frozen`; a
/// frozen connection's end is not passed on (the other side keeps waiting).
fn pass(mut from: TcpStream, mut to: TcpStream, frozen: &AtomicBool) {
    use std::io::{Read, Write};
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(n) if n > 0 => n,
            _ => break,
        };
        while frozen.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    if !frozen.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Both);
    }
}

/// A leased run whose connection hung, over a proxy that can freeze it, with `k`'s
/// row in `flower_runs`; `lost` hears when the lease gives the run up.
struct HungLease {
    freezer: Freezer,
    lease: Option<flower::stores::postgres::RunLease>,
    lost: std::sync::mpsc::Receiver<Option<String>>,
    /// A connection of the test's own, straight to the database.
    sql: postgres::Client,
    /// The store the lease came from, whose pooled connections are frozen too.
    _through: PostgresStore,
}

impl HungLease {
    /// The server process of the connection that holds `k`'s lock, while the run
    /// names `me`; `None` when it is free or names another.
    fn held_as_mine(&mut self) -> Option<i32> {
        self.sql
            .query_one(
                "SELECT (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND ((classid::bigint << 32) | objid::bigint) \
                     = hashtextextended(current_schema() || '/run/k', 0)) \
                 FROM flower_runs WHERE run_key = 'k' AND holder = 'me'",
                &[],
            )
            .ok()
            .and_then(|row| row.get(0))
    }
}

impl Drop for HungLease {
    fn drop(&mut self) {
        // Frozen connections end first: closing one waits for the server.
        self.freezer.end_frozen();
        self.lease.take();
    }
}

fn hung_lease() -> Option<HungLease> {
    use flower::stores::postgres::Leased;
    let url = pg::fresh_url()?;
    drop(PostgresStore::open(&url.parse().unwrap()).unwrap());
    let mut sql = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    sql.batch_execute(
        "INSERT INTO flower_runs (run_key, named, project_key, workspace, created_at, \
         updated_at) VALUES ('k', true, 'p', '/w', 0, 0)",
    )
    .unwrap();
    let freezer = Freezer::start(address(&url));
    let through = PostgresStore::open(&freezer.url(&url).parse().unwrap()).unwrap();
    let (lost_tx, lost) = std::sync::mpsc::channel();
    let on_lost = Box::new(move |held| {
        let _ = lost_tx.send(held);
    });
    let Leased::Held(lease) = through
        .lease_run("k", "me", Some(std::time::Duration::ZERO), on_lost)
        .unwrap()
    else {
        panic!("a run nobody holds is taken")
    };
    freezer.freeze();
    Some(HungLease {
        freezer,
        lease: Some(lease),
        lost,
        sql,
        _through: through,
    })
}

/// Waits (at most a minute) until the proxy has carried `n` connections.
fn wait_for_connections(freezer: &Freezer, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while freezer.connections() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never reconnected"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The lease's connection hangs; the server still holds the old connection's lock, and
/// the run still names this process. Those refusals are the server being slow to
/// notice, not a loss: the lease keeps asking and retakes the run once the server lets
/// the old connection go.
#[test]
fn a_hung_lease_waits_for_the_server_to_let_go_of_its_old_lock_and_retakes_the_run() {
    let Some(mut hung) = hung_lease() else { return };
    let before = hung.freezer.connections();
    // Three refused retakes (each on a fresh connection), then the server lets go.
    wait_for_connections(&hung.freezer, before + 3);
    let old = hung
        .held_as_mine()
        .expect("the old connection still holds it");
    hung.freezer.end_frozen();
    // Held again by the lease on a new connection, and not given up.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        assert!(
            hung.lost.try_recv().is_err(),
            "the lease gave up its own run"
        );
        if hung.held_as_mine().is_some_and(|pid| pid != old) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run was never retaken"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        hung.lost.try_recv().is_err(),
        "the lease gave up its own run"
    );
}

/// The old connection's lock never goes (someone holds the run without saying so): the
/// lease gives up after its ten refusals and says who the run names.
#[test]
fn a_hung_lease_whose_lock_never_comes_back_is_given_up_after_ten_refusals() {
    let Some(hung) = hung_lease() else { return };
    let before = hung.freezer.connections();
    let held = hung
        .lost
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the lease never gave up a run it could not retake");
    assert_eq!(held.as_deref(), Some("me"));
    // One connection per refusal: the ten waited out and the one that gave up.
    assert_eq!(hung.freezer.connections() - before, 11);
}

/// An empty database another connection is writing to (it holds the write lock, as a
/// second flower making the same store would): the WAL switch is refused at once, not
/// waited for by SQLite itself, so `open` retries it until the writer is done.
#[test]
fn opening_an_empty_database_waits_out_a_writer_that_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.db");
    std::fs::write(&db, b"").unwrap();
    let writer = rusqlite::Connection::open(&db).unwrap();
    writer.execute_batch("BEGIN IMMEDIATE").unwrap();
    let opener = {
        let db = db.clone();
        std::thread::spawn(move || SqliteSessionStore::open(&db).map(|_| ()))
    };
    // Long enough for the opener to meet the lock (the outcome does not hang on it).
    std::thread::sleep(std::time::Duration::from_millis(300));
    writer.execute_batch("COMMIT").unwrap();
    opener.join().unwrap().unwrap();
    let store = SqliteSessionStore::open(&db).unwrap();
    let key = SessionKey::main("p", "s");
    store
        .append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "u"})]),
        )
        .unwrap();
    assert_eq!(store.load_json(&key).unwrap().unwrap().len(), 1);
}

/// A second `flower` may start while the first is still letting go of the run (a
/// killed process's connection takes the server a moment to end): `lease_run` waits up
/// to the time it is given for the holder to let go, and then holds the run.
#[test]
fn a_lease_waits_for_a_holder_that_lets_go_within_the_wait() {
    use flower::stores::postgres::Leased;
    let Some(url) = pg::fresh_url() else { return };
    let first = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let second = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let lease = |store: &PostgresStore, who: &str, wait: u64| {
        store
            .lease_run(
                "k",
                who,
                Some(std::time::Duration::from_secs(wait)),
                Box::new(|_| {}),
            )
            .unwrap()
    };
    let Leased::Held(held) = lease(&first, "first", 0) else {
        panic!("a run nobody holds is taken")
    };
    let letting_go = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(held);
    });
    let took = lease(&second, "second", 30);
    assert!(matches!(took, Leased::Held(_)), "waited for the holder");
    letting_go.join().unwrap();
}

fn hold(store: &PostgresStore, session: &str) -> flower::stores::SessionHold {
    store.hold_session(session, false).unwrap()
}

fn is_held(hold: &flower::stores::SessionHold) -> bool {
    matches!(hold, flower::stores::SessionHold::Held(_))
}

/// One process may hold a session twice (the pipeline, and a step inside it): the
/// session stays held, for other processes, until both holds are let go.
#[test]
fn a_session_held_twice_by_one_process_stays_held_until_both_let_go() {
    let Some(url) = pg::fresh_url() else { return };
    let mine = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let other = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let first = hold(&mine, "s");
    let second = hold(&mine, "s");
    assert!(is_held(&first) && is_held(&second));
    assert!(!is_held(&hold(&other, "s")));
    drop(first);
    // Answered after the release queued before it: the release has been handled.
    let _behind = hold(&mine, "t");
    assert!(
        !is_held(&hold(&other, "s")),
        "the second hold still holds it"
    );
    drop(second);
    let _behind = hold(&mine, "u");
    assert!(is_held(&hold(&other, "s")), "let go by both");
}

const LONG_HOST_ROLE: &str = "FLOWER_EDGE_LONG_HOST";

/// How a session's holder names itself is cut to the 63 bytes PostgreSQL keeps of a
/// connection's name, and no shorter: on a host with a long name the tag ends with as
/// much of it as fits. The child runs in its own UTS namespace, under a 60-letter name.
#[test]
fn a_holders_tag_keeps_all_63_bytes_on_a_host_with_a_long_name() {
    let Some(url) = pg::fresh_url() else { return };
    let host = "h".repeat(60);
    let output = std::process::Command::new("unshare")
        .args(["--user", "--map-root-user", "--uts", "sh", "-c"])
        .arg(r#"hostname "$0" && exec "$@""#)
        .arg(&host)
        .arg(std::env::current_exe().unwrap())
        .args([
            "store_edges::long_host_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LONG_HOST_ROLE, &url)
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        other => {
            skipped(&format!("no user and UTS namespace here ({other:?})"));
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tag = stdout
        .lines()
        .find_map(|l| l.split_once("holder tag: ").map(|(_, tag)| tag))
        .unwrap_or_else(|| panic!("no report from the child: {stdout}"));
    assert_eq!(tag.len(), 63, "{tag:?}");
    assert!(tag.starts_with("flower "), "{tag:?}");
    let (_, cut_host) = tag.rsplit_once(' ').unwrap();
    assert!(
        !cut_host.is_empty() && host.starts_with(cut_host),
        "as much of the host as fits: {tag:?}"
    );
}

/// Not a test: the child of the one above. Does nothing in a normal test run.
#[test]
fn long_host_child() {
    let Ok(url) = std::env::var(LONG_HOST_ROLE) else {
        return;
    };
    let holder = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let other = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let _held = hold(&holder, "s");
    match hold(&other, "s") {
        flower::stores::SessionHold::Busy(Some(tag)) => println!("holder tag: {tag}"),
        _ => panic!("the session was not seen held, or its holder unnamed"),
    }
}

/// The database away when a session is first held: an outage to wait out
/// ([`StoreError::Unavailable`]), not a broken store.
#[test]
fn holding_a_session_while_the_database_is_away_is_an_outage() {
    let Some(url) = pg::fresh_url() else { return };
    let proxy = Freezer::start(address(&url));
    let store = PostgresStore::open(&proxy.url(&url).parse().unwrap()).unwrap();
    proxy.refuse();
    match store.hold_session("s", false) {
        Err(flower::stores::StoreError::Unavailable { why, .. }) => assert!(!why.is_empty()),
        Err(other) => panic!("an outage, not {other:?}"),
        Ok(_) => panic!("held through a database that is away"),
    }
}

/// What the database refuses for what was sent (here a uuid holding a NUL, which a
/// PostgreSQL text cannot) is the store's error, not an outage: waiting would not help.
#[test]
fn a_refused_write_is_an_error_not_an_outage() {
    let Some(store) = crate::store_conformance::postgres_store() else {
        return;
    };
    let key = SessionKey::main("p", "s");
    match store.append(
        &key,
        &crate::support::typed(&[json!({"type": "x", "uuid": "a\u{0}b"})]),
    ) {
        Err(error @ flower::stores::StoreError::Database { .. }) => {
            assert!(!error.is_transient(), "{error}")
        }
        other => panic!("the database's refusal, not {other:?}"),
    }
    // The refusal came inside a transaction: the connection it came on is not left in
    // it (every pooled connection is used, twice over).
    let rounds = 2 * flower::stores::postgres::POOL_SIZE;
    for i in 0..rounds {
        let uuid = format!("u{i}");
        store
            .append(
                &key,
                &crate::support::typed(&[json!({"type": "x", "uuid": uuid})]),
            )
            .unwrap();
    }
    assert_eq!(store.load_json(&key).unwrap().unwrap().len(), rounds);
}

/// A server with no connection to spare (`too many connections`, 53300) is an outage
/// to wait out, like one that is down.
#[test]
fn a_server_with_no_connection_to_spare_is_an_outage() {
    let Some(url) = pg::fresh_url() else { return };
    let role = format!("full_{}", uuid::Uuid::new_v4().simple());
    pg::execute(
        &url,
        &format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 0"),
    );
    let (_, rest) = url.split_once('@').unwrap();
    let as_role = format!("postgres://{role}@{rest}");
    match PostgresStore::open(&as_role.parse().unwrap()) {
        Err(error @ flower::stores::StoreError::Unavailable { .. }) => {
            assert!(error.is_transient(), "{error}");
            assert!(
                error.to_string().contains("too many connections"),
                "{error}"
            );
            // The server's error is the typed source; printed, its message is said once.
            let db = std::error::Error::source(&error)
                .and_then(|s| s.downcast_ref::<postgres::error::DbError>())
                .map(|db| db.code().code().to_string());
            assert_eq!(db.as_deref(), Some("53300"), "{error:?}");
            let chain = flower::error::chain(&error);
            assert_eq!(chain.matches("too many connections").count(), 1, "{chain}");
        }
        other => panic!("an outage, not {other:?}"),
    }
    pg::execute(&url, &format!("DROP ROLE {role}"));
}

/// A server that answers the startup with a refusal worth waiting out is an outage:
/// PostgreSQL starting up or shutting down (57P03), or a pooler in front of it that
/// has no connection to give or cannot reach it (PgBouncer's 08P01). A one-shot
/// listener plays the server: it reads the startup message and answers as they do.
#[test]
fn a_server_that_refuses_the_startup_for_now_is_an_outage() {
    for (code, message) in [
        ("57P03", "the database system is starting up"),
        ("08P01", "no more connections allowed (max_client_conn)"),
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut client, _) = listener.accept().unwrap();
            refuse_startup(&mut client, code, message);
        });
        let url = format!("postgres://flower@127.0.0.1:{port}/flower?connect_timeout=10");
        match PostgresStore::open(&url.parse().unwrap()) {
            Err(error @ flower::stores::StoreError::Unavailable { .. }) => {
                assert!(error.is_transient(), "{error}");
                assert!(error.to_string().contains(code), "{error}");
            }
            other => panic!("{code}: an outage, not {other:?}"),
        }
        server.join().unwrap();
    }
}

/// Reads a startup message (after declining TLS if asked) and answers with a FATAL
/// ErrorResponse, as a server does before any query, then closes.
fn refuse_startup(client: &mut TcpStream, code: &str, message: &str) {
    use std::io::{Read, Write};
    const SSL_REQUEST: u32 = 80_877_103;
    loop {
        let mut head = [0u8; 8];
        client.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
        let kind = u32::from_be_bytes(head[4..].try_into().unwrap());
        let mut rest = vec![0u8; len - 8];
        client.read_exact(&mut rest).unwrap();
        if kind == SSL_REQUEST {
            client.write_all(b"N").unwrap();
            continue;
        }
        break;
    }
    let mut fields = Vec::new();
    for (tag, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        fields.push(tag);
        fields.extend_from_slice(value.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut reply = vec![b'E'];
    reply.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
    reply.extend_from_slice(&fields);
    client.write_all(&reply).unwrap();
}

/// A statement the server cuts short by ending its connection (an administrator's
/// `pg_terminate_backend`, a failover: 57P01) is an outage, not a broken store.
#[test]
fn a_statement_whose_connection_the_server_ends_is_an_outage() {
    let Some(url) = pg::fresh_url() else { return };
    let name = format!("cut_{}", uuid::Uuid::new_v4().simple());
    let store =
        PostgresStore::open(&format!("{url}&application_name={name}").parse().unwrap()).unwrap();
    let key = SessionKey::main("p", "s");
    store
        .append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "u1"})]),
        )
        .unwrap();
    // The session's summary row locked: the next append waits on it.
    let mut sql = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut row = sql.transaction().unwrap();
    row.batch_execute("SELECT * FROM flower_summaries FOR UPDATE")
        .unwrap();
    let waiting = std::thread::spawn(move || {
        store.append(
            &key,
            &crate::support::typed(&[json!({"type": "x", "uuid": "u2"})]),
        )
    });
    let mut watcher = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let ended: i64 = watcher
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&name],
            )
            .unwrap()
            .get(0);
        if ended > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the append never waited"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    match waiting.join().unwrap() {
        Err(error @ flower::stores::StoreError::Unavailable { .. }) => {
            assert!(error.is_transient(), "{error}")
        }
        other => panic!("an outage, not {other:?}"),
    }
    row.rollback().unwrap();
}
