//! The HTTP side of the metrics: `GET /metrics` and `GET /healthz` over hyper, bounded (see the
//! parent module).

use super::*;

/// Whether a request's `Accept` header asks for OpenMetrics.
pub(super) fn wants_openmetrics(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| {
            v.split(';').next().is_some_and(|t| {
                t.trim()
                    .eq_ignore_ascii_case("application/openmetrics-text")
            })
        })
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
pub(super) const FINISH_GRACE: Duration = Duration::from_secs(1);
/// The largest request head buffered (hyper's minimum is 8 KiB).
pub(super) const MAX_BUF: usize = 16 * 1024;

pub(super) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub(super) const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

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
pub(super) async fn slot(slots: &Arc<Semaphore>, pool: &Pool) -> Option<OwnedSemaphorePermit> {
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
pub(super) async fn serve(
    sock: TcpStream,
    conn: Registered,
    permit: OwnedSemaphorePermit,
    reaper: Arc<Metrics>,
) {
    let state = Arc::clone(&conn.state);
    {
        let io = TokioIo::new(WatchedConn {
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

pub(super) fn answer(req: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, ctype, body) = if req.method() != Method::GET {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".to_string(),
        )
    } else {
        match req.uri().path() {
            "/metrics" if wants_openmetrics(req) => (StatusCode::OK, OPENMETRICS, metrics.render()),
            "/metrics" => (StatusCode::OK, CLASSIC, classic(&metrics.render())),
            "/healthz" => match metrics.health() {
                Ok(()) => (StatusCode::OK, "text/plain", "ok\n".to_string()),
                Err(why) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{}\n", why.to_string().replace(['\n', '\r'], " ")),
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
pub(super) struct ConnState {
    /// Milliseconds from the pool's epoch to the last byte read or written.
    last_io_ms: AtomicU64,
    /// Told to close (to make room).
    evict: Notify,
}

/// The live connections, for choosing which one to close when all slots are taken.
pub(super) struct Pool {
    epoch: Instant,
    next: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
}

/// A connection's place in the pool; leaves it on drop.
pub(super) struct Registered {
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

pub(super) fn ms_since(epoch: Instant) -> u64 {
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

    fn conns(&self) -> parking_lot::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock()
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
pub(super) struct WatchedConn {
    sock: TcpStream,
    state: Arc<ConnState>,
    epoch: Instant,
}

impl WatchedConn {
    fn touch(&self) {
        self.state
            .last_io_ms
            .store(ms_since(self.epoch), Ordering::Relaxed);
    }
}

impl AsyncRead for WatchedConn {
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

impl AsyncWrite for WatchedConn {
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
