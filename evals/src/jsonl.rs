//! Datasets as JSONL: a header line `{"stead_dataset": 1, "name", "version"}`, then one case
//! per line (with its history, so that it survives the purge of its session and travels
//! between installations).

use serde::{Deserialize, Serialize};

use crate::case::Case;

/// The format's version, in every header.
pub const FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub stead_dataset: u32,
    pub name: String,
    pub version: i64,
}

/// A line that cannot be read: its number (1-based) and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ImportError {
    pub line: usize,
    pub message: String,
}

/// The dataset `name` at `version` with its cases, one JSON document per line.
pub fn write(name: &str, version: i64, cases: &[Case]) -> String {
    let header = Header {
        stead_dataset: FORMAT,
        name: name.to_string(),
        version,
    };
    let mut out = serde_json::to_string(&header).unwrap_or_default();
    out.push('\n');
    for case in cases {
        out.push_str(&serde_json::to_string(case).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Reads a dataset written by [`write`]; every case is checked.
pub fn read(text: &str) -> Result<(Header, Vec<Case>), ImportError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines.next().ok_or(ImportError {
        line: 1,
        message: "empty: a dataset starts with its header line".into(),
    })?;
    let header: Header = serde_json::from_str(first).map_err(|e| ImportError {
        line: 1,
        message: format!(
            "not a dataset header ({{\"stead_dataset\", \"name\", \"version\"}}): {e}"
        ),
    })?;
    if header.stead_dataset != FORMAT {
        return Err(ImportError {
            line: 1,
            message: format!(
                "dataset format {} is not one this Stead reads ({FORMAT})",
                header.stead_dataset
            ),
        });
    }
    let mut cases = Vec::new();
    for (i, line) in lines {
        let case: Case = serde_json::from_str(line).map_err(|e| ImportError {
            line: i + 1,
            message: format!("not a case: {e}"),
        })?;
        case.check().map_err(|e| ImportError {
            line: i + 1,
            message: e.to_string(),
        })?;
        cases.push(case);
    }
    Ok((header, cases))
}
