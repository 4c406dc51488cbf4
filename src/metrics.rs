//! Prometheus metrics (`CCS_METRICS_ADDR`): the text format comes from prometheus-client; the
//! HTTP side is a minimal responder on tokio (two GET paths, `/metrics` and `/healthz`), which
//! keeps the daemon small.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::policy::State;
use crate::reaper::SweepReport;
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
            "Memory used by the reaper's cgroup, else the host",
            m.host_used.clone(),
        );
        registry.register(
            "host_memory_limit_bytes",
            "Memory limit of the cgroup or host (0 = none)",
            m.host_limit.clone(),
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
        if let Some(h) = r.host {
            self.host_used.set(h.used_bytes as i64);
            self.host_limit.set(h.limit_bytes.unwrap_or(0) as i64);
        }
    }

    pub fn record_reap(&self, l: &AuditLine) {
        self.reaps
            .get_or_create(&labels(&[("reason", &l.reason), ("outcome", &l.outcome)]))
            .inc();
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}

/// Serve `/metrics` and `/healthz` on a bound listener, in the background.
pub fn spawn(
    listener: tokio::net::TcpListener,
    reaper: Arc<crate::reaper::Reaper>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "metrics on http://{addr}/metrics");
        }
        loop {
            let (sock, _) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors, say: do not spin.
                    tracing::warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
            };
            tokio::spawn(answer(sock, Arc::clone(&reaper)));
        }
    })
}

async fn answer(mut sock: tokio::net::TcpStream, reaper: Arc<crate::reaper::Reaper>) {
    // Read the request head (up to 2 KiB, 5 s), however the client splits its writes.
    let mut buf = [0u8; 2048];
    let mut n = 0;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout_at(deadline, sock.read(&mut buf[n..])).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(k)) => n += k,
        }
    }
    let req = String::from_utf8_lossy(&buf[..n]);
    let path = req.split_whitespace().nth(1).unwrap_or("");
    let (status, ctype, body) = match path {
        "/metrics" => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            reaper.metrics.render(),
        ),
        "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(body.as_bytes()).await;
    let _ = sock.shutdown().await;
}
