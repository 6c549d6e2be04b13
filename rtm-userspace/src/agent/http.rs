//! The agent's endpoint: `/metrics` (OpenMetrics when the scraper asks for it, the
//! classic text format otherwise), `/healthz` and `/readyz`. Read-only: GET and HEAD
//! only, request heads of at most MAX_HEAD bytes (431 beyond), no body, at most
//! `max_scrapes` connections at once (503 beyond), and a client that sends its request
//! too slowly is dropped. The text was built at the last update: a scrape only copies
//! it.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};

use super::metrics::Texts;

/// Largest request head (request line and headers), bytes.
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request target, bytes.
const MAX_URI: usize = 2048;
/// Time a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the endpoint serves.
#[derive(Clone)]
pub struct Shared {
    /// The texts of the last update.
    pub texts: tokio::sync::watch::Receiver<Texts>,
    /// Programs loadable and the first discovery pass done.
    pub ready: Arc<AtomicBool>,
}

fn reply(status: StatusCode, kind: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, kind)
        .header(header::CACHE_CONTROL, "no-store")
        .body(Full::new(body))
        .expect("constant headers are valid")
}

fn text(status: StatusCode, s: &'static str) -> Response<Full<Bytes>> {
    reply(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(s.as_bytes()),
    )
}

/// Answers one request.
pub fn answer(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n");
    }
    if req.uri().to_string().len() > MAX_URI {
        return text(StatusCode::URI_TOO_LONG, "request target too long\n");
    }
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v != "0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    if has_body {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "no request body is taken\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let wants_om = req.headers().get_all(header::ACCEPT).iter().any(|v| {
                v.to_str()
                    .is_ok_and(|s| s.contains("application/openmetrics-text"))
            });
            let texts = shared.texts.borrow().clone();
            let (kind, body) = if wants_om {
                (OPENMETRICS, texts.openmetrics)
            } else {
                (CLASSIC, texts.classic)
            };
            // Shared with the update that built it: no copy per scrape.
            reply(StatusCode::OK, kind, body)
        }
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            if shared.ready.load(Ordering::Acquire) {
                text(StatusCode::OK, "ready\n")
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: first discovery pass under way\n",
                )
            }
        }
        "/" => text(
            StatusCode::OK,
            "rtm-trace agent: /metrics, /healthz, /readyz\n",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz, /readyz\n",
        ),
    }
}

/// Binds `addr` (an error names it).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"));
    let l = std::net::TcpListener::bind(addr).map_err(named)?;
    l.set_nonblocking(true).map_err(named)?;
    Ok(l)
}

/// Serves on a thread of its own, with its own runtime, so that a scrape is answered at
/// once however busy the engine's loop is. The thread lives as long as the process.
pub fn spawn(
    listener: std::net::TcpListener,
    shared: Shared,
    max_scrapes: usize,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("rtm-http".into())
        .spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => serve(l, shared, max_scrapes).await,
                    Err(e) => crate::say!("rtm-trace agent: the metrics endpoint: {e}"),
                }
            })
        })?;
    Ok(())
}

/// Serves connections for as long as its runtime runs.
async fn serve(listener: TcpListener, shared: Shared, max_scrapes: usize) {
    let slots = Arc::new(Semaphore::new(max_scrapes));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait a little rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            // Best effort, never waiting: the socket's buffer takes these few bytes.
            let _ = stream.try_write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 17\r\nconnection: close\r\n\r\ntoo many scrapes\n",
            );
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let r = answer(&shared, &req);
                async move { Ok::<_, Infallible>(r) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .max_buf_size(MAX_HEAD)
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            // A connection lasts at most a minute, whatever the client does.
            let _ = tokio::time::timeout(Duration::from_secs(60), conn).await;
            drop(permit);
        });
    }
}
