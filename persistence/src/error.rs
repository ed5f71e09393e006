use uuid::Uuid;

/// Everything that can go wrong in the persistence layer.
///
/// Business outcomes that callers are expected to handle (a stale writer, an unknown id, an
/// oversized event) have their own variants so that the layers above can map them to typed
/// answers; `Database` and `Migrate` are infrastructure failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The session does not exist.
    #[error("session {0} not found")]
    SessionNotFound(Uuid),

    /// The writer's view of the journal is stale: another writer appended first. Nothing was
    /// written. This is the fencing that keeps one writer per session.
    #[error(
        "journal conflict on session {session_id}: expected last seq {expected}, actual {actual}"
    )]
    Conflict {
        session_id: Uuid,
        expected: i64,
        actual: i64,
    },

    /// Another node holds the session's lease until `until`. Nothing was changed.
    #[error("session {session_id} is held by {owner} until {until}")]
    LeaseHeld {
        session_id: Uuid,
        owner: String,
        until: chrono::DateTime<chrono::Utc>,
    },

    /// The writer's lease epoch is not the session's any more: another activation took the
    /// session over. Nothing was written; the writer must stop acting for the session.
    #[error("session {session_id} was taken over (lease epoch {current}, writer had {held})")]
    Fenced {
        session_id: Uuid,
        held: stead_model::Epoch,
        current: stead_model::Epoch,
    },

    /// An event's serialized payload exceeds the configured limit. Nothing was written.
    #[error("event of kind `{kind}` is {size} bytes, over the limit of {limit} bytes")]
    EventTooLarge {
        kind: String,
        size: usize,
        limit: usize,
    },

    /// Only ended (closed or failed) sessions are compacted; this one is open or parked.
    #[error("session {session_id} is {status}: only closed or failed sessions are compacted")]
    NotCompactable {
        session_id: Uuid,
        status: crate::SessionStatus,
    },

    /// The caller passed something that can never succeed (an empty append, a bad cursor).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The database URL or store options are unusable.
    #[error("{0}")]
    Config(String),

    /// The transaction that carried this append failed as a whole; nothing of it was written.
    #[error("journal commit failed: {0}")]
    CommitFailed(String),

    /// A stored value could not be decoded (an id or JSON document damaged outside Stead).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),

    /// The store has been shut down; no more writes are accepted.
    #[error("the journal store is shut down")]
    ShutDown,

    /// A named thing (a knowledge collection or document) does not exist.
    #[error("{0} not found")]
    NotFound(String),

    /// A named thing exists already with another definition.
    #[error("{0}")]
    Exists(String),

    /// The write does not fit what is stored (an embedding of another model or dimension).
    #[error("{0}")]
    Mismatch(String),

    /// What the write was computed from changed meanwhile; nothing was written.
    #[error("{0}")]
    Stale(String),

    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// A failure of the SQLite journal's own writer (SQLite's C API).
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),

    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl Error {
    /// True for failures that a retry of the same call cannot fix.
    pub fn is_permanent(&self) -> bool {
        !matches!(
            self,
            Error::Database(_) | Error::Sqlite(_) | Error::CommitFailed(_) | Error::ShutDown
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
