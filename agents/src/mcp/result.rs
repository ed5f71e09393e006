//! A `tools/call` result as a Stead tool result: content blocks kept as JSON (text as is;
//! images and audio as their MIME type and size, without the base64 payload; embedded resources
//! and resource links as sent) beside `structuredContent`; `isError` as the tool's error; and
//! results over the journal's event limit cut down with a marker.

use serde_json::{json, Value};
use stead_actors::tools::ToolError;

/// A `CallToolResult` (as JSON) as a Stead tool result: `{"content": […], "structured"?: …}`,
/// or the tool's error when `isError` is set (its text content joined).
pub fn tool_result(result: Value) -> Result<Value, ToolError> {
    let content: Vec<Value> = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .map(content_block)
        .collect();
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

/// One content block, with the base64 payload of images and audio replaced by its size.
fn content_block(block: &Value) -> Value {
    let mut block = block.clone();
    if matches!(block["type"].as_str(), Some("image" | "audio")) {
        if let Some(data) = block.get("data").and_then(Value::as_str) {
            let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
            block["bytes"] = json!((data.len() / 4 * 3).saturating_sub(padding));
        }
        if let Some(object) = block.as_object_mut() {
            object.remove("data");
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

    #[test]
    fn an_error_result_becomes_the_tools_error_and_payloads_are_dropped() {
        let error = tool_result(json!({
            "content": [{"type": "text", "text": "no such file"}], "isError": true
        }));
        assert_eq!(error, Err(ToolError("no such file".into())));
        let ok = tool_result(json!({
            "content": [{"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}],
            "structuredContent": {"temperature": 21}
        }))
        .unwrap();
        assert_eq!(
            ok,
            json!({
                "content": [{"type": "image", "mimeType": "image/png", "bytes": 5}],
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
