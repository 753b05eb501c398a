//! `--metrics ADDR`: the general stats as Prometheus text over HTTP/1.x.
//!
//! A deliberately minimal responder: it reads the request head, answers `GET /metrics` (or
//! `GET /`) with `200` and the text, anything else with `404`, and closes the connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::stats::Shared;

/// Largest request head read.
const SIZE_HEAD_MAX: usize = 8 * 1024;
/// How long a client may take to send its request head.
const SECONDS_HEAD: u64 = 5;

/// Serves metrics requests until the runtime stops.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(SECONDS_HEAD), respond(stream, &shared))
                    .await;
        });
    }
}

/// Reads one request head and answers it.
async fn respond(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > SIZE_HEAD_MAX {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next(), words.next());
    let reply = match (method, path) {
        (Some(b"GET"), Some(b"/metrics" | b"/")) => response("200 OK", &shared.prometheus()),
        _ => response("404 Not Found", "not found; try GET /metrics\n"),
    };
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

fn response(status: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
