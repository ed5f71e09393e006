//! A `tools/call` result as a Stead tool result: content blocks kept as JSON (text as is;
//! images, audio and binary resources stored as the session's artifacts — the block keeps the
//! MIME type, the size and the `artifact_id`, never the base64 payload; text resources and
//! resource links as sent) beside `structuredContent`; `isError` as the tool's error; and
//! results over the journal's event limit cut down with a marker.

use base64::Engine;
use serde_json::{json, Value};
use stead_actors::tools::{ToolContext, ToolError};

use crate::tool_artifacts::ToolArtifacts;

/// A `CallToolResult` (as JSON) as a Stead tool result: `{"content": […], "structured"?: …}`,
/// or the tool's error when `isError` is set (its text content joined). Files in it are kept
/// in `artifacts` when there is a store (else only their size is).
pub async fn tool_result(
    result: Value,
    artifacts: Option<&ToolArtifacts>,
    context: &ToolContext,
) -> Result<Value, ToolError> {
    let mut content = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        content.push(content_block(block, artifacts, context).await);
    }
    if result["isError"] == json!(true) {
        let text: Vec<&str> = content.iter().filter_map(|c| c["text"].as_str()).collect();
        let message = if text.is_empty() {
            "the MCP tool reported an error".to_string()
        } else {
            text.join("\n")
        };
        return Err(ToolError(message));
    }
    let mut out = json!({ "content": content });
    if let Some(structured) = result.get("structuredContent") {
        out["structured"] = structured.clone();
    }
    Ok(out)
}

/// One content block, with the base64 payload of an image, audio or binary resource
/// (`data`, or `resource.blob`) replaced by its size and — when stored — its artifact.
async fn content_block(
    block: &Value,
    artifacts: Option<&ToolArtifacts>,
    context: &ToolContext,
) -> Value {
    let mut block = block.clone();
    let (holder, key) = match block["type"].as_str() {
        Some("image" | "audio") => (&mut block, "data"),
        Some("resource") => (&mut block["resource"], "blob"),
        _ => return block,
    };
    let Some(Value::String(data)) = holder.as_object_mut().and_then(|o| o.remove(key)) else {
        return block;
    };
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    holder["bytes"] = json!((data.len() / 4 * 3).saturating_sub(padding));
    let Some(artifacts) = artifacts else {
        return block;
    };
    let bytes = match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
        Ok(bytes) => bytes,
        Err(e) => {
            holder["not_stored"] = json!(format!("the payload is not base64: {e}"));
            return block;
        }
    };
    let declared = holder["mimeType"].as_str().map(str::to_string);
    match artifacts.save(bytes, declared.as_deref(), context).await {
        Ok(artifact) => {
            holder["artifact_id"] = json!(artifact.id);
            holder["content_type"] = json!(artifact.content_type);
            holder["sha256"] = json!(artifact.sha256);
        }
        Err(e) => {
            tracing::warn!(call_id = %context.call_id, error = %e, "a tool's file was not kept");
            holder["not_stored"] = json!(format!("{e:#}"));
        }
    }
    block
}

/// Room left in an event for the rest of `tool_call_finished` (call id, tool name).
const EVENT_HEADROOM: usize = 1024;

/// `result` as is when its JSON fits in `max_bytes` (the journal's `max_event_bytes`), else
/// one text block with as much of that JSON as fits and a marker that says what was cut:
/// `{"content":[{"type":"text","text":…}],"truncated":{"original_bytes":N,"kept_bytes":M}}`.
pub fn fit(result: Value, max_bytes: usize) -> Value {
    let text = result.to_string();
    let budget = max_bytes.saturating_sub(EVENT_HEADROOM);
    if text.len() <= budget {
        return result;
    }
    // Escaping can grow the kept text (quotes, backslashes, control characters): keep halving
    // until the whole result fits.
    let mut keep = budget.saturating_sub(200);
    loop {
        let mut end = keep.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let marker = format!(
            "\n[truncated by Stead: the result was {} bytes of JSON; the first {end} are kept]",
            text.len()
        );
        let cut = json!({
            "content": [{ "type": "text", "text": format!("{}{marker}", &text[..end]) }],
            "truncated": { "original_bytes": text.len(), "kept_bytes": end },
        });
        if cut.to_string().len() <= budget || end == 0 {
            return cut;
        }
        keep = end / 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_error_result_becomes_the_tools_error_and_payloads_are_dropped_without_a_store() {
        let context = ToolContext::new(uuid::Uuid::nil(), "c1");
        let error = tool_result(
            json!({ "content": [{"type": "text", "text": "no such file"}], "isError": true }),
            None,
            &context,
        )
        .await;
        assert_eq!(error, Err(ToolError("no such file".into())));
        let ok = tool_result(
            json!({
                "content": [
                    {"type": "image", "mimeType": "image/png", "data": "aGVsbG8="},
                    {"type": "resource", "resource": {"uri": "file:///a", "blob": "aGk="}},
                    {"type": "resource", "resource": {"uri": "file:///b", "text": "hi"}}
                ],
                "structuredContent": {"temperature": 21}
            }),
            None,
            &context,
        )
        .await
        .unwrap();
        assert_eq!(
            ok,
            json!({
                "content": [
                    {"type": "image", "mimeType": "image/png", "bytes": 5},
                    {"type": "resource", "resource": {"uri": "file:///a", "bytes": 2}},
                    {"type": "resource", "resource": {"uri": "file:///b", "text": "hi"}}
                ],
                "structured": {"temperature": 21}
            })
        );
    }

    #[test]
    fn a_result_over_the_event_limit_is_cut_with_a_marker() {
        let small = json!({ "content": [{ "type": "text", "text": "hi" }] });
        assert_eq!(fit(small.clone(), 4096), small);
        let big = json!({ "content": [{ "type": "text", "text": "\"x\"".repeat(20_000) }] });
        let original = big.to_string().len();
        let cut = fit(big, 8192);
        assert!(cut.to_string().len() <= 8192 - EVENT_HEADROOM);
        assert_eq!(cut["truncated"]["original_bytes"], json!(original));
        let kept = cut["truncated"]["kept_bytes"].as_u64().unwrap() as usize;
        assert!(kept > 1000 && kept < original, "{kept}");
        let text = cut["content"][0]["text"].as_str().unwrap();
        assert!(text.ends_with(&format!(
            "[truncated by Stead: the result was {original} bytes of JSON; the first {kept} are kept]"
        )));
    }
}
