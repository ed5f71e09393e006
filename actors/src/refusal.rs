//! Why an input is refused: the decision journals nothing and the caller hears why (REST
//! answers each refusal with its own error code).

/// Inputs refused without touching the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    DuplicateClientId,
    NoSuchApproval,
    AlreadyDecided,
    ArgsHashMismatch,
    /// A model or tool result for a call that is not in flight (late or replayed).
    Stale,
    NothingToCancel,
    /// The session failed or was closed: it takes no more input.
    Ended,
    /// A user message while a turn runs and `max_queued_messages` are queued already.
    QueueFull,
    /// An approval by a session token's holder of a tool whose `approver` is `operator`.
    OperatorRequired,
    /// A decision on a budget approval by someone who may not allow spending (a session
    /// token, a project key other than `admin`).
    SpendRequired,
    /// `overspend_usd` on the approval of a tool call.
    NotABudgetApproval,
    /// A `drop_if_busy` message while a turn runs.
    Busy,
    /// A schedule definition that cannot be used (the message says why).
    InvalidSchedule(String),
    /// The same schedule (key and definition) exists already: nothing to do.
    ScheduleExists,
    /// Another schedule holds the key (and `replace` was not set).
    ScheduleConflict,
    /// The session holds this many pending schedules already.
    TooManySchedules(usize),
    NoSuchSchedule,
    /// No schedule of the session is due (the due index woke it early, or another node fired).
    NothingDue,
    /// Due schedules wait: the session's schedules fired `schedules.max_firings_per_hour`
    /// times in the last hour; the next may fire at this time.
    FiringLimit(chrono::DateTime<chrono::Utc>),
}
