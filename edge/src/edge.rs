//! What every request passes before routing and every response carries after it: a listed
//! origin's CORS preflight and headers ([`crate::cors`]), the open server's `Host`/`Origin`
//! check ([`crate::Auth::check_request_origin`]) and the security headers (docs/security.md).

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;

/// The content security policy of every response. The web UI loads its scripts and styles
/// from `/assets/` and talks to the same origin only (`'self'` covers its WebSockets); it
/// shows attachments from `blob:` URLs of bytes it fetched itself; no page may frame it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let cors = crate::cors::listed_origin(&state.auth, request.headers());
    if let Some(preflight) = cors
        .as_ref()
        .and_then(|origin| crate::cors::preflight(request.method(), request.headers(), origin))
    {
        return preflight;
    }
    let mut response = match state.auth.check_request_origin(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(
                code = %refusal.code,
                host = ?request.headers().get(header::HOST),
                origin = ?request.headers().get(header::ORIGIN),
                "refused a request to the open server"
            );
            refusal.into_response()
        }
    };
    let headers = response.headers_mut();
    if let Some(origin) = cors {
        crate::cors::decorate(headers, origin);
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
