//! `runs/lineage.json`. TODO (issue #4)
pub struct Lineage;
