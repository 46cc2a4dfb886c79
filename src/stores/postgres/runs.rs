//! A run's state beside its transcripts (schema version 2): the run, its lineage and
//! its manifest rows.

use super::*;

/// The other processes' manifest rows a mirror holds: the newest one's id, and how
/// many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestSeen {
    pub newest: i64,
    pub count: i64,
}

/// What a manifest merge gives back for the mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedManifest {
    /// The other processes' rows (JSON texts) in order: all of them, or, when
    /// `appended`, only those after the `seen` the merge was given.
    pub others: Vec<String>,
    pub appended: bool,
    /// The other processes' rows now (`None`: not known; the mirror is then always
    /// written whole).
    pub seen: Option<ManifestSeen>,
}

/// One row of `flower_runs`: a run and the workspace it began in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub run_key: String,
    /// Named by the user (`--run-key`), not derived from a workspace path.
    pub named: bool,
    /// The project key of the workspace that began the run: its transcripts' keys.
    pub project_key: String,
    /// That workspace's canonical path, as its host saw it.
    pub workspace: String,
    pub woke: u64,
}

/// A run as `flower serve` lists it: its row, who last took it, whether a process holds
/// its lock now (asked of the server's lock table, never by taking it) and when
/// anything of it last changed (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRun {
    pub row: RunRow,
    pub holder: Option<String>,
    pub held: bool,
    pub updated_ms: i64,
}

/// A run's state in the database (schema version 2). Each call is one transaction.
impl PostgresStore {
    /// Every run in the database, newest change first; reads only.
    pub fn run_list(&self) -> Result<Vec<ListedRun>, StoreError> {
        let sql = format!(
            "SELECT r.run_key, r.named, r.project_key, r.workspace, r.woke, r.holder, \
             EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
               AND l.objsubid = 1 \
               AND ((l.classid::bigint << 32) | l.objid::bigint) = {}), \
             GREATEST(r.updated_at, COALESCE((SELECT max(g.updated_at) FROM flower_lineage g \
               WHERE g.run_key = r.run_key), 0)) \
             FROM flower_runs r ORDER BY 8 DESC, r.run_key",
            super::lease::RUN_LOCK_KEY.replace("$1", "r.run_key")
        );
        self.call(move |c| {
            Ok(c.query(&sql, &[])?
                .iter()
                .map(|r| ListedRun {
                    row: run_row(r),
                    holder: r.get(5),
                    held: r.get(6),
                    updated_ms: r.get(7),
                })
                .collect())
        })
    }

    /// The run's row, if it was ever registered.
    pub fn run_find(&self, run_key: &str) -> Result<Option<RunRow>, StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            let row = c.query_opt(
                "SELECT run_key, named, project_key, workspace, woke FROM flower_runs \
                 WHERE run_key = $1",
                &[&run_key],
            )?;
            Ok(row.map(|r| run_row(&r)))
        })
    }

    /// Registers `row` unless its key exists; returns the row as stored (the existing
    /// one wins: nothing of an existing run is overwritten).
    pub fn run_register(&self, row: &RunRow) -> Result<RunRow, StoreError> {
        let row = row.clone();
        self.call(move |c| {
            let now = now_ms();
            let mut tx = c.transaction()?;
            tx.execute(
                "INSERT INTO flower_runs \
                 (run_key, named, project_key, workspace, woke, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, 0, $5, $5) ON CONFLICT (run_key) DO NOTHING",
                &[
                    &row.run_key,
                    &row.named,
                    &row.project_key,
                    &row.workspace,
                    &now,
                ],
            )?;
            let stored = tx.query_one(
                "SELECT run_key, named, project_key, workspace, woke FROM flower_runs \
                 WHERE run_key = $1",
                &[&row.run_key],
            )?;
            tx.commit()?;
            Ok(run_row(&stored))
        })
    }

    /// The run's wake count and step → session id.
    pub fn run_lineage(&self, run_key: &str) -> Result<(u64, Vec<(String, String)>), StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            // One snapshot for both reads: a concurrent remember never half shows.
            let mut tx = c.build_transaction().read_only(true).start()?;
            let woke = tx
                .query_opt(
                    "SELECT woke FROM flower_runs WHERE run_key = $1",
                    &[&run_key],
                )?
                .map_or(0, |r| r.get::<_, i64>(0).max(0) as u64);
            let steps = tx
                .query(
                    "SELECT step, session_id FROM flower_lineage WHERE run_key = $1 \
                     ORDER BY step COLLATE \"C\"",
                    &[&run_key],
                )?
                .into_iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            tx.commit()?;
            Ok((woke, steps))
        })
    }

    /// Sets the session of one step of a registered run.
    pub fn run_remember(
        &self,
        run_key: &str,
        step: &str,
        session_id: &str,
    ) -> Result<(), StoreError> {
        let (run_key, step, session_id) = (
            run_key.to_string(),
            step.to_string(),
            session_id.to_string(),
        );
        self.call(move |c| {
            // One statement, so one round trip and one commit.
            c.execute(
                "WITH touched AS (UPDATE flower_runs SET updated_at = $4 WHERE run_key = $1) \
                 INSERT INTO flower_lineage (run_key, step, session_id, updated_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (run_key, step) \
                 DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
                &[&run_key, &step, &session_id, &now_ms()],
            )?;
            Ok(())
        })
    }

    /// Counts one more wake of a registered run; returns the new count.
    pub fn run_wake(&self, run_key: &str) -> Result<u64, StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            let row = c.query_opt(
                "UPDATE flower_runs SET woke = woke + 1, updated_at = $2 WHERE run_key = $1 \
                 RETURNING woke",
                &[&run_key, &now_ms()],
            )?;
            Ok(row.map_or(0, |r| r.get::<_, i64>(0).max(0) as u64))
        })
    }

    /// `/new`: forgets the run's steps and wakes (its manifest rows stay: a record).
    pub fn run_reset(&self, run_key: &str) -> Result<(), StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            let mut tx = c.transaction()?;
            tx.execute("DELETE FROM flower_lineage WHERE run_key = $1", &[&run_key])?;
            tx.execute(
                "UPDATE flower_runs SET woke = 0, updated_at = $2 WHERE run_key = $1",
                &[&run_key, &now_ms()],
            )?;
            tx.commit()
        })
    }

    /// Replaces the manifest rows of process `run` in the run `run_key` by `rows` (JSON
    /// texts), leaving every other process's rows as they are, and returns all rows of
    /// the run in write order (a process's rows follow its latest write, as in the file).
    pub fn manifest_merge(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let (run_key, run) = (run_key.to_string(), run.to_string());
        self.call(move |c| {
            let mut tx = c.transaction()?;
            replace_process_rows(&mut tx, &run_key, &run, &rows)?;
            let all = tx
                .query(
                    "SELECT data FROM flower_manifest WHERE run_key = $1 ORDER BY id",
                    &[&run_key],
                )?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            tx.commit()?;
            Ok(all)
        })
    }

    /// [`Self::manifest_merge`] for a mirror that already holds the other processes'
    /// rows up to `seen` (their newest id and how many there were): when none of those
    /// went away meanwhile, only the other processes' rows written since come back, so
    /// that a write costs what changed, not the run's length. Ours are the newest rows
    /// after the merge (the merges of a run take turns), so they follow the others'.
    pub fn manifest_merge_since(
        &self,
        run_key: &str,
        run: &str,
        rows: Vec<String>,
        seen: Option<ManifestSeen>,
    ) -> Result<MergedManifest, StoreError> {
        let (run_key, run) = (run_key.to_string(), run.to_string());
        self.call(move |c| {
            let mut tx = c.transaction()?;
            replace_process_rows(&mut tx, &run_key, &run, &rows)?;
            let since = seen.map_or(i64::MAX, |s| s.newest);
            let counts = tx.query_one(
                "SELECT count(*) FILTER (WHERE id <= $3), count(*), coalesce(max(id), 0) \
                 FROM flower_manifest WHERE run_key = $1 AND run <> $2",
                &[&run_key, &run, &since],
            )?;
            let now = ManifestSeen {
                newest: counts.get(2),
                count: counts.get(1),
            };
            let appended = seen.is_some_and(|s| s.count == counts.get::<_, i64>(0));
            let from = if appended { since } else { i64::MIN };
            let others = tx
                .query(
                    "SELECT data FROM flower_manifest \
                     WHERE run_key = $1 AND run <> $2 AND id > $3 ORDER BY id",
                    &[&run_key, &run, &from],
                )?
                .into_iter()
                .map(|r| r.get(0))
                .collect();
            tx.commit()?;
            Ok(MergedManifest {
                others,
                appended,
                seen: Some(now),
            })
        })
    }

    /// Every manifest row of the run (JSON texts), in write order.
    pub fn manifest_rows(&self, run_key: &str) -> Result<Vec<String>, StoreError> {
        let run_key = run_key.to_string();
        self.call(move |c| {
            Ok(c.query(
                "SELECT data FROM flower_manifest WHERE run_key = $1 ORDER BY id",
                &[&run_key],
            )?
            .into_iter()
            .map(|r| r.get(0))
            .collect())
        })
    }
}

pub(super) fn run_row(r: &::postgres::Row) -> RunRow {
    RunRow {
        run_key: r.get(0),
        named: r.get(1),
        project_key: r.get(2),
        workspace: r.get(3),
        woke: r.get::<_, i64>(4).max(0) as u64,
    }
}

/// Inside a manifest merge: takes the run's merge lock and replaces this process's rows
/// (`run`) with `rows`. One merge of a run at a time: each then sees every merge before
/// it, so the mirror written from its answer is never missing a committed row.
fn replace_process_rows(
    tx: &mut postgres::Transaction<'_>,
    run_key: &str,
    run: &str,
    rows: &[String],
) -> Result<(), postgres::Error> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/manifest/' || $1, 0))",
        &[&run_key],
    )?;
    tx.execute(
        "DELETE FROM flower_manifest WHERE run_key = $1 AND run = $2",
        &[&run_key, &run],
    )?;
    // All rows in one statement, ids in their order.
    tx.execute(
        "INSERT INTO flower_manifest (run_key, run, data) \
         SELECT $1, $2, d FROM unnest($3::text[]) WITH ORDINALITY AS t(d, n) ORDER BY n",
        &[&run_key, &run, &rows],
    )?;
    Ok(())
}
