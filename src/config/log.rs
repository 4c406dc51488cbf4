//! `CCS_LOG` (else `RUST_LOG`): a `RUST_LOG` filter whose levels may also be spelled as
//! journalctl and syslog spell them (`warning`, `err`, `notice`, `crit`, ...), mapped to tracing's
//! five levels. A filter that names no level and no known target is refused: `warning` used to be
//! read as a target name, which silenced every line.

/// Syslog's and journalctl's level names (and tracing's own), with the tracing level each is.
pub const LEVELS: &[(&str, &str)] = &[
    ("off", "off"),
    ("emerg", "error"),
    ("panic", "error"),
    ("alert", "error"),
    ("crit", "error"),
    ("critical", "error"),
    ("err", "error"),
    ("error", "error"),
    ("warning", "warn"),
    ("warn", "warn"),
    ("notice", "info"),
    ("info", "info"),
    ("debug", "debug"),
    ("trace", "trace"),
];

/// The targets a directive may name without a level (the crate and its modules).
pub const TARGETS: &[&str] = &["ccs_reap"];

fn level(s: &str) -> Option<&'static str> {
    let l = s.trim().to_ascii_lowercase();
    LEVELS.iter().find(|(n, _)| *n == l).map(|(_, t)| *t)
}

fn known_target(t: &str) -> bool {
    TARGETS
        .iter()
        .any(|k| t == *k || t.strip_prefix(k).is_some_and(|r| r.starts_with("::")))
}

/// The choices, for the error message.
pub fn choices() -> String {
    let names: Vec<&str> = LEVELS.iter().map(|(n, _)| *n).collect();
    format!(
        "a level ({}) or a RUST_LOG filter of targets and levels such as ccs_reap=debug,warn",
        names.join(", ")
    )
}

/// The filter with every level name made tracing's; `Err` says what was expected.
pub fn normalize(filter: &str) -> Result<String, String> {
    let mut out = Vec::new();
    let mut names_level = false;
    let mut names_known_target = false;
    for d in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if d.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "{}; not a bare number {d} (journalctl reads 3 as err, RUST_LOG as info: write the name)",
                choices()
            ));
        }
        match d.rsplit_once('=') {
            Some((target, lvl)) => {
                let lvl = level(lvl).map(str::to_string).unwrap_or(lvl.to_string());
                names_level = true;
                out.push(format!("{target}={lvl}"));
            }
            None => match level(d) {
                Some(l) => {
                    names_level = true;
                    out.push(l.to_string());
                }
                None => {
                    let target = d.split('[').next().unwrap_or(d);
                    names_known_target |= known_target(target);
                    out.push(d.to_string());
                }
            },
        }
    }
    if !names_level && !names_known_target {
        return Err(format!(
            "{} (it names no level and no target of ccs-reap's)",
            choices()
        ));
    }
    let normalized = out.join(",");
    tracing_subscriber::EnvFilter::builder()
        .parse(&normalized)
        .map_err(|e| format!("{} ({e})", choices()))?;
    Ok(normalized)
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn level_names_of_journalctl_and_syslog_are_taken() {
        let table: &[(&str, Option<&str>)] = &[
            ("warning", Some("warn")),
            ("WARNING", Some("warn")),
            ("err", Some("error")),
            ("crit", Some("error")),
            ("emerg", Some("error")),
            ("notice", Some("info")),
            ("info", Some("info")),
            ("debug", Some("debug")),
            ("trace", Some("trace")),
            ("off", Some("off")),
            ("ccs_reap=warning", Some("ccs_reap=warn")),
            ("ccs_reap=debug,warn", Some("ccs_reap=debug,warn")),
            ("ccs_reap", Some("ccs_reap")),
            ("ccs_reap::sweep", Some("ccs_reap::sweep")),
            ("hyper=debug", Some("hyper=debug")),
            ("verbose", None),
            ("warnings", None),
            ("tokio", None),
            ("3", None),
            ("", None),
            ("info,=[x", None),
            ("ccs_reap=loud", None),
        ];
        for (given, want) in table {
            let got = normalize(given);
            match want {
                Some(w) => assert_eq!(got.as_deref(), Ok(*w), "{given}"),
                None => assert!(got.is_err(), "{given} gave {got:?}"),
            }
        }
        let e = normalize("verbose").unwrap_err();
        assert!(e.contains("warning") && e.contains("notice"), "{e}");
    }
}
