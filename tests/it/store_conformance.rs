//! The 14 contracts of the Claude Agent SDK's session-store conformance suite
//! (`claude_agent_sdk.testing.run_session_store_conformance`), plus flower's own:
//! uuid idempotency, summary fields, keys and project keys.
//!
//! Every contract runs against the SQLite store, the PostgreSQL store (when
//! `FLOWER_TEST_POSTGRES_URL` names a server; else it is skipped with a printed reason)
//! and the pruning store wrapping each (entries of type "x" are not chain entries, so
//! pruning passes them through).

use crate::support::LoadJson;
use crate::support::postgres as pg;
use flower::stores::prune::PruneOptions;
use flower::stores::{
    PostgresStore, PruningSessionStore, SessionKey, SessionStore, SqliteSessionStore, StoreError,
    project_key,
};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use tempfile::TempDir;

type Fresh = fn() -> (TempDir, Box<dyn SessionStore>);

fn sqlite() -> (TempDir, Box<dyn SessionStore>) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteSessionStore::open(&dir.path().join("runs/sessions.db")).unwrap();
    (dir, Box::new(store))
}

fn pruning() -> (TempDir, Box<dyn SessionStore>) {
    let dir = tempfile::tempdir().unwrap();
    let inner = SqliteSessionStore::open(&dir.path().join("sessions.db")).unwrap();
    let options = PruneOptions::new(dir.path().join("trimmed"));
    (
        dir,
        Box::new(PruningSessionStore::new(Arc::new(inner), options)),
    )
}

/// A store on a new schema of the test server; `None` without one.
pub fn postgres_store() -> Option<PostgresStore> {
    let url = pg::fresh_url()?;
    Some(PostgresStore::open(&url.parse().unwrap()).unwrap())
}

fn postgres() -> (TempDir, Box<dyn SessionStore>) {
    let dir = tempfile::tempdir().unwrap();
    (dir, Box::new(postgres_store().unwrap()))
}

fn postgres_pruning() -> (TempDir, Box<dyn SessionStore>) {
    let dir = tempfile::tempdir().unwrap();
    let inner = postgres_store().unwrap();
    let options = PruneOptions::new(dir.path().join("trimmed"));
    (
        dir,
        Box::new(PruningSessionStore::new(Arc::new(inner), options)),
    )
}

/// Every backend the suite runs against: one suite, parameterised by how a fresh,
/// empty store is made.
fn stores() -> Vec<(&'static str, Fresh)> {
    let mut stores: Vec<(&'static str, Fresh)> = vec![("sqlite", sqlite), ("pruning", pruning)];
    if pg::url().is_some() {
        stores.push(("postgres", postgres));
        stores.push(("postgres+pruning", postgres_pruning));
    }
    stores
}

fn e(fields: Value) -> Value {
    let mut entry = json!({"type": "x"});
    entry
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    entry
}

fn key() -> SessionKey {
    SessionKey::main("proj", "sess")
}

fn sub(name: &str) -> SessionKey {
    key().sub(name).unwrap()
}

#[test]
fn c01_append_then_load_returns_the_same_entries_in_order() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        let entries = vec![
            e(json!({"uuid": "b", "n": 1, "nested": {"z": [1, 2, {"k": null}], "a": "ü"}})),
            e(json!({"uuid": "a", "n": 2})),
        ];
        s.append(&key(), &crate::support::typed(&entries)).unwrap();
        assert_eq!(s.load_json(&key()).unwrap(), Some(entries), "{name}");
    }
}

#[test]
fn c02_unknown_key_and_unknown_subpath_load_as_none() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        assert_eq!(
            s.load_json(&SessionKey::main("proj", "nope")).unwrap(),
            None,
            "{name}"
        );
        s.append(&key(), &crate::support::typed(&[e(json!({"uuid": "x"}))]))
            .unwrap();
        assert_eq!(s.load_json(&sub("nope")).unwrap(), None, "{name}");
    }
}

#[test]
fn c03_several_appends_keep_call_order() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(
            &key(),
            &crate::support::typed(&[e(json!({"uuid": "z", "n": 1}))]),
        )
        .unwrap();
        s.append(
            &key(),
            &crate::support::typed(&[
                e(json!({"uuid": "a", "n": 2})),
                e(json!({"uuid": "m", "n": 3})),
            ]),
        )
        .unwrap();
        s.append(
            &key(),
            &crate::support::typed(&[e(json!({"uuid": "b", "n": 4}))]),
        )
        .unwrap();
        let ns: Vec<i64> = s
            .load_json(&key())
            .unwrap()
            .unwrap()
            .iter()
            .map(|x| x["n"].as_i64().unwrap())
            .collect();
        assert_eq!(ns, [1, 2, 3, 4], "{name}");
    }
}

#[test]
fn c04_append_of_nothing_is_a_no_op() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(&key(), &crate::support::typed(&[])).unwrap();
        assert_eq!(
            s.load_json(&key()).unwrap(),
            None,
            "{name}: [] must not create the key"
        );
        assert!(s.list_sessions("proj").unwrap().is_empty(), "{name}");
        s.append(&key(), &crate::support::typed(&[e(json!({"uuid": "a"}))]))
            .unwrap();
        s.append(&key(), &crate::support::typed(&[])).unwrap();
        assert_eq!(s.load_json(&key()).unwrap().unwrap().len(), 1, "{name}");
    }
}

#[test]
fn c05_subpath_keys_are_stored_apart_from_the_main_transcript() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(&key(), &crate::support::typed(&[e(json!({"uuid": "m"}))]))
            .unwrap();
        s.append(
            &sub("subagents/agent-1"),
            &crate::support::typed(&[e(json!({"uuid": "s"}))]),
        )
        .unwrap();
        assert_eq!(
            s.load_json(&key()).unwrap(),
            Some(vec![e(json!({"uuid": "m"}))]),
            "{name}"
        );
        assert_eq!(
            s.load_json(&sub("subagents/agent-1")).unwrap(),
            Some(vec![e(json!({"uuid": "s"}))]),
            "{name}"
        );
    }
}

#[test]
fn c06_project_keys_are_isolated() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        let a = SessionKey::main("A", "s1");
        let b = SessionKey::main("B", "s1");
        s.append(&a, &crate::support::typed(&[e(json!({"from": "A"}))]))
            .unwrap();
        s.append(&b, &crate::support::typed(&[e(json!({"from": "B"}))]))
            .unwrap();
        assert_eq!(
            s.load_json(&a).unwrap(),
            Some(vec![e(json!({"from": "A"}))]),
            "{name}"
        );
        assert_eq!(
            s.load_json(&b).unwrap(),
            Some(vec![e(json!({"from": "B"}))]),
            "{name}"
        );
        assert_eq!(s.list_sessions("A").unwrap().len(), 1, "{name}");
        assert_eq!(s.list_sessions("B").unwrap().len(), 1, "{name}");
    }
}

#[test]
fn c07_list_sessions_reports_a_projects_sessions_with_mtime_in_ms() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(
            &SessionKey::main("proj", "a"),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        s.append(
            &SessionKey::main("proj", "b"),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        s.append(
            &SessionKey::main("other", "c"),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        let sessions = s.list_sessions("proj").unwrap();
        let mut ids: Vec<&str> = sessions.iter().map(|x| x.session_id.as_str()).collect();
        ids.sort();
        assert_eq!(ids, ["a", "b"], "{name}");
        assert!(
            sessions.iter().all(|x| x.mtime > 1_000_000_000_000),
            "{name}: mtime in ms"
        );
        assert!(
            s.list_sessions("never-appended-project")
                .unwrap()
                .is_empty(),
            "{name}"
        );
    }
}

#[test]
fn c08_list_sessions_excludes_subpaths() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        let main = SessionKey::main("proj", "main");
        s.append(&main, &crate::support::typed(&[e(json!({"n": 1}))]))
            .unwrap();
        s.append(
            &main.sub("subagents/agent-1").unwrap(),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        // A session that only has a subkey has no main transcript to list.
        let orphan = SessionKey::main("proj", "only-sub");
        s.append(
            &orphan.sub("subagents/agent-1").unwrap(),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        let ids: Vec<String> = s
            .list_sessions("proj")
            .unwrap()
            .into_iter()
            .map(|x| x.session_id)
            .collect();
        assert_eq!(ids, ["main"], "{name}");
    }
}

#[test]
fn c09_delete_main_then_load_is_none_and_unknown_deletes_are_fine() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.delete(&SessionKey::main("proj", "never-written"))
            .unwrap();
        s.append(&key(), &crate::support::typed(&[e(json!({"n": 1}))]))
            .unwrap();
        s.delete(&key()).unwrap();
        assert_eq!(s.load_json(&key()).unwrap(), None, "{name}");
    }
}

#[test]
fn c10_deleting_a_main_key_cascades_to_its_subkeys_only() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        let other = SessionKey::main("proj", "sess2");
        let other_proj = SessionKey::main("other-proj", "sess");
        for k in [
            key(),
            sub("subagents/agent-1"),
            sub("subagents/agent-2"),
            other.clone(),
            other_proj.clone(),
        ] {
            s.append(&k, &crate::support::typed(&[e(json!({"n": 1}))]))
                .unwrap();
        }
        s.delete(&key()).unwrap();
        assert_eq!(s.load_json(&key()).unwrap(), None, "{name}");
        assert_eq!(
            s.load_json(&sub("subagents/agent-1")).unwrap(),
            None,
            "{name}"
        );
        assert_eq!(
            s.load_json(&sub("subagents/agent-2")).unwrap(),
            None,
            "{name}"
        );
        assert_eq!(s.load_json(&other).unwrap().unwrap().len(), 1, "{name}");
        assert_eq!(
            s.load_json(&other_proj).unwrap().unwrap().len(),
            1,
            "{name}"
        );
        assert!(s.list_subkeys(&key()).unwrap().is_empty(), "{name}");
        assert!(
            !s.list_sessions("proj")
                .unwrap()
                .iter()
                .any(|x| x.session_id == "sess"),
            "{name}"
        );
    }
}

#[test]
fn c11_deleting_a_subpath_removes_only_that_subkey() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        for k in [key(), sub("subagents/agent-1"), sub("subagents/agent-2")] {
            s.append(&k, &crate::support::typed(&[e(json!({"n": 1}))]))
                .unwrap();
        }
        s.delete(&sub("subagents/agent-1")).unwrap();
        assert_eq!(
            s.load_json(&sub("subagents/agent-1")).unwrap(),
            None,
            "{name}"
        );
        assert_eq!(
            s.load_json(&sub("subagents/agent-2"))
                .unwrap()
                .unwrap()
                .len(),
            1,
            "{name}"
        );
        assert_eq!(s.load_json(&key()).unwrap().unwrap().len(), 1, "{name}");
        assert_eq!(
            s.list_subkeys(&key()).unwrap(),
            ["subagents/agent-2"],
            "{name}"
        );
        assert!(
            s.has_session("sess").unwrap(),
            "{name}: the main transcript stays"
        );
    }
}

#[test]
fn c12_list_subkeys_returns_that_sessions_subpaths() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(&key(), &crate::support::typed(&[e(json!({"n": 1}))]))
            .unwrap();
        s.append(
            &sub("subagents/agent-1"),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        s.append(
            &sub("subagents/agent-2"),
            &crate::support::typed(&[e(json!({"n": 1}))]),
        )
        .unwrap();
        let x = SessionKey::main("proj", "other-sess")
            .sub("subagents/agent-x")
            .unwrap();
        s.append(&x, &crate::support::typed(&[e(json!({"n": 1}))]))
            .unwrap();
        let mut subkeys = s.list_subkeys(&key()).unwrap();
        subkeys.sort();
        assert_eq!(
            subkeys,
            ["subagents/agent-1", "subagents/agent-2"],
            "{name}"
        );
    }
}

#[test]
fn c13_list_subkeys_excludes_the_main_transcript_and_is_empty_for_unknown() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(&key(), &crate::support::typed(&[e(json!({"n": 1}))]))
            .unwrap();
        assert!(s.list_subkeys(&key()).unwrap().is_empty(), "{name}");
        assert!(
            s.list_subkeys(&SessionKey::main("proj", "never-appended"))
                .unwrap()
                .is_empty(),
            "{name}"
        );
    }
}

#[test]
fn c14_summaries_are_maintained_by_append_and_removed_by_delete() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        let k = SessionKey::main("proj", "summ-sess");
        s.append(
            &k,
            &crate::support::typed(&[
                e(json!({"timestamp": "2024-01-01T00:00:00.000Z", "customTitle": "first"})),
                e(json!({"timestamp": "2024-01-01T00:00:01.000Z"})),
            ]),
        )
        .unwrap();
        s.append(
            &k,
            &crate::support::typed(&[e(
                json!({"timestamp": "2024-01-01T00:00:02.000Z", "customTitle": "second"}),
            )]),
        )
        .unwrap();
        s.append(
            &SessionKey::main("other", "elsewhere"),
            &crate::support::typed(&[e(json!({"timestamp": "2024-01-01T00:00:00.000Z"}))]),
        )
        .unwrap();
        let summaries = s.list_session_summaries("proj").unwrap();
        assert_eq!(summaries.len(), 1, "{name}");
        let summ = &summaries[0];
        assert_eq!(summ.session_id, "summ-sess");
        assert!(summ.mtime > 1_000_000_000_000, "{name}: mtime in ms");
        let listed = s.list_sessions("proj").unwrap();
        assert!(
            summ.mtime >= listed[0].mtime,
            "{name}: summary mtime >= list_sessions mtime"
        );
        assert_eq!(summ.data["custom_title"], "second", "{name}: last wins");
        assert_eq!(
            summ.data["created_at"], 1_704_067_200_000i64,
            "{name}: first timestamp"
        );
        assert!(summ.data.is_object());

        s.append(
            &k.sub("subagents/agent-1").unwrap(),
            &crate::support::typed(&[e(
                json!({"timestamp": "2024-01-01T00:00:09.000Z", "customTitle": "subagent"}),
            )]),
        )
        .unwrap();
        let after = s.list_session_summaries("proj").unwrap();
        assert_eq!(
            after[0].data, summ.data,
            "{name}: a subpath append must not touch the summary"
        );
        assert_eq!(after[0].mtime, summ.mtime, "{name}");
        assert!(
            s.list_session_summaries("never-appended-project")
                .unwrap()
                .is_empty()
        );
        s.delete(&k).unwrap();
        assert!(
            s.list_session_summaries("proj").unwrap().is_empty(),
            "{name}"
        );
    }
}

#[test]
fn a_stored_uuid_is_an_idempotency_key_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteSessionStore::open(&dir.path().join("s.db")).unwrap();
    let first = e(json!({"uuid": "u1", "v": 1}));
    assert_eq!(
        s.append_counted(
            &key(),
            &crate::support::typed(&[first.clone(), e(json!({"v": "no uuid"}))])
        )
        .unwrap(),
        2
    );
    // Same uuid again (even with other content) is ignored; entries without uuid always land.
    let n = s
        .append_counted(
            &key(),
            &crate::support::typed(&[
                e(json!({"uuid": "u1", "v": 2})),
                e(json!({"v": "no uuid"})),
                e(json!({"uuid": "u2"})),
            ]),
        )
        .unwrap();
    assert_eq!(n, 2);
    let loaded = s.load_json(&key()).unwrap().unwrap();
    assert_eq!(loaded.len(), 4);
    assert_eq!(loaded[0], first);
    // The same uuid under another key is another entry.
    assert_eq!(
        s.append_counted(
            &sub("subagents/a"),
            &crate::support::typed(std::slice::from_ref(&first))
        )
        .unwrap(),
        1
    );
    // A batch of only duplicates changes nothing, not even the session's mtime.
    let before = s.list_sessions("proj").unwrap();
    assert_eq!(
        s.append_counted(&key(), &crate::support::typed(&[first]))
            .unwrap(),
        0
    );
    assert_eq!(s.list_sessions("proj").unwrap(), before);
}

/// What the wake banner and 换代 read as a session's context: the last real assistant
/// turn's usage, the same on every backend (the SQLite store answers with its own query,
/// the others through the trait's default).
#[test]
fn last_assistant_usage_is_the_last_real_turns_on_every_backend() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        assert_eq!(s.last_usage_json(&key()).unwrap(), None, "{name}");
        let turn = |uuid: &str, usage: Value| {
            json!({"type": "assistant", "uuid": uuid,
                   "message": {"role": "assistant", "model": "m", "content": [], "usage": usage}})
        };
        s.append(
            &key(),
            &crate::support::typed(&[
                json!({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}}),
                turn("a1", json!({"input_tokens": 7})),
                json!({"type": "assistant", "uuid": "a2", "isApiErrorMessage": true,
                       "message": {"role": "assistant", "model": "<synthetic>", "content": [],
                                   "usage": {"input_tokens": 0}}}),
                json!({"type": "assistant", "uuid": "a3",
                       "message": {"role": "assistant", "model": "m", "content": []}}),
            ]),
        )
        .unwrap();
        assert_eq!(
            s.last_usage_json(&key()).unwrap(),
            Some(json!({"input_tokens": 7})),
            "{name}"
        );
        s.append(
            &key(),
            &crate::support::typed(&[turn("a4", json!({"input_tokens": 9}))]),
        )
        .unwrap();
        assert_eq!(
            s.last_usage_json(&key()).unwrap(),
            Some(json!({"input_tokens": 9})),
            "{name}"
        );
        // A retry storm after it: the last real turn lies many rows back (a backend
        // that reads newest first, a page at a time, must read past its first page).
        let storm: Vec<Value> = (0..30)
            .map(|i| {
                json!({"type": "assistant", "uuid": format!("err{i}"), "isApiErrorMessage": true,
                       "message": {"role": "assistant", "model": "<synthetic>", "content": [],
                                   "usage": {"input_tokens": 0}}})
            })
            .collect();
        s.append(&key(), &crate::support::typed(&storm)).unwrap();
        assert_eq!(
            s.last_usage_json(&key()).unwrap(),
            Some(json!({"input_tokens": 9})),
            "{name}"
        );
        // A subagent's transcript is its own.
        let sub = key().sub("subagents/a").unwrap();
        assert_eq!(s.last_usage_json(&sub).unwrap(), None, "{name}");
        s.append(
            &sub,
            &crate::support::typed(&[turn("s1", json!({"input_tokens": 3}))]),
        )
        .unwrap();
        assert_eq!(
            s.last_usage_json(&sub).unwrap(),
            Some(json!({"input_tokens": 3})),
            "{name}"
        );
        assert_eq!(
            s.last_usage_json(&key()).unwrap(),
            Some(json!({"input_tokens": 9})),
            "{name}"
        );
    }
}

#[test]
fn has_session_sees_main_transcripts_in_any_project() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        assert!(!s.has_session("sess").unwrap(), "{name}");
        s.append(
            &SessionKey::main("p", "sub-only")
                .sub("subagents/a")
                .unwrap(),
            &crate::support::typed(&[e(json!({}))]),
        )
        .unwrap();
        assert!(
            !s.has_session("sub-only").unwrap(),
            "{name}: a subkey alone is not a session"
        );
        s.append(
            &SessionKey::main("elsewhere", "sess"),
            &crate::support::typed(&[e(json!({}))]),
        )
        .unwrap();
        assert!(s.has_session("sess").unwrap(), "{name}");
        s.delete(&SessionKey::main("elsewhere", "sess")).unwrap();
        assert!(!s.has_session("sess").unwrap(), "{name}");
    }
}

#[test]
fn json_that_is_not_an_object_is_no_entry() {
    // A store takes typed entries: JSON that is not an object never becomes one (the
    // Python binding refuses it with `NotAnObject` before any store sees it).
    assert!(serde_json::from_value::<flower::transcript::Entry>(json!([1, 2])).is_err());
    assert!(serde_json::from_value::<flower::transcript::Entry>(json!("x")).is_err());
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        s.append(&key(), &crate::support::typed(&[e(json!({"uuid": "ok"}))]))
            .unwrap();
        assert_eq!(
            s.load_json(&key()).unwrap().map(|l| l.len()),
            Some(1),
            "{name}: an object lands"
        );
    }
}

#[test]
fn a_stored_uuid_is_an_idempotency_key_through_the_trait() {
    for (name, fresh) in stores() {
        let (_d, s) = fresh();
        let first = e(json!({"uuid": "u1", "v": 1}));
        s.append(
            &key(),
            &crate::support::typed(&[first.clone(), e(json!({"v": "no uuid"}))]),
        )
        .unwrap();
        s.append(
            &key(),
            &crate::support::typed(&[
                e(json!({"uuid": "u1", "v": 2})),
                e(json!({"v": "no uuid"})),
                e(json!({"uuid": "u2"})),
            ]),
        )
        .unwrap();
        let loaded = s.load_json(&key()).unwrap().unwrap();
        assert_eq!(loaded.len(), 4, "{name}");
        assert_eq!(loaded[0], first, "{name}");
        assert_eq!(loaded[3], e(json!({"uuid": "u2"})), "{name}");
        s.append(
            &sub("subagents/a"),
            &crate::support::typed(std::slice::from_ref(&first)),
        )
        .unwrap();
        assert_eq!(
            s.load_json(&sub("subagents/a")).unwrap().unwrap(),
            vec![first.clone()],
            "{name}"
        );
        let before = s.list_sessions("proj").unwrap();
        s.append(&key(), &crate::support::typed(&[first])).unwrap();
        assert_eq!(s.list_sessions("proj").unwrap(), before, "{name}");
    }
}

#[test]
fn summary_fields_follow_the_sdk_names_and_rules() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteSessionStore::open(&dir.path().join("s.db")).unwrap();
    let long = "长".repeat(250);
    s.append(
        &key(),
        &crate::support::typed(&[
            json!({"type": "system", "timestamp": "not a time", "cwd": ""}),
            json!({"type": "user", "isSidechain": false, "timestamp": "2024-05-01T10:00:00.500Z", "cwd": "/w",
                   "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}}),
            json!({"type": "user", "isMeta": true, "message": {"content": "meta text"}}),
            json!({"type": "user", "message": {"content": "[Request interrupted by user]"}}),
            json!({"type": "user", "cwd": "/later", "gitBranch": "main",
                   "message": {"content": [{"type": "text", "text": format!("  {long}\nmore")}]}}),
            json!({"type": "tag", "tag": "keep"}),
        ]),
    )
    .unwrap();
    s.append(
        &key(),
        &crate::support::typed(&[
            json!({"type": "user", "message": {"content": "second prompt"}, "lastPrompt": "lp", "gitBranch": "dev"}),
            json!({"type": "summary", "summary": "what happened"}),
            json!({"type": "ai-title", "aiTitle": "Ai"}),
        ]),
    )
    .unwrap();
    let data = &s.list_session_summaries("proj").unwrap()[0].data;
    assert_eq!(data["is_sidechain"], false);
    assert_eq!(data["created_at"], 1_714_557_600_500i64);
    assert_eq!(data["cwd"], "/w");
    let expected: String = "长".repeat(200) + "\u{2026}";
    assert_eq!(data["first_prompt"], Value::from(expected));
    assert_eq!(data["first_prompt_locked"], true);
    assert_eq!(data["git_branch"], "dev");
    assert_eq!(data["last_prompt"], "lp");
    assert_eq!(data["summary_hint"], "what happened");
    assert_eq!(data["ai_title"], "Ai");
    assert_eq!(data["tag"], "keep");
    s.append(
        &key(),
        &crate::support::typed(&[json!({"type": "tag", "tag": ""})]),
    )
    .unwrap();
    assert!(
        s.list_session_summaries("proj").unwrap()[0]
            .data
            .get("tag")
            .is_none(),
        "an empty tag clears it"
    );
}

#[test]
fn keys_parse_and_print_back() {
    let k = SessionKey::parse("-work-proj/abc-123/subagents/agent-7").unwrap();
    assert_eq!(k.project_key, "-work-proj");
    assert_eq!(k.session_id, "abc-123");
    assert_eq!(k.subpath.as_deref(), Some("subagents/agent-7"));
    assert_eq!(k.to_string(), "-work-proj/abc-123/subagents/agent-7");
    let main = SessionKey::parse("p/s").unwrap();
    assert_eq!(main, SessionKey::main("p", "s"));
    assert_eq!(
        main.sub("subagents/x").unwrap().to_string(),
        "p/s/subagents/x"
    );
}

#[test]
fn bad_keys_and_subpaths_are_rejected_with_a_reason() {
    for bad in [
        "",
        "p",
        "/s",
        "p/",
        "p/s/",
        "p/s//x",
        "p/s/../x",
        "p/s/a/./b",
        "p/s/a/..",
        "p/s/x\0y",
        "p/../s",
    ] {
        let err = SessionKey::parse(bad).unwrap_err();
        assert!(matches!(err, StoreError::BadKey { .. }), "{bad:?}: {err}");
    }
    let main = SessionKey::main("p", "s");
    for bad in [
        "",
        "/etc/passwd",
        "\\share",
        "\\\\server\\x",
        "C:\\x",
        "c:x",
        "a\0b",
        "..",
        ".",
        "a/../b",
        "a\\..\\b",
        "a//b",
        "a/",
    ] {
        let err = main.sub(bad).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("subpath"), "{bad:?}: {text}");
    }
}

#[test]
fn nothing_is_written_under_a_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteSessionStore::open(&dir.path().join("s.db")).unwrap();
    let bad = SessionKey {
        project_key: "p".into(),
        session_id: "s".into(),
        subpath: Some("../escape".into()),
    };
    assert!(matches!(
        s.append(&bad, &crate::support::typed(&[json!({"n": 1})])),
        Err(StoreError::BadKey { .. })
    ));
    assert!(
        s.list_subkeys(&SessionKey::main("p", "s"))
            .unwrap()
            .is_empty()
    );
    assert!(s.list_sessions("p").unwrap().is_empty());
}

#[test]
fn project_key_matches_the_sdk_vectors() {
    let cases = [
        ("/Users/you/proj", "-Users-you-proj".to_string()),
        ("/home/用户/项目_a.b", "-home-------a-b".to_string()),
        ("/work/my_proj.v2/sub-dir", "-work-my-proj-v2-sub-dir".to_string()),
        (
            "LONG",
            "-srv-very-long-directory-name-very-long-directory-name-very-long-directory-name-very-long-directory-name-very-long-directory-name-very-long-directory-name-very-long-directory-name-very-long-directory--2rsv64".to_string(),
        ),
    ];
    let long = format!("/srv/{}end", "very-long-directory-name/".repeat(10));
    for (path, expected) in cases {
        let path = if path == "LONG" { long.as_str() } else { path };
        assert_eq!(project_key(Path::new(path)), expected, "{path}");
    }
}

#[test]
fn project_key_resolves_symlinks_and_normalizes_to_nfc() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(
        project_key(&link),
        project_key(&real.canonicalize().unwrap())
    );
    // "é" decomposed (e + U+0301) and composed give the same key: one dash, not two.
    assert_eq!(project_key(Path::new("/x/e\u{301}")), "-x--");
    assert_eq!(project_key(Path::new("/x/\u{e9}")), "-x--");
    // A character outside the BMP is two UTF-16 code units, as in Claude Code.
    assert_eq!(project_key(Path::new("/x/😀")), "-x---");
}
