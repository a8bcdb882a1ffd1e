//! The byte path's reader: one validating pass over an event's (or a whole answer's) JSON,
//! without serde, that hands a classifier only the values it reads (as their raw text, what a
//! serde `RawValue` holds) and skips the rest.
//!
//! It accepts a strict subset of what `serde_json` accepts, and it gives up (`None`) on anything
//! it would not decide exactly as the full parse does: JSON that is invalid or that it does not
//! read (a key holding an escape, which could spell a field name; a `\u` escape of a surrogate;
//! nesting deeper than [`MAX_DEPTH`]), and, in the classifiers that use it, a duplicate field or
//! a field of an unusual shape. The event is then parsed in full, so an event the byte path
//! decides is one the full parse decides the same way (`observe.rs`' differential tests check
//! this event by event).

/// Deeper nesting is left to the full parse (serde_json's own limit is 128).
const MAX_DEPTH: u8 = 32;

/// A cursor over one event's JSON text.
pub(super) struct Reader<'a> {
    text: &'a str,
    at: usize,
    depth: u8,
    /// Where the key of the field being read starts.
    key_at: usize,
}

/// Fields of one object already read, to give up on a duplicate (serde rejects a struct field
/// that comes twice).
#[derive(Default)]
pub(super) struct Once(u16);

impl Once {
    /// Marks field `bit` read; `None` if it was read before.
    pub(super) fn first(&mut self, bit: u8) -> Option<()> {
        let mask = 1u16 << bit;
        if self.0 & mask != 0 {
            return None;
        }
        self.0 |= mask;
        Some(())
    }
}

impl<'a> Reader<'a> {
    /// Reads `text` as one object whose fields `on_field` reads (each must read its value
    /// whole), followed by nothing but whitespace.
    pub(super) fn document(
        text: &'a str,
        on_field: impl FnMut(&mut Reader<'a>, &'a str) -> Option<()>,
    ) -> Option<()> {
        let mut r = Reader {
            text,
            at: 0,
            depth: 0,
            key_at: 0,
        };
        r.object(on_field)?;
        r.skip_ws();
        (r.at == text.len()).then_some(())
    }

    /// [`Reader::document`] from `at`, where a top-level field's key starts: for a `text` whose
    /// bytes before `at` are those of a document read before up to one of its keys. JSON is
    /// read from its start, so the same bytes are the same fields in the same state (read,
    /// valid); only the rest needs reading.
    pub(super) fn document_from(
        text: &'a str,
        at: usize,
        on_field: impl FnMut(&mut Reader<'a>, &'a str) -> Option<()>,
    ) -> Option<()> {
        let mut r = Reader {
            text,
            at,
            depth: 1,
            key_at: at,
        };
        r.fields(on_field)?;
        r.skip_ws();
        (r.at == text.len()).then_some(())
    }

    /// Where the key of the field `on_field` is reading starts (in the object read last).
    pub(super) fn key_at(&self) -> usize {
        self.key_at
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace (not consumed).
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes().get(self.at).copied()
    }

    fn enter(&mut self) -> Option<()> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        self.at += 1;
        Some(())
    }

    /// An object; `on_field` reads each field's value (keys holding an escape give up).
    pub(super) fn object(
        &mut self,
        on_field: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        if self.peek()? != b'{' {
            return None;
        }
        self.enter()?;
        if self.peek()? == b'}' {
            self.at += 1;
            self.depth -= 1;
            return Some(());
        }
        self.fields(on_field)
    }

    /// An object's fields from the first key on, through its closing brace.
    fn fields(&mut self, mut on_field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            self.key_at = self.at;
            let (raw, escaped) = self.string()?;
            if escaped {
                return None;
            }
            let key = raw.get(1..raw.len() - 1)?;
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            on_field(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array; `on_item` reads each element.
    pub(super) fn array(&mut self, mut on_item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        if self.peek()? != b'[' {
            return None;
        }
        self.enter()?;
        if self.peek()? == b']' {
            self.at += 1;
            self.depth -= 1;
            return Some(());
        }
        loop {
            on_item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    self.depth -= 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Reads `null` if that is the next value: whether it was (serde reads an `Option` field
    /// holding `null` as absent).
    pub(super) fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal("null")?;
            return Some(true);
        }
        Some(false)
    }

    /// A `JsonStr` field: `null` is absent, a string without escapes is its text; anything else
    /// (an escape, another type) is left to the full parse.
    pub(super) fn plain_str(&mut self) -> Option<Option<&'a str>> {
        if self.null()? {
            return Some(None);
        }
        let (raw, escaped) = self.string_value()?;
        if escaped {
            return None;
        }
        Some(Some(raw.get(1..raw.len() - 1)?))
    }

    /// One `{"type": …, "text": …}` object (an Anthropic content block, a Responses content
    /// part), other fields skipped: whether its type is `kind` and its text a non-empty string.
    pub(super) fn text_of_kind(&mut self, kind: &str) -> Option<bool> {
        let mut fields = Once::default();
        let (mut is_kind, mut text) = (false, false);
        self.object(|r, key| match key {
            "type" => {
                fields.first(0)?;
                is_kind = r.plain_str()? == Some(kind);
                Some(())
            }
            "text" => {
                fields.first(1)?;
                text = nonempty(r.raw()?);
                Some(())
            }
            _ => r.skip(),
        })?;
        Some(is_kind && text)
    }

    /// A value `quick` reads whole if it can (a usage object of the plain shape, see
    /// [`super::quick_usage`]), or else serde's `T` of it, as the full parse reads a whole
    /// answer's usage: `Some(None)` when it is `null` or of another shape (no usage, not a
    /// failed body), `None` when the reader gives up.
    pub(super) fn lenient_or<T: serde::de::DeserializeOwned>(
        &mut self,
        quick: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        if let Some(v) = self.attempt(quick) {
            return Some(Some(v));
        }
        Some(self.raw()?.and_then(|raw| serde_json::from_str(raw).ok()))
    }

    /// An object `quick` reads whole if it can, or else serde's `T` of it: `None` (give up)
    /// when it is not an object or serde cannot read it, as the event path reads a usage.
    pub(super) fn strict_or<T: serde::de::DeserializeOwned>(
        &mut self,
        quick: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<T> {
        if let Some(v) = self.attempt(quick) {
            return Some(v);
        }
        let raw = self.raw()?.filter(|raw| raw.starts_with('{'))?;
        serde_json::from_str(raw).ok()
    }

    /// `read` on a copy of the cursor, which moves on only if `read` decides.
    fn attempt<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        let mut probe = Reader {
            text: self.text,
            at: self.at,
            depth: self.depth,
            key_at: self.key_at,
        };
        let v = read(&mut probe)?;
        *self = probe;
        Some(v)
    }

    /// A token count where [`crate::wire::Count`] reads it plainly: `null` (not sent) or an
    /// integer of digits alone that fits a `u64`. `None` (give up) for a sign, a fraction, an
    /// exponent, a larger number or another type, which the caller leaves to serde.
    pub(super) fn count(&mut self) -> Option<crate::wire::Count> {
        if self.null()? {
            return Some(crate::wire::Count(None));
        }
        let start = self.at;
        if !self.bytes().get(start)?.is_ascii_digit() {
            return None;
        }
        self.number()?;
        let digits = self.text.get(start..self.at)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Past `u64::MAX` serde reads a float (saturated by `Count`): the parse fails, and
        // the caller leaves it to serde.
        digits.parse().ok().map(|n| crate::wire::Count(Some(n)))
    }

    /// Whether the value (validated) is an object, as [`crate::wire::is_object`] reads serde's
    /// raw value of an `Option` field (`null` is absent).
    pub(super) fn is_object(&mut self) -> Option<bool> {
        Some(self.raw()?.is_some_and(|raw| raw.starts_with('{')))
    }

    /// Any value, validated: its raw text, or `None` when it is `null` (as serde reads an
    /// `Option<&RawValue>`).
    pub(super) fn raw(&mut self) -> Option<Option<&'a str>> {
        let raw = self.value()?;
        Some((raw != "null").then_some(raw))
    }

    /// Skips any value, validated.
    pub(super) fn skip(&mut self) -> Option<()> {
        self.value().map(drop)
    }

    /// `text` as exactly one JSON string token (quotes included) and whether it holds an
    /// escape; `None` when it is anything else, or a string [`Reader::string`] gives up on.
    pub(super) fn whole_string(text: &'a str) -> Option<(&'a str, bool)> {
        if !text.starts_with('"') {
            return None;
        }
        let mut r = Reader {
            text,
            at: 0,
            depth: 0,
            key_at: 0,
        };
        let read = r.string()?;
        (r.at == text.len()).then_some(read)
    }

    /// A string value's raw text (quotes and escapes included) and whether it holds an escape;
    /// `None` when the value is not a string.
    pub(super) fn string_value(&mut self) -> Option<(&'a str, bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        self.string()
    }

    /// Any value, validated: its raw text.
    fn value(&mut self) -> Option<&'a str> {
        let first = self.peek()?;
        let start = self.at;
        match first {
            b'"' => self.string().map(drop)?,
            b'{' => self.object(|r, _| r.skip())?,
            b'[' => self.array(Self::skip)?,
            b't' => self.literal("true")?,
            b'f' => self.literal("false")?,
            b'n' => self.literal("null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        self.text.get(start..self.at)
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        if self.bytes().get(self.at..end)? != word.as_bytes() {
            return None;
        }
        self.at = end;
        Some(())
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, as serde_json reads it.
    fn number(&mut self) -> Option<()> {
        let b = self.bytes();
        if b.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match b.get(self.at)? {
            b'0' => {
                self.at += 1;
                if b.get(self.at).is_some_and(u8::is_ascii_digit) {
                    return None;
                }
            }
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if b.get(self.at) == Some(&b'.') {
            self.at += 1;
            if !b.get(self.at).is_some_and(u8::is_ascii_digit) {
                return None;
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = b.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = b.get(self.at) {
                self.at += 1;
            }
            if !b.get(self.at).is_some_and(u8::is_ascii_digit) {
                return None;
            }
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.bytes().get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    /// The string at the cursor (on its opening quote): its raw text and whether it holds an
    /// escape. Control characters, unknown escapes and surrogate `\u` escapes give up.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let b = self.bytes();
        let start = self.at;
        self.at += 1;
        let mut escaped = false;
        loop {
            // Eight bytes at a time while none of them ends the run; the byte loop finds which
            // one does. Strings here are short (ids, names, a token of text), too short for a
            // vectorised search to pay for setting it up.
            while let Some(word) = b.get(self.at..self.at + 8).and_then(word_of) {
                if !plain(word) {
                    break;
                }
                self.at += 8;
            }
            while b
                .get(self.at)
                .is_some_and(|&c| c != b'"' && c != b'\\' && c >= 0x20)
            {
                self.at += 1;
            }
            match b.get(self.at)? {
                b'"' | b'\\' => {}
                _ => return None,
            }
            if b.get(self.at) == Some(&b'"') {
                self.at += 1;
                return Some((self.text.get(start..self.at)?, escaped));
            }
            escaped = true;
            match b.get(self.at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
                b'u' => {
                    let hex = std::str::from_utf8(b.get(self.at + 2..self.at + 6)?).ok()?;
                    if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                        return None;
                    }
                    let unit = u16::from_str_radix(hex, 16).ok()?;
                    if (0xD800..0xE000).contains(&unit) {
                        return None;
                    }
                    self.at += 6;
                }
                _ => return None,
            }
        }
    }
}

/// Eight bytes as one word (`None` unless `bytes` holds exactly eight).
fn word_of(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// Whether none of a word's eight bytes ends a string's plain run: a quote, a backslash or a
/// control character. `x - 0x01…01 & !x & 0x80…80` is non-zero exactly when some byte of `x`
/// is zero (a borrow can only mark bytes above a zero one), so each test is exact for "any".
fn plain(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    // A byte below 0x20 borrows from its own top bit; bytes of 0x80 and up have it set in
    // `word`, so `!word` clears them.
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    (zero_in(quote) | zero_in(backslash) | control) == 0
}

/// Whether a raw JSON value is a non-empty string (as [`crate::wire::nonempty_str`]).
pub(super) fn nonempty(raw: Option<&str>) -> bool {
    raw.is_some_and(|text| text.starts_with('"') && text != "\"\"")
}

/// A string value's text without its quotes, unescaped (borrowed unless it held escapes).
pub(crate) fn unquote(raw: &str, escaped: bool) -> Option<std::borrow::Cow<'_, str>> {
    if escaped {
        serde_json::from_str::<String>(raw)
            .ok()
            .map(std::borrow::Cow::Owned)
    } else {
        raw.get(1..raw.len().checked_sub(1)?)
            .map(std::borrow::Cow::Borrowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word is plain exactly when none of its bytes is a quote, a backslash or a control
    /// character: every byte value at every position, and every pair of values at two
    /// positions (a borrow from a lower byte must not hide or invent one above it).
    #[test]
    fn a_word_is_plain_exactly_when_no_byte_ends_the_run() {
        let ends = |c: u8| c == b'"' || c == b'\\' || c < 0x20;
        for at in 0..8 {
            for c in 0..=255u8 {
                let mut w = [b'a'; 8];
                w[at] = c;
                assert_eq!(
                    plain(u64::from_le_bytes(w)),
                    !ends(c),
                    "byte {c:#x} at {at}"
                );
            }
        }
        for (lo, hi) in [(0, 1), (2, 3), (6, 7), (0, 7)] {
            for a in 0..=255u8 {
                for c in 0..=255u8 {
                    let mut w = [b'a'; 8];
                    w[lo] = a;
                    w[hi] = c;
                    let want = !ends(a) && !ends(c);
                    assert_eq!(plain(u64::from_le_bytes(w)), want, "{a:#x}, {c:#x}");
                }
            }
        }
    }

    /// Whether the reader accepts `text` as an object, skipping every field.
    fn accepts(text: &str) -> bool {
        Reader::document(text, |r, _| r.skip()).is_some()
    }

    #[test]
    fn accepts_only_what_serde_json_accepts() {
        let valid = [
            r#"{}"#,
            r#" { "a" : [1, -0, 0.5, -1.25e+10, 3E-2, true, false, null, {"b": []}], "c": "x\"\\\/\b\f\n\r\t\u00e9" } "#,
            r#"{"a":"é — \u4e2d"}"#,
        ];
        for text in valid {
            assert!(accepts(text), "{text}");
            assert!(serde_json::from_str::<serde_json::Value>(text).is_ok());
        }
        let invalid = [
            "",
            "{",
            "{\"a\"}",
            "{\"a\":}",
            "{\"a\":1,}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":-}",
            "{\"a\":1e}",
            "{\"a\":.5}",
            "{\"a\":tru}",
            "{\"a\":nul}",
            "{\"a\":\"x}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":\"tab\there\"}",
            "{\"a\":[1 2]}",
            "{\"a\":1} x",
            "{\"a\":1}}",
            "[1]",
            "\"x\"",
            "{'a':1}",
            "{\"a\":+1}",
            "{\"a\":NaN}",
        ];
        for text in invalid {
            assert!(!accepts(text), "{text:?}");
        }
        // Valid, but left to the full parse: a lone or paired surrogate escape, an escaped key,
        // nesting past the limit.
        for text in [
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"\u0061":1}"#,
            &format!("{{\"a\":{}{}}}", "[".repeat(40), "]".repeat(40)),
        ] {
            assert!(serde_json::from_str::<serde_json::Value>(text).is_ok());
            assert!(!accepts(text), "{text}");
        }
    }

    #[test]
    fn raw_values_are_the_text_serde_keeps() {
        let text = r#"{"a": "x\ny" , "b":{"c" : [1, 2]} ,"n":null}"#;
        let mut got = Vec::new();
        Reader::document(text, |r, key| {
            got.push((key, r.raw()?));
            Some(())
        })
        .unwrap();
        #[derive(serde::Deserialize)]
        struct Want<'a> {
            #[serde(borrow)]
            a: &'a serde_json::value::RawValue,
            #[serde(borrow)]
            b: &'a serde_json::value::RawValue,
        }
        let want: Want<'_> = serde_json::from_str(text).unwrap();
        assert_eq!(
            got,
            [
                ("a", Some(want.a.get())),
                ("b", Some(want.b.get())),
                ("n", None)
            ]
        );
        assert_eq!(unquote(r#""x\ny""#, true).as_deref(), Some("x\ny"));
        assert_eq!(unquote(r#""xy""#, false).as_deref(), Some("xy"));
    }
}
