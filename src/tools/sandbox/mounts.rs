//! The mount view of a sandboxed command, built inside its own user and mount
//! namespaces (by the namespace helper, [`super::namespaces`]):
//!
//! 1. every mount becomes private (nothing propagates in or out);
//! 2. each writable root (workspace, temp directories) is cloned, as it is, with
//!    `open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`;
//! 3. the whole tree is made read-only at once with `mount_setattr(AT_RECURSIVE)`
//!    (bubblewrap's `--ro-bind / /`, without a new root);
//! 4. the clones are attached back over their roots, writable;
//! 5. *pins*: directories that lead from a writable root to a protected path are bound
//!    onto themselves: a mount point cannot be renamed or removed (`EBUSY`), so
//!    `mv .git x`, or renaming a read-only workspace's parent, fails;
//! 6. the protected paths (git files, a read-only workspace inside a writable root)
//!    are bound onto themselves read-only.
//!
//! Writes to device nodes ignore a mount's read-only flag, so `/dev/null` and the pseudo
//! terminals keep working. On a kernel without `mount_setattr` (before 5.12) steps 2 to
//! 4 are skipped and Landlock alone keeps the rest of the machine read-only.
//!
//! Everything here runs in a forked child: system calls only, on strings prepared
//! before fork.

use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Most writable roots a view has (the workspace and four temp directories).
pub(super) const MAX_ROOTS: usize = 8;

/// `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// What a view is made of; every path canonical, prepared before fork.
pub(super) struct View<'a> {
    pub writable: &'a [CString],
    pub pins: &'a [CString],
    /// Paths made read-only, with the mount flags their remount must keep.
    pub read_only: &'a [(CString, libc::c_ulong)],
}

impl View<'_> {
    /// Builds the view in the calling process's (new) mount namespace.
    pub(super) fn build(&self) -> std::io::Result<()> {
        // SAFETY: mount on constant strings.
        if unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        } != 0
        {
            return Err(last_error());
        }
        self.read_only_machine()?;
        for pin in self.pins {
            bind(pin)?;
        }
        for (path, keep) in self.read_only {
            bind(path)?;
            remount_read_only(path, *keep)?;
        }
        Ok(())
    }

    /// Steps 2 to 4: everything read-only but the writable roots.
    fn read_only_machine(&self) -> std::io::Result<()> {
        // The clones, each closed when dropped (on every path out).
        let mut clones: [Option<OwnedFd>; MAX_ROOTS] = [const { None }; MAX_ROOTS];
        match self
            .clone_roots(&mut clones)
            .and_then(|()| self.read_only_but(&clones))
        {
            // A kernel without `open_tree` (5.2) or `mount_setattr` (5.12): Landlock
            // alone keeps the machine read-only.
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Ok(()),
            other => other,
        }
    }

    /// Steps 3 and 4: everything read-only, then the clones attached back.
    fn read_only_but(&self, clones: &[Option<OwnedFd>; MAX_ROOTS]) -> std::io::Result<()> {
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        // SAFETY: mount_setattr reads `attr` (of the size given) and the path.
        let r = unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                AT_RECURSIVE,
                &raw const attr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if r != 0 {
            return Err(last_error());
        }
        for (fd, root) in clones.iter().flatten().zip(self.writable) {
            // SAFETY: move_mount of a detached tree fd onto a path string.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    fd.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    root.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                )
            };
            if r != 0 {
                return Err(last_error());
            }
        }
        Ok(())
    }

    fn clone_roots(&self, clones: &mut [Option<OwnedFd>; MAX_ROOTS]) -> std::io::Result<()> {
        for (slot, root) in clones.iter_mut().zip(self.writable) {
            // SAFETY: open_tree on a path string; the fd it returns is owned by `slot`.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    root.as_ptr(),
                    OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
                )
            };
            if fd < 0 {
                return Err(last_error());
            }
            // SAFETY: a descriptor open_tree just opened, owned by nothing else.
            *slot = Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
        }
        Ok(())
    }
}

/// Binds `path` onto itself (with what is mounted beneath it): it becomes a mount
/// point, which cannot be renamed or removed.
fn bind(path: &CString) -> std::io::Result<()> {
    // SAFETY: mount on a NUL-terminated string prepared before fork.
    if unsafe {
        libc::mount(
            path.as_ptr(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(last_error());
    }
    Ok(())
}

/// Makes the bind mount at `path` read-only, keeping the flags a user namespace may
/// not drop.
fn remount_read_only(path: &CString, keep: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: as in `bind`.
    if unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(last_error());
    }
    Ok(())
}

/// A mount namespace of the command's own with a `/proc` of its PID namespace (read
/// only): the command sees its own processes only, not flower's (nor its environment).
pub(super) fn fresh_proc() -> std::io::Result<()> {
    // SAFETY: unshare and mount on constant strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(last_error());
        }
        if libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
            std::ptr::null(),
        ) != 0
        {
            return Err(last_error());
        }
    }
    Ok(())
}

/// The mount flags of the mount holding `p` that a remount in a user namespace must
/// keep (the kernel refuses to drop them).
pub(super) fn locked_flags(p: &std::ffi::CStr) -> libc::c_ulong {
    // SAFETY: statvfs writes into the zeroed struct we pass; `p` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(p.as_ptr(), &mut st) } != 0 {
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
