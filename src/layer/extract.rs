//! Key extractors: where a layer finds the value it counts a request by (the
//! client's address, an API key, anything in the request's head).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::ConnectInfo;
use axum::http::header::HeaderName;
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};

use super::key::Key;

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
/// IPv6 clients count per network, on any part: the limits'
/// [`ipv6_prefix`](crate::limits::LimitsBuilder::ipv6_prefix), /64 by default.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerIp;

impl KeyExtractor for PeerIp {
    fn extract(&self, parts: &Parts) -> Option<Key> {
        self.key_in_place(&parts.headers, &parts.extensions).unwrap_or(None)
    }

    #[inline]
    fn key_in_place(&self, _: &HeaderMap, extensions: &Extensions) -> Result<Option<Key>, NeedsParts> {
        Ok(peer(extensions).map(client_key))
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

/// A client's address as the layer hands it to its limit: an IPv4-mapped
/// IPv6 address as its IPv4 address, any other as it is. The layer counts
/// it as its client's network (the limits' `ipv6_prefix`).
pub(crate) fn client_key(ip: IpAddr) -> Key {
    Key::address(ip.to_canonical())
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
        Ok(value.filter(|v| !v.is_empty()).map(Key::from))
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
            assert_eq!(
                PeerIp.extract(&parts).map(|k| k.as_str().to_owned()),
                Some(peer(&parts.extensions).unwrap().to_canonical().to_string())
            );
            let header = HeaderKey::new("x-api-key");
            let text = Some(api_key.trim()).filter(|k| !k.is_empty());
            assert_eq!(header.extract(&parts).as_ref().map(Key::as_str), text);
            // A closure reads the whole head: it asks for it.
            let path = |parts: &Parts| Some(parts.uri.path().to_owned());
            assert_eq!(path.key_in_place(&parts.headers, &parts.extensions), Err(NeedsParts));
        }
        assert_eq!(Key::from(long.as_str()).as_str(), long);
    }
}
