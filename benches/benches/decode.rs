//! pgoutput decoding throughput: cdc-core against the crates.io `pg_walstream` 0.10
//! parser on the same bytes.
//!
//! Corpora:
//! * `fixtures`: the messages captured from a real server
//!   (`crates/cdc-core/tests/fixtures/*.bin`), every file decoded from its start with a
//!   fresh decoder of the file's protocol version; when the fixtures are absent, 10 000
//!   encoder-generated messages of the 5-column table instead (`encoded`).
//! * `gen5` / `gen20`: 1 000 000 Insert/Update messages (plus Begin/Commit every 100 rows
//!   and one Relation) into a table of 5 or 20 columns of mixed types, in realistic text
//!   forms (ints, numerics, text of varying length, timestamps, bools, uuids, some NULLs),
//!   from a fixed-seed generator: every run decodes the same bytes.
//!
//! Paths, per corpus:
//! * `split/*`: parse each message and walk every column of its tuples
//!   (cdc-core `Decoder::decode` + `TupleData::iter`; pg_walstream
//!   `LogicalReplicationParser::parse_wal_message` (copies the slice into `Bytes`, the same
//!   `&[u8]` contract) and `parse_wal_message_bytes` (zero-copy `Bytes` slices)).
//! * `rows/*`: the same plus the transaction/relation layer: cdc-core `TxnAssembler`
//!   (changes matched to their relation); pg_walstream `PgOutputDecoder::decode_message`
//!   (its `ChangeEvent` with named row data).
//! * `typed/cdc-core`: `rows` plus every column decoded to a typed `Value` by its
//!   relation's type OID (`decode_text`, or `decode_binary` for binary columns);
//!   pg_walstream has no typed decoding to compare.
//!
//! Throughput is set in bytes (criterion reports MiB/s); the message count of each corpus
//! is printed at start so messages/s = messages / median time.
//!
//! `cargo bench -p pgcdc-benches --bench decode` (add `-- split` for the key comparison).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use cdc_core::encode::encode_message;
use cdc_core::pgoutput::{
    Begin, Column, Commit, Insert, LogicalMessage, OldTuple, ProtocolVersion, Relation,
    ReplicaIdentity, TupleData, TupleValue, Update,
};
use cdc_core::{types, Change, Decoder, Lsn, Oid, PgTimestamp, TxnAssembler, TxnEvent};
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use pg_walstream::{LogicalReplicationMessage, LogicalReplicationParser, PgOutputDecoder};

/// One stream of messages decoded from its start with one protocol version.
struct Stream {
    version: ProtocolVersion,
    buf: Bytes,
    /// (offset, len) of each message in `buf`.
    msgs: Vec<(usize, usize)>,
}

struct Corpus {
    name: String,
    streams: Vec<Stream>,
}

impl Corpus {
    fn messages(&self) -> usize {
        self.streams.iter().map(|s| s.msgs.len()).sum()
    }
    fn bytes(&self) -> usize {
        self.streams
            .iter()
            .map(|s| s.msgs.iter().map(|m| m.1).sum::<usize>())
            .sum()
    }
}

/// splitmix64: small, fast and deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Int4,
    Int8,
    Numeric,
    ShortText,
    LongText,
    Timestamptz,
    Bool,
    Uuid,
}

impl Kind {
    fn oid(self) -> Oid {
        match self {
            Kind::Int4 => types::INT4,
            Kind::Int8 => types::INT8,
            Kind::Numeric => types::NUMERIC,
            Kind::ShortText => types::VARCHAR,
            Kind::LongText => types::TEXT,
            Kind::Timestamptz => types::TIMESTAMPTZ,
            Kind::Bool => types::BOOL,
            Kind::Uuid => types::UUID,
        }
    }

    fn value(self, rng: &mut Rng, out: &mut String) {
        use std::fmt::Write;
        out.clear();
        const WORDS: [&str; 8] = [
            "alpha", "bravo", "charlie", "delta", "écho", "foxtrot", "golf", "hôtel",
        ];
        // Writing to a String cannot fail.
        let _ = match self {
            Kind::Int4 => write!(out, "{}", rng.below(2_000_000) as i64 - 1_000_000),
            Kind::Int8 => write!(out, "{}", rng.next() as i64 >> rng.below(40)),
            Kind::Numeric => write!(out, "{}.{:02}", rng.below(1_000_000), rng.below(100)),
            Kind::ShortText | Kind::LongText => {
                let words = if matches!(self, Kind::ShortText) {
                    1 + rng.below(3)
                } else {
                    4 + rng.below(40)
                };
                for i in 0..words {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(WORDS[rng.below(8) as usize]);
                }
                Ok(())
            }
            Kind::Timestamptz => {
                let s = rng.below(86_400);
                write!(
                    out,
                    "2024-{:02}-{:02} {:02}:{:02}:{:02}.{:06}+00",
                    1 + rng.below(12),
                    1 + rng.below(28),
                    s / 3600,
                    s / 60 % 60,
                    s % 60,
                    rng.below(1_000_000)
                )
            }
            Kind::Bool => {
                out.push(if rng.below(2) == 0 { 't' } else { 'f' });
                Ok(())
            }
            Kind::Uuid => {
                let (a, b) = (rng.next(), rng.next());
                write!(
                    out,
                    "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xffff,
                    b >> 48,
                    b & 0xffff_ffff_ffff
                )
            }
        };
    }
}

fn schema(columns: usize) -> Vec<Kind> {
    const FIVE: [Kind; 5] = [
        Kind::Int8,
        Kind::ShortText,
        Kind::Numeric,
        Kind::Timestamptz,
        Kind::Bool,
    ];
    const MORE: [Kind; 8] = [
        Kind::Int4,
        Kind::Uuid,
        Kind::LongText,
        Kind::Numeric,
        Kind::Timestamptz,
        Kind::Bool,
        Kind::ShortText,
        Kind::Int8,
    ];
    FIVE.iter()
        .chain(MORE.iter().cycle())
        .take(columns)
        .copied()
        .collect()
}

const REL: Oid = 16_384;

/// `rows` Insert/Update messages into a `columns`-column table, 100 per transaction.
fn generate(name: &str, columns: usize, rows: usize, seed: u64) -> Corpus {
    let kinds = schema(columns);
    let mut rng = Rng(seed);
    let mut buf = Vec::with_capacity(rows * (16 + columns * 24));
    let mut msgs = Vec::with_capacity(rows + rows / 50 + 2);
    let mut push = |buf: &mut Vec<u8>, m: &LogicalMessage<'_>| {
        let start = buf.len();
        encode_message(m, buf);
        msgs.push((start, buf.len() - start));
    };
    let relation = LogicalMessage::Relation(Relation {
        xid: None,
        oid: REL,
        namespace: "public".into(),
        name: "bench".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: kinds
            .iter()
            .enumerate()
            .map(|(i, k)| Column {
                flags: u8::from(i == 0),
                name: format!("c{i}").into(),
                type_oid: k.oid(),
                type_modifier: -1,
            })
            .collect(),
    });
    let mut texts: Vec<String> = vec![String::new(); columns];
    let mut lsn = 0x1_0000_0000u64;
    for row in 0..rows {
        if row % 100 == 0 {
            lsn += 0x1000;
            push(
                &mut buf,
                &LogicalMessage::Begin(Begin {
                    final_lsn: Lsn::from_u64(lsn),
                    commit_time: PgTimestamp::from_pg_micros(lsn as i64),
                    xid: (row / 100) as u32 + 1000,
                }),
            );
            if row == 0 {
                push(&mut buf, &relation);
            }
        }
        for (i, k) in kinds.iter().enumerate() {
            k.value(&mut rng, &mut texts[i]);
        }
        let values: Vec<TupleValue<'_>> = texts
            .iter()
            .enumerate()
            // About 5% NULLs, never in the key column.
            .map(|(i, t)| {
                if i > 0 && rng.below(20) == 0 {
                    TupleValue::Null
                } else {
                    TupleValue::Text(t.as_bytes())
                }
            })
            .collect();
        let new = TupleData::from_values(&values).unwrap_or_else(|| unreachable!("small row"));
        // 70% inserts, 30% updates (a third of them with the old key).
        let msg = if rng.below(10) < 7 {
            LogicalMessage::Insert(Insert {
                xid: None,
                relation: REL,
                new,
            })
        } else {
            let old = (rng.below(3) == 0).then(|| {
                let mut key = vec![TupleValue::Null; columns];
                key[0] = values[0];
                OldTuple::Key(TupleData::from_values(&key).unwrap_or_else(|| unreachable!()))
            });
            LogicalMessage::Update(Update {
                xid: None,
                relation: REL,
                old,
                new,
            })
        };
        push(&mut buf, &msg);
        if row % 100 == 99 || row + 1 == rows {
            push(
                &mut buf,
                &LogicalMessage::Commit(Commit {
                    flags: 0,
                    commit_lsn: Lsn::from_u64(lsn),
                    end_lsn: Lsn::from_u64(lsn + 8),
                    commit_time: PgTimestamp::from_pg_micros(lsn as i64),
                }),
            );
        }
    }
    Corpus {
        name: name.to_string(),
        streams: vec![Stream {
            version: ProtocolVersion::V1,
            buf: Bytes::from(buf),
            msgs,
        }],
    }
}

/// The captured fixtures (records of u32 big-endian length + message), if present.
fn fixtures() -> Option<Corpus> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/cdc-core/tests/fixtures");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    files.sort();
    let mut streams = Vec::new();
    for path in files {
        let bytes = std::fs::read(&path).ok()?;
        let stem = path.file_stem()?.to_string_lossy().into_owned();
        let v: u32 = stem.rsplit_once("-v")?.1.parse().ok()?;
        let mut msgs = Vec::new();
        let mut pos = 0;
        while let Some(len) = bytes.get(pos..pos + 4) {
            let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
            msgs.push((pos + 4, len));
            pos += 4 + len;
        }
        streams.push(Stream {
            version: ProtocolVersion::new(v).ok()?,
            buf: Bytes::from(bytes),
            msgs,
        });
    }
    (!streams.is_empty()).then(|| Corpus {
        name: "fixtures".to_string(),
        streams,
    })
}

fn walk_columns(t: &TupleData<'_>) -> usize {
    t.iter().map(|c| c.bytes().map_or(1, <[u8]>::len)).sum()
}

fn cdc_split(c: &Corpus) -> usize {
    let mut acc = 0;
    for s in &c.streams {
        let mut d = Decoder::new(s.version);
        for &(off, len) in &s.msgs {
            match d.decode(&s.buf[off..off + len]) {
                Ok(LogicalMessage::Insert(m)) => acc += walk_columns(&m.new),
                Ok(LogicalMessage::Update(m)) => {
                    acc +=
                        walk_columns(&m.new) + m.old.as_ref().map_or(0, |o| walk_columns(o.tuple()))
                }
                Ok(LogicalMessage::Delete(m)) => acc += walk_columns(m.old.tuple()),
                Ok(_) => acc += 1,
                Err(e) => panic!("cdc-core rejected a corpus message: {e}"),
            }
        }
    }
    acc
}

fn typed(rel: &Relation<'_>, t: &TupleData<'_>) -> usize {
    let mut acc = 0;
    for (col, v) in rel.columns.iter().zip(t.iter()) {
        let r = match v {
            TupleValue::Text(b) => cdc_core::decode_text(col.type_oid, b),
            TupleValue::Binary(b) => cdc_core::decode_binary(col.type_oid, b),
            TupleValue::Null | TupleValue::UnchangedToast => continue,
        };
        match r {
            Ok(v) => {
                black_box(&v);
                acc += 1;
            }
            Err(e) => panic!("value of {} did not decode: {e}", col.name),
        }
    }
    acc
}

fn change(ev: &TxnEvent<'_>, with_values: bool) -> usize {
    let TxnEvent::Change(c) = ev else { return 1 };
    let tuples: [Option<&TupleData<'_>>; 2] = match c {
        Change::Insert(_, m) => [Some(&m.new), None],
        Change::Update(_, m) => [Some(&m.new), m.old.as_ref().map(OldTuple::tuple)],
        Change::Delete(_, m) => [Some(m.old.tuple()), None],
        Change::Truncate(_) | Change::Message(_) => return 1,
    };
    let rel = match c {
        Change::Insert(r, _) | Change::Update(r, _) | Change::Delete(r, _) => r,
        _ => return 1,
    };
    tuples
        .into_iter()
        .flatten()
        .map(|t| {
            if with_values {
                typed(rel, t)
            } else {
                walk_columns(t)
            }
        })
        .sum()
}

fn cdc_rows(c: &Corpus, with_values: bool) -> usize {
    let mut acc = 0;
    for s in &c.streams {
        let mut d = Decoder::new(s.version);
        let mut asm = TxnAssembler::new();
        for &(off, len) in &s.msgs {
            let msg = match d.decode(&s.buf[off..off + len]) {
                Ok(m) => m,
                Err(e) => panic!("cdc-core rejected a corpus message: {e}"),
            };
            match asm.handle_message(msg) {
                Ok(Some(ev)) => acc += change(&ev, with_values),
                Ok(None) => {}
                Err(e) => panic!("assembler rejected the corpus: {e}"),
            }
            while let Some(ev) = asm.poll_event() {
                acc += change(&ev, with_values);
            }
        }
    }
    acc
}

fn walk_pw(t: &pg_walstream::TupleData) -> usize {
    t.columns
        .iter()
        .map(|c| {
            if c.is_null() || c.is_unchanged() {
                1
            } else {
                c.as_bytes().len()
            }
        })
        .sum()
}

fn pw_message(m: &LogicalReplicationMessage) -> usize {
    match m {
        LogicalReplicationMessage::Insert { tuple, .. } => walk_pw(tuple),
        LogicalReplicationMessage::Update {
            old_tuple,
            new_tuple,
            ..
        } => walk_pw(new_tuple) + old_tuple.as_ref().map_or(0, walk_pw),
        LogicalReplicationMessage::Delete { old_tuple, .. } => walk_pw(old_tuple),
        _ => 1,
    }
}

fn pw_split(c: &Corpus) -> usize {
    let mut acc = 0;
    for s in &c.streams {
        let mut p = LogicalReplicationParser::with_protocol_version(s.version.get());
        for &(off, len) in &s.msgs {
            match p.parse_wal_message(&s.buf[off..off + len]) {
                Ok(m) => acc += pw_message(&m.message),
                Err(_) => acc += 1 << 40,
            }
        }
    }
    acc
}

fn pw_split_bytes(c: &Corpus) -> usize {
    let mut acc = 0;
    for s in &c.streams {
        let mut p = LogicalReplicationParser::with_protocol_version(s.version.get());
        for &(off, len) in &s.msgs {
            match p.parse_wal_message_bytes(s.buf.slice(off..off + len)) {
                Ok(m) => acc += pw_message(&m.message),
                Err(_) => acc += 1 << 40,
            }
        }
    }
    acc
}

fn pw_rows(c: &Corpus) -> usize {
    let mut acc = 0;
    for s in &c.streams {
        let mut d = PgOutputDecoder::with_protocol_version(s.version.get());
        for &(off, len) in &s.msgs {
            match d.decode_message(s.buf.slice(off..off + len), pg_walstream::Lsn(0)) {
                Ok(Some(ev)) => {
                    black_box(&ev);
                    acc += 1;
                }
                Ok(None) => {}
                Err(_) => acc += 1 << 40,
            }
        }
    }
    acc
}

fn bench_corpus(crit: &mut Criterion, c: &Corpus, big: bool) {
    // pg_walstream errors are counted in the high bits rather than panicking, so a
    // message it cannot parse shows here instead of aborting the comparison.
    let errors = |acc: usize| acc >> 40;
    eprintln!(
        "corpus {}: {} messages, {} bytes ({:.1} bytes/message); pg_walstream errors: \
         parse {}, parse-bytes {}, decoder {}",
        c.name,
        c.messages(),
        c.bytes(),
        c.bytes() as f64 / c.messages() as f64,
        errors(pw_split(c)),
        errors(pw_split_bytes(c)),
        errors(pw_rows(c)),
    );
    let mut g = crit.benchmark_group(format!("decode/{}", c.name));
    g.throughput(Throughput::Bytes(c.bytes() as u64));
    if big {
        // One pass over a 1M-message corpus takes 0.1-2 s: flat sampling keeps the
        // run to about sample_size passes per function instead of 55.
        g.sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
    } else {
        g.sample_size(30)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
    }
    let id = |path: &str, who: &str| BenchmarkId::new(path, who);
    g.bench_function(id("split", "cdc-core"), |b| {
        b.iter(|| cdc_split(black_box(c)))
    });
    g.bench_function(id("split", "pg_walstream-parse"), |b| {
        b.iter(|| pw_split(black_box(c)))
    });
    g.bench_function(id("split", "pg_walstream-parse-bytes"), |b| {
        b.iter(|| pw_split_bytes(black_box(c)))
    });
    g.bench_function(id("rows", "cdc-core"), |b| {
        b.iter(|| cdc_rows(black_box(c), false))
    });
    g.bench_function(id("rows", "pg_walstream-decoder"), |b| {
        b.iter(|| pw_rows(black_box(c)))
    });
    g.bench_function(id("typed", "cdc-core"), |b| {
        b.iter(|| cdc_rows(black_box(c), true))
    });
    g.finish();
}

fn main() {
    let mut crit = Criterion::default().configure_from_args();
    let small = fixtures().unwrap_or_else(|| {
        let mut c = generate("encoded", 5, 10_000, 7);
        c.name = "encoded".to_string();
        c
    });
    bench_corpus(&mut crit, &small, false);
    for (name, cols) in [("gen5", 5), ("gen20", 20)] {
        let c = generate(name, cols, 1_000_000, 0x5EED_0000 + cols as u64);
        bench_corpus(&mut crit, &c, true);
    }
    crit.final_summary();
}
