//! Capabilities: a sandboxed command holds none.
//!
//! In the sandbox's user namespace the command starts with every capability of that
//! namespace (enough for `open_tree` to clone the workspace past the read-only git
//! mounts, or for `mknod`); as real root without one, with root's. Both are dropped:
//! the bounding set (so an `exec` as uid 0 gains nothing back), the ambient set, and the
//! effective, permitted and inheritable sets; `SECBIT_NOROOT` and kin are locked on.

/// The highest capability number the kernel may know (it rejects the numbers past its
/// own last with `EINVAL`).
const CAP_MAX: libc::c_ulong = 63;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability. Runs between fork and exec: system calls only.
pub(super) fn drop_all() -> std::io::Result<()> {
    // SAFETY: prctl and capset are plain system calls on values on our stack.
    unsafe {
        // Without CAP_SETPCAP (an unprivileged user without a user namespace) the
        // bounding set cannot shrink, but then an exec cannot gain capabilities either
        // (no_new_privs is set), so a refusal here is not an error; nor is `EINVAL` for
        // a number past the kernel's last. Every number is tried (64 calls, a few µs):
        // no early stop that a stale errno could trigger.
        for cap in 0..=CAP_MAX {
            let _ = libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        let bits = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        let _ = libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0);
        let _ = libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
