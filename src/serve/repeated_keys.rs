//! The first name given twice in one JSON object of a body, at any depth.
//!
//! The rule: a body that names a field or a part twice is refused, never
//! read one way. A JSON parser keeps the last of two (`serde_json` does) or
//! the first, so a proxy or firewall in front of the service may judge one
//! `"cost"` or `"account"` while the service counts the other.

use std::collections::HashSet;
use std::fmt;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The first name `json` gives twice in one object; `None` when it gives
/// none twice, or does not parse (the caller's parse says why).
pub(super) fn first_repeated(json: &[u8]) -> Option<String> {
    serde_json::from_slice::<Repeated>(json).ok().and_then(|r| r.0)
}

/// What a JSON value holds: the first name given twice in one of its objects.
struct Repeated(Option<String>);

impl<'de> Deserialize<'de> for Repeated {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Find)
    }
}

/// Reads one value, looking into its objects and arrays.
struct Find;

impl<'de> Visitor<'de> for Find {
    type Value = Repeated;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Repeated, E> {
        Ok(Repeated(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Repeated, E> {
        Ok(Repeated(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Repeated, E> {
        Ok(Repeated(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Repeated, E> {
        Ok(Repeated(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<Repeated, E> {
        Ok(Repeated(None))
    }
    fn visit_unit<E>(self) -> Result<Repeated, E> {
        Ok(Repeated(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Repeated, A::Error> {
        let mut found = None;
        while let Some(Repeated(inner)) = seq.next_element::<Repeated>()? {
            found = found.or(inner);
        }
        Ok(Repeated(found))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Repeated, A::Error> {
        let (mut seen, mut found) = (HashSet::new(), None);
        while let Some(name) = map.next_key::<String>()? {
            if found.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            // The name comes before its value, so a repeated name is found first.
            let repeated = (!seen.insert(name.clone())).then_some(name);
            let Repeated(inner) = map.next_value::<Repeated>()?;
            found = repeated.or(inner);
        }
        Ok(Repeated(found))
    }
}

#[cfg(test)]
mod tests {
    use super::first_repeated;

    #[test]
    fn a_name_given_twice_in_one_object_is_found_at_any_depth() {
        let cases = [
            (r#"{"keys": {"account": "a", "ip": "192.0.2.7"}, "cost": 1}"#, None),
            (r#"{"keys": {"account": "a", "account": "b"}}"#, Some("account")),
            (r#"{"keys": {"account": "a"}, "cost": 0, "cost": 9}"#, Some("cost")),
            (r#"{"keys": {}, "keys": {"account": "a"}}"#, Some("keys")),
            (r#"[{"a": 1}, {"a": 2}, {"b": [{"c": 1, "c": 2}]}]"#, Some("c")),
            (r#"{"a": {"x": 1}, "b": {"x": 1}}"#, None),
            (r#"{"k\u0061": 1, "ka": 2}"#, Some("ka")),
            (r#"{"a": 1,"#, None),
            (r#"{"a": {"b": 1, "b": 2}, "a": 3}"#, Some("b")),
            (r#"{"a": 1, "a": {"b": 1, "b": 2}}"#, Some("a")),
        ];
        for (json, expected) in cases {
            assert_eq!(first_repeated(json.as_bytes()).as_deref(), expected, "{json}");
        }
    }
}
