//! JSON helpers shared by the decoders (string values kept escaped as [`JsonText`]; the lenient
//! counts and usage shapes are [`crate::wire`]'s) and the encoders (writing literals, numbers
//! and SSE frames into a reused buffer).

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};
use serde_json::value::RawValue;

use super::hub::JsonText;

// === decoding ===

/// The text of a JSON value that is a string, escapes kept; `None` for any other value.
pub(super) fn text(raw: Option<&RawValue>) -> Option<JsonText<'_>> {
    let s = raw?.get();
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    Some(JsonText::escaped(inner))
}

/// The text of a JSON string value when it is non-empty (an empty delta is not output).
pub(super) fn nonempty(raw: Option<&RawValue>) -> Option<JsonText<'_>> {
    text(raw).filter(|t| !t.is_empty())
}

/// A discriminator or code: borrowed unless it holds escapes (then unescaped).
pub(super) fn plain(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    let t = text(raw)?;
    if t.raw().contains('\\') {
        t.unescape().map(Cow::Owned)
    } else {
        Some(t.into_cow())
    }
}

/// A JSON value written out as a string literal's inside (a tool input object becomes the
/// arguments text OpenAI carries).
pub(super) fn value_as_text(raw: &RawValue) -> JsonText<'static> {
    JsonText::from_plain(raw.get())
}

// === encoding ===

/// Escaped arguments text → the JSON object it spells; no arguments are `{}`.
pub(super) fn tool_input(escaped: &str) -> Option<String> {
    if escaped.trim_ascii().is_empty() {
        return Some("{}".to_owned());
    }
    let args = JsonText::escaped(escaped).unescape()?;
    let value = serde_json::from_str::<&serde_json::value::RawValue>(&args).ok()?;
    value.get().starts_with('{').then(|| value.get().to_owned())
}

/// Appends `text` escaped as the inside of a JSON string literal.
pub(crate) fn escape_into(out: &mut String, text: &str) {
    let mut from = 0;
    for (i, b) in text.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[from..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push_str(esc);
        }
        from = i + 1;
    }
    out.push_str(&text[from..]);
}

/// Writes JSON into a reused buffer.
pub(crate) trait JsonOut {
    fn raw(&mut self, s: &str);
    /// A string literal from escaped text.
    fn lit(&mut self, t: &str) {
        self.raw("\"");
        self.raw(t);
        self.raw("\"");
    }
    fn num(&mut self, n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut n = n;
        loop {
            i -= 1;
            // n % 10 < 10, so the cast keeps the digit.
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        // Only ASCII digits were written.
        self.raw(std::str::from_utf8(&digits[i..]).unwrap_or("0"));
    }
}

impl JsonOut for BytesMut {
    fn raw(&mut self, s: &str) {
        self.put_slice(s.as_bytes());
    }
}

impl JsonOut for String {
    fn raw(&mut self, s: &str) {
        self.push_str(s);
    }
}

/// Opens an SSE event: `event: <name>\n` when named, then `data: `.
pub(super) fn sse_open(buf: &mut BytesMut, event: Option<&str>) {
    if let Some(name) = event {
        buf.raw("event: ");
        buf.raw(name);
        buf.raw("\n");
    }
    buf.raw("data: ");
}

/// Ends an SSE event.
pub(super) fn sse_close(buf: &mut BytesMut) {
    buf.raw("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_text_parses_back_to_the_original() {
        let original = "a \"quote\", a \\ backslash,\n a tab\t, a bell \u{7}, é and 🦀";
        let t = JsonText::from_plain(original);
        assert_eq!(t.unescape().as_deref(), Some(original));
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        let mut s = String::new();
        for n in [0, 7, 10, 12345, u64::MAX] {
            s.clear();
            s.num(n);
            assert_eq!(s, n.to_string());
        }
    }
}
