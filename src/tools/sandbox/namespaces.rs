//! The user, mount (and network) namespaces commands run in, made once per process and
//! plan by a short-lived forked helper, kept by their `/proc/PID/ns/*` fds and joined by
//! each command with `setns` (a few µs instead of the milliseconds the mounts take).
//!
//! The network namespace is always a new one: with `--no-network` its loopback stays
//! down; otherwise the helper brings it up, listens on `127.0.0.1:0` inside it and
//! hands that socket to flower over `SCM_RIGHTS`, where [`proxy`] serves it: the
//! command's only way out.
//!
//! Before a command joins, it checks that every path of the plan is still the file it
//! was made for (and read-only where it should be); else it fails with `ESTALE` and the
//! caller makes the namespaces again ([`forget_namespaces`]): a `.git` deleted and made
//! anew outside leaves the old mounts on the old inode.

use super::mounts::{self, MAX_ROOTS, View};
use super::proxy::{self, NetworkRules, Proxy, Refusals};
use super::{SandboxError, SandboxPolicy, cstring, git};
use crate::tools::protected::{self, Absent};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A path of the plan as it was when the namespaces were made.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Expect {
    path: CString,
    dev: u64,
    ino: u64,
    read_only: bool,
}

/// What the namespaces of a command are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    flags: libc::c_int,
    writable: Vec<CString>,
    pins: Vec<CString>,
    read_only: Vec<(CString, libc::c_ulong)>,
    expect: Vec<Expect>,
    /// A read-only workspace inside a writable root: only a mount keeps it read-only.
    workspace_mounted: bool,
    /// Files to remove should the command create them (see [`git::Protected::absent`]
    /// and [`protected::for_commands`]).
    pub(super) absent: Vec<Absent>,
    /// The protected regular files ([`protected::Kept`], when the mounts cannot be made).
    pub(super) kept_files: Vec<PathBuf>,
    /// The proxy's rules; `None`: no network at all (loopback down).
    network: Option<NetworkRules>,
}

/// Why a new `commondir` is removed (for the command's result).
const COMMONDIR: &str = "git 会经它读另一个仓库的配置";

/// Whether `p` lies strictly beneath `root`.
fn beneath(p: &Path, root: &Path) -> bool {
    p != root && p.starts_with(root)
}

/// Every directory strictly between a writable root and a target: pinned, so that no
/// target can be renamed away with a parent.
fn leading_dirs(targets: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for t in targets {
        for root in roots.iter().filter(|r| beneath(t, r)) {
            let mut a = t.parent();
            while let Some(dir) = a.filter(|d| beneath(d, root)) {
                out.push(dir.to_path_buf());
                a = dir.parent();
            }
        }
    }
    out
}

/// What `p` is now (`None` when it does not exist).
fn expectation(p: &Path, read_only: bool) -> Result<Option<Expect>, SandboxError> {
    let Ok(m) = std::fs::metadata(p) else {
        return Ok(None);
    };
    Ok(Some(Expect {
        path: cstring(p)?,
        dev: m.dev(),
        ino: m.ino(),
        read_only,
    }))
}

impl Plan {
    pub(super) fn new(
        policy: &SandboxPolicy,
        workspace: &Path,
        roots: &[PathBuf],
    ) -> Result<Plan, SandboxError> {
        let inside_root = |p: &Path| roots.iter().any(|r| p.starts_with(r));
        let workspace_mounted = !policy.workspace_writable && inside_root(workspace);
        let mut read_only: Vec<PathBuf> = Vec::new();
        let mut pinned: Vec<PathBuf> = Vec::new();
        let mut absent: Vec<Absent> = Vec::new();
        if workspace_mounted {
            read_only.push(workspace.to_path_buf());
        }
        // Only what a command could otherwise write needs a mount; inside a read-only
        // workspace, its own mount covers it.
        let needed = |p: &PathBuf| inside_root(p) && !(workspace_mounted && beneath(p, workspace));
        if policy.protect_git {
            let git = git::protected(workspace, roots, &policy.user_git);
            read_only.extend(git.read_only.into_iter().filter(needed));
            pinned.extend(git.pinned.into_iter().filter(needed));
            absent.extend(git.absent.into_iter().filter(needed).map(|p| {
                // Its git directory is pinned: only `commondir` itself is new.
                let dir = p.parent().unwrap_or(Path::new("/")).to_path_buf();
                Absent::new(&dir, p, COMMONDIR)
            }));
        }
        // The control files and the run's record (the one write policy's list).
        let control = protected::for_commands(policy, workspace);
        read_only.extend(control.read_only.into_iter().filter(needed));
        absent.extend(control.absent.into_iter().filter(|a| needed(&a.path)));
        let targets: Vec<PathBuf> = read_only
            .iter()
            .chain(&pinned)
            .cloned()
            .chain([workspace.to_path_buf()])
            .collect();
        pinned.extend(leading_dirs(&targets, roots));
        let depth = |p: &PathBuf| p.components().count();
        pinned.sort_by_key(depth);
        pinned.dedup();
        pinned.retain(|p| !roots.contains(p) && !read_only.contains(p) && p.is_dir());
        read_only.sort_by_key(depth);
        read_only.dedup();
        let kept_files = read_only.iter().filter(|p| p.is_file()).cloned().collect();
        let mut writable: Vec<PathBuf> = roots.iter().filter(|r| r.is_dir()).cloned().collect();
        writable.sort_by_key(depth);
        writable.truncate(MAX_ROOTS);
        let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET;
        let expect = [(workspace, workspace_mounted)]
            .into_iter()
            .chain(read_only.iter().map(|p| (p.as_path(), true)))
            .chain(pinned.iter().map(|p| (p.as_path(), false)))
            .filter_map(|(p, read_only)| expectation(p, read_only).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let to_c = |v: &[PathBuf]| v.iter().map(|p| cstring(p)).collect::<Result<Vec<_>, _>>();
        Ok(Plan {
            flags,
            writable: to_c(&writable)?,
            pins: to_c(&pinned)?,
            read_only: read_only
                .iter()
                .map(|p| {
                    let c = cstring(p)?;
                    let keep = mounts::locked_flags(&c);
                    Ok((c, keep))
                })
                .collect::<Result<_, SandboxError>>()?,
            expect,
            workspace_mounted,
            absent,
            kept_files,
            network: policy.network.then(|| policy.net.clone()),
        })
    }

    /// Whether the plan needs its mounts to keep the workspace read-only (then a
    /// command is refused when they cannot be made).
    pub(super) fn workspace_needs_mount(&self) -> bool {
        self.workspace_mounted
    }

    /// The same paths (maybe other inodes).
    fn same_paths(&self, other: &Plan) -> bool {
        self.flags == other.flags
            && self.network.is_some() == other.network.is_some()
            && self.absent == other.absent
            && self.writable == other.writable
            && self.pins == other.pins
            && self.read_only == other.read_only
    }
}

/// User, mount and network namespaces kept open by their fds (no process stays in
/// them), entered by each command with `setns`.
pub(super) struct Namespaces {
    plan: Plan,
    user: OwnedFd,
    mnt: OwnedFd,
    net: OwnedFd,
    /// Serves the namespace's listener (not with `--no-network`).
    proxy: Option<Proxy>,
}

impl Namespaces {
    /// The proxy's port on the namespace's loopback, when there is a network.
    pub(super) fn proxy_port(&self) -> Option<u16> {
        self.proxy.as_ref().map(|p| p.port)
    }

    /// The proxy's refusals from now on.
    pub(super) fn refusals(&self) -> Refusals {
        self.proxy.as_ref().map(Proxy::refusals).unwrap_or_default()
    }

    /// Joins the namespaces and checks the plan's paths. In the child between fork and
    /// exec: system calls only. The child is single-threaded, as joining a user
    /// namespace requires.
    pub(super) fn enter(&self, cwd: &CString) -> std::io::Result<()> {
        let err = std::io::Error::last_os_error;
        // SAFETY: setns, chdir, stat and statvfs are system calls on fds and strings
        // prepared before fork.
        unsafe {
            if libc::setns(self.user.as_raw_fd(), libc::CLONE_NEWUSER) != 0
                || libc::setns(self.mnt.as_raw_fd(), libc::CLONE_NEWNS) != 0
                || libc::setns(self.net.as_raw_fd(), libc::CLONE_NEWNET) != 0
                || libc::chdir(cwd.as_ptr()) != 0
            {
                return Err(err());
            }
            for e in &self.plan.expect {
                let mut st: libc::stat = std::mem::zeroed();
                // statvfs is statfs plus a copy (glibc reads /proc/mounts only on
                // kernels before 2.6.36, which have no Landlock anyway).
                let mut fs: libc::statvfs = std::mem::zeroed();
                if libc::stat(e.path.as_ptr(), &mut st) != 0
                    || libc::statvfs(e.path.as_ptr(), &mut fs) != 0
                    || st.st_dev != e.dev
                    || st.st_ino != e.ino
                    || (e.read_only && fs.f_flag & libc::ST_RDONLY == 0)
                {
                    return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
                }
            }
        }
        Ok(())
    }
}

/// Made once per process and plan.
static CACHE: Mutex<Vec<Arc<Namespaces>>> = Mutex::new(Vec::new());
/// Plans (tests make many workspaces) kept at most.
const CACHE_MAX: usize = 16;

/// Drops the saved namespaces: a command found a path of its plan changed (`.git`
/// recreated), the next one makes them again.
pub fn forget_namespaces() {
    CACHE.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// Whether a failed spawn means the saved namespaces are stale (see [`forget_namespaces`]).
pub fn is_stale(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESTALE)
}

/// The namespaces for `plan`, made now or earlier.
pub(super) fn get(plan: &Plan) -> std::io::Result<Arc<Namespaces>> {
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ns) = cache.iter().find(|n| n.plan == *plan) {
        return Ok(ns.clone());
    }
    let ns = Arc::new(make(plan)?);
    // The same paths with other inodes: the old namespaces are stale.
    cache.retain(|n| !n.plan.same_paths(plan));
    if cache.len() >= CACHE_MAX {
        cache.remove(0);
    }
    cache.push(ns.clone());
    Ok(ns)
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

/// A connected pair of datagram sockets: the helper sends the listener over it.
fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair fills the two fds, which we then own.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just opened and are owned by nothing else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// Control-message room for one descriptor, aligned for `cmsghdr`.
type FdSpace = [u64; 4];

/// Sends `fd` over `sock` (`SCM_RIGHTS`). System calls only.
fn send_fd(sock: libc::c_int, fd: libc::c_int) -> std::io::Result<()> {
    let mut byte = 0u8;
    let mut space: FdSpace = [0; 4];
    // SAFETY: the message points at live locals; the CMSG macros compute offsets in
    // `space`, which is large enough for one fd.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: (&raw mut byte).cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as usize;
        libc::CMSG_DATA(cmsg)
            .cast::<libc::c_int>()
            .write_unaligned(fd);
        if libc::sendmsg(sock, &msg, 0) != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives the descriptor [`send_fd`] sent.
fn recv_fd(sock: &OwnedFd) -> std::io::Result<OwnedFd> {
    let mut byte = 0u8;
    let mut space: FdSpace = [0; 4];
    // SAFETY: as in `send_fd`; the received fd is checked before it is owned.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: (&raw mut byte).cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of::<FdSpace>();
        if libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) != 1 {
            return Err(std::io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other("the namespace helper sent no socket"));
        }
        let fd = libc::CMSG_DATA(cmsg).cast::<libc::c_int>().read_unaligned();
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Forks a helper that unshares, writes its id maps, builds the mount view and (with
/// a network) sends its listener, then waits while the parent opens its
/// `/proc/PID/ns/*`; then it exits.
fn make(plan: &Plan) -> std::io::Result<Namespaces> {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let c = |s: String| CString::new(s).map_err(std::io::Error::other);
    let (chan_parent, chan_child) = socket_pair()?;
    let setup = Setup {
        flags: plan.flags,
        uid_map: c(format!("{uid} {uid} 1"))?,
        gid_map: c(format!("{gid} {gid} 1"))?,
        view: View {
            writable: &plan.writable,
            pins: &plan.pins,
            read_only: &plan.read_only,
        },
        listen_to: plan.network.is_some().then_some(chan_child.as_raw_fd()),
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
            libc::close(chan_parent.as_raw_fd());
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
    drop((ready_w, release_r, chan_child));
    let made = collect(plan, pid, &ready_r, &chan_parent);
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

/// The parent's side of [`make`]: the helper's status, its namespaces and listener.
fn collect(
    plan: &Plan,
    pid: libc::pid_t,
    ready: &OwnedFd,
    chan: &OwnedFd,
) -> std::io::Result<Namespaces> {
    let mut status: i32 = -1;
    let got = loop {
        // SAFETY: reads at most 4 bytes into a live i32.
        let n = unsafe { libc::read(ready.as_raw_fd(), (&raw mut status).cast(), 4) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    if got != 4 {
        return Err(std::io::Error::other("the namespace helper died"));
    }
    if status != 0 {
        return Err(std::io::Error::from_raw_os_error(status));
    }
    let open = |kind: &str| -> std::io::Result<OwnedFd> {
        let f = std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))?;
        Ok(OwnedFd::from(f))
    };
    let proxy = match &plan.network {
        Some(rules) => Some(proxy::start(recv_fd(chan)?, rules)?),
        None => None,
    };
    Ok(Namespaces {
        plan: plan.clone(),
        user: open("user")?,
        mnt: open("mnt")?,
        net: open("net")?,
        proxy,
    })
}

/// What the namespace helper does, prepared before fork.
struct Setup<'a> {
    flags: libc::c_int,
    uid_map: CString,
    gid_map: CString,
    view: View<'a>,
    /// With a network: where to send the namespace's listener.
    listen_to: Option<libc::c_int>,
}

impl Setup<'_> {
    /// Runs in the forked helper. Only system calls: no allocation, no locks.
    fn run(&self) -> std::io::Result<()> {
        // SAFETY: unshare is a plain system call.
        if unsafe { libc::unshare(self.flags) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        write_file(c"/proc/self/setgroups", c"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)?;
        if let Some(chan) = self.listen_to {
            loopback_up()?;
            let listener = listen_on_loopback()?;
            let sent = send_fd(chan, listener);
            // SAFETY: our own fd, sent (the parent holds its copy) or not.
            unsafe { libc::close(listener) };
            sent?;
        }
        self.view.build()
    }
}

/// Brings the namespace's `lo` up (the helper is root in its user namespace).
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a socket for the ioctls, an ifreq on the stack, closed before return.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, b) in ifr.ifr_name.iter_mut().zip(b"lo") {
            *d = *b as libc::c_char;
        }
        let mut ok = libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) == 0;
        if ok {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            ok = libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr) == 0;
        }
        let e = std::io::Error::last_os_error();
        libc::close(s);
        if !ok {
            return Err(e);
        }
    }
    Ok(())
}

/// A TCP socket listening on `127.0.0.1` (a port the kernel picks) in this namespace.
fn listen_on_loopback() -> std::io::Result<libc::c_int> {
    // SAFETY: socket, bind and listen on a sockaddr on the stack.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut sin: libc::sockaddr_in = std::mem::zeroed();
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        if libc::bind(
            s,
            (&raw const sin).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
            || libc::listen(s, 1024) != 0
        {
            let e = std::io::Error::last_os_error();
            libc::close(s);
            return Err(e);
        }
        Ok(s)
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
