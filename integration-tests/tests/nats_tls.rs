//! TLS from the NATS sink to a real `nats-server` that requires it: each
//! `tls` mode checks what it says it checks.
// Test code: a failed step must fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cdc_runtime::encoding::JsonFormat;
use cdc_runtime::sinks::nats::{NatsSinkOptions, NatsTlsMode};
use cdc_runtime::sinks::{NatsSink, Sink};
use integration_tests::TempDir;

struct Pki {
    ca: String,
    cert: String,
    key: String,
}

/// A CA and a certificate for `localhost` only, so `127.0.0.1` tells
/// verify-ca (chain) from verify-full (chain and name).
fn pki(name: &str) -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("pgcdc nats test CA {name}"));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca: ca_cert.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `nats-server -js` on a free port that requires TLS with `pki`.
async fn start(dir: &Path, pki: &Pki) -> (Server, u16) {
    let port = free_port();
    std::fs::write(dir.join("cert.pem"), &pki.cert).unwrap();
    std::fs::write(dir.join("key.pem"), &pki.key).unwrap();
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {:?} }}\ntls {{ cert_file: {:?}, key_file: {:?} }}\n",
            dir.join("js"),
            dir.join("cert.pem"),
            dir.join("key.pem")
        ),
    )
    .unwrap();
    let child = Command::new("nats-server")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server (Debian package nats-server) must be installed");
    let server = Server(child);
    integration_tests::eventually("nats-server to listen", Duration::from_secs(20), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    (server, port)
}

fn options(url: String, mode: NatsTlsMode, ca: Option<&Path>) -> NatsSinkOptions {
    let mut o = NatsSinkOptions::new("tls-test", JsonFormat::Plain);
    o.servers = vec![url];
    o.prefix = "tlstest".into();
    o.tls.mode = mode;
    o.tls.ca_file = ca.map(Path::to_path_buf);
    o.ack_timeout = Duration::from_secs(5);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tls_mode_checks_what_it_says() {
    let dir = TempDir::new("nats-tls");
    let good = pki("good");
    let other = pki("other");
    let (_server, port) = start(dir.path(), &good).await;
    std::fs::write(dir.path().join("ca.pem"), &good.ca).unwrap();
    std::fs::write(dir.path().join("other-ca.pem"), &other.ca).unwrap();
    let ca = dir.path().join("ca.pem");
    let other_ca = dir.path().join("other-ca.pem");
    let by_name = format!("nats://localhost:{port}");
    let by_ip = format!("nats://127.0.0.1:{port}");

    // verify-full by the certificate's name: the stream is created and a
    // flush goes through the encrypted connection.
    let mut sink = NatsSink::connect(options(by_name.clone(), NatsTlsMode::VerifyFull, Some(&ca)))
        .await
        .unwrap();
    sink.flush().await.unwrap();
    sink.close().await.unwrap();

    // verify-full by an address the certificate does not name: refused, for good.
    let e = NatsSink::connect(options(by_ip.clone(), NatsTlsMode::VerifyFull, Some(&ca)))
        .await
        .unwrap_err();
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains("TLS"), "{e}");

    // verify-ca checks the chain only: the address is fine.
    NatsSink::connect(options(by_ip.clone(), NatsTlsMode::VerifyCa, Some(&ca)))
        .await
        .unwrap();
    // ...but a certificate from another CA is not.
    let e = NatsSink::connect(options(
        by_ip.clone(),
        NatsTlsMode::VerifyCa,
        Some(&other_ca),
    ))
    .await
    .unwrap_err();
    assert!(!e.is_retryable(), "{e}");

    // require encrypts without checking the certificate.
    NatsSink::connect(options(by_ip.clone(), NatsTlsMode::Require, None))
        .await
        .unwrap();
    // verify-ca without a CA says what is missing.
    let e = NatsSink::connect(options(by_ip.clone(), NatsTlsMode::VerifyCa, None))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("tls_ca_file"), "{e}");
}
