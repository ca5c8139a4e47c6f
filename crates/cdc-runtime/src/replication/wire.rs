//! Message framing on the wire: splitting the read buffer into backend
//! messages without copying, and parsing the few control messages the
//! replication connection needs. Frontend messages are encoded with
//! `postgres_protocol::message::frontend`.

use bytes::{Buf, Bytes, BytesMut};

use super::error::{DbError, ProtocolError};

/// Largest message the server may send: the length field is a signed 32-bit
/// integer. (libpq has no smaller limit for CopyData either.)
pub(crate) const MAX_MESSAGE_LEN: u32 = i32::MAX as u32;

/// One backend message: its type byte and its body (without the 5-byte header),
/// a zero-copy slice of the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) tag: u8,
    pub(crate) body: Bytes,
}

/// What the front of a read buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peek<'a> {
    /// A complete message: its type byte and its body (without the header).
    Complete { tag: u8, body: &'a [u8] },
    /// Part of a message of `total` bytes, header included (5 when even
    /// the header is incomplete).
    Incomplete { total: usize },
}

/// Looks at the message at the front of `buf` without consuming it; checks
/// its length field.
pub(crate) fn peek_frame(buf: &[u8]) -> Result<Peek<'_>, ProtocolError> {
    let Some(header) = buf.get(..5) else {
        return Ok(Peek::Incomplete { total: 5 });
    };
    let tag = header[0];
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if !(4..=MAX_MESSAGE_LEN).contains(&len) {
        return Err(ProtocolError::InvalidLength {
            tag: char::from(tag),
            len,
        });
    }
    // len <= i32::MAX, so this fits in usize on every supported target.
    let total = len as usize + 1;
    match buf.get(5..total) {
        Some(body) => Ok(Peek::Complete { tag, body }),
        None => Ok(Peek::Incomplete { total }),
    }
}

/// Splits the next complete message off the front of `buf`, or returns
/// `Ok(None)` (after reserving room for the rest of it) when more bytes are needed.
pub(crate) fn split_frame(buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
    let (tag, total) = match peek_frame(buf)? {
        Peek::Complete { tag, body } => (tag, body.len() + 5),
        Peek::Incomplete { total } => {
            if buf.len() < total {
                buf.reserve(total - buf.len());
            }
            return Ok(None);
        }
    };
    let mut frame = buf.split_to(total).freeze();
    frame.advance(5);
    Ok(Some(Frame { tag, body: frame }))
}

/// The authentication requests a server can send (`R` messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthRequest {
    Ok,
    CleartextPassword,
    Md5Password { salt: [u8; 4] },
    Sasl { mechanisms: Vec<String> },
    SaslContinue(Bytes),
    SaslFinal(Bytes),
    Unsupported(&'static str),
}

/// A cursor over a message body with checked reads.
pub(crate) struct Reader {
    buf: Bytes,
    message: &'static str,
}

impl Reader {
    pub(crate) fn new(buf: Bytes, message: &'static str) -> Self {
        Reader { buf, message }
    }

    fn err(&self, reason: &'static str) -> ProtocolError {
        ProtocolError::Malformed {
            message: self.message,
            reason,
        }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtocolError> {
        if self.buf.is_empty() {
            return Err(self.err("ended early"));
        }
        Ok(self.buf.get_u8())
    }

    pub(crate) fn i16(&mut self) -> Result<i16, ProtocolError> {
        if self.buf.len() < 2 {
            return Err(self.err("ended early"));
        }
        Ok(self.buf.get_i16())
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ProtocolError> {
        if self.buf.len() < 4 {
            return Err(self.err("ended early"));
        }
        Ok(self.buf.get_i32())
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<Bytes, ProtocolError> {
        if self.buf.len() < n {
            return Err(self.err("ended early"));
        }
        Ok(self.buf.split_to(n))
    }

    /// The bytes of a NUL-terminated string, without the NUL.
    pub(crate) fn cstr_bytes(&mut self) -> Result<Bytes, ProtocolError> {
        let nul = self
            .buf
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| self.err("string without terminating NUL"))?;
        let raw = self.buf.split_to(nul);
        self.buf.advance(1);
        Ok(raw)
    }

    /// A NUL-terminated string, checked to be UTF-8.
    pub(crate) fn cstr(&mut self) -> Result<String, ProtocolError> {
        let raw = self.cstr_bytes()?;
        String::from_utf8(raw.to_vec()).map_err(|_| self.err("string is not valid UTF-8"))
    }

    pub(crate) fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.buf)
    }

    pub(crate) fn finish(self) -> Result<(), ProtocolError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.err("trailing bytes"))
        }
    }
}

pub(crate) fn parse_auth(body: Bytes) -> Result<AuthRequest, ProtocolError> {
    let mut r = Reader::new(body, "Authentication");
    let kind = r.i32()?;
    let req = match kind {
        0 => AuthRequest::Ok,
        3 => AuthRequest::CleartextPassword,
        5 => {
            let salt = r.bytes(4)?;
            AuthRequest::Md5Password {
                salt: [salt[0], salt[1], salt[2], salt[3]],
            }
        }
        10 => {
            let mut mechanisms = Vec::new();
            loop {
                let m = r.cstr()?;
                if m.is_empty() {
                    break;
                }
                mechanisms.push(m);
            }
            AuthRequest::Sasl { mechanisms }
        }
        11 => AuthRequest::SaslContinue(r.rest()),
        12 => AuthRequest::SaslFinal(r.rest()),
        2 => AuthRequest::Unsupported("Kerberos V5"),
        6 => AuthRequest::Unsupported("SCM credential"),
        7 | 8 => AuthRequest::Unsupported("GSSAPI"),
        9 => AuthRequest::Unsupported("SSPI"),
        _ => AuthRequest::Unsupported("an unknown"),
    };
    r.finish()?;
    Ok(req)
}

/// Parses the fields of an `ErrorResponse` or `NoticeResponse`.
pub(crate) fn parse_error_fields(body: Bytes) -> Result<DbError, ProtocolError> {
    let mut r = Reader::new(body, "ErrorResponse");
    let mut localized_severity = None;
    let mut e = DbError {
        severity: String::new(),
        code: String::new(),
        message: String::new(),
        detail: None,
        hint: None,
        where_: None,
        routine: None,
    };
    loop {
        let field = r.u8()?;
        if field == 0 {
            break;
        }
        // Servers with a non-UTF-8 lc_messages may send other bytes; keep them lossily.
        let raw = r.cstr_bytes()?;
        let nul = String::from_utf8_lossy(&raw).into_owned();
        match field {
            b'S' => localized_severity = Some(nul),
            b'V' => e.severity = nul,
            b'C' => e.code = nul,
            b'M' => e.message = nul,
            b'D' => e.detail = Some(nul),
            b'H' => e.hint = Some(nul),
            b'W' => e.where_ = Some(nul),
            b'R' => e.routine = Some(nul),
            _ => {}
        }
    }
    r.finish()?;
    if e.severity.is_empty() {
        e.severity = localized_severity.unwrap_or_else(|| "ERROR".into());
    }
    if e.code.is_empty() {
        return Err(ProtocolError::Malformed {
            message: "ErrorResponse",
            reason: "no SQLSTATE code",
        });
    }
    Ok(e)
}

/// Column names of a `RowDescription`.
pub(crate) fn parse_row_description(body: Bytes) -> Result<Vec<String>, ProtocolError> {
    let mut r = Reader::new(body, "RowDescription");
    let n = r.i16()?;
    let n = usize::try_from(n).map_err(|_| ProtocolError::Malformed {
        message: "RowDescription",
        reason: "negative column count",
    })?;
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        names.push(r.cstr()?);
        // table oid, column number, type oid, type size, type modifier, format
        r.bytes(4 + 2 + 4 + 2 + 4 + 2)?;
    }
    r.finish()?;
    Ok(names)
}

/// Values of a `DataRow` in text format.
pub(crate) fn parse_data_row(body: Bytes) -> Result<Vec<Option<String>>, ProtocolError> {
    let mut r = Reader::new(body, "DataRow");
    let n = r.i16()?;
    let n = usize::try_from(n).map_err(|_| ProtocolError::Malformed {
        message: "DataRow",
        reason: "negative column count",
    })?;
    let mut values = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.i32()?;
        if len < 0 {
            values.push(None);
        } else {
            // i32 >= 0 always fits in usize here.
            let raw = r.bytes(len as usize)?;
            let text = String::from_utf8(raw.to_vec()).map_err(|_| ProtocolError::Malformed {
                message: "DataRow",
                reason: "value is not valid UTF-8",
            })?;
            values.push(Some(text));
        }
    }
    r.finish()?;
    Ok(values)
}

/// `(name, value)` of a `ParameterStatus`.
pub(crate) fn parse_parameter_status(body: Bytes) -> Result<(String, String), ProtocolError> {
    let mut r = Reader::new(body, "ParameterStatus");
    let name = r.cstr()?;
    let value = r.cstr()?;
    r.finish()?;
    Ok((name, value))
}

/// The command tag of a `CommandComplete`.
pub(crate) fn parse_command_complete(body: Bytes) -> Result<String, ProtocolError> {
    let mut r = Reader::new(body, "CommandComplete");
    let tag = r.cstr()?;
    r.finish()?;
    Ok(tag)
}

/// Encodes a CopyData message carrying `payload` onto `out`.
pub(crate) fn encode_copy_data(payload: &[u8], out: &mut BytesMut) -> Result<(), ProtocolError> {
    let len = u32::try_from(payload.len())
        .ok()
        .and_then(|l| l.checked_add(4))
        .filter(|l| *l <= MAX_MESSAGE_LEN)
        .ok_or(ProtocolError::InvalidLength {
            tag: 'd',
            len: u32::MAX,
        })?;
    out.reserve(payload.len() + 5);
    out.extend_from_slice(b"d");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn splits_frames_across_partial_reads() {
        let mut wire = msg(b'd', b"hello");
        wire.extend(msg(b'c', b""));
        wire.extend(msg(b'Z', b"I"));
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        // Feed one byte at a time: every prefix must be either a frame or "need more".
        for b in wire {
            buf.extend_from_slice(&[b]);
            while let Some(f) = split_frame(&mut buf).unwrap() {
                frames.push(f);
            }
        }
        assert!(buf.is_empty());
        assert_eq!(
            frames,
            vec![
                Frame {
                    tag: b'd',
                    body: Bytes::from_static(b"hello")
                },
                Frame {
                    tag: b'c',
                    body: Bytes::new()
                },
                Frame {
                    tag: b'Z',
                    body: Bytes::from_static(b"I")
                },
            ]
        );
    }

    #[test]
    fn frames_share_the_read_buffer() {
        let mut buf = BytesMut::from(&msg(b'd', b"abcdef")[..]);
        let base = buf.as_ptr() as usize;
        let f = split_frame(&mut buf).unwrap().unwrap();
        assert_eq!(
            f.body.as_ptr() as usize,
            base + 5,
            "body must point into the read buffer"
        );
    }

    #[test]
    fn rejects_impossible_lengths() {
        let mut buf = BytesMut::from(&[b'd', 0, 0, 0, 3][..]);
        assert_eq!(
            split_frame(&mut buf),
            Err(ProtocolError::InvalidLength { tag: 'd', len: 3 })
        );
        let mut buf = BytesMut::from(&[b'd', 0x80, 0, 0, 0][..]);
        assert!(matches!(
            split_frame(&mut buf),
            Err(ProtocolError::InvalidLength { .. })
        ));
    }

    #[test]
    fn parses_auth_requests() {
        assert_eq!(
            parse_auth(Bytes::from_static(&[0, 0, 0, 0])).unwrap(),
            AuthRequest::Ok
        );
        assert_eq!(
            parse_auth(Bytes::from_static(&[0, 0, 0, 5, 1, 2, 3, 4])).unwrap(),
            AuthRequest::Md5Password { salt: [1, 2, 3, 4] }
        );
        assert_eq!(
            parse_auth(Bytes::from_static(
                b"\0\0\0\x0aSCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"
            ))
            .unwrap(),
            AuthRequest::Sasl {
                mechanisms: vec!["SCRAM-SHA-256-PLUS".into(), "SCRAM-SHA-256".into()]
            }
        );
        assert!(parse_auth(Bytes::from_static(&[0, 0, 0, 5, 1, 2])).is_err());
        assert!(
            parse_auth(Bytes::from_static(&[0, 0, 0, 0, 9])).is_err(),
            "trailing bytes"
        );
        assert_eq!(
            parse_auth(Bytes::from_static(&[0, 0, 0, 7])).unwrap(),
            AuthRequest::Unsupported("GSSAPI")
        );
    }

    #[test]
    fn parses_error_response() {
        let body = b"SFATAL\0VFATAL\0C28P01\0Mpassword authentication failed for user \"x\"\0Hhint\0Rauth_failed\0\0";
        let e = parse_error_fields(Bytes::from_static(body)).unwrap();
        assert_eq!(e.severity(), "FATAL");
        assert_eq!(e.code(), "28P01");
        assert_eq!(e.message(), "password authentication failed for user \"x\"");
        assert_eq!(e.hint(), Some("hint"));
        assert_eq!(e.detail(), None);
        assert_eq!(e.routine(), Some("auth_failed"));
        assert!(parse_error_fields(Bytes::from_static(b"SERROR\0Mno code\0\0")).is_err());
        assert!(parse_error_fields(Bytes::from_static(b"C12345\0Mtrunc")).is_err());
    }

    #[test]
    fn parses_rows() {
        let mut desc = vec![0, 2];
        for name in ["systemid", "timeline"] {
            desc.extend_from_slice(name.as_bytes());
            desc.push(0);
            desc.extend_from_slice(&[0; 18]);
        }
        assert_eq!(
            parse_row_description(Bytes::from(desc)).unwrap(),
            vec!["systemid".to_string(), "timeline".to_string()]
        );
        let row = [0, 2, 0, 0, 0, 2, b'4', b'2', 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            parse_data_row(Bytes::copy_from_slice(&row)).unwrap(),
            vec![Some("42".to_string()), None]
        );
        assert!(parse_data_row(Bytes::from_static(&[0, 1, 0, 0, 0, 9, b'x'])).is_err());
    }

    #[test]
    fn encodes_copy_data() {
        let mut out = BytesMut::new();
        encode_copy_data(b"rXYZ", &mut out).unwrap();
        assert_eq!(&out[..], &msg(b'd', b"rXYZ")[..]);
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn frames() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
            prop::collection::vec(
                (any::<u8>(), prop::collection::vec(any::<u8>(), 0..300)),
                0..20,
            )
        }

        proptest! {
            /// However the bytes are cut into reads, the same frames come out.
            #[test]
            fn chunking_does_not_change_frames(frames in frames(), cuts in prop::collection::vec(1usize..700, 1..50)) {
                let wire: Vec<u8> = frames.iter().flat_map(|(t, b)| msg(*t, b)).collect();
                let mut buf = BytesMut::new();
                let mut out = Vec::new();
                let mut pos = 0;
                let mut cut = cuts.iter().cycle();
                while pos < wire.len() {
                    let n = (*cut.next().unwrap()).min(wire.len() - pos);
                    buf.extend_from_slice(&wire[pos..pos + n]);
                    pos += n;
                    while let Some(f) = split_frame(&mut buf).unwrap() {
                        out.push((f.tag, f.body.to_vec()));
                    }
                }
                prop_assert!(buf.is_empty());
                prop_assert_eq!(out, frames);
            }

            /// Arbitrary server bytes never panic any parser.
            #[test]
            fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
                let mut buf = BytesMut::from(&data[..]);
                while let Ok(Some(_)) = split_frame(&mut buf) {}
                let b = Bytes::from(data);
                let _ = parse_auth(b.clone());
                let _ = parse_error_fields(b.clone());
                let _ = parse_row_description(b.clone());
                let _ = parse_data_row(b.clone());
                let _ = parse_parameter_status(b.clone());
                let _ = parse_command_complete(b);
            }
        }
    }
}
