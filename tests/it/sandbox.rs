//! The kernel sandbox around Bash commands, through the real binary: what a command
//! that the rules allow may still not do. Skipped, with the reason printed, on a
//! kernel without Landlock; the fallback is tested through the library.

use crate::support;

use crate::support::Flower;
use flower::engine::permissions::Permissions;
use flower::tools::bash::SANDBOX_NOTE;
use flower::tools::sandbox::{self, SandboxError, SandboxPolicy, Support};
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{FakeServer, Reply};

/// A scratch directory outside the system temp directories (which the sandbox lets
/// commands write), so that "outside the workspace" really is outside: cargo's target
/// tmp dir, or, for a checkout that itself lives under `/tmp`, one under `$HOME`.
pub(crate) fn scratch() -> tempfile::TempDir {
    let temp: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .chain([std::env::temp_dir()])
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let outside = |p: &Path| {
        p.canonicalize()
            .is_ok_and(|c| !temp.iter().any(|t| c.starts_with(t)))
    };
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/flower-tests"));
    if let Some(home) = &home {
        let _ = fs::create_dir_all(home);
    }
    let base = std::iter::once(target)
        .chain(home)
        .find(|p| outside(p))
        .expect("a scratch directory outside the temp directories (cargo's or $HOME/.cache)");
    tempfile::Builder::new()
        .prefix("sandbox-")
        .tempdir_in(base)
        .unwrap()
}

pub(crate) fn landlock_or_skip() -> bool {
    match sandbox::support() {
        Support::Missing(why) => {
            crate::support::skip::skip(
                crate::support::skip::LANDLOCK,
                &format!("this kernel has no Landlock ({why})"),
            );
            false
        }
        _ => true,
    }
}

pub(crate) struct Setup {
    pub _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub home: PathBuf,
}

/// `root/ws` with a `.git` (hooks, config) and `root/home`.
pub(crate) fn setup() -> Setup {
    let dir = scratch();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let home = root.join("home");
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::write(ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::create_dir_all(&home).unwrap();
    fs::write(home.join(".gitconfig"), "[user]\n\tname = t\n").unwrap();
    Setup {
        _dir: dir,
        root,
        ws,
        home,
    }
}

/// Runs `flower once` in `s.ws`: one turn with every command as a Bash call, then a
/// closing text. Returns the output and the tool results in call order.
pub(crate) fn run_commands(s: &Setup, commands: &[String], extra: &[&str]) -> (Output, Vec<Value>) {
    let inputs: Vec<Value> = commands.iter().map(|c| json!({ "command": c })).collect();
    run_calls(s, &inputs, extra, |_| {})
}

/// [`run_commands`] with each Bash call's whole input, and `adjust` applied to flower's
/// command before it runs.
pub(crate) fn run_calls(
    s: &Setup,
    inputs: &[Value],
    extra: &[&str],
    adjust: impl FnOnce(&mut Command),
) -> (Output, Vec<Value>) {
    let server = bash_calls(inputs);
    let mut cmd = once_command(s, &server, extra);
    adjust(&mut cmd);
    let out = cmd.output().unwrap();
    let requests = server.requests();
    let results = requests
        .get(1)
        .map(|r| r.tool_results())
        .unwrap_or_default();
    (out, results)
}

/// A fake server whose first reply makes one Bash call per input, all in one turn, and
/// whose second closes with a text.
pub(crate) fn bash_calls(inputs: &[Value]) -> FakeServer {
    let mut reply = Reply::blocks(vec![]);
    for input in inputs {
        reply = reply.then_tool_use("Bash", input.clone());
    }
    FakeServer::start(vec![reply.stop_reason("tool_use"), Reply::text("done")])
}

/// `flower once "run them"` in the workspace, against `server`, with the sandbox's
/// defaults and `s.home` as HOME.
pub(crate) fn once_in(s: &Setup, server: &FakeServer, extra: &[&str]) -> Output {
    once_command(s, server, extra).output().unwrap()
}

/// The command [`once_in`] runs, to be run another way.
pub(crate) fn once_command(s: &Setup, server: &FakeServer, extra: &[&str]) -> Command {
    let mut cmd = Flower::bin().server(server).command();
    cmd.current_dir(&s.ws)
        .env("HOME", &s.home)
        .env("FLOWER_MAX_ATTEMPTS", "1")
        .env_remove("FLOWER_SANDBOX")
        .env_remove("FLOWER_NETWORK")
        .args(["once", "run them"])
        .args(extra);
    cmd
}

pub(crate) fn content(v: &Value) -> String {
    match &v["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn an_allowed_command_cannot_write_outside_the_workspace() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let etc_marker = format!("/etc/flower-sandbox-{}", std::process::id());
    // One left by a run that broke the sandbox and then died (or by a test process of
    // the same pid in another PID namespace) must not fail this one.
    let _ = fs::remove_file(&etc_marker);
    let forbidden = [
        format!("echo x > {}/x", s.home.display()),
        "echo x > \"$HOME/y\"".to_string(),
        format!("echo x > /tmp/..{etc_marker}"),
        "echo x > ../parent-x".to_string(),
        "mkdir ../parent-dir".to_string(),
        "echo 'exit 0' > .git/hooks/pre-commit".to_string(),
        "printf '[core]\\n\\tfsmonitor = touch /x\\n' >> .git/config".to_string(),
        "echo x > .git/config.new && mv .git/config.new .git/config".to_string(),
        "rm -f .git/config".to_string(),
        "echo x >> \"$HOME/.gitconfig\"".to_string(),
        // A child process is confined too.
        format!(
            "python3 -c 'open(\"{}/py\", \"w\")' || sh -c 'echo x > {}/py'",
            s.root.display(),
            s.root.display()
        ),
    ];
    let mut commands: Vec<String> = forbidden.to_vec();
    commands.push("echo inside > inside.txt && mkdir -p sub && echo y > sub/f".to_string());
    commands.push("echo x > .git/HEAD.lock && rm .git/HEAD.lock && echo git-ok".to_string());
    let tmp_marker =
        std::env::temp_dir().join(format!("flower-sandbox-tmp-{}", std::process::id()));
    commands.push(format!("echo t > {}", tmp_marker.display()));
    let (out, results) = run_commands(&s, &commands, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("flower: 沙箱 landlock(工作区可写) · 网络 开"),
        "{stderr}"
    );
    assert_eq!(results.len(), commands.len(), "{results:?}");
    for (cmd, r) in forbidden.iter().zip(&results) {
        let text = content(r);
        assert_eq!(r["is_error"], json!(true), "{cmd:?} succeeded: {text}");
        assert!(
            [
                "Permission denied",
                "Read-only file system",
                "Device or resource busy"
            ]
            .iter()
            .any(|e| text.contains(e)),
            "{cmd:?}: {text}"
        );
        assert!(text.contains(SANDBOX_NOTE), "{cmd:?}: {text}");
    }
    // Nothing left behind.
    assert!(!s.home.join("x").exists());
    assert!(!s.home.join("y").exists());
    assert!(!Path::new(&etc_marker).exists());
    assert!(!s.root.join("parent-x").exists());
    assert!(!s.root.join("parent-dir").exists());
    assert!(!s.root.join("py").exists());
    assert!(!s.ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        fs::read_to_string(s.ws.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert_eq!(
        fs::read_to_string(s.home.join(".gitconfig")).unwrap(),
        "[user]\n\tname = t\n"
    );
    // What is allowed works.
    let n = forbidden.len();
    assert_eq!(
        results[n]["is_error"],
        json!(false),
        "{}",
        content(&results[n])
    );
    assert_eq!(fs::read_to_string(s.ws.join("sub/f")).unwrap(), "y\n");
    assert!(
        content(&results[n + 1]).contains("git-ok"),
        "{}",
        content(&results[n + 1])
    );
    assert_eq!(
        results[n + 2]["is_error"],
        json!(false),
        "{}",
        content(&results[n + 2])
    );
    assert_eq!(fs::read_to_string(&tmp_marker).unwrap(), "t\n");
    let _ = fs::remove_file(&tmp_marker);
}

/// The judge's rules (Read, Glob, Grep, Bash): a bare Bash rule, and still a
/// read-only workspace.
#[test]
fn an_agent_without_write_rights_gets_a_read_only_workspace() {
    let judge = flower::workflow::flower::judge();
    let p = Permissions::new(&judge.allowed_tools, &judge.disallowed_tools).unwrap();
    let policy = p.sandbox(&SandboxPolicy::standard(), Path::new("/ws"));
    assert!(!policy.workspace_writable);
    assert!(policy.enabled);
    let worker = flower::workflow::flower::worker();
    let p = Permissions::new(&worker.allowed_tools, &worker.disallowed_tools).unwrap();
    assert!(
        p.sandbox(&SandboxPolicy::standard(), Path::new("/ws"))
            .workspace_writable
    );

    if !landlock_or_skip() {
        return;
    }
    read_only_workspace_holds(&setup(), true);
}

/// A project under `/tmp`, where every command may write: the judge's workspace stays
/// read-only all the same (a read-only bind mount, since Landlock cannot take the temp
/// dir's rights back along the path).
#[test]
fn a_read_only_workspace_inside_the_temp_dir_stays_read_only() {
    if !landlock_or_skip() {
        return;
    }
    read_only_workspace_holds(&setup_in_temp(), false);
}

/// `root/ws` and `root/home` inside the system temp dir (a root commands may write),
/// without a `.git`.
pub(crate) fn setup_in_temp() -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("flower-ro-")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let root = dir.path().canonicalize().unwrap();
    let s = Setup {
        ws: root.join("ws"),
        home: root.join("home"),
        root,
        _dir: dir,
    };
    fs::create_dir_all(&s.ws).unwrap();
    fs::create_dir_all(&s.home).unwrap();
    s
}

/// Runs writes and a read as an agent with Read/Glob/Grep/Bash only; asserts that no
/// write landed (and, with `noted`, that each says the sandbox stopped it).
fn read_only_workspace_holds(s: &Setup, noted: bool) {
    fs::write(s.ws.join("existing.txt"), "keep\n").unwrap();
    let commands = [
        "echo x > new.txt",
        "echo x >> existing.txt",
        "rm existing.txt",
        "mkdir d",
        "cat existing.txt",
    ]
    .map(String::from);
    let (out, results) = run_commands(
        s,
        &commands,
        &["--allowed-tools", "Read", "Glob", "Grep", "Bash"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("沙箱 landlock(工作区只读)"), "{stderr}");
    assert_eq!(results.len(), commands.len(), "{stderr}");
    for (cmd, r) in commands[..4].iter().zip(&results) {
        assert_eq!(r["is_error"], json!(true), "{cmd:?}: {}", content(r));
        if noted {
            assert!(content(r).contains(SANDBOX_NOTE), "{cmd:?}: {}", content(r));
        }
    }
    assert!(content(&results[4]).contains("keep"));
    assert!(!s.ws.join("new.txt").exists());
    assert!(!s.ws.join("d").exists());
    assert_eq!(
        fs::read_to_string(s.ws.join("existing.txt")).unwrap(),
        "keep\n"
    );
}

/// A rule that names the git files grants them.
#[test]
fn an_explicit_rule_grants_the_git_files() {
    let p = Permissions::new(&["Bash".into(), "Edit(.git/hooks/**)".into()], &[]).unwrap();
    let policy = p.sandbox(&SandboxPolicy::standard(), Path::new("/ws"));
    assert!(!policy.protect_git);
    let p = Permissions::new(&["Bash".into(), "Edit".into()], &[]).unwrap();
    assert!(
        p.sandbox(&SandboxPolicy::standard(), Path::new("/ws"))
            .protect_git
    );
}

#[test]
fn no_network_cuts_the_network_off() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    // The fake server of this very run listens on loopback; `run_commands` starts it,
    // so connect to a listener of our own.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    // With the network on, the command's namespace has a loopback of its own: the
    // host's is not there (tests/it/sandbox_network.rs tests the proxy).
    let (out, on) = run_commands(&s, std::slice::from_ref(&probe), &[]);
    assert!(out.status.success());
    assert!(
        !content(&on[0]).contains("connected"),
        "{}",
        content(&on[0])
    );
    let (out, off) = run_commands(&s, std::slice::from_ref(&probe), &["--no-network"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("· 网络 关"), "{stderr}");
    assert_eq!(off[0]["is_error"], json!(true), "{}", content(&off[0]));
    assert!(!content(&off[0]).contains("connected"));
}

#[test]
fn bad_sandbox_settings_exit_2_before_any_request() {
    let s = setup();
    for (var, value) in [("FLOWER_SANDBOX", "maybe"), ("FLOWER_NETWORK", "no")] {
        let server = FakeServer::start(vec![Reply::text("never")]);
        let mut cmd = Flower::bin().server(&server).command();
        let out = cmd
            .current_dir(&s.ws)
            .env(var, value)
            .args(["once", "hi"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}={value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(var), "{stderr}");
        assert_eq!(server.request_count(), 0);
    }
    let server = FakeServer::start(vec![Reply::text("never")]);
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(&s.ws)
        .args(["once", "hi", "--no-sandbox", "--no-network"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(server.request_count(), 0);
}

/// Without Landlock: a required sandbox refuses, otherwise the command runs
/// unconfined and the user is told so in one line.
#[test]
fn a_kernel_without_landlock_falls_back_or_refuses() {
    let s = setup();
    let missing = Support::Missing("内核没有 Landlock".into());
    let policy = SandboxPolicy::standard();
    let prepared = sandbox::prepare_with(&policy, &s.ws, &missing).unwrap();
    // Only the namespace for the git files is left; no Landlock.
    assert!(prepared.as_ref().is_none_or(|p| !p.landlocked()));
    assert_eq!(
        policy.describe_with(&missing),
        "沙箱 不可用(内核没有 Landlock),命令不受限 · 网络 开"
    );
    let required = SandboxPolicy {
        required: true,
        ..SandboxPolicy::standard()
    };
    // Refused for the reason the kernel gave, before any ruleset is tried.
    assert!(matches!(
        sandbox::prepare_with(&required, &s.ws, &missing),
        Err(SandboxError::Unavailable(why)) if why == "内核没有 Landlock"
    ));
    assert!(required.describe_with(&missing).contains("命令一律拒绝"));
    // With Landlock, the same policy is confined.
    if landlock_or_skip() {
        let p = sandbox::prepare(&policy, &s.ws).unwrap().unwrap();
        assert!(p.landlocked());
        // Its debug form says which layers it holds.
        let shown = format!("{p:?}");
        assert!(
            shown.starts_with("Prepared { landlock: true, seccomp: "),
            "{shown}"
        );
        let namespaces = format!("namespaces: {} }}", p.contains_processes());
        assert!(shown.ends_with(&namespaces), "{shown}");
    }
}

/// The Landlock probe reports the version the kernel answers (or why there is none),
/// and the support it implies: before ABI 5, device ioctls go unchecked.
#[test]
fn the_landlock_probe_reports_what_the_kernel_answers() {
    use flower::tools::sandbox::NoLandlock;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the call only answers
    // the ABI version or an error; it creates nothing.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    let probed = sandbox::landlock_abi();
    match &probed {
        Ok(abi) => assert_eq!(i64::from(*abi), raw),
        Err(e) => {
            assert!(raw < 0, "{e}");
            match errno {
                Some(libc::ENOSYS) => assert!(matches!(e, NoLandlock::NotBuilt)),
                Some(libc::EOPNOTSUPP) => assert!(matches!(e, NoLandlock::Disabled)),
                _ => assert!(matches!(e, NoLandlock::Probe(_))),
            }
        }
    }
    let expected = match probed {
        Ok(abi) if abi < 5 => Support::Partial(format!("Landlock ABI {abi}")),
        Ok(_) => Support::Full,
        Err(e) => Support::Missing(e.to_string()),
    };
    assert_eq!(sandbox::support(), expected);
}

/// A typo in a rule fails before any model request, with the rule named.
#[test]
fn a_malformed_rule_fails_before_any_request() {
    let s = setup();
    let server = FakeServer::start(vec![Reply::text("never")]);
    let mut cmd = Flower::bin().server(&server).command();
    let out = cmd
        .current_dir(&s.ws)
        .args(["once", "hi", "--allowed-tools", "Bash(git status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("权限规则 \"Bash(git status\" 不行"),
        "{stderr}"
    );
    assert_eq!(server.request_count(), 0);
}

/// The namespaces are made once per process: a `.git` made anew outside between two
/// commands (here by the test, while flower waits for the model) is protected again in
/// the next command. A command itself cannot rename `.git` (it is a mount point).
#[test]
fn a_git_dir_made_anew_is_protected_in_the_next_command() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let gate = support::Gate::new();
    let server = FakeServer::start(vec![
        Reply::tool_use(
            "Bash",
            json!({ "command": "mv .git .git.old || rm -rf .git; echo moved=$?" }),
        ),
        Reply::tool_use(
            "Bash",
            json!({ "command": "echo 'exit 0' > .git/hooks/pre-commit" }),
        )
        .gate_before(&gate),
        Reply::text("done"),
    ]);
    let child = once_command(&s, &server, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(gate.wait_reached(std::time::Duration::from_secs(60)));
    assert!(
        s.ws.join(".git/config").exists(),
        ".git was moved or removed"
    );
    fs::rename(s.ws.join(".git"), s.root.join("old-git")).unwrap();
    fs::create_dir_all(s.ws.join(".git/hooks")).unwrap();
    fs::write(s.ws.join(".git/config"), "c\n").unwrap();
    gate.open();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let first = &requests[1].tool_results()[0];
    assert!(
        content(first).contains("Device or resource busy"),
        "{}",
        content(first)
    );
    let write = &requests[2].tool_results()[0];
    assert_eq!(write["is_error"], json!(true), "{}", content(write));
    assert!(!s.ws.join(".git/hooks/pre-commit").exists());
}
