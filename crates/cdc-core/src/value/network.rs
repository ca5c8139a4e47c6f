//! `inet`, `cidr`, `macaddr`, `macaddr8`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::error::ValueError;
use crate::Oid;

/// `PGSQL_AF_INET`: the family byte of an IPv4 `inet` in binary form.
const PGSQL_AF_INET: u8 = 2;
/// `PGSQL_AF_INET6`: `PGSQL_AF_INET + 1`.
const PGSQL_AF_INET6: u8 = 3;

/// An `inet` or `cidr` value: an address and a netmask length.
///
/// Displays as `network_out` prints it: `inet` omits `/32` (`/128`) for a
/// single host, `cidr` always shows the length; IPv6 uses PostgreSQL's
/// compression rules (`2001:db8::1`, `::ffff:1.2.3.4`, `::0.1.0.2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Inet {
    addr: IpAddr,
    bits: u8,
    cidr: bool,
}

impl Inet {
    /// An `inet` host or network; `None` when `bits` exceeds the address width.
    pub fn new_inet(addr: IpAddr, bits: u8) -> Option<Inet> {
        (bits <= max_bits(addr)).then_some(Inet {
            addr,
            bits,
            cidr: false,
        })
    }

    /// A `cidr` network; `None` when `bits` is too large or host bits are set.
    pub fn new_cidr(addr: IpAddr, bits: u8) -> Option<Inet> {
        (bits <= max_bits(addr) && host_bits_clear(addr, bits)).then_some(Inet {
            addr,
            bits,
            cidr: true,
        })
    }

    /// The address.
    pub const fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The netmask length.
    pub const fn bits(&self) -> u8 {
        self.bits
    }

    /// Whether this is a `cidr` (network) rather than an `inet` value.
    pub const fn is_cidr(&self) -> bool {
        self.cidr
    }
}

fn max_bits(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

fn host_bits_clear(addr: IpAddr, bits: u8) -> bool {
    let (value, width) = match addr {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32u32),
        IpAddr::V6(a) => (u128::from(a), 128u32),
    };
    let host = width.saturating_sub(u32::from(bits));
    host == 0 || value & (u128::MAX >> (128 - host)) == 0
}

impl fmt::Display for Inet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}")?,
            IpAddr::V6(a) => write_ipv6(f, a)?,
        }
        if self.cidr || self.bits != max_bits(self.addr) {
            write!(f, "/{}", self.bits)?;
        }
        Ok(())
    }
}

/// PostgreSQL's `inet_net_ntop_ipv6`: the first longest run (2+) of zero words becomes `::`;
/// with six leading zero words (or five and `ffff`) the last 32 bits print as IPv4.
fn write_ipv6(f: &mut fmt::Formatter<'_>, a: Ipv6Addr) -> fmt::Result {
    let words = a.segments();
    // (start, length) of zero-word runs.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, w) in words.iter().enumerate() {
        if *w == 0 {
            cur = Some(cur.map_or((i, 1), |(b, l)| (b, l + 1)));
        } else if let Some(c) = cur.take() {
            if best.is_none_or(|b| c.1 > b.1) {
                best = Some(c);
            }
        }
    }
    if let Some(c) = cur {
        if best.is_none_or(|b| c.1 > b.1) {
            best = Some(c);
        }
    }
    let best = best.filter(|b| b.1 >= 2);
    for (i, w) in words.iter().enumerate() {
        if let Some((base, len)) = best {
            if (base..base + len).contains(&i) {
                if i == base {
                    f.write_str(":")?;
                }
                continue;
            }
        }
        if i != 0 {
            f.write_str(":")?;
        }
        let embedded_v4 = i == 6
            && best.is_some_and(|(base, len)| {
                base == 0
                    && (len == 6 || (len == 7 && words[7] != 1) || (len == 5 && words[5] == 0xffff))
            });
        if embedded_v4 {
            let o = a.octets();
            return write!(f, "{}.{}.{}.{}", o[12], o[13], o[14], o[15]);
        }
        write!(f, "{w:x}")?;
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        f.write_str(":")?;
    }
    Ok(())
}

/// `addr[/bits]`.
pub(crate) fn inet_text(oid: Oid, raw: &[u8], cidr: bool) -> Result<Inet, ValueError> {
    let bad = |reason| ValueError::text(oid, raw, reason);
    let s = std::str::from_utf8(raw).map_err(|_| bad("expected an IP address"))?;
    let (addr, bits) = match s.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let addr: IpAddr = if addr.contains(':') {
        addr.parse::<Ipv6Addr>().map(IpAddr::V6)
    } else {
        addr.parse::<Ipv4Addr>().map(IpAddr::V4)
    }
    .map_err(|_| bad("expected an IP address"))?;
    let bits = match bits {
        Some(b) if !b.is_empty() && b.len() <= 3 && b.bytes().all(|c| c.is_ascii_digit()) => b
            .parse::<u8>()
            .map_err(|_| bad("netmask length out of range"))?,
        Some(_) => return Err(bad("expected a netmask length")),
        None => max_bits(addr),
    };
    if cidr {
        Inet::new_cidr(addr, bits).ok_or_else(|| {
            bad("invalid cidr value: netmask too long or bits set to the right of the mask")
        })
    } else {
        Inet::new_inet(addr, bits).ok_or_else(|| bad("netmask length out of range"))
    }
}

/// `u8 family, u8 bits, u8 is_cidr, u8 address length, address bytes`. Like `network_recv`,
/// the `is_cidr` byte is ignored: the column type decides.
pub(crate) fn inet_binary(oid: Oid, raw: &[u8], cidr: bool) -> Result<Inet, ValueError> {
    let bad = |reason| ValueError::binary(oid, raw, reason);
    let [family, bits, _is_cidr, nb, addr @ ..] = raw else {
        return Err(bad("shorter than the 4-byte header"));
    };
    let addr = match (*family, *nb, addr.len()) {
        (PGSQL_AF_INET, 4, 4) => <[u8; 4]>::try_from(addr).map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        (PGSQL_AF_INET6, 16, 16) => {
            <[u8; 16]>::try_from(addr).map(|a| IpAddr::V6(Ipv6Addr::from(a)))
        }
        (PGSQL_AF_INET | PGSQL_AF_INET6, _, _) => return Err(bad("address length mismatch")),
        _ => return Err(bad("unknown address family")),
    }
    .map_err(|_| bad("address length mismatch"))?;
    if cidr {
        Inet::new_cidr(addr, *bits)
            .ok_or_else(|| bad("netmask too long or bits set to the right of the mask"))
    } else {
        Inet::new_inet(addr, *bits).ok_or_else(|| bad("netmask length out of range"))
    }
}

/// A `macaddr` (6 bytes), displayed `08:00:2b:01:02:03`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

/// A `macaddr8` (8 bytes, EUI-64), displayed `08:00:2b:01:02:03:04:05`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr8(pub [u8; 8]);

fn write_mac(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            f.write_str(":")?;
        }
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_mac(f, &self.0)
    }
}

impl fmt::Display for MacAddr8 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_mac(f, &self.0)
    }
}

/// `N` hex pairs, all separated by `:` or all by `-` (or not separated at all).
pub(crate) fn mac_text<const N: usize>(oid: Oid, raw: &[u8]) -> Result<[u8; N], ValueError> {
    let bad = || ValueError::text(oid, raw, "expected a MAC address like 08:00:2b:01:02:03");
    let sep = match raw.get(2) {
        Some(b':') => Some(b':'),
        Some(b'-') => Some(b'-'),
        _ => None,
    };
    let stride = if sep.is_some() { 3 } else { 2 };
    let expected = if sep.is_some() { N * 3 - 1 } else { N * 2 };
    if raw.len() != expected {
        return Err(bad());
    }
    let mut out = [0u8; N];
    for (i, slot) in out.iter_mut().enumerate() {
        let at = i * stride;
        let pair = raw.get(at..at + 2).ok_or_else(bad)?;
        let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        *slot = u8::from_str_radix(hex, 16).map_err(|_| bad())?;
        if let Some(sep) = sep {
            if i + 1 < N && raw.get(at + 2) != Some(&sep) {
                return Err(bad());
            }
        }
    }
    Ok(out)
}
