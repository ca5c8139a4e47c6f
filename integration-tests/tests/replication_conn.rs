//! The replication connection against real PostgreSQL servers: authentication
//! methods, TLS modes, replication commands, streaming and server shutdown.
//!
//! Tests that need their own pg_hba.conf, TLS or a server they may stop own a
//! dedicated [`LocalCluster`]; the others use a database on the shared server.

// Test code: panicking on unexpected results is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cdc_core::Lsn;
use cdc_runtime::replication::{
    AuthError, ChannelBinding, PgOutputOptions, ReplicationConfig, ReplicationConnection,
    ReplicationError, RootCertSource, SnapshotAction, SslMode, TlsError,
};
use integration_tests::{ClusterOptions, ConnectionInfo, LocalCluster, TestPostgres, TestTls};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Replication settings for `info`'s server and database as `user` (no TLS).
fn config_for(info: &ConnectionInfo, user: &str) -> ReplicationConfig {
    let mut config = ReplicationConfig::new(user)
        .host(info.host())
        .port(info.port())
        .dbname(info.dbname())
        .sslmode(SslMode::Disable)
        .connect_timeout(Duration::from_secs(10));
    if let (Some(password), true) = (info.password(), user == info.user()) {
        config = config.password(password);
    }
    config
}

fn config(cluster: &LocalCluster, user: &str) -> ReplicationConfig {
    config_for(&cluster.admin(), user)
}

async fn connect(config: &ReplicationConfig) -> ReplicationConnection {
    match ReplicationConnection::connect(config).await {
        Ok(c) => c,
        Err(e) => panic!("connect with {config} failed: {e}"),
    }
}

async fn sql(conn: &mut ReplicationConnection, query: &str) {
    if let Err(e) = conn.simple_query(query).await {
        panic!("{query}: {e}");
    }
}

/// The first value of the first row.
async fn scalar(conn: &mut ReplicationConnection, query: &str) -> Option<String> {
    let results = conn.simple_query(query).await.unwrap();
    results
        .last()
        .and_then(|r| r.rows().first().cloned())
        .and_then(|row| row.into_iter().next().flatten())
}

/// A cluster whose TCP logins use a different method per user.
async fn plain_cluster() -> LocalCluster {
    LocalCluster::create(
        ClusterOptions::new()
            .hba_host_line("host all postgres 127.0.0.1/32 trust")
            .hba_host_line("host all trust_user 127.0.0.1/32 trust")
            .hba_host_line("host all pw_user 127.0.0.1/32 password")
            .hba_host_line("host all md5_user 127.0.0.1/32 md5")
            .hba_host_line("host all scram_user 127.0.0.1/32 scram-sha-256"),
    )
    .await
    .unwrap()
}

const MD5_PASSWORD: &str = "md5 pass";
const SCRAM_PASSWORD: &str = "scr'am pässword";

async fn create_roles(admin: &mut ReplicationConnection) {
    sql(admin, "CREATE ROLE trust_user LOGIN REPLICATION").await;
    sql(admin, "SET password_encryption = 'md5'").await;
    sql(
        admin,
        &format!("CREATE ROLE md5_user LOGIN REPLICATION PASSWORD '{MD5_PASSWORD}'"),
    )
    .await;
    sql(admin, "SET password_encryption = 'scram-sha-256'").await;
    let quoted = SCRAM_PASSWORD.replace('\'', "''");
    sql(
        admin,
        &format!("CREATE ROLE scram_user LOGIN REPLICATION PASSWORD '{quoted}'"),
    )
    .await;
    sql(
        admin,
        "CREATE ROLE pw_user LOGIN REPLICATION PASSWORD 'clear pw'",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_methods_and_tls_against_a_plain_server() {
    let cluster = plain_cluster().await;
    let mut admin = connect(&config(&cluster, "postgres")).await;
    create_roles(&mut admin).await;
    assert_eq!(admin.parameter("client_encoding"), Some("UTF8"));
    assert_eq!(admin.parameter("DateStyle"), Some("ISO, MDY"));
    assert_eq!(admin.parameter("TimeZone"), Some("UTC"));
    assert_eq!(admin.parameter("application_name"), Some("pgcdc"));
    assert_eq!(
        scalar(&mut admin, "SHOW extra_float_digits")
            .await
            .as_deref(),
        Some("3")
    );
    assert!(admin.backend_pid().is_some());

    // trust
    let c = connect(&config(&cluster, "trust_user").application_name("auth test")).await;
    assert_eq!(c.parameter("application_name"), Some("auth test"));
    assert!(!c.is_tls());
    c.close().await.unwrap();

    // cleartext password, md5, SCRAM-SHA-256
    for (user, pw) in [
        ("pw_user", "clear pw"),
        ("md5_user", MD5_PASSWORD),
        ("scram_user", SCRAM_PASSWORD),
    ] {
        let mut c = connect(&config(&cluster, user).password(pw)).await;
        assert_eq!(
            scalar(&mut c, "SELECT current_user").await.as_deref(),
            Some(user)
        );
        c.close().await.unwrap();
    }
    // The server really used the method we think: md5_user's secret is md5, scram_user's SCRAM.
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT left(rolpassword, 3) FROM pg_authid WHERE rolname = 'md5_user'"
        )
        .await
        .as_deref(),
        Some("md5")
    );

    // Wrong passwords are definite errors carrying the server's SQLSTATE.
    for user in ["md5_user", "scram_user", "pw_user"] {
        let err = ReplicationConnection::connect(&config(&cluster, user).password("wrong"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("28P01"), "{user}: {err}");
        assert!(!err.is_transient(), "{user}: {err}");
        assert!(err.to_string().contains("password"), "{err}");
    }
    // No password configured.
    let err = ReplicationConnection::connect(&config(&cluster, "scram_user"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Auth(AuthError::PasswordRequired { .. })
        ),
        "{err}"
    );
    assert!(!err.is_transient());
    // channel_binding=require needs TLS: refused before any password is sent.
    for user in ["scram_user", "md5_user", "trust_user"] {
        let err = ReplicationConnection::connect(
            &config(&cluster, user)
                .password("whatever")
                .channel_binding(ChannelBinding::Require),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                err,
                ReplicationError::Auth(AuthError::ChannelBindingRequired(_))
            ),
            "{user}: {err}"
        );
        assert!(!err.is_transient());
    }
    // No pg_hba line for this user.
    let err = ReplicationConnection::connect(&config(&cluster, "nobody"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("28000"), "{err}");
    assert!(!err.is_transient());
    // Missing database.
    let err = ReplicationConnection::connect(&config(&cluster, "postgres").dbname("nope"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("3D000"), "{err}");
    assert!(!err.is_transient());

    // sslmode=require against a server without SSL: a clear, definite error.
    let err =
        ReplicationConnection::connect(&config(&cluster, "trust_user").sslmode(SslMode::Require))
            .await
            .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Tls(TlsError::NotSupportedByServer { .. })
        ),
        "{err}"
    );
    assert!(!err.is_transient());
    assert!(
        err.to_string().contains("set sslmode=disable or prefer"),
        "{err}"
    );
    // prefer falls back to a plain connection.
    let c = connect(&config(&cluster, "trust_user").sslmode(SslMode::Prefer)).await;
    assert!(!c.is_tls());
    c.close().await.unwrap();

    // hostaddr: connect to the address, keep the (unresolvable) host name for TLS.
    let c = connect(
        &config(&cluster, "trust_user")
            .host("db.invalid")
            .hostaddr(std::net::Ipv4Addr::LOCALHOST.into()),
    )
    .await;
    c.close().await.unwrap();

    // Nothing listens on a just-released port: transient.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = ReplicationConnection::connect(&config(&cluster, "postgres").port(free))
        .await
        .unwrap_err();
    assert!(matches!(err, ReplicationError::Connect { .. }), "{err}");
    assert!(err.is_transient());

    admin.close().await.unwrap();
}

/// pgoutput message inside an XLogData payload: `w`, 3 x 8 bytes, message.
fn xlog_data(payload: &[u8]) -> Option<&[u8]> {
    (payload.first() == Some(&b'w'))
        .then(|| payload.get(25..))
        .flatten()
}

fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().unwrap())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Standby status update `r` (built here; cdc-core owns the real encoder).
fn status_update(lsn: Lsn) -> Vec<u8> {
    let pg_epoch_micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
        - 946_684_800_000_000;
    let mut m = vec![b'r'];
    for _ in 0..3 {
        m.extend_from_slice(&lsn.as_u64().to_be_bytes());
    }
    m.extend_from_slice(&pg_epoch_micros.to_be_bytes());
    m.push(0);
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_commands_and_streaming() {
    let db = TestPostgres::new_database().await.unwrap();
    let admin_config = config_for(db.connection_info(), db.user());
    let mut admin = connect(&admin_config).await;
    sql(
        &mut admin,
        "CREATE TABLE cdc_items (id int PRIMARY KEY, v text)",
    )
    .await;
    sql(
        &mut admin,
        r#"CREATE PUBLICATION "pub ""one""" FOR TABLE cdc_items"#,
    )
    .await;

    let mut repl = connect(&admin_config).await;
    let system = repl.identify_system().await.unwrap();
    assert!(system.system_id > 0);
    assert!(system.timeline >= 1);
    assert!(!system.xlog_pos.is_invalid());
    assert_eq!(system.dbname.as_deref(), Some(db.name()));
    let version = repl.server_version_num().await.unwrap();
    assert!(version >= 150_000, "{version}");
    assert_eq!(repl.show("wal_level").await.unwrap(), "logical");

    let slot = repl
        .create_replication_slot("cdc_slot", false, SnapshotAction::Nothing)
        .await
        .unwrap();
    assert_eq!(slot.slot_name, "cdc_slot");
    assert!(slot.consistent_point >= system.xlog_pos);
    assert_eq!(slot.snapshot_name, None);
    assert_eq!(slot.output_plugin.as_deref(), Some("pgoutput"));
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT plugin FROM pg_replication_slots WHERE slot_name = 'cdc_slot'"
        )
        .await
        .as_deref(),
        Some("pgoutput")
    );
    // Duplicate slot: definite, connection still usable afterwards.
    let err = repl
        .create_replication_slot("cdc_slot", false, SnapshotAction::Nothing)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("42710"), "{err}");
    assert!(!err.is_transient());
    // An exported snapshot comes back with a name.
    let mut tmp = connect(&admin_config).await;
    let temp = tmp
        .create_replication_slot("cdc_temp", true, SnapshotAction::Export)
        .await
        .unwrap();
    assert!(temp.snapshot_name.is_some());
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT temporary::text FROM pg_replication_slots WHERE slot_name = 'cdc_temp'"
        )
        .await
        .as_deref(),
        Some("true")
    );
    tmp.close().await.unwrap();

    // START_REPLICATION on a missing slot: definite error.
    let options = PgOutputOptions::for_server(version, [r#"pub "one""#]);
    let missing = connect(&admin_config).await;
    let err = missing
        .start_replication("no_such_slot", Lsn::INVALID, &options)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("42704"), "{err}");
    assert!(!err.is_transient());

    let mut stream = repl
        .start_replication("cdc_slot", slot.consistent_point, &options)
        .await
        .unwrap();
    sql(
        &mut admin,
        "INSERT INTO cdc_items VALUES (1, 'hello pgcdc')",
    )
    .await;

    let mut seen_relation = false;
    let mut seen_insert = false;
    let mut commit_end = None;
    let mut seen_keepalive = false;
    let deadline = Instant::now() + TIMEOUT;
    while !(seen_relation && seen_insert && commit_end.is_some() && seen_keepalive) {
        let left = deadline.saturating_duration_since(Instant::now());
        let payload = tokio::time::timeout(left, stream.next_message())
            .await
            .expect("timed out waiting for XLogData and a keepalive")
            .unwrap()
            .expect("server ended the stream");
        match payload.first() {
            Some(b'w') => {
                let msg = xlog_data(&payload).unwrap();
                match msg.first() {
                    Some(b'R') => seen_relation |= contains(msg, b"cdc_items\0"),
                    Some(b'I') => seen_insert |= contains(msg, b"hello pgcdc"),
                    // Commit: flags, commit lsn, end lsn, timestamp.
                    Some(b'C') => commit_end = Some(Lsn::from_u64(be_u64(&msg[10..18]))),
                    _ => {}
                }
            }
            Some(b'k') => {
                assert_eq!(
                    payload.len(),
                    18,
                    "keepalive is k + walEnd + clock + reply flag"
                );
                seen_keepalive = true;
            }
            other => panic!("unexpected CopyData type {other:?}"),
        }
    }
    let commit_end = commit_end.unwrap();
    assert!(commit_end > slot.consistent_point);

    // Confirm the commit; the server records it as the slot's confirmed_flush_lsn.
    stream.send(&status_update(commit_end)).await.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let confirmed: Lsn = scalar(
            &mut admin,
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'cdc_slot'",
        )
        .await
        .unwrap()
        .parse()
        .unwrap();
        if confirmed >= commit_end {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "confirmed_flush_lsn stayed at {confirmed}"
        );
        // Waiting for the walsender to process the reply: poll the observable condition.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT active::text FROM pg_replication_slots WHERE slot_name = 'cdc_slot'"
        )
        .await
        .as_deref(),
        Some("true")
    );

    // CopyDone ends cleanly and the connection is usable again.
    let mut repl = stream.finish().await.unwrap();
    assert_eq!(
        repl.identify_system().await.unwrap().system_id,
        system.system_id
    );
    repl.drop_replication_slot("cdc_slot", true).await.unwrap();
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'cdc_slot'"
        )
        .await
        .as_deref(),
        Some("0")
    );
    let err = repl
        .drop_replication_slot("cdc_slot", false)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("42704"), "{err}");
    repl.close().await.unwrap();
    admin.close().await.unwrap();
}

/// A fresh CA and a server certificate signed by it, made here with rcgen.
///
/// The certificate names only `localhost` (no IP address), so connecting by
/// `127.0.0.1` shows verify-ca (chain only) apart from verify-full (chain and name).
fn make_pki(name: &str) -> TestTls {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("pgcdc test CA {name}"));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = params.signed_by(&server_key, &issuer).unwrap();
    TestTls {
        ca_cert_pem: ca_cert.pem(),
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes() {
    let pki = make_pki("server");
    let other = make_pki("other");
    let cluster = LocalCluster::create(
        ClusterOptions::new()
            .tls(&pki)
            .hba_host_line("hostssl all postgres 127.0.0.1/32 trust")
            .hba_host_line("hostssl all scram_user 127.0.0.1/32 scram-sha-256"),
    )
    .await
    .unwrap();
    let ca = cluster.socket_dir().join("ca.pem");
    let other_ca = cluster.socket_dir().join("other-ca.pem");
    std::fs::write(&ca, &pki.ca_cert_pem).unwrap();
    std::fs::write(&other_ca, &other.ca_cert_pem).unwrap();
    let tls = |mode: SslMode| config(&cluster, "postgres").sslmode(mode);

    // require: encrypted, certificate not checked.
    let mut admin = connect(&tls(SslMode::Require)).await;
    assert!(admin.is_tls());
    assert_eq!(
        scalar(
            &mut admin,
            "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        )
        .await
        .as_deref(),
        Some("true")
    );
    sql(&mut admin, "SET password_encryption = 'scram-sha-256'").await;
    sql(
        &mut admin,
        "CREATE ROLE scram_user LOGIN REPLICATION PASSWORD 'tls pw'",
    )
    .await;

    // prefer uses TLS when offered; with a root certificate it checks the chain.
    assert!(connect(&tls(SslMode::Prefer)).await.is_tls());
    let err = ReplicationConnection::connect(
        &tls(SslMode::Prefer).sslrootcert(RootCertSource::File(other_ca.clone())),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ReplicationError::Tls(TlsError::Handshake { .. })),
        "{err}"
    );
    // disable: the server only accepts hostssl, so it refuses us (definite).
    let err = ReplicationConnection::connect(&tls(SslMode::Disable))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("28000"), "{err}");

    // verify-ca: chain checked, name not (we connect by IP, the cert says localhost).
    let verify_ca = tls(SslMode::VerifyCa).sslrootcert(RootCertSource::File(ca.clone()));
    assert!(connect(&verify_ca).await.is_tls());
    // ... against the wrong CA it fails, definitely.
    let err = ReplicationConnection::connect(
        &tls(SslMode::VerifyCa).sslrootcert(RootCertSource::File(other_ca.clone())),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ReplicationError::Tls(TlsError::Handshake { .. })),
        "{err}"
    );
    assert!(!err.is_transient());
    // require with an explicit root behaves like verify-ca (libpq).
    let err = ReplicationConnection::connect(
        &tls(SslMode::Require).sslrootcert(RootCertSource::File(other_ca.clone())),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ReplicationError::Tls(TlsError::Handshake { .. })),
        "{err}"
    );

    // verify-full: chain and name. By name it works, with SCRAM over TLS.
    let full = tls(SslMode::VerifyFull)
        .host("localhost")
        .sslrootcert(RootCertSource::File(ca.clone()));
    let mut c = connect(&full.clone().user("scram_user").password("tls pw")).await;
    assert!(c.is_tls());
    assert_eq!(
        scalar(&mut c, "SELECT current_user").await.as_deref(),
        Some("scram_user")
    );
    c.close().await.unwrap();
    // SCRAM-SHA-256-PLUS: with channel_binding=require the server must verify our
    // tls-server-end-point hash, even without certificate verification (sslmode=require).
    for (mode, binding) in [
        (SslMode::Require, ChannelBinding::Require),
        (SslMode::Require, ChannelBinding::Disable),
        (SslMode::VerifyFull, ChannelBinding::Prefer),
    ] {
        let cfg = full
            .clone()
            .sslmode(mode)
            .user("scram_user")
            .password("tls pw")
            .channel_binding(binding);
        let mut c = connect(&cfg).await;
        assert!(c.is_tls());
        assert_eq!(
            scalar(&mut c, "SELECT current_user").await.as_deref(),
            Some("scram_user")
        );
        c.close().await.unwrap();
    }
    // Binding required but the server lets us in without SCRAM (trust): refused.
    let err =
        ReplicationConnection::connect(&full.clone().channel_binding(ChannelBinding::Require))
            .await
            .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Auth(AuthError::ChannelBindingRequired(_))
        ),
        "{err}"
    );
    // By IP the name does not match: definite error that says what to do.
    let err = ReplicationConnection::connect(
        &tls(SslMode::VerifyFull).sslrootcert(RootCertSource::File(ca.clone())),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ReplicationError::Tls(TlsError::Handshake { .. })),
        "{err}"
    );
    assert!(!err.is_transient());
    assert!(
        err.to_string().contains("not valid for this host name"),
        "{err}"
    );
    // verify-full without any root certificate configured.
    let err = ReplicationConnection::connect(&tls(SslMode::VerifyFull).host("localhost"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Tls(TlsError::NoRootCertificate { .. })
        ),
        "{err}"
    );

    // Streaming works over TLS too.
    sql(&mut admin, "CREATE TABLE t (id int PRIMARY KEY)").await;
    sql(&mut admin, "CREATE PUBLICATION p FOR TABLE t").await;
    let mut repl = connect(&full).await;
    let slot = repl
        .create_replication_slot("tls_slot", true, SnapshotAction::Nothing)
        .await
        .unwrap();
    let version = repl.server_version_num().await.unwrap();
    let mut stream = repl
        .start_replication(
            "tls_slot",
            slot.consistent_point,
            &PgOutputOptions::for_server(version, ["p"]),
        )
        .await
        .unwrap();
    sql(&mut admin, "INSERT INTO t VALUES (42)").await;
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let payload = tokio::time::timeout(left, stream.next_message())
            .await
            .expect("timed out waiting for the insert over TLS")
            .unwrap()
            .unwrap();
        if xlog_data(&payload).is_some_and(|m| m.first() == Some(&b'I')) {
            break;
        }
    }
    stream.finish().await.unwrap().close().await.unwrap();
    admin.close().await.unwrap();
}

/// A fast shutdown while streaming: the walsender first waits for the client
/// to confirm everything it sent (so the client answers keepalives), then ends
/// the copy with CopyDone and exits. The stream reports the end (`None`) and
/// `finish` fails with a transient error, so the pipeline reconnects later
/// instead of giving up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_while_streaming_is_transient() {
    // Its own cluster: the test stops the server.
    let cluster = LocalCluster::create(ClusterOptions::new()).await.unwrap();
    let cfg = config(&cluster, "postgres");
    let mut admin = connect(&cfg).await;
    sql(&mut admin, "CREATE TABLE t (id int PRIMARY KEY)").await;
    sql(&mut admin, "CREATE PUBLICATION p FOR TABLE t").await;
    let mut repl = connect(&cfg).await;
    let slot = repl
        .create_replication_slot("s", false, SnapshotAction::Nothing)
        .await
        .unwrap();
    let version = repl.server_version_num().await.unwrap();
    let mut stream = repl
        .start_replication(
            "s",
            slot.consistent_point,
            &PgOutputOptions::for_server(version, ["p"]),
        )
        .await
        .unwrap();
    admin.close().await.unwrap();

    // `stop` is a fast shutdown: sessions are terminated (57P01), then the server exits.
    let stopping = cluster.clone();
    let stopper = tokio::spawn(async move { stopping.stop().await });
    let deadline = Instant::now() + TIMEOUT;
    let ended = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.next_message())
            .await
            .expect("the stream did not end on shutdown")
        {
            // Keepalive: confirm its WAL end so the walsender may finish.
            Ok(Some(m)) if m.first() == Some(&b'k') => {
                stream
                    .send(&status_update(Lsn::from_u64(be_u64(&m[1..9]))))
                    .await
                    .unwrap();
            }
            Ok(Some(_)) => {}
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let err = match ended {
        // The usual path: CopyDone, then the server exits without ReadyForQuery.
        None => stream.finish().await.unwrap_err(),
        Some(e) => e,
    };
    assert!(err.is_transient(), "{err:?}");
    stopper.await.unwrap().unwrap();
}

/// Throughput against a real walsender (run with `--ignored --nocapture`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, not a check"]
async fn measure_streaming_throughput() {
    const ROWS: u32 = 200_000;
    let cluster = LocalCluster::create(ClusterOptions::new()).await.unwrap();
    let cfg = config(&cluster, "postgres");
    let mut admin = connect(&cfg).await;
    sql(
        &mut admin,
        "CREATE TABLE t (id int PRIMARY KEY, payload text)",
    )
    .await;
    sql(&mut admin, "CREATE PUBLICATION p FOR TABLE t").await;
    let mut repl = connect(&cfg).await;
    let slot = repl
        .create_replication_slot("s", false, SnapshotAction::Nothing)
        .await
        .unwrap();
    sql(
        &mut admin,
        &format!("INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, {ROWS}) g"),
    )
    .await;
    let version = repl.server_version_num().await.unwrap();
    let mut stream = repl
        .start_replication(
            "s",
            slot.consistent_point,
            &PgOutputOptions::for_server(version, ["p"]),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let (mut inserts, mut bytes) = (0u32, 0usize);
    while inserts < ROWS {
        let m = stream.next_message().await.unwrap().unwrap();
        bytes += m.len();
        if xlog_data(&m).is_some_and(|x| x.first() == Some(&b'I')) {
            inserts += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{inserts} inserts, {:.1} MiB of CopyData in {secs:.2}s: {:.0} rows/s, {:.1} MiB/s",
        bytes as f64 / 1048576.0,
        f64::from(inserts) / secs,
        bytes as f64 / 1048576.0 / secs
    );
}
