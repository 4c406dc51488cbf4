//! A real Prometheus server (Debian's `prometheus`, on loopback, a temp data dir, scraping every
//! second) scrapes a running ccs-reap with the alert rules of contrib/prometheus loaded, and its
//! HTTP API returns the series; and every metric family the daemon exposes has its HELP and TYPE.
//!
//! Without `prometheus` on PATH the Prometheus test fails, naming the fix; `CCS_SKIP_PROMETHEUS=1`
//! skips it, and says so on stderr.

use crate::common::*;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const SKIP: &str = "CCS_SKIP_PROMETHEUS";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.0 (a body with no chunking, the connection closed after it): (status
/// code, body), or `None` when nothing answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    get_as(port, path, None).map(|(code, _, body)| (code, body))
}

/// The OpenMetrics Accept header Prometheus sends.
const ACCEPT_OPENMETRICS: &str =
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// [`get`] with an `Accept` header: (status code, content type, body).
fn get_as(port: u16, path: &str, accept: Option<&str>) -> Option<(u16, String, String)> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{accept}\r\n");
    c.write_all(req.as_bytes()).ok()?;
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    Some((code, ctype, body.to_string()))
}

/// Percent-encoding of a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_string_lossy()
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The prometheus binary. Missing, the test fails and says how to get it or skip it; with
/// `CCS_SKIP_PROMETHEUS=1` it is skipped, which is written on stderr (past the test harness's
/// capture, so a skip is never silent).
fn prometheus_or_skip(test: &str) -> Option<PathBuf> {
    if std::env::var(SKIP).is_ok_and(|v| v == "1") {
        let _ = writeln!(
            std::io::stderr(),
            "tests/it/prometheus.rs: {test}: SKIPPED by request ({SKIP}=1)"
        );
        return None;
    }
    match which("prometheus") {
        Some(p) => Some(p),
        None => panic!(
            "{test}: `prometheus` is not on PATH. Install it (Debian: apt-get install prometheus; \
             .ci/run does), or set {SKIP}=1 to skip this test."
        ),
    }
}

/// An instant query: each series' labels and value.
fn query(port: u16, promql: &str) -> Vec<(HashMap<String, String>, f64)> {
    let Some((200, body)) = get(port, &format!("/api/v1/query?query={}", encode(promql))) else {
        return Vec::new();
    };
    let Ok(j) = serde_json::from_str::<serde_json::Value>(&body) else {
        return Vec::new();
    };
    j["data"]["result"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter_map(|r| {
                    let labels = r["metric"]
                        .as_object()?
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                        .collect();
                    let v = r["value"][1].as_str()?.parse().ok()?;
                    Some((labels, v))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The one value of a query that should return one series.
fn one(port: u16, promql: &str) -> Option<f64> {
    match query(port, promql).as_slice() {
        [(_, v)] => Some(*v),
        _ => None,
    }
}

/// The API's JSON at `path` (`/api/v1/rules`, `/api/v1/alerts`).
fn api(port: u16, path: &str) -> serde_json::Value {
    get(port, path)
        .filter(|(code, _)| *code == 200)
        .and_then(|(_, b)| serde_json::from_str(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Session states that every sweep reports a series for (a subset: more may come).
const STATES: [&str; 9] = [
    "unknown", "busy", "stuck", "viewed", "new", "idle", "no-cid", "exited", "expired",
];

/// Sessions that give the metrics something to show: one that the first sweep reaps (idle for
/// a day, with a conversation id), one busy, and a foreign one that keeps the server up.
fn sessions(s: &Server) {
    s.session("keeper", "sleep 100000");
    let n = s.chat("ccs-1", "c1", "");
    s.idle_since(n, 86_400_000);
    let b = s.chat("ccs-2", "c2", "");
    s.idle_since(b, 60_000);
    s.set(b, "@ccs_turn", &now_ms().to_string());
}

/// The daemon with its metrics on `port`, sweeping every 200 ms; waits until /healthz answers.
fn daemon(s: &Server, port: u16) -> KillOnDrop {
    let addr = format!("127.0.0.1:{port}");
    let d = KillOnDrop(
        s.reap(&[
            ("CCS_ENGINE_IDLE_KILL_MS", "3600000"),
            ("CCS_REAP_INTERVAL_MS", "200"),
            ("CCS_REAP_GRACE_MS", "2000"),
            ("CCS_METRICS_ADDR", addr.as_str()),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(s.path("daemon.log")).unwrap())
        .spawn()
        .unwrap(),
    );
    assert!(
        wait_until(10.0, || get(port, "/healthz")
            .is_some_and(|(c, _)| c == 200)),
        "the daemon's metrics never answered on {addr}: {}",
        std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default()
    );
    d
}

#[test]
fn a_real_prometheus_scrapes_the_daemon_and_evaluates_the_rules() {
    let Some(prometheus) = prometheus_or_skip("a_real_prometheus_scrapes_the_daemon") else {
        return;
    };
    let s = Server::new();
    sessions(&s);
    let mport = free_port();
    let mut d = daemon(&s, mport);

    let rules = format!(
        "{}/contrib/prometheus/ccs-reap.rules.yml",
        env!("CARGO_MANIFEST_DIR")
    );
    let config = s.path("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: ccs-reap\n    static_configs:\n      \
             - targets: ['127.0.0.1:{mport}']\n"
        ),
    )
    .unwrap();
    let pport = free_port();
    let plog = s.path("prometheus.log");
    // Declared after the server: dropped (killed) before its temp dir goes.
    let _p = KillOnDrop(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                s.path("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{pport}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&plog).unwrap())
            .spawn()
            .unwrap(),
    );
    let logs = || {
        format!(
            "--- prometheus:\n{}\n--- daemon:\n{}",
            std::fs::read_to_string(&plog).unwrap_or_default(),
            std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default()
        )
    };
    let instance = format!("127.0.0.1:{mport}");

    // Scraped: the sweeps counted, a series per session state, the reap, the target up.
    let mut seen = String::new();
    let scraped = wait_until(60.0, || {
        let sweeps = query(pport, "ccs_reap_sweeps_total");
        let states = query(pport, "ccs_reap_sessions");
        let busy = one(pport, r#"ccs_reap_sessions{state="busy"}"#);
        let reaped = one(
            pport,
            r#"ccs_reap_reaps_total{reason="idle",outcome="reaped"}"#,
        );
        let up = one(pport, r#"up{job="ccs-reap"}"#);
        let build = one(
            pport,
            &format!(
                r#"ccs_reap_build_info{{version="{}"}}"#,
                env!("CARGO_PKG_VERSION")
            ),
        );
        let sweep_count = one(pport, "ccs_reap_sweep_duration_seconds_count");
        seen = format!(
            "sweeps {sweeps:?}\nstates {states:?}\nbusy {busy:?} reaped {reaped:?} up {up:?} build {build:?} sweep count {sweep_count:?}"
        );
        matches!(sweeps.as_slice(), [(l, v)] if *v > 0.0
            && l.get("job").map(String::as_str) == Some("ccs-reap")
            && l.get("instance") == Some(&instance))
            && STATES.iter().all(|st| {
                states
                    .iter()
                    .any(|(l, _)| l.get("state").map(String::as_str) == Some(*st))
            })
            && busy == Some(1.0)
            && reaped == Some(1.0)
            && up == Some(1.0)
            && build == Some(1.0)
            && sweep_count.is_some_and(|n| n > 0.0)
    });
    assert!(
        scraped,
        "Prometheus never returned the series: {seen}\n{}",
        logs()
    );

    // The rules loaded and evaluate cleanly against the real series; nothing fires but the memory
    // rule, which depends on the machine the test runs on.
    let mut rules_seen = serde_json::Value::Null;
    let healthy = wait_until(30.0, || {
        rules_seen = api(pport, "/api/v1/rules");
        let rs = rules_seen["data"]["groups"][0]["rules"].as_array();
        rules_seen["data"]["groups"][0]["name"] == "ccs-reap"
            && rs.is_some_and(|rs| rs.len() == 9 && rs.iter().all(|r| r["health"] == "ok"))
    });
    assert!(
        healthy,
        "the rules are not all loaded and healthy: {rules_seen:#}\n{}",
        logs()
    );
    // An alert that went pending before the first scrape (CcsReapAbsent) clears at the next
    // evaluation.
    let mut alerts = serde_json::Value::Null;
    let mut active: Vec<String> = Vec::new();
    let quiet = wait_until(30.0, || {
        alerts = api(pport, "/api/v1/alerts");
        active = alerts["data"]["alerts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|a| a["labels"]["alertname"].as_str())
                    .filter(|n| *n != "CcsReapMemoryNearLimit")
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_else(|| vec!["(no alerts list)".to_string()]);
        active.is_empty()
    });
    assert!(
        quiet,
        "alerts on a healthy reaper: {active:?}\n{alerts:#}\n{}",
        logs()
    );

    // The reaper stops: Prometheus sees the target down, and the down alert goes pending.
    if let Some(pid) = rustix::process::Pid::from_raw(d.0.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    assert!(
        wait_until(10.0, || matches!(d.0.try_wait(), Ok(Some(_)))),
        "the daemon did not stop on SIGTERM\n{}",
        logs()
    );
    let down = wait_until(30.0, || {
        alerts = api(pport, "/api/v1/alerts");
        one(pport, r#"up{job="ccs-reap"}"#) == Some(0.0)
            && alerts["data"]["alerts"].as_array().is_some_and(|a| {
                a.iter().any(|x| {
                    x["labels"]["alertname"] == "CcsReapDown"
                        && x["labels"]["instance"] == instance.as_str()
                        && x["state"] == "pending"
                })
            })
    });
    assert!(
        down,
        "the stopped reaper was not seen down: {alerts:#}\n{}",
        logs()
    );
}

/// A family's metadata and samples, as `/metrics` (OpenMetrics) gives them.
#[derive(Default, Debug)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: usize,
}

/// The sample suffixes each OpenMetrics type allows after its family name.
fn suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" | "gaugehistogram" => {
            &["_bucket", "_count", "_sum", "_created", "_gcount", "_gsum"]
        }
        "summary" => &["", "_count", "_sum", "_created"],
        "info" => &["_info"],
        _ => &[""],
    }
}

/// The families of an OpenMetrics text, checked: every family has one non-empty HELP and one TYPE
/// before its samples, every sample belongs (by one of its type's suffixes) to the family whose
/// metadata came last, a family is never split, and the text ends with `# EOF`.
fn families(body: &str) -> Result<HashMap<String, Family>, String> {
    let lines: Vec<&str> = body.lines().collect();
    if lines.last() != Some(&"# EOF") {
        return Err("no # EOF at the end".into());
    }
    let mut families: HashMap<String, Family> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for l in &lines[..lines.len() - 1] {
        if let Some(meta) = l.strip_prefix("# ") {
            let mut it = meta.splitn(3, ' ');
            let what = it.next().unwrap_or("");
            let name = it.next().unwrap_or("").to_string();
            let text = it.next().unwrap_or("").trim().to_string();
            if order.last() != Some(&name) {
                if order.contains(&name) {
                    return Err(format!("{name}: family split in two"));
                }
                order.push(name.clone());
            }
            let f = families.entry(name.clone()).or_default();
            if f.samples > 0 {
                return Err(format!("{name}: metadata after its samples"));
            }
            match what {
                "HELP" if f.help.is_some() => return Err(format!("{name}: two HELP lines")),
                "HELP" if text.is_empty() => return Err(format!("{name}: empty HELP")),
                "HELP" => f.help = Some(text),
                "TYPE" if f.kind.is_some() => return Err(format!("{name}: two TYPE lines")),
                "TYPE" => f.kind = Some(text),
                "UNIT" => {}
                _ => return Err(format!("unknown metadata line: {l}")),
            }
            continue;
        }
        if l.starts_with('#') {
            return Err(format!("stray comment: {l}"));
        }
        let name = l.split(['{', ' ']).next().unwrap_or("");
        let Some(fam) = order.last() else {
            return Err(format!("{name}: a sample before any metadata"));
        };
        let Some(f) = families.get_mut(fam) else {
            return Err(format!("{fam}: lost"));
        };
        let Some(kind) = f.kind.as_deref() else {
            return Err(format!("{name}: no TYPE for family {fam}"));
        };
        if !suffixes(kind).iter().any(|x| name == format!("{fam}{x}")) {
            return Err(format!("sample {name} is not of family {fam} ({kind})"));
        }
        f.samples += 1;
    }
    for (name, f) in &families {
        if f.help.is_none() {
            return Err(format!("{name}: no HELP"));
        }
        if f.kind.is_none() {
            return Err(format!("{name}: no TYPE"));
        }
    }
    Ok(families)
}

#[test]
fn every_metric_family_has_help_and_type() {
    let s = Server::new();
    sessions(&s);
    let port = free_port();
    let _d = daemon(&s, port);
    // After the reap: every family has samples, the reap counter included.
    let mut body = String::new();
    let mut ctype = String::new();
    assert!(
        wait_until(15.0, || {
            (_, ctype, body) =
                get_as(port, "/metrics", Some(ACCEPT_OPENMETRICS)).unwrap_or_default();
            body.contains(r#"ccs_reap_reaps_total{reason="idle",outcome="reaped"} 1"#)
        }),
        "the reap never showed: {body}"
    );
    assert_eq!(
        ctype,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );

    let fams = families(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    for (name, f) in &fams {
        // No limit where the memory is watched: no sample (never a 0 that reads as a limit).
        // Likewise the room under a limit, and CCS_ENGINE_MAX_LIVE unset.
        if name == "ccs_reap_host_memory_limit_bytes"
            || name == "ccs_reap_room_bytes"
            || name == "ccs_reap_max_live_chats"
        {
            continue;
        }
        assert!(f.samples > 0, "{name}: no sample\n{body}");
        assert!(
            name.starts_with("ccs_reap_"),
            "{name}: not under the ccs_reap_ prefix"
        );
    }
    // Every metric the README, the docs and the alert rules name.
    let want: HashSet<(&str, &str)> = [
        ("ccs_reap_sessions", "gauge"),
        ("ccs_reap_session_memory_bytes", "gauge"),
        ("ccs_reap_reaps", "counter"),
        ("ccs_reap_sweeps", "counter"),
        ("ccs_reap_sweep_duration_seconds", "histogram"),
        ("ccs_reap_reap_duration_seconds", "histogram"),
        ("ccs_reap_freed_bytes", "counter"),
        ("ccs_reap_build_info", "gauge"),
        ("ccs_reap_last_sweep_timestamp_seconds", "gauge"),
        ("ccs_reap_tmux_errors", "counter"),
        ("ccs_reap_host_memory_used_bytes", "gauge"),
        ("ccs_reap_host_memory_limit_bytes", "gauge"),
        ("ccs_reap_tmux_server_up", "gauge"),
        ("ccs_reap_pid_namespace_mismatch", "gauge"),
        ("ccs_reap_new_chat_need_bytes", "gauge"),
        ("ccs_reap_live_chats", "gauge"),
    ]
    .into_iter()
    .collect();
    let got: HashSet<(&str, &str)> = fams
        .iter()
        .map(|(n, f)| (n.as_str(), f.kind.as_deref().unwrap_or("")))
        .collect();
    assert!(
        want.is_subset(&got),
        "missing: {:?}\n{body}",
        want.difference(&got).collect::<Vec<_>>()
    );

    // And the check refuses what it is there to catch.
    let bad = [
        ("no HELP", "# TYPE a gauge\na 1\n# EOF\n"),
        ("no TYPE", "# HELP a A.\na 1\n# EOF\n"),
        ("empty HELP", "# HELP a \n# TYPE a gauge\na 1\n# EOF\n"),
        (
            "a foreign sample",
            "# HELP a A.\n# TYPE a gauge\nb 1\n# EOF\n",
        ),
        (
            "a counter without _total",
            "# HELP a A.\n# TYPE a counter\na 1\n# EOF\n",
        ),
        ("no EOF", "# HELP a A.\n# TYPE a gauge\na 1\n"),
    ];
    for (what, text) in bad {
        assert!(families(text).is_err(), "{what} passed the check");
    }
    assert!(families("# HELP a A.\n# TYPE a counter\na_total 1\n# EOF\n").is_ok());

    // The build, and the memory the reap freed (the fake claude's tree holds some).
    assert!(
        body.contains(&format!(
            "ccs_reap_build_info{{version=\"{}\",commit=\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{body}"
    );
    let freed = body
        .lines()
        .find_map(|l| l.strip_prefix("ccs_reap_freed_bytes_total "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(freed.is_some_and(|b| b > 0.0), "{body}");
    assert!(
        body.contains("ccs_reap_reap_duration_seconds_count 1\n"),
        "{body}"
    );

    // A client that does not ask for OpenMetrics gets the classic text format, which promtool
    // checks clean; the OpenMetrics text is what it would refuse.
    let (code, ctype, classic) = get_as(port, "/metrics", None).unwrap();
    assert_eq!(code, 200);
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert!(!classic.contains("# EOF"), "{classic}");
    assert!(
        classic.contains("# TYPE ccs_reap_reaps_total counter\n"),
        "{classic}"
    );
    let Some(promtool) = which("promtool") else {
        if std::env::var_os(SKIP).is_some() {
            eprintln!("{SKIP} is set: promtool check metrics skipped");
            return;
        }
        panic!("promtool is not on PATH: run scripts/deps (or set {SKIP}=1 to skip)");
    };
    let check = |text: &str| {
        let mut c = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    };
    let (ok, said) = check(&classic);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{classic}");
    let (ok, said) = check(&body);
    assert!(!ok, "promtool passed the OpenMetrics text: {said}");
}
