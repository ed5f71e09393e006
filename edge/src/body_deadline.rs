//! The whole-body deadline (docs/security.md, "Limits"): a request's body must have arrived
//! within `server.body_timeout_secs` of its headers, or reading it fails — a client trickling
//! a byte every few seconds cannot hold a connection (and its handler) open, on any route.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use hyper::body::{Body as _, Frame, SizeHint};

/// Why a body read failed: its deadline passed.
#[derive(Debug)]
pub struct BodyTimedOut(pub Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} s (server.body_timeout_secs)",
            self.0.as_secs()
        )
    }
}

impl std::error::Error for BodyTimedOut {}

/// `body`, failing once `timeout` has passed from now before it ended. A body known to be
/// empty is passed as it is (no timer).
pub fn with_deadline(body: Body, timeout: Duration) -> Body {
    if body.is_end_stream() {
        return body;
    }
    Body::new(Deadline {
        inner: body,
        timeout,
        sleep: Box::pin(tokio::time::sleep(timeout)),
        expired: false,
    })
}

struct Deadline {
    inner: Body,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    expired: bool,
}

impl hyper::body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if this.sleep.as_mut().poll(cx).is_ready() {
                    this.expired = true;
                    return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.timeout)))));
                }
                Poll::Pending
            }
            ready => ready,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    /// A body that trickles past its deadline fails the read; one that
    /// arrives in time is read whole.
    #[tokio::test]
    async fn a_body_past_its_deadline_fails_and_one_in_time_is_whole() {
        let trickle = futures_util::stream::iter(0..100).then(|_| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"x"))
        });
        let body = with_deadline(Body::from_stream(trickle), Duration::from_millis(400));
        let started = std::time::Instant::now();
        let error = axum::body::to_bytes(body, 1 << 20).await.unwrap_err();
        assert!(
            error.to_string().contains("did not arrive within"),
            "{error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "cut at the deadline"
        );

        let quick = futures_util::stream::iter(0..5).then(|_| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, std::io::Error>(Bytes::from_static(b"y"))
        });
        let body = with_deadline(Body::from_stream(quick), Duration::from_secs(5));
        assert_eq!(axum::body::to_bytes(body, 1 << 20).await.unwrap(), "yyyyy");
    }
}
