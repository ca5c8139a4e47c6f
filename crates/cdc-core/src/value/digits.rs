//! Runs of ASCII digits, found eight bytes at a time: every integer,
//! `numeric` and timestamp column of every change is made of them.

/// Eight bytes of text to match: an ASCII digit where the pattern has `0`,
/// the pattern's own byte everywhere else; all eight checked at once.
pub(crate) struct Pattern {
    text: u64,
    /// 6 in each digit's byte: a value `v` is below 10 exactly when neither
    /// `v` nor `v + 6` reaches 16.
    add: u64,
    /// The bits that must be clear: a digit's high half, all of any other byte.
    high: u64,
}

impl Pattern {
    pub(crate) const fn new(pattern: &[u8; 8]) -> Pattern {
        let (mut add, mut high, mut i) = ([0u8; 8], [0xffu8; 8], 0);
        while i < 8 {
            if pattern[i] == b'0' {
                add[i] = 6;
                high[i] = 0xf0;
            }
            i += 1;
        }
        Pattern {
            text: u64::from_le_bytes(*pattern),
            add: u64::from_le_bytes(add),
            high: u64::from_le_bytes(high),
        }
    }

    /// `bytes` XOR the pattern (a digit's value in its place, 0 for a
    /// matching byte elsewhere), and a mask with bits set in every byte
    /// that does not fit. A byte's carry from `+ 6` (at 0xfa and above)
    /// only reaches the bytes after it, so the lowest byte flagged is the
    /// first that does not fit.
    #[inline(always)]
    pub(crate) fn check(&self, bytes: [u8; 8]) -> (u64, u64) {
        let x = u64::from_le_bytes(bytes) ^ self.text;
        (x, (x | x.wrapping_add(self.add)) & self.high)
    }

    /// The digits' values (0–9) in their places and 0 in the others, if
    /// `bytes` fits the pattern.
    #[inline(always)]
    pub(crate) fn digits(&self, bytes: [u8; 8]) -> Option<[u8; 8]> {
        let (x, misfits) = self.check(bytes);
        (misfits == 0).then(|| x.to_le_bytes())
    }
}

/// The number of ASCII digits `s` starts with.
///
/// ```
/// assert_eq!(cdc_core::leading_digits(b"314159.0000"), 6);
/// assert_eq!(cdc_core::leading_digits(b"-1"), 0);
/// assert_eq!(cdc_core::leading_digits(b"1234567890"), 10);
/// ```
#[inline]
pub fn leading_digits(s: &[u8]) -> usize {
    const DIGITS: Pattern = Pattern::new(b"00000000");
    let mut words = s.chunks_exact(8);
    let mut n = 0;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let (_, not_digits) = DIGITS.check(bytes);
        if not_digits != 0 {
            return n + (not_digits.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + words
        .remainder()
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The same count as reading one byte at a time, on text that is
        /// mostly digits with anything else here and there.
        #[test]
        fn counts_as_bytewise(s in proptest::collection::vec(
            prop_oneof![8 => b'0'..=b'9', 1 => any::<u8>()], 0..40)
        ) {
            prop_assert_eq!(
                leading_digits(&s),
                s.iter().take_while(|b| b.is_ascii_digit()).count()
            );
        }
    }

    #[test]
    fn every_byte_value_in_every_place_of_a_word() {
        for at in 0..8 {
            for b in 0..=u8::MAX {
                let mut s = *b"1234567890";
                s[at] = b;
                let want = s.iter().take_while(|b| b.is_ascii_digit()).count();
                assert_eq!(leading_digits(&s), want, "{s:?}");
            }
        }
    }
}
