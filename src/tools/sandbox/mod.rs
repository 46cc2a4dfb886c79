//! The kernel sandbox around every Bash command (Linux). `docs/sandbox.md` states what it
//! contains and what it does not; this is how.
//!
//! A command runs in layers, each made by a module of its own:
//! - [`namespaces`] + [`mounts`]: a user and a mount namespace (made once per process and
//!   joined with `setns`) in which the whole file system is read-only except the
//!   writable roots (the workspace, the temp directories), the git files that run code
//!   ([`git`]) are read-only inside those, and the directories that lead to them are
//!   mount points (so they cannot be renamed away). A network namespace of its own:
//!   with `--no-network` its loopback is down; otherwise [`proxy`] is its only way out.
//! - [`pid`]: a PID namespace per command, whose init is the shell: when it ends, the
//!   kernel kills every process the command started, wherever it went (`setsid`, `&`).
//!   A fresh `/proc` shows only the command's processes.
//! - The command is the leader of a new session without a controlling terminal.
//! - [`landlock`]: the second file-system layer (write only beneath the writable roots),
//!   signal scoping and, under `--no-network`, abstract and (Landlock ABI 9) path UNIX
//!   socket scoping, at the highest Landlock ABI the kernel offers.
//! - [`caps`]: every capability dropped (bounding set included), `no_new_privs`.
//! - [`seccomp`]: refuses the mount API, `mknod` of devices, `TIOCSTI`/`TIOCLINUX`,
//!   `perf_event_open`, `userfaultfd`, the keyrings, a nested user namespace,
//!   io_uring, and under `--no-network` (when Landlock cannot scope path sockets)
//!   `socket(AF_UNIX, …)`.
//!
//! Everything is prepared in the parent (paths opened, the Landlock ruleset built, the
//! seccomp program compiled, the namespaces made); between fork and exec the children
//! only make system calls.

mod caps;
mod git;
mod landlock;
mod mounts;
mod namespaces;
mod pid;
pub mod proxy;
mod seccomp;

pub use namespaces::{forget_namespaces, is_stale};
pub use proxy::{NetworkRules, Refusals};

use crate::tools::protected::{Absent, Kept, Protection};
use namespaces::{Namespaces, Plan};
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// How Bash commands are confined. The library default is no sandbox; the binary turns
/// it on (see the README).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    /// Confine commands (Linux Landlock). Off: commands run unconfined.
    pub enabled: bool,
    /// Refuse to run a command when the kernel cannot confine it.
    pub required: bool,
    /// Commands may use the network (through the proxy, under `net`).
    pub network: bool,
    /// What the proxy lets commands reach (`sandbox.network.*`).
    pub net: NetworkRules,
    /// The workspace is writable (agents with Write or Edit rights).
    pub workspace_writable: bool,
    /// Keep the files git reads for code execution (hooks, config …) read-only.
    pub protect_git: bool,
    /// More directories writable like the workspace (and only when it is): a settings
    /// file's `permissions.additionalDirectories`. The file tools reach them too.
    pub additional_dirs: Vec<PathBuf>,
    /// Where the user's git configuration lives, kept read-only with `protect_git`.
    pub user_git: UserGitConfig,
    /// The protected paths' opt-outs and the run's record ([`crate::tools::protected`]),
    /// which bind the file tools too, with or without the sandbox.
    pub protect: Protection,
    /// Variables of flower's environment that commands, hooks and MCP servers do not
    /// inherit, with or without the sandbox: its secrets, resolved by the settings
    /// ([`crate::tools::process::withheld_names`]; the sandbox never reads the
    /// environment).
    pub withheld_env: Vec<String>,
}

/// Where the user's git configuration lives: resolved by the settings from `HOME`,
/// `XDG_CONFIG_HOME` and `GIT_CONFIG_GLOBAL` (the sandbox never reads the environment).
/// Empty: only the system's `/etc/gitconfig`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserGitConfig {
    /// `~/.gitconfig`, and `~/.config/git` when `xdg_config_home` is not set.
    pub home: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    /// `GIT_CONFIG_GLOBAL`: a file git reads instead of `~/.gitconfig`.
    pub global: Option<PathBuf>,
}

impl SandboxPolicy {
    /// The sandbox flower's binary uses by default: on, network on, git protected.
    pub fn standard() -> Self {
        SandboxPolicy {
            enabled: true,
            required: false,
            network: true,
            net: NetworkRules::default(),
            workspace_writable: true,
            protect_git: true,
            additional_dirs: Vec::new(),
            user_git: UserGitConfig::default(),
            protect: Protection::default(),
            withheld_env: Vec::new(),
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
    /// Landlock is there but older than ABI 5 (device ioctls unchecked).
    Partial(String),
    /// No Landlock: why.
    Missing(String),
}

/// Probes the kernel once per process.
pub fn support() -> Support {
    match landlock_abi() {
        Ok(abi) if abi < 5 => Support::Partial(format!("Landlock ABI {abi}")),
        Ok(_) => Support::Full,
        Err(why) => Support::Missing(why.to_string()),
    }
}

/// Why the kernel offers no Landlock.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NoLandlock {
    #[error("内核没有 Landlock")]
    NotBuilt,
    #[error("内核关闭了 Landlock")]
    Disabled,
    #[error("Landlock 探测失败: {0}")]
    Probe(#[source] Arc<std::io::Error>),
}

/// The Landlock ABI version this kernel offers, or why there is none.
pub fn landlock_abi() -> Result<i32, NoLandlock> {
    static ABI: OnceLock<Result<i32, NoLandlock>> = OnceLock::new();
    ABI.get_or_init(|| {
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
            return Err(match e.raw_os_error() {
                Some(libc::ENOSYS) => NoLandlock::NotBuilt,
                Some(libc::EOPNOTSUPP) => NoLandlock::Disabled,
                _ => NoLandlock::Probe(Arc::new(e)),
            });
        }
        Ok(i32::try_from(abi).unwrap_or(i32::MAX))
    })
    .clone()
}

/// Why a command cannot be sandboxed as asked.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("要求沙箱,可沙箱用不了:{0}")]
    Unavailable(String),
    /// `why` quotes the error of the kernel interface behind it, kept as `source`.
    #[error("沙箱建不起来:{why}")]
    Build {
        why: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl SandboxError {
    /// The sandbox cannot be built because of `source`; `why` quotes it.
    pub(crate) fn build(
        why: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> SandboxError {
        SandboxError::Build {
            why,
            source: Box::new(source),
        }
    }
}

fn cstring(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| SandboxError::build(format!("{} holds a NUL byte", p.display()), e))
}

/// The directories a command may write to, canonical and existing: the workspace
/// and the additional directories (when writable) and the temp directories.
fn writable_roots(policy: &SandboxPolicy, workspace: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if policy.workspace_writable {
        out.push(workspace.to_path_buf());
        for dir in &policy.additional_dirs {
            if let Ok(c) = dir.canonicalize()
                && !out.contains(&c)
            {
                out.push(c);
            }
        }
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

/// Everything the children need, prepared before fork.
pub struct Prepared {
    ruleset: Option<OwnedFd>,
    seccomp: Vec<seccomp::Program>,
    /// The namespaces the command joins, made once per process ([`namespaces`]).
    joined: Option<Arc<Namespaces>>,
    /// The proxy's port on the namespace's loopback, set in the command's variables.
    proxy_port: Option<u16>,
    refusals: Refusals,
    /// The workspace: `setns` into a mount namespace resets the working directory.
    cwd: CString,
    /// The namespaces could not be made: the child fails with this errno, or only warns.
    refuse: Option<i32>,
    warn: bool,
    /// Files the command must not leave behind.
    absent: Vec<Absent>,
    /// The protected files as they were, when no mount keeps them read-only.
    kept: Kept,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("landlock", &self.ruleset.is_some())
            .field("seccomp", &self.seccomp.len())
            .field("namespaces", &self.joined.is_some())
            .finish()
    }
}

/// Written to the command's stderr when the namespaces cannot be made.
const WARNING: &[u8] = b"flower: warning: no user namespace, so this command sees the machine \
writable where Landlock allows it, protected files are only put back after it (git's hooks \
not at all), processes it leaves behind are not killed with it, and it has the host's \
network, not flower's proxy\n";

/// Prepares the sandbox for one command in `workspace`. `Ok(None)`: run unconfined
/// (sandbox off, or unavailable and not required).
pub fn prepare(policy: &SandboxPolicy, workspace: &Path) -> Result<Option<Prepared>, SandboxError> {
    prepare_with(policy, workspace, &support())
}

/// [`prepare`] for a given kernel support: without Landlock, a required sandbox is
/// an error, otherwise the command runs with the other layers only (the caller has
/// said so once).
pub fn prepare_with(
    policy: &SandboxPolicy,
    workspace: &Path,
    support: &Support,
) -> Result<Option<Prepared>, SandboxError> {
    if !policy.enabled {
        return Ok(None);
    }
    let abi = match support {
        Support::Missing(why) if policy.required => {
            return Err(SandboxError::Unavailable(why.clone()));
        }
        Support::Missing(_) => 0,
        _ => landlock_abi().unwrap_or(0),
    };
    let roots = writable_roots(policy, workspace);
    let ruleset = if abi > 0 {
        landlock::ruleset(policy, workspace, &roots)?
    } else {
        None
    };
    if ruleset.is_none() && policy.required {
        return Err(SandboxError::Unavailable(
            "Landlock refused the ruleset".into(),
        ));
    }
    // Landlock ABI 9 scopes path UNIX sockets to the workspace; before it, seccomp
    // refuses to create any (unless a rule allows them all).
    let unix_by_landlock = ruleset.is_some() && abi >= landlock::RESOLVE_UNIX_ABI;
    let all_unix = policy.network && policy.net.all_unix_sockets;
    let mut seccomp = seccomp::programs(!unix_by_landlock && !all_unix)?;
    if policy.network && !policy.net.local_binding {
        seccomp.push(seccomp::refuse_listen()?);
    }
    let plan = Plan::new(policy, workspace, &roots)?;
    let (joined, refuse, warn) = match namespaces::get(&plan) {
        Ok(ns) => (Some(ns), None, false),
        // The network cannot be turned off or held to rules the user wrote, or the
        // workspace cannot be made read-only: refuse rather than run with it.
        Err(e)
            if !policy.network
                || plan.workspace_needs_mount()
                || policy.net != NetworkRules::default() =>
        {
            (None, Some(e.raw_os_error().unwrap_or(libc::EPERM)), false)
        }
        Err(_) => (None, None, true),
    };
    let proxy_port = joined.as_ref().and_then(|ns| ns.proxy_port());
    let refusals = joined.as_ref().map(|ns| ns.refusals()).unwrap_or_default();
    Ok(Some(Prepared {
        ruleset,
        seccomp,
        joined,
        proxy_port,
        refusals,
        cwd: cstring(workspace)?,
        refuse,
        warn,
        // Without its mounts, the protected files are put back after the command.
        kept: if warn {
            Kept::take(&plan.kept_files)
        } else {
            Kept::default()
        },
        absent: plan.absent,
    }))
}

/// Files a command must not leave behind, removed after it ends (see [`Absent`]), and
/// protected files it must not change ([`Kept`]).
#[derive(Debug, Clone, Default)]
pub struct Sweep(Vec<Absent>, Kept);

impl Sweep {
    /// Removes what the command created of them and puts back what it changed; one
    /// line for each, for its result.
    pub fn run(&self) -> Vec<String> {
        let mut notes = self.1.check();
        notes.extend(self.0.iter().filter_map(Absent::sweep));
        notes
    }
}

/// Every path git's protection names for `workspace`, existing or not (what the file
/// tools refuse to write); creates nothing.
pub(crate) fn git_named(workspace: &Path, user: &UserGitConfig) -> Vec<PathBuf> {
    git::named(workspace, user)
}

impl Prepared {
    /// What to remove after the command (see [`Sweep`]).
    pub fn sweep(&self) -> Sweep {
        Sweep(self.absent.clone(), self.kept.clone())
    }

    /// The proxy's refusals while the command runs, for its result.
    pub fn refusals(&self) -> Refusals {
        self.refusals.clone()
    }

    /// Whether Landlock confines the command.
    pub fn landlocked(&self) -> bool {
        self.ruleset.is_some()
    }

    /// Whether the command runs in a PID namespace of its own, so that every process
    /// it starts dies with it (else only its process group is killed).
    pub fn contains_processes(&self) -> bool {
        self.joined.is_some()
    }

    /// Runs in the child between fork and exec. Only system calls: no allocation, no
    /// locks. With a PID namespace this forks once more: the child forked by the caller
    /// stays outside as the command's supervisor and never returns (see [`pid`]).
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        new_session()?;
        if let Some(ns) = &self.joined {
            ns.enter(&self.cwd)?;
            pid::enter_new_namespace()?;
            // The fresh /proc is a nicety: where the kernel refuses it (a container
            // masking parts of /proc), the host's stays.
            let _ = mounts::fresh_proc();
        } else if let Some(errno) = self.refuse {
            return Err(std::io::Error::from_raw_os_error(errno));
        } else if self.warn {
            // SAFETY: write to our own stderr.
            unsafe {
                libc::write(2, WARNING.as_ptr().cast(), WARNING.len());
            }
        }
        // SAFETY: prctl only sets a flag of this process.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = &self.ruleset {
            // SAFETY: a plain system call; the ruleset fd was created before fork.
            if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) } != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        caps::drop_all()?;
        for program in &self.seccomp {
            program.install()?;
        }
        Ok(())
    }
}

/// Sets what `cmd`'s child does between fork and exec: the confinement `prepared`
/// holds, or unconfined (`None`) only a session of its own; either way, no descriptor
/// above 2 survives the exec.
pub fn confine(cmd: &mut tokio::process::Command, prepared: Option<Prepared>) {
    use crate::tools::process::close_inherited_descriptors;
    if let Some(port) = prepared.as_ref().and_then(|p| p.proxy_port) {
        cmd.envs(proxy::proxy_env(port));
    }
    match prepared {
        // SAFETY: the closure only makes system calls (see `Prepared::apply_in_child`).
        Some(prepared) => unsafe {
            cmd.pre_exec(move || {
                prepared.apply_in_child()?;
                close_inherited_descriptors()
            });
        },
        // SAFETY: setsid and close_range are system calls.
        None => unsafe {
            cmd.pre_exec(|| {
                new_session()?;
                close_inherited_descriptors()
            });
        },
    }
}

/// Makes the child the leader of a new session without a controlling terminal: it
/// cannot open `/dev/tty`, and the user's terminal is not its terminal.
pub fn new_session() -> std::io::Result<()> {
    // SAFETY: setsid is a plain system call.
    if unsafe { libc::setsid() } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
