//! Property tests: no input panics, and values survive the round trips PostgreSQL
//! performs (text rendered per the server's rules, binary built per its send format).
//!
//! Failing cases are printed with their seed by proptest and can be replayed with
//! `PROPTEST_CASES`/the persisted regression file.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cdc_core::{
    decode_binary, decode_text, types, Date, Inet, Infinitable, Interval, Time, TimeTz, Timestamp,
    TimestampTz, Value,
};
use proptest::prelude::*;

fn all_oids() -> Vec<u32> {
    let mut oids: Vec<u32> = types::SCALARS.to_vec();
    oids.extend(types::array_types());
    oids.extend([0, 603, 98_765, u32::MAX]);
    oids
}

/// Characters the parsers care about, so random text reaches deep into them.
fn syntax_char() -> impl Strategy<Value = char> {
    prop_oneof![
        prop::sample::select(vec![
            '0', '1', '2', '9', '-', '+', ':', '.', ' ', '/', '{', '}', '[', ']', '=', '"', '\\',
            ',', ';', 'x', 'e', 'B', 'C', 'N', 'U', 'L', 'a', 'f', 'y', 'd', 's', 'n', 'i', 't',
        ]),
        any::<char>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..48)) {
        for oid in all_oids() {
            let _ = decode_text(oid, &raw);
            let _ = decode_binary(oid, &raw);
        }
    }

    #[test]
    fn syntax_shaped_text_never_panics(s in prop::collection::vec(syntax_char(), 0..40)) {
        let text: String = s.into_iter().collect();
        for oid in all_oids() {
            if let Ok(v) = decode_text(oid, text.as_bytes()) {
                // Whatever decodes must also survive detaching from the buffer.
                let _ = v.into_owned();
            }
        }
    }

    #[test]
    fn binary_shaped_arrays_never_panic(
        ndim in 0i32..8,
        flags in 0i32..3,
        dims in prop::collection::vec((-2i32..5, any::<i32>()), 0..7),
        tail in prop::collection::vec(any::<u8>(), 0..64),
        array_oid in prop::sample::select(types::array_types().collect::<Vec<_>>()),
    ) {
        let element = types::element_type(array_oid).unwrap();
        let mut raw = Vec::new();
        raw.extend_from_slice(&ndim.to_be_bytes());
        raw.extend_from_slice(&flags.to_be_bytes());
        raw.extend_from_slice(&element.to_be_bytes());
        for (len, lb) in &dims {
            raw.extend_from_slice(&len.to_be_bytes());
            raw.extend_from_slice(&lb.to_be_bytes());
        }
        raw.extend_from_slice(&tail);
        let _ = decode_binary(array_oid, &raw);
    }
}

// ---- numeric: decimal text -> send format (built here) -> decode -> same decimal ----

/// Encode a decimal string as `numeric_send` does: base-10000 digits aligned on the
/// decimal point, leading/trailing zero digits stripped, dscale = fraction length.
fn numeric_send(neg: bool, int: &str, frac: &str) -> Vec<u8> {
    let pad_int = (4 - int.len() % 4) % 4;
    let pad_frac = (4 - frac.len() % 4) % 4;
    let digits: String = "0".repeat(pad_int) + int + frac + &"0".repeat(pad_frac);
    let mut groups: Vec<i16> = digits
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap().parse().unwrap())
        .collect();
    let mut weight = ((pad_int + int.len()) / 4) as i16 - 1;
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(groups.len() as u16).to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&(if neg { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&(frac.len() as u16).to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    out
}

/// What `numeric_out` prints for that decimal: no leading zeros, no negative zero.
fn numeric_out(neg: bool, int: &str, frac: &str) -> String {
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let zero = int == "0" && frac.bytes().all(|b| b == b'0');
    let mut s = String::new();
    if neg && !zero {
        s.push('-');
    }
    s.push_str(int);
    if !frac.is_empty() {
        s.push('.');
        s.push_str(frac);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn numeric_binary_round_trip(
        neg in any::<bool>(),
        int in prop_oneof!["0", "0{1,6}", "[0-9]{1,45}", "[1-9]0{3,9}"],
        frac in prop_oneof!["", "[0-9]{1,45}", "0{1,9}", "[0-9]{0,3}0{4,12}"],
    ) {
        let raw = numeric_send(neg, &int, &frac);
        let Value::Numeric(n) = decode_binary(types::NUMERIC, &raw).unwrap() else {
            panic!("not numeric")
        };
        let expected = numeric_out(neg, &int, &frac);
        prop_assert_eq!(n.as_str(), expected.as_str());
        prop_assert_eq!(n.scale(), Some(frac.len()));
        // The server's text form of the same value decodes to the same string.
        let Value::Numeric(t) = decode_text(types::NUMERIC, expected.as_bytes()).unwrap() else {
            panic!("not numeric")
        };
        prop_assert_eq!(t, n);
    }
}

// ---- arrays: structure -> array_out text / array_send binary -> decode -> structure ----

/// `array_out`'s quoting: quote when empty, `NULL` in any case, or containing
/// `"`, `\`, `{`, `}`, the delimiter or whitespace; escape `"` and `\` inside quotes.
fn quote_element(s: &str) -> String {
    let needs = s.is_empty()
        || s.eq_ignore_ascii_case("NULL")
        || s.bytes().any(|b| {
            matches!(
                b,
                b'"' | b'\\'
                    | b'{'
                    | b'}'
                    | b','
                    | b' '
                    | b'\t'
                    | b'\n'
                    | b'\r'
                    | b'\x0b'
                    | b'\x0c'
            )
        });
    if !needs {
        return s.to_string();
    }
    let mut out = String::from("\"");
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn render(dims: &[usize], items: &[Option<String>]) -> String {
    if dims.is_empty() {
        return match items.first() {
            Some(Some(s)) => quote_element(s),
            _ => "NULL".into(),
        };
    }
    let stride: usize = dims[1..].iter().product();
    let parts: Vec<String> = (0..dims[0])
        .map(|i| render(&dims[1..], &items[i * stride..(i + 1) * stride]))
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn array_send(element: u32, dims: &[(usize, i32)], items: &[Option<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(dims.len() as i32).to_be_bytes());
    out.extend_from_slice(&i32::from(items.iter().any(Option::is_none)).to_be_bytes());
    out.extend_from_slice(&element.to_be_bytes());
    for (len, lb) in dims {
        out.extend_from_slice(&(*len as i32).to_be_bytes());
        out.extend_from_slice(&lb.to_be_bytes());
    }
    for item in items {
        match item {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    out
}

fn element_text() -> impl Strategy<Value = Option<String>> {
    let tricky = prop::collection::vec(
        prop_oneof![
            prop::sample::select(vec![
                '"', '\\', '{', '}', ',', ' ', '\t', '\n', 'N', 'U', 'L', 'a', 'é', '𝄞',
            ]),
            any::<char>().prop_filter("no NUL in PostgreSQL text", |c| *c != '\0'),
        ],
        0..8,
    )
    .prop_map(|cs| cs.into_iter().collect::<String>());
    prop_oneof![
        1 => Just(None),
        1 => prop::sample::select(vec!["NULL", "null", "", " ", "a b"]).prop_map(|s| Some(s.to_string())),
        6 => tricky.prop_map(Some),
    ]
}

/// 1 to 3 dimensions of 1 to 3 elements, lower bounds, and the elements.
fn shape() -> impl Strategy<Value = Vec<(usize, i32)>> {
    prop::collection::vec(
        (1usize..4, prop_oneof![3 => Just(1i32), 1 => -5i32..5]),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn text_array_round_trip(
        (dims, items) in shape().prop_flat_map(|dims| {
            let n: usize = dims.iter().map(|d| d.0).product();
            (Just(dims), prop::collection::vec(element_text(), n))
        })
    ) {
        let lens: Vec<usize> = dims.iter().map(|d| d.0).collect();
        let mut text = String::new();
        if dims.iter().any(|d| d.1 != 1) {
            for (len, lb) in &dims {
                text.push_str(&format!("[{}:{}]", lb, lb + *len as i32 - 1));
            }
            text.push('=');
        }
        text.push_str(&render(&lens, &items));
        let Value::Array(a) = decode_text(types::TEXT_ARRAY, text.as_bytes())
            .map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?
        else {
            panic!("not an array")
        };
        let got_dims: Vec<(usize, i32)> =
            a.dims().iter().map(|d| (d.len as usize, d.lower_bound)).collect();
        prop_assert_eq!(&got_dims, &dims, "{}", text);
        let got: Vec<Option<String>> = a
            .elements()
            .iter()
            .map(|e| match e {
                Value::Null => None,
                Value::Text(s) => Some(s.to_string()),
                other => panic!("{other:?}"),
            })
            .collect();
        prop_assert_eq!(&got, &items, "{}", text);

        // The same structure in binary form decodes to the same array.
        let bin_items: Vec<Option<Vec<u8>>> =
            items.iter().map(|i| i.as_ref().map(|s| s.as_bytes().to_vec())).collect();
        let raw = array_send(types::TEXT, &dims, &bin_items);
        let Value::Array(b) = decode_binary(types::TEXT_ARRAY, &raw).unwrap() else {
            panic!("not an array")
        };
        prop_assert_eq!(b, a);
    }

    #[test]
    fn int_array_round_trip(
        (dims, items) in shape().prop_flat_map(|dims| {
            let n: usize = dims.iter().map(|d| d.0).product();
            (Just(dims), prop::collection::vec(prop::option::weighted(0.8, any::<i32>()), n))
        })
    ) {
        let lens: Vec<usize> = dims.iter().map(|d| d.0).collect();
        let strs: Vec<Option<String>> = items.iter().map(|i| i.map(|v| v.to_string())).collect();
        let text = render(&lens, &strs);
        let Value::Array(a) = decode_text(types::INT4_ARRAY, text.as_bytes()).unwrap() else {
            panic!("not an array")
        };
        let expected: Vec<Value<'_>> =
            items.iter().map(|i| i.map_or(Value::Null, Value::Int4)).collect();
        prop_assert_eq!(a.elements(), &expected[..]);
        let bin_items: Vec<Option<Vec<u8>>> =
            items.iter().map(|i| i.map(|v| v.to_be_bytes().to_vec())).collect();
        let ones: Vec<(usize, i32)> = lens.iter().map(|l| (*l, 1)).collect();
        let raw = array_send(types::INT4, &ones, &bin_items);
        let Value::Array(b) = decode_binary(types::INT4_ARRAY, &raw).unwrap() else {
            panic!("not an array")
        };
        prop_assert_eq!(b, a);
    }
}

// ---- date/time: Display (the server's format) -> decode_text -> same value ----

const MIN_DATE: i32 = -2_451_545;
const END_DATE: i32 = 2_147_483_494 - 2_451_545;
const MIN_TS: i64 = -211_813_488_000_000_000;
const END_TS: i64 = 9_223_371_331_200_000_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn date_text_and_binary_round_trip(days in MIN_DATE..END_DATE) {
        let d = Date::from_days_since_2000(days).unwrap();
        let raw = days.to_be_bytes();
        let from_bin = decode_binary(types::DATE, &raw).unwrap();
        prop_assert_eq!(&from_bin, &Value::Date(Infinitable::Finite(d)));
        let text = d.to_string();
        prop_assert_eq!(decode_text(types::DATE, text.as_bytes()).unwrap(), from_bin, "{}", text);
        let (y, m, dd) = d.ymd();
        prop_assert_eq!(Date::from_ymd(y, m, dd), Some(d));
    }

    #[test]
    fn timestamp_round_trip(micros in prop_oneof![MIN_TS..END_TS, -1_000_000_000_000i64..1_000_000_000_000]) {
        let ts = Timestamp::from_micros_since_2000(micros).unwrap();
        let text = ts.to_string();
        prop_assert_eq!(
            decode_text(types::TIMESTAMP, text.as_bytes()).unwrap(),
            Value::Timestamp(Infinitable::Finite(ts)),
            "{}", text
        );
        let tz = TimestampTz::from_micros_since_2000(micros).unwrap();
        let text = tz.to_string();
        prop_assert_eq!(
            decode_text(types::TIMESTAMPTZ, text.as_bytes()).unwrap(),
            Value::TimestampTz(Infinitable::Finite(tz)),
            "{}", text
        );
        prop_assert_eq!(Timestamp::new(ts.date(), ts.time()), Some(ts));
    }

    #[test]
    fn time_and_timetz_round_trip(micros in 0i64..=86_400_000_000, offset in -57_539i32..=57_539) {
        let t = Time::from_micros(micros).unwrap();
        let text = t.to_string();
        prop_assert_eq!(decode_text(types::TIME, text.as_bytes()).unwrap(), Value::Time(t));
        let tz = TimeTz::new(t, offset).unwrap();
        let text = tz.to_string();
        prop_assert_eq!(decode_text(types::TIMETZ, text.as_bytes()).unwrap(), Value::TimeTz(tz), "{}", text);
    }

    #[test]
    fn interval_round_trip(months in any::<i32>(), days in any::<i32>(), micros in prop_oneof![any::<i64>(), -100_000_000_000i64..100_000_000_000]) {
        let iv = Interval { months, days, micros };
        let text = iv.to_string();
        prop_assert_eq!(decode_text(types::INTERVAL, text.as_bytes()).unwrap(), Value::Interval(iv), "{}", text);
        let mut raw = micros.to_be_bytes().to_vec();
        raw.extend_from_slice(&days.to_be_bytes());
        raw.extend_from_slice(&months.to_be_bytes());
        prop_assert_eq!(decode_binary(types::INTERVAL, &raw).unwrap(), Value::Interval(iv));
    }

    #[test]
    fn inet_round_trip(
        v6 in any::<bool>(),
        bytes in any::<[u8; 16]>(),
        lead in 0usize..9,
        zeros in prop::collection::vec(0usize..8, 0..6),
        ffff in any::<bool>(),
        bits in any::<u8>(),
    ) {
        let addr = if v6 {
            // Zero out some words so the `::` and embedded-IPv4 forms come up.
            let mut words: [u16; 8] = core::array::from_fn(|i| u16::from_be_bytes([bytes[2 * i], bytes[2 * i + 1]]));
            for z in zeros.into_iter().chain(0..lead) {
                words[z] = 0;
            }
            if ffff && lead == 5 {
                words[5] = 0xffff;
            }
            IpAddr::V6(Ipv6Addr::from(words))
        } else {
            IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
        };
        let max = if v6 { 128 } else { 32 };
        let bits = bits % (max + 1);
        let inet = Inet::new_inet(addr, bits).unwrap();
        let text = inet.to_string();
        if let IpAddr::V6(a) = addr {
            // PostgreSQL's compression is RFC 5952's (as std prints it) except that
            // six leading zero words, or five and ffff, print the last 32 bits as IPv4.
            let w = a.segments();
            let v4_tail = w[..5] == [0; 5] && (w[5] == 0xffff || (w[5] == 0 && w[6] != 0));
            let host = text.split('/').next().unwrap();
            if v4_tail {
                let o = a.octets();
                prop_assert!(host.ends_with(&format!(":{}.{}.{}.{}", o[12], o[13], o[14], o[15])), "{}", text);
            } else {
                prop_assert_eq!(host, a.to_string());
            }
        }
        prop_assert_eq!(decode_text(types::INET, text.as_bytes()).unwrap(), Value::Inet(inet), "{}", text);
        // The network of that address, as a cidr.
        let masked = match addr {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0))),
            IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0))),
        };
        let cidr = Inet::new_cidr(masked, bits).unwrap();
        let text = cidr.to_string();
        prop_assert_eq!(decode_text(types::CIDR, text.as_bytes()).unwrap(), Value::Inet(cidr), "{}", text);
    }
}

/// An implementation of the calendar independent of the crate's: step day by day.
#[test]
fn calendar_matches_naive_day_counting() {
    fn leap(y: i32) -> bool {
        y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
    }
    fn month_len(y: i32, m: u32) -> u32 {
        [
            31,
            if leap(y) { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ][m as usize - 1]
    }
    // Forward from 2000-01-01 for ~550 years.
    let (mut y, mut m, mut d) = (2000, 1, 1);
    for days in 0..200_000 {
        let date = Date::from_days_since_2000(days).unwrap();
        assert_eq!(date.ymd(), (y, m, d), "day {days}");
        d += 1;
        if d > month_len(y, m) {
            d = 1;
            m += 1;
            if m > 12 {
                m = 1;
                y += 1;
            }
        }
    }
    // Backward to 4714-11-24 BC (astronomical -4713), the first valid date.
    let (mut y, mut m, mut d) = (1999, 12, 31);
    for days in (MIN_DATE..0).rev() {
        let date = Date::from_days_since_2000(days).unwrap();
        assert_eq!(date.ymd(), (y, m, d), "day {days}");
        if d > 1 {
            d -= 1;
        } else {
            if m > 1 {
                m -= 1;
            } else {
                m = 12;
                y -= 1;
            }
            d = month_len(y, m);
        }
    }
    assert_eq!((y, m, d), (-4713, 11, 23));
}
