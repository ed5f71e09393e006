//! The web UI at `/`: the files of `web-ui/dist`, embedded at build time (see `build.rs`).
//! `index.html` is served for `/`; hashed files under `/assets/` are cached for a year. A
//! binary built without the UI answers `/` with a page that says how to build it.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};

mod assets {
    include!(concat!(env!("OUT_DIR"), "/webui_assets.rs"));
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn file(name: &str) -> Option<&'static [u8]> {
    assets::ASSETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, bytes)| *bytes)
}

/// Whether this binary carries the UI.
pub fn built() -> bool {
    file("index.html").is_some()
}

pub async fn index() -> Response {
    match file("index.html") {
        Some(bytes) => {
            let mut response =
                ([(header::CONTENT_TYPE, content_type("index.html"))], bytes).into_response();
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        None => Html(
            "<!doctype html><title>Stead</title><h1>Stead</h1><p>This binary was built without \
             the web UI. Build it with <code>npm ci &amp;&amp; npm run build</code> in \
             <code>web-ui/</code>, then rebuild Stead (<code>scripts/run.sh</code> does both). \
             The API is at <code>/v1</code>; see <code>/openapi.json</code>.</p>",
        )
        .into_response(),
    }
}

pub async fn asset(Path(name): Path<String>) -> Response {
    match file(&format!("assets/{name}")) {
        Some(bytes) => {
            let mut response =
                ([(header::CONTENT_TYPE, content_type(&name))], bytes).into_response();
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            );
            response
        }
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
