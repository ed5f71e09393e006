//! Client frames: parsed, or refused with the error frame they deserve.

use serde_json::Value;

use crate::wire::{ClientFrame, CLIENT_FRAME_TYPES};
use crate::{ApiError, ErrorCode};

/// A client frame, or the error frame it deserves.
/// A client's frame: read straight into [`ClientFrame`]; only a frame that does not read is
/// looked at as JSON, to say what is wrong with it.
pub(super) fn parse(text: &str) -> Result<ClientFrame, ApiError> {
    serde_json::from_str(text).or_else(|_| refuse(text))
}

/// Why `text` is not a frame (or, should it read as JSON after all, the frame).
fn refuse(text: &str) -> Result<ClientFrame, ApiError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::new(ErrorCode::InvalidJson, format!("not JSON: {e}")))?;
    let Some(kind) = value
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Err(ApiError::new(
            ErrorCode::InvalidFrame,
            "a frame is a JSON object with a string `type`",
        ));
    };
    if !CLIENT_FRAME_TYPES.contains(&kind.as_str()) {
        return Err(ApiError::new(
            ErrorCode::UnknownFrameType,
            format!(
                "`{kind}` is not a frame type ({})",
                CLIENT_FRAME_TYPES.join(", ")
            ),
        ));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::new(ErrorCode::InvalidFrame, format!("bad `{kind}` frame: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use stead_testkit::arbitrary;

    proptest! {
        /// Any text, and any object shaped like a frame: parsed, or refused with one of the
        /// frame error codes and a message — never a panic.
        #[test]
        fn any_frame_text_parses_or_is_refused_clearly(
            text in ".{0,200}",
            shaped in (
                arbitrary::one_of_or_any(&["user_message", "approval", "cancel", "resume"]),
                arbitrary::object_with(&[
                    "text", "client_id", "call_id", "approved", "reason", "scope", "args_hash",
                    "after_seq",
                ]),
            ),
        ) {
            let (kind, mut object) = shaped;
            object["type"] = Value::String(kind);
            for input in [text, object.to_string()] {
                if let Err(error) = parse(&input) {
                    prop_assert!(matches!(
                        error.code,
                        ErrorCode::InvalidJson | ErrorCode::InvalidFrame | ErrorCode::UnknownFrameType
                    ));
                    prop_assert!(!error.message.is_empty());
                }
            }
        }
    }

    #[test]
    fn frames_parse_or_name_what_is_wrong() {
        assert!(matches!(
            parse(r#"{"type":"user_message","text":"hi","client_id":"c1"}"#),
            Ok(ClientFrame::UserMessage { .. })
        ));
        assert!(matches!(
            parse(r#"{"type":"resume","after_seq":3}"#),
            Ok(ClientFrame::Resume { after_seq: 3 })
        ));
        assert!(matches!(
            parse(r#"{"type":"cancel"}"#),
            Ok(ClientFrame::Cancel {})
        ));
        for (text, code) in [
            ("{nope", "invalid_json"),
            ("[1]", "invalid_frame"),
            (r#"{"type":"shout"}"#, "unknown_frame_type"),
            (r#"{"type":"user_message","text":5}"#, "invalid_frame"),
            (r#"{"type":"approval","call_id":"t1"}"#, "invalid_frame"),
            (r#"{"type":"resume","after_seq":"x"}"#, "invalid_frame"),
            (r#"{"type":"cancel","extra":1}"#, "invalid_frame"),
        ] {
            assert_eq!(
                parse(text).err().map(|e| e.code.as_str()),
                Some(code),
                "{text}"
            );
        }
    }
}
