//! `flower log`, `flower show` and `flower report`: what they say about a run, that they
//! never write to it (snapshot of the directory, `-wal`/`-shm` included, before and
//! after), what they do with bad input, and the report in a real browser (headless
//! Chromium, skipped with a note when it is not installed).
//!
//! Most tests build the run directly through the library (a store, a manifest, a
//! lineage), so that the numbers they check are known exactly; one runs the real
//! pipeline against the fake server.

use crate::support;
use crate::support::Flower;
use crate::support::snapshot::{assert_same, snapshot};

use flower::continuity::lineage::Lineage;
use flower::continuity::manifest::{Manifest, Outage, StepResult};
use flower::stores::{SessionKey, SessionStore, SqliteSessionStore, project_key};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use support::FakeServer;
use support::pipeline::{Project, simple_reply, text};

// ---------------------------------------------------------------------------------
// A run built through the library
// ---------------------------------------------------------------------------------

/// Session ids of the built run.
pub(crate) const A1: &str = "aaaaaaaa-0000-4000-8000-000000000001";
pub(crate) const A2: &str = "aaaaaaaa-0000-4000-8000-000000000002";
const B1: &str = "bbbbbbbb-0000-4000-8000-000000000001";
const J1: &str = "cccccccc-0000-4000-8000-000000000001";

fn stamp(base_s: i64, offset_s: i64) -> String {
    let t = chrono::DateTime::from_timestamp(base_s + offset_s, 0).unwrap();
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

fn local(base_s: i64, offset_s: i64) -> String {
    let t = chrono::DateTime::from_timestamp(base_s + offset_s, 0).unwrap();
    t.with_timezone(&chrono::Local)
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

const T0: i64 = 1_780_000_000;

/// A transcript of `turns` turns, each a Bash call and its result, context growing by
/// 1000 tokens a turn; `errors` are (after turn, text) synthetic API errors.
pub fn transcript(id: &str, start_s: i64, turns: usize, errors: &[(usize, &str)]) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut parent = Value::Null;
    let mut n = 0;
    let mut push = |entries: &mut Vec<Value>, mut e: Value, at: i64| {
        n += 1;
        let uuid = format!("{id}-{n:06}");
        e["uuid"] = json!(uuid);
        e["parentUuid"] = parent.clone();
        e["sessionId"] = json!(id);
        e["timestamp"] = json!(stamp(start_s, at));
        e["cwd"] = json!("/w");
        e["isSidechain"] = json!(false);
        parent = json!(uuid);
        entries.push(e);
    };
    push(
        &mut entries,
        json!({"type": "user", "message": {"role": "user", "content": "写个 hello 脚本"}}),
        0,
    );
    for t in 0..turns {
        let at = (t as i64 + 1) * 10;
        push(
            &mut entries,
            json!({"type": "assistant", "message": {
                "id": format!("msg_{t}"), "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": format!("第 {t} 步")},
                            {"type": "tool_use", "id": format!("toolu_{t}"), "name": "Bash",
                             "input": {"command": format!("echo {t}")}}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 100, "output_tokens": 50,
                          "cache_creation_input_tokens": 850,
                          "cache_read_input_tokens": (t as u64) * 1000}}}),
            at,
        );
        push(
            &mut entries,
            json!({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("toolu_{t}"),
                 "content": format!("line1\nline2\nline3\nline4\nline5\nout {t}"), "is_error": false}]}}),
            at + 1,
        );
        for (after, error) in errors {
            if *after == t {
                push(
                    &mut entries,
                    json!({"type": "assistant", "isApiErrorMessage": true, "message": {
                        "id": "msg_synthetic_x", "type": "message", "role": "assistant",
                        "model": "<synthetic>", "content": [{"type": "text", "text": error}],
                        "stop_reason": "stop_sequence", "usage": {}}}),
                    at + 2,
                );
            }
        }
    }
    entries
}

/// What [`build_run`] made.
pub struct Built {
    pub dir: PathBuf,
    pub _tmp: tempfile::TempDir,
}

/// A run in a fresh directory: step 干活 with a handoff (A1 retired, A2 its successor),
/// one outage and one retry in A1; its judge J1; then, woken by a second process, step
/// 复查 (B1). Curves: 干活 and 复查 (the judge is not a main session); markers: outage,
/// retry, handoff, wake.
pub fn build_run(turns_per_session: usize) -> Built {
    let tmp = tempfile::TempDir::new().unwrap();
    let dir = tmp.path().canonicalize().unwrap().join("proj");
    std::fs::create_dir_all(&dir).unwrap();
    let run_dir = dir.join("runs");
    let store = SqliteSessionStore::open(&run_dir.join("sessions.db")).unwrap();
    let key = |id: &str| SessionKey::main(project_key(&dir), id);
    let n = turns_per_session;
    let span = n as i64 * 10 + 20;
    store
        .append(
            &key(A1),
            &crate::support::typed(&transcript(
                A1,
                T0,
                n,
                &[
                    (0, "error sending request: connection refused"),
                    (1, "overloaded_error: Overloaded"),
                ],
            )),
        )
        .unwrap();
    store
        .append(
            &key(A2),
            &crate::support::typed(&transcript(A2, T0 + span, n, &[])),
        )
        .unwrap();
    store
        .append(
            &key(J1),
            &crate::support::typed(&transcript(J1, T0 + 2 * span, 1, &[])),
        )
        .unwrap();
    store
        .append(
            &key(B1),
            &crate::support::typed(&transcript(B1, T0 + 3 * span, n, &[])),
        )
        .unwrap();
    let row = |step: &str, id: &str, from: i64, to: i64, ok: bool| StepResult {
        step: step.into(),
        session_id: Some(id.into()),
        ok,
        cost_usd: Some(0.25),
        num_turns: n as u32,
        text: String::new(),
        error: (!ok).then(|| "overloaded_error: Overloaded".into()),
        started_at: local(T0, from),
        ended_at: local(T0, to),
        attempts: if ok { 1 } else { 2 },
        errors: Vec::new(),
        resumed: false,
        retired: Vec::new(),
        context: 0,
        // The failed try met an outage (the transcript has its API error).
        outages: if ok {
            Vec::new()
        } else {
            vec![Outage {
                waited_s: 8.0,
                database: false,
            }]
        },
    };
    let mut first = Manifest::new(&run_dir, "20260101-000000-aaaaaa".into());
    first.record(&row("干活", A1, 0, span - 5, false)).unwrap();
    let mut retry = row("干活#retry1", A2, span, 2 * span - 5, true);
    retry.retired = vec![A1.into()];
    first.record(&retry).unwrap();
    let mut judge = row("干活·判定#1", J1, 2 * span, 2 * span + 15, true);
    judge.num_turns = 1;
    first.record(&judge).unwrap();
    let mut second = Manifest::new(&run_dir, "20260101-010000-bbbbbb".into());
    second
        .record(&row("复查", B1, 3 * span, 4 * span - 5, true))
        .unwrap();
    let mut lineage = Lineage::empty(&run_dir, &dir);
    lineage.remember("干活", A2);
    lineage.remember("复查", B1);
    lineage.wake();
    drop(store);
    Built { dir, _tmp: tmp }
}

// ---------------------------------------------------------------------------------
// Read-only, as `flower state` is
// ---------------------------------------------------------------------------------

/// Runs `flower ARGS` in `dir` and checks that nothing under `dir` changed.
fn read_only(dir: &Path, args: &[&str]) -> Output {
    let before = snapshot(dir);
    let out = Flower::new(args).dir(dir).no_color().stdin_null().output();
    assert_same(
        &before,
        &snapshot(dir),
        &format!("flower {}", args.join(" ")),
    );
    out
}

#[test]
fn log_show_and_report_write_nothing_even_over_a_live_wal() {
    let built = build_run(5);
    let dir = &built.dir;
    // A writer holds the store open with a commit still in its WAL: -wal and -shm
    // exist, as while flower runs or after it was killed.
    let writer = SqliteSessionStore::open(&dir.join("runs/sessions.db")).unwrap();
    let late = transcript("dddddddd-0000-4000-8000-000000000001", T0, 1, &[]);
    writer
        .append(
            &SessionKey::main(project_key(dir), "dddddddd-0000-4000-8000-000000000001"),
            &crate::support::typed(&late),
        )
        .unwrap();
    assert!(dir.join("runs/sessions.db-wal").exists());
    assert!(dir.join("runs/sessions.db-shm").exists());

    let out = read_only(dir, &["log"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    let lines: Vec<&str> = log.lines().collect();
    // Four attempts, one wake marker, one totals line.
    assert_eq!(lines.len(), 6, "{log}");
    assert!(
        lines[0].contains("干活 ") && lines[0].contains("出错:overloaded_error"),
        "{log}"
    );
    assert!(
        lines[1].contains("干活#retry1") && lines[1].contains("(重试 1)"),
        "{log}"
    );
    assert!(lines[1].contains(&format!("换代 1 次:{A1}")), "{log}");
    // 请求 counts requests: 5 replies and the 2 failed tries' requests, not the tries.
    assert!(lines[0].contains("请求 7 "), "{log}");
    assert!(lines[1].contains("请求 5 "), "{log}");
    assert!(
        lines[2].contains("干活·判定#1") && lines[2].contains("(判定 1)"),
        "{log}"
    );
    // The second process: the banner said 第 2 次唤醒.
    assert!(lines[3].starts_with("── 唤醒 #2"), "{log}");
    assert!(
        lines[4].contains("复查") && lines[4].contains(" ok "),
        "{log}"
    );
    let totals = lines[5];
    assert!(totals.starts_with("合计:"), "{log}");
    assert!(totals.contains("$1.0000"), "{totals}");
    // 5+5+1+5 turns; tokens summed over the four sessions' assistant entries.
    assert!(totals.contains(" 16 轮"), "{totals}");
    assert!(totals.contains("输入 1.6K 输出 0.8K"), "{totals}");
    assert!(
        totals.contains("换代 1 · 唤醒 2 · 重试 1 · 断网 1 次"),
        "{totals}"
    );

    let out = read_only(dir, &["log", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let attempts = doc["attempts"].as_array().unwrap();
    let steps: Vec<&str> = attempts
        .iter()
        .map(|a| a["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["干活", "干活#retry1", "干活·判定#1", "复查"]);
    assert_eq!(attempts[1]["kind"], json!({"kind": "retry", "n": 1}));
    assert_eq!(attempts[3]["wake"], true);
    assert_eq!(doc["totals"]["turns"], 16);
    assert_eq!(doc["totals"]["tokens"]["input"], 1600);
    assert_eq!(doc["totals"]["handoffs"], 1);
    // The outage lasted from the error (t+12s) to the next turn (t+20s).
    assert_eq!(doc["totals"]["outage_waited_s"], 8.0);

    // The default is the last step run; a step resolves through lineage.json.
    let out = read_only(dir, &["show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!("会话 {B1} · 步骤 复查")),
        "{shown}"
    );
    let out = read_only(dir, &["show", "干活"]);
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!("会话 {A2} · 步骤 干活")),
        "{shown}"
    );
    assert!(shown.contains("── 第 5 轮 · 助手"), "{shown}");
    assert!(shown.contains("⏺ Bash echo 4"), "{shown}");
    // Results cut to four lines with the byte count.
    assert!(
        shown.contains(
            "⎿ Bash 结果(35 字节)\n    line1\n    line2\n    line3\n    line4\n    … 还有 2 行"
        ),
        "{shown}"
    );

    // A session id; its synthetic errors are marked, and gone from the pruned view.
    let out = read_only(dir, &["show", A1]);
    let raw = text(&out.stdout);
    assert_eq!(raw.matches("[合成的 API 错误").count(), 2, "{raw}");
    let out = read_only(dir, &["show", A1, "--pruned"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pruned = text(&out.stdout);
    assert!(pruned.contains("续跑时喂给模型的样子"), "{pruned}");
    assert!(!pruned.contains("[合成的 API 错误"), "{pruned}");
    let out = read_only(dir, &["show", A1, "--pruned", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["entries"].as_array().unwrap().len(), 11);

    // The report goes elsewhere: the project is not touched.
    let out_dir = tempfile::TempDir::new().unwrap();
    let report = out_dir.path().join("r.html");
    let out = read_only(dir, &["report", "-o", report.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("data-chart=\"context\" data-curves=\"2\" data-markers=\"4\""));
    assert!(!html.contains("<script src"), "no external script");
    assert!(!html.contains("<link"), "no external style");
    drop(writer);
}

#[test]
fn report_defaults_to_runs_report_html() {
    let built = build_run(3);
    let out = Flower::new(&["report"])
        .dir(&built.dir)
        .no_color()
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(built.dir.join("runs/report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    // Every session one click away, collapsed.
    assert_eq!(html.matches("<details class=\"transcript\"").count(), 4);
    assert!(html.contains(&format!("id=\"s-{B1}\"")));
}

// ---------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------

fn fails_with(dir: &Path, args: &[&str], wanted: &str) {
    let out = read_only(dir, args);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(wanted), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_input_gets_a_clear_message_and_nothing_is_written() {
    // No runs/ at all.
    let tmp = tempfile::TempDir::new().unwrap();
    for args in [&["log"][..], &["show"], &["report"]] {
        fails_with(tmp.path(), args, "runs 不存在");
    }

    let built = build_run(2);
    let dir = &built.dir;
    // An unknown session id, an unknown step.
    fails_with(
        dir,
        &["show", "0123abcd-0000-4000-8000-00000000dead"],
        "在 sessions.db 里不存在",
    );
    fails_with(
        dir,
        &["show", "没有这步"],
        "步骤 没有这步 在 lineage.json 里没有记录",
    );

    // Lineage naming a session that is gone (and no manifest row to fall back on).
    let lineage = dir.join("runs/lineage.json");
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(&lineage).unwrap()).unwrap();
    file["steps"]["验收"] = json!("eeeeeeee-0000-4000-8000-000000000009");
    std::fs::write(&lineage, serde_json::to_vec(&file).unwrap()).unwrap();
    fails_with(dir, &["show", "验收"], "已不在 sessions.db 里");

    // Entries the renderer does not know: a marked placeholder.
    let store = SqliteSessionStore::open(&dir.join("runs/sessions.db")).unwrap();
    store
        .append(
            &SessionKey::main(project_key(dir), B1),
            &crate::support::typed(&[
                json!({"type": "file-history-snapshot", "uuid": "odd-1"}),
                json!({"type": "assistant", "uuid": "odd-2", "message": {"role": "assistant",
                     "content": [{"type": "hologram"}]}}),
            ]),
        )
        .unwrap();
    drop(store);
    let out = read_only(dir, &["show", "复查"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("[未知条目:type=file-history-snapshot]"),
        "{shown}"
    );
    assert!(shown.contains("[未知内容块:hologram]"), "{shown}");
    let out = read_only(dir, &["log"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Usage counts no real turn has: added up, they must saturate, never panic.
    let store = SqliteSessionStore::open(&dir.join("runs/sessions.db")).unwrap();
    let huge = json!({"input_tokens": u64::MAX, "output_tokens": u64::MAX,
                      "cache_creation_input_tokens": u64::MAX, "cache_read_input_tokens": u64::MAX});
    let absurd = |n: u32| {
        json!({"type": "assistant", "uuid": format!("huge-{n}"), "timestamp": stamp(T0, 3),
               "message": {"role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [{"type": "text", "text": "大"}], "usage": huge}})
    };
    store
        .append(
            &SessionKey::main(project_key(dir), B1),
            &crate::support::typed(&[absurd(1), absurd(2)]),
        )
        .unwrap();
    drop(store);
    for args in [
        &["log"][..],
        &["log", "--json"],
        &["show", "复查"],
        &["report"],
    ] {
        let out = Flower::new(args).dir(dir).no_color().stdin_null().output();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "flower {args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "flower {args:?}: {stderr}");
    }
    std::fs::remove_file(dir.join("runs/report.html")).unwrap();

    // An empty manifest: no rows, said so.
    let manifest = dir.join("runs/manifest.json");
    std::fs::write(&manifest, "").unwrap();
    let out = read_only(dir, &["log"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("manifest.json 里还没有任何步骤记录。"));

    // A corrupt one: named, and left where it is.
    std::fs::write(&manifest, "[{\"step\": ").unwrap();
    for args in [&["log"][..], &["log", "--json"], &["report"]] {
        fails_with(dir, args, "manifest.json 读不成运行清单");
    }
}

// ---------------------------------------------------------------------------------
// A real pipeline
// ---------------------------------------------------------------------------------

#[test]
fn a_real_run_reads_back_step_by_step() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows = project.manifest();
    let out = read_only(&project.dir, &["log", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["attempts"].as_array().unwrap().len(), rows.len());
    let turns: u64 = rows.iter().map(|r| r["num_turns"].as_u64().unwrap()).sum();
    assert_eq!(doc["totals"]["turns"], turns);
    let out = read_only(&project.dir, &["show", "干活", "--subagents"]);
    let shown = text(&out.stdout);
    assert!(shown.contains("⏺ Task 写 hello"), "{shown}");
    assert!(shown.contains("════ 子代理"), "{shown}");
    assert!(shown.contains("⏺ Write hello.txt"), "{shown}");
}

/// The report draws the handoff threshold the run used (`--handoff-at`,
/// `FLOWER_HANDOFF_AT`), recorded with the window in every manifest row, not the
/// default; whatever the environment of `flower report` itself says.
#[test]
fn the_report_draws_the_threshold_the_run_used() {
    let cases: [(&[&str], Option<&str>, u64); 2] = [
        (&["写个 hello 脚本", "--handoff-at", "50K"], None, 50_000),
        (&["写个 hello 脚本"], Some("30%"), 60_000),
    ];
    for (args, variable, threshold) in cases {
        let project = Project::new();
        let server = FakeServer::with_handler(|req, _| simple_reply(req));
        let mut cmd = project.command(&server, args);
        if let Some(value) = variable {
            cmd.env("FLOWER_HANDOFF_AT", value);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        for row in project.manifest() {
            assert_eq!(row["context_window"], 200_000, "{row}");
            assert_eq!(row["handoff_threshold"], threshold, "{row}");
        }
        let out = Flower::bin()
            .command()
            .current_dir(&project.dir)
            .arg("report")
            .env("FLOWER_HANDOFF_AT", "90%")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let html = std::fs::read_to_string(project.dir.join("runs/report.html")).unwrap();
        assert_eq!(line(&html, "window"), 200_000);
        assert_eq!(line(&html, "threshold"), threshold, "{args:?} {variable:?}");
    }
}

/// The tokens of the report's `class` line (`window`, `threshold`).
fn line(html: &str, class: &str) -> u64 {
    let at = html
        .find(&format!("<line class=\"{class}\" data-tokens=\""))
        .unwrap_or_else(|| panic!("no {class} line"));
    let rest = &html[at..];
    let start = rest.find("data-tokens=\"").unwrap() + "data-tokens=\"".len();
    let end = start + rest[start..].find('"').unwrap();
    rest[start..end].parse().unwrap()
}

/// One source: the threshold the settings resolve is the one the runtime hands off at
/// (recorded in every row), and a run that recorded none (an older flower's rows) is
/// drawn by the report at that same default, not at a figure of its own.
#[test]
fn the_report_and_the_runtime_take_the_threshold_from_one_source() {
    let resolved = flower::settings::Settings::resolve(
        &flower::settings::Flags::default(),
        &flower::settings::Environment::default(),
        &flower::settings::FileLayer::default(),
    )
    .unwrap()
    .run_context();
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project
        .command(&server, &["写个 hello 脚本"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut rows = project.manifest();
    assert!(!rows.is_empty());
    for row in &mut rows {
        assert_eq!(row["context_window"], resolved.window, "{row}");
        assert_eq!(
            row["handoff_threshold"],
            json!(resolved.handoff_threshold),
            "{row}"
        );
        let row = row.as_object_mut().unwrap();
        row.remove("context_window");
        row.remove("handoff_threshold");
    }
    let manifest = project.dir.join("runs/manifest.json");
    std::fs::write(&manifest, serde_json::to_string(&rows).unwrap()).unwrap();
    let out = Flower::bin()
        .command()
        .current_dir(&project.dir)
        .arg("report")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(project.dir.join("runs/report.html")).unwrap();
    assert_eq!(line(&html, "window"), resolved.window);
    assert_eq!(Some(line(&html, "threshold")), resolved.handoff_threshold);
}

// ---------------------------------------------------------------------------------
// The report in a browser
// ---------------------------------------------------------------------------------

/// Headless Chromium, if installed.
fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn headless(browser: &Path, profile: &Path) -> Command {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null());
    cmd
}

/// The `<tag …>` start tags in `dom` that contain `needle`.
fn tags_with<'a>(dom: &'a str, tag: &str, needle: &str) -> Vec<&'a str> {
    dom.match_indices(&format!("<{tag} "))
        .map(|(i, _)| &dom[i..i + dom[i..].find('>').unwrap_or(0)])
        .filter(|t| t.contains(needle))
        .collect()
}

#[test]
fn the_report_loads_in_a_browser_with_its_curves_and_markers() {
    let Some(browser) = chromium() else {
        support::skip::skip(
            support::skip::CHROMIUM,
            "no chromium at /usr/bin/chromium (.ci/run installs it)",
        );
        return;
    };
    let built = build_run(40);
    let out = Flower::new(&["report"])
        .dir(&built.dir)
        .no_color()
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = built.dir.join("runs/report.html");
    let profile = tempfile::TempDir::new().unwrap();
    let out = headless(&browser, profile.path())
        .arg("--dump-dom")
        .arg(format!("file://{}", report.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium: {}", text(&out.stderr));
    let dom = text(&out.stdout);
    let log = text(&out.stderr);
    let html_tag = &dom[dom.find("<html").expect("an html element")..];
    let html_tag = &html_tag[..html_tag.find('>').unwrap()];
    assert!(
        !html_tag.contains("data-js-errors"),
        "script errors: {html_tag}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains(":CONSOLE(") || l.contains("Uncaught")),
        "console errors: {log}"
    );
    // The browser parsed the charts into SVG elements with what the test expects.
    let context = &dom[dom.find("data-chart=\"context\"").expect("context chart")..];
    let context = &context[..context.find("</svg>").unwrap()];
    assert_eq!(tags_with(context, "polyline", "class=\"curve\"").len(), 2);
    let markers = tags_with(context, "circle", "class=\"marker\"");
    let kinds: Vec<&str> = markers
        .iter()
        .map(|t| {
            t.split("data-kind=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort();
    assert_eq!(sorted, ["handoff", "outage", "retry", "wake"], "{kinds:?}");
    assert_eq!(tags_with(context, "line", "class=\"window\"").len(), 1);
    assert_eq!(tags_with(context, "line", "class=\"threshold\"").len(), 1);
    let cost = &dom[dom.find("data-chart=\"cost\"").expect("cost chart")..];
    let cost = &cost[..cost.find("</svg>").unwrap()];
    assert_eq!(tags_with(cost, "polyline", "class=\"curve\"").len(), 2);
    let timeline = &dom[dom.find("data-chart=\"timeline\"").expect("timeline")..];
    let timeline = &timeline[..timeline.find("</svg>").unwrap()];
    assert_eq!(
        tags_with(timeline, "rect", "data-kind=\"attempt\"").len(),
        4
    );
    assert_eq!(tags_with(timeline, "rect", "data-kind=\"outage\"").len(), 1);

    // And it paints: a screenshot that is a real PNG.
    let shot = profile.path().join("shot.png");
    let out = headless(&browser, profile.path())
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1100,1400")
        .arg(format!("file://{}", report.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium: {}", text(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
    if let Some(dest) = std::env::var_os("FLOWER_REPORT_SCREENSHOT") {
        std::fs::copy(&shot, dest).unwrap();
    }
}

/// A step that handed off many times lists its chain of sessions folded: the first,
/// how many are left out, the last two.
#[test]
fn log_folds_a_long_list_of_retired_sessions() {
    let built = build_run(2);
    let dir = &built.dir;
    let ids: Vec<String> = (0..111)
        .map(|i| format!("eeeeeeee-0000-4000-8000-{i:012}"))
        .collect();
    let mut later = Manifest::new(&dir.join("runs"), "20260101-020000-cccccc".into());
    let mut row = StepResult::started("干活");
    row.session_id = Some(B1.into());
    row.ok = true;
    row.num_turns = 3225;
    row.attempts = 1;
    row.retired = ids.clone();
    later.record(&row).unwrap();
    let out = Flower::new(&["log"])
        .dir(dir)
        .no_color()
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = text(&out.stdout);
    let line = log.lines().find(|l| l.contains("换代 111 次")).unwrap();
    assert!(line.contains("请求 3225 "), "{line}");
    // The chain ends in the session the step went on in (the one lineage holds).
    assert!(
        line.ends_with(&format!(
            "换代 111 次:{} → …另 109 个… → {} → {B1}",
            ids[0], ids[110]
        )),
        "{line}"
    );
}

/// A long transcript is not pasted whole into the page: its beginning and end are,
/// with a link to the whole text in a file beside the page (no network either way).
#[test]
fn report_keeps_long_transcripts_beside_the_page() {
    let built = build_run(600);
    let dir = &built.dir;
    let out = Flower::new(&["report"])
        .dir(dir)
        .no_color()
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(dir.join("runs/report.html")).unwrap();
    let whole = dir.join(format!("runs/report.transcripts/{A1}.txt"));
    let full = std::fs::read_to_string(&whole).unwrap();
    assert!(full.len() > 48 * 1024, "{}", full.len());
    assert!(
        html.contains(&format!("href=\"report.transcripts/{A1}.txt\"")),
        "no link"
    );
    // Every session is still listed, and the page is smaller than its transcripts.
    assert_eq!(html.matches("<details class=\"transcript\"").count(), 4);
    assert!(html.len() < full.len() * 2, "{} bytes", html.len());
    let show = Flower::new(&["show", "干活"])
        .dir(dir)
        .no_color()
        .stdin_null()
        .output();
    assert!(show.status.success(), "{}", text(&show.stderr));
}
