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
        let pressure = p.mem_high.is_some()
            || p.mem_psi.is_some()
            || p.session_mem_max.is_some()
            || p.max_idle.is_some();
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
    /// `NAME=value` where it is set (a line a settings file takes), `# NAME` with its default
    /// where not, each with its source.
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
            let line = match &e.value {
                Some(v) => format!("{}={}", e.name, quote(v)),
                None => format!(
                    "# {} (default: {})",
                    e.name,
                    setting(e.name).map(|s| s.default).unwrap_or("")
                ),
            };
            s.push_str(&format!("{line:<48} # {}\n", e.source));
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

/// A value as a settings-file line takes it back: bare when it is plain, else in single quotes.
fn quote(v: &str) -> String {
    let plain = v
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/.,:-_%@+=[]".contains(&b));
    if plain || v.contains('\'') {
        v.to_string()
    } else {
        format!("'{v}'")
    }
}
