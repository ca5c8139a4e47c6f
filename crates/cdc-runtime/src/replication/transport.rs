//! The socket (plain TCP, TLS, or a Unix-domain socket) with a reusable read
//! buffer and a write buffer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;

use super::error::{DbError, ReplicationError};
use super::wire::{peek_frame, split_frame, Frame, Peek};

/// Room made for a socket read. Large reads keep the syscall count low at
/// high WAL rates; messages are sliced out of this buffer without copying.
///
/// While streaming, the first message of a read is still held when the rest
/// of it is drained, so the room for the next read usually comes in a fresh
/// buffer, and `bytes` sizes that at 64 KiB at most: most reads are of up to
/// 64 KiB. Releasing the message earlier (reads of up to 128 KiB, reclaimed
/// in place) cost more client CPU, measured (benches/RESULTS.md).
pub(crate) const READ_CHUNK: usize = 128 * 1024;
/// Below this much free room the buffer is grown (or a fresh one taken) before reading.
const MIN_FREE: usize = 16 * 1024;

/// A TCP stream, optionally wrapped in TLS, or a Unix-domain socket.
pub(crate) enum Socket {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            #[cfg(unix)]
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            #[cfg(unix)]
            Socket::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_flush(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            #[cfg(unix)]
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            #[cfg(unix)]
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Framed access to the socket.
pub(crate) struct Transport {
    socket: Socket,
    read: BytesMut,
    pub(crate) write: BytesMut,
    /// Whether the socket's receive low-water mark is raised (see
    /// [`wake_only_after`](Self::wake_only_after)); lowered before any read.
    wake_raised: bool,
}

/// Shows sizes only: the buffers hold row data and, briefly, password messages.
impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.is_tls())
            .field("buffered", &self.read.len())
            .field("read_capacity", &self.read.capacity())
            .finish()
    }
}

impl Transport {
    pub(crate) fn new(socket: Socket) -> Self {
        Transport {
            socket,
            read: BytesMut::with_capacity(READ_CHUNK),
            write: BytesMut::with_capacity(1024),
            wake_raised: false,
        }
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self.socket, Socket::Tls(_))
    }

    /// Channel binding data for the server's certificate, on TLS connections
    /// whose certificate has a usable signature hash.
    pub(crate) fn tls_server_end_point(&self) -> Option<Vec<u8>> {
        match &self.socket {
            Socket::Tls(s) => {
                let cert = s.get_ref().1.peer_certificates()?.first()?;
                super::channel_binding::tls_server_end_point(cert)
            }
            _ => None,
        }
    }

    /// The next complete backend message. Reads the socket only when no complete
    /// message is buffered. Cancel-safe: dropping the future loses no bytes.
    pub(crate) async fn read_frame(&mut self) -> Result<Frame, ReplicationError> {
        loop {
            if let Some(frame) = split_frame(&mut self.read)? {
                return Ok(frame);
            }
            self.fill().await?;
        }
    }

    /// Hands the bodies of the complete messages of type `tag` at the front
    /// of the read buffer to `f`, in place (no copy, no allocation, no
    /// reference count per message), and drops them from the buffer. Stops
    /// at a message of another type ([`InPlace::Other`], left for
    /// [`read_frame`](Self::read_frame)) or at an incomplete one
    /// ([`InPlace::NeedMore`]: call [`fill`](Self::fill)). An error from
    /// `f` is returned at once; the message it failed on and those after it
    /// stay in the buffer. So does a message with an impossible length (a
    /// protocol error); those before it are dropped, as they were handed over.
    pub(crate) fn take_in_place<E>(
        &mut self,
        tag: u8,
        f: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<InPlace, E>
    where
        E: From<ReplicationError>,
    {
        take_in_place(&mut self.read, tag, f)
    }

    /// Reads the socket once, into at least `MIN_FREE` bytes of room (more
    /// if a partly read message needs it, see [`take_in_place`](Self::take_in_place)).
    pub(crate) async fn fill(&mut self) -> Result<(), ReplicationError> {
        if self.wake_raised {
            // Lowering the mark signals the socket readable at once if
            // anything is queued (Linux's `tcp_set_rcvlowat`), so the read
            // below never waits for bytes that already came.
            if let Some(tcp) = self.tcp() {
                low_water::set(tcp, 1).map_err(ReplicationError::Io)?;
            }
            self.wake_raised = false;
        }
        if self.read.capacity() - self.read.len() < MIN_FREE {
            self.read.reserve(READ_CHUNK);
        }
        let n = self.socket.read_buf(&mut self.read).await?;
        if n == 0 {
            return Err(ReplicationError::Closed);
        }
        Ok(())
    }

    /// The bytes the kernel holds for this socket, not yet read (`FIONREAD`;
    /// on TLS the encrypted bytes, close to the plain ones). `None` where it
    /// cannot be asked.
    pub(crate) fn queued(&self) -> Option<usize> {
        #[cfg(unix)]
        {
            use std::os::fd::AsFd;
            let fd = match &self.socket {
                Socket::Plain(s) => s.as_fd(),
                Socket::Tls(s) => s.get_ref().0.as_fd(),
                Socket::Unix(s) => s.as_fd(),
            };
            rustix::io::ioctl_fionread(fd)
                .ok()
                .and_then(|n| usize::try_from(n).ok())
        }
        #[cfg(not(unix))]
        {
            None
        }
    }

    /// The TCP socket (under TLS, if any); `None` for a Unix-domain socket.
    fn tcp(&self) -> Option<&TcpStream> {
        match &self.socket {
            Socket::Plain(s) => Some(s),
            Socket::Tls(s) => Some(s.get_ref().0),
            #[cfg(unix)]
            Socket::Unix(_) => None,
        }
    }

    /// Until the next read, has the kernel signal the socket readable only
    /// once `bytes` are queued (`SO_RCVLOWAT`), or the connection ends, or
    /// the receive buffer fills: while the caller does not read (a pause
    /// between reads), each segment the server sends would otherwise wake
    /// the runtime's poller for nothing (measured: about 50 wake-ups per
    /// read on a 1M-row transaction). The next [`fill`](Self::fill)
    /// lowers the mark again first. Returns whether the mark was raised
    /// (Linux TCP only: elsewhere lowering it may not signal the data
    /// already queued, and a Unix-domain socket signals readable whatever
    /// its mark).
    pub(crate) fn wake_only_after(&mut self, bytes: usize) -> bool {
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        if !cfg!(target_os = "linux") {
            return false;
        }
        let Some(tcp) = self.tcp() else {
            return false;
        };
        if low_water::set(tcp, bytes).is_err() {
            return self.wake_raised;
        }
        // Then forget the readiness the runtime remembers from earlier
        // reads, so that [`readable`](Self::readable) waits for the kernel's
        // next signal. Only with the mark raised: lowering it before the
        // next read signals what is queued, so no read waits on a readiness
        // forgotten here. (A signal between the two is forgotten too; the
        // pause then ends on its timer.)
        let _ = tcp.try_io(tokio::io::Interest::READABLE, || {
            Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
        });
        self.wake_raised = true;
        true
    }

    /// Completes when the kernel signals the socket readable (after
    /// [`wake_only_after`](Self::wake_only_after): once that many bytes are
    /// queued, or the connection ended). Reads nothing.
    pub(crate) async fn readable(&self) {
        // An error shows in the next read.
        let _ = match &self.socket {
            Socket::Plain(s) => s.readable().await,
            Socket::Tls(s) => s.get_ref().0.readable().await,
            #[cfg(unix)]
            Socket::Unix(s) => s.readable().await,
        };
    }

    /// The next complete backend message if one is buffered; never reads.
    pub(crate) fn buffered_frame(&mut self) -> Result<Option<Frame>, ReplicationError> {
        Ok(split_frame(&mut self.read)?)
    }

    /// Writes and flushes everything in the write buffer. Not cancel-safe: a
    /// dropped send leaves the connection in an unknown state.
    pub(crate) async fn send(&mut self) -> Result<(), ReplicationError> {
        let result = async {
            self.socket.write_all(&self.write).await?;
            self.socket.flush().await
        }
        .await;
        self.write.clear();
        result.map_err(ReplicationError::Io)
    }

    /// Best-effort close: flush pending output and shut down the write side.
    pub(crate) async fn shutdown(&mut self) -> Result<(), ReplicationError> {
        self.send().await?;
        self.socket.shutdown().await.map_err(ReplicationError::Io)
    }
}

/// [`Transport::take_in_place`] on a buffer.
pub(crate) fn take_in_place<E>(
    buf: &mut BytesMut,
    tag: u8,
    f: &mut impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<InPlace, E>
where
    E: From<ReplicationError>,
{
    let mut used = 0;
    let outcome = loop {
        let rest = buf.get(used..).unwrap_or_default();
        let peeked = match peek_frame(rest) {
            Ok(peeked) => peeked,
            Err(e) => {
                // The messages before the bad one were handed over.
                buf.advance(used);
                return Err(ReplicationError::from(e).into());
            }
        };
        match peeked {
            Peek::Complete { tag: t, body } if t == tag => {
                let total = body.len() + 5;
                if let Err(e) = f(body) {
                    buf.advance(used);
                    return Err(e);
                }
                used += total;
            }
            Peek::Complete { .. } => break InPlace::Other,
            Peek::Incomplete { total } => {
                let missing = total.saturating_sub(rest.len());
                buf.advance(used);
                used = 0;
                if buf.capacity() - buf.len() < missing {
                    buf.reserve(missing);
                }
                break InPlace::NeedMore;
            }
        }
    };
    buf.advance(used);
    Ok(outcome)
}

/// Where [`Transport::take_in_place`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InPlace {
    /// A complete message of another type is next.
    Other,
    /// The next message is not complete: read more.
    NeedMore,
}

/// Logs a `NoticeResponse` (or an unparsable one).
pub(crate) fn log_notice(notice: Result<DbError, super::error::ProtocolError>) {
    match notice {
        Ok(n) => tracing::info!(
            severity = n.severity(),
            code = n.code(),
            detail = n.detail(),
            "server notice: {}",
            n.message()
        ),
        Err(e) => tracing::warn!("malformed notice from the server: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tag: u8, body: &[u8], out: &mut BytesMut) {
        out.extend_from_slice(&[tag]);
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
    }

    fn take(buf: &mut BytesMut, seen: &mut Vec<Vec<u8>>) -> Result<InPlace, ReplicationError> {
        take_in_place(buf, b'd', &mut |b: &[u8]| {
            seen.push(b.to_vec());
            Ok::<_, ReplicationError>(())
        })
    }

    /// A transport on one end of a real loopback connection, and the other end.
    async fn loopback() -> (Transport, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (
            Transport::new(Socket::Plain(client.unwrap())),
            server.unwrap().0,
        )
    }

    /// Waits (by polling FIONREAD) until the kernel holds `n` unread bytes.
    async fn until_queued(t: &Transport, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while t.queued() != Some(n) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?} queued",
                t.queued()
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_raised_low_water_mark_holds_back_wakeups_but_never_a_read() {
        use std::time::Duration;
        let (mut t, mut server) = loopback().await;

        // A read that fills the buffer leaves the runtime's readiness set;
        // raising the mark forgets it, so 100 more bytes (below the mark)
        // wake nothing.
        t.read.extend_from_slice(&[0u8; 40_000]);
        let room = t.read.capacity() - t.read.len();
        server.write_all(&vec![6u8; room + 1000]).await.unwrap();
        until_queued(&t, room + 1000).await;
        t.fill().await.unwrap();
        assert_eq!(t.read.len(), 40_000 + room, "one full read");
        t.read.clear();
        assert!(t.wake_only_after(64 * 1024));
        server.write_all(&[7u8; 100]).await.unwrap();
        until_queued(&t, 1100).await;
        let woken = tokio::time::timeout(Duration::from_millis(200), t.readable()).await;
        assert!(woken.is_err(), "woken below the mark");
        // The read lowers the mark and gets them at once.
        tokio::time::timeout(Duration::from_secs(10), t.fill())
            .await
            .expect("the read waited although bytes were queued")
            .unwrap();
        assert_eq!(t.read.len(), 1100);
        t.read.clear();
        t.read.extend_from_slice(&[0u8; 100]);

        // Raised with nothing queued, a read still wakes for the next bytes.
        assert!(t.wake_only_after(64 * 1024));
        let writer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            server.write_all(&[8u8; 10]).await.unwrap();
        };
        let (read, ()) = tokio::join!(
            tokio::time::timeout(Duration::from_secs(10), t.fill()),
            writer
        );
        read.expect("the read waited for the mark").unwrap();
        assert_eq!(t.read.len(), 110);

        // Reaching the mark wakes (what ends a pause early).
        assert!(t.wake_only_after(64 * 1024));
        server.write_all(&vec![9u8; 70 * 1024]).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), t.readable())
            .await
            .expect("not woken at the mark");
        // A mark raised while that much is queued already holds back
        // nothing from the read.
        assert!(t.wake_only_after(64 * 1024));
        tokio::time::timeout(Duration::from_secs(10), t.fill())
            .await
            .expect("the read waited although the mark was reached")
            .unwrap();
        assert_eq!(t.read.len(), 110 + 70 * 1024);
    }

    #[test]
    fn copy_data_is_taken_in_place_up_to_another_message() {
        let mut buf = BytesMut::new();
        msg(b'd', b"one", &mut buf);
        msg(b'd', b"", &mut buf);
        msg(b'c', b"", &mut buf);
        msg(b'd', b"after", &mut buf);
        let mut seen = Vec::new();
        assert_eq!(take(&mut buf, &mut seen).unwrap(), InPlace::Other);
        assert_eq!(seen, [b"one".to_vec(), Vec::new()]);
        // CopyDone is left for read_frame, and what follows it too.
        let frame = split_frame(&mut buf).unwrap().unwrap();
        assert_eq!(frame.tag, b'c');
        assert_eq!(take(&mut buf, &mut seen).unwrap(), InPlace::NeedMore);
        assert_eq!(seen.len(), 3);
        assert!(buf.is_empty());
    }

    #[test]
    fn a_partial_message_waits_with_room_for_its_rest() {
        let mut whole = BytesMut::new();
        msg(b'd', b"first", &mut whole);
        msg(b'd', &[7; 1000], &mut whole);
        // Every split point: header or body cut anywhere.
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            let mut seen = Vec::new();
            assert_eq!(take(&mut buf, &mut seen).unwrap(), InPlace::NeedMore);
            let first_done = cut >= 10;
            assert_eq!(seen.len(), usize::from(first_done), "cut {cut}");
            let rest = &whole[cut..];
            if cut > 10 + 5 {
                // The header of the second is in: room is reserved for the rest.
                assert!(buf.capacity() - buf.len() >= rest.len(), "cut {cut}");
            }
            buf.extend_from_slice(rest);
            assert_eq!(take(&mut buf, &mut seen).unwrap(), InPlace::NeedMore);
            assert_eq!(seen.len(), 2, "cut {cut}");
            assert_eq!(seen[1], vec![7; 1000]);
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn impossible_lengths_and_callback_errors_stop_the_copy() {
        let mut buf = BytesMut::new();
        msg(b'd', b"before", &mut buf);
        buf.extend_from_slice(&[b'd', 0, 0, 0, 3, 0]);
        let mut seen = Vec::new();
        assert!(matches!(
            take(&mut buf, &mut seen),
            Err(ReplicationError::Protocol(_))
        ));
        // What was handed over is gone; the bad message is at the front.
        assert_eq!(seen, [b"before".to_vec()]);
        assert_eq!(&buf[..], &[b'd', 0, 0, 0, 3, 0]);
        let mut buf = BytesMut::new();
        msg(b'd', b"ok", &mut buf);
        msg(b'd', b"bad", &mut buf);
        msg(b'd', b"never", &mut buf);
        let mut seen = Vec::new();
        let r = take_in_place(&mut buf, b'd', &mut |b: &[u8]| {
            if b == b"bad" {
                return Err(ReplicationError::InvalidArgument("bad row".into()));
            }
            seen.push(b.to_vec());
            Ok(())
        });
        assert!(matches!(r, Err(ReplicationError::InvalidArgument(_))));
        assert_eq!(seen, [b"ok".to_vec()]);
        // The failing message is still at the front.
        assert_eq!(
            split_frame(&mut buf).unwrap().unwrap().body.as_ref(),
            b"bad"
        );
    }

    /// Messages of a few types, as the server could send them.
    fn messages() -> impl proptest::strategy::Strategy<Value = Vec<(u8, Vec<u8>)>> {
        use proptest::prelude::*;
        let tag = prop::sample::select(vec![b'd', b'd', b'd', b'c', b'k']);
        prop::collection::vec((tag, prop::collection::vec(any::<u8>(), 0..300)), 0..20)
    }

    proptest::proptest! {
        /// However the socket cuts the stream, taking CopyData in place and
        /// splitting the rest off as frames yields every message once, in order.
        #[test]
        fn in_place_and_split_frames_agree_over_any_cuts(
            sent in messages(),
            cuts in proptest::collection::vec(1usize..400, 0..40),
        ) {
            let mut wire = BytesMut::new();
            for (tag, body) in &sent {
                msg(*tag, body, &mut wire);
            }
            let mut pieces = Vec::new();
            let mut rest = &wire[..];
            for cut in cuts {
                let (piece, after) = rest.split_at(cut.min(rest.len()));
                pieces.push(piece);
                rest = after;
            }
            pieces.push(rest);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut pieces = pieces.into_iter();
            loop {
                let mut copy = Vec::new();
                let outcome = take(&mut buf, &mut copy).unwrap();
                got.extend(copy.into_iter().map(|b| (b'd', b)));
                match outcome {
                    InPlace::Other => {
                        let frame = split_frame(&mut buf).unwrap().unwrap();
                        got.push((frame.tag, frame.body.to_vec()));
                    }
                    InPlace::NeedMore => match pieces.next() {
                        Some(piece) => buf.extend_from_slice(piece),
                        None => break,
                    },
                }
            }
            proptest::prop_assert_eq!(got, sent);
            proptest::prop_assert!(buf.is_empty());
        }

        /// Arbitrary bytes from the server never panic the framing: every
        /// message is a complete one or an error, and an error consumes nothing.
        #[test]
        fn arbitrary_bytes_give_frames_or_errors(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let mut buf = BytesMut::from(&bytes[..]);
            loop {
                let before = buf.len();
                match take(&mut buf, &mut Vec::new()) {
                    Err(_) => {
                        proptest::prop_assert!(split_frame(&mut buf).is_err());
                        break;
                    }
                    Ok(InPlace::NeedMore) => break,
                    Ok(InPlace::Other) => {
                        let frame = split_frame(&mut buf).unwrap().unwrap();
                        proptest::prop_assert!(before - buf.len() >= frame.body.len() + 5);
                    }
                }
            }
        }
    }
}

/// The socket's receive low-water mark, `SO_RCVLOWAT`.
mod low_water {
    use std::io;

    use tokio::net::TcpStream;

    /// Sets `SO_RCVLOWAT` to `bytes` (at least 1).
    #[cfg(target_os = "linux")]
    pub(super) fn set(socket: &TcpStream, bytes: i32) -> io::Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        let value: libc::c_int = bytes.max(1);
        let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let fd = socket.as_fd();
        // No safe binding offers this option (socket2 and rustix do not).
        // SAFETY: `fd` is borrowed from the open socket for the whole call;
        // `value` is a live `c_int` and `len` is its size, as SO_RCVLOWAT takes.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                std::ptr::from_ref(&value).cast(),
                len,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Not raised elsewhere: lowering it again may not signal queued data.
    #[cfg(not(target_os = "linux"))]
    pub(super) fn set(_socket: &TcpStream, bytes: i32) -> io::Result<()> {
        if bytes <= 1 {
            Ok(())
        } else {
            Err(io::Error::from(io::ErrorKind::Unsupported))
        }
    }
}
