//! The agent's endpoint: `/metrics` (OpenMetrics when the scraper asks for it, the
//! classic text format otherwise), `/healthz`, `/readyz` and `/debug/pprof/contention`
//! (`profiles.rs`). Read-only: GET and HEAD
//! only, request heads of at most MAX_HEAD bytes (431 beyond), no body, at most
//! `max_scrapes` `/metrics` answers at once (503 beyond), and a client that sends its
//! request head too slowly (2 s) is dropped. At most MAX_CONNECTIONS connections are
//! open: a new one takes the place of the one idle longest, so idle connections held
//! open, or a flood of them, never keep a scraper out. The text was built at the last
//! update: a scrape only copies it.
//!
//! With a web config file (`web.rs`), connections are TLS and every path but `/healthz`
//! and `/readyz` asks for basic auth (401 and `WWW-Authenticate: Basic` without it). A
//! client has the same 2 s from its connection to finish the TLS handshake, so idle or
//! slow handshakes hold no place longer than idle plain connections do.

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
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    sync::Semaphore,
};

use super::{
    metrics::Texts,
    profiles::{self, Profiles},
    web::{BasicAuth, Verdict, Web},
};

/// Largest request head (request line and headers), bytes.
pub const MAX_HEAD: usize = 16 * 1024;
/// Longest request target, bytes.
const MAX_URI: usize = 2048;
/// Time a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the endpoint serves.
#[derive(Clone)]
pub struct Shared {
    /// The texts of the last update.
    pub texts: tokio::sync::watch::Receiver<Texts>,
    /// Programs loadable and the first discovery pass done.
    pub ready: Arc<AtomicBool>,
    /// Contention profiles from the engines' stacks.
    pub profiles: Arc<Profiles>,
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

fn unauthorized() -> Response<Full<Bytes>> {
    let mut r = text(StatusCode::UNAUTHORIZED, "unauthorized\n");
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"rtm-trace agent\", charset=\"UTF-8\""),
    );
    r
}

/// Paths that answer without basic auth: they tell nothing but "ok" or "ready", and a
/// kubelet's probe carries no password.
fn open_path(path: &str) -> bool {
    path == "/healthz" || path == "/readyz"
}

/// What is refused of any request, whatever its path: methods but GET and HEAD, long
/// targets, bodies.
fn refuse<B>(req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Some(text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD only\n"));
    }
    if req.uri().to_string().len() > MAX_URI {
        return Some(text(StatusCode::URI_TOO_LONG, "request target too long\n"));
    }
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v != "0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    has_body.then(|| text(StatusCode::PAYLOAD_TOO_LARGE, "no request body is taken\n"))
}

/// Answers a profile request (it takes as long as the window it asks for).
pub async fn answer_profile<B>(shared: &Shared, req: &Request<B>) -> Response<Full<Bytes>> {
    if let Some(r) = refuse(req) {
        return r;
    }
    let a = shared.profiles.answer(req).await;
    let mut r = reply(
        a.status,
        if a.profile {
            "application/octet-stream"
        } else {
            "text/plain; charset=utf-8"
        },
        Bytes::from(a.body),
    );
    if a.profile {
        r.headers_mut().insert(
            header::CONTENT_DISPOSITION,
            header::HeaderValue::from_static("attachment; filename=\"contention.pb.gz\""),
        );
    }
    r
}

/// Answers one request (but a profile's: [`answer_profile`]).
pub fn answer(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(r) = refuse(req) {
        return r;
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
            "rtm-trace agent: /metrics, /healthz, /readyz, /debug/pprof/contention[?seconds=N]\n",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz, /readyz, /debug/pprof/contention\n",
        ),
    }
}

/// Binds `addr` (an error names it).
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let named =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"));
    let l = std::net::TcpListener::bind(addr).map_err(named)?;
    l.set_nonblocking(true).map_err(named)?;
    // A deep accept queue: a flood of connections that outruns the accept loop for a
    // moment must not drop a scraper's (its connection would wait a second for the
    // retry). listen() again only sets the queue's length (capped by somaxconn).
    // SAFETY: a listening socket's descriptor, owned by `l`.
    if unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 4096) } != 0 {
        return Err(named(std::io::Error::last_os_error()));
    }
    Ok(l)
}

/// Serves on a thread of its own, with its own runtime, so that a scrape is answered at
/// once however busy the engine's loop is. The thread lives as long as the process.
pub fn spawn(
    listener: std::net::TcpListener,
    shared: Shared,
    max_scrapes: usize,
    web: Option<Arc<Web>>,
) -> std::io::Result<()> {
    // Its blocking threads check bcrypt hashes, two at most at once.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(2)
        .build()?;
    std::thread::Builder::new()
        .name("rtm-http".into())
        .spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => serve(l, shared, max_scrapes, web).await,
                    Err(e) => crate::say!("rtm-trace agent: the metrics endpoint: {e}"),
                }
            })
        })?;
    Ok(())
}

/// Most connections open at once: past it, the one idle longest is dropped for the new
/// one (a client holding connections open without asking, or a flood of them, never
/// shuts a scraper out).
pub const MAX_CONNECTIONS: usize = 256;

/// The open connections: when each last began a request (or opened), and how to end it.
#[derive(Default)]
struct Connections {
    next: u64,
    open: std::collections::HashMap<u64, (std::time::Instant, tokio::sync::oneshot::Sender<()>)>,
    /// The same connections by (last activity, id): the first is the one idle longest.
    by_activity: std::collections::BTreeSet<(std::time::Instant, u64)>,
}

impl Connections {
    /// Registers a new connection (dropping the one idle longest when full); returns its
    /// id and what ends it.
    fn open(&mut self) -> (u64, tokio::sync::oneshot::Receiver<()>) {
        if self.open.len() >= MAX_CONNECTIONS
            && let Some((_, oldest)) = self.by_activity.pop_first()
            && let Some((_, end)) = self.open.remove(&oldest)
        {
            let _ = end.send(());
        }
        let (end, ended) = tokio::sync::oneshot::channel();
        self.next += 1;
        let now = std::time::Instant::now();
        self.open.insert(self.next, (now, end));
        self.by_activity.insert((now, self.next));
        (self.next, ended)
    }

    /// The connection `id` began a request now.
    fn active(&mut self, id: u64) {
        if let Some((at, _)) = self.open.get_mut(&id) {
            self.by_activity.remove(&(*at, id));
            *at = std::time::Instant::now();
            self.by_activity.insert((*at, id));
        }
    }

    /// The connection `id` ended.
    fn close(&mut self, id: u64) {
        if let Some((at, _)) = self.open.remove(&id) {
            self.by_activity.remove(&(at, id));
        }
    }
}

/// Serves connections for as long as its runtime runs. Answering is a copy of the text
/// of the last update, so every connection is served at once; `max_scrapes` bounds the
/// `/metrics` answers being written at once (a 503 beyond), never `/healthz`.
async fn serve(listener: TcpListener, shared: Shared, max_scrapes: usize, web: Option<Arc<Web>>) {
    let slots = Arc::new(Semaphore::new(max_scrapes));
    let conns = Arc::new(std::sync::Mutex::new(Connections::default()));
    let tls = web
        .as_ref()
        .and_then(|w| w.tls.clone())
        .map(tokio_rustls::TlsAcceptor::from);
    let auth = web.as_ref().and_then(|w| w.auth.clone());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait a little rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        // The connections accepted so far read their requests before the next accept:
        // a flood accepted faster than they run would push a scraper's out unread.
        tokio::task::yield_now().await;
        let (id, mut ended) = conns.lock().unwrap_or_else(|e| e.into_inner()).open();
        let (shared, slots, conns) = (shared.clone(), slots.clone(), conns.clone());
        let (tls, auth) = (tls.clone(), auth.clone());
        tokio::spawn(async move {
            // Nothing is set up for a connection until it sends something (a flood of
            // silent ones costs an accept each), and it has the head timeout to, TLS
            // handshake included.
            let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
            let readable = tokio::select! {
                r = tokio::time::timeout_at(deadline, stream.readable()) => matches!(r, Ok(Ok(()))),
                _ = &mut ended => false,
            };
            if readable {
                match tls {
                    None => connection(stream, id, &conns, shared, slots, auth, &mut ended).await,
                    Some(acceptor) => {
                        let shaken = tokio::select! {
                            r = tokio::time::timeout_at(deadline, acceptor.accept(stream)) => match r {
                                Ok(Ok(s)) => Some(s),
                                _ => None,
                            },
                            _ = &mut ended => None,
                        };
                        if let Some(s) = shaken {
                            connection(s, id, &conns, shared, slots, auth, &mut ended).await;
                        }
                    }
                }
            }
            conns.lock().unwrap_or_else(|e| e.into_inner()).close(id);
        });
    }
}

/// Serves the requests of one connection (plain or TLS).
async fn connection<I>(
    io: I,
    id: u64,
    conns: &Arc<std::sync::Mutex<Connections>>,
    shared: Shared,
    slots: Arc<Semaphore>,
    auth: Option<Arc<BasicAuth>>,
    ended: &mut tokio::sync::oneshot::Receiver<()>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let seen = conns.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        seen.lock().unwrap_or_else(|e| e.into_inner()).active(id);
        let (shared, slots, auth) = (shared.clone(), slots.clone(), auth.clone());
        async move {
            if let Some(auth) = auth.filter(|_| !open_path(req.uri().path())) {
                let given = req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .map(|v| v.as_bytes().to_vec());
                match auth.check(given).await {
                    Verdict::Pass => {}
                    Verdict::Fail => return Ok::<_, Infallible>(unauthorized()),
                    Verdict::Busy => {
                        return Ok(text(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "too many password checks under way\n",
                        ));
                    }
                }
            }
            let r = if req.uri().path() == "/metrics" {
                match slots.try_acquire_owned() {
                    // Held while the answer is made; the body is shared bytes.
                    Ok(_permit) => answer(&shared, &req),
                    Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "too many scrapes\n"),
                }
            } else if req.uri().path() == profiles::PATH {
                answer_profile(&shared, &req).await
            } else {
                answer(&shared, &req)
            };
            Ok::<_, Infallible>(r)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service);
    // A connection lasts at most a minute, whatever the client does, and ends at once
    // when a newer one needs its place.
    tokio::select! {
        _ = tokio::time::timeout(Duration::from_secs(60), conn) => {}
        _ = ended => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_drops_the_connection_idle_longest() {
        let mut c = Connections::default();
        let mut ends = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            ends.push(c.open());
        }
        // The first one asks for something: the second is now idle longest.
        c.active(ends[0].0);
        let (_, _newest) = c.open();
        assert_eq!(c.open.len(), MAX_CONNECTIONS);
        assert_eq!(c.by_activity.len(), MAX_CONNECTIONS);
        assert!(c.open.contains_key(&ends[0].0));
        assert!(!c.open.contains_key(&ends[1].0));
        assert_eq!(ends[1].1.try_recv(), Ok(()));
        assert!(ends[2].1.try_recv().is_err());
    }
}
