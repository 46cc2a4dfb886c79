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
//! Everything is prepared in the parent (paths opened, the Landlock ruleset built, the
//! map and mount strings formatted); between fork and exec the child only makes
//! system calls: `unshare`, `write` of the id maps, `mount`, `prctl(NO_NEW_PRIVS)` and
//! `landlock_restrict_self`.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr,
};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
    namespaces: libc::c_int,
    uid_map: CString,
    gid_map: CString,
    setgroups: CString,
    uid_map_path: CString,
    gid_map_path: CString,
    /// (path, extra mount flags to keep) for read-only bind mounts.
    read_only: Vec<(CString, libc::c_ulong)>,
    root: CString,
    /// Written to the command's stderr when the namespace cannot be made.
    warning: &'static [u8],
    network_off: bool,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("landlock", &self.ruleset.is_some())
            .field("namespaces", &self.namespaces)
            .field("read_only", &self.read_only)
            .finish()
    }
}

fn cstring(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Build(format!("{} holds a NUL byte", p.display())))
}

/// The paths a command may write to.
fn writable(policy: &SandboxPolicy, workspace: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if policy.workspace_writable {
        out.push(workspace.to_path_buf());
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
    let read_only: Vec<(CString, libc::c_ulong)> = if policy.protect_git {
        git_paths(workspace)
            .into_iter()
            .filter(|p| roots.iter().any(|r| p.starts_with(r)))
            .filter_map(|p| Some((cstring(&p).ok()?, locked_flags(&p))))
            .collect()
    } else {
        Vec::new()
    };
    let mut namespaces = 0;
    if !read_only.is_empty() {
        namespaces |= libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    }
    if !policy.network {
        namespaces |= libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let c = |s: String| CString::new(s).map_err(|e| SandboxError::Build(e.to_string()));
    Ok(Some(Prepared {
        ruleset,
        namespaces,
        uid_map: c(format!("{uid} {uid} 1"))?,
        gid_map: c(format!("{gid} {gid} 1"))?,
        setgroups: c("deny".into())?,
        uid_map_path: c("/proc/self/uid_map".into())?,
        gid_map_path: c("/proc/self/gid_map".into())?,
        read_only,
        root: c("/".into())?,
        warning: b"flower: warning: no user namespace, so .git/hooks and .git/config are not \
                   protected in this command\n",
        network_off: !policy.network,
    }))
}

impl Prepared {
    /// Whether Landlock confines the command.
    pub fn landlocked(&self) -> bool {
        self.ruleset.is_some()
    }

    /// Runs in the child between fork and exec. Only system calls: no allocation, no
    /// locks.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        if self.namespaces != 0 {
            // SAFETY: unshare, open, write, close and mount are async-signal-safe
            // system calls on strings prepared before fork.
            let entered = unsafe { libc::unshare(self.namespaces) } == 0;
            if entered {
                write_file(self.setgroups_path(), &self.setgroups)?;
                write_file(&self.uid_map_path, &self.uid_map)?;
                write_file(&self.gid_map_path, &self.gid_map)?;
                if self.namespaces & libc::CLONE_NEWNS != 0 {
                    self.mount_read_only()?;
                }
            } else if self.network_off {
                // The network cannot be turned off: refuse rather than run with it.
                return Err(std::io::Error::last_os_error());
            } else {
                // SAFETY: write to our own stderr.
                unsafe {
                    libc::write(2, self.warning.as_ptr().cast(), self.warning.len());
                }
            }
        }
        if let Some(fd) = &self.ruleset {
            // SAFETY: plain system calls; the ruleset fd was created before fork.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    fn setgroups_path(&self) -> &'static std::ffi::CStr {
        c"/proc/self/setgroups"
    }

    fn mount_read_only(&self) -> std::io::Result<()> {
        // SAFETY: mount on NUL-terminated strings prepared before fork.
        unsafe {
            if libc::mount(
                std::ptr::null(),
                self.root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for (path, keep) in &self.read_only {
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
