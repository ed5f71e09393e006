//! Secrets out of text that leaves the process: URLs in error messages and log lines keep
//! their scheme, host, port and path, and lose their user info and query — where credentials
//! live (`https://user:pass@host/…`, `…/mcp?api_key=…`, a WebSocket's `?token=`). Used where an
//! error from a client library (which prints the URL it called) reaches a log, a journal or a
//! model (docs/security.md, "Secrets").

/// `text` with every URL's user info removed and its query and fragment replaced by `?…`.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-` and `.` just before `://`.
        let start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let body_start = at + 3;
        let end = rest[body_start..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`' | ')' | ']')
            })
            .map_or(rest.len(), |i| body_start + i);
        out.push_str(&rest[..start]);
        out.push_str(&redacted(&rest[start..end], at - start));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One URL (`scheme_len` bytes of scheme, then `://`) without its user info and query.
fn redacted(url: &str, scheme_len: usize) -> String {
    let (scheme, after) = url.split_at(scheme_len + 3);
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, path) = after.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let path = match path.find(['?', '#']) {
        Some(cut) => format!("{}?…", &path[..cut]),
        None => path.to_string(),
    };
    format!("{scheme}{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_user_info_and_query() {
        assert_eq!(
            redact_urls(
                "error sending request for url (https://ada:s3cret@mcp.example:8443/mcp?api_key=k3y#x): refused"
            ),
            "error sending request for url (https://mcp.example:8443/mcp?…): refused"
        );
        assert_eq!(
            redact_urls("ws://10.0.0.2:8787/v1/sessions/1/ws?token=t0k and http://a/b"),
            "ws://10.0.0.2:8787/v1/sessions/1/ws?… and http://a/b"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
        assert_eq!(redact_urls("\"http://u@h\""), "\"http://h\"");
        assert_eq!(redact_urls("odd ://x?y"), "odd ://x?…");
    }
}
