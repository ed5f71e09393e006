//! Cross-origin calls from browser apps (`server.cors_origins`, docs/clients.md). A listed
//! origin's preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204 before
//! authentication, and its requests' answers name it in `Access-Control-Allow-Origin` and
//! expose the router's headers. No cookies are used, so credentials are never "included":
//! a browser app sends a session token (or a WebSocket ticket) itself. Other origins get no
//! CORS headers (the browser refuses the answer), and an open server refuses their requests
//! outright (`origin_not_allowed`, [`crate::Auth::check_request_origin`]).

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

/// Methods and request headers a listed origin may use.
const ALLOW_METHODS: &str = "GET, POST, PUT, DELETE, OPTIONS";
const ALLOW_HEADERS: &str = "authorization, content-type, x-api-key, anthropic-version, \
     anthropic-beta, x-stead-metadata, x-stead-cache, cache-control, openai-beta, \
     x-stainless-arch, x-stainless-lang, x-stainless-os, x-stainless-package-version, \
     x-stainless-retry-count, x-stainless-runtime, x-stainless-runtime-version, \
     x-stainless-timeout, anthropic-dangerous-direct-browser-access";
/// Answer headers a page may read.
const EXPOSE_HEADERS: &str = "x-stead-request-id, x-stead-cache, x-stead-provider, \
     x-stead-model, x-stead-attempts, retry-after";
/// How long a browser may keep a preflight's answer.
const MAX_AGE_SECS: &str = "600";

/// `scheme://host[:port]`, lowercase, without a trailing `/`.
pub fn normalize(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// Whether `text` is an origin: `http` or `https`, a host, an optional port, nothing else.
pub fn is_origin(text: &str) -> bool {
    let origin = normalize(text);
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https") {
        return false;
    }
    let (host_ok, port) = if let Some(inner) = rest.strip_prefix('[') {
        match inner.split_once(']') {
            Some((address, after)) => (address.parse::<std::net::Ipv6Addr>().is_ok(), after),
            None => return false,
        }
    } else {
        let (host, after) = rest.find(':').map_or((rest, ""), |i| rest.split_at(i));
        let name = !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        (name, after)
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok());
    host_ok && port_ok
}

/// The request's `Origin` when it is a listed one.
pub fn listed_origin(auth: &crate::Auth, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    auth.cors_allowed(origin.to_str().ok()?)
        .then(|| origin.clone())
}

/// A listed origin's preflight: 204 with what it may send.
pub fn preflight(method: &Method, headers: &HeaderMap, origin: &HeaderValue) -> Option<Response> {
    if method != Method::OPTIONS || !headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        return None;
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let out = response.headers_mut();
    out.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOW_METHODS),
    );
    out.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOW_HEADERS),
    );
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(MAX_AGE_SECS),
    );
    out.insert(header::VARY, HeaderValue::from_static("origin"));
    Some(response)
}

/// Marks an answer to a listed origin's request as readable by its page.
pub fn decorate(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    headers.append(header::VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port_only() {
        for good in [
            "https://app.example.com",
            "http://localhost:5173",
            "http://127.0.0.1:8080/",
            "HTTPS://App.Example.com",
            "http://[::1]:3000",
        ] {
            assert!(is_origin(good), "{good}");
        }
        for bad in [
            "*",
            "app.example.com",
            "ftp://example.com",
            "https://example.com/path",
            "https://",
            "http://host:port",
            "http://host:99999",
            "null",
        ] {
            assert!(!is_origin(bad), "{bad}");
        }
        assert_eq!(
            normalize("HTTPS://App.Example.com/"),
            "https://app.example.com"
        );
    }
}
