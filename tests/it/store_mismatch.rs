//! A run lives in one store; a `flower` given another never starts a second conversation
//! beside it. The run directory's mirrors (`lineage.json`, each `manifest.json` row) say
//! which PostgreSQL store holds the run, and a run opened with a store that is not its
//! own (a PostgreSQL run without `--store`, a `runs/sessions.db` run with one) is exit 2
//! naming the flag to use, with nothing sent and nothing written, for the pipeline and
//! for `state`, `log`, `show`, `report`. Skipped (saying why) without PostgreSQL.

use crate::support::FakeServer;
use crate::support::pipeline::{Project, REQUEST, simple_reply, text};
use crate::support::postgres as pg;
use flower::stores::{PostgresStore, PostgresUrl, project_key};
use std::collections::BTreeMap;
use std::path::Path;

/// Every file under `dir` and its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    for entry in walk(dir) {
        found.insert(entry.display().to_string(), std::fs::read(&entry).unwrap());
    }
    found
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

const VIEWS: [&[&str]; 6] = [
    &[],
    &["再加一句"],
    &["state"],
    &["log"],
    &["show"],
    &["report"],
];

#[test]
fn a_postgres_run_without_its_store_is_refused_with_the_flag_and_nothing_written() {
    let Some(url) = pg::fresh_url() else { return };
    let shown = url.parse::<PostgresUrl>().unwrap().to_string();
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["--store", &url, REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The mirrors say where the run is.
    assert_eq!(project.json("runs/lineage.json")["store"], shown.as_str());
    let rows = project.manifest();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r["store"] == shown.as_str()),
        "{rows:#?}"
    );

    let before = files(&project.dir);
    let requests = server.request_count();
    for args in VIEWS {
        let out = project.run(&server, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("加上 --store {shown}")) && stderr.contains("什么都没有改动"),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            stderr.matches("这个运行存在").count(),
            1,
            "said once: {stderr}"
        );
        assert_eq!(files(&project.dir), before, "{args:?} wrote something");
    }
    assert_eq!(server.request_count(), requests, "nothing was sent");
    assert!(!project.dir.join("runs/sessions.db").exists());
    // With its store, the run is there.
    let out = project.run(&server, &["state", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("步骤 干活:"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_sessions_db_run_with_a_postgres_store_is_refused_and_the_database_untouched() {
    let Some(url) = pg::fresh_url() else { return };
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(project.json("runs/lineage.json").get("store").is_none());

    let before = files(&project.dir);
    let requests = server.request_count();
    for args in VIEWS {
        let mut args = args.to_vec();
        args.extend(["--store", &url]);
        let out = project.run(&server, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("runs/sessions.db") && stderr.contains("改用 --store sqlite"),
            "{args:?}: {stderr}"
        );
        assert_eq!(files(&project.dir), before, "{args:?} wrote something");
    }
    assert_eq!(server.request_count(), requests, "nothing was sent");
    let store = PostgresStore::open(&url.parse().unwrap()).unwrap();
    assert!(
        store
            .run_find(&project_key(&project.dir))
            .unwrap()
            .is_none(),
        "the run was registered in the database"
    );
}

/// What `check_store` tells apart, through `flower state` (which reads and writes
/// nothing), with a `lineage.json` written by hand and a PostgreSQL store given that
/// does not know the run: a lineage without a store is a `sessions.db` run only when it
/// has a run (a step or a wake) and the file is there; a lineage naming a store is
/// refused under another database or another run key, and taken under its own.
#[test]
fn which_mirrors_a_postgres_store_refuses_and_which_it_takes() {
    let Some(url) = pg::fresh_url() else { return };
    let shown = url.parse::<PostgresUrl>().unwrap().to_string();
    let elsewhere = "postgres://flower@db.example:5432/other";
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let step = serde_json::json!({ "干活": "00000000-0000-4000-8000-000000000001" });
    let no_steps = serde_json::json!({});
    let again = format!("改用 --store {shown} --run-key a");
    // (what, woke, steps, store, run key, sessions.db there, extra args, refused with)
    let cases: [(
        &str,
        u64,
        &serde_json::Value,
        Option<&str>,
        Option<&str>,
        bool,
        &[&str],
        Option<&str>,
    ); 8] = [
        ("nothing run yet", 0, &no_steps, None, None, true, &[], None),
        (
            "a wake only",
            1,
            &no_steps,
            None,
            None,
            true,
            &[],
            Some("改用 --store sqlite"),
        ),
        (
            "a step",
            0,
            &step,
            None,
            None,
            true,
            &[],
            Some("改用 --store sqlite"),
        ),
        (
            "a step, sessions.db gone",
            1,
            &step,
            None,
            None,
            false,
            &[],
            None,
        ),
        (
            "its own store",
            1,
            &step,
            Some(&shown),
            None,
            false,
            &[],
            None,
        ),
        (
            "another database",
            1,
            &step,
            Some(elsewhere),
            None,
            false,
            &[],
            Some("改用 --store postgres://flower@db.example:5432/other"),
        ),
        (
            "another run key",
            1,
            &step,
            Some(&shown),
            Some("a"),
            false,
            &["--run-key", "b"],
            Some(&again),
        ),
        (
            "its own run key",
            1,
            &step,
            Some(&shown),
            Some("a"),
            false,
            &["--run-key", "a"],
            None,
        ),
    ];
    for (what, woke, steps, store, run_key, db, extra, refused) in cases {
        let project = Project::new();
        let runs = project.dir.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let mut lineage = serde_json::json!({
            "workspace": project.dir.to_str().unwrap(),
            "woke": woke,
            "steps": steps,
        });
        if let Some(store) = store {
            lineage["store"] = store.into();
        }
        if let Some(run_key) = run_key {
            lineage["run_key"] = run_key.into();
        }
        std::fs::write(runs.join("lineage.json"), lineage.to_string()).unwrap();
        if db {
            std::fs::write(runs.join("sessions.db"), b"").unwrap();
        }
        let before = files(&project.dir);
        let mut args = vec!["state", "--store", url.as_str()];
        args.extend(extra);
        let out = project.run(&server, &args);
        let stderr = text(&out.stderr);
        match refused {
            Some(flag) => {
                assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
                assert!(
                    stderr.contains("这个运行存在") && stderr.contains(flag),
                    "{what}: {stderr}"
                );
            }
            None => {
                assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
                assert!(!stderr.contains("这个运行存在"), "{what}: {stderr}");
            }
        }
        assert_eq!(files(&project.dir), before, "{what}: state wrote something");
    }
    assert_eq!(server.request_count(), 0, "nothing was sent");
}
