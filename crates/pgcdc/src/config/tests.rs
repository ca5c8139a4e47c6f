//! Tests of the configuration file.
use super::*;
use cdc_runtime::pipeline::{DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE};
use std::collections::HashMap;

const MINIMAL: &str = r#"
    [source]
    database = "app"
    user = "cdc"
    password = "hunter2"
    tables = ["orders", "sales.items"]
    slot = "s"
    publication = "p"

    [[sinks]]
    type = "file"
    path = "/tmp/out"
    format = "plain"

    [[sinks]]
    type = "null"
"#;

#[test]
fn parses_with_defaults_and_hides_the_password() {
    let c = Config::parse(MINIMAL).unwrap();
    c.check().unwrap();
    assert_eq!(c.source.host, "localhost");
    assert_eq!(c.source.port, 5432);
    assert!(c.source.create_slot);
    assert_eq!(c.pipeline.batch_size, DEFAULT_BATCH_SIZE);
    assert_eq!(c.pipeline.batch_bytes, DEFAULT_BATCH_BYTES);
    assert_eq!(c.pipeline.min_flush_interval_ms, 5);
    assert_eq!(c.pipeline.spill_dir, None);
    assert_eq!(c.status_interval(), Duration::from_secs(10));
    assert!(matches!(
        c.sinks[0],
        SinkConfig::File {
            format: Format::Plain,
            page_cache_mib: 64,
            direct_io: true,
            ..
        }
    ));
    assert!(matches!(c.sinks[1], SinkConfig::Null));
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    let refs = c.source.table_refs().unwrap();
    assert_eq!(refs[0].to_string(), "public.orders");
    assert_eq!(refs[1].to_string(), "sales.items");
    let rc = c.source.replication_config().unwrap();
    assert_eq!(rc.get_password(), Some("hunter2"));
    assert!(!format!("{rc:?}").contains("hunter2"));
}

#[test]
fn environment_overrides_the_file() {
    let mut c = Config::parse(MINIMAL).unwrap();
    let env: HashMap<&str, &str> = [
        ("PGCDC_SOURCE_HOST", "db.example"),
        ("PGCDC_SOURCE_PORT", "6432"),
        ("PGCDC_SOURCE_PASSWORD", "from-env"),
        ("PGCDC_SOURCE_TABLES", "a, b.c"),
        ("PGCDC_PIPELINE_BATCH_SIZE", "7"),
        ("PGCDC_PIPELINE_BATCH_BYTES", "4096"),
        ("PGCDC_PIPELINE_MIN_FLUSH_INTERVAL_MS", "0"),
        ("PGCDC_PIPELINE_SPILL_DIR", "/var/tmp/spill"),
        ("PGCDC_PIPELINE_WORKER_THREADS", "3"),
    ]
    .into_iter()
    .collect();
    c.apply_env(|k| env.get(k).map(|v| v.to_string())).unwrap();
    assert_eq!(c.source.host, "db.example");
    assert_eq!(c.source.port, 6432);
    let names: Vec<&str> = c.source.tables.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["a", "b.c"]);
    assert_eq!(c.pipeline.batch_size, 7);
    assert_eq!(c.pipeline.batch_bytes, 4096);
    assert_eq!(c.pipeline.min_flush_interval_ms, 0);
    assert_eq!(c.pipeline.worker_threads, Some(3));
    assert_eq!(c.pipeline.runtime_threads(Some("5")), 3);
    assert_eq!(
        c.pipeline.spill_dir.as_deref(),
        Some(Path::new("/var/tmp/spill"))
    );
    assert_eq!(
        c.source.resolve_password().unwrap().unwrap().expose(),
        "from-env"
    );

    let err = c
        .apply_env(|k| (k == "PGCDC_SOURCE_PORT").then(|| "x".to_owned()))
        .unwrap_err();
    assert!(err.to_string().contains("PGCDC_SOURCE_PORT"), "{err}");
}

#[test]
fn worker_threads_default_and_tokio_variable() {
    let mut c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.pipeline.worker_threads, None);
    let default = default_worker_threads();
    assert!((1..=DEFAULT_WORKER_THREADS).contains(&default));
    assert_eq!(c.pipeline.runtime_threads(None), default);
    assert_eq!(c.pipeline.runtime_threads(Some(" 4 ")), 4);
    assert_eq!(c.pipeline.runtime_threads(Some("0")), default);
    assert_eq!(c.pipeline.runtime_threads(Some("many")), default);
    c.pipeline.worker_threads = Some(0);
    let err = c.check().unwrap_err();
    assert!(err.to_string().contains("worker_threads"), "{err}");
}

#[test]
fn rejects_bad_settings_clearly() {
    let no_sinks = "sinks = []\n".to_owned() + MINIMAL.split("[[sinks]]").next().unwrap();
    let err = Config::parse(&no_sinks).unwrap().check().unwrap_err();
    assert!(err.to_string().contains("sinks"), "{err}");

    let unknown = MINIMAL.replace("slot = \"s\"", "slot = \"s\"\nslto = 1");
    let err = Config::parse(&unknown).unwrap_err();
    assert!(err.to_string().contains("slto"), "{err}");

    let bad_lsn = MINIMAL.replace("slot = \"s\"", "slot = \"s\"\nstart_lsn = \"nope\"");
    let err = Config::parse(&bad_lsn).unwrap().check().unwrap_err();
    assert!(err.to_string().contains("start_lsn"), "{err}");

    assert!(table_ref("source.tables", "a.b.c").is_err());
    assert!(table_ref("source.tables", ".b").is_err());
}

#[test]
fn parse_errors_name_line_column_and_key() {
    let text = MINIMAL.to_owned() + "\n[checkpoint]\ninterval_ms = -5\n";
    let err = Config::parse_file(Path::new("pgcdc.toml"), &text).unwrap_err();
    let line = text.lines().position(|l| l == "interval_ms = -5").unwrap() + 1;
    assert_eq!(
        err.to_string(),
        format!(
            "pgcdc.toml:{line}:15: checkpoint.interval_ms: invalid value: integer `-5`, \
             expected a non-negative integer"
        )
    );

    let text = MINIMAL.replace("slot = \"s\"", "slot = \"s\"\n    port = 70000");
    let err = Config::parse_file(Path::new("p.toml"), &text).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("p.toml:8:12: source.port: "), "{msg}");
    assert!(msg.contains("from 0 to 65535"), "{msg}");

    let text = MINIMAL.replace("slot = \"s\"", "slot = \"s\"\n    slto = 1");
    let err = Config::parse_file(Path::new("p.toml"), &text).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("p.toml:8:5: source.slto: "), "{msg}");
}

#[test]
fn check_errors_name_where_the_file_or_the_environment_sets_the_key() {
    let text = MINIMAL.to_owned() + "\n[checkpoint]\nkeep = 0\n";
    let c = Config::parse(&text).unwrap();
    let err = locate_invalid(c.check().unwrap_err(), Path::new("f.toml"), &text, |_| {
        false
    });
    let line = text.lines().position(|l| l == "keep = 0").unwrap() + 1;
    assert_eq!(
        err.to_string(),
        format!("f.toml:{line}:1: invalid checkpoint.keep: must keep at least 1 checkpoint")
    );
    let err = locate_invalid(c.check().unwrap_err(), Path::new("f.toml"), &text, |v| {
        v == "PGCDC_CHECKPOINT_KEEP"
    });
    assert_eq!(
        err.to_string(),
        "invalid checkpoint.keep (from PGCDC_CHECKPOINT_KEEP): must keep at least 1 checkpoint"
    );
}

#[test]
fn on_slot_lost_defaults_to_fail_and_reads_file_and_environment() {
    use cdc_runtime::source::OnSlotLost;
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.source.on_slot_lost, SlotLostSetting::Fail);
    assert_eq!(
        c.source.source_options().unwrap().on_slot_lost,
        OnSlotLost::Fail
    );
    let file = MINIMAL.replace(
        "publication = \"p\"",
        "publication = \"p\"\non_slot_lost = \"resnapshot\"",
    );
    let c = Config::parse(&file).unwrap();
    assert_eq!(
        c.source.source_options().unwrap().on_slot_lost,
        OnSlotLost::Resnapshot
    );
    let mut c = Config::parse(MINIMAL).unwrap();
    c.apply_env(|k| (k == "PGCDC_SOURCE_ON_SLOT_LOST").then(|| "resnapshot".to_owned()))
        .unwrap();
    assert_eq!(c.source.on_slot_lost, SlotLostSetting::Resnapshot);
    let err = c
        .apply_env(|k| (k == "PGCDC_SOURCE_ON_SLOT_LOST").then(|| "retry".to_owned()))
        .unwrap_err();
    assert!(err.to_string().contains("fail or resnapshot"), "{err}");
}

#[test]
fn a_standby_needs_checkpoints_and_reads_its_variables() {
    let mut c = Config::parse(&format!("{MINIMAL}\n[ha]\nstandby = true\n")).unwrap();
    let e = c.check().unwrap_err().to_string();
    assert!(
        e.contains("ha.standby") && e.contains("[checkpoint]"),
        "{e}"
    );
    c.checkpoint = Config::parse(&format!("{MINIMAL}\n[checkpoint]\n"))
        .unwrap()
        .checkpoint;
    c.check().unwrap();
    let vars: HashMap<&str, &str> = [
        ("PGCDC_HA_STANDBY", "false"),
        ("PGCDC_HA_TAKEOVER_AFTER_MS", "1500"),
    ]
    .into();
    c.apply_env(|k| vars.get(k).map(|v| v.to_string())).unwrap();
    assert!(!c.ha.standby);
    assert_eq!(c.ha.takeover_after(), Some(Duration::from_millis(1500)));
    let settings = c.job_builder().unwrap();
    let settings = format!("{settings:?}");
    assert!(
        settings.contains("takeover_after: Some(1.5s)"),
        "{settings}"
    );
    c.ha.takeover_after_ms = Some(0);
    assert!(c.check().is_err());
}

#[test]
fn several_hosts_and_the_failover_slot() {
    use cdc_runtime::replication::TargetSessionAttrs;
    let text = MINIMAL.replace(
        "database = \"app\"",
        "database = \"app\"\n    host = [\"p.example\", \"s.example\"]\n    port = [5432, 5433]\n    failover_slot = true",
    );
    let c = Config::parse(&text).unwrap();
    let rc = c.source.replication_config().unwrap();
    let hosts: Vec<(&str, u16)> = rc
        .endpoints()
        .iter()
        .map(|e| (e.host(), e.port()))
        .collect();
    assert_eq!(hosts, [("p.example", 5432), ("s.example", 5433)]);
    assert_eq!(rc.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
    assert_eq!(c.source.source_options().unwrap().failover_slot, Some(true));
    // One port for both; from the environment too.
    let mut c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.source.source_options().unwrap().failover_slot, None);
    let env: HashMap<&str, &str> = [
        ("PGCDC_SOURCE_HOST", "a,b"),
        ("PGCDC_SOURCE_PORT", "6000"),
        ("PGCDC_SOURCE_FAILOVER_SLOT", "false"),
    ]
    .into_iter()
    .collect();
    c.apply_env(|k| env.get(k).map(|v| v.to_string())).unwrap();
    let rc = c.source.replication_config().unwrap();
    let hosts: Vec<(&str, u16)> = rc
        .endpoints()
        .iter()
        .map(|e| (e.host(), e.port()))
        .collect();
    assert_eq!(hosts, [("a", 6000), ("b", 6000)]);
    assert_eq!(
        c.source.source_options().unwrap().failover_slot,
        Some(false)
    );
    // Port counts that do not match the hosts are refused, naming the key.
    let text = MINIMAL.replace(
        "database = \"app\"",
        "database = \"app\"\n    host = [\"a\", \"b\", \"c\"]\n    port = [1, 2]",
    );
    let err = Config::parse(&text)
        .unwrap()
        .source
        .replication_config()
        .unwrap_err();
    assert!(err.to_string().contains("source.port"), "{err}");
}

#[test]
fn source_hosts_that_cannot_connect_are_refused_at_load() {
    let with = |hosts: &str, mode: &str| {
        let text = MINIMAL.replace(
            "database = \"app\"",
            &format!("database = \"app\"\n    host = {hosts}\n    sslmode = \"{mode}\""),
        );
        Config::parse(&text).unwrap().source.replication_config()
    };
    let err = with("\"@pg\"", "prefer").unwrap_err().to_string();
    assert!(
        err.contains("source.host") && err.contains("abstract"),
        "{err}"
    );
    let err = with("[\"/var/run/postgresql\", \"db\"]", "require")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("source.host") && err.contains("sslmode=prefer"),
        "{err}"
    );
    with("[\"/var/run/postgresql\", \"db\"]", "prefer").unwrap();
    with("\"/var/run/postgresql\"", "verify-full").unwrap();
}

#[test]
fn the_debezium_section_takes_debeziums_names_and_sinks_take_key() {
    use cdc_runtime::encoding::{DecimalHandlingMode, JsonFormat, SkippedOperations};
    let text = format!(
        "{MINIMAL}\n[[sinks]]\ntype = \"stdout\"\nkey = true\n\n[debezium]\n\
         \"topic.prefix\" = \"app\"\n\"decimal.handling.mode\" = \"string\"\n\
         \"tombstones.on.delete\" = false\n\"skipped.operations\" = [\"t\", \"d\"]\n"
    );
    let c = Config::parse(&text).unwrap();
    c.check().unwrap();
    let o = c.debezium.options().unwrap();
    assert_eq!(o.name, "app");
    assert_eq!(o.decimal_handling_mode, DecimalHandlingMode::String);
    assert!(!o.tombstones_on_delete);
    assert_eq!(
        o.skipped_operations,
        SkippedOperations {
            delete: true,
            ..SkippedOperations::default()
        }
    );
    let stdout = c.sinks.last().unwrap().options(&o).unwrap();
    match stdout.json_format() {
        Some(JsonFormat::Debezium(d)) => {
            assert!(d.key);
            assert_eq!(d.name, "app");
            assert_eq!(d.version, env!("CARGO_PKG_VERSION"));
        }
        other => panic!("{other:?}"),
    }
    // The first sink is plain: the section does not change it.
    assert_eq!(
        c.sinks[0].options(&o).unwrap().json_format(),
        Some(&JsonFormat::Plain)
    );

    // A wrong name or value names the setting and what it takes.
    let bad = format!("{MINIMAL}\n[debezium]\n\"decimal.handling.mode\" = \"exact\"\n");
    let err = Config::parse(&bad)
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("decimal.handling.mode") && err.contains("precise, string, double"),
        "{err}"
    );
    let bad = format!("{MINIMAL}\n[debezium]\n\"tombstone.on.delete\" = false\n");
    let err = Config::parse(&bad)
        .unwrap()
        .check()
        .unwrap_err()
        .to_string();
    assert!(err.contains("tombstones.on.delete"), "{err}");
    let bad = format!("{MINIMAL}\n[debezium]\n\"schemas.enable\" = 1\n");
    assert!(Config::parse(&bad).unwrap().check().is_err());
}

fn with_nats(sink: &str) -> Result<cdc_runtime::sinks::NatsSinkOptions, ConfigFileError> {
    let text = format!(
        r#"
        [source]
        database = "app"
        user = "cdc"
        tables = ["orders"]
        slot = "s"
        publication = "p"
        [debezium]
        "topic.prefix" = "app"
        [[sinks]]
        type = "nats"
        {sink}
        "#
    );
    let c = Config::parse(&text)?;
    let SinkConfig::Nats(n) = &c.sinks[0] else {
        panic!("not a nats sink: {:?}", c.sinks[0]);
    };
    n.options(&c.debezium.options()?)
}

#[test]
fn a_nats_sink_takes_its_defaults_and_hides_its_secrets() {
    use cdc_runtime::sinks::nats::{NatsAuth, NatsStorage, NatsTlsMode};
    let o = with_nats("").unwrap();
    assert_eq!(o.servers, ["nats://127.0.0.1:4222"]);
    assert_eq!(o.subject, "{prefix}.{schema}.{table}");
    assert_eq!(o.prefix, "app", "the prefix defaults to topic.prefix");
    assert_eq!(o.stream_name(), "APP");
    assert_eq!(o.stream_subjects(), ["app.>"]);
    assert_eq!(o.stream.duplicate_window, Duration::from_secs(120));
    assert_eq!(o.stream.storage, NatsStorage::File);
    assert!(
        !o.stream.allow_memory_storage,
        "memory storage is refused unless asked for"
    );
    assert_eq!(o.stream.replicas, 1);
    assert_eq!(o.stream.max_age, None);
    assert!(o.stream.create);
    assert_eq!(o.max_in_flight, 1024);
    assert!(matches!(o.auth, NatsAuth::None));
    assert_eq!(o.tls.mode, NatsTlsMode::Disable);

    let o = with_nats(
        r#"user = "u"
        password = "hunter2"
        prefix = "x.y"
        partitions = 4
        subject = "{prefix}.{table}.{partition}"
        tls = "verify-full"
        tls_ca_file = "/ca.pem"
        [sinks.stream]
        name = "S"
        storage = "memory"
        duplicate_window_secs = 300"#,
    )
    .unwrap();
    assert!(matches!(&o.auth, NatsAuth::UserPassword { user, .. } if user == "u"));
    assert_eq!(o.partitions, 4);
    assert_eq!(o.stream_name(), "S");
    assert_eq!(o.stream.storage, NatsStorage::Memory);
    assert!(!o.stream.allow_memory_storage);
    assert_eq!(o.stream.duplicate_window, Duration::from_secs(300));
    assert_eq!(o.tls.mode, NatsTlsMode::VerifyFull);
    assert!(!format!("{o:?}").contains("hunter2"));
}

#[test]
fn a_nats_stream_takes_allow_memory_storage_max_age_and_replicas() {
    use cdc_runtime::sinks::nats::NatsStorage;
    let o = with_nats(
        r#"[sinks.stream]
        storage = "memory"
        allow_memory_storage = true
        replicas = 3
        max_age_secs = 3600"#,
    )
    .unwrap();
    assert_eq!(o.stream.storage, NatsStorage::Memory);
    assert!(o.stream.allow_memory_storage);
    assert_eq!(o.stream.replicas, 3);
    assert_eq!(o.stream.max_age, Some(Duration::from_secs(3600)));
    // The opt-in alone changes nothing about the storage asked for.
    let o = with_nats("[sinks.stream]\nallow_memory_storage = true").unwrap();
    assert_eq!(o.stream.storage, NatsStorage::File);
    assert!(o.stream.allow_memory_storage);
    // max_age_secs = 0 keeps messages for ever.
    let o = with_nats("[sinks.stream]\nmax_age_secs = 0").unwrap();
    assert_eq!(o.stream.max_age, None);
    let e = with_nats("[sinks.stream]\nallow_memory_storage = \"yes\"")
        .unwrap_err()
        .to_string();
    // Inside a sink the parser names the line, not the key.
    assert!(e.contains("expected a boolean"), "{e}");
}

#[test]
fn a_nats_sink_refuses_settings_that_cannot_work() {
    for (sink, names) in [
        (r#"user = "u""#, "password"),
        (
            r#"token = "t"
            credentials_file = "/c.creds""#,
            "one of",
        ),
        (r#"tls = "verify-ca""#, "tls_ca_file"),
        (r#"tls_ca_file = "/ca.pem""#, "tls"),
        (
            r#"tls = "require"
            tls_cert_file = "/c.pem""#,
            "tls_key_file",
        ),
        ("max_in_flight = 0", "max_in_flight"),
        ("servers = []", "servers"),
        ("[sinks.stream]\nreplicas = 7", "replicas"),
    ] {
        let e = with_nats(sink).unwrap_err().to_string();
        assert!(e.contains(names), "{sink}: {e}");
    }
    let e = with_nats("colour = 1").unwrap_err().to_string();
    assert!(e.contains("colour"), "{e}");
}
