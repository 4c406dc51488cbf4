//! Ids and stamps as others write them: chat ids, conversation ids (never a flag), Unix-ms
//! stamps, and the conversation id a `claude` command line names.

use super::TmuxId;

/// Serde for a [`TmuxId`] written as its bare number, as journals, `known.json` and
/// `status --json` have always written it (an audit line writes `"$N"`).
pub mod as_number {
    use super::TmuxId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &TmuxId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(id.get())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TmuxId, D::Error> {
        u32::deserialize(d).map(TmuxId)
    }
}

/// [`as_number`] for an optional [`TmuxId`] (`null` when absent).
pub mod as_number_opt {
    use super::TmuxId;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &Option<TmuxId>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => s.serialize_some(&id.get()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TmuxId>, D::Error> {
        Option::<u32>::deserialize(d).map(|n| n.map(TmuxId))
    }
}

/// The socket path in `TMUX` (`<socket>,<server pid>,<session>`): everything before the last two
/// commas, so a socket path with a comma in it is read whole.
pub fn socket_of_tmux_env(tmux: &str) -> Option<&str> {
    let mut it = tmux.rsplitn(3, ',');
    let _session = it.next()?;
    let _pid = it.next()?;
    it.next().filter(|p| !p.is_empty())
}

/// Parse a Unix-ms stamp. `None` for empty or garbage.
pub fn parse_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let digits = s.split(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
    if digits.is_empty() || digits.len() != s.len() {
        return None;
    }
    digits.parse().ok().filter(|&n: &i64| n > 0)
}

/// The conversation id a `claude` command line names: `--resume X`, `--resume=X`,
/// `--session-id X`, `--session-id=X`, `-r X`, after the word that starts claude (a basename
/// `claude` or `*-claude`, or a path through `claude-code`, as `node .../claude-code/cli.js`).
/// Arguments are split on white space, so an argument that holds a whole shell command
/// (`sh -c 'exec claude --resume X'`, or tmux's `pane_start_command`) is read too. Any other
/// program's flags (`node -r esm`) are never taken for a conversation id.
pub fn cid_from_argv<S: AsRef<str>>(argv: &[S]) -> Option<String> {
    let unquote = |s: &str| s.trim_matches(|c| c == '\'' || c == '"').to_string();
    let mut words: Vec<String> = Vec::new();
    for a in argv {
        words.extend(a.as_ref().split_whitespace().map(unquote));
    }
    let start = words.iter().position(|w| is_claude_word(w))?;
    let words = &words[start + 1..];
    let clean = |s: &str| -> Option<String> { valid_cid(s).then(|| s.to_string()) };
    for (i, w) in words.iter().enumerate() {
        for flag in ["--resume", "--session-id"] {
            if let Some(rest) = w.strip_prefix(flag) {
                if let Some(v) = rest.strip_prefix('=') {
                    return clean(v);
                }
                if rest.is_empty() {
                    return words.get(i + 1).and_then(|v| clean(v));
                }
            }
        }
        if w == "-r" {
            return words.get(i + 1).and_then(|v| clean(v));
        }
    }
    None
}

/// A word that names claude: a basename `claude` or `*-claude`, or a path through `claude-code`.
fn is_claude_word(w: &str) -> bool {
    let base = w.rsplit('/').next().unwrap_or(w);
    base == "claude" || base.ends_with("-claude") || w.contains("/claude-code/")
}

/// Whether the process whose argv this is IS claude (`claude ...`, `node .../claude-code/cli.js`,
/// a script run by its interpreter), not a shell or another program whose arguments mention it.
/// A walk down a pane's process tree stops at the first such process: a claude that the chat's
/// claude started (a sub-agent, a tool) names another conversation.
pub fn is_claude_process<S: AsRef<str>>(argv: &[S]) -> bool {
    argv.iter().take(2).any(|a| is_claude_word(a.as_ref()))
}

/// Whether `cid` may be used as a conversation id: non-empty, `[A-Za-z0-9_-]` ([`id_chars`]),
/// not starting with `-`, so that `claude --resume <cid>` can never read it as a flag. Wherever a
/// cid comes from (`--cid`, a tombstone, `@ccs_cid`, a command line), one that fails this is
/// unknown. A cid is at most [`MAX_ID_LEN`] bytes, the limit of ids: a longer one (a hook's
/// 16,000-character `session_id`) would make `spawn`'s `claude --resume <cid>` too long to run.
pub fn valid_cid(cid: &str) -> bool {
    id_chars(cid) && !cid.starts_with('-') && cid.len() <= MAX_ID_LEN
}

/// The longest chat id, in bytes. Journals and tombstones are files named after the id, written
/// through a temp file `.<id>.json.<pid>`: 200 keeps that name (at most 214 bytes) under the 255
/// a file system allows, so every id that `spawn` accepts can be reaped and resumed.
pub const MAX_ID_LEN: usize = 200;

/// The longest session prefix, in bytes: the studio's directory in the state dir is named
/// `<socket label>-<hash>@<prefix>`, and a socket path fits in 108 bytes, so 64 keeps that name
/// under 255.
pub const MAX_PREFIX_LEN: usize = 64;

/// Whether `id` is a valid chat id: non-empty, `[A-Za-z0-9_-]`, at most [`MAX_ID_LEN`] bytes.
pub fn valid_id(id: &str) -> bool {
    id_chars(id) && id.len() <= MAX_ID_LEN
}

/// Whether `s` is non-empty and only `[A-Za-z0-9_-]`, whatever its length.
pub fn id_chars(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Why a session whose id is longer than [`MAX_ID_LEN`] is kept.
pub fn too_long(id: &str) -> String {
    format!(
        "its id is {} bytes long, more than the {MAX_ID_LEN} a tombstone can be named after: kept, never reaped",
        id.len()
    )
}

/// Why `id` is not a valid chat id, for a command that refuses it; `None` when it is valid.
pub fn invalid_id_why(id: &str) -> Option<String> {
    if !id_chars(id) {
        Some(format!(
            "invalid session id {id:?}: expected letters, digits, '_' and '-'"
        ))
    } else if id.len() > MAX_ID_LEN {
        Some(format!(
            "invalid session id {:?}... ({} bytes): an id is at most {MAX_ID_LEN} bytes (its files are named after it)",
            &id[..16],
            id.len()
        ))
    } else {
        None
    }
}
