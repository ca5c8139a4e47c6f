//! Shared helpers of the cdc-core fuzz targets: how a target reads its
//! input, so the seed generator (`examples/gen_seeds.rs`) writes the same
//! layout.
#![forbid(unsafe_code)]

use cdc_core::pgoutput::{ParseContext, ProtocolVersion};
use cdc_core::{types, Oid, TupleData};

/// Every type OID the value decoders know (scalars and arrays), plus two that
/// they do not (an enum-like OID and 0), so `Other` is exercised as well.
pub fn known_oids() -> Vec<Oid> {
    let mut v: Vec<Oid> = types::SCALARS.to_vec();
    v.extend(types::array_types());
    v.push(16_385);
    v.push(0);
    v
}

/// Decodes the option byte that leads a `pgoutput_message` input:
/// bits 0-1 the protocol version minus one, bit 2 `in_stream`, bit 3
/// `parallel_streaming`.
pub fn context_from_byte(b: u8) -> ParseContext {
    let version = ProtocolVersion::ALL[usize::from(b & 3)];
    ParseContext::new(version)
        .with_in_stream(b & 4 != 0)
        .with_parallel_streaming(b & 8 != 0)
}

/// The option byte [`context_from_byte`] reads back as `ctx`.
pub fn context_to_byte(ctx: ParseContext) -> u8 {
    let v = (ctx.version.get().saturating_sub(1) & 3) as u8;
    v | (u8::from(ctx.in_stream) << 2) | (u8::from(ctx.parallel_streaming) << 3)
}

/// Decodes every column of `tuple` with both value decoders, as the type
/// chosen by `oid_for(column index)`; returns how many decoded without error.
///
/// Panics (the fuzzer's signal) if a decoded value cannot be made owned or
/// displayed consistently.
pub fn decode_columns(tuple: &TupleData<'_>, mut oid_for: impl FnMut(usize) -> Oid) -> usize {
    let mut ok = 0;
    for (i, col) in tuple.iter().enumerate() {
        let oid = oid_for(i);
        if let Some(bytes) = col.bytes() {
            for v in [
                cdc_core::decode_text(oid, bytes),
                cdc_core::decode_binary(oid, bytes),
            ]
            .into_iter()
            .flatten()
            {
                ok += 1;
                let owned = v.clone().into_owned();
                assert!(owned == v || value_has_nan(&v), "into_owned changed {v:?}");
                let _ = format!("{v:?}");
            }
        }
    }
    ok
}

fn value_has_nan(v: &cdc_core::Value<'_>) -> bool {
    // NaN floats (alone or inside arrays) are not equal to themselves.
    format!("{v:?}").contains("NaN")
}

/// Splits an input into length-prefixed records: u16 big-endian length, then
/// that many bytes (a short last record takes what is left).
pub fn split_records(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, rest) = data.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len)).min(rest.len());
        let (rec, rest) = rest.split_at(len);
        data = rest;
        Some(rec)
    })
}

/// Writes `records` in the layout [`split_records`] reads.
pub fn join_records<'a>(records: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        let len = u16::try_from(r.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&r[..usize::from(len)]);
    }
    out
}
