//! Session holds: advisory locks on one connection per process, taken again after the
//! connection was lost.

use super::*;

/// A request to the session-lock connection.
pub(super) enum LockJob {
    Take {
        session_id: String,
        shared: bool,
        reply: mpsc::Sender<Result<SessionHold, ::postgres::Error>>,
    },
    Release {
        session_id: String,
        shared: bool,
    },
}

/// The guard of one session lock: releases it when dropped.
pub(super) struct SessionGuard {
    pub(super) session_id: String,
    pub(super) shared: bool,
    pub(super) locker: mpsc::Sender<LockJob>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let _ = self.locker.send(LockJob::Release {
            session_id: std::mem::take(&mut self.session_id),
            shared: self.shared,
        });
    }
}

/// The advisory-lock key of a session hold (see the module docs on `current_schema()`).
pub(super) const SESSION_HOLD_KEY: &str = "hashtextextended(current_schema() || '/hold/' || $1, 0)";

/// `flower <pid> <since> <host>`, cut to what `application_name` keeps (63 bytes).
pub(super) fn holder_tag() -> String {
    let host = hostname();
    let mut tag = format!(
        "{HOLDER_TAG} {} {} {host}",
        std::process::id(),
        chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false)
    );
    while tag.len() > 63 {
        tag.pop();
    }
    tag
}

/// The session locks one process holds, on one connection: the locks are
/// session-level, so the server drops them with the connection (the process died, or
/// its host vanished and the keepalives ended the connection). A connection found lost
/// is opened again and every lock taken again; one someone else took meanwhile is
/// given up.
pub(super) struct Locker {
    pub(super) config: ::postgres::Config,
    pub(super) client: Option<Client>,
    /// Held locks: (session id, shared) → how many guards hold it.
    pub(super) held: std::collections::HashMap<(String, bool), usize>,
}

impl Locker {
    pub(super) fn client(&mut self) -> Result<&mut Client, ::postgres::Error> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        match &mut self.client {
            Some(client) => Ok(client),
            slot @ None => {
                let mut config = self.config.clone();
                config.application_name(&holder_tag());
                Ok(slot.insert(connect_holding(&config)?))
            }
        }
    }

    pub(super) fn try_lock(
        c: &mut Client,
        session_id: &str,
        shared: bool,
    ) -> Result<bool, ::postgres::Error> {
        let function = if shared {
            "pg_try_advisory_lock_shared"
        } else {
            "pg_try_advisory_lock"
        };
        let query = format!("SELECT {function}({SESSION_HOLD_KEY})");
        Ok(c.query_one(query.as_str(), &[&session_id])?.get(0))
    }

    /// Who holds the lock on `session_id`, as its connection names itself.
    pub(super) fn holder(
        c: &mut Client,
        session_id: &str,
    ) -> Result<Option<String>, ::postgres::Error> {
        let query = format!(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND ((l.classid::bigint << 32) | l.objid::bigint) = {SESSION_HOLD_KEY} \
             LIMIT 1"
        );
        Ok(c.query_opt(query.as_str(), &[&session_id])?
            .map(|r| r.get::<_, String>(0))
            .filter(|name| name.starts_with(HOLDER_TAG)))
    }

    pub(super) fn take(
        &mut self,
        session_id: &str,
        shared: bool,
    ) -> Result<SessionHold, ::postgres::Error> {
        let key = (session_id.to_string(), shared);
        if let Some(count) = self.held.get_mut(&key) {
            *count += 1;
            return Ok(SessionHold::Held(Box::new(())));
        }
        let c = self.client()?;
        if Locker::try_lock(c, session_id, shared)? {
            self.held.insert(key, 1);
            Ok(SessionHold::Held(Box::new(())))
        } else {
            Ok(SessionHold::Busy(Locker::holder(c, session_id)?))
        }
    }

    pub(super) fn release(&mut self, session_id: String, shared: bool) {
        let key = (session_id, shared);
        let Some(count) = self.held.get_mut(&key) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.held.remove(&key);
        let function = if shared {
            "pg_advisory_unlock_shared"
        } else {
            "pg_advisory_unlock"
        };
        if let Some(c) = self.client.as_mut() {
            let query = format!("SELECT {function}({SESSION_HOLD_KEY})");
            let _ = c.query_one(query.as_str(), &[&key.0]);
        }
    }

    /// With locks held, makes sure the connection still holds them.
    pub(super) fn check(&mut self) {
        if self.held.is_empty() {
            return;
        }
        if self
            .client
            .as_mut()
            .is_some_and(|c| c.is_valid(LEASE_CHECK).is_ok())
        {
            return;
        }
        // Gone, or too slow to tell: end it for sure, then take every lock again.
        if let Some(gone) = self.client.take() {
            close_apart(gone);
        }
        let held = std::mem::take(&mut self.held);
        let Ok(c) = self.client() else {
            self.held = held;
            return;
        };
        let mut keep = std::collections::HashMap::new();
        for ((session_id, shared), count) in held {
            if let Ok(true) = Locker::try_lock(c, &session_id, shared) {
                keep.insert((session_id, shared), count);
            }
        }
        self.held = keep;
    }

    pub(super) fn serve(mut self, jobs: mpsc::Receiver<LockJob>) {
        loop {
            match jobs.recv_timeout(LEASE_CHECK) {
                Ok(LockJob::Take {
                    session_id,
                    shared,
                    reply,
                }) => {
                    let result = self.take(&session_id, shared);
                    if result.is_err() {
                        self.client = None;
                    }
                    let _ = reply.send(result);
                }
                Ok(LockJob::Release { session_id, shared }) => self.release(session_id, shared),
                Err(mpsc::RecvTimeoutError::Timeout) => self.check(),
                // The store is gone: closing the connection releases what is left.
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

impl PostgresStore {
    /// The session-lock connection's queue, started on first use.
    pub(super) fn locker(&self) -> Result<mpsc::Sender<LockJob>, StoreError> {
        let mut locker = self.locker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(jobs) = locker.as_ref() {
            return Ok(jobs.clone());
        }
        let (jobs, queue) = mpsc::channel();
        let serving = Locker {
            config: self.url.blocking(),
            client: None,
            held: std::collections::HashMap::new(),
        };
        std::thread::Builder::new()
            .name("flower-pg-locks".into())
            .spawn(move || serving.serve(queue))
            .map_err(|source| StoreError::Io {
                what: "起不了数据库线程".into(),
                source,
            })?;
        *locker = Some(jobs.clone());
        Ok(jobs)
    }
}
