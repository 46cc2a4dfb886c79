//! `flower rewind`: the workspace's files back to a checkpoint (`crate::checkpoint`)
//! and, unless files only, the conversation too: every step session lineage names is
//! cut at the checkpoint's moment (entries written after it are left out of a fork,
//! the original stays as it was), lineage points at the forks (or forgets a step that
//! had not started then), and the manifest records the rewind as a row of the
//! checkpoint's step with `error: "rewound"`, so that the next `flower` continues from
//! there (the judge's earlier verdict no longer counts).
//!
//! The checkpoints stay on the host that took them (under `runs/`): a run in a shared
//! PostgreSQL database rewinds its files only where its checkpoints are, and refuses
//! the conversation part (`--files-only` is required there).

use super::attempt::AttemptName;
use super::manifest::StepResult;
use super::runtime::Runtime;
use crate::checkpoint::{
    Change, Checkpoint, CheckpointError, CheckpointKind, Checkpoints, RestoreHook,
};
use crate::stores::{SessionKey, SessionStore, StoreError, project_key};
use crate::transcript::Entry;
use serde_json::Value;
use std::path::Path;

/// The `error` of the manifest row a rewind writes.
pub const REWOUND: &str = "rewound";

#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    #[error("这个运行没有检查点")]
    NoCheckpoints,
    #[error("没有叫 {0} 的检查点(`flower rewind` 列出它们)")]
    NoSuchPoint(String),
    #[error(
        "工作区在上一个检查点之后有 flower 之外的改动({}),不回退;确定不要这些改动就加 --discard",
        .files.join("、")
    )]
    OutsideChanges { files: Vec<String> },
    #[error("共享数据库里的运行只能回退文件(加 --files-only)")]
    SharedRun,
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("回退对话时读写会话 {session_id} 失败")]
    Store {
        session_id: String,
        #[source]
        source: StoreError,
    },
}

/// How to rewind.
#[derive(Debug, Clone, Default)]
pub struct RewindOptions {
    /// Restore the files only; the conversation goes on where it is.
    pub files_only: bool,
    /// Discard changes made outside flower since the last checkpoint (they are kept as
    /// a checkpoint of their own first, so they can still be taken back).
    pub discard: bool,
    /// The crash test's pause ([`RestoreHook`]).
    pub hook: Option<RestoreHook>,
}

/// What a rewind did.
#[derive(Debug, Clone)]
pub struct Rewound {
    pub point: Checkpoint,
    /// Paths restored (written or removed).
    pub files: usize,
    /// Per step: the fork lineage now names, or `None` when the step was forgotten.
    pub sessions: Vec<(String, Option<String>)>,
}

/// The checkpoint `point` names: its number (`12`, `#12`), or a step attempt's row name
/// (`干活` before that step's first attempt, `干活#round2` before that attempt).
pub fn resolve<'a>(list: &'a [Checkpoint], point: &str) -> Option<&'a Checkpoint> {
    if let Ok(n) = point.trim_start_matches('#').parse::<u32>() {
        return list.iter().find(|c| c.n == n);
    }
    list.iter()
        .find(|c| c.kind == CheckpointKind::Attempt && c.step == point)
}

/// Changes made since the last checkpoint (outside flower, when no flower runs).
pub fn outside_changes(checkpoints: &Checkpoints) -> Result<Vec<Change>, CheckpointError> {
    let Some(last) = checkpoints.list()?.pop() else {
        return Ok(Vec::new());
    };
    let now = checkpoints.snapshot()?;
    checkpoints.changes(&last.tree, &now)
}

impl Runtime {
    /// Rewinds the workspace (and, unless `files_only`, the conversation) to `point`
    /// (see [`resolve`]). Refuses when the workspace changed outside flower since the
    /// last checkpoint, unless `discard`.
    pub fn rewind(&self, point: &str, options: &RewindOptions) -> Result<Rewound, RewindError> {
        let checkpoints = self.checkpoints().ok_or(RewindError::NoCheckpoints)?;
        let list = checkpoints.list()?;
        let target = resolve(&list, point)
            .cloned()
            .ok_or_else(|| RewindError::NoSuchPoint(point.to_string()))?;
        let shared = self.lineage().shared().is_some();
        if shared && !options.files_only {
            return Err(RewindError::SharedRun);
        }
        let outside = outside_changes(checkpoints)?;
        if !outside.is_empty() && !options.discard {
            let mut files: Vec<String> = outside.into_iter().map(|c| c.path).collect();
            if files.len() > 5 {
                let more = files.len() - 5;
                files.truncate(5);
                files.push(format!("另 {more} 个"));
            }
            return Err(RewindError::OutsideChanges { files });
        }
        // What the rewind leaves: a checkpoint of its own, so that it can be undone.
        checkpoints.record(CheckpointKind::Rewind, "回退前的样子", None, 0)?;
        let files = checkpoints.restore(&target.tree, options.hook.as_ref())?;
        // The workspace now: the next rewind compares with it.
        checkpoints.record(
            CheckpointKind::Rewind,
            &format!("回退到 #{}", target.n),
            None,
            0,
        )?;
        let sessions = match options.files_only {
            true => Vec::new(),
            false => self.rewind_conversation(&target)?,
        };
        let mut row = StepResult::started(AttemptName::parse(&target.step).step());
        row.error = Some(REWOUND.to_string());
        row.text = format!("回退到检查点 #{}({})", target.n, target.step);
        row.session_id = sessions
            .iter()
            .find(|(step, _)| step == AttemptName::parse(&target.step).step())
            .and_then(|(_, id)| id.clone());
        row.finish();
        self.record(&row);
        Ok(Rewound {
            point: target,
            files,
            sessions,
        })
    }

    /// Cuts every step session lineage names at the checkpoint's moment.
    fn rewind_conversation(
        &self,
        target: &Checkpoint,
    ) -> Result<Vec<(String, Option<String>)>, RewindError> {
        let mut lineage = self.lineage();
        let project = project_key(Path::new(lineage.workspace()));
        let store = self.store();
        let mut changed = Vec::new();
        let steps: Vec<(String, String)> = lineage
            .steps()
            .iter()
            .map(|(s, id)| (s.clone(), id.clone()))
            .collect();
        for (step, id) in steps {
            let failed = |source| RewindError::Store {
                session_id: id.clone(),
                source,
            };
            let key = SessionKey::main(&project, &id);
            let entries = store.load_raw(&key).map_err(failed)?.unwrap_or_default();
            let kept = entries
                .iter()
                .take_while(|entry| {
                    // RFC 3339 in UTC with milliseconds on both sides: text order is time order.
                    let typed = serde_json::from_value::<Entry>(Value::clone(entry)).ok();
                    let at = typed.and_then(|entry| entry.timestamp);
                    at.is_none_or(|at| at.as_str() <= target.time.as_str())
                })
                .count();
            if kept == entries.len() {
                continue;
            }
            if kept == 0 {
                lineage.forget(&step);
                changed.push((step, None));
                continue;
            }
            let fork = uuid::Uuid::new_v4().to_string();
            let copied: Vec<Value> = entries
                .into_iter()
                .take(kept)
                .map(|mut entry| {
                    if let Some(obj) = entry.as_object_mut() {
                        obj.insert("sessionId".into(), fork.clone().into());
                        obj.insert("forkedFrom".into(), id.clone().into());
                    }
                    entry
                })
                .collect();
            store
                .append(&SessionKey::main(&project, &fork), &copied)
                .map_err(failed)?;
            // Ours for the rest of this runtime, as any session it continues.
            let _ = self.claim_session(&fork);
            lineage.remember(&step, &fork);
            changed.push((step, Some(fork)));
        }
        Ok(changed)
    }
}
