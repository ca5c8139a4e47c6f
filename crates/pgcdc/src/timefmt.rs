//! RFC 3339 UTC timestamps for `pgcdc checkpoints` and `pgcdc slot status`.
//!
//! A dozen lines of calendar arithmetic (Howard Hinnant's `civil_from_days`)
//! instead of a date crate: only UTC formatting is needed, never parsing,
//! time zones or leap seconds.

/// `unix_micros` (microseconds since 1970-01-01T00:00:00Z) as
/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
pub fn rfc3339_micros(unix_micros: i64) -> String {
    let secs = unix_micros.div_euclid(1_000_000);
    let micros = unix_micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date of `days` since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both are within their ranges above, so the casts cannot truncate.
    (year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_micros(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339_micros(-1), "1969-12-31T23:59:59.999999Z");
        // The raw value a user saw: 1796129454.977901.
        assert_eq!(
            rfc3339_micros(1_796_129_454_977_901),
            "2026-12-01T12:50:54.977901Z"
        );
        // Leap days, and the century rules (2000 is a leap year, 2100 not).
        assert_eq!(
            rfc3339_micros(951_782_400_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
        assert_eq!(
            rfc3339_micros(4_107_542_400_000_000),
            "2100-03-01T00:00:00.000000Z"
        );
        assert_eq!(
            rfc3339_micros(1_709_164_799_000_001),
            "2024-02-28T23:59:59.000001Z"
        );
    }

    fn days_in_month(year: i64, month: u32) -> u32 {
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        match month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        // 1900-01-01 (day -25567) up to 2200: consecutive days give
        // consecutive dates, and a month ends on its last day.
        let mut prev = civil_from_days(-25_568);
        assert_eq!(prev, (1899, 12, 31));
        for d in -25_567..84_000 {
            let next = civil_from_days(d);
            let (y, m, day) = prev;
            let expected = if day < days_in_month(y, m) {
                (y, m, day + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(next, expected, "day {d}");
            prev = next;
        }
    }
}
