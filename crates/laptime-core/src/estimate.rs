//! Estimated output tokens, for Chat streams whose upstream reports no usage (the client did not
//! ask `stream_options.include_usage`, or an `openai-compatible` channel sends no usage in
//! streams): the output text is counted with a real BPE tokenizer (`o200k_base`, shipped inside
//! tiktoken-rs, nothing downloaded) as it streams, so such answers still get an output speed and
//! a `generation_slow_tps` judgement. The count is stored apart
//! ([`crate::usage::Tokens::estimated_output`]) and everything that uses it says so.
//!
//! **The text is never kept.** Deltas are held only until about [`HELD_BYTES`] have gathered,
//! then the held text up to its last whitespace is counted and dropped (BPE does not merge
//! across a space followed by a word, so cutting there counts what counting the whole answer
//! would, give or take a token per cut). At most a few hundred bytes of an answer are held at
//! any time, and nothing of it outlives the stream.
//!
//! Counting never waits for the tokenizer: it loads once per process from a start-up task
//! ([`warm`]); a stream in the moments before it has loaded holds at most [`HELD_BYTES`] × 4
//! bytes, then counts about four bytes a token. What it loads is the pre-tokenizer's pattern;
//! the vocabulary is compiled in, compactly ([`bpe`], about 4 MB), and tiktoken-rs's own
//! tokenizer (about 45 MB) is never built.
//!
//! An observer only carries an estimator when the stream needs one, so streams whose provider
//! reports usage pay nothing.
//!
//! [`input_tokens`] is admission's estimate of a request's input, for tokens-per-minute limits:
//! the same tokenizer over the text of the request body's string values (messages, system
//! prompts, tool definitions), read in place and never kept. Its cost grows with the text, so
//! at most [`INPUT_TOKENIZED_BYTES`] of it are tokenized and the rest is extrapolated at the
//! rate measured on them.
//!
//! Both count through [`pieces`], which splits ASCII text without the tokenizer's regex and
//! remembers the counts of pieces it has seen; the counts are the tokenizer's.

use std::borrow::Cow;
use std::sync::OnceLock;

use serde::Deserialize;

mod bpe;
mod layout;
mod pieces;

/// Held output text is counted once it reaches this many bytes.
pub const HELD_BYTES: usize = 256;

/// Held text with no whitespace to cut at is counted whole past this many bytes.
const HELD_MAX: usize = 4 * HELD_BYTES;

/// What counting loads of `o200k_base`: its pre-tokenizer's pattern, for text that is not
/// ASCII ([`pieces`] splits ASCII by hand; the vocabulary, [`bpe::O200K_BASE`], is compiled in).
struct Tokenizer {
    split: fancy_regex::Regex,
}

impl Tokenizer {
    fn load() -> Option<Tokenizer> {
        let split = fancy_regex::Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).ok()?;
        Some(Tokenizer { split })
    }
}

/// The tokenizer, loaded once per process by [`warm`] (the pattern compiles in a few
/// milliseconds; `None` when it cannot).
static TOKENIZER: OnceLock<Option<Tokenizer>> = OnceLock::new();

/// Loads the tokenizer (from a start-up task: a stream never waits for it). Whether it loaded.
pub fn warm() -> bool {
    TOKENIZER.get_or_init(Tokenizer::load).is_some()
}

/// The tokenizer if it is loaded; never waits for it.
fn loaded() -> Option<&'static Tokenizer> {
    TOKENIZER.get().and_then(Option::as_ref)
}

/// Counts one stream's output tokens from its text deltas, holding at most a few hundred bytes.
#[derive(Debug, Default)]
pub struct OutputEstimate {
    held: String,
    counted: u64,
}

impl OutputEstimate {
    pub fn new() -> Self {
        OutputEstimate::default()
    }

    /// Adds one output delta.
    pub fn push(&mut self, text: &str) {
        self.held.push_str(text);
        if self.held.len() < HELD_BYTES {
            return;
        }
        let full = self.held.len() >= HELD_MAX;
        let cut = match self.held.rfind(char::is_whitespace) {
            // Not loaded yet (the first moments after start): hold a little longer.
            _ if loaded().is_none() && !full => return,
            Some(i) if i > 0 => i,
            _ if full => self.held.len(),
            _ => return,
        };
        self.counted += count(&self.held[..cut]);
        self.held.drain(..cut);
    }

    /// Adds the output of one Chat chunk (the SSE `data`): every choice's visible content,
    /// refusal, reasoning and tool-call arguments.
    pub fn push_chat_chunk(&mut self, data: &str) {
        let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else {
            return;
        };
        for choice in chunk.choices.unwrap_or_default() {
            let Some(d) = choice.delta else { continue };
            let calls = d.tool_calls.unwrap_or_default();
            let texts = [d.content, d.refusal, d.reasoning_content, d.reasoning]
                .into_iter()
                .flatten()
                .chain(calls.into_iter().filter_map(|c| c.function?.arguments))
                .chain(d.function_call.and_then(|f| f.arguments));
            for text in texts {
                self.push(&text);
            }
        }
    }

    /// Adds the output strings the byte path read from one Chat chunk (what
    /// [`OutputEstimate::push_chat_chunk`] would read from it, without parsing it again).
    pub(crate) fn push_texts(&mut self, texts: &crate::classify::Texts<'_>) {
        for &(raw, escaped) in texts.iter() {
            if let Some(text) = crate::classify::unquote(raw, escaped) {
                self.push(&text);
            }
        }
    }

    /// The tokens of everything pushed so far; `None` when no output was pushed (absent,
    /// never 0).
    pub fn total(&self) -> Option<u64> {
        let tokens = self.counted + count(&self.held);
        (tokens > 0).then_some(tokens)
    }
}

/// The tokens of `text`; while the tokenizer is not loaded (or could not be), about four bytes
/// a token, the rule the cost's input estimate uses.
fn count(text: &str) -> u64 {
    match loaded() {
        Some(t) => pieces::count(t, text),
        None => crate::cost::estimate_input_tokens(text.len()),
    }
}

/// Input text tokenized at most per request; the tokens of text beyond it are extrapolated.
/// Small because admission waits for it: the tokenizer costs about 20 ns a byte (see the
/// `input_estimate` benchmark), and a few hundred bytes of text give the rate of the rest.
pub const INPUT_TOKENIZED_BYTES: usize = 256;

/// Keys whose string values are not text a model reads as tokens: names of things, ids, enum
/// values, and base64 or URLs of media (priced by the provider apart from text).
const NOT_TEXT: [&str; 24] = [
    "model",
    "role",
    "type",
    "id",
    "tool_call_id",
    "tool_use_id",
    "call_id",
    "previous_response_id",
    "data",
    "url",
    "image_url",
    "file_id",
    "file_data",
    "fileUri",
    "file_uri",
    "media_type",
    "mime_type",
    "mimeType",
    "detail",
    "signature",
    "encrypted_content",
    "user",
    "service_tier",
    "reasoning_effort",
];

/// Admission's estimate of a request's input tokens from its JSON body: the tokenizer over the
/// text of its string values (at most [`INPUT_TOKENIZED_BYTES`] of it, the rest extrapolated);
/// a body that is not JSON (a multipart upload) counts about four bytes a token.
pub fn input_tokens(body: &[u8]) -> u64 {
    let mut text = InputText::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    if serde::de::DeserializeSeed::deserialize(Texts(&mut text), &mut de).is_err() {
        return crate::cost::estimate_input_tokens(body.len());
    }
    text.total()
}

/// The text of one request body as it is read: its size, and the tokens of its first part.
#[derive(Debug, Default)]
struct InputText {
    bytes: u64,
    tokenized_bytes: u64,
    tokens: u64,
}

impl InputText {
    fn push(&mut self, s: &str) {
        self.bytes += s.len() as u64;
        let room = (INPUT_TOKENIZED_BYTES as u64).saturating_sub(self.tokenized_bytes);
        if room == 0 || s.is_empty() {
            return;
        }
        let mut end = s.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        if end < s.len() {
            // Cut before a word, not inside one: a cut word would count as two tokens or more.
            if let Some(space) = s[..end].rfind(char::is_whitespace).filter(|&i| i > 0) {
                end = space;
            }
        }
        self.tokenized_bytes += end as u64;
        self.tokens += count(&s[..end]);
    }

    fn total(&self) -> u64 {
        if self.tokenized_bytes == 0 || self.tokenized_bytes >= self.bytes {
            return self.tokens;
        }
        let scaled =
            u128::from(self.tokens) * u128::from(self.bytes) / u128::from(self.tokenized_bytes);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }
}

/// Reads any JSON value, handing its text strings to the sink and skipping everything else.
struct Texts<'s>(&'s mut InputText);

impl<'de> serde::de::DeserializeSeed<'de> for Texts<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Texts<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.0.push(v);
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Texts(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if NOT_TEXT.contains(&key.as_ref()) {
                map.next_value::<serde::de::IgnoredAny>()?;
            } else {
                map.next_value_seed(Texts(&mut *self.0))?;
            }
        }
        Ok(())
    }
}

/// The parts of a Chat chunk that carry output text; anything else is skipped unread.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    choices: Option<Vec<Choice<'a>>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default, deserialize_with = "text_only")]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text_only")]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text_only")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "text_only")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
    #[serde(borrow, default)]
    function_call: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow, default, deserialize_with = "text_only")]
    arguments: Option<Cow<'a, str>>,
}

/// A string field's text; any other JSON value (null, Mistral's array of content parts) reads
/// as no text rather than failing the chunk.
fn text_only<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text<'a> {
        Str(#[serde(borrow)] Cow<'a, str>),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Text::deserialize(d)? {
        Text::Str(s) => Some(s),
        Text::Other(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str) -> u64 {
        count(text)
    }

    #[test]
    fn counting_in_pieces_matches_counting_the_whole_text() {
        assert!(warm());
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
        let mut e = OutputEstimate::new();
        for piece in text.as_bytes().chunks(7) {
            e.push(std::str::from_utf8(piece).unwrap());
        }
        let want = whole(&text);
        let got = e.total().unwrap();
        // A cut at a space is where BPE splits anyway: the same count.
        assert_eq!(got, want, "pieces {got}, whole {want}");
        assert!(e.held.len() < HELD_MAX, "held {} bytes", e.held.len());
    }

    #[test]
    fn held_text_stays_bounded_even_without_whitespace() {
        assert!(warm());
        let mut e = OutputEstimate::new();
        for _ in 0..1000 {
            e.push("字");
            assert!(e.held.len() <= HELD_MAX + 3, "held {}", e.held.len());
        }
        assert!(e.total().is_some_and(|n| n > 0));
    }

    #[test]
    fn input_counts_the_text_of_every_dialects_body_and_skips_names_and_media() {
        assert!(warm());
        let prompt = "Summarise the following report in three sentences, please.";
        let system = "You are terse.";
        let want = whole(prompt) + whole(system);
        let chat = format!(
            r#"{{"model":"gpt-4.1-mini","max_tokens":64,"messages":[{{"role":"system","content":"{system}"}},{{"role":"user","content":[{{"type":"text","text":"{prompt}"}},{{"type":"image_url","image_url":{{"url":"data:image/png;base64,{}"}}}}]}}]}}"#,
            "QUJD".repeat(2_000)
        );
        assert_eq!(input_tokens(chat.as_bytes()), want);
        let messages = format!(
            r#"{{"model":"claude-sonnet-4-5","system":"{system}","max_tokens":64,"messages":[{{"role":"user","content":"{prompt}"}}]}}"#
        );
        assert_eq!(input_tokens(messages.as_bytes()), want);
        let gemini = format!(
            r#"{{"systemInstruction":{{"parts":[{{"text":"{system}"}}]}},"contents":[{{"role":"user","parts":[{{"text":"{prompt}"}},{{"inlineData":{{"mimeType":"image/png","data":"{}"}}}}]}}]}}"#,
            "QUJD".repeat(2_000)
        );
        assert_eq!(input_tokens(gemini.as_bytes()), want);
        // Escapes are read as the text they stand for.
        let escaped = r#"{"input":"line one\nline \"two\" \u00e9"}"#;
        assert_eq!(
            input_tokens(escaped.as_bytes()),
            whole("line one\nline \"two\" é")
        );
        // Not JSON (a multipart upload): about four bytes a token.
        assert_eq!(input_tokens(b"--boundary\r\n\xff\xfe"), 4);
        assert_eq!(input_tokens(b"{}"), 0);
    }

    #[test]
    fn a_large_input_tokenizes_a_bounded_prefix_and_extrapolates() {
        assert!(warm());
        let sentence = "The quick brown fox jumps over the lazy dog. ";
        let text = sentence.repeat(20_000);
        let body = format!(r#"{{"messages":[{{"role":"user","content":"{text}"}}]}}"#);
        let exact = whole(&text);
        let estimated = input_tokens(body.as_bytes());
        // Uniform text extrapolates to within 2 % of the exact count (the sample is about 60
        // tokens).
        assert!(
            estimated.abs_diff(exact) * 50 <= exact,
            "estimated {estimated}, exact {exact}"
        );
        let mut t = InputText::default();
        t.push(&text);
        assert!(t.tokenized_bytes <= INPUT_TOKENIZED_BYTES as u64);
        assert!(t.tokenized_bytes >= INPUT_TOKENIZED_BYTES as u64 - sentence.len() as u64);
        assert_eq!(t.bytes, text.len() as u64);
        // A multi-byte character is never cut: the prefix ends on a boundary.
        let mut wide = InputText::default();
        wide.push(&"字".repeat(INPUT_TOKENIZED_BYTES));
        assert!(wide.tokenized_bytes <= INPUT_TOKENIZED_BYTES as u64);
        assert!(wide.total() > 0);
    }

    #[test]
    fn chat_chunks_count_content_reasoning_and_tool_arguments_only() {
        assert!(warm());
        let mut e = OutputEstimate::new();
        assert_eq!(e.total(), None, "nothing pushed: absent, not 0");
        e.push_chat_chunk(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
        assert_eq!(e.total(), None);
        e.push_chat_chunk(r#"{"choices":[{"delta":{"content":"Hello world"}}]}"#);
        let hello = e.total().unwrap();
        assert_eq!(hello, whole("Hello world"));
        e.push_chat_chunk(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
        );
        e.push_chat_chunk(r#"{"choices":[{"delta":{"reasoning_content":" thinking"}}]}"#);
        e.push_chat_chunk(r#"{"choices":[{"delta":{"content":[{"type":"text","text":"x"}]}}]}"#);
        e.push_chat_chunk(r#"{"choices":[],"usage":null}"#);
        e.push_chat_chunk("[DONE]");
        let total = e.total().unwrap();
        assert!(total > hello, "{total}");
        assert_eq!(
            total,
            whole("Hello world{\"city\": thinking"),
            "escapes decoded"
        );
    }
}
