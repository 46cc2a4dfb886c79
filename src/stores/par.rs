//! A little data parallelism for long transcripts, with std threads only.

use std::sync::mpsc;
use std::thread::ScopedJoinHandle;

/// How many threads a long transcript is split across: the cores, at most 4.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// `items.into_iter().map(f).collect()`, in order, split across [`threads`] threads
/// when there are at least `min_len` items. Work whose thread cannot be spawned is
/// done on the calling thread.
pub(crate) fn map<T: Send, U: Send>(
    mut items: Vec<T>,
    min_len: usize,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let threads = threads();
    if threads < 2 || items.len() < min_len.max(2) {
        return items.into_iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    let mut tails = Vec::new();
    while items.len() > chunk {
        tails.push(items.split_off(items.len() - chunk));
    }
    tails.reverse();
    let f = &f;
    enum Job<'scope, T, U> {
        Thread(ScopedJoinHandle<'scope, Vec<U>>),
        Here(Vec<T>),
    }
    std::thread::scope(|scope| {
        let mut jobs = Vec::new();
        for tail in tails {
            // The items go to the thread only once it runs, so none is lost if it can't.
            let (tx, rx) = mpsc::channel::<Vec<T>>();
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                rx.recv()
                    .map(|part| part.into_iter().map(f).collect())
                    .unwrap_or_default()
            });
            jobs.push(match spawned {
                Ok(handle) => match tx.send(tail) {
                    Ok(()) => Job::Thread(handle),
                    Err(mpsc::SendError(tail)) => Job::Here(tail),
                },
                Err(_) => Job::Here(tail),
            });
        }
        let mut out: Vec<U> = items.into_iter().map(f).collect();
        for job in jobs {
            match job {
                Job::Thread(handle) => out.extend(
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                ),
                Job::Here(tail) => out.extend(tail.into_iter().map(f)),
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn map_keeps_order_and_every_item() {
        for len in [0, 1, 2, 3, 10, 1001] {
            let items: Vec<usize> = (0..len).collect();
            let out = super::map(items, 2, |i| i * 2);
            assert_eq!(out, (0..len).map(|i| i * 2).collect::<Vec<_>>());
        }
    }
}
