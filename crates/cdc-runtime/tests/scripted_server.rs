//! The replication connection against a scripted fake server on 127.0.0.1:
//! protocol violations, error classification, backpressure and large
//! messages, which a real server will not produce on demand.

// Test code: panicking on unexpected results is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::{Duration, Instant};

use cdc_core::Lsn;
use cdc_runtime::replication::{
    AuthError, PgOutputOptions, ProtocolError, ReplicationConfig, ReplicationConnection,
    ReplicationError, SslMode, TlsError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn param(name: &str, value: &str) -> Vec<u8> {
    msg(b'S', format!("{name}\0{value}\0").as_bytes())
}

fn auth_ok_and_ready() -> Vec<u8> {
    let mut v = msg(b'R', &[0, 0, 0, 0]);
    v.extend(param("client_encoding", "UTF8"));
    v.extend(param("DateStyle", "ISO, MDY"));
    v.extend(param("IntervalStyle", "postgres"));
    v.extend(msg(b'K', &[0, 0, 0, 7, 1, 2, 3, 4]));
    v.extend(msg(b'Z', b"I"));
    v
}

fn error_response(severity: &str, code: &str, message: &str) -> Vec<u8> {
    msg(
        b'E',
        format!("S{severity}\0V{severity}\0C{code}\0M{message}\0\0").as_bytes(),
    )
}

/// Reads the untyped startup packet (or SSLRequest); returns its body.
async fn read_startup(s: &mut TcpStream) -> Vec<u8> {
    let len = s.read_u32().await.unwrap() as usize;
    let mut body = vec![0; len - 4];
    s.read_exact(&mut body).await.unwrap();
    body
}

async fn read_message(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let tag = s.read_u8().await.unwrap();
    let len = s.read_u32().await.unwrap() as usize;
    let mut body = vec![0; len - 4];
    s.read_exact(&mut body).await.unwrap();
    (tag, body)
}

/// Starts a one-connection server running `script`.
async fn serve<F, Fut>(script: F) -> (ReplicationConfig, JoinHandle<()>)
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        script(stream).await;
    });
    let config = ReplicationConfig::new("u")
        .host("127.0.0.1")
        .port(port)
        .dbname("d")
        .sslmode(SslMode::Disable)
        .connect_timeout(Duration::from_secs(5));
    (config, handle)
}

/// Accepts the startup, authenticates with trust, and answers START_REPLICATION
/// with CopyBothResponse. Returns the socket in CopyBoth mode.
async fn until_copy_both(s: &mut TcpStream) {
    let startup = read_startup(s).await;
    let text = String::from_utf8_lossy(&startup);
    assert!(text.contains("replication\0database\0"), "{text}");
    assert!(text.contains("client_encoding\0UTF8\0"), "{text}");
    assert!(
        text.contains(
            "-c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=3 -c TimeZone=UTC"
        ),
        "{text}"
    );
    s.write_all(&auth_ok_and_ready()).await.unwrap();
    let (tag, body) = read_message(s).await;
    assert_eq!(tag, b'Q');
    assert!(
        body.starts_with(b"START_REPLICATION SLOT \"s\" LOGICAL 0/10 ("),
        "{}",
        String::from_utf8_lossy(&body)
    );
    s.write_all(&msg(b'W', &[0, 0, 0])).await.unwrap();
}

async fn start(config: &ReplicationConfig) -> cdc_runtime::replication::ReplicationStream {
    let conn = ReplicationConnection::connect(config).await.unwrap();
    conn.start_replication(
        "s",
        Lsn::from_u64(0x10),
        &PgOutputOptions::for_server(150_000, ["p"]),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn scram_without_server_proof_is_refused() {
    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        s.write_all(&msg(b'R', b"\0\0\0\x0aSCRAM-SHA-256\0\0"))
            .await
            .unwrap();
        let (tag, body) = read_message(&mut s).await;
        assert_eq!(tag, b'p');
        assert!(body.starts_with(b"SCRAM-SHA-256\0"));
        // Skip SASLContinue/SASLFinal: claim success without proving the password.
        s.write_all(&auth_ok_and_ready()).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let err = ReplicationConnection::connect(&config.password("pw"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ReplicationError::Auth(AuthError::IncompleteScram)),
        "{err}"
    );
    assert!(!err.is_transient());
    server.await.unwrap();
}

#[tokio::test]
async fn unsupported_sasl_mechanisms_and_methods() {
    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        s.write_all(&msg(b'R', b"\0\0\0\x0aSCRAM-SHA-256-PLUS\0\0"))
            .await
            .unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let err = ReplicationConnection::connect(&config.password("pw"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Auth(AuthError::NoSupportedMechanism(_))
        ),
        "{err}"
    );
    server.await.unwrap();

    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        s.write_all(&msg(b'R', &[0, 0, 0, 7])).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let err = ReplicationConnection::connect(&config).await.unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Auth(AuthError::UnsupportedMethod("GSSAPI"))
        ),
        "{err}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn md5_answer_is_the_libpq_hash() {
    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        s.write_all(&msg(b'R', &[0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef]))
            .await
            .unwrap();
        let (tag, body) = read_message(&mut s).await;
        assert_eq!(tag, b'p');
        assert_eq!(body, format!("{MD5_KNOWN_ANSWER}\0").into_bytes());
        s.write_all(&auth_ok_and_ready()).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let conn = ReplicationConnection::connect(&config.password("pw"))
        .await
        .unwrap();
    assert_eq!(conn.backend_pid(), Some(7));
    drop(conn);
    server.await.unwrap();
}

/// md5(md5(password || user) || salt) for user "u", password "pw", salt deadbeef,
/// computed independently with Python's hashlib:
/// `i=md5(b"pwu").hexdigest(); "md5"+md5(i.encode()+bytes.fromhex("deadbeef")).hexdigest()`
const MD5_KNOWN_ANSWER: &str = "md5c2d25c42b7bf95561529b6ca889357e7";

#[tokio::test]
async fn session_settings_are_checked() {
    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        let mut reply = msg(b'R', &[0, 0, 0, 0]);
        reply.extend(param("DateStyle", "German, DMY"));
        reply.extend(msg(b'Z', b"I"));
        s.write_all(&reply).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let err = ReplicationConnection::connect(&config).await.unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Protocol(ProtocolError::SessionSetting {
                name: "DateStyle",
                ..
            })
        ),
        "{err}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn odd_ssl_answer_is_rejected() {
    let (config, server) = serve(|mut s| async move {
        let body = read_startup(&mut s).await;
        assert_eq!(body, 80_877_103u32.to_be_bytes());
        s.write_all(b"X").await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let err = ReplicationConnection::connect(&config.sslmode(SslMode::Prefer))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Tls(TlsError::UnexpectedResponse(b'X'))
        ),
        "{err}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn server_error_during_streaming_is_classified() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        s.write_all(&msg(b'd', b"k-first")).await.unwrap();
        s.write_all(&error_response(
            "FATAL",
            "57P01",
            "terminating connection due to administrator command",
        ))
        .await
        .unwrap();
    })
    .await;
    let mut stream = start(&config).await;
    assert_eq!(
        &stream.next_message().await.unwrap().unwrap()[..],
        b"k-first"
    );
    let err = stream.next_message().await.unwrap_err();
    assert_eq!(err.code(), Some("57P01"));
    assert!(err.is_transient(), "{err}");
    // The stream stays failed.
    assert!(matches!(
        stream.next_message().await,
        Err(ReplicationError::StreamEnded)
    ));
    server.await.unwrap();
}

#[tokio::test]
async fn connection_closed_mid_message_is_transient() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        let full = msg(b'd', &[7u8; 100]);
        s.write_all(&full[..50]).await.unwrap();
    })
    .await;
    let mut stream = start(&config).await;
    let err = stream.next_message().await.unwrap_err();
    assert!(matches!(err, ReplicationError::Closed), "{err}");
    assert!(err.is_transient());
    server.await.unwrap();
}

#[tokio::test]
async fn impossible_length_is_a_protocol_error() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        s.write_all(&[b'd', 0, 0, 0, 2]).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let mut stream = start(&config).await;
    let err = stream.next_message().await.unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Protocol(ProtocolError::InvalidLength { len: 2, .. })
        ),
        "{err}"
    );
    assert!(!err.is_transient());
    drop(stream);
    server.await.unwrap();
}

#[tokio::test]
async fn send_and_finish_follow_the_copy_both_protocol() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        s.write_all(&msg(b'd', b"w1")).await.unwrap();
        // The client's status update arrives as CopyData.
        assert_eq!(read_message(&mut s).await, (b'd', b"r-status".to_vec()));
        // Then CopyDone; data still in flight is discarded by the client.
        assert_eq!(read_message(&mut s).await, (b'c', vec![]));
        let mut tail = msg(b'd', b"late");
        tail.extend(msg(b'c', b""));
        tail.extend(msg(b'C', b"START_REPLICATION\0"));
        tail.extend(msg(b'Z', b"I"));
        s.write_all(&tail).await.unwrap();
        // The connection is usable again.
        let (tag, body) = read_message(&mut s).await;
        assert_eq!(
            (tag, body),
            (b'Q', b"SHOW \"server_version_num\"\0".to_vec())
        );
        let mut reply = msg(
            b'T',
            b"\0\x01server_version_num\0\0\0\0\0\0\0\0\0\0\x19\xff\xff\xff\xff\xff\xff\0\0",
        );
        reply.extend(msg(b'D', b"\0\x01\0\0\0\x06150004"));
        reply.extend(msg(b'C', b"SHOW\0"));
        reply.extend(msg(b'Z', b"I"));
        s.write_all(&reply).await.unwrap();
        assert_eq!(read_message(&mut s).await.0, b'X');
    })
    .await;
    let mut stream = start(&config).await;
    assert_eq!(&stream.next_message().await.unwrap().unwrap()[..], b"w1");
    stream.send(b"r-status").await.unwrap();
    let mut conn = stream.finish().await.unwrap();
    assert_eq!(conn.server_version_num().await.unwrap(), 150_004);
    conn.close().await.unwrap();
    server.await.unwrap();
}

#[tokio::test]
async fn server_copy_done_ends_the_stream() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        s.write_all(&msg(b'c', b"")).await.unwrap();
        assert_eq!(read_message(&mut s).await, (b'c', vec![]));
        let mut tail = msg(b'C', b"START_REPLICATION\0");
        tail.extend(msg(b'Z', b"I"));
        s.write_all(&tail).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let mut stream = start(&config).await;
    assert_eq!(stream.next_message().await.unwrap(), None);
    assert_eq!(stream.next_message().await.unwrap(), None);
    assert!(matches!(
        stream.send(b"x").await,
        Err(ReplicationError::StreamEnded)
    ));
    let conn = stream.finish().await.unwrap();
    drop(conn);
    server.await.unwrap();
}

/// `buffered_message` hands out what one read brought in and never reads the
/// socket itself; a notice between messages is skipped, CopyDone ends it.
#[tokio::test]
async fn buffered_messages_come_without_reading() {
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        let mut burst = msg(b'd', b"one");
        burst.extend(msg(b'N', b"SNOTICE\0C00000\0Mhello\0\0"));
        burst.extend(msg(b'd', b"two"));
        burst.extend(msg(b'd', b"three"));
        s.write_all(&burst).await.unwrap();
        release_rx.await.unwrap();
        s.write_all(&msg(b'd', b"four")).await.unwrap();
        s.write_all(&msg(b'c', b"")).await.unwrap();
        let _ = read_message(&mut s).await;
    })
    .await;
    let mut stream = start(&config).await;
    // The burst may take more than one read; collect it through next_message.
    let mut got = vec![stream.next_message().await.unwrap().unwrap()];
    while got.len() < 3 {
        match stream.buffered_message().unwrap() {
            Some(m) => got.push(m),
            None => got.push(stream.next_message().await.unwrap().unwrap()),
        }
    }
    assert_eq!(got, [&b"one"[..], b"two", b"three"]);
    // Nothing buffered, and the server sends nothing until released.
    assert_eq!(stream.buffered_message().unwrap(), None);
    release_tx.send(()).unwrap();
    assert_eq!(
        stream.next_message().await.unwrap().as_deref(),
        Some(&b"four"[..])
    );
    assert_eq!(stream.next_message().await.unwrap(), None);
    assert_eq!(stream.buffered_message().unwrap(), None);
    drop(stream);
    server.abort();
}

/// Backpressure and throughput: the server pushes 64 MiB of CopyData; while the
/// client does not poll, the server's writes stall (nothing reads the socket in
/// the background); once polled, every message arrives intact and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumer_stalls_the_server_then_receives_everything_in_order() {
    const MESSAGES: u32 = 16 * 1024;
    const SIZE: usize = 4096;
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let (config, server) = serve(move |mut s| async move {
        until_copy_both(&mut s).await;
        let mut batch = Vec::with_capacity(64 * (SIZE + 5));
        for i in 0..MESSAGES {
            let mut body = vec![(i % 251) as u8; SIZE];
            body[..4].copy_from_slice(&i.to_be_bytes());
            batch.extend(msg(b'd', &body));
            if batch.len() >= 64 * SIZE {
                s.write_all(&batch).await.unwrap();
                batch.clear();
            }
        }
        s.write_all(&batch).await.unwrap();
        let _ = done_tx.send(());
        let _ = s.read_u8().await;
    })
    .await;
    let mut stream = start(&config).await;
    let first = stream.next_message().await.unwrap().unwrap();
    assert_eq!(&first[..4], &0u32.to_be_bytes());
    // Not polling: the server cannot finish writing 64 MiB into socket buffers.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut done_rx)
            .await
            .is_err(),
        "the server wrote everything although the client was not reading"
    );
    let started = Instant::now();
    let mut bytes = first.len();
    for i in 1..MESSAGES {
        let m = stream.next_message().await.unwrap().unwrap();
        assert_eq!(m.len(), SIZE);
        assert_eq!(&m[..4], &i.to_be_bytes(), "message {i} out of order");
        assert!(
            m[4..].iter().all(|b| *b == (i % 251) as u8),
            "message {i} corrupted"
        );
        bytes += m.len();
    }
    let elapsed = started.elapsed();
    println!(
        "received {} MiB in {:?}: {:.0} MiB/s",
        bytes / (1024 * 1024),
        elapsed,
        bytes as f64 / (1024.0 * 1024.0) / elapsed.as_secs_f64()
    );
    done_rx.await.unwrap();
    drop(stream);
    server.await.unwrap();
}

#[tokio::test]
async fn large_message_spanning_many_reads() {
    const SIZE: usize = 3 * 1024 * 1024 + 17;
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        let body: Vec<u8> = (0..SIZE).map(|i| (i % 253) as u8).collect();
        s.write_all(&msg(b'd', &body)).await.unwrap();
        s.write_all(&msg(b'd', b"after")).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let mut stream = start(&config).await;
    let big = stream.next_message().await.unwrap().unwrap();
    assert_eq!(big.len(), SIZE);
    assert!(big.iter().enumerate().all(|(i, b)| *b == (i % 253) as u8));
    assert_eq!(&stream.next_message().await.unwrap().unwrap()[..], b"after");
    drop(stream);
    server.await.unwrap();
}

#[tokio::test]
async fn start_replication_error_is_returned_after_ready() {
    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        s.write_all(&auth_ok_and_ready()).await.unwrap();
        let (tag, _) = read_message(&mut s).await;
        assert_eq!(tag, b'Q');
        let mut reply = error_response("ERROR", "42704", "replication slot \"s\" does not exist");
        reply.extend(msg(b'Z', b"I"));
        s.write_all(&reply).await.unwrap();
        let _ = s.read_u8().await;
    })
    .await;
    let conn = ReplicationConnection::connect(&config).await.unwrap();
    let err = conn
        .start_replication(
            "s",
            Lsn::from_u64(0x10),
            &PgOutputOptions::for_server(150_000, ["p"]),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("42704"));
    assert!(!err.is_transient());
    assert!(err.to_string().contains("does not exist"), "{err}");
    server.await.unwrap();
}

#[tokio::test]
async fn connect_timeout_applies_to_a_silent_server() {
    let (config, server) = serve(|mut s| async move {
        read_startup(&mut s).await;
        // Never answer.
        let _ = s.read_u8().await;
    })
    .await;
    let err = ReplicationConnection::connect(&config.connect_timeout(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ReplicationError::ConnectTimeout { .. }),
        "{err}"
    );
    assert!(err.is_transient());
    server.await.unwrap();
}

#[tokio::test]
async fn receive_timeout_detects_a_silent_server() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        s.write_all(&msg(b'd', b"k1")).await.unwrap();
        // Then silence, without closing.
        let _ = s.read_u8().await;
    })
    .await;
    let mut stream = start(&config).await;
    stream.set_receive_timeout(Some(Duration::from_millis(200)));
    assert_eq!(&stream.next_message().await.unwrap().unwrap()[..], b"k1");
    let err = stream.next_message().await.unwrap_err();
    assert!(matches!(err, ReplicationError::ReceiveTimeout(_)), "{err}");
    assert!(err.is_transient());
    drop(stream);
    server.await.unwrap();
}

#[tokio::test]
async fn command_complete_ends_the_stream_like_a_shutting_down_walsender() {
    let (config, server) = serve(|mut s| async move {
        until_copy_both(&mut s).await;
        // What WalSndDone sends before exiting: CommandComplete, no CopyDone, no ReadyForQuery.
        s.write_all(&msg(b'C', b"COPY 0\0")).await.unwrap();
    })
    .await;
    let mut stream = start(&config).await;
    assert_eq!(stream.next_message().await.unwrap(), None);
    let err = stream.finish().await.unwrap_err();
    assert!(matches!(err, ReplicationError::Closed), "{err}");
    assert!(err.is_transient());
    server.await.unwrap();
}
