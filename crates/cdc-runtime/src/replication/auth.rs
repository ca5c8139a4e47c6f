//! The authentication exchange: trust, cleartext password, md5 and
//! SCRAM-SHA-256 (via `postgres_protocol`).

use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, ScramSha256, SCRAM_SHA_256, SCRAM_SHA_256_PLUS,
};
use postgres_protocol::message::frontend;

use super::config::{ChannelBinding as ChannelBindingMode, ConfigError, ReplicationConfig};
use super::error::{AuthError, ProtocolError, ReplicationError};
use super::transport::{log_notice, Transport};
use super::wire::{parse_auth, parse_error_fields, AuthRequest};

/// How the SCRAM exchange binds to the TLS channel.
#[derive(Debug, PartialEq, Eq)]
enum Binding {
    /// `SCRAM-SHA-256-PLUS` with this `tls-server-end-point` hash.
    Plus(Vec<u8>),
    /// `SCRAM-SHA-256` with header `y`: the client could bind but the server
    /// does not offer it.
    Unrequested,
    /// `SCRAM-SHA-256` with header `n`: the client does not bind.
    Unsupported,
}

/// Chooses the SCRAM variant as libpq does: `-PLUS` over TLS when the server
/// offers it and the certificate hash is known (unless disabled); `y` on TLS
/// without a server offer; `n` otherwise.
fn choose_binding(
    mode: ChannelBindingMode,
    end_point: Option<Vec<u8>>,
    tls: bool,
    mechanisms: &[String],
) -> Result<Binding, AuthError> {
    let plus_offered = mechanisms.iter().any(|m| m == SCRAM_SHA_256_PLUS);
    match (mode, end_point) {
        (ChannelBindingMode::Disable, _) => Ok(Binding::Unsupported),
        (_, Some(hash)) if tls && plus_offered => Ok(Binding::Plus(hash)),
        (ChannelBindingMode::Require, _) => Err(AuthError::ChannelBindingRequired(if !tls {
            "the connection is not encrypted"
        } else if !plus_offered {
            "the server does not offer SCRAM-SHA-256-PLUS"
        } else {
            "the server certificate's signature algorithm defines no channel binding hash"
        })),
        (ChannelBindingMode::Prefer, _) if tls && !plus_offered => Ok(Binding::Unrequested),
        (ChannelBindingMode::Prefer, _) => Ok(Binding::Unsupported),
    }
}

fn password<'a>(config: &'a ReplicationConfig, method: &'static str) -> Result<&'a str, AuthError> {
    config
        .get_password()
        .ok_or(AuthError::PasswordRequired { method })
}

fn io_invalid(e: std::io::Error) -> ReplicationError {
    ReplicationError::Auth(AuthError::Scram(e))
}

fn nul_in_password(_: std::io::Error) -> ReplicationError {
    ConfigError::InvalidValue {
        key: "password".into(),
        value: String::new(),
        reason: "must not contain a NUL byte",
    }
    .into()
}

/// Runs the exchange after the startup message until `AuthenticationOk`.
pub(crate) async fn authenticate(
    t: &mut Transport,
    config: &ReplicationConfig,
) -> Result<(), ReplicationError> {
    let tls = t.is_tls();
    let mode = config.get_channel_binding();
    let require_binding = mode == ChannelBindingMode::Require;
    let mut scram: Option<ScramSha256> = None;
    let mut scram_finished = false;
    let mut bound = false;
    loop {
        let frame = t.read_frame().await?;
        match frame.tag {
            b'R' => match parse_auth(frame.body)? {
                AuthRequest::Ok => {
                    if scram.is_some() && !scram_finished {
                        return Err(AuthError::IncompleteScram.into());
                    }
                    if require_binding && !bound {
                        return Err(AuthError::ChannelBindingRequired(
                            "the server accepted the connection without SCRAM authentication",
                        )
                        .into());
                    }
                    return Ok(());
                }
                AuthRequest::CleartextPassword => {
                    refuse_password_without_binding(require_binding)?;
                    let pw = password(config, "password")?;
                    frontend::password_message(pw.as_bytes(), &mut t.write)
                        .map_err(nul_in_password)?;
                    t.send().await?;
                }
                AuthRequest::Md5Password { salt } => {
                    refuse_password_without_binding(require_binding)?;
                    let pw = password(config, "md5")?;
                    let hash = md5_hash(config.get_user().as_bytes(), pw.as_bytes(), salt);
                    frontend::password_message(hash.as_bytes(), &mut t.write)
                        .map_err(nul_in_password)?;
                    t.send().await?;
                }
                AuthRequest::Sasl { mechanisms } => {
                    if scram.is_some() {
                        return Err(unexpected('R'));
                    }
                    if !mechanisms.iter().any(|m| m == SCRAM_SHA_256) {
                        return Err(AuthError::NoSupportedMechanism(mechanisms).into());
                    }
                    let pw = password(config, "SCRAM-SHA-256")?;
                    let binding = choose_binding(mode, t.tls_server_end_point(), tls, &mechanisms)?;
                    let (mechanism, binding) = match binding {
                        Binding::Plus(hash) => {
                            bound = true;
                            (
                                SCRAM_SHA_256_PLUS,
                                ChannelBinding::tls_server_end_point(hash),
                            )
                        }
                        Binding::Unrequested => (SCRAM_SHA_256, ChannelBinding::unrequested()),
                        Binding::Unsupported => (SCRAM_SHA_256, ChannelBinding::unsupported()),
                    };
                    tracing::debug!(mechanism, "SASL authentication");
                    let s = ScramSha256::new(pw.as_bytes(), binding);
                    frontend::sasl_initial_response(mechanism, s.message(), &mut t.write)
                        .map_err(io_invalid)?;
                    t.send().await?;
                    scram = Some(s);
                }
                AuthRequest::SaslContinue(data) => {
                    let s = scram.as_mut().ok_or_else(|| unexpected('R'))?;
                    s.update(&data).map_err(io_invalid)?;
                    frontend::sasl_response(s.message(), &mut t.write).map_err(io_invalid)?;
                    t.send().await?;
                }
                AuthRequest::SaslFinal(data) => {
                    let s = scram.as_mut().ok_or_else(|| unexpected('R'))?;
                    // Verifies the server signature: the server proves it knows the password.
                    s.finish(&data).map_err(io_invalid)?;
                    scram_finished = true;
                }
                AuthRequest::Unsupported(method) => {
                    return Err(AuthError::UnsupportedMethod(method).into());
                }
            },
            b'E' => return Err(parse_error_fields(frame.body)?.into()),
            b'N' => log_notice(parse_error_fields(frame.body)),
            // NegotiateProtocolVersion: we ask for no protocol extensions, so nothing to adapt.
            b'v' => tracing::debug!("server sent NegotiateProtocolVersion during startup"),
            tag => return Err(unexpected(char::from(tag))),
        }
    }
}

/// With `channel_binding=require` the password must not be sent to a server
/// that has not proven its identity.
fn refuse_password_without_binding(require: bool) -> Result<(), AuthError> {
    if require {
        Err(AuthError::ChannelBindingRequired(
            "the server asked for a password instead of SCRAM",
        ))
    } else {
        Ok(())
    }
}

fn unexpected(tag: char) -> ReplicationError {
    ProtocolError::Unexpected {
        tag,
        state: "authenticating",
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mechs(plus: bool) -> Vec<String> {
        let mut m = vec![SCRAM_SHA_256.to_string()];
        if plus {
            m.insert(0, SCRAM_SHA_256_PLUS.to_string());
        }
        m
    }

    #[test]
    fn binding_choice_follows_libpq() {
        use ChannelBindingMode::*;
        let hash = || Some(vec![1u8; 32]);
        assert_eq!(
            choose_binding(Prefer, hash(), true, &mechs(true)).unwrap(),
            Binding::Plus(vec![1; 32])
        );
        assert_eq!(
            choose_binding(Require, hash(), true, &mechs(true)).unwrap(),
            Binding::Plus(vec![1; 32])
        );
        assert_eq!(
            choose_binding(Disable, hash(), true, &mechs(true)).unwrap(),
            Binding::Unsupported
        );
        assert_eq!(
            choose_binding(Prefer, hash(), true, &mechs(false)).unwrap(),
            Binding::Unrequested
        );
        assert_eq!(
            choose_binding(Prefer, None, false, &mechs(false)).unwrap(),
            Binding::Unsupported
        );
        // Offered, but no usable certificate hash: must not claim "server does not support it".
        assert_eq!(
            choose_binding(Prefer, None, true, &mechs(true)).unwrap(),
            Binding::Unsupported
        );
        for (end_point, tls, plus) in [
            (None, false, false),
            (hash(), true, false),
            (None, true, true),
        ] {
            assert!(matches!(
                choose_binding(Require, end_point, tls, &mechs(plus)),
                Err(AuthError::ChannelBindingRequired(_))
            ));
        }
    }

    #[test]
    fn gs2_headers() {
        let header = |b: ChannelBinding| ScramSha256::new(b"pw", b).message()[..3].to_vec();
        assert_eq!(header(ChannelBinding::unsupported()), b"n,,");
        assert_eq!(header(ChannelBinding::unrequested()), b"y,,");
        assert_eq!(
            header(ChannelBinding::tls_server_end_point(vec![0; 32]))[..2],
            *b"p="
        );
    }
}
