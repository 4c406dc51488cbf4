//! What this process can see of others, and from where: its own pid and time namespaces, a reap
//! mark's owner by identity, and whether the tmux server it talks to lives in its pid namespace
//! (so that the pids tmux lists are the pids it would signal).
//!
//! A pid means something only in one pid namespace, a start time (`/proc/PID/stat` field 22,
//! counted from the boot time of the reader's time namespace) only in one time namespace: what
//! cannot be compared is reported as such ([`OwnerSeen::Unknowable`], [`ServerSight::Err`]), never
//! guessed.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use procfs::process::Process;

use crate::core::policy::{self, AtPid, Here, MarkOwner, OwnerSeen};

/// This process's pid and time namespaces. The pid namespace is 0 when /proc is not this
/// process's own (`unshare -p` without a /proc of its own shows another namespace's pids); either
/// is 0 when it cannot be read.
pub fn here() -> Here {
    let own = Process::myself()
        .and_then(|p| p.stat())
        .is_ok_and(|st| st.pid == std::process::id() as i32);
    let ino = |p: &str| std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0);
    Here {
        pidns: if own { ino("/proc/self/ns/pid") } else { 0 },
        timens: ino("/proc/self/ns/time"),
    }
}

/// What /proc shows at `pid`: its start time and time namespace, or that no (live) process is
/// there, or that /proc could not tell.
pub fn at_pid(pid: i32) -> AtPid {
    match Process::new(pid).and_then(|p| p.stat()) {
        Ok(st) if st.state == 'Z' || st.state == 'X' => AtPid::Missing,
        Ok(st) => AtPid::Present {
            start: st.starttime,
            timens: std::fs::metadata(format!("/proc/{pid}/ns/time"))
                .map(|m| m.ino())
                .ok(),
        },
        Err(procfs::ProcError::NotFound(_)) => AtPid::Missing,
        Err(_) => AtPid::Unreadable,
    }
}

/// What can be told from `here` of a reap mark's owner `o` ([`policy::owner_seen`]).
pub fn owner_seen(o: &MarkOwner, here: Here) -> OwnerSeen {
    policy::owner_seen(o, here, || at_pid(o.pid))
}

/// Whether this process sees the tmux server as it is: `Ok` when the process at the server's
/// own pid (`#{pid}`, as tmux lists it) is, in this process's /proc, a process of this process's
/// pid namespace that holds open the listening socket bound at `#{socket_path}`. Else why not:
/// then the pane pids tmux lists name other processes here (or none), and nothing may be
/// signalled on their word.
///
/// Cheap, once per sweep and batch: two stats, the server's view of the unix sockets (one read),
/// and its descriptors in order until the socket is found (the listening socket is among its
/// first).
pub fn server_check(
    server_pid: u32,
    socket_path: &str,
    here: Here,
) -> Result<(), ServerCheckError> {
    use ServerCheckError as E;
    if here.pidns == 0 {
        return Err(E::NotOurProc);
    }
    let base = format!("/proc/{server_pid}");
    let ns = std::fs::metadata(format!("{base}/ns/pid")).map(|m| m.ino());
    match ns {
        Ok(n) if n == here.pidns => {}
        Ok(_) => return Err(E::OtherNamespace { server_pid }),
        Err(source) => return Err(E::NoProcess { server_pid, source }),
    }
    let not_listening = || E::NotListening {
        server_pid,
        socket_path: socket_path.to_string(),
    };
    let inode =
        listening_inode(&format!("{base}/net/unix"), socket_path).ok_or_else(not_listening)?;
    if holds_socket(&format!("{base}/fd"), inode) {
        Ok(())
    } else {
        Err(E::NotHeld {
            server_pid,
            socket_path: socket_path.to_string(),
        })
    }
}

/// Why this process does not see the tmux server as it is ([`server_check`]).
#[derive(Debug, thiserror::Error)]
pub enum ServerCheckError {
    #[error("/proc here is not this process's own (another pid namespace's, or unreadable): the tmux server's processes cannot be seen")]
    NotOurProc,
    #[error("the process at the tmux server's pid {server_pid} lives in another pid namespace than this reaper: the tmux server's pids do not name its processes here")]
    OtherNamespace { server_pid: u32 },
    #[error("no process of this pid namespace at the tmux server's pid {server_pid} ({source}): this reaper runs in another pid namespace than the tmux server")]
    NoProcess {
        server_pid: u32,
        source: std::io::Error,
    },
    #[error("the process at the tmux server's pid {server_pid} has no listening socket at {socket_path}: it is not the tmux server (this reaper runs in another pid namespace)")]
    NotListening {
        server_pid: u32,
        socket_path: String,
    },
    #[error("the process at the tmux server's pid {server_pid} does not hold the socket {socket_path} open: it is not the tmux server (this reaper runs in another pid namespace)")]
    NotHeld {
        server_pid: u32,
        socket_path: String,
    },
}

/// Whether nothing listens at `socket_path` any more: a connection to it is refused, or its
/// file is gone. What a tmux server leaves once it has closed its socket on its way out (its
/// last session gone); a live server, in whatever pid namespace, accepts the connection (or
/// queues it), which is closed at once unused. `false` when it cannot be told (any other
/// error: a socket this process may not reach, say). Never blocks: the connect is non-blocking.
pub fn nothing_listens(socket_path: &str) -> bool {
    use rustix::io::Errno;
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let Ok(addr) = SocketAddrUnix::new(socket_path) else {
        return false;
    };
    let Ok(fd) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    ) else {
        return false;
    };
    matches!(
        rustix::net::connect(&fd, &addr),
        Err(Errno::CONNREFUSED | Errno::NOENT)
    )
}

/// The inode of the listening unix socket bound at `path`, as `net_unix` (a `/proc/PID/net/unix`)
/// lists it: `Num RefCount Protocol Flags Type St Inode Path`, the path last (it may hold
/// spaces).
fn listening_inode(net_unix: &str, path: &str) -> Option<u64> {
    const ACCEPTING: u64 = 0x10000; // __SO_ACCEPTCON
    let text = std::fs::read_to_string(net_unix).ok()?;
    text.lines().skip(1).find_map(|l| {
        // Seven fields, each followed by one space, then the path as bound.
        let mut rest = l.trim_start();
        let mut f = Vec::with_capacity(7);
        for _ in 0..7 {
            let (field, tail) = rest.split_once(' ')?;
            f.push(field);
            rest = tail.trim_start_matches(' ');
        }
        let flags = u64::from_str_radix(f[3], 16).ok()?;
        let inode: u64 = f[6].parse().ok()?;
        (flags & ACCEPTING != 0 && rest == path).then_some(inode)
    })
}

/// Whether one of the descriptors in `fd_dir` is the socket of `inode`; looked at in the order of
/// their numbers, stopping at the first.
fn holds_socket(fd_dir: &str, inode: u64) -> bool {
    let want = format!("socket:[{inode}]");
    let Ok(rd) = std::fs::read_dir(fd_dir) else {
        return false;
    };
    let mut fds: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds.into_iter().any(|n| {
        std::fs::read_link(Path::new(fd_dir).join(n.to_string()))
            .is_ok_and(|l| l.as_os_str() == want.as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_seen_alive_by_its_identity_and_a_listener_is_found() {
        let h = here();
        assert_ne!(h.pidns, 0);
        assert_ne!(h.timens, 0);
        let me = std::process::id() as i32;
        let start = Process::myself().unwrap().stat().unwrap().starttime;
        let o = MarkOwner {
            pid: me,
            start,
            pidns: h.pidns,
            timens: Some(h.timens),
            limit_ms: 1,
        };
        assert_eq!(owner_seen(&o, h), OwnerSeen::Alive);
        assert_eq!(
            owner_seen(
                &MarkOwner {
                    start: start + 1,
                    ..o
                },
                h
            ),
            OwnerSeen::Gone
        );
        // A listening socket of ours: found by its path, and held.
        let dir = std::env::temp_dir().join(format!("ccs-sight-{me}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("s with space");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let p = sock.to_str().unwrap();
        assert!(server_check(me as u32, p, h).is_ok());
        let e = server_check(me as u32, "/nonexistent/s", h)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no listening socket"), "{e}");
        // Our parent does not hold it.
        let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get());
        assert!(server_check(parent as u32, p, h).is_err());
        assert!(server_check(me as u32, p, Here { pidns: 0, ..h }).is_err());
        // Someone listens there; at a socket closed (its file left) or at none, nothing does.
        assert!(!nothing_listens(p));
        drop(_l);
        assert!(nothing_listens(p));
        assert!(nothing_listens(dir.join("none").to_str().unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
