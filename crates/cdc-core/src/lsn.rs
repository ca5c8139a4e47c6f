//! [`Lsn`]: a position in the PostgreSQL write-ahead log.

use std::fmt;
use std::str::FromStr;

/// A WAL position (PostgreSQL's `pg_lsn`), written `16/B374D848`.
///
/// A checked newtype over the server's 64-bit byte position, so no public
/// signature in pgcdc passes a raw `u64` where a position is meant. Ordering is
/// the WAL order; [`Lsn::INVALID`] (`0/0`) is the server's "no position".
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(u64);

impl Lsn {
    /// `0/0`: the server's invalid / unset position.
    pub const INVALID: Lsn = Lsn(0);
    /// The greatest representable position, `FFFFFFFF/FFFFFFFF`.
    pub const MAX: Lsn = Lsn(u64::MAX);

    /// The position at this byte offset of the WAL.
    pub const fn from_u64(value: u64) -> Self {
        Lsn(value)
    }

    /// The byte offset of this position, as the wire protocol carries it.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// Whether this is `0/0`.
    pub const fn is_invalid(self) -> bool {
        self.0 == 0
    }

    /// This position moved `bytes` forward, or `None` on overflow.
    pub const fn checked_add(self, bytes: u64) -> Option<Lsn> {
        match self.0.checked_add(bytes) {
            Some(v) => Some(Lsn(v)),
            None => None,
        }
    }

    /// This position moved `bytes` back, or `None` below `0/0`.
    pub const fn checked_sub(self, bytes: u64) -> Option<Lsn> {
        match self.0.checked_sub(bytes) {
            Some(v) => Some(Lsn(v)),
            None => None,
        }
    }

    /// The number of WAL bytes from `earlier` to `self`, or `None` when
    /// `earlier` is after `self`.
    pub const fn bytes_since(self, earlier: Lsn) -> Option<u64> {
        self.0.checked_sub(earlier.0)
    }

    /// The distance in bytes between two positions, whichever comes first.
    pub const fn abs_diff(self, other: Lsn) -> u64 {
        self.0.abs_diff(other.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lsn({self})")
    }
}

/// The text was not a position in PostgreSQL's `X/Y` form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid LSN {input:?}: expected two hexadecimal numbers of at most 8 digits, as in 16/B374D848")]
pub struct ParseLsnError {
    input: String,
}

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError {
            input: s.chars().take(64).collect(),
        };
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        let half = |part: &str| -> Result<u64, ParseLsnError> {
            if part.is_empty() || part.len() > 8 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            u64::from_str_radix(part, 16).map_err(|_| err())
        };
        Ok(Lsn((half(hi)? << 32) | half(lo)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_displays_server_form() {
        let lsn: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(lsn.as_u64(), 0x16_B374_D848);
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn::INVALID);
        assert_eq!("ffffffff/ffffffff".parse::<Lsn>().unwrap(), Lsn::MAX);
        assert_eq!(Lsn::from_u64(0x1_0000_0000).to_string(), "1/0");
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "/",
            "1/",
            "/1",
            "16B374D848",
            "1/2/3",
            "G/0",
            "123456789/0",
            "0/123456789",
            "+1/0",
            " 1/0",
            "1/-0",
        ] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn arithmetic_is_checked() {
        let a = Lsn::from_u64(100);
        assert_eq!(a.checked_add(28), Some(Lsn::from_u64(128)));
        assert_eq!(Lsn::MAX.checked_add(1), None);
        assert_eq!(a.checked_sub(101), None);
        assert_eq!(Lsn::from_u64(150).bytes_since(a), Some(50));
        assert_eq!(a.bytes_since(Lsn::from_u64(150)), None);
        assert_eq!(a.abs_diff(Lsn::from_u64(150)), 50);
        assert!(a < Lsn::from_u64(101));
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(v in any::<u64>()) {
            let lsn = Lsn::from_u64(v);
            prop_assert_eq!(lsn.to_string().parse::<Lsn>().unwrap(), lsn);
            prop_assert_eq!(lsn.to_string().to_lowercase().parse::<Lsn>().unwrap(), lsn);
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let _ = s.parse::<Lsn>();
        }
    }
}
