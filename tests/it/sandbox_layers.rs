//! One test per sandbox rule that no other test needed (#42 item 4 removed each and
//! the whole suite still passed): each fails when that rule alone is gone.
//!
//! - the seccomp rule for `TIOCSTI`: a command that makes a pty its own controlling
//!   terminal could push input into it (the kernel allows that to the terminal's
//!   owner); and for `TIOCLINUX` (only a virtual console answers it, so the errno is
//!   the rule's);
//! - the capability bounding set dropped (an `exec` as uid 0 would gain it back), and
//!   the securebits that keep such an `exec` from regaining any, locked;
//! - a linked worktree's `commondir` in `.git/worktrees/*/` read-only (else git in that
//!   worktree, outside the workspace, reads the config a command points it at);
//! - a de-initialised submodule's `.git/modules/<name>/config` read-only (no checkout
//!   leads to it; `git submodule update --init` and `git status` read it later);
//! - and, new with them, a program the repository's config names by a workspace path.

use crate::sandbox::{Setup, content, landlock_or_skip, run_calls, run_commands, setup};
use crate::sandbox_network::python;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::Command;

fn one(s: &Setup, command: &str) -> String {
    let (out, results) = run_commands(s, &[command.to_string()], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    content(&results[0])
}

/// A pty of the command's own, made its controlling terminal: `TIOCSTI` is the kernel's
/// to allow there (`dev.tty.legacy_tiocsti`), so only the seccomp rule refuses it.
#[test]
fn tiocsti_and_tioclinux_are_refused_on_a_terminal_the_command_owns() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    fs::write(
        s.ws.join("own_tty.py"),
        "import errno, fcntl, os, termios\n\
         master, slave = os.openpty()\n\
         os.setsid()\n\
         fcntl.ioctl(slave, termios.TIOCSCTTY, 0)\n\
         for name, req, arg in [('TIOCSTI', termios.TIOCSTI, b'x'), ('TIOCLINUX', 0x541C, b'\\x06')]:\n\
         \x20   try:\n\
         \x20       fcntl.ioctl(slave, req, arg)\n\
         \x20       print(name, 'done')\n\
         \x20   except OSError as e:\n\
         \x20       print(name, errno.errorcode[e.errno])\n",
    )
    .unwrap();
    let out = one(&s, "python3 own_tty.py");
    assert!(out.contains("TIOCSTI EPERM"), "{out}");
    // Without the rule a pty says ENOTTY or EINVAL: EPERM is the filter's answer.
    assert!(out.contains("TIOCLINUX EPERM"), "{out}");
}

/// Every capability set is empty in what the command runs, the bounding set included.
#[test]
fn a_command_holds_no_capability_not_even_in_its_bounding_set() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let out = one(&s, "grep ^Cap /proc/self/status");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(set))
            .unwrap_or_else(|| panic!("{set} missing: {out}"));
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
}

/// The securebits are set and locked: neither an `exec` as uid 0 nor a setuid-root
/// program regains capabilities, and no ambient capability can be raised, even were
/// a capability left in some set (the second line behind the empty bounding set).
#[test]
fn a_command_runs_with_its_securebits_set_and_locked() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    // PR_GET_SECUREBITS is 27.
    let out = one(
        &s,
        "python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(27, 0, 0, 0, 0))'",
    );
    // NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE (1, 4, 64), each with its lock
    // (2, 8, 128); not KEEP_CAPS.
    assert_eq!(out.trim(), "207", "{out}");
}

fn git(s: &Setup, dir: &Path, args: &[&str]) {
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
}

/// The workspace as a repository with one commit.
fn repository(s: &Setup) {
    fs::remove_dir_all(s.ws.join(".git")).unwrap();
    git(s, &s.ws, &["init", "-q", "."]);
    fs::write(s.ws.join("a.txt"), "a\n").unwrap();
    git(s, &s.ws, &["add", "a.txt"]);
    git(s, &s.ws, &["commit", "-qm", "one"]);
}

/// `[core] fsmonitor` leaving `marker`, as `printf` writes it.
fn fsmonitor(marker: &Path) -> String {
    format!(
        "[core]\\n\\tfsmonitor = \"touch {}; false\"\\n",
        marker.display()
    )
}

fn git_status_runs(s: &Setup, dir: &Path, marker: &Path) -> bool {
    let _ = Command::new("git")
        .args(["status", "--short"])
        .current_dir(dir)
        .env("HOME", &s.home)
        .output()
        .unwrap();
    marker.exists()
}

/// A linked worktree outside the workspace: its `commondir`, in the workspace's
/// `.git/worktrees/`, cannot be pointed at a config the command wrote.
#[test]
fn a_linked_worktrees_commondir_cannot_be_repointed() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    repository(&s);
    let linked = s.root.join("linked");
    git(
        &s,
        &s.ws,
        &["worktree", "add", "-q", linked.to_str().unwrap()],
    );
    let commondir = s.ws.join(".git/worktrees/linked/commondir");
    let before = fs::read_to_string(&commondir).unwrap();
    let marker = s.root.join("fsmonitor-ran");
    let out = one(
        &s,
        &format!(
            "mkdir -p evil && cp -r .git/objects .git/refs evil/ && printf '{}' > evil/config \
             && echo {} > .git/worktrees/linked/commondir",
            fsmonitor(&marker),
            s.ws.join("evil").display()
        ),
    );
    assert_eq!(fs::read_to_string(&commondir).unwrap(), before, "{out}");
    assert!(!git_status_runs(&s, &linked, &marker), "{out}");
}

/// A submodule de-initialised (`git submodule deinit`): no checkout leads to its git
/// directory, which stays under `.git/modules/`; its config is read-only all the same.
#[test]
fn a_deinitialised_submodules_config_cannot_be_planted() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    repository(&s);
    let source = s.root.join("sub-src");
    fs::create_dir_all(&source).unwrap();
    git(&s, &source, &["init", "-q", "."]);
    fs::write(source.join("s.txt"), "s\n").unwrap();
    git(&s, &source, &["add", "s.txt"]);
    git(&s, &source, &["commit", "-qm", "s"]);
    git(
        &s,
        &s.ws,
        &["submodule", "add", "-q", source.to_str().unwrap(), "sub"],
    );
    git(&s, &s.ws, &["commit", "-qm", "sub"]);
    git(&s, &s.ws, &["submodule", "deinit", "-q", "-f", "sub"]);
    let config = s.ws.join(".git/modules/sub/config");
    let before = fs::read_to_string(&config).unwrap();
    let marker = s.root.join("fsmonitor-ran");
    let out = one(
        &s,
        &format!("printf '{}' >> .git/modules/sub/config", fsmonitor(&marker)),
    );
    assert_eq!(fs::read_to_string(&config).unwrap(), before, "{out}");
    // The user checks it out again and looks.
    git(&s, &s.ws, &["submodule", "update", "-q", "--init"]);
    assert!(!git_status_runs(&s, &s.ws.join("sub"), &marker), "{out}");
}

/// A program the repository's config names by a workspace path (`core.fsmonitor =
/// ./tools/fsmon`, an alias's script): git runs it on the user's next `git status`, so
/// a command cannot rewrite it.
#[test]
fn a_program_the_git_config_names_cannot_be_rewritten() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    repository(&s);
    let script = "#!/bin/sh\nexit 1\n";
    fs::create_dir_all(s.ws.join("tools")).unwrap();
    for f in ["tools/fsmon", "tools/alias.sh"] {
        fs::write(s.ws.join(f), script).unwrap();
        fs::set_permissions(
            s.ws.join(f),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    }
    git(&s, &s.ws, &["config", "core.fsmonitor", "./tools/fsmon"]);
    git(
        &s,
        &s.ws,
        &["config", "alias.check", "!tools/alias.sh --quick"],
    );
    let marker = s.root.join("fsmonitor-ran");
    let out = one(
        &s,
        &format!(
            "printf '#!/bin/sh\\ntouch {m}\\nexit 1\\n' > tools/fsmon; \
             printf '#!/bin/sh\\ntouch {m}\\n' > tools/alias.sh; \
             mv tools tools.old",
            m = marker.display()
        ),
    );
    for f in ["tools/fsmon", "tools/alias.sh"] {
        assert_eq!(fs::read_to_string(s.ws.join(f)).unwrap(), script, "{out}");
    }
    assert!(!git_status_runs(&s, &s.ws, &marker), "{out}");
}

/// A tmpfs mounted at `dir` for the test's length (detached when dropped).
struct Tmpfs(std::ffi::CString);

impl Tmpfs {
    fn at(dir: &Path) -> Tmpfs {
        Tmpfs::with_flags(dir, 0)
    }

    fn with_flags(dir: &Path, flags: libc::c_ulong) -> Tmpfs {
        use std::os::unix::ffi::OsStrExt as _;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: mount on NUL-terminated strings.
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                path.as_ptr(),
                c"tmpfs".as_ptr(),
                flags,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "mount tmpfs: {}", std::io::Error::last_os_error());
        Tmpfs(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // SAFETY: umount2 on a NUL-terminated string.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

fn root_or_skip() -> bool {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        crate::support::skip::skip(
            crate::support::skip::ROOT,
            "it needs root (to mount a tmpfs)",
        );
    }
    root
}

/// A file system mounted inside the workspace (a tmpfs `target/`, a bound data set) is
/// as writable as the workspace, and a write lands in it: each writable root is cloned
/// with what is mounted beneath it before the machine is made read-only.
#[test]
fn a_mount_inside_the_workspace_is_written_like_the_workspace() {
    if !landlock_or_skip() || !root_or_skip() {
        return;
    }
    let s = setup();
    let inner = s.ws.join("mnt");
    fs::create_dir(&inner).unwrap();
    let _mounted = Tmpfs::at(&inner);
    let out = one(&s, "echo hi > mnt/f && cat mnt/f");
    assert_eq!(out.trim(), "hi");
    // Seen on the tmpfs, not on the directory beneath it.
    assert_eq!(fs::read_to_string(inner.join("f")).unwrap(), "hi\n");
}

/// A sandboxed command's exit status is what flower reports: the PID namespace's
/// supervisor exits as its init (the shell) did.
#[test]
fn a_commands_exit_status_comes_through_the_pid_namespace() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let commands = ["echo fine", "exit 3", "sh -c 'exit 7'; exit $?"].map(String::from);
    let (out, results) = run_commands(&s, &commands, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let texts: Vec<String> = results.iter().map(content).collect();
    assert!(!texts[0].contains("Exit code"), "{}", texts[0]);
    assert!(texts[1].contains("Exit code: 3"), "{}", texts[1]);
    assert!(texts[2].contains("Exit code: 7"), "{}", texts[2]);
}

/// A workspace on a `nosuid,nodev,noexec` mount: its git config is still kept read-only
/// by a mount. The sandbox's user namespace may not drop those flags, so the read-only
/// remount must keep them (else the kernel refuses it, the namespaces cannot be made,
/// and the command runs with the "no user namespace" fallback).
#[test]
fn a_protected_file_on_a_nosuid_mount_is_kept_read_only_by_a_mount() {
    if !landlock_or_skip() || !root_or_skip() {
        return;
    }
    let s = setup();
    let _mounted = Tmpfs::with_flags(&s.ws, libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC);
    fs::create_dir_all(s.ws.join(".git/hooks")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    fs::write(s.ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let (out, results) = run_commands(&s, &["echo '[x]' >> .git/config".to_string()], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = content(&results[0]);
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(!text.contains("no user namespace"), "{text}");
    assert_eq!(
        fs::read_to_string(s.ws.join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
}

/// The command's own `/proc` is mounted read-only, `nosuid`, `nodev` and `noexec`.
#[test]
fn the_commands_proc_is_read_only_nosuid_nodev_noexec() {
    if !landlock_or_skip() || !python() {
        return;
    }
    let s = setup();
    let out = one(
        &s,
        "python3 -c 'import os; print(os.statvfs(\"/proc\").f_flag & 15)'; echo x > /proc/self/comm",
    );
    // ST_RDONLY 1, ST_NOSUID 2, ST_NODEV 4, ST_NOEXEC 8.
    assert!(out.starts_with("15"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
}

/// A file the user's git configuration includes, or its hooks directory, missing where
/// no command could write it (not beneath a writable root), is left missing: flower
/// makes a missing one (to keep it read-only) only where a command could plant it.
#[test]
fn a_missing_git_include_no_command_could_write_is_not_created() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    // The scratch directory is no writable root (only the workspace and the temp
    // directories are).
    let included = s.root.join("outside/included");
    let inside = s.ws.join("made/included");
    fs::write(
        s.home.join(".gitconfig"),
        format!(
            "[include]\n\tpath = {}\n\tpath = {}\n[core]\n\thooksPath = {}\n",
            included.display(),
            inside.display(),
            s.root.join("outside/hooks").display()
        ),
    )
    .unwrap();
    one(&s, "true");
    assert!(
        !s.root.join("outside").exists(),
        "{} was made",
        included.display()
    );
    // Beneath a writable root (the workspace), the same include is made, empty.
    assert_eq!(fs::read_to_string(&inside).unwrap(), "");
}

/// The submodules `.gitmodules` names: one not checked out keeps its empty directory
/// read-only (no `.git` can be planted there for git to follow on the user's next
/// `git submodule update`), and one checked out keeps its `.git` file read-only (it
/// cannot be pointed at another repository's config and hooks).
#[test]
fn a_submodules_checkout_cannot_be_pointed_elsewhere() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    fs::write(
        s.ws.join(".gitmodules"),
        "[submodule \"empty\"]\n\tpath = empty\n\turl = data\n\
         [submodule \"out\"]\n\tpath = lib/out\n\turl = ../o\n\
         [submodule \"odd\"]\n\tpath = x/../data\n",
    )
    .unwrap();
    fs::create_dir(s.ws.join("empty")).unwrap();
    // What only looks like a submodule's checkout: a `url`, a path that is not plain.
    fs::create_dir_all(s.ws.join("data")).unwrap();
    fs::create_dir_all(s.ws.join("x")).unwrap();
    let module = s.ws.join(".git/modules/out");
    fs::create_dir_all(module.join("hooks")).unwrap();
    fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(module.join("config"), "[core]\n").unwrap();
    fs::create_dir_all(s.ws.join("lib/out")).unwrap();
    let dotgit = "gitdir: ../../.git/modules/out\n";
    fs::write(s.ws.join("lib/out/.git"), dotgit).unwrap();
    let out = one(
        &s,
        "echo 'gitdir: /elsewhere' > empty/.git; mkdir empty/.git; \
         echo 'gitdir: /elsewhere' > lib/out/.git; touch data/kept; true",
    );
    assert!(!s.ws.join("empty/.git").exists(), "{out}");
    assert!(s.ws.join("data/kept").exists(), "{out}");
    // The checkout is no git directory: nothing is made in it to protect.
    for stray in ["config", "hooks"] {
        assert!(!s.ws.join("lib/out").join(stray).exists(), "{stray}: {out}");
    }
    assert_eq!(
        fs::read_to_string(s.ws.join("lib/out/.git")).unwrap(),
        dotgit,
        "{out}"
    );
}

/// Only an include's path and `core.hooksPath` name a file or directory flower makes
/// (empty, to keep it read-only): another key of those sections, or a `path` key of
/// another section (`difftool.<tool>.path`), makes nothing in the workspace.
#[test]
fn only_includes_and_the_hooks_path_make_files_to_protect() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    fs::write(
        s.ws.join(".git/config"),
        "[core]\n\tbare = false\n\teditor = vi\n[difftool \"x\"]\n\tpath = tools/mymeld\n\
         [include]\n\tmissing = yes\n\t# path = commented\n[user]\n\tname = ./notes.txt\n\
         [alias]\n\tst = status\n[diff.x]\n\tname = ./notes.txt\n",
    )
    .unwrap();
    // A value that names a workspace file under a key that runs no program leaves
    // that file writable (`[diff.x]` is git's older spelling of `[diff "x"]`, not more
    // of `[alias]`); a comment is no key.
    fs::write(s.ws.join("notes.txt"), "").unwrap();
    let out = one(&s, "echo kept >> notes.txt");
    assert_eq!(
        fs::read_to_string(s.ws.join("notes.txt")).unwrap(),
        "kept\n",
        "{out}"
    );
    // A hooks path is taken from the work tree, an include's from the config's
    // directory.
    for dir in [s.ws.clone(), s.ws.join(".git")] {
        for stray in ["false", "vi", "tools", "yes", "commented"] {
            assert!(
                !dir.join(stray).exists(),
                "{stray} was made in {}",
                dir.display()
            );
        }
    }
}

/// Git's config syntax read as git reads it, for the includes it names: a quoted
/// subsection after blanks, a quoted value with a blank and a `;`, an inline comment,
/// CRLF line ends, a carriage return inside a value. Each include named is made
/// (empty, beneath the workspace) under exactly the name git would read.
#[test]
fn a_git_config_is_read_as_git_reads_it() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let git = s.ws.join(".git");
    let names = |dir: &Path| -> std::collections::BTreeSet<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    fs::write(
        git.join("config"),
        "[core]\n\tbare = false\n\
         [includeIf \t \"gitdir:/\"]\r\n\tpath = \"inc one;x.cfg\" ; a comment\r\n\
         [include]\n\tpath = plain.cfg\r\n\tpath = a\rb.cfg\n",
    )
    .unwrap();
    let before = names(&git);
    one(&s, "true");
    let made: Vec<String> = names(&git).difference(&before).cloned().collect();
    assert_eq!(made, ["a\rb.cfg", "inc one;x.cfg", "plain.cfg"]);
}

/// `flower once` in `s.ws` with every command as a Bash call, on a machine without
/// user namespaces: flower (and so every process it starts) gets `EPERM` from
/// `unshare`, as under a container's seccomp profile.
fn without_user_namespaces(s: &Setup, commands: &[Value], extra: &[&str]) -> Vec<Value> {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};
    use std::os::unix::process::CommandExt as _;
    let filter = SeccompFilter::new(
        [(libc::SYS_unshare, vec![])].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        std::env::consts::ARCH.try_into().unwrap(),
    )
    .unwrap();
    let program: BpfProgram = filter.try_into().unwrap();
    let (out, results) = run_calls(s, commands, extra, |cmd| {
        // SAFETY: two prctl calls on a program built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fprog = libc::sock_fprog {
                    len: program.len() as u16,
                    filter: program.as_ptr().cast::<libc::sock_filter>().cast_mut(),
                };
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &fprog) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    results
}

/// Without user namespaces a command runs with Landlock and seccomp only, and is told
/// so; a protected file it changed is put back after it. Where that would break a
/// promise the user made (no network, or network rules), it does not run at all.
#[test]
fn without_user_namespaces_a_command_is_warned_or_refused() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let config = fs::read_to_string(s.ws.join(".git/config")).unwrap();
    let results = without_user_namespaces(
        &s,
        &[
            json!({ "command": "echo '[x]' >> .git/config && echo \"changed proxy=${HTTP_PROXY:-none}\"" }),
            json!({ "command": "sleep 30", "timeout": 300 }),
        ],
        &[],
    );
    // Without a PID namespace only the command's process group is killed, and the
    // result says so.
    let timed_out = content(&results[1]);
    assert!(
        timed_out
            .contains("its process group was killed (processes that left the group may still run)"),
        "{timed_out}"
    );
    let text = content(&results[0]);
    assert!(text.contains("changed proxy=none"), "{text}");
    assert!(
        text.contains("flower: warning: no user namespace, so this command sees the machine"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "flower 把受保护的 {} 恢复成了命令运行前的内容",
            s.ws.join(".git/config").display()
        )),
        "{text}"
    );
    assert_eq!(
        fs::read_to_string(s.ws.join(".git/config")).unwrap(),
        config
    );

    // No network promised, or rules for it: refused, nothing run.
    let refused = |extra: &[&str]| {
        let results = without_user_namespaces(&s, &[json!({ "command": "touch ran" })], extra);
        assert_eq!(results[0]["is_error"], Value::Bool(true), "{extra:?}");
        let text = content(&results[0]);
        assert!(
            text.contains("Operation not permitted"),
            "{extra:?}: {text}"
        );
        assert!(!s.ws.join("ran").exists(), "{extra:?}");
    };
    refused(&["--no-network"]);
    let settings = s.home.join(".claude/settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    fs::write(
        &settings,
        r#"{"sandbox": {"network": {"allowedDomains": ["example.com"]}}}"#,
    )
    .unwrap();
    refused(&[]);

    // A read-only workspace inside a writable root (the temp dir): only a mount keeps it
    // read-only, so without one the command is refused.
    let t = crate::sandbox::setup_in_temp();
    let results = without_user_namespaces(
        &t,
        &[json!({ "command": "touch ran" })],
        &["--allowed-tools", "Read", "Glob", "Grep", "Bash"],
    );
    assert_eq!(
        results[0]["is_error"],
        Value::Bool(true),
        "{}",
        content(&results[0])
    );
    assert!(content(&results[0]).contains("Operation not permitted"));
    assert!(!t.ws.join("ran").exists());
}

/// Runs `argv` in `ws` confined by `prepared`, through the library (`confine`).
fn run_confined(
    prepared: flower::tools::sandbox::Prepared,
    ws: &Path,
    argv: &[&str],
) -> std::io::Result<std::process::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut cmd = tokio::process::Command::new(argv[0]);
        cmd.args(&argv[1..]).current_dir(ws);
        flower::tools::sandbox::confine(&mut cmd, Some(prepared));
        cmd.output().await
    })
}

/// The network namespace a command prepared with `prepared` runs in (its id; the mount
/// namespace is its own, made for its fresh `/proc`).
fn network_namespace_of(prepared: flower::tools::sandbox::Prepared, ws: &Path) -> String {
    let out = run_confined(prepared, ws, &["readlink", "/proc/self/ns/net"]).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The namespaces are made once per plan and reused by every command of it, while
/// another plan's live beside them; once a plan's paths are the same but an inode
/// changed (`.git` made anew), its old namespaces are let go: no descriptor of them
/// stays open.
#[test]
fn namespaces_are_reused_per_plan_and_let_go_when_stale() {
    use flower::tools::sandbox::{self, SandboxPolicy};
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let writable = SandboxPolicy::standard();
    let read_only = SandboxPolicy {
        workspace_writable: false,
        ..SandboxPolicy::standard()
    };
    let run = |policy: &SandboxPolicy| {
        let prepared = sandbox::prepare(policy, &s.ws).unwrap().unwrap();
        assert!(prepared.contains_processes(), "no user namespaces here");
        network_namespace_of(prepared, &s.ws)
    };
    let first = run(&writable);
    let other = run(&read_only);
    assert_ne!(first, other);
    assert_eq!(
        run(&writable),
        first,
        "the plan's namespaces were made again"
    );
    assert_eq!(run(&read_only), other);
    // Another writable root: only the roots differ (the same pins, read-only paths and
    // files to sweep).
    fs::create_dir_all(s.root.join("extra")).unwrap();
    let wider = SandboxPolicy {
        additional_dirs: vec![s.root.join("extra")],
        ..SandboxPolicy::standard()
    };
    let third = run(&wider);
    assert_ne!(third, first);
    assert_eq!(
        run(&writable),
        first,
        "made again after a plan with other roots"
    );
    assert_eq!(run(&wider), third);
    // One more read-only path (a config include), the same roots, pins and files to
    // sweep; then the config as it was: the first plan again, still cached.
    let config = fs::read_to_string(s.ws.join(".git/config")).unwrap();
    fs::write(s.ws.join("inc.cfg"), "[user]\n\tname = t\n").unwrap();
    let include = format!(
        "{config}[include]\n\tpath = {}\n",
        s.ws.join("inc.cfg").display()
    );
    fs::write(s.ws.join(".git/config"), include).unwrap();
    assert_ne!(run(&writable), first);
    fs::write(s.ws.join(".git/config"), &config).unwrap();
    assert_eq!(
        run(&writable),
        first,
        "made again after a plan with other mounts"
    );

    // `.git` made anew: the same paths, another inode.
    fs::rename(s.ws.join(".git"), s.root.join("old-git")).unwrap();
    fs::create_dir_all(s.ws.join(".git/hooks")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    fs::write(s.ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let fresh = run(&writable);
    assert_ne!(fresh, first);
    let open: Vec<String> = fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert!(
        !open.contains(&first),
        "the stale namespaces are still held"
    );
    assert!(open.contains(&fresh), "{open:?}");
    assert!(open.contains(&other), "{open:?}");
}

/// A command prepared, then `.git` made anew before it starts (another process racing
/// it): joining the namespaces finds a path of the plan changed and the spawn fails
/// as stale, rather than running the command in a view of the old `.git`. The next
/// preparation makes them anew.
#[test]
fn a_plan_gone_stale_before_its_command_starts_is_refused_as_stale() {
    use flower::tools::sandbox::{self, SandboxPolicy};
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let policy = SandboxPolicy::standard();
    let prepared = sandbox::prepare(&policy, &s.ws).unwrap().unwrap();
    assert!(prepared.contains_processes(), "no user namespaces here");
    fs::rename(s.ws.join(".git"), s.root.join("old-git")).unwrap();
    fs::create_dir_all(s.ws.join(".git/hooks")).unwrap();
    fs::write(s.ws.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    fs::write(s.ws.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let spawn = |prepared| run_confined(prepared, &s.ws, &["touch", "ran"]).map(|_| ());
    let err = spawn(prepared).unwrap_err();
    assert!(sandbox::is_stale(&err), "{err}");
    assert!(!s.ws.join("ran").exists());
    assert!(!sandbox::is_stale(&std::io::Error::from_raw_os_error(
        libc::EPERM
    )));
    spawn(sandbox::prepare(&policy, &s.ws).unwrap().unwrap()).unwrap();
    assert!(s.ws.join("ran").exists());
}

/// The command runs as flower's own user and group, mapped one to one into the
/// sandbox's user namespace (never as the overflow id), with `setgroups` denied there.
#[test]
fn a_command_runs_as_flowers_own_user_with_setgroups_denied() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    let text = one(
        &s,
        "id -u; id -g; cat /proc/self/setgroups; cat /proc/self/uid_map",
    );
    // SAFETY: geteuid and getegid only read.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..3],
        [uid.to_string(), gid.to_string(), "deny".to_string()],
        "{text}"
    );
    let map: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        map,
        [uid.to_string(), uid.to_string(), "1".to_string()],
        "{text}"
    );
}
