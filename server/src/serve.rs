//! Serving the router on a TCP listener: every connection with `TCP_NODELAY`, the peer's
//! address as `ConnectInfo`, a deadline for request headers, a cap on open connections, and a
//! graceful stop.
//!
//! The cap: each connection holds a task, buffers and a file descriptor, so without one a flood
//! of idle connections ends in `EMFILE` for everyone (agents included). At the cap the loop
//! stops accepting; new connections wait in the kernel's queue until one closes, and a client
//! that gives up sees a timeout rather than a server out of descriptors.
//!
//! `axum::serve` would do all of that but the deadline: hyper only enforces
//! `header_read_timeout` when given a timer, and axum gives it none, so a client sending its
//! headers a byte at a time (slowloris) held a connection and a task for as long as it liked.
//! Here each connection must finish its request headers within [`HEADER_READ_TIMEOUT`];
//! bodies have their own deadline (`crate::limits`).
//!
//! `TCP_NODELAY`: pages are streamed in several writes; with Nagle's algorithm on, a write
//! after the first waits for the browser's delayed ACK (40 ms on Linux), which capped a
//! server-rendered page at ~25 responses per connection per second whatever the CPU.

use axum::{Router, extract::ConnectInfo};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto::Builder, graceful::GracefulShutdown},
    service::TowerToHyperService,
};
use std::{future::Future, sync::Arc, time::Duration};
use tokio::{net::TcpListener, sync::Semaphore};
use tower::ServiceExt;

/// How long a connection may take to send a request's headers (the first, or the next on a
/// kept-alive connection).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for requests in flight (live feeds and agent sockets never end on
/// their own).
const DRAIN: Duration = Duration::from_secs(10);

/// Serves `app` on `listener`, at most `max_connections` at once, until `shutdown` completes,
/// then drains.
pub async fn serve(listener: TcpListener, app: Router, max_connections: usize, shutdown: impl Future<Output = ()>) {
    let open = Arc::new(Semaphore::new(max_connections.max(1)));
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    // WebSockets over HTTP/2 need the CONNECT protocol.
    builder.http2().timer(TokioTimer::new()).enable_connect_protocol();
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors, say: back off instead of spinning.
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
        let service = app.clone().map_request(move |mut req: http::Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            req
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::info!("stopped with connections still open (live feeds, agents)");
    }
}
