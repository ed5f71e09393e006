//! What a backend contributes to the shared store: how it encodes and decodes ids, times and
//! JSON, how it runs a statement, and the few pieces of SQL that differ between PostgreSQL and
//! SQLite. Statements are written once, in [`Sql`], which binds values through the dialect
//! (sqlx's `QueryBuilder` writes each backend's placeholders, `$n` or `?`).

use std::fmt::Display;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Database, Pool, QueryBuilder, Transaction};
use uuid::Uuid;

use crate::{Backend, Result};

/// A value bound to a statement, in the store's terms; each dialect encodes it as its columns
/// store it (PostgreSQL: `uuid`, `timestamptz`, `jsonb`; SQLite: text, microseconds, text).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Id(Uuid),
    OptId(Option<Uuid>),
    Time(DateTime<Utc>),
    /// A time as Unix microseconds, as a cursor carries it (SQLite binds it unconverted).
    Micros(i64),
    Json(Value),
    Text(String),
    OptText(Option<String>),
    Int(i64),
    Real(f64),
    OptReal(Option<f64>),
    Bool(bool),
    Bytes(Vec<u8>),
    OptInt(Option<i64>),
}

macro_rules! arg_from {
    ($($type:ty => $variant:ident),* $(,)?) => {
        $(impl From<$type> for Arg {
            fn from(value: $type) -> Self {
                Arg::$variant(value)
            }
        })*
    };
}

arg_from!(
    Uuid => Id,
    Option<Uuid> => OptId,
    DateTime<Utc> => Time,
    Value => Json,
    String => Text,
    Option<String> => OptText,
    i64 => Int,
    f64 => Real,
    Option<f64> => OptReal,
    bool => Bool,
    Vec<u8> => Bytes,
    Option<i64> => OptInt,
);

impl From<&Value> for Arg {
    fn from(value: &Value) -> Self {
        Arg::Json(value.clone())
    }
}

impl From<&str> for Arg {
    fn from(value: &str) -> Self {
        Arg::Text(value.to_string())
    }
}

/// Where a statement runs: on a pool, or inside an open transaction.
pub(crate) enum On<'a, DB: Database> {
    Pool(&'a Pool<DB>),
    Tx(&'a mut Transaction<'static, DB>),
}

/// The columns of a fetched row, read as the store's types (each dialect decodes its own
/// encodings; a damaged id or JSON text is [`crate::Error::Corrupt`]).
pub(crate) trait Columns {
    fn int(&self, column: &str) -> Result<i64>;
    fn real(&self, column: &str) -> Result<f64>;
    fn opt_real(&self, column: &str) -> Result<Option<f64>>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>>;
    fn bytes(&self, column: &str) -> Result<Vec<u8>>;
    fn flag(&self, column: &str) -> Result<bool>;
    fn text(&self, column: &str) -> Result<String>;
    fn opt_text(&self, column: &str) -> Result<Option<String>>;
    fn id(&self, column: &str) -> Result<Uuid>;
    fn opt_id(&self, column: &str) -> Result<Option<Uuid>>;
    fn time(&self, column: &str) -> Result<DateTime<Utc>>;
    fn opt_time(&self, column: &str) -> Result<Option<DateTime<Utc>>>;
    fn json(&self, column: &str) -> Result<Value>;
}

/// One backend: its connections, encodings, statement execution and the SQL that differs.
#[async_trait]
pub(crate) trait Dialect: Send + Sync + Sized + 'static {
    type Db: Database;
    type Row: Columns + Send;

    const BACKEND: Backend;
    /// Whether lease times are the database's clock (a server many nodes share) rather than
    /// this node's (SQLite: the file is on this machine, so its clock is the node's).
    const DATABASE_CLOCK: bool;
    /// Whether a JSON column can hold a NUL character (PostgreSQL's `jsonb` cannot, so values
    /// with one are refused before they reach it).
    const JSON_HOLDS_NUL: bool;
    /// Appended to `ORDER BY key` so that text keys sort by their bytes.
    const BYTE_ORDER: &'static str;

    /// Connections for reads.
    fn reader(&self) -> &Pool<Self::Db>;
    /// Connections for writes (SQLite: its one writer connection).
    fn writer(&self) -> &Pool<Self::Db>;
    /// Closes every connection.
    async fn close(&self);

    /// Versions of the migrations applied so far, in order.
    async fn applied_migrations(&self) -> Result<Vec<i64>>;
    /// Applies the backend's pending migrations.
    async fn run_migrations(&self) -> Result<()>;

    /// Binds `value`, encoded as the backend stores it.
    fn bind(builder: &mut QueryBuilder<'static, Self::Db>, value: Arg);
    async fn fetch_all(
        on: On<'_, Self::Db>,
        builder: &mut QueryBuilder<'static, Self::Db>,
    ) -> sqlx::Result<Vec<Self::Row>>;
    async fn fetch_optional(
        on: On<'_, Self::Db>,
        builder: &mut QueryBuilder<'static, Self::Db>,
    ) -> sqlx::Result<Option<Self::Row>>;
    /// Runs a statement and returns how many rows it changed.
    async fn execute(
        on: On<'_, Self::Db>,
        builder: &mut QueryBuilder<'static, Self::Db>,
    ) -> sqlx::Result<u64>;

    /// Pushes an expression for the value at `key` of the JSON object in `column`, as text.
    fn push_json_text(sql: &mut Sql<Self>, column: &str, key: &str);
    /// Pushes a condition that `column` starts with `prefix` (`%` and `_` taken literally).
    fn push_starts_with(sql: &mut Sql<Self>, column: &str, prefix: &str);
    /// A statement, run inside the compaction's transaction, that returns a row when the
    /// session is ended with last seq `through_seq`, and holds the session against concurrent
    /// appends until the transaction ends.
    fn lock_ended_session(session_id: Uuid, through_seq: i64) -> Sql<Self>;
}

/// A statement being built: SQL text with values bound through the dialect.
pub(crate) struct Sql<D: Dialect> {
    builder: QueryBuilder<'static, D::Db>,
}

impl<D: Dialect> Sql<D> {
    pub fn new(init: impl Into<String>) -> Self {
        Sql {
            builder: QueryBuilder::new(init),
        }
    }

    pub fn push(&mut self, sql: impl Display) -> &mut Self {
        self.builder.push(sql);
        self
    }

    /// Binds a value (the builder writes the backend's placeholder).
    pub fn bind(&mut self, value: impl Into<Arg>) -> &mut Self {
        D::bind(&mut self.builder, value.into());
        self
    }

    /// Pushes `project_id = … AND {column} = …`: a resource named within its project
    /// (collection and dataset names are unique per project).
    pub fn named(&mut self, column: &str, project: uuid::Uuid, name: &str) -> &mut Self {
        self.push("project_id = ")
            .bind(project)
            .push(format!(" AND {column} = "))
            .bind(name)
    }

    /// Pushes `(a, b, …)`, each item bound: the right side of an `IN`.
    pub fn list(&mut self, items: &[String]) -> &mut Self {
        self.push("(");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(item.as_str());
        }
        self.push(")")
    }

    /// Pushes `VALUES (…), (…)`: one tuple per item, of the values `row` gives for it.
    pub fn values<T, R>(&mut self, items: &[T], mut row: impl FnMut(&T) -> R) -> &mut Self
    where
        R: IntoIterator<Item = Arg>,
    {
        self.push("VALUES ");
        for (i, item) in items.iter().enumerate() {
            self.push(if i == 0 { "(" } else { ", (" });
            for (j, value) in row(item).into_iter().enumerate() {
                if j > 0 {
                    self.push(", ");
                }
                self.bind(value);
            }
            self.push(")");
        }
        self
    }

    pub async fn fetch_all(&mut self, on: On<'_, D::Db>) -> sqlx::Result<Vec<D::Row>> {
        D::fetch_all(on, &mut self.builder).await
    }

    pub async fn fetch_optional(&mut self, on: On<'_, D::Db>) -> sqlx::Result<Option<D::Row>> {
        D::fetch_optional(on, &mut self.builder).await
    }

    /// Runs the statement and returns how many rows it changed.
    pub async fn execute(&mut self, on: On<'_, D::Db>) -> sqlx::Result<u64> {
        D::execute(on, &mut self.builder).await
    }
}
