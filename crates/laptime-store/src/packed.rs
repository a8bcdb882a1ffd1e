//! The packed part of a stored request: every field no query filters, groups or sorts on, in
//! one compact binary value instead of a column each. A PostgreSQL row pays a length byte or
//! eight aligned bytes per column, and the attempts took a JSON array of about 70 bytes; most
//! of these fields are small numbers or absent, which this writes as one presence bit each and
//! a varint: on the load of `usage_load`, PostgreSQL's row went from 543 to 323 bytes and
//! SQLite's from 409 to 317.
//!
//! Written by hand: the layout is the store's own (no serde format gives absent-as-one-bit and
//! varints without field names), and it is a few dozen lines each way.
//!
//! Layout: a version byte, a varint whose bit *i* says field *i* is present (a flag field is
//! its bit alone), then each present field in order. Numbers are LEB128 varints, floats
//! little-endian `f64`, texts a varint length and UTF-8, closed sets their stored name (as the
//! columns held them), a trace id of 32 hex digits its 16 bytes. Marks are written as their
//! distance from the mark written before them (zigzag), since they follow each other closely.
//! Attempts are a count, then per attempt its own presence varint and fields; see
//! [`encode_attempt`] for what an attempt shares with its record.
//! [`encode`] and [`decode`] take the fields in the same order, which gives each its bit.

use std::time::Duration;

use laptime_core::cost::Cost;
use laptime_core::endpoint::Endpoint;
use laptime_core::limit::Limit;
use laptime_core::slow::{Classification, Flag};
use laptime_core::timeline::{
    Attempt, AttemptRole, ConnectionMarks, DeadlineKind, ErrorClass, Exchange, Hedge,
    InBandCarrier, Marks, Outcome, RequestRecord, RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::varint::{self, put as put_varint, unzigzag, zigzag, VarintError};
use laptime_core::Dialect;

use crate::{Result, StoreError};

/// The layout's version byte.
const VERSION: u8 = 1;

/// A field set's values, and which are present.
struct Writer {
    bits: u64,
    next: u32,
    body: Vec<u8>,
    /// The last mark written (µs), which the next is written from.
    mark: u64,
}

impl Default for Writer {
    /// Room for a typical record's fields at once (73–86 bytes, measured): growing from empty
    /// reallocated the body four times per record on the recorder thread.
    fn default() -> Writer {
        Writer {
            bits: 0,
            next: 0,
            body: Vec::with_capacity(128),
            mark: 0,
        }
    }
}

impl Writer {
    /// Takes the next field's bit, set when `present`.
    fn field(&mut self, present: bool) -> bool {
        if present {
            // Fewer than 64 fields per set (45 for a record), which the round trip tests.
            self.bits |= 1_u64.checked_shl(self.next).unwrap_or(0);
        }
        self.next += 1;
        present
    }

    fn flag(&mut self, v: bool) {
        self.field(v);
    }

    fn uint(&mut self, v: Option<u64>) {
        if self.field(v.is_some()) {
            put_varint(&mut self.body, v.unwrap_or_default());
        }
    }

    /// A count: absent when zero.
    fn count(&mut self, v: u32) {
        self.uint(Some(u64::from(v)).filter(|v| *v > 0));
    }

    /// A mark, as its distance from the last one written (marks mostly follow each other by
    /// less than a second: one to three bytes instead of three or four).
    fn mark(&mut self, v: Option<Duration>) {
        let v = v.map(micros);
        if self.field(v.is_some()) {
            let v = v.unwrap_or_default();
            put_varint(&mut self.body, zigzag(v.wrapping_sub(self.mark) as i64));
            self.mark = v;
        }
    }

    fn text(&mut self, v: Option<&str>) {
        if self.field(v.is_some()) {
            put_bytes(&mut self.body, v.unwrap_or_default().as_bytes());
        }
    }

    fn float(&mut self, v: Option<f64>) {
        if self.field(v.is_some()) {
            self.body
                .extend_from_slice(&v.unwrap_or_default().to_le_bytes());
        }
    }

    fn raw(&mut self, v: Option<&[u8]>) {
        if self.field(v.is_some()) {
            self.body.extend_from_slice(v.unwrap_or_default());
        }
    }

    fn finish(self, out: &mut Vec<u8>) {
        put_varint(out, self.bits);
        out.extend_from_slice(&self.body);
    }
}

/// The packed fields of `r`, as rows were written before the stores kept the key id and the
/// instance as codes (SQLite before v19, PostgreSQL before v13); tests write such rows.
#[cfg(test)]
pub(crate) fn encode(r: &RequestRecord) -> Vec<u8> {
    encode_fields(r, Keep::All)
}

/// The packed fields of `r` but its key id and instance, which both stores' rows keep as codes
/// of a names table (they repeat in every request of a key or an instance); they read back as
/// absent here.
pub(crate) fn encode_without_key_and_instance(r: &RequestRecord) -> Vec<u8> {
    encode_fields(r, Keep::AllButKeyAndInstance)
}

/// Which fields [`encode_fields`] writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    All,
    AllButKeyAndInstance,
}

fn encode_fields(r: &RequestRecord, keep: Keep) -> Vec<u8> {
    let mut w = Writer::default();
    let m = &r.marks;
    let t = &r.tokens;
    w.text(r.upstream_dialect.map(Dialect::as_str));
    w.text(r.timeout_kind.map(DeadlineKind::as_str));
    w.text(r.error_class.map(ErrorClass::as_str));
    if w.field(!r.flags.is_empty()) {
        put_varint(&mut w.body, r.flags.len() as u64);
        for f in &r.flags {
            put_bytes(&mut w.body, f.as_str().as_bytes());
        }
    }
    for mark in [
        m.auth,
        m.admission,
        m.body_read,
        m.distribution,
        m.upstream_start,
        m.upstream_headers,
        m.first_byte,
        m.first_event,
        m.first_effective,
        m.first_visible,
        m.last_effective,
        m.upstream_done,
        m.handler_done,
    ] {
        w.mark(mark);
    }
    for tokens in [
        t.output,
        t.cache_read,
        t.cache_write,
        t.cache_write_1h,
        t.reasoning,
        t.estimated_output,
    ] {
        w.uint(tokens);
    }
    w.count(r.event_count);
    w.count(r.text_delta_count);
    w.count(r.failover_count);
    w.uint(r.channel_inflight.map(u64::from));
    w.flag(r.cached);
    w.text(
        Some(r.hedge)
            .filter(|h| *h != Hedge::None)
            .map(Hedge::as_str),
    );
    w.text(r.shape.tool_choice.as_deref());
    w.text(r.shape.response_format.as_deref());
    w.float(r.shape.temperature);
    w.float(r.shape.top_p);
    let trace = r.trace_id.as_deref();
    let trace_bytes = trace.and_then(trace_bytes);
    w.raw(trace_bytes.as_ref().map(|b| b.as_slice()));
    w.text(trace.filter(|_| trace_bytes.is_none()));
    let ids = keep == Keep::All;
    w.text(r.instance.as_deref().filter(|_| ids));
    w.text(r.key_id.as_deref().filter(|_| ids));
    w.uint(r.cost.map(|c| c.nano_usd));
    w.flag(r.cost.is_some_and(|c| c.estimated));
    w.text(r.refused_by.map(Limit::as_str));
    if w.field(!r.attempts.is_empty()) {
        put_varint(&mut w.body, r.attempts.len() as u64);
        for a in &r.attempts {
            encode_attempt(a, r, &mut w.body);
        }
    }
    w.uint(r.exchange.bytes_in);
    w.uint(r.exchange.bytes_out);
    w.uint(r.exchange.key_index.map(u64::from));
    w.text(r.in_band.map(InBandCarrier::as_str));
    let mut out = Vec::with_capacity(2 + 10 + w.body.len());
    out.push(VERSION);
    w.finish(&mut out);
    out
}

/// An attempt. Its role is left out when it is the primary, its channel when it is the
/// record's, and its four marks when they are the record's upstream marks (all three so for
/// the one attempt of most requests); its other marks are written from its start.
fn encode_attempt(a: &Attempt, r: &RequestRecord, out: &mut Vec<u8>) {
    let mut w = Writer::default();
    w.flag(a.won);
    w.text(
        Some(a.role)
            .filter(|r| *r != AttemptRole::Primary)
            .map(AttemptRole::as_str),
    );
    w.text(Some(a.channel.as_str()).filter(|c| r.channel.as_deref() != Some(c)));
    w.uint(a.status.map(u64::from));
    w.text(a.error_class.map(ErrorClass::as_str));
    let m = &r.marks;
    let marks = [a.start, a.headers, a.first_byte, a.end];
    if !w.field(
        marks
            == [
                m.upstream_start,
                m.upstream_headers,
                m.first_byte,
                m.upstream_done,
            ],
    ) {
        for mark in marks {
            w.mark(mark);
        }
    }
    w.mark = a.start.map_or(0, micros);
    let c = &a.connection;
    for mark in [c.connected, c.tunnel, c.tls] {
        w.mark(mark);
    }
    w.raw(a.span_id.as_ref().map(|s| s.as_slice()));
    w.finish(out);
}

/// A mark in whole microseconds, as the stores keep marks.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The 16 bytes of a trace id written as 32 lowercase hex digits (as the gateway makes them),
/// so that it reads back as the same text.
fn trace_bytes(s: &str) -> Option<[u8; 16]> {
    let lower = s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let mut id = [0_u8; 16];
    (lower && hex::decode_to_slice(s, &mut id).is_ok()).then_some(id)
}

/// Reads a field set as [`Writer`] wrote it.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    bits: u64,
    next: u32,
    /// As [`Writer::mark`].
    mark: u64,
}

fn corrupt(why: &str) -> StoreError {
    StoreError::Corrupt(format!("packed request fields: {why}"))
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Result<Reader<'a>> {
        let mut r = Reader {
            b,
            pos: 0,
            bits: 0,
            next: 0,
            mark: 0,
        };
        r.bits = r.varint()?;
        Ok(r)
    }

    /// Whether the next field is present.
    fn field(&mut self) -> bool {
        let present = self.bits & 1_u64.checked_shl(self.next).unwrap_or(0) != 0;
        self.next += 1;
        present
    }

    fn varint(&mut self) -> Result<u64> {
        varint::read(self.b, &mut self.pos).map_err(|e| match e {
            VarintError::Truncated => corrupt("truncated"),
            VarintError::TooLong => corrupt("varint too long"),
        })
    }

    fn bytes(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.b.len())
            .ok_or_else(|| corrupt("truncated"))?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn str(&mut self) -> Result<&'a str> {
        let len = usize::try_from(self.varint()?).map_err(|_| corrupt("length"))?;
        std::str::from_utf8(self.bytes(len)?).map_err(|_| corrupt("text is not UTF-8"))
    }

    fn flag(&mut self) -> bool {
        self.field()
    }

    fn uint(&mut self) -> Result<Option<u64>> {
        if self.field() {
            return self.varint().map(Some);
        }
        Ok(None)
    }

    fn count(&mut self) -> Result<u32> {
        let v = self.uint()?.unwrap_or(0);
        u32::try_from(v).map_err(|_| corrupt("count out of range"))
    }

    fn small(&mut self) -> Result<Option<u32>> {
        match self.uint()? {
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| corrupt("value out of range")),
            None => Ok(None),
        }
    }

    fn mark(&mut self) -> Result<Option<Duration>> {
        let Some(delta) = self.uint()? else {
            return Ok(None);
        };
        self.mark = self.mark.wrapping_add(unzigzag(delta) as u64);
        Ok(Some(Duration::from_micros(self.mark)))
    }

    fn text(&mut self) -> Result<Option<&'a str>> {
        if self.field() {
            return self.str().map(Some);
        }
        Ok(None)
    }

    fn owned(&mut self) -> Result<Option<String>> {
        Ok(self.text()?.map(str::to_string))
    }

    /// A closed set's value, by its stored name.
    fn named<T>(&mut self, what: &str, parse: fn(&str) -> Option<T>) -> Result<Option<T>> {
        match self.text()? {
            Some(s) => parse(s)
                .map(Some)
                .ok_or_else(|| corrupt(&format!("unknown {what} {s:?}"))),
            None => Ok(None),
        }
    }

    fn float(&mut self) -> Result<Option<f64>> {
        if !self.field() {
            return Ok(None);
        }
        let mut a = [0_u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(Some(f64::from_le_bytes(a)))
    }

    fn raw<const N: usize>(&mut self) -> Result<Option<[u8; N]>> {
        if !self.field() {
            return Ok(None);
        }
        let mut a = [0_u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(Some(a))
    }

    /// A list's length, bounded by the bytes left (each element takes at least one).
    fn len(&mut self) -> Result<usize> {
        let n = self.varint()?;
        if n > (self.b.len() - self.pos) as u64 {
            return Err(corrupt("list longer than the data"));
        }
        Ok(n as usize)
    }
}

/// The fields a request's row keeps in columns: its identity and what queries filter, group or
/// sort on (see [`crate::usage::push_filter`]). Both stores read them from their row.
pub(crate) struct Columns {
    pub request_id: String,
    pub created_at_us: i64,
    pub workspace_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    pub dialect: Dialect,
    pub stream: bool,
    pub status: u16,
    pub outcome: Outcome,
    pub classification: Classification,
    pub endpoint: Endpoint,
    pub input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub reasoning_effort: Option<String>,
    pub tool_count: Option<u32>,
    pub region: Option<String>,
}

/// The record of a row: its columns `c` and its packed fields `packed`.
pub(crate) fn record(c: Columns, packed: &[u8]) -> Result<RequestRecord> {
    let mut r = RequestRecord {
        request_id: c.request_id,
        workspace_id: c.workspace_id,
        key_id: None,
        created_at_us: c.created_at_us,
        model: c.model,
        provider: c.provider,
        channel: c.channel,
        group: c.group,
        dialect: c.dialect,
        upstream_dialect: None,
        stream: c.stream,
        status: c.status,
        outcome: c.outcome,
        timeout_kind: None,
        error_class: None,
        classification: c.classification,
        flags: Vec::new(),
        marks: Marks::default(),
        tokens: Tokens {
            input: c.input_tokens,
            ..Tokens::default()
        },
        event_count: 0,
        text_delta_count: 0,
        channel_inflight: None,
        attempts: Vec::new(),
        hedge: Hedge::None,
        failover_count: 0,
        cached: false,
        shape: RequestShape {
            max_output_tokens: c.max_output_tokens,
            reasoning_effort: c.reasoning_effort,
            tool_count: c.tool_count,
            ..RequestShape::default()
        },
        region: c.region,
        instance: None,
        trace_id: None,
        cost: None,
        refused_by: None,
        exchange: Exchange {
            endpoint: c.endpoint,
            ..Exchange::default()
        },
        in_band: None,
    };
    decode(packed, &mut r)?;
    Ok(r)
}

/// Sets the packed fields of `r` from `b`, as [`encode`] wrote them; the other fields of `r`
/// (its columns) are left as they are.
fn decode(b: &[u8], r: &mut RequestRecord) -> Result<()> {
    let Some((&version, b)) = b.split_first() else {
        return Err(corrupt("empty"));
    };
    if version != VERSION {
        return Err(corrupt(&format!("unknown version {version}")));
    }
    let mut d = Reader::new(b)?;
    r.upstream_dialect = d.named("dialect", Dialect::parse)?;
    r.timeout_kind = d.named("timeout kind", DeadlineKind::parse)?;
    r.error_class = d.named("error class", ErrorClass::parse)?;
    r.flags = Vec::new();
    if d.field() {
        for _ in 0..d.len()? {
            let s = d.str()?;
            r.flags
                .push(Flag::parse(s).ok_or_else(|| corrupt(&format!("unknown flag {s:?}")))?);
        }
    }
    let m = &mut r.marks;
    for mark in [
        &mut m.auth,
        &mut m.admission,
        &mut m.body_read,
        &mut m.distribution,
        &mut m.upstream_start,
        &mut m.upstream_headers,
        &mut m.first_byte,
        &mut m.first_event,
        &mut m.first_effective,
        &mut m.first_visible,
        &mut m.last_effective,
        &mut m.upstream_done,
        &mut m.handler_done,
    ] {
        *mark = d.mark()?;
    }
    let t = &mut r.tokens;
    for tokens in [
        &mut t.output,
        &mut t.cache_read,
        &mut t.cache_write,
        &mut t.cache_write_1h,
        &mut t.reasoning,
        &mut t.estimated_output,
    ] {
        *tokens = d.uint()?;
    }
    r.event_count = d.count()?;
    r.text_delta_count = d.count()?;
    r.failover_count = d.count()?;
    r.channel_inflight = d.small()?;
    r.cached = d.flag();
    r.hedge = d.named("hedge", Hedge::parse)?.unwrap_or(Hedge::None);
    r.shape.tool_choice = d.owned()?;
    r.shape.response_format = d.owned()?;
    r.shape.temperature = d.float()?;
    r.shape.top_p = d.float()?;
    let trace_bytes = d.raw::<16>()?;
    let trace_text = d.owned()?;
    r.trace_id = trace_bytes.map(hex::encode).or(trace_text);
    r.instance = d.owned()?;
    r.key_id = d.owned()?;
    let cost = d.uint()?;
    let estimated = d.flag();
    r.cost = cost.map(|nano_usd| Cost {
        nano_usd,
        estimated,
    });
    r.refused_by = d.named("limit", Limit::parse)?;
    r.attempts = Vec::new();
    if d.field() {
        for _ in 0..d.len()? {
            let a = decode_attempt(&mut d, r)?;
            r.attempts.push(a);
        }
    }
    r.exchange.bytes_in = d.uint()?;
    r.exchange.bytes_out = d.uint()?;
    r.exchange.key_index = d.small()?;
    r.in_band = d.named("in-band carrier", InBandCarrier::parse)?;
    if d.pos != d.b.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(())
}

/// One attempt of `r` (whose channel and marks are read), reading on from `d`.
fn decode_attempt(d: &mut Reader<'_>, r: &RequestRecord) -> Result<Attempt> {
    let mut a = Reader::new(&d.b[d.pos..])?;
    let won = a.flag();
    let role = a
        .named("attempt role", AttemptRole::parse)?
        .unwrap_or(AttemptRole::Primary);
    let channel = match a.owned()? {
        Some(c) => c,
        None => r.channel.clone().ok_or_else(|| corrupt("no channel"))?,
    };
    let status = match a.uint()? {
        Some(s) => Some(u16::try_from(s).map_err(|_| corrupt("status out of range"))?),
        None => None,
    };
    let error_class = a.named("error class", ErrorClass::parse)?;
    let m = &r.marks;
    let [start, headers, first_byte, end] = if a.field() {
        [
            m.upstream_start,
            m.upstream_headers,
            m.first_byte,
            m.upstream_done,
        ]
    } else {
        [a.mark()?, a.mark()?, a.mark()?, a.mark()?]
    };
    a.mark = start.map_or(0, micros);
    let connection = ConnectionMarks {
        connected: a.mark()?,
        tunnel: a.mark()?,
        tls: a.mark()?,
    };
    let attempt = Attempt {
        channel,
        role,
        won,
        status,
        error_class,
        start,
        headers,
        first_byte,
        end,
        connection,
        span_id: a.raw::<8>()?,
    };
    d.pos += a.pos;
    Ok(attempt)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

#[cfg(test)]
pub(crate) mod tests {
    use laptime_core::slow::SlowStage;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn us(v: u64) -> Option<Duration> {
        Some(Duration::from_micros(v))
    }

    /// A record with every field set, each to a value of its own.
    pub(crate) fn full() -> RequestRecord {
        let attempt = |channel: &str, role, won, base: u64| Attempt {
            channel: channel.into(),
            role,
            won,
            status: Some(if won { 200 } else { 503 }),
            error_class: (!won).then_some(ErrorClass::UpstreamStatus5xx),
            start: us(base),
            headers: us(base + 1),
            first_byte: us(base + 2),
            end: us(base + 3),
            connection: ConnectionMarks {
                connected: us(base + 4),
                tunnel: us(base + 5),
                tls: us(base + 6),
            },
            span_id: Some([1, 2, 3, 4, 5, 6, 7, u8::try_from(base % 256).unwrap()]),
        };
        RequestRecord {
            request_id: "req_0123".into(),
            workspace_id: Some("ws".into()),
            key_id: Some("key_1".into()),
            created_at_us: 1_700_000_000_000_000,
            model: Some("m".into()),
            provider: Some("p".into()),
            channel: Some("c".into()),
            group: Some("g".into()),
            dialect: Dialect::Chat,
            upstream_dialect: Some(Dialect::Messages),
            stream: true,
            status: 504,
            outcome: Outcome::Timeout,
            timeout_kind: Some(DeadlineKind::FirstEvent),
            error_class: Some(ErrorClass::ConnectTimeout),
            classification: Classification::Slow(SlowStage::FirstEventSlow),
            flags: vec![
                Flag::Slow(SlowStage::VisibleTextLate),
                Flag::NoTerminalSentinel,
                Flag::OverBudget,
            ],
            marks: Marks {
                auth: us(11),
                admission: us(12),
                body_read: us(13),
                distribution: us(14),
                upstream_start: us(15),
                upstream_headers: us(16),
                first_byte: us(17),
                first_event: us(18),
                first_effective: us(19),
                first_visible: us(20),
                last_effective: us(21),
                upstream_done: us(22),
                handler_done: Some(Duration::from_secs(7 * 86_400)),
            },
            tokens: Tokens {
                input: Some(31),
                output: Some(32),
                cache_read: Some(33),
                cache_write: Some(34),
                cache_write_1h: Some(35),
                reasoning: Some(36),
                estimated_output: Some(u64::MAX),
            },
            event_count: 41,
            text_delta_count: 42,
            channel_inflight: Some(43),
            // Every role; the last on the record's channel.
            attempts: vec![
                attempt("c-backup", AttemptRole::Primary, false, 100),
                attempt("c-hedge", AttemptRole::Hedge, false, 150),
                attempt("c-third", AttemptRole::Continuation, false, 170),
                attempt("c", AttemptRole::Failover, true, 200),
            ],
            hedge: Hedge::Hedge,
            failover_count: 1,
            cached: true,
            shape: RequestShape {
                max_output_tokens: Some(51),
                reasoning_effort: Some("high".into()),
                tool_count: Some(52),
                tool_choice: Some("auto".into()),
                response_format: Some("json_schema".into()),
                temperature: Some(0.7),
                top_p: Some(-0.0),
            },
            region: Some("eu".into()),
            instance: Some("gw-a:8080".into()),
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            cost: Some(Cost {
                nano_usd: 61,
                estimated: true,
            }),
            refused_by: Some(Limit::ALL[3]),
            exchange: Exchange {
                endpoint: Endpoint::Embeddings,
                bytes_in: Some(71),
                bytes_out: Some(72),
                key_index: Some(73),
            },
            in_band: Some(InBandCarrier::Trailers),
        }
    }

    /// `r` with every packed field at the value [`decode`] must overwrite: unlike `r`'s, and
    /// unlike what an absent field decodes as, so that a field decode leaves alone shows.
    fn scrambled(r: &RequestRecord) -> RequestRecord {
        let mut s = full();
        s.request_id.clone_from(&r.request_id);
        s.created_at_us = r.created_at_us;
        s.workspace_id.clone_from(&r.workspace_id);
        s.model.clone_from(&r.model);
        s.provider.clone_from(&r.provider);
        s.channel.clone_from(&r.channel);
        s.group.clone_from(&r.group);
        s.dialect = r.dialect;
        s.stream = r.stream;
        s.status = r.status;
        s.outcome = r.outcome;
        s.classification = r.classification;
        s.exchange.endpoint = r.exchange.endpoint;
        s.tokens.input = r.tokens.input;
        s.shape.max_output_tokens = r.shape.max_output_tokens;
        s.shape
            .reasoning_effort
            .clone_from(&r.shape.reasoning_effort);
        s.shape.tool_count = r.shape.tool_count;
        s.region.clone_from(&r.region);
        s.trace_id = Some("scrambled".into());
        s.cost = Some(Cost {
            nano_usd: 9,
            estimated: false,
        });
        s
    }

    fn round_trip(r: &RequestRecord) -> RequestRecord {
        let mut back = scrambled(r);
        decode(&encode(r), &mut back).unwrap();
        back
    }

    /// SQLite's packed value leaves the key id and the instance to its columns: they decode as
    /// absent, and every other field as written.
    #[test]
    fn the_value_without_key_and_instance_decodes_them_absent_and_the_rest_as_written() {
        let r = full();
        assert!(r.key_id.is_some() && r.instance.is_some());
        let apart = encode_without_key_and_instance(&r);
        assert!(apart.len() < encode(&r).len());
        let mut back = scrambled(&r);
        decode(&apart, &mut back).unwrap();
        assert_eq!((back.key_id.take(), back.instance.take()), (None, None));
        let want = RequestRecord {
            key_id: None,
            instance: None,
            ..r
        };
        assert_eq!(back, want);
    }

    /// A record with every optional field absent.
    pub(crate) fn sparse() -> RequestRecord {
        RequestRecord {
            request_id: "req_1".into(),
            workspace_id: None,
            key_id: None,
            created_at_us: 0,
            model: None,
            provider: None,
            channel: None,
            group: None,
            dialect: Dialect::Gemini,
            upstream_dialect: None,
            stream: false,
            status: 401,
            outcome: Outcome::Rejected,
            timeout_kind: None,
            error_class: None,
            classification: Classification::Failed,
            flags: Vec::new(),
            marks: Marks::default(),
            tokens: Tokens::default(),
            event_count: 0,
            text_delta_count: 0,
            channel_inflight: None,
            attempts: Vec::new(),
            hedge: Hedge::None,
            failover_count: 0,
            cached: false,
            shape: RequestShape::default(),
            region: None,
            instance: None,
            trace_id: None,
            cost: None,
            refused_by: None,
            exchange: Exchange::default(),
            in_band: None,
        }
    }

    #[test]
    fn every_field_reads_back_as_written() {
        let r = full();
        assert_eq!(round_trip(&r), r);
        let mut cheap = r.clone();
        cheap.cost = Some(Cost {
            nano_usd: 0,
            estimated: false,
        });
        cheap.hedge = Hedge::Primary;
        cheap.shape.temperature = Some(f64::MAX);
        assert_eq!(round_trip(&cheap), cheap);
    }

    #[test]
    fn absent_fields_read_back_absent_and_cost_a_bit_each() {
        let r = sparse();
        assert_eq!(round_trip(&r), r);
        // The version byte and a presence varint with no bit set.
        assert_eq!(encode(&r), [VERSION, 0]);
        // Zero counts and an empty attempt list are absent too.
        let mut with_attempt = r.clone();
        with_attempt.attempts.push(Attempt {
            channel: String::new(),
            role: AttemptRole::Hedge,
            won: false,
            status: None,
            error_class: None,
            start: None,
            headers: None,
            first_byte: None,
            end: None,
            connection: ConnectionMarks::default(),
            span_id: None,
        });
        assert_eq!(round_trip(&with_attempt), with_attempt);
    }

    #[test]
    fn a_trace_id_that_is_not_lowercase_hex_reads_back_as_its_text() {
        for trace in [
            "0AF7651916CD43DD8448EB211C80319C",
            "0af7651916cd43dd8448eb211c80319",
            "0af7651916cd43dd8448eb211c80319cc",
            "",
            "trace é",
        ] {
            let mut r = sparse();
            r.trace_id = Some(trace.into());
            assert_eq!(round_trip(&r).trace_id.as_deref(), Some(trace));
        }
        let mut r = sparse();
        r.trace_id = full().trace_id;
        // The version, a presence varint up to bit 33, and 16 bytes instead of 33.
        assert_eq!(encode(&r).len(), 1 + 5 + 16);
    }

    #[test]
    fn a_typical_streamed_request_packs_into_under_a_hundred_bytes() {
        let mut r = full();
        r.flags.clear();
        r.attempts.drain(..3);
        r.attempts[0].role = AttemptRole::Primary;
        r.attempts[0].connection = ConnectionMarks::default();
        r.attempts[0].span_id = None;
        r.hedge = Hedge::None;
        r.shape.tool_choice = None;
        r.shape.response_format = None;
        r.shape.top_p = None;
        r.refused_by = None;
        r.timeout_kind = None;
        r.error_class = None;
        r.in_band = None;
        r.tokens.estimated_output = None;
        // Marks of seconds, as a real stream has.
        for (k, mark) in [&mut r.marks.first_byte, &mut r.marks.handler_done]
            .into_iter()
            .enumerate()
        {
            *mark = Some(Duration::from_micros(2_500_000 + k as u64));
        }
        // Its one attempt on the record's channel, with the record's upstream marks.
        let m = r.marks;
        let a = &mut r.attempts[0];
        (a.start, a.headers, a.first_byte, a.end) = (
            m.upstream_start,
            m.upstream_headers,
            m.first_byte,
            m.upstream_done,
        );
        assert_eq!(round_trip(&r), r);
        let n = encode(&r).len();
        assert!((50..100).contains(&n), "{n} bytes");
    }

    #[test]
    fn damaged_values_are_refused_not_misread() {
        let good = encode(&full());
        let mut blank = sparse();
        for end in 0..good.len() {
            assert!(decode(&good[..end], &mut blank).is_err(), "prefix of {end}");
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer, &mut blank).is_err());
        let mut newer = good.clone();
        newer[0] = VERSION + 1;
        assert!(decode(&newer, &mut blank).is_err());
        // A name that is not one of its set's.
        let mut r = sparse();
        r.upstream_dialect = Some(Dialect::Chat);
        let mut named = encode(&r);
        let at = named.len() - 1;
        named[at] = b'?';
        assert!(decode(&named, &mut blank).is_err());
        // Random bytes (and random bytes after a good head) decode or fail, never panic.
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let len = rng.gen_range(0..80);
            let mut b: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if rng.gen_bool(0.5) {
                b.insert(0, VERSION);
            }
            let _ = decode(&b, &mut blank);
        }
    }
}
