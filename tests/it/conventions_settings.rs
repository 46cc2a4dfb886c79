//! Claude Code's settings files (`~/.claude/settings.json`, `.claude/settings.json`,
//! `.claude/settings.local.json`): precedence local > project > user, the environment
//! above the files, flags above all; permission rules (allow, deny, ask) and
//! additional directories; a bad file is exit 2 naming the file and the key, before
//! any request.

use crate::support;

use crate::support::Flower;
use flower::model::models::resolve;
use serde_json::{Value, json};
use std::path::Path;
use support::pipeline::{Project, text};
use support::{FakeServer, Recorded, Reply};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The three settings files of a project, each `None` for absent.
fn settings(project: &Project, files: [Option<Value>; 3]) {
    let paths = [
        project.home.join(".claude/settings.json"),
        project.dir.join(".claude/settings.json"),
        project.dir.join(".claude/settings.local.json"),
    ];
    for (path, value) in paths.iter().zip(files) {
        let _ = std::fs::remove_file(path);
        if let Some(value) = value {
            write(path, &value.to_string());
        }
    }
}

/// `flower once --json hi` with `env` and `args`; the one request it made.
fn once(project: &Project, env: &[(&str, &str)], args: &[&str]) -> Recorded {
    let server = FakeServer::with_handler(|_, _| Reply::text("好"));
    let mut all = vec!["once", "--json"];
    all.extend_from_slice(args);
    all.push("hi");
    let mut cmd = project.command(&server, &all);
    cmd.env_remove("ANTHROPIC_MODEL")
        .env_remove("FLOWER_MAX_TOKENS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    server.requests().remove(0)
}

/// The user, project and local files of a row.
type Files = [Option<Value>; 3];
/// The environment of a row.
type Vars = &'static [(&'static str, &'static str)];

#[test]
fn precedence_table_local_over_project_over_user_environment_and_flags_above() {
    let project = Project::new();
    let model = |m: &str| json!({ "model": m });
    let tokens = |n: u32| json!({ "env": { "FLOWER_MAX_TOKENS": n.to_string() } });
    // (user, project, local, environment, flag) → the model sent.
    let table: [(Files, Vars, &[&str], &str); 7] = [
        ([Some(model("haiku")), None, None], &[], &[], "haiku"),
        (
            [Some(model("haiku")), Some(model("sonnet")), None],
            &[],
            &[],
            "sonnet",
        ),
        (
            [
                Some(model("haiku")),
                Some(model("sonnet")),
                Some(model("opus")),
            ],
            &[],
            &[],
            "opus",
        ),
        (
            [None, Some(model("sonnet")), Some(model("opus"))],
            &[],
            &[],
            "opus",
        ),
        (
            [
                Some(model("haiku")),
                Some(model("sonnet")),
                Some(model("opus")),
            ],
            &[("ANTHROPIC_MODEL", "haiku")],
            &[],
            "haiku",
        ),
        (
            [Some(model("haiku")), None, Some(model("opus"))],
            &[("ANTHROPIC_MODEL", "haiku")],
            &["--model", "sonnet"],
            "sonnet",
        ),
        // A file's env block sets ANTHROPIC_MODEL, which is above the files' `model`.
        (
            [
                Some(json!({"env": {"ANTHROPIC_MODEL": "haiku"}})),
                None,
                Some(model("opus")),
            ],
            &[],
            &[],
            "haiku",
        ),
    ];
    for (i, (files, env, flags, expected)) in table.into_iter().enumerate() {
        settings(&project, files);
        let req = once(&project, env, flags);
        assert_eq!(req.model(), resolve(expected).unwrap(), "row {i}");
    }
    // env: per variable, local over project over user; the environment over all.
    let table: [(Files, Vars, u64); 4] = [
        ([Some(tokens(1000)), None, None], &[], 1000),
        ([Some(tokens(1000)), Some(tokens(2000)), None], &[], 2000),
        (
            [Some(tokens(1000)), Some(tokens(2000)), Some(tokens(3000))],
            &[],
            3000,
        ),
        (
            [Some(tokens(1000)), Some(tokens(2000)), Some(tokens(3000))],
            &[("FLOWER_MAX_TOKENS", "4000")],
            4000,
        ),
    ];
    for (i, (files, env, expected)) in table.into_iter().enumerate() {
        settings(&project, files);
        let req = once(&project, env, &[]);
        assert_eq!(req.body["max_tokens"], expected, "env row {i}");
    }
}

#[test]
fn deny_rules_of_every_file_apply_and_ask_rules_deny_when_nobody_can_answer() {
    let project = Project::new();
    settings(
        &project,
        [
            Some(json!({"permissions": {"deny": ["Write(secret.txt)"]}})),
            Some(json!({"permissions": {"deny": ["Bash(rm:*)"], "ask": ["Write(notes/**)"]}})),
            Some(json!({"permissions": {"allow": ["Read"]}})),
        ],
    );
    let calls = [
        ("Write", json!({"file_path": "secret.txt", "content": "x"})),
        ("Bash", json!({"command": "rm -f a.txt"})),
        ("Write", json!({"file_path": "notes/a.md", "content": "x"})),
        ("Write", json!({"file_path": "ok.txt", "content": "fine"})),
    ];
    let replies: Vec<Reply> = calls
        .iter()
        .map(|(name, input)| Reply::tool_use(*name, input.clone()))
        .chain([Reply::text("完")])
        .collect();
    let server = FakeServer::start(replies);
    std::fs::write(project.dir.join("a.txt"), "keep").unwrap();
    let out = project.run(&server, &["once", "--json", "go"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let requests = server.requests();
    let results: Vec<Value> = requests[1..]
        .iter()
        .map(|r| r.tool_results().last().cloned().unwrap())
        .collect();
    let body = |i: usize| results[i]["content"].as_str().unwrap().to_string();
    assert!(body(0).contains("Write(secret.txt)"), "{}", body(0));
    assert!(body(1).contains("Bash(rm:*)"), "{}", body(1));
    assert!(
        body(2).contains("Write(notes/**)") && body(2).contains("nobody is at the terminal"),
        "{}",
        body(2)
    );
    assert_eq!(results[3]["is_error"], false);
    assert!(project.dir.join("a.txt").exists());
    assert!(!project.dir.join("secret.txt").exists());
    assert!(!project.dir.join("notes/a.md").exists());
    assert_eq!(project.read("ok.txt"), "fine");
    // The denials are reported as such.
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["permission_denials"].as_array().unwrap().len(), 3, "{v}");
}

#[test]
fn additional_directories_are_reachable_by_the_file_tools() {
    let project = Project::new();
    let extra = project.home.join("shared");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(extra.join("data.txt"), "共享数据").unwrap();
    let path = extra.join("data.txt").display().to_string();
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": path})),
        Reply::text("读到了"),
    ]);
    // Without the setting the read is refused (outside the workspace).
    project.run(&server, &["once", "go"]);
    let refused = server.requests()[1].tool_results()[0].clone();
    assert_eq!(refused["is_error"], true, "{refused}");

    // From the user's own file (a workspace file may not add a directory outside the
    // workspace: tests/it/settings_pin.rs).
    settings(
        &project,
        [
            Some(json!({"permissions": {"additionalDirectories": ["~/shared"]}})),
            None,
            None,
        ],
    );
    let server = FakeServer::start(vec![
        Reply::tool_use("Read", json!({"file_path": path})),
        Reply::text("读到了"),
    ]);
    let out = project.run(&server, &["once", "go"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let result = server.requests()[1].tool_results()[0].clone();
    assert!(
        result["content"].as_str().unwrap().contains("共享数据"),
        "{result}"
    );
}

#[test]
fn a_bad_settings_file_is_exit_2_naming_the_file_and_the_key_before_any_request() {
    let project = Project::new();
    let local = project.dir.join(".claude/settings.local.json");
    let user = project.home.join(".claude/settings.json");
    let cases: [(&Path, &str, &str); 9] = [
        (&local, "{not json", "不是合法的 JSON"),
        (&local, "[1, 2]", "要一个 JSON 对象"),
        (&local, r#"{"model": 5}"#, ": model"),
        (&local, r#"{"model": "  "}"#, ": model"),
        (
            &user,
            r#"{"env": {"FLOWER_MAX_TOKENS": "many"}}"#,
            "FLOWER_MAX_TOKENS",
        ),
        (&user, r#"{"env": {"X": [1]}}"#, ": env.X"),
        (
            &local,
            r#"{"permissions": {"deny": ["Read", "Bash("]}}"#,
            ": permissions.deny[1]",
        ),
        (
            &local,
            r#"{"hooks": {"PreToolUse": [{"matcher": "(", "hooks": [{"type": "command", "command": "x"}]}]}}"#,
            ": hooks.PreToolUse[0].matcher",
        ),
        (
            &local,
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}"#,
            ": hooks.Stop[0].hooks[0].timeout",
        ),
    ];
    for (path, content, key) in cases {
        settings(&project, [None, None, None]);
        write(path, content);
        let server = FakeServer::start(vec![]);
        let out = project.run(&server, &["once", "hi"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{content}: {stderr}");
        assert!(stderr.contains(key), "{content}: {stderr}");
        if !key.contains("FLOWER_") {
            assert!(
                stderr.contains(&path.display().to_string()),
                "{content}: {stderr}"
            );
        }
        assert_eq!(server.request_count(), 0, "{content}");
        // The pipeline refuses the same way, and so does the read-only probe.
        let out = project.run(&server, &["写个 hello 脚本"]);
        assert_eq!(out.status.code(), Some(2), "{content}");
        assert_eq!(server.request_count(), 0);
    }
    // Keys flower does not know (a newer Claude Code's) are fine, and kept.
    settings(
        &project,
        [
            None,
            Some(json!({"statusLine": {"type": "command"}, "mcpServers": {}})),
            None,
        ],
    );
    let server = FakeServer::with_handler(|_, _| Reply::text("好"));
    let out = project.run(&server, &["once", "hi"]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
}

#[test]
fn an_ask_rule_asks_the_person_at_the_terminal() {
    use crate::terminal::Pty;
    let project = Project::new();
    settings(
        &project,
        [
            None,
            Some(json!({"permissions": {"ask": ["Write(notes/**)"]}})),
            None,
        ],
    );
    let server = FakeServer::start(vec![
        Reply::tool_use("Write", json!({"file_path": "notes/a.md", "content": "甲"})),
        Reply::tool_use("Write", json!({"file_path": "notes/b.md", "content": "乙"})),
        Reply::text("完"),
    ]);
    let mut pty = Pty::spawn(project.flower(&server, &["once", "go"]));
    let asked = pty.expect("允许吗?输入 y 允许,其他拒绝");
    assert!(
        asked.contains("Write") && asked.contains("Write(notes/**)"),
        "{asked}"
    );
    pty.line("y");
    pty.expect("允许吗?");
    pty.line("不行");
    pty.wait();
    assert_eq!(project.read("notes/a.md"), "甲");
    assert!(!project.dir.join("notes/b.md").exists());
    let results = server.requests()[2].tool_results();
    let declined = results.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(declined.contains("the user declined it"), "{declined}");
}

/// What `flower state ARGS` prints in `project` (no API key needed), with `env` added;
/// it must succeed.
fn state_in(project: &Project, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = state_output(project, args, env);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    text(&out.stdout)
}

/// How `flower state ARGS` ended in `project`, with `env` added.
fn state_output(project: &Project, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Flower::bin()
        .command()
        .current_dir(&project.dir)
        .arg("state")
        .args(args)
        .env("HOME", &project.home)
        .env_remove("ANTHROPIC_API_KEY")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn state_verbose_lists_what_the_conventions_load() {
    let project = Project::new();
    write(&project.home.join(".claude/CLAUDE.md"), "user memory");
    write(&project.dir.join("CLAUDE.md"), "project memory @docs/a.md");
    write(&project.dir.join("docs/a.md"), "imported");
    settings(
        &project,
        [
            Some(json!({"permissions": {"deny": ["Bash(rm:*)"]}})),
            Some(json!({
                "permissions": {"ask": ["Bash(git push:*)"]},
                "hooks": {
                    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./check.sh", "timeout": 5}]}],
                    "Notification": [{"hooks": [{"type": "command", "command": "notify"}]}]
                }
            })),
            None,
        ],
    );
    let state = |args: &[&str]| state_in(&project, args, &[]);
    let plain = state(&[]);
    assert!(
        !plain.contains("项目记忆"),
        "without -v the spec's lines only: {plain}"
    );
    let listed = state(&["-v"]);
    for wanted in [
        "项目记忆:3 个文件",
        "~/.claude/CLAUDE.md(用户",
        "~/proj/CLAUDE.md(项目",
        "~/proj/docs/a.md(导入",
        "~/.claude/settings.json(用户)",
        "~/proj/.claude/settings.json(项目)",
        "权限 deny:Bash(rm:*)",
        "权限 ask:Bash(git push:*)",
        "hooks:1 个",
        "PreToolUse Bash: ./check.sh (5 s,",
        "hooks.Notification:flower 没有这个事件,忽略",
    ] {
        assert!(listed.contains(wanted), "{wanted} missing:\n{listed}");
    }
    let json: Value = serde_json::from_str(&state(&["--json", "-v"])).unwrap();
    let conventions = &json["conventions"];
    assert_eq!(conventions["memory"]["files"].as_array().unwrap().len(), 3);
    assert_eq!(conventions["settings_files"].as_array().unwrap().len(), 2);
    assert_eq!(
        conventions["permissions"]["ask"][0]["rule"],
        "Bash(git push:*)"
    );
    assert_eq!(conventions["hooks"].as_array().unwrap().len(), 1);
    // --no-memory is not a flag of state; FLOWER_MEMORY=off shows it off.
    let mut cmd = Flower::bin().command();
    let out = cmd
        .current_dir(&project.dir)
        .args(["state", "-v"])
        .env("HOME", &project.home)
        .env("FLOWER_MEMORY", "off")
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("项目记忆:关"),
        "{}",
        text(&out.stdout)
    );
}

/// `flower state -v` shows an MCP server's command, arguments and URL as the file
/// writes them: a token passed in through `${VAR}` is never printed, in text or JSON.
#[test]
fn state_shows_mcp_servers_as_written_never_an_expanded_secret() {
    let project = Project::new();
    write(
        &project.dir.join(".mcp.json"),
        &json!({"mcpServers": {
            "tok": {"command": "srv", "args": ["--token=${MCP_TOKEN}", "--plain"]},
            "web": {"type": "http", "url": "https://mcp.example/x?key=${MCP_TOKEN}",
                    "headers": {"Authorization": "Bearer ${MCP_TOKEN}"}}
        }})
        .to_string(),
    );
    let state = |args: &[&str]| state_in(&project, args, &[("MCP_TOKEN", "s3cret-value")]);
    let listed = state(&["-v"]);
    assert!(
        listed.contains("tok (stdio): srv --token=${MCP_TOKEN} --plain")
            && listed.contains("web (http): https://mcp.example/x?key=${MCP_TOKEN}"),
        "{listed}"
    );
    let json = state(&["--json", "-v"]);
    let servers: Value = serde_json::from_str(&json).unwrap();
    let servers = &servers["conventions"]["mcp_servers"];
    assert_eq!(servers.as_array().map(Vec::len), Some(2), "{json}");
    for said in [&listed, &json] {
        assert!(
            !said.contains("s3cret-value"),
            "a secret was printed: {said}"
        );
    }
    // A URL refused for its scheme is quoted as written too.
    write(
        &project.dir.join(".mcp.json"),
        &json!({"mcpServers": {"web": {"type": "http", "url": "${MCP_URL}"}}}).to_string(),
    );
    let out = state_output(&project, &["-v"], &[("MCP_URL", "ftp://s3cret-value@host")]);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("\"${MCP_URL}\" 不是 http://"), "{said}");
    assert!(
        !said.contains("s3cret-value"),
        "a secret was printed: {said}"
    );
}

#[test]
fn allow_rules_widen_only_the_workers_and_the_judge_stays_read_only() {
    use support::pipeline::{Agent, agent_of, simple_reply, turn_of};
    // The tools each role is offered in a whole run, and what the judge's attempt to
    // write left.
    let offered = |with_settings: bool| {
        let project = Project::new();
        if with_settings {
            let allow = json!({"permissions": {"allow": ["Write", "Edit", "Bash", "Task"]}});
            settings(&project, [None, Some(allow), None]);
        }
        // The judge tries to write: every role is offered the same tools (one cached
        // prefix); its rules refuse what it may not use.
        let server = FakeServer::with_handler(|req, _| match (agent_of(req), turn_of(req)) {
            (Agent::Judge, 0) => Reply::tool_use(
                "Write",
                json!({"file_path": "hello.txt", "content": "changed"}),
            ),
            _ => simple_reply(req),
        });
        let out = project.run(&server, &["写个 hello 脚本"]);
        assert!(out.status.success(), "stderr: {}", text(&out.stderr));
        assert_eq!(
            project.read("hello.txt"),
            "hello",
            "the judge stays read-only"
        );
        let requests = server.requests();
        let refused = requests
            .iter()
            .find(|r| agent_of(r) == Agent::Judge && turn_of(r) == 1)
            .unwrap()
            .raw_body
            .contains("no allow rule names Write");
        assert!(refused, "the judge's Write is refused by its rules");
        [
            Agent::Clarifier,
            Agent::GoalSetter,
            Agent::Coordinator,
            Agent::Judge,
        ]
        .map(|agent| {
            requests
                .iter()
                .find(|r| agent_of(r) == agent)
                .unwrap()
                .tool_names()
        })
    };
    let plain = offered(false);
    let widened = offered(true);
    assert_eq!(plain, widened, "no role but the workers is widened");
}
