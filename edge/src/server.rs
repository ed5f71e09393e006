//! The accept loop: HTTP/1.1 over hyper with a header-read timeout, a whole-body deadline on
//! every request (`crate::body_deadline`), one cap on the TCP
//! connections held at once (upgraded WebSockets included: the permit travels with the socket)
//! and a graceful shutdown. Over the cap, a connection is answered `503` with an `overloaded`
//! error body and closed at once, so a flood of idle sockets cannot exhaust file descriptors
//! and a well-behaved client learns why.

use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// Bounds of the accept loop (`server.header_timeout_secs`, `server.max_connections`,
/// `server.body_timeout_secs`).
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// A client must have sent a request's headers this long after it started (or after the
    /// connection went idle between requests); else the connection is closed.
    pub header_timeout: Duration,
    /// TCP connections held at once, WebSockets included.
    pub max_connections: usize,
    /// A request's whole body must have arrived this long after its headers; else reading it
    /// fails (`crate::body_deadline`).
    pub body_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The answer to a connection over the cap.
fn overloaded() -> Vec<u8> {
    let body = serde_json::json!({"error": {
        "code": crate::ErrorCode::Overloaded,
        "message": "the server holds too many connections; retry later",
    }})
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting connections
/// and lets requests in flight finish (upgraded WebSockets close by themselves on the
/// application's shutdown signal).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(options.max_connections));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (open_tx, open_rx) = tokio::sync::watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off rather than spin.
                    if !is_per_connection(&error) {
                        tracing::error!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(
                max_connections = options.max_connections,
                "connection refused: too many connections"
            );
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Counted {
            stream,
            _permit: permit,
        });
        let body_timeout = options.body_timeout;
        let service = TowerToHyperService::new(router.clone().map_request(
            move |request: axum::http::Request<Incoming>| {
                let mut request = request
                    .map(|body| crate::body_deadline::with_deadline(Body::new(body), body_timeout));
                // The peer's address, for the audit trail.
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(remote));
                request
            },
        ));
        let mut stop = stop_rx.clone();
        let open = open_rx.clone();
        let header_timeout = options.header_timeout;
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let mut connection = pin!(builder.serve_connection(io, service).with_upgrades());
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::trace!(%error, "connection ended");
                    }
                }
                () = async { let _ = stop.wait_for(|stop| *stop).await; } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}

async fn refuse(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(&overloaded()).await;
        let _ = stream.shutdown().await;
        // Read what the client sent (bounded) before dropping the socket: closing with unread
        // input makes the kernel send a reset, which can hide the answer from the client.
        let mut sink = [0u8; 4096];
        let mut left = 64 << 10;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left -= n.min(left),
            }
        }
    })
    .await;
}

/// Errors that concern one connection only (the peer reset it before we took it).
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A socket that holds one of the server's connection permits for as long as it lives.
struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Raises this process's open-file limit to its hard limit (many sockets), returning it.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
        limit.rlim_cur
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_overloaded_answer_is_well_formed() {
        let answer = super::overloaded();
        let text = std::str::from_utf8(&answer).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), length);
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], crate::ErrorCode::Overloaded.as_str());
    }
}
