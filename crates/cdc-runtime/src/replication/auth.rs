//! The authentication exchange: trust, cleartext password, md5 and
//! SCRAM-SHA-256 (via `postgres_protocol`).

use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, ScramSha256, SCRAM_SHA_256, SCRAM_SHA_256_PLUS,
};
use postgres_protocol::message::frontend;

use super::config::{ConfigError, ReplicationConfig};
use super::error::{AuthError, ProtocolError, ReplicationError};
use super::transport::{log_notice, Transport};
use super::wire::{parse_auth, parse_error_fields, AuthRequest};

/// Channel binding is not implemented, so the client says so in the SCRAM
/// header: `n` ("client does not support it") on plain connections and when the
/// server offers `SCRAM-SHA-256-PLUS`, `y` ("client supports it, server seems
/// not to") on TLS connections where the server does not offer it, as libpq does.
fn channel_binding(tls: bool, mechanisms: &[String]) -> ChannelBinding {
    if tls && !mechanisms.iter().any(|m| m == SCRAM_SHA_256_PLUS) {
        ChannelBinding::unrequested()
    } else {
        ChannelBinding::unsupported()
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
    let mut scram: Option<ScramSha256> = None;
    let mut scram_finished = false;
    loop {
        let frame = t.read_frame().await?;
        match frame.tag {
            b'R' => match parse_auth(frame.body)? {
                AuthRequest::Ok => {
                    if scram.is_some() && !scram_finished {
                        return Err(AuthError::IncompleteScram.into());
                    }
                    return Ok(());
                }
                AuthRequest::CleartextPassword => {
                    let pw = password(config, "password")?;
                    frontend::password_message(pw.as_bytes(), &mut t.write)
                        .map_err(nul_in_password)?;
                    t.send().await?;
                }
                AuthRequest::Md5Password { salt } => {
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
                    let s = ScramSha256::new(pw.as_bytes(), channel_binding(tls, &mechanisms));
                    frontend::sasl_initial_response(SCRAM_SHA_256, s.message(), &mut t.write)
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

    fn gs2(binding: ChannelBinding) -> Vec<u8> {
        ScramSha256::new(b"pw", binding).message()[..3].to_vec()
    }

    #[test]
    fn channel_binding_header_follows_libpq() {
        let plus = vec![SCRAM_SHA_256_PLUS.to_string(), SCRAM_SHA_256.to_string()];
        let plain = vec![SCRAM_SHA_256.to_string()];
        assert_eq!(gs2(channel_binding(false, &plain)), b"n,,");
        assert_eq!(gs2(channel_binding(false, &plus)), b"n,,");
        assert_eq!(gs2(channel_binding(true, &plus)), b"n,,");
        assert_eq!(gs2(channel_binding(true, &plain)), b"y,,");
    }
}
