//! [`TestTls`]: throwaway TLS material for servers that must speak TLS.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::run_output;

/// A test CA and a server certificate for `localhost` and `127.0.0.1` signed by it
/// (P-256 keys, valid ten years), all PEM.
///
/// The server certificate is a proper end-entity certificate (`CA:FALSE`,
/// `serverAuth`), so strict verifiers such as rustls/webpki accept it with
/// [`ca_cert_pem`](Self::ca_cert_pem) as the only trust anchor. Use it with
/// [`ClusterOptions::tls`](crate::ClusterOptions::tls).
#[derive(Clone)]
pub struct TestTls {
    /// The CA certificate clients should trust.
    pub ca_cert_pem: String,
    /// The server certificate (subject `CN=localhost`, SAN `DNS:localhost`, `IP:127.0.0.1`).
    pub server_cert_pem: String,
    /// The server's private key (PKCS#8).
    pub server_key_pem: String,
}

impl std::fmt::Debug for TestTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestTls").finish_non_exhaustive()
    }
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestTls {
    /// Generates fresh material with the `openssl` command-line tool.
    pub fn generate() -> Result<TestTls> {
        let dir = std::env::temp_dir().join(format!(
            "pgcdc-tls-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).map_err(|e| Error::io("create", &dir, e))?;
        let result = generate_in(&dir);
        let _ = fs::remove_dir_all(&dir);
        result
    }
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("openssl");
    cmd.current_dir(dir).args(args);
    run_output(&mut cmd, &format!("openssl {}", args.join(" ")))?;
    Ok(())
}

fn generate_in(dir: &Path) -> Result<TestTls> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "3650",
        "-subj",
        "/CN=pgcdc test CA",
    ];
    ca.extend_from_slice(&ec);
    ca.extend_from_slice(&[
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca)?;
    let mut csr = vec!["req", "-subj", "/CN=localhost"];
    csr.extend_from_slice(&ec);
    csr.extend_from_slice(&["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr)?;
    let ext = dir.join("server.ext");
    fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n\
         subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .map_err(|e| Error::io("write", &ext, e))?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    )?;
    let read = |name: &str| {
        let path = dir.join(name);
        fs::read_to_string(&path).map_err(|e| Error::io("read", path, e))
    };
    Ok(TestTls {
        ca_cert_pem: read("ca.crt")?,
        server_cert_pem: read("server.crt")?,
        server_key_pem: read("server.key")?,
    })
}
