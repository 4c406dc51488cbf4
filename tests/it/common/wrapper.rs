//! A `tmux` wrapper script first on the reaper's PATH, to inject faults into, or count, the
//! reaper's own tmux calls (it runs the `tmux` it finds on PATH). The fixture's own tmux calls never
//! go through it.

use super::{Out, Server};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The first `name` on the test's PATH that is an executable file.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|f| {
            f.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The real tmux, by absolute path (a wrapper calls it past itself).
pub fn real_tmux() -> PathBuf {
    which("tmux").expect("tmux on PATH")
}

/// Single-quote for sh.
pub fn shq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Server {
    /// Install `<dir>/bin/tmux`, a sh script that runs `body` with `$REAL` set to the real tmux and
    /// `$SOCK` to this server's socket (`"$REAL" "$@"` passes a call on). Returns the bin dir, for
    /// [`Server::sweep_via`].
    pub fn tmux_wrapper(&self, body: &str) -> PathBuf {
        let bin = self.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let f = bin.join("tmux");
        let script = format!(
            "#!/bin/sh\nREAL={}\nSOCK={}\n{body}",
            shq(&super::path_str(&real_tmux())),
            shq(&super::path_str(&self.sock)),
        );
        std::fs::write(&f, script).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    /// [`Server::run`] with `bin` (see [`Server::tmux_wrapper`]) first on the reaper's PATH.
    pub fn run_via(&self, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
        Out::from(
            self.reap(env)
                .env("PATH", path_with(bin))
                .args(args)
                .output()
                .unwrap(),
        )
    }

    /// [`Server::sweep`] with `bin` (see [`Server::tmux_wrapper`]) first on the reaper's PATH; also
    /// how long it took.
    pub fn sweep_via(
        &self,
        bin: &Path,
        want: &[i32],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (Out, Duration) {
        let t = Instant::now();
        let o = Out::from(
            self.reap(env)
                .env("PATH", path_with(bin))
                .arg("--once")
                .args(args)
                .output()
                .unwrap(),
        );
        let took = t.elapsed();
        (o.expect_exit(want, &format!("--once {args:?}")), took)
    }
}

/// `PATH` with `bin` first.
pub fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}
