//! The append connection: one connection of the async driver on a thread of its own,
//! which sends an append's transaction (BEGIN and the session lock, the one statement
//! that writes, COMMIT) in one round trip instead of one per statement.
//!
//! Why: on a fast disk a round trip costs more than the work it carries, and a turn
//! makes two appends. The blocking driver of the pool waits for each statement's answer
//! before sending the next; the async one sends requests whose futures are polled
//! together back to back, and the server answers them in order. PostgreSQL runs the
//! pipelined statements exactly as if they came one by one: each has its own snapshot
//! (taken after the lock was granted), and an error aborts the transaction so that the
//! `COMMIT` behind it rolls back.

use super::*;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// One transaction to send in one round trip.
pub(super) struct Piped {
    /// Simple-query text run first: `BEGIN; … SELECT pg_advisory_xact_lock(…)`.
    pub(super) begin: String,
    /// The statement that writes (prepared once per connection) and its parameters.
    pub(super) sql: &'static str,
    pub(super) types: &'static [Type],
    pub(super) params: Vec<Box<dyn tokio_postgres::types::ToSql + Send + Sync>>,
}

/// A [`Piped`] transaction and where its answer goes: the statement's one row, once the
/// transaction committed, or the first error it met.
pub(super) type PipeJob = (
    Piped,
    mpsc::Sender<Result<tokio_postgres::Row, tokio_postgres::Error>>,
);

/// The connection and what was prepared on it.
struct Connection {
    client: tokio_postgres::Client,
    prepared: std::collections::HashMap<&'static str, tokio_postgres::Statement>,
    used: std::time::Instant,
}

impl PostgresStore {
    /// Runs `piped` on the append connection (started on first use) and waits for the
    /// row it returns. An error is the first one the transaction met; nothing of it
    /// was committed unless the error is the connection's own (the answer to `COMMIT`
    /// lost), as with any commit.
    pub(super) fn pipe(&self, piped: Piped) -> Result<tokio_postgres::Row, PipeError> {
        let (reply, answer) = mpsc::channel();
        let jobs = self.pipe_queue().map_err(PipeError::Store)?;
        if jobs.send((piped, reply)).is_err() {
            return Err(PipeError::Store(self.error("数据库线程停了")));
        }
        match answer.recv() {
            Ok(result) => result.map_err(PipeError::Driver),
            Err(_) => Err(PipeError::Store(self.error("数据库线程停了"))),
        }
    }

    fn pipe_queue(&self) -> Result<mpsc::Sender<PipeJob>, StoreError> {
        let mut pipe = self.pipe.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(jobs) = pipe.as_ref() {
            return Ok(jobs.clone());
        }
        let (jobs, queue) = mpsc::channel::<PipeJob>();
        let config = self.url.config.clone();
        let io_error = |source| StoreError::Io {
            what: "起不了数据库线程".into(),
            source,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_error)?;
        std::thread::Builder::new()
            .name("flower-pg-append".into())
            .spawn(move || {
                let mut connection = None;
                // Between jobs the connection is not driven (as with the blocking
                // driver); the idle check below finds one that died meanwhile.
                while let Ok((piped, reply)) = queue.recv() {
                    let result = runtime.block_on(serve(&config, &mut connection, &piped));
                    let _ = reply.send(result);
                }
            })
            .map_err(io_error)?;
        *pipe = Some(jobs.clone());
        Ok(jobs)
    }
}

/// Why a piped transaction failed: the store itself, or the driver.
pub(super) enum PipeError {
    Store(StoreError),
    Driver(tokio_postgres::Error),
}

async fn serve(
    config: &tokio_postgres::Config,
    slot: &mut Option<Connection>,
    job: &Piped,
) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
    let result = run(config, slot, job).await;
    // A connection-class error drops the connection, so that the next job reconnects.
    if let Err(e) = &result
        && (is_unavailable(e) || slot.as_ref().is_some_and(|c| c.client.is_closed()))
    {
        *slot = None;
    }
    result
}

async fn run(
    config: &tokio_postgres::Config,
    slot: &mut Option<Connection>,
    job: &Piped,
) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
    let connection = connection(config, slot).await?;
    let statement = match connection.prepared.get(job.sql) {
        Some(statement) => statement.clone(),
        None => {
            let statement = connection.client.prepare_typed(job.sql, job.types).await?;
            connection.prepared.insert(job.sql, statement.clone());
            statement
        }
    };
    let client = &connection.client;
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = job
        .params
        .iter()
        .map(|p| p.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    let (begun, row, committed) = in_order(
        client.batch_execute(&job.begin),
        client.query_one(&statement, &params),
        client.batch_execute("COMMIT"),
    )
    .await;
    // The first error is the cause; the server rolled back what followed it (a `COMMIT`
    // in an aborted transaction answers `ROLLBACK`, not an error).
    begun?;
    let row = row?;
    committed?;
    Ok(row)
}

/// The open connection, opened anew when it is closed. One idle for
/// [`IDLE_CHECK`] is asked whether it still works first, as the pool does.
async fn connection<'a>(
    config: &tokio_postgres::Config,
    slot: &'a mut Option<Connection>,
) -> Result<&'a mut Connection, tokio_postgres::Error> {
    if let Some(open) = slot.as_mut() {
        let idle = std::mem::replace(&mut open.used, std::time::Instant::now()).elapsed();
        let dead = open.client.is_closed()
            || (idle >= IDLE_CHECK
                && !matches!(
                    tokio::time::timeout(CONNECT_TIMEOUT, open.client.simple_query("")).await,
                    Ok(Ok(_))
                ));
        if dead {
            *slot = None;
        }
    }
    match slot {
        Some(open) => Ok(open),
        None => {
            let (client, driver) = config.connect(tokio_postgres::NoTls).await?;
            // Ends by itself when the client is dropped or the connection fails.
            tokio::spawn(driver);
            client.batch_execute(SERVER_SETTINGS).await?;
            Ok(slot.insert(Connection {
                client,
                prepared: std::collections::HashMap::new(),
                used: std::time::Instant::now(),
            }))
        }
    }
}

/// Awaits three futures together, polling them in the order given each time, so that
/// their requests are sent in that order on the first poll (the driver sends a
/// request when its future is first polled).
async fn in_order<A: Future, B: Future, C: Future>(
    a: A,
    b: B,
    c: C,
) -> (A::Output, B::Output, C::Output) {
    let (mut a, mut b, mut c) = (std::pin::pin!(a), std::pin::pin!(b), std::pin::pin!(c));
    let (mut ra, mut rb, mut rc) = (None, None, None);
    std::future::poll_fn(|cx: &mut Context<'_>| {
        poll_into(a.as_mut(), cx, &mut ra);
        poll_into(b.as_mut(), cx, &mut rb);
        poll_into(c.as_mut(), cx, &mut rc);
        match (ra.take(), rb.take(), rc.take()) {
            (Some(x), Some(y), Some(z)) => Poll::Ready((x, y, z)),
            (x, y, z) => {
                (ra, rb, rc) = (x, y, z);
                Poll::Pending
            }
        }
    })
    .await
}

fn poll_into<F: Future>(future: Pin<&mut F>, cx: &mut Context<'_>, out: &mut Option<F::Output>) {
    if out.is_none()
        && let Poll::Ready(value) = future.poll(cx)
    {
        *out = Some(value);
    }
}
