//! What one request may cost, over HTTP on a real socket: bodies bounded per route (413 from
//! the declared length, or once a streamed body passes the limit) and headers that trickle in
//! cut off at their deadline.

use crate::common::TestApp;
use cardpool_service::{Settings, backend_tests, testing::Backend};
use reqwest::{Client, StatusCode};
use std::time::Duration;

backend_tests!(request_bodies_are_bounded_per_route);

/// Sends a POST of `path` on a raw socket: `length` declared (or the body chunked when
/// `None`), then `body` (stopping if the server has answered and closed). Returns the answer.
async fn raw_post(app: &TestApp, path: &str, length: Option<u64>, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = app.base.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(host).await.unwrap();
    let framing = length.map_or("Transfer-Encoding: chunked".to_owned(), |n| format!("Content-Length: {n}"));
    let head = format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(8192) {
        let framed = match length {
            Some(_) => chunk.to_vec(),
            None => [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat(),
        };
        if socket.write_all(&framed).await.is_err() {
            break; // answered and closed early
        }
    }
    if length.is_none() {
        let _ = socket.write_all(b"0\r\n\r\n").await;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if String::from_utf8_lossy(&answer).contains("}") {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

async fn request_bodies_are_bounded_per_route(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // A body larger than the route takes is a clear 413, answered from its declared length
    // before any of it is read, for the API and server functions alike (a 400 MB body to a
    // server function used to be answered 500).
    for path in ["/api/v1/auth/sign-in", "/rpc/sign_in", "/api/v1/auth/sign-up", "/offers"] {
        let answer = raw_post(&app, path, Some(400_000_000), b"{").await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer}");
        assert!(answer.contains("\"error\":\"too_large\""), "{path}: {answer}");
    }
    assert!(raw_post(&app, "/rpc/sign_in", Some(70_000), b"").await.contains("64 KiB"));
    // Streamed without a length: cut off at the limit all the same.
    let big = "x".repeat(200 * 1024);
    assert!(raw_post(&app, "/api/v1/auth/sign-in", None, big.as_bytes()).await.starts_with("HTTP/1.1 413"));
    // Within the limit, streamed: handled as usual.
    let small = br#"{"email":"nobody@example.com","password":"wrong password!"}"#;
    assert!(raw_post(&app, "/api/v1/auth/sign-in", None, small).await.starts_with("HTTP/1.1 401"));
    // Stripe's webhook takes more (an event object).
    let event = "y".repeat(300 * 1024);
    let res = Client::new().post(app.url("/stripe/webhook")).body(event).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST, "read, then refused for its missing signature");
    assert_eq!(app.user_count().await, 0, "nothing was created");
}

/// A client that sends its headers a line every two seconds (slowloris) is cut off at the
/// header deadline; others are served meanwhile.
#[tokio::test]
async fn slow_headers_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn(Backend::Sqlite).await;
    let mut slow = tokio::net::TcpStream::connect(app.base.trim_start_matches("http://")).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: cardpool\r\n").await.unwrap();
    let started = std::time::Instant::now();
    let closed = async {
        let mut buf = [0u8; 256];
        loop {
            tokio::select! {
                read = slow.read(&mut buf) => break read.map_or(0, |n| n),
                () = tokio::time::sleep(Duration::from_secs(2)) => {
                    if slow.write_all(b"X-Slow: still here\r\n").await.is_err() {
                        break 0;
                    }
                }
            }
        }
    };
    let fast = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Client::new().get(app.url("/healthz")).send().await.unwrap().status()
    };
    let (read, fast) = tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(closed, fast) })
        .await
        .expect("the slow connection was never cut off");
    assert_eq!(fast, StatusCode::OK, "others are served meanwhile");
    let elapsed = started.elapsed();
    assert!(read == 0 || elapsed >= Duration::from_secs(9), "answered before its headers were complete");
    assert!(elapsed >= Duration::from_secs(9) && elapsed < Duration::from_secs(16), "cut off after {elapsed:?}");
}

/// Open connections are capped: past `max_connections` a new one waits in the accept queue
/// (its request unanswered) until one of the open ones closes, then it is served.
#[tokio::test]
async fn connections_past_the_cap_wait_for_one_to_close() {
    use tokio::io::AsyncWriteExt;
    let config = cardpool_server::Config { max_connections: 2, ..cardpool_server::Config::default() };
    let app = TestApp::spawn_configured(Backend::Sqlite, Settings::default(), config).await;
    let addr = app.base.trim_start_matches("http://").to_owned();
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        // A request begun, its headers not finished: the connection stays open.
        stream.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        idle.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let third = tokio::spawn({
        let url = app.url("/healthz");
        async move { Client::new().get(url).send().await.map(|r| r.status()) }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!third.is_finished(), "a third connection was served while two were open");
    drop(idle.pop());
    let status = tokio::time::timeout(Duration::from_secs(5), third).await.expect("never served").unwrap().unwrap();
    assert_eq!(status, StatusCode::OK, "served once a connection closed");
}
