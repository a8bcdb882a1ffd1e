//! Chat chunks that repeat the one before but for their text, read without walking them.
//!
//! Consecutive text chunks of one Chat stream are byte for byte the same but for the text: the
//! same id, `created`, model, fingerprint, choice index and nulls around one string. The byte
//! path walks every byte of each (about 0.9 µs for a 240-byte chunk, the largest part of what
//! observing a fast stream cost the gateway: benchmarks/README.md, item 15). A [`Repeat`]
//! keeps the last chunk the byte path read that has one output string, cut around that
//! string. A chunk that starts and ends with the same bytes and holds exactly one valid JSON
//! string between them is the same document with another string in that one place (JSON's
//! grammar does not look inside a string), so it reads the same: the class depends on that
//! string only through whether it is empty (`bytes::nonempty`, for every output field), and the
//! string is what the estimate counts. Anything else (another shape, an empty string, a string
//! the byte path would give up on) is read as before.
//!
//! The chunks the template cannot read (the role chunk that opens a stream, the one that
//! carries the finish reason, a usage chunk) still share the envelope before `choices` (id,
//! `created`, model, fingerprint): [`Repeats`] keeps those bytes of the first chunk walked, and
//! a chunk that starts with them is walked from its `choices` key on
//! ([`super::chat::quick_from`]). Of the sim's 230-byte chunks, 170 bytes are envelope; the
//! `observe_20` Chat stream of `benches/scan_classify.rs` took 7 % less time. Most of a walk's
//! cost is the choice it reads, so a gateway's profile barely moves (benchmarks/README.md,
//! item 22).

use super::bytes::Reader;
use super::{Classification, QuickRead, Texts};

/// Templates learned in a row without one being used, after which a stream stops learning: a
/// provider whose chunks differ in more than their text (a per-chunk id or padding) would
/// otherwise pay a copy of every chunk for nothing. Also the envelopes a stream learns at most
/// (a per-chunk id makes each one new).
const MAX_UNUSED: u8 = 4;

/// One Chat stream's template, its envelope, and whether each is still worth learning.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    template: Option<Repeat>,
    unused: u8,
    /// A walked chunk's bytes before its `choices` key (no field the walk reads among them).
    envelope: Option<Box<str>>,
    envelopes_learned: u8,
}

impl Repeats {
    /// Reads a Chat chunk on the byte path: through the template when it repeats it, else by
    /// walking it (and learning it as the next template when it can be one).
    pub(crate) fn read_chat<'a>(&mut self, data: &'a str) -> Option<QuickRead<'a>> {
        if let Some(read) = self.template.as_ref().and_then(|t| t.read(data)) {
            self.unused = 0;
            return Some(read);
        }
        let read = self.walk(data)?;
        if self.unused < MAX_UNUSED {
            if let Some(t) = Repeat::learn(data, &read) {
                self.template = Some(t);
                self.unused += 1;
            }
        }
        Some(read)
    }

    /// Walks a chunk on the byte path, from its `choices` key when it starts with the envelope
    /// (else whole, learning its envelope).
    fn walk<'a>(&mut self, data: &'a str) -> Option<QuickRead<'a>> {
        let after_envelope = self
            .envelope
            .as_deref()
            .filter(|e| data.starts_with(e))
            .and_then(|e| super::chat::quick_from(data, Some(e.len())));
        let (classification, texts, choices_at) = match after_envelope {
            Some((c, texts, _)) => (c, texts, None),
            // A chunk the rest of which does not read (`{}` after an envelope of `{`) is walked
            // whole, as it would have been.
            None => super::chat::quick_from(data, None)?,
        };
        if let Some(at) = choices_at.filter(|_| self.envelopes_learned < MAX_UNUSED) {
            self.envelope = data.get(..at).map(Into::into);
            self.envelopes_learned += 1;
        }
        Some(QuickRead {
            classification,
            texts,
        })
    }
}

/// The last chunk read on the byte path that had one non-empty output string, without it.
#[derive(Debug, Clone)]
pub(crate) struct Repeat {
    /// The chunk's bytes up to the string's opening quote.
    before: Box<str>,
    /// Its bytes after the string's closing quote.
    after: Box<str>,
    classification: Classification,
}

impl Repeat {
    /// A template of `data`, which the byte path read as `read`: when its one output string
    /// is non-empty and nothing else in it is news (no usage, no stop, not terminal).
    pub(crate) fn learn(data: &str, read: &QuickRead<'_>) -> Option<Repeat> {
        let c = read.classification;
        if c.usage.is_some() || c.stop.is_some() || c.terminal_frame || c.output.is_some() {
            return None;
        }
        c.effective()?;
        let mut texts = read.texts.iter();
        let (Some(&(raw, _)), None) = (texts.next(), texts.next()) else {
            return None;
        };
        if raw == "\"\"" {
            return None;
        }
        // Where the string lies in the chunk: the byte path's texts borrow from it.
        let start = raw.as_ptr().addr().checked_sub(data.as_ptr().addr())?;
        let end = start.checked_add(raw.len())?;
        Some(Repeat {
            before: data.get(..start)?.into(),
            after: data.get(end..)?.into(),
            classification: c,
        })
    }

    /// `data` read as the template with another non-empty string in its place; `None` when it
    /// is not that.
    pub(crate) fn read<'a>(&self, data: &'a str) -> Option<QuickRead<'a>> {
        let between = data
            .strip_prefix(&*self.before)?
            .strip_suffix(&*self.after)?;
        let (raw, escaped) = Reader::whole_string(between)?;
        if raw == "\"\"" {
            return None;
        }
        let mut texts = Texts::default();
        texts.push((raw, escaped));
        Some(QuickRead {
            classification: self.classification,
            texts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::read_event_quick;
    use crate::Dialect;

    fn chunk(text: &str) -> String {
        format!(
            r#"{{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":null}}]}}"#
        )
    }

    fn template(text: &str) -> Repeat {
        let first = chunk(text);
        let read = read_event_quick(Dialect::Chat, None, &first).unwrap();
        Repeat::learn(&first, &read).unwrap()
    }

    fn texts(q: &QuickRead<'_>) -> Vec<(String, bool)> {
        q.texts.iter().map(|&(s, e)| (s.to_string(), e)).collect()
    }

    #[test]
    fn a_chunk_with_another_text_reads_as_the_byte_path_reads_it() {
        let t = template(r#""Sure""#);
        for text in [
            r#"" here""#,
            r#""a \"quoted\"\n""#,
            r#""\u00e9t\u00e9""#,
            r#""—""#,
        ] {
            let next = chunk(text);
            let repeated = t.read(&next).unwrap();
            let walked = read_event_quick(Dialect::Chat, None, &next).unwrap();
            assert_eq!(repeated.classification, walked.classification, "{text}");
            assert_eq!(texts(&repeated), texts(&walked), "{text}");
        }
    }

    #[test]
    fn anything_but_one_other_string_in_that_place_is_left_to_the_byte_path() {
        let t = template(r#""Sure""#);
        let other_id = chunk(r#""x""#).replace(r#""id":"c1""#, r#""id":"c2""#);
        let cases = [
            chunk(r#""""#),                // empty: another class
            chunk(r#""a","refusal":"b""#), // two strings: another shape
            chunk(r#""a"  "#),             // not a string token alone
            chunk("null"),                 // not a string
            chunk(r#""\ud83d\ude00""#),    // a surrogate escape, which the byte path leaves
            chunk("\"tab\there\""),        // a control character: invalid JSON
            chunk(r#""bad \q escape""#),   // invalid JSON
            other_id,                      // another envelope
        ];
        for case in cases {
            assert!(t.read(&case).is_none(), "{case}");
        }
    }

    #[test]
    fn a_stream_whose_chunks_never_repeat_stops_learning_after_a_few() {
        let mut repeats = Repeats::default();
        for i in 0..10 {
            let data = chunk(r#""x""#).replace(r#""id":"c1""#, &format!(r#""id":"c{i}""#));
            let read = repeats.read_chat(&data).unwrap();
            assert_eq!(texts(&read), vec![(r#""x""#.to_string(), false)]);
        }
        assert_eq!(repeats.unused, MAX_UNUSED);
        // Chunks of one envelope still read through the last template learned.
        let last = chunk(r#""y""#).replace(r#""id":"c1""#, r#""id":"c3""#);
        assert!(repeats.template.as_ref().unwrap().read(&last).is_some());
    }

    fn walked(data: &str) -> Option<(Classification, Vec<(String, bool)>)> {
        read_event_quick(Dialect::Chat, None, data).map(|q| (q.classification, texts(&q)))
    }

    const ENVELOPE: &str =
        r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","#;

    #[test]
    fn a_chunk_that_starts_with_the_envelope_reads_from_choices_as_the_whole_walk_reads_it() {
        let role = chunk(r#""""#).replace(r#"{"content""#, r#"{"role":"assistant","content""#);
        let mut repeats = Repeats::default();
        assert_eq!(
            repeats
                .read_chat(&role)
                .map(|q| (q.classification, texts(&q))),
            walked(&role)
        );
        assert_eq!(repeats.envelope.as_deref(), Some(ENVELOPE));
        let choice = |rest: &str| format!("{ENVELOPE}{rest}");
        let usage = r#""usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}"#;
        let tool = r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}"#;
        // (chunk, whether the walk from `choices` decides it)
        let cases = [
            (chunk(r#""a \"b\"\n""#), true),
            (
                chunk(r#""x""#).replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
                true,
            ),
            (choice(&format!(r#""choices":[],{usage}}}"#)), true),
            (
                choice(&format!(r#""choices":[{{"index":0,"delta":{tool}}}]}}"#)),
                true,
            ),
            (choice(r#""choices":null}"#), true),
            // A duplicate and an error are the full parse's; the rest are not JSON.
            (choice(r#""choices":[],"choices":[]}"#), false),
            (choice(r#""choices":[],"error":{"message":"x"}}"#), false),
            (choice(r#""choices":[]} x"#), false),
            (choice(r#""choices":[]"#), false),
            (choice(r#""choices":[],"#), false),
        ];
        for (case, decided) in cases {
            let from = super::super::chat::quick_from(&case, Some(ENVELOPE.len()))
                .map(|(c, t, _)| (c, t.iter().map(|&(s, e)| (s.to_string(), e)).collect()));
            assert_eq!(from.is_some(), decided, "{case}");
            assert_eq!(from, walked(&case), "{case}");
            let mut repeats = Repeats::default();
            repeats.read_chat(&role);
            let read = repeats.read_chat(&case);
            assert_eq!(
                read.map(|q| (q.classification, texts(&q))),
                walked(&case),
                "{case}"
            );
        }
    }

    #[test]
    fn only_bytes_before_choices_that_no_read_field_is_among_are_an_envelope() {
        let mut repeats = Repeats::default();
        let usage_first = chunk(r#""x""#).replace(r#""choices""#, r#""usage":null,"choices""#);
        repeats.read_chat(&usage_first);
        assert_eq!(repeats.envelope, None);
        // `choices` first: the envelope is the brace alone, and an empty object after it, which
        // the walk from `choices` cannot read, is walked whole.
        let choices_first = r#"{"choices":[{"index":0,"delta":{"content":""}}],"id":"c1"}"#;
        repeats.read_chat(choices_first);
        assert_eq!(repeats.envelope.as_deref(), Some("{"));
        assert!(walked("{}").is_some());
        let read = repeats.read_chat("{}");
        assert_eq!(read.map(|q| (q.classification, texts(&q))), walked("{}"));
    }

    #[test]
    fn a_stream_whose_envelope_never_repeats_stops_learning_it_after_a_few() {
        let mut repeats = Repeats::default();
        for i in 0..10 {
            let data = chunk(r#""""#).replace(r#""id":"c1""#, &format!(r#""id":"c{i}""#));
            assert_eq!(
                repeats
                    .read_chat(&data)
                    .map(|q| (q.classification, texts(&q))),
                walked(&data)
            );
        }
        assert_eq!(repeats.envelopes_learned, MAX_UNUSED);
        assert!(repeats.envelope.as_deref().unwrap().contains(r#""c3""#));
    }

    #[test]
    fn only_chunks_with_one_non_empty_string_and_nothing_else_new_are_templates() {
        let learn = |data: &str| {
            let read = read_event_quick(Dialect::Chat, None, data).unwrap();
            Repeat::learn(data, &read).is_some()
        };
        assert!(learn(&chunk(r#""Sure""#)));
        assert!(!learn(&chunk(r#""""#)));
        let with_stop =
            chunk(r#""x""#).replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#);
        assert!(!learn(&with_stop));
        let with_usage = chunk(r#""x""#).replace(
            r#""choices""#,
            r#""usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3},"choices""#,
        );
        assert!(!learn(&with_usage));
        let two_texts = chunk(r#""a","reasoning_content":"b""#);
        assert!(!learn(&two_texts));
    }
}
