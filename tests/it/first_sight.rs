//! The first-sight stamp is written only while `@ccs_idle` is still unset (issue 29.8): a stamp
//! the studio writes between the sweep's listing and its stamp stands. The studio's write is
//! injected right before the reaper's own stamp call, by a `tmux` wrapper on its PATH.

use crate::common::*;

#[test]
fn a_stamp_the_studio_writes_after_the_listing_is_never_overwritten_by_the_first_sight() {
    let s = Server::new();
    let n = s.chat("ccs-1", "c1", "plain");
    assert_eq!(s.show(n, "@ccs_idle"), None, "a new chat has no stamp");
    // The studio's turn-end stamp, written right before the reaper's stamp call reaches tmux.
    let studio = (now_ms() - 5_000).to_string();
    let bin = s.tmux_wrapper(&format!(
        "case \"$*\" in *set-option*@ccs_idle*) \"$REAL\" -S \"$SOCK\" -f /dev/null set-option -t ccs-1: @ccs_idle {studio} ;; esac\nexec \"$REAL\" \"$@\"\n"
    ));
    // -v: the sweep says "first sight" at DEBUG, which a command prints only when asked.
    let (o, _) = s.sweep_via(&bin, DONE, &["-v"], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    no_panic(&o);
    assert!(
        o.stderr.contains("first sight"),
        "the sweep did not see the chat unstamped: {}",
        o.stderr
    );
    assert_eq!(
        s.show(n, "@ccs_idle").as_deref(),
        Some(studio.as_str()),
        "the studio's stamp was overwritten by the first-sight stamp"
    );
    // And a chat that nobody stamps is stamped at first sight, as before.
    let m = s.chat("ccs-2", "c2", "plain");
    s.sweep(DONE, &[], &[("CCS_ENGINE_IDLE_KILL_MS", LIMIT)]);
    let t: i64 = s.show(m, "@ccs_idle").unwrap().parse().unwrap();
    assert!((now_ms() - t).abs() < 60_000, "{t}");
}
