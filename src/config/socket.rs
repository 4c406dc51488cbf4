//! Which tmux server to talk to, and the names derived from its socket.

use std::path::PathBuf;

/// Which tmux server to talk to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Socket {
    /// `tmux -L <name>`
    Name(String),
    /// `tmux -S <path>`
    Path(PathBuf),
}

/// FNV-1a, 64 bits: a stable hash (std's hashers may change between releases), for names.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Socket {
    /// The socket's path: `-S` as given, `-L <name>` where tmux puts it
    /// (`$TMUX_TMPDIR` or `/tmp`, then `tmux-<uid>/<name>`).
    pub fn path(&self) -> PathBuf {
        match self {
            Socket::Path(p) => p.clone(),
            Socket::Name(n) => {
                let dir = std::env::var_os("TMUX_TMPDIR")
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| "/tmp".into());
                PathBuf::from(dir)
                    .join(format!("tmux-{}", rustix::process::getuid().as_raw()))
                    .join(n)
            }
        }
    }

    /// The socket's path with its directory made canonical where it exists (the socket itself
    /// may not exist yet), so `-L ccstudio` and `-S` of the same path are one socket.
    pub fn canonical_path(&self) -> PathBuf {
        let p = self.path();
        match (p.parent(), p.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(dir)
                .map(|d| d.join(name))
                .unwrap_or(p),
            _ => p,
        }
    }

    /// A label for the lock file: the canonical path with every character but letters, digits,
    /// `-` and `.` as `_`. Readable, not exact: [`Socket::studio_key`] adds a hash.
    pub fn label(&self) -> String {
        self.canonical_path()
            .to_string_lossy()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// The name of a studio's directory in the state dir: one socket and one session prefix.
    /// `<label>-<FNV-1a 64 of the exact canonical path>@<prefix>`: two sockets whose labels
    /// collide (`/a_b` and `/a/b`) still get two directories.
    pub fn studio_key(&self, prefix: &str) -> String {
        use std::os::unix::ffi::OsStrExt;
        let path = self.canonical_path();
        format!(
            "{}-{:016x}@{prefix}",
            self.label(),
            fnv1a64(path.as_os_str().as_bytes())
        )
    }
}
