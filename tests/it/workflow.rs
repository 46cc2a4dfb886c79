//! Continuation through the library API: Runtime, Workflow, Step, lineage.json,
//! manifest.json, wake_state. Each `Runtime` stands for one process.

use crate::support;

use flower::continuity::resilience::Resilience;
use flower::continuity::runtime::RuntimeOptions;
use flower::model::anthropic::AnthropicClient;
use flower::workflow::{Gate, Verdict};
use flower::{AgentSpec, Context, Runtime, Step, Workflow, wake_state};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::{FakeServer, Reply};
use tempfile::TempDir;

fn runtime(dir: &Path, server: &FakeServer) -> Runtime {
    let client =
        AnthropicClient::new(&server.url(), support::FAKE_API_KEY, "claude-fake").expect("client");
    let options = RuntimeOptions {
        resilience: Resilience {
            max_attempts: 1,
            ..Resilience::default()
        },
        ..RuntimeOptions::new(Arc::new(client))
    };
    Runtime::with_options(dir, dir.join("runs"), options).expect("runtime")
}

pub(crate) fn terse() -> AgentSpec {
    AgentSpec::new("terse", "回答极简,一行以内,不解释不寒暄。")
        .allowed_tools(["Read", "Glob"])
        .max_turns(4)
}

pub(crate) fn seed_workflow() -> Workflow {
    Workflow::new(vec![Step::new(
        "取词",
        terse(),
        "读 seed.txt,只回文件里那个词。",
    )])
}

fn lineage(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("runs/lineage.json")).unwrap()).unwrap()
}

fn manifest(dir: &Path) -> Vec<Value> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("runs/manifest.json")).unwrap()).unwrap()
}

async fn run(dir: &Path, server: &FakeServer, wf: &Workflow) -> Context {
    let rt = runtime(dir, server);
    let ctx = wf.run(&rt).await;
    rt.close();
    ctx.expect("workflow")
}

#[tokio::test]
async fn the_second_run_continues_the_same_session() {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join("seed.txt"), "向日葵").unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
        Reply::text("向日葵"),
        Reply::text("还是向日葵"),
    ]);
    let wf = seed_workflow();
    let first = run(dir.path(), &server, &wf).await;
    assert_eq!(first.woke, 1);
    assert_eq!(first.get("取词"), Some("向日葵"));
    let id = first.sessions["取词"].clone();

    let second = run(dir.path(), &server, &wf).await;
    assert_eq!(second.woke, 2);
    assert_eq!(second.sessions["取词"], id, "the same session continued");
    // The third request carries the whole first conversation.
    let sent = server.requests()[2].messages().to_vec();
    assert_eq!(sent.len(), 5, "{sent:#?}");
    assert!(Value::Array(sent).to_string().contains("向日葵"));

    let file = lineage(dir.path());
    assert_eq!(file["woke"], 2);
    assert_eq!(file["steps"]["取词"], id.as_str());
    assert_eq!(
        file["workspace"],
        dir.path().canonicalize().unwrap().to_str().unwrap()
    );
    // Both processes' rows are in the manifest, each with its own run id.
    let rows = manifest(dir.path());
    assert_eq!(rows.len(), 2);
    assert_ne!(rows[0]["run"], rows[1]["run"]);
    assert!(rows.iter().all(|r| r["step"] == "取词" && r["ok"] == true));
    assert_eq!(rows[1]["resumed"], true);
}

#[tokio::test]
async fn resume_prompt_is_what_a_resumed_step_hears() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("一"), Reply::text("二")]);
    let wf = Workflow::new(vec![
        Step::new("干活", terse(), "照这份需求做:很长的确认书").resume_prompt("接着做"),
    ]);
    run(dir.path(), &server, &wf).await;
    run(dir.path(), &server, &wf).await;
    let requests = server.requests();
    assert_eq!(requests[0].last_user_text(), "照这份需求做:很长的确认书");
    assert_eq!(requests[1].last_user_text(), "接着做");
}

#[tokio::test]
async fn continuous_false_starts_clean_every_time() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("一"), Reply::text("二")]);
    let wf = seed_workflow().continuous(false);
    let first = run(dir.path(), &server, &wf).await;
    let second = run(dir.path(), &server, &wf).await;
    assert_ne!(first.sessions["取词"], second.sessions["取词"]);
    assert_eq!(second.woke, 1);
    assert_eq!(server.requests()[1].messages().len(), 1);
    assert!(!dir.path().join("runs/lineage.json").exists());
}

#[tokio::test]
async fn resume_from_continues_and_fork_branches() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![
        Reply::text("甲"),
        Reply::text("乙"),
        Reply::text("丙"),
    ]);
    let wf = Workflow::new(vec![
        Step::new("一", terse(), "第一步"),
        Step::new("二", terse(), "第二步").resume_from("一"),
        Step::new("三", terse(), "第三步").resume_from("一").fork(),
    ])
    .continuous(false);
    let ctx = run(dir.path(), &server, &wf).await;
    assert_eq!(
        ctx.sessions["一"], ctx.sessions["二"],
        "resume_from continues"
    );
    assert_ne!(ctx.sessions["三"], ctx.sessions["一"], "fork branches");
    let requests = server.requests();
    assert_eq!(requests[1].messages().len(), 3);
    // The fork saw 一's full history (after 二 continued it) plus its own prompt.
    assert_eq!(requests[2].messages().len(), 5);
}

#[tokio::test]
async fn lineage_is_on_disk_before_the_first_reply() {
    let dir = TempDir::new().unwrap();
    let gate = support::Gate::new();
    let server = FakeServer::start(vec![Reply::text("好").gate_before(&gate)]);
    let wf = seed_workflow();
    let rt = runtime(dir.path(), &server);
    let running = wf.run(&rt);
    let check = async {
        assert!(gate.wait_reached_async(Duration::from_secs(20)).await);
        // The request is in flight and unanswered: the session id is already written.
        let file = lineage(dir.path());
        let id = file["steps"]["取词"]
            .as_str()
            .expect("step in lineage")
            .to_string();
        gate.open();
        id
    };
    let (ctx, id) = tokio::join!(running, check);
    assert_eq!(ctx.unwrap().sessions["取词"], id);
}

#[tokio::test]
async fn a_renamed_step_starts_fresh() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("一"), Reply::text("二")]);
    let a = run(dir.path(), &server, &seed_workflow()).await;
    let renamed = Workflow::new(vec![Step::new("取个词", terse(), "读 seed.txt")]);
    let b = run(dir.path(), &server, &renamed).await;
    assert_ne!(a.sessions["取词"], b.sessions["取个词"]);
    assert_eq!(server.requests()[1].messages().len(), 1);
    assert_eq!(b.woke, 2);
}

/// What does not match is treated as absent, silently: the run starts fresh and works.
#[tokio::test]
async fn mismatched_lineage_means_a_fresh_start() {
    type Break = fn(&Path);
    let cases: [(&str, Break); 6] = [
        ("deleted sessions.db", |d| {
            for f in ["sessions.db", "sessions.db-wal", "sessions.db-shm"] {
                let _ = std::fs::remove_file(d.join("runs").join(f));
            }
        }),
        ("empty lineage", |d| {
            std::fs::write(d.join("runs/lineage.json"), "").unwrap()
        }),
        ("truncated lineage", |d| {
            let text = std::fs::read_to_string(d.join("runs/lineage.json")).unwrap();
            std::fs::write(d.join("runs/lineage.json"), &text[..text.len() / 2]).unwrap();
        }),
        ("wrong types", |d| {
            std::fs::write(
                d.join("runs/lineage.json"),
                r#"{"workspace": 3, "woke": "x", "steps": []}"#,
            )
            .unwrap()
        }),
        ("binary garbage", |d| {
            std::fs::write(d.join("runs/lineage.json"), [0u8, 159, 146, 150, 255]).unwrap()
        }),
        ("another workspace", |d| {
            let mut v = lineage(d);
            v["workspace"] = json!("/somewhere/else");
            std::fs::write(d.join("runs/lineage.json"), v.to_string()).unwrap();
        }),
    ];
    for (what, break_it) in cases {
        let dir = TempDir::new().unwrap();
        let server = FakeServer::start(vec![Reply::text("一"), Reply::text("二")]);
        let first = run(dir.path(), &server, &seed_workflow()).await;
        break_it(dir.path());
        let second = run(dir.path(), &server, &seed_workflow()).await;
        assert_ne!(first.sessions["取词"], second.sessions["取词"], "{what}");
        assert_eq!(
            server.requests()[1].messages().len(),
            1,
            "{what}: fresh history"
        );
        assert_eq!(
            lineage(dir.path())["steps"]["取词"],
            second.sessions["取词"].as_str(),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_copied_directory_starts_fresh() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("一"), Reply::text("二")]);
    let first = run(dir.path(), &server, &seed_workflow()).await;
    let copy = TempDir::new().unwrap();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(dir.path().join("runs"))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    let second = run(copy.path(), &server, &seed_workflow()).await;
    assert_ne!(first.sessions["取词"], second.sessions["取词"]);
    assert_eq!(second.woke, 1, "the copy's lineage is not this workspace's");
}

/// A gate that runs a judge session through the runtime (like `with_goal`) and fails
/// its first verdict.
struct Judge;

impl Gate for Judge {
    fn rounds(&self) -> u32 {
        3
    }
    fn check<'a>(
        &'a self,
        rt: &'a Runtime,
        step: &'a Step,
        round: u32,
        _ctx: &'a Context,
    ) -> flower::BoxFuture<'a, Verdict> {
        Box::pin(async move {
            let name = flower::continuity::manifest::judge_name(&step.name, round);
            let judge = AgentSpec::new("judge", "判定").allowed_tools(["Read"]);
            let result = rt
                .run_step(&name, &judge, "判定", flower::engine::SessionStart::New)
                .await;
            if result.text.contains("通过") && !result.text.contains("未通过") {
                Verdict::Pass
            } else {
                Verdict::Fail {
                    feedback: "没过,再做".into(),
                }
            }
        })
    }
}

#[tokio::test]
async fn gate_rounds_use_suffixed_rows_and_judges_never_enter_lineage() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::with_handler(|req, _| {
        if req.system().contains("判定") {
            // Every judge is a new session: its history is just its prompt.
            assert_eq!(req.messages().len(), 1);
            Reply::text("判定:未通过")
        } else {
            Reply::text("做完了")
        }
    });
    let wf = Workflow::new(vec![
        Step::new("干活", AgentSpec::new("worker", "干活的"), "做事").gate(Arc::new(Judge)),
    ]);
    let first = run(dir.path(), &server, &wf).await;
    assert!(!first.passed["干活"], "three failed verdicts");
    let steps: Vec<String> = manifest(dir.path())
        .iter()
        .map(|r| r["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        steps,
        [
            "干活",
            "干活·判定#1",
            "干活#round2",
            "干活·判定#2",
            "干活#round3",
            "干活·判定#3"
        ]
    );
    let rows = manifest(dir.path());
    let work_id = first.sessions["干活"].clone();
    let judge_ids: Vec<&str> = rows
        .iter()
        .filter(|r| r["step"].as_str().unwrap().contains("判定"))
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    let unique: std::collections::HashSet<_> = judge_ids.iter().collect();
    assert_eq!(unique.len(), 3, "a new judge session every round");
    assert!(!judge_ids.contains(&work_id.as_str()));
    let file = lineage(dir.path());
    assert_eq!(file["steps"].as_object().unwrap().len(), 1);
    assert_eq!(file["steps"]["干活"], work_id.as_str());
    // All rounds continued the one work session.
    for row in rows
        .iter()
        .filter(|r| r["step"].as_str().unwrap().starts_with("干活#"))
    {
        assert_eq!(row["session_id"], work_id.as_str());
    }
}

#[tokio::test]
async fn wake_state_reports_and_writes_nothing() {
    let dir = TempDir::new().unwrap();
    let server = FakeServer::start(vec![Reply::text("一")]);
    let before = wake_state(dir.path(), dir.path().join("runs"));
    assert!(!before.waking);
    assert_eq!(before.woke, 0);
    assert!(!dir.path().join("runs").exists(), "probing writes nothing");

    let ctx = run(dir.path(), &server, &seed_workflow()).await;
    std::fs::create_dir_all(dir.path().join("notes")).unwrap();
    std::fs::write(
        dir.path().join("notes/需求.md"),
        "## 目标\n做个脚本\n## 范围\n一个文件\n## 约束\n无\n## 验收\n能跑\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("notes/目标.md"),
        "- [ ] 能跑\n- [ ] 有测试\n",
    )
    .unwrap();

    let snapshot = tree_snapshot(dir.path());
    let state = wake_state(dir.path(), dir.path().join("runs"));
    assert_eq!(tree_snapshot(dir.path()), snapshot, "not one byte written");
    assert!(state.waking);
    assert_eq!(state.checks, 2);
    assert_eq!(state.woke, 1);
    assert_eq!(state.steps["取词"], ctx.sessions["取词"]);
    assert!(state.brief.unwrap().contains("## 验收"));
}

/// Every file under `dir` with its size and mtime.
fn tree_snapshot(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.push((
                entry.path().display().to_string(),
                meta.len(),
                meta.modified().unwrap(),
            ));
        }
    }
    out.sort();
    out
}

/// A malformed rule in a later step's agent fails the run before its first step
/// sends anything.
#[tokio::test(flavor = "current_thread")]
async fn a_malformed_rule_fails_before_the_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeServer::start(vec![Reply::text("never")]);
    let rt = runtime(dir.path(), &server);
    let wf = Workflow::new(vec![
        Step::new("一", terse(), "hi"),
        Step::new("二", terse().allowed_tools(["Bash(git status"]), "hi"),
    ]);
    let err = wf.run(&rt).await.expect_err("a bad rule");
    assert!(
        matches!(&err, flower::workflow::WorkflowError::BadRule { step, .. } if step == "二"),
        "{err}"
    );
    assert!(err.to_string().contains("Bash(git status"), "{err}");
    assert_eq!(server.request_count(), 0);
}
