//! The kernel sandbox around every Bash command (Linux).
//!
//! A command and every process it starts run under:
//! - **Landlock** (file system): read and execute everywhere; write (create, delete,
//!   rename, truncate …) only beneath the workspace (unless the agent has no Write/Edit
//!   rights: then it is read-only too), the system temp directories (`/tmp`,
//!   `/var/tmp`, `/dev/shm`, the process's temp dir) and the `/dev/null`-like devices
//!   (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`, `/dev/ptmx`, `/dev/pts`).
//! - **A private mount namespace** inside a new user namespace, where `.git/hooks` and
//!   `.git/config` of the workspace and the user's git config files (`~/.gitconfig`,
//!   `~/.config/git`) are bind-mounted read-only onto themselves. Landlock only adds
//!   rights along a path, so it cannot take write access to a subpath of the writable
//!   workspace away; a read-only bind mount can (a rename over it fails with EBUSY,
//!   writes with EROFS). When user namespaces are not available and the network is
//!   on, the command still runs under Landlock, and its output starts with a warning
//!   that those files are not protected.
//! - **No network** when asked: a new network namespace (`CLONE_NEWNET`, in the same
//!   user namespace) with only a loopback device that is down, so nothing can be
//!   reached, not even the host's loopback. When that namespace cannot be made, the
//!   command is refused rather than run with the network.
//!
//! The namespaces are made once per process (per set of protected paths) by a short-lived
//! forked child, and kept by their `/proc/PID/ns/*` fds; each command's child `setns`
//! into them (a few µs instead of several ms for unshare, id maps and mounts) and checks
//! that every protected path is the file outside, on a read-only mount, else fails with
//! `ESTALE` and the caller makes them again ([`forget_namespaces`]).
//!
//! Everything is prepared in the parent (paths opened, the Landlock ruleset built, the
//! namespaces made); between fork and exec the child only makes system calls: `setns`,
//! `chdir`, `stat`/`statvfs`, `prctl(NO_NEW_PRIVS)` and `landlock_restrict_self`.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr,
};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The newest Landlock ABI this build knows; older kernels get what they support.
const TARGET_ABI: ABI = ABI::V5;

/// How Bash commands are confined. The library default is no sandbox; the binary turns
/// it on (see the README).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    /// Confine commands (Linux Landlock). Off: commands run unconfined.
    pub enabled: bool,
    /// Refuse to run a command when the kernel cannot confine it.
    pub required: bool,
    /// Commands may use the network.
    pub network: bool,
    /// The workspace is writable (agents with Write or Edit rights).
    pub workspace_writable: bool,
    /// Keep `.git/hooks`, `.git/config` and the user's git config read-only.
    pub protect_git: bool,
    /// More directories writable like the workspace (and only when it is): a settings
    /// file's `permissions.additionalDirectories`.
    pub additional_dirs: Vec<PathBuf>,
}

impl SandboxPolicy {
    /// The sandbox flower's binary uses by default: on, network on, git protected.
    pub fn standard() -> Self {
        SandboxPolicy {
            enabled: true,
            required: false,
            network: true,
            workspace_writable: true,
            protect_git: true,
            additional_dirs: Vec::new(),
        }
    }

    /// One Chinese line for the user: `沙箱 landlock(工作区可写) · 网络 开`.
    pub fn describe(&self) -> String {
        self.describe_with(&support())
    }

    /// [`describe`](Self::describe) for a given kernel support.
    pub fn describe_with(&self, support: &Support) -> String {
        let net = if self.network { "开" } else { "关" };
        if !self.enabled {
            return format!("沙箱 关 · 网络 {net}");
        }
        let ws = if self.workspace_writable {
            "工作区可写"
        } else {
            "工作区只读"
        };
        match support {
            Support::Full | Support::Partial(_) => format!("沙箱 landlock({ws}) · 网络 {net}"),
            Support::Missing(why) => {
                if self.required {
                    format!("沙箱 不可用({why}),命令一律拒绝 · 网络 {net}")
                } else {
                    format!("沙箱 不可用({why}),命令不受限 · 网络 {net}")
                }
            }
        }
    }
}

/// What this kernel offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    Full,
    /// Landlock is there but older than this build's target (some rights unchecked).
    Partial(String),
    /// No Landlock: why.
    Missing(String),
}

/// Probes the kernel once per process.
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(probe).clone()
}

fn probe() -> Support {
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION
    // flag only returns the ABI version (or an error); it creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if abi < 0 {
        let e = std::io::Error::last_os_error();
        return Support::Missing(match e.raw_os_error() {
            Some(libc::ENOSYS) => "内核没有 Landlock".into(),
            Some(libc::EOPNOTSUPP) => "内核关闭了 Landlock".into(),
            _ => format!("Landlock 探测失败: {e}"),
        });
    }
    if abi < 5 {
        Support::Partial(format!("Landlock ABI {abi}"))
    } else {
        Support::Full
    }
}

/// Why a command cannot be sandboxed as asked.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the sandbox is required but unavailable: {0}")]
    Unavailable(String),
    #[error("cannot build the sandbox: {0}")]
    Build(String),
}

/// Everything the child needs, prepared before fork.
pub struct Prepared {
    ruleset: Option<OwnedFd>,
    /// The namespaces the command joins, made once per process ([`namespaces`]).
    joined: Option<Arc<Namespaces>>,
    /// The workspace: `setns` into a mount namespace resets the working directory.
    cwd: CString,
    /// (path, dev, inode) of each protected path outside; the child checks that it
    /// sees the same file there, on a read-only mount.
    expect: Vec<(CString, u64, u64)>,
    /// The namespaces could not be made: the child fails with this errno (no network
    /// asked) or only warns.
    refuse: Option<i32>,
    warn: bool,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("landlock", &self.ruleset.is_some())
            .field("namespaces", &self.joined.as_ref().map(|n| n.flags))
            .field("expect", &self.expect)
            .finish()
    }
}

/// Written to the command's stderr when the namespace cannot be made.
const WARNING: &[u8] = b"flower: warning: no user namespace, so .git/hooks and .git/config are \
not protected in this command\n";

fn cstring(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Build(format!("{} holds a NUL byte", p.display())))
}

/// The paths a command may write to.
fn writable(policy: &SandboxPolicy, workspace: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if policy.workspace_writable {
        out.push(workspace.to_path_buf());
        out.extend(policy.additional_dirs.iter().cloned());
    }
    for p in [
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
        std::env::temp_dir(),
    ] {
        if let Ok(c) = p.canonicalize()
            && !out.contains(&c)
        {
            out.push(c);
        }
    }
    out
}

/// `/dev/null`-like devices: readable and writable, nothing else.
const DEVICES: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/random",
];

fn landlock_ruleset(
    policy: &SandboxPolicy,
    workspace: &Path,
) -> Result<Option<OwnedFd>, SandboxError> {
    let build = |e: &dyn std::fmt::Display| SandboxError::Build(e.to_string());
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::from_read(TARGET_ABI);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| build(&e))?
        .create()
        .map_err(|e| build(&e))?
        .add_rule(PathBeneath::new(
            PathFd::new("/").map_err(|e| build(&e))?,
            read,
        ))
        .map_err(|e| build(&e))?;
    for dir in writable(policy, workspace) {
        if let Ok(fd) = PathFd::new(&dir) {
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, all))
                .map_err(|e| build(&e))?;
        }
    }
    for dev in DEVICES {
        if let Ok(fd) = PathFd::new(dev) {
            // Directories (/dev/pts) take directory rights too; files only file rights.
            let rights = if Path::new(dev).is_dir() {
                device | AccessFs::ReadDir
            } else {
                device
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, rights))
                .map_err(|e| build(&e))?;
        }
    }
    Ok(ruleset.into())
}

/// The git files kept read-only, those that exist. An existing repository without a
/// hooks directory gets an empty one, so that it can be protected.
fn git_paths(workspace: &Path) -> Vec<PathBuf> {
    let git = workspace.join(".git");
    let mut out = Vec::new();
    if git.is_dir() {
        let hooks = git.join("hooks");
        if !hooks.exists() {
            let _ = std::fs::create_dir(&hooks);
        }
        out.push(hooks);
        out.push(git.join("config"));
    }
    if let Some(home) = std::env::home_dir() {
        out.push(home.join(".gitconfig"));
        out.push(home.join(".config").join("git"));
    }
    out.retain(|p| p.exists());
    out
}

/// The mount flags of the mount holding `p` that a remount in a user namespace must
/// keep (the kernel refuses to drop them).
fn locked_flags(p: &Path) -> libc::c_ulong {
    let Ok(c) = cstring(p) else { return 0 };
    // SAFETY: statvfs writes into the zeroed struct we pass; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let f = st.f_flag;
    let mut out = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            out |= ms_flag;
        }
    }
    out
}

/// Prepares the sandbox for one command in `workspace`. `Ok(None)`: run unconfined
/// (sandbox off, or unavailable and not required).
pub fn prepare(policy: &SandboxPolicy, workspace: &Path) -> Result<Option<Prepared>, SandboxError> {
    prepare_with(policy, workspace, &support())
}

/// [`prepare`] for a given kernel support: without Landlock, a required sandbox is
/// an error and otherwise the command runs unconfined (the caller has said so once).
pub fn prepare_with(
    policy: &SandboxPolicy,
    workspace: &Path,
    support: &Support,
) -> Result<Option<Prepared>, SandboxError> {
    if !policy.enabled {
        return Ok(None);
    }
    let ruleset = match support {
        Support::Missing(why) => {
            if policy.required {
                return Err(SandboxError::Unavailable(why.clone()));
            }
            // Unconfined for files; the namespaces (no network, git files) still apply.
            None
        }
        _ => landlock_ruleset(policy, workspace)?,
    };
    if ruleset.is_none() && policy.required && !matches!(support, Support::Missing(_)) {
        return Err(SandboxError::Unavailable(
            "Landlock refused the ruleset".into(),
        ));
    }
    // Only what Landlock would let the command write needs the mount (and its cost:
    // a user and a mount namespace, several milliseconds).
    let roots = if ruleset.is_some() {
        writable(policy, workspace)
    } else {
        vec![PathBuf::from("/")]
    };
    // A read-only workspace inside a writable temp dir (a project in /tmp) would
    // inherit the temp dir's write rights, and Landlock cannot take them back along the
    // path: it is bind-mounted read-only too, and a command is refused when that mount
    // cannot be made.
    let exposed = ruleset.is_some()
        && !policy.workspace_writable
        && roots.iter().any(|r| workspace.starts_with(r));
    let mut read_only: Vec<(CString, libc::c_ulong)> = Vec::new();
    if exposed {
        read_only.push((cstring(workspace)?, locked_flags(workspace)));
    }
    if policy.protect_git {
        read_only.extend(
            git_paths(workspace)
                .into_iter()
                .filter(|p| roots.iter().any(|r| p.starts_with(r)))
                .filter_map(|p| Some((cstring(&p).ok()?, locked_flags(&p)))),
        );
    }
    let mut flags = 0;
    if !read_only.is_empty() {
        flags |= libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    }
    if !policy.network {
        flags |= libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
    }
    let expect: Vec<(CString, u64, u64)> = read_only
        .iter()
        .filter_map(|(p, _)| {
            let m = std::fs::metadata(std::ffi::OsStr::from_bytes(p.to_bytes())).ok()?;
            use std::os::unix::fs::MetadataExt as _;
            Some((p.clone(), m.dev(), m.ino()))
        })
        .collect();
    let (joined, refuse, warn) = if flags == 0 {
        (None, None, false)
    } else {
        match namespaces(flags, &read_only, &expect) {
            Ok(ns) => (Some(ns), None, false),
            // The network cannot be turned off, or the workspace cannot be made
            // read-only: refuse rather than run with it.
            Err(e) if !policy.network || exposed => {
                (None, Some(e.raw_os_error().unwrap_or(libc::EPERM)), false)
            }
            Err(_) => (None, None, true),
        }
    };
    Ok(Some(Prepared {
        ruleset,
        joined,
        cwd: cstring(workspace)?,
        expect,
        refuse,
        warn,
    }))
}

/// User, mount and network namespaces kept open by their fds (no process stays in
/// them), entered by each command with `setns`.
struct Namespaces {
    flags: libc::c_int,
    /// The protected paths it was made for, with their (dev, inode) then.
    made_for: Vec<(CString, u64, u64)>,
    user: OwnedFd,
    mnt: Option<OwnedFd>,
    net: Option<OwnedFd>,
}

/// Made once per process and kind: unshare, the id maps and the mounts cost several
/// milliseconds, a `setns` a few microseconds.
static CACHE: Mutex<Vec<Arc<Namespaces>>> = Mutex::new(Vec::new());
/// Workspaces (tests make many) kept at most.
const CACHE_MAX: usize = 16;

/// Drops the saved namespaces: a command found a protected path changed inside
/// (`.git` recreated), the next one makes them again.
pub fn forget_namespaces() {
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// Whether a failed spawn means the saved namespaces are stale (see [`forget_namespaces`]).
pub fn is_stale(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESTALE)
}

fn namespaces(
    flags: libc::c_int,
    read_only: &[(CString, libc::c_ulong)],
    expect: &[(CString, u64, u64)],
) -> std::io::Result<Arc<Namespaces>> {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ns) = cache
        .iter()
        .find(|n| n.flags == flags && n.made_for == expect)
    {
        return Ok(ns.clone());
    }
    let ns = Arc::new(make_namespaces(flags, read_only, expect)?);
    // The same paths with other inodes: `.git` was recreated, the old ones are stale.
    cache.retain(|n| n.flags != flags || !same_paths(&n.made_for, expect));
    if cache.len() >= CACHE_MAX {
        cache.remove(0);
    }
    cache.push(ns.clone());
    Ok(ns)
}

fn same_paths(a: &[(CString, u64, u64)], b: &[(CString, u64, u64)]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0)
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two fds, which we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just opened and are owned by nothing else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// Forks a child that unshares, writes its id maps and mounts the git files read-only,
/// then waits while the parent opens its `/proc/PID/ns/*`; then it exits.
fn make_namespaces(
    flags: libc::c_int,
    read_only: &[(CString, libc::c_ulong)],
    expect: &[(CString, u64, u64)],
) -> std::io::Result<Namespaces> {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let c = |s: String| CString::new(s).map_err(std::io::Error::other);
    let setup = Setup {
        flags,
        uid_map: c(format!("{uid} {uid} 1"))?,
        gid_map: c(format!("{gid} {gid} 1"))?,
        read_only,
    };
    let (ready_r, ready_w) = pipe()?;
    let (release_r, release_w) = pipe()?;
    // SAFETY: the child only makes system calls (see `Setup::run`) and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: the forked child; async-signal-safe system calls only.
        unsafe {
            libc::close(ready_r.as_raw_fd());
            libc::close(release_w.as_raw_fd());
            let status: i32 = match setup.run() {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(libc::EPERM),
            };
            libc::write(ready_w.as_raw_fd(), (&raw const status).cast(), 4);
            let mut b = 0u8;
            libc::read(release_r.as_raw_fd(), (&raw mut b).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_w);
    drop(release_r);
    let mut status: i32 = -1;
    let got = loop {
        // SAFETY: reads at most 4 bytes into a live i32.
        let n = unsafe { libc::read(ready_r.as_raw_fd(), (&raw mut status).cast(), 4) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    let open = |kind: &str| -> std::io::Result<OwnedFd> {
        let f = std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))?;
        Ok(OwnedFd::from(f))
    };
    let made = if got != 4 {
        Err(std::io::Error::other("the namespace child died"))
    } else if status != 0 {
        Err(std::io::Error::from_raw_os_error(status))
    } else {
        (|| -> std::io::Result<Namespaces> {
            Ok(Namespaces {
                flags,
                made_for: expect.to_vec(),
                user: open("user")?,
                mnt: (flags & libc::CLONE_NEWNS != 0)
                    .then(|| open("mnt"))
                    .transpose()?,
                net: (flags & libc::CLONE_NEWNET != 0)
                    .then(|| open("net"))
                    .transpose()?,
            })
        })()
    };
    drop(release_w);
    // SAFETY: reaps our own child; it exits once the release pipe is closed.
    unsafe {
        let mut ws = 0;
        while libc::waitpid(pid, &mut ws, 0) < 0
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {}
    }
    made
}

/// What the namespace child does, prepared before fork.
struct Setup<'a> {
    flags: libc::c_int,
    uid_map: CString,
    gid_map: CString,
    read_only: &'a [(CString, libc::c_ulong)],
}

impl Setup<'_> {
    /// Runs in the forked child. Only system calls: no allocation, no locks.
    fn run(&self) -> std::io::Result<()> {
        // SAFETY: unshare is a plain system call.
        if unsafe { libc::unshare(self.flags) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        write_file(c"/proc/self/setgroups", c"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)?;
        if self.flags & libc::CLONE_NEWNS != 0 {
            self.mount_read_only()?;
        }
        Ok(())
    }

    fn mount_read_only(&self) -> std::io::Result<()> {
        // SAFETY: mount on NUL-terminated strings prepared before fork.
        unsafe {
            // Slave, not private: the namespace lives as long as flower, and should
            // still see what the host mounts later; ours do not leak out.
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for (path, keep) in self.read_only {
                if libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::mount(
                    std::ptr::null(),
                    path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

impl Prepared {
    /// Whether Landlock confines the command.
    pub fn landlocked(&self) -> bool {
        self.ruleset.is_some()
    }

    /// Runs in the child between fork and exec. Only system calls: no allocation, no
    /// locks.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        let err = std::io::Error::last_os_error;
        if let Some(ns) = &self.joined {
            // SAFETY: setns, chdir, stat and statvfs are system calls on fds and
            // strings prepared before fork. The child is single-threaded, as joining
            // a user namespace requires.
            unsafe {
                if libc::setns(ns.user.as_raw_fd(), libc::CLONE_NEWUSER) != 0 {
                    return Err(err());
                }
                if let Some(mnt) = &ns.mnt {
                    if libc::setns(mnt.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
                        return Err(err());
                    }
                    if libc::chdir(self.cwd.as_ptr()) != 0 {
                        return Err(err());
                    }
                }
                if let Some(net) = &ns.net
                    && libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) != 0
                {
                    return Err(err());
                }
                // Each protected path must be the file outside, on a read-only mount:
                // a `.git` deleted and made again outside drops the mounts inside.
                for (path, dev, ino) in &self.expect {
                    let mut st: libc::stat = std::mem::zeroed();
                    // statvfs is statfs plus a copy (glibc reads /proc/mounts only on
                    // kernels before 2.6.36, which have no Landlock anyway).
                    let mut fs: libc::statvfs = std::mem::zeroed();
                    if libc::stat(path.as_ptr(), &mut st) != 0
                        || libc::statvfs(path.as_ptr(), &mut fs) != 0
                        || st.st_dev != *dev
                        || st.st_ino != *ino
                        || fs.f_flag & libc::ST_RDONLY == 0
                    {
                        return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
                    }
                }
            }
        } else if let Some(errno) = self.refuse {
            return Err(std::io::Error::from_raw_os_error(errno));
        } else if self.warn {
            // SAFETY: write to our own stderr.
            unsafe {
                libc::write(2, WARNING.as_ptr().cast(), WARNING.len());
            }
        }
        if let Some(fd) = &self.ruleset {
            // SAFETY: plain system calls; the ruleset fd was created before fork.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(err());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                    return Err(err());
                }
            }
        }
        Ok(())
    }
}

fn write_file(path: &std::ffi::CStr, data: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: open/write/close on NUL-terminated strings; the fd is ours.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let bytes = data.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
