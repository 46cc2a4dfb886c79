//! The seccomp filter: system calls a sandboxed command is refused (`EPERM`) whatever
//! its capabilities, compiled with `seccompiler` before fork.
//!
//! A deny list on top of the other layers, for what they cannot express:
//! - the mount API (`mount`, `umount2`, `pivot_root`, `open_tree`, `move_mount`,
//!   `fsopen`, `fsconfig`, `fsmount`, `fspick`, `mount_setattr`, `open_tree_attr`):
//!   a clone of the workspace's mount would not carry the read-only git mounts;
//! - `mknod`/`mknodat` of a character or block device (FIFOs and sockets stay allowed);
//! - the `TIOCSTI` and `TIOCLINUX` ioctls, which push input into a terminal (compared
//!   on the low 32 bits, as the kernel reads the request);
//! - io_uring, whose operations (socket, connect, open …) bypass seccomp;
//! - what Docker's default profile refuses and a build or a test never needs:
//!   `perf_event_open` (kernel profiling, a side channel), `userfaultfd` (stalls the
//!   kernel at will, a staple of exploits), the kernel keyrings (`keyctl`, `add_key`,
//!   `request_key`, not namespaced: the user's other keys), and a user namespace of
//!   the command's own (`unshare` or `clone` with `CLONE_NEWUSER`), in which it would
//!   be root with every capability over what it mounts there. `clone3` passes its
//!   flags in memory seccomp cannot read, so it fails with `ENOSYS` (Docker's answer
//!   too): libc then falls back to `clone`, whose flags are checked;
//! - with `block_unix` (no Landlock path-socket scoping, and no `allowAllUnixSockets`):
//!   `socket(AF_UNIX, …)`. `socketpair` stays allowed: its sockets are already
//!   connected to each other and cannot reach a listener.
//!
//! Other architectures' system call tables (i386 through `int 0x80`) kill the process;
//! x32 numbers on x86_64 are refused by a second, hand-written filter.

use super::SandboxError;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};
use std::collections::BTreeMap;

/// `open_tree_attr` (Linux 6.15), the same number on every architecture of the
/// unified table; the libc crate does not name it yet.
const SYS_OPEN_TREE_ATTR: i64 = 467;

/// One compiled filter.
pub(super) struct Program(BpfProgram);

impl Program {
    /// Installs the filter on the calling thread (no_new_privs is set first). Between
    /// fork and exec: system calls only.
    pub(super) fn install(&self) -> std::io::Result<()> {
        seccompiler::apply_filter(&self.0).map_err(|e| match e {
            seccompiler::Error::Prctl(io) | seccompiler::Error::Seccomp(io) => io,
            _ => std::io::Error::from_raw_os_error(libc::EINVAL),
        })
    }
}

fn build(e: impl std::error::Error + Send + Sync + 'static) -> SandboxError {
    SandboxError::build(format!("seccomp: {e}"), e)
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(build)
}

/// `mode & S_IFMT` is a character or a block device, for the mode in argument `arg`.
fn device_node(arg: u8) -> Result<Vec<SeccompRule>, SandboxError> {
    let kind = |t: libc::mode_t| -> Result<SeccompRule, SandboxError> {
        SeccompRule::new(vec![condition(
            arg,
            SeccompCmpOp::MaskedEq(u64::from(libc::S_IFMT)),
            u64::from(t),
        )?])
        .map_err(build)
    };
    Ok(vec![kind(libc::S_IFCHR)?, kind(libc::S_IFBLK)?])
}

/// The refused system calls, each with the rules under which it is refused (none:
/// always).
fn rules(block_unix: bool) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        SYS_OPEN_TREE_ATTR,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ] {
        rules.insert(nr, Vec::new());
    }
    // The flags are the first argument of both on x86_64 and aarch64 (`clone`'s
    // order differs only in the later arguments).
    let new_user = || -> Result<Vec<SeccompRule>, SandboxError> {
        let flag = u64::from(libc::CLONE_NEWUSER as u32);
        Ok(vec![
            SeccompRule::new(vec![condition(0, SeccompCmpOp::MaskedEq(flag), flag)?])
                .map_err(build)?,
        ])
    };
    rules.insert(libc::SYS_unshare, new_user()?);
    rules.insert(libc::SYS_clone, new_user()?);
    #[cfg(target_arch = "x86_64")]
    rules.insert(libc::SYS_mknod, device_node(1)?);
    rules.insert(libc::SYS_mknodat, device_node(2)?);
    let ioctl = |request: libc::Ioctl| -> Result<SeccompRule, SandboxError> {
        SeccompRule::new(vec![condition(
            1,
            SeccompCmpOp::Eq,
            u64::from(request as u32),
        )?])
        .map_err(build)
    };
    rules.insert(
        libc::SYS_ioctl,
        vec![ioctl(libc::TIOCSTI)?, ioctl(libc::TIOCLINUX)?],
    );
    if block_unix {
        rules.insert(
            libc::SYS_socket,
            vec![
                SeccompRule::new(vec![condition(0, SeccompCmpOp::Eq, libc::AF_UNIX as u64)?])
                    .map_err(build)?,
            ],
        );
    }
    Ok(rules)
}

/// The filters to install, in order.
pub(super) fn programs(block_unix: bool) -> Result<Vec<Program>, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(build)?;
    let filter = SeccompFilter::new(
        rules(block_unix)?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(build)?;
    // `clone3` alone fails with ENOSYS, so that libc falls back to `clone`.
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(build)?;
    let mut out = vec![
        Program(BpfProgram::try_from(filter).map_err(build)?),
        Program(BpfProgram::try_from(clone3).map_err(build)?),
    ];
    if cfg!(target_arch = "x86_64") {
        out.push(Program(x32_filter()));
    }
    Ok(out)
}

/// Refuses every x32 system call (numbers with bit 30 set): the same audit
/// architecture as x86_64, so the main filter's numbers would not match them.
fn x32_filter() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let stmt = |code, k| sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        // seccomp_data.nr is at offset 0.
        stmt(LD_W_ABS, 0),
        sock_filter {
            code: JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Refuses `listen` (`allowLocalBinding: false`): no server in the command, not even
/// on the namespace's own loopback.
pub(super) fn refuse_listen() -> Result<Program, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(build)?;
    let filter = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_listen, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(build)?;
    Ok(Program(BpfProgram::try_from(filter).map_err(build)?))
}
