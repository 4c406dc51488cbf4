//! Logging: tracing to stderr, as text or JSON, with syslog priorities when stderr is the journal.

use super::*;

/// A log line's event format, prefixed with its syslog priority (`<3>` error, `<4>` warning,
/// `<6>` info, `<7>` debug and trace) when `journal` is set: systemd's journal reads the prefix on
/// a service's stdout/stderr stream (sd-daemon(3)), so `journalctl -p warning` finds the warnings.
pub(super) struct Priority<F> {
    journal: bool,
    inner: F,
}

/// The syslog priority of a tracing level.
pub(super) fn syslog_priority(level: &tracing::Level) -> u8 {
    match *level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Priority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        ev: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if self.journal {
            write!(w, "<{}>", syslog_priority(ev.metadata().level()))?;
        }
        self.inner.format_event(ctx, w, ev)
    }
}

/// Whether stderr is systemd's journal: `JOURNAL_STREAM` (`<device>:<inode>`, set by systemd for
/// a unit's stdout/stderr) names the file stderr is. A process that only inherited the variable
/// (a command in a tmux pane of a studio started by a unit) writes to a terminal instead.
pub(super) fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // st_dev and st_ino are not u64 on every target.
    #[allow(clippy::unnecessary_cast)]
    rustix::fs::fstat(std::io::stderr())
        .is_ok_and(|st| st.st_dev as u64 == dev && st.st_ino as u64 == ino)
}

/// Whether stderr takes JSON lines (`CCS_LOG_FORMAT=json`): then [`say_line`] writes one too.
static JSON_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(super) fn set_json_stderr(on: bool) {
    JSON_STDERR.store(on, Ordering::Relaxed);
}

/// One message of the command line on stderr (`say!`): as it is, or under `CCS_LOG_FORMAT=json`
/// one JSON object shaped as the log lines are (`timestamp`, `level`, `fields.message`,
/// `target`); "ccs-reap: warning: ..." is a WARN, any other an ERROR. Never panics: a line that
/// stderr cannot take is dropped.
pub(crate) fn say_line(text: &str) {
    use std::io::Write as _;
    let line = if JSON_STDERR.load(Ordering::Relaxed) {
        // With the journal's priority, as the log lines carry it.
        static JOURNAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let j = json_line(text);
        if *JOURNAL.get_or_init(stderr_is_journal) {
            let p = if j.contains(r#""level":"WARN""#) {
                4
            } else {
                3
            };
            format!("<{p}>{j}")
        } else {
            j
        }
    } else {
        text.to_string()
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A message as a JSON log line.
pub(crate) fn json_line(text: &str) -> String {
    let body = text.strip_prefix("ccs-reap: ").unwrap_or(text);
    let (level, message) = match body.strip_prefix("warning: ") {
        Some(m) => ("WARN", m),
        None => ("ERROR", body),
    };
    serde_json::json!({
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "level": level,
        "fields": { "message": message },
        "target": "ccs_reap::cli",
    })
    .to_string()
}

/// Logs on stderr, text or JSON (`CCS_LOG_FORMAT`); each line with its syslog priority when
/// stderr is systemd's journal ([`stderr_is_journal`]). `quiet` (a command without `-v`): only
/// warnings and errors, whatever `CCS_LOG` lets through. `outcomes_said`: the command prints each
/// reap's outcome on stdout (`--once`, `reap`), so the teardown's own log line of it (`reap
/// failed`, an ERROR) is left out unless `-v`: one failed reap is said once.
pub(super) fn init_logging(cfg: &Config, quiet: bool, outcomes_said: bool) {
    use tracing_subscriber::fmt::format;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(&cfg.log_filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let journal = stderr_is_journal();
    set_json_stderr(cfg.log_format == LogFormat::Json);
    let cap = if quiet {
        tracing_subscriber::filter::LevelFilter::WARN
    } else {
        tracing_subscriber::filter::LevelFilter::TRACE
    };
    let said_twice = quiet && outcomes_said;
    let outcomes = tracing_subscriber::filter::filter_fn(move |m| {
        !(said_twice && m.target() == "ccs_reap::engine::teardown::finish")
    });
    // A log line that cannot be written is dropped: the subscriber's own report of it would be
    // an `eprintln!`, which panics when stderr is the thing that fails (`2> /dev/full`).
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match cfg.log_format {
        LogFormat::Json => b
            .json()
            .event_format(Priority {
                journal,
                inner: format().json(),
            })
            .finish()
            .with(cap)
            .with(outcomes)
            .init(),
        LogFormat::Text => b
            .with_ansi(false)
            .event_format(Priority {
                journal,
                inner: format().with_ansi(false),
            })
            .finish()
            .with(cap)
            .with(outcomes)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_under_json_is_one_json_log_line() {
        for (text, level, msg) in [
            (
                "ccs-reap: warning: no tmux server at /s",
                "WARN",
                "no tmux server at /s",
            ),
            (
                "ccs-reap: another reaper holds",
                "ERROR",
                "another reaper holds",
            ),
        ] {
            let v: serde_json::Value = serde_json::from_str(&json_line(text)).unwrap();
            assert_eq!(v["level"], level);
            assert_eq!(v["fields"]["message"], msg);
        }
    }
}
