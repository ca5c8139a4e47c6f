//! cdc-runtime's `tokio-postgres` clients (the checkpoint store's pool, the PostgreSQL
//! table sink) over rustls with the source's `sslmode` / `sslrootcert`, against a server
//! that only accepts TLS with a certificate from a test-made CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use cdc_runtime::replication::{
    AuthError, ChannelBinding, ReplicationConfig, ReplicationConnection, ReplicationError,
    RootCertSource, SslMode, TlsError,
};
use cdc_runtime::sinks::{PgTableSink, PgTableSinkOptions};
use cdc_runtime::tls_connect::{checkpoint_store, PgClientSettings};
use checkpoint_api::testkit::conformance::sample_checkpoint;
use checkpoint_api::{CheckpointId, CheckpointStore, JobName, OwnerId};
use checkpoint_pg::{PgCheckpointStore, PgStoreConfig};
use integration_tests::{ClusterOptions, LocalCluster, TestPostgres, TestTls, SUPERUSER};

/// A cluster accepting only TLS connections on TCP, and the path of its CA certificate.
struct TlsServer {
    cluster: LocalCluster,
    ca: PathBuf,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ca);
    }
}

async fn tls_server() -> TlsServer {
    let tls = TestTls::generate().unwrap();
    let cluster = TestPostgres::dedicated(
        ClusterOptions::new()
            .tls(&tls)
            .hba_host_line("hostssl all all 127.0.0.1/32 trust"),
    )
    .await
    .unwrap();
    let ca = std::env::temp_dir().join(format!(
        "pgcdc-tls-clients-{}-{}.pem",
        std::process::id(),
        cluster.port()
    ));
    std::fs::write(&ca, &tls.ca_cert_pem).unwrap();
    TlsServer { cluster, ca }
}

fn source(server: &TlsServer, host: &str, mode: SslMode) -> ReplicationConfig {
    ReplicationConfig::new(SUPERUSER)
        .host(host)
        .port(server.cluster.port())
        .dbname("postgres")
        .sslmode(mode)
        .sslrootcert(RootCertSource::File(server.ca.clone()))
}

/// Saves a checkpoint of `job` in `store` and loads it back unchanged.
async fn saves_and_loads(store: &PgCheckpointStore, job: &str) {
    let job = JobName::new(job).unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    let cp = sample_checkpoint(&job, CheckpointId::FIRST, "0/16B3748".parse().unwrap());
    store.save(&lease, &cp).await.unwrap();
    assert_eq!(store.load(&job, cp.id).await.unwrap().checkpoint, cp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_store_saves_and_loads_over_verified_tls() {
    let server = tls_server().await;
    let store = checkpoint_store(
        &source(&server, "localhost", SslMode::VerifyFull),
        PgStoreConfig::default(),
    )
    .await
    .unwrap();

    saves_and_loads(&store, "tls").await;

    // The pool's connections are encrypted (pg_stat_ssl of our own backend).
    let client = store.pool().get().await.unwrap();
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl);
}

/// Over the server's Unix-domain socket, `sslmode` is ignored, as libpq
/// ignores it: PostgreSQL never offers TLS there. This server refuses plain
/// TCP, and its socket accepts every local user (`local all all trust`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_directory_connects_without_tls_whatever_sslmode_says() {
    let server = tls_server().await;
    let dir = server.cluster.socket_dir().display().to_string();
    let over_socket = source(&server, &dir, SslMode::VerifyFull);

    // The replication connection: no TLS, and no client address, which only
    // a Unix-domain socket lacks.
    let mut conn = ReplicationConnection::connect(&over_socket).await.unwrap();
    assert!(!conn.is_tls());
    let results = conn
        .simple_query("SELECT inet_client_addr() IS NULL")
        .await
        .unwrap();
    let row = results.last().and_then(|r| r.rows().first().cloned());
    assert_eq!(row, Some(vec![Some("t".to_owned())]));

    // The checkpoint store's pool (tokio-postgres) over the same socket.
    let store = checkpoint_store(&over_socket, PgStoreConfig::default())
        .await
        .unwrap();
    saves_and_loads(&store, "socket").await;
    let client = store.pool().get().await.unwrap();
    let local: bool = client
        .query_one("SELECT inet_client_addr() IS NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(local);

    // SCRAM channel binding needs TLS, so requiring it fails over a socket.
    let err = ReplicationConnection::connect(
        &over_socket.clone().channel_binding(ChannelBinding::Require),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            ReplicationError::Auth(AuthError::ChannelBindingRequired(_))
        ),
        "{err}"
    );

    // One sslmode applies to every host of a list: a socket beside a TCP
    // host cannot require TLS, and says so; prefer is fine.
    let port = server.cluster.port();
    let mixed = over_socket
        .clone()
        .hosts([(dir.as_str(), port), ("localhost", port)]);
    let err = PgClientSettings::new(&mixed).unwrap_err();
    assert!(
        matches!(err, TlsError::SocketsBesideTcpHosts { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("sslmode=prefer"), "{err}");
    PgClientSettings::new(&mixed.sslmode(SslMode::Prefer)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let server = tls_server().await;
    // The certificate names localhost and 127.0.0.1; connect to 127.0.0.1 by another name.
    let wrong_name =
        source(&server, "db.invalid", SslMode::VerifyFull).hostaddr("127.0.0.1".parse().unwrap());
    let err = checkpoint_store(&wrong_name, PgStoreConfig::default())
        .await
        .unwrap_err();
    assert!(
        !err.is_retryable(),
        "a refused certificate is definite: {err}"
    );
    assert!(
        err.to_string().contains("not valid for this host name"),
        "{err}"
    );

    let ca_only =
        source(&server, "db.invalid", SslMode::VerifyCa).hostaddr("127.0.0.1".parse().unwrap());
    checkpoint_store(&ca_only, PgStoreConfig::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_sink_connects_over_verified_tls() {
    let server = tls_server().await;
    // Plain TCP is refused by this server, so connecting proves TLS.
    let url = format!(
        "host=localhost port={} user={SUPERUSER} dbname=postgres sslmode=verify-full sslrootcert='{}'",
        server.cluster.port(),
        server.ca.display()
    );
    PgTableSink::connect(&url, PgTableSinkOptions::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_is_a_clear_definite_error() {
    let db = TestPostgres::new_database().await.unwrap();
    let mut source = ReplicationConfig::new(db.user())
        .host(db.host())
        .port(db.port())
        .dbname(db.name())
        .sslmode(SslMode::Require);
    if let Some(password) = db.password() {
        source = source.password(password);
    }
    let err = checkpoint_store(&source, PgStoreConfig::default())
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    assert!(
        err.to_string().contains("server does not support TLS"),
        "{err}"
    );

    // sslmode=prefer falls back to plain TCP.
    let source = source.sslmode(SslMode::Prefer);
    checkpoint_store(&source, PgStoreConfig::default())
        .await
        .unwrap();
}
