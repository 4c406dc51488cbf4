//! Every command line of the shell blocks (```sh, ```bash) of README.md, docs/*.md, the npm README
//! and contrib's READMEs, and of the systemd units' install headers, run as written (issue 45,
//! done-when): [`plan`] says for each block how it is walked, and a block the plan does not know,
//! or one whose lines changed, fails the test.
//!
//! The sandbox ([`Sandbox`]): a private tmux server (`-S <tmp>/s`, the studio's socket, given to
//! every command as the studio's setting `CCS_TMUX_SOCKET_PATH`; `TMUX_TMPDIR` private too, so
//! even a `-L` name never reaches a shared server), a temporary `HOME` with the XDG dirs under it,
//! `ccs-reap` on `PATH` as the binary under test (and as `target/release/ccs-reap` in the working
//! directory, a stand-in tree), `claude` as `scripts/fake-claude`, no `CCS_*` of the test's own.
//!
//! Lines that cannot run here ([`How::Elsewhere`]) each say why and where they are checked by the
//! closest real means (scripts/check-npm, check-deb, check-docker, .ci/run, another test).

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// How a block is walked.
enum How {
    /// Each command line in one `sh`, in order, with the exit code it must have, then a check of
    /// what they made. Its lines as written, trailing comments left out: a changed block fails
    /// until it is walked again.
    Lines(&'static [(&'static str, Exp)], Option<fn(&Sandbox)>),
    /// The block as written, whole, as one `sh` script between `prelude` and `epilogue` (`$BLOCK`
    /// names a file holding the block); it must exit `want` with `out` in its output.
    Script {
        prelude: &'static str,
        epilogue: &'static str,
        want: i32,
        out: &'static str,
        /// Done while the script runs (a block that runs until stopped).
        during: Option<fn(&Sandbox)>,
    },
    /// Not run here: each line with the reason and the closest real check.
    Elsewhere(&'static [(&'static str, &'static str)]),
}

#[derive(Clone, Copy)]
enum Exp {
    /// Exits with this code.
    Code(i32),
    /// The daemon: up (its start line), then SIGTERM ends it with 0.
    Daemon,
    /// Not run here, with the reason and the closest real check (read by whoever reads the plan).
    Skip(#[expect(dead_code)] &'static str),
}

/// A shell block: its file (relative to the tree), the line its fence opens on, its lines.
struct Block {
    file: String,
    at: usize,
    text: String,
    /// Command lines: blank and comment-only lines left out, trailing comments cut.
    commands: Vec<String>,
}

/// `text` without a trailing ` # comment`.
fn uncommented(l: &str) -> String {
    let t = l.trim();
    if t.starts_with('#') {
        return String::new();
    }
    t.split(" # ").next().unwrap_or("").trim_end().to_string()
}

fn blocks() -> Vec<Block> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![
        "README.md".to_string(),
        "npm/ccs-reap/README.md".to_string(),
    ];
    for dir in [
        "docs",
        "contrib/docker",
        "contrib/systemd",
        "contrib/debian",
        "contrib/prometheus",
    ] {
        let mut more: Vec<String> = std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md"))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        more.sort();
        files.extend(more);
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(format!("{root}/{f}")).unwrap();
        // Inside a fence: Some(shell block being read, or None for another language).
        let mut inside: Option<Option<Block>> = None;
        let mut indent = 0;
        for (i, l) in text.lines().enumerate() {
            let t = l.trim();
            if t.starts_with("```") {
                match inside.take() {
                    Some(b) => out.extend(b),
                    None => {
                        indent = l.len() - l.trim_start().len();
                        inside = Some((t == "```sh" || t == "```bash").then(|| Block {
                            file: f.clone(),
                            at: i + 1,
                            text: String::new(),
                            commands: Vec::new(),
                        }));
                    }
                }
                continue;
            }
            if let Some(Some(b)) = inside.as_mut() {
                // As a reader copies it: the list item's indentation left out.
                let cut = l.len() - l.trim_start().len();
                b.text.push_str(&l[cut.min(indent)..]);
                b.text.push('\n');
                let c = uncommented(l);
                if !c.is_empty() {
                    b.commands.push(c);
                }
            }
        }
    }
    // The units' headers: how to install them, `#   <line>` each.
    for u in ["ccs-reap.service", "ccs-reap@.service"] {
        let f = format!("contrib/systemd/{u}");
        let text = std::fs::read_to_string(format!("{root}/{f}")).unwrap();
        let mut b = Block {
            file: f.clone(),
            at: 0,
            text: String::new(),
            commands: Vec::new(),
        };
        for (i, l) in text.lines().enumerate() {
            let Some(line) = l.strip_prefix("#   ") else {
                if b.at > 0 {
                    break;
                }
                continue;
            };
            if b.at == 0 {
                b.at = i + 1;
            }
            b.text.push_str(line);
            b.text.push('\n');
            let c = uncommented(line);
            if !c.is_empty() {
                b.commands.push(c);
            }
        }
        out.push(b);
    }
    out
}

const CI: &str = ".ci/run runs it as written";
const NO_DOCKER: &str = "no Docker engine here (the docker CLI without a daemon, no Compose v2): \
scripts/check-docker has Compose read compose.yaml (docker-compose config -q), checks the \
Dockerfiles and runs the same shape (the stand-in studio, doctor as the healthcheck, in the \
studio's pid namespace and in another); tests/it/sidecar.rs the namespaces";
const PLAIN: &str = "walked as written by operator::the_readmes_plain_tmux_lines_learn_reap_and_\
resume_a_chat_on_the_users_own_tmux, in a window of a private tmux (inside the user's tmux is \
its point)";
const NPM: &str = "needs the static release binary and npm: scripts/check-npm runs the README's \
block as written, in a scratch studio project";
const NO_SYSTEMD: &str = "needs systemd as PID 1 (not here): scripts/check-deb verifies the \
installed units (systemd-analyze verify ccs-reap@USER.service), runs the instance's ExecStart as \
systemd would for a scratch user (READY=1, STATUS= why, up until SIGTERM) and the maintainer \
scripts' systemctl calls";

/// An idle chat reaped by the daemon with JSON logs into reaper.log (configuration.md's query).
const REAPER_LOG: &str = r#"
ccs-reap spawn old --cid 0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5 -- claude > /dev/null || exit 9
tmux -S "$CCS_TMUX_SOCKET_PATH" set-option -t =ccs-old: @ccs_idle $(( $(date +%s%3N) - 7200000 ))
CCS_ENGINE_IDLE_KILL_MS=30m CCS_REAP_INTERVAL_MS=100 CCS_LOG_FORMAT=json ccs-reap 2> reaper.log &
d=$!
i=0
until grep -q '"message":"reaped"' reaper.log || [ $i -ge 400 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM $d; wait $d || exit 8
"#;

/// Settings lines: taken by the shell (exported), and by ccs-reap's reader as the settings file
/// they are meant for (`$BLOCK`: the block as written), with nothing else set.
const SETTINGS: &str = "ccs-reap config && \
    env -i PATH=\"$PATH\" HOME=\"$HOME\" ccs-reap --config \"$BLOCK\" config";

/// Every block, by its file and its first command line.
fn plan() -> Vec<(&'static str, &'static str, How)> {
    use Exp::*;
    use How::*;
    let config = |out| Script {
        prelude: "set -a",
        epilogue: SETTINGS,
        want: 0,
        out,
        during: None,
    };
    vec![
        ("README.md", "scripts/demo", Elsewhere(&[
            ("scripts/demo", ".ci/run runs it as written (it runs cargo build, which cargo test cannot run within)"),
            ("scripts/test", ".ci/run runs it as written: it is this suite"),
        ])),
        ("README.md", "cargo build --release", Lines(&[
            ("cargo build --release", Skip(".ci/run builds it; here target/release/ccs-reap is the binary under test")),
            ("export CCS_ENGINE_IDLE_KILL_MS=1800000", Code(0)),
            ("target/release/ccs-reap", Daemon),
            ("target/release/ccs-reap --once", Code(0)),
            ("target/release/ccs-reap status", Code(0)),
        ], None)),
        ("README.md", "scripts/package-npm", Elsewhere(&[
            ("scripts/package-npm", NPM),
            ("cd ~/studio && npm install \"$OLDPWD\"/target/npm/local/*.tgz", NPM),
            ("npx ccs-reap --version", NPM),
            ("npx ccs-reap claude-settings --write .claude/settings.json", NPM),
        ])),
        ("README.md", "sudo apt install ./ccs-reap_0.3.0-1_amd64.deb", Elsewhere(&[
            ("sudo apt install ./ccs-reap_0.3.0-1_amd64.deb", "scripts/check-deb runs it (as root, without sudo, which is not installed here) in the .deb's directory"),
            ("sudoedit /etc/ccs-reap/env", "an editor, interactive: scripts/check-deb checks the conffile names every setting, commented, and that an instance reads its settings file"),
            ("sudo systemctl enable --now ccs-reap@studio", NO_SYSTEMD),
        ])),
        ("README.md", "ccs-reap claude-settings --write ~/.claude/settings.json", Elsewhere(&[
            ("ccs-reap claude-settings --write ~/.claude/settings.json", PLAIN),
            ("ccs-reap spawn work -- claude", PLAIN),
            ("ccs-reap status", PLAIN),
            ("ccs-reap resume work", PLAIN),
        ])),
        ("README.md", "mkdir -p ~/.local/share/man/man1 ~/.local/share/bash-completion/completions ~/.zfunc ~/.config/fish/completions", Lines(&[
            ("mkdir -p ~/.local/share/man/man1 ~/.local/share/bash-completion/completions ~/.zfunc ~/.config/fish/completions", Code(0)),
            ("ccs-reap man --dir ~/.local/share/man/man1", Code(0)),
            ("ccs-reap completions bash > ~/.local/share/bash-completion/completions/ccs-reap", Code(0)),
            ("ccs-reap completions zsh  > ~/.zfunc/_ccs-reap", Code(0)),
            ("ccs-reap completions fish > ~/.config/fish/completions/ccs-reap.fish", Code(0)),
        ], Some(man_and_completions_there))),
        ("README.md", "ccs-reap turn begin \"$ID\"", Script {
            prelude: "ID=docs",
            epilogue: "ccs-reap status",
            want: 0,
            out: "ccs-docs",
            during: None,
        }),
        ("README.md", "scripts/test", Elsewhere(&[
            ("scripts/test", CI),
            ("scripts/tmux-matrix", ".ci/run runs it on the same versions (--no-system 3.1c 3.5a: the system's tmux ran just before)"),
            ("scripts/model-check", CI),
            ("cargo test --lib", "a part of scripts/test, which .ci/run runs"),
            ("cargo test --test model", "a part of scripts/test, which .ci/run runs"),
            ("cargo test --test it teardown::", "a part of scripts/test, which .ci/run runs"),
            ("cargo test --features e2e --test it claude_e2e::", "a part of scripts/test, which .ci/run runs"),
            ("cargo clippy --all-targets -- -D warnings && cargo fmt --check", ".ci/run runs both (with --locked, and fmt --all)"),
            ("sudo scripts/check-packages", ".ci/run runs it (as root: no sudo)"),
        ])),
        ("docs/activity-files.md", "CCS_ACTIVITY_FILES=/var/lib/studio/activity.json,/var/lib/studio/kanban.json",
            config("CCS_ACTIVITY_FILES=/var/lib/studio/activity.json,/var/lib/studio/kanban.json")),
        ("docs/claude-hooks.md", "ccs-reap claude-settings", Lines(&[
            ("ccs-reap claude-settings", Code(0)),
            ("ccs-reap claude-settings --write ~/.claude/settings.json", Code(0)),
            ("ccs-reap claude-settings --write .claude/settings.json", Code(0)),
            ("ccs-reap claude-settings --write hooks.json && claude --settings hooks.json", Code(0)),
        ], Some(settings_written))),
        ("docs/claude-hooks.md", "ccs-reap claude-settings --write ~/.claude/settings.json", Elsewhere(&[
            ("ccs-reap claude-settings --write ~/.claude/settings.json", PLAIN),
            ("ccs-reap spawn work -- claude", PLAIN),
            ("ccs-reap resume work", PLAIN),
        ])),
        ("docs/commands.md", "ccs-reap events | while read -r ev; do notify_ui \"$ev\"; done", Script {
            prelude: "notify_ui() { printf '%s\\n' \"$1\" >> \"$HOME/ui\"; }",
            epilogue: "",
            want: 0,
            out: "",
            during: Some(events_reach_the_ui),
        }),
        ("docs/commands.md", "send_message() {", Script {
            prelude: "deliver() { printf '%s\\n' \"$2\" >> \"$HOME/delivered.$1\"; }",
            epilogue: "send_message web hello && send_message web again && cat \"$HOME/delivered.web\" && ccs-reap status",
            want: 0,
            out: "hello\nagain\n",
            during: None,
        }),
        ("docs/configuration.md", "jq -c 'select(.fields.message == \"reaped\" and .fields.idle_ms > 3600000)' < reaper.log", Script {
            prelude: REAPER_LOG,
            epilogue: "",
            want: 0,
            out: "\"session\":\"ccs-old\"",
            during: None,
        }),
        ("docs/configuration.md", "journalctl --user -u ccs-reap -p warning", Elsewhere(&[
            ("journalctl --user -u ccs-reap -p warning", "no systemd user manager nor journal here (PID 1 is not systemd): cli::json_logs_carry_typed_values_and_journald_priorities checks the <N> prefix journald takes as each line's priority"),
        ])),
        ("docs/docker.md", "CCS_ENGINE_IDLE_KILL_MS=3600000", config("CCS_ENGINE_MAX_IDLE=4")),
        ("docs/docker.md", "docker build -f contrib/docker/Dockerfile -t ccs-reap:0.3.0 .", Elsewhere(&[
            ("docker build -f contrib/docker/Dockerfile -t ccs-reap:0.3.0 .", NO_DOCKER),
            ("docker build -f contrib/docker/studio.Dockerfile -t my-studio contrib/docker", NO_DOCKER),
            ("docker compose -f contrib/docker/compose.yaml up -d", NO_DOCKER),
            ("docker compose -f contrib/docker/compose.yaml exec reaper ccs-reap status", NO_DOCKER),
            ("curl -s http://127.0.0.1:9464/healthz", "needs the compose project up: prometheus::* fetch /healthz and /metrics of a daemon here"),
        ])),
        ("docs/performance.md", "cargo build --release && scripts/bench", Elsewhere(&[
            ("cargo build --release && scripts/bench", "the benchmarks take minutes: .ci/run runs scripts/bench --quick after cargo build --release"),
            ("scripts/bench-mass", ".ci/run runs scripts/bench-mass --quick"),
            ("scripts/bench-tmux-marks [--perf] [N]", "a synopsis: .ci/run runs scripts/bench-tmux-marks 100"),
            ("scripts/soak", ".ci/run runs scripts/soak --quick"),
        ])),
        ("contrib/systemd/ccs-reap.service", "cargo install --path . --locked", Lines(&[
            ("cargo install --path . --locked", Skip("a release build of minutes: .ci/run makes the same build; ~/.cargo/bin/ccs-reap is the binary under test")),
            ("mkdir -p ~/.local/share/man/man1 && ccs-reap man --dir ~/.local/share/man/man1", Code(0)),
            ("install -Dm644 contrib/systemd/ccs-reap.service ~/.config/systemd/user/ccs-reap.service", Code(0)),
            ("install -Dm600 .env.example ~/.config/ccs-reap/env", Code(0)),
            ("systemctl --user daemon-reload && systemctl --user enable --now ccs-reap", Skip("needs a systemd user manager (not here): the walk's check runs systemd-analyze --user verify on the installed unit")),
            ("loginctl enable-linger \"$USER\"", Skip("needs systemd-logind (not here)")),
        ], Some(user_unit_verifies))),
        ("contrib/systemd/ccs-reap@.service", "install -Dm755 target/release/ccs-reap /usr/local/bin/ccs-reap", Elsewhere(&[
            ("install -Dm755 target/release/ccs-reap /usr/local/bin/ccs-reap", "writes the machine's /usr/local: scripts/check-deb installs the package's binary, as root"),
            ("mkdir -p /usr/local/share/man/man1 && ccs-reap man --dir /usr/local/share/man/man1", "writes the machine's /usr/local: the user unit's walk runs the same into ~/.local/share/man; check-deb runs man -w ccs-reap"),
            ("install -Dm644 contrib/systemd/ccs-reap@.service /etc/systemd/system/ccs-reap@.service", "writes the machine's /etc: check-deb verifies the installed template as an instance"),
            ("install -Dm644 .env.example /etc/ccs-reap/env", "writes the machine's /etc: the user unit's walk installs .env.example as a settings file and reads it; check-deb the package's conffile"),
            ("systemctl daemon-reload && systemctl enable --now ccs-reap@NAME", NO_SYSTEMD),
        ])),
        ("npm/ccs-reap/README.md", "npm install ccs-reap", Elsewhere(&[
            ("npm install ccs-reap", "not in the npm registry until a release (E404, as its comment says): scripts/release-npm --dry-run, run by check-packages, runs the release's npm publish --dry-run"),
            ("npx ccs-reap --version", "scripts/check-npm runs it with the tarballs installed"),
            ("npx ccs-reap claude-settings --write .claude/settings.json", "scripts/check-npm runs it with the tarballs installed"),
        ])),
    ]
}

/// A private world for one block (the module's doc says what it holds).
struct Sandbox {
    s: Server,
    home: PathBuf,
    tree: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let s = Server::new();
        let (home, bin, tree) = (s.path("home"), s.path("bin"), s.path("tree"));
        for d in [&home, &bin, &tree.join("target/release"), &s.path("tt")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(BIN, bin.join("ccs-reap")).unwrap();
        std::os::unix::fs::symlink(BIN, tree.join("target/release/ccs-reap")).unwrap();
        std::os::unix::fs::symlink(fake_claude(), bin.join("claude")).unwrap();
        // The tmux of the test's PATH (the one that runs the studio's server below: the tmux
        // matrix puts another version first), not /usr/bin's: a client of another version may
        // not understand the server, and hangs.
        std::os::unix::fs::symlink(crate::common::wrapper::real_tmux(), bin.join("tmux")).unwrap();
        // What the units' headers install from the tree.
        let root = env!("CARGO_MANIFEST_DIR");
        for f in ["contrib", ".env.example"] {
            std::os::unix::fs::symlink(format!("{root}/{f}"), tree.join(f)).unwrap();
        }
        // The studio's tmux server, up.
        s.session("keeper", "sleep 100000");
        Sandbox { s, home, tree }
    }

    /// `sh` running `script` in the stand-in tree, in the sandbox's environment alone.
    fn sh(&self, script: &str) -> Command {
        let h = |p: &str| path_str(&self.home.join(p));
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(script)
            .current_dir(&self.tree)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", path_str(&self.s.path("bin"))),
            )
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", h(".config"))
            .env("XDG_STATE_HOME", h(".local/state"))
            .env("XDG_DATA_HOME", h(".local/share"))
            .env("XDG_CACHE_HOME", h(".cache"))
            .env("CLAUDE_CONFIG_DIR", h(".claude"))
            .env("TMUX_TMPDIR", self.s.path("tt"))
            .env("CCS_TMUX_SOCKET_PATH", &self.s.sock)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null());
        c
    }

    /// Run `script` with its output into `out`: the child, not waited for.
    fn start(&self, script: &str, out: &Path) -> Child {
        let f = std::fs::File::create(out).unwrap();
        self.sh(script)
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap()
    }

    /// Wait up to `secs` for `c` to end: its exit code (-1 killed by a signal).
    fn wait(c: &mut Child, secs: f64, what: &str, out: &Path) -> i32 {
        let mut code = None;
        let ended = wait_until(secs, || {
            code = c.try_wait().unwrap().map(|st| st.code().unwrap_or(-1));
            code.is_some()
        });
        if !ended {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(ended, "{what}: did not end in {secs} s:\n{}", read(out));
        code.unwrap_or(-1)
    }

    /// `ccs-reap` processes of this sandbox whose command line holds `word`.
    fn procs(&self, word: &str) -> Vec<i32> {
        procs_with(&["ccs-reap", word])
            .into_iter()
            .filter(|&p| cmdline(p).starts_with(&format!("ccs-reap {word}")))
            .filter(|&p| environ_has(p, &path_str(&self.home)))
            .collect()
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// A `Lines` block: each line, its exit code recorded; the daemon stopped once it is up.
fn walk_lines(sb: &Sandbox, b: &Block, lines: &[(&str, Exp)]) {
    let (rcs, pid, out) = (sb.s.path("rcs"), sb.s.path("daemon.pid"), sb.s.path("out"));
    let mut script = String::new();
    let mut want = Vec::new();
    for (l, e) in lines {
        match e {
            Exp::Skip(_) => continue,
            Exp::Code(c) => {
                script.push_str(&format!("{l}\n"));
                want.push(*c);
            }
            Exp::Daemon => {
                script.push_str(&format!("{l} &\necho $! > '{}'\nwait $!\n", path_str(&pid)));
                want.push(0);
            }
        }
        script.push_str(&format!("echo $? >> '{}'\n", path_str(&rcs)));
    }
    let mut c = sb.start(&script, &out);
    if lines.iter().any(|(_, e)| matches!(e, Exp::Daemon)) {
        assert!(
            wait_until(20.0, || read(&out).contains("ccs-reap started")
                && read(&pid).trim().parse::<i32>().is_ok()),
            "{}:{}: the daemon did not start:\n{}",
            b.file,
            b.at,
            read(&out)
        );
        let p: i32 = read(&pid).trim().parse().unwrap();
        signal(p, Signal::TERM).unwrap();
    }
    Sandbox::wait(&mut c, 60.0, &format!("{}:{}", b.file, b.at), &out);
    let got: Vec<i32> = read(&rcs)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(
        got,
        want,
        "{}:{}: exit codes of\n{script}\n{}",
        b.file,
        b.at,
        read(&out)
    );
    no_panic(&Out {
        code: 0,
        stdout: String::new(),
        stderr: read(&out),
    });
}

/// A `Script` block: prelude, the block as written, epilogue.
fn walk_script(sb: &Sandbox, b: &Block, how: &How) {
    let How::Script {
        prelude,
        epilogue,
        want,
        out: has,
        during,
    } = how
    else {
        unreachable!()
    };
    let out = sb.s.path("out");
    let block = sb.s.path("block");
    std::fs::write(&block, &b.text).unwrap();
    let script = format!(
        "BLOCK='{}'\n{prelude}\n{}\n{epilogue}\n",
        path_str(&block),
        b.text
    );
    let mut c = sb.start(&script, &out);
    if let Some(f) = during {
        f(sb);
    }
    let code = Sandbox::wait(&mut c, 60.0, &format!("{}:{}", b.file, b.at), &out);
    let o = read(&out);
    assert_eq!(code, *want, "{}:{}: exit of\n{script}\n{o}", b.file, b.at);
    assert!(
        o.contains(has),
        "{}:{}: no {has:?} in the output of\n{script}\n{o}",
        b.file,
        b.at
    );
    no_panic(&Out {
        code,
        stdout: String::new(),
        stderr: o,
    });
}

fn man_and_completions_there(sb: &Sandbox) {
    for f in [
        ".local/share/man/man1/ccs-reap.1",
        ".local/share/man/man1/ccs-reap-status.1",
        ".local/share/bash-completion/completions/ccs-reap",
        ".zfunc/_ccs-reap",
        ".config/fish/completions/ccs-reap.fish",
    ] {
        let text = read(&sb.home.join(f));
        assert!(
            text.contains("ccs-reap") && text.len() > 500,
            "~/{f}: {text}"
        );
    }
}

/// The user unit as installed, with the binary where `cargo install` puts it: its settings file
/// read, and `systemd-analyze --user verify` silent (its man page found, as the README says).
fn user_unit_verifies(sb: &Sandbox) {
    let cargo_bin = sb.home.join(".cargo/bin");
    std::fs::create_dir_all(&cargo_bin).unwrap();
    std::os::unix::fs::symlink(BIN, cargo_bin.join("ccs-reap")).unwrap();
    let run = sb.s.path("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let o = sb
        .sh("ccs-reap config && MANPATH=\"$HOME/.local/share/man:\" systemd-analyze --user verify ~/.config/systemd/user/ccs-reap.service")
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success() && err.trim().is_empty(),
        "the user unit as its header installs it: {}\n{out}{err}",
        o.status
    );
    let file = path_str(&sb.home.join(".config/ccs-reap/env"));
    assert!(out.contains(&format!("# settings file: {file}")), "{out}");
}

fn settings_written(sb: &Sandbox) {
    for f in [
        sb.home.join(".claude/settings.json"),
        sb.tree.join(".claude/settings.json"),
        sb.tree.join("hooks.json"),
    ] {
        let j: serde_json::Value = serde_json::from_str(&read(&f)).unwrap_or_default();
        assert!(
            j["hooks"]["SessionStart"].is_array(),
            "{}: {j}",
            f.display()
        );
    }
}

/// `ccs-reap events` feeds `notify_ui` an audit line (a chat reaped by hand), then stops at
/// SIGTERM: the pipeline ends, exit 0.
fn events_reach_the_ui(sb: &Sandbox) {
    let ui = sb.home.join("ui");
    assert!(
        wait_until(20.0, || !sb.procs("events").is_empty()),
        "events did not start"
    );
    // It reads from the end: reap again until a line gets through (the first may precede it).
    for n in 0..3 {
        let o = sb
            .sh(&format!(
                "ccs-reap spawn ev{n} --cid 0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4e{n} -- claude && ccs-reap reap ev{n} --force"
            ))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        if wait_until(3.0, || read(&ui).contains("\"reaped\"")) {
            break;
        }
    }
    assert!(
        read(&ui).contains("ccs-ev"),
        "notify_ui got no audit line: {}",
        read(&ui)
    );
    for p in sb.procs("events") {
        signal(p, Signal::TERM).unwrap();
    }
}

#[test]
fn every_documented_shell_block_is_walked_or_says_why_not() {
    let plan = plan();
    let blocks = blocks();
    let mut bad = Vec::new();
    for b in &blocks {
        let Some((_, _, how)) = plan
            .iter()
            .find(|(f, first, _)| *f == b.file && b.commands.first().is_some_and(|c| c == first))
        else {
            bad.push(format!(
                "{}:{}: a block the plan does not walk: {:?}",
                b.file, b.at, b.commands
            ));
            continue;
        };
        let listed: Vec<&str> = match how {
            How::Lines(l, _) => l.iter().map(|x| x.0).collect(),
            How::Elsewhere(l) => l.iter().map(|x| x.0).collect(),
            How::Script { .. } => continue,
        };
        if listed != b.commands {
            bad.push(format!(
                "{}:{}: its lines changed, walk them: {:?}",
                b.file, b.at, b.commands
            ));
        }
    }
    for (f, first, _) in &plan {
        if !blocks
            .iter()
            .any(|b| b.file == *f && b.commands.first().is_some_and(|c| c == first))
        {
            bad.push(format!("{f}: the plan walks a block that is gone: {first}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The plain-tmux block of claude-hooks.md is the README's, which that test walks.
    let plain = |f: &str| {
        blocks
            .iter()
            .find(|b| {
                b.file == f
                    && b.commands
                        .iter()
                        .any(|c| c == "ccs-reap spawn work -- claude")
            })
            .map(|b| {
                b.commands
                    .iter()
                    .filter(|c| *c != "ccs-reap status")
                    .cloned()
                    .collect::<Vec<_>>()
            })
    };
    assert_eq!(plain("README.md"), plain("docs/claude-hooks.md"));
}

#[test]
fn documented_command_lines_run_as_written() {
    assert!(
        crate::common::wrapper::which("jq").is_some(),
        "jq is missing: configuration.md's query runs it (scripts/deps test installs it)"
    );
    assert!(
        crate::common::wrapper::which("systemd-analyze").is_some(),
        "systemd-analyze is missing: the user unit's walk verifies it (scripts/deps test installs it)"
    );
    let mut ran = 0;
    for b in blocks() {
        let plan = plan();
        let Some((_, _, how)) = plan
            .into_iter()
            .find(|(f, first, _)| *f == b.file && b.commands.first().is_some_and(|c| c == first))
        else {
            continue; // said by the test above
        };
        let sb = Sandbox::new();
        match &how {
            How::Lines(lines, check) => {
                walk_lines(&sb, &b, lines);
                if let Some(f) = check {
                    f(&sb);
                }
            }
            How::Script { .. } => walk_script(&sb, &b, &how),
            How::Elsewhere(_) => continue,
        }
        ran += 1;
    }
    assert!(ran >= 9, "only {ran} blocks ran");
}
