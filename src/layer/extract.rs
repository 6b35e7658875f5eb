//! Key extractors: where a layer finds the value it counts a request by (the
//! client's address, an API key, anything in the request's head).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::ConnectInfo;
use axum::http::header::HeaderName;
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};

use super::key::Key;
use crate::limits::{client_network, DEFAULT_IPV6_PREFIX};

/// Finds the value a request is counted by. `None` is a missing key, which the
/// layer answers as its [`MissingKey`](super::MissingKey) says.
///
/// Any `Fn(&Parts) -> Option<String>` closure is one:
///
/// ```
/// use axum::http::request::Parts;
/// use limit_store::layer::KeyExtractor;
///
/// // Count per tenant, from the path `/t/{tenant}/...`.
/// let tenant = |parts: &Parts| parts.uri.path().strip_prefix("/t/")?.split('/').next().map(str::to_owned);
/// fn is_extractor(_: &impl KeyExtractor) {}
/// is_extractor(&tenant);
/// ```
pub trait KeyExtractor: Clone + Send + Sync + 'static {
    /// The key of the request with head `parts`, or `None` when it has none.
    /// The built-in extractors write it inline, with no heap; a closure's
    /// `String` is taken as it is.
    fn extract(&self, parts: &Parts) -> Option<Key>;

    /// [`extract`](Self::extract) of a request with these `headers` and
    /// `extensions`, read where they are, for an extractor that needs
    /// nothing else of the head: the layer then need not take the request
    /// apart to hand it [`Parts`]. The default, `Err(NeedsParts)`, asks for
    /// them; the built-in extractors read in place.
    fn key_in_place(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Option<Key>, NeedsParts> {
        let _ = (headers, extensions);
        Err(NeedsParts)
    }
}

/// [`KeyExtractor::key_in_place`]'s answer that the extractor reads more of
/// the request's head than its headers and extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeedsParts;

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<String> + Clone + Send + Sync + 'static,
{
    fn extract(&self, parts: &Parts) -> Option<Key> {
        self(parts).map(Key::from)
    }
}

/// The peer address of the connection, from axum's
/// [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo): serve the router
/// with `into_make_service_with_connect_info::<SocketAddr>()`. Behind a
/// proxy, use [`ClientIp`](super::ClientIp) instead.
///
/// IPv6 clients count per /64 (see [`PeerIp::ipv6_prefix`]).
#[derive(Clone, Copy, Debug)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

impl Default for PeerIp {
    fn default() -> Self {
        PeerIp { ipv6_prefix: DEFAULT_IPV6_PREFIX }
    }
}

impl PeerIp {
    /// The peer address, IPv6 per /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// IPv6 addresses count per network of this many bits (128: per address).
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits.min(128);
        self
    }
}

impl KeyExtractor for PeerIp {
    fn extract(&self, parts: &Parts) -> Option<Key> {
        self.key_in_place(&parts.headers, &parts.extensions).unwrap_or(None)
    }

    #[inline]
    fn key_in_place(&self, _: &HeaderMap, extensions: &Extensions) -> Result<Option<Key>, NeedsParts> {
        Ok(peer(extensions).map(|ip| client_key(ip, self.ipv6_prefix)))
    }
}

use crate::log::Kind;

/// The connection's peer address, when the server recorded it in a
/// request's `extensions`.
pub(crate) fn peer(extensions: &Extensions) -> Option<IpAddr> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let found = extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
    if found.is_none() && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            kind = Kind::LayerNoPeerAddress.as_str(),
            "a request has no peer address, so a layer keyed by the client's IP finds no key: serve the router with into_make_service_with_connect_info::<SocketAddr>()"
        );
    }
    found
}

/// An address as the layer counts it: its client network, which an `ip`
/// part (normalized [`Ip`](crate::limits::Normalize::Ip)) takes too.
pub(crate) fn client_key(ip: IpAddr, ipv6_prefix: u8) -> Key {
    Key::address(client_network(ip, ipv6_prefix))
}

/// The value of a request header, as an API key: `HeaderKey::new("x-api-key")`.
/// A request without it (or with an empty or non-text value) has no key.
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// The header `name` (any case).
    ///
    /// # Panics
    /// When `name` is not a valid header name: a mistake in the code, found
    /// at startup.
    pub fn new(name: &str) -> Self {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap_or_else(|e| panic!("header name {name:?}: {e}"));
        HeaderKey { name }
    }
}

impl KeyExtractor for HeaderKey {
    fn extract(&self, parts: &Parts) -> Option<Key> {
        self.key_in_place(&parts.headers, &parts.extensions).unwrap_or(None)
    }

    fn key_in_place(&self, headers: &HeaderMap, _: &Extensions) -> Result<Option<Key>, NeedsParts> {
        let value = headers.get(&self.name).and_then(|v| v.to_str().ok()).map(str::trim);
        Ok(value.filter(|v| !v.is_empty()).map(Key::new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_extracted_text() {
        let head = |addr: &str, api_key: &str| {
            let mut request = axum::http::Request::get("/").header("x-api-key", api_key).body(()).unwrap();
            request.extensions_mut().insert(ConnectInfo(addr.parse::<SocketAddr>().unwrap()));
            request.into_parts().0
        };
        let long = "k".repeat(100);
        for (addr, api_key) in [
            ("192.0.2.7:1", " abc "),
            ("[2001:db8:1:2:aaaa::1]:1", long.as_str()),
            ("[::ffff:10.0.0.1]:1", "x"),
            ("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:1", ""),
        ] {
            let parts = head(addr, api_key);
            for prefix in [64, 128] {
                let ip = PeerIp::new().ipv6_prefix(prefix);
                assert_eq!(
                    ip.extract(&parts).map(|k| k.as_str().to_owned()),
                    Some(client_network(peer(&parts.extensions).unwrap(), prefix).to_string())
                );
            }
            let header = HeaderKey::new("x-api-key");
            let text = Some(api_key.trim()).filter(|k| !k.is_empty());
            assert_eq!(header.extract(&parts).as_ref().map(Key::as_str), text);
            // A closure reads the whole head: it asks for it.
            let path = |parts: &Parts| Some(parts.uri.path().to_owned());
            assert_eq!(path.key_in_place(&parts.headers, &parts.extensions), Err(NeedsParts));
        }
        assert_eq!(Key::new(&long).as_str(), long);
    }
}
