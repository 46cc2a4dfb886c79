//! Holding a run across hosts: a session-level advisory lock on a connection of its own.

use super::*;

/// A run held by this process across hosts: a session-level advisory lock on a
/// connection of its own, released when the lease is dropped, or by the server when the
/// process dies (its connection closes; for a host that vanishes, the keepalives below
/// end its connection within about a minute).
///
/// A lock dies with its connection, so a lease checks its connection every
/// [`LEASE_CHECK`]; when the database went away (a restart, a network cut) it takes the
/// lock again as soon as the database answers. If another process took the run in
/// between, the lease is lost: the `on_lost` callback given to
/// [`PostgresStore::lease_run`] hears who holds it now, and the lease does nothing more.
pub struct RunLease {
    pub(super) stop: Option<mpsc::Sender<()>>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RunLease {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What [`PostgresStore::lease_run`] found.
pub enum Leased {
    Held(RunLease),
    /// Another process holds the run: what it wrote about itself, if anything.
    Busy(Option<String>),
}

/// The advisory-lock key of a run's hold, `$1` the run key (see the module docs on
/// `current_schema()`).
pub(super) const RUN_LOCK_KEY: &str = "hashtextextended(current_schema() || '/run/' || $1, 0)";

/// A connection that holds session-level locks, with the server-side settings every
/// connection of the store has ([`SERVER_SETTINGS`]): the server ends it, and lets go
/// of its locks, within about a minute of its host vanishing.
pub(super) fn connect_holding(config: &::postgres::Config) -> Result<Client, ::postgres::Error> {
    let mut c = config.connect(NoTls)?;
    c.batch_execute(SERVER_SETTINGS)?;
    Ok(c)
}

/// Closes a connection that stopped answering, on a thread of its own: closing waits
/// for the server to see the end, which over a hung network (packets dropped, nothing
/// refused) it may not for many minutes, and the lock's holder must go on meanwhile.
pub(super) fn close_apart(client: Client) {
    let closing = std::thread::Builder::new()
        .name("flower-pg-close".into())
        .spawn(move || drop(client));
    // Without a thread to spare (the closure and its client come back dropped here),
    // this waits like any close.
    drop(closing);
}

/// This machine's name, as holders describe themselves (`?` when it cannot be read).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// How often a held lease makes sure its connection, and so its lock, is still there.
pub const LEASE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Told who holds a run now that this process's lease on it is lost.
pub type OnLeaseLost = Box<dyn FnOnce(Option<String>) + Send>;

/// The lease's side of one run: its connection's lock on `run_key`.
pub(super) struct LeaseConn {
    pub(super) config: ::postgres::Config,
    pub(super) run_key: String,
    pub(super) holder: String,
}

impl LeaseConn {
    pub(super) fn connect(&self) -> Result<Client, ::postgres::Error> {
        connect_holding(&self.config)
    }

    /// Takes the lock without waiting, recording who holds it; `false`: someone else does.
    pub(super) fn try_take(&self, c: &mut Client) -> Result<bool, ::postgres::Error> {
        let got: bool = c
            .query_one(
                &format!("SELECT pg_try_advisory_lock({RUN_LOCK_KEY})"),
                &[&self.run_key],
            )?
            .get(0);
        if got {
            c.execute(
                "UPDATE flower_runs SET holder = $2 WHERE run_key = $1",
                &[&self.run_key, &self.holder],
            )?;
        }
        Ok(got)
    }

    pub(super) fn holder(&self, c: &mut Client) -> Result<Option<String>, ::postgres::Error> {
        Ok(c.query_opt(
            "SELECT holder FROM flower_runs WHERE run_key = $1",
            &[&self.run_key],
        )?
        .and_then(|r| r.get(0)))
    }

    /// Keeps the lock until `stopped` says so (or its sender is dropped), taking it again
    /// after the connection was lost; then lets go.
    pub(super) fn keep(&self, mut c: Client, stopped: &mpsc::Receiver<()>, on_lost: OnLeaseLost) {
        // `true` when the lease is to end; else it slept one check interval.
        let stop_after_wait = || {
            !matches!(
                stopped.recv_timeout(LEASE_CHECK),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        };
        loop {
            if stop_after_wait() {
                break;
            }
            if c.is_valid(LEASE_CHECK).is_ok() {
                continue;
            }
            // Gone, or too slow to tell: let go of it for sure (a live connection
            // would keep the lock, and the retake below would take it for another's).
            close_apart(c);
            // Refusals while the run still names this process: the server has not yet
            // ended the old connection. A few are waited out; more mean someone took
            // the run without saying so.
            let mut refused_as_ours = 0;
            loop {
                if stop_after_wait() {
                    return;
                }
                let Ok(mut fresh) = self.connect() else {
                    continue;
                };
                match self.try_take(&mut fresh) {
                    Ok(true) => {
                        c = fresh;
                        break;
                    }
                    Ok(false) => {
                        let held = self.holder(&mut fresh).ok().flatten();
                        if held.as_deref() == Some(self.holder.as_str()) && refused_as_ours < 10 {
                            refused_as_ours += 1;
                            continue;
                        }
                        on_lost(held);
                        return;
                    }
                    Err(_) => continue,
                }
            }
        }
        let _ = c.execute(
            "UPDATE flower_runs SET holder = NULL WHERE run_key = $1 AND holder = $2",
            &[&self.run_key, &self.holder],
        );
        let _ = c.query_one(
            &format!("SELECT pg_advisory_unlock({RUN_LOCK_KEY})"),
            &[&self.run_key],
        );
    }
}

impl PostgresStore {
    /// Takes the run `run_key` for this process, recording `holder` (who is running it)
    /// beside it. Waits up to `wait` for a holder to let go (`None`: for ever) — a
    /// process that was just killed may take the server a moment to notice. See
    /// [`RunLease`] for `on_lost`.
    pub fn lease_run(
        &self,
        run_key: &str,
        holder: &str,
        wait: Option<std::time::Duration>,
        on_lost: OnLeaseLost,
    ) -> Result<Leased, StoreError> {
        let lease = LeaseConn {
            config: self.url.blocking(),
            run_key: run_key.to_string(),
            holder: holder.to_string(),
        };
        let (answer_tx, answer) =
            mpsc::channel::<Result<Option<Option<String>>, ::postgres::Error>>();
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("flower-pg-lease".into())
            .spawn(move || {
                let take = || -> Result<(Client, Option<Option<String>>), ::postgres::Error> {
                    let mut c = lease.connect()?;
                    let deadline = wait.map(|w| std::time::Instant::now() + w);
                    loop {
                        if lease.try_take(&mut c)? {
                            return Ok((c, None));
                        }
                        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                            let held = lease.holder(&mut c)?;
                            return Ok((c, Some(held)));
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                };
                match take() {
                    Ok((c, None)) => {
                        let _ = answer_tx.send(Ok(None));
                        lease.keep(c, &stopped, on_lost);
                    }
                    Ok((_, busy)) => {
                        let _ = answer_tx.send(Ok(busy));
                    }
                    Err(e) => {
                        let _ = answer_tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| StoreError::Io {
                what: "起不了数据库线程".into(),
                source,
            })?;
        match answer.recv() {
            Ok(Ok(None)) => Ok(Leased::Held(RunLease {
                stop: Some(stop),
                thread: Some(thread),
            })),
            Ok(Ok(Some(held))) => {
                let _ = thread.join();
                Ok(Leased::Busy(held))
            }
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(self.failed(e))
            }
            Err(_) => Err(self.error("数据库线程停了")),
        }
    }
}
