//! A tiny JSON value that keeps object keys in the order they were written.
//!
//! The providers put `type`, `id` and `object` first and clients that sniff prefixes (or humans
//! diffing captures) see that order. `serde_json::Value` sorts keys unless its `preserve_order`
//! feature is on, which this workspace does not enable, so the wire shapes are built from this
//! type instead. Encoding is infallible (no `Result` to unwrap on the hot path) and escapes exactly
//! what `serde_json` escapes, so the bytes match what the real servers send.

/// An ordered JSON value. Built with the [`obj!`] and [`arr!`] macros.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum J {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(&'static str, J)>),
    /// JSON text written as it is: a value already encoded elsewhere (a stored object, a
    /// request's own items, an `f32` in its shortest form). The caller vouches that it is valid.
    Raw(String),
}

/// `obj!{"key": value, ...}` builds a [`J::Obj`] in the written order; values go through `J::from`.
macro_rules! obj {
    ($($k:literal : $v:expr),* $(,)?) => {
        $crate::json::J::Obj(vec![$(($k, $crate::json::J::from($v))),*])
    };
}

/// `arr![a, b]` builds a [`J::Arr`]; values go through `J::from`.
macro_rules! arr {
    ($($v:expr),* $(,)?) => {
        $crate::json::J::Arr(vec![$($crate::json::J::from($v)),*])
    };
}

pub(crate) use {arr, obj};

impl J {
    /// Compact JSON text, as the providers send it (no spaces).
    pub(crate) fn encode(&self) -> String {
        let mut out = String::with_capacity(128);
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Int(n) => out.push_str(&n.to_string()),
            // Non-finite numbers have no JSON form; serde_json writes them as null too.
            J::Float(f) if !f.is_finite() => out.push_str("null"),
            J::Float(f) => out.push_str(&f.to_string()),
            J::Str(s) => write_str(s, out),
            J::Raw(text) => out.push_str(text),
            J::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            J::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(k, out);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }

    /// Google's JSON as the generativelanguage API streams it: `"key": value` with a space
    /// after each colon and none after commas.
    pub(crate) fn encode_spaced(&self) -> String {
        let mut out = String::with_capacity(160);
        self.write_google(&mut out, None);
        out
    }

    /// Google's whole (non-streamed) JSON answers: pretty-printed, two spaces per level.
    pub(crate) fn encode_pretty(&self) -> String {
        let mut out = String::with_capacity(256);
        self.write_google(&mut out, Some(0));
        out
    }

    /// `depth`: `None` for one line, else the indentation level of this value.
    fn write_google(&self, out: &mut String, depth: Option<usize>) {
        let newline = |out: &mut String, level: usize| {
            out.push('\n');
            out.push_str(&"  ".repeat(level));
        };
        match self {
            J::Arr(items) if !items.is_empty() => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if let Some(d) = depth {
                        newline(out, d + 1);
                    }
                    item.write_google(out, depth.map(|d| d + 1));
                }
                if let Some(d) = depth {
                    newline(out, d);
                }
                out.push(']');
            }
            J::Obj(fields) if !fields.is_empty() => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if let Some(d) = depth {
                        newline(out, d + 1);
                    }
                    write_str(k, out);
                    out.push_str(": ");
                    v.write_google(out, depth.map(|d| d + 1));
                }
                if let Some(d) = depth {
                    newline(out, d);
                }
                out.push('}');
            }
            other => other.write(out),
        }
    }

    /// Appends a field to an object (no-op on other values); used for fields that only some
    /// variants of an event carry.
    pub(crate) fn with(mut self, key: &'static str, value: impl Into<J>) -> J {
        if let J::Obj(fields) = &mut self {
            fields.push((key, value.into()));
        }
        self
    }

    /// Replaces a field of an object, or appends it if absent (no-op on other values).
    pub(crate) fn set(mut self, key: &'static str, value: impl Into<J>) -> J {
        if let J::Obj(fields) = &mut self {
            let value = value.into();
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => *v = value,
                None => fields.push((key, value)),
            }
        }
        self
    }
}

/// A JSON string literal with serde_json's escaping: `"`, `\`, and control characters.
fn write_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_owned())
    }
}
impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}
impl From<&String> for J {
    fn from(s: &String) -> J {
        J::Str(s.clone())
    }
}
impl From<bool> for J {
    fn from(b: bool) -> J {
        J::Bool(b)
    }
}
impl From<u32> for J {
    fn from(n: u32) -> J {
        J::Int(i64::from(n))
    }
}
impl From<u64> for J {
    fn from(n: u64) -> J {
        J::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}
impl From<usize> for J {
    fn from(n: usize) -> J {
        J::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}
impl From<u16> for J {
    fn from(n: u16) -> J {
        J::Int(i64::from(n))
    }
}
impl From<i64> for J {
    fn from(n: i64) -> J {
        J::Int(n)
    }
}
impl From<f64> for J {
    fn from(f: f64) -> J {
        J::Float(f)
    }
}
impl From<Vec<J>> for J {
    fn from(items: Vec<J>) -> J {
        J::Arr(items)
    }
}
impl From<f32> for J {
    /// The shortest text that reads back as the same `f32` (as OpenAI writes embeddings);
    /// widening to `f64` first would print the binary expansion's noise.
    fn from(f: f32) -> J {
        if f.is_finite() {
            J::Raw(f.to_string())
        } else {
            J::Null
        }
    }
}
impl<T: Into<J>> From<Option<T>> for J {
    fn from(v: Option<T>) -> J {
        v.map_or(J::Null, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_keep_their_written_key_order() {
        let v = obj! {"type": "b", "a": 1u32, "list": arr![true, J::Null]};
        assert_eq!(v.encode(), r#"{"type":"b","a":1,"list":[true,null]}"#);
    }

    #[test]
    fn strings_are_escaped_like_serde_json() {
        let s = "quote\" back\\ nl\n tab\t bell\u{7} é /";
        assert_eq!(J::from(s).encode(), serde_json::to_string(s).unwrap());
    }

    #[test]
    fn raw_text_and_f32s_are_written_as_they_are() {
        let v = obj! {"o": J::Raw(r#"{"z":1,"a":[2]}"#.to_owned()), "f": 0.1f32, "n": f32::NAN};
        assert_eq!(v.encode(), r#"{"o":{"z":1,"a":[2]},"f":0.1,"n":null}"#);
        assert_eq!(arr![0.1f32].encode_pretty(), "[\n  0.1\n]");
    }

    #[test]
    fn with_appends_to_objects_only() {
        assert_eq!(
            obj! {"a": 1u32}.with("b", 2u32).encode(),
            r#"{"a":1,"b":2}"#
        );
        assert_eq!(J::Null.with("b", 2u32), J::Null);
        assert_eq!(
            obj! {"a": 1u32, "b": 2u32}.set("a", 3u32).encode(),
            r#"{"a":3,"b":2}"#
        );
    }

    #[test]
    fn googles_spaced_and_pretty_forms_parse_back_to_the_same_value() {
        let v = obj! {"candidates": arr![obj! {"content": obj! {"parts": arr![obj! {"text": "Hi"}]}, "index": 0u32}], "empty": arr![], "none": obj! {}};
        assert_eq!(
            v.encode_spaced(),
            r#"{"candidates": [{"content": {"parts": [{"text": "Hi"}]},"index": 0}],"empty": [],"none": {}}"#
        );
        assert_eq!(
            obj! {"error": obj! {"code": 429u32, "status": "RESOURCE_EXHAUSTED"}}.encode_pretty(),
            "{\n  \"error\": {\n    \"code\": 429,\n    \"status\": \"RESOURCE_EXHAUSTED\"\n  }\n}"
        );
        let back = |s: String| serde_json::from_str::<serde_json::Value>(&s).unwrap();
        assert_eq!(back(v.encode_pretty()), back(v.encode()));
        assert_eq!(back(v.encode_spaced()), back(v.encode()));
    }
}
