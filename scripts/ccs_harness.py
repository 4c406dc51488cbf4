"""Shared by scripts/bench and scripts/soak: a private tmux server, the ccs-reap binary, /proc helpers.

Python 3 standard library only. Every tmux call goes to a private server on its own socket in a temp
dir (`tmux -S <dir>/s -f /dev/null`, TMUX removed from the environment); the default server is never
touched. Cleanup kills that server and only processes that carry its socket in their environment.
Waits poll a condition with a deadline.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SCRIPTS)
FAKE_CLAUDE = os.path.join(SCRIPTS, "fake-claude")
HZ = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def now_ms():
    return int(time.time() * 1000)


def wait_until(secs, pred, every=0.025):
    """Poll `pred` every `every` seconds until it holds or `secs` pass."""
    deadline = time.monotonic() + secs
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


def real_tmux():
    t = shutil.which("tmux")
    if not t:
        sys.exit("tmux is not installed")
    return os.path.realpath(t)


def clean_env(extra=None):
    """The outer environment without TMUX, TMUX_PANE and any CCS_ variable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TMUX", "TMUX_PANE") and not k.startswith("CCS_")
    }
    env.setdefault("LANG", "C.UTF-8")
    if extra:
        env.update(extra)
    return env


def reap_bin():
    """CCS_REAP_BIN, else <target>/release/ccs-reap, built with `cargo build --release` if missing."""
    b = os.environ.get("CCS_REAP_BIN")
    if b:
        if not os.access(b, os.X_OK):
            sys.exit(f"CCS_REAP_BIN={b} is not an executable")
        return os.path.abspath(b)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    b = os.path.join(target, "release", "ccs-reap")
    if not os.access(b, os.X_OK):
        log(f"building {b} (cargo build --release)")
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=REPO, check=True)
    return os.path.abspath(b)


# ---------------------------------------------------------------- /proc


def proc_stat(pid):
    """(state, utime, stime, starttime) or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s.rsplit(")", 1)[1].split()
    # rest[0] is field 3 (state); utime is field 14, stime 15, starttime 22.
    return rest[0], int(rest[11]), int(rest[12]), int(rest[19])


def alive(pid):
    """A living process (a zombie is gone)."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


_BTIME = None


def boot_time():
    global _BTIME
    if _BTIME is None:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    _BTIME = int(line.split()[1])
    return _BTIME


def start_epoch(pid):
    """When a process started, in Unix seconds (10 ms resolution), or None."""
    st = proc_stat(pid)
    return None if st is None else boot_time() + st[3] / HZ


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def status_kb(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_ticks(pid):
    """utime + stime of the process itself (children excluded), in clock ticks."""
    st = proc_stat(pid)
    return None if st is None else st[1] + st[2]


def sched_ns(pid):
    """On-CPU time of every thread of the process, in ns (/proc/<pid>/task/*/schedstat)."""
    total = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
    except OSError:
        return None
    return total


def environ_has(pid, needle):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read()
    except OSError:
        return False


def procs_with_tmux_env(sock):
    """{pid: (server pid, session number)} of our processes whose TMUX names this socket."""
    want = b"TMUX=" + sock.encode() + b","
    uid = os.getuid()
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        for kv in env.split(b"\0"):
            if kv.startswith(want):
                f = kv[len(want):].split(b",")
                try:
                    out[pid] = (int(f[0]), int(f[1]))
                except (ValueError, IndexError):
                    out[pid] = (-1, -1)
                break
    return out


# ---------------------------------------------------------------- tmux


class Server:
    """A private tmux server in a temp dir: `tmux -S <dir>/s -f /dev/null`."""

    def __init__(self, prefix="ccs-harness-", keep=False):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.sock = os.path.join(self.dir, "s")
        self.tmux_bin = real_tmux()
        self.keep = keep
        self.children = []  # Popen objects we started (daemons, viewers)
        self.env = clean_env()

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def tmux(self, *args, check=True, timeout=30):
        r = subprocess.run(
            [self.tmux_bin, "-u", "-S", self.sock, "-f", "/dev/null", *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"tmux {args!r}: {r.stderr.strip()}")
        return r

    def start(self, keeper="keeper"):
        """Start the server with a foreign session that keeps it up (a server with no session
        exits, and a new-session racing that exit can be lost with it)."""
        self.tmux("new-session", "-d", "-s", keeper, "-x", "80", "-y", "24", "sleep 100000")

    def source(self, lines):
        """Run many tmux commands in one client, from a generated file."""
        p = self.path(f"cmds-{time.monotonic_ns()}.tmux")
        with open(p, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.tmux("source-file", p, timeout=300)
        os.unlink(p)

    def session_ids(self):
        """{name: $N number}"""
        r = self.tmux("list-sessions", "-F", "#{session_name}\t#{session_id}", check=False)
        out = {}
        for line in r.stdout.splitlines():
            name, _, sid = line.partition("\t")
            if sid.startswith("$"):
                out[name] = int(sid[1:])
        return out

    def server_pid(self):
        r = self.tmux("display-message", "-p", "#{pid}", check=False)
        return int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else None

    def spawn(self, argv, **kw):
        kw.setdefault("env", self.env)
        p = subprocess.Popen(argv, **kw)
        self.children.append(p)
        return p

    def cleanup(self):
        """Kill what we started: our children, the private server, and every process that
        carries this server's socket in its environment (helpers that double-forked)."""
        for p in self.children:
            if p.poll() is None:
                try:
                    p.kill()
                except OSError:
                    pass
            try:
                p.wait(timeout=5)
            except Exception:
                pass
            for f in (p.stdin, p.stdout, p.stderr):
                try:
                    f and f.close()
                except Exception:
                    pass
        self.children.clear()
        pid = self.server_pid() if os.path.exists(self.sock) else None
        if os.path.exists(self.sock):
            try:
                self.tmux("kill-server", check=False, timeout=10)
            except Exception:
                pass
        if pid and wait_until(5, lambda: not alive(pid)) is False:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in procs_with_tmux_env(self.sock):
            if pid > 1 and pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def reap_env(server, state_dir, extra=None, path_prefix=None):
    env = clean_env(
        {
            "CCS_TMUX_SOCKET_PATH": server.sock,
            "CCS_REAP_STATE_DIR": state_dir,
            "CCS_LOG": "info",
        }
    )
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env.get("PATH", "")
    if extra:
        env.update(extra)
    return env


def counting_wrapper(dirpath, real, logfile):
    """A `tmux` on PATH that appends one line per invocation to `logfile`, then execs the real
    one. Used only for counting runs: its own fork+exec would distort timings. The version check
    every ccs-reap process makes once at start-up (`tmux -V`) is not counted: the counts are of
    the work a sweep does."""
    os.makedirs(dirpath, exist_ok=True)
    w = os.path.join(dirpath, "tmux")
    with open(w, "w") as f:
        # One line a call, whatever newlines the arguments hold (the listing formats do).
        f.write(f'#!/bin/sh\n[ "$*" = -V ] || printf \'%s\\n\' "$(printf \'%s\' "$*" | tr \'\\n\' \' \')" >>{sh_quote(logfile)}\nexec {sh_quote(real)} "$@"\n')
    os.chmod(w, 0o755)
    return dirpath


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def count_lines(p):
    try:
        with open(p, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def tmux_formats(binp):
    """The -F formats of the sweep's one tmux call, from the binary itself (`ccs-reap formats`),
    so the floor measured is the call the binary makes."""
    r = subprocess.run([binp, "formats"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        sys.exit(f"{binp} formats failed: {r.stderr.strip()}")
    return json.loads(r.stdout), f"{binp} formats"


def machine():
    def first(path, key):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith(key):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    def cmd(*a):
        try:
            return subprocess.run(a, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            return "?"

    mem = first("/proc/meminfo", "MemTotal")
    osname = "?"
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {
        "cpu": first("/proc/cpuinfo", "model name"),
        "cpus": os.cpu_count(),
        "mem": mem,
        "kernel": os.uname().release,
        "os": osname,
        "tmux": cmd(real_tmux(), "-V"),
        "python": sys.version.split()[0],
    }
