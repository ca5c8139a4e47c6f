//! One CopyData payload of a replication connection: XLogData, keepalive or
//! garbage; and the client's Standby Status Update parser on the same bytes.
#![no_main]

use cdc_core::encode::{encode_keepalive, encode_xlog_data};
use cdc_core::{ReplicationMessage, StandbyStatusUpdate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = ReplicationMessage::parse(data) {
        let mut out = Vec::new();
        match &msg {
            ReplicationMessage::XLogData(x) => {
                encode_xlog_data(x, &mut out);
                // XLogData keeps every byte after its header as data.
                assert_eq!(out, data, "XLogData is not byte-exact");
            }
            ReplicationMessage::PrimaryKeepalive(k) => encode_keepalive(k, &mut out),
        }
        assert_eq!(ReplicationMessage::parse(&out).ok(), Some(msg));
    }
    if let Ok(status) = StandbyStatusUpdate::parse(data) {
        let bytes = status.to_bytes();
        assert_eq!(StandbyStatusUpdate::parse(&bytes).ok(), Some(status));
    }
});
