//! The content type of a blob, read from its first bytes: what a client declares is not
//! trusted (an "image/png" that is an HTML page must not be served as one). A declared type is
//! kept only where it narrows what the bytes show (`audio/webm` for a WebM container) or where
//! the bytes have no signature and are what it says (UTF-8 text, JSON).

/// Text with no signature of its own.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
const OCTETS: &str = "application/octet-stream";

/// The type the bytes' signature shows, if they have one Stead knows.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    let at = |offset: usize, magic: &[u8]| bytes.get(offset..offset + magic.len()) == Some(magic);
    if starts(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if starts(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        Some("image/gif")
    } else if starts(b"RIFF") && at(8, b"WEBP") {
        Some("image/webp")
    } else if starts(b"RIFF") && at(8, b"WAVE") {
        Some("audio/wav")
    } else if starts(b"%PDF-") {
        Some("application/pdf")
    } else if starts(b"OggS") {
        Some("audio/ogg")
    } else if starts(b"fLaC") {
        Some("audio/flac")
    } else if starts(b"\x1a\x45\xdf\xa3") {
        Some("video/webm")
    } else if at(4, b"ftyp") {
        Some(if at(8, b"M4A ") {
            "audio/mp4"
        } else {
            "video/mp4"
        })
    } else if starts(b"ID3") || (bytes.len() > 1 && bytes[0] == 0xff && bytes[1] & 0xe0 == 0xe0) {
        Some("audio/mpeg")
    } else {
        None
    }
}

/// The media type without parameters, lowercased.
fn essence(declared: &str) -> String {
    declared
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The type a blob is stored and served as: what its bytes show ([`sniff`]); a declared
/// `audio/webm` for a WebM container; else, for bytes without a signature, `application/json`
/// when declared and they parse, `text/markdown` or `text/csv` when declared and they are
/// UTF-8, `text/plain; charset=utf-8` for other UTF-8 without NUL bytes, and
/// `application/octet-stream` for the rest.
pub fn content_type(declared: Option<&str>, bytes: &[u8]) -> String {
    let declared = declared.map(essence).unwrap_or_default();
    if let Some(sniffed) = sniff(bytes) {
        if sniffed == "video/webm" && declared == "audio/webm" {
            return declared;
        }
        return sniffed.to_string();
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return OCTETS.to_string();
    };
    if text.contains('\0') {
        return OCTETS.to_string();
    }
    match declared.as_str() {
        "application/json" if serde_json_like(text) => declared,
        "text/markdown" | "text/csv" => format!("{declared}; charset=utf-8"),
        _ => TEXT_PLAIN.to_string(),
    }
}

/// Whether `text` starts and ends like a JSON document (an object, array or string): the
/// type is kept for the reader's sake, not trusted for anything.
fn serde_json_like(text: &str) -> bool {
    let t = text.trim();
    (t.starts_with('{') && t.ends_with('}'))
        || (t.starts_with('[') && t.ends_with(']'))
        || (t.starts_with('"') && t.ends_with('"'))
}
