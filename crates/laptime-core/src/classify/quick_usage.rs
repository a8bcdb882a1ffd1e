//! The byte path's reader of the three dialects' usage objects (Chat, Responses, Messages):
//! the counts the serde shapes of [`crate::wire::usage`] hold, read in the reader's own pass.
//! A usage object is in every whole answer and in a stream's last events, and serde's derive
//! over its raw text was the largest single cost left in reading a whole answer.
//!
//! Each reader decides only the plain shape: every count `null` or an unsigned integer of
//! digits alone, each detail object `null` or an object of such counts, no field twice, no key
//! with an escape. Anything else (a negative or fractional count, a string, a detail of another
//! type, a duplicate) gives up, and the caller reads the object through serde as before
//! ([`Reader::lenient_or`], [`Reader::strict_or`]); so a usage either reader returns is the one
//! serde returns. Fields the shapes do not name are skipped, validated, as serde ignores them.

use super::bytes::{Once, Reader};
use crate::wire::usage::{
    CacheCreation, CacheDetails, ChatUsage, MessagesUsage, ReasoningDetails, ResponsesUsage,
    ThinkingDetails,
};
use crate::wire::Count;

/// A detail object: `null` is absent, an object is read by `read`.
fn detail<'a, T>(
    r: &mut Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>) -> Option<T>,
) -> Option<Option<T>> {
    if r.null()? {
        return Some(None);
    }
    read(r).map(Some)
}

/// An object whose fields named in `names` are read by `read` (given the name's index), each
/// at most once; other fields are skipped.
fn fields<'a, const N: usize>(
    r: &mut Reader<'a>,
    names: [&str; N],
    mut read: impl FnMut(&mut Reader<'a>, usize) -> Option<()>,
) -> Option<()> {
    let mut once = Once::default();
    r.object(|r, key| match names.iter().position(|name| *name == key) {
        Some(i) => {
            once.first(u8::try_from(i).ok()?)?;
            read(r, i)
        }
        None => r.skip(),
    })
}

/// An object of counts only, each in the slot of its name.
fn counts<const N: usize>(r: &mut Reader<'_>, names: [&str; N]) -> Option<[Count; N]> {
    let mut out = [Count::default(); N];
    fields(r, names, |r, i| {
        *out.get_mut(i)? = r.count()?;
        Some(())
    })?;
    Some(out)
}

/// `prompt_tokens_details` (Chat) and `input_tokens_details` (Responses).
fn cache_details(r: &mut Reader<'_>) -> Option<CacheDetails> {
    let [cached_tokens, cache_write_tokens] = counts(r, ["cached_tokens", "cache_write_tokens"])?;
    Some(CacheDetails {
        cached_tokens,
        cache_write_tokens,
    })
}

/// `completion_tokens_details` (Chat) and `output_tokens_details` (Responses).
fn reasoning_details(r: &mut Reader<'_>) -> Option<ReasoningDetails> {
    let [reasoning_tokens] = counts(r, ["reasoning_tokens"])?;
    Some(ReasoningDetails { reasoning_tokens })
}

pub(super) fn chat(r: &mut Reader<'_>) -> Option<ChatUsage> {
    let mut u = ChatUsage::default();
    let names = [
        "prompt_tokens",
        "completion_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
        "prompt_cache_hit_tokens",
    ];
    fields(r, names, |r, i| {
        match i {
            0 => u.prompt_tokens = r.count()?,
            1 => u.completion_tokens = r.count()?,
            2 => u.prompt_tokens_details = detail(r, cache_details)?,
            3 => u.completion_tokens_details = detail(r, reasoning_details)?,
            _ => u.prompt_cache_hit_tokens = r.count()?,
        }
        Some(())
    })?;
    Some(u)
}

pub(super) fn responses(r: &mut Reader<'_>) -> Option<ResponsesUsage> {
    let mut u = ResponsesUsage::default();
    let names = [
        "input_tokens",
        "output_tokens",
        "input_tokens_details",
        "output_tokens_details",
    ];
    fields(r, names, |r, i| {
        match i {
            0 => u.input_tokens = r.count()?,
            1 => u.output_tokens = r.count()?,
            2 => u.input_tokens_details = detail(r, cache_details)?,
            _ => u.output_tokens_details = detail(r, reasoning_details)?,
        }
        Some(())
    })?;
    Some(u)
}

pub(super) fn messages(r: &mut Reader<'_>) -> Option<MessagesUsage> {
    let mut u = MessagesUsage::default();
    let names = [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
        "output_tokens_details",
        "cache_creation",
    ];
    fields(r, names, |r, i| {
        match i {
            0 => u.input_tokens = r.count()?,
            1 => u.cache_read_input_tokens = r.count()?,
            2 => u.cache_creation_input_tokens = r.count()?,
            3 => u.output_tokens = r.count()?,
            4 => {
                u.output_tokens_details = detail(r, |r| {
                    let [thinking_tokens] = counts(r, ["thinking_tokens"])?;
                    Some(ThinkingDetails { thinking_tokens })
                })?;
            }
            _ => {
                u.cache_creation = detail(r, |r| {
                    let [ephemeral_1h_input_tokens] = counts(r, ["ephemeral_1h_input_tokens"])?;
                    Some(CacheCreation {
                        ephemeral_1h_input_tokens,
                    })
                })?;
            }
        }
        Some(())
    })?;
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `read` makes of `text` as a field's value, if it decides.
    fn quick<T>(text: &str, read: fn(&mut Reader<'_>) -> Option<T>) -> Option<T> {
        let doc = format!("{{\"u\":{text}}}");
        let mut out = None;
        Reader::document(&doc, |r, _| {
            out = Some(read(r)?);
            Some(())
        })?;
        out
    }

    /// Whether `read` decides `text`; when it does, it must be what serde reads.
    fn agrees<T>(text: &str, read: fn(&mut Reader<'_>) -> Option<T>) -> bool
    where
        T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let Some(q) = quick(text, read) else {
            return false;
        };
        assert_eq!(Some(q), serde_json::from_str::<T>(text).ok(), "{text}");
        true
    }

    fn all_agree(text: &str) -> [bool; 3] {
        [
            agrees(text, chat),
            agrees(text, responses),
            agrees(text, messages),
        ]
    }

    #[test]
    fn plain_usage_objects_are_read_as_serde_reads_them() {
        let plain = [
            r#"{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":2,"accepted_prediction_tokens":0}}"#,
            r#"{"prompt_tokens":9,"completion_tokens":null,"prompt_cache_hit_tokens":5,"prompt_cache_miss_tokens":4}"#,
            r#"{"input_tokens":5,"input_tokens_details":{"cached_tokens":1,"cache_write_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":12}"#,
            r#"{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":20},"output_tokens":5,"output_tokens_details":{"thinking_tokens":2},"service_tier":"standard"}"#,
            r#" { "input_tokens" : 18446744073709551615 , "output_tokens_details" : null } "#,
            "{}",
        ];
        for text in plain {
            assert_eq!(all_agree(text), [true; 3], "{text}");
        }
    }

    #[test]
    fn what_serde_decides_otherwise_is_left_to_serde() {
        let odd = [
            r#"{"prompt_tokens":-1,"input_tokens":-1}"#,
            r#"{"completion_tokens":3.0,"output_tokens":3.0}"#,
            r#"{"prompt_tokens":1e2,"input_tokens":1e2}"#,
            r#"{"prompt_tokens":"9","input_tokens":"9"}"#,
            r#"{"prompt_tokens":true,"input_tokens":[]}"#,
            r#"{"prompt_tokens":18446744073709551616,"input_tokens":99999999999999999999}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":2,"input_tokens":1,"input_tokens":2}"#,
            r#"{"prompt_tokens_details":"x","input_tokens_details":5,"cache_creation":[]}"#,
            r#"{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1},"output_tokens_details":{"reasoning_tokens":-2,"thinking_tokens":0.5}}"#,
            r#"{"prompt_\u0074okens":1,"input_\u0074okens":1}"#,
            r#"{"input_tokens":01}"#,
            "null",
            "7",
        ];
        for text in odd {
            assert_eq!(all_agree(text), [false; 3], "{text}");
        }
    }

    /// Usage objects built from every dialect's field names and odd values alike: each one a
    /// reader decides is read as serde reads it, and the readers decide a good part of them.
    #[test]
    fn generated_usage_objects_are_read_as_serde_reads_them_or_left_to_it() {
        const KEYS: [&str; 16] = [
            "prompt_tokens",
            "completion_tokens",
            "prompt_cache_hit_tokens",
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
            "total_tokens",
            "prompt_tokens_details",
            "completion_tokens_details",
            "input_tokens_details",
            "output_tokens_details",
            "cache_creation",
            "cached_tokens",
            "reasoning_tokens",
            "ephemeral_1h_input_tokens",
        ];
        const VALUES: [&str; 14] = [
            "0",
            "7",
            "123456",
            "null",
            "18446744073709551615",
            "18446744073709551616",
            "-3",
            "2.5",
            "4e1",
            "\"5\"",
            "false",
            "[1]",
            "{}",
            "DETAIL",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut decided = [0usize; 3];
        let rounds = 6000;
        for _ in 0..rounds {
            let object = |next: &mut dyn FnMut(usize) -> usize| {
                let parts: Vec<String> = (0..next(5))
                    .map(|_| {
                        // Mostly plain counts, so that the plain shape comes up often.
                        let value = match next(3) {
                            0 => VALUES[next(VALUES.len())],
                            _ => VALUES[next(3)],
                        };
                        format!("\"{}\":{value}", KEYS[next(KEYS.len())])
                    })
                    .collect();
                format!("{{{}}}", parts.join(","))
            };
            let inner = object(&mut next).replace("DETAIL", "{}");
            let text = object(&mut next).replace("DETAIL", &inner);
            for (i, seen) in all_agree(&text).into_iter().enumerate() {
                decided[i] += usize::from(seen);
            }
        }
        for (i, n) in decided.into_iter().enumerate() {
            eprintln!("reader {i}: {n} of {rounds} decided");
            assert!(n * 4 > rounds, "reader {i} decided only {n} of {rounds}");
        }
    }
}
