//! Names the commit the binary is built from, for `--version`: `CCS_REAP_COMMIT` is
//! `git rev-parse --short HEAD`, or "unknown" where there is no git or no repository (a build
//! from a source archive never fails for it).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let s = String::from_utf8(o.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CCS_REAP_COMMIT={commit}");
    // Built again when HEAD moves: HEAD itself, the branch it names, and packed refs.
    println!("cargo:rerun-if-changed=build.rs");
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for p in watch {
        if let Some(path) = git(&["rev-parse", "--git-path", &p]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}
