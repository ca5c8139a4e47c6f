//! TCP keepalives on every session pgcdc opens, so a peer host that died
//! without closing its connections (power loss, a network partition: no FIN)
//! is noticed by both ends instead of after the kernel's two-hour default.
//!
//! Both sides are set. The server side through the startup `options`
//! (`tcp_keepalives_idle`, `_interval`, `_count` and `tcp_user_timeout`), so
//! the server ends the session of a dead pgcdc host and frees its job lock
//! and its slot; the client side on the socket (tokio-postgres's keepalive
//! settings, and socket2 for the replication connection), so pgcdc notices a
//! dead server. With the defaults, [`IDLE`] 10 s, [`INTERVAL`] 5 s and
//! [`COUNT`] 3, a dead peer is noticed within [`DEAD_PEER_BOUND`] (25 s) of
//! its last sign of life; [`USER_TIMEOUT`] bounds data left unacknowledged
//! the same way.
//!
//! A stopped (SIGSTOP) but living process is not noticed this way: its kernel
//! answers the probes. The job's liveness beat (see
//! [`job`](crate::job)) covers that case.

use std::time::Duration;

/// Idle time before the first keepalive probe.
pub const IDLE: Duration = Duration::from_secs(10);
/// Time between unanswered probes.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes after which the connection is dropped.
pub const COUNT: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is dropped.
pub const USER_TIMEOUT: Duration = Duration::from_secs(25);
/// How long after its last sign of life a dead peer is noticed:
/// `IDLE + COUNT × INTERVAL`.
pub const DEAD_PEER_BOUND: Duration = Duration::from_secs(25);

/// The startup `options` that set the server side of the session's keepalives.
pub const SERVER_OPTIONS: &str = "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 \
     -c tcp_keepalives_count=3 -c tcp_user_timeout=25000";

/// Sets the client side on a tokio-postgres configuration: keepalives on the
/// socket, and [`SERVER_OPTIONS`] for the server's end (after any options
/// already set).
pub fn configure(config: &mut tokio_postgres::Config) {
    config
        .keepalives(true)
        .keepalives_idle(IDLE)
        .keepalives_interval(INTERVAL)
        .keepalives_retries(COUNT)
        .tcp_user_timeout(USER_TIMEOUT);
    let options = match config.get_options() {
        Some(o) if !o.is_empty() => format!("{o} {SERVER_OPTIONS}"),
        _ => SERVER_OPTIONS.to_owned(),
    };
    config.options(options);
}

/// Sets keepalives and the user timeout on a connected socket (the
/// replication connection's); a failure is logged, never fatal.
pub(crate) fn apply(stream: &tokio::net::TcpStream) {
    let socket = socket2::SockRef::from(stream);
    let params = socket2::TcpKeepalive::new()
        .with_time(IDLE)
        .with_interval(INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
    let params = params.with_retries(COUNT);
    if let Err(e) = socket.set_tcp_keepalive(&params) {
        tracing::debug!("could not set TCP keepalives: {e}");
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket.set_tcp_user_timeout(Some(USER_TIMEOUT)) {
        tracing::debug!("could not set TCP_USER_TIMEOUT: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_matches_the_settings() {
        assert_eq!(DEAD_PEER_BOUND, IDLE + INTERVAL * COUNT);
        assert!(SERVER_OPTIONS.contains(&format!("tcp_keepalives_idle={}", IDLE.as_secs())));
        assert!(SERVER_OPTIONS.contains(&format!("tcp_keepalives_interval={}", INTERVAL.as_secs())));
        assert!(SERVER_OPTIONS.contains(&format!("tcp_keepalives_count={COUNT}")));
        assert!(SERVER_OPTIONS.contains(&format!("tcp_user_timeout={}", USER_TIMEOUT.as_millis())));
        let mut c = tokio_postgres::Config::new();
        c.options("-c a=b");
        configure(&mut c);
        assert_eq!(c.get_options(), Some(&*format!("-c a=b {SERVER_OPTIONS}")));
        assert_eq!(c.get_keepalives_idle(), IDLE);
    }
}
