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

/// `flower state --store URL ARGS` in a new project whose `runs/lineage.json` is
/// `lineage` (with the workspace filled in), beside a `runs/sessions.db` when
/// `sessions_db`: `None` when it showed the run, else the refusal. Asserts that nothing
/// was written either way.
fn state_over(
    url: &str,
    lineage: serde_json::Value,
    sessions_db: bool,
    args: &[&str],
) -> Option<String> {
    let project = Project::new();
    let server = FakeServer::start(vec![]);
    let runs = project.dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let mut lineage = lineage;
    lineage["workspace"] = project.dir.to_str().unwrap().into();
    std::fs::write(runs.join("lineage.json"), lineage.to_string()).unwrap();
    if sessions_db {
        std::fs::write(runs.join("sessions.db"), b"").unwrap();
    }
    let before = files(&project.dir);
    let mut all = vec!["state", "--store", url];
    all.extend(args);
    let out = project.run(&server, &all);
    let stderr = text(&out.stderr);
    assert_eq!(
        files(&project.dir),
        before,
        "{lineage}: state wrote something"
    );
    assert_eq!(server.request_count(), 0, "{lineage}: something was sent");
    match out.status.code() {
        Some(0) => {
            assert!(!stderr.contains("这个运行存在"), "{lineage}: {stderr}");
            None
        }
        Some(2) if stderr.contains("这个运行存在") => Some(stderr),
        code => panic!("{lineage}: exit {code:?}: {stderr}"),
    }
}

/// What `check_store` tells apart, through `flower state` (which writes nothing) with a
/// PostgreSQL store that does not know the run: a lineage without a store is a
/// `sessions.db` run only when it has a run (a step or a wake) and the file is there; a
/// lineage naming a store is refused under another database or another run key (the
/// refusal names the flags that open it), and taken under its own.
#[test]
fn which_mirrors_a_postgres_store_refuses_and_which_it_takes() {
    use serde_json::json;
    let Some(url) = pg::fresh_url() else { return };
    let shown = url.parse::<PostgresUrl>().unwrap().to_string();
    let step = json!({ "干活": "00000000-0000-4000-8000-000000000001" });
    let refused = |lineage, sessions_db, args: &[&str], flag: &str| {
        let said = state_over(&url, lineage, sessions_db, args).expect("refused");
        assert!(said.contains(flag), "{said}");
    };
    let taken =
        |lineage, sessions_db| assert_eq!(state_over(&url, lineage, sessions_db, &[]), None);

    taken(json!({ "woke": 0, "steps": {} }), true);
    refused(
        json!({ "woke": 1, "steps": {} }),
        true,
        &[],
        "改用 --store sqlite",
    );
    refused(
        json!({ "woke": 0, "steps": step }),
        true,
        &[],
        "改用 --store sqlite",
    );
    taken(json!({ "woke": 1, "steps": step }), false);

    taken(json!({ "woke": 1, "steps": step, "store": shown }), false);
    let other = "postgres://flower@db.example:5432/other";
    let lineage = json!({ "woke": 1, "steps": step, "store": other });
    refused(lineage, false, &[], &format!("改用 --store {other}"));
    let named = json!({ "woke": 1, "steps": step, "store": shown, "run_key": "a" });
    let again = format!("改用 --store {shown} --run-key a");
    refused(named.clone(), false, &["--run-key", "b"], &again);
    assert_eq!(state_over(&url, named, false, &["--run-key", "a"]), None);
}
