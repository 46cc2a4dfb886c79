//! Seeing concurrent work (issue 43, item 5): while several sub-agents run at once the
//! live status line names each one and what it runs, and their tool lines say whose
//! they are; afterwards `log`, `log --json`, `show --subagents` and the report show
//! the sub-agents' sessions with their times and which overlapped. Through the real
//! binary against the fake Messages API, which plays every pipeline agent.

use crate::support;
use crate::terminal::{Pty, TERMINAL_ENV, exited, screen_lines};

use serde_json::{Value, json};
use std::time::Duration;
use support::pipeline::{Agent, Project, agent_of, simple_reply, text, turn_of};
use support::{FakeServer, Gate, Recorded, Reply};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The worker's task number (`做第 N 件`), 0 when none.
fn task_of(req: &Recorded) -> usize {
    let prompt = req.first_prompt();
    let Some(rest) = prompt.split("做第 ").nth(1) else {
        return 0;
    };
    rest.split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn task(n: usize) -> Value {
    json!({"description": format!("第 {n} 件"), "prompt": format!("做第 {n} 件")})
}

/// The pipeline with a coordinator that dispatches `workers` Task calls in one reply
/// (ids `task_N`); `worker` answers a worker's first request (its task number given),
/// every later worker turn ends with a report.
fn dispatching(
    workers: usize,
    worker: impl Fn(usize, &Recorded) -> Reply + Send + Sync + 'static,
) -> FakeServer {
    FakeServer::with_handler(move |req, _| match (agent_of(req), turn_of(req)) {
        (Agent::Coordinator, 0) => {
            let mut reply = Reply::text("分头做。");
            for n in 1..=workers {
                reply = reply.then_tool_use_with_id(format!("task_{n}"), "Task", task(n));
            }
            reply
        }
        (Agent::Worker, 0) => worker(task_of(req), req),
        (Agent::Worker, _) => Reply::text(format!("第 {} 件做完了", task_of(req))),
        _ => simple_reply(req),
    })
}

/// Three sub-agents at work at once: the status line says so, with each one's task
/// and the tool the first one runs (the other two wait on the model), on one line
/// redrawn in place; the first one's tool line on stderr says whose it is.
#[test]
fn the_status_line_names_each_concurrent_sub_agent_and_its_tool() {
    let project = Project::with("proj", TERMINAL_ENV);
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        dispatching(3, move |n, _| match n {
            1 => Reply::tool_use(
                "Bash",
                json!({"command": "while [ ! -e go ]; do sleep 0.05; done; echo 走了"}),
            ),
            _ => Reply::text("想好了").gate_before(&gate),
        })
    };
    let mut pty = Pty::spawn(project.flower(&server, &["写个 hello 脚本"]));
    assert!(gate.wait_reached_n(2, TIMEOUT), "{}", pty.output());
    pty.expect("[第 1 件] ↳ 子代理 general-purpose");
    pty.expect("[第 1 件] ⏺ Bash");
    pty.expect(" · 3 个子代理在做:第 1 件(Bash) | 第 2 件 | 第 3 件");
    std::fs::write(project.dir.join("go"), "").unwrap();
    // Its Bash call done, the first one reports and ends: two are left.
    pty.expect(" · 2 个子代理在做:第 2 件 | 第 3 件");
    gate.open();
    assert_eq!(exited(pty.wait()), Some(0), "{}", pty.output());
    // Every status line drawn was one terminal row: never two lanes' lines mixed.
    for line in screen_lines(&pty.output()) {
        assert!(
            line.matches("个子代理在做").count() <= 1,
            "two status lines on one row: {line}"
        );
    }
}

/// Outside a terminal the same run prints no status line, and tool lines need no
/// owner while one sub-agent works alone.
#[test]
fn a_lone_sub_agents_tool_lines_are_not_tagged() {
    let project = Project::new();
    let server = dispatching(1, |_, _| {
        Reply::tool_use("Write", json!({"file_path": "a.txt", "content": "a"}))
    });
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("⏺ Write a.txt"), "{stderr}");
    assert!(!stderr.contains("[第 1 件]"), "{stderr}");
    assert!(!stderr.contains("子代理在做"), "{stderr}");
}

/// A pipeline run whose coordinator dispatches three workers in one reply, each held
/// until all three are at work: each one's session overlaps the other two's.
pub(crate) fn overlapping_run(env: &[(&str, &str)]) -> Project {
    let project = Project::new();
    let gate = Gate::new();
    let server = {
        let gate = gate.clone();
        dispatching(3, move |n, _| {
            Reply::text(format!("第 {n} 件想好了")).gate_before(&gate)
        })
    };
    let mut cmd = project.command(&server, &["写个 hello 脚本"]);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let run = std::thread::spawn(move || cmd.output().expect("run flower"));
    let concurrent = env.is_empty();
    if concurrent {
        assert!(gate.wait_reached_n(3, TIMEOUT), "three workers at once");
    }
    gate.open();
    let out = run.join().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    project
}

fn flower_out(project: &Project, args: &[&str]) -> String {
    let out = support::Flower::new(args)
        .dir(&project.dir)
        .stdin_null()
        .output();
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The spans `log --json` lists: subpath, description, lane, how many it overlapped.
fn spans(log: &Value) -> Vec<(String, String, u64, usize)> {
    log["subagents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["subpath"].as_str().unwrap().to_owned(),
                s["description"].as_str().unwrap_or_default().to_owned(),
                s["lane"].as_u64().unwrap(),
                s["overlapped"].as_array().unwrap().len(),
            )
        })
        .collect()
}

/// Three sub-agents that ran at once: `log --json` gives each its start and end and
/// names the two it overlapped, in order of start, each in a lane of its own; `log`
/// lists them under the step with the other two; `show --subagents` shows their
/// transcripts in the same order, each heading marked; the report draws a lane each.
#[test]
fn log_show_and_the_report_show_overlapping_sub_agents() {
    let project = overlapping_run(&[]);
    let log: Value = serde_json::from_str(&flower_out(&project, &["log", "--json"])).unwrap();
    let listed = spans(&log);
    assert_eq!(listed.len(), 3, "{log:#}");
    let mut tasks: Vec<&str> = listed.iter().map(|s| s.1.as_str()).collect();
    tasks.sort();
    assert_eq!(tasks, ["第 1 件", "第 2 件", "第 3 件"]);
    let mut lanes: Vec<u64> = listed.iter().map(|s| s.2).collect();
    lanes.sort();
    assert_eq!(lanes, [0, 1, 2]);
    assert!(listed.iter().all(|s| s.3 == 2), "{listed:?}");
    let subagents = log["subagents"].as_array().unwrap();
    let starts: Vec<i64> = subagents
        .iter()
        .map(|s| s["started_ms"].as_i64().unwrap())
        .collect();
    assert!(starts.is_sorted(), "{starts:?}");
    for s in subagents {
        assert!(s["ended_ms"].as_i64().unwrap() > s["started_ms"].as_i64().unwrap());
        assert!(s["started_at"].as_str().is_some() && s["ended_at"].as_str().is_some());
    }

    let log_text = flower_out(&project, &["log"]);
    let lines: Vec<&str> = log_text
        .lines()
        .filter(|l| l.starts_with("    ↳ 子代理 "))
        .collect();
    assert_eq!(lines.len(), 3, "{log_text}");
    for (line, (_, task, _, _)) in lines.iter().zip(&listed) {
        assert!(
            line.starts_with(&format!("    ↳ 子代理 {task}  ")),
            "{line}"
        );
        let others: Vec<&str> = tasks.iter().copied().filter(|t| t != task).collect();
        let with = line.split("同时:").nth(1).unwrap_or_default();
        let mut named: Vec<&str> = with.split('、').collect();
        named.sort();
        assert_eq!(named, others, "{line}");
    }

    let shown = flower_out(&project, &["show", "干活", "--subagents"]);
    let headings: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("════ 子代理 "))
        .collect();
    assert_eq!(headings.len(), 3, "{shown}");
    for (heading, (subpath, task, _, _)) in headings.iter().zip(&listed) {
        assert!(
            heading.starts_with(&format!("════ 子代理 {subpath} · ")),
            "{heading}"
        );
        assert!(heading.contains(&format!(" · {task} · ")), "{heading}");
        assert!(heading.contains(" · 同时:"), "{heading}");
    }
    let shown: Value = serde_json::from_str(&flower_out(
        &project,
        &["show", "干活", "--subagents", "--json"],
    ))
    .unwrap();
    assert_eq!(shown["subagent_spans"], log["subagents"]);

    let html = report(&project);
    assert_eq!(html.matches("data-kind=\"subagent\"").count(), 3);
    for n in 1..=3 {
        assert!(html.contains(&format!(">子代理 {n}</text>")), "lane {n}");
    }
}

/// Sub-agents one after another (`FLOWER_MAX_TOOL_USE_CONCURRENCY=1`) overlap nothing:
/// one lane, no lines under the step in `log`, no mark in `show`.
#[test]
fn sub_agents_one_after_another_share_one_lane_and_are_not_marked() {
    let project = overlapping_run(&[("FLOWER_MAX_TOOL_USE_CONCURRENCY", "1")]);
    let log: Value = serde_json::from_str(&flower_out(&project, &["log", "--json"])).unwrap();
    let listed = spans(&log);
    let tasks: Vec<&str> = listed.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(
        tasks,
        ["第 1 件", "第 2 件", "第 3 件"],
        "in the order they ran"
    );
    assert!(listed.iter().all(|s| s.2 == 0 && s.3 == 0), "{listed:?}");
    assert!(!flower_out(&project, &["log"]).contains("↳ 子代理"));
    let shown = flower_out(&project, &["show", "干活", "--subagents"]);
    assert!(!shown.contains("同时:"), "{shown}");
    let html = report(&project);
    assert_eq!(html.matches("data-kind=\"subagent\"").count(), 3);
    assert!(html.contains(">子代理 1</text>"));
    assert!(!html.contains(">子代理 2</text>"));
}

/// `flower report -o FILE`: the page's text.
fn report(project: &Project) -> String {
    let path = project.home.join("report.html");
    flower_out(project, &["report", "-o", path.to_str().unwrap()]);
    std::fs::read_to_string(path).unwrap()
}

/// A background command a worker started gets a lane in the report's timeline, with
/// how it ended (with the worker's session).
#[test]
fn the_report_gives_a_background_command_a_lane() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| match (agent_of(req), turn_of(req)) {
        (Agent::Worker, 0) => Reply::tool_use(
            "Bash",
            json!({"command": "sleep 600", "run_in_background": true}),
        ),
        (Agent::Worker, _) => Reply::text("开过了"),
        _ => simple_reply(req),
    });
    let out = project.run(&server, &["写个 hello 脚本"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = report(&project);
    assert_eq!(
        html.matches("data-kind=\"background\"").count(),
        1,
        "{html}"
    );
    assert!(html.contains(">后台 1</text>"));
    assert!(
        html.contains(" · sleep 600 · session-ended</title>"),
        "{html}"
    );

    // `log` lists it under the attempt that started it, `log --json` and `show
    // --subagents` too: every view of the run shows the same command.
    let log = flower_out(&project, &["log"]);
    let line = log
        .lines()
        .find(|l| l.contains("↳ 后台 "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no background line in log: {log}"));
    assert!(
        line.contains("sleep 600") && line.contains("session-ended"),
        "{line}"
    );
    let json: Value = serde_json::from_str(&flower_out(&project, &["log", "--json"])).unwrap();
    let commands = json["background"].as_array().unwrap();
    assert_eq!(commands.len(), 1, "{json}");
    assert_eq!(commands[0]["command"], "sleep 600");
    let id = commands[0]["id"].as_str().unwrap();
    assert!(line.contains(id), "{line}");
    let show = flower_out(&project, &["show", "干活", "--subagents"]);
    assert!(show.contains("════ 后台命令 · 1 个 ════"), "{show}");
    assert!(show.contains(&format!("↳ 后台 {id}")), "{show}");
    let show_json: Value = serde_json::from_str(&flower_out(
        &project,
        &["show", "干活", "--subagents", "--json"],
    ))
    .unwrap();
    assert_eq!(show_json["background"][0]["id"], id);
}
