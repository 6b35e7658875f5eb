//! The client's address behind proxies: a forwarded header, believed only
//! from trusted proxies, read from the right.
//!
//! Each proxy appends the address it got the request from to the header, so
//! the right end is written by the nearest proxy and the left end by whoever
//! sent the request, who may write anything. Reading from the right and
//! stopping at the first address that is not a trusted proxy gives the
//! furthest address any trusted party vouches for. The header is read as
//! bytes, element by element: one byte that is not text in what the client
//! wrote must not drop the whole header. Taking the leftmost entry,
//! as `tower_governor`'s `SmartIpKeyExtractor` does, lets a client pick its
//! own budget.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use axum::http::header::{HeaderName, FORWARDED};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};

use super::extract::{client_key, peer, KeyExtractor, NeedsParts};
use super::key::Key;

/// A network of addresses, as `10.0.0.0/8`, `2001:db8::/32` or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    network: IpAddr,
    bits: u8,
}

/// Text that is not a network.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an address or a network: write e.g. 10.0.0.0/8, 2001:db8::/32 or 192.0.2.1")]
pub struct BadCidr(String);

impl FromStr for Cidr {
    type Err = BadCidr;

    fn from_str(s: &str) -> Result<Self, BadCidr> {
        let bad = || BadCidr(s.to_owned());
        let (ip, bits) = match s.trim().split_once('/') {
            Some((ip, bits)) => (ip, Some(bits.parse::<u8>().map_err(|_| bad())?)),
            None => (s.trim(), None),
        };
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(bad());
        }
        Ok(Cidr { network: mask(ip, bits), bits })
    }
}

impl Cidr {
    /// True when `ip` is in this network (an IPv4-mapped IPv6 address as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.network.is_ipv4() && mask(ip, self.bits) == self.network
    }
}

fn mask(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

/// Which forwarded header the trusted proxies write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// The client's address: the peer's, or, when the peer is a trusted proxy,
/// the first address from the right of the forwarded header that is not one.
/// Only the configured header is read: a client can't switch to the other.
/// The header is read element by element, as bytes, so what the client
/// wrote to the left of its address (text or not) is never read. A trusted
/// peer that sends no header (or only empty elements) counts as the client
/// itself, and an element that is not an address (`unknown`, an obfuscated
/// name, bytes that are not text) where the client's should be, with only
/// trusted proxies to its right, leaves the request without a key: it is not
/// skipped, since the element to its left is the client's own writing.
///
/// ```
/// use limit_store::layer::{ClientIp, ForwardedHeader};
/// let ip = ClientIp::trusting(["10.0.0.0/8", "fd00::/8"]).unwrap().header(ForwardedHeader::Forwarded);
/// # let _ = ip;
/// ```
#[derive(Clone, Debug)]
pub struct ClientIp {
    trusted: std::sync::Arc<[Cidr]>,
    header: ForwardedHeader,
}

impl ClientIp {
    /// Believes the forwarded header only from peers in `trusted` (CIDRs or addresses).
    pub fn trusting<I, S>(trusted: I) -> Result<Self, BadCidr>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let trusted = trusted.into_iter().map(|s| s.as_ref().parse()).collect::<Result<Vec<Cidr>, _>>()?;
        Ok(ClientIp { trusted: trusted.into(), header: ForwardedHeader::XForwardedFor })
    }

    /// Reads `header` (X-Forwarded-For by default).
    #[must_use]
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|c| c.contains(ip))
    }

    /// The client's address for a request from `peer` with these `headers`.
    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> Option<IpAddr> {
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        let name: HeaderName = match self.header {
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::Forwarded => FORWARDED,
        };
        let mut last = peer;
        // Header lines in order make one list; read it from its right end,
        // element by element, as bytes: what the client wrote to the left
        // of its own address is never read, text or not.
        for line in headers.get_all(name).iter().rev() {
            for element in line.as_bytes().rsplit(|&b| b == b',') {
                // An empty element is no element (RFC 9110, 5.6.1).
                if element.trim_ascii().is_empty() {
                    continue;
                }
                let node = match self.header {
                    ForwardedHeader::XForwardedFor => Some(element),
                    ForwardedHeader::Forwarded => for_of(element),
                };
                // An element that is not an address where the client's
                // should be hides who sent the request: no key. Skipping it
                // would count the next element, which the client wrote.
                let ip = node.and_then(node_ip)?;
                if !self.is_trusted(ip) {
                    return Some(ip);
                }
                last = ip;
            }
        }
        // Every hop is a trusted proxy: the furthest one is the client.
        Some(last)
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, parts: &Parts) -> Option<Key> {
        self.key_in_place(&parts.headers, &parts.extensions).unwrap_or(None)
    }

    fn key_in_place(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Option<Key>, NeedsParts> {
        let ip = peer(extensions).and_then(|peer| self.client(peer, headers));
        Ok(ip.map(client_key))
    }
}

/// The `for=` value of one element of a `Forwarded` field (its other
/// parameters, `host=` say, need not be text).
fn for_of(element: &[u8]) -> Option<&[u8]> {
    element.split(|&b| b == b';').find_map(|pair| {
        let at = pair.iter().position(|&b| b == b'=')?;
        pair[..at].trim_ascii().eq_ignore_ascii_case(b"for").then_some(&pair[at + 1..])
    })
}

/// The address of a node: `192.0.2.7`, `192.0.2.7:4711`, `2001:db8::7`,
/// `[2001:db8::7]:4711`, quoted or not. Bytes that are not text are none.
fn node_ip(node: &[u8]) -> Option<IpAddr> {
    let node = std::str::from_utf8(node).ok()?.trim().trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    node.parse().ok().or_else(|| node.rsplit_once(':')?.0.parse::<Ipv4Addr>().ok().map(IpAddr::V4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_hold_their_addresses() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.1".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!v6.contains("10.1.0.1".parse().unwrap()));
        let one: Cidr = "192.0.2.1".parse().unwrap();
        assert!(one.contains("192.0.2.1".parse().unwrap()) && !one.contains("192.0.2.2".parse().unwrap()));
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains("203.0.113.9".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "nope", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn nodes_are_read_in_every_form() {
        let v4 = Some(IpAddr::from([192, 0, 2, 7]));
        assert_eq!(node_ip(b" 192.0.2.7"), v4);
        assert_eq!(node_ip(b"\"192.0.2.7:4711\""), v4);
        assert_eq!(node_ip(b"\"[2001:db8::7]:4711\""), "2001:db8::7".parse().ok());
        assert_eq!(node_ip(b"2001:db8::7"), "2001:db8::7".parse().ok());
        assert_eq!(node_ip(b"unknown"), None);
        assert_eq!(node_ip(b"_hidden"), None);
        assert_eq!(node_ip(b"192.0.2.7\xff"), None);
        assert_eq!(for_of(b" For=\"[2001:db8::7]\";proto=https"), Some(&b"\"[2001:db8::7]\""[..]));
        assert_eq!(for_of(b"host=\xff;for=192.0.2.7"), Some(&b"192.0.2.7"[..]));
        assert_eq!(for_of(b"by=10.0.0.1"), None);
    }
}
