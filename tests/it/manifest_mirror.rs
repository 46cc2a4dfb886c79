//! `manifest.json` as the mirror of a manifest kept in the PostgreSQL store (issue 29
//! item 8): after every write it is exactly the database's rows (each saying which
//! store holds the run), laid out as the whole array pretty-printed; and a write costs
//! what changed, not the run's length: while the file is the one this writer left, the
//! rows of other processes it already holds are neither fetched again nor laid out
//! again. Skipped without `FLOWER_TEST_POSTGRES_URL`.

use crate::support::postgres as pg;
use flower::continuity::manifest::{Manifest, StepResult, new_run_id};
use flower::continuity::shared::SharedRun;
use flower::stores::PostgresStore;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

fn record(manifest: &mut Manifest, step: &str) {
    let mut result = StepResult::started(step);
    result.finish();
    manifest.record(&result).unwrap();
}

/// The mirror a whole rewrite makes of the database's rows.
fn expected(run: &SharedRun) -> String {
    let store = run.location().unwrap();
    let rows: Vec<Value> = run
        .manifest()
        .unwrap()
        .iter()
        .map(|text| {
            let mut row: Value = serde_json::from_str(text).unwrap();
            row.as_object_mut()
                .unwrap()
                .insert("store".into(), Value::String(store.clone()));
            row
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&rows).unwrap();
    text.push('\n');
    text
}

fn mirror(run_dir: &Path) -> String {
    std::fs::read_to_string(run_dir.join("manifest.json")).unwrap()
}

/// Host A writes its mirror while host B (its own run directory) adds rows, replaces
/// its rows, and a person edits A's file: after each of A's writes, A's mirror is the
/// database's rows exactly.
#[test]
fn the_mirror_is_the_databases_rows_after_every_kind_of_write() {
    let Some(url) = pg::fresh_url() else { return };
    let store = Arc::new(PostgresStore::open(&url.parse().unwrap()).unwrap());
    let workspace = tempfile::TempDir::new().unwrap();
    let run = SharedRun::open(store, workspace.path(), None)
        .unwrap()
        .unwrap();
    let (dir_a, dir_b) = (workspace.path().join("a"), workspace.path().join("b"));
    let mut a = Manifest::shared(&dir_a, new_run_id(), run.clone());
    let mut b = Manifest::shared(&dir_b, new_run_id(), run.clone());

    record(&mut a, "干活");
    assert_eq!(mirror(&dir_a), expected(&run), "first write");
    record(&mut b, "评审");
    record(&mut b, "评审");
    record(&mut a, "干活");
    assert_eq!(mirror(&dir_a), expected(&run), "B's rows added since");
    record(&mut a, "检查");
    assert_eq!(mirror(&dir_a), expected(&run), "nothing new from B");
    // B's rows replaced: its next write puts them all anew.
    record(&mut b, "评审");
    record(&mut a, "干活");
    assert_eq!(mirror(&dir_a), expected(&run), "B's rows replaced");
    let mut c = Manifest::shared(&dir_b, new_run_id(), run.clone());
    record(&mut c, "收尾");
    record(&mut a, "检查");
    assert_eq!(mirror(&dir_a), expected(&run), "a third process");
    // A person changes A's file: rewritten whole from the database.
    std::fs::write(dir_a.join("manifest.json"), "[]\n").unwrap();
    record(&mut a, "干活");
    assert_eq!(mirror(&dir_a), expected(&run), "after an edit");
    let rows: Vec<Value> = serde_json::from_str(&mirror(&dir_a)).unwrap();
    assert_eq!(rows.len(), 6 + 3 + 1);
}

/// The cost: a row of another process that A's mirror already holds is not read from
/// the database again while the file is the one A left (changed there behind flower's
/// back, the mirror keeps the text it had), but a file someone else wrote is rebuilt
/// from every row.
#[test]
fn rows_the_mirror_already_holds_are_not_fetched_again() {
    let Some(url) = pg::fresh_url() else { return };
    let store = Arc::new(PostgresStore::open(&url.parse().unwrap()).unwrap());
    let workspace = tempfile::TempDir::new().unwrap();
    let run = SharedRun::open(store, workspace.path(), None)
        .unwrap()
        .unwrap();
    let (dir_a, dir_b) = (workspace.path().join("a"), workspace.path().join("b"));
    let mut b = Manifest::shared(&dir_b, new_run_id(), run.clone());
    for i in 0..50 {
        record(&mut b, &format!("别人{i}"));
    }
    drop(b);
    let mut a = Manifest::shared(&dir_a, new_run_id(), run.clone());
    record(&mut a, "干活");
    assert_eq!(mirror(&dir_a), expected(&run));
    // Behind flower's back: the first row of B's now names another step.
    pg::execute(
        &url,
        "UPDATE flower_manifest SET data = replace(data, '别人0\"', '改过\"') \
         WHERE id = (SELECT min(id) FROM flower_manifest)",
    );
    record(&mut a, "检查");
    let text = mirror(&dir_a);
    assert!(
        text.contains("\"别人0\"") && !text.contains("改过"),
        "{text}"
    );
    // Another writer's file: A rebuilds from every row, and sees the change.
    let mut again = Manifest::shared(&dir_a, new_run_id(), run.clone());
    record(&mut again, "收尾");
    record(&mut a, "干活");
    assert_eq!(mirror(&dir_a), expected(&run));
    assert!(mirror(&dir_a).contains("改过"));
}
