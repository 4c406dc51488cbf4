//! The listing of the whole server in one tmux call: the formats, and the parser that turns its
//! rows into sessions, clients and panes, so that no value of one session can break or forge
//! another's row.

use std::collections::HashMap;

use crate::core::policy::{id_chars, too_long, Client, Pane, Session, TmuxId, MAX_ID_LEN};

const SEP: &str = "\t";

/// A value that someone else may have written (an `@` option, a session name, a start command):
/// listed with tabs, newlines and carriage returns replaced by spaces, so no value can break its
/// row or forge another session's. (A value so changed never passes the id checks it is read for.)
macro_rules! clean {
    ($f:literal) => {
        concat!("#{s/[\t\n\r]/ /:", $f, "}")
    };
}

/// The fields tmux generates (ids, pids, flags, times) come first and are trusted to parse; the
/// ones anyone with the socket can write are [`clean!`]ed, and the session name comes last.
pub const SESSION_FMT: &str = concat!(
    "S\t#{session_id}\t#{session_attached}\t#{pid}\t",
    clean!("@ccs_idle"),
    "\t",
    clean!("@ccs_turn"),
    "\t",
    clean!("@ccs_cid"),
    "\t",
    clean!("@ccs_reaping"),
    "\t",
    // The reap token, from the session's environment, else from the `@ccs_reaper` option
    // where earlier versions kept it (`core::compat::TOKEN_OPTION`; a mark left by one of them
    // is still told apart).
    "#{?#{CCS_REAP_TOKEN},",
    clean!("CCS_REAP_TOKEN"),
    ",",
    clean!("@ccs_reaper"),
    "}",
    "\t",
    clean!("@ccs_pin"),
    "\t",
    clean!("@ccs_idle_kill_ms"),
    "\t",
    clean!("@ccs_warned"),
    "\t",
    clean!("@ccs_pane"),
    "\t",
    clean!("@ccs_turns"),
    "\t",
    clean!("@ccs_asleep"),
    "\t",
    clean!("socket_path"),
    "\t",
    clean!("session_name"),
);
const SESSION_FIELDS: usize = 17;
/// A client row: its session, and the window it shows (its session's current window), which
/// tells a viewer through a linked window or a session group.
pub const CLIENT_FMT: &str = "C\t#{session_id}\t#{client_pid}\t#{client_control_mode}\t#{client_created}\t#{client_activity}\t#{window_id}";
const CLIENT_FIELDS: usize = 7;
/// A pane row, with its `%N` and its window's `@N` and index (for the WHY of a session that holds
/// more than the chat). Not `pane_current_command`: tmux reads /proc for it, pane by pane.
pub const PANE_FMT: &str = concat!(
    "P\t#{session_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{window_activity}\t",
    "#{pane_id}\t#{window_id}\t#{window_index}\t",
    clean!("pane_start_command"),
);
const PANE_FIELDS: usize = 11;

/// The server as one sweep sees it.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// Sessions named `<prefix><valid id>`, with their clients and panes.
    pub sessions: Vec<Session>,
    /// Rows that could not be tied to one session (a viewer of we cannot tell which session):
    /// everything's liveness is unknown.
    pub problems: Vec<String>,
    /// Odd output that concerns no session of ours (a foreign row, a line we did not ask for):
    /// logged, decides nothing.
    pub warnings: Vec<String>,
    /// Every live pane on the server, of any session, ours or not: (session number, pane pid).
    /// A process that belongs to another session's pane is never a victim of ours.
    pub all_panes: Vec<(TmuxId, u32)>,
    pub server_pid: Option<u32>,
    pub socket_path: Option<String>,
    /// Whether a tmux server answered at the socket: `Some(true)` it did (with or without
    /// sessions), `Some(false)` none listens there, `None` unknown (the call failed otherwise).
    pub server_up: Option<bool>,
}

pub fn parse_sid(s: &str) -> Option<TmuxId> {
    s.strip_prefix('$')?.parse().ok().map(TmuxId)
}

fn opt_num<T: std::str::FromStr>(s: &str) -> Result<Option<T>, ()> {
    if s.is_empty() {
        Ok(None)
    } else {
        s.parse().map(Some).map_err(|_| ())
    }
}

/// A pane and its window's last output (Unix ms).
type PaneRow = (Pane, Option<i64>);

/// Parse the tagged rows of one snapshot call. Pure, so it has its own tests.
///
/// No value of one session can break or forge another's row: the values others can write are
/// listed cleaned of separators (see [`SESSION_FMT`]). Should a row still not parse, only its
/// own session is kept ("liveness unknown"); only a client or pane row that cannot be tied to a
/// session makes every session unknown, since it may be a viewer of any of them.
///
/// Long (about 155 lines) on purpose: one pass over the tagged rows (sessions, clients, panes),
/// each kind parsed where it is met, so that a bad row is judged against what came before it.
pub fn parse_listing(out: &str, prefix: &str) -> Listing {
    let mut l = Listing::default();
    let mut by_sid: HashMap<TmuxId, usize> = HashMap::new();
    let mut clients: Vec<(TmuxId, Result<Client, String>)> = Vec::new();
    let mut panes: Vec<(TmuxId, Result<PaneRow, String>)> = Vec::new();
    // Ours whatever the id's length: one too long to be reaped is listed, kept (below).
    let ours = |name: &str| name.strip_prefix(prefix).is_some_and(id_chars);

    for line in out.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split(SEP).collect();
        match f[0] {
            "S" => {
                let name = f.last().copied().unwrap_or("");
                let Some(n) = f.get(1).and_then(|x| parse_sid(x)) else {
                    // Not even its id: not a session we can address, so never a candidate.
                    l.warnings
                        .push(format!("session row did not parse: {line:?}"));
                    continue;
                };
                if f.len() != SESSION_FIELDS {
                    if ours(name) {
                        // Kept alone: listed with the problem, so it is never a candidate.
                        by_sid.insert(n, l.sessions.len());
                        l.sessions.push(Session {
                            tmux_id: n,
                            name: name.to_string(),
                            id: name[prefix.len()..].to_string(),
                            problem: Some(format!("session row did not parse: {line:?}")),
                            ..Session::default()
                        });
                    } else {
                        l.warnings
                            .push(format!("session row did not parse: {line:?}"));
                    }
                    continue;
                }
                l.server_pid = l.server_pid.or(f[3].parse().ok());
                l.socket_path = l.socket_path.take().or_else(|| Some(f[15].to_string()));
                if !ours(name) {
                    continue;
                }
                let attached = f[2].parse::<u32>();
                let mut s = Session {
                    tmux_id: n,
                    name: name.to_string(),
                    id: name[prefix.len()..].to_string(),
                    attached: *attached.as_ref().unwrap_or(&0),
                    idle: f[4].to_string(),
                    turn: f[5].to_string(),
                    cid: f[6].to_string(),
                    reaping: f[7].to_string(),
                    reaper: f[8].to_string(),
                    pin: f[9].to_string(),
                    idle_kill_ms: f[10].to_string(),
                    warned: f[11].to_string(),
                    chat_pane: f[12].to_string(),
                    turns_by: f[13].to_string(),
                    asleep: f[14].to_string(),
                    ..Session::default()
                };
                if attached.is_err() {
                    s.problem = Some(format!("session_attached did not parse: {:?}", f[2]));
                }
                s.reparse();
                by_sid.insert(n, l.sessions.len());
                l.sessions.push(s);
            }
            "C" => {
                let n = f.get(1).and_then(|x| parse_sid(x));
                let parsed = (|| -> Result<Client, ()> {
                    if f.len() != CLIENT_FIELDS {
                        return Err(());
                    }
                    Ok(Client {
                        pid: f[2].parse().map_err(|_| ())?,
                        control_mode: f[3] == "1",
                        created_ms: f[4].parse::<i64>().map_err(|_| ())? * 1000,
                        activity_ms: f[5].parse::<i64>().map_err(|_| ())? * 1000,
                        orphaned: None,
                        window: Some(tmux_num(f[6], '@').ok_or(())?),
                        through: None,
                    })
                })()
                .map_err(|_| format!("client row did not parse: {line:?}"));
                match n {
                    Some(n) => clients.push((n, parsed)),
                    // A client whose session we cannot tell may be watching any of ours.
                    None => l
                        .problems
                        .push(format!("client row did not parse: {line:?}")),
                }
            }
            "P" => {
                let n = f.get(1).and_then(|x| parse_sid(x));
                let parsed = (|| -> Result<PaneRow, ()> {
                    if f.len() < PANE_FIELDS {
                        return Err(());
                    }
                    let pane = Pane {
                        pid: f[2].parse().map_err(|_| ())?,
                        dead: f[3] == "1",
                        dead_status: opt_num(f[4])?,
                        dead_signal: opt_num(f[5])?,
                        exit_unreported: false,
                        start_command: f[PANE_FIELDS - 1..].join(SEP),
                        id: Some(tmux_num(f[7], '%').ok_or(())?),
                        window: Some(tmux_num(f[8], '@').ok_or(())?),
                        window_index: Some(f[9].parse().map_err(|_| ())?),
                    };
                    let act: Option<i64> = opt_num(f[6])?;
                    Ok((pane, act.map(|s| s * 1000)))
                })()
                .map_err(|_| format!("pane row did not parse: {line:?}"));
                match n {
                    Some(n) => {
                        if let Ok((p, _)) = &parsed {
                            if !p.dead {
                                l.all_panes.push((n, p.pid));
                            }
                        }
                        panes.push((n, parsed));
                    }
                    // A pane we cannot place may hold a process of any session.
                    None => l.problems.push(format!("pane row did not parse: {line:?}")),
                }
            }
            // A session row we cannot address lists no candidate; anything else could be a
            // viewer or a pane of one of ours.
            x if x.starts_with('S') => l
                .warnings
                .push(format!("session row did not parse: {line:?}")),
            _ => l.problems.push(format!("unexpected tmux output: {line:?}")),
        }
    }
    for (n, p) in panes {
        match (by_sid.get(&n), p) {
            (Some(&i), Ok((pane, act))) => {
                let s = &mut l.sessions[i];
                s.panes.push(pane);
                s.output_ms = s.output_ms.max(act);
            }
            (Some(&i), Err(e)) => l.sessions[i].problem = Some(e),
            (None, Ok(_)) => {}
            // Another session's pane whose pid we cannot read: its processes could not be told
            // from ours.
            (None, Err(e)) => l.problems.push(e),
        }
    }
    add_clients(&mut l, &by_sid, clients);
    for s in &mut l.sessions {
        if s.id.len() > MAX_ID_LEN {
            // Its journal and tombstone could not be named: never a candidate, every sweep.
            s.problem = Some(too_long(&s.id));
        } else if s.problem.is_none() && s.panes.is_empty() {
            s.problem = Some("no pane listed".into());
        }
    }
    l
}

/// The number of a tmux id (`%12`, `@3`) with its sigil.
fn tmux_num(s: &str, sigil: char) -> Option<u32> {
    s.strip_prefix(sigil)?.parse().ok()
}

/// Every client goes to the session it is attached to, and also, as a viewer `through` its own
/// session, to each of ours one of whose windows it shows (a window linked into its session, or
/// a session grouped with ours): tmux counts it in neither `session_attached` of ours. A client
/// row that did not parse marks its own session, if ours; one of a session not ours may show a
/// window of any of ours, so it is a problem for all.
fn add_clients(
    l: &mut Listing,
    by_sid: &HashMap<TmuxId, usize>,
    clients: Vec<(TmuxId, Result<Client, String>)>,
) {
    let mut by_window: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, s) in l.sessions.iter().enumerate() {
        for w in s.panes.iter().filter_map(|p| p.window) {
            let v = by_window.entry(w).or_default();
            if !v.contains(&i) {
                v.push(i);
            }
        }
    }
    for (n, c) in clients {
        let own = by_sid.get(&n).copied();
        match c {
            Ok(c) => {
                let through: &[usize] = c
                    .window
                    .and_then(|w| by_window.get(&w))
                    .map_or(&[], Vec::as_slice);
                for &i in through.iter().filter(|&&i| Some(i) != own) {
                    l.sessions[i].clients.push(Client {
                        through: Some(n),
                        ..c.clone()
                    });
                }
                if let Some(i) = own {
                    l.sessions[i].clients.push(c);
                }
            }
            Err(e) => match own {
                Some(i) => l.sessions[i].problem = Some(e),
                None => l.problems.push(e),
            },
        }
    }
}

/// What the fence prints for a session that passed its test in the server (see
/// [`fence_format`]): its id, its client count and its name, cleaned.
const FENCED: &str = "F";

/// The format of the fence's one listing: for every session that carries exactly the mark
/// `@ccs_reaping` = `mark_at` and the token `token` (in its own environment, `token_var`), a row
/// `F<TAB>$N<TAB>clients<TAB>window clients<TAB>windows<TAB>panes<TAB>pane<TAB>recorded<TAB>name`
/// ([`FENCE_FIELDS`]), the recorded pane (`@ccs_pane`) and the name [`clean!`]ed, the name last,
/// so it can forge no row; an empty line for any other session. `token` is ours
/// (`[A-Za-z0-9_]`): it goes into the format as it is. Which of a batch's sessions pass is then
/// [`fenced`]'s to say.
///
/// "window clients" is `#{window_active_clients}`: every client, attached to whichever session,
/// whose current window is the session's current window (the chat's only window): a viewer
/// through a linked window or a session group counts as one attached to the chat's session.
///
/// A session marked `@ccs_asleep` (its chat reaped from its own pane, what is left the user's)
/// never passes, whatever was decided.
///
/// A session passes only once the fence's write set `fenced_var` to our token in it too (see
/// `adapters::tmux::args::fence_set_command`). One that still carries our token but no mark at
/// all was taken back by a prompt hook before the fence: a row `T<TAB>$N` ([`taken_back`]).
pub fn fence_format(mark_at: i64, token: &str, token_var: &str, fenced_var: &str) -> String {
    format!(
        "#{{?#{{&&:#{{&&:#{{&&:#{{==:#{{@ccs_reaping}},{mark_at}}},#{{==:#{{{token_var}}},{token}}}}},#{{==:#{{{fenced_var}}},{token}}}}},#{{==:#{{@ccs_asleep}},}}}},\
         {FENCED}{SEP}#{{session_id}}{SEP}#{{session_attached}}{SEP}#{{window_active_clients}}\
         {SEP}#{{session_windows}}{SEP}#{{window_panes}}{SEP}#{{pane_id}}:#{{pane_pid}}{SEP}{}{SEP}{},\
         #{{?#{{&&:#{{==:#{{@ccs_reaping}},}},#{{==:#{{{token_var}}},{token}}}}},{TAKEN}{SEP}#{{session_id}},}}}}",
        clean!("@ccs_pane"),
        clean!("session_name")
    )
}

/// The tag of a row of [`fence_format`] for a session taken back by a prompt.
const TAKEN: &str = "T";

/// Which sessions the rows of one [`fence_format`] listing say a prompt hook took back before the
/// fence: their mark cleared, our token still beside it.
pub fn taken_back(out: &str) -> std::collections::HashSet<TmuxId> {
    out.lines()
        .filter_map(|l| l.strip_prefix(TAKEN)?.strip_prefix(SEP).and_then(parse_sid))
        .collect()
}

/// The fields of a [`fence_format`] row.
const FENCE_FIELDS: usize = 9;

/// Whether a session name can be checked by the fence, and put in a format as it is: what
/// [`id_chars`] allows (a prefix and an id of ours are made of nothing else), at most 255 bytes.
/// Any other name (one a studio never gives) never passes the fence.
pub fn plain_name(name: &str) -> bool {
    id_chars(name) && name.len() <= 255
}

/// Which of `asked` (`(n, name, check_viewers)`) passed the fence, read from the rows of one
/// [`fence_format`] listing: the session is listed as carrying the mark, under the very name the
/// reap was decided for (a name that is not [`plain_name`] never passes), holding one window of
/// one pane, that pane the one recorded as the chat's (when one is recorded), and with no client
/// attached or showing its window where the reap asked for none. A session gone, renamed, taken,
/// now shared, swapped or watched is simply not in the set; a row that does not parse passes
/// nothing.
pub fn fenced(out: &str, asked: &[(TmuxId, &str, bool)]) -> std::collections::HashSet<TmuxId> {
    fenced_in(out, asked, &HashMap::new())
}

/// [`fenced`], where the sessions of `panes` are chats judged as their own pane in a shared
/// session (`CCS_ENGINE_SHARED_SESSION=pane`): such a session passes on its `F` row (mark, name)
/// without being one pane alone, and on its `P` row (printed by the fence's call right after its
/// write: `P $N clients found window-clients`): the recorded pane is still the one the reap was
/// decided for and still there, and where the reap asked for none, no client is attached to the
/// session and none shows that pane's window.
pub fn fenced_in(
    out: &str,
    asked: &[(TmuxId, &str, bool)],
    panes: &HashMap<TmuxId, crate::core::policy::chat_pane::PaneRecord>,
) -> std::collections::HashSet<TmuxId> {
    let mut prow: HashMap<TmuxId, Vec<&str>> = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.trim_end_matches('\r').split(' ').collect();
        if f.len() == 5 && f[0] == "P" {
            if let Some(n) = parse_sid(f[1]) {
                prow.insert(n, f);
            }
        }
    }
    let one = |n: TmuxId, name: &str, check_viewers: bool, f: &Vec<&str>| match panes.get(&n) {
        None => {
            let alone = f[4] == "1" && f[5] == "1";
            let recorded = f[7].trim();
            let the_chats = recorded.is_empty() || recorded == f[6];
            let unwatched = f[2] == "0" && f[3] == "0";
            plain_name(name) && f[8] == name && alone && the_chats && (!check_viewers || unwatched)
        }
        Some(r) => prow.get(&n).is_some_and(|p| {
            let unwatched = f[2] == "0" && p[2] == "0" && p[4] == "0";
            plain_name(name)
                && f[8] == name
                && f[7].trim() == r.value()
                && p[3] == "1"
                && (!check_viewers || unwatched)
        }),
    };
    let mut rows: HashMap<TmuxId, Vec<&str>> = HashMap::new();
    for line in out.lines() {
        let f: Vec<&str> = line.splitn(FENCE_FIELDS, SEP).collect();
        if f.len() != FENCE_FIELDS || f[0] != FENCED {
            continue;
        }
        let Some(n) = parse_sid(f[1]) else { continue };
        rows.insert(n, f);
    }
    asked
        .iter()
        .filter(|&&(n, name, check_viewers)| {
            rows.get(&n).is_some_and(|f| one(n, name, check_viewers, f))
        })
        .map(|&(n, ..)| n)
        .collect()
}

/// Whether the tmux server `server` has collected the exit of its child `pid` (`None`: cannot
/// tell): read from the process table by the adapter that can.
pub type ExitCollected = fn(server: u32, pid: u32) -> Option<bool>;

/// tmux before 3.3 has no `#{pane_dead_signal}`: a pane killed by a signal shows neither an exit
/// status nor a signal, for good, which looks like an exit tmux has not collected yet (3.3a
/// sometimes misses one, see `Tmux::collect_exits`). Told apart by the process: once the
/// server has reaped its child (`collected`, which reads the process table), the ending is known
/// to be a failure, by an unknown signal.
pub fn mark_unreported_exits(l: &mut Listing, collected: ExitCollected) {
    let Some(server) = l.server_pid else { return };
    for p in l.sessions.iter_mut().flat_map(|s| s.panes.iter_mut()) {
        if p.dead && p.dead_status.is_none() && p.dead_signal.is_none() {
            p.exit_unreported = collected(server, p.pid) == Some(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_reads_the_token_where_earlier_versions_kept_it_too() {
        // The format is built by concat!, which takes literals only: the option's name is
        // checked against the one place that names it.
        let want = format!(":{}}}", crate::core::compat::TOKEN_OPTION);
        assert!(SESSION_FMT.contains(&want), "{SESSION_FMT}");
    }

    #[test]
    fn the_fence_passes_only_the_mark_under_its_name_and_unwatched_where_asked() {
        // A row as the fence prints it: attached, window clients, windows, panes, the live pane,
        // the recorded one, the name.
        let row = |n: &str, rest: &str| format!("F\t{n}\t{rest}\n");
        let out = [
            row("$1", "0\t0\t1\t1\t%1:10\t%1:10\tccs-1"),
            "\n".to_string(),
            row("$2", "1\t1\t1\t1\t%2:20\t\tccs-2"),
            row("$3", "0\t0\t1\t1\t%3:30\t\tother-3"),
            row(
                "$4",
                "0\t0\t1\t1\t%4:40\t\tccs-4 F\t$5\t0\t0\t1\t1\t%5:50\t\tccs-5",
            ),
            row("$6", "0\t0\t1\t1\t%6:60\t"),
            row("x", "0\t0\t1\t1\t%7:70\t\tccs-7"),
            "S\t$8\t0\t0\t1\t1\t%8:80\t\tccs-8\n".to_string(),
            row("$9", "0\t0\t1\t1\t%9:90\t\tccs 9"),
            row("$10", "0\t0\t1\t1\t%10:100\t\tccs-10\tx"),
            // Watched only through a linked window or a session group.
            row("$12", "0\t1\t1\t1\t%12:120\t\tccs-12"),
            // Shared: a second window, a second pane.
            row("$13", "0\t0\t2\t1\t%13:130\t\tccs-13"),
            row("$14", "0\t0\t1\t2\t%14:140\t\tccs-14"),
            // Another pane than the recorded one (swapped in), or the same respawned.
            row("$15", "0\t0\t1\t1\t%99:150\t%15:150\tccs-15"),
            row("$16", "0\t0\t1\t1\t%16:161\t%16:160\tccs-16"),
            // Nothing recorded yet: the shape alone decides.
            row("$17", "0\t0\t1\t1\t%17:170\t\tccs-17"),
        ]
        .concat();
        // (asked, passes)
        let table: &[((u32, &str, bool), bool)] = &[
            ((1, "ccs-1", true), true),
            // Not listed (no mark of ours, or gone).
            ((11, "ccs-11", false), false),
            // Watched: passes only where the reap was told to override the viewers.
            ((2, "ccs-2", true), false),
            ((2, "ccs-2", false), true),
            ((12, "ccs-12", true), false),
            ((12, "ccs-12", false), true),
            // Renamed since the decision.
            ((3, "ccs-3", false), false),
            // A row forged by a name (one cleaned of its newline): the name is the whole rest.
            ((4, "ccs-4", false), false),
            ((5, "ccs-5", false), false),
            // Rows that do not parse.
            ((6, "ccs-6", false), false),
            ((7, "ccs-7", false), false),
            ((8, "ccs-8", false), false),
            // A name the fence cannot check never passes, even as listed.
            ((9, "ccs 9", false), false),
            ((10, "ccs-10", false), false),
            ((10, "ccs-10\tx", false), false),
            // Not the chat's pane alone, forced or not.
            ((13, "ccs-13", false), false),
            ((14, "ccs-14", false), false),
            ((15, "ccs-15", false), false),
            ((16, "ccs-16", false), false),
            ((17, "ccs-17", true), true),
        ];
        for &(asked, passes) in table {
            let asked = (TmuxId(asked.0), asked.1, asked.2);
            assert_eq!(
                fenced(&out, &[asked]).contains(&asked.0),
                passes,
                "{asked:?}"
            );
        }
        let all: Vec<_> = table
            .iter()
            .map(|t| (TmuxId(t.0 .0), t.0 .1, t.0 .2))
            .collect();
        let want: std::collections::HashSet<TmuxId> = [1, 2, 12, 17].map(TmuxId).into();
        assert_eq!(fenced(&out, &all), want);
    }

    #[test]
    fn a_chat_judged_as_its_pane_passes_the_fence_on_that_pane_and_its_viewers() {
        use crate::core::policy::chat_pane::PaneRecord;
        let r = PaneRecord { id: 3, pid: 30 };
        let panes: HashMap<TmuxId, PaneRecord> = [(TmuxId(1), r)].into();
        // Two windows, the current pane not the chat's: the `F` row alone never passes it.
        let f = "F\t$1\t0\t0\t2\t1\t%4:40\t%3:30\tccs-1\n";
        // (P row, check viewers, passes)
        let table: &[(&str, bool, bool)] = &[
            ("P $1 0 1 0", true, true),
            ("", true, false),
            // The pane gone (swapped out, killed).
            ("P $1 0  ", true, false),
            // A client on the chat's window, or attached to the session.
            ("P $1 0 1 1", true, false),
            ("P $1 0 1 1", false, true),
            ("P $1 1 1 0", true, false),
            // A row that does not parse, or another session's.
            ("P $1 0 1", true, false),
            ("P $2 0 1 0", true, false),
        ];
        for &(p, v, passes) in table {
            let out = format!("{f}{p}\n");
            assert_eq!(
                fenced_in(&out, &[(TmuxId(1), "ccs-1", v)], &panes).contains(&TmuxId(1)),
                passes,
                "{p:?} {v}"
            );
            // Judged whole, the same rows never pass: it is not one pane alone.
            assert!(fenced(&out, &[(TmuxId(1), "ccs-1", v)]).is_empty());
        }
        // Another recorded pane than the one the reap was decided for.
        let other = f.replace("%3:30", "%5:50");
        let out = format!("{other}P $1 0 1 0\n");
        assert!(fenced_in(&out, &[(TmuxId(1), "ccs-1", true)], &panes).is_empty());
    }

    #[test]
    fn only_a_plain_name_can_pass_the_fence() {
        // (name, plain: a format reads it as text, no `#`, `{`, `}` or `,`)
        let table: &[(&str, bool)] = &[
            ("ccs-1", true),
            ("ccs-a_B-9", true),
            ("", false),
            ("ccs-1}", false),
            ("ccs-#{session_id}", false),
            ("ccs-1,x", false),
            ("ccs-#(touch x)", false),
            ("ccs 1", false),
            ("ccs-\u{e9}", false),
        ];
        let long = format!("ccs-{}", "a".repeat(252));
        assert!(plain_name(&long[..255]) && !plain_name(&long));
        for &(name, plain) in table {
            assert_eq!(plain_name(name), plain, "{name:?}");
            // Listed as it is, with the mark: passes exactly when plain.
            let out = format!("F\t$3\t0\t0\t1\t1\t%3:3\t\t{name}\n");
            assert_eq!(
                fenced(&out, &[(TmuxId(3), name, true)]).contains(&TmuxId(3)),
                plain,
                "{name:?}"
            );
        }
    }

    #[test]
    fn the_fence_format_tests_the_mark_and_the_token_and_cleans_the_name() {
        let f = fence_format(
            1700000000000,
            "f2_1_2_3_4_5_ab",
            "CCS_REAP_TOKEN",
            "CCS_REAP_FENCED",
        );
        assert!(f.contains("#{==:#{@ccs_reaping},1700000000000}"), "{f}");
        assert!(f.contains("#{==:#{@ccs_asleep},}}"), "{f}");
        assert!(f.contains("#{==:#{CCS_REAP_TOKEN},f2_1_2_3_4_5_ab}"), "{f}");
        assert!(
            f.contains("#{==:#{CCS_REAP_FENCED},f2_1_2_3_4_5_ab}"),
            "{f}"
        );
        assert!(f.contains(concat!(clean!("session_name"), ",#{?")), "{f}");
        assert_eq!(
            taken_back("T\t$4\nF\t$5\t0\tccs-5\nT\tx\n\nT\t$9"),
            [4, 9].into_iter().map(TmuxId).collect()
        );
        assert!(f.starts_with("#{?#{&&:"), "{f}");
        // Every viewer of its window, through a link or a group; its shape; its pane.
        for w in [
            "#{window_active_clients}",
            "#{session_windows}",
            "#{window_panes}",
            "#{pane_id}:#{pane_pid}",
            clean!("@ccs_pane"),
        ] {
            assert!(f.contains(w), "{w} in {f}");
        }
    }

    #[test]
    fn listing_parses_and_filters() {
        let out = "S\t$0\t0\t77\t123\t\tc0\t\t\t\t\t\t\t\t\t/tmp/s\tccs-1\n\
                   S\t$1\t1\t77\t\t9\t\t\t\t\t\t\t\t\t\t/tmp/s\tccs-10\n\
                   S\t$2\t0\t77\t1\t\t\t\t\t\t\t\t\t\t\t/tmp/s\tother\n\
                   S\t$3\t0\t77\t1\t\t\t\t\t\t\t\t\t\t\t/tmp/s\tccs-\n\
                   S\t$4\t0\t77\t1\t\t\t\t\t\t\t\t\t\t\t/tmp/s\txccs-1\n\
                   S\t$5\t0\t77\t1\t\t\t\t\t\t\t\t\t\t\t/tmp/s\tccs-a b\n\
                   C\t$1\t4242\t1\t1700000000\t1700000001\t@9\n\
                   C\t$2\t4243\t0\t1700000000\t1700000001\t@9\n\
                   P\t$0\t100\t0\t\t\t1700000002\t%100\t@0\t0\tclaude --resume x\n\
                   P\t$1\t101\t1\t3\t\t1700000003\t%101\t@1\t0\tclaude --resume x\n\
                   P\t$1\t102\t1\t\t9\t1700000005\t%102\t@1\t0\tclaude --resume x\n";
        let l = parse_listing(out, "ccs-");
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.server_pid, Some(77));
        assert_eq!(l.socket_path.as_deref(), Some("/tmp/s"));
        let names: Vec<_> = l.sessions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ccs-1", "ccs-10"]);
        let s0 = &l.sessions[0];
        assert_eq!(
            (
                s0.tmux_id,
                s0.id.as_str(),
                s0.idle.as_str(),
                s0.cid.as_str()
            ),
            (TmuxId(0), "1", "123", "c0")
        );
        assert_eq!(s0.panes.len(), 1);
        assert!(s0.problem.is_none());
        // The `@` options are parsed here, once: what the rules read.
        assert_eq!(s0.opts.idle, crate::core::policy::Stamp::At(123));
        assert_eq!(s0.opts.cid.as_deref(), Some("c0"));
        let s1 = &l.sessions[1];
        assert_eq!((s1.attached, s1.turn.as_str()), (1, "9"));
        assert_eq!(s1.opts, s1.parse_options());
        assert_eq!(s1.clients.len(), 1);
        assert!(s1.clients[0].control_mode);
        assert_eq!(s1.clients[0].created_ms, 1_700_000_000_000);
        assert_eq!(s1.panes[0].dead_status, Some(3));
        assert_eq!(s1.panes[1].dead_signal, Some(9));
        assert_eq!(s1.output_ms, Some(1_700_000_005_000));
    }

    #[test]
    fn broken_rows_are_problems_not_guesses() {
        // A separator rewritten to '_' (no UTF-8 locale): the row is ours but did not parse.
        // It lists no session, so nothing is a candidate; a client row so broken may be a
        // viewer of any session: everything unknown.
        let l = parse_listing("S_$0_0_123___77_/tmp/s_ccs-1\n", "ccs-");
        assert!(l.sessions.is_empty());
        assert_eq!(l.warnings.len(), 1);
        let l = parse_listing("C_$0_77_1_1_1\n", "ccs-");
        assert_eq!(l.problems.len(), 1);
        // A foreign row with a wrong field count is nobody's business.
        let l = parse_listing("S\t$0\t0\tother\n", "ccs-");
        assert!(l.problems.is_empty() && l.sessions.is_empty());
        // A row of ours with a wrong field count keeps that session alone.
        let l = parse_listing(
            "S\t$0\t0\tccs-1\nS\t$1\t0\t7\t1\t\tc\t\t\t\t\t\t\t\t\t/s\tccs-2\nP\t$1\t100\t0\t\t\t1\t%100\t@1\t0\tclaude\n",
            "ccs-",
        );
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.sessions.len(), 2);
        assert!(l.sessions[0].problem.is_some());
        assert!(l.sessions[1].problem.is_none());
        // A client row of one of ours that does not parse marks that session.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t\t\t\t/s\tccs-1\nC\t$0\tx\t1\t1\t1\nP\t$0\t100\t0\t\t\t1\t%100\t@0\t0\tclaude --resume x\n",
            "ccs-",
        );
        assert!(l.sessions[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("client row"));
        // A client row whose session cannot be told: everything unknown.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t\t\t\t/s\tccs-1\nC_x\nP\t$0\t100\t0\t\t\t1\t%100\t@0\t0\tclaude --resume x\n",
            "ccs-",
        );
        assert_eq!(l.problems.len(), 1);
        // A pane with a garbage status.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t\t\t\t/s\tccs-1\nP\t$0\t100\t1\tzz\t\t1\t%100\t@0\t0\tclaude --resume x\n",
            "ccs-",
        );
        assert!(l.sessions[0].problem.is_some());
        // A session without panes is not trusted.
        let l = parse_listing("S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t\t\t\t/s\tccs-1\n", "ccs-");
        assert!(l.sessions[0].problem.is_some());
    }

    #[test]
    fn a_session_whose_id_is_too_long_is_listed_and_kept() {
        let id = "7".repeat(crate::core::policy::MAX_ID_LEN + 1);
        let ok = "8".repeat(crate::core::policy::MAX_ID_LEN);
        let row = |n: u32, id: &str| {
            format!(
                "S\t${n}\t0\t7\t1\t\tc\t\t\t\t\t\t\t\t\t/s\tccs-{id}\nP\t${n}\t10{n}\t0\t\t\t1\t%{n}\t@{n}\t0\tclaude --resume x\n"
            )
        };
        let l = parse_listing(&format!("{}{}", row(0, &id), row(1, &ok)), "ccs-");
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.sessions.len(), 2);
        let why = l.sessions[0].problem.as_deref().unwrap_or_default();
        assert!(why.contains("201 bytes"), "{why}");
        assert_eq!(l.sessions[1].problem, None);
    }

    #[test]
    fn a_client_showing_a_chats_window_from_another_session_is_its_viewer() {
        // ccs-1 ($0, window @5) is linked into `dash` ($2) and grouped with `view` ($3), whose
        // panes list the same %5; ccs-2 ($1, window @6) is watched by nobody: `dash`'s second
        // client shows another window (@7).
        let out = "S\t$0\t0\t77\t1\t\tc1\t\t\t\t\t\t%5:50\t\t1700000000000\t/s\tccs-1\n\
                   S\t$1\t0\t77\t1\t\tc2\t\t\t\t\t\t\t\t\t/s\tccs-2\n\
                   S\t$2\t2\t77\t\t\t\t\t\t\t\t\t\t\t\t/s\tdash\n\
                   S\t$3\t1\t77\t\t\t\t\t\t\t\t\t\t\t\t/s\tview\n\
                   C\t$2\t900\t0\t1700000000\t1700000009\t@5\n\
                   C\t$2\t901\t0\t1700000000\t1700000009\t@7\n\
                   C\t$3\t902\t1\t1700000000\t1700000008\t@5\n\
                   P\t$0\t50\t0\t\t\t1\t%5\t@5\t0\tclaude --resume c1\n\
                   P\t$1\t60\t0\t\t\t1\t%6\t@6\t0\tclaude --resume c2\n\
                   P\t$2\t50\t0\t\t\t1\t%5\t@5\t3\tclaude --resume c1\n\
                   P\t$2\t70\t0\t\t\t1\t%7\t@7\t0\tbash\n\
                   P\t$3\t50\t0\t\t\t1\t%5\t@5\t0\tclaude --resume c1\n";
        let l = parse_listing(out, "ccs-");
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        let (c1, c2) = (&l.sessions[0], &l.sessions[1]);
        assert_eq!(c1.chat_pane, "%5:50");
        assert_eq!(c1.asleep, "1700000000000");
        let via: Vec<_> = c1.clients.iter().map(|c| (c.pid, c.through)).collect();
        assert_eq!(via, [(900, Some(TmuxId(2))), (902, Some(TmuxId(3)))]);
        assert_eq!(c1.attached, 0);
        assert!(c2.clients.is_empty(), "{:?}", c2.clients);
        let p = &c1.panes[0];
        assert_eq!(
            (p.id, p.window, p.window_index, p.start_command.as_str()),
            (Some(5), Some(5), Some(0), "claude --resume c1")
        );
        // A client row of a session not ours that does not parse may show any of our windows.
        let l = parse_listing(&format!("{out}C\t$2\tx\t0\t1\t1\t@5\n"), "ccs-");
        assert_eq!(l.problems.len(), 1, "{:?}", l.problems);
    }
}
