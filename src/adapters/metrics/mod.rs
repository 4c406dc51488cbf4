//! Prometheus metrics (`CCS_METRICS_ADDR`): the text format comes from prometheus-client; the
//! HTTP side is hyper (HTTP/1.1, keep-alive) serving `GET /metrics` and `GET /healthz`.
//!
//! prometheus-client writes OpenMetrics text, which is what a client that asks for it (`Accept:
//! application/openmetrics-text`, as Prometheus does) gets; any other client (curl, `promtool
//! check metrics`, an older scraper) gets the classic text format 0.0.4, converted by
//! [`classic`].
//!
//! Bounded, so that idle or slow clients cannot take the daemon's file descriptors (and with them
//! its sweeps): at most [`MAX_CONNECTIONS`] are served at once, and at most one more accepted
//! connection waits for a slot; the rest wait in the kernel's backlog. A request head must arrive
//! within [`HEADER_READ_TIMEOUT`] (also between keep-alive requests), and no connection lives past
//! [`CONNECTION_MAX`]. When a connection is waiting for a slot, the one that has been silent longest
//! (for at least [`IDLE_GRACE`]) is closed to make room, so a crowd of silent connections ahead of
//! a scraper in the backlog is drained in a few seconds instead of holding every slot for the full
//! header timeout each.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::core::policy::State;
use crate::core::records::AuditLine;
use crate::core::report::SweepReport;

type Labels = Vec<(String, String)>;

pub struct Metrics {
    registry: Registry,
    sessions: Family<Labels, Gauge>,
    memory: Family<Labels, Gauge>,
    reaps: Family<Labels, Counter>,
    sweeps: Counter,
    sweep_seconds: Histogram,
    reap_seconds: Histogram,
    freed_bytes: Counter,
    /// No sample until the first sweep.
    last_sweep: MaybeGauge,
    pub tmux_errors: Counter,
    /// No sample while the value is unknown (no reading; no limit).
    host_used: MaybeGauge,
    host_limit: MaybeGauge,
    /// Room for a new chat (`room`): what one needs, the room under the limit, the live chats
    /// and `CCS_ENGINE_MAX_LIVE`.
    room: [MaybeGauge; 4],
    tmux_server_up: Gauge,
    /// How the memory watcher is woken: 1 for the path in use (`event`, `poll`, `poll+event`,
    /// `off`).
    pressure_watch: Family<Labels, Gauge>,
    /// The watcher's wakes that started a sweep, by cause.
    pressure_wakes: Family<Labels, Counter>,
    /// 1 per degraded state on (`core::degraded`), by reason; what `/healthz` adds.
    degraded: Family<Labels, Gauge>,
    degraded_why: Mutex<Vec<String>>,
    /// 1 while this reaper cannot see the tmux server's processes (another pid namespace).
    pid_namespace_mismatch: Gauge,
    /// Why, while it cannot: `/healthz` says so.
    blind: Mutex<Option<String>>,
    /// What `/healthz` answers: `None` while the last sweep read the tmux server, else why not.
    server_problem: Mutex<Option<String>>,
}

impl Default for Metrics {
    /// Every metric registered, each with its help text: the register functions below read as
    /// the metrics' reference.
    fn default() -> Self {
        let mut registry = Registry::with_prefix("ccs_reap");
        let m = Metrics::unregistered();
        m.register_sweeps(&mut registry);
        m.register_host(&mut registry);
        m.register_pressure(&mut registry);
        m.register_health(&mut registry);
        for (g, (name, help)) in m.room.iter().zip(ROOM_GAUGES) {
            registry.register(name, help, g.clone());
        }
        register_build_info(&mut registry);
        Metrics { registry, ..m }
    }
}

impl Metrics {
    /// Every metric at its start, none registered yet.
    fn unregistered() -> Self {
        Metrics {
            registry: Registry::default(),
            sessions: Family::default(),
            memory: Family::default(),
            reaps: Family::default(),
            sweeps: Counter::default(),
            sweep_seconds: Histogram::new(SWEEP_BUCKETS),
            reap_seconds: Histogram::new(REAP_BUCKETS),
            freed_bytes: Counter::default(),
            last_sweep: MaybeGauge::default(),
            tmux_errors: Counter::default(),
            host_used: MaybeGauge::default(),
            host_limit: MaybeGauge::default(),
            room: Default::default(),
            tmux_server_up: Gauge::default(),
            pressure_watch: Family::default(),
            pressure_wakes: Family::default(),
            degraded: Family::default(),
            degraded_why: Mutex::new(Vec::new()),
            pid_namespace_mismatch: Gauge::default(),
            blind: Mutex::new(None),
            server_problem: Mutex::new(Some("no sweep yet".into())),
        }
    }

    /// The sessions, the sweeps and the reaps.
    fn register_sweeps(&self, registry: &mut Registry) {
        let m = self;
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
            "Duration of the sweeps (the listing, the decisions and the start of their reaps)",
            m.sweep_seconds.clone(),
        );
        registry.register(
            "reap_duration_seconds",
            "Duration of the reaps that ended reaped or failed, from the first check to the audit line",
            m.reap_seconds.clone(),
        );
        registry.register(
            "freed_bytes",
            "Memory (PSS, else RSS) held by the process trees of the reaped sessions, when reaped",
            m.freed_bytes.clone(),
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
    }

    /// The memory where ccs-reap watches it, and the tmux server.
    fn register_host(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "host_memory_used_bytes",
            "Memory in use where ccs-reap watches it (the working set: usage less inactive page cache, as kubelet counts it): the tmux server's cgroup by default, else its own, else the host",
            m.host_used.clone(),
        );
        registry.register(
            "host_memory_limit_bytes",
            "Memory limit where ccs-reap watches it (no sample when there is none)",
            m.host_limit.clone(),
        );
        registry.register(
            "tmux_server_up",
            "1 when the last sweep read a tmux server at the socket, else 0 (none listens there, or tmux failed)",
            m.tmux_server_up.clone(),
        );
    }

    /// How the memory watcher is woken, and what woke it.
    fn register_pressure(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "pressure_watch",
            "1 for how the memory watcher is woken between sweeps: event (the kernel notifies: a cgroup v1 threshold, a PSI trigger), poll (every 250 ms), poll+event (polled, and woken early by PSI), off (no memory rule)",
            m.pressure_watch.clone(),
        );
        registry.register(
            "pressure_wakes",
            "Sweeps the memory watcher started, by what woke it (threshold, psi, poll)",
            m.pressure_wakes.clone(),
        );
    }

    /// What `/healthz` adds: the degraded states, and whether the tmux server's processes can be
    /// seen.
    fn register_health(&self, registry: &mut Registry) {
        let m = self;
        for reason in crate::core::degraded::Reason::ALL {
            m.degraded
                .get_or_create(&labels(&[("reason", reason.as_str())]))
                .set(0);
        }
        registry.register(
            "degraded",
            "1 while ccs-reap runs but cannot reap, by reason: activity-file (a CCS_ACTIVITY_FILES file missing or unreadable), no-server (no tmux server at the socket), no-cid (every chat without a conversation id for 10 sweeps); /healthz answers 503 meanwhile",
            m.degraded.clone(),
        );
        registry.register(
            "pid_namespace_mismatch",
            "1 while this reaper cannot see the tmux server's processes as they are (it runs in another pid namespace than the server): it signals nothing and measures no memory, else 0",
            m.pid_namespace_mismatch.clone(),
        );
    }
}

/// `build_info`: always 1, labelled with the version and the commit.
fn register_build_info(registry: &mut Registry) {
    let build = Family::<Labels, Gauge>::default();
    build
        .get_or_create(&labels(&[
            ("version", env!("CARGO_PKG_VERSION")),
            ("commit", env!("CCS_REAP_COMMIT")),
        ]))
        .set(1);
    registry.register(
        "build_info",
        "Always 1: the version of ccs-reap and the commit it was built from",
        build,
    );
}

/// Why `/healthz` answers 503: each reason, said joined by `; `.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct Unhealthy(pub Vec<String>);

/// The values of `pressure_watch`'s `path` label.
pub const PRESSURE_PATHS: [&str; 4] = ["event", "poll", "poll+event", "off"];
/// The values of `pressure_wakes`'s `cause` label.
pub const PRESSURE_CAUSES: [&str; 3] = ["threshold", "psi", "poll"];

/// Buckets of `sweep_duration_seconds`: a sweep is one tmux call and the decisions (milliseconds),
/// up to the tmux timeout (10 s by default).
const SWEEP_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Buckets of `reap_duration_seconds`: a reap waits for the tree to exit on SIGTERM, up to the
/// grace (5 s by default), then SIGKILL.
const REAP_BUCKETS: [f64; 11] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0];

/// A gauge whose value may be unknown: then its family has no sample (rather than a 0 that reads
/// as a value, e.g. a memory limit of 0 for "no limit").
#[derive(Debug, Default, Clone)]
struct MaybeGauge(Arc<Mutex<Option<u64>>>);

impl MaybeGauge {
    fn set(&self, v: Option<u64>) {
        *self.0.lock() = v;
    }
}

impl prometheus_client::encoding::EncodeMetric for MaybeGauge {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::MetricEncoder,
    ) -> Result<(), std::fmt::Error> {
        match *self.0.lock() {
            Some(v) => encoder.encode_gauge(&v),
            None => Ok(()),
        }
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Gauge
    }
}

/// The room gauges, in the order of `Metrics::room`.
const ROOM_GAUGES: [(&str, &str); 4] = [
    ("new_chat_need_bytes", "What a new chat would need: the median footprint of the live chats (PSS, else RSS), 400 MiB before any is measured (ccs-reap room --need auto)"),
    ("room_bytes", "The room for new chats now: the limit room is made under (CCS_ENGINE_MEM_HIGH, else the memory limit less 10 %) less the memory in use; no sample without a limit"),
    ("live_chats", "Live chats (busy and idle, not being reaped)"),
    ("max_live_chats", "CCS_ENGINE_MAX_LIVE; no sample when unset"),
];

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Metrics {
    pub fn record_sweep(&self, r: &SweepReport) {
        self.sweeps.inc();
        self.sweep_seconds.observe(r.took_ms as f64 / 1000.0);
        self.last_sweep
            .set(u64::try_from(chrono::Utc::now().timestamp()).ok());
        for &st in State::ALL {
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
        *self.server_problem.lock() = r.server_problem();
        self.host_used.set(r.host.map(|h| h.used_bytes));
        self.host_limit.set(r.host.and_then(|h| h.limit_bytes));
        let g = &r.gauge;
        let live = u64::try_from(g.live_chats).ok();
        let max = g.max_live.and_then(|m| u64::try_from(m).ok());
        for (m, v) in self
            .room
            .iter()
            .zip([Some(g.new_chat_bytes), g.room_bytes, live, max])
        {
            m.set(v);
        }
    }

    /// The memory watcher's wake path now: 1 for it, 0 for the others it had.
    pub fn record_pressure_watch(&self, path: &str) {
        for p in PRESSURE_PATHS {
            self.pressure_watch
                .get_or_create(&labels(&[("path", p)]))
                .set(i64::from(p == path));
        }
        // Every cause has a sample from the start (a 0, not a missing series).
        for c in PRESSURE_CAUSES {
            let _ = self.pressure_wakes.get_or_create(&labels(&[("cause", c)]));
        }
    }

    /// A sweep the memory watcher started, woken by `cause`.
    pub fn record_pressure_wake(&self, cause: &str) {
        self.pressure_wakes
            .get_or_create(&labels(&[("cause", cause)]))
            .inc();
    }

    pub fn record_reap(&self, l: &AuditLine) {
        self.reaps
            .get_or_create(&labels(&[
                ("reason", l.reason.as_str()),
                ("outcome", l.outcome.as_str()),
            ]))
            .inc();
        use crate::core::records::Outcome;
        if matches!(l.outcome, Outcome::Reaped | Outcome::Failed) {
            self.reap_seconds.observe(l.took_ms as f64 / 1000.0);
        }
        if l.outcome == Outcome::Reaped {
            self.freed_bytes.inc_by(l.pss_bytes.unwrap_or(l.rss_bytes));
        }
    }

    /// The degraded states on now, with why (from the daemon's tracker, after each sweep).
    pub fn set_degraded(
        &self,
        on: &std::collections::BTreeMap<crate::core::degraded::Reason, String>,
    ) {
        for reason in crate::core::degraded::Reason::ALL {
            self.degraded
                .get_or_create(&labels(&[("reason", reason.as_str())]))
                .set(i64::from(on.contains_key(&reason)));
        }
        *self.degraded_why.lock() = on
            .iter()
            .map(|(r, why)| format!("degraded ({}): {why}", r.as_str()))
            .collect();
    }

    /// `/healthz`: `Ok` while the last sweep read the tmux server and no degraded state is on,
    /// else why not (one line each).
    pub fn health(&self) -> Result<(), Unhealthy> {
        let mut why: Vec<String> = Vec::new();
        if let Some(b) = self.blind.lock().clone() {
            why.push(format!("cannot see the tmux server's processes: {b}"));
        }
        if let Some(e) = &*self.server_problem.lock() {
            why.push(e.clone());
        }
        for d in self.degraded_why.lock().iter() {
            // No server is already said above, as before.
            if !d.starts_with("degraded (no-server)") || why.is_empty() {
                why.push(d.clone());
            }
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(Unhealthy(why))
        }
    }

    /// Whether this reaper sees the tmux server's processes (`None`), or why not.
    pub fn set_blind(&self, why: Option<String>) {
        self.pid_namespace_mismatch.set(i64::from(why.is_some()));
        *self.blind.lock() = why;
    }

    /// The metrics in OpenMetrics text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        if encode(&mut s, &self.registry).is_err() {
            s.clear();
        }
        s
    }
}

/// OpenMetrics text (as prometheus-client writes it) in the classic Prometheus text format 0.0.4:
/// a counter's HELP and TYPE name its sample (`x_total`), not its family (`x`); no `# UNIT`, no
/// `_created` sample, no exemplar, no `# EOF`; the types the classic format lacks are `untyped`.
pub fn classic(openmetrics: &str) -> String {
    let mut kinds: HashMap<&str, &str> = HashMap::new();
    for l in openmetrics.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                kinds.insert(name, kind.trim());
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for l in openmetrics.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        if let Some((what, rest)) = l
            .strip_prefix("# HELP ")
            .map(|r| ("HELP", r))
            .or_else(|| l.strip_prefix("# TYPE ").map(|r| ("TYPE", r)))
        {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            let kind = kinds.get(name).copied().unwrap_or("untyped");
            let sample = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            let text = if what == "TYPE" {
                match kind {
                    "counter" | "gauge" | "histogram" | "summary" => kind,
                    _ => "untyped",
                }
                .to_string()
            } else {
                // OpenMetrics escapes `\`, `\n` and `"` in HELP; the classic format only the
                // first two.
                text.replace("\\\"", "\"")
            };
            out.push_str(&format!("# {what} {sample} {text}\n"));
            continue;
        }
        if l.starts_with('#') {
            continue;
        }
        let name = l.split(['{', ' ']).next().unwrap_or("");
        if let Some(family) = name.strip_suffix("_created") {
            if matches!(
                kinds.get(family).copied(),
                Some("counter" | "histogram" | "summary")
            ) {
                continue;
            }
        }
        // An exemplar follows the value after ` # `: cut it, looking past the label set (whose
        // quoted values may hold anything).
        let after_labels = labels_end(l);
        match l[after_labels..].find(" # ") {
            Some(i) => out.push_str(&l[..after_labels + i]),
            None => out.push_str(l),
        }
        out.push('\n');
    }
    out
}

/// The byte offset just past a sample line's label set (`name{a="x",b="y"}`), or past its name
/// when it has none. Quoted values may hold `}`, `#` and escaped quotes.
fn labels_end(line: &str) -> usize {
    let b = line.as_bytes();
    let Some(open) = line.find(['{', ' ']) else {
        return line.len();
    };
    if b[open] != b'{' {
        return open;
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, &c) in b.iter().enumerate().skip(open + 1) {
        match c {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b'}' if !quoted => return i + 1,
            _ => {}
        }
    }
    line.len()
}

mod http;
pub use http::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_names_counters_by_their_sample_and_drops_what_0_0_4_lacks() {
        let om = "# HELP a_seconds Time \\\"spent\\\".\n# TYPE a_seconds counter\n# UNIT a_seconds seconds\na_seconds_total{x=\"1 # 2\"} 3 # {trace_id=\"t\"} 1.0\na_seconds_created 1.7e9\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n# HELP h A histogram.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\nh_created 1.7e9\n# HELP i An info.\n# TYPE i info\ni_info{v=\"1\"} 1\n# EOF\n";
        let want = "# HELP a_seconds_total Time \"spent\".\n# TYPE a_seconds_total counter\na_seconds_total{x=\"1 # 2\"} 3\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n# HELP h A histogram.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\n# HELP i An info.\n# TYPE i untyped\ni_info{v=\"1\"} 1\n";
        assert_eq!(classic(om), want);
    }

    #[test]
    fn no_sample_where_the_value_is_unknown_and_build_info_always() {
        let m = Metrics::default();
        let before = m.render();
        for absent in [
            "\nccs_reap_host_memory_limit_bytes ",
            "\nccs_reap_host_memory_used_bytes ",
            "\nccs_reap_last_sweep_timestamp_seconds ",
        ] {
            assert!(!before.contains(absent), "{absent}\n{before}");
        }
        assert!(
            before.contains(&format!(
                "ccs_reap_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION"),
                env!("CCS_REAP_COMMIT")
            )),
            "{before}"
        );
        let limit = |l: Option<u64>| {
            m.host_limit.set(l);
            m.render()
        };
        assert!(limit(Some(1 << 30)).contains("\nccs_reap_host_memory_limit_bytes 1073741824\n"));
        assert!(!limit(None).contains("\nccs_reap_host_memory_limit_bytes "));
    }
}
