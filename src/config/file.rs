//! The settings file: where it is, reading it safely, and its lines (systemd's EnvironmentFile=
//! format, so one file serves the units and every other caller).

use crate::core::capped::{self, Capped};
use std::path::{Path, PathBuf};

/// The largest settings file read; a larger one is refused, never read to its end.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// One `KEY=value` of the file, with its line (1-based; the first line of a continued value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: String,
    pub line: usize,
}

/// Where the settings come from, in order: `--config FILE`, else `CCS_CONFIG` (either must
/// exist), else the first of `$XDG_CONFIG_HOME/ccs-reap/env` (`$HOME/.config` when unset),
/// `/etc/ccs-reap/<user>.env` (the template unit's instance for that user) and
/// `/etc/ccs-reap/env` that exists, else none. One file is read whole: files are never layered,
/// so every caller of one user (the daemon, cron, the CLI, the hooks) reads the same one. `bool`:
/// whether the file was named explicitly.
pub fn locate(
    flag: Option<&Path>,
    ccs_config: Option<&str>,
    xdg_config_home: Option<&str>,
    home: Option<&str>,
    user: Option<&str>,
) -> Option<(PathBuf, bool)> {
    if let Some(f) = flag {
        return Some((f.to_path_buf(), true));
    }
    if let Some(f) = ccs_config.map(str::trim).filter(|f| !f.is_empty()) {
        return Some((PathBuf::from(f), true));
    }
    candidates(xdg_config_home, home, user)
        .into_iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok())
        .map(|p| (p, false))
}

/// The default places, in order (`user`: the user name, `$USER`; one that could leave
/// `/etc/ccs-reap/` is ignored).
pub fn candidates(
    xdg_config_home: Option<&str>,
    home: Option<&str>,
    user: Option<&str>,
) -> Vec<PathBuf> {
    let nonempty = |v: Option<&str>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    // A relative $XDG_CONFIG_HOME is ignored, as the XDG base directory spec says.
    let mine = nonempty(xdg_config_home)
        .filter(|p| p.is_absolute())
        .or_else(|| nonempty(home).map(|h| h.join(".config")));
    let instance = user
        .filter(|u| plain_user_name(u))
        .map(|u| PathBuf::from(format!("/etc/ccs-reap/{u}.env")));
    mine.map(|d| d.join("ccs-reap/env"))
        .into_iter()
        .chain(instance)
        .chain(std::iter::once(PathBuf::from("/etc/ccs-reap/env")))
        .collect()
}

/// A user name that names a file of its own under `/etc/ccs-reap/` or `/var/lib/ccs-reap/` (no
/// `/`, not hidden, at most 64 bytes).
pub fn plain_user_name(u: &str) -> bool {
    !u.is_empty() && !u.starts_with('.') && !u.contains('/') && u.len() <= 64
}

/// Who is reading the file: the effective uid and primary gid of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reader {
    pub uid: u32,
    pub gid: u32,
}

/// Whether a file of this kind, mode, owner (`uid`, `gid`) and size may be read as settings by
/// `me`; `Err` says why not. A file that a group other than the reader's own primary group (root's:
/// gid 0) or root's group (gid 0, trusted as the owner root is) can write is refused as a
/// world-writable one is: every member of that group could set what ccs-reap kills and the hook it
/// runs, as sshd, sudo and logrotate refuse such files.
pub fn judge(
    kind: &str,
    mode: u32,
    (uid, gid): (u32, u32),
    me: Reader,
    size: u64,
) -> Result<(), String> {
    if kind != "a regular file" {
        return Err(format!("it is {kind}, not a regular file"));
    }
    if mode & 0o002 != 0 {
        return Err(format!(
            "it is writable by every user (mode {:04o}): anyone could set what ccs-reap kills; chmod o-w it",
            mode & 0o7777
        ));
    }
    if mode & 0o020 != 0 && gid != me.gid && gid != 0 {
        return Err(format!(
            "it is writable by group {gid} (mode {:04o}), not this user's own group ({}): every member could set what ccs-reap kills; chmod g-w it",
            mode & 0o7777,
            me.gid
        ));
    }
    let me = me.uid;
    if uid != me && uid != 0 {
        return Err(format!(
            "it belongs to uid {uid}, neither this user ({me}) nor root"
        ));
    }
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "it is {size} bytes, more than the {MAX_FILE_BYTES} a settings file may be"
        ));
    }
    Ok(())
}

fn kind(ft: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType as T;
    match ft {
        T::RegularFile => "a regular file",
        T::Directory => "a directory",
        T::Fifo => "a FIFO",
        T::Socket => "a socket",
        T::CharacterDevice => "a character device",
        T::BlockDevice => "a block device",
        T::Symlink => "a symbolic link",
        _ => "of an unknown kind",
    }
}

/// Read the file, refusing a hostile one: opened without blocking (a FIFO never holds the
/// open), judged by `fstat` on what was opened ([`judge`]), read at most [`MAX_FILE_BYTES`] + 1.
/// A symbolic link is followed (dotfile managers link the file), and what it leads to is judged.
pub fn read(path: &Path) -> Result<String, String> {
    use rustix::fs::{fstat, open, FileType, Mode, OFlags};
    let fd = open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot be opened: {e}"))?;
    let st = fstat(&fd).map_err(|e| format!("cannot be examined: {e}"))?;
    let me = Reader {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
    };
    judge(
        kind(FileType::from_raw_mode(st.st_mode)),
        st.st_mode,
        (st.st_uid, st.st_gid),
        me,
        st.st_size.max(0) as u64,
    )?;
    let hint = st.st_size.max(0) as u64;
    let buf = match capped::read(std::fs::File::from(fd), MAX_FILE_BYTES, hint)
        .map_err(|e| format!("cannot be read: {e}"))?
    {
        Capped::Whole(b) => b,
        Capped::TooLarge => {
            return Err(format!(
                "it grew past the {MAX_FILE_BYTES} bytes a settings file may be while it was read"
            ))
        }
    };
    String::from_utf8(buf).map_err(|e| format!("it is not UTF-8 text: {e}"))
}

fn valid_key(k: &str) -> bool {
    let mut b = k.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A value as systemd reads it: leading blanks dropped; `'...'` literal; `"..."` with `\"`, `\\`,
/// `\$` and `` \` `` unescaped; unquoted, trailing blanks dropped and `\x` taken as `x`.
fn value(raw: &str) -> Result<String, String> {
    let v = raw.trim_start();
    if let Some(rest) = v.strip_prefix('\'') {
        let (inner, after) = rest
            .split_once('\'')
            .ok_or("a single quote is not closed")?;
        if !after.trim().is_empty() {
            return Err("text after the closing quote".into());
        }
        return Ok(inner.to_string());
    }
    if let Some(rest) = v.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n @ ('"' | '\\' | '$' | '`')) => out.push(n),
                    Some('\n') => {}
                    Some(n) => {
                        out.push('\\');
                        out.push(n);
                    }
                    None => return Err("a double quote is not closed".into()),
                },
                '"' => {
                    if !chars.as_str().trim().is_empty() {
                        return Err("text after the closing quote".into());
                    }
                    return Ok(out);
                }
                c => out.push(c),
            }
        }
        return Err("a double quote is not closed".into());
    }
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => out.push(n),
            },
            c => out.push(c),
        }
    }
    Ok(out.trim_end().to_string())
}

/// The file's assignments, in order: blank lines and lines starting with `#` or `;` skipped, a
/// line ending in `\` continued on the next. `Err((line, why))` for a line that is not one.
pub fn parse(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, first)) = lines.next() {
        let line = i + 1;
        let t = first.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        let mut logical = first.to_string();
        while logical.ends_with('\\') && !logical.ends_with("\\\\") {
            match lines.next() {
                Some((_, next)) => {
                    logical.push('\n');
                    logical.push_str(next);
                }
                None => break,
            }
        }
        let Some((k, v)) = logical.split_once('=') else {
            return Err((line, "not a KEY=value line".into()));
        };
        let key = k.trim();
        if !valid_key(key) {
            return Err((
                line,
                format!("{key:?} is not a variable name (letters, digits and _)"),
            ));
        }
        let value = value(v).map_err(|e| (line, e))?;
        out.push(Entry {
            key: key.to_string(),
            value,
            line,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_systemd_reads_them() {
        type Want = Result<Vec<(&'static str, &'static str, usize)>, usize>;
        let table: &[(&str, Want)] = &[
            ("", Ok(vec![])),
            ("# c\n; c\n\n   \n", Ok(vec![])),
            ("A=1", Ok(vec![("A", "1", 1)])),
            ("  A = 1  ", Ok(vec![("A", "1", 1)])),
            ("A=\"a b\"", Ok(vec![("A", "a b", 1)])),
            ("A='a \"b\" $c'", Ok(vec![("A", "a \"b\" $c", 1)])),
            ("A=\"x\\\"y\\\\z\"", Ok(vec![("A", "x\"y\\z", 1)])),
            ("A=a\\\nb\nB=2", Ok(vec![("A", "ab", 1), ("B", "2", 3)])),
            ("A=", Ok(vec![("A", "", 1)])),
            (
                "# x\nA=1 # not a comment",
                Ok(vec![("A", "1 # not a comment", 2)]),
            ),
            ("A", Err(1)),
            ("\n1A=2", Err(2)),
            ("export A=1", Err(1)),
            ("A='x", Err(1)),
            ("A=\"x", Err(1)),
            ("A=\"x\" y", Err(1)),
        ];
        for (text, want) in table {
            let got = parse(text);
            match want {
                Ok(w) => {
                    let got = got.unwrap_or_else(|e| panic!("{text:?}: {e:?}"));
                    let got: Vec<(&str, &str, usize)> = got
                        .iter()
                        .map(|e| (e.key.as_str(), e.value.as_str(), e.line))
                        .collect();
                    assert_eq!(&got, w, "{text:?}");
                }
                Err(line) => assert_eq!(got.map_err(|e| e.0), Err(*line), "{text:?}"),
            }
        }
    }

    #[test]
    fn hostile_files_are_judged() {
        let me = 1000;
        let table: &[(&str, u32, u32, u64, Option<&str>)] = &[
            ("a regular file", 0o100600, me, 10, None),
            ("a regular file", 0o100644, 0, 10, None),
            // Writable by the reader's own group: only the reader's own group can write it.
            ("a regular file", 0o100660, me, 10, None),
            (
                "a regular file",
                0o100666,
                me,
                10,
                Some("writable by every user"),
            ),
            (
                "a regular file",
                0o100600,
                1001,
                10,
                Some("belongs to uid 1001"),
            ),
            ("a regular file", 0o100600, me, 100 << 20, Some("more than")),
            (
                "a FIFO",
                0o010600,
                me,
                0,
                Some("a FIFO, not a regular file"),
            ),
            (
                "a character device",
                0o020666,
                0,
                0,
                Some("character device"),
            ),
            ("a directory", 0o040700, me, 0, Some("a directory")),
        ];
        for (kind, mode, uid, size, want) in table {
            // The file's group is the reader's own (100) unless the owner is root (gid 0).
            let gid = if *uid == 0 { 0 } else { 100 };
            let got = judge(
                kind,
                *mode,
                (*uid, gid),
                Reader { uid: me, gid: 100 },
                *size,
            );
            match want {
                None => assert_eq!(got, Ok(()), "{kind} {mode:o}"),
                Some(w) => assert!(
                    got.as_ref().is_err_and(|e| e.contains(w)),
                    "{kind} {mode:o}: {got:?}"
                ),
            }
        }
    }

    #[test]
    fn a_file_another_group_can_write_is_refused() {
        let user = Reader {
            uid: 1000,
            gid: 1000,
        };
        let root = Reader { uid: 0, gid: 0 };
        let f = "a regular file";
        // (mode, owner, group, reader, refused)
        let table: &[(u32, u32, u32, Reader, bool)] = &[
            (0o100660, 1000, 1000, user, false),
            (0o100660, 1000, 50, user, true),
            (0o100640, 1000, 50, user, false),
            (0o100660, 0, 0, root, false),
            (0o100660, 0, 50, root, true),
            (0o100620, 0, 50, root, true),
            (0o100664, 0, 0, user, false),
            (0o100664, 0, 1000, root, true),
            (0o100644, 0, 50, root, false),
        ];
        for &(mode, uid, gid, me, refused) in table {
            let got = judge(f, mode, (uid, gid), me, 10);
            assert_eq!(
                got.is_err(),
                refused,
                "{mode:o} {uid}:{gid} read by {me:?}: {got:?}"
            );
            if refused {
                let e = got.unwrap_err();
                assert!(
                    e.contains(&format!("writable by group {gid}")) && e.contains("chmod g-w"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn where_the_file_is() {
        let c = candidates(Some("/x"), Some("/h"), None);
        assert_eq!(
            c,
            vec![PathBuf::from("/x/ccs-reap/env"), "/etc/ccs-reap/env".into()]
        );
        let c = candidates(None, Some("/h"), None);
        assert_eq!(c[0], PathBuf::from("/h/.config/ccs-reap/env"));
        let c = candidates(Some("rel"), Some("/h"), None);
        assert_eq!(c[0], PathBuf::from("/h/.config/ccs-reap/env"));
        let c = candidates(Some(""), None, None);
        assert_eq!(c, vec![PathBuf::from("/etc/ccs-reap/env")]);
        // The template unit's instance file, for the user's own name only.
        let c = candidates(None, Some("/h"), Some("studio"));
        assert_eq!(
            c,
            vec![
                PathBuf::from("/h/.config/ccs-reap/env"),
                "/etc/ccs-reap/studio.env".into(),
                "/etc/ccs-reap/env".into()
            ]
        );
        for odd in ["", "../x", "a/b", ".hidden", &"u".repeat(65)] {
            let c = candidates(None, None, Some(odd));
            assert_eq!(c, vec![PathBuf::from("/etc/ccs-reap/env")], "{odd:?}");
        }
        assert_eq!(
            locate(Some(Path::new("/f")), Some("/g"), None, None, None),
            Some(("/f".into(), true))
        );
        assert_eq!(
            locate(None, Some("/g"), None, None, None),
            Some(("/g".into(), true))
        );
    }
}
