//! Text-format decoding, one test per type, with expectations worked out by hand
//! (not copied from the implementation) and the edge cases PostgreSQL prints.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use cdc_core::{
    decode_text, decode_text_array, types, ArrayDim, Date, Infinitable, Interval, Lsn, Numeric,
    Value, ValueError,
};

fn ok(oid: u32, text: &str) -> Value<'_> {
    decode_text(oid, text.as_bytes()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn err(oid: u32, text: &str) -> ValueError {
    match decode_text(oid, text.as_bytes()) {
        Ok(v) => panic!("{text:?} should be rejected, got {v:?}"),
        Err(e) => e,
    }
}

#[test]
fn bool_is_t_or_f() {
    assert_eq!(ok(types::BOOL, "t"), Value::Bool(true));
    assert_eq!(ok(types::BOOL, "f"), Value::Bool(false));
    for bad in ["", "x", "T", "yes", "tt"] {
        err(types::BOOL, bad);
    }
}

#[test]
fn integers_and_their_ranges() {
    assert_eq!(ok(types::INT2, "-32768"), Value::Int2(i16::MIN));
    assert_eq!(ok(types::INT4, "2147483647"), Value::Int4(i32::MAX));
    assert_eq!(
        ok(types::INT8, "-9223372036854775808"),
        Value::Int8(i64::MIN)
    );
    assert_eq!(ok(types::OID, "4294967295"), Value::Oid(u32::MAX));
    for bad in ["32768", "1.0", "", "-", "+1", " 1", "1e3"] {
        err(types::INT2, bad);
    }
    err(types::OID, "-1");
    err(types::INT8, "9223372036854775808");
}

#[test]
fn floats_keep_specials_and_negative_zero() {
    assert_eq!(ok(types::FLOAT8, "1e+100"), Value::Float8(1e100));
    assert_eq!(ok(types::FLOAT8, "1.5e-07"), Value::Float8(1.5e-7));
    assert_eq!(
        ok(types::FLOAT8, "-Infinity"),
        Value::Float8(f64::NEG_INFINITY)
    );
    assert_eq!(ok(types::FLOAT4, "Infinity"), Value::Float4(f32::INFINITY));
    let Value::Float8(z) = ok(types::FLOAT8, "-0") else {
        panic!()
    };
    assert!(z == 0.0 && z.is_sign_negative());
    let Value::Float8(nan) = ok(types::FLOAT8, "NaN") else {
        panic!()
    };
    assert!(nan.is_nan());
    // float4 parses straight to f32 (no double rounding through f64).
    assert_eq!(ok(types::FLOAT4, "0.1"), Value::Float4(0.1f32));
    assert_eq!(ok(types::FLOAT4, "1e-45"), Value::Float4(f32::from_bits(1)));
    for bad in ["inf", "nan", "infinity", "", "1,5", "0x10", "e"] {
        err(types::FLOAT8, bad);
    }
}

#[test]
fn numeric_is_exact_text_never_a_float() {
    let long = "123456789012345678901234567890.123456789012345678901234567890";
    let Value::Numeric(n) = ok(types::NUMERIC, long) else {
        panic!()
    };
    assert_eq!(n.as_str(), long);
    assert_eq!(n.scale(), Some(30));
    assert!(matches!(n, Numeric::Finite(Cow::Borrowed(_))), "borrowed");
    assert_eq!(
        ok(types::NUMERIC, "-1.50"),
        Value::Numeric(Numeric::Finite("-1.50".into()))
    );
    assert_eq!(
        ok(types::NUMERIC, "0.000"),
        Value::Numeric(Numeric::Finite("0.000".into()))
    );
    // Not printed by the server, but a well-formed decimal.
    assert_eq!(
        ok(types::NUMERIC, "-0"),
        Value::Numeric(Numeric::Finite("-0".into()))
    );
    assert_eq!(ok(types::NUMERIC, "NaN"), Value::Numeric(Numeric::NaN));
    assert_eq!(
        ok(types::NUMERIC, "Infinity"),
        Value::Numeric(Numeric::Infinity)
    );
    assert_eq!(
        ok(types::NUMERIC, "-Infinity"),
        Value::Numeric(Numeric::NegInfinity)
    );
    assert_eq!(Numeric::NegInfinity.scale(), None);
    for bad in [
        "", "1e5", ".5", "1.", "--1", "+1", "1.2.3", "nan", " 1", "1_000",
    ] {
        err(types::NUMERIC, bad);
    }
}

#[test]
fn strings_borrow_and_validate_utf8() {
    for oid in [types::TEXT, types::VARCHAR, types::BPCHAR, types::NAME] {
        let v = ok(oid, "üñí€𝄞 ");
        assert!(matches!(&v, Value::Text(Cow::Borrowed("üñí€𝄞 "))), "{v:?}");
    }
    assert_eq!(ok(types::TEXT, ""), Value::Text("".into()));
    let e = decode_text(types::TEXT, b"ok\xff").unwrap_err();
    assert_eq!(
        e,
        ValueError::InvalidUtf8 {
            type_oid: types::TEXT,
            valid_up_to: 2
        }
    );
}

#[test]
fn internal_char_is_one_byte() {
    assert_eq!(ok(types::CHAR, "a"), Value::Char(b'a'));
    assert_eq!(ok(types::CHAR, ""), Value::Char(0));
    assert_eq!(ok(types::CHAR, "\\303"), Value::Char(0xC3));
    assert_eq!(ok(types::CHAR, "\\"), Value::Char(b'\\'));
    for bad in ["ab", "\\400", "\\38", "é"] {
        err(types::CHAR, bad);
    }
}

#[test]
fn bytea_hex_and_escape_formats() {
    assert_eq!(
        ok(types::BYTEA, "\\x00ff41"),
        Value::Bytea(vec![0, 255, b'A'].into())
    );
    assert_eq!(ok(types::BYTEA, "\\x"), Value::Bytea(vec![].into()));
    assert_eq!(
        ok(types::BYTEA, "\\xDEADbeef"),
        Value::Bytea(vec![0xde, 0xad, 0xbe, 0xef].into())
    );
    assert_eq!(
        ok(types::BYTEA, "\\x de ad"),
        Value::Bytea(vec![0xde, 0xad].into())
    );
    // bytea_output = 'escape'
    assert_eq!(
        ok(types::BYTEA, "abc\\\\d\\001\\377"),
        Value::Bytea(b"abc\\d\x01\xff".to_vec().into())
    );
    for bad in ["\\x0", "\\xzz", "\\x0g", "a\\", "a\\9", "a\\40"] {
        err(types::BYTEA, bad);
    }
}

#[test]
fn json_and_jsonb_are_kept_verbatim() {
    let doc = "{\"a\":  [1, 2.50, \"x\"]}";
    assert!(matches!(ok(types::JSON, doc), Value::Json(Cow::Borrowed(d)) if d == doc));
    assert!(matches!(ok(types::JSONB, doc), Value::Jsonb(Cow::Borrowed(d)) if d == doc));
}

#[test]
fn uuid_accepts_the_input_spellings() {
    let expected = [
        0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a,
        0x11,
    ];
    for text in [
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
        "a0eebc999c0b4ef8bb6d6bb9bd380a11",
        "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
    ] {
        let Value::Uuid(u) = ok(types::UUID, text) else {
            panic!()
        };
        assert_eq!(u.as_bytes(), &expected, "{text}");
        assert_eq!(u.to_string(), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    }
    for bad in [
        "",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a111",
        "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc9-99c0b-4ef8-bb6d-6bb9bd380a11",
        "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11-",
    ] {
        err(types::UUID, bad);
    }
}

#[test]
fn dates_with_bc_big_years_and_infinity() {
    let Value::Date(Infinitable::Finite(d)) = ok(types::DATE, "2024-01-15") else {
        panic!()
    };
    // 24 years since 2000 with 6 leap days, plus 14 days.
    assert_eq!(d.days_since_2000(), 24 * 365 + 6 + 14);
    assert_eq!(d.ymd(), (2024, 1, 15));
    let Value::Date(Infinitable::Finite(bc)) = ok(types::DATE, "0044-03-15 BC") else {
        panic!()
    };
    assert_eq!(bc.ymd(), (-43, 3, 15), "44 BC is astronomical year -43");
    assert_eq!(bc.to_string(), "0044-03-15 BC");
    let Value::Date(Infinitable::Finite(far)) = ok(types::DATE, "10000-01-01") else {
        panic!()
    };
    assert_eq!(far.ymd(), (10000, 1, 1));
    assert_eq!(
        ok(types::DATE, "infinity"),
        Value::Date(Infinitable::Infinity)
    );
    assert_eq!(
        ok(types::DATE, "-infinity"),
        Value::Date(Infinitable::NegInfinity)
    );
    assert_eq!(
        ok(types::DATE, "0001-12-31 BC"),
        Value::Date(Infinitable::Finite(Date::from_ymd(0, 12, 31).unwrap()))
    );
    for bad in [
        "0000-01-01",
        "2023-02-29",
        "2024-13-01",
        "2024-00-10",
        "2024-01-32",
        "2024-1-15",
        "5874898-01-01",
        "4714-11-23 BC",
        "Infinity",
        "2024-01-15 AD",
        "2024-01-15 ",
    ] {
        err(types::DATE, bad);
    }
}

#[test]
fn time_allows_24_00_and_six_fraction_digits() {
    let Value::Time(t) = ok(types::TIME, "24:00:00") else {
        panic!()
    };
    assert_eq!(t.micros(), 86_400_000_000);
    let Value::Time(t) = ok(types::TIME, "04:05:06.789") else {
        panic!()
    };
    assert_eq!(t.micros(), ((4 * 60 + 5) * 60 + 6) * 1_000_000 + 789_000);
    let Value::Time(t) = ok(types::TIME, "23:59:59.999999") else {
        panic!()
    };
    assert_eq!(t.micros(), 86_400_000_000 - 1);
    for bad in [
        "24:00:00.000001",
        "23:59:60",
        "23:60:00",
        "12:00:00.1234567",
        "12:00:00.",
        "12:00",
        "1:00:00",
        "25:00:00",
    ] {
        err(types::TIME, bad);
    }
}

#[test]
fn timetz_offsets_with_minutes_and_seconds() {
    let Value::TimeTz(t) = ok(types::TIMETZ, "04:05:06.789+05:30") else {
        panic!()
    };
    assert_eq!(t.utc_offset_seconds(), 5 * 3600 + 30 * 60);
    assert_eq!(t.time().micros(), 14_706_789_000);
    let Value::TimeTz(t) = ok(types::TIMETZ, "04:05:06-03:30:15") else {
        panic!()
    };
    assert_eq!(t.utc_offset_seconds(), -(3 * 3600 + 30 * 60 + 15));
    assert_eq!(t.to_string(), "04:05:06-03:30:15");
    for bad in [
        "04:05:06",
        "04:05:06+16",
        "04:05:06+05:60",
        "04:05:06+5:30x",
    ] {
        err(types::TIMETZ, bad);
    }
}

#[test]
fn timestamps_exact_to_the_microsecond() {
    let Value::Timestamp(Infinitable::Finite(ts)) =
        ok(types::TIMESTAMP, "2024-01-15 04:05:06.123456")
    else {
        panic!()
    };
    // 2024-01-15 04:05:06 UTC is Unix time 1705291506.
    assert_eq!(ts.micros_since_unix_epoch(), Some(1_705_291_506_123_456));
    assert_eq!(
        ts.micros_since_2000(),
        (1_705_291_506 - 946_684_800) * 1_000_000 + 123_456
    );
    let Value::Timestamp(Infinitable::Finite(bc)) = ok(types::TIMESTAMP, "0001-01-01 00:00:00 BC")
    else {
        panic!()
    };
    assert_eq!(bc.date().ymd(), (0, 1, 1));
    assert_eq!(
        ok(types::TIMESTAMP, "infinity"),
        Value::Timestamp(Infinitable::Infinity)
    );
    assert_eq!(
        ok(types::TIMESTAMP, "-infinity"),
        Value::Timestamp(Infinitable::NegInfinity)
    );
    for bad in [
        "2000-01-01 24:00:00",
        "2000-01-01T00:00:00",
        "2000-01-01",
        "294277-01-01 00:00:00",
        "2000-01-01 00:00:00+00",
    ] {
        err(types::TIMESTAMP, bad);
    }
}

#[test]
fn timestamptz_applies_the_printed_offset() {
    let a = ok(types::TIMESTAMPTZ, "2024-06-01 12:00:00+05:30");
    let b = ok(types::TIMESTAMPTZ, "2024-06-01 06:30:00+00");
    let c = ok(types::TIMESTAMPTZ, "2024-06-01 02:30:00-04");
    assert_eq!(a, b);
    assert_eq!(b, c);
    let Value::TimestampTz(Infinitable::Finite(t)) = a else {
        panic!()
    };
    assert_eq!(t.to_string(), "2024-06-01 06:30:00+00");
    // A 1-hour offset across midnight and the BC boundary.
    let Value::TimestampTz(Infinitable::Finite(t)) =
        ok(types::TIMESTAMPTZ, "0001-01-01 00:30:00+01")
    else {
        panic!()
    };
    assert_eq!(t.to_string(), "0001-12-31 23:30:00+00 BC");
    err(types::TIMESTAMPTZ, "2024-06-01 12:00:00");
    err(types::TIMESTAMPTZ, "2024-06-01 12:00:00+05:30 AD");
}

#[test]
fn intervals_in_postgres_style() {
    let iv = |months, days, micros| {
        Value::Interval(Interval {
            months,
            days,
            micros,
        })
    };
    let t = |h: i64, m: i64, s: i64, us: i64| ((h * 60 + m) * 60 + s) * 1_000_000 + us;
    assert_eq!(
        ok(types::INTERVAL, "1 year 2 mons 3 days 04:05:06.789"),
        iv(14, 3, t(4, 5, 6, 789_000))
    );
    assert_eq!(
        ok(types::INTERVAL, "-1 days +02:03:00"),
        iv(0, -1, t(2, 3, 0, 0))
    );
    assert_eq!(
        ok(types::INTERVAL, "-1 years -2 mons -3 days -04:05:06.789"),
        iv(-14, -3, -t(4, 5, 6, 789_000))
    );
    assert_eq!(ok(types::INTERVAL, "00:00:00"), iv(0, 0, 0));
    assert_eq!(ok(types::INTERVAL, "-00:00:00.5"), iv(0, 0, -500_000));
    assert_eq!(ok(types::INTERVAL, "1 mon -1 days"), iv(1, -1, 0));
    assert_eq!(
        ok(types::INTERVAL, "100000:00:00"),
        iv(0, 0, t(100_000, 0, 0, 0))
    );
    assert_eq!(ok(types::INTERVAL, "1 day"), iv(0, 1, 0));
    assert_eq!(
        ok(types::INTERVAL, "-11 mons -1 days +00:00:01"),
        iv(-11, -1, 1_000_000)
    );
    for bad in [
        "",
        "@ 1 day",
        "1 fortnight",
        "1",
        "1 day ago",
        "2147483648 days",
        "178956971 years",
        "1 day 00:60:00",
        "00:00:00 1 day",
        "1  day",
        "P1D",
    ] {
        err(types::INTERVAL, bad);
    }
}

#[test]
fn inet_and_cidr() {
    let Value::Inet(i) = ok(types::INET, "192.168.1.5") else {
        panic!()
    };
    assert_eq!(i.addr(), IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)));
    assert_eq!((i.bits(), i.is_cidr()), (32, false));
    let Value::Inet(i) = ok(types::INET, "::ffff:1.2.3.4") else {
        panic!()
    };
    assert_eq!(
        i.addr(),
        IpAddr::V6(Ipv4Addr::new(1, 2, 3, 4).to_ipv6_mapped())
    );
    let Value::Inet(i) = ok(types::CIDR, "2001:db8::/32") else {
        panic!()
    };
    assert_eq!(
        i.addr(),
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0))
    );
    assert_eq!((i.bits(), i.is_cidr()), (32, true));
    assert_eq!(ok(types::CIDR, "2001:db8::/32").type_name(), "cidr");
    // inet keeps host bits, cidr refuses them.
    assert!(decode_text(types::INET, b"192.168.1.5/24").is_ok());
    for bad in ["192.168.1.5/24", "10.0.0.0/33", "::1/129"] {
        err(types::CIDR, bad);
    }
    for bad in ["1.2.3", "1.2.3.4/", "1.2.3.4/x", "::g", "", "1.2.3.4/-1"] {
        err(types::INET, bad);
    }
}

#[test]
fn mac_addresses() {
    let mac = [0x08, 0x00, 0x2b, 0x01, 0x02, 0x03];
    for text in ["08:00:2b:01:02:03", "08-00-2B-01-02-03", "08002b010203"] {
        assert_eq!(
            ok(types::MACADDR, text),
            Value::MacAddr(cdc_core::MacAddr(mac))
        );
    }
    assert_eq!(
        ok(types::MACADDR8, "08:00:2b:01:02:03:04:05"),
        Value::MacAddr8(cdc_core::MacAddr8([8, 0, 0x2b, 1, 2, 3, 4, 5]))
    );
    for bad in [
        "08:00:2b:01:02",
        "08:00:2b:01:02:03:04",
        "08:00-2b:01:02:03",
        "0g:00:2b:01:02:03",
    ] {
        err(types::MACADDR, bad);
    }
}

#[test]
fn pg_lsn() {
    assert_eq!(
        ok(types::PG_LSN, "16/B374D848"),
        Value::PgLsn(Lsn::from_u64(0x16_B374_D848))
    );
    err(types::PG_LSN, "16-B374D848");
}

fn text_elements(v: &Value<'_>) -> Vec<Option<String>> {
    let Value::Array(a) = v else {
        panic!("not an array: {v:?}")
    };
    a.elements()
        .iter()
        .map(|e| match e {
            Value::Null => None,
            Value::Text(s) => Some(s.to_string()),
            other => panic!("unexpected element {other:?}"),
        })
        .collect()
}

#[test]
fn arrays_quoting_nulls_and_escapes() {
    let raw = r#"{"a,b","c{d}","e\\f","g\"h","NULL",NULL,""," sp",null,x y,"\\",\"q}"#;
    let v = ok(types::TEXT_ARRAY, raw);
    let expected: Vec<Option<&str>> = vec![
        Some("a,b"),
        Some("c{d}"),
        Some("e\\f"),
        Some("g\"h"),
        Some("NULL"),
        None,
        Some(""),
        Some(" sp"),
        None,
        Some("x y"),
        Some("\\"),
        Some("\"q"),
    ];
    let got = text_elements(&v);
    assert_eq!(
        got,
        expected
            .iter()
            .map(|e| e.map(String::from))
            .collect::<Vec<_>>()
    );
    // Unescaped elements borrow from the column text.
    let Value::Array(a) = &v else { panic!() };
    assert!(matches!(a.elements()[9], Value::Text(Cow::Borrowed("x y"))));
}

#[test]
fn arrays_nested_with_bounds_and_whitespace() {
    let Value::Array(a) = ok(types::INT4_ARRAY, "{{1,2},{3,4}}") else {
        panic!()
    };
    assert_eq!(
        a.dims(),
        &[
            ArrayDim {
                len: 2,
                lower_bound: 1
            },
            ArrayDim {
                len: 2,
                lower_bound: 1
            }
        ]
    );
    assert_eq!(
        a.elements(),
        &[
            Value::Int4(1),
            Value::Int4(2),
            Value::Int4(3),
            Value::Int4(4)
        ]
    );
    let Value::Array(a) = ok(types::INT4_ARRAY, "[0:2]={1,2,3}") else {
        panic!()
    };
    assert_eq!(
        a.dims(),
        &[ArrayDim {
            len: 3,
            lower_bound: 0
        }]
    );
    let Value::Array(a) = ok(types::INT4_ARRAY, "[-3:-2][5:5]={{7},{8}}") else {
        panic!()
    };
    assert_eq!(a.dims()[0].lower_bound, -3);
    assert_eq!(a.dims()[1].lower_bound, 5);
    let Value::Array(a) = ok(types::INT4_ARRAY, " { 1 , 2 } ") else {
        panic!()
    };
    assert_eq!(a.elements(), &[Value::Int4(1), Value::Int4(2)]);
    let Value::Array(a) = ok(types::INT4_ARRAY, "{}") else {
        panic!()
    };
    assert!(a.is_empty() && a.dims().is_empty());
    let quoted = ok(types::TEXT_ARRAY, r#"{{"a b","c,d"},{"{e}","f\\\\g"}}"#);
    assert_eq!(
        text_elements(&quoted),
        ["a b", "c,d", "{e}", "f\\\\g"]
            .map(|s| Some(s.to_string()))
            .to_vec()
    );
}

#[test]
fn arrays_reject_malformed_text() {
    for bad in [
        "",
        "{",
        "{1,2",
        "{1}}",
        "{1},",
        "{1,,2}",
        "{,1}",
        "{{1,2},{3}}",
        "{{1},2}",
        "{1,{2}}",
        "{{},{}}",
        "[1:2]={1}",
        "[2:1]={1}",
        "[1:1]{1}",
        "{{{{{{{1}}}}}}}",
        "{\"abc}",
        "{a\\}",
        "1,2",
        "{1 2}",
    ] {
        err(types::INT4_ARRAY, bad);
    }
}

#[test]
fn array_element_errors_name_the_position() {
    let e = err(types::INT4_ARRAY, "{1,2,x}");
    match &e {
        ValueError::ArrayElement {
            type_oid,
            index,
            source,
        } => {
            assert_eq!((*type_oid, *index), (types::INT4_ARRAY, 2));
            assert_eq!(source.type_oid(), types::INT4);
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("element 2 of _int4 array"), "{e}");
}

#[test]
fn arrays_of_every_builtin_element_type() {
    let cases: &[(u32, &str, usize)] = &[
        (types::DATE_ARRAY, "{\"0044-03-15 BC\",infinity,NULL}", 3),
        (types::TIMESTAMPTZ_ARRAY, "{\"2024-01-15 04:05:06+00\"}", 1),
        (
            types::INTERVAL_ARRAY,
            "{\"1 day\",\"-1 days +02:03:00\"}",
            2,
        ),
        (types::NUMERIC_ARRAY, "{1.50,NULL,NaN}", 3),
        (types::BYTEA_ARRAY, "{\"\\\\x01ff\",\"\\\\x\"}", 2),
        (types::BOOL_ARRAY, "{t,f,NULL}", 3),
        (types::JSONB_ARRAY, "{\"{\\\"a\\\": 1}\",null}", 2),
        (types::INET_ARRAY, "{::1,10.0.0.0/8}", 2),
        (
            types::UUID_ARRAY,
            "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
            1,
        ),
        (types::FLOAT8_ARRAY, "{1.5,NaN,-Infinity}", 3),
    ];
    for &(oid, text, n) in cases {
        let Value::Array(a) = ok(oid, text) else {
            panic!()
        };
        assert_eq!(a.elements().len(), n, "{text}");
        assert_eq!(Some(a.element_type()), types::element_type(oid));
        assert!(a
            .elements()
            .iter()
            .all(|e| e.is_null() || e.type_name() == types::type_name(a.element_type()).unwrap()));
    }
}

#[test]
fn box_arrays_use_the_semicolon_delimiter() {
    // box (603) is not decoded, but its arrays split on ';' not ','.
    let a = decode_text_array(1020, 603, b"{(3,4),(1,2);(7,8),(5,6)}").unwrap();
    assert_eq!(
        a.elements(),
        &[
            Value::Other {
                type_oid: 603,
                text: "(3,4),(1,2)".into()
            },
            Value::Other {
                type_oid: 603,
                text: "(7,8),(5,6)".into()
            },
        ]
    );
}

#[test]
fn unknown_types_are_text_with_their_oid() {
    let v = ok(98_765, "happy");
    assert!(matches!(
        v,
        Value::Other {
            type_oid: 98_765,
            text: Cow::Borrowed("happy")
        }
    ));
    assert_eq!(v.type_name(), "unknown");
    assert!(matches!(
        decode_text(98_765, b"\xc3"),
        Err(ValueError::InvalidUtf8 {
            type_oid: 98_765,
            ..
        })
    ));
    // An enum array, decoded by giving the element type explicitly.
    let a = decode_text_array(98_766, 98_765, b"{happy,\"very sad\",NULL}").unwrap();
    assert_eq!(a.elements().len(), 3);
    assert!(a.elements()[2].is_null());
}

#[test]
fn into_owned_outlives_the_buffer() {
    let owned = {
        let buf = b"{\"a b\",c,NULL}".to_vec();
        let v = decode_text(types::TEXT_ARRAY, &buf).unwrap();
        v.into_owned()
    };
    assert_eq!(
        text_elements(&owned),
        vec![Some("a b".to_string()), Some("c".to_string()), None]
    );
    let n = {
        let buf = b"3.14".to_vec();
        decode_text(types::NUMERIC, &buf).unwrap().into_owned()
    };
    assert_eq!(n, Value::Numeric(Numeric::Finite("3.14".into())));
}

#[test]
fn error_messages_name_type_and_input() {
    let e = err(types::DATE, "2024-02-30");
    let msg = e.to_string();
    assert!(msg.contains("date") && msg.contains("2024-02-30"), "{msg}");
    let long = format!("{{{}}}", "9".repeat(5000));
    let e = err(types::INT4, &long);
    assert!(
        e.to_string().len() < 300,
        "message not truncated: {} bytes",
        e.to_string().len()
    );
}
