//! What is in effect, for an operator: `ccs-reap config` and the daemon's start line.

use super::{setting, Config, ValueSource};

impl Config {
    /// The rules in effect, each with its threshold as written: the daemon's start line.
    pub fn rules(&self) -> String {
        let p = &self.policy;
        let raw = |name: &str| {
            self.sources
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
                .unwrap_or_else(|| {
                    setting(name)
                        .map(|s| s.default.to_string())
                        .unwrap_or_default()
                })
        };
        let mut r: Vec<String> = Vec::new();
        let mut rule = |on: bool, label: &str, name: &str| {
            if on {
                r.push(format!("{label} {name}={}", raw(name).trim()));
            }
        };
        rule(p.idle_kill_ms.is_some(), "idle", "CCS_ENGINE_IDLE_KILL_MS");
        rule(p.mem_high.is_some(), "memory", "CCS_ENGINE_MEM_HIGH");
        rule(p.mem_psi.is_some(), "stall", "CCS_ENGINE_MEM_PSI");
        rule(
            p.session_mem_max.is_some(),
            "bloat",
            "CCS_ENGINE_SESSION_MEM_MAX",
        );
        rule(p.max_idle.is_some(), "max-idle", "CCS_ENGINE_MAX_IDLE");
        rule(p.max_live.is_some(), "max-live", "CCS_ENGINE_MAX_LIVE");
        let pressure = p.mem_high.is_some()
            || p.mem_psi.is_some()
            || p.session_mem_max.is_some()
            || p.max_idle.is_some()
            || p.max_live.is_some();
        rule(pressure, "floor", "CCS_ENGINE_MIN_IDLE_MS");
        let stuck = p.reap_stuck && (p.stuck_wall_ms.is_some() || p.stuck_idle_ms.is_some());
        rule(
            stuck && p.stuck_wall_ms.is_some(),
            "stuck",
            "CCS_ENGINE_STUCK_WALL_MS",
        );
        rule(
            stuck && p.stuck_idle_ms.is_some(),
            "stuck",
            "CCS_ENGINE_STUCK_IDLE_MS",
        );
        rule(p.warn_ms.is_some(), "warned", "CCS_ENGINE_WARN_MS");
        rule(p.reap_without_cid, "no-cid", "CCS_ENGINE_REAP_WITHOUT_CID");
        if r.is_empty() {
            "none (reaping is disabled)".into()
        } else {
            r.join(", ")
        }
    }

    /// `ccs-reap config`: the settings file and the state dir in effect, then every setting,
    /// `NAME=value` where it is set (a line a settings file takes, its source on a comment line
    /// of its own above it: the reader, as systemd's, takes a `#` after a value as part of it),
    /// `# NAME (default: ...)` where not. The whole output is a settings file that gives the
    /// same values back.
    pub fn render(&self) -> String {
        let mut s = match &self.file {
            Some(f) => format!("# settings file: {}\n", f.display()),
            None => "# settings file: none\n".to_string(),
        };
        s.push_str(&format!("# state dir: {}\n", self.state_dir.display()));
        s.push_str(&format!(
            "# tmux server: {} ({})\n",
            self.socket.canonical_path().display(),
            self.socket_chosen_by()
        ));
        s.push_str(&format!("# rules: {}\n", self.rules()));
        for e in &self.sources {
            match &e.value {
                Some(v) => {
                    s.push_str(&format!("# {}\n", e.source));
                    match quote(v) {
                        Some(q) => s.push_str(&format!("{}={q}\n", e.name)),
                        None => s.push_str(&format!(
                            "# {} is set, to a value no settings-file line can hold (a line break): see config --json\n",
                            e.name
                        )),
                    }
                }
                None => s.push_str(&format!(
                    "# {} (default: {})\n",
                    e.name,
                    setting(e.name).map(|s| s.default).unwrap_or("")
                )),
            }
        }
        s
    }

    /// What chose the tmux server every command talks to: the setting (and its source), `$TMUX`
    /// (run inside tmux, no socket configured), or the default.
    pub fn socket_chosen_by(&self) -> String {
        if self.socket_from_tmux {
            return "$TMUX: run inside tmux, no socket configured".into();
        }
        let set = self.sources.iter().find(|e| {
            matches!(e.name, "CCS_TMUX_SOCKET_PATH" | "CCS_TMUX_SOCKET") && e.value.is_some()
        });
        match set {
            Some(e) => format!("{}, {}", e.name, e.source),
            None => "the default: -L ccstudio".into(),
        }
    }

    /// `ccs-reap config --json`.
    pub fn to_json(&self) -> serde_json::Value {
        let settings: Vec<serde_json::Value> = self
            .sources
            .iter()
            .map(|e| {
                let (source, path, line) = match &e.source {
                    ValueSource::Default => ("default", None, None),
                    ValueSource::Environment => ("environment", None, None),
                    ValueSource::File { path, line } => ("file", Some(path.clone()), Some(*line)),
                };
                serde_json::json!({
                    "name": e.name,
                    "value": e.value,
                    "default": setting(e.name).map(|s| s.default),
                    "source": source,
                    "file": path,
                    "line": line,
                })
            })
            .collect();
        serde_json::json!({
            "ok": true,
            "file": self.file,
            "state_dir": self.state_dir,
            "tmux_socket": self.socket.canonical_path(),
            "tmux_socket_chosen_by": self.socket_chosen_by(),
            "settings": settings,
            "rules": self.rules(),
            "warnings": self.warnings(),
        })
    }
}

/// A value as a settings-file line takes it back ([`super::file::parse`] gives `v` again): bare
/// when it is plain, else in single quotes, else (it holds a `'`) in double quotes with `"`, `\\`,
/// `$` and `` ` `` escaped. `None`: it cannot be said on one line (a line break, a `\r`).
fn quote(v: &str) -> Option<String> {
    if v.contains(['\n', '\r']) {
        return None;
    }
    let plain = !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/.,:-_%@+=[]".contains(&b));
    Some(if plain {
        v.to_string()
    } else if !v.contains('\'') {
        format!("'{v}'")
    } else {
        let mut q = String::from("\"");
        for c in v.chars() {
            if matches!(c, '"' | '\\' | '$' | '`') {
                q.push('\\');
            }
            q.push(c);
        }
        q.push('"');
        q
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_reads_back_as_it_was() {
        let table = [
            "30m",
            "/opt/x",
            "a b",
            " lead",
            "trail ",
            "x # not a comment",
            "it's",
            "it's \"quoted\" $HOME `x` \\n",
            "'",
            "\"",
            "\\",
            "a\\",
            "#",
            ";x",
            "tab\there",
        ];
        for v in table {
            let line = format!("CCS_X={}\n", quote(v).unwrap());
            let back = super::super::file::parse(&line)
                .unwrap_or_else(|e| panic!("{v:?}: {line:?}: {e:?}"));
            assert_eq!(back.len(), 1, "{line:?}");
            assert_eq!(back[0].value, v, "{line:?}");
        }
        assert_eq!(quote("a\nb"), None);
    }
}
