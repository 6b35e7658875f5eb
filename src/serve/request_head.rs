//! What a request's head must say before anything reads its body. Each
//! rule removes a way for the service and something in front of it (a
//! proxy, a firewall) to read one request two ways:
//! - **a host**: an HTTP/1.1 request without `Host` is refused (RFC 9112
//!   §3.2 makes it a 400), so the loopback check always has a name to judge;
//! - **one of each header the service reads**: `Host`, `Authorization`,
//!   `Content-Type` and `Content-Encoding` given twice are refused, never
//!   judged by the first;
//! - **one framing**: a body with a transfer coding other than `chunked`
//!   (`gzip, chunked`) is refused, never read as if it had none. (hyper
//!   itself reads a body framed by `Content-Length` and by
//!   `Transfer-Encoding` at once as chunked, drops the length, and closes
//!   the connection after the answer, so nothing after it is read.)
//! - **plain JSON**: a `Content-Encoding` that names a coding (other than
//!   `identity`) is refused, never read as if it were not there;
//! - **a body that fits**: a `Content-Length` over the 16 KiB a body may
//!   take is refused from the head alone, so no byte of it is read and a
//!   client that sent `Expect: 100-continue` is not told to send it.
//!
//! Each refusal closes the connection: the body was not read, so where the
//! next request would begin is not known.

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Version};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::routes::MAX_BODY;

/// The headers the service reads, each of which a request may give once.
const READ_ONCE: [HeaderName; 4] =
    [header::HOST, header::AUTHORIZATION, header::CONTENT_TYPE, header::CONTENT_ENCODING];

/// The answer to a request whose head breaks a rule above, if it does;
/// asked first at the front door (`auth.rs`).
pub fn refused<B>(request: &Request<B>) -> Option<Response> {
    let mut answer = refusal(request.version(), request.headers())?.into_response();
    answer.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    Some(answer)
}

/// Why a head is refused, if it is.
fn refusal(version: Version, headers: &HeaderMap) -> Option<ApiError> {
    if version == Version::HTTP_11 && !headers.contains_key(header::HOST) {
        return Some(ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing-host",
            "the request has no `Host`, which HTTP/1.1 requires: send the name it is addressed to, as \
             `Host: 127.0.0.1:<port>`",
        ));
    }
    if let Some(name) = READ_ONCE.iter().find(|name| headers.get_all(*name).iter().nth(1).is_some()) {
        return Some(ApiError::new(
            StatusCode::BAD_REQUEST,
            "repeated-header",
            format!("the request gives `{name}` twice: give it once, so that nothing in between reads another"),
        ));
    }
    let codings: Vec<String> = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(|coding| String::from_utf8_lossy(coding.trim_ascii()).to_ascii_lowercase())
        .filter(|coding| !coding.is_empty())
        .collect();
    let framing = |why: &str| {
        Some(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad-framing",
            format!("{why}: send the body with a Content-Length, or with `Transfer-Encoding: chunked` alone"),
        ))
    };
    if !codings.is_empty() && codings != ["chunked"] {
        return framing(&format!(
            "the body's transfer codings are `{}`, and only chunked is taken",
            codings.join(", ")
        ));
    }
    if let Some(coding) = headers.get(header::CONTENT_ENCODING) {
        let coding_named = coding.as_bytes().trim_ascii();
        if !coding_named.is_empty() && !coding_named.eq_ignore_ascii_case(b"identity") {
            return Some(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                format!(
                    "the body is sent with `Content-Encoding: {}`: send it as plain JSON, without Content-Encoding",
                    String::from_utf8_lossy(coding.as_bytes())
                ),
            ));
        }
    }
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match declared {
        Some(length) if length > MAX_BODY as u64 => Some(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("the body is {length} bytes: a body is at most {MAX_BODY} bytes"),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind of the refusal of an HTTP/1.1 head of `lines` (`name: value`,
    /// one a line), with a `Host` unless `lines` names one.
    fn kind_of(lines: &str) -> Option<&'static str> {
        let lines = if lines.starts_with("host:") { lines.to_owned() } else { format!("host: x\n{lines}") };
        let mut headers = HeaderMap::new();
        for (name, value) in lines.lines().filter_map(|l| l.split_once(": ")) {
            headers.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        refusal(Version::HTTP_11, &headers).map(|e| e.kind())
    }

    #[test]
    fn each_rule_refuses_its_heads_and_passes_the_rest() {
        let cases = [
            ("host: 127.0.0.1\ncontent-length: 26", None),
            ("transfer-encoding: chunked", None),
            ("transfer-encoding: Chunked", None),
            ("content-encoding: identity\ncontent-length: 16384", None),
            ("content-encoding: IDENTITY", None),
            ("content-encoding: ", None),
            ("content-encoding: gzip, identity", Some("unsupported-media-type")),
            ("host: 127.0.0.1\nhost: evil.example", Some("repeated-header")),
            ("authorization: Bearer a\nauthorization: Bearer b", Some("repeated-header")),
            ("content-type: application/json\ncontent-type: text/plain", Some("repeated-header")),
            ("transfer-encoding: gzip, chunked", Some("bad-framing")),
            ("transfer-encoding: gzip\ntransfer-encoding: chunked", Some("bad-framing")),
            ("transfer-encoding: chunked, chunked", Some("bad-framing")),
            ("content-encoding: gzip", Some("unsupported-media-type")),
            ("content-length: 16385", Some("body-too-large")),
            ("content-length: 99999999999", Some("body-too-large")),
        ];
        for (lines, expected) in cases {
            assert_eq!(kind_of(lines), expected, "{lines:?}");
        }
    }

    #[test]
    fn only_http_1_1_must_name_its_host() {
        let kind = |version| refusal(version, &HeaderMap::new()).map(|e| e.kind());
        assert_eq!(kind(Version::HTTP_11), Some("missing-host"));
        assert_eq!(kind(Version::HTTP_10), None);
    }
}
