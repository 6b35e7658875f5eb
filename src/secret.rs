//! Secrets that never print: the site secret, and URLs that carry a password.
//!
//! Their `Debug` and `Display` show `***` where the secret is, so a config, a
//! builder or a command's arguments can be logged or shown in an error as
//! they are. The value itself is reached only through `expose`.

use std::fmt;
use std::str::FromStr;

/// A secret (the site secret, an API token): prints as `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps `secret`.
    pub fn new(secret: impl Into<String>) -> Self {
        SecretString(secret.into())
    }

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
        SecretString::new(secret)
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
        Ok(SecretString::new(secret))
    }
}

/// A store's URL (`postgres://user:password@host/db?sslpassword=…`): prints
/// with its password, in the user info or in a query parameter, as `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        SecretUrl(url.into())
    }

    /// The URL itself, password included, for the one place that connects.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its passwords as `***`.
    pub fn redacted(&self) -> String {
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
        SecretUrl::new(url)
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
        Ok(SecretUrl::new(url))
    }
}

/// Query parameters that carry a password, in the URLs of the databases and
/// of Redis.
const SECRET_PARAMS: [&str; 8] = ["password", "pass", "pwd", "passwd", "sslpassword", "secret", "token", "auth"];

/// `url` with the password of its user info and of its query parameters as `***`.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match base[scheme + 3..at].split_once(':') {
            Some((user, _)) => format!("{}://{user}:***{}", &base[..scheme], &base[at..]),
            // `redis://secret@host`: a lone user info is Redis's password.
            None if base.starts_with("redis") => format!("{}://***{}", &base[..scheme], &base[at..]),
            None => base.to_owned(),
        },
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if SECRET_PARAMS.contains(&name.to_ascii_lowercase().as_str()) => format!("{name}=***"),
                _ => param.to_owned(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
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
        ] {
            let url = SecretUrl::new(url);
            assert_eq!(url.to_string(), shown);
            assert_eq!(format!("{url:?}"), format!("{shown:?}"));
        }
        let secret = SecretString::new("hunter2");
        assert_eq!(format!("{secret} {secret:?} {secret:#?}"), "*** *** ***");
        assert_eq!(secret.expose(), "hunter2");
    }
}
