//! A PID namespace per command, so that nothing the command starts outlives it.
//!
//! The child that flower forked (the *supervisor*, outside the namespace) unshares a
//! PID namespace and forks the shell-to-be, which becomes the namespace's init (PID 1).
//! When init exits, the kernel kills every other process in the namespace — a
//! `setsid … &` or a double fork included — so "killed with every process it started"
//! is true. The supervisor closes every descriptor it holds (the output pipe among
//! them, so end of file comes when the command's processes are gone), waits for init
//! and exits the way it did. Flower kills the supervisor's process group (init is in
//! it too) on timeout or cancellation; init also has `PR_SET_PDEATHSIG`, so killing the
//! supervisor alone kills the namespace.

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Called in the supervisor between fork and exec. Returns only in the namespace's
/// init, which goes on to exec the shell; the supervisor itself never returns.
pub(super) fn enter_new_namespace() -> std::io::Result<()> {
    // SAFETY: unshare and fork are system calls; the process is single-threaded (a
    // freshly forked child), so fork is safe, and both sides only make system calls.
    let init = unsafe {
        if libc::unshare(libc::CLONE_NEWPID) != 0 {
            return Err(last_error());
        }
        libc::fork()
    };
    if init < 0 {
        return Err(last_error());
    }
    if init == 0 {
        // SAFETY: prctl only sets this process's parent-death signal.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
            return Err(last_error());
        }
        return Ok(());
    }
    supervise(init)
}

/// Waits for init and exits as it did. Never returns.
fn supervise(init: libc::pid_t) -> ! {
    // SAFETY: close_range, waitpid, signal, kill and _exit are system calls; nothing
    // here touches memory shared with other threads (there are none).
    unsafe {
        // The standard library's exec-error pipe is among these: init holds its own
        // copy and reports through it, and the parent must not wait for ours.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        let mut status = 0;
        loop {
            let r = libc::waitpid(init, &mut status, 0);
            if r == init {
                break;
            }
            if r < 0 && last_error().raw_os_error() != Some(libc::EINTR) {
                libc::_exit(127);
            }
        }
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}
