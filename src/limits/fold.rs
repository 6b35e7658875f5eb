//! The Unicode rule of [`Normalize::Folded`](super::Normalize::Folded): one
//! text for every spelling of a mailbox or an account that Unicode says is
//! the same, so that `ａｄａ@example.com`, `ad\u{200b}a@example.com` and
//! `ADA@example.com` share `ada@example.com`'s budget.
//!
//! The rule, in this order:
//! 1. NFKC (compatibility forms such as fullwidth letters and `ﬁ` become
//!    their plain letters; `e` + U+0301 becomes `é`);
//! 2. full case folding, with no language's special cases (`ß` and `ẞ` fold
//!    to `ss`, `ς` and `Σ` to `σ`, `ſ` to `s`);
//! 3. every `Default_Ignorable_Code_Point` removed (zero-width spaces and
//!    joiners, the soft hyphen, the byte-order mark, variation selectors);
//! 4. NFKC again (folding and removals can leave text that composes);
//! 5. `White_Space` trimmed from both ends.
//!
//! Steps 1 to 4 are the usual composition behind Unicode's NFKC_Casefold;
//! the Unicode data is ICU4X's, which the Unicode Consortium keeps. An ASCII
//! value takes a path of its own that gives the same text: ASCII white space
//! trimmed and ASCII capitals lowered, borrowing the value when it has none.

use std::borrow::Cow;

use icu_casemap::{CaseMapper, CaseMapperBorrowed};
use icu_normalizer::{ComposingNormalizer, ComposingNormalizerBorrowed};
use icu_properties::props::DefaultIgnorableCodePoint;
use icu_properties::{CodePointSetData, CodePointSetDataBorrowed};

const NFKC: ComposingNormalizerBorrowed<'static> = ComposingNormalizer::new_nfkc();
const CASE: CaseMapperBorrowed<'static> = CaseMapper::new();
const IGNORABLE: CodePointSetDataBorrowed<'static> = CodePointSetData::new::<DefaultIgnorableCodePoint>();

/// `value` folded by the rule above.
#[inline]
pub(crate) fn fold(value: &str) -> Cow<'_, str> {
    let trimmed = value.trim();
    if trimmed.is_ascii() {
        ascii(trimmed)
    } else {
        Cow::Owned(unicode(value))
    }
}

/// An ASCII value: NFKC and the removals leave it as it is, and its case
/// folding is its ASCII lower case.
#[inline]
fn ascii(value: &str) -> Cow<'_, str> {
    if value.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(value.to_ascii_lowercase())
    } else {
        Cow::Borrowed(value)
    }
}

/// Any other value, by the five steps.
#[inline(never)]
fn unicode(value: &str) -> String {
    let composed = NFKC.normalize(value);
    let folded = CASE.fold_string(&composed);
    let visible: String = folded.chars().filter(|&c| !IGNORABLE.contains(c)).collect();
    let composed = NFKC.normalize(&visible);
    composed.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn each_step_makes_spellings_one() {
        for (given, folded) in [
            (" Ada@Example.COM ", "ada@example.com"),
            ("ＡＤＡ＠ｅｘａｍｐｌｅ．ｃｏｍ", "ada@example.com"),
            ("ad\u{200b}a@example.com", "ada@example.com"),
            ("ada\u{00ad}@example.com", "ada@example.com"),
            ("\u{3000}ada@example.com\u{feff}\u{00a0}", "ada@example.com"),
            ("jose\u{0301}@example.com", "josé@example.com"),
            ("JOSÉ@example.com", "josé@example.com"),
            ("ſam@example.com", "sam@example.com"),
            ("STRAẞE", "strasse"),
            ("straße", "strasse"),
            ("ΟΔΥΣΣΕΥΣ", "οδυσσευσ"),
            ("οδυσσευς", "οδυσσευσ"),
            ("ﬁle", "file"),
            ("ÉLODIE@example.fr", "élodie@example.fr"),
            // Two code points that only look alike stay two.
            ("adа@example.com", "adа@example.com"),
            ("\u{200b}", ""),
        ] {
            assert_eq!(fold(given), folded, "{}", given.escape_unicode());
        }
        assert!(matches!(fold("ada@example.com"), Cow::Borrowed(_)), "nothing to fold: borrowed");
    }

    #[test]
    fn every_code_point_folds_to_a_fixed_point_with_no_ignorable_left() {
        // Planes 4 to 13 hold no character yet, and 15 and 16 are private use.
        let planes = (0..0x4_0000).chain(0xE_0000..0xF_0000);
        let mut value = String::new();
        for c in planes.filter_map(char::from_u32) {
            value.clear();
            value.push(c);
            value.push('\u{0301}');
            let once = fold(&value);
            assert_eq!(fold(&once), once, "{}", value.escape_unicode());
            assert!(!once.chars().any(|c| IGNORABLE.contains(c)), "{}", value.escape_unicode());
        }
    }

    /// Text likely to fold: letters with marks, compatibility forms, Greek,
    /// ignorables and white space, mixed with anything.
    fn text() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            any::<char>().prop_map(String::from),
            proptest::sample::select(vec![
                "A", "ß", "ẞ", "Σ", "ς", "ſ", "ﬁ", "ﬃ", "İ", "ı", "\u{0301}", "\u{0345}", "\u{0307}", "\u{200b}",
                "\u{200d}", "\u{00ad}", "\u{034f}", "\u{feff}", "\u{fe0f}", " ", "\u{3000}", "\u{00a0}", "ｱ", "ﾞ", "ᾼ",
                "ǅ", "㎒", "\u{1100}", "\u{1161}", "Å", "Ω", "K",
            ])
            .prop_map(String::from),
        ];
        proptest::collection::vec(piece, 0..24).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn folding_twice_is_folding_once(value in text()) {
            let once = fold(&value).into_owned();
            prop_assert_eq!(fold(&once), once.as_str(), "{}", value.escape_unicode());
        }

        #[test]
        fn the_ascii_path_gives_the_unicode_rules_text(value in "[ -~\t\n\r\u{0b}\u{0c}]{0,40}") {
            let unicode = unicode(&value);
            prop_assert_eq!(fold(&value), unicode.as_str());
        }

        #[test]
        fn any_text_folds(value in any::<String>()) {
            let once = fold(&value).into_owned();
            prop_assert_eq!(fold(&once), once.as_str());
        }
    }
}
