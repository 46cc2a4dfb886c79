//! Copying a proxied connection with `splice(2)`: socket → pipe → socket, the kernel
//! moving pages, no copy through flower's memory. A plain copy is the fallback when
//! no pipe can be made.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes asked of one `splice` call, and the download pipe's size where the kernel
/// allows it (64 KiB pipes make 16 times the calls and double the relay's CPU). The
/// upload pipe keeps the default 64 KiB: a user's pipes share one budget
/// (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB), past which every new pipe of the
/// user, in any program, gets two pages; at 1 MiB both ways 32 connections would spend it.
const CHUNK: usize = 1024 * 1024;
/// The most data either socket holds not yet sent (`TCP_NOTSENT_LOWAT`). Without a
/// bound the relay queues megabytes per socket, and by the time the reader copies them
/// out they have left its caches: curl spent ~50 % more CPU per byte through the proxy
/// than straight. At 256 KiB it spends what it does straight, for a few more `splice`
/// calls here. Only unsent data is bounded, so a long fat link keeps its window.
const UNSENT_MAX: libc::c_int = 256 * 1024;
/// How many download pipes may be grown to [`CHUNK`] at once: 16 MiB of the user's
/// 64 MiB pipe budget, so a command that opens many connections at once (a package
/// manager's parallel fetches) cannot spend the budget of every other program the user
/// runs; the connections past it relay through default pipes, slower but whole.
const LARGE_PIPES_MAX: usize = 16;
static LARGE_PIPES: AtomicUsize = AtomicUsize::new(0);

/// One of the [`LARGE_PIPES_MAX`] grown pipes, given back when dropped.
struct LargePipe;

impl LargePipe {
    fn take() -> Option<Self> {
        LARGE_PIPES
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < LARGE_PIPES_MAX).then_some(n + 1)
            })
            .ok()
            .map(|_| LargePipe)
    }
}

impl Drop for LargePipe {
    fn drop(&mut self) {
        LARGE_PIPES.fetch_sub(1, Ordering::AcqRel);
    }
}

fn nonblocking_pipe(large: bool) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two fds, which we then own; F_SETPIPE_SZ is best effort.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let pipe = (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]));
        if large {
            libc::fcntl(fds[1], libc::F_SETPIPE_SZ, CHUNK as libc::c_int);
        }
        Ok(pipe)
    }
}

/// Sets `TCP_NOTSENT_LOWAT` to [`UNSENT_MAX`]; best effort (only speed depends on it).
fn bound_unsent(socket: &TcpStream) {
    let value = UNSENT_MAX;
    // SAFETY: setsockopt on a socket we hold, with a c_int that outlives the call.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// One non-blocking `splice` of up to `len` bytes; `WouldBlock` when not ready.
fn splice_once(from: libc::c_int, to: libc::c_int, len: usize) -> std::io::Result<usize> {
    // SAFETY: splice between fds we hold, no offsets.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
}

/// Moves everything `from` sends to `to` through `pipe`, then shuts `to`'s write side.
async fn pump(from: &TcpStream, to: &TcpStream, pipe: (OwnedFd, OwnedFd)) -> std::io::Result<()> {
    let (pipe_r, pipe_w) = pipe;
    let (src, dst) = (from.as_raw_fd(), to.as_raw_fd());
    loop {
        // The pipe is empty here, so `WouldBlock` means the socket has nothing yet.
        let mut held = from
            .async_io(Interest::READABLE, || {
                splice_once(src, pipe_w.as_raw_fd(), CHUNK)
            })
            .await?;
        if held == 0 {
            break;
        }
        while held > 0 {
            held -= to
                .async_io(Interest::WRITABLE, || {
                    splice_once(pipe_r.as_raw_fd(), dst, held)
                })
                .await?;
        }
    }
    // SAFETY: shutdown of a socket we hold.
    unsafe { libc::shutdown(dst, libc::SHUT_WR) };
    Ok(())
}

/// Copies both ways until both sides are done; a failure on one side ends both.
/// `Err` (with the streams back) when no pipes could be made.
pub(super) async fn both_ways(
    client: TcpStream,
    upstream: TcpStream,
) -> Result<(), (TcpStream, TcpStream)> {
    let large = LargePipe::take();
    let (Ok(up_pipe), Ok(down_pipe)) = (nonblocking_pipe(false), nonblocking_pipe(large.is_some()))
    else {
        return Err((client, upstream));
    };
    for s in [&client, &upstream] {
        bound_unsent(s);
    }
    let end = |r: std::io::Result<()>| {
        if r.is_err() {
            for s in [&client, &upstream] {
                // SAFETY: shutdown of a socket we hold: wakes the other direction.
                unsafe { libc::shutdown(s.as_raw_fd(), libc::SHUT_RDWR) };
            }
        }
    };
    tokio::join!(
        async { end(pump(&client, &upstream, up_pipe).await) },
        async { end(pump(&upstream, &client, down_pipe).await) }
    );
    Ok(())
}
