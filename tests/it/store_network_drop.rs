//! A PostgreSQL store behind a network that silently drops every packet (issue 29 item
//! 8): a store call in flight when the network goes must not hang. The driver's
//! defaults would wait for hours (keepalives after 2 hours idle, no user timeout);
//! flower's defaults (keepalives 30 s idle, 10 s apart, and a 30 s `tcp_user_timeout`)
//! or the URL's own values end the connection, the step waits the outage out as for a
//! database that went away (docs/postgres.md, "When the database goes away"), and
//! resumes once packets pass again.
//!
//! The network is a real one that drops ([`DroppingLink`]: a veth pair into a network
//! namespace whose nftables drop everything), not a proxy that stops copying: the
//! kernel must see no acknowledgement. Skipped, saying why, without root, iproute2 and
//! nftables, or without `FLOWER_TEST_POSTGRES_URL`.

use crate::store_shared_run::address;
use crate::support::Flower;
use crate::support::LoadJson;
use crate::support::netns::DroppingLink;
use crate::support::pipeline::plain;
use crate::support::postgres as pg;
use crate::support::{FakeServer, Gate, Reply};
use flower::stores::{PostgresStore, SessionKey, SessionStore, project_key};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Only reached when something is broken.
const TIMEOUT: Duration = Duration::from_secs(60);

/// After the drop is lifted, how long the run may take to finish: the server's side
/// of the lost connection (its transaction holds the session's append lock) ends
/// when its next retransmission meets the reset of a socket that is gone, up to about
/// one backed-off retransmission interval later.
const FINISH_WITHIN: Duration = Duration::from_secs(180);

/// `flower` killed (and reaped) when the test fails before it ended.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `url` (the test server, straight) with its host and port replaced by `at`, and
/// `params` added to its query.
fn through(url: &str, at: SocketAddr, params: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, rest) = rest.split_once('@').unwrap();
    let (_, path) = rest.split_once('/').unwrap();
    let mut url = format!("{scheme}://{user}@{at}/{path}");
    if !params.is_empty() {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(params);
    }
    url
}

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).unwrap()
}

/// What the network loses.
#[derive(Debug, Clone, Copy)]
enum Dropping {
    /// Every packet, both ways.
    Everything,
    /// What flower sends (data, and its closing), one way; its bare
    /// acknowledgements and the database's answers pass.
    DataToTheDatabase,
}

/// `flower once` on a store reached through a [`DroppingLink`], with `params` added to
/// its URL. Its first reply is stored while the test holds `flower_entries` locked, so
/// that the insert is in flight (sent, acknowledged, waiting for its answer) when the
/// network starts dropping; the lock is then let go, and the server's answer is lost
/// ([`Dropping::Everything`]) or flower's next statement is.
/// Asserts that flower says it waits for the database within `noticed_within` of the
/// drop, and, once packets pass again, resumes the same session and ends well (as
/// docs/postgres.md promises: an outage, waited out, the reply asked again).
fn a_store_call_in_flight_on_a_dropping_network(
    params: &str,
    noticed_within: Duration,
    dropping: Dropping,
) {
    let Some(url) = pg::fresh_url() else { return };
    let Some(mut link) = DroppingLink::new() else {
        return;
    };
    // Tables made directly, so that only the run's own connections cross the link.
    drop(PostgresStore::open(&url.parse().unwrap()).unwrap());
    let at = link.forward(address(&url));
    let store_url = through(&url, at, params);

    let gate = Gate::new();
    let server = FakeServer::start(vec![
        Reply::text("第一次回答").gate_before(&gate),
        Reply::text("接着做完了"),
    ]);
    let dir = TempDir::new().unwrap();
    let mut cmd = Flower::bin().server(&server).command();
    let mut child = Running(Some(
        cmd.current_dir(dir.path())
            .args(["once", "干点活", "--store", &store_url])
            .env("FLOWER_PROBE_INTERVAL", "0.2")
            .env("FLOWER_PROBE_TIMEOUT", "1")
            .env("FLOWER_BASE_DELAY", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let proc = child.0.as_mut().unwrap();
    let stdout = proc.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut text);
        text
    });
    let (lines_tx, lines) = mpsc::channel::<(Instant, String)>();
    let stderr = proc.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });

    assert!(gate.wait_reached(TIMEOUT), "the model was never asked");
    // The reply's insert will wait for this lock, in flight on flower's connection.
    let mut locker = client(&url);
    locker
        .batch_execute("BEGIN; LOCK TABLE flower_entries IN EXCLUSIVE MODE")
        .unwrap();
    gate.open();
    let mut watcher = client(&url);
    let deadline = Instant::now() + TIMEOUT;
    while watcher
        .query_one(
            "SELECT count(*) FROM pg_locks \
             WHERE NOT granted AND relation = 'flower_entries'::regclass",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(Instant::now() < deadline, "flower never stored the reply");
        std::thread::sleep(Duration::from_millis(20));
    }
    match dropping {
        Dropping::Everything => link.drop_packets(),
        Dropping::DataToTheDatabase => link.drop_data_coming_in(),
    }
    let dropped_at = Instant::now();
    // The server answers the insert now; the answer is lost on the way.
    locker.batch_execute("ROLLBACK").unwrap();

    let probing = format!("{}:{}", at.ip(), at.port());
    let mut said = String::new();
    let noticed_at = loop {
        let left = (dropped_at + noticed_within).saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok((when, line)) => {
                said.push_str(&line);
                said.push('\n');
                if line.contains("数据库连不上,已等 ") && line.contains(&probing) {
                    break when;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "flower did not notice within {noticed_within:?} that the network drops \
                 everything (a hang): {said}"
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("flower ended without waiting for the database: {said}")
            }
        }
    };
    let noticed = noticed_at - dropped_at;
    // It names what is away: the database, not the network of the model.
    assert!(!said.contains("网络不通"), "{said}");
    assert!(link.dropped() > 0, "nothing was dropped: {said}");

    link.restore();
    let restored_at = Instant::now();
    let status = loop {
        if let Some(status) = child.0.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        while let Ok((_, line)) = lines.try_recv() {
            said.push_str(&line);
            said.push('\n');
        }
        assert!(
            restored_at.elapsed() < FINISH_WITHIN,
            "flower did not finish after the network came back: {said}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let finished = restored_at.elapsed();
    child.0.take();
    while let Ok((_, line)) = lines.recv_timeout(Duration::from_secs(5)) {
        said.push_str(&line);
        said.push('\n');
    }
    let stdout = stdout.join().unwrap();
    assert!(status.success(), "{status}: {said}");
    assert!(stdout.contains("接着做完了"), "{stdout}");
    assert!(said.contains("数据库恢复,接着跑"), "{said}");

    // The reply whose storing was lost is asked again, in the same conversation.
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{said}");
    assert!(
        requests[1]
            .last_user_text()
            .ends_with(flower::continuity::resilience::RESUME_PROMPT),
        "{}",
        requests[1].last_user_text()
    );
    assert!(plain(requests[1].messages()).to_string().contains("干点活"));
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    let project = project_key(&dir.path().canonicalize().unwrap());
    let sessions = store.list_sessions(&project).unwrap();
    assert_eq!(sessions.len(), 1, "{said}");
    let key = SessionKey::main(project, &sessions[0].session_id);
    let all = Value::Array(store.load_json(&key).unwrap().unwrap().to_vec()).to_string();
    assert!(
        all.contains("干点活") && all.contains("接着做完了"),
        "{all}"
    );
    eprintln!(
        "network drop ({dropping:?}, {}): noticed after {noticed:.1?}, finished \
         {finished:.1?} after packets passed again",
        if params.is_empty() {
            "defaults"
        } else {
            params
        }
    );
}

/// With the URL's defaults: flower's keepalives and user timeout end the connection
/// within about 40 s of the drop (30 s idle, then an unanswered probe past the 30 s
/// user timeout; 33–42 s measured); the driver's own defaults would wait over 2 hours.
#[test]
fn a_store_call_on_a_network_that_drops_packets_is_an_outage_not_a_hang() {
    a_store_call_in_flight_on_a_dropping_network("", Duration::from_secs(90), Dropping::Everything);
}

/// The URL's own values win, and `tcp_user_timeout` counts milliseconds as in libpq
/// (`tcp_user_timeout=1500` is 1.5 s): noticed in a few seconds, well before the
/// defaults could.
#[test]
fn the_urls_keepalives_and_tcp_user_timeout_are_honoured() {
    a_store_call_in_flight_on_a_dropping_network(
        "keepalives_idle=1&keepalives_interval=1&tcp_user_timeout=1500",
        Duration::from_secs(25),
        Dropping::Everything,
    );
}

/// The database's answers arrive but what flower sends next never does (only bare
/// acknowledgements pass): data in flight, which keepalives never probe, so only the
/// `tcp_user_timeout` ends it (1.5 s from the URL here; the driver would have read
/// 1500 s). The server's side is left idle inside the append's transaction; the run
/// waits, then resumes once packets pass again.
#[test]
fn a_statement_lost_on_the_way_ends_at_the_tcp_user_timeout() {
    a_store_call_in_flight_on_a_dropping_network(
        "tcp_user_timeout=1500",
        Duration::from_secs(25),
        Dropping::DataToTheDatabase,
    );
}

/// A connection to a host that drops every packet (no answer to the SYN, no refusal)
/// ends at the connect timeout, 10 s unless the URL says: an outage to wait out, not
/// the kernel's two minutes of SYN retries first.
#[test]
fn a_connection_never_answered_ends_at_the_connect_timeout() {
    let Some(url) = pg::fresh_url() else { return };
    let Some(mut link) = DroppingLink::new() else {
        return;
    };
    let at = link.forward(address(&url));
    link.drop_packets();
    for (params, within) in [
        ("", Duration::from_secs(60)),
        ("connect_timeout=1", Duration::from_secs(8)),
    ] {
        let started = Instant::now();
        let opened = PostgresStore::open(&through(&url, at, params).parse().unwrap());
        let waited = started.elapsed();
        match opened {
            Err(error @ flower::stores::StoreError::Unavailable { .. }) => {
                assert!(error.is_transient(), "{error}")
            }
            other => panic!("an outage, not {other:?}"),
        }
        assert!(waited < within, "{params:?}: gave up after {waited:?}");
    }
}
