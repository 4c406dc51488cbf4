//! Files written for the user (issue 29.6): `claude-settings --write FILE` never writes through a
//! planted link, keeps the file's owner, group and mode, refuses a FIFO at once, and leaves alone
//! a file it cannot write back (read-only, or hard-linked).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Stdio;

use crate::common::*;

fn write(s: &Server, f: &std::path::Path) -> Out {
    s.run_any(&["claude-settings", "--write", f.to_str().unwrap()], &[])
}

/// Whether the settings file holds ccs-reap's hooks.
fn has_hooks(f: &std::path::Path) -> bool {
    std::fs::read_to_string(f).is_ok_and(|t| t.contains(" claude-hook"))
}

#[test]
fn a_link_planted_at_the_temporary_files_name_is_never_written_through() {
    let s = Server::new();
    let f = s.path("settings.json");
    std::fs::write(&f, "{}").unwrap();
    let victim = s.path("victim");
    std::fs::write(&victim, "secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The names earlier versions used, `.settings.json.ccs-reap.<pid>`, for every pid the next
    // process may get.
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for pid in last + 1..last + 3000 {
        let _ =
            std::os::unix::fs::symlink(&victim, s.path(&format!(".settings.json.ccs-reap.{pid}")));
    }
    let o = write(&s, &f);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert_eq!(
        std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let m = std::fs::symlink_metadata(&f).unwrap();
    assert!(m.file_type().is_file(), "settings.json is no longer a file");
    assert!(has_hooks(&f));
}

#[test]
fn a_users_private_file_keeps_its_owner_and_mode_when_root_writes_it() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test runs as root (it chowns a file to uid 1000); skip it with --skip user_files::a_users_private"
    );
    let s = Server::new();
    let f = s.path("settings.json");
    std::fs::write(&f, r#"{"env": {"A": "1"}}"#).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
    let o = write(&s, &f);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let m = std::fs::metadata(&f).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 1000), "the owner changed");
    assert_eq!(m.mode() & 0o7777, 0o600, "the mode changed");
    assert!(has_hooks(&f));
    // And nothing is left beside it.
    let left: Vec<String> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("ccs-reap"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_fifo_is_refused_at_once() {
    let s = Server::new();
    let f = s.path("settings.json");
    rustix::fs::mkfifoat(rustix::fs::CWD, &f, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
    let mut c = s
        .reap(&[])
        .args(["claude-settings", "--write", f.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut code = None;
    let done = wait_until(5.0, || {
        code = c.try_wait().unwrap().map(|st| st.code());
        code.is_some()
    });
    if !done {
        let _ = c.kill();
        let _ = c.wait();
        panic!("claude-settings --write hung on a FIFO");
    }
    let out = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code, Some(Some(1)), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(&f).unwrap().file_type().is_fifo());
}

#[test]
fn a_read_only_or_hard_linked_file_is_left_alone_and_said_so() {
    let s = Server::new();
    // 0444: not to be written back, even by root.
    let f = s.path("settings.json");
    std::fs::write(&f, "{}").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
    let o = write(&s, &f);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("cannot be written back"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "{}");
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o444);
    // A hard link: a rename would split it.
    let g = s.path("other.json");
    std::fs::write(&g, "{}").unwrap();
    let h = s.path("linked.json");
    std::fs::hard_link(&g, &h).unwrap();
    let o = write(&s, &g);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("hard links"), "{}", o.stderr);
    assert_eq!(std::fs::metadata(&g).unwrap().nlink(), 2);
    assert_eq!(std::fs::read_to_string(&h).unwrap(), "{}");
    // A symlink: the file it names is written, the link kept.
    let t = s.path("real.json");
    std::fs::write(&t, "{}").unwrap();
    let l = s.path("link.json");
    std::os::unix::fs::symlink(&t, &l).unwrap();
    let o = write(&s, &l);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(std::fs::symlink_metadata(&l)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(has_hooks(&t));
}

#[test]
fn man_dir_replaces_a_link_planted_at_a_pages_name_and_never_writes_through_it() {
    let s = Server::new();
    let dir = s.path("man1");
    std::fs::create_dir(&dir).unwrap();
    let victim = s.path("victim");
    std::fs::write(&victim, "secret").unwrap();
    let outside = s.path("outside");
    std::os::unix::fs::symlink(&victim, dir.join("ccs-reap.1")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("ccs-reap-spawn.1")).unwrap();
    // A page already there keeps its mode.
    std::fs::write(dir.join("ccs-reap-status.1"), "old").unwrap();
    std::fs::set_permissions(
        dir.join("ccs-reap-status.1"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let o = s.run_any(&["man", "--dir", dir.to_str().unwrap()], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert!(
        !outside.exists(),
        "a page was created outside the directory"
    );
    for (page, mode) in [
        ("ccs-reap.1", 0o644),
        ("ccs-reap-spawn.1", 0o644),
        ("ccs-reap-status.1", 0o640),
    ] {
        let m = std::fs::symlink_metadata(dir.join(page)).unwrap();
        assert!(m.file_type().is_file(), "{page} is not a file");
        assert_eq!(m.mode() & 0o7777, mode, "{page}");
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(text.contains(".TH ccs-reap"), "{page}: {text}");
    }
    // A directory in a page's place is left alone, and said.
    std::fs::remove_file(dir.join("ccs-reap-reap.1")).unwrap();
    std::fs::create_dir(dir.join("ccs-reap-reap.1")).unwrap();
    let o = s.run_any(&["man", "--dir", dir.to_str().unwrap()], &[]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("ccs-reap-reap.1"), "{}", o.stderr);
    // As root, in a user's directory: the new pages are the directory owner's.
    if rustix::process::geteuid().is_root() {
        let theirs = s.path("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let o = s.run_any(&["man", "--dir", theirs.to_str().unwrap()], &[]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let m = std::fs::metadata(theirs.join("ccs-reap.1")).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534));
    }
}

#[test]
fn directories_and_files_root_creates_for_a_user_are_the_users() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test runs as root (it gives a scratch home to uid 65534); skip it with --skip user_files::directories_and_files_root"
    );
    let s = Server::new();
    let home = s.path("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    let cases: Vec<(Vec<&str>, std::path::PathBuf)> = vec![
        (vec!["claude-settings"], home.join(".claude/settings.json")),
        (
            vec!["hook-settings", "--agent", "codex"],
            home.join(".codex/hooks.json"),
        ),
        (
            vec!["hook-settings", "--agent", "gemini"],
            home.join(".gemini/settings.json"),
        ),
        // Several levels missing: each one is the user's.
        (
            vec!["claude-settings"],
            home.join("proj/deep/.claude/settings.json"),
        ),
    ];
    for (cmd, file) in cases {
        let mut args = cmd.clone();
        let f = path_str(&file);
        args.extend(["--write", f.as_str()]);
        let o = s.run_any(&args, &[]);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        let m = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (65534, 65534),
            "{f}: the file is not the user's"
        );
        assert_eq!(m.mode() & 0o7777, 0o600, "{f}");
        let mut d = file.parent().unwrap();
        while d != home {
            let m = std::fs::metadata(d).unwrap();
            assert_eq!(
                (m.uid(), m.gid()),
                (65534, 65534),
                "{}: the directory is not the user's",
                d.display()
            );
            assert_eq!(m.mode() & 0o7777, 0o700, "{}", d.display());
            d = d.parent().unwrap();
        }
    }
}
