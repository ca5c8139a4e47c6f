//! [`FaultProxy`]: a TCP proxy between pgcdc and a server that injects
//! network faults on demand.
//!
//! It listens on `127.0.0.1:<free port>` and forwards every connection to a
//! target address. At run time it can be switched between:
//!
//! * [`pass`](FaultProxy::pass): forward everything (the start state);
//! * [`drop_all`](FaultProxy::drop_all): close every current connection (both
//!   sides see it closed) and keep accepting new ones;
//! * [`blackhole`](FaultProxy::blackhole): for a while forward nothing in
//!   either direction; connections stay open, new ones are accepted but get
//!   no upstream until it ends (a network partition that TCP itself does not
//!   notice). Bytes already read are held, not lost, and flow on afterwards,
//!   as TCP retransmission would deliver them after a partition heals;
//! * [`throttle`](FaultProxy::throttle): at most `bytes_per_sec` in each
//!   direction of each connection.
//!
//! tokio only; no unsafe code.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with the bytes it relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward everything at once.
    Pass,
    /// Forward nothing; new connections wait for their upstream.
    Blackhole,
    /// At most this many bytes per second per direction and connection.
    Throttle(u64),
}

/// Bytes read per step while throttled: a tenth of the rate, so the flow
/// comes in 10 steps a second instead of one burst.
fn throttle_step(bytes_per_sec: u64) -> usize {
    usize::try_from((bytes_per_sec / 10).max(1)).unwrap_or(usize::MAX)
}

struct Shared {
    target: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    /// Bumped by [`FaultProxy::drop_all`]: every connection open then closes.
    kill: watch::Sender<u64>,
    /// Bumped by each [`FaultProxy::blackhole`]: only the newest one's timer
    /// switches back to pass.
    blackholes: AtomicU64,
    open: AtomicUsize,
    accepted: AtomicUsize,
}

/// A fault-injecting TCP proxy (see the module docs). Dropping it
/// stops listening and closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.shared.target)
            .field("mode", &self.mode())
            .finish()
    }
}

impl FaultProxy {
    /// Listens on `127.0.0.1` (a free port) and forwards to `target`, in
    /// [`ProxyMode::Pass`].
    pub async fn start(target: SocketAddr) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            mode: watch::channel(ProxyMode::Pass).0,
            kill: watch::channel(0).0,
            blackholes: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
        });
        let accept_shared = shared.clone();
        let listener = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accept_shared.accepted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(client, accept_shared.clone()));
            }
        });
        Ok(FaultProxy {
            addr,
            shared,
            listener,
        })
    }

    /// [`start`](Self::start) towards `127.0.0.1:port`.
    pub async fn to_port(port: u16) -> std::io::Result<FaultProxy> {
        Self::start(SocketAddr::from(([127, 0, 0, 1], port))).await
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Where it forwards to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        *self.shared.mode.borrow()
    }

    /// Connections open now (accepted and not yet closed).
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Connections accepted since the start.
    pub fn accepted_connections(&self) -> usize {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Forward everything again.
    pub fn pass(&self) {
        self.shared.mode.send_replace(ProxyMode::Pass);
    }

    /// Closes every connection open now; new ones are accepted as usual.
    pub fn drop_all(&self) {
        self.shared.kill.send_modify(|g| *g += 1);
    }

    /// Forward nothing for `duration`, then pass again (unless the mode was
    /// changed meanwhile). Returns at once.
    pub fn blackhole(&self, duration: Duration) {
        let generation = self.shared.blackholes.fetch_add(1, Ordering::SeqCst) + 1;
        self.shared.mode.send_replace(ProxyMode::Blackhole);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            if shared.blackholes.load(Ordering::SeqCst) == generation {
                shared.mode.send_if_modified(|m| {
                    let was = *m == ProxyMode::Blackhole;
                    if was {
                        *m = ProxyMode::Pass;
                    }
                    was
                });
            }
        });
    }

    /// At most `bytes_per_sec` (at least 1) in each direction of each
    /// connection, until the mode is changed.
    pub fn throttle(&self, bytes_per_sec: u64) {
        self.shared
            .mode
            .send_replace(ProxyMode::Throttle(bytes_per_sec.max(1)));
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.listener.abort();
        self.drop_all();
    }
}

/// Counts a connection as open while alive.
struct OpenGuard(Arc<Shared>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    shared.open.fetch_add(1, Ordering::Relaxed);
    let _open = OpenGuard(shared.clone());
    let mut kill = shared.kill.subscribe();
    let relay = async {
        // A connection accepted during a blackhole gets its upstream only
        // once it ends.
        flowing(&mut shared.mode.subscribe()).await;
        let Ok(upstream) = TcpStream::connect(shared.target).await else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (client_read, client_write) = client.into_split();
        let (up_read, up_write) = upstream.into_split();
        tokio::join!(
            pump(client_read, up_write, shared.mode.subscribe()),
            pump(up_read, client_write, shared.mode.subscribe()),
        );
    };
    tokio::select! {
        () = relay => {}
        // Dropping the relay closes both sockets.
        _ = kill.changed() => {}
    }
}

/// Waits until the mode is not [`ProxyMode::Blackhole`] and returns it.
async fn flowing(mode: &mut watch::Receiver<ProxyMode>) -> ProxyMode {
    loop {
        let now = *mode.borrow_and_update();
        if now != ProxyMode::Blackhole {
            return now;
        }
        if mode.changed().await.is_err() {
            // The proxy is gone; its drop closes the connection.
            return std::future::pending().await;
        }
    }
}

/// Relays `from` to `to` under the current mode until either side closes;
/// then shuts `to`'s write side (a half close passes through).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<ProxyMode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let now = flowing(&mut mode).await;
        let limit = match now {
            ProxyMode::Throttle(bps) => throttle_step(bps).min(buf.len()),
            _ => buf.len(),
        };
        let read = tokio::select! {
            r = from.read(&mut buf[..limit]) => r,
            // Re-evaluate: a blackhole stops reading at once. (TcpStream
            // reads are cancel-safe.)
            _ = mode.changed() => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // A blackhole that started during the read holds these bytes.
        let now = flowing(&mut mode).await;
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        if let ProxyMode::Throttle(bps) = now {
            let nanos = u64::try_from(n)
                .unwrap_or(u64::MAX)
                .saturating_mul(1_000_000_000)
                / bps.max(1);
            tokio::time::sleep(Duration::from_nanos(nanos)).await;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Instant;

    use super::*;

    /// An echo server on a free port; its address.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, data: &[u8]) -> Vec<u8> {
        s.write_all(data).await.unwrap();
        let mut back = vec![0u8; data.len()];
        s.read_exact(&mut back).await.unwrap();
        back
    }

    #[tokio::test]
    async fn passes_bytes_both_ways() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = s.split();
        let (_, back) = tokio::join!(async { w.write_all(&data).await.unwrap() }, async {
            let mut back = vec![0u8; data.len()];
            r.read_exact(&mut back).await.unwrap();
            back
        });
        assert_eq!(back, data);
        assert_eq!(proxy.open_connections(), 1);
        assert_eq!(proxy.accepted_connections(), 1);
    }

    #[tokio::test]
    async fn drop_all_closes_open_connections_and_keeps_accepting() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut a, b"a").await, b"a");
        assert_eq!(round_trip(&mut b, b"b").await, b"b");
        proxy.drop_all();
        for s in [&mut a, &mut b] {
            let mut byte = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte))
                .await
                .expect("the dropped connection is closed")
                .unwrap_or(0);
            assert_eq!(n, 0, "a dropped connection reads EOF");
        }
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut c, b"again").await, b"again");
    }

    #[tokio::test]
    async fn blackhole_holds_traffic_then_passes_it() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"before").await, b"before");
        let start = Instant::now();
        proxy.blackhole(Duration::from_millis(600));
        assert_eq!(proxy.mode(), ProxyMode::Blackhole);
        s.write_all(b"during").await.unwrap();
        // A connection opened during the blackhole is accepted but dead.
        let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
        late.write_all(b"late").await.unwrap();
        let mut back = [0u8; 6];
        let silent =
            tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut back)).await;
        assert!(silent.is_err(), "nothing comes back during a blackhole");
        // Afterwards both flow; nothing sent during it was lost.
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"during");
        assert!(start.elapsed() >= Duration::from_millis(600));
        let mut back = [0u8; 4];
        late.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"late");
        assert_eq!(proxy.mode(), ProxyMode::Pass);
    }

    #[tokio::test]
    async fn a_newer_mode_outlives_an_older_blackholes_timer() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        proxy.blackhole(Duration::from_millis(50));
        proxy.throttle(1000);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(proxy.mode(), ProxyMode::Throttle(1000));
        proxy.pass();
        assert_eq!(proxy.mode(), ProxyMode::Pass);
    }

    #[tokio::test]
    async fn throttle_limits_the_rate_then_pass_lifts_it() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.throttle(1024);
        let data = vec![7u8; 1024];
        let start = Instant::now();
        assert_eq!(round_trip(&mut s, &data).await, data);
        let took = start.elapsed();
        // 1 KiB out and back at 1 KiB/s per direction: about a second
        // (the two directions overlap).
        assert!(took >= Duration::from_millis(800), "{took:?}");
        assert!(took < Duration::from_secs(4), "{took:?}");
        proxy.pass();
        let start = Instant::now();
        let data = vec![9u8; 100_000];
        let (mut r, mut w) = s.split();
        tokio::join!(async { w.write_all(&data).await.unwrap() }, async {
            let mut back = vec![0u8; data.len()];
            r.read_exact(&mut back).await.unwrap();
        });
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
