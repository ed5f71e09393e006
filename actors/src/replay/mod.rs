//! Replay debugging over recorded journals: the state at any seq, forks, the export format
//! (one event per line after a header), the decision check that re-drives the current agent
//! loop over a recording, and journal compaction. Nothing here calls a model or a tool: model
//! outputs and tool results always come from the record.

mod check;
mod compact;
mod export;
mod fold;
mod fork;

pub use check::{check, CheckReport, Divergence, Unreadable};
pub use compact::{compact, summarize};
pub use export::{
    export_header, import, parse_export, write_artifact, write_export, ArtifactRecord, Export,
    ExportHeader, ExportedArtifact, ExportedEvent, ImportError, EXPORT_FORMAT, EXPORT_VERSION,
    IMPORTED_FROM,
};
pub use fold::{
    fold_latest, fold_until, read_all, snapshot_document, state_from_document, state_view,
    SNAPSHOT_VERSION,
};
pub use fork::{create_with_journal, fork, settle_status};

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Store(#[from] stead_persistence::Error),
    /// The journal up to `through_seq` was compacted into a snapshot and a summary.
    #[error("the journal of this session was compacted through seq {through_seq}; steps up to it are summarized, not kept")]
    Compacted { through_seq: i64 },
    #[error("seq {at} is out of range: the session's last seq is {last_seq}")]
    SeqOutOfRange { at: i64, last_seq: i64 },
    #[error("{0}")]
    Invalid(String),
}
