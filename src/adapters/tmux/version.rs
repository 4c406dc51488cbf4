//! The oldest tmux ccs-reap supports, and the start-up check against it: `tmux -V`, run through
//! the one tmux runner ([`Tmux::exec`]) once by every command that talks to tmux. Older releases
//! lack what the listing and the test-and-set rely on; a version that cannot be read (a distribution's own string) is warned about, not
//! refused.

use std::fmt;
use std::time::Duration;

use crate::adapters::tmux::{Socket, Tmux, TmuxError};

/// A tmux release: `3.1c` is (3, 1, Some('c')); `3.4` is (3, 4, None), older than `3.4a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub letter: Option<char>,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        match self.letter {
            Some(c) => write!(f, "{c}"),
            None => Ok(()),
        }
    }
}

/// The oldest tmux the whole test suite passes on (`scripts/tmux-matrix`: Debian 11's).
pub const MINIMUM: Version = Version {
    major: 3,
    minor: 1,
    letter: Some('c'),
};

/// What `tmux -V` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reported {
    /// A release, or a release candidate (`3.4-rc`) or a development build (`next-3.6`) of one.
    Release(Version),
    /// `tmux master`: built from the development branch, newer than every release.
    Master,
    /// Anything else (`tmux openbsd-7.5`, garbage): the version cannot be told.
    Unknown(String),
}

/// Parse the output of `tmux -V` (`tmux 3.3a`, `tmux next-3.6`, `tmux 3.4-rc`, `tmux master`).
pub fn parse(out: &str) -> Reported {
    let out = out.trim();
    let unknown = || Reported::Unknown(out.to_string());
    let Some(v) = out.strip_prefix("tmux ") else {
        return unknown();
    };
    let v = v.trim();
    if v == "master" {
        return Reported::Master;
    }
    let v = v.strip_prefix("next-").unwrap_or(v);
    let Some((major, rest)) = v.split_once('.') else {
        return unknown();
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (minor, tail) = rest.split_at(digits);
    let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else {
        return unknown();
    };
    let mut tail = tail.chars();
    let letter = match (tail.next(), tail.next()) {
        (None, _) => None,
        // `3.1c`; `3.4-rc`, `3.4-rc2`: a release candidate of 3.4.
        (Some(c), None) if c.is_ascii_lowercase() => Some(c),
        (Some('-'), _) => None,
        _ => return unknown(),
    };
    Reported::Release(Version {
        major,
        minor,
        letter,
    })
}

/// Whether this tmux is supported: `Err` (a message naming both versions) when it is older than
/// [`MINIMUM`]; a version that cannot be told passes.
pub fn supported(r: &Reported) -> Result<(), VersionError> {
    match r {
        Reported::Release(v) if *v < MINIMUM => Err(VersionError::TooOld(*v)),
        _ => Ok(()),
    }
}

/// Why this tmux is not supported ([`supported`]).
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("tmux {0} (`tmux -V`) is too old: ccs-reap needs tmux {MINIMUM} or newer")]
    TooOld(Version),
}

/// The start-up check: run `tmux -V` once (within the tmux timeout) and refuse an old tmux. A tmux
/// that cannot be run or read is warned about, and the command goes on (its own tmux calls will
/// say what is wrong).
pub async fn check(socket: &Socket, timeout: Duration) -> Result<(), VersionError> {
    let tmux = Tmux::new(socket.clone(), timeout);
    let out = match tmux.exec(["-V"], "-V".to_string()).await {
        Err(TmuxError::Timeout(..)) => {
            tracing::warn!(
                "`{} -V` did not answer within {:?}: the tmux version is unknown",
                tmux.bin,
                tmux.timeout
            );
            return Ok(());
        }
        Err(TmuxError::Spawn(_, e)) => {
            tracing::warn!("failed to run `{} -V`: {e}", tmux.bin);
            return Ok(());
        }
        Err(e) => {
            tracing::warn!("failed to run `{} -V`: {e}", tmux.bin);
            return Ok(());
        }
        Ok(o) => o,
    };
    let said = String::from_utf8_lossy(&out.stdout);
    let r = parse(&said);
    if let Reported::Unknown(s) = &r {
        tracing::warn!(
            "cannot tell the tmux version from `{} -V` ({s:?}); ccs-reap needs tmux {MINIMUM} or newer",
            tmux.bin
        );
    }
    supported(&r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, letter: Option<char>) -> Reported {
        Reported::Release(Version {
            major,
            minor,
            letter,
        })
    }

    #[test]
    fn parses_what_tmux_prints() {
        let table: &[(&str, Reported)] = &[
            ("tmux 3.3a", v(3, 3, Some('a'))),
            ("tmux 3.3a\n", v(3, 3, Some('a'))),
            ("tmux 3.1c", v(3, 1, Some('c'))),
            ("tmux 3.5a", v(3, 5, Some('a'))),
            ("tmux 3.4", v(3, 4, None)),
            ("tmux 2.9", v(2, 9, None)),
            ("tmux 1.8", v(1, 8, None)),
            ("tmux 3.10", v(3, 10, None)),
            ("tmux next-3.6", v(3, 6, None)),
            ("tmux next-3.4", v(3, 4, None)),
            ("tmux 3.4-rc", v(3, 4, None)),
            ("tmux 3.0-rc5", v(3, 0, None)),
            ("tmux master", Reported::Master),
            (
                "tmux openbsd-7.5",
                Reported::Unknown("tmux openbsd-7.5".into()),
            ),
            ("tmux 3.3ab", Reported::Unknown("tmux 3.3ab".into())),
            ("tmux 3", Reported::Unknown("tmux 3".into())),
            ("tmux .3", Reported::Unknown("tmux .3".into())),
            ("tmux x.3", Reported::Unknown("tmux x.3".into())),
            ("screen 4.9", Reported::Unknown("screen 4.9".into())),
            ("", Reported::Unknown(String::new())),
        ];
        for (out, want) in table {
            assert_eq!(&parse(out), want, "{out:?}");
        }
    }

    #[test]
    fn refuses_only_what_is_older_than_the_minimum() {
        let table: &[(&str, bool)] = &[
            ("tmux 1.8", false),
            ("tmux 2.9", false),
            ("tmux 2.9a", false),
            ("tmux 3.0a", false),
            ("tmux 3.1", false),
            ("tmux 3.1-rc", false),
            ("tmux 3.1b", false),
            ("tmux 3.1c", true),
            ("tmux 3.2", true),
            ("tmux 3.2a", true),
            ("tmux 3.3a", true),
            ("tmux 3.5a", true),
            ("tmux next-3.6", true),
            ("tmux 3.10", true),
            ("tmux 4.0", true),
            ("tmux master", true),
            ("tmux openbsd-7.5", true),
            ("garbage", true),
        ];
        for (out, ok) in table {
            assert_eq!(supported(&parse(out)).is_ok(), *ok, "{out:?}");
        }
        let e = supported(&parse("tmux 2.9")).unwrap_err().to_string();
        assert!(e.contains("2.9") && e.contains("3.1c"), "{e}");
        assert_eq!(MINIMUM.to_string(), "3.1c");
    }
}
