//! The two kinds of quantity a setting holds, read as meant or refused with a hint: durations
//! (every `CCS_*_MS` variable and `@ccs_idle_kill_ms`) and memory sizes (`CCS_ENGINE_MEM_HIGH`,
//! `CCS_ENGINE_SESSION_MEM_MAX`, `CCS_AUDIT_MAX_BYTES`). Pure functions; every caller names its
//! variable in its own error.
//!
//! Durations: a bare whole number is milliseconds (as it always was); a whole number with one
//! unit, `ms`, `s`, `m` (minutes), `h`, `d`, is that many of it. Nothing else: no fractions, no
//! `1h30m`, no upper-case units (`1M` could be a month or a megabyte), no words. (`humantime`
//! reads `1M` as a month, refuses a bare number, and takes `1h 30m` and `5 seconds`: not these
//! semantics, so a small parser with table tests instead.)
//!
//! Sizes: a whole number with an optional unit `B`, `K`, `M`, `G`, `T` (also `KiB`, `MB`, ...;
//! any case; all powers of 1024, as Docker's are), or for a threshold a percentage `P%`
//! (0 < P <= 100) of the watched limit.

use serde::Serialize;

/// How a memory threshold is given.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum MemThreshold {
    Bytes(u64),
    /// A percentage of the host (or cgroup) limit.
    Percent(f64),
}

const MS_PER: &[(&str, u64)] = &[
    ("ms", 1),
    ("s", 1000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// What a duration should look like, for error messages.
pub const DURATION_HINT: &str =
    "a whole number of milliseconds, or a whole number with a unit: 500ms, 90s, 30m, 1h, 2d";

/// A duration in milliseconds, and whether it carried a unit (a bare number is milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis {
    pub ms: u64,
    pub bare: bool,
}

/// Read a duration: `1800000`, `500ms`, `90s`, `30m`, `1h`, `2d` (spaces around it, or between the
/// number and its unit, are allowed). `None` for anything else, and for what overflows.
pub fn parse_duration(s: &str) -> Option<Millis> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return None;
    }
    let n: u64 = num.parse().ok()?;
    let unit = unit.trim_start();
    if unit.is_empty() {
        return Some(Millis { ms: n, bare: true });
    }
    let (_, per) = MS_PER.iter().find(|(u, _)| *u == unit)?;
    Some(Millis {
        ms: n.checked_mul(*per)?,
        bare: false,
    })
}

/// The smallest bare number taken as a size: below it, a bare number is refused (`85` is 85
/// bytes, which nobody means).
pub const MIN_BARE_SIZE: u64 = 1 << 20;

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// Not a size at all.
    Garbage,
    /// A bare number under [`MIN_BARE_SIZE`]: could mean bytes, a percentage or megabytes.
    Ambiguous(u64),
}

/// `12G`, `800M`, `1048576`, `512KiB`, or `85%`. A bare number is bytes, and must be at least
/// [`MIN_BARE_SIZE`]; with a unit, any size above 0.
pub fn parse_mem_threshold(s: &str) -> Result<MemThreshold, SizeError> {
    let t = s.trim();
    if let Some(p) = t.strip_suffix('%') {
        let v: f64 = p.trim().parse().map_err(|_| SizeError::Garbage)?;
        return if v > 0.0 && v <= 100.0 {
            Ok(MemThreshold::Percent(v))
        } else {
            Err(SizeError::Garbage)
        };
    }
    let bytes = parse_bytes(t).ok_or(SizeError::Garbage)?;
    if bytes.bare && bytes.n < MIN_BARE_SIZE {
        return Err(SizeError::Ambiguous(bytes.n));
    }
    Ok(MemThreshold::Bytes(bytes.n))
}

/// A memory size above 0, as [`parse_mem_threshold`] without the percentage.
pub fn parse_mem_size(s: &str) -> Result<u64, SizeError> {
    match parse_mem_threshold(s)? {
        MemThreshold::Bytes(b) => Ok(b),
        MemThreshold::Percent(_) => Err(SizeError::Garbage),
    }
}

/// A file size above 0 (`CCS_AUDIT_MAX_BYTES`): a bare number is bytes, however small.
pub fn parse_size(s: &str) -> Option<u64> {
    parse_bytes(s.trim()).map(|b| b.n)
}

struct Bytes {
    n: u64,
    bare: bool,
}

fn parse_bytes(t: &str) -> Option<Bytes> {
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let unit = unit.trim().to_ascii_lowercase();
    let bare = unit.is_empty();
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    let n = n.checked_mul(mult)?;
    (n > 0).then_some(Bytes { n, bare })
}

/// The hint for a refused size: `85 is 85 bytes; did you mean 85% or 85M?`.
pub fn size_hint(n: u64, percent_allowed: bool) -> String {
    let pct = if percent_allowed && n <= 100 {
        format!("{n}% or ")
    } else {
        String::new()
    };
    format!(
        "{n} is {n} bytes; did you mean {pct}{n}M? (a bare number of bytes must be at least 1048576; write the unit, 512K or 2000B, to mean it)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ms = |ms| Some(Millis { ms, bare: false });
        let bare = |ms| Some(Millis { ms, bare: true });
        let table: &[(&str, Option<Millis>)] = &[
            ("1800000", bare(1_800_000)),
            (" 5000 ", bare(5000)),
            ("0", bare(0)),
            ("500ms", ms(500)),
            ("90s", ms(90_000)),
            ("30m", ms(1_800_000)),
            ("1h", ms(3_600_000)),
            ("2d", ms(172_800_000)),
            ("0s", ms(0)),
            ("90 s", ms(90_000)),
            (" 1h ", ms(3_600_000)),
            // Refused: ambiguous, fractional, compound, signed, words, overflow.
            ("1M", None),
            ("1H", None),
            ("1.5h", None),
            ("1.5", None),
            ("1h30m", None),
            ("-5", None),
            ("+5", None),
            ("s", None),
            ("", None),
            ("ten minutes", None),
            ("5 seconds", None),
            ("5sec", None),
            ("1w", None),
            ("18446744073709551615", bare(u64::MAX)),
            ("18446744073709551615d", None),
            ("99999999999999999999", None),
        ];
        for (s, want) in table {
            assert_eq!(parse_duration(s), *want, "{s:?}");
        }
    }

    #[test]
    fn memory_thresholds() {
        use SizeError::*;
        let b = |n| Ok(MemThreshold::Bytes(n));
        let table: &[(&str, Result<MemThreshold, SizeError>)] = &[
            ("1048576", b(1 << 20)),
            ("800M", b(800 << 20)),
            ("800MiB", b(800 << 20)),
            ("800 MB", b(800 << 20)),
            ("12g", b(12 << 30)),
            ("12GB", b(12 << 30)),
            ("512k", b(512 << 10)),
            ("1K", b(1024)),
            ("2T", b(2 << 40)),
            ("50%", Ok(MemThreshold::Percent(50.0))),
            ("85 %", Ok(MemThreshold::Percent(85.0))),
            ("12.5%", Ok(MemThreshold::Percent(12.5))),
            ("100%", Ok(MemThreshold::Percent(100.0))),
            // A bare number under 1 MiB: bytes nobody means.
            ("85", Err(Ambiguous(85))),
            ("1", Err(Ambiguous(1))),
            ("1048575", Err(Ambiguous(1_048_575))),
            ("0", Err(Garbage)),
            ("0%", Err(Garbage)),
            ("120%", Err(Garbage)),
            ("%", Err(Garbage)),
            ("G", Err(Garbage)),
            ("1.5G", Err(Garbage)),
            ("12X", Err(Garbage)),
            ("512B", b(512)),
            ("12ib", Err(Garbage)),
            ("12kibb", Err(Garbage)),
            ("-1", Err(Garbage)),
            ("lots", Err(Garbage)),
            ("99999999999999T", Err(Garbage)),
        ];
        for (s, want) in table {
            assert_eq!(parse_mem_threshold(s), *want, "{s:?}");
        }
        assert_eq!(parse_mem_size("1500M"), Ok(1500 << 20));
        assert_eq!(parse_mem_size("50%"), Err(Garbage));
        assert_eq!(parse_mem_size("85"), Err(Ambiguous(85)));
    }

    #[test]
    fn file_sizes_take_any_bare_number() {
        let table: &[(&str, Option<u64>)] = &[
            ("2000", Some(2000)),
            (" 1M ", Some(1 << 20)),
            ("512KiB", Some(512 << 10)),
            ("0", None),
            ("0K", None),
            ("10%", None),
            ("1.5M", None),
        ];
        for (s, want) in table {
            assert_eq!(parse_size(s), *want, "{s:?}");
        }
    }

    #[test]
    fn hints() {
        assert!(size_hint(85, true).starts_with("85 is 85 bytes; did you mean 85% or 85M?"));
        assert!(size_hint(500, true).starts_with("500 is 500 bytes; did you mean 500M?"));
        assert!(size_hint(85, false).starts_with("85 is 85 bytes; did you mean 85M?"));
    }
}
