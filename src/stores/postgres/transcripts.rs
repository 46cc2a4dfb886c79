//! Transcripts: appending (one transaction per batch, under the session's advisory
//! lock) and deleting.

use super::*;

impl PostgresStore {
    /// [`SessionStore::append`], returning how many entries were stored; each is
    /// stored as it serializes.
    pub fn append_counted(&self, key: &SessionKey, entries: &[Entry]) -> Result<usize, StoreError> {
        self.append_with(key, super::super::incoming(entries)?, true)
    }

    /// An append; `durable: false` is [`SessionStore::append_deferred`]: the commit
    /// does not wait for the WAL flush (`synchronous_commit = off` for this
    /// transaction). The server flushes it within `3 × wal_writer_delay` on its own,
    /// and a durable commit after it flushes the WAL through both: one flush a turn.
    ///
    /// One round trip ([`Piped`]) when this process wrote the session's summary last
    /// (or the key is a sub-agent's, which has none): the summary is folded here from
    /// the copy kept, and written only if the row still holds that copy, the inputs of
    /// the fold; else the statement fails on purpose ([`summary_moved`]), nothing is
    /// written, and the append is made again the way that reads the summary first.
    pub(super) fn append_with(
        &self,
        key: &SessionKey,
        rows: Vec<Incoming<'_>>,
        durable: bool,
    ) -> Result<usize, StoreError> {
        key.validate()?;
        let batch = Batch::of(&rows);
        if batch.datas.is_empty() {
            return Ok(0);
        }
        let lock = session_lock(self.schema.get().map_or("", String::as_str), key);
        let lazy = if durable {
            ""
        } else {
            "SET LOCAL synchronous_commit = off; "
        };
        let begin = format!("BEGIN; {lazy}SELECT pg_advisory_xact_lock({lock})");
        let now = now_ms();
        if key.subpath.is_some() {
            let params = batch.into_params(key, now);
            return self
                .pipe(Piped {
                    begin,
                    sql: INSERT_ENTRIES,
                    types: &ENTRY_TYPES,
                    params,
                })
                .and_then(stored)
                .map(|count| counted(&self.trips.one_trip, count))
                .map_err(|e| self.pipe_failed(e));
        }
        let session = (key.project_key.clone(), key.session_id.clone());
        // Taken out while this append runs: put back only once a write is known.
        let kept = self
            .summaries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&session);
        let batch = match kept {
            Some(prev) if batch.uuids_distinct() => {
                let data = fold_session_summary(Some(prev.data), rows.iter().map(|r| r.entry));
                let written = WrittenSummary {
                    mtime: now.max(prev.mtime),
                    text: data.to_json(),
                    data,
                };
                let mut params = batch.into_params(key, now);
                params.push(Box::new(prev.mtime));
                params.push(Box::new(prev.text));
                params.push(Box::new(written.mtime));
                params.push(Box::new(written.text.clone()));
                let piped = Piped {
                    begin: begin.clone(),
                    sql: INSERT_FOLDING_SUMMARY,
                    types: &FOLDING_TYPES,
                    params,
                };
                match self.pipe(piped).and_then(stored) {
                    Ok(count) => {
                        self.keep_summary(session, written);
                        return Ok(counted(&self.trips.one_trip, count));
                    }
                    // Rare: the batch is made again rather than copied on every append.
                    Err(PipeError::Driver(e)) if summary_moved(&e) => Batch::of(&rows),
                    Err(e) => return Err(self.pipe_failed(e)),
                }
            }
            _ => batch,
        };
        let entries = rows.iter().map(|r| r.entry.clone()).collect();
        let (count, written) = self.append_reading_summary(key, entries, batch, &begin, now)?;
        if let Some(written) = written {
            self.keep_summary(session, written);
        }
        Ok(counted(&self.trips.read_first, count))
    }

    fn keep_summary(&self, session: (String, String), written: WrittenSummary) {
        self.summaries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session, written);
    }

    fn pipe_failed(&self, e: PipeError) -> StoreError {
        match e {
            PipeError::Store(e) => e,
            PipeError::Driver(e) => self.failed(e),
        }
    }

    /// An append to a main transcript that reads the summary it folds into (inside
    /// the transaction, after the lock) and writes it back: BEGIN + lock, insert,
    /// summary, COMMIT. Returns how many entries were stored and the summary written,
    /// if one was.
    fn append_reading_summary(
        &self,
        key: &SessionKey,
        entries: Vec<Entry>,
        batch: Batch,
        begin: &str,
        now: i64,
    ) -> Result<(usize, Option<WrittenSummary>), StoreError> {
        let key = key.clone();
        let begin = begin.to_string();
        self.call(move |c| {
            let open = Open {
                client: c,
                committed: false,
            };
            let tx = &mut *open.client;
            tx.batch_execute(&begin)?;
            let insert = prepared(tx, INSERT_READING_SUMMARY, &ENTRY_TYPES)?;
            let row = tx.query_one(
                &insert,
                &[
                    &key.project_key,
                    &key.session_id,
                    &"",
                    &batch.uuids,
                    &batch.kinds,
                    &batch.datas,
                    &now,
                ],
            )?;
            let count = usize::try_from(row.get::<_, i64>(0)).unwrap_or(0);
            let mut written = None;
            if count > 0 {
                let mut fresh: HashSet<String> = row
                    .get::<_, Option<Vec<String>>>(1)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                // An entry without a uuid is always stored; of a uuid the batch holds
                // twice, only the first.
                let stored =
                    entries
                        .iter()
                        .zip(&batch.uuids)
                        .filter_map(|(entry, uuid)| match uuid {
                            None => Some(entry),
                            Some(uuid) => fresh.remove(uuid).then_some(entry),
                        });
                let prev_mtime = row.get::<_, Option<i64>>(2).unwrap_or(0);
                let prev_data = row.get::<_, Option<&str>>(3).and_then(SummaryData::parse);
                let data = fold_session_summary(prev_data, stored);
                let summary = WrittenSummary {
                    mtime: now.max(prev_mtime),
                    text: data.to_json(),
                    data,
                };
                let upsert = prepared(
                    tx,
                    UPSERT_SUMMARY,
                    &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
                )?;
                tx.execute(
                    &upsert,
                    &[
                        &key.project_key,
                        &key.session_id,
                        &summary.mtime,
                        &summary.text,
                    ],
                )?;
                written = Some(summary);
            }
            open.commit()?;
            Ok((count, written))
        })
    }

    /// [`SessionStore::delete`], returning how many entries were removed.
    pub fn delete_counted(&self, key: &SessionKey) -> Result<usize, StoreError> {
        key.validate()?;
        let key = key.clone();
        self.call(move |c| {
            let mut tx = c.transaction()?;
            let removed = match &key.subpath {
                None => {
                    tx.execute(
                        "DELETE FROM flower_summaries WHERE project_key = $1 AND session_id = $2",
                        &[&key.project_key, &key.session_id],
                    )?;
                    tx.execute(
                        "DELETE FROM flower_entries WHERE transcript IN \
                         (SELECT id FROM flower_transcripts \
                          WHERE project_key = $1 AND session_id = $2)",
                        &[&key.project_key, &key.session_id],
                    )?
                }
                Some(sub) => tx.execute(
                    "DELETE FROM flower_entries WHERE transcript = \
                     (SELECT id FROM flower_transcripts \
                      WHERE project_key = $1 AND session_id = $2 AND subpath = $3)",
                    &[&key.project_key, &key.session_id, sub],
                )?,
            };
            tx.commit()?;
            Ok(removed as usize)
        })
    }
}

/// A session's summary as this process last wrote it: the row's `mtime` and `data`
/// text, and that text parsed.
pub(super) struct WrittenSummary {
    mtime: i64,
    text: String,
    data: SummaryData,
}

/// A batch's columns: each entry's uuid, type and JSON text.
struct Batch {
    uuids: Vec<Option<String>>,
    kinds: Vec<Option<String>>,
    datas: Vec<String>,
}

impl Batch {
    fn of(rows: &[Incoming<'_>]) -> Batch {
        Batch {
            uuids: rows.iter().map(|r| r.entry.uuid.clone()).collect(),
            kinds: rows.iter().map(|r| r.entry.kind.clone()).collect(),
            datas: rows.iter().map(|r| r.text.clone()).collect(),
        }
    }

    /// No uuid twice in the batch: then every entry is stored unless the transcript
    /// already holds its uuid.
    fn uuids_distinct(&self) -> bool {
        let mut seen = HashSet::with_capacity(self.uuids.len());
        self.uuids
            .iter()
            .flatten()
            .all(|uuid| seen.insert(uuid.as_str()))
    }

    /// The parameters of [`ENTRY_TYPES`], the batch moved into them.
    fn into_params(
        self,
        key: &SessionKey,
        now: i64,
    ) -> Vec<Box<dyn tokio_postgres::types::ToSql + Send + Sync>> {
        vec![
            Box::new(key.project_key.clone()),
            Box::new(key.session_id.clone()),
            Box::new(key.subpath.clone().unwrap_or_default()),
            Box::new(self.uuids),
            Box::new(self.kinds),
            Box::new(self.datas),
            Box::new(now),
        ]
    }
}

/// How many entries a piped append stored: its row's first column.
fn stored(row: tokio_postgres::Row) -> Result<usize, PipeError> {
    let count: i64 = row.try_get(0).map_err(PipeError::Driver)?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Inserts a batch into a key's transcript ($1 project, $2 session, $3 subpath, $4–$6
/// the batch's uuids, types and texts, $7 the time), ids in the batch's order. The
/// key's transcripts row is made by its first append (under the lock: no other append
/// to the key is between the look and the insert). A uuid the transcript holds is
/// skipped: `ins` returns the uuids stored.
macro_rules! insert_entries {
    () => {
        "WITH old AS ( \
           SELECT id FROM flower_transcripts \
           WHERE project_key = $1 AND session_id = $2 AND subpath = $3), \
         new AS ( \
           INSERT INTO flower_transcripts (project_key, session_id, subpath) \
           SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM old) RETURNING id), \
         ins AS ( \
           INSERT INTO flower_entries (transcript, uuid, type, stored_at, data) \
           SELECT (SELECT id FROM old UNION ALL SELECT id FROM new), u, t, $7, d \
           FROM unnest($4::text[], $5::text[], $6::text[]) WITH ORDINALITY AS x(u, t, d, n) \
           ORDER BY n \
           ON CONFLICT (transcript, uuid) WHERE uuid IS NOT NULL \
           DO NOTHING RETURNING uuid) "
    };
}

const ENTRY_TYPES: [Type; 7] = [
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8,
];

/// A sub-agent's append: how many entries were stored.
const INSERT_ENTRIES: &str = concat!(insert_entries!(), "SELECT count(*) FROM ins");

/// A main transcript's append, reading the summary as the last append left it: how
/// many entries were stored, their uuids, the summary's `mtime` and `data`.
const INSERT_READING_SUMMARY: &str = concat!(
    insert_entries!(),
    "SELECT (SELECT count(*) FROM ins), \
            (SELECT array_agg(uuid) FILTER (WHERE uuid IS NOT NULL) FROM ins), \
            s.mtime, s.data \
     FROM (SELECT 1) AS one LEFT JOIN flower_summaries s \
       ON s.project_key = $1 AND s.session_id = $2"
);

const UPSERT_SUMMARY: &str = "INSERT INTO flower_summaries (project_key, session_id, mtime, data) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (project_key, session_id) \
     DO UPDATE SET mtime = excluded.mtime, data = excluded.data";

/// A main transcript's append with the summary folded by the caller ($10 `mtime`, $11
/// `data`) from the row it last wrote ($8, $9). Written only if every entry was stored
/// and the row holds exactly that, else `mtime` is NULL and the statement fails
/// ([`summary_moved`]): the transaction writes nothing then.
const INSERT_FOLDING_SUMMARY: &str = concat!(
    insert_entries!(),
    ", folded AS ( \
       INSERT INTO flower_summaries (project_key, session_id, mtime, data) \
       SELECT $1, $2, \
              CASE WHEN (SELECT count(*) FROM ins) = cardinality($6::text[]) \
                    AND EXISTS (SELECT 1 FROM flower_summaries \
                                WHERE project_key = $1 AND session_id = $2 \
                                  AND mtime = $8 AND data = $9) \
                   THEN $10::bigint END, \
              $11 \
       ON CONFLICT (project_key, session_id) \
       DO UPDATE SET mtime = excluded.mtime, data = excluded.data) \
     SELECT count(*) FROM ins"
);

/// [`ENTRY_TYPES`], then the summary's: as last written, as folded now.
const FOLDING_TYPES: [Type; 11] = {
    let [a, b, c, d, e, f, g] = ENTRY_TYPES;
    [
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
    ]
};

/// Whether `e` is [`INSERT_FOLDING_SUMMARY`] finding that the summary moved (or an
/// entry was there already): the NULL `mtime` it writes then.
fn summary_moved(e: &::postgres::Error) -> bool {
    e.code() == Some(&::postgres::error::SqlState::NOT_NULL_VIOLATION)
        && e.as_db_error().is_some_and(|db| {
            db.table() == Some("flower_summaries") && db.column() == Some("mtime")
        })
}

/// The advisory-lock key that serialises appends to one session: FNV-1a of
/// `<schema>/session/<project>/<session>`, computed here so that it can be sent as a
/// literal beside BEGIN.
pub(super) fn session_lock(schema: &str, key: &SessionKey) -> i64 {
    let text = format!("{schema}/session/{}/{}", key.project_key, key.session_id);
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// A transaction begun by hand (`BEGIN` sent with the first statement): rolled back when
/// dropped unless it was committed, so that an error never leaves the pooled
/// connection inside an aborted transaction.
pub(super) struct Open<'a> {
    pub(super) client: &'a mut Client,
    pub(super) committed: bool,
}

impl Open<'_> {
    pub(super) fn commit(mut self) -> Result<(), ::postgres::Error> {
        self.committed = true;
        self.client.batch_execute("COMMIT")
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        // On a closed connection there is nothing to roll back: it is replaced anyway.
        if !self.committed && !self.client.is_closed() {
            let _ = self.client.batch_execute("ROLLBACK");
        }
    }
}

/// `count`, after adding one to `trips`.
fn counted(trips: &std::sync::atomic::AtomicU64, count: usize) -> usize {
    trips.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    count
}
