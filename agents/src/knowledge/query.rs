//! A knowledge query as the API takes it (docs/knowledge.md, "Query"): `text` or `vector`,
//! `top_k`, an equality `filter` on metadata fields, and the search `mode`.

use serde_json::{Map, Value};
use stead_config::SearchMode;
use stead_http::{ApiError, ErrorCode};

/// A query, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    pub text: Option<String>,
    pub vector: Option<Vec<f32>>,
    pub top_k: usize,
    pub filter: Map<String, Value>,
    pub mode: SearchMode,
}

/// Reads a query body: `text` or `vector`, `top_k` (1 to `max_top_k`), `filter`, `mode`.
pub fn parse(body: &Value, max_top_k: usize) -> Result<Query, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::InvalidSearch, message);
    let Value::Object(map) = body else {
        return Err(bad("the query must be a JSON object".into()));
    };
    if let Some(key) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "text" | "vector" | "top_k" | "filter" | "mode"))
    {
        return Err(bad(format!(
            "unknown field `{key}` (text, vector, top_k, filter, mode)"
        )));
    }
    let text = match map.get("text") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if !t.trim().is_empty() => Some(t.clone()),
        Some(_) => return Err(bad("`text` must be a non-empty string".into())),
    };
    let vector = match map.get("vector") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) if !items.is_empty() => Some(
            items
                .iter()
                .map(|v| v.as_f64().map(|f| f as f32).filter(|f| f.is_finite()))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| bad("`vector` must be an array of numbers".into()))?,
        ),
        Some(_) => return Err(bad("`vector` must be a non-empty array of numbers".into())),
    };
    if text.is_some() == vector.is_some() {
        return Err(bad("give one of `text` and `vector`".into()));
    }
    let max = max_top_k;
    let top_k = match map.get("top_k") {
        None | Some(Value::Null) => 5.min(max),
        Some(v) => v
            .as_u64()
            .filter(|k| (1..=max as u64).contains(k))
            .ok_or_else(|| bad(format!("`top_k` must be an integer from 1 to {max}")))?
            as usize,
    };
    let filter = match map.get("filter") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(filter)) => filter.clone(),
        Some(_) => return Err(bad("`filter` must be an object of field: value".into())),
    };
    let mode = match map.get("mode") {
        None | Some(Value::Null) => SearchMode::Exact,
        Some(Value::String(m)) => SearchMode::parse(m)
            .ok_or_else(|| bad(format!("unknown mode `{m}` (exact, ann, hybrid)")))?,
        Some(_) => return Err(bad("`mode` must be a string".into())),
    };
    if mode == SearchMode::Hybrid && text.is_none() {
        return Err(bad("`hybrid` search needs `text`".into()));
    }
    Ok(Query {
        text,
        vector,
        top_k,
        filter,
        mode,
    })
}
