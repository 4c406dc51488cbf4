//! Prometheus metrics (`CCS_METRICS_ADDR`): the text format comes from prometheus-client; the
//! HTTP side is hyper (HTTP/1.1, keep-alive) serving `GET /metrics` and `GET /healthz`.
//!
//! Bounded, so that idle or slow clients cannot take the daemon's file descriptors (and with them
//! its sweeps): at most [`MAX_CONNECTIONS`] are served at once, and at most one more accepted
//! connection waits for a slot; the rest wait in the kernel's backlog. A request head must arrive
//! within [`HEADER_READ_TIMEOUT`] (also between keep-alive requests), and no connection lives past
//! [`CONNECTION_MAX`]. When a connection is waiting for a slot, the one that has been silent longest
//! (for at least [`IDLE_GRACE`]) is closed to make room, so a crowd of silent connections ahead of
//! a scraper in the backlog is drained in a few seconds instead of holding every slot for the full
//! header timeout each.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::policy::State;
use crate::report::SweepReport;
use crate::state::AuditLine;

type Labels = Vec<(String, String)>;

pub struct Metrics {
    registry: Registry,
    sessions: Family<Labels, Gauge>,
    memory: Family<Labels, Gauge>,
    reaps: Family<Labels, Counter>,
    sweeps: Counter,
    sweep_seconds: Gauge<f64, AtomicU64>,
    last_sweep: Gauge,
    pub tmux_errors: Counter,
    host_used: Gauge,
    host_limit: Gauge,
    tmux_server_up: Gauge,
    /// What `/healthz` answers: `Ok` while the last sweep read the tmux server, else why not.
    health: Mutex<Result<(), String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ccs_reap");
        let m = Metrics {
            registry: Registry::default(),
            sessions: Family::default(),
            memory: Family::default(),
            reaps: Family::default(),
            sweeps: Counter::default(),
            sweep_seconds: Gauge::default(),
            last_sweep: Gauge::default(),
            tmux_errors: Counter::default(),
            host_used: Gauge::default(),
            host_limit: Gauge::default(),
            tmux_server_up: Gauge::default(),
            health: Mutex::new(Err("no sweep yet".into())),
        };
        registry.register(
            "sessions",
            "Sessions by state at the last sweep",
            m.sessions.clone(),
        );
        registry.register(
            "session_memory_bytes",
            "Memory (PSS, else RSS) of the sessions' process trees by state",
            m.memory.clone(),
        );
        registry.register(
            "reaps",
            "Reap attempts by reason and outcome",
            m.reaps.clone(),
        );
        registry.register("sweeps", "Sweeps run", m.sweeps.clone());
        registry.register(
            "sweep_duration_seconds",
            "Duration of the last sweep",
            m.sweep_seconds.clone(),
        );
        registry.register(
            "last_sweep_timestamp_seconds",
            "Unix time of the last sweep",
            m.last_sweep.clone(),
        );
        registry.register(
            "tmux_errors",
            "tmux calls that failed or timed out",
            m.tmux_errors.clone(),
        );
        registry.register(
            "host_memory_used_bytes",
            "Memory in use where ccs-reap watches it (the working set: usage less inactive page cache, as kubelet counts it): the tmux server's cgroup by default, else its own, else the host",
            m.host_used.clone(),
        );
        registry.register(
            "host_memory_limit_bytes",
            "Memory limit where ccs-reap watches it (0 = none)",
            m.host_limit.clone(),
        );
        registry.register(
            "tmux_server_up",
            "1 when the last sweep read a tmux server at the socket, else 0 (none listens there, or tmux failed)",
            m.tmux_server_up.clone(),
        );
        Metrics { registry, ..m }
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Metrics {
    pub fn record_sweep(&self, r: &SweepReport) {
        self.sweeps.inc();
        self.sweep_seconds.set(r.took_ms as f64 / 1000.0);
        self.last_sweep.set(chrono::Utc::now().timestamp());
        for st in State::ALL {
            let in_state = r.sessions.iter().filter(|s| s.decision.state == st);
            let (n, mem) = in_state.fold((0i64, 0i64), |(n, m), s| {
                (n + 1, m + s.pss_bytes.or(s.rss_bytes).unwrap_or(0) as i64)
            });
            self.sessions
                .get_or_create(&labels(&[("state", st.as_str())]))
                .set(n);
            self.memory
                .get_or_create(&labels(&[("state", st.as_str())]))
                .set(mem);
        }
        self.tmux_server_up
            .set(i64::from(r.tmux_server_up == Some(true)));
        *self.health.lock().unwrap_or_else(|p| p.into_inner()) = match r.server_problem() {
            None => Ok(()),
            Some(why) => Err(why),
        };
        if let Some(h) = r.host {
            self.host_used.set(h.used_bytes as i64);
            self.host_limit.set(h.limit_bytes.unwrap_or(0) as i64);
        }
    }

    pub fn record_reap(&self, l: &AuditLine) {
        self.reaps
            .get_or_create(&labels(&[
                ("reason", l.reason.as_str()),
                ("outcome", l.outcome.as_str()),
            ]))
            .inc();
    }

    /// `/healthz`: `Ok` while the last sweep read the tmux server, else why not.
    pub fn health(&self) -> Result<(), String> {
        self.health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// A request head (the first, or the next on a kept-alive connection) must arrive within this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// No connection lives longer than this; then it is closed after the response in flight, if any.
pub const CONNECTION_MAX: Duration = Duration::from_secs(30);
/// A connection silent this long may be closed to make room for one waiting for a slot.
pub const IDLE_GRACE: Duration = Duration::from_millis(200);
/// How long a response in flight may take to finish when a connection reaches [`CONNECTION_MAX`].
const FINISH_GRACE: Duration = Duration::from_secs(1);
/// The largest request head buffered (hyper's minimum is 8 KiB).
const MAX_BUF: usize = 16 * 1024;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serve `/metrics` and `/healthz` on a bound listener, in the background.
pub fn spawn(
    listener: tokio::net::TcpListener,
    reaper: Arc<Metrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "metrics on http://{addr}/metrics");
        }
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let pool = Arc::new(Pool::new());
        loop {
            let sock = match listener.accept().await {
                Ok((sock, _)) => sock,
                Err(e) => {
                    // Out of file descriptors, say: do not spin.
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let Some(permit) = slot(&slots, &pool).await else {
                return;
            };
            let conn = Pool::register(&pool);
            tokio::spawn(serve(sock, conn, permit, Arc::clone(&reaper)));
        }
    })
}

/// A slot for a connection that was accepted: free, or made by closing the connection that has
/// been silent longest. `None` only if the semaphore was closed (never).
async fn slot(slots: &Arc<Semaphore>, pool: &Pool) -> Option<OwnedSemaphorePermit> {
    loop {
        match Arc::clone(slots).try_acquire_owned() {
            Ok(p) => return Some(p),
            Err(TryAcquireError::Closed) => return None,
            Err(TryAcquireError::NoPermits) => {}
        }
        if pool.evict_idlest(IDLE_GRACE) {
            tracing::debug!("metrics: all connections busy: closed the longest silent one");
        }
        tokio::select! {
            p = Arc::clone(slots).acquire_owned() => return p.ok(),
            // Look again when another connection may have fallen silent long enough.
            _ = tokio::time::sleep(IDLE_GRACE / 4) => {}
        }
    }
}

/// One connection, from accept to close.
async fn serve(
    sock: TcpStream,
    conn: Registered,
    permit: OwnedSemaphorePermit,
    reaper: Arc<Metrics>,
) {
    let state = Arc::clone(&conn.state);
    {
        let io = TokioIo::new(Watched {
            sock,
            state: Arc::clone(&state),
            epoch: conn.epoch,
        });
        let svc = hyper::service::service_fn(move |req| {
            let reaper = Arc::clone(&reaper);
            async move { Ok::<_, Infallible>(answer(&req, &reaper)) }
        });
        let mut b = hyper::server::conn::http1::Builder::new();
        b.timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .keep_alive(true)
            .max_buf_size(MAX_BUF);
        let http = b.serve_connection(io, svc);
        tokio::pin!(http);
        tokio::select! {
            r = http.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "metrics: connection ended");
                }
            }
            _ = state.evict.notified() => {
                tracing::debug!("metrics: closed a silent connection to make room");
            }
            _ = tokio::time::sleep(CONNECTION_MAX) => {
                http.as_mut().graceful_shutdown();
                if tokio::time::timeout(FINISH_GRACE, http.as_mut()).await.is_err() {
                    tracing::debug!("metrics: closed a connection at its time limit");
                }
            }
        }
        // The socket is closed here, before the slot is given back.
    }
    drop(conn);
    drop(permit);
}

fn answer(req: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, ctype, body) = if req.method() != Method::GET {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".to_string(),
        )
    } else {
        match req.uri().path() {
            "/metrics" => (StatusCode::OK, OPENMETRICS, metrics.render()),
            "/healthz" => match metrics.health() {
                Ok(()) => (StatusCode::OK, "text/plain", "ok\n".to_string()),
                Err(why) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{}\n", why.replace(['\n', '\r'], " ")),
                ),
            },
            _ => (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_string(),
            ),
        }
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
    }
    r
}

/// One live connection, as the accept loop sees it.
struct ConnState {
    /// Milliseconds from the pool's epoch to the last byte read or written.
    last_io_ms: AtomicU64,
    /// Told to close (to make room).
    evict: Notify,
}

/// The live connections, for choosing which one to close when all slots are taken.
struct Pool {
    epoch: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

/// A connection's place in the pool; leaves it on drop.
struct Registered {
    pool: Arc<Pool>,
    id: u64,
    epoch: Instant,
    state: Arc<ConnState>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.pool.conns().remove(&self.id);
    }
}

fn ms_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Pool {
    fn new() -> Pool {
        Pool {
            epoch: Instant::now(),
            next: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
        }
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(pool: &Arc<Pool>) -> Registered {
        let id = pool.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            last_io_ms: AtomicU64::new(ms_since(pool.epoch)),
            evict: Notify::new(),
        });
        pool.conns().insert(id, Arc::clone(&state));
        Registered {
            pool: Arc::clone(pool),
            id,
            epoch: pool.epoch,
            state,
        }
    }

    /// Tell the connection silent longest (at least `min`) to close. Whether there was one.
    fn evict_idlest(&self, min: Duration) -> bool {
        let now = ms_since(self.epoch);
        let min = u64::try_from(min.as_millis()).unwrap_or(u64::MAX);
        let mut conns = self.conns();
        let victim = conns
            .iter()
            .map(|(id, c)| (*id, c.last_io_ms.load(Ordering::Relaxed)))
            .filter(|(_, last)| now.saturating_sub(*last) >= min)
            .min_by_key(|(_, last)| *last)
            .map(|(id, _)| id);
        match victim.and_then(|id| conns.remove(&id)) {
            Some(c) => {
                // A stored permit: the task sees it even if it is not waiting yet.
                c.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The socket, stamping the time of each byte read or written.
struct Watched {
    sock: TcpStream,
    state: Arc<ConnState>,
    epoch: Instant,
}

impl Watched {
    fn touch(&self) {
        self.state
            .last_io_ms
            .store(ms_since(self.epoch), Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.sock).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.sock).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.sock).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.sock.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sock).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sock).poll_shutdown(cx)
    }
}
