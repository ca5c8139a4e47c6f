//! One pgoutput message in an arbitrary [`ParseContext`], then every column of
//! its tuples through both value decoders.
//!
//! Input: 1 option byte (see `context_from_byte`), 4 bytes choosing the column
//! types (high bit set: the low 31 bits are one raw OID for every column;
//! otherwise an index into the known OIDs, advancing per column), then the
//! message.
#![no_main]

use cdc_core::encode::message_bytes;
use cdc_core::pgoutput::LogicalMessage;
use cdc_core_fuzz::{context_from_byte, decode_columns, known_oids};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&opts, rest)) = data.split_first() else {
        return;
    };
    let Some((sel, buf)) = rest.split_first_chunk::<4>() else {
        return;
    };
    let ctx = context_from_byte(opts);
    let sel = u32::from_be_bytes(*sel);
    let Ok(msg) = LogicalMessage::parse(buf, ctx) else {
        return;
    };

    // Whatever parses re-encodes to bytes that parse to the same message.
    let again = message_bytes(&msg);
    match LogicalMessage::parse(&again, ctx) {
        Ok(m) => assert_eq!(m, msg, "re-encoding changed the message"),
        Err(e) => panic!("re-encoded {msg:?} does not parse: {e}"),
    }
    assert_eq!(msg.clone().into_owned(), msg);

    let known = known_oids();
    let oid_for = |i: usize| {
        if sel & 0x8000_0000 != 0 {
            sel & 0x7fff_ffff
        } else {
            known[(sel as usize).wrapping_add(i) % known.len()]
        }
    };
    let tuples = match &msg {
        LogicalMessage::Insert(m) => vec![&m.new],
        LogicalMessage::Update(m) => {
            let mut t = vec![&m.new];
            if let Some(o) = &m.old {
                t.push(o.tuple());
            }
            t
        }
        LogicalMessage::Delete(m) => vec![m.old.tuple()],
        _ => Vec::new(),
    };
    for t in tuples {
        assert_eq!(t.iter().count(), t.len(), "a validated tuple lost columns");
        decode_columns(t, oid_for);
    }
});
