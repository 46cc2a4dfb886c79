//! `runs/manifest.json`: the row shape, run ids, replace-vs-append, merging with other
//! processes (real ones, concurrently), and corrupt files moved aside.

use flower::continuity::manifest::{
    Manifest, StepResult, judge_name, new_run_id, process_run_id, read_rows, retry_name, round_name,
};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const SPEC_FIELDS: [&str; 16] = [
    "step",
    "session_id",
    "ok",
    "cost_usd",
    "num_turns",
    "text",
    "error",
    "started_at",
    "ended_at",
    "attempts",
    "errors",
    "resumed",
    "retired",
    "context",
    "duration_s",
    "run",
];

fn result(step: &str, started_at: &str) -> StepResult {
    StepResult {
        step: step.into(),
        started_at: started_at.into(),
        ended_at: started_at.into(),
        attempts: 1,
        ..StepResult::default()
    }
}

/// The rows of `dir/manifest.json` as JSON trees (key order kept): most tests here are
/// about the file itself. The typed reader must read as many rows.
fn file_rows(dir: &Path) -> Vec<Value> {
    let typed = read_rows(dir).unwrap();
    let rows: Vec<Value> = match fs::read_to_string(dir.join("manifest.json")) {
        Ok(text) if !text.trim().is_empty() => serde_json::from_str(&text).unwrap(),
        _ => Vec::new(),
    };
    assert_eq!(typed.len(), rows.len());
    rows
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_row_has_exactly_the_spec_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let mut m = Manifest::new(tmp.path(), "20260907-015240-abc123".into());
    let r = StepResult {
        step: "干活".into(),
        session_id: Some("47395075-bec7-466e-80cd-f4d60b360235".into()),
        ok: true,
        cost_usd: Some(0.41),
        num_turns: 70,
        text: "done".into(),
        error: None,
        started_at: "2026-09-07T01:52:40.000000+08:00".into(),
        ended_at: "2026-09-07T12:19:04.250000+08:00".into(),
        attempts: 2,
        errors: vec!["API Error: Can't reach the API server (dns error)".into()],
        resumed: true,
        retired: vec!["old-session".into()],
        context: 185_900,
        outages: Vec::new(),
    };
    m.record(&r).unwrap();
    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 1);
    let row = rows[0].as_object().unwrap();
    assert_eq!(
        row.keys().map(String::as_str).collect::<Vec<_>>(),
        SPEC_FIELDS
    );
    assert_eq!(row["duration_s"], json!(37584.25));
    assert_eq!(row["run"], "20260907-015240-abc123");
    assert_eq!(
        row["errors"],
        json!(["API Error: Can't reach the API server (dns error)"])
    );
    assert_eq!(row["cost_usd"], json!(0.41));
    assert_eq!(row["error"], Value::Null);
    // A row reads back as the StepResult it came from.
    let back = &read_rows(tmp.path()).unwrap()[0];
    assert_eq!(back.result, r);
    assert_eq!(back.run, "20260907-015240-abc123");
    assert_eq!(back.duration_s, 37584.25);
    assert_eq!(back.context, None);
}

#[test]
fn duration_is_derived_from_the_timestamps() {
    let mut r = result("a", "2026-09-07T01:52:40+08:00");
    r.ended_at = "2026-09-07T01:55:41.5+08:00".into();
    assert_eq!(r.duration_s(), 181.5);
    // Different offsets, same instant difference.
    r.ended_at = "2026-09-06T17:53:40Z".into();
    assert_eq!(r.duration_s(), 60.0);
    r.ended_at = "not a time".into();
    assert_eq!(r.duration_s(), 0.0);
    r.ended_at = "2026-09-07T01:52:39+08:00".into();
    assert_eq!(r.duration_s(), 0.0, "never negative");
}

#[test]
fn started_and_finish_stamp_local_rfc3339() {
    let mut r = StepResult::started("干活");
    assert_eq!(r.step, "干活");
    assert_eq!(r.started_at, r.ended_at);
    assert_eq!(r.attempts, 1);
    assert!(!r.ok);
    let start = chrono::DateTime::parse_from_rfc3339(&r.started_at).unwrap();
    let local_offset = chrono::Local::now().offset().local_minus_utc();
    assert_eq!(
        start.offset().local_minus_utc(),
        local_offset,
        "local time with its offset"
    );
    // `YYYY-mm-ddTHH:MM:SS.ffffff±HH:MM`: microseconds and an explicit offset.
    let b = r.started_at.as_bytes();
    assert_eq!(b.len(), 32, "{}", r.started_at);
    assert_eq!(
        (b[10], b[19], b[29]),
        (b'T', b'.', b':'),
        "{}",
        r.started_at
    );
    assert!(matches!(b[26], b'+' | b'-'), "{}", r.started_at);

    // finish() stamps the current time, never earlier than the start.
    r.ended_at = "not yet".into();
    r.finish();
    let end = chrono::DateTime::parse_from_rfc3339(&r.ended_at).unwrap();
    assert!(end >= start);
    assert!(
        end.signed_duration_since(chrono::Local::now())
            .num_seconds()
            .abs()
            < 60
    );
    assert!(r.duration_s() >= 0.0);
    assert!(r.duration_s() < 60.0);
}

#[test]
fn run_id_format() {
    let check = |id: &str| {
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.len(), 3, "{id}");
        assert_eq!(parts[0].len(), 8, "{id}");
        assert!(parts[0].bytes().all(|b| b.is_ascii_digit()), "{id}");
        assert_eq!(parts[1].len(), 6, "{id}");
        assert!(parts[1].bytes().all(|b| b.is_ascii_digit()), "{id}");
        assert_eq!(parts[2].len(), 6, "{id}");
        assert!(
            parts[2]
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{id}"
        );
        chrono::NaiveDateTime::parse_from_str(&format!("{}{}", parts[0], parts[1]), "%Y%m%d%H%M%S")
            .unwrap();
    };
    let ids: Vec<String> = (0..50).map(|_| new_run_id()).collect();
    ids.iter().for_each(|id| check(id));
    let distinct: std::collections::HashSet<_> = ids.iter().map(|id| &id[16..]).collect();
    assert!(distinct.len() > 40, "the hex part is random");
    check(process_run_id());
    assert_eq!(process_run_id(), process_run_id(), "one per process");
}

#[test]
fn step_name_forms() {
    assert_eq!(retry_name("干活", 2), "干活#retry2");
    assert_eq!(round_name("干活", 3), "干活#round3");
    assert_eq!(judge_name("干活", 1), "干活·判定#1");
}

#[test]
fn same_attempt_replaces_new_attempt_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let mut m = Manifest::new(tmp.path(), "run-a".into());
    let mut first = result("干活", "2026-09-07T01:00:00.000001+08:00");
    m.record(&first).unwrap();
    first.ok = true;
    first.text = "finished".into();
    let outcome = m.record(&first).unwrap();
    assert_eq!(outcome.rows, 1);
    assert_eq!(outcome.moved_aside, None);

    // Same step name, another attempt (new started_at): a new row.
    let retry = result("干活", "2026-09-07T01:05:00.000001+08:00");
    m.record(&retry).unwrap();
    // A different step with the same started_at is another row too.
    let judge = result(&judge_name("干活", 1), "2026-09-07T01:05:00.000001+08:00");
    m.record(&judge).unwrap();

    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["ok"], true);
    assert_eq!(rows[0]["text"], "finished");
    assert_eq!(rows[1]["started_at"], "2026-09-07T01:05:00.000001+08:00");
    assert_eq!(rows[2]["step"], "干活·判定#1");
    assert_eq!(m.rows().len(), 3);
    assert_eq!(
        names_in(tmp.path()),
        vec!["manifest.json", "manifest.json.lock"],
        "no tmp left"
    );
}

#[test]
fn other_runs_rows_are_kept_verbatim() {
    let tmp = tempfile::tempdir().unwrap();
    // Rows as an older flower (or another tool) wrote them: unknown fields, odd shapes.
    let foreign = json!([
        {"step": "确认需求", "run": "20260901-000000-aaaaaa", "ok": true, "cost_usd": 0.12,
         "extra": {"nested": [1, 2.5, null]}, "duration_s": 3.25},
        {"run": "20260902-000000-bbbbbb", "zzz": "first key not step", "step": "干活"},
        {"step": "no run at all"},
        "not even an object",
    ]);
    fs::write(
        tmp.path().join("manifest.json"),
        serde_json::to_vec_pretty(&foreign).unwrap(),
    )
    .unwrap();
    let mut m = Manifest::new(tmp.path(), "20260907-000000-cccccc".into());
    m.record(&result("干活", "t1")).unwrap();
    m.record(&result("干活", "t2")).unwrap();

    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 6);
    assert_eq!(
        Value::Array(rows[..4].to_vec()),
        foreign,
        "others' rows untouched, in order"
    );
    let keys: Vec<_> = rows[1].as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["run", "zzz", "step"], "key order preserved");
    assert_eq!(rows[4]["started_at"], "t1");
    assert_eq!(rows[5]["started_at"], "t2");
}

#[test]
fn other_runs_rows_are_copied_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    // Written by hand or another tool: number spellings and escapes a re-serialisation
    // would change.
    let row_a = r#"{"step":"\u5e72\u6d3b","run":"other","cost_usd":1e-05,"x":1.50,"n":-0}"#;
    let row_b = "{\n      \"step\" : \"b\",  \"run\": \"other\"\n    }";
    fs::write(
        tmp.path().join("manifest.json"),
        format!("[ {row_a},\n\t{row_b} ]"),
    )
    .unwrap();
    let mut m = Manifest::new(tmp.path(), "mine".into());
    m.record(&result("a", "t1")).unwrap();
    m.record(&result("a", "t2")).unwrap();
    let text = fs::read_to_string(tmp.path().join("manifest.json")).unwrap();
    assert!(text.contains(row_a), "{text}");
    assert!(text.contains(row_b), "{text}");
    assert_eq!(file_rows(tmp.path()).len(), 4);
}

#[test]
fn the_file_keeps_the_pretty_layout_through_every_kind_of_write() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = json!([{"step": "旧", "run": "old", "ok": true}]);
    fs::write(
        tmp.path().join("manifest.json"),
        serde_json::to_string_pretty(&seed).unwrap(),
    )
    .unwrap();
    let mut a = Manifest::new(tmp.path(), "run-a".into());
    let mut b = Manifest::new(tmp.path(), "run-b".into());
    let expect_layout = || {
        let text = fs::read_to_string(tmp.path().join("manifest.json")).unwrap();
        let rows = file_rows(tmp.path());
        assert_eq!(text, serde_json::to_string_pretty(&rows).unwrap() + "\n");
        rows
    };
    // Merges after another writer, then repeated writes by the same one.
    for i in 0..3 {
        a.record(&result("a", &format!("t{i}"))).unwrap();
        expect_layout();
        a.record(&result("a2", &format!("t{i}"))).unwrap();
        expect_layout();
        b.record(&result("b", &format!("t{i}"))).unwrap();
        expect_layout();
    }
    let rows = expect_layout();
    assert_eq!(rows.len(), 1 + 6 + 3);
    assert_eq!(rows[0], seed[0]);
}

#[test]
fn an_edit_in_place_by_another_tool_is_not_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let mut m = Manifest::new(tmp.path(), "mine".into());
    m.record(&result("a", "t1")).unwrap();
    m.record(&result("a", "t1")).unwrap();
    // Rewrite the same file (same inode) with one more foreign row, no lock taken.
    let path = tmp.path().join("manifest.json");
    let mut rows = file_rows(tmp.path());
    rows.insert(0, json!({"step": "hand-added", "run": "someone"}));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, &serde_json::to_vec_pretty(&rows).unwrap()).unwrap();
    drop(f);
    m.record(&result("a", "t2")).unwrap();
    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["step"], "hand-added");
}

#[test]
fn a_file_replaced_by_another_tool_is_not_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let mut m = Manifest::new(tmp.path(), "mine".into());
    m.record(&result("a", "t1")).unwrap();
    // Replaced wholesale (new inode), e.g. restored from a backup, without the lock.
    let restored = json!([{"step": "restored", "run": "backup"}]);
    let path = tmp.path().join("manifest.json");
    fs::remove_file(&path).unwrap();
    fs::write(&path, serde_json::to_vec_pretty(&restored).unwrap()).unwrap();
    m.record(&result("a", "t2")).unwrap();
    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0], restored[0]);
    // And deleted: this process's rows come back on their own.
    fs::remove_file(&path).unwrap();
    m.record(&result("a", "t3")).unwrap();
    assert_eq!(file_rows(tmp.path()).len(), 3);
}

#[test]
fn this_process_rows_are_replaced_by_the_newest_after_others_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let mut a = Manifest::new(tmp.path(), "run-a".into());
    let mut b = Manifest::new(tmp.path(), "run-b".into());
    a.record(&result("x", "1")).unwrap();
    b.record(&result("y", "1")).unwrap();
    a.record(&result("x", "2")).unwrap();
    let mut y = result("y", "1");
    y.ok = true;
    b.record(&y).unwrap();

    let rows = file_rows(tmp.path());
    let of = |run: &str| rows.iter().filter(|r| r["run"] == run).collect::<Vec<_>>();
    assert_eq!(of("run-a").len(), 2);
    assert_eq!(of("run-b").len(), 1);
    assert_eq!(of("run-b")[0]["ok"], true);
}

#[test]
fn a_corrupt_manifest_is_moved_aside_never_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [&[u8]; 4] = [
        b"[{\"step\": \"a\", \"run\": ",
        b"{\"step\": \"an object\"}",
        b"\xff\xfe\x00garbage",
        b"42",
    ];
    let mut asides = Vec::new();
    for bytes in cases {
        fs::write(tmp.path().join("manifest.json"), bytes).unwrap();
        let mut m = Manifest::new(tmp.path(), new_run_id());
        let outcome = m.record(&result("干活", "t")).unwrap();
        let aside = outcome.moved_aside.expect("reported to the caller");
        assert!(
            aside
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("manifest.json.corrupt-"),
            "{aside:?}"
        );
        assert_eq!(fs::read(&aside).unwrap(), bytes, "kept byte for byte");
        assert!(
            !asides.contains(&aside),
            "a second corrupt file in the same second gets its own name"
        );
        asides.push(aside);
        let rows = file_rows(tmp.path());
        assert_eq!(rows.len(), 1, "a new manifest was started");
        // The next write is an ordinary one.
        assert_eq!(m.record(&result("干活", "t2")).unwrap().moved_aside, None);
    }
    assert!(read_rows(&tmp.path().join("nowhere")).unwrap().is_empty());
    fs::write(tmp.path().join("manifest.json"), b"not json").unwrap();
    assert!(
        read_rows(tmp.path()).is_err(),
        "read_rows reports, never moves"
    );
    assert!(tmp.path().join("manifest.json").exists());
}

#[test]
fn a_blank_manifest_counts_as_empty() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("manifest.json"), b"\n").unwrap();
    let mut m = Manifest::new(tmp.path(), "r".into());
    assert_eq!(m.record(&result("a", "t")).unwrap().moved_aside, None);
    assert_eq!(file_rows(tmp.path()).len(), 1);
}

#[test]
fn creates_the_run_dir_and_reports_unwritable_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let deep = tmp.path().join("a/runs");
    let mut m = Manifest::new(&deep, "r".into());
    m.record(&result("a", "t")).unwrap();
    assert_eq!(file_rows(&deep).len(), 1);

    fs::write(tmp.path().join("file"), b"").unwrap();
    let mut bad = Manifest::new(&tmp.path().join("file/runs"), "r".into());
    let err = bad.record(&result("a", "t")).unwrap_err();
    assert!(err.to_string().contains("file/runs"), "{err}");
    assert_eq!(bad.rows().len(), 1, "kept for the next write");
}

/// Env vars that turn this test binary into one writer process of
/// [`concurrent_processes_never_lose_a_row`].
const WRITER_DIR: &str = "FLOWER_TEST_MANIFEST_DIR";
const WRITER_RUN: &str = "FLOWER_TEST_MANIFEST_RUN";
const RECORDS: usize = 25;
const WRITERS: usize = 4;

/// A writer process: records `RECORDS` attempts, each twice (started, then finished).
/// Does nothing when run as an ordinary test.
#[test]
fn writer_role() {
    let (Ok(dir), Ok(run)) = (std::env::var(WRITER_DIR), std::env::var(WRITER_RUN)) else {
        return;
    };
    let mut m = Manifest::new(Path::new(&dir), run.clone());
    for k in 0..RECORDS {
        let mut r = StepResult::started(&format!("{run}-step{k}"));
        r.session_id = Some(format!("{run}-session{k}"));
        m.record(&r).unwrap();
        r.ok = true;
        r.num_turns = k as u32;
        r.finish();
        m.record(&r).unwrap();
    }
}

#[test]
fn concurrent_processes_never_lose_a_row() {
    let tmp = tempfile::tempdir().unwrap();
    // Someone else's row, there before the writers start.
    let old = json!([{"step": "旧", "run": "20260101-000000-000000", "ok": true}]);
    fs::write(
        tmp.path().join("manifest.json"),
        serde_json::to_vec(&old).unwrap(),
    )
    .unwrap();

    let exe = std::env::current_exe().unwrap();
    let runs: Vec<String> = (0..WRITERS)
        .map(|i| format!("20260907-000000-00000{i}"))
        .collect();
    let children: Vec<_> = runs
        .iter()
        .map(|run| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "manifest::writer_role",
                    "--test-threads",
                    "1",
                    "--quiet",
                ])
                .env(WRITER_DIR, tmp.path())
                .env(WRITER_RUN, run)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }

    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 1 + WRITERS * RECORDS);
    assert_eq!(rows[0], old[0]);
    for run in &runs {
        let mine: Vec<_> = rows.iter().filter(|r| r["run"] == run.as_str()).collect();
        assert_eq!(mine.len(), RECORDS, "{run}");
        for (k, row) in mine.iter().enumerate() {
            assert_eq!(row["step"], format!("{run}-step{k}"), "in order");
            assert_eq!(row["ok"], true, "the newest version of each row");
            assert_eq!(row["num_turns"], k);
        }
    }
    assert!(!tmp.path().join("manifest.json.tmp").exists());
}

/// Puts `rows` in the manifest as another tool would, without the lock, and gives the
/// file back the modification time it had (as `cp -p`, `rsync -t` or `touch -r` do).
fn rewrite_keeping_mtime(path: &Path, rows: &Value, new_inode: bool) {
    let mtime = fs::metadata(path).unwrap().modified().unwrap();
    // A new inode is made while the old one still exists, so that it cannot be the old
    // number handed out again (ext4 reuses a freed inode at once).
    let target = if new_inode {
        path.with_extension("new")
    } else {
        path.to_path_buf()
    };
    let mut f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&target)
        .unwrap();
    std::io::Write::write_all(&mut f, &serde_json::to_vec_pretty(rows).unwrap()).unwrap();
    f.set_modified(mtime).unwrap();
    if new_inode {
        fs::rename(&target, path).unwrap();
    }
}

#[test]
fn a_change_that_keeps_the_modification_time_is_still_seen() {
    // The fast path (write only this process's rows) is taken only for the very file
    // this process wrote last: same inode and same length, not same mtime alone.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("manifest.json");

    // Edited in place to a different length.
    let mut m = Manifest::new(tmp.path(), "mine".into());
    m.record(&result("a", "t1")).unwrap();
    let mut rows = file_rows(tmp.path());
    rows.insert(0, json!({"step": "hand-added", "run": "someone"}));
    rewrite_keeping_mtime(&path, &Value::Array(rows), false);
    m.record(&result("a", "t2")).unwrap();
    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0]["step"], "hand-added");

    // Replaced by a new file of exactly the same length.
    let before = fs::metadata(&path).unwrap().len() as usize;
    let padding = |n: usize| json!([{"step": "restored", "run": "backup", "pad": "p".repeat(n)}]);
    let base = serde_json::to_vec_pretty(&padding(0)).unwrap().len();
    let restored = padding(before - base);
    assert_eq!(serde_json::to_vec_pretty(&restored).unwrap().len(), before);
    rewrite_keeping_mtime(&path, &restored, true);
    m.record(&result("a", "t3")).unwrap();
    let rows = file_rows(tmp.path());
    let steps: Vec<&Value> = rows.iter().map(|r| &r["started_at"]).collect();
    assert_eq!(rows[0], restored[0]);
    assert_eq!(steps[1..], [&json!("t1"), &json!("t2"), &json!("t3")]);
}

/// Edits the manifest in place (same inode, same length): the first `"run": "mine"`
/// becomes `"run": "mina"`, as a hand edit that gives one of this process's rows to
/// another run. Then the file gets the modification time `mtime`.
fn give_first_row_away_in_place(path: &Path, mtime: std::time::SystemTime) {
    let text = fs::read_to_string(path).unwrap();
    let edited = text.replacen("\"run\": \"mine\"", "\"run\": \"mina\"", 1);
    assert_ne!(text, edited, "no row of run mine in {text}");
    let mut f = fs::OpenOptions::new().write(true).open(path).unwrap();
    std::io::Write::write_all(&mut f, edited.as_bytes()).unwrap();
    f.set_modified(mtime).unwrap();
}

fn runs_and_starts(dir: &Path) -> Vec<(String, String)> {
    file_rows(dir)
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (field("run"), field("started_at"))
        })
        .collect()
}

#[test]
fn each_sign_of_another_writer_alone_sends_the_write_down_the_full_merge() {
    // The fast path trusts the file only while the lock's token, the inode, the length
    // and the modification time are all as this process left them. Each case changes
    // exactly one of them and gives one of this process's rows to another run: the full
    // merge keeps that row, the fast path would overwrite it with this process's rows.
    enum Change {
        ModificationTime,
        Inode,
        LockToken,
    }
    for change in [Change::ModificationTime, Change::Inode, Change::LockToken] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("manifest.json");
        let mut m = Manifest::new(tmp.path(), "mine".into());
        m.record(&result("a", "t1")).unwrap();
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();
        let case = match change {
            Change::ModificationTime => {
                give_first_row_away_in_place(&path, mtime + Duration::from_secs(7));
                "mtime"
            }
            Change::Inode => {
                // Another tool writes a sibling and renames it over: a new inode, while
                // the old one still exists (so it cannot be handed out again).
                let aside = tmp.path().join("edited");
                fs::copy(&path, &aside).unwrap();
                give_first_row_away_in_place(&aside, mtime);
                fs::rename(&aside, &path).unwrap();
                "inode"
            }
            Change::LockToken => {
                // Another writer took the lock and left its token.
                let lock = tmp.path().join("manifest.json.lock");
                let token = fs::read(&lock).unwrap();
                assert!(!token.is_empty());
                fs::write(&lock, b"another-run 0123456789abcdef\n").unwrap();
                give_first_row_away_in_place(&path, mtime);
                "lock token"
            }
        };
        m.record(&result("a", "t2")).unwrap();
        let pair = |run: &str, at: &str| (run.to_string(), at.to_string());
        assert_eq!(
            runs_and_starts(tmp.path()),
            [pair("mina", "t1"), pair("mine", "t1"), pair("mine", "t2")],
            "after a change of the {case} alone"
        );
    }
}

#[test]
fn a_row_of_another_run_that_mentions_this_run_is_still_theirs() {
    // The pre-filter looks for this run's id anywhere in the row; only the `run` field
    // decides.
    let tmp = tempfile::tempdir().unwrap();
    let theirs = json!([{"step": "mine", "text": "\"mine\"", "run": "theirs"}]);
    fs::write(
        tmp.path().join("manifest.json"),
        serde_json::to_vec_pretty(&theirs).unwrap(),
    )
    .unwrap();
    let mut m = Manifest::new(tmp.path(), "mine".into());
    m.record(&result("a", "t1")).unwrap();
    let rows = file_rows(tmp.path());
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0], theirs[0]);
}

#[test]
fn a_manifest_that_cannot_be_read_is_an_error_not_an_empty_one() {
    // A symlink loop: neither missing nor a directory, so nothing may be assumed about
    // the rows behind it; writing over it or moving it aside would be a guess.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("manifest.json");
    std::os::unix::fs::symlink("manifest.json", &path).unwrap();
    let err = read_rows(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("manifest.json"), "{err}");
    let mut m = Manifest::new(tmp.path(), "mine".into());
    let err = m.record(&result("a", "t1")).unwrap_err().to_string();
    assert!(err.contains("manifest.json"), "{err}");
    assert!(
        fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        names_in(tmp.path())
            .iter()
            .filter(|n| n.contains("corrupt"))
            .count(),
        0
    );
}

#[test]
fn a_corrupt_manifest_says_whether_it_is_not_json_or_not_an_array() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("manifest.json");
    fs::write(&path, r#"{"step": "a"}"#).unwrap();
    let err = read_rows(tmp.path()).unwrap_err().to_string();
    assert!(err.contains("不是由行组成的 JSON 数组"), "{err}");
    fs::write(&path, r#"[{"step": "a"},"#).unwrap();
    let err = read_rows(tmp.path()).unwrap_err().to_string();
    assert!(!err.contains("不是由行组成的 JSON 数组"), "{err}");
    assert!(err.contains("EOF"), "{err}");
}

#[test]
fn rows_of_older_flowers_and_other_tools_read_leniently() {
    let tmp = tempfile::tempdir().unwrap();
    // Missing fields, counts beyond u32, mistyped fields, unknown fields, a duplicated
    // key (the last wins), rows that are not objects: each still reads, none fails the
    // file.
    let text = r#"[
        {"step": "确认需求", "run": "old", "num_turns": 5000000000, "attempts": 2,
         "extra": {"nested": true}, "errors": ["a", 3, "b"], "retired": "not a list"},
        {"step": 7, "ok": "yes", "cost_usd": "free", "context": -1, "session_id": null},
        {"step": "x", "step": "y", "context_window": 1000000, "handoff_threshold": null},
        {"step": "z", "context_window": 200000, "handoff_threshold": 120000},
        "not even an object",
        [1, 2]
    ]"#;
    fs::write(tmp.path().join("manifest.json"), text).unwrap();
    let rows = read_rows(tmp.path()).unwrap();
    assert_eq!(rows.len(), 6);
    let old = &rows[0];
    assert_eq!(old.result.step, "确认需求");
    assert_eq!(old.result.num_turns, u32::MAX, "saturates");
    assert_eq!(old.result.attempts, 2);
    assert_eq!(old.result.errors, vec!["a".into(), "b".into()]);
    assert!(old.result.retired.is_empty());
    assert_eq!(old.context, None, "an older flower recorded no context");
    let odd = &rows[1];
    assert_eq!(odd.result.step, "");
    assert!(!odd.result.ok);
    assert_eq!((odd.result.cost_usd, odd.result.context), (None, 0));
    assert_eq!(rows[2].result.step, "y");
    let context = rows[2].context.unwrap();
    assert_eq!(
        (context.window, context.handoff_threshold),
        (1_000_000, None)
    );
    let context = rows[3].context.unwrap();
    assert_eq!(context.handoff_threshold, Some(120_000));
    assert_eq!(rows[4], Default::default());
    assert_eq!(rows[5], Default::default());
}

#[test]
fn a_row_with_the_run_context_ends_with_window_and_threshold() {
    use flower::continuity::manifest::RunContext;
    let tmp = tempfile::tempdir().unwrap();
    for (threshold, written) in [(Some(120_000), json!(120_000)), (None, Value::Null)] {
        let mut m = Manifest::new(tmp.path(), new_run_id()).with_context(RunContext {
            window: 200_000,
            handoff_threshold: threshold,
        });
        m.record(&result("a", "t")).unwrap();
        let rows = file_rows(tmp.path());
        let row = rows.last().unwrap().as_object().unwrap();
        let keys: Vec<_> = row.keys().map(String::as_str).collect();
        assert_eq!(keys[..16], SPEC_FIELDS);
        assert_eq!(keys[16..], ["context_window", "handoff_threshold"]);
        assert_eq!(row["context_window"], 200_000);
        assert_eq!(row["handoff_threshold"], written);
        let back = read_rows(tmp.path()).unwrap().pop().unwrap();
        assert_eq!(back.context.unwrap().handoff_threshold, threshold);
    }
}
