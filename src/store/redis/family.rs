//! Families of keys on Redis: each family (a limit: the key's text before its
//! first `:`, see `bound/family.rs`) holds a share of the bound, so that a
//! flood of new keys in one limit leaves the others counting.
//!
//! Keys stay hashed. Each stored key carries a **family tag** (see
//! `bound/tags.rs`, shared with the database store):
//! `<prefix>:<generation>:<tag>:<hmac>`. The tag is a function of the secret
//! and the key alone, so every instance names a key the same way, and it
//! tells nothing of the family to whoever reads the server without the secret.
//! The bound's count (`SCAN`, see `upkeep.rs`) reads the tag of every key it
//! walks and counts each family's entries as well as the whole: after each
//! count, every family this instance has met is judged on the entries of
//! every instance, as the memory store judges its own.
//!
//! Between counts an instance adds its own new entries to its families'
//! counts as it writes them. A family it has not met yet (no key of it counted
//! or read here) is learned at its first key, and judged on the whole store's
//! entries from the next count on (at most 5 s near full).

pub(super) use crate::bound::{FamilyAdmission, FamilyTags, Tag};

/// Appends the name part of `tag` (four hex digits and a `:`) to `out`.
pub(super) fn push_tag(out: &mut String, tag: Tag) {
    crate::key_hash::push_hex(out, &tag.to_be_bytes());
    out.push(':');
}

/// The tag in a stored key's name after `names`, if it has one.
pub(super) fn tag_in(name: &[u8], names: &str) -> Option<Tag> {
    let rest = name.strip_prefix(names.as_bytes())?;
    let hex = std::str::from_utf8(rest.get(..4)?).ok()?;
    (rest.get(4) == Some(&b':')).then(|| Tag::from_str_radix(hex, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_read_back_from_a_name() {
        let mut name = String::from("p:1f:");
        push_tag(&mut name, 0xab01);
        name.push_str("cafe");
        assert_eq!(name, "p:1f:ab01:cafe");
        assert_eq!(tag_in(name.as_bytes(), "p:1f:"), Some(0xab01));
        assert_eq!(tag_in(b"p:1f:cafe", "p:1f:"), None, "a name without a tag");
        assert_eq!(tag_in(b"q:1f:ab01:cafe", "p:1f:"), None);
    }
}
