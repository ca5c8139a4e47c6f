//! cdc-runtime's `tokio-postgres` clients (the checkpoint store's pool, the PostgreSQL
//! table sink) over rustls with the source's `sslmode` / `sslrootcert`, against a server
//! that only accepts TLS with a certificate from a test-made CA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use cdc_runtime::replication::{ReplicationConfig, RootCertSource, SslMode};
use cdc_runtime::sinks::{PgTableSink, PgTableSinkOptions};
use cdc_runtime::tls_connect::checkpoint_store;
use checkpoint_api::testkit::conformance::sample_checkpoint;
use checkpoint_api::{CheckpointId, CheckpointStore, JobName, OwnerId};
use checkpoint_pg::PgStoreConfig;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_store_saves_and_loads_over_verified_tls() {
    let server = tls_server().await;
    let store = checkpoint_store(
        &source(&server, "localhost", SslMode::VerifyFull),
        PgStoreConfig::default(),
    )
    .await
    .unwrap();

    let job = JobName::new("tls").unwrap();
    let lease = store
        .acquire_lease(&job, &OwnerId::new("w").unwrap())
        .await
        .unwrap();
    let cp = sample_checkpoint(&job, CheckpointId::FIRST, "0/16B3748".parse().unwrap());
    store.save(&lease, &cp).await.unwrap();
    let loaded = store.load(&job, cp.id).await.unwrap();
    assert_eq!(loaded.checkpoint, cp);

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
