//! Starting a tmux client: the one place a tmux process runs, with its words on the command
//! line ([`Tmux::run`]) or as a script on its stdin ([`Tmux::run_script`]), and what its answer
//! means.

use std::borrow::Cow;
use std::process::Stdio;

use tmux_interface::TmuxCommand;

use super::{Socket, Tmux, TmuxError};

impl Tmux {
    pub(super) fn socket_desc(&self) -> String {
        match &self.socket {
            Socket::Name(n) => format!("socket name {n:?}"),
            Socket::Path(p) => format!("socket {}", p.display()),
        }
    }

    /// The one place a tmux process is started: `args` as given, no `TMUX` inherited, no stdin,
    /// killed when the timeout runs out. `what` names the call in errors.
    pub(crate) async fn exec<'a>(
        &self,
        args: impl IntoIterator<Item = &'a str>,
        what: String,
    ) -> Result<std::process::Output, TmuxError> {
        self.exec_with(args, None, what).await
    }

    /// [`Tmux::exec`], with `input` (if any) written to the client's stdin and then closed, while
    /// its output is read; the timeout covers both.
    async fn exec_with<'a>(
        &self,
        args: impl IntoIterator<Item = &'a str>,
        input: Option<Vec<u8>>,
        what: String,
    ) -> Result<std::process::Output, TmuxError> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .env_remove("TMUX")
            .env_remove("TMUX_PANE")
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let run = async {
            let mut child = cmd.spawn()?;
            if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
                use tokio::io::AsyncWriteExt;
                let (written, out) = tokio::join!(
                    async move {
                        stdin.write_all(&data).await?;
                        stdin.shutdown().await
                    },
                    child.wait_with_output()
                );
                let out = out?;
                // A client that exited before reading it all (no server) says why itself.
                if out.status.success() {
                    written?;
                }
                return Ok(out);
            }
            child.wait_with_output().await
        };
        match tokio::time::timeout(self.timeout, run).await {
            Err(_) => Err(TmuxError::Timeout(self.timeout, what)),
            Ok(Err(e)) => Err(TmuxError::Spawn(what, e)),
            Ok(Ok(o)) => Ok(o),
        }
    }

    /// `-u` and the socket: the words every call starts with.
    fn base_args(&self) -> Vec<Cow<'_, str>> {
        let mut args: Vec<Cow<'_, str>> = vec!["-u".into()];
        match &self.socket {
            Socket::Name(n) => args.extend(["-L".into(), Cow::Borrowed(n.as_str())]),
            Socket::Path(p) => args.extend(["-S".into(), p.to_string_lossy()]),
        }
        args
    }

    /// Run a chain of commands in ONE tmux process. Returns stdout.
    pub async fn run(&self, cmds: &[TmuxCommand<'_>]) -> Result<String, TmuxError> {
        let mut args = self.base_args();
        for (i, c) in cmds.iter().enumerate() {
            if i > 0 {
                args.push(";".into());
            }
            args.extend(c.to_vec());
        }
        let what = cmds
            .iter()
            .filter_map(|c| c.name.as_deref())
            .collect::<Vec<_>>()
            .join(" ; ");
        let out = self
            .exec(args.iter().map(|a| a.as_ref()), what.clone())
            .await?;
        self.answer(out, what)
    }

    /// Run `lines` ([`script::line`]) in ONE tmux process, as a script on its stdin
    /// (`source-file -`). Returns stdout.
    pub(super) async fn run_script(
        &self,
        lines: &[String],
        what: String,
    ) -> Result<String, TmuxError> {
        let mut args = self.base_args();
        args.extend(["source-file".into(), "-".into()]);
        let mut text = lines.join("\n");
        text.push('\n');
        let out = self
            .exec_with(
                args.iter().map(|a| a.as_ref()),
                Some(text.into_bytes()),
                what.clone(),
            )
            .await?;
        self.answer(out, what)
    }

    /// A tmux call's stdout, or what went wrong.
    fn answer(&self, out: std::process::Output, what: String) -> Result<String, TmuxError> {
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        // "server exited unexpectedly": we reached a server that was exiting (its last session
        // had just gone); by the time we read this it is not running.
        if stderr.contains("no server running")
            || stderr.contains("server exited unexpectedly")
            || (stderr.contains("error connecting to")
                && (stderr.contains("No such file or directory")
                    || stderr.contains("Connection refused")))
        {
            return Err(TmuxError::NoServer(self.socket_desc()));
        }
        Err(TmuxError::Failed { cmd: what, stderr })
    }
}
