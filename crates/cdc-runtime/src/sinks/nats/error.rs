//! NATS errors, sorted into transient (retry with a new connection and a
//! replay) and permanent (a setting to fix).

use async_nats::ConnectErrorKind;

use crate::sinks::nats::options::NatsAuth;

/// Why the NATS sink failed.
#[derive(Debug, thiserror::Error)]
#[error("NATS {what}: {message}")]
pub struct NatsError {
    /// What the sink was doing.
    pub what: &'static str,
    /// What went wrong, and the fix where there is one.
    pub message: String,
    /// Whether a retry (a new connection and a replay) may succeed.
    pub transient: bool,
}

impl NatsError {
    pub(crate) fn permanent(what: &'static str, message: impl Into<String>) -> Self {
        NatsError {
            what,
            message: message.into(),
            transient: false,
        }
    }

    pub(crate) fn transient(what: &'static str, message: impl Into<String>) -> Self {
        NatsError {
            what,
            message: message.into(),
            transient: true,
        }
    }

    /// A failed connection to `servers` with `auth`: wrong credentials or
    /// TLS settings are permanent (named with the setting to check, never
    /// its secret), a server that does not answer is transient.
    pub(crate) fn connect(
        servers: &[String],
        auth: &NatsAuth,
        e: &async_nats::ConnectError,
    ) -> Self {
        let servers = servers.join(", ");
        // async-nats reports a refused certificate as an IO error.
        if let Some(tls) = rustls_cause(e) {
            return Self::permanent(
                "connect",
                format!("TLS with {servers} failed: {tls}; check tls, tls_ca_file and the server's certificate (tls = \"verify-ca\" does not check the host name)"),
            );
        }
        match e.kind() {
            ConnectErrorKind::AuthorizationViolation | ConnectErrorKind::Authentication => {
                Self::permanent(
                    "connect",
                    format!("{servers} refused the credentials ({e}); {}", auth_fix(auth)),
                )
            }
            ConnectErrorKind::Tls => Self::permanent(
                "connect",
                format!("TLS with {servers} failed: {e}; check tls, tls_ca_file and the server's certificate (tls = \"verify-ca\" does not check the host name)"),
            ),
            ConnectErrorKind::ServerParse => Self::permanent(
                "connect",
                format!("servers {servers}: {e}; write them as nats://host:port or tls://host:port"),
            ),
            ConnectErrorKind::Dns
            | ConnectErrorKind::TimedOut
            | ConnectErrorKind::Io
            | ConnectErrorKind::MaxReconnects => {
                Self::transient("connect", format!("{servers} did not answer: {e}"))
            }
        }
    }
}

/// What to check when the server refuses `auth`.
fn auth_fix(auth: &NatsAuth) -> String {
    match auth {
        NatsAuth::None => "the server wants credentials: set the nats sink's user and password, token, nkey_seed_file or credentials_file".into(),
        NatsAuth::UserPassword { .. } => "check the nats sink's user and password".into(),
        NatsAuth::Token(_) => "check the nats sink's token".into(),
        NatsAuth::NkeySeedFile(path) => format!(
            "check nkey_seed_file {}: the server must authorize the public key of that seed",
            path.display()
        ),
        NatsAuth::CredentialsFile(path) => format!(
            "check credentials_file {}: its user JWT must be signed by an account the server \
             knows (signed by the server's trusted operator and in its account resolver), \
             not expired or revoked, with that user's seed",
            path.display()
        ),
    }
}

/// The rustls error somewhere in `e`'s sources (also inside an IO error).
fn rustls_cause<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(inner);
        }
        next = err.source();
    }
    None
}
