//! Running a bench's work in a child process and reading what it cost (wall, CPU,
//! peak RSS): shared by the benches that measure the real `flower` binary.

use crate::support::FakeServer;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one child process cost.
pub struct Usage {
    pub wall: Duration,
    /// Peak resident set size, bytes.
    pub max_rss: u64,
    /// User + system CPU time.
    pub cpu: Duration,
    /// The system part of `cpu`.
    pub system: Duration,
    /// Private (anonymous) memory at `exit_group`, bytes: `Anonymous:` of
    /// `/proc/PID/smaps_rollup`, read while the process is stopped on its way out
    /// (ptrace's exit event): heap, stacks, pages written by relocations; not the
    /// binary's or libraries' file-backed pages, which the kernel can drop and share.
    pub private: u64,
}

/// Runs `cmd` to its end and measures it: wall time from spawn to reaping, peak RSS and
/// CPU time. Panics when it fails (a benchmark of a failing run measures nothing).
/// Returns the child's stdout.
///
/// Why a helper process: Linux carries a process's peak RSS across `exec` (the
/// spawning process's high-water mark is folded into the child's `ru_maxrss`), and this
/// bench process grows large (it keeps every request of the long session). So the
/// command is run by a fresh copy of this small bench executable (`--measure-child`),
/// which spawns it, reaps it with `wait4` and prints its rusage; `getrusage`'s
/// `RUSAGE_CHILDREN` would also do for one child, but `wait4` is per child.
///
/// `FLOWER_BENCH_WRAP="perf record -g -o /tmp/p.data"` (or `strace -f -c`…) runs flower
/// under a profiler instead; the figures then include the profiler.
pub fn measure(cmd: Command, dir: &Path) -> (Usage, String) {
    let stdout_path = dir.join(".bench-stdout");
    let stderr_path = dir.join(".bench-stderr");
    let mut helper = Command::new(std::env::current_exe().expect("bench executable"));
    helper
        .arg("--measure-child")
        .arg(&stdout_path)
        .arg(&stderr_path)
        .arg("--");
    if let Ok(wrap) = std::env::var("FLOWER_BENCH_WRAP") {
        helper.args(wrap.split_whitespace());
    }
    helper.arg(cmd.get_program()).args(cmd.get_args());
    // Every measured command is a `flower_cmd`, whose environment is cleared.
    helper.env_clear();
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => helper.env(name, value),
            None => helper.env_remove(name),
        };
    }
    if let Some(cwd) = cmd.get_current_dir() {
        helper.current_dir(cwd);
    }
    let out = helper
        .stdin(Stdio::null())
        .output()
        .expect("run the helper");
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        out.status.success(),
        "flower failed ({})\nstdout: {stdout}\nstderr: {stderr}\nhelper: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| n.parse().expect("helper figure"))
        .collect();
    let [wall_ns, max_rss_kib, cpu_ns, private_kib, system_ns] = figures[..] else {
        panic!("helper printed {figures:?}");
    };
    let usage = Usage {
        wall: Duration::from_nanos(wall_ns),
        max_rss: max_rss_kib * 1024,
        cpu: Duration::from_nanos(cpu_ns),
        system: Duration::from_nanos(system_ns),
        private: private_kib * 1024,
    };
    (usage, stdout)
}

/// `Anonymous:` of `/proc/PID/smaps_rollup`, KiB (0 when unreadable).
fn anonymous_kib(pid: libc::pid_t) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("Anonymous:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The `--measure-child STDOUT STDERR -- PROGRAM ARGS…` mode: runs the program with
/// its output in those files (traced: it stops at its exit, where its private memory
/// is read), reaps it with `wait4`, and prints `wall_ns max_rss_kib cpu_ns
/// private_kib system_ns`; exits non-zero when the program failed.
pub fn measure_child(args: &[String]) -> std::process::ExitCode {
    let [stdout_path, stderr_path, dashes, program, rest @ ..] = args else {
        eprintln!("usage: --measure-child STDOUT STDERR -- PROGRAM [ARGS…]");
        return std::process::ExitCode::from(2);
    };
    assert_eq!(dashes, "--");
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(stderr_path).expect("stderr file"));
    // Traced, so that it stops on its way out with its memory still mapped.
    // SAFETY: PTRACE_TRACEME is async-signal-safe; it only marks this process traced.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value; wait4 fills it for our own child.
    let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut private_kib = 0u64;
    let reaped = loop {
        // SAFETY: plain FFI call with pointers to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut rusage) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if r != pid || !libc::WIFSTOPPED(status) {
            break r;
        }
        let signal = libc::WSTOPSIG(status);
        let event = status >> 16;
        let mut deliver = 0;
        if event == libc::PTRACE_EVENT_EXIT {
            private_kib = anonymous_kib(pid);
        } else if signal == libc::SIGTRAP && event == 0 && private_kib == 0 {
            // The stop after exec: from now on, stop at the exit too.
            // SAFETY: plain FFI call on our stopped tracee.
            unsafe {
                libc::ptrace(
                    libc::PTRACE_SETOPTIONS,
                    pid,
                    0,
                    libc::PTRACE_O_TRACEEXIT as libc::c_long,
                )
            };
        } else {
            deliver = signal;
        }
        // SAFETY: plain FFI call on our stopped tracee.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, deliver as libc::c_long) };
    };
    let wall = start.elapsed();
    // Reaped: `Child` must not be waited on again (dropping it does not wait).
    drop(child);
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    // Linux reports ru_maxrss in KiB.
    println!(
        "{} {} {} {} {}",
        wall.as_nanos(),
        rusage.ru_maxrss,
        ns(rusage.ru_utime) + ns(rusage.ru_stime),
        private_kib,
        ns(rusage.ru_stime)
    );
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("status {status:#x}");
        std::process::ExitCode::FAILURE
    }
}

pub fn flower_cmd(flower: &str, server: &FakeServer, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(flower);
    // A clean environment, as a user's shell gives: the `LD_LIBRARY_PATH` cargo sets
    // for benches (tree-sitter build dirs) made the loader fail ~100 opens per start.
    cmd.env_clear();
    for var in ["PATH", "HOME", "TMPDIR", "LANG", "USER"] {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    server.configure(&mut cmd);
    cmd.current_dir(dir)
        .args(args)
        .env("FLOWER_MAX_ATTEMPTS", "1")
        .env("NO_COLOR", "1");
    cmd
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The parts of a bench named on its command line (`cargo bench --bench NAME -- PART…`).
pub struct Parts(Vec<String>);

impl Parts {
    /// Whether `part` is to run: it was named, or none was.
    pub fn wants(&self, part: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|p| p == part)
    }

    /// What was named, in order (for a bench that reads more than part names).
    pub fn named(&self) -> &[String] {
        &self.0
    }
}

/// How a bench executable was started: as the `--measure-child` helper of [`measure`]
/// (`Err`, its exit code: the bench ends with it), or as the bench (`Ok`, the parts asked
/// for; arguments starting `--` are cargo's, not parts).
pub fn bench_or_helper() -> Result<Parts, std::process::ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure-child") {
        return Err(measure_child(&args[1..]));
    }
    Ok(Parts(
        args.into_iter().filter(|a| !a.starts_with("--")).collect(),
    ))
}

/// The flower binary a bench measures: `FLOWER_BENCH_BIN=/path/to/flower` for another
/// build (e.g. before a change), else the one cargo built, with a warning when that is
/// not a release build.
pub fn flower_under_test() -> String {
    if let Ok(bin) = std::env::var("FLOWER_BENCH_BIN") {
        return bin;
    }
    let built = env!("CARGO_BIN_EXE_flower");
    if !built.contains("/release/") {
        println!("warning: {built} is not a release build; run `cargo bench`");
    }
    built.to_string()
}
