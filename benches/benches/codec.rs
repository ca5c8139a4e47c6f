//! Checkpoint codec: `checkpoint_api::encode`/`decode` (protobuf + LZ4 blocks + envelope +
//! CRC32C) against raw `lz4_flex` block compression of the same bytes, for 1, 64 and 256 MiB
//! of operator state, compressible and random.
//!
//! The baseline uses the same LZ4 mode as the codec: the block format, one independent
//! block per `DEFAULT_BLOCK_SIZE` (1 MiB) of input, written into (or read from) one output
//! buffer allocated per iteration, as the codec does. The codec's extra cost is the
//! envelope, the protobuf framing, the CRC32C and, for random data, the raw copy of blocks
//! that do not compress.
//!
//! Times are the benchmark thread's CPU time (user + system, so page faults count), not wall
//! time: the machines this runs on are shared, and CPU time does not grow when another
//! process takes the core. Set `CODEC_BENCH_CLOCK=wall` for wall-clock time.
//!
//! `cargo bench -p pgcdc-benches --bench codec`

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use cdc_core::Lsn;
use checkpoint_api::codec::DEFAULT_BLOCK_SIZE;
use checkpoint_api::{
    decode, encode, Checkpoint, CheckpointId, JobName, OperatorState, ProtocolOptions,
    SourcePosition, Timestamp,
};
use cpu_time::ThreadTime;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput};

const MIB: usize = 1 << 20;
const BLOCK: usize = DEFAULT_BLOCK_SIZE as usize;

/// Row-like text: compresses about 4x with LZ4, like typical operator state.
fn compressible(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 128);
    let mut i: u64 = 0;
    while out.len() < len {
        let row = format!(
            "{{\"id\":{i},\"customer\":\"customer_{}\",\"amount\":{}.{:02},\"status\":\"{}\"}}\n",
            i % 9973,
            (i * 7919) % 100_000,
            i % 100,
            ["new", "paid", "shipped", "returned"][(i % 4) as usize]
        );
        out.extend_from_slice(row.as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// xorshift64 noise: incompressible.
fn random(len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for word in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = word.len();
        word.copy_from_slice(&x.to_le_bytes()[..n]);
    }
    out
}

fn checkpoint(state: Bytes) -> Checkpoint {
    let mut cp = Checkpoint::new(
        JobName::new("bench").unwrap_or_else(|e| panic!("{e}")),
        CheckpointId::FIRST,
        Timestamp::from_unix_micros(1_750_000_000_000_000),
        SourcePosition {
            commit_end_lsn: Lsn::from_u64(0x16_B374_D848),
            slot: "pgcdc".into(),
            publications: vec!["orders".into()],
            protocol: ProtocolOptions::default(),
        },
    );
    cp.operators.push(OperatorState {
        id: "join".into(),
        kind: "join".into(),
        state_version: 1,
        state,
    });
    cp
}

/// Raw LZ4 block compression, 1 MiB blocks, into one fresh buffer.
fn lz4_compress(data: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut out =
        vec![0u8; lz4_flex::block::get_maximum_output_size(BLOCK) * data.len().div_ceil(BLOCK)];
    let mut lens = Vec::with_capacity(data.len().div_ceil(BLOCK));
    let mut pos = 0;
    for block in data.chunks(BLOCK) {
        let n = lz4_flex::block::compress_into(block, &mut out[pos..])
            .unwrap_or_else(|e| panic!("{e}"));
        lens.push(n);
        pos += n;
    }
    out.truncate(pos);
    (out, lens)
}

/// Raw LZ4 block decompression of [`lz4_compress`]'s output into one fresh buffer.
fn lz4_decompress(compressed: &[u8], lens: &[usize], len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut src = 0;
    for (i, &n) in lens.iter().enumerate() {
        let dst = &mut out[i * BLOCK..((i + 1) * BLOCK).min(len)];
        lz4_flex::block::decompress_into(&compressed[src..src + n], dst)
            .unwrap_or_else(|e| panic!("{e}"));
        src += n;
    }
    out
}

/// CPU time of the benchmarking thread.
struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = ThreadTime;
    type Value = Duration;

    fn start(&self) -> ThreadTime {
        ThreadTime::now()
    }
    fn end(&self, start: ThreadTime) -> Duration {
        start.elapsed()
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanos
    }
}

/// Formats nanoseconds like criterion's wall-time formatter.
struct Nanos;

impl ValueFormatter for Nanos {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1e3 {
            (1.0, "ns")
        } else if ns < 1e6 {
            (1e-3, "µs")
        } else if ns < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        values.iter_mut().for_each(|v| *v *= factor);
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        match throughput {
            Throughput::Bytes(bytes) | Throughput::BytesDecimal(bytes) => {
                // ns per iteration -> MiB/s
                values
                    .iter_mut()
                    .for_each(|v| *v = *bytes as f64 / (1 << 20) as f64 / (*v * 1e-9));
                "MiB/s"
            }
            Throughput::Elements(n) | Throughput::ElementsAndBytes { elements: n, .. } => {
                values.iter_mut().for_each(|v| *v = *n as f64 / (*v * 1e-9));
                "elem/s"
            }
            Throughput::Bits(bits) => {
                values
                    .iter_mut()
                    .for_each(|v| *v = *bits as f64 / (*v * 1e-9));
                "bit/s"
            }
        }
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn main() {
    if std::env::var("CODEC_BENCH_CLOCK").is_ok_and(|c| c == "wall") {
        let mut c = Criterion::<WallTime>::default().configure_from_args();
        bench_codec(&mut c);
        c.final_summary();
    } else {
        let mut c = Criterion::default()
            .with_measurement(ThreadCpuTime)
            .configure_from_args();
        bench_codec(&mut c);
        c.final_summary();
    }
}

fn bench_codec<M: Measurement>(c: &mut Criterion<M>) {
    for size_mib in [1usize, 64, 256] {
        for (kind, make) in [
            ("compressible", compressible as fn(usize) -> Vec<u8>),
            ("random", random),
        ] {
            let data = make(size_mib * MIB);
            let cp = checkpoint(Bytes::from(data));
            let state = cp.operators[0].state.clone();
            let envelope = encode(&cp).unwrap_or_else(|e| panic!("{e}"));
            let (raw, lens) = lz4_compress(&state);
            assert_eq!(lz4_decompress(&raw, &lens, state.len()), state[..]);
            assert_eq!(decode(&envelope).unwrap_or_else(|e| panic!("{e}")), cp);
            eprintln!(
                "{kind}/{size_mib}MiB: envelope {} bytes, raw lz4 {} bytes",
                envelope.len(),
                raw.len()
            );

            let mut group = c.benchmark_group(format!("codec/{kind}/{size_mib}MiB"));
            group.throughput(Throughput::Bytes(state.len() as u64));
            if size_mib > 1 {
                group.sample_size(10);
                group.warm_up_time(Duration::from_secs(1));
                group.measurement_time(Duration::from_secs(if size_mib > 64 { 8 } else { 4 }));
            }
            group.bench_function("encode", |b| {
                b.iter(|| encode(black_box(&cp)).unwrap_or_else(|e| panic!("{e}")))
            });
            group.bench_function("lz4_compress", |b| {
                b.iter(|| lz4_compress(black_box(&state)))
            });
            group.bench_function("decode", |b| {
                b.iter(|| decode(black_box(&envelope)).unwrap_or_else(|e| panic!("{e}")))
            });
            group.bench_function("lz4_decompress", |b| {
                b.iter(|| lz4_decompress(black_box(&raw), &lens, state.len()))
            });
            // The checksum alone, over as many bytes as the envelope has: the part of the
            // codec's overhead that no LZ4 mode avoids.
            group.bench_function("crc32c", |b| {
                b.iter(|| crc32c::crc32c(black_box(&envelope)))
            });
            group.finish();
        }
    }
}
