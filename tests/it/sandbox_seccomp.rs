//! The system calls the sandbox refuses beyond the mount API (issue 40, item 4): what
//! Docker's default seccomp profile refuses and a build or a test never needs, and
//! (x86_64) every x32 system call. Each is called for real by a sandboxed command
//! (python's ctypes, numbers per architecture), with arguments that without the filter
//! get an answer other than the refusal (`EFAULT` for a null pointer, a descriptor, a
//! keyring id, `EINVAL`; `ENOSYS` or the pid for x32).

use crate::sandbox::{content, landlock_or_skip, run_commands, setup};
use serde_json::json;

/// A python script that makes each call and prints `name errno` (0: it worked).
const PROBE: &str = r#"
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
NR = {
    "x86_64": dict(perf_event_open=298, userfaultfd=323, keyctl=250, add_key=248,
                   request_key=249, clone3=435, clone=56, unshare=272),
    "aarch64": dict(perf_event_open=241, userfaultfd=282, keyctl=219, add_key=217,
                    request_key=218, clone3=435, clone=220, unshare=97),
}[platform.machine()]
CLONE_NEWUSER = 0x10000000
SIGCHLD = 17
def call(name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(NR[name], *[ctypes.c_long(a) for a in args])
    if r == 0 and name == "clone":
        os._exit(0)
    if r > 0 and name == "clone":
        os.waitpid(r, 0)
    print(name, ctypes.get_errno() if r < 0 else 0)
call("perf_event_open", 0, 0, -1, -1, 0)
call("userfaultfd", 1)
call("keyctl", 0, -3, 0)
call("add_key", 0, 0, 0, 0, 0)
call("request_key", 0, 0, 0, 0)
call("clone3", 0, 0)
call("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
call("unshare", CLONE_NEWUSER)
if platform.machine() == "x86_64":
    # getpid through the x32 ABI (bit 30): ENOSYS on a kernel without x32, the pid on
    # one with it; refused by a filter of its own (the main one matches x86_64 numbers).
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(0x40000000 + 39))
    print("x32", ctypes.get_errno() if r < 0 else 0)
"#;

#[test]
fn what_a_build_never_needs_is_refused() {
    if !landlock_or_skip() {
        return;
    }
    let s = setup();
    std::fs::write(s.ws.join("probe.py"), PROBE).unwrap();
    let commands = vec![
        "python3 probe.py".to_string(),
        "unshare -U true && echo nested-user-namespace".to_string(),
        // What is still allowed: a process, a thread, a pipe.
        "python3 -c 'import os, threading; t = threading.Thread(target=print); t.start(); \
         t.join(); print(os.fork() and \"forked\")' && echo ok"
            .to_string(),
    ];
    let (out, results) = run_commands(&s, &commands, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probe = content(&results[0]);
    let eperm = libc::EPERM.to_string();
    let enosys = libc::ENOSYS.to_string();
    for (name, errno) in [
        ("perf_event_open", &eperm),
        ("userfaultfd", &eperm),
        ("keyctl", &eperm),
        ("add_key", &eperm),
        ("request_key", &eperm),
        // As Docker does: libc then falls back to clone, whose flags can be checked.
        ("clone3", &enosys),
        ("clone", &eperm),
        ("unshare", &eperm),
    ]
    .into_iter()
    .chain(cfg!(target_arch = "x86_64").then_some(("x32", &eperm)))
    {
        assert!(
            probe.lines().any(|l| l == format!("{name} {errno}")),
            "{name} should fail with errno {errno}:\n{probe}"
        );
    }
    let unshare = content(&results[1]);
    assert_eq!(results[1]["is_error"], json!(true), "{unshare}");
    assert!(!unshare.contains("nested-user-namespace"), "{unshare}");
    let allowed = content(&results[2]);
    assert_eq!(results[2]["is_error"], json!(false), "{allowed}");
    assert!(
        allowed.contains("forked") && allowed.contains("ok"),
        "{allowed}"
    );
}
