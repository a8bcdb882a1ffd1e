//! The incremental SSE scanner: WHATWG "parsing an event stream" over bytes that arrive in chunks
//! of any size, split anywhere.
//!
//! Written by hand rather than taken from a crate because it is the product's core: it runs on
//! every upstream byte the gateway relays, so it decides both what an event *is* (the timeline's
//! `first_event` and the classifier's input) and what the relay costs. What it guarantees:
//!
//! - **Framing exactly as WHATWG** (`streaming-protocols.md` §0): CRLF, LF and lone CR line ends,
//!   including a CRLF whose CR ends one chunk and whose LF starts the next (one line end, not a
//!   blank line); one leading U+FEFF BOM stripped at stream start, even when split across chunks;
//!   comment lines; `name: value` with one leading space removed; a line without `:` is a field
//!   name with an empty value; `data` lines joined with `\n`; dispatch only when the data buffer
//!   is non-empty; the event type is reset by every blank line; `id` and `retry` parsed as the
//!   spec says; an unterminated last event is discarded at end of stream.
//! - **Any split gives the same items**: the same events, comments and boundaries, at the same
//!   absolute offsets, whether the stream comes whole or one byte at a time (property-tested).
//! - **No copy on the common path**: lines are found with `memchr`; a line that lies wholly in the
//!   chunk is read in place, and the `data` of a one-line event that lies wholly in the chunk is
//!   borrowed from it. Only lines that straddle chunks and multi-line data are copied, into
//!   buffers that are reused, so the steady state allocates nothing per event. Invalid UTF-8 is
//!   converted lossily (the rare path, which may allocate).

use memchr::{memchr, memchr2};

/// One item the scanner reports while it is fed a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseItem<'a> {
    /// A comment line (starts with ':'). Never an event.
    Comment,
    /// A blank line dispatched an event whose data buffer was non-empty.
    Event {
        /// The `event:` field, if one was set for this event.
        event: Option<&'a str>,
        /// The joined `data:` lines (lines joined with '\n', one trailing '\n' stripped).
        data: &'a str,
        /// Offset in the current chunk of the first byte of this event's first line (the first
        /// line after the previous blank line, comment lines included); None when that line
        /// began in an earlier chunk.
        start: Option<usize>,
        /// Offset in the current chunk just after the blank line that dispatched it: just after
        /// the byte that ended that line, which for a CRLF is its CR. A CR is a complete line end
        /// by itself (its LF may not have arrived yet), so `end` is the same absolute position
        /// for every split of the stream; a CRLF's LF, if any, is the byte at `end`.
        end: usize,
    },
    /// A blank line that dispatched nothing (empty data buffer). Still a boundary between events.
    /// `end` is defined as for [`SseItem::Event`].
    Boundary { end: usize },
}

/// The UTF-8 encoding of U+FEFF.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Where the stream stands with respect to its leading byte-order mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bom {
    /// At stream start: this many bytes (0..3) of a BOM have been seen and held back.
    Pending(u8),
    /// Stripped, or the stream did not start with one.
    Done,
}

/// Where the first line of the pending event began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// No line since the last blank line.
    None,
    /// At this offset of the chunk being fed.
    At(usize),
    /// In an earlier chunk.
    Earlier,
}

/// Where the value of a buffered field (`data` or `event`) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// Not set since the last blank line (for `data`: the data buffer is empty).
    Empty,
    /// One value lying in the chunk being fed, `start..end` (valid only during that `feed`).
    Chunk(usize, usize),
    /// In the scanner's own buffer.
    Buf,
}

/// A complete line, without its line end.
#[derive(Clone, Copy)]
enum Line<'l> {
    /// `start..end` of the chunk being fed.
    InChunk(usize, usize),
    /// Assembled from bytes of several chunks.
    Carried(&'l [u8]),
}

/// The incremental SSE scanner. Feed it the stream chunk by chunk with [`SseScanner::feed`], and
/// call [`SseScanner::finish`] at end of stream.
#[derive(Debug, Clone)]
pub struct SseScanner {
    bom: Bom,
    /// The last chunk ended with a CR that ended a line: an LF at the start of the next chunk
    /// belongs to that CR (CRLF split across reads) and must not make a blank line.
    cr_pending: bool,
    /// Bytes of a line that started in an earlier chunk and has not ended yet.
    line: Vec<u8>,
    start: Start,
    /// A field line (not a comment, not blank) was read since the last blank line.
    fields_pending: bool,
    data: Field,
    /// The data buffer when it is not borrowed from the chunk: lines joined with '\n', without
    /// the trailing '\n' the spec appends and strips again at dispatch.
    data_buf: Vec<u8>,
    event: Field,
    event_buf: Vec<u8>,
    /// Lossy UTF-8 conversions of data and event type (rare path).
    lossy_data: String,
    lossy_event: String,
    last_event_id: Vec<u8>,
    retry: Option<u64>,
}

impl Default for SseScanner {
    fn default() -> Self {
        Self::new()
    }
}

// === impl SseScanner ===

impl SseScanner {
    pub fn new() -> Self {
        SseScanner {
            bom: Bom::Pending(0),
            cr_pending: false,
            line: Vec::new(),
            start: Start::None,
            fields_pending: false,
            data: Field::Empty,
            data_buf: Vec::new(),
            event: Field::Empty,
            event_buf: Vec::new(),
            lossy_data: String::new(),
            lossy_event: String::new(),
            last_event_id: Vec::new(),
            retry: None,
        }
    }

    /// The last-event-ID buffer: the value of the last `id` field that held no U+0000. It
    /// persists across events (WHATWG); the gateway does not use it.
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_event_id
    }

    /// The reconnection time in milliseconds from the last `retry` field made of ASCII digits
    /// only (saturating), if any.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Feeds one chunk of the stream; calls `on` for every item completed inside it, in order.
    pub fn feed(&mut self, chunk: &[u8], on: &mut impl FnMut(SseItem<'_>)) {
        if chunk.is_empty() {
            return;
        }
        let mut pos = 0;

        if let Bom::Pending(held) = self.bom {
            let mut matched = usize::from(held);
            while matched < BOM.len() && pos < chunk.len() && chunk[pos] == BOM[matched] {
                matched += 1;
                pos += 1;
            }
            if matched == BOM.len() {
                self.bom = Bom::Done;
            } else if pos == chunk.len() {
                // The whole chunk is a BOM prefix so far: hold it until the next byte decides.
                self.bom = Bom::Pending(u8::try_from(matched).unwrap_or(0));
                return;
            } else {
                // Not a BOM: the bytes held back from earlier chunks begin the first line, and
                // this chunk is read from its start as ordinary bytes.
                self.bom = Bom::Done;
                if held > 0 {
                    self.line.extend_from_slice(&BOM[..usize::from(held)]);
                    self.start = Start::Earlier;
                }
                pos = 0;
            }
        }

        if self.cr_pending && pos < chunk.len() {
            self.cr_pending = false;
            if chunk[pos] == b'\n' {
                pos += 1;
            }
        }

        // A line carried over from earlier chunks: finish it first.
        if !self.line.is_empty() && pos < chunk.len() {
            match memchr2(b'\n', b'\r', &chunk[pos..]) {
                None => {
                    self.line.extend_from_slice(&chunk[pos..]);
                    pos = chunk.len();
                }
                Some(i) => {
                    let term = pos + i;
                    self.line.extend_from_slice(&chunk[pos..term]);
                    let next = self.after_line_end(chunk, term);
                    let carried = std::mem::take(&mut self.line);
                    self.line_done(Line::Carried(&carried), chunk, term + 1, on);
                    self.line = carried;
                    self.line.clear();
                    pos = next;
                }
            }
        }

        while pos < chunk.len() {
            let rest = &chunk[pos..];
            match memchr2(b'\n', b'\r', rest) {
                None => {
                    if self.start == Start::None {
                        self.start = Start::At(pos);
                    }
                    self.line.extend_from_slice(rest);
                    break;
                }
                Some(i) => {
                    let term = pos + i;
                    if i > 0 && self.start == Start::None {
                        self.start = Start::At(pos);
                    }
                    let next = self.after_line_end(chunk, term);
                    self.line_done(Line::InChunk(pos, term), chunk, term + 1, on);
                    pos = next;
                }
            }
        }

        self.end_of_chunk(chunk);
    }

    /// End of stream: an incomplete last event is discarded (WHATWG). Returns true when bytes of
    /// an unterminated event were discarded: a partial line, or field lines after the last blank
    /// line (a trailing comment alone is not an event). The scanner is then ready for a new
    /// stream.
    pub fn finish(&mut self) -> bool {
        let discarded = !self.line.is_empty()
            || matches!(self.bom, Bom::Pending(held) if held > 0)
            || self.fields_pending;
        self.bom = Bom::Pending(0);
        self.cr_pending = false;
        self.line.clear();
        self.start = Start::None;
        self.fields_pending = false;
        self.data = Field::Empty;
        self.event = Field::Empty;
        self.last_event_id.clear();
        self.retry = None;
        discarded
    }

    /// Given the offset of a line-end byte, returns the offset of the next line's first byte,
    /// and remembers a CR that ends the chunk (its LF, if any, starts the next chunk).
    fn after_line_end(&mut self, chunk: &[u8], term: usize) -> usize {
        if chunk[term] == b'\r' {
            match chunk.get(term + 1) {
                Some(b'\n') => term + 2,
                Some(_) => term + 1,
                None => {
                    self.cr_pending = true;
                    term + 1
                }
            }
        } else {
            term + 1
        }
    }

    /// Interprets one complete line (WHATWG "process the field"). `end` is the offset just after
    /// its line end, reported if the line is blank.
    fn line_done(
        &mut self,
        line: Line<'_>,
        chunk: &[u8],
        end: usize,
        on: &mut impl FnMut(SseItem<'_>),
    ) {
        let bytes = match line {
            Line::InChunk(s, e) => &chunk[s..e],
            Line::Carried(b) => b,
        };
        let Some(&first) = bytes.first() else {
            self.dispatch(chunk, end, on);
            return;
        };
        if first == b':' {
            on(SseItem::Comment);
            return;
        }
        self.fields_pending = true;
        let (name, value_at) = match memchr(b':', bytes) {
            Some(colon) if bytes.get(colon + 1) == Some(&b' ') => (&bytes[..colon], colon + 2),
            Some(colon) => (&bytes[..colon], colon + 1),
            None => (bytes, bytes.len()),
        };
        let value = &bytes[value_at..];
        // Where the value lies in the chunk, when the line does.
        let in_chunk = match line {
            Line::InChunk(s, e) => Some((s + value_at, e)),
            Line::Carried(_) => None,
        };
        match name {
            b"data" => self.push_data(chunk, value, in_chunk),
            b"event" => match in_chunk {
                Some((s, e)) => self.event = Field::Chunk(s, e),
                None => {
                    self.event_buf.clear();
                    self.event_buf.extend_from_slice(value);
                    self.event = Field::Buf;
                }
            },
            // The last-event-ID buffer is set unless the value holds U+0000.
            b"id" if memchr(0, value).is_none() => {
                self.last_event_id.clear();
                self.last_event_id.extend_from_slice(value);
            }
            // The reconnection time is set only by a value of ASCII digits.
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry = Some(value.iter().fold(0u64, |n, d| {
                    n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                }));
            }
            // `id` with U+0000, `retry` with a non-digit, and unknown fields are ignored.
            _ => {}
        }
    }

    /// Appends one `data` value to the data buffer, borrowing it from the chunk while it is the
    /// event's only data line.
    fn push_data(&mut self, chunk: &[u8], value: &[u8], in_chunk: Option<(usize, usize)>) {
        match (self.data, in_chunk) {
            (Field::Empty, Some((s, e))) => self.data = Field::Chunk(s, e),
            (Field::Empty, None) => {
                self.data_buf.clear();
                self.data_buf.extend_from_slice(value);
                self.data = Field::Buf;
            }
            (Field::Chunk(s, e), _) => {
                self.data_buf.clear();
                self.data_buf.extend_from_slice(&chunk[s..e]);
                self.data_buf.push(b'\n');
                self.data_buf.extend_from_slice(value);
                self.data = Field::Buf;
            }
            (Field::Buf, _) => {
                self.data_buf.push(b'\n');
                self.data_buf.extend_from_slice(value);
            }
        }
    }

    /// A blank line: dispatch the event if its data buffer is non-empty, then reset the data and
    /// event type buffers either way.
    fn dispatch(&mut self, chunk: &[u8], end: usize, on: &mut impl FnMut(SseItem<'_>)) {
        let start = std::mem::replace(&mut self.start, Start::None);
        let data = std::mem::replace(&mut self.data, Field::Empty);
        let event = std::mem::replace(&mut self.event, Field::Empty);
        self.fields_pending = false;
        let data: &str = match data {
            Field::Empty => {
                on(SseItem::Boundary { end });
                return;
            }
            Field::Chunk(s, e) => match std::str::from_utf8(&chunk[s..e]) {
                Ok(text) => text,
                Err(_) => {
                    lossy_into(&mut self.lossy_data, &chunk[s..e]);
                    &self.lossy_data
                }
            },
            Field::Buf => match std::str::from_utf8(&self.data_buf) {
                Ok(text) => text,
                Err(_) => {
                    lossy_into(&mut self.lossy_data, &self.data_buf);
                    &self.lossy_data
                }
            },
        };
        let event: &str = match event {
            Field::Empty => "",
            Field::Chunk(s, e) => match std::str::from_utf8(&chunk[s..e]) {
                Ok(text) => text,
                Err(_) => {
                    lossy_into(&mut self.lossy_event, &chunk[s..e]);
                    &self.lossy_event
                }
            },
            Field::Buf => match std::str::from_utf8(&self.event_buf) {
                Ok(text) => text,
                Err(_) => {
                    lossy_into(&mut self.lossy_event, &self.event_buf);
                    &self.lossy_event
                }
            },
        };
        on(SseItem::Event {
            // An empty type buffer means the default type (`message`): no `event` field.
            event: (!event.is_empty()).then_some(event),
            data,
            start: match start {
                Start::At(at) => Some(at),
                Start::None | Start::Earlier => None,
            },
            end,
        });
    }

    /// The chunk is about to go away: copy what still borrows from it into the scanner's buffers.
    fn end_of_chunk(&mut self, chunk: &[u8]) {
        if let Field::Chunk(s, e) = self.data {
            self.data_buf.clear();
            self.data_buf.extend_from_slice(&chunk[s..e]);
            self.data = Field::Buf;
        }
        if let Field::Chunk(s, e) = self.event {
            self.event_buf.clear();
            self.event_buf.extend_from_slice(&chunk[s..e]);
            self.event = Field::Buf;
        }
        if let Start::At(_) = self.start {
            self.start = Start::Earlier;
        }
    }
}

/// UTF-8 decode with replacement (as `String::from_utf8_lossy`), into a reused buffer.
fn lossy_into(out: &mut String, bytes: &[u8]) {
    out.clear();
    for piece in bytes.utf8_chunks() {
        out.push_str(piece.valid());
        if !piece.invalid().is_empty() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An item with owned text and absolute offsets, comparable across splits.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Rec {
        Comment,
        Event {
            event: Option<String>,
            data: String,
            start: Option<usize>,
            end: usize,
        },
        Boundary {
            end: usize,
        },
    }

    fn rec(item: SseItem<'_>, base: usize) -> Rec {
        match item {
            SseItem::Comment => Rec::Comment,
            SseItem::Event {
                event,
                data,
                start,
                end,
            } => Rec::Event {
                event: event.map(str::to_owned),
                data: data.to_owned(),
                start: start.map(|s| base + s),
                end: base + end,
            },
            SseItem::Boundary { end } => Rec::Boundary { end: base + end },
        }
    }

    /// Feeds the chunks in order; returns the items (offsets made absolute) and `finish()`.
    fn scan_chunks<'c>(chunks: impl IntoIterator<Item = &'c [u8]>) -> (Vec<Rec>, bool) {
        let mut scanner = SseScanner::new();
        let mut out = Vec::new();
        let mut base = 0;
        for chunk in chunks {
            scanner.feed(chunk, &mut |item| out.push(rec(item, base)));
            base += chunk.len();
        }
        (out, scanner.finish())
    }

    fn scan(stream: &[u8]) -> (Vec<Rec>, bool) {
        scan_chunks([stream])
    }

    /// `(event, data)` of each dispatched event.
    fn events(recs: &[Rec]) -> Vec<(Option<String>, String)> {
        recs.iter()
            .filter_map(|r| match r {
                Rec::Event { event, data, .. } => Some((event.clone(), data.clone())),
                _ => None,
            })
            .collect()
    }

    fn ev(event: Option<&str>, data: &str) -> (Option<String>, String) {
        (event.map(str::to_owned), data.to_owned())
    }

    fn split_at_every_byte(stream: &[u8]) -> (Vec<Rec>, bool) {
        scan_chunks(stream.chunks(1))
    }

    /// A straightforward reading of WHATWG §9.2 over the whole (valid UTF-8) stream, used as
    /// an oracle for the `(event, data)` sequence and the comment count.
    fn oracle(stream: &str) -> (Vec<(Option<String>, String)>, usize) {
        let text = stream.strip_prefix('\u{FEFF}').unwrap_or(stream);
        let mut lines = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find(['\r', '\n']) {
            lines.push(&rest[..i]);
            rest = if rest[i..].starts_with("\r\n") {
                &rest[i + 2..]
            } else {
                &rest[i + 1..]
            };
        }
        let (mut out, mut comments) = (Vec::new(), 0);
        let (mut data, mut event) = (String::new(), String::new());
        for line in lines {
            if line.is_empty() {
                if !data.is_empty() {
                    data.pop();
                    let e = (!event.is_empty()).then(|| event.clone());
                    out.push((e, std::mem::take(&mut data)));
                }
                data.clear();
                event.clear();
            } else if line.starts_with(':') {
                comments += 1;
            } else {
                let (name, value) = match line.split_once(':') {
                    Some((n, v)) => (n, v.strip_prefix(' ').unwrap_or(v)),
                    None => (line, ""),
                };
                match name {
                    "data" => {
                        data.push_str(value);
                        data.push('\n');
                    }
                    "event" => event = value.to_owned(),
                    _ => {}
                }
            }
        }
        (out, comments)
    }

    // --- line ends ---

    #[test]
    fn lf_line_ends_frame_events() {
        let (recs, discarded) = scan(b"data: a\n\ndata: b\n\n");
        assert_eq!(events(&recs), [ev(None, "a"), ev(None, "b")]);
        assert!(!discarded);
    }

    #[test]
    fn lone_cr_line_ends_frame_events() {
        let (recs, _) = scan(b"event: x\rdata: a\r\rdata: b\r\r");
        assert_eq!(events(&recs), [ev(Some("x"), "a"), ev(None, "b")]);
    }

    #[test]
    fn crlf_line_ends_frame_events() {
        let (recs, _) = scan(b"event: x\r\ndata: a\r\n\r\ndata: b\r\n\r\n");
        assert_eq!(events(&recs), [ev(Some("x"), "a"), ev(None, "b")]);
        assert_eq!(
            recs.len(),
            2,
            "a CRLF is one line end, never a blank line: {recs:?}"
        );
    }

    #[test]
    fn crlf_split_across_two_reads_is_one_line_end() {
        let (recs, _) = scan_chunks([&b"data: a\r"[..], b"\n", b"data: b\r", b"\n\r", b"\n"]);
        assert_eq!(
            recs.len(),
            1,
            "the LF after a chunk-ending CR made a blank line: {recs:?}"
        );
        assert_eq!(events(&recs), [ev(None, "a\nb")]);
    }

    #[test]
    fn a_cr_ending_a_chunk_completes_the_event_without_waiting_for_its_lf() {
        let mut scanner = SseScanner::new();
        let mut got = Vec::new();
        scanner.feed(b"data: [DONE]\r\n\r", &mut |i| got.push(rec(i, 0)));
        assert_eq!(
            got,
            [Rec::Event {
                event: None,
                data: "[DONE]".into(),
                start: Some(0),
                end: 15
            }]
        );
        scanner.feed(b"\n", &mut |i| got.push(rec(i, 15)));
        assert_eq!(got.len(), 1, "the trailing LF belongs to the CR");
        assert!(!scanner.finish());
    }

    #[test]
    fn mixed_line_ends_in_one_stream_are_all_honoured() {
        let (recs, _) = scan(b"data: a\r\ndata: b\rdata: c\n\r\n");
        assert_eq!(events(&recs), [ev(None, "a\nb\nc")]);
    }

    // --- BOM ---

    #[test]
    fn one_leading_bom_is_stripped() {
        let (recs, _) = scan("\u{FEFF}data: a\n\n".as_bytes());
        assert_eq!(events(&recs), [ev(None, "a")]);
        assert!(matches!(recs[0], Rec::Event { start: Some(3), .. }));
    }

    #[test]
    fn a_bom_split_across_reads_is_stripped() {
        let bytes = "\u{FEFF}data: a\n\n".as_bytes();
        let (recs, _) = scan_chunks([&bytes[..1], &bytes[1..2], &bytes[2..3], &bytes[3..]]);
        assert_eq!(events(&recs), [ev(None, "a")]);
        assert!(matches!(recs[0], Rec::Event { start: Some(3), .. }));
        // The first line began in the chunk that ended the BOM: its start is then unknown.
        let (recs, _) = scan_chunks([&bytes[..2], &bytes[2..5], &bytes[5..]]);
        assert_eq!(events(&recs), [ev(None, "a")]);
        assert!(matches!(recs[0], Rec::Event { start: None, .. }));
    }

    #[test]
    fn a_second_bom_is_kept_as_data() {
        let (recs, _) = scan("\u{FEFF}data: \u{FEFF}a\n\n".as_bytes());
        assert_eq!(events(&recs), [ev(None, "\u{FEFF}a")]);
        // A BOM that is not at stream start makes the line's field name "\u{FEFF}data".
        let (recs, _) = scan("\u{FEFF}\u{FEFF}data: a\n\n".as_bytes());
        assert_eq!(events(&recs), []);
    }

    #[test]
    fn a_bom_prefix_that_is_not_a_bom_is_line_content() {
        let mut bytes = vec![0xEF, 0xBB];
        bytes.extend_from_slice(b"\n: c\ndata: a\n\n");
        let (recs, _) = scan_chunks([&bytes[..1], &bytes[1..2], &bytes[2..]]);
        assert_eq!(events(&recs), [ev(None, "a")]);
        assert_eq!(recs[0], Rec::Comment);
    }

    #[test]
    fn an_unfinished_bom_at_end_of_stream_counts_as_discarded_bytes() {
        let (recs, discarded) = scan(&[0xEF, 0xBB]);
        assert!(recs.is_empty());
        assert!(discarded);
    }

    // --- fields ---

    #[test]
    fn comments_are_reported_and_never_dispatch() {
        let (recs, _) = scan(b": keep-alive\n\n: OPENROUTER PROCESSING\n\ndata: a\n\n");
        assert_eq!(
            recs,
            [
                Rec::Comment,
                Rec::Boundary { end: 14 },
                Rec::Comment,
                Rec::Boundary { end: 39 },
                Rec::Event {
                    event: None,
                    data: "a".into(),
                    start: Some(39),
                    end: 48
                },
            ]
        );
    }

    #[test]
    fn multi_line_data_is_joined_with_lf() {
        let (recs, _) = scan(b"data: {\ndata:  \"a\": 1\ndata: }\n\n");
        assert_eq!(events(&recs), [ev(None, "{\n \"a\": 1\n}")]);
    }

    #[test]
    fn data_without_a_space_after_the_colon_keeps_all_of_its_value() {
        let (recs, _) = scan(b"data:a\n\ndata:  b\n\n");
        assert_eq!(events(&recs), [ev(None, "a"), ev(None, " b")]);
    }

    #[test]
    fn a_field_with_no_colon_is_a_name_with_an_empty_value() {
        // `data` alone appends an empty line: the buffer is "\n", so the event dispatches with "".
        let (recs, _) = scan(b"data\n\n");
        assert_eq!(events(&recs), [ev(None, "")]);
        let (recs, _) = scan(b"data\ndata\n\n");
        assert_eq!(events(&recs), [ev(None, "\n")]);
        let (recs, _) = scan(b"event\ndata: x\n\n");
        assert_eq!(events(&recs), [ev(None, "x")]);
    }

    #[test]
    fn an_empty_data_value_still_dispatches() {
        let (recs, _) = scan(b"data:\n\n");
        assert_eq!(events(&recs), [ev(None, "")]);
    }

    #[test]
    fn a_blank_line_with_an_empty_data_buffer_is_a_boundary() {
        let (recs, _) = scan(b"\n\nevent: ping\n\nid: 7\nretry: 10\n\n");
        assert_eq!(
            recs,
            [
                Rec::Boundary { end: 1 },
                Rec::Boundary { end: 2 },
                Rec::Boundary { end: 15 },
                Rec::Boundary { end: 32 },
            ]
        );
    }

    #[test]
    fn the_event_type_is_reset_by_every_blank_line() {
        let (recs, _) = scan(b"event: a\n\ndata: x\n\nevent: b\ndata: y\n\ndata: z\n\n");
        assert_eq!(
            events(&recs),
            [ev(None, "x"), ev(Some("b"), "y"), ev(None, "z")]
        );
    }

    #[test]
    fn the_last_event_field_wins_and_an_empty_one_means_the_default_type() {
        let (recs, _) = scan(b"event: a\nevent: b\ndata: x\n\nevent: a\nevent:\ndata: y\n\n");
        assert_eq!(events(&recs), [ev(Some("b"), "x"), ev(None, "y")]);
    }

    #[test]
    fn id_persists_across_events_and_an_id_with_nul_is_ignored() {
        let mut scanner = SseScanner::new();
        let mut n = 0;
        scanner.feed(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\0\n\n", &mut |i| {
            if matches!(i, SseItem::Event { .. }) {
                n += 1;
            }
        });
        assert_eq!(n, 2);
        assert_eq!(scanner.last_event_id(), b"1");
    }

    #[test]
    fn retry_is_taken_only_when_all_ascii_digits() {
        let mut scanner = SseScanner::new();
        scanner.feed(b"retry: 1500\n\nretry: 15s\n\nretry:\n\n", &mut |_| {});
        assert_eq!(scanner.retry(), Some(1500));
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let (recs, _) = scan(b"foo: bar\ndata: a\nDATA: b\n\n");
        assert_eq!(events(&recs), [ev(None, "a")]);
    }

    #[test]
    fn invalid_utf8_in_data_is_replaced() {
        let (recs, _) = scan(b"data: a\xffb\n\n");
        assert_eq!(events(&recs), [ev(None, "a\u{FFFD}b")]);
        let (recs, _) = split_at_every_byte(b"event: e\xff\ndata: a\xffb\ndata: c\n\n");
        assert_eq!(events(&recs), [ev(Some("e\u{FFFD}"), "a\u{FFFD}b\nc")]);
    }

    #[test]
    fn a_multibyte_character_split_across_reads_is_kept_whole() {
        let bytes = "data: 📦 — ok\n\n".as_bytes();
        let (recs, _) = split_at_every_byte(bytes);
        assert_eq!(events(&recs), [ev(None, "📦 — ok")]);
    }

    // --- end of stream ---

    #[test]
    fn an_unterminated_last_event_is_discarded_by_finish() {
        let (recs, discarded) = scan(b"data: a\n\ndata: b\n");
        assert_eq!(events(&recs), [ev(None, "a")]);
        assert!(discarded);
        let (recs, discarded) = scan(b"data: a\n\ndata: {\"type\":\"mess");
        assert_eq!(events(&recs), [ev(None, "a")]);
        assert!(discarded);
    }

    #[test]
    fn a_recorded_anthropic_fixture_without_a_final_blank_line_loses_message_stop() {
        // anthropic-sdk-python tests/lib/streaming/fixtures/basic_response.txt ends this way.
        let tail = b"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":6}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}";
        let (recs, discarded) = scan(tail);
        assert_eq!(events(&recs).len(), 1);
        assert!(discarded);
    }

    #[test]
    fn a_cleanly_ended_stream_discards_nothing() {
        assert!(!scan(b"data: a\n\n").1);
        assert!(!scan(b"data: a\n\n: trailing comment\n").1);
        assert!(!scan(b"").1);
    }

    #[test]
    fn finish_makes_the_scanner_ready_for_a_new_stream() {
        let mut scanner = SseScanner::new();
        scanner.feed(b"data: cut", &mut |_| {});
        assert!(scanner.finish());
        let mut got = Vec::new();
        scanner.feed("\u{FEFF}data: a\n\n".as_bytes(), &mut |i| {
            got.push(rec(i, 0))
        });
        assert_eq!(events(&got), [ev(None, "a")]);
    }

    // --- borrowing ---

    #[test]
    fn a_one_line_event_inside_the_chunk_borrows_its_data_from_the_chunk() {
        let chunk = b"event: e\ndata: {\"a\":1}\n\n";
        let mut scanner = SseScanner::new();
        let range = chunk.as_ptr_range();
        let mut borrowed = None;
        scanner.feed(chunk, &mut |item| {
            if let SseItem::Event { event, data, .. } = item {
                borrowed = Some(
                    range.contains(&data.as_ptr())
                        && range.contains(&event.map_or(std::ptr::null(), str::as_ptr)),
                );
            }
        });
        assert_eq!(borrowed, Some(true));
    }

    #[test]
    fn offsets_point_at_the_event_bytes_in_the_chunk() {
        let chunk = b"data: a\n\n: c\nevent: x\ndata: b\n\n";
        let mut scanner = SseScanner::new();
        let mut spans = Vec::new();
        scanner.feed(chunk, &mut |item| {
            if let SseItem::Event { start, end, .. } = item {
                spans.push((start, end));
            }
        });
        assert_eq!(spans, [(Some(0), 9), (Some(9), chunk.len())]);
        assert_eq!(&chunk[9..], b": c\nevent: x\ndata: b\n\n");
    }

    #[test]
    fn an_event_whose_first_line_began_in_an_earlier_chunk_has_no_start() {
        let (recs, _) = scan_chunks([&b"da"[..], b"ta: a\n\n"]);
        assert_eq!(
            recs,
            [Rec::Event {
                event: None,
                data: "a".into(),
                start: None,
                end: 9
            }]
        );
    }

    // --- any split ---

    /// Realistic streams of the three dialects, written with LF line ends.
    const STREAMS: [&str; 4] = [
        // Chat: DeepSeek keep-alive comment, role chunk, reasoning, text, finish, usage, [DONE].
        concat!(
            ": keep-alive\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"Think \"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Capital \\\"of\\\" — Denmark 📦\"},\"finish_reason\":null}]}\n\n",
            ": OPENROUTER PROCESSING\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":44,\"completion_tokens\":16,\"total_tokens\":60}}\n\n",
            "data: [DONE]\n\n",
        ),
        // Responses: event + data lines, an id and retry, keepalive, multi-line data.
        concat!(
            "retry: 3000\n",
            "event: response.created\nid: 0\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"status\":\"in_progress\",\"usage\":null}}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"Hi\",\"logprobs\":[],\"obfuscation\":\"x\"}\n\n",
            "event: keepalive\ndata: {\"type\":\"keepalive\",\"sequence_number\":2}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\ndata: \"delta\":\" there\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":50,\"output_tokens\":20}}}\n\n",
        ),
        // Messages: padded JSON, ping, a field without colon, data without space, unknown field.
        concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":28,\"output_tokens\":5}}}               }\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}  }\n\n",
            "event: ping\ndata: {\"type\": \"ping\"}\n\n",
            "event: content_block_delta\ndata:{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi — 📦\"} }\n\n",
            "data\nfoo: bar\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":6}}    }\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"      }\n\n",
        ),
        // Blank lines and comments between events, and an unterminated last event.
        concat!(
            "\n\n:\n: c\n\ndata: a\n\n\n\nevent: e\n:\ndata: b\ndata:\ndata: c\n\n",
            "data: unterminated\n",
        ),
    ];

    fn variant(stream: &str, line_end: &str, bom: bool) -> Vec<u8> {
        let mut s = String::new();
        if bom {
            s.push('\u{FEFF}');
        }
        s.push_str(&stream.replace('\n', line_end));
        s.into_bytes()
    }

    fn chunked<'b>(bytes: &'b [u8], cuts: &[prop::sample::Index]) -> Vec<&'b [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        at.windows(2).map(|w| &bytes[w[0]..w[1]]).collect()
    }

    #[test]
    fn every_stream_variant_matches_the_oracle_when_fed_whole() {
        for stream in STREAMS {
            for line_end in ["\n", "\r\n", "\r"] {
                for bom in [false, true] {
                    let bytes = variant(stream, line_end, bom);
                    let (recs, _) = scan(&bytes);
                    let text = std::str::from_utf8(&bytes).unwrap();
                    let (want, comments) = oracle(text);
                    assert_eq!(events(&recs), want, "{line_end:?} bom={bom}");
                    let got_comments = recs.iter().filter(|r| **r == Rec::Comment).count();
                    assert_eq!(got_comments, comments);
                    assert!(recs
                        .iter()
                        .all(|r| !matches!(r, Rec::Event { start: None, .. })));
                }
            }
        }
    }

    #[test]
    fn every_stream_variant_fed_one_byte_at_a_time_gives_the_same_items() {
        for stream in STREAMS {
            for line_end in ["\n", "\r\n", "\r"] {
                for bom in [false, true] {
                    let bytes = variant(stream, line_end, bom);
                    let (whole, whole_discarded) = scan(&bytes);
                    let (split, split_discarded) = split_at_every_byte(&bytes);
                    assert_eq!(whole_discarded, split_discarded);
                    // One byte per chunk: no line lies wholly in a chunk, so no start is known.
                    let no_start = |recs: Vec<Rec>| -> Vec<Rec> {
                        recs.into_iter()
                            .map(|r| match r {
                                Rec::Event {
                                    event, data, end, ..
                                } => Rec::Event {
                                    event,
                                    data,
                                    start: None,
                                    end,
                                },
                                other => other,
                            })
                            .collect()
                    };
                    assert_eq!(no_start(whole), split, "{line_end:?} bom={bom}");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_split_of_a_stream_gives_the_same_items_at_the_same_offsets(
            which in 0..STREAMS.len(),
            line_end in prop::sample::select(vec!["\n", "\r\n", "\r"]),
            bom in any::<bool>(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        ) {
            let bytes = variant(STREAMS[which], line_end, bom);
            let (whole, whole_discarded) = scan(&bytes);
            let (split, split_discarded) = scan_chunks(chunked(&bytes, &cuts));
            prop_assert_eq!(whole_discarded, split_discarded);
            prop_assert_eq!(whole.len(), split.len());
            for (w, s) in whole.iter().zip(&split) {
                match (w, s) {
                    (
                        Rec::Event { event: we, data: wd, start: ws, end: wend },
                        Rec::Event { event: se, data: sd, start: ss, end: send },
                    ) => {
                        prop_assert_eq!(we, se);
                        prop_assert_eq!(wd, sd);
                        prop_assert_eq!(wend, send);
                        prop_assert!(ws.is_some());
                        if ss.is_some() {
                            prop_assert_eq!(ws, ss);
                        }
                    }
                    _ => prop_assert_eq!(w, s),
                }
            }
        }

        #[test]
        fn one_byte_at_a_time_equals_whole_for_arbitrary_bytes(
            bytes in prop::collection::vec(
                prop::sample::select(b"data: \r\n:evtx\xef\xbb\xbf{}".to_vec()), 0..200),
        ) {
            let (whole, whole_discarded) = scan(&bytes);
            let (split, split_discarded) = split_at_every_byte(&bytes);
            prop_assert_eq!(whole_discarded, split_discarded);
            prop_assert_eq!(whole.len(), split.len());
            for (w, s) in whole.iter().zip(&split) {
                if let (Rec::Event { start: Some(a), .. }, Rec::Event { start: Some(b), .. }) = (w, s) {
                    prop_assert_eq!(a, b);
                }
                let strip = |r: &Rec| match r {
                    Rec::Event { event, data, end, .. } => Rec::Event {
                        event: event.clone(), data: data.clone(), start: None, end: *end,
                    },
                    other => other.clone(),
                };
                prop_assert_eq!(strip(w), strip(s));
            }
        }
    }
}
