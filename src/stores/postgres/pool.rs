//! The connection pool: each connection on a thread of its own, serving jobs over a
//! channel, opened on first use and again after it was lost.

use super::*;

pub(super) type Job = Box<dyn FnOnce(&mut Slot) + Send>;

/// One pooled connection, opened on first use and again after it was lost.
pub(super) struct Slot {
    pub(super) config: ::postgres::Config,
    pub(super) client: Option<Client>,
    /// When the connection last served a job.
    pub(super) used: std::time::Instant,
}

/// A connection idle this long is asked whether it still works before it is used.
pub(super) const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl Slot {
    pub(super) fn new(config: ::postgres::Config) -> Slot {
        Slot {
            config,
            client: None,
            used: std::time::Instant::now(),
        }
    }

    /// The connection, opened anew when it is closed. One that sat idle is checked
    /// first (one round trip): the database may have restarted or the network
    /// dropped it meanwhile, and the job would fail on it though the database is
    /// there, which would cost a run a retry (and a model request).
    pub(super) fn client(&mut self) -> Result<&mut Client, ::postgres::Error> {
        let idle = std::mem::replace(&mut self.used, std::time::Instant::now()).elapsed();
        if self.client.as_mut().is_some_and(|c| {
            c.is_closed() || (idle >= IDLE_CHECK && c.is_valid(CONNECT_TIMEOUT).is_err())
        }) {
            self.client = None;
        }
        match &mut self.client {
            Some(client) => Ok(client),
            slot @ None => {
                PREPARED.with(|p| p.borrow_mut().clear());
                let mut client = self.config.connect(NoTls)?;
                client.batch_execute(SERVER_SETTINGS)?;
                Ok(slot.insert(client))
            }
        }
    }
}

thread_local! {
    /// The statements prepared on this pool thread's connection (each pool thread has
    /// one; [`Slot::client`] forgets them when it opens a new one).
    static PREPARED: std::cell::RefCell<std::collections::HashMap<&'static str, ::postgres::Statement>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `sql` prepared on this pool thread's connection, once: parsing and planning a
/// statement costs more than running a small one. Only for jobs run by
/// [`PostgresStore::call`].
pub(super) fn prepared(
    c: &mut Client,
    sql: &'static str,
    types: &[Type],
) -> Result<::postgres::Statement, ::postgres::Error> {
    if let Some(statement) = PREPARED.with(|p| p.borrow().get(sql).cloned()) {
        return Ok(statement);
    }
    let statement = c.prepare_typed(sql, types)?;
    PREPARED.with(|p| p.borrow_mut().insert(sql, statement.clone()));
    Ok(statement)
}
