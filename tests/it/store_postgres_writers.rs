//! Several processes appending to one PostgreSQL session. Each store folds a session's
//! summary from the copy it wrote last and sends the append in one round trip; when
//! another writer moved the summary meanwhile (or an entry was there already), it must
//! notice and fold from what is stored. The check: whoever writes, replays or deletes,
//! the transcript and the summary are what the SQLite store (which reads the summary
//! inside its transaction) makes of the same calls.

use crate::support::LoadJson;
use crate::support::postgres as pg;
use flower::stores::{PostgresStore, SessionKey, SessionStore, SqliteSessionStore};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One call, by writer 0 or 1.
#[derive(Debug, Clone)]
enum Call {
    Append(usize, Vec<Value>),
    /// Batch `k` (modulo how many there were) again: every uuid in it is stored already.
    Replay(usize, usize),
    Delete(usize),
}

/// An entry with a uuid from a small set (so batches repeat uuids, within and across
/// them) and one field the summary folds.
fn entry() -> impl Strategy<Value = Value> {
    (prop::option::of(0u8..6), 0u8..7, 0u8..3).prop_map(|(uuid, field, n)| {
        let mut entry = match field {
            0 => json!({"type": "user", "message": {"role": "user", "content": format!("prompt {n}")}}),
            1 => json!({"type": "x", "customTitle": format!("title {n}")}),
            2 => json!({"type": "tag", "tag": if n == 0 { String::new() } else { format!("tag {n}") }}),
            3 => json!({"type": "x", "gitBranch": format!("branch {n}")}),
            4 => json!({"type": "x", "cwd": format!("/work/{n}")}),
            5 => json!({"type": "x", "timestamp": format!("2026-01-0{}T00:00:00Z", n + 1)}),
            _ => json!({"type": "x", "lastPrompt": format!("last {n}")}),
        };
        if let Some(uuid) = uuid {
            entry["uuid"] = json!(format!("u{uuid}"));
        }
        entry
    })
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        6 => (0usize..2, prop::collection::vec(entry(), 1..4)).prop_map(|(w, b)| Call::Append(w, b)),
        2 => (0usize..2, 0usize..8).prop_map(|(w, k)| Call::Replay(w, k)),
        1 => (0usize..2).prop_map(Call::Delete),
    ]
}

fn summaries(store: &dyn SessionStore) -> Vec<(String, Value)> {
    let mut all: Vec<_> = store
        .list_session_summaries("p")
        .unwrap()
        .into_iter()
        .map(|s| (s.session_id, s.data))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn two_writers_leave_the_summary_sqlite_makes(calls in prop::collection::vec(call(), 1..14)) {
        let Some(url) = pg::fresh_url() else { return Ok(()) };
        let writers = [
            PostgresStore::open(&url.parse().unwrap()).unwrap(),
            PostgresStore::open(&url.parse().unwrap()).unwrap(),
        ];
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteSessionStore::open(&dir.path().join("sessions.db")).unwrap();
        let key = SessionKey::main("p", "s");
        let mut batches: Vec<Vec<Value>> = Vec::new();
        for call in calls {
            match call {
                Call::Append(w, batch) => {
                    let stored = writers[w].append_counted(&key, &crate::support::typed(&batch)).unwrap();
                    prop_assert_eq!(stored, sqlite.append_counted(&key, &crate::support::typed(&batch)).unwrap());
                    batches.push(batch);
                }
                Call::Replay(w, k) if !batches.is_empty() => {
                    let batch = batches[k % batches.len()].clone();
                    let stored = writers[w].append_counted(&key, &crate::support::typed(&batch)).unwrap();
                    prop_assert_eq!(stored, sqlite.append_counted(&key, &crate::support::typed(&batch)).unwrap());
                }
                Call::Replay(..) => {}
                Call::Delete(w) => {
                    writers[w].delete(&key).unwrap();
                    sqlite.delete(&key).unwrap();
                }
            }
            prop_assert_eq!(writers[0].load_json(&key).unwrap(), sqlite.load_json(&key).unwrap());
            prop_assert_eq!(summaries(&writers[1]), summaries(&sqlite));
        }
    }
}

/// The summary's `mtime` is the time of the latest append, whichever writer made it and
/// whichever way (folded from its own copy or read first), and never goes back.
#[test]
fn the_summary_time_is_the_latest_appends_between_writers() {
    let Some(url) = pg::fresh_url() else { return };
    let writers = [
        PostgresStore::open(&url.parse().unwrap()).unwrap(),
        PostgresStore::open(&url.parse().unwrap()).unwrap(),
    ];
    let key = SessionKey::main("p", "s");
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let mut last = 0;
    for i in 0..20 {
        let before = now_ms();
        // Writer 0 twice, then writer 1: each writer appends after itself and after
        // the other.
        writers[i % 3 / 2]
            .append(
                &key,
                &crate::support::typed(&[json!({"type": "x", "uuid": format!("u{i}")})]),
            )
            .unwrap();
        let mtime = writers[0].list_session_summaries("p").unwrap()[0].mtime;
        assert!(
            mtime >= before,
            "append {i}: mtime {mtime} is older than the append ({before})"
        );
        assert!(mtime >= last, "append {i}: {mtime} < {last}");
        last = mtime;
    }
}

/// One writer's appends to its session take one round trip each once it has written
/// the summary (the first reads it); a sub-agent's transcript has no summary and never
/// reads first; another writer's append makes the next one read first again.
#[test]
fn appends_take_one_round_trip_after_the_first() {
    let Some(url) = pg::fresh_url() else { return };
    let [a, b] = [
        PostgresStore::open(&url.parse().unwrap()).unwrap(),
        PostgresStore::open(&url.parse().unwrap()).unwrap(),
    ];
    let key = SessionKey::main("p", "s");
    let line = |i: usize| [json!({"type": "x", "uuid": format!("u{i}")})];
    for i in 0..5 {
        a.append(&key, &crate::support::typed(&line(i))).unwrap();
    }
    let trips = a.append_trips();
    assert_eq!((trips.one_trip, trips.read_first), (4, 1), "{trips:?}");

    let sub = SessionKey {
        subpath: Some("subagents/agent-1".into()),
        ..key.clone()
    };
    a.append(&sub, &crate::support::typed(&line(10))).unwrap();
    a.append(&sub, &crate::support::typed(&line(11))).unwrap();
    assert_eq!(a.append_trips().one_trip, 6, "{:?}", a.append_trips());

    b.append(&key, &crate::support::typed(&line(20))).unwrap();
    a.append(&key, &crate::support::typed(&line(21))).unwrap();
    assert_eq!(
        a.append_trips().read_first,
        2,
        "after another writer's append the summary is read first: {:?}",
        a.append_trips()
    );
    a.append(&key, &crate::support::typed(&line(22))).unwrap();
    assert_eq!(a.append_trips().one_trip, 7, "{:?}", a.append_trips());
}

/// Every connection of the store carries the server-side settings that end a vanished
/// host's connection (and its locks) and a transaction whose client stopped sending.
#[test]
fn connections_carry_the_server_side_keepalives_and_transaction_timeout() {
    let Some(url) = pg::fresh_url() else { return };
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    // Both pool connections: calls alternate between the pool's threads only by
    // chance, so ask often enough that each has answered.
    for _ in 0..8 {
        assert_eq!(
            store
                .server_setting("idle_in_transaction_session_timeout")
                .unwrap(),
            "1min"
        );
        assert_eq!(store.server_setting("tcp_keepalives_idle").unwrap(), "30");
        assert_eq!(store.server_setting("tcp_keepalives_count").unwrap(), "3");
    }
}
