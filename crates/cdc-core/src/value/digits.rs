//! Runs of ASCII digits, found eight bytes at a time: every integer,
//! `numeric` and timestamp column of every change is made of them.

/// The number of ASCII digits `s` starts with.
///
/// ```
/// assert_eq!(cdc_core::leading_digits(b"314159.0000"), 6);
/// assert_eq!(cdc_core::leading_digits(b"-1"), 0);
/// assert_eq!(cdc_core::leading_digits(b"1234567890"), 10);
/// ```
#[inline]
pub fn leading_digits(s: &[u8]) -> usize {
    const ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);
    const SIXES: u64 = u64::from_le_bytes([6; 8]);
    const HIGH: u64 = u64::from_le_bytes([0xf0; 8]);
    let mut words = s.chunks_exact(8);
    let mut n = 0;
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        // A digit XOR `0` is its value `v`, below 10 exactly when neither
        // `v` nor `v + 6` reaches 16. A byte's carry from `+ 6` (at 0xfa and
        // above) only reaches the bytes after it, past the first non-digit.
        let x = u64::from_le_bytes(bytes) ^ ZEROS;
        let not_digits = (x | x.wrapping_add(SIXES)) & HIGH;
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
