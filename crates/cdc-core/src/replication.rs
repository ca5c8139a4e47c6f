//! Streaming replication framing: the payloads of the CopyData messages a
//! walsender exchanges with its client (PostgreSQL docs, "Streaming
//! Replication Protocol").
//!
//! * Server to client: [`XLogData`] (`w`), which carries one pgoutput message
//!   in logical replication, and [`PrimaryKeepalive`] (`k`). Parse both with
//!   [`ReplicationMessage::parse`].
//! * Client to server: [`StandbyStatusUpdate`] (`r`), which reports progress.
//!
//! What the three positions of a status update mean for pgcdc:
//! `write` = received, `flush` = durably processed (checkpointed), `apply` =
//! the same as `flush` for a logical client. The server may recycle WAL up to
//! `flush`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::DecodeError;
use crate::reader::Reader;
use crate::Lsn;

/// Microseconds between the Unix epoch and the PostgreSQL epoch (2000-01-01 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A PostgreSQL `TimestampTz` as the replication protocol sends it:
/// microseconds since 2000-01-01 00:00:00 UTC.
///
/// The server uses `i64::MAX` / `i64::MIN` for `infinity` / `-infinity`; those
/// do not convert to Unix time or [`SystemTime`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgTimestamp(i64);

impl PgTimestamp {
    /// The PostgreSQL epoch, 2000-01-01 00:00:00 UTC.
    pub const EPOCH: PgTimestamp = PgTimestamp(0);

    /// A timestamp from microseconds since the PostgreSQL epoch.
    #[inline]
    pub const fn from_pg_micros(micros: i64) -> Self {
        PgTimestamp(micros)
    }

    /// Microseconds since the PostgreSQL epoch, as on the wire.
    #[inline]
    pub const fn as_pg_micros(self) -> i64 {
        self.0
    }

    /// A timestamp from microseconds since the Unix epoch, or `None` if it is
    /// out of range.
    pub const fn from_unix_micros(micros: i64) -> Option<Self> {
        match micros.checked_sub(PG_EPOCH_UNIX_MICROS) {
            Some(v) => Some(PgTimestamp(v)),
            None => None,
        }
    }

    /// Microseconds since the Unix epoch, or `None` if out of range.
    pub const fn to_unix_micros(self) -> Option<i64> {
        self.0.checked_add(PG_EPOCH_UNIX_MICROS)
    }

    /// The timestamp of a [`SystemTime`], truncated to microseconds, or `None`
    /// if it is out of range.
    pub fn from_system_time(time: SystemTime) -> Option<Self> {
        let unix = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_micros()).ok()?,
            Err(before) => {
                // Round towards negative infinity so that truncation is consistent.
                let d = before.duration();
                let micros = i64::try_from(d.as_micros()).ok()?;
                let sub_micro = d.subsec_nanos() % 1_000 != 0;
                micros.checked_neg()?.checked_sub(i64::from(sub_micro))?
            }
        };
        Self::from_unix_micros(unix)
    }

    /// This timestamp as a [`SystemTime`], or `None` if the platform cannot
    /// represent it (or it is `infinity`).
    pub fn to_system_time(self) -> Option<SystemTime> {
        let unix = self.to_unix_micros()?;
        if unix >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_micros(unix.unsigned_abs()))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_micros(unix.unsigned_abs()))
        }
    }
}

/// A WAL data message (`w`): a chunk of WAL, in logical replication one
/// pgoutput message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XLogData<'a> {
    /// The starting point of the WAL data in this message.
    pub wal_start: Lsn,
    /// The current end of WAL on the server.
    pub wal_end: Lsn,
    /// The server's clock when it sent the message.
    pub send_time: PgTimestamp,
    /// The WAL data (a pgoutput message), borrowed from the input.
    pub data: &'a [u8],
}

/// A primary keepalive message (`k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrimaryKeepalive {
    /// The current end of WAL on the server.
    pub wal_end: Lsn,
    /// The server's clock when it sent the message.
    pub send_time: PgTimestamp,
    /// Whether the server asks for a [`StandbyStatusUpdate`] as soon as possible
    /// (to avoid a timeout disconnect).
    pub reply_requested: bool,
}

/// A CopyData payload sent by the server on a replication connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationMessage<'a> {
    /// `w`: WAL data.
    XLogData(XLogData<'a>),
    /// `k`: keepalive.
    PrimaryKeepalive(PrimaryKeepalive),
}

impl<'a> ReplicationMessage<'a> {
    /// Parses one CopyData payload (starting at its type byte).
    ///
    /// The keepalive must be exactly 18 bytes; XLogData carries everything
    /// after its 25-byte header as `data`.
    pub fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let tag = r.u8()?;
        match tag {
            b'w' => {
                let wal_start = Lsn::from_u64(r.u64()?);
                let wal_end = Lsn::from_u64(r.u64()?);
                let send_time = PgTimestamp(r.i64()?);
                Ok(ReplicationMessage::XLogData(XLogData {
                    wal_start,
                    wal_end,
                    send_time,
                    data: r.rest(),
                }))
            }
            b'k' => {
                let wal_end = Lsn::from_u64(r.u64()?);
                let send_time = PgTimestamp(r.i64()?);
                let reply_requested = r.u8()? != 0;
                r.finish()?;
                Ok(ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                    wal_end,
                    send_time,
                    reply_requested,
                }))
            }
            tag => Err(DecodeError::UnknownTag { tag, offset: 0 }),
        }
    }
}

/// A standby status update (`r`), the client's progress report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandbyStatusUpdate {
    /// Last WAL position received (written) by the client, plus one.
    pub write: Lsn,
    /// Last WAL position durably stored by the client, plus one. The server
    /// may discard WAL before it.
    pub flush: Lsn,
    /// Last WAL position applied by the client, plus one.
    pub apply: Lsn,
    /// The client's clock when sending (the caller supplies it: no clock here).
    pub send_time: PgTimestamp,
    /// Asks the server to reply immediately (with a keepalive).
    pub reply_requested: bool,
}

impl StandbyStatusUpdate {
    /// The encoded size in bytes, type byte included.
    pub const ENCODED_LEN: usize = 34;

    /// The message as a CopyData payload.
    pub fn to_bytes(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        let fields = [
            self.write.as_u64().to_be_bytes(),
            self.flush.as_u64().to_be_bytes(),
            self.apply.as_u64().to_be_bytes(),
            self.send_time.0.to_be_bytes(),
        ];
        out[0] = b'r';
        for (chunk, field) in out[1..33].chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&field);
        }
        out[33] = u8::from(self.reply_requested);
        out
    }

    /// Appends the message (a CopyData payload) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }

    /// Parses a status update (for tests and proxies); rejects trailing bytes.
    pub fn parse(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        match r.u8()? {
            b'r' => {}
            tag => return Err(DecodeError::UnknownTag { tag, offset: 0 }),
        }
        let update = StandbyStatusUpdate {
            write: Lsn::from_u64(r.u64()?),
            flush: Lsn::from_u64(r.u64()?),
            apply: Lsn::from_u64(r.u64()?),
            send_time: PgTimestamp(r.i64()?),
            reply_requested: r.u8()? != 0,
        };
        r.finish()?;
        Ok(update)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_xlogdata_written_by_hand() {
        let mut buf = vec![b'w'];
        buf.extend_from_slice(&0x0000_0001_0000_0010u64.to_be_bytes());
        buf.extend_from_slice(&0x0000_0001_0000_0100u64.to_be_bytes());
        buf.extend_from_slice(&1_000_000i64.to_be_bytes());
        buf.extend_from_slice(b"Bpayload");
        let msg = ReplicationMessage::parse(&buf).unwrap();
        assert_eq!(
            msg,
            ReplicationMessage::XLogData(XLogData {
                wal_start: "1/10".parse().unwrap(),
                wal_end: "1/100".parse().unwrap(),
                send_time: PgTimestamp::from_pg_micros(1_000_000),
                data: b"Bpayload",
            })
        );
        // An empty payload is allowed.
        let msg = ReplicationMessage::parse(&buf[..25]).unwrap();
        assert!(matches!(msg, ReplicationMessage::XLogData(x) if x.data.is_empty()));
    }

    #[test]
    fn parses_keepalive_written_by_hand() {
        let mut buf = vec![b'k'];
        buf.extend_from_slice(&0x16_B374_D848u64.to_be_bytes());
        buf.extend_from_slice(&(-5i64).to_be_bytes());
        buf.push(1);
        let msg = ReplicationMessage::parse(&buf).unwrap();
        assert_eq!(
            msg,
            ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: "16/B374D848".parse().unwrap(),
                send_time: PgTimestamp::from_pg_micros(-5),
                reply_requested: true,
            })
        );
        buf[17] = 0;
        assert!(matches!(
            ReplicationMessage::parse(&buf).unwrap(),
            ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                reply_requested: false,
                ..
            })
        ));
        buf.push(0);
        assert_eq!(
            ReplicationMessage::parse(&buf),
            Err(DecodeError::TrailingBytes {
                offset: 18,
                remaining: 1
            })
        );
    }

    #[test]
    fn rejects_unknown_tag_and_empty() {
        assert_eq!(
            ReplicationMessage::parse(&[]),
            Err(DecodeError::UnexpectedEnd {
                offset: 0,
                needed: 1
            })
        );
        assert_eq!(
            ReplicationMessage::parse(b"x123"),
            Err(DecodeError::UnknownTag {
                tag: b'x',
                offset: 0
            })
        );
    }

    #[test]
    fn every_truncation_is_unexpected_end() {
        let mut k = vec![b'k'];
        k.extend_from_slice(&[7; 17]);
        let mut w = vec![b'w'];
        w.extend_from_slice(&[7; 24]);
        for full in [k, w] {
            for cut in 0..full.len() {
                match ReplicationMessage::parse(&full[..cut]) {
                    Err(DecodeError::UnexpectedEnd { needed, .. }) => assert!(needed > 0),
                    other => panic!("cut at {cut}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn status_update_layout_matches_the_docs() {
        let update = StandbyStatusUpdate {
            write: Lsn::from_u64(0x0102_0304_0506_0708),
            flush: Lsn::from_u64(0x1112_1314_1516_1718),
            apply: Lsn::from_u64(0x2122_2324_2526_2728),
            send_time: PgTimestamp::from_pg_micros(0x3132_3334_3536_3738),
            reply_requested: true,
        };
        let bytes = update.to_bytes();
        let mut expected = vec![b'r'];
        for b in [0x00u8, 0x10, 0x20, 0x30] {
            expected.extend((1..=8).map(|i| b + i));
        }
        expected.push(1);
        assert_eq!(bytes.as_slice(), expected.as_slice());
        let mut out = vec![0xAA];
        update.encode(&mut out);
        assert_eq!(&out[1..], expected.as_slice());
        assert_eq!(StandbyStatusUpdate::parse(&bytes), Ok(update));
    }

    #[test]
    fn timestamp_epochs() {
        assert_eq!(
            PgTimestamp::EPOCH.to_unix_micros(),
            Some(946_684_800_000_000)
        );
        assert_eq!(
            PgTimestamp::EPOCH.to_system_time(),
            Some(UNIX_EPOCH + Duration::from_secs(946_684_800))
        );
        assert_eq!(
            PgTimestamp::from_system_time(UNIX_EPOCH),
            Some(PgTimestamp::from_pg_micros(-946_684_800_000_000))
        );
        // Before the Unix epoch, sub-microsecond parts round down.
        assert_eq!(
            PgTimestamp::from_system_time(UNIX_EPOCH - Duration::from_nanos(1)),
            PgTimestamp::from_unix_micros(-1)
        );
        assert_eq!(PgTimestamp::from_pg_micros(i64::MAX).to_unix_micros(), None);
        assert_eq!(PgTimestamp::from_pg_micros(i64::MAX).to_system_time(), None);
        assert_eq!(PgTimestamp::from_unix_micros(i64::MIN), None);
    }

    proptest! {
        #[test]
        fn timestamp_round_trips(micros in -(1i64 << 55)..(1i64 << 55)) {
            let ts = PgTimestamp::from_pg_micros(micros);
            let unix = ts.to_unix_micros().unwrap();
            prop_assert_eq!(PgTimestamp::from_unix_micros(unix), Some(ts));
            let st = ts.to_system_time().unwrap();
            prop_assert_eq!(PgTimestamp::from_system_time(st), Some(ts));
        }

        #[test]
        fn status_update_round_trips(w: u64, f: u64, a: u64, t: i64, reply: bool) {
            let update = StandbyStatusUpdate {
                write: Lsn::from_u64(w),
                flush: Lsn::from_u64(f),
                apply: Lsn::from_u64(a),
                send_time: PgTimestamp::from_pg_micros(t),
                reply_requested: reply,
            };
            prop_assert_eq!(StandbyStatusUpdate::parse(&update.to_bytes()), Ok(update));
        }

        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = ReplicationMessage::parse(&buf);
        }
    }
}
