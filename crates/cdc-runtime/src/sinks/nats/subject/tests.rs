use super::*;

fn render(t: &SubjectTemplate, schema: &str, table: &str, p: u32) -> String {
    let mut s = String::new();
    t.render(schema, table, p, &mut s);
    s
}

#[test]
fn the_default_template_renders_prefix_schema_and_table() {
    let t = SubjectTemplate::parse("{prefix}.{schema}.{table}", "pgcdc", 1).unwrap();
    assert_eq!(render(&t, "public", "orders", 0), "pgcdc.public.orders");
    assert_eq!(t.pattern(), "pgcdc.*.*");
    assert_eq!(t.transaction_subject(), "pgcdc.transaction");
    assert_eq!(t.message_subject(), "pgcdc.message");
}

#[test]
fn names_nats_gives_a_meaning_to_are_percent_encoded() {
    let t = SubjectTemplate::parse("{prefix}.{schema}.{table}", "a.b", 1).unwrap();
    assert_eq!(
        render(&t, "my schema", "t.*>%x", 0),
        "a.b.my%20schema.t%2E%2A%3E%25x"
    );
    // Non-ASCII names stay as they are (NATS subjects are UTF-8).
    assert_eq!(render(&t, "s", "tätä", 0), "a.b.s.tätä");
    assert_eq!(t.pattern(), "a.b.*.*");
}

#[test]
fn partitions_need_the_partition_token_and_land_in_it() {
    assert!(SubjectTemplate::parse("{prefix}.{table}", "p", 4).is_err());
    assert!(SubjectTemplate::parse("{prefix}.{table}", "p", 0).is_err());
    let t = SubjectTemplate::parse("{prefix}.{table}.p{partition}", "p", 4).unwrap();
    assert_eq!(render(&t, "s", "t", 3), "p.t.p3");
    assert_eq!(t.pattern(), "p.*.*");
}

#[test]
fn bad_templates_and_prefixes_are_refused_with_the_reason() {
    for (template, prefix) in [
        ("{prefix}.{nope}", "p"),
        ("{prefix}.{table", "p"),
        ("{prefix}.table}", "p"),
        ("{prefix}..{table}", "p"),
        ("{prefix}.>", "p"),
        ("{prefix}.{table}", "a b"),
        ("{prefix}.{table}", ""),
        ("{prefix}.{table}", "a.*"),
    ] {
        let e = SubjectTemplate::parse(template, prefix, 1).unwrap_err();
        assert!(e.to_string().contains(template), "{e}");
    }
}

#[test]
fn coverage_follows_nats_wildcards() {
    assert!(covers("pgcdc.>", "pgcdc.*.*"));
    assert!(covers("pgcdc.>", "pgcdc.transaction"));
    assert!(covers("pgcdc.*.*", "pgcdc.*.*"));
    assert!(covers("*.*.*", "pgcdc.*.*"));
    assert!(!covers("pgcdc.public.*", "pgcdc.*.*"));
    assert!(!covers("pgcdc.*", "pgcdc.*.*"));
    assert!(!covers("other.>", "pgcdc.*.*"));
    assert!(!covers("pgcdc.>", "pgcdc"));
    assert!(covers("pgcdc.transaction", "pgcdc.transaction"));
}

#[test]
fn murmur2_matches_kafka() {
    // Kafka's UtilsTest vectors (as signed Java ints).
    for (input, expected) in [
        ("21", -973932308i32),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        ("abc", 479470107),
    ] {
        assert_eq!(murmur2(input.as_bytes()) as i32, expected, "{input}");
    }
    assert_eq!(partition_of(b"anything", 1), 0);
    let p = partition_of(b"{\"id\":1}", 8);
    assert!(p < 8);
    assert_eq!(p, partition_of(b"{\"id\":1}", 8));
}
