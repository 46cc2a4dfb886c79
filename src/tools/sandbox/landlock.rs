//! Landlock, the second file-system layer under the read-only mount view: read and
//! execute everywhere; write (create, delete, rename, truncate …) only beneath the
//! writable roots; the `/dev/null`-like devices readable and writable. Requested at the
//! newest ABI this build knows, best effort: the kernel enforces what it supports.
//!
//! Scopes (ABI 6): signals only to the command's own processes; no abstract UNIX
//! sockets outside (the network namespace holds them too). Path UNIX sockets (ABI 9):
//! `connect` only to sockets beneath the workspace and those `allowUnixSockets` names
//! (with the network on); `allowAllUnixSockets` lifts both.

use super::{SandboxError, SandboxPolicy};
use ::landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The newest Landlock ABI this build knows; older kernels get what they support.
const TARGET_ABI: ABI = ABI::V10;

/// The first ABI that scopes `connect` to path UNIX sockets.
pub(super) const RESOLVE_UNIX_ABI: i32 = 9;

/// Devices a command may read and write, and whether it may send them ioctls (pseudo
/// terminals need theirs; `TIOCSTI` is refused by seccomp). `/dev/tty` gets none: the
/// command has no controlling terminal anyway.
const DEVICES: [(&str, bool); 8] = [
    ("/dev/null", false),
    ("/dev/zero", false),
    ("/dev/full", false),
    ("/dev/random", false),
    ("/dev/urandom", false),
    ("/dev/tty", false),
    ("/dev/ptmx", true),
    ("/dev/pts", true),
];

fn build(e: impl std::error::Error + Send + Sync + 'static) -> SandboxError {
    SandboxError::build(e.to_string(), e)
}

/// The ruleset for a command in `workspace` with these writable roots, or `None` when
/// the kernel enforces nothing of it.
pub(super) fn ruleset(
    policy: &SandboxPolicy,
    workspace: &Path,
    roots: &[PathBuf],
) -> Result<Option<OwnedFd>, SandboxError> {
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::from_read(TARGET_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(build)?
        .scope(Scope::Signal)
        .map_err(build)?;
    let open_unix = policy.network && policy.net.all_unix_sockets;
    if !open_unix {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket).map_err(build)?;
    }
    let everywhere = if open_unix {
        read | AccessFs::ResolveUnix
    } else {
        read
    };
    let mut created = ruleset
        .create()
        .map_err(build)?
        .add_rule(PathBeneath::new(
            PathFd::new("/").map_err(build)?,
            everywhere,
        ))
        .map_err(build)?;
    for dir in roots {
        if let Ok(fd) = PathFd::new(dir) {
            // Path sockets: beneath the workspace only (the temp directories hold the
            // user's agent and display sockets).
            let rights = if dir == workspace || open_unix {
                all
            } else {
                all & !AccessFs::ResolveUnix
            };
            created = created
                .add_rule(PathBeneath::new(fd, rights))
                .map_err(build)?;
        }
    }
    if !open_unix
        && !policy.workspace_writable
        && let Ok(fd) = PathFd::new(workspace)
    {
        created = created
            .add_rule(PathBeneath::new(fd, read | AccessFs::ResolveUnix))
            .map_err(build)?;
    }
    if policy.network && !open_unix && super::landlock_abi().unwrap_or(0) >= RESOLVE_UNIX_ABI {
        for socket in &policy.net.unix_sockets {
            if let Ok(fd) = PathFd::new(socket) {
                created = created
                    .add_rule(PathBeneath::new(fd, AccessFs::ResolveUnix))
                    .map_err(build)?;
            }
        }
    }
    let device = AccessFs::ReadFile | AccessFs::WriteFile;
    for (dev, ioctl) in DEVICES {
        if let Ok(fd) = PathFd::new(dev) {
            let mut rights = device;
            if ioctl {
                rights |= AccessFs::IoctlDev;
            }
            // Directories (/dev/pts) take directory rights too.
            if Path::new(dev).is_dir() {
                rights |= AccessFs::ReadDir;
            }
            created = created
                .add_rule(PathBeneath::new(fd, rights))
                .map_err(build)?;
        }
    }
    Ok(created.into())
}
