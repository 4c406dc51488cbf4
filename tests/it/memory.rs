//! Issue 5 on a real tmux: memory per session, pressure reaping, the idle cap, and the metrics
//! endpoint.

use crate::common::http::{free_port, get, samples};
use crate::common::*;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Audit lines, by session name.
fn audit_by_name(s: &Server) -> HashMap<String, serde_json::Value> {
    let mut m = HashMap::new();
    for l in s.audit() {
        let name = l["session"].as_str().unwrap().to_string();
        assert!(
            m.insert(name.clone(), l).is_none(),
            "two audit lines for {name}"
        );
    }
    m
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

// ---------------------------------------------------------------------------------------------
// Pressure
// ---------------------------------------------------------------------------------------------

#[test]
fn pressure_reaps_every_eligible_idle_session_and_nothing_else() {
    let mut s = Server::new();
    let old = s.chat("ccs-1", "c1", "plain");
    let older = s.chat("ccs-2", "c2", "daemon");
    let busy = s.chat("ccs-3", "c3", "");
    let viewed = s.chat("ccs-4", "c4", "");
    let young = s.chat("ccs-5", "c5", "");
    let _unstamped = s.chat("ccs-6", "c6", "");
    s.idle_since(old, 600_000);
    s.idle_since(older, 1_200_000);
    s.idle_since(busy, 10_000_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    s.idle_since(viewed, 10_000_000);
    s.attach_control("ccs-4");
    s.idle_since(young, 5_000);
    let victims: Vec<i32> = ["ccs-1", "ccs-2"]
        .iter()
        .flat_map(|n| s.pids(n).into_values())
        .collect();

    // 1 byte: always exceeded. No idle timeout at all: the pressure policy stands alone.
    let env = [
        ("CCS_ENGINE_MEM_HIGH", "1K"),
        ("CCS_ENGINE_MIN_IDLE_MS", "60000"),
        ("CCS_REAP_GRACE_MS", "2000"),
    ];
    let o = s.sweep(DONE, &[], &env);
    assert_eq!(
        s.names(),
        strings(&["ccs-3", "ccs-4", "ccs-5", "ccs-6"]),
        "{}",
        o.stderr
    );
    let a = audit_by_name(&s);
    assert_eq!(a.len(), 2, "{a:?}");
    for name in ["ccs-1", "ccs-2"] {
        assert_eq!(a[name]["reason"], "memory", "{:?}", a[name]);
        assert_eq!(a[name]["outcome"], "reaped", "{:?}", a[name]);
        assert_eq!(a[name]["ended"], "stopped", "{:?}", a[name]);
    }
    assert!(a["ccs-2"]["idle_ms"].as_u64().unwrap() >= 1_200_000);
    for pid in victims {
        assert!(!alive(pid), "{pid} survived a memory reap");
    }
    assert_eq!(s.tombstone("2").unwrap()["cid"], "c2");

    // The first sight started the clock; a second sweep still spares the young and the new one.
    assert!(s.show(_unstamped, "@ccs_idle").is_some());
    let o = s.sweep(DONE, &[], &env);
    assert_eq!(
        s.names(),
        strings(&["ccs-3", "ccs-4", "ccs-5", "ccs-6"]),
        "{}",
        o.stderr
    );
    assert_eq!(s.audit().len(), 2);
}

#[test]
fn pressure_without_a_floor_still_spares_first_sight_busy_and_viewed() {
    let mut s = Server::new();
    let just = s.chat("ccs-1", "c1", "");
    let busy = s.chat("ccs-2", "c2", "");
    let viewed = s.chat("ccs-3", "c3", "");
    let _unstamped = s.chat("ccs-4", "c4", "");
    s.idle_since(just, 1_000);
    s.idle_since(busy, 10_000_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    s.idle_since(viewed, 10_000_000);
    s.attach_control("ccs-3");
    let o = s.sweep(
        DONE,
        &[],
        &[
            ("CCS_ENGINE_MEM_HIGH", "1K"),
            ("CCS_ENGINE_MIN_IDLE_MS", "0"),
            ("CCS_REAP_GRACE_MS", "2000"),
        ],
    );
    assert_eq!(
        s.names(),
        strings(&["ccs-2", "ccs-3", "ccs-4"]),
        "{}",
        o.stderr
    );
    let a = audit_by_name(&s);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a["ccs-1"]["reason"], "memory");
}

#[test]
fn default_floor_protects_a_chat_that_just_answered() {
    // CCS_ENGINE_MIN_IDLE_MS unset: 60 s.
    let s = Server::new();
    let just = s.chat("ccs-1", "c1", "");
    let old = s.chat("ccs-2", "c2", "");
    s.idle_since(just, 30_000);
    s.idle_since(old, 90_000);
    let o = s.sweep(
        DONE,
        &[],
        &[("CCS_ENGINE_MEM_HIGH", "1K"), ("CCS_REAP_GRACE_MS", "2000")],
    );
    assert_eq!(s.names(), strings(&["ccs-1"]), "{}", o.stderr);
    assert_eq!(audit_by_name(&s)["ccs-2"]["reason"], "memory");
}

#[test]
fn threshold_never_reached_reaps_nothing() {
    let s = Server::new();
    let a = s.chat("ccs-1", "c1", "plain");
    let b = s.chat("ccs-2", "c2", "");
    s.idle_since(a, 100_000_000);
    s.idle_since(b, 10_000_000);
    for high in ["1000T", "100%"] {
        let o = s.sweep(
            DONE,
            &[],
            &[
                ("CCS_ENGINE_MEM_HIGH", high),
                ("CCS_ENGINE_MIN_IDLE_MS", "0"),
            ],
        );
        assert_eq!(
            s.names(),
            strings(&["ccs-1", "ccs-2"]),
            "{high}: {}",
            o.stderr
        );
    }
    assert!(s.audit().is_empty(), "{:?}", s.audit());
}

// ---------------------------------------------------------------------------------------------
// The idle cap
// ---------------------------------------------------------------------------------------------

#[test]
fn idle_cap_keeps_the_most_recent_idle_sessions() {
    let mut s = Server::new();
    // Idle ages (minutes), deliberately not in name or creation order.
    let ages = [("ccs-1", 30), ("ccs-2", 10), ("ccs-3", 20), ("ccs-4", 5)];
    let mut ids = HashMap::new();
    for (name, min) in ages {
        let n = s.chat(name, &format!("c-{name}"), "");
        s.idle_since(n, min * 60_000);
        ids.insert(name, n);
    }
    // Neither a busy nor a viewed session counts among the idle ones.
    let busy = s.chat("ccs-5", "c5", "");
    s.idle_since(busy, 100 * 60_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    let viewed = s.chat("ccs-6", "c6", "");
    s.idle_since(viewed, 100 * 60_000);
    s.attach_control("ccs-6");
    let stamps: HashMap<&str, i64> = ids
        .iter()
        .map(|(k, n)| (*k, s.show(*n, "@ccs_idle").unwrap().parse().unwrap()))
        .collect();

    let o = s.sweep(
        DONE,
        &[],
        &[("CCS_ENGINE_MAX_IDLE", "2"), ("CCS_REAP_GRACE_MS", "2000")],
    );
    // The two with the most recent idle stamps stay.
    let mut by_recent: Vec<&str> = stamps.keys().copied().collect();
    by_recent.sort_by_key(|k| std::cmp::Reverse(stamps[k]));
    let mut want = strings(&by_recent[..2]);
    want.extend(strings(&["ccs-5", "ccs-6"]));
    want.sort();
    assert_eq!(s.names(), want, "{}", o.stderr);
    assert_eq!(want, strings(&["ccs-2", "ccs-4", "ccs-5", "ccs-6"]));
    let a = audit_by_name(&s);
    assert_eq!(a.len(), 2, "{a:?}");
    for name in ["ccs-1", "ccs-3"] {
        assert_eq!(a[name]["reason"], "max-idle", "{:?}", a[name]);
        assert_eq!(a[name]["outcome"], "reaped", "{:?}", a[name]);
    }
    // The kept ones still carry their own stamps (nothing restarted their clocks).
    for name in ["ccs-2", "ccs-4"] {
        let v: i64 = s.show(ids[name], "@ccs_idle").unwrap().parse().unwrap();
        assert_eq!(v, stamps[name], "{name}");
    }
    // At the cap: a second sweep takes nothing more.
    s.sweep(DONE, &[], &[("CCS_ENGINE_MAX_IDLE", "2")]);
    assert_eq!(s.names(), want);
}

// ---------------------------------------------------------------------------------------------
// Accounting
// ---------------------------------------------------------------------------------------------

/// RSS in bytes of `pids` as `ps` reports it.
fn ps_rss(pids: &[i32]) -> u64 {
    let list = pids
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let o = Command::new("ps")
        .args(["-o", "rss=", "-p", &list])
        .output()
        .unwrap();
    let lines: Vec<u64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(
        lines.len(),
        pids.len(),
        "ps did not see every pid of {pids:?}"
    );
    lines.iter().sum::<u64>() * 1024
}

#[test]
fn memory_of_a_real_tree_is_within_ten_percent_of_ps() {
    let s = Server::new();
    s.chat("ccs-1", "c1", "plain,daemon,stubborn");
    s.chat("ccs-2", "c2", "plain");
    let j = s.status(&[]);
    let by = by_name(&j);
    let mut total = 0;
    for name in ["ccs-1", "ccs-2"] {
        // Every pid the fake claude recorded (not the by-kind map: kinds may repeat).
        let pids: Vec<i32> = s.pid_list(name).into_iter().map(|(_, p)| p).collect();
        let want = ps_rss(&pids);
        let got = by[name]["rss_bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: no rss_bytes: {:?}", by[name]));
        let diff = got.abs_diff(want) as f64 / want as f64;
        assert!(
            diff <= 0.10,
            "{name}: status says {got} bytes, ps says {want} over {pids:?} ({:.1} %)",
            diff * 100.0
        );
        // PSS counts shared pages once: never above RSS, never zero for a live tree.
        if let Some(pss) = by[name]["pss_bytes"].as_u64() {
            assert!(pss > 0 && pss <= got, "{name}: pss {pss}, rss {got}");
        }
        total += got;
    }
    assert_eq!(j["total_rss_bytes"].as_u64(), Some(total));
    // The human table shows the memory too.
    let o = s.run_any(&["status"], &[]);
    assert!(o.stdout.contains("RSS"), "{}", o.stdout);
    assert!(
        o.stdout.contains("KiB") || o.stdout.contains("MiB"),
        "{}",
        o.stdout
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let exited = wait_until(5.0, || matches!(self.0.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

const STATES: [&str; 9] = [
    "unknown", "busy", "stuck", "viewed", "new", "idle", "no-cid", "exited", "expired",
];

#[test]
fn metrics_endpoint_answers_and_matches_status() {
    let mut s = Server::new();
    // A foreign session keeps the server up whatever is reaped.
    s.session("keeper", "sleep 100000");
    // Sessions in states that stay put while the daemon sweeps.
    let idle1 = s.chat("ccs-1", "c1", "plain");
    let idle2 = s.chat("ccs-2", "c2", "");
    s.idle_since(idle1, 60_000);
    s.idle_since(idle2, 120_000);
    let busy = s.chat("ccs-3", "c3", "");
    s.idle_since(busy, 60_000);
    s.set(busy, "@ccs_turn", &now_ms().to_string());
    let viewed = s.chat("ccs-4", "c4", "");
    s.idle_since(viewed, 60_000);
    s.attach_control("ccs-4");
    let nocid = s.session("ccs-5", "sleep 100000");
    s.idle_since(nocid, 60_000);
    let stuck = s.chat("ccs-6", "c6", "");
    s.idle_since(stuck, 60_000);
    s.set(stuck, "@ccs_turn", &(now_ms() - 7_200_000).to_string());
    // And one that the first sweep reaps (a reap to count).
    let expired = s.chat("ccs-7", "c7", "");
    s.idle_since(expired, 100_000_000);

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let env = [
        ("CCS_ENGINE_IDLE_KILL_MS", "3600000"),
        ("CCS_ENGINE_STUCK_WALL_MS", "3600000"),
        ("CCS_REAP_INTERVAL_MS", "200"),
        ("CCS_REAP_GRACE_MS", "2000"),
        ("CCS_METRICS_ADDR", addr.as_str()),
    ];
    let log = std::fs::File::create(s.path("daemon.log")).unwrap();
    let _d = Daemon(
        s.reap(&env)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(s.path("daemon.log")).unwrap_or_default();

    let mut health = None;
    assert!(
        wait_until(10.0, || {
            health = get(port, "/healthz", Duration::from_secs(5));
            // 503 until a first sweep has read the tmux server.
            health.as_ref().is_some_and(|r| r.status.contains(" 200"))
        }),
        "nothing answers on {addr}: {}",
        log()
    );
    let r = health.unwrap();
    assert!(r.status.contains(" 200"), "{}", r.status);
    assert_eq!(r.body.trim(), "ok");
    let r = get(port, "/nothing-here", Duration::from_secs(5)).unwrap();
    assert!(r.status.contains(" 404"), "{}", r.status);

    // Wait for the reap to be counted and for a sweep after it.
    let reaped_key = r#"ccs_reap_reaps_total{reason="idle",outcome="reaped"}"#;
    let mut m = HashMap::new();
    assert!(
        wait_until(15.0, || {
            m = get(port, "/metrics", Duration::from_secs(5))
                .map(|r| samples(&r.body))
                .unwrap_or_default();
            !s.has("ccs-7")
                && m.get(reaped_key) == Some(&1.0)
                && m.get(r#"ccs_reap_sessions{state="expired"}"#) == Some(&0.0)
                && m.get(r#"ccs_reap_sessions{state="idle"}"#) == Some(&2.0)
        }),
        "metrics never showed the reap and the settled states: {m:?}\n{}",
        log()
    );

    // Now compare one scrape with one status, taken together.
    let r = get(port, "/metrics", Duration::from_secs(5)).unwrap();
    let (line, body) = (r.status, r.body);
    let j = s.status(&env);
    assert!(line.contains(" 200"), "{line}");
    let m = samples(&body);
    let mut count: HashMap<String, f64> = HashMap::new();
    let mut mem: HashMap<String, f64> = HashMap::new();
    for x in j["sessions"].as_array().unwrap() {
        let st = x["state"].as_str().unwrap().to_string();
        *count.entry(st.clone()).or_default() += 1.0;
        let b = x["pss_bytes"]
            .as_u64()
            .or(x["rss_bytes"].as_u64())
            .unwrap_or(0);
        *mem.entry(st).or_default() += b as f64;
    }
    let want: HashMap<&str, f64> = [
        ("idle", 2.0),
        ("busy", 1.0),
        ("viewed", 1.0),
        ("no-cid", 1.0),
        ("stuck", 1.0),
    ]
    .into_iter()
    .collect();
    for st in STATES {
        let c = count.get(st).copied().unwrap_or(0.0);
        assert_eq!(
            c,
            want.get(st).copied().unwrap_or(0.0),
            "status: {st}\n{j:#}"
        );
        let key = format!("ccs_reap_sessions{{state=\"{st}\"}}");
        assert_eq!(
            m.get(&key).copied(),
            Some(c),
            "{key} does not match status ({c})\n{body}"
        );
        let key = format!("ccs_reap_session_memory_bytes{{state=\"{st}\"}}");
        let got = m
            .get(&key)
            .copied()
            .unwrap_or_else(|| panic!("no {key}\n{body}"));
        let w = mem.get(st).copied().unwrap_or(0.0);
        // PSS moves when other processes map the same pages (parallel tests start and stop
        // many): within 10 %, or 256 KiB for the small trees here.
        assert!(
            (got - w).abs() <= (0.10 * w).max(256.0 * 1024.0),
            "{key} = {got}, status says {w}\n{body}"
        );
    }
    assert_eq!(m.get(reaped_key), Some(&1.0), "{body}");
    assert!(
        m.get("ccs_reap_sweeps_total").is_some_and(|&v| v >= 2.0),
        "{body}"
    );
    assert!(
        m.get("ccs_reap_last_sweep_timestamp_seconds")
            .is_some_and(|&v| (v - now_ms() as f64 / 1000.0).abs() < 60.0),
        "{body}"
    );
    assert!(
        m.contains_key("ccs_reap_sweep_duration_seconds_count"),
        "{body}"
    );
    assert!(m.contains_key("ccs_reap_tmux_errors_total"), "{body}");
    assert_eq!(s.tombstone("7").unwrap()["cid"], "c7");
}
