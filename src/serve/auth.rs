//! Who may call: with a token set, every route but `/healthz` needs
//! `Authorization: Bearer <token>`, checked by [`ApiToken::matches`](super::ApiToken::matches).
//! Without one, `serve` listens on loopback only, and answers only requests
//! addressed to a loopback name: a web page that renames its own host to
//! 127.0.0.1 (DNS rebinding) reaches the port from the visitor's browser as
//! its own origin, but its requests still carry its name as their `Host`.

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::App;

/// The answer to a request that may not go in, or `None` to let it in: in
/// when its head keeps `request_head.rs`'s rules (judged first, token or
/// not) and it carries the token, or when no token is set and it is
/// addressed to a loopback name (or, in HTTP/1.0, names none), by its
/// `Host` and by its target when that names one.
pub fn refused(app: &App, request: &Request) -> Option<Response> {
    if let Some(refused) = super::request_head::refused(request) {
        return Some(refused);
    }
    let Some(token) = &app.token else {
        // A target in absolute form (`POST http://name/...`) names where the
        // request is addressed in place of `Host` (RFC 9112 §3.2.2): both,
        // where given, must be loopback names.
        let host = request.headers().get(header::HOST).map(|h| h.to_str().unwrap_or(""));
        let target = request.uri().authority().map(|a| a.as_str());
        if host.is_none_or(is_loopback_host) && target.is_none_or(is_loopback_host) {
            return None;
        }
        return Some(
            ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "not-loopback-host",
                "without a token this service answers only requests addressed to localhost, 127.0.0.1 or [::1] (a \
                 page elsewhere may have renamed itself to this address); call it by one of those, or set a token \
                 (LIMIT_STORE_API_TOKEN) to be called by other names",
            )
            .into_response(),
        );
    };
    if request.uri().path() == "/healthz" {
        return None;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if token.matches(given) {
        return None;
    }
    let mut answer = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send the service's token as `Authorization: Bearer <token>` (LIMIT_STORE_API_TOKEN)",
    )
    .into_response();
    answer.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    Some(answer)
}

/// Whether a `Host` header's value (or a target's authority) names a
/// loopback address: `localhost` (or a name under it, which browsers keep
/// on loopback), an IPv4 address in 127.0.0.0/8, or `[::1]`, each with or
/// without a port (a number a port can be). Any other spelling is not
/// taken for loopback.
fn is_loopback_host(host: &str) -> bool {
    let port =
        |port: &str| port.bytes().all(|b| b.is_ascii_digit()) && (port.is_empty() || port.parse::<u16>().is_ok());
    let name = match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((ip, "")) => ip,
            Some((ip, rest)) if rest.strip_prefix(':').is_some_and(port) => ip,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, p)) if port(p) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn loopback_names_and_others() {
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:1",
            "127.0.0.1:9",
            "127.1.2.3",
            "[::1]",
            "[::1]:80",
            "127.0.0.1:65535",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "0.0.0.0:8080",
            "192.0.2.7",
            "[::2]:80",
            "[::1]x",
            "::1",
            "",
            "127.0.0.1:abc",
            "127.0.0.1:65536",
            "127.0.0.1:+80",
            "127.0.0.1:99999999999999999999",
            "localhost:80:80",
            "[::1]:80:80",
            "user@127.0.0.1",
            "127.1",
            "[::ffff:127.0.0.1]",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
