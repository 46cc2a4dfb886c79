//! What the processes flower starts inherit, through the binary (issue 40, item 2):
//! a Bash command, a hook and an MCP stdio server see none of flower's secrets (the
//! API key, `*TOKEN*`, `*PASSWORD*`, a URL with a password, a copy of the key under
//! another name, the store's URL, the ssh and gpg agents' sockets), do see what `FLOWER_PASS_ENV` names and what an MCP
//! server's own `env` names, and hold no descriptor but 0, 1 and 2, even when flower
//! was started with one more.

use crate::support::pipeline::{Project, text};
use crate::support::{FAKE_API_KEY, FakeServer, Reply};
use serde_json::json;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output};

/// The variables flower is started with: secrets, and two that must come through.
const VARS: [(&str, &str); 13] = [
    ("FOO_TOKEN", "foo-token-value"),
    ("DB_PASSWORD", "db-password-value"),
    ("Some_Secret", "some-secret-value"),
    ("GOOGLE_APPLICATION_CREDENTIALS", "/creds/file.json"),
    ("DATABASE_URL", "postgres://u:url-password@db/x"),
    ("FLOWER_STORE", "postgres://u:store-password@127.0.0.1:1/x"),
    ("KEY_COPY", FAKE_API_KEY),
    // Agent sockets: keys in all but name.
    ("SSH_AUTH_SOCK", "/tmp/ssh-agent-socket/agent.1"),
    ("GPG_AGENT_INFO", "/run/user/1/gnupg-agent-socket:0:1"),
    (
        "DBUS_SESSION_BUS_ADDRESS",
        "unix:path=/run/user/1/session-bus",
    ),
    ("KRB5CCNAME", "FILE:/tmp/krb5cc-ticket-cache"),
    ("PLAIN_VARIABLE", "plain-value"),
    ("PASSED_TOKEN", "passed-token-value"),
];

/// Values a child must not see.
const SECRETS: [&str; 11] = [
    FAKE_API_KEY,
    "foo-token-value",
    "db-password-value",
    "some-secret-value",
    "/creds/file.json",
    "url-password",
    "store-password",
    "ssh-agent-socket",
    "gnupg-agent-socket",
    "session-bus",
    "krb5cc-ticket-cache",
];

/// What a child writes: its environment and its descriptors.
fn dump(prefix: &str) -> String {
    format!(
        "env > \"$CLAUDE_PROJECT_DIR/{prefix}-env.txt\"; \
         ls /proc/$$/fd > \"$CLAUDE_PROJECT_DIR/{prefix}-fds.txt\""
    )
}

/// Runs `flower ARGS` in the project with [`VARS`], `FLOWER_PASS_ENV=PASSED_*`, the
/// store's URL only in the children's reach (`--store sqlite` wins), and descriptor 9
/// open without close-on-exec, as a parent may leave one.
fn run(project: &Project, server: &FakeServer, args: &[&str]) -> Output {
    let mut cmd = project.command(server, args);
    cmd.envs(VARS)
        // A value flower cannot read as text cannot be checked: withheld too.
        .env(
            "UNREADABLE_VALUE",
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff\xfe secret"),
        )
        .env("FLOWER_PASS_ENV", "PASSED_*")
        .env("CLAUDE_PROJECT_DIR", &project.dir);
    let held = std::fs::File::open(&project.dir).unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&held);
    // SAFETY: dup2 is a system call; the copy at 9 has no close-on-exec flag.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    drop(held);
    out
}

/// The child's dump says: no secret, the plain and the passed variables there, only
/// descriptors 0, 1 and 2.
fn assert_clean(project: &Project, prefix: &str) {
    let env = String::from_utf8_lossy(
        &std::fs::read(project.dir.join(format!("{prefix}-env.txt"))).unwrap_or_default(),
    )
    .into_owned();
    assert!(
        env.contains("PLAIN_VARIABLE=plain-value"),
        "{prefix}: {env}"
    );
    assert!(
        env.contains("PASSED_TOKEN=passed-token-value"),
        "{prefix}: {env}"
    );
    for secret in SECRETS {
        assert!(!env.contains(secret), "{prefix} sees {secret:?}:\n{env}");
    }
    for name in [
        "ANTHROPIC_API_KEY",
        "FLOWER_STORE",
        "KEY_COPY",
        "UNREADABLE_VALUE",
    ] {
        assert!(!env.contains(&format!("{name}=")), "{prefix}: {env}");
    }
    let fds: Vec<String> = project
        .read(&format!("{prefix}-fds.txt"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(fds, ["0", "1", "2"], "{prefix}'s descriptors");
}

#[test]
fn a_command_gets_no_secret_and_no_descriptor_of_flowers() {
    let project = Project::new();
    let git = Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(&project.dir)
        .status()
        .unwrap();
    assert!(git.success());
    for (prefix, extra) in [("sandboxed", None), ("unsandboxed", Some("--no-sandbox"))] {
        let server = FakeServer::start(vec![
            Reply::tool_use("Bash", json!({ "command": dump(prefix) })),
            Reply::text("好了。"),
        ]);
        let mut args = vec![
            "once",
            "--store",
            "sqlite",
            "--allowed-tools",
            "Bash",
            "Write",
        ];
        args.extend(extra);
        args.extend(["--", "go"]);
        let out = run(&project, &server, &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let results = server.requests()[1].tool_results();
        assert_eq!(results[0]["is_error"], json!(false), "{results:?}");
        assert_clean(&project, prefix);
    }
}

#[test]
fn a_hook_gets_no_secret_and_no_descriptor_of_flowers() {
    let project = Project::new();
    let settings = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": format!("cat > /dev/null; {}", dump("hook"))}
    ]}]}});
    std::fs::create_dir_all(project.dir.join(".claude")).unwrap();
    std::fs::write(
        project.dir.join(".claude/settings.json"),
        settings.to_string(),
    )
    .unwrap();
    let server = FakeServer::start(vec![Reply::text("好了。")]);
    let out = run(&project, &server, &["once", "--store", "sqlite", "go"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_clean(&project, "hook");
}

#[test]
fn an_mcp_server_gets_no_secret_but_its_own_env() {
    let project = Project::new();
    // Dumps, then answers as an MCP server would not: flower reports it and goes on.
    let mcp = json!({"mcpServers": {"t": {
        "command": "bash",
        "args": ["-c", dump("mcp")],
        "env": {"MCP_OWN_TOKEN": "configured-token-value"}
    }}});
    std::fs::write(project.dir.join(".mcp.json"), mcp.to_string()).unwrap();
    let server = FakeServer::start(vec![Reply::text("好了。")]);
    let out = run(&project, &server, &["once", "--store", "sqlite", "go"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_clean(&project, "mcp");
    assert!(
        project
            .read("mcp-env.txt")
            .contains("MCP_OWN_TOKEN=configured-token-value"),
        "what the server's own env names comes through"
    );
}

#[test]
fn a_bad_pass_list_stops_flower_with_exit_2_before_any_request() {
    let project = Project::new();
    let server = FakeServer::start(vec![Reply::text("好了。")]);
    let said = crate::support::pipeline::refused_before_any_request(
        &server,
        &project.dir,
        &["once", "go"],
        &[
            (
                vec![],
                vec![("FLOWER_PASS_ENV", "GITHUB_TOKEN,*")],
                "不能只写 *",
            ),
            (
                vec![],
                vec![("FLOWER_PASS_ENV", "A-B")],
                "\"A-B\" 不是变量名",
            ),
            (vec![], vec![("FLOWER_PASS_ENV", "1X")], "FLOWER_PASS_ENV"),
        ],
    );
    assert!(
        said[0].contains("FLOWER_PASS_ENV=GITHUB_TOKEN,NPM_*"),
        "{}",
        said[0]
    );
}
