//! Secrets that never print: the site secret, and URLs that carry a password.
//!
//! Their `Debug` and `Display` show `***` where the secret is, so a config, a
//! builder or a command's arguments can be logged or shown in an error as
//! they are. The value itself is reached only through `expose`.

use std::fmt;
use std::str::FromStr;

/// A secret (the site secret, an API token): prints as `***`. Made from
/// its text: `SecretString::from(text)`, `text.into()` or `text.parse()`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<&str> for SecretString {
    fn from(secret: &str) -> Self {
        SecretString(secret.to_owned())
    }
}

impl From<String> for SecretString {
    fn from(secret: String) -> Self {
        SecretString(secret)
    }
}

impl FromStr for SecretString {
    type Err = std::convert::Infallible;
    fn from_str(secret: &str) -> Result<Self, Self::Err> {
        Ok(SecretString(secret.to_owned()))
    }
}

/// A store's URL (`postgres://user:password@host/db?sslpassword=…`): prints
/// with its password, in the user info or in a query parameter, as `***`.
/// Made from its text: `SecretUrl::from(text)`, `text.into()` or `text.parse()`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL itself, password included, for the one place that connects.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its passwords as `***`, as it prints.
    pub(crate) fn redacted(&self) -> String {
        redact(&self.0)
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        SecretUrl(url.to_owned())
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        SecretUrl(url)
    }
}

impl FromStr for SecretUrl {
    type Err = std::convert::Infallible;
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Ok(SecretUrl(url.to_owned()))
    }
}

/// `url` with every password in it as `***`: the user info's, and the
/// value of every query parameter but a few known settings that are never
/// one (`sslmode`, `mode`, `port`, ...; see `is_plain_param`), so that a
/// misspelt `pasword` is hidden too.
///
/// The user info is all between `://` and the last `@` (no host holds
/// one), and shows only its user; the rest is parsed with `url`: each host
/// of the list (`redis+cluster://h1:6379,h2:6379` has several), then the
/// path and the query. A URL that does not parse shows as `scheme://***`:
/// its text is never shown. So does one that reads two ways, with a `/`,
/// `?` or `#` before its last `@`: a password written without escaping
/// (`postgres://u:pa?ss@host/db`, which a URL parser reads as host `u`, and
/// `postgres://u:?pw@h/db` as a query `pw@h/db`), or an `@` in a path or a
/// query (`?password=p@ss`), and either way a password may follow.
pub(crate) fn redact(url: &str) -> String {
    redacted(url).unwrap_or_else(|| match scheme_of(url) {
        Some(scheme) => format!("{scheme}://***"),
        None => "***".to_owned(),
    })
}

/// [`redact`]'s answer for a URL that parses.
fn redacted(url: &str) -> Option<String> {
    let scheme = &scheme_of(url)?;
    let after = &url[scheme.len() + 1..];
    let Some(rest) = after.strip_prefix("//") else {
        // No authority: SQLite's `sqlite::memory:` and `sqlite:counts.db`,
        // with no user info. No other store's URL has that form.
        if scheme != "sqlite" || after.contains('@') {
            return None;
        }
        return Some(format!("{scheme}:{}", path_and_query(&url::Url::parse(url).ok()?)));
    };
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) if rest[..at].contains(['/', '?', '#']) => return None,
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let mut out = format!("{scheme}://");
    if let Some(userinfo) = userinfo {
        out.push_str(&shown_userinfo(scheme, userinfo));
        out.push('@');
    }
    for (i, host) in hosts.split(',').enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&host_of(scheme, host)?);
    }
    out.push_str(&path_and_query(&url::Url::parse(&format!("{scheme}://h{tail}")).ok()?));
    Some(out)
}

/// The scheme of `url` (`postgres`, `redis+sentinel`), lower-cased, when
/// it has one.
fn scheme_of(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once(':')?;
    let mut bytes = scheme.bytes();
    let first = bytes.next()?;
    let valid = first.is_ascii_alphabetic() && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    valid.then(|| scheme.to_ascii_lowercase())
}

/// The user info as shown: its user, when it has one that a user name can
/// be, and `***` for the rest. Redis reads a lone user info
/// (`redis://secret@host`) as the password.
fn shown_userinfo(scheme: &str, userinfo: &str) -> String {
    let is_user = |user: &str| user.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+;=".contains(&b));
    let lone_is_password = scheme.starts_with("redis") || scheme.starts_with("valkey");
    match userinfo.split_once(':') {
        Some((user, _)) if is_user(user) => format!("{user}:***"),
        None if !lone_is_password && is_user(userinfo) => userinfo.to_owned(),
        _ => "***".to_owned(),
    }
}

/// One host of the list (`db`, `10.0.0.1:5432`, `[::1]:6379`, or none), as
/// `url` parses it.
fn host_of(scheme: &str, host: &str) -> Option<String> {
    if host.is_empty() {
        return Some(String::new());
    }
    let parsed = url::Url::parse(&format!("{scheme}://{host}")).ok()?;
    let name = parsed.host_str()?;
    Some(match parsed.port() {
        Some(port) => format!("{name}:{port}"),
        None => name.to_owned(),
    })
}

/// The path and the query of `parsed`, with the values of secret
/// parameters as `***`; a fragment (never part of a store's URL, but maybe
/// of a password's `#`) as `#***`.
fn path_and_query(parsed: &url::Url) -> String {
    let mut out = parsed.path().to_owned();
    if let Some(query) = parsed.query() {
        out.push('?');
        for (i, param) in query.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            // The name as the store's client reads it: percent-decoded.
            let (name, _) = url::form_urlencoded::parse(param.as_bytes()).next().unwrap_or_default();
            match param.split_once('=') {
                Some((raw, _)) if !is_plain_param(&name) => {
                    out.push_str(raw);
                    out.push_str("=***");
                }
                _ => out.push_str(param),
            }
        }
    }
    if parsed.fragment().is_some() {
        out.push_str("#***");
    }
    out
}

/// Whether a query parameter named `name` is one whose value can be shown:
/// a known setting that is never a password. Any other value, a misspelt
/// `pasword`'s or libpq's `sslpassword`'s, is hidden.
fn is_plain_param(name: &str) -> bool {
    const PLAIN: [&str; 16] = [
        "mode",
        "sslmode",
        "ssl-mode",
        "host",
        "hostaddr",
        "port",
        "dbname",
        "db",
        "user",
        "application_name",
        "statement-cache-capacity",
        "charset",
        "collation",
        "timezone",
        "time-zone",
        "protocol",
    ];
    PLAIN.contains(&name.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_never_print() {
        for (url, shown) in [
            ("postgres://app:hunter2@db/app", "postgres://app:***@db/app"),
            (
                "postgres://app@db/app?password=hunter2&sslmode=require",
                "postgres://app@db/app?password=***&sslmode=require",
            ),
            ("mysql://app:hunter2@db/app?sslpassword=hunter2", "mysql://app:***@db/app?sslpassword=***"),
            ("redis://:hunter2@cache:6379", "redis://:***@cache:6379"),
            ("redis://hunter2@cache:6379", "redis://***@cache:6379"),
            ("sqlite://limit-store.db", "sqlite://limit-store.db"),
            ("postgres://db/app?PassWord=hunter2", "postgres://db/app?PassWord=***"),
            ("postgres://u:p@ss:w@host:5432/db?sslmode=require", "postgres://u:***@host:5432/db?sslmode=require"),
            ("postgres://u:pa?ss@host/db", "postgres://***"),
            ("postgres://u:p@ss/x#y@host/db", "postgres://***"),
            ("redis://:se?cret@host", "redis://***"),
            ("rediss://se%cret@host:6380/2", "rediss://***@host:6380/2"),
            ("redis+cluster://:pw@h1:6379,h2:6380", "redis+cluster://:***@h1:6379,h2:6380"),
            (
                "redis+sentinel://u:pw@[::1]:26379,h2/mymaster?sentinel_password=pw",
                "redis+sentinel://u:***@[::1]:26379,h2/mymaster?sentinel_password=***",
            ),
            ("postgres://db/app?pass%77ord=hunter2", "postgres://db/app?pass%77ord=***"),
            ("postgres://db/app?password=hunt#er2", "postgres://db/app?password=***#***"),
            ("sqlite:///var/lib/counts.db?mode=rwc", "sqlite:///var/lib/counts.db?mode=rwc"),
            ("sqlite::memory:", "sqlite::memory:"),
            ("mysql://app:hunter2@db:notaport/app", "mysql://***"),
            ("postgres://app@db/app?password=p@ss", "postgres://***"),
            ("not a url with hunter2", "***"),
            ("redis:hunter2", "redis://***"),
        ] {
            let url = SecretUrl(url.to_owned());
            assert_eq!(url.to_string(), shown);
            assert_eq!(format!("{url:?}"), format!("{shown:?}"));
        }
        let secret = SecretString::from("hunter2");
        assert_eq!(format!("{secret} {secret:?} {secret:#?}"), "*** *** ***");
        assert_eq!(secret.expose(), "hunter2");
    }
}
