//! The listing of the whole server in one tmux call: the formats, and the parser that turns its
//! rows into sessions, clients and panes, so that no value of one session can break or forge
//! another's row.

use std::collections::HashMap;

use crate::core::policy::{id_chars, too_long, Client, Pane, Session, MAX_ID_LEN};

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
    clean!("socket_path"),
    "\t",
    clean!("session_name"),
);
const SESSION_FIELDS: usize = 14;
pub const CLIENT_FMT: &str =
    "C\t#{session_id}\t#{client_pid}\t#{client_control_mode}\t#{client_created}\t#{client_activity}";
const CLIENT_FIELDS: usize = 6;
pub const PANE_FMT: &str = concat!(
    "P\t#{session_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{window_activity}\t",
    clean!("pane_start_command"),
);
const PANE_FIELDS: usize = 8;

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
    pub all_panes: Vec<(u32, u32)>,
    pub server_pid: Option<u32>,
    pub socket_path: Option<String>,
    /// Whether a tmux server answered at the socket: `Some(true)` it did (with or without
    /// sessions), `Some(false)` none listens there, `None` unknown (the call failed otherwise).
    pub server_up: Option<bool>,
}

pub fn parse_sid(s: &str) -> Option<u32> {
    s.strip_prefix('$')?.parse().ok()
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
    let mut by_sid: HashMap<u32, usize> = HashMap::new();
    let mut clients: Vec<(u32, Result<Client, String>)> = Vec::new();
    let mut panes: Vec<(u32, Result<PaneRow, String>)> = Vec::new();
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
                l.socket_path = l.socket_path.take().or_else(|| Some(f[12].to_string()));
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
                    ..Session::default()
                };
                if attached.is_err() {
                    s.problem = Some(format!("session_attached did not parse: {:?}", f[2]));
                }
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
    for (n, c) in clients {
        if let Some(&i) = by_sid.get(&n) {
            match c {
                Ok(c) => l.sessions[i].clients.push(c),
                Err(e) => l.sessions[i].problem = Some(e),
            }
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

/// What the fence prints for a session that passed its test in the server (see
/// [`fence_format`]): its id, its client count and its name, cleaned.
const FENCED: &str = "F";

/// The format of the fence's one listing: for every session that carries exactly the mark
/// `@ccs_reaping` = `mark_at` and the token `token` (in its own environment, `token_var`), a row
/// `F<TAB>$N<TAB>clients<TAB>name`, the name [`clean!`]ed and last, so it can forge no row; an
/// empty line for any other session. `token` is ours (`[A-Za-z0-9_]`): it goes into the format as
/// it is. Which of a batch's sessions pass is then [`fenced`]'s to say.
///
/// A session passes only once the fence's write set `fenced_var` to our token in it too (see
/// `adapters::tmux::args::fence_set_command`). One that still carries our token but no mark at
/// all was taken back by a prompt hook before the fence: a row `T<TAB>$N` ([`taken_back`]).
pub fn fence_format(mark_at: i64, token: &str, token_var: &str, fenced_var: &str) -> String {
    format!(
        "#{{?#{{&&:#{{&&:#{{==:#{{@ccs_reaping}},{mark_at}}},#{{==:#{{{token_var}}},{token}}}}},#{{==:#{{{fenced_var}}},{token}}}}},\
         {FENCED}{SEP}#{{session_id}}{SEP}#{{session_attached}}{SEP}{},\
         #{{?#{{&&:#{{==:#{{@ccs_reaping}},}},#{{==:#{{{token_var}}},{token}}}}},{TAKEN}{SEP}#{{session_id}},}}}}",
        clean!("session_name")
    )
}

/// The tag of a row of [`fence_format`] for a session taken back by a prompt.
const TAKEN: &str = "T";

/// Which sessions the rows of one [`fence_format`] listing say a prompt hook took back before the
/// fence: their mark cleared, our token still beside it.
pub fn taken_back(out: &str) -> std::collections::HashSet<u32> {
    out.lines()
        .filter_map(|l| l.strip_prefix(TAKEN)?.strip_prefix(SEP).and_then(parse_sid))
        .collect()
}

/// Whether a session name can be checked by the fence, and put in a format as it is: what
/// [`id_chars`] allows (a prefix and an id of ours are made of nothing else), at most 255 bytes.
/// Any other name (one a studio never gives) never passes the fence.
pub fn plain_name(name: &str) -> bool {
    id_chars(name) && name.len() <= 255
}

/// Which of `asked` (`(n, name, check_viewers)`) passed the fence, read from the rows of one
/// [`fence_format`] listing: the session is listed as carrying the mark, under the very name the
/// reap was decided for (a name that is not [`plain_name`] never passes), with no client attached
/// where the reap asked for none. A session gone, renamed, taken or now watched is simply not in
/// the set; a row that does not parse passes nothing.
pub fn fenced(out: &str, asked: &[(u32, &str, bool)]) -> std::collections::HashSet<u32> {
    let mut rows: HashMap<u32, (&str, &str)> = HashMap::new();
    for line in out.lines() {
        let mut f = line.splitn(4, SEP);
        if f.next() != Some(FENCED) {
            continue;
        }
        let (Some(n), Some(clients), Some(name)) =
            (f.next().and_then(parse_sid), f.next(), f.next())
        else {
            continue;
        };
        rows.insert(n, (clients, name));
    }
    asked
        .iter()
        .filter(|&&(n, name, check_viewers)| {
            rows.get(&n).is_some_and(|&(clients, listed)| {
                plain_name(name) && listed == name && (!check_viewers || clients == "0")
            })
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
        let out = "F\t$1\t0\tccs-1\n\
                   \n\
                   F\t$2\t1\tccs-2\n\
                   F\t$3\t0\tother-3\n\
                   F\t$4\t0\tccs-4 F\t$5\t0\tccs-5\n\
                   F\t$6\t0\n\
                   F\tx\t0\tccs-7\n\
                   S\t$8\t0\tccs-8\n\
                   F\t$9\t0\tccs 9\n\
                   F\t$10\t0\tccs-10\tx\n";
        // (asked, passes)
        let table: &[((u32, &str, bool), bool)] = &[
            ((1, "ccs-1", true), true),
            // Not listed (no mark of ours, or gone).
            ((11, "ccs-11", false), false),
            // Watched: passes only where the reap was told to override the viewers.
            ((2, "ccs-2", true), false),
            ((2, "ccs-2", false), true),
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
        ];
        for &(asked, passes) in table {
            assert_eq!(
                fenced(out, &[asked]).contains(&asked.0),
                passes,
                "{asked:?}"
            );
        }
        let all: Vec<_> = table.iter().map(|t| t.0).collect();
        let want: std::collections::HashSet<u32> = [1, 2].into();
        assert_eq!(fenced(out, &all), want);
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
            let out = format!("F\t$3\t0\t{name}\n");
            assert_eq!(
                fenced(&out, &[(3, name, true)]).contains(&3),
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
        assert!(f.contains("#{==:#{CCS_REAP_TOKEN},f2_1_2_3_4_5_ab}"), "{f}");
        assert!(
            f.contains("#{==:#{CCS_REAP_FENCED},f2_1_2_3_4_5_ab}"),
            "{f}"
        );
        assert!(f.contains(concat!(clean!("session_name"), ",#{?")), "{f}");
        assert_eq!(
            taken_back("T\t$4\nF\t$5\t0\tccs-5\nT\tx\n\nT\t$9"),
            [4, 9].into_iter().collect()
        );
        assert!(f.starts_with("#{?#{&&:"), "{f}");
    }

    #[test]
    fn listing_parses_and_filters() {
        let out = "S\t$0\t0\t77\t123\t\tc0\t\t\t\t\t\t/tmp/s\tccs-1\n\
                   S\t$1\t1\t77\t\t9\t\t\t\t\t\t\t/tmp/s\tccs-10\n\
                   S\t$2\t0\t77\t1\t\t\t\t\t\t\t\t/tmp/s\tother\n\
                   S\t$3\t0\t77\t1\t\t\t\t\t\t\t\t/tmp/s\tccs-\n\
                   S\t$4\t0\t77\t1\t\t\t\t\t\t\t\t/tmp/s\txccs-1\n\
                   S\t$5\t0\t77\t1\t\t\t\t\t\t\t\t/tmp/s\tccs-a b\n\
                   C\t$1\t4242\t1\t1700000000\t1700000001\n\
                   C\t$2\t4243\t0\t1700000000\t1700000001\n\
                   P\t$0\t100\t0\t\t\t1700000002\tclaude --resume x\n\
                   P\t$1\t101\t1\t3\t\t1700000003\tclaude --resume x\n\
                   P\t$1\t102\t1\t\t9\t1700000005\tclaude --resume x\n";
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
            (0, "1", "123", "c0")
        );
        assert_eq!(s0.panes.len(), 1);
        assert!(s0.problem.is_none());
        let s1 = &l.sessions[1];
        assert_eq!((s1.attached, s1.turn.as_str()), (1, "9"));
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
            "S\t$0\t0\tccs-1\nS\t$1\t0\t7\t1\t\tc\t\t\t\t\t\t/s\tccs-2\nP\t$1\t100\t0\t\t\t1\tclaude\n",
            "ccs-",
        );
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.sessions.len(), 2);
        assert!(l.sessions[0].problem.is_some());
        assert!(l.sessions[1].problem.is_none());
        // A client row of one of ours that does not parse marks that session.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t/s\tccs-1\nC\t$0\tx\t1\t1\t1\nP\t$0\t100\t0\t\t\t1\tclaude --resume x\n",
            "ccs-",
        );
        assert!(l.sessions[0]
            .problem
            .as_deref()
            .unwrap()
            .contains("client row"));
        // A client row whose session cannot be told: everything unknown.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t/s\tccs-1\nC_x\nP\t$0\t100\t0\t\t\t1\tclaude --resume x\n",
            "ccs-",
        );
        assert_eq!(l.problems.len(), 1);
        // A pane with a garbage status.
        let l = parse_listing(
            "S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t/s\tccs-1\nP\t$0\t100\t1\tzz\t\t1\tclaude --resume x\n",
            "ccs-",
        );
        assert!(l.sessions[0].problem.is_some());
        // A session without panes is not trusted.
        let l = parse_listing("S\t$0\t0\t7\t1\t\tc\t\t\t\t\t\t/s\tccs-1\n", "ccs-");
        assert!(l.sessions[0].problem.is_some());
    }

    #[test]
    fn a_session_whose_id_is_too_long_is_listed_and_kept() {
        let id = "7".repeat(crate::core::policy::MAX_ID_LEN + 1);
        let ok = "8".repeat(crate::core::policy::MAX_ID_LEN);
        let row = |n: u32, id: &str| {
            format!(
                "S\t${n}\t0\t7\t1\t\tc\t\t\t\t\t\t/s\tccs-{id}\nP\t${n}\t10{n}\t0\t\t\t1\tclaude --resume x\n"
            )
        };
        let l = parse_listing(&format!("{}{}", row(0, &id), row(1, &ok)), "ccs-");
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.sessions.len(), 2);
        let why = l.sessions[0].problem.as_deref().unwrap_or_default();
        assert!(why.contains("201 bytes"), "{why}");
        assert_eq!(l.sessions[1].problem, None);
    }
}
