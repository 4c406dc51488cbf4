//! Another program's `--version`, asked directly (never through a shell) within a deadline:
//! `doctor` runs each hook's binary so that one gone, or of another version, is a problem.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// `program` as a shell would find it: a path as given (relative to the working directory), a
/// bare name through `PATH`; `None` when no executable file is there.
pub fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why a program's `--version` has no answer ([`version`]).
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    #[error("failed to run {} --version: {source}", program.display())]
    Run {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{} --version did not answer within {} ms", program.display(), timeout.as_millis())]
    Timeout { program: PathBuf, timeout: Duration },
    #[error("{} --version failed ({status})", program.display())]
    Failed {
        program: PathBuf,
        status: std::process::ExitStatus,
    },
}

/// The first line `<program> --version` prints on stdout, or why there is none (it could not be
/// started, it failed, it ran past `timeout` and was killed).
pub async fn version(program: &Path, timeout: Duration) -> Result<String, ProgramError> {
    let run = |source| ProgramError::Run {
        program: program.to_path_buf(),
        source,
    };
    let child = tokio::process::Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(run)?;
    let out = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| ProgramError::Timeout {
            program: program.to_path_buf(),
            timeout,
        })?
        .map_err(run)?;
    if !out.status.success() {
        return Err(ProgramError::Failed {
            program: program.to_path_buf(),
            status: out.status,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_version_is_its_first_line_and_a_missing_program_says_so() {
        let sh = resolve("sh").unwrap();
        assert!(sh.is_absolute());
        assert!(resolve("/nonexistent/ccs-reap").is_none());
        assert!(resolve("no-such-program-ccs-reap").is_none());
        let e = version(Path::new("/nonexistent/ccs-reap"), Duration::from_secs(2))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/ccs-reap --version"), "{e}");
        // `false --version` (coreutils) prints its version; `true` exits 0 with it too.
        let t = resolve("true").unwrap();
        assert!(version(&t, Duration::from_secs(5)).await.is_ok());
    }
}
