//! Transcripts: appending (one transaction per batch, under the session's advisory
//! lock) and deleting.

use super::*;

impl PostgresStore {
    /// [`SessionStore::append`], returning how many entries were stored.
    pub fn append_counted(&self, key: &SessionKey, entries: &[Value]) -> Result<usize, StoreError> {
        self.append_with(key, entries, true)
    }

    /// An append; `durable: false` is [`SessionStore::append_deferred`]: the commit
    /// does not wait for the WAL flush (`synchronous_commit = off` for this
    /// transaction). The server flushes it within `3 × wal_writer_delay` on its own,
    /// and a durable commit after it flushes the WAL through both: one flush a turn.
    /// Long because the idempotent insert, the sequence numbering and the reconnect
    /// after a dropped connection are one transaction whose steps share its state.
    pub(super) fn append_with(
        &self,
        key: &SessionKey,
        entries: &[Value],
        durable: bool,
    ) -> Result<usize, StoreError> {
        key.validate()?;
        let mut rows = Vec::with_capacity(entries.len());
        for (index, entry) in entries.iter().enumerate() {
            let Some(object) = entry.as_object() else {
                return Err(StoreError::NotAnObject { index });
            };
            let uuid = object
                .get("uuid")
                .and_then(Value::as_str)
                .map(str::to_string);
            let kind = object
                .get("type")
                .and_then(Value::as_str)
                .map(str::to_string);
            let data = serde_json::to_string(entry)
                .map_err(|source| StoreError::Encode { index, source })?;
            rows.push((uuid, kind, data));
        }
        if rows.is_empty() {
            return Ok(0);
        }
        let lock = session_lock(self.schema.get().map_or("", String::as_str), key);
        let key = key.clone();
        let entries = entries.to_vec();
        self.call(move |c| {
            let subpath = key.subpath.clone().unwrap_or_default();
            let (mut uuids, mut kinds, mut datas) = (vec![], vec![], vec![]);
            for (uuid, kind, data) in rows {
                uuids.push(uuid);
                kinds.push(kind);
                datas.push(data);
            }
            // Round trips and planning are what a single append costs on a fast disk,
            // so BEGIN and the lock go in one (the key is a number: nothing to quote),
            // the statements are prepared once per connection, and the insert reads
            // the summary it folds into: BEGIN + lock, insert, summary, COMMIT.
            let open = Open {
                client: c,
                committed: false,
            };
            let tx = &mut *open.client;
            let lazy = if durable {
                ""
            } else {
                "SET LOCAL synchronous_commit = off; "
            };
            tx.batch_execute(&format!(
                "BEGIN; {lazy}SELECT pg_advisory_xact_lock({lock})"
            ))?;
            let now = now_ms();
            // One statement, after the lock (so it reads the summary as the last
            // append left it); ids follow the batch's order.
            // The key's transcripts row is made by its first append (under the lock:
            // no other append to the key is between the look and the insert).
            let insert = prepared(
                tx,
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
                   DO NOTHING RETURNING uuid) \
                 SELECT (SELECT count(*) FROM ins), \
                        (SELECT array_agg(uuid) FILTER (WHERE uuid IS NOT NULL) FROM ins), \
                        s.mtime, s.data \
                 FROM (SELECT 1) AS one LEFT JOIN flower_summaries s \
                   ON s.project_key = $1 AND s.session_id = $2",
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT_ARRAY,
                    Type::TEXT_ARRAY,
                    Type::TEXT_ARRAY,
                    Type::INT8,
                ],
            )?;
            let row = tx.query_one(
                &insert,
                &[
                    &key.project_key,
                    &key.session_id,
                    &subpath,
                    &uuids,
                    &kinds,
                    &datas,
                    &now,
                ],
            )?;
            let count = usize::try_from(row.get::<_, i64>(0)).unwrap_or(0);
            if key.subpath.is_none() && count > 0 {
                let mut fresh: HashSet<String> = row
                    .get::<_, Option<Vec<String>>>(1)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                // An entry without a uuid is always stored; of a uuid the batch holds
                // twice, only the first.
                let stored = entries.iter().zip(&uuids).filter_map(|(entry, uuid)| {
                    match uuid {
                        None => Some(entry),
                        Some(uuid) => fresh.remove(uuid).then_some(entry),
                    }
                });
                let prev_mtime = row.get::<_, Option<i64>>(2).unwrap_or(0);
                let prev_data = row
                    .get::<_, Option<&str>>(3)
                    .and_then(|text| serde_json::from_str(text).ok());
                let data = fold_session_summary(prev_data, stored);
                let mtime = now.max(prev_mtime);
                let upsert = prepared(
                    tx,
                    "INSERT INTO flower_summaries (project_key, session_id, mtime, data) \
                     VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (project_key, session_id) \
                     DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
                    &[Type::TEXT, Type::TEXT, Type::INT8, Type::TEXT],
                )?;
                tx.execute(
                    &upsert,
                    &[&key.project_key, &key.session_id, &mtime, &data.to_string()],
                )?;
            }
            open.commit()?;
            Ok(count)
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
