//! Request records on PostgreSQL: written a batch per transaction, folded into the shared
//! rollups in the same transaction; read back exactly as written. A batch of new requests goes
//! as one binary `COPY` (`super::copy`); one holding a stored request goes as column arrays (one
//! `INSERT … SELECT FROM UNNEST … ON CONFLICT DO NOTHING`, whatever its size) and replaces it.
//!
//! Rows live in daily partitions of `created_at_us` (UTC days), made on first use under an
//! advisory lock, so that retention drops whole days instead of deleting rows one by one. A
//! request's id and creation time never change, so `(request_id, created_at_us)` identifies it.
//!
//! Rollups are folded in by [`super::rollups`].

use std::collections::{HashMap, HashSet};

use deadpool_postgres::{GenericClient, Transaction};
use laptime_core::cost::Cost;
use laptime_core::endpoint::Endpoint;
use laptime_core::limit::{Limit, Zone};
use laptime_core::slow::Classification;
use laptime_core::timeline::{
    DeadlineKind, ErrorClass, Exchange, Hedge, InBandCarrier, Marks, Outcome, RequestRecord,
    RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};
use tokio_postgres::Row;

use super::names::{self, NameSets};
use super::rollups::{key_ids, merge_into, rebuild_keys, KeyIds};
use crate::corrupt;
use crate::records::{dur, tok, untok};
use crate::rollups::{aggregate, floor_minute, RollupKey};
use crate::{Result, StoreError};

/// One UTC day, in microseconds.
pub const DAY_US: i64 = 86_400_000_000;

/// The request columns [`from_row`] reads, in its order: every column rows have had, then the
/// packed fields. Rows written before schema v9 hold each field in its column and no packed
/// value; newer rows hold only [`COLUMNS`], and NULL in the others (a bit of the row's null
/// map each).
pub(super) const READ_COLUMNS: [&str; 63] = [
    "request_id",
    "created_at_us",
    "workspace_id",
    "key_id",
    "model",
    "provider",
    "channel",
    "grp",
    "dialect",
    "upstream_dialect",
    "stream",
    "status",
    "outcome",
    "timeout_kind",
    "error_class",
    "classification",
    "flags",
    "auth_us",
    "body_read_us",
    "distribution_us",
    "upstream_start_us",
    "upstream_headers_us",
    "first_byte_us",
    "first_event_us",
    "first_effective_us",
    "first_visible_us",
    "last_effective_us",
    "upstream_done_us",
    "handler_done_us",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "event_count",
    "text_delta_count",
    "channel_inflight",
    "hedge",
    "failover_count",
    "cached",
    "max_output_tokens",
    "reasoning_effort",
    "tool_count",
    "tool_choice",
    "response_format",
    "temperature",
    "top_p",
    "region",
    "trace_id",
    "instance",
    "cache_write_1h_tokens",
    "cost_nano_usd",
    "cost_estimated",
    "admission_us",
    "refused_by",
    "attempts",
    "endpoint",
    "bytes_in",
    "bytes_out",
    "key_index",
    "estimated_output_tokens",
    "in_band",
    "packed",
];

/// The position of the packed fields in [`READ_COLUMNS`].
const PACKED: usize = 62;

/// The columns a row is written with, in the order [`values`] gives them: those a query
/// filters, groups or sorts on (see [`crate::usage::push_filter`]) and the identity, then the
/// other fields packed into one value ([`crate::packed`]).
pub(super) const COLUMNS: [&str; 22] = [
    "request_id",
    "created_at_us",
    "workspace_id",
    "model",
    "provider",
    "channel",
    "grp",
    "dialect",
    "stream",
    "status",
    "outcome",
    "classification",
    "endpoint",
    "input_tokens",
    "max_output_tokens",
    "reasoning_effort",
    "tool_count",
    "region",
    "packed",
    "name_set",
    "key_code",
    "instance_code",
];

/// `SELECT <every column> FROM requests`: see [`select_list`].
pub(crate) fn select() -> String {
    format!("SELECT {} FROM requests", select_list())
}

/// Every column of a row (the workspace as its text), then the names of the set it refers to
/// and the texts of its key and instance codes ([`super::names`], read by [`from_row`]), of a
/// table named `requests`: the rows, or the rows of blocks ([`super::blocks::source`]).
pub(crate) fn select_list() -> String {
    let columns: Vec<String> = READ_COLUMNS
        .iter()
        .map(|c| match *c {
            "workspace_id" => names::text_of(c),
            c => c.to_string(),
        })
        .collect();
    format!(
        "{}, {}, {}, {}",
        columns.join(", "),
        names::SET_NAMES,
        names::text_of("key_code"),
        names::text_of("instance_code"),
    )
}

/// The position of the set's names in the rows of [`select`], then of the key's and the
/// instance's texts.
const SET_NAMES: usize = READ_COLUMNS.len();
const KEY_CODE: usize = SET_NAMES + 1;
const INSTANCE_CODE: usize = SET_NAMES + 2;
/// The position of `seq` in a row of a query that reads it after [`select_list`].
pub(super) const SEQ: usize = SET_NAMES + 3;

/// One value of a row, typed as its column; text borrowed from the record where it can be.
pub(super) enum Val<'a> {
    Str(Option<&'a str>),
    Int(Option<i64>),
    Int4(Option<i32>),
    Int2(Option<i16>),
    Bool(Option<bool>),
    Bytes(Option<Vec<u8>>),
}

impl Val<'_> {
    /// The column's type, for a binary COPY's header.
    pub(super) fn pg_type(&self) -> Type {
        match self {
            Val::Str(_) => Type::TEXT,
            Val::Int(_) => Type::INT8,
            Val::Int4(_) => Type::INT4,
            Val::Int2(_) => Type::INT2,
            Val::Bool(_) => Type::BOOL,
            Val::Bytes(_) => Type::BYTEA,
        }
    }
}

/// A value encodes as the one it holds, which checks the column's type itself.
impl ToSql for Val<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Str(v) => v.to_sql_checked(ty, out),
            Val::Int(v) => v.to_sql_checked(ty, out),
            Val::Int4(v) => v.to_sql_checked(ty, out),
            Val::Int2(v) => v.to_sql_checked(ty, out),
            Val::Bool(v) => v.to_sql_checked(ty, out),
            Val::Bytes(v) => v.to_sql_checked(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl std::fmt::Debug for Val<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Val::Str(v) => write!(f, "{v:?}"),
            Val::Int(v) => write!(f, "{v:?}"),
            Val::Int4(v) => write!(f, "{v:?}"),
            Val::Int2(v) => write!(f, "{v:?}"),
            Val::Bool(v) => write!(f, "{v:?}"),
            Val::Bytes(v) => write!(f, "{:?}", v.as_ref().map(Vec::len)),
        }
    }
}

/// One column of a batch, as the array parameter `UNNEST` takes.
enum Col {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Int4(Vec<Option<i32>>),
    Int2(Vec<Option<i16>>),
    Bool(Vec<Option<bool>>),
    Bytes(Vec<Option<Vec<u8>>>),
}

impl Col {
    fn empty_like(v: &Val<'_>, capacity: usize) -> Col {
        match v {
            Val::Str(_) => Col::Text(Vec::with_capacity(capacity)),
            Val::Int(_) => Col::Int(Vec::with_capacity(capacity)),
            Val::Int4(_) => Col::Int4(Vec::with_capacity(capacity)),
            Val::Int2(_) => Col::Int2(Vec::with_capacity(capacity)),
            Val::Bool(_) => Col::Bool(Vec::with_capacity(capacity)),
            Val::Bytes(_) => Col::Bytes(Vec::with_capacity(capacity)),
        }
    }

    fn push(&mut self, v: Val<'_>) {
        match (self, v) {
            (Col::Text(c), Val::Str(v)) => c.push(v.map(str::to_string)),
            (Col::Int(c), Val::Int(v)) => c.push(v),
            (Col::Int4(c), Val::Int4(v)) => c.push(v),
            (Col::Int2(c), Val::Int2(v)) => c.push(v),
            (Col::Bool(c), Val::Bool(v)) => c.push(v),
            (Col::Bytes(c), Val::Bytes(v)) => c.push(v),
            // `values` gives every row the same types; a mismatch cannot be built.
            _ => {}
        }
    }

    fn array_type(&self) -> &'static str {
        match self {
            Col::Text(_) => "text[]",
            Col::Int(_) => "int8[]",
            Col::Int4(_) => "int4[]",
            Col::Int2(_) => "int2[]",
            Col::Bool(_) => "bool[]",
            Col::Bytes(_) => "bytea[]",
        }
    }

    fn param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Col::Text(c) => c,
            Col::Int(c) => c,
            Col::Int4(c) => c,
            Col::Int2(c) => c,
            Col::Bool(c) => c,
            Col::Bytes(c) => c,
        }
    }
}

fn text(v: &Option<String>) -> Val<'_> {
    Val::Str(v.as_deref())
}

/// A closed set's number ([`crate::closed`]) as its `smallint` column holds it.
fn small(n: i64) -> Val<'static> {
    Val::Int2(Some(i16::try_from(n).unwrap_or(i16::MAX)))
}

/// A record's row, in [`COLUMNS`] order: its names as text, or NULL beside the set of `sets`
/// that holds them; its workspace, key id and instance as codes of `sets`.
pub(super) fn values<'a>(r: &'a RequestRecord, sets: &NameSets) -> [Val<'a>; 22] {
    let set = sets.of_record(r);
    let [model, provider, channel, group, dialect, endpoint, region] =
        crate::names::names_of(r).map(|n| Val::Str(n.filter(|_| set.is_none())));
    [
        Val::Bytes(Some(crate::stored_id::pg_key(&r.request_id))),
        Val::Int(Some(r.created_at_us)),
        Val::Int4(sets.code(r.workspace_id.as_deref())),
        model,
        provider,
        channel,
        group,
        dialect,
        Val::Bool(Some(r.stream)),
        Val::Int4(Some(i32::from(r.status))),
        small(crate::closed::outcome_code(r.outcome)),
        small(crate::closed::classification_code(r.classification)),
        endpoint,
        Val::Int(tok(r.tokens.input)),
        Val::Int(tok(r.shape.max_output_tokens)),
        text(&r.shape.reasoning_effort),
        Val::Int(r.shape.tool_count.map(i64::from)),
        region,
        Val::Bytes(Some(crate::packed::encode_without_key_and_instance(r))),
        Val::Int4(set),
        Val::Int4(sets.code(r.key_id.as_deref())),
        Val::Int4(sets.code(r.instance.as_deref())),
    ]
}

fn parse_opt<T>(v: Option<String>, what: &str, parse: fn(&str) -> Option<T>) -> Result<Option<T>> {
    match v {
        Some(v) => parse(&v).map(Some).ok_or_else(|| corrupt(what, &v)),
        None => Ok(None),
    }
}

fn parse_req<T>(v: String, what: &str, parse: fn(&str) -> Option<T>) -> Result<T> {
    parse(&v).ok_or_else(|| corrupt(what, &v))
}

/// The request id a row holds in column `i`.
fn id_at(row: &Row, i: usize) -> Result<String> {
    let v: &[u8] = row.try_get(i)?;
    crate::stored_id::pg_id_of(v).ok_or_else(|| corrupt("request_id", &hex::encode(v)))
}

fn outcome_at(row: &Row, i: usize) -> Result<Outcome> {
    let n: i16 = row.try_get(i)?;
    crate::closed::outcome_of(i64::from(n)).ok_or_else(|| corrupt("outcome", &n.to_string()))
}

fn classification_at(row: &Row, i: usize) -> Result<Classification> {
    let n: i16 = row.try_get(i)?;
    crate::closed::classification_of(i64::from(n))
        .ok_or_else(|| corrupt("classification", &n.to_string()))
}

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

/// A row of [`select`] as the record it stores.
pub(crate) fn from_row(row: &Row) -> Result<RequestRecord> {
    match row.try_get::<_, Option<&[u8]>>(PACKED)? {
        Some(packed) => from_packed_row(row, packed),
        None => from_columns(row),
    }
}

/// A row written since schema v9: the columns of [`COLUMNS`] and the packed fields, which hold
/// the key id and instance of a row written before v13.
fn from_packed_row(row: &Row, packed: &[u8]) -> Result<RequestRecord> {
    let status: i32 = row.try_get(11)?;
    let set: Option<Vec<Option<String>>> = row.try_get(SET_NAMES)?;
    // A name is the row's, or its set's (in the order of `crate::names::COLUMNS`).
    let name = |i: usize, k: usize| -> Result<Option<String>> {
        Ok(match &set {
            Some(names) => names.get(k).cloned().flatten(),
            None => row.try_get(i)?,
        })
    };
    let required = |i: usize, k: usize, what: &str| -> Result<String> {
        name(i, k)?.ok_or_else(|| corrupt(what, "NULL"))
    };
    let columns = crate::packed::Columns {
        request_id: id_at(row, 0)?,
        created_at_us: row.try_get(1)?,
        workspace_id: row.try_get(2)?,
        model: name(4, 0)?,
        provider: name(5, 1)?,
        channel: name(6, 2)?,
        group: name(7, 3)?,
        dialect: parse_req(required(8, 4, "dialect")?, "dialect", Dialect::parse)?,
        stream: row.try_get(10)?,
        status: u16::try_from(status).map_err(|_| corrupt("status", &status.to_string()))?,
        outcome: outcome_at(row, 12)?,
        classification: classification_at(row, 15)?,
        endpoint: parse_req(required(56, 5, "endpoint")?, "endpoint", Endpoint::parse)?,
        input_tokens: untok(row.try_get(29)?),
        max_output_tokens: untok(row.try_get(40)?),
        reasoning_effort: row.try_get(41)?,
        tool_count: row.try_get::<_, Option<i64>>(42)?.map(count),
        region: name(47, 6)?,
    };
    let mut r = crate::packed::record(columns, packed)?;
    r.key_id = row.try_get::<_, Option<String>>(KEY_CODE)?.or(r.key_id);
    r.instance = row
        .try_get::<_, Option<String>>(INSTANCE_CODE)?
        .or(r.instance);
    Ok(r)
}

/// A row written before schema v9: each field in its column.
fn from_columns(row: &Row) -> Result<RequestRecord> {
    let mark = |i: usize| -> Result<Option<std::time::Duration>> { Ok(dur(row.try_get(i)?)) };
    let tokens = |i: usize| -> Result<Option<u64>> { Ok(untok(row.try_get(i)?)) };
    let flags: String = row.try_get(16)?;
    let status: i32 = row.try_get(11)?;
    let attempts: String = row.try_get(55)?;
    let cost_nano: Option<i64> = row.try_get(51)?;
    let cost_estimated: Option<bool> = row.try_get(52)?;
    Ok(RequestRecord {
        request_id: id_at(row, 0)?,
        created_at_us: row.try_get(1)?,
        workspace_id: row.try_get(2)?,
        key_id: row.try_get(3)?,
        model: row.try_get(4)?,
        provider: row.try_get(5)?,
        channel: row.try_get(6)?,
        group: row.try_get(7)?,
        dialect: parse_req(row.try_get(8)?, "dialect", Dialect::parse)?,
        upstream_dialect: parse_opt(row.try_get(9)?, "upstream_dialect", Dialect::parse)?,
        stream: row.try_get(10)?,
        status: u16::try_from(status).map_err(|_| corrupt("status", &status.to_string()))?,
        outcome: outcome_at(row, 12)?,
        timeout_kind: parse_opt(row.try_get(13)?, "timeout_kind", DeadlineKind::parse)?,
        error_class: parse_opt(row.try_get(14)?, "error_class", ErrorClass::parse)?,
        classification: classification_at(row, 15)?,
        flags: serde_json::from_str(&flags).map_err(|_| corrupt("flags", &flags))?,
        marks: Marks {
            auth: mark(17)?,
            admission: mark(53)?,
            body_read: mark(18)?,
            distribution: mark(19)?,
            upstream_start: mark(20)?,
            upstream_headers: mark(21)?,
            first_byte: mark(22)?,
            first_event: mark(23)?,
            first_effective: mark(24)?,
            first_visible: mark(25)?,
            last_effective: mark(26)?,
            upstream_done: mark(27)?,
            handler_done: mark(28)?,
        },
        tokens: Tokens {
            input: tokens(29)?,
            output: tokens(30)?,
            cache_read: tokens(31)?,
            cache_write: tokens(32)?,
            cache_write_1h: tokens(50)?,
            reasoning: tokens(33)?,
            estimated_output: tokens(60)?,
        },
        event_count: count(row.try_get(34)?),
        text_delta_count: count(row.try_get(35)?),
        channel_inflight: row.try_get::<_, Option<i64>>(36)?.map(count),
        hedge: parse_req(row.try_get(37)?, "hedge", Hedge::parse)?,
        failover_count: count(row.try_get(38)?),
        cached: row.try_get(39)?,
        shape: RequestShape {
            max_output_tokens: tokens(40)?,
            reasoning_effort: row.try_get(41)?,
            tool_count: row.try_get::<_, Option<i64>>(42)?.map(count),
            tool_choice: row.try_get(43)?,
            response_format: row.try_get(44)?,
            temperature: row.try_get(45)?,
            top_p: row.try_get(46)?,
        },
        region: row.try_get(47)?,
        trace_id: row.try_get(48)?,
        instance: row.try_get(49)?,
        cost: cost_nano.map(|n| Cost {
            nano_usd: u64::try_from(n).unwrap_or(0),
            estimated: cost_estimated.unwrap_or(false),
        }),
        refused_by: parse_opt(row.try_get(54)?, "refused_by", Limit::parse)?,
        attempts: crate::attempts::decode(&attempts)?,
        exchange: Exchange {
            endpoint: parse_req(row.try_get(56)?, "endpoint", Endpoint::parse)?,
            bytes_in: tokens(57)?,
            bytes_out: tokens(58)?,
            key_index: row
                .try_get::<_, Option<i32>>(59)?
                .map(|k| count(i64::from(k))),
        },
        in_band: parse_opt(row.try_get(61)?, "in_band", InBandCarrier::parse)?,
    })
}

/// The days (UTC, as `created_at_us / DAY_US`) whose partitions exist, as far as one writer
/// knows: a day seen once needs no second `CREATE`.
#[derive(Debug, Default)]
pub struct Partitions {
    made: HashSet<i64>,
}

impl Partitions {
    /// Forgets every day (after retention dropped some, or an insert found one missing).
    pub fn forget(&mut self) {
        self.made.clear();
    }

    /// An insert that found no partition for a row (another instance's retention dropped a
    /// day this writer had made) forgets every day, so that the retry makes it again.
    fn forget_if_missing<T>(&mut self, written: Result<T>) -> Result<T> {
        if let Err(StoreError::Postgres(e)) = &written {
            if e.code() == Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION) {
                self.forget();
            }
        }
        written
    }
}

/// The partition name of `day`: `requests_p20261201`.
pub(super) fn partition_name(day: i64) -> String {
    let date = time::OffsetDateTime::from_unix_timestamp(day.saturating_mul(86_400))
        .map(|t| t.date())
        .unwrap_or(time::Date::MIN);
    format!(
        "requests_p{:04}{:02}{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

/// The day a partition name is of, if it is one of ours.
pub(crate) fn partition_day(name: &str) -> Option<i64> {
    let digits = name.strip_prefix("requests_p")?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| digits.get(r).and_then(|d| d.parse::<i32>().ok());
    let month = time::Month::try_from(u8::try_from(n(4..6)?).ok()?).ok()?;
    let date =
        time::Date::from_calendar_date(n(0..4)?, month, u8::try_from(n(6..8)?).ok()?).ok()?;
    Some(
        date.midnight()
            .assume_utc()
            .unix_timestamp()
            .div_euclid(86_400),
    )
}

/// Makes the partitions of every day `records` fall on that `known` does not know yet.
pub async fn ensure_partitions(
    c: &mut deadpool_postgres::ClientWrapper,
    known: &mut Partitions,
    records: &[RequestRecord],
) -> Result<()> {
    let days: HashSet<i64> = records
        .iter()
        .map(|r| r.created_at_us.div_euclid(DAY_US))
        .filter(|d| !known.made.contains(d))
        .collect();
    if days.is_empty() {
        return Ok(());
    }
    let tx = c.transaction().await?;
    // Two instances making one day's partition at once would collide in the catalog.
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(hashtext('laptime partitions ' || current_schema()))",
    )
    .await?;
    for day in &days {
        let from = day.saturating_mul(DAY_US);
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF requests
             FOR VALUES FROM ({from}) TO ({})",
            partition_name(*day),
            from.saturating_add(DAY_US)
        ))
        .await?;
    }
    tx.commit().await?;
    known.made.extend(days);
    Ok(())
}

/// Inserts the rows of `records` whose `(request_id, created_at_us)` is not stored; returns
/// the ids inserted.
async fn insert_rows(
    tx: &Transaction<'_>,
    records: &[RequestRecord],
    sets: &NameSets,
) -> Result<HashSet<String>> {
    let Some(first) = records.first() else {
        return Ok(HashSet::new());
    };
    let mut cols: Vec<Col> = values(first, sets)
        .iter()
        .map(|v| Col::empty_like(v, records.len()))
        .collect();
    for r in records {
        for (col, v) in cols.iter_mut().zip(values(r, sets)) {
            col.push(v);
        }
    }
    let arrays: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| format!("${}::{}", i + 1, c.array_type()))
        .collect();
    let sql = format!(
        "INSERT INTO requests ({}) SELECT * FROM UNNEST({})
         ON CONFLICT (request_id, created_at_us) DO NOTHING RETURNING request_id",
        COLUMNS.join(", "),
        arrays.join(", ")
    );
    let params: Vec<&(dyn ToSql + Sync)> = cols.iter().map(Col::param).collect();
    let stmt = tx.prepare_cached(&sql).await?;
    let rows = tx.query(&stmt, &params).await?;
    rows.iter().map(|r| id_at(r, 0)).collect()
}

/// Writes records with their rollups in one transaction; a record whose request is stored
/// already replaces it (and the rollups both touch are rebuilt from the rows).
pub async fn insert_batch(
    c: &mut deadpool_postgres::ClientWrapper,
    known: &mut Partitions,
    records: &[RequestRecord],
    zone: &Zone,
) -> Result<()> {
    ensure_partitions(c, known, records).await?;
    let sets = NameSets::of(c, records).await?;
    // The batch's rollups, made once: their keys are the ones to find ids for.
    let delta = aggregate(records);
    let keys = KeyIds::of(&**c, delta.keys()).await?;
    let written = write_batch(c, records, &sets, &keys, delta, zone).await;
    known.forget_if_missing(written)
}

/// The fast path first ([`super::copy`]), folding `delta` (the rollups of `records`); the
/// replacing path when a request of the batch is stored already or repeats in it.
async fn write_batch(
    c: &mut deadpool_postgres::ClientWrapper,
    records: &[RequestRecord],
    sets: &NameSets,
    keys: &KeyIds,
    delta: HashMap<RollupKey, laptime_core::rollup::Rollup>,
    zone: &Zone,
) -> Result<()> {
    match super::copy::write(c, records, sets, keys, delta, zone).await? {
        super::copy::Copied::Written => Ok(()),
        super::copy::Copied::Stored => write_replacing(c, records, sets, keys, zone).await,
    }
}

/// Inserts the new requests of `records`, replaces the stored ones (rebuilding the rollups
/// both touch), and folds the rest into the rollups, in one transaction.
async fn write_replacing(
    c: &mut deadpool_postgres::ClientWrapper,
    records: &[RequestRecord],
    sets: &NameSets,
    keys: &KeyIds,
    zone: &Zone,
) -> Result<()> {
    let tx = c.transaction().await?;
    super::blocks::lock_days(&tx, records).await?;
    super::blocks::unpack_holding(&tx, records).await?;
    let (records, inserted) = dedup_and_insert(&tx, records, sets).await?;
    let mut rebuild: HashSet<RollupKey> = HashSet::new();
    let mut olds = Vec::new();
    let (fresh, taken): (Vec<&RequestRecord>, Vec<&RequestRecord>) = records
        .iter()
        .partition(|r| inserted.contains(&r.request_id));
    for r in &taken {
        let old = stored_row(&tx, &r.request_id, r.created_at_us).await?;
        rebuild.extend(old.as_ref().and_then(RollupKey::of));
        olds.extend(old);
        rebuild.extend(RollupKey::of(r));
        tx.execute(
            "DELETE FROM requests WHERE request_id = $1 AND created_at_us = $2",
            &[&crate::stored_id::pg_key(&r.request_id), &r.created_at_us],
        )
        .await?;
    }
    let replaced: Vec<RequestRecord> = taken.into_iter().cloned().collect();
    insert_rows(&tx, &replaced, sets).await?;
    let mut delta = aggregate(fresh);
    delta.retain(|k, _| !rebuild.contains(k));
    merge_into(&tx, delta, keys).await?;
    rebuild_keys(&tx, &rebuild).await?;
    super::budgets::apply(&tx, &crate::budgets::delta(&records, &olds, zone)).await?;
    tx.commit().await?;
    Ok(())
}

/// The batch with repeated ids folded (the last one wins, as consecutive SQLite inserts would
/// make it), and the ids of those now inserted.
async fn dedup_and_insert(
    tx: &Transaction<'_>,
    records: &[RequestRecord],
    sets: &NameSets,
) -> Result<(Vec<RequestRecord>, HashSet<String>)> {
    let mut last: HashMap<(&str, i64), usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        last.insert((r.request_id.as_str(), r.created_at_us), i);
    }
    let unique: Vec<RequestRecord> = if last.len() == records.len() {
        records.to_vec()
    } else {
        let mut keep: Vec<usize> = last.into_values().collect();
        keep.sort_unstable();
        keep.into_iter()
            .filter_map(|i| records.get(i).cloned())
            .collect()
    };
    let inserted = insert_rows(tx, &unique, sets).await?;
    Ok((unique, inserted))
}

/// Writes the records whose request is not stored, leaving stored ones as they are (see
/// [`crate::records::insert_absent`]); returns the ids written.
pub async fn insert_absent(
    c: &mut deadpool_postgres::ClientWrapper,
    known: &mut Partitions,
    records: &[RequestRecord],
    zone: &Zone,
) -> Result<Vec<String>> {
    ensure_partitions(c, known, records).await?;
    let sets = NameSets::of(c, records).await?;
    let keys = key_ids(&**c, records).await?;
    let written = write_absent(c, records, &sets, &keys, zone).await;
    known.forget_if_missing(written)
}

async fn write_absent(
    c: &mut deadpool_postgres::ClientWrapper,
    records: &[RequestRecord],
    sets: &NameSets,
    keys: &KeyIds,
    zone: &Zone,
) -> Result<Vec<String>> {
    let tx = c.transaction().await?;
    super::blocks::lock_days(&tx, records).await?;
    let held = super::blocks::held(&tx, records).await?;
    let mut seen = HashSet::new();
    let first: Vec<RequestRecord> = records
        .iter()
        .filter(|r| seen.insert((r.request_id.as_str(), r.created_at_us)))
        .filter(|r| !held.contains(&(crate::stored_id::pg_key(&r.request_id), r.created_at_us)))
        .cloned()
        .collect();
    let inserted = insert_rows(&tx, &first, sets).await?;
    let fresh: Vec<RequestRecord> = first
        .into_iter()
        .filter(|r| inserted.contains(&r.request_id))
        .collect();
    merge_into(&tx, aggregate(&fresh), keys).await?;
    super::budgets::apply(&tx, &crate::budgets::delta(&fresh, &[], zone)).await?;
    tx.commit().await?;
    Ok(fresh.into_iter().map(|r| r.request_id).collect())
}

async fn stored_row(
    c: &impl GenericClient,
    request_id: &str,
    created_at_us: i64,
) -> Result<Option<RequestRecord>> {
    let sql = format!("{} WHERE request_id = $1 AND created_at_us = $2", select());
    let stmt = c.prepare_cached(&sql).await?;
    let id = crate::stored_id::pg_key(request_id);
    match c.query_opt(&stmt, &[&id, &created_at_us]).await? {
        Some(row) => Ok(Some(from_row(&row)?)),
        None => Ok(None),
    }
}

/// One record of a workspace (`None` also for another workspace's id).
pub async fn get(
    c: &impl GenericClient,
    workspace_id: &str,
    request_id: &str,
) -> Result<Option<RequestRecord>> {
    let sql = format!(
        "{} WHERE request_id = $2{} ORDER BY created_at_us DESC LIMIT 1",
        select(),
        names::code_equals("workspace_id", "$1")
    );
    let stmt = c.prepare_cached(&sql).await?;
    let id = crate::stored_id::pg_key(request_id);
    let row = match c.query_opt(&stmt, &[&workspace_id, &id]).await? {
        Some(row) => Some(from_row(&row)?),
        None => None,
    };
    let block = super::blocks::get(c, workspace_id, request_id).await?;
    Ok(row.into_iter().chain(block).max_by_key(|r| r.created_at_us))
}

/// The request partitions of days, as (day, name, comment). A name is one [`partition_day`]
/// reads, so it is safe in SQL as it is.
pub(crate) async fn day_partitions(
    c: &deadpool_postgres::ClientWrapper,
) -> Result<Vec<(i64, String, Option<String>)>> {
    let rows = c
        .query(
            "SELECT child.relname::text, obj_description(child.oid, 'pg_class')
             FROM pg_inherits i
             JOIN pg_class child ON child.oid = i.inhrelid
             JOIN pg_class parent ON parent.oid = i.inhparent
             WHERE parent.relname = 'requests'
               AND parent.relnamespace = current_schema()::regnamespace",
            &[],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let name: String = row.try_get(0)?;
        if let Some(day) = partition_day(&name) {
            out.push((day, name, row.try_get(1)?));
        }
    }
    Ok(out)
}

/// Retention: drops the partitions of days wholly before `cutoff_us` with their blocks, takes a
/// block across it back into rows and deletes those before it ([`super::blocks`]), deletes the
/// older rows left in the partition holding it in transactions of at most `batch` rows, and the
/// rollups of every minute that ends at or before it (see [`super::rollups::delete_before`]);
/// returns how many records went.
pub async fn delete_older_than(
    c: &mut deadpool_postgres::ClientWrapper,
    cutoff_us: i64,
    batch: usize,
) -> Result<usize> {
    let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    let mut deleted: u64 = 0;
    for (day, name, _) in day_partitions(c).await? {
        if (day + 1).saturating_mul(DAY_US) > cutoff_us {
            continue;
        }
        // Instances run retention on their own clocks, and all at once after a fleet starts:
        // each day is counted and dropped by whichever comes first, the others find it gone.
        let tx = c.transaction().await?;
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(hashtext('laptime retention ' || current_schema()))",
        )
        .await?;
        let exists: bool = tx
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
            .await?
            .try_get(0)?;
        if exists {
            let n: i64 = tx
                .query_one(&format!("SELECT count(*) FROM {name}"), &[])
                .await?
                .try_get(0)?;
            tx.batch_execute(&format!("DROP TABLE {name}")).await?;
            let from = day.saturating_mul(DAY_US);
            let to = from.saturating_add(DAY_US);
            deleted += n.max(0) as u64 + super::blocks::delete_ending(&tx, from, to).await?;
        }
        tx.commit().await?;
    }
    let tx = c.transaction().await?;
    deleted += super::blocks::delete_before(&tx, cutoff_us).await?;
    tx.commit().await?;
    loop {
        let n = c
            .execute(
                "DELETE FROM requests WHERE (request_id, created_at_us) IN
                    (SELECT request_id, created_at_us FROM requests WHERE created_at_us < $1
                     LIMIT $2)",
                &[&cutoff_us, &batch],
            )
            .await?;
        deleted += n;
        if n == 0 {
            break;
        }
    }
    super::rollups::delete_before(c, floor_minute(cutoff_us), batch).await?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::tests::{full, sparse};
    use crate::records::{nano, us};

    /// A record's row as builds before schema v9 wrote it: every field in its column.
    fn legacy_values(r: &RequestRecord) -> Vec<Box<dyn ToSql + Sync + Send>> {
        let m = &r.marks;
        let t = &r.tokens;
        let s = |v: &Option<String>| -> Box<dyn ToSql + Sync + Send> { Box::new(v.clone()) };
        let name = |v: Option<&'static str>| -> Box<dyn ToSql + Sync + Send> { Box::new(v) };
        let int = |v: Option<i64>| -> Box<dyn ToSql + Sync + Send> { Box::new(v) };
        let count = |v: u32| int(Some(i64::from(v)));
        let flags: Vec<&str> = r.flags.iter().map(|f| f.as_str()).collect();
        vec![
            Box::new(r.request_id.clone()),
            Box::new(r.created_at_us),
            s(&r.workspace_id),
            s(&r.key_id),
            s(&r.model),
            s(&r.provider),
            s(&r.channel),
            s(&r.group),
            name(Some(r.dialect.as_str())),
            name(r.upstream_dialect.map(Dialect::as_str)),
            Box::new(r.stream),
            Box::new(i32::from(r.status)),
            name(Some(r.outcome.as_str())),
            name(r.timeout_kind.map(DeadlineKind::as_str)),
            name(r.error_class.map(ErrorClass::as_str)),
            name(Some(r.classification.as_str())),
            Box::new(serde_json::to_string(&flags).unwrap()),
            int(us(m.auth)),
            int(us(m.body_read)),
            int(us(m.distribution)),
            int(us(m.upstream_start)),
            int(us(m.upstream_headers)),
            int(us(m.first_byte)),
            int(us(m.first_event)),
            int(us(m.first_effective)),
            int(us(m.first_visible)),
            int(us(m.last_effective)),
            int(us(m.upstream_done)),
            int(us(m.handler_done)),
            int(tok(t.input)),
            int(tok(t.output)),
            int(tok(t.cache_read)),
            int(tok(t.cache_write)),
            int(tok(t.reasoning)),
            count(r.event_count),
            count(r.text_delta_count),
            int(r.channel_inflight.map(i64::from)),
            name(Some(r.hedge.as_str())),
            count(r.failover_count),
            Box::new(r.cached),
            int(tok(r.shape.max_output_tokens)),
            s(&r.shape.reasoning_effort),
            int(r.shape.tool_count.map(i64::from)),
            s(&r.shape.tool_choice),
            s(&r.shape.response_format),
            Box::new(r.shape.temperature),
            Box::new(r.shape.top_p),
            s(&r.region),
            s(&r.trace_id),
            s(&r.instance),
            int(tok(t.cache_write_1h)),
            int(r.cost.map(|c| nano(c.nano_usd))),
            Box::new(r.cost.map(|c| c.estimated)),
            int(us(m.admission)),
            name(r.refused_by.map(Limit::as_str)),
            Box::new(crate::attempts::encode(&r.attempts)),
            name(Some(r.exchange.endpoint.as_str())),
            int(tok(r.exchange.bytes_in)),
            int(tok(r.exchange.bytes_out)),
            Box::new(r.exchange.key_index.map(|k| i32::try_from(k).unwrap())),
            int(tok(t.estimated_output)),
            name(r.in_band.map(InBandCarrier::as_str)),
        ]
    }

    /// A record's row as builds from v9 to v12 wrote it: the id, workspace, outcome and
    /// classification as text, the key id and instance in the packed value, and the names as
    /// text or as the set `set`.
    fn v12_values(r: &RequestRecord, set: Option<i32>) -> Vec<Box<dyn ToSql + Sync + Send>> {
        let [model, provider, channel, group, dialect, endpoint, region] =
            crate::names::names_of(r).map(|n| -> Box<dyn ToSql + Sync + Send> {
                Box::new(n.filter(|_| set.is_none()).map(str::to_string))
            });
        vec![
            Box::new(r.request_id.clone()),
            Box::new(r.created_at_us),
            Box::new(r.workspace_id.clone()),
            model,
            provider,
            channel,
            group,
            dialect,
            Box::new(r.stream),
            Box::new(i32::from(r.status)),
            Box::new(r.outcome.as_str()),
            Box::new(r.classification.as_str()),
            endpoint,
            Box::new(tok(r.tokens.input)),
            Box::new(tok(r.shape.max_output_tokens)),
            Box::new(r.shape.reasoning_effort.clone()),
            Box::new(r.shape.tool_count.map(i64::from)),
            region,
            Box::new(crate::packed::encode(r)),
            Box::new(set),
        ]
    }

    async fn insert_raw(
        c: &tokio_postgres::Client,
        columns: &[&str],
        params: Vec<Box<dyn ToSql + Sync + Send>>,
    ) {
        let placeholders: Vec<String> = (1..=params.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "INSERT INTO requests ({}) VALUES ({})",
            columns.join(", "),
            placeholders.join(", ")
        );
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p as _).collect();
        c.execute(&sql, &refs).await.unwrap();
    }

    /// v13 rewrites rows of every earlier layout (pre-v9 columns; packed with text names;
    /// packed with a name set) into its forms, each reads back as written and in its order,
    /// filters compare numbers, and rows written since hold their key and instance as codes.
    #[tokio::test]
    async fn v13_rewrites_rows_of_every_older_layout_and_each_reads_back_as_written() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let config: tokio_postgres::Config = schema.url().parse().unwrap();
        let pool = super::super::pool(&config, 1).unwrap();
        let mut c = super::super::pooled(&pool).await.unwrap();
        super::super::schema::migrate_to(&mut c, 12).await.unwrap();
        let made = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f";
        let with = |id: &str, at: i64, outcome: Outcome| {
            let mut r = full();
            r.request_id = id.into();
            r.created_at_us += at;
            r.outcome = outcome;
            r
        };
        let mut columns = with("req_columns", 1, Outcome::Timeout);
        // The largest value both layouts hold.
        columns.tokens.estimated_output = Some(i64::MAX as u64);
        let text = with(made, 2, Outcome::Completed);
        let set = with("req_set", 3, Outcome::RateLimited);
        let tie = [
            with("req_tie_a", 4, Outcome::Timeout),
            with("req_tie_b", 4, Outcome::Completed),
        ];
        let mut bare = sparse();
        bare.request_id = "req_bare".into();
        bare.workspace_id = Some("ws".into());
        bare.created_at_us = columns.created_at_us + 5;
        let mut anonymous = sparse();
        anonymous.request_id = "req_anonymous".into();
        anonymous.created_at_us = bare.created_at_us;
        let all = [&columns, &text, &set, &tie[0], &tie[1], &bare, &anonymous];
        let every: Vec<RequestRecord> = all.iter().map(|r| (*r).clone()).collect();
        ensure_partitions(&mut c, &mut Partitions::default(), &every)
            .await
            .unwrap();
        insert_raw(&c, &READ_COLUMNS[..PACKED], legacy_values(&columns)).await;
        let set_id: i32 = c
            .query_one(
                "INSERT INTO name_sets (key, s_model, s_provider, s_channel, s_grp, s_dialect,
                    s_endpoint, s_region) VALUES ('k', $1, $2, $3, $4, $5, $6, $7) RETURNING id",
                &crate::names::names_of(&set)
                    .map(|n| n.map(str::to_string))
                    .iter()
                    .map(|n| n as _)
                    .collect::<Vec<&(dyn ToSql + Sync)>>(),
            )
            .await
            .unwrap()
            .get(0);
        insert_raw(&c, &COLUMNS[..20], v12_values(&set, Some(set_id))).await;
        for r in [&text, &tie[0], &tie[1], &bare, &anonymous] {
            insert_raw(&c, &COLUMNS[..20], v12_values(r, None)).await;
        }
        drop(c);

        let store = crate::Store::open_postgres(schema.url()).await.unwrap();
        let client = crate::pg::connect(&config).await.unwrap();
        let types: Vec<(String, String)> = client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = 'requests'
                   AND column_name IN ('request_id', 'workspace_id', 'outcome',
                       'classification', 'key_code', 'instance_code')
                 ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let want = [
            ("classification", "smallint"),
            ("instance_code", "integer"),
            ("key_code", "integer"),
            ("outcome", "smallint"),
            ("request_id", "bytea"),
            ("workspace_id", "integer"),
        ];
        assert_eq!(types, want.map(|(a, b)| (a.to_string(), b.to_string())));
        let gateway: Vec<u8> = client
            .query_one(
                "SELECT request_id FROM requests WHERE created_at_us = $1",
                &[&text.created_at_us],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(gateway, crate::stored_id::pg_key(made));
        assert_eq!((gateway.len(), gateway[0]), (17, 0));
        let no_workspace: i64 = client
            .query_one(
                "SELECT count(*) FROM requests WHERE workspace_id IS NULL",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(no_workspace, 1);

        for r in all.iter().filter(|r| r.workspace_id.is_some()) {
            let got = store.record("ws", &r.request_id).await.unwrap();
            assert_eq!(got.as_ref(), Some(*r), "{}", r.request_id);
        }
        let ids = |outcome: Option<&str>| {
            let store = &store;
            let filter = crate::usage::UsageFilter {
                outcome: outcome.map(str::to_string),
                ..crate::usage::UsageFilter::default()
            };
            async move {
                let got = store.recent("ws", filter, None, 10).await.unwrap();
                got.into_iter().map(|r| r.request_id).collect::<Vec<_>>()
            }
        };
        let newest_first = [
            "req_bare",
            "req_tie_b",
            "req_tie_a",
            "req_set",
            made,
            "req_columns",
        ];
        assert_eq!(ids(None).await, newest_first);

        let fresh = with("req_fresh", 6, Outcome::Timeout);
        store.insert_batch(vec![fresh.clone()]).await.unwrap();
        assert_eq!(
            store.record("ws", "req_fresh").await.unwrap(),
            Some(fresh.clone())
        );
        let row = client
            .query_one(
                "SELECT (SELECT value FROM names WHERE id = key_code),
                    (SELECT value FROM names WHERE id = instance_code), length(packed)
                 FROM requests WHERE request_id = $1",
                &[&crate::stored_id::pg_key("req_fresh")],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, Option<String>>(0), fresh.key_id);
        assert_eq!(row.get::<_, Option<String>>(1), fresh.instance);
        let packed_len: i32 = row.get(2);
        assert!(usize::try_from(packed_len).unwrap() < crate::packed::encode(&fresh).len());
        // A filtered read walks the minutes whose rollups have the value: the rows above were
        // written without rollups, and are found in the minute of this one.
        assert_eq!(
            ids(Some("timeout")).await,
            ["req_fresh", "req_tie_a", "req_columns"]
        );
        assert_eq!(ids(Some("no such outcome")).await, Vec::<String>::new());
    }

    #[test]
    fn partition_names_read_back_as_their_day() {
        for day in [0, 1, 19_000, 20_788, 30_000] {
            assert_eq!(partition_day(&partition_name(day)), Some(day), "{day}");
        }
        assert_eq!(partition_name(20_788), "requests_p20261201");
        assert_eq!(partition_day("requests_p2026120"), None);
        assert_eq!(partition_day("requests_p20261301"), None);
        assert_eq!(partition_day("requests"), None);
    }

    /// Two instances running retention at once (as a fleet started together does) both
    /// finish, and between them count every request they delete once.
    #[tokio::test]
    async fn two_instances_running_retention_at_once_both_finish_and_count_each_request_once() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let a = crate::Store::open_postgres(schema.url()).await.unwrap();
        let b = crate::Store::open_postgres(schema.url()).await.unwrap();
        let first = 20_000;
        let records: Vec<RequestRecord> = (0..8 * 40)
            .map(|i| {
                let at = (first + i / 40) * DAY_US + (i % 40) * 60_000_000;
                crate::records::tests::sample(&format!("r{i}"), "ws", at)
            })
            .collect();
        a.insert_batch(records).await.unwrap();
        // Seven whole days go, and the eighth day's first half.
        let cutoff = (first + 7) * DAY_US + 20 * 60_000_000;
        let (da, db) = tokio::join!(
            a.delete_older_than(cutoff, 7),
            b.delete_older_than(cutoff, 7)
        );
        let (da, db) = (da.unwrap(), db.unwrap());
        assert_eq!(da + db, 7 * 40 + 20, "{da} + {db}");
        assert_eq!(
            a.recent("ws", Default::default(), None, 100)
                .await
                .unwrap()
                .len(),
            20
        );
    }
}
