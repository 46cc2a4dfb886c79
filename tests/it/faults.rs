//! Faults, end to end with the real binary against the fake Messages API: an outage
//! mid-step (HT001's case), overload, rate limits with `retry-after`, a bad key, streams
//! that break, a tool call orphaned by a kill, and the `FLOWER_*` overrides.
//!
//! Every wait is on an event (a request arrived, a gate was reached, a line appeared on
//! stderr, a file appeared); the timeouts are only reached when something is broken.

use crate::faults_support;
use crate::support;

use crate::support::Flower;
use faults_support::*;
use flower::continuity::resilience::RESUME_PROMPT;
use flower::stores::prune::INTERRUPTED_BODY;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use support::{FakeServer, Gate, Recorded, Reply};

/// The manifest row of the first 干活 attempt.
fn work_row(project: &Project) -> Value {
    project
        .rows("干活")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no 干活 row in {:#?}", project.manifest()))
}

/// Asserts that `req` continues the session whose first request was `first`: the same
/// opening message, and the newest user message ends with exactly the resume prompt.
fn assert_resumes(req: &Recorded, first: &Recorded) {
    assert_eq!(
        req.messages()[0]["content"][0]["text"],
        first.messages()[0]["content"][0]["text"],
        "the same session continues"
    );
    assert_eq!(
        last_texts(req).last().map(String::as_str),
        Some(RESUME_PROMPT),
        "the retry says exactly the resume prompt: {:#?}",
        req.messages().last()
    );
}

fn assert_no_api_error(requests: &[Recorded]) {
    for req in requests {
        assert!(
            !req.raw_body.contains("API Error"),
            "request {} feeds an API error back to the model: {}",
            req.index,
            req.raw_body
        );
    }
}

/// The synthetic error entries of a stored transcript.
fn api_error_entries(entries: &[Value]) -> Vec<&Value> {
    entries
        .iter()
        .filter(|e| e["isApiErrorMessage"] == true)
        .collect()
}

/// Runs the pipeline from scratch and takes the server away while `victim` is being
/// answered for the first time: the reply is held at a gate, the server stops
/// accepting, the reply is delivered, and the agent's next request finds nobody. Once
/// `lines` of flower's offline status lines match `until` (it probes every 0.05 s) the server
/// comes back. Returns the project, the server, and the index of the request whose
/// reply preceded the outage.
fn outage_during(victim: Agent, until: &str, lines: usize) -> (Project, FakeServer, usize) {
    let project = Project::resilient();
    let gate = Gate::new();
    let outage = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicUsize::new(usize::MAX));
    let server = {
        let (gate, outage, held) = (gate.clone(), outage.clone(), held.clone());
        FakeServer::with_handler(move |req, index| {
            if outage.load(Ordering::SeqCst) {
                // A request that slipped onto a kept-alive connection before it closed
                // fails like the network would.
                return Reply::text("lost").cut_after(0);
            }
            let agent = agent_of(req);
            let reply = match (agent, turn_of(req)) {
                // The coordinator reads one file before it is done: its first reply is
                // delivered just before the outage.
                (Agent::Coordinator, 0) if victim == Agent::Coordinator => {
                    Reply::tool_use("Read", json!({"file_path": "notes/需求.md"}))
                }
                _ => simple_reply(req),
            };
            if agent == victim
                && held
                    .compare_exchange(usize::MAX, index, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                return reply.gate_before(&gate);
            }
            reply
        })
    };
    let (mut child, stderr) = project.spawn_watched(&server, &[REQUEST]);
    assert!(gate.wait_reached(PATIENCE), "{victim:?} was never asked");
    server.stop_accepting();
    outage.store(true, Ordering::SeqCst);
    gate.open();
    let port = format!("127.0.0.1:{}", server.port());
    assert!(
        stderr.wait_for(until, lines, PATIENCE),
        "no offline status line {until:?}: {}",
        stderr.all()
    );
    assert!(
        stderr.lines().iter().any(|l| l.contains(&port)),
        "the probe names the endpoint"
    );
    outage.store(false, Ordering::SeqCst);
    server.resume_accepting();
    let status = wait_exit(&mut child, PATIENCE);
    assert!(stderr.wait_closed(PATIENCE));
    assert_eq!(status.code(), Some(0), "stderr: {}", stderr.all());
    assert!(stderr.wait_for("网络恢复", 1, PATIENCE), "{}", stderr.all());
    eprintln!(
        "outage during {victim:?}: {} offline status lines, then back",
        stderr
            .lines()
            .iter()
            .filter(|l| l.contains("网络不通"))
            .count()
    );
    let held = held.load(Ordering::SeqCst);
    (project, server, held)
}

/// HT001: the network drops mid-step for a couple of seconds (until flower reports having
/// waited 2 s: dozens of probes). flower waits it out probing,
/// then resumes the same session; the manifest row says attempts=2, resumed, ok. The
/// synthetic error entry is in sessions.db, and never in what is sent to the model.
#[test]
fn an_outage_mid_step_is_waited_out_and_the_session_resumed() {
    let (project, server, held) = outage_during(Agent::Coordinator, "网络不通,已等 2s", 1);
    let after = held + 1;
    let requests = server.requests();
    assert_valid(&requests);

    let row = work_row(&project);
    assert_eq!(row["attempts"], 2, "{row:#}");
    assert_eq!(row["resumed"], true, "{row:#}");
    assert_eq!(row["ok"], true, "{row:#}");
    assert_eq!(row["errors"].as_array().unwrap().len(), 1, "{row:#}");
    let work_id = project.lineage_step("干活").unwrap();
    assert_eq!(row["session_id"], work_id.as_str());

    // The retry resumes the same coordinator session with exactly the resume prompt,
    // and its history has the turn that was done before the outage.
    let coordinator: Vec<&Recorded> = requests
        .iter()
        .filter(|r| agent_of(r) == Agent::Coordinator)
        .collect();
    // Its last request is the retry (one may have slipped onto a kept-alive connection
    // just before the outage and failed with it).
    let retry = coordinator.last().unwrap();
    assert!(
        retry.index >= after,
        "the coordinator was asked again after the outage"
    );
    assert_resumes(retry, coordinator[0]);
    assert_eq!(
        tool_use_ids(retry),
        [format!("toolu_fake_{held:04}_0")],
        "the Read turn is kept"
    );
    assert_no_api_error(&requests[after..]);

    // The error is in the database as Claude Code writes it, and pruned from what is fed.
    let stored = project.store_load(&work_id, false);
    let errors = api_error_entries(&stored);
    assert_eq!(errors.len(), 1, "{stored:#?}");
    assert_eq!(errors[0]["message"]["model"], "<synthetic>");
    assert!(
        errors[0]["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("API Error"),
        "{:#}",
        errors[0]
    );
    let fed = project.store_load(&work_id, true);
    assert!(!Value::Array(fed).to_string().contains("API Error"));
    let log = crate::figures::log_json(&project);
    assert_eq!(log["totals"]["outages"], 1, "{log:#}");
    assert_eq!(log["totals"]["retries"], 1, "{log:#}");
}

/// The same outage while a sub-agent (Task) is working: the sub-agent waits it out and
/// resumes its own session; the coordinator is not retried and gets the sub-agent's
/// report as the Task's one result, never "API Error" nor an interruption marker.
#[test]
fn an_outage_inside_a_sub_agent_resumes_the_sub_agent_without_the_error() {
    let (project, server, held) = outage_during(Agent::Worker, "网络不通,已等 ", 3);
    let after = held + 1;
    let requests = server.requests();
    assert_valid(&requests);
    assert_no_api_error(&requests[after..]);

    let row = work_row(&project);
    assert_eq!(row["attempts"], 2, "{row:#}");
    assert_eq!(row["resumed"], false, "{row:#}");
    assert_eq!(row["ok"], true, "{row:#}");

    let coordinator: Vec<&Recorded> = requests
        .iter()
        .filter(|r| agent_of(r) == Agent::Coordinator)
        .collect();
    assert_eq!(coordinator.len(), 2, "the coordinator was not retried");
    let results = coordinator[1].tool_results();
    assert_eq!(results.len(), 1, "{results:#?}");
    assert_eq!(results[0]["content"], "写好了 hello.txt。");
    // The sub-agent's retry continues its session with the resume prompt.
    let workers: Vec<&Recorded> = requests
        .iter()
        .filter(|r| agent_of(r) == Agent::Worker)
        .collect();
    let retry = workers.last().unwrap();
    assert!(
        retry.index >= after,
        "the sub-agent was asked again after the outage"
    );
    assert_resumes(retry, workers[0]);
    assert_eq!(project.read("hello.txt"), "hello");
    // One outage, waited out by the sub-agent: counted as such by `flower log`.
    let log = crate::figures::log_json(&project);
    assert_eq!(log["totals"]["outages"], 1, "{log:#}");
    assert_eq!(log["totals"]["retries"], 1, "{log:#}");
    assert!(log["totals"]["outage_waited_s"].as_f64().unwrap() > 0.0);
    assert_eq!(row["outages"][0]["database"], false, "{row:#}");
}

/// 529 three times, then an answer: four attempts, each retry resuming the session.
#[test]
fn overloaded_three_times_then_success_takes_four_attempts() {
    let project = Project::resilient();
    project.freeze_notes();
    // Counted here: a retry no longer stacks another resume prompt to count by.
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let server = FakeServer::with_handler(move |req, _| {
        let agent = agent_of(req);
        let tries = match agent {
            Agent::Coordinator => tries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1,
            _ => 0,
        };
        match agent {
            // Three attempts fail.
            Agent::Coordinator if tries <= 3 => Reply::overloaded(),
            Agent::Coordinator => Reply::text("做完了。"),
            _ => simple_reply(req),
        }
    });
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    for n in 2..=4 {
        assert!(stderr.contains(&format!("第 {n}/6 次尝试")), "{stderr}");
    }

    let requests = server.requests();
    assert_valid(&requests);
    let coordinator: Vec<&Recorded> = requests
        .iter()
        .filter(|r| agent_of(r) == Agent::Coordinator)
        .collect();
    assert_eq!(coordinator.len(), 4);
    for retry in &coordinator[1..] {
        assert_resumes(retry, coordinator[0]);
    }
    assert_no_api_error(&requests);

    let row = work_row(&project);
    assert_eq!(row["attempts"], 4, "{row:#}");
    assert_eq!(row["resumed"], true);
    assert_eq!(row["ok"], true);
    let errors = row["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 3);
    assert!(
        errors
            .iter()
            .all(|e| e.as_str().unwrap().contains("overloaded_error"))
    );
    let stored = project.store_load(row["session_id"].as_str().unwrap(), false);
    assert_eq!(api_error_entries(&stored).len(), 3);
}

/// 429 with `retry-after: 1`: the retry waits what the server asked, not the (tiny)
/// backoff.
#[test]
fn rate_limited_with_retry_after_waits_that_long() {
    let project = Project::resilient();
    let arrivals = Arrivals::default();
    let server = {
        let arrivals = arrivals.clone();
        FakeServer::with_handler(move |_, index| {
            arrivals.mark(index);
            match index {
                0 => Reply::rate_limited(1),
                _ => Reply::text("好的。"),
            }
        })
    };
    let out = project.run(&server, &["once", "说好的", "--json"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"], "好的。");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let waited = arrivals.at(1) - arrivals.at(0);
    eprintln!("429 with retry-after: 1 → retried after {waited:?}");
    assert!(
        waited >= Duration::from_millis(900),
        "retried after {waited:?}, before the server's retry-after of 1 s"
    );
    assert_resumes(&requests[1], &requests[0]);
    assert_no_api_error(&requests);
}

/// A bad key is fatal: one attempt, no retry, no waiting, and the message says what to
/// fix.
#[test]
fn unauthorized_is_fatal_after_one_attempt_and_names_the_key() {
    let project = Project::resilient();
    let server = FakeServer::with_handler(|_, _| {
        Reply::error(401, "authentication_error", "invalid x-api-key")
    });
    // `flower once`, with the default six attempts.
    let out = project.run(&server, &["once", "hi"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(server.request_count(), 1, "no retry");
    assert!(stderr.contains("invalid x-api-key"), "{stderr}");
    assert!(
        stderr.contains("ANTHROPIC_API_KEY"),
        "says what to fix: {stderr}"
    );
    assert!(
        !stderr.contains("次尝试") && !stderr.contains("网络不通"),
        "{stderr}"
    );

    // The pipeline: the step fails at once, and the advice is about the key.
    let out = project.run(&server, &[REQUEST]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(server.request_count(), 2, "no retry");
    assert!(
        stderr.contains("ANTHROPIC_API_KEY"),
        "says what to fix: {stderr}"
    );
    let rows = project.rows("确认需求");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["attempts"], 1);
    assert_eq!(rows[0]["ok"], false);
}

/// A reply that breaks after the model has had one turn: the first is cut mid-message,
/// the second ends with `event: error` (overloaded) inside a 200 stream. Both are
/// transient: the session is resumed, with the tool turn kept and the broken reply and
/// its error left out.
fn broken_stream_is_resumed(broken: Reply) {
    let project = Project::resilient();
    std::fs::write(project.dir.join("seed.txt"), "向日葵\n").unwrap();
    let server = FakeServer::with_handler(move |_, index| match index {
        0 => Reply::tool_use("Read", json!({"file_path": "seed.txt"})),
        1 => broken.clone(),
        _ => Reply::text("向日葵"),
    });
    let out = project.run(&server, &["once", "读 seed.txt", "--json"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["result"], "向日葵");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_valid(&requests);
    let retry = &requests[2];
    assert_resumes(retry, &requests[0]);
    assert_eq!(tool_use_ids(retry), ["toolu_fake_0000_0"]);
    assert!(retry.raw_body.contains("向日葵"), "the Read result is kept");
    assert!(!retry.raw_body.contains("半句"), "the broken reply is not");
    assert_no_api_error(&requests);
    let id = v["session_id"].as_str().unwrap();
    assert_eq!(api_error_entries(&project.store_load(id, false)).len(), 1);
}

#[test]
fn a_stream_cut_mid_message_is_resumed() {
    broken_stream_is_resumed(
        Reply::text("这是半句话,后面还有很多很多").cut_after(Reply::FIRST_DELTA + 1),
    );
}

#[test]
fn an_error_event_inside_a_200_stream_is_resumed() {
    broken_stream_is_resumed(Reply::text("这是半句话,后面还有很多很多").error_after(
        Reply::FIRST_DELTA + 1,
        "overloaded_error",
        "Overloaded",
    ));
}

/// Kills the process with SIGKILL while the second of two tool calls runs. The next run
/// must not send that call unanswered: the pruning answers it neutrally, and the
/// transcript stays valid over further resumes.
#[test]
fn a_tool_call_orphaned_by_a_kill_never_reaches_the_api_unanswered() {
    let project = Project::resilient();
    let pid_file = project.dir.join("started.pid");
    let server = FakeServer::with_handler(|_, index| {
        match index {
        0 => Reply::tool_use("Bash", json!({"command": "echo one"})).then_tool_use(
            "Bash",
            json!({"command": "echo $$ > started.pid.tmp && mv started.pid.tmp started.pid && exec sleep 30"}),
        ),
        _ => Reply::text("接着做完了。"),
    }
    });
    let (mut child, stderr) = project.spawn_watched(&server, &["once", "跑两条命令"]);
    let deadline = std::time::Instant::now() + PATIENCE;
    while !pid_file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started: {}",
            stderr.all()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "flower ended: {}",
            stderr.all()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The tool's process group outlives a SIGKILLed flower; end it.
    // Found from outside: the `$$` it wrote is a PID namespace's own number.
    let pgid = crate::support::command_group(&project.dir, "sleep");
    // SAFETY: signals the process group the test's own command created.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };

    let sessions = {
        let out = Flower::bin()
            .command()
            .current_dir(&project.dir)
            .args([
                "store",
                "sessions",
                &flower::stores::project_key(&project.dir),
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let id = sessions[0]["session_id"].as_str().unwrap().to_string();

    for round in 1..=2 {
        let out = project.run(&server, &["once", "继续", "--resume", &id, "--json"]);
        assert!(out.status.success(), "stderr: {}", text(&out.stderr));
        let requests = server.requests();
        assert_eq!(requests.len(), 1 + round);
        assert_valid(&requests);
        let resumed = requests.last().unwrap();
        assert_eq!(
            tool_use_ids(resumed),
            ["toolu_fake_0000_0", "toolu_fake_0000_1"]
        );
        let blocks = resumed.messages()[2]["content"].as_array().unwrap();
        let result = |id: &str| {
            let found: Vec<&Value> = blocks.iter().filter(|b| b["tool_use_id"] == id).collect();
            assert_eq!(found.len(), 1, "{id} answered once: {blocks:#?}");
            found[0].clone()
        };
        let first = result("toolu_fake_0000_0");
        assert!(
            first["content"].as_str().unwrap().contains("one"),
            "{first:#}"
        );
        let orphan = result("toolu_fake_0000_1");
        assert_eq!(orphan["content"], INTERRUPTED_BODY);
        assert_eq!(orphan["is_error"], true);
    }
}

/// `flower once --json` with `env`, against replies that always fail with `reply`.
fn failing_once(reply: Reply, env: &[(&str, &str)]) -> (std::process::Output, usize) {
    let project = Project::resilient();
    let server = FakeServer::with_handler(move |_, _| reply.clone());
    let mut cmd = project.command(&server, &["once", "hi", "--json"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (out, server.request_count())
}

#[test]
fn max_attempts_from_the_environment() {
    let server_error = Reply::error(500, "api_error", "Internal server error");
    let (out, requests) = failing_once(server_error.clone(), &[("FLOWER_MAX_ATTEMPTS", "2")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(requests, 2);
    assert!(text(&out.stderr).trim().is_empty(), "{}", text(&out.stderr));

    // A bad value is refused up front (it used to be a warning and the default of six):
    // exit 2, no request.
    let (out, requests) = failing_once(server_error, &[("FLOWER_MAX_ATTEMPTS", "zwei")]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(requests, 0);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("FLOWER_MAX_ATTEMPTS") && stderr.contains("zwei"),
        "{stderr}"
    );
}

#[test]
fn retry_unknown_from_the_environment() {
    let teapot = Reply::error(418, "teapot_error", "short and stout");
    let (_, requests) = failing_once(teapot.clone(), &[("FLOWER_MAX_ATTEMPTS", "3")]);
    assert_eq!(requests, 3, "unknown errors are retried by default");
    let (_, requests) = failing_once(
        teapot.clone(),
        &[
            ("FLOWER_MAX_ATTEMPTS", "3"),
            ("FLOWER_RETRY_UNKNOWN", "false"),
        ],
    );
    assert_eq!(requests, 1);
    let (out, requests) = failing_once(
        teapot,
        &[
            ("FLOWER_MAX_ATTEMPTS", "3"),
            ("FLOWER_RETRY_UNKNOWN", "maybe"),
        ],
    );
    assert_eq!(requests, 0, "a bad value is refused before any request");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("FLOWER_RETRY_UNKNOWN"));
}

/// With the server gone for good, `FLOWER_MAX_OFFLINE_WAIT` bounds the wait (the default
/// would wait an hour); a bad probe timeout is refused before anything happens.
#[test]
fn max_offline_wait_from_the_environment() {
    let project = Project::resilient();
    let server = FakeServer::with_handler(|_, _| Reply::text("never"));
    server.stop_accepting();
    let bad = project
        .command(&server, &["once", "hi"])
        .env("FLOWER_MAX_OFFLINE_WAIT", "0.3")
        .env("FLOWER_PROBE_TIMEOUT", "-1")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("FLOWER_PROBE_TIMEOUT"));
    let mut cmd = project.command(&server, &["once", "hi"]);
    cmd.env("FLOWER_MAX_OFFLINE_WAIT", "0.3");
    let (mut child, stderr) = spawn_watched(cmd);
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(stderr.wait_closed(PATIENCE));
    let all = stderr.all();
    assert_eq!(status.code(), Some(1), "{all}");
    assert_eq!(server.request_count(), 0);
    assert!(all.contains("网络不通"), "{all}");
    assert!(all.contains("Can't reach the API server"), "{all}");
}

/// The checker the tests above rely on rejects what the API rejects.
#[test]
fn the_messages_checker_rejects_what_the_api_rejects() {
    let request = |messages: Value| Recorded {
        index: 0,
        connection: 0,
        method: "POST".into(),
        path: "/v1/messages".into(),
        headers: Vec::new(),
        raw_body: String::new(),
        body: json!({"messages": messages}),
        cache: None,
    };
    let call = json!({"role": "assistant", "content": [
        {"type": "text", "text": "看看"},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "Read", "input": {}},
    ]});
    let result = |id: &str| json!({"type": "tool_result", "tool_use_id": id, "content": "x"});
    let user = |content: Value| json!({"role": "user", "content": content});
    let good = request(json!([
        user(json!("读")),
        call,
        user(json!([result("t2"), result("t1"), {"type": "text", "text": "接着"}])),
    ]));
    assert_eq!(check_messages(&good), Ok(()));
    let bad = [
        json!([]),
        json!([{"role": "assistant", "content": "先说"}, user(json!("读"))]),
        json!([user(json!("读")), call]),
        json!([user(json!("读")), user(json!("再读"))]),
        json!([user(json!("读")), call, user(json!([result("t1")]))]),
        json!([
            user(json!("读")),
            call,
            user(json!([result("t1"), result("t2"), result("t3")]))
        ]),
        json!([
            user(json!("读")),
            call,
            user(json!([result("t1"), result("t1"), result("t2")]))
        ]),
        json!([
            user(json!("读")),
            call,
            user(json!([{"type": "text", "text": "先"}, result("t1"), result("t2")]))
        ]),
        json!([user(json!([result("t1")]))]),
        json!([user(json!(""))]),
        json!([user(json!([{"type": "text", "text": ""}]))]),
        json!([user(json!("读")), call, user(json!("没有结果"))]),
    ];
    for messages in bad {
        assert!(
            check_messages(&request(messages.clone())).is_err(),
            "accepted {messages:#}"
        );
    }
}

/// The other side of the sub-agent rule: an error retrying cannot fix (its prompt is too
/// long) is the coordinator's to handle, as the Task's result; the step goes on.
#[test]
fn a_fatal_sub_agent_error_is_reported_to_the_coordinator() {
    let project = Project::resilient();
    project.freeze_notes();
    let server = FakeServer::with_handler(|req, _| match agent_of(req) {
        Agent::Worker => Reply::error(
            400,
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum",
        ),
        _ => simple_reply(req),
    });
    let out = project.run(&server, &[]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    assert_valid(&requests);
    assert_eq!(
        requests
            .iter()
            .filter(|r| agent_of(r) == Agent::Worker)
            .count(),
        1
    );
    let told = requests
        .iter()
        .find(|r| agent_of(r) == Agent::Coordinator && turn_of(r) == 1)
        .unwrap();
    let result = &told.tool_results()[0];
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .starts_with("sub-agent failed: API Error: 400"),
        "{result:#}"
    );
    let row = work_row(&project);
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["ok"], true);
}

#[test]
fn a_retry_that_fails_before_any_reply_keeps_the_context_the_step_reached() {
    // 确认需求's first turn is answered (context 5.1K); every later request fails with a
    // 500. The second attempt resumes and fails before any reply: the failed row still
    // reports the context the session reached, not the empty run's zero.
    let project = Project::resilient();
    let server = FakeServer::with_handler(|req, _| match (agent_of(req), turn_of(req)) {
        (Agent::Clarifier, 0) => Reply::tool_use(
            "Write",
            json!({"file_path": "notes/需求.md", "content": BRIEF}),
        )
        .usage(5_000, 100),
        _ => Reply::error(500, "api_error", "Internal server error"),
    });
    let out = project
        .command(&server, &[REQUEST])
        .env("FLOWER_MAX_ATTEMPTS", "2")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let rows = project.rows("确认需求");
    let row = rows
        .last()
        .unwrap_or_else(|| panic!("{:#?}", project.manifest()));
    assert_eq!(row["ok"], false, "{row}");
    assert_eq!(row["attempts"], 2, "{row}");
    assert_eq!(row["num_turns"], 1, "{row}");
    assert_eq!(row["context"], 5_100, "{row}");
    // What the answered turn cost is kept too, added up over the attempts.
    let cost = row["cost_usd"].as_f64().unwrap_or_else(|| panic!("{row}"));
    assert!(cost > 0.0, "{row}");
}
