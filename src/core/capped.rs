//! The one bounded read: a reader taken to its end, never past a cap. Pure over any
//! [`std::io::Read`] (the caller opens the file, stdin or pipe); what a size claims is never
//! trusted (a file growing under us, a `/proc` file that says 0), so it reads one byte past the cap
//! and refuses if that byte came.

use std::io::Read;

/// What [`read`] found: the bytes, or that there were more than the cap.
#[derive(Debug, PartialEq, Eq)]
pub enum Capped {
    /// The whole content, at most the cap.
    Whole(Vec<u8>),
    /// More than the cap came (nothing past the cap plus one byte was read).
    TooLarge,
}

/// The most reserved up front from a size hint: a hint can lie; the buffer grows past it as needed.
const MAX_RESERVE: u64 = 1 << 20;

/// Read `r` to its end, at most `cap` bytes (`hint`: the size to reserve, at most the cap and
/// [`MAX_RESERVE`]).
pub fn read(r: impl Read, cap: u64, hint: u64) -> std::io::Result<Capped> {
    let reserve = hint.min(cap).min(MAX_RESERVE);
    let mut buf = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
    r.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Ok(Capped::TooLarge);
    }
    Ok(Capped::Whole(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_to_the_cap_and_refuses_one_byte_past_it() {
        let table: &[(&[u8], u64, Capped)] = &[
            (b"", 0, Capped::Whole(vec![])),
            (b"", 4, Capped::Whole(vec![])),
            (b"abcd", 4, Capped::Whole(b"abcd".to_vec())),
            (b"abcde", 4, Capped::TooLarge),
            (b"a", 0, Capped::TooLarge),
            (b"abc", u64::MAX, Capped::Whole(b"abc".to_vec())),
        ];
        for (input, cap, want) in table {
            assert_eq!(
                &read(*input, *cap, 1 << 40).unwrap(),
                want,
                "{input:?} cap {cap}"
            );
        }
    }

    #[test]
    fn never_reads_more_than_one_byte_past_the_cap() {
        // An endless reader: the read must still end.
        let endless = std::io::repeat(b'x');
        assert_eq!(read(endless, 1000, 0).unwrap(), Capped::TooLarge);
    }
}
