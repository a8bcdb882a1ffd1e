//! Borrowed JSON helpers for reading a dialect's wire shapes: the classifiers and the
//! translation hub's decoders read the same fields the same way, so one helper serves each idea.
//!
//! Events are parsed with borrowed serde structs: strings whose content is only tested for
//! emptiness stay `&RawValue` (never unescaped), discriminators are [`JsonStr`] (borrowed unless
//! they hold escapes), unknown fields are skipped. A typical event allocates nothing.

pub(crate) mod usage;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Whether a JSON value is a non-empty string, decided from its raw text: a JSON string is
/// empty only when written `""` (no escape sequence spells the empty string).
pub(crate) fn nonempty_str(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| {
        let text = r.get();
        text.starts_with('"') && text != "\"\""
    })
}

/// A raw value's JSON text.
pub(crate) fn raw_text(raw: Option<&RawValue>) -> Option<&str> {
    raw.map(RawValue::get)
}

/// Whether a JSON value is an object (a non-null `error` key).
pub(crate) fn is_object(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| r.get().starts_with('{'))
}

/// JavaScript/Python truthiness of a JSON value, as the OpenAI SDKs test an in-stream `error`
/// key: not `null`, `false`, `0`, `""`, `{}` or `[]`.
pub(crate) fn truthy(raw: Option<&RawValue>) -> bool {
    let Some(raw) = raw else { return false };
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'{' | b'[') => !text[1..text.len() - 1].trim_ascii().is_empty(),
        Some(b'"') => text != "\"\"",
        Some(b'n' | b'f') => false,
        Some(b'-' | b'0'..=b'9') => {
            let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
            mantissa.bytes().any(|b| matches!(b, b'1'..=b'9'))
        }
        _ => true,
    }
}

/// A token count, read leniently so that an odd usage field never costs the event its class:
/// a non-negative integer (or a float, truncated) is a count; `null`, negatives, strings and
/// anything else are "not sent".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count(pub(crate) Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;

        impl<'de> Visitor<'de> for CountVisitor {
            type Value = Count;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a token count")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(v).ok()))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Count, E> {
                // A fractional count is truncated; the cast saturates.
                let count = (v.is_finite() && v >= 0.0).then_some(v as u64);
                Ok(Count(count))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_none<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Count(None))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Count, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Count(None))
            }
        }

        deserializer.deserialize_any(CountVisitor)
    }
}

/// A JSON string, borrowed from the input unless it holds escape sequences. (An
/// `Option<Cow<str>>` field would always allocate: serde borrows into a `Cow` only when the
/// `Cow` is the field's whole type.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonStr<'a>(std::borrow::Cow<'a, str>);

impl std::ops::Deref for JsonStr<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for JsonStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;

        impl<'de> Visitor<'de> for StrVisitor {
            type Value = JsonStr<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(std::borrow::Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(std::borrow::Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<JsonStr<'de>, E> {
                Ok(JsonStr(std::borrow::Cow::Owned(v)))
            }
        }

        deserializer.deserialize_str(StrVisitor)
    }
}

/// A JSON array read without allocating when it holds one element (the usual Gemini chunk has
/// one candidate with one part): the first element inline, any others in a `Vec`.
#[derive(Debug)]
pub(crate) struct Few<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<T> Few<T> {
    pub(crate) fn push(&mut self, item: T) {
        if self.first.is_none() {
            self.first = Some(item);
        } else {
            self.rest.push(item);
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(&self.rest)
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Few<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FewVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for FewVisitor<T> {
            type Value = Few<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Few<T>, A::Error> {
                let mut few = Few::default();
                while let Some(item) = seq.next_element()? {
                    few.push(item);
                }
                Ok(few)
            }
        }

        deserializer.deserialize_seq(FewVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthiness_follows_javascript_numbers_included() {
        let t = |s: &str| truthy(serde_json::from_str::<&RawValue>(s).ok());
        for yes in [
            r#"{"message":"x"}"#,
            "[0]",
            "\"x\"",
            "true",
            "1",
            "0.5",
            "-2",
            "1e5",
        ] {
            assert!(t(yes), "{yes}");
        }
        for no in [
            "{}", "{ }", "[]", "null", "false", "\"\"", "0", "-0", "0.0", "0e7",
        ] {
            assert!(!t(no), "{no}");
        }
        assert!(!truthy(None));
    }

    #[test]
    fn few_keeps_every_element_in_order() {
        let few: Few<u32> = serde_json::from_str("[3, 1, 2]").unwrap();
        assert_eq!(few.into_iter().collect::<Vec<_>>(), [3, 1, 2]);
        let one: Few<u32> = serde_json::from_str("[7]").unwrap();
        assert!(one.rest.capacity() == 0, "one element allocates nothing");
        assert_eq!(one.into_iter().collect::<Vec<_>>(), [7]);
        let none: Few<u32> = serde_json::from_str("[]").unwrap();
        assert_eq!(none.into_iter().count(), 0);
    }
}
