//! Every figure a person sees is true and the same wherever it is shown (issue 41, items
//! 4–8): one run with a sub-agent and a 换代, woken once, read through every view —
//! the live status line, the wake banner, the summary line, `flower log`, `flower log
//! --json` and `flower report` — against what the fake API actually served; a task
//! archived by `--new` is neither listed nor counted; the status line's first moments,
//! its end on SIGTERM, one verdict line, and the judge's place in the step count.

use crate::support;
use crate::terminal::{Pty, TERMINAL_ENV, exited, screen_lines, strip_escapes};

use crate::support::Flower;
use rexpect::process::Signal;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::pipeline::{Agent, Project, REQUEST, agent_of, simple_reply, text, turn_of};
use support::{FakeServer, Gate, Recorded};

const TIMEOUT: Duration = Duration::from_secs(60);

/// What the fake API served: requests, input and output tokens.
#[derive(Default)]
struct Served {
    requests: u64,
    input: u64,
    output: u64,
}

/// Where the coordinator's next request is held, when set and not yet open.
type Hold = Arc<Mutex<Option<Gate>>>;

/// The handoff pipeline of `handoff.rs` (a coordinator at 130K sends a worker, hands
/// off, its successor finishes), every reply with usage this test knows; what was
/// served is tallied.
fn tallied_server() -> (FakeServer, Arc<Mutex<Served>>, Hold) {
    let served = Arc::new(Mutex::new(Served::default()));
    let hold: Hold = Arc::default();
    let doc = crate::handoff::model_doc();
    let (tally, held) = (served.clone(), hold.clone());
    let server = FakeServer::with_handler(move |req: &Recorded, _| {
        let coordinator = agent_of(req) == Agent::Coordinator;
        let turn = turn_of(req) as u64;
        let input = match coordinator {
            true if crate::handoff::is_successor(req) => 4_000 + 1_000 * turn,
            true => 130_000 + 1_000 * turn,
            false => 1_000,
        };
        {
            let mut t = tally.lock().unwrap();
            t.requests += 1;
            t.input += input;
            t.output += 10;
        }
        let reply = crate::handoff::script(req, &doc).usage(input, 10);
        match held.lock().unwrap().as_ref() {
            Some(gate) if coordinator && !gate.is_open() => reply.gate_before(gate),
            _ => reply,
        }
    });
    (server, served, hold)
}

fn log_text(project: &Project) -> String {
    let out = Flower::new(&["log"])
        .dir(&project.dir)
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

fn log_json(project: &Project) -> Value {
    crate::figures::log_json(project)
}

/// `flower report -o FILE`: the page's text.
fn report(project: &Project) -> String {
    let path = project.home.join("report.html");
    let out = Flower::new(&["report", "-o", path.to_str().unwrap()])
        .dir(&project.dir)
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::read_to_string(path).unwrap()
}

/// The cells of each row of the report's table `class`, tags taken out.
fn table(html: &str, class: &str) -> Vec<Vec<String>> {
    let start = html
        .find(&format!("<table class=\"{class}\""))
        .unwrap_or_else(|| panic!("no table {class}"));
    let body = &html[start..];
    let body = &body[..body.find("</table>").unwrap()];
    body.split("<tr")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .chain(row.split("<th").skip(1))
                .map(|cell| {
                    let cell = &cell[cell.find('>').unwrap() + 1..];
                    let cell = &cell[..cell.find("</t").unwrap_or(cell.len())];
                    untagged(cell)
                })
                .collect()
        })
        .collect()
}

fn untagged(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&")
}

fn tokens(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1_000_000.0)
    } else {
        format!("{:.1}K", n as f64 / 1_000.0)
    }
}

fn dollars(v: &Value) -> String {
    format!("${:.4}", v.as_f64().unwrap())
}

/// The summary line's parts: `== 判定通过 · 用时 … · $c · N 轮 · 峰值上下文 P · 换代 H ==`.
fn summary(lines: &[String]) -> Vec<String> {
    let found: Vec<&String> = lines.iter().filter(|l| l.contains("判定通过")).collect();
    assert_eq!(found.len(), 1, "one verdict line: {lines:#?}");
    let line = found[0];
    assert!(line.starts_with("== 判定通过 · 用时 "), "{line}");
    line.trim_start_matches("== ")
        .trim_end_matches(" ==")
        .split(" · ")
        .map(str::to_owned)
        .collect()
}

/// `flower` on a pty in the project, with a terminal's settings.
fn pty(project: &Project, server: &FakeServer, args: &[&str]) -> Pty {
    let mut command = project.flower(server, args);
    for (name, value) in TERMINAL_ENV {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    Pty::spawn(command)
}

/// One run (a sub-agent and a 换代), then a wake (`--again`) whose first coordinator
/// request is held so that the status line is seen before any reply: cost, turns,
/// requests, tokens, handoffs and wakes agree in every view, and requests and tokens
/// are what the fake API served, sub-agents included.
// Long because it reads one run through six views and compares them figure by figure.
#[test]
fn every_view_of_one_run_shows_the_same_true_figures() {
    let project = Project::new();
    let (server, served, hold) = tallied_server();
    let mut first = pty(&project, &server, &[REQUEST]);
    assert_eq!(exited(first.wait()), Some(0), "{}", first.output());
    let first_summary = summary(&screen_lines(&first.output()));
    let log = log_json(&project);
    assert_eq!(first_summary[2], dollars(&log["totals"]["cost_usd"]));

    // The wake: the banner, then the status line before the first reply (item 8: the
    // banner's context and generation, the turn awaited).
    let gate = Gate::new();
    *hold.lock().unwrap() = Some(gate.clone());
    let mut wake = pty(&project, &server, &["--again"]);
    let banner = wake.expect("次唤醒");
    wake.expect("/new = 重开一件事(Ctrl-C 退出)");
    wake.line("");
    assert!(gate.wait_reached(TIMEOUT), "{}", wake.output());
    let work = log["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|a| a["step"] == "干活")
        .unwrap()
        .clone();
    let context = tokens(work["context"].as_u64().unwrap());
    let generation = work["retired"].as_array().unwrap().len() + 1;
    assert!(
        banner.contains(&format!(
            "干活上下文 {context} · 第 {generation} 代 · 第 2 次唤醒"
        )),
        "{banner}"
    );
    wake.expect(&format!(
        "[干活] 第 1 轮 · 上下文 {context}/200.0K · 第 {generation} 代 · "
    ));
    gate.open();
    assert_eq!(exited(wake.wait()), Some(0), "{}", wake.output());
    let output = wake.output();
    assert!(!strip_escapes(&output).contains("第 0 轮"), "{output}");
    let said = summary(&screen_lines(&output));

    let log = log_json(&project);
    let totals = &log["totals"];
    let attempts = log["attempts"].as_array().unwrap();
    let served = served.lock().unwrap();
    // True: what the fake API served, sub-agents' requests and tokens included.
    assert_eq!(totals["requests"], served.requests, "{totals:#}");
    assert_eq!(totals["requests"], server.request_count() as u64);
    assert_eq!(totals["tokens"]["input"], served.input, "{totals:#}");
    assert_eq!(totals["tokens"]["output"], served.output, "{totals:#}");
    assert!(
        totals["subagent_requests"].as_u64().unwrap() > 0,
        "{totals:#}"
    );
    let row_requests: Vec<u64> = attempts
        .iter()
        .map(|a| a["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(
        row_requests.iter().sum::<u64>() + totals["subagent_requests"].as_u64().unwrap(),
        served.requests
    );
    assert_eq!(totals["wakes"], 2);
    assert_eq!(totals["handoffs"], 1);

    // The summary line says the run's figures as the log totals them.
    let cost = dollars(&totals["cost_usd"]);
    let turns = totals["turns"].as_u64().unwrap();
    let peak = tokens(totals["peak_context"].as_u64().unwrap());
    assert_eq!(said[2], cost, "{said:?}");
    assert_eq!(said[3], format!("{turns} 轮"), "{said:?}");
    assert_eq!(said[4], format!("峰值上下文 {peak}"), "{said:?}");
    assert_eq!(said[5], format!("换代 {}", totals["handoffs"]), "{said:?}");

    // `flower log`: the same totals, the same 请求 per row, the chain ending in the
    // session lineage holds.
    let lineage = project.json("runs/lineage.json");
    let holds = lineage["steps"]["干活"].as_str().unwrap().to_owned();
    let text_log = log_text(&project);
    let total_line = text_log.lines().last().unwrap();
    for figure in [
        cost.clone(),
        format!(" {turns} 轮"),
        format!(
            "请求 {}(其中子代理 {})",
            served.requests, totals["subagent_requests"]
        ),
        format!(
            "输入 {} 输出 {}",
            tokens(served.input),
            tokens(served.output)
        ),
        format!("峰值上下文 {peak}"),
        format!("换代 {} · 唤醒 2", totals["handoffs"]),
    ] {
        assert!(total_line.contains(&figure), "{figure} in {total_line}");
    }
    let logged: Vec<u64> = text_log
        .lines()
        .filter_map(|l| l.split("  请求 ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(logged, row_requests, "{text_log}");
    assert!(text_log.contains("── 唤醒 #2"), "{text_log}");
    let handed = text_log.lines().find(|l| l.contains("换代 1 次:")).unwrap();
    assert!(handed.ends_with(&format!(" → {holds}")), "{handed}");

    // The report: the same totals line, 请求 per row, the chain, the sessions' sums.
    let html = report(&project);
    assert!(html.contains(total_line), "{total_line}");
    let rows = table(&html, "attempts");
    let reported: Vec<u64> = rows[1..].iter().map(|r| r[4].parse().unwrap()).collect();
    assert_eq!(reported, row_requests, "{rows:#?}");
    let chain = rows[1..].iter().find(|r| !r[8].is_empty()).unwrap();
    assert!(chain[8].ends_with(&holds[..8]), "{chain:?} vs {holds}");
    let sessions = table(&html, "sessions");
    let sum = sessions.last().unwrap();
    assert_eq!(sum[1], turns.to_string(), "{sum:?}");
    assert_eq!(sum[2], cost, "{sum:?}");
    assert_eq!(sum[4], tokens(served.input), "{sum:?}");
    assert_eq!(sum[5], tokens(served.output), "{sum:?}");
}

/// Item 7: after `--new`, `flower log` lists and totals the new task only, says that
/// earlier ones exist and how to see them (`--all`, with the boundary marked), and the
/// status line's cost starts from nothing, not from the archived task's.
#[test]
fn a_task_archived_by_new_is_neither_listed_nor_counted() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &[REQUEST]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = project.run(&server, &["--again"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let archived = log_json(&project)["totals"]["cost_usd"].as_f64().unwrap();
    assert!(archived > 0.0);
    let old_rows = project.manifest().len();

    let mut new = pty(&project, &server, &["--new", "另一件事"]);
    assert_eq!(exited(new.wait()), Some(0), "{}", new.output());
    let log = log_json(&project);
    let attempts = log["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        project.manifest().len() - old_rows,
        "{log:#}"
    );
    assert_eq!(log["earlier"], old_rows, "{log:#}");
    assert_eq!(log["totals"]["wakes"], 1, "{log:#}");
    assert!(attempts.iter().all(|a| a["wake"] == false), "{log:#}");
    let current = log["totals"]["cost_usd"].as_f64().unwrap();
    let row_costs: f64 = attempts
        .iter()
        .map(|a| a["cost_usd"].as_f64().unwrap())
        .sum();
    assert!((current - row_costs).abs() < 1e-9, "{log:#}");

    // The status line counted this task only: never more than it cost in the end.
    let plain = strip_escapes(&new.output());
    let drawn: Vec<f64> = plain
        .split(['\r', '\n'])
        .filter(|part| part.starts_with('[') && part.contains(" · 用时 "))
        .filter_map(|part| {
            let at = part.find(" · $")? + " · $".len();
            part[at..].split(' ').next()?.parse().ok()
        })
        .collect();
    assert!(!drawn.is_empty(), "{plain}");
    assert!(
        drawn.iter().all(|c| *c <= current + 1e-4),
        "{drawn:?} > ${current:.4} (the archived task cost ${archived:.4})"
    );
    let said = summary(&screen_lines(&new.output()));
    assert_eq!(said[2], format!("${current:.4}"), "{said:?}");

    let text_log = log_text(&project);
    let first = text_log.lines().next().unwrap();
    assert!(
        first.contains(&format!("早先还有 1 个任务的 {old_rows} 次尝试"))
            && first.contains("flower log --all"),
        "{text_log}"
    );
    assert!(!text_log.contains("── 唤醒 #"), "{text_log}");
    let out = Flower::new(&["log", "--all"])
        .dir(&project.dir)
        .stdin_null()
        .output();
    let all = text(&out.stdout);
    assert!(all.contains("── 唤醒 #2"), "{all}");
    assert!(all.contains("── 新任务 #2"), "{all}");
    assert_eq!(all.lines().last(), text_log.lines().last(), "{all}");

    // The report is the current task's too, and says the same of the earlier one.
    let html = report(&project);
    assert!(html.contains(&format!("早先还有 1 个任务的 {old_rows} 次尝试")));
    let rows = table(&html, "attempts");
    assert_eq!(rows.len() - 1, attempts.len(), "{rows:#?}");
}

/// Item 8: SIGTERM while the status line is drawn ends the output: the line is
/// cleared, nothing of it is left on the terminal.
#[test]
fn sigterm_clears_the_status_line() {
    let project = Project::new();
    let (server, _, hold) = tallied_server();
    let gate = Gate::new();
    *hold.lock().unwrap() = Some(gate.clone());
    let mut run = pty(&project, &server, &[REQUEST]);
    assert!(gate.wait_reached(TIMEOUT), "{}", run.output());
    run.expect("[干活] 第 1 轮 · 上下文 ");
    run.signal(Signal::SIGTERM);
    let status = run.wait();
    gate.open();
    assert!(exited(status).is_none(), "{status:?}");
    let lines = screen_lines(&run.output());
    let shown: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        shown.last().is_some_and(|l| !l.contains(" · 用时 ")),
        "the status line was left on the terminal: {lines:#?}"
    );
}

/// Item 8: the judge is shown at its step's place (`3/3`), not as a fourth step the
/// count leaves out.
#[test]
fn the_judge_is_counted_at_its_steps_place() {
    let project = Project::new();
    let server = FakeServer::with_handler(|req, _| simple_reply(req));
    let out = project.run(&server, &[REQUEST]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let judge = stdout
        .lines()
        .find(|l| l.starts_with("== 干活·判定#1 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(judge.ends_with("  3/3"), "{judge}");
    assert!(
        stdout.contains("== 干活 ==============================  3/3\n"),
        "{stdout}"
    );
}

/// Items 5 and 6 on a run whose rows are known exactly (built through the library): the
/// report's 请求 column says what `flower log` says (7, 5, … not the tries), and its
/// 换代 column ends in the session lineage holds, as the log's chain does.
#[test]
fn the_reports_requests_and_handoffs_are_the_logs() {
    let built = crate::inspect::build_run(5);
    let project_dir = &built.dir;
    let out = Flower::new(&["log"]).dir(project_dir).stdin_null().output();
    let log = text(&out.stdout);
    let logged: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split("  请求 ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(logged, [7, 5, 1, 5], "{log}");
    let holds = crate::inspect::A2;
    let handed = log.lines().find(|l| l.contains("换代 1 次:")).unwrap();
    assert!(handed.ends_with(&format!(" → {holds}")), "{handed}");

    let path = built.dir.join("report.html");
    let out = Flower::new(&["report", "-o", path.to_str().unwrap()])
        .dir(project_dir)
        .stdin_null()
        .output();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(path).unwrap();
    let rows = table(&html, "attempts");
    let reported: Vec<u64> = rows[1..].iter().map(|r| r[4].parse().unwrap()).collect();
    assert_eq!(reported, logged, "{rows:#?}");
    let chain = &rows[2][8];
    assert_eq!(
        chain,
        &format!("{} → {}", &crate::inspect::A1[..8], &holds[..8]),
        "{rows:#?}"
    );
}
