//! The studio's liveness registries (`CCS_ACTIVITY_FILES`).
//!
//! Each file is one JSON object; each key is a registry whose value is an array of entries: an id
//! string, or an object with `id` (or `sessionId`, `chatId`) and an optional `status`. An entry
//! marks its id busy unless its status is terminal. Anything we cannot read makes the whole sweep
//! keep everything: a registry we cannot trust cannot tell us a chat is idle.
//!
//! Only regular files of at most [`MAX_ACTIVITY_BYTES`] are read. Anything else (a FIFO, a device,
//! a directory, a socket, or a symlink to one) is refused without being read, so a hostile or
//! mistaken path can neither block the reaper nor fill its memory; a refused file counts as
//! unreadable. The read itself runs on a detached thread ([`read_all_detached`]): a read stuck in
//! the kernel (a hung mount) costs that thread, never the sweep's deadline or the shutdown.

use crate::core::capped::{self, Capped};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{FileType, Mode, OFlags};
use serde_json::Value;

/// The largest activity file read: 8 MiB. A studio's registries are a few KiB; a bigger file is
/// refused (liveness unknown) rather than read into memory. Checked on the opened file's size and
/// again on what is read (at most one byte more), so a file that grows under us is refused too.
pub const MAX_ACTIVITY_BYTES: u64 = 8 * 1024 * 1024;

/// Reads that outlived their deadline and are still stuck in the kernel (a hung mount), at most.
/// Past this, no new reader thread is started (the sweep keeps everything), so a mount that never
/// answers costs a few threads, not one per sweep.
pub const MAX_STUCK_READERS: usize = 4;

/// Statuses that mean "this entry no longer holds its chat busy".
const TERMINAL: &[&str] = &[
    "done",
    "completed",
    "cancelled",
    "canceled",
    "failed",
    "error",
];

#[derive(Debug, thiserror::Error)]
pub enum ActivityError {
    #[error("failed to read activity file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("activity file {path} is malformed: {why}")]
    Malformed { path: String, why: String },
    #[error("activity file {path} is {kind}, not a regular file: refused")]
    NotRegular { path: String, kind: &'static str },
    #[error("activity file {path} holds more than {limit} bytes (the cap): refused")]
    TooLarge { path: String, limit: u64 },
}

/// Parse one file's text into the busy ids it lists.
pub fn parse(text: &str, path: &str) -> Result<HashSet<String>, ActivityError> {
    let bad = |why: String| ActivityError::Malformed {
        path: path.to_string(),
        why,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("the top level is not a JSON object".into()))?;
    let mut busy = HashSet::new();
    for (key, reg) in obj {
        let entries = reg
            .as_array()
            .ok_or_else(|| bad(format!("registry {key:?} is not an array")))?;
        for (i, e) in entries.iter().enumerate() {
            match e {
                Value::String(id) => {
                    busy.insert(id.clone());
                }
                Value::Object(o) => {
                    let id = ["id", "sessionId", "chatId"]
                        .iter()
                        .find_map(|k| o.get(*k))
                        .and_then(|v| match v {
                            Value::String(s) => Some(Ok(s.clone())),
                            Value::Number(n) => Some(whole_number(n).ok_or_else(|| {
                                bad(format!(
                                    "{key}[{i}] has the id {n}, which is not a plain whole number of at most 64 bits"
                                ))
                            })),
                            _ => None,
                        })
                        .ok_or_else(|| bad(format!("{key}[{i}] has no id, sessionId or chatId")))??;
                    let terminal = match o.get("status") {
                        None | Some(Value::Null) => false,
                        Some(Value::String(s)) => {
                            TERMINAL.contains(&s.to_ascii_lowercase().as_str())
                        }
                        Some(_) => false,
                    };
                    if !terminal {
                        busy.insert(id);
                    }
                }
                _ => return Err(bad(format!("{key}[{i}] is neither an id nor an object"))),
            }
        }
    }
    Ok(busy)
}

/// A number id as the chat id it names: only a plain whole number that fits in 64 bits (`7`,
/// `-3`). `2.0`, `3e0` or a number past 64 bits is not read exactly (JSON parses it as a float,
/// whose text is not what the studio wrote), so it names no id we could match: `None`.
fn whole_number(n: &serde_json::Number) -> Option<String> {
    n.as_u64()
        .map(|u| u.to_string())
        .or_else(|| n.as_i64().map(|i| i.to_string()))
}

/// Read every configured file. Any failure is an error naming the file.
pub fn read_all(paths: &[impl AsRef<Path>]) -> Result<HashSet<String>, ActivityError> {
    let mut busy = HashSet::new();
    for p in paths {
        let p = p.as_ref();
        let name = p.display().to_string();
        let text = read_file(p, &name, MAX_ACTIVITY_BYTES)?;
        busy.extend(parse(&text, &name)?);
    }
    Ok(busy)
}

fn kind_of(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "of an unknown type",
    }
}

/// One file's text: a regular file of at most `cap` bytes, read without ever blocking on a FIFO
/// or a device.
fn read_file(p: &Path, name: &str, cap: u64) -> Result<String, ActivityError> {
    let failed = |e: std::io::Error| ActivityError::Read {
        path: name.to_string(),
        source: e,
    };
    let regular = |st: &rustix::fs::Stat| match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(()),
        t => Err(ActivityError::NotRegular {
            path: name.to_string(),
            kind: kind_of(t),
        }),
    };
    // Look before opening: opening a FIFO or a device can act on its own (it releases a writer
    // waiting in open(), a tty may become our terminal).
    regular(&rustix::fs::stat(p).map_err(|e| failed(e.into()))?)?;
    // The path may have been swapped since: open without blocking and check what was opened.
    let fd = rustix::fs::open(
        p,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| failed(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| failed(e.into()))?;
    regular(&st)?;
    let too_large = || ActivityError::TooLarge {
        path: name.to_string(),
        limit: cap,
    };
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size > cap {
        return Err(too_large());
    }
    // The size can lie (a file growing under us, a /proc file that says 0): read at most one
    // byte past the cap, and refuse if that byte came.
    let bytes = match capped::read(std::fs::File::from(fd), cap, size).map_err(failed)? {
        Capped::Whole(b) => b,
        Capped::TooLarge => return Err(too_large()),
    };
    String::from_utf8(bytes).map_err(|e| ActivityError::Malformed {
        path: name.to_string(),
        why: format!("not UTF-8 ({e})"),
    })
}

/// Read every file on a detached thread and wait at most `timeout` for it. A read that does not
/// come back in time (stuck in the kernel on a hung mount) is abandoned, not joined: it can hold up
/// neither this sweep past its deadline nor the process's exit. Any failure is an error naming the
/// file(s), for the sweep to keep everything.
pub async fn read_all_detached(
    paths: Vec<PathBuf>,
    timeout: Duration,
) -> Result<HashSet<String>, WithinError<ActivityError>> {
    static STUCK: AtomicUsize = AtomicUsize::new(0);
    let names = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let what = format!("the activity files ({names})");
    let deadline = Deadline {
        stuck: &STUCK,
        max: MAX_STUCK_READERS,
        timeout,
    };
    within(deadline, &what, move || read_all(&paths)).await
}

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// How long [`within`] waits, and how many abandoned threads it tolerates.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    /// The abandoned threads still running (one counter per kind of read).
    pub stuck: &'static AtomicUsize,
    /// At this many stuck, nothing new is started.
    pub max: usize,
    pub timeout: Duration,
}

/// Why [`within`] has no answer: the read's own error, or the thread's.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WithinError<E: std::fmt::Display> {
    /// The read ran and failed.
    #[error("{0}")]
    Read(E),
    #[error("{n} earlier reads of {what} are still stuck (a hung mount?): not starting another")]
    Stuck { n: usize, what: String },
    #[error("failed to start a thread to read {what}: {why}")]
    NoThread { what: String, why: String },
    #[error("the thread reading {what} ended without an answer")]
    NoAnswer { what: String },
    #[error("{what} could not be read within {timeout:?}")]
    TimedOut { what: String, timeout: Duration },
}

/// The one thread with a deadline: run `read` on a thread of its own and wait up to the
/// deadline's `timeout`; past it the thread is abandoned, not joined (a read stuck on a hung mount
/// or a stdin that never closes must hold up neither the sweep nor the hook). `stuck` counts the
/// abandoned threads still running; at `max`, nothing new is started. `what` names what is read
/// ("the activity files (...)", "the hook event on stdin"). Used for the activity files and for
/// the hooks' stdin.
pub async fn within<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
    d: Deadline,
    what: &str,
    read: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, WithinError<E>> {
    let Deadline {
        stuck,
        max,
        timeout,
    } = d;
    let n = stuck.load(Ordering::SeqCst);
    if n >= max {
        return Err(WithinError::Stuck {
            n,
            what: what.to_string(),
        });
    }
    let state = Arc::new(AtomicU8::new(RUNNING));
    let theirs = Arc::clone(&state);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("ccs-read".into())
        .spawn(move || {
            let r = read();
            if theirs.swap(DONE, Ordering::SeqCst) == ABANDONED {
                stuck.fetch_sub(1, Ordering::SeqCst);
            }
            // The waiter may have given up: nobody to tell.
            let _ = tx.send(r);
        })
        .map_err(|e| WithinError::NoThread {
            what: what.to_string(),
            why: e.to_string(),
        })?;
    match tokio::time::timeout(timeout, rx).await {
        Ok(Ok(r)) => r.map_err(WithinError::Read),
        Ok(Err(_)) => Err(WithinError::NoAnswer {
            what: what.to_string(),
        }),
        Err(_) => {
            // Count first, then mark: the thread subtracts only after it saw the mark, so the
            // count never dips below zero.
            stuck.fetch_add(1, Ordering::SeqCst);
            if state
                .compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // It finished just now after all.
                stuck.fetch_sub(1, Ordering::SeqCst);
            }
            Err(WithinError::TimedOut {
                what: what.to_string(),
                timeout,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[test]
    fn registries_table() {
        let table: &[(&str, &[&str])] = &[
            (r#"{}"#, &[]),
            (r#"{"activeTasks": []}"#, &[]),
            (r#"{"activeTasks": ["a", "b"]}"#, &["a", "b"]),
            (r#"{"kanban": [{"id": "a", "status": "running"}]}"#, &["a"]),
            (r#"{"kanban": [{"sessionId": "a"}]}"#, &["a"]),
            (r#"{"kanban": [{"chatId": 7, "status": null}]}"#, &["7"]),
            (
                r#"{"k": [{"id": 18446744073709551615}, {"id": -9223372036854775808}, {"id": 0}]}"#,
                &["18446744073709551615", "-9223372036854775808", "0"],
            ),
            (
                r#"{"kanban": [{"id": "a", "status": "done"}, {"id": "b", "status": "Completed"}]}"#,
                &[],
            ),
            (
                r#"{"x": [{"id": "a", "status": "cancelled"}, {"id": "b", "status": "canceled"}, {"id": "c", "status": "failed"}, {"id": "d", "status": "error"}]}"#,
                &[],
            ),
            (
                r#"{"x": [{"id": "a", "status": "weird-new-status"}]}"#,
                &["a"],
            ),
            (r#"{"x": ["a"], "y": [{"id": "b"}]}"#, &["a", "b"]),
        ];
        for (text, want) in table {
            let got = parse(text, "f").unwrap_or_else(|e| panic!("{text}: {e}"));
            let want: HashSet<String> = want.iter().map(|s| s.to_string()).collect();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn malformed_table() {
        for text in [
            "",
            "{",
            "[]",
            r#"{"activeTasks": "a"}"#,
            r#"{"activeTasks": [1]}"#,
            r#"{"activeTasks": [{"status": "running"}]}"#,
            r#"{"activeTasks": [{"id": true}]}"#,
            // Numbers that are not plain whole numbers of at most 64 bits: not read exactly.
            r#"{"activeTasks": [{"id": 2.0}]}"#,
            r#"{"activeTasks": [{"id": 3e0}]}"#,
            r#"{"activeTasks": [{"id": 3E2}]}"#,
            r#"{"activeTasks": [{"id": 1.5}]}"#,
            r#"{"activeTasks": [{"chatId": -0.0}]}"#,
            r#"{"activeTasks": [{"sessionId": 18446744073709551616}]}"#,
            r#"{"activeTasks": [{"id": -9223372036854775809}]}"#,
            r#"{"activeTasks": [{"id": 1e400}]}"#,
        ] {
            let e = parse(text, "/x/act.json").expect_err(text);
            assert!(e.to_string().contains("/x/act.json"), "{e}");
        }
    }

    #[test]
    fn missing_file_is_named() {
        let e = read_all(&["/nonexistent/ccs-act.json"]).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ccs-act.json"));
    }

    fn temp() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("ccs-activity")
            .tempdir()
            .unwrap()
    }

    #[test]
    fn size_cap() {
        let d = temp();
        let p = d.path().join("a.json");
        let name = p.display().to_string();
        // At the cap: read. One byte over: refused, naming the file.
        std::fs::write(&p, r#"{"a": ["1"]}"#).unwrap();
        let cap = std::fs::metadata(&p).unwrap().len();
        assert!(read_file(&p, &name, cap).is_ok());
        let e = read_file(&p, &name, cap - 1).unwrap_err();
        assert!(matches!(e, ActivityError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains(&name), "{e}");
        // The real cap, on a sparse file one byte over it (no disk used).
        let big = d.path().join("big.json");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_ACTIVITY_BYTES + 1)
            .unwrap();
        let e = read_all(&[&big]).unwrap_err();
        assert!(matches!(e, ActivityError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains(&big.display().to_string()), "{e}");
        // A file whose size says less than it holds (a /proc file says 0; a file growing under
        // us) is caught by the read itself.
        let proc_status = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(proc_status).unwrap().len(), 0);
        let e = read_file(proc_status, "/proc/self/status", 16).unwrap_err();
        assert!(matches!(e, ActivityError::TooLarge { .. }), "{e}");
        assert!(read_file(proc_status, "/proc/self/status", MAX_ACTIVITY_BYTES).is_ok());
    }

    #[test]
    fn only_regular_files_are_read() {
        let d = temp();
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let dir = d.path().join("dir");
        std::fs::create_dir(&dir).unwrap();
        let zero = d.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let to_fifo = d.path().join("to-fifo");
        std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
        let sock = d.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let cases: &[(&Path, &str)] = &[
            (&fifo, "a FIFO"),
            (&to_fifo, "a FIFO"),
            (&dir, "a directory"),
            (&zero, "a character device"),
            (Path::new("/dev/null"), "a character device"),
            (&sock, "a socket"),
        ];
        for (p, kind) in cases {
            let t0 = std::time::Instant::now();
            let e = read_all(&[p]).unwrap_err();
            assert!(
                t0.elapsed() < Duration::from_secs(1),
                "{}: slow",
                p.display()
            );
            assert!(
                matches!(e, ActivityError::NotRegular { kind: k, .. } if k == *kind),
                "{}: {e}",
                p.display()
            );
            assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        }
        // A symlink to a regular file is fine.
        let real = d.path().join("real.json");
        std::fs::write(&real, r#"{"a": ["7"]}"#).unwrap();
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(
            read_all(&[&link]).unwrap(),
            HashSet::from(["7".to_string()])
        );
    }

    #[test]
    fn not_utf8_is_malformed() {
        let d = temp();
        let p = d.path().join("a.json");
        std::fs::write(&p, b"{\"a\": [\"\xff\"]}").unwrap();
        let e = read_all(&[&p]).unwrap_err();
        assert!(matches!(e, ActivityError::Malformed { .. }), "{e}");
    }

    #[tokio::test]
    async fn detached_reads_come_back_or_are_abandoned_and_bounded() {
        static STUCK: AtomicUsize = AtomicUsize::new(0);
        let quick = Deadline {
            stuck: &STUCK,
            max: 2,
            timeout: Duration::from_millis(50),
        };
        let ample = Deadline {
            timeout: Duration::from_secs(10),
            ..quick
        };
        // An answer in time comes back.
        let r = within(ample, "x", || Ok::<_, String>(7)).await;
        assert_eq!(r, Ok(7));
        // Reads that hang are abandoned at the deadline, up to the bound; then none is started.
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let hang = Arc::new(Mutex::new(hang));
        for _ in 0..2 {
            let h = Arc::clone(&hang);
            let e = within(quick, "/hung/a.json", move || {
                let _ = h.lock().recv();
                Ok::<_, String>(0)
            })
            .await
            .unwrap_err()
            .to_string();
            assert!(e.contains("/hung/a.json") && e.contains("within"), "{e}");
        }
        assert_eq!(STUCK.load(Ordering::SeqCst), 2);
        let started = Arc::new(AtomicUsize::new(0));
        let s = Arc::clone(&started);
        let e = within(quick, "/hung/a.json", move || {
            s.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(0)
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("still stuck") && e.contains("/hung/a.json"),
            "{e}"
        );
        assert_eq!(started.load(Ordering::SeqCst), 0);
        // The mount comes back: the stuck threads finish and reads start again.
        drop(release);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while STUCK.load(Ordering::SeqCst) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "stuck readers never counted out"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = within(ample, "x", || Ok::<_, String>(8)).await;
        assert_eq!(r, Ok(8));
    }
}
