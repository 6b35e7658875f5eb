//! Values made one before they are counted, so that an attacker can't pick
//! a fresh budget by writing the same thing another way: `Ada@Example.com `
//! and `ａｄａ@example.com` are `ada@example.com` (the rule is
//! [`Normalize::Folded`]'s), `::ffff:192.0.2.7` is `192.0.2.7`, and the 2^64
//! addresses of one IPv6 /64 (what one client is given) are one.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arrayvec::ArrayString;

use super::fold::fold;

/// How a part's values are made one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Normalize {
    /// Counted exactly as given (API keys, codes).
    #[default]
    Exact,
    /// One text for every spelling Unicode says is the same (accounts, email
    /// addresses, destinations): NFKC, then full case folding, then every
    /// `Default_Ignorable_Code_Point` removed, then NFKC again, then
    /// `White_Space` trimmed from both ends. So `ＡＤＡ@example.com`,
    /// `ad\u{200b}a@example.com`, `ſam@…` and `STRASSE@…` count as
    /// `ada@example.com`, `sam@…` and `strasse@…`. Letters that only look
    /// alike (a Cyrillic `а` for a Latin `a`) stay apart.
    Folded,
    /// An IP address: IPv4 as it is, an IPv4-mapped IPv6 address as its IPv4
    /// address, other IPv6 addresses per network (a /64 by default). A value
    /// that is not an IP address is refused.
    Ip,
}

/// The site-wide settings of normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyRules {
    /// IPv6 addresses count per network of this many bits (128: per address).
    pub(crate) ipv6_prefix: u8,
    /// `Folded` parts are folded by its rule (else counted exactly).
    pub(crate) fold_case: bool,
}

impl Default for KeyRules {
    fn default() -> Self {
        KeyRules { ipv6_prefix: DEFAULT_IPV6_PREFIX, fold_case: true }
    }
}

/// The network an IPv6 client counts in by default: a /64 is what one
/// subscriber or one server is handed.
const DEFAULT_IPV6_PREFIX: u8 = 64;

/// A value that is not what its part expects.
#[derive(Debug)]
pub(crate) struct NotAnIp;

impl KeyRules {
    /// `value` as `normalize` makes it one. The usual exact value is taken
    /// in line; the values it may rewrite go out of line.
    #[inline]
    pub(crate) fn apply<'v>(&self, normalize: Normalize, value: &'v str) -> Result<Cow<'v, str>, NotAnIp> {
        match normalize {
            Normalize::Exact => Ok(Cow::Borrowed(value)),
            Normalize::Folded if !self.fold_case => Ok(Cow::Borrowed(value)),
            Normalize::Folded => Ok(fold(value)),
            Normalize::Ip => self.ip_text(value),
        }
    }

    /// An address's text as `Ip` makes it one.
    #[inline(never)]
    fn ip_text<'v>(&self, value: &'v str) -> Result<Cow<'v, str>, NotAnIp> {
        let trimmed = value.trim();
        match trimmed.parse().map_err(|_| NotAnIp)? {
            // The parser takes IPv4 only in its one form (no leading
            // zeros), so the text is already the address's own.
            IpAddr::V4(_) => Ok(Cow::Borrowed(trimmed)),
            v6 => Ok(Cow::Owned(self.address(Normalize::Ip, v6).to_string())),
        }
    }

    /// [`address`](Self::address) handed to `f`: an IPv4 address's text
    /// (or an IPv4-mapped one's, on an `Ip` part) where it is written, with
    /// nothing copied.
    #[inline]
    pub(crate) fn with_address<R>(&self, normalize: Normalize, ip: IpAddr, f: impl FnOnce(&str) -> R) -> R {
        let v4 = match (normalize, ip) {
            (_, IpAddr::V4(v4)) => Some(v4),
            (Normalize::Ip, IpAddr::V6(v6)) => v6.to_ipv4_mapped(),
            _ => None,
        };
        match v4 {
            Some(v4) => f(Ipv4Text::new(v4).as_str()),
            None => f(&self.address(normalize, ip)),
        }
    }

    /// The address a client at `ip` counts as: an IPv4-mapped IPv6 address
    /// as its IPv4 address, another IPv6 address as the first address of
    /// its network of [`ipv6_prefix`](super::LimitsBuilder::ipv6_prefix)
    /// bits (what one client is handed: an attacker's /64 is one client,
    /// whatever part counts it), IPv4 as it is.
    pub(crate) fn client_network(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(network(v6, self.ipv6_prefix)),
            },
        }
    }

    /// The text of address `ip` as `normalize` makes it one: what
    /// [`apply`](Self::apply) gives for the address's text, with no text to
    /// parse; its text as given is [`write_address`]'s.
    pub(crate) fn address(&self, normalize: Normalize, ip: IpAddr) -> AddressText {
        let mut text = AddressText::new();
        match (normalize, ip) {
            (Normalize::Ip, IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => push_ipv4(&mut text, v4),
                None if self.ipv6_prefix >= 128 => push(&mut text, v6),
                None => {
                    push(&mut text, network(v6, self.ipv6_prefix));
                    push(&mut text, format_args!("/{}", self.ipv6_prefix));
                }
            },
            // Exact and folded parts count the text as written: an address's
            // text has no space and no capital to fold.
            (_, ip) => {
                let _ = write_address(ip, &mut text);
            }
        }
        text
    }
}

/// Writes address `ip`'s text to `out`, as `Display` writes it (IPv4
/// without the formatter): the text a part counts when given the address
/// rather than text, an [`Exact`](Normalize::Exact) part as it is, an
/// [`Ip`](Normalize::Ip) part as its network, so that an address counts
/// as its text would.
fn write_address<W: std::fmt::Write + ?Sized>(ip: IpAddr, out: &mut W) -> std::fmt::Result {
    match ip {
        // Digits and dots only: always text, and at most 15 bytes.
        IpAddr::V4(v4) => out.write_str(Ipv4Text::new(v4).as_str()),
        IpAddr::V6(v6) => write!(out, "{v6}"),
    }
}

/// An address's text as a part counts it: at most 39 bytes of IPv6 and a
/// `/128`.
pub(crate) type AddressText = ArrayString<48>;

/// Appends `what` as `Display` writes it; `AddressText` has room for any address.
fn push(text: &mut AddressText, what: impl std::fmt::Display) {
    let _ = write!(text, "{what}");
}

/// Appends `ip` as `Display` writes it.
fn push_ipv4(text: &mut AddressText, ip: Ipv4Addr) {
    let _ = write_address(IpAddr::V4(ip), text);
}

/// An IPv4 address's text as `Display` writes it, as bytes, without the
/// formatter: formatting addresses was a large share of a counted request's cost.
struct Ipv4Text {
    /// The text, then a `.` past it, then zeros.
    out: [u8; 16],
    len: usize,
}

/// Each octet's digits and a `.` after them (unused places zero), as one
/// little-endian word, and how many digits there are: an address's text is
/// four table reads and four stores, with no division.
const OCTETS: [(u32, u8); 256] = {
    let mut table = [(0u32, 0u8); 256];
    let mut octet: u8 = 0;
    loop {
        let (hundreds, tens, ones) = (b'0' + octet / 100, b'0' + octet / 10 % 10, b'0' + octet % 10);
        table[octet as usize] = match octet {
            100.. => (u32::from_le_bytes([hundreds, tens, ones, b'.']), 3),
            10.. => (u32::from_le_bytes([tens, ones, b'.', 0]), 2),
            _ => (u32::from_le_bytes([ones, b'.', 0, 0]), 1),
        };
        if octet == u8::MAX {
            break table;
        }
        octet += 1;
    }
};

impl Ipv4Text {
    /// The text of `ip`.
    fn new(ip: Ipv4Addr) -> Self {
        let mut out = [0u8; 16];
        let mut n = 0;
        for octet in ip.octets() {
            let (text, len) = OCTETS[usize::from(octet)];
            // At most 12 here (three octets of three digits and a dot).
            out[n..n + 4].copy_from_slice(&text.to_le_bytes());
            n += usize::from(len) + 1;
        }
        Ipv4Text { out, len: n - 1 }
    }

    /// The text's bytes.
    #[cfg(test)]
    fn as_bytes(&self) -> &[u8] {
        &self.out[..self.len]
    }

    /// The text. All of `out` is ASCII (digits, dots, zeros), checked
    /// whole, which takes a word at a time, and then cut to the text: a
    /// check of the text alone goes a byte at a time.
    #[inline]
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.out).ok().and_then(|all| all.get(..self.len)).unwrap_or_default()
    }
}

/// The first address of `ip`'s network of `bits` bits.
fn network(ip: Ipv6Addr, bits: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(bits.min(128))).unwrap_or(0);
    Ipv6Addr::from(u128::from(ip) & mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(rules: KeyRules, n: Normalize, value: &str) -> String {
        rules.apply(n, value).unwrap().into_owned()
    }

    #[test]
    fn accounts_are_trimmed_and_folded() {
        let rules = KeyRules::default();
        assert_eq!(one(rules, Normalize::Folded, " Ada@Example.COM "), "ada@example.com");
        assert_eq!(one(rules, Normalize::Folded, "ÉLODIE@example.fr"), "élodie@example.fr");
        let exact = KeyRules { fold_case: false, ..rules };
        assert_eq!(one(exact, Normalize::Folded, " Ada@Example.COM "), " Ada@Example.COM ");
        assert_eq!(one(rules, Normalize::Exact, "Key-AbC"), "Key-AbC");
    }

    #[test]
    fn ips_count_per_client() {
        let rules = KeyRules::default();
        assert_eq!(one(rules, Normalize::Ip, "192.0.2.7"), "192.0.2.7");
        assert_eq!(one(rules, Normalize::Ip, " 192.0.2.7 "), "192.0.2.7");
        assert_eq!(one(rules, Normalize::Ip, "::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(one(rules, Normalize::Ip, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(one(rules, Normalize::Ip, "2001:DB8:1:2:ffff:1:2:3"), "2001:db8:1:2::/64");
        assert_eq!(one(rules, Normalize::Ip, "2001:db8:1:3::1"), "2001:db8:1:3::/64");
        let per_address = KeyRules { ipv6_prefix: 128, ..rules };
        assert_eq!(one(per_address, Normalize::Ip, "2001:db8:1:2:aaaa::1"), "2001:db8:1:2:aaaa::1");
        let per_48 = KeyRules { ipv6_prefix: 48, ..rules };
        assert_eq!(one(per_48, Normalize::Ip, "2001:db8:1:2::1"), "2001:db8:1::/48");
        assert_eq!(one(KeyRules { ipv6_prefix: 0, ..rules }, Normalize::Ip, "2001:db8::1"), "::/0");
        for bad in ["not-an-ip", "", "192.0.2.256", "2001:db8::1/64", "192.0.2.07", "0192.0.2.7"] {
            assert!(rules.apply(Normalize::Ip, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_address_is_written_as_given() {
        let mut text = String::new();
        write_address("::ffff:192.0.2.7".parse().unwrap(), &mut text).unwrap();
        assert_eq!(text, "::ffff:192.0.2.7");
    }

    #[test]
    fn ipv4_is_written_as_display_writes_it() {
        for ip in ["0.0.0.0", "9.10.99.100", "192.0.2.7", "255.255.255.255", "10.200.0.1"] {
            let ip: Ipv4Addr = ip.parse().unwrap();
            let mut text = AddressText::new();
            push_ipv4(&mut text, ip);
            assert_eq!(text.as_str(), ip.to_string());
        }
        // Every octet in every place.
        for octet in 0..=u8::MAX {
            for ip in [[octet, 0, 9, 10], [99, octet, 100, 1], [255, 7, octet, 0], [1, 2, 3, octet]] {
                let ip = Ipv4Addr::from(ip);
                assert_eq!(Ipv4Text::new(ip).as_bytes(), ip.to_string().as_bytes());
                assert_eq!(Ipv4Text::new(ip).as_str(), ip.to_string());
            }
        }
    }

    proptest::proptest! {
        /// An address counts as the same text whether a part is given its
        /// text or the address itself (as the layer's extractors give it).
        #[test]
        fn an_address_is_the_text_its_text_normalizes_to(
            bits in proptest::prelude::any::<u128>(),
            v4 in proptest::prelude::any::<u32>(),
            shape in 0..3u8,
            prefix in proptest::prop_oneof![proptest::strategy::Just(64u8), proptest::strategy::Just(128u8), 0..=128u8],
        ) {
            let ip = match shape {
                0 => IpAddr::V4(Ipv4Addr::from(v4)),
                1 => IpAddr::V6(Ipv4Addr::from(v4).to_ipv6_mapped()),
                _ => IpAddr::V6(Ipv6Addr::from(bits)),
            };
            let rules = KeyRules { ipv6_prefix: prefix, fold_case: true };
            for normalize in [Normalize::Exact, Normalize::Folded, Normalize::Ip] {
                let text = ip.to_string();
                let from_text = rules.apply(normalize, &text).unwrap();
                let from_address = rules.address(normalize, ip);
                proptest::prop_assert_eq!(from_address.as_str(), &*from_text, "{:?} {}", normalize, ip);
                let handed = rules.with_address(normalize, ip, str::to_owned);
                proptest::prop_assert_eq!(&handed, &*from_text, "{:?} {}", normalize, ip);
            }
        }
    }
}
