//! Conformance against values captured from a PostgreSQL 15.20 server.
//!
//! Each fixture is `(type oid, output-function text, send-function bytes in hex)` for one
//! value, captured with `TimeZone=UTC`, `DateStyle=ISO`, `IntervalStyle=postgres` by
//! running, for every expression in the comments below:
//!
//! ```sql
//! SELECT pg_typeof(x)::oid, <typoutput>(x), encode(<typsend>(x), 'hex') FROM (SELECT <expr> AS x) s;
//! ```
//!
//! (the output and send functions looked up in `pg_type` and called through a PL/pgSQL
//! `EXECUTE`). Note the output function, not a `::text` cast: `true::text` is `true`
//! but pgoutput sends `boolout`'s `t`, and `inet::text` always shows the netmask.
//!
//! The tests check that (1) both forms decode, (2) to the same value, and (3) where
//! this crate's `Display` claims to reproduce the server's text, it does.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use cdc_core::{decode_binary, decode_text, types, Interval, Oid, Value};

const FIXTURES: &[(Oid, &str, &str)] = &[
    // true
    (16, "t", "01"),
    // false
    (16, "f", "00"),
    // 0::int2
    (21, "0", "0000"),
    // (-32768)::int2
    (21, "-32768", "8000"),
    // 32767::int2
    (21, "32767", "7fff"),
    // (-2147483648)::int4
    (23, "-2147483648", "80000000"),
    // 42
    (23, "42", "0000002a"),
    // (-9223372036854775808)::int8
    (20, "-9223372036854775808", "8000000000000000"),
    // 9223372036854775807::int8
    (20, "9223372036854775807", "7fffffffffffffff"),
    // 4294967295::oid
    (26, "4294967295", "ffffffff"),
    // 0::oid
    (26, "0", "00000000"),
    // 0.1::float4
    (700, "0.1", "3dcccccd"),
    // 1e20::float4
    (700, "1e+20", "60ad78ec"),
    // '-0'::float4
    (700, "-0", "80000000"),
    // 'NaN'::float4
    (700, "NaN", "7fc00000"),
    // 'Infinity'::float4
    (700, "Infinity", "7f800000"),
    // '-Infinity'::float4
    (700, "-Infinity", "ff800000"),
    // 1.17549435e-38::float4
    (700, "1.1754944e-38", "00800000"),
    // 3.4028235e38::float4
    (700, "3.4028235e+38", "7f7fffff"),
    // 1e-45::float4
    (700, "1e-45", "00000001"),
    // 1e100::float8
    (701, "1e+100", "54b249ad2594c37d"),
    // 1.5e-7::float8
    (701, "1.5e-07", "3e8421f5f40d8376"),
    // '-0'::float8
    (701, "-0", "8000000000000000"),
    // 'NaN'::float8
    (701, "NaN", "7ff8000000000000"),
    // '-Infinity'::float8
    (701, "-Infinity", "fff0000000000000"),
    // 123456789012345678::float8
    (701, "1.2345678901234568e+17", "437b69b4ba630f35"),
    // 0.1::float8
    (701, "0.1", "3fb999999999999a"),
    // 5e-324::float8
    (701, "5e-324", "0000000000000001"),
    // 1.7976931348623157e308::float8
    (701, "1.7976931348623157e+308", "7fefffffffffffff"),
    // 0::numeric
    (1700, "0", "0000000000000000"),
    // '-0'::numeric
    (1700, "0", "0000000000000000"),
    // 0.000::numeric
    (1700, "0.000", "0000000000000003"),
    // (-1.50)::numeric
    (1700, "-1.50", "000200004000000200011388"),
    // 12.50::numeric
    (1700, "12.50", "0002000000000002000c1388"),
    // '1e5'::numeric
    (1700, "100000", "0001000100000000000a"),
    // 123456789012345678901234567890.123456789012345678901234567890::numeric
    (1700, "123456789012345678901234567890.123456789012345678901234567890", "001000070000001e000c0d801ed204d2162e23340d801ed204d2162e23340d801ed204d2162e2328"),
    // 0.0001::numeric
    (1700, "0.0001", "0001ffff000000040001"),
    // 0.00001::numeric
    (1700, "0.00001", "0001fffe0000000503e8"),
    // (-0.000000001234)::numeric
    (1700, "-0.000000001234", "0001fffd4000000c04d2"),
    // 9999.9999::numeric
    (1700, "9999.9999", "0002000000000004270f270f"),
    // 10000::numeric
    (1700, "10000", "00010001000000000001"),
    // 1e-20::numeric
    (1700, "0.00000000000000000001", "0001fffb000000140001"),
    // 'NaN'::numeric
    (1700, "NaN", "00000000c0000000"),
    // 'Infinity'::numeric
    (1700, "Infinity", "00000000d0000020"),
    // '-Infinity'::numeric
    (1700, "-Infinity", "00000000f0000020"),
    // 1e100::numeric
    (1700, "10000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", "00010019000000000001"),
    // (-1e40)::numeric
    (1700, "-10000000000000000000000000000000000000000", "0001000a400000000001"),
    // 1.000000000000000000000000000000000000001::numeric
    (1700, "1.000000000000000000000000000000000000001", "000b0000000000270001000000000000000000000000000000000000000a"),
    // round(2::numeric/3, 50)
    (1700, "0.66666666666666666667000000000000000000000000000000", "0005ffff000000321a0a1a0a1a0a1a0a1a0b"),
    // ''::text
    (25, "", ""),
    // 'hello'::text
    (25, "hello", "68656c6c6f"),
    // 'üñí€𝄞'::text
    (25, "üñí€𝄞", "c3bcc3b1c3ade282acf09d849e"),
    // E'tab\there\nnewline'::text
    (25, "tab\there\nnewline", "74616209686572650a6e65776c696e65"),
    // E'with "quotes" and \\backslash'::text
    (25, "with \"quotes\" and \\backslash", "77697468202271756f7465732220616e64205c6261636b736c617368"),
    // 'abc'::varchar(10)
    (1043, "abc", "616263"),
    // 'ab'::char(5)
    (1042, "ab   ", "6162202020"),
    // 'pg_class'::name
    (19, "pg_class", "70675f636c617373"),
    // 'a'::"char"
    (18, "a", "61"),
    // ''::"char"
    (18, "", "00"),
    // chr(200)::"char"
    (18, "\\303", "c3"),
    // '\x'::bytea
    (17, "\\x", ""),
    // '\x00ff41'::bytea
    (17, "\\x00ff41", "00ff41"),
    // 'hello'::bytea
    (17, "\\x68656c6c6f", "68656c6c6f"),
    // '{"a": [1, 2.50, "x"]}'::json
    (114, "{\"a\": [1, 2.50, \"x\"]}", "7b2261223a205b312c20322e35302c202278225d7d"),
    // '{"b": 1, "a": [1, 2.50]}'::jsonb
    (3802, "{\"a\": [1, 2.50], \"b\": 1}", "017b2261223a205b312c20322e35305d2c202262223a20317d"),
    // '"str"'::jsonb
    (3802, "\"str\"", "012273747222"),
    // 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid
    (2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc999c0b4ef8bb6d6bb9bd380a11"),
    // '00000000-0000-0000-0000-000000000000'::uuid
    (2950, "00000000-0000-0000-0000-000000000000", "00000000000000000000000000000000"),
    // '2024-01-15'::date
    (1082, "2024-01-15", "0000224c"),
    // '0044-03-15 BC'::date
    (1082, "0044-03-15 BC", "fff49d7b"),
    // '10000-01-01'::date
    (1082, "10000-01-01", "002c95d4"),
    // 'infinity'::date
    (1082, "infinity", "7fffffff"),
    // '-infinity'::date
    (1082, "-infinity", "80000000"),
    // '4714-11-24 BC'::date
    (1082, "4714-11-24 BC", "ffda97a7"),
    // '5874897-12-31'::date
    (1082, "5874897-12-31", "7fda970c"),
    // '2000-01-01'::date
    (1082, "2000-01-01", "00000000"),
    // '1999-12-31'::date
    (1082, "1999-12-31", "ffffffff"),
    // '0001-01-01'::date
    (1082, "0001-01-01", "fff4dbf9"),
    // '0001-12-31 BC'::date
    (1082, "0001-12-31 BC", "fff4dbf8"),
    // '2024-02-29'::date
    (1082, "2024-02-29", "00002279"),
    // '1900-03-01'::date
    (1082, "1900-03-01", "ffff718f"),
    // '00:00:00'::time
    (1083, "00:00:00", "0000000000000000"),
    // '24:00:00'::time
    (1083, "24:00:00", "000000141dd76000"),
    // '23:59:59.999999'::time
    (1083, "23:59:59.999999", "000000141dd75fff"),
    // '04:05:06.789'::time
    (1083, "04:05:06.789", "000000036c97ca88"),
    // '12:00:00.000001'::time
    (1083, "12:00:00.000001", "0000000a0eebb001"),
    // '04:05:06.789+05:30'::timetz
    (1266, "04:05:06.789+05:30", "000000036c97ca88ffffb2a8"),
    // '04:05:06-03:30:15'::timetz
    (1266, "04:05:06-03:30:15", "000000036c8bc08000003147"),
    // '00:00:00+00'::timetz
    (1266, "00:00:00+00", "000000000000000000000000"),
    // '24:00:00-15:58'::timetz
    (1266, "24:00:00-15:58", "000000141dd760000000e088"),
    // '13:14:15.5+14'::timetz
    (1266, "13:14:15.5+14", "0000000b187d38e0ffff3b20"),
    // '2024-01-15 04:05:06.123456'::timestamp
    (1114, "2024-01-15 04:05:06.123456", "0002b1f2e33e22c0"),
    // '0044-03-15 04:05:06 BC'::timestamp
    (1114, "0044-03-15 04:05:06 BC", "ff1af9e258e6e080"),
    // 'infinity'::timestamp
    (1114, "infinity", "7fffffffffffffff"),
    // '-infinity'::timestamp
    (1114, "-infinity", "8000000000000000"),
    // '294276-12-31 23:59:59.999999'::timestamp
    (1114, "294276-12-31 23:59:59.999999", "7fffff5bb3b29fff"),
    // '4714-11-24 00:00:00 BC'::timestamp
    (1114, "4714-11-24 00:00:00 BC", "fd0f7cc1411fa000"),
    // '2000-01-01 00:00:00'::timestamp
    (1114, "2000-01-01 00:00:00", "0000000000000000"),
    // '1999-12-31 23:59:59.999999'::timestamp
    (1114, "1999-12-31 23:59:59.999999", "ffffffffffffffff"),
    // '10000-01-01 00:00:00'::timestamp
    (1114, "10000-01-01 00:00:00", "0380e70b913b8000"),
    // '1970-01-01'::timestamp
    (1114, "1970-01-01 00:00:00", "fffca2fec4c82000"),
    // '2024-01-15 04:05:06.123456+00'::timestamptz
    (1184, "2024-01-15 04:05:06.123456+00", "0002b1f2e33e22c0"),
    // '0044-03-15 04:05:06 BC'::timestamptz
    (1184, "0044-03-15 04:05:06+00 BC", "ff1af9e258e6e080"),
    // 'infinity'::timestamptz
    (1184, "infinity", "7fffffffffffffff"),
    // '-infinity'::timestamptz
    (1184, "-infinity", "8000000000000000"),
    // '294276-12-31 23:59:59.999999+00'::timestamptz
    (1184, "294276-12-31 23:59:59.999999+00", "7fffff5bb3b29fff"),
    // '1999-12-31 23:59:59.999999+00'::timestamptz
    (1184, "1999-12-31 23:59:59.999999+00", "ffffffffffffffff"),
    // '2024-06-01 12:00:00.5+05:30'::timestamptz
    (1184, "2024-06-01 06:30:00.5+00", "0002bcccff918b20"),
    // '1 year 2 mons 3 days 04:05:06.789'::interval
    (1186, "1 year 2 mons 3 days 04:05:06.789", "000000036c97ca88000000030000000e"),
    // '-1 days +02:03:00'::interval
    (1186, "-1 days +02:03:00", "00000001b7e1dd00ffffffff00000000"),
    // '-1 year -2 mons -3 days -04:05:06.789'::interval
    (1186, "-1 years -2 mons -3 days -04:05:06.789", "fffffffc93683578fffffffdfffffff2"),
    // '0'::interval
    (1186, "00:00:00", "00000000000000000000000000000000"),
    // '1 year -2 mons'::interval
    (1186, "10 mons", "0000000000000000000000000000000a"),
    // '-0.5 sec'::interval
    (1186, "-00:00:00.5", "fffffffffff85ee00000000000000000"),
    // '1 mon -1 day'::interval
    (1186, "1 mon -1 days", "0000000000000000ffffffff00000001"),
    // '100000 hours'::interval
    (1186, "100000:00:00", "0001476b081e80000000000000000000"),
    // '1 year 1 day 1 sec'::interval
    (1186, "1 year 1 day 00:00:01", "00000000000f4240000000010000000c"),
    // '0.000001 sec'::interval
    (1186, "00:00:00.000001", "00000000000000010000000000000000"),
    // '2 years'::interval
    (1186, "2 years", "00000000000000000000000000000018"),
    // '-1 mons'::interval
    (1186, "-1 mons", "000000000000000000000000ffffffff"),
    // '1 day -00:00:01'::interval
    (1186, "1 day -00:00:01", "fffffffffff0bdc00000000100000000"),
    // '13 mons'::interval
    (1186, "1 year 1 mon", "0000000000000000000000000000000d"),
    // interval '-178956970 years -8 mons -2147483648 days' - interval '2562047788:00:54.775807' - interval '1 microsecond'
    (1186, "-178956970 years -8 mons -2147483648 days -2562047788:00:54.775808", "80000000000000008000000080000000"),
    // '178956970 years 7 mons 2147483647 days 2562047788:00:54.775807'::interval
    (1186, "178956970 years 7 mons 2147483647 days 2562047788:00:54.775807", "7fffffffffffffff7fffffff7fffffff"),
    // '-1 years +1 mons -1 days +00:00:01'::interval
    (1186, "-11 mons -1 days +00:00:01", "00000000000f4240fffffffffffffff5"),
    // '192.168.1.5'::inet
    (869, "192.168.1.5", "02200004c0a80105"),
    // '192.168.1.5/24'::inet
    (869, "192.168.1.5/24", "02180004c0a80105"),
    // '::1'::inet
    (869, "::1", "0380001000000000000000000000000000000001"),
    // '2001:db8::1:0:0:1'::inet
    (869, "2001:db8::1:0:0:1", "0380001020010db8000000000001000000000001"),
    // '::ffff:1.2.3.4'::inet
    (869, "::ffff:1.2.3.4", "0380001000000000000000000000ffff01020304"),
    // '::1:2'::inet
    (869, "::0.1.0.2", "0380001000000000000000000000000000010002"),
    // '1::'::inet
    (869, "1::", "0380001000010000000000000000000000000000"),
    // '::'::inet
    (869, "::", "0380001000000000000000000000000000000000"),
    // 'fe80::1/64'::inet
    (869, "fe80::1/64", "03400010fe800000000000000000000000000001"),
    // '0.0.0.0/0'::inet
    (869, "0.0.0.0/0", "0200000400000000"),
    // '2001:db8:0:1:1:1:1:1'::inet
    (869, "2001:db8:0:1:1:1:1:1", "0380001020010db8000000010001000100010001"),
    // '1:0:0:2:0:0:0:3'::inet
    (869, "1:0:0:2::3", "0380001000010000000000020000000000000003"),
    // '::ffff:0:1.2.3.4'::inet
    (869, "::ffff:0:102:304", "038000100000000000000000ffff000001020304"),
    // '10/8'::cidr
    (650, "10.0.0.0/8", "020801040a000000"),
    // '2001:db8::/32'::cidr
    (650, "2001:db8::/32", "0320011020010db8000000000000000000000000"),
    // '::/0'::cidr
    (650, "::/0", "0300011000000000000000000000000000000000"),
    // '192.168.1.0/24'::cidr
    (650, "192.168.1.0/24", "02180104c0a80100"),
    // '192.168.1.5/32'::cidr
    (650, "192.168.1.5/32", "02200104c0a80105"),
    // '::ffff:0:0/96'::cidr
    (650, "::ffff:0.0.0.0/96", "0360011000000000000000000000ffff00000000"),
    // '08:00:2b:01:02:03'::macaddr
    (829, "08:00:2b:01:02:03", "08002b010203"),
    // 'ff:ff:ff:ff:ff:ff'::macaddr
    (829, "ff:ff:ff:ff:ff:ff", "ffffffffffff"),
    // '08:00:2b:01:02:03:04:05'::macaddr8
    (774, "08:00:2b:01:02:03:04:05", "08002b0102030405"),
    // '16/B374D848'::pg_lsn
    (3220, "16/B374D848", "00000016b374d848"),
    // '0/0'::pg_lsn
    (3220, "0/0", "0000000000000000"),
    // 'FFFFFFFF/FFFFFFFF'::pg_lsn
    (3220, "FFFFFFFF/FFFFFFFF", "ffffffffffffffff"),
    // array[1,2]
    (1007, "{1,2}", "000000010000000000000017000000020000000100000004000000010000000400000002"),
    // '{{1,2},{3,4}}'::int[]
    (1007, "{{1,2},{3,4}}", "000000020000000000000017000000020000000100000002000000010000000400000001000000040000000200000004000000030000000400000004"),
    // '[0:2]={1,2,3}'::int[]
    (1007, "[0:2]={1,2,3}", "0000000100000000000000170000000300000000000000040000000100000004000000020000000400000003"),
    // array['a,b','c{d}',E'e\\f','g"h','NULL',null,'',' sp','null','x y','ü']::text[]
    (1009, "{\"a,b\",\"c{d}\",\"e\\\\f\",\"g\\\"h\",\"NULL\",NULL,\"\",\" sp\",\"null\",\"x y\",ü}", "0000000100000001000000190000000b0000000100000003612c6200000004637b647d00000003655c6600000003672268000000044e554c4cffffffff0000000000000003207370000000046e756c6c0000000378207900000002c3bc"),
    // '{}'::int[]
    (1007, "{}", "000000000000000000000017"),
    // array['\x01ff'::bytea, '\x'::bytea]
    (1001, "{\"\\\\x01ff\",\"\\\\x\"}", "00000001000000000000001100000002000000010000000201ff00000000"),
    // '[1:1][2:3]={{1,2}}'::int[]
    (1007, "[1:1][2:3]={{1,2}}", "0000000200000000000000170000000100000001000000020000000200000004000000010000000400000002"),
    // '[-3:-2]={7,8}'::int[]
    (1007, "[-3:-2]={7,8}", "00000001000000000000001700000002fffffffd00000004000000070000000400000008"),
    // array['2024-01-01 10:00'::timestamp, 'infinity']
    (1115, "{\"2024-01-01 10:00:00\",infinity}", "00000001000000000000045a0000000200000001000000080002b0de36ada800000000087fffffffffffffff"),
    // array[1.5::float8,'NaN', '-Infinity']
    (1022, "{1.5,NaN,-Infinity}", "0000000100000000000002bd0000000300000001000000083ff8000000000000000000087ff800000000000000000008fff0000000000000"),
    // array[1.50::numeric, null, 'NaN']
    (1231, "{1.50,NULL,NaN}", "0000000100000001000006a400000003000000010000000c000200000000000200011388ffffffff0000000800000000c0000000"),
    // '{{{1},{2}},{{3},{4}}}'::int[]
    (1007, "{{{1},{2}},{{3},{4}}}", "0000000300000000000000170000000200000001000000020000000100000001000000010000000400000001000000040000000200000004000000030000000400000004"),
    // array['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]
    (2951, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "000000010000000000000b86000000010000000100000010a0eebc999c0b4ef8bb6d6bb9bd380a11"),
    // array['1 day'::interval, '-1 days +02:03:00']
    (1187, "{\"1 day\",\"-1 days +02:03:00\"}", "0000000100000000000004a2000000020000000100000010000000000000000000000001000000000000001000000001b7e1dd00ffffffff00000000"),
    // array['::1'::inet, '10.0.0.0/8']
    (1041, "{::1,10.0.0.0/8}", "000000010000000000000365000000020000000100000014038000100000000000000000000000000000000100000008020800040a000000"),
    // array['10.0.0.0/8'::cidr]
    (651, "{10.0.0.0/8}", "00000001000000000000028a000000010000000100000008020801040a000000"),
    // array[true,false,null]
    (1000, "{t,f,NULL}", "000000010000000100000010000000030000000100000001010000000100ffffffff"),
    // array['{"a": 1}'::jsonb, 'null']
    (3807, "{\"{\\\"a\\\": 1}\",\"null\"}", "000000010000000000000eda000000020000000100000009017b2261223a20317d00000005016e756c6c"),
    // array['{"a": 1}'::json]
    (199, "{\"{\\\"a\\\": 1}\"}", "0000000100000000000000720000000100000001000000087b2261223a20317d"),
    // array['x'::"char", '']
    (1002, "{x,\"\"}", "000000010000000000000012000000020000000100000001780000000100"),
    // array[null]::int[]
    (1007, "{NULL}", "0000000100000001000000170000000100000001ffffffff"),
    // array[null,null]::text[]
    (1009, "{NULL,NULL}", "0000000100000001000000190000000200000001ffffffffffffffff"),
    // array['0044-03-15 BC'::date, 'infinity']
    (1182, "{\"0044-03-15 BC\",infinity}", "00000001000000000000043a000000020000000100000004fff49d7b000000047fffffff"),
    // array[E'back\\slash', E'quote"', E'brace}{', 'comma,', E'tab\t', E'nl\n', ' ', 'a b']::text[]
    (1009, "{\"back\\\\slash\",\"quote\\\"\",\"brace}{\",\"comma,\",\"tab\t\",\"nl\n\",\" \",\"a b\"}", "00000001000000000000001900000008000000010000000a6261636b5c736c6173680000000671756f7465220000000762726163657d7b00000006636f6d6d612c0000000474616209000000036e6c0a000000012000000003612062"),
    // '{{"a b","c,d"},{"{e}","f\\\\g"}}'::text[]
    (1009, "{{\"a b\",\"c,d\"},{\"{e}\",\"f\\\\\\\\g\"}}", "000000020000000000000019000000020000000100000002000000010000000361206200000003632c64000000037b657d00000004665c5c67"),
    // array['v1','v2']::varchar[]
    (1015, "{v1,v2}", "0000000100000000000004130000000200000001000000027631000000027632"),
    // array['n1']::name[]
    (1003, "{n1}", "0000000100000000000000130000000100000001000000026e31"),
    // array['ab'::char(3)]
    (1014, "{\"ab \"}", "000000010000000000000412000000010000000100000003616220"),
    // array['04:05:06+05:30'::timetz]
    (1270, "{04:05:06+05:30}", "0000000100000000000004f200000001000000010000000c000000036c8bc080ffffb2a8"),
    // array['04:05:06'::time]
    (1183, "{04:05:06}", "00000001000000000000043b000000010000000100000008000000036c8bc080"),
    // array['2024-01-15 04:05:06+00'::timestamptz]
    (1185, "{\"2024-01-15 04:05:06+00\"}", "0000000100000000000004a00000000100000001000000080002b1f2e33c4080"),
    // array[1::int2, -1]
    (1007, "{1,-1}", "0000000100000000000000170000000200000001000000040000000100000004ffffffff"),
    // array[1::int8, 9223372036854775807]
    (1016, "{1,9223372036854775807}", "0000000100000000000000140000000200000001000000080000000000000001000000087fffffffffffffff"),
    // array[1::oid]
    (1028, "{1}", "00000001000000000000001a00000001000000010000000400000001"),
    // array[0.5::float4]
    (1021, "{0.5}", "0000000100000000000002bc0000000100000001000000043f000000"),
    // array['08:00:2b:01:02:03'::macaddr]
    (1040, "{08:00:2b:01:02:03}", "00000001000000000000033d00000001000000010000000608002b010203"),
    // array['08:00:2b:01:02:03:04:05'::macaddr8]
    (775, "{08:00:2b:01:02:03:04:05}", "00000001000000000000030600000001000000010000000808002b0102030405"),
    // array['1/2'::pg_lsn]
    (3221, "{1/2}", "000000010000000000000c940000000100000001000000080000000100000002"),
];

/// `timestamptz` as printed under other `TimeZone` settings (including LMT offsets with
/// seconds), with the binary form of the same instant.
const ZONED: &[(&str, &str)] = &[
    // America/New_York
    ("1799-12-31 19:03:58-04:56:02", "ffe993dcf8170000"),
    ("2024-06-01 08:00:00.25-04", "0002bcd19bb9c090"),
    ("1959-12-31 19:00:00-05", "fffb83f0f27b4000"),
    ("0100-02-02 19:03:58-04:56:02 BC", "ff14af71fc93e000"),
    // Asia/Kolkata
    ("1800-01-01 05:53:28+05:53:28", "ffe993dcf8170000"),
    ("2024-06-01 17:30:00.25+05:30", "0002bcd19bb9c090"),
    ("1960-01-01 05:30:00+05:30", "fffb83f0f27b4000"),
    ("0100-02-03 05:53:28+05:53:28 BC", "ff14af71fc93e000"),
    // Australia/Lord_Howe
    ("1800-01-01 10:36:20+10:36:20", "ffe993dcf8170000"),
    ("2024-06-01 22:30:00.25+10:30", "0002bcd19bb9c090"),
    ("1960-01-01 10:00:00+10", "fffb83f0f27b4000"),
    // Africa/Monrovia
    ("1799-12-31 23:16:52-00:43:08", "ffe993dcf8170000"),
    ("1959-12-31 23:15:30-00:44:30", "fffb83f0f27b4000"),
    ("0100-02-02 23:16:52-00:43:08 BC", "ff14af71fc93e000"),
];

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex fixture {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `Debug` distinguishes `-0.0` from `0.0` and prints `NaN` equal to itself, which is
/// the equality wanted here; borrowed and owned `Cow`s print the same.
fn same(a: &Value<'_>, b: &Value<'_>) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

/// The server's text for a value, for the types whose `Display` mirrors the output
/// function; `None` where it deliberately does not (floats, `"char"`, arrays).
fn server_text(v: &Value<'_>) -> Option<String> {
    Some(match v {
        Value::Bool(b) => if *b { "t" } else { "f" }.into(),
        Value::Int2(i) => i.to_string(),
        Value::Int4(i) => i.to_string(),
        Value::Int8(i) => i.to_string(),
        Value::Oid(i) => i.to_string(),
        Value::Numeric(n) => n.to_string(),
        Value::Text(s) | Value::Json(s) | Value::Jsonb(s) => s.to_string(),
        Value::Bytea(b) => {
            let mut s = String::from("\\x");
            for byte in b.iter() {
                s.push_str(&format!("{byte:02x}"));
            }
            s
        }
        Value::Uuid(u) => u.to_string(),
        Value::Date(d) => d.to_string(),
        Value::Time(t) => t.to_string(),
        Value::TimeTz(t) => t.to_string(),
        Value::Timestamp(t) => t.to_string(),
        Value::TimestampTz(t) => t.to_string(),
        Value::Interval(i) => i.to_string(),
        Value::Inet(i) => i.to_string(),
        Value::MacAddr(m) => m.to_string(),
        Value::MacAddr8(m) => m.to_string(),
        Value::PgLsn(l) => l.to_string(),
        _ => return None,
    })
}

#[test]
fn every_fixture_decodes_from_text_and_binary_to_the_same_value() {
    assert!(FIXTURES.len() > 150);
    for &(oid, text, hex) in FIXTURES {
        let bin = unhex(hex);
        let from_text =
            decode_text(oid, text.as_bytes()).unwrap_or_else(|e| panic!("text {text:?}: {e}"));
        let from_bin = decode_binary(oid, &bin).unwrap_or_else(|e| panic!("binary {text:?}: {e}"));
        assert!(
            same(&from_text, &from_bin),
            "{oid} {text:?}: text gave {from_text:?}, binary gave {from_bin:?}"
        );
        // Known OIDs never fall back to the untyped variants.
        assert!(
            !matches!(from_text, Value::Other { .. } | Value::OtherBinary { .. }),
            "{oid} {text:?}"
        );
        let expected_name = match oid {
            // One `Text` variant for all the string types.
            types::VARCHAR | types::BPCHAR | types::NAME => "text",
            _ => types::type_name(oid).unwrap(),
        };
        assert_eq!(from_text.type_name(), expected_name, "{text:?}");
    }
}

#[test]
fn display_reproduces_the_server_text() {
    let mut checked = 0;
    for &(oid, text, _) in FIXTURES {
        let value = decode_text(oid, text.as_bytes()).unwrap();
        if let Value::Interval(i) = value {
            if i == Interval::INFINITY || i == Interval::NEG_INFINITY {
                // PostgreSQL 15 prints the extreme field values; 17 calls them
                // infinity. See `extreme_intervals_display_as_postgres_17_infinity`.
                continue;
            }
        }
        if let Some(shown) = server_text(&value) {
            assert_eq!(shown, text, "oid {oid}");
            checked += 1;
        }
    }
    assert!(checked > 120, "only {checked} fixtures compared");
}

#[test]
fn array_elements_display_like_the_scalars() {
    // Every element of the captured arrays, re-rendered, must decode back to itself.
    let mut elements = 0;
    for &(oid, text, _) in FIXTURES {
        let Some(element_oid) = types::element_type(oid) else {
            continue;
        };
        let Value::Array(array) = decode_text(oid, text.as_bytes()).unwrap() else {
            panic!("{text:?} is not an array");
        };
        assert_eq!(array.element_type(), element_oid);
        for e in array.elements() {
            if let Some(shown) = server_text(e) {
                let again = decode_text(element_oid, shown.as_bytes()).unwrap();
                assert!(same(&again, e), "{shown:?} in {text:?}");
                elements += 1;
            }
        }
    }
    assert!(elements > 40, "only {elements} elements");
}

#[test]
fn zoned_timestamptz_text_is_the_same_instant_as_the_binary() {
    for &(text, hex) in ZONED {
        let from_text = decode_text(types::TIMESTAMPTZ, text.as_bytes()).unwrap();
        let bin = unhex(hex);
        let from_bin = decode_binary(types::TIMESTAMPTZ, &bin).unwrap();
        assert_eq!(from_text, from_bin, "{text}");
    }
}

#[test]
fn extreme_intervals_display_as_postgres_17_infinity() {
    let pg15_min = "-178956970 years -8 mons -2147483648 days -2562047788:00:54.775808";
    let pg15_max = "178956970 years 7 mons 2147483647 days 2562047788:00:54.775807";
    assert_eq!(
        decode_text(types::INTERVAL, pg15_min.as_bytes()).unwrap(),
        Value::Interval(Interval::NEG_INFINITY)
    );
    assert_eq!(
        decode_text(types::INTERVAL, pg15_max.as_bytes()).unwrap(),
        Value::Interval(Interval::INFINITY)
    );
    assert_eq!(
        decode_text(types::INTERVAL, b"-infinity").unwrap(),
        Value::Interval(Interval::NEG_INFINITY)
    );
    assert_eq!(Interval::NEG_INFINITY.to_string(), "-infinity");
    assert_eq!(Interval::INFINITY.to_string(), "infinity");
}
