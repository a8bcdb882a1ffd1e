//! The sim's one token-counting rule, for the endpoints that count input a script does not
//! (embeddings, moderations' and images' usage, token counts for unscripted models), and for a
//! model call whose script does not pin its input: the whole request body, as sent.
//!
//! A token is four bytes of UTF-8 text, rounded up: `⌈len / 4⌉` per string, so any non-empty
//! string is at least one token. It is a stand-in for a tokenizer (real ones average about four
//! characters of English per token), chosen because a test can compute it by hand. A request
//! that sends token ids instead of text counts one token per id.

use serde_json::Value;

/// The tokens of one string.
pub(crate) fn of_text(text: &str) -> u64 {
    u64::try_from(text.len().div_ceil(4)).unwrap_or(u64::MAX)
}

/// The input tokens of a request body the script does not count: a token per four bytes of the
/// body as sent, rounded up, at least one (a request is never free).
pub(crate) fn of_body(len: usize) -> u32 {
    u32::try_from(len.div_ceil(4).max(1)).unwrap_or(u32::MAX)
}

/// The tokens of every string value anywhere in `value`: keys cost nothing, but every string
/// value does, a role's or a type's name too (`"user"` is one token), so a test can count by
/// hand without knowing which fields are text.
pub(crate) fn of_strings(value: &Value) -> u64 {
    match value {
        Value::String(s) => of_text(s),
        Value::Array(items) => items.iter().map(of_strings).fold(0, u64::saturating_add),
        Value::Object(fields) => fields.values().map(of_strings).fold(0, u64::saturating_add),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_token_is_four_bytes_rounded_up() {
        assert_eq!(of_text(""), 0);
        assert_eq!(of_text("a"), 1);
        assert_eq!(of_text("abcd"), 1);
        assert_eq!(of_text("abcde"), 2);
        // Bytes, not characters: "é" is two bytes.
        assert_eq!(of_text("éé"), 1);
        assert_eq!(of_text("ééé"), 2);
    }

    #[test]
    fn a_body_is_a_token_per_four_bytes_and_at_least_one() {
        assert_eq!(of_body(0), 1);
        assert_eq!(of_body(1), 1);
        assert_eq!(of_body(4), 1);
        assert_eq!(of_body(5), 2);
        assert_eq!(of_body(401), 101);
    }

    #[test]
    fn every_string_of_a_body_counts_and_nothing_else_does() {
        let body = json!({"model": "abcdefgh", "messages": [{"role": "user", "content": "hello"}],
                          "max_tokens": 12345, "stream": true});
        // "abcdefgh" 2, "user" 1, "hello" 2.
        assert_eq!(of_strings(&body), 5);
    }
}
