//! The usage API's data side: a window's rollup (optionally grouped) from the stored rollups,
//! and a window's newest requests from the rows, both under the same filter.
//!
//! [`usage`] never reads request rows: it merges the rollups of the window's whole hours from
//! the hour tier and of the minutes before the first and after the last whole hour from the
//! minute tier (a range scan of each tier's primary key per span, in one statement), so its
//! cost grows with hours × keys plus at most 2 × 60 minutes × keys, never with requests. Each
//! hour row is the merge of its minute rows, so the answer is the one the minutes alone give.
//! [`recent_filtered`] walks an index newest first and stops at the limit; under a filter, only
//! through the minutes whose rollups match it ([`crate::guide`]).
//!
//! All SQL is built from fixed fragments with bound parameters; filter values never become SQL.

use std::collections::HashMap;

use laptime_core::compare::{EffortClass, TokenBucket, BUDGET_PREFIX};
use laptime_core::rollup::Rollup;
use laptime_core::timeline::RequestRecord;
use rusqlite::types::{Value, ValueRef};
use rusqlite::{params_from_iter, Connection, OptionalExtension, Row};

use crate::records::{from_row, SELECT};
use crate::rollups::{ceil_hour, ceil_minute, floor_hour, floor_minute, Tier, HOUR_US};
use crate::{guide, names};
use crate::{Result, StoreError};

/// Which requests count. Every field set must match; `Default` matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFilter {
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    pub dialect: Option<String>,
    pub stream: Option<bool>,
    pub status: Option<u16>,
    pub outcome: Option<String>,
    pub classification: Option<String>,
    /// `generation` for the model calls, else the endpoint (`embeddings`, `files`, …).
    pub endpoint: Option<String>,
    /// The comparison dimensions ([`laptime_core::compare`]): an effort class (`low`,
    /// `budget`, …), a token bucket (`1k-4k`, …), a region. `""` asks for requests without the
    /// value (no effort asked, no max tokens asked, no input count), as for the text filters.
    pub reasoning_effort: Option<String>,
    pub tools_present: Option<bool>,
    pub max_output_bucket: Option<String>,
    pub input_bucket: Option<String>,
    pub region: Option<String>,
}

impl UsageFilter {
    /// The filters on the names that SQLite stores as codes, in [`crate::names::COLUMNS`]
    /// order.
    pub(crate) fn names(&self) -> [&Option<String>; 7] {
        [
            &self.model,
            &self.provider,
            &self.channel,
            &self.group,
            &self.dialect,
            &self.endpoint,
            &self.region,
        ]
    }

    /// The filters set, as (dimension name, value) in [`GroupDim::ALL`] order; `None` for a
    /// filter that asks for requests without the value. Empty: every request.
    pub fn in_force(&self) -> Vec<(GroupDim, Option<String>)> {
        let text = |v: &Option<String>| v.as_ref().map(|v| (!v.is_empty()).then(|| v.clone()));
        let values = [
            text(&self.model),
            text(&self.provider),
            text(&self.channel),
            text(&self.group),
            text(&self.dialect),
            self.stream.map(|s| Some(s.to_string())),
            self.status.map(|s| Some(s.to_string())),
            text(&self.outcome),
            text(&self.classification),
            text(&self.endpoint),
            text(&self.reasoning_effort),
            self.tools_present.map(|t| Some(t.to_string())),
            text(&self.max_output_bucket),
            text(&self.input_bucket),
            text(&self.region),
        ];
        GroupDim::ALL
            .into_iter()
            .zip(values)
            .filter_map(|(dim, v)| Some((dim, v?)))
            .collect()
    }
}

/// A dimension usage can be grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupDim {
    Model,
    Provider,
    Channel,
    Group,
    Dialect,
    Stream,
    Status,
    Outcome,
    Classification,
    Endpoint,
    ReasoningEffort,
    ToolsPresent,
    MaxOutputBucket,
    InputBucket,
    Region,
}

impl GroupDim {
    pub const ALL: [GroupDim; 15] = [
        GroupDim::Model,
        GroupDim::Provider,
        GroupDim::Channel,
        GroupDim::Group,
        GroupDim::Dialect,
        GroupDim::Stream,
        GroupDim::Status,
        GroupDim::Outcome,
        GroupDim::Classification,
        GroupDim::Endpoint,
        GroupDim::ReasoningEffort,
        GroupDim::ToolsPresent,
        GroupDim::MaxOutputBucket,
        GroupDim::InputBucket,
        GroupDim::Region,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GroupDim::Model => "model",
            GroupDim::Provider => "provider",
            GroupDim::Channel => "channel",
            GroupDim::Group => "group",
            GroupDim::Dialect => "dialect",
            GroupDim::Stream => "stream",
            GroupDim::Status => "status",
            GroupDim::Outcome => "outcome",
            GroupDim::Classification => "classification",
            GroupDim::Endpoint => "endpoint",
            GroupDim::ReasoningEffort => "reasoning_effort",
            GroupDim::ToolsPresent => "tools_present",
            GroupDim::MaxOutputBucket => "max_output_bucket",
            GroupDim::InputBucket => "input_bucket",
            GroupDim::Region => "region",
        }
    }

    pub fn parse(s: &str) -> Option<GroupDim> {
        GroupDim::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The column in `rollups` (in both stores; the same in `requests` for the first ten, whose
    /// filters compare it there too).
    pub(crate) fn column(self) -> &'static str {
        match self {
            GroupDim::Model => "model",
            GroupDim::Provider => "provider",
            GroupDim::Channel => "channel",
            GroupDim::Group => "grp",
            GroupDim::Dialect => "dialect",
            GroupDim::Stream => "stream",
            GroupDim::Status => "status",
            GroupDim::Outcome => "outcome",
            GroupDim::Classification => "classification",
            GroupDim::Endpoint => "endpoint",
            GroupDim::ReasoningEffort => "effort",
            GroupDim::ToolsPresent => "tools",
            GroupDim::MaxOutputBucket => "max_output_bucket",
            GroupDim::InputBucket => "input_bucket",
            GroupDim::Region => "region",
        }
    }
}

/// The window actually used: `from` floored and `to` ceiled to whole minutes (from inclusive,
/// to exclusive), unix microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageWindow {
    pub from_us: i64,
    pub to_us: i64,
}

/// A group's key: the grouped dimensions in the order asked, each with its value (`None` for
/// absent).
pub type GroupKey = Vec<(GroupDim, Option<String>)>;

/// A usage answer: the rollup of every matching request in the window, and, when grouped, one
/// rollup per group (most requests first, then by key). Each group key lists the dimensions in
/// the order asked, with `None` for an absent value; `stream` reads `"true"`/`"false"` and
/// `status` the decimal code.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageResult {
    pub window: UsageWindow,
    pub total: Rollup,
    pub groups: Vec<(GroupKey, Rollup)>,
}

#[cfg(test)]
impl UsageResult {
    /// Each group's first dimension with its requests, in the answer's order.
    pub(crate) fn first_dim_counts(&self) -> Vec<(Option<String>, u64)> {
        self.groups
            .iter()
            .map(|(k, r)| (k.first().and_then(|d| d.1.clone()), r.requests))
            .collect()
    }
}

/// How the table a filter runs against stores the names it compares.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NameForm {
    /// As text in their columns: PostgreSQL's rollup keys.
    Text,
    /// SQLite's request rows since v16: a code each, or text ([`crate::names`]).
    SqliteCodes,
    /// SQLite's rollups since v17: every text dimension a code, or text
    /// ([`crate::rollups::CODED`]).
    SqliteRollups,
    /// PostgreSQL's request rows since v11: text, or a set's ([`crate::pg::names`]); from v13
    /// outcome and classification as numbers ([`crate::closed`]).
    PgSets,
}

/// How absent text is stored in the table a filter runs against.
#[derive(Clone, Copy)]
pub(crate) enum Absent {
    /// `requests`: NULL.
    Null,
    /// `rollups`: `''` (so that the primary key works).
    Empty,
}

/// A filter's value, as each backend binds it.
pub(crate) enum FilterValue {
    Text(String),
    Stream(bool),
    Status(u16),
    /// A closed set's number in the request rows ([`crate::closed`]).
    Number(i64),
}

/// Appends ` AND column = <sigil>n` for every field the filter sets, numbering parameters after
/// the `before` already bound; returns the values, in order. `sigil` is `?` for SQLite and `$`
/// for PostgreSQL. `form`: how the table stores the names compared.
pub(crate) fn push_filter(
    filter: &UsageFilter,
    absent: Absent,
    sql: &mut String,
    before: usize,
    sigil: char,
    form: NameForm,
) -> Vec<FilterValue> {
    let mut values = Vec::new();
    let text = [
        (GroupDim::Model, &filter.model),
        (GroupDim::Provider, &filter.provider),
        (GroupDim::Channel, &filter.channel),
        (GroupDim::Group, &filter.group),
        (GroupDim::Dialect, &filter.dialect),
        (GroupDim::Outcome, &filter.outcome),
        (GroupDim::Classification, &filter.classification),
        (GroupDim::Endpoint, &filter.endpoint),
    ];
    // A name of a PostgreSQL row may be in its set; NULL stays NULL in SQLite's codes.
    let null = |col: &str| match form {
        NameForm::PgSets if crate::pg::names::in_set(col) => crate::pg::names::is_null(col),
        _ => format!(" AND {col} IS NULL"),
    };
    let bind = |col: &str, v: FilterValue, sql: &mut String, values: &mut Vec<FilterValue>| {
        values.push(v);
        let n = before + values.len();
        match form {
            NameForm::SqliteCodes if names::COLUMNS.contains(&col) => {
                sql.push_str(&names::coded_equals(col, n))
            }
            NameForm::SqliteRollups if crate::rollups::CODED.contains(&col) => {
                sql.push_str(&names::coded_equals(col, n))
            }
            NameForm::PgSets if crate::pg::names::in_set(col) => {
                sql.push_str(&crate::pg::names::equals(col, &format!("{sigil}{n}")))
            }
            _ => sql.push_str(&format!(" AND {col} = {sigil}{n}")),
        }
    };
    for (dim, v) in text {
        let Some(v) = v else { continue };
        let col = dim.column();
        // An empty filter value asks for requests without the value, in either table.
        if v.is_empty() && matches!(absent, Absent::Null) {
            sql.push_str(&null(col));
            continue;
        }
        let value = match form {
            NameForm::SqliteCodes | NameForm::PgSets => {
                crate::closed::filter_code(col, v).map(FilterValue::Number)
            }
            _ => None,
        };
        bind(
            col,
            value.unwrap_or_else(|| FilterValue::Text(v.clone())),
            sql,
            &mut values,
        );
    }
    if let Some(s) = filter.stream {
        bind("stream", FilterValue::Stream(s), sql, &mut values);
    }
    if let Some(s) = filter.status {
        bind("status", FilterValue::Status(s), sql, &mut values);
    }
    let compared = [
        (GroupDim::ReasoningEffort, &filter.reasoning_effort),
        (GroupDim::MaxOutputBucket, &filter.max_output_bucket),
        (GroupDim::InputBucket, &filter.input_bucket),
        (GroupDim::Region, &filter.region),
    ];
    match absent {
        Absent::Empty => {
            for (dim, v) in compared {
                if let Some(v) = v {
                    bind(dim.column(), FilterValue::Text(v.clone()), sql, &mut values);
                }
            }
            if let Some(t) = filter.tools_present {
                bind("tools", FilterValue::Text(t.to_string()), sql, &mut values);
            }
        }
        Absent::Null => {
            for (dim, v) in compared {
                let Some(v) = v else { continue };
                match row_condition(dim, v) {
                    RowCondition::Sql(cond) => sql.push_str(&cond),
                    RowCondition::Null(col) => sql.push_str(&null(col)),
                    RowCondition::Equals(col) => {
                        bind(col, FilterValue::Text(v.clone()), sql, &mut values)
                    }
                }
            }
            if let Some(t) = filter.tools_present {
                bind(TOOLS_PRESENT, FilterValue::Stream(t), sql, &mut values);
            }
        }
    }
    values
}

/// Whether a request row declared tools, as an expression both stores compare to a boolean.
const TOOLS_PRESENT: &str = "(COALESCE(tool_count, 0) > 0)";

/// How a comparison filter reads on `requests`, where the rows keep the raw values.
enum RowCondition {
    /// ` AND …`, built from the closed sets' own constants (never from the filter's text).
    Sql(String),
    /// The value is compared as it is to this column.
    Equals(&'static str),
    /// The column holds no value.
    Null(&'static str),
}

fn row_condition(dim: GroupDim, v: &str) -> RowCondition {
    let bucket_of = |col: &str| match v {
        "" => RowCondition::Sql(format!(" AND {col} IS NULL")),
        _ => RowCondition::Sql(match TokenBucket::parse(v).map(TokenBucket::range) {
            Some((lo, Some(hi))) => format!(" AND {col} >= {lo} AND {col} < {hi}"),
            Some((lo, None)) => format!(" AND {col} >= {lo}"),
            None => " AND 1 = 0".to_string(),
        }),
    };
    match dim {
        GroupDim::MaxOutputBucket => bucket_of("max_output_tokens"),
        GroupDim::InputBucket => bucket_of("input_tokens"),
        GroupDim::ReasoningEffort => RowCondition::Sql(effort_condition(v)),
        GroupDim::Region if v.is_empty() => RowCondition::Null("region"),
        _ => RowCondition::Equals("region"),
    }
}

/// The rows whose recorded `reasoning_effort` is of the class named `v` (`""`: none asked).
fn effort_condition(v: &str) -> String {
    let budget = format!(
        "substr(reasoning_effort, 1, {}) = '{BUDGET_PREFIX}'",
        BUDGET_PREFIX.len()
    );
    match EffortClass::parse(v) {
        _ if v.is_empty() => " AND reasoning_effort IS NULL".into(),
        Some(EffortClass::Budget) => format!(" AND {budget}"),
        Some(EffortClass::Other) => {
            let words: Vec<String> = EffortClass::WORDS
                .iter()
                .map(|c| format!("'{}'", c.as_str()))
                .collect();
            format!(
                " AND reasoning_effort NOT IN ({}) AND NOT {budget}",
                words.join(", ")
            )
        }
        Some(word) => format!(" AND reasoning_effort = '{}'", word.as_str()),
        None => " AND 1 = 0".into(),
    }
}

fn sqlite_value(v: FilterValue) -> Value {
    match v {
        FilterValue::Text(t) => Value::Text(t),
        FilterValue::Stream(s) => Value::Integer(i64::from(s)),
        FilterValue::Status(s) => Value::Integer(i64::from(s)),
        FilterValue::Number(n) => Value::Integer(n),
    }
}

/// Folds rollup rows into a usage answer: the total, and one rollup per group.
pub(crate) struct Folding<'a> {
    group_by: &'a [GroupDim],
    total: Rollup,
    groups: HashMap<Vec<Option<String>>, Rollup>,
    /// The group key of the current row, reusing its strings' buffers from row to row.
    key: Vec<Option<String>>,
}

fn corrupt_rollup(e: String) -> StoreError {
    StoreError::Corrupt(format!("rollup: {e}"))
}

impl<'a> Folding<'a> {
    pub(crate) fn new(group_by: &'a [GroupDim]) -> Self {
        Folding {
            group_by,
            total: Rollup::new(),
            groups: HashMap::new(),
            key: vec![None; group_by.len()],
        }
    }

    /// Adds one stored rollup; `fill` reads the row's value of a dimension, at the column it
    /// is given (see [`rollup_sql`]), into its slot (`None` for absent).
    pub(crate) fn add(
        &mut self,
        blob: &[u8],
        mut fill: impl FnMut(usize, GroupDim, &mut Option<String>) -> Result<()>,
    ) -> Result<()> {
        if self.group_by.is_empty() {
            return self.total.merge_encoded(blob).map_err(corrupt_rollup);
        }
        for (k, (slot, dim)) in self.key.iter_mut().zip(self.group_by).enumerate() {
            fill(ROLLUP_DATA + 1 + k, *dim, slot)?;
        }
        match self.groups.get_mut(&self.key) {
            Some(g) => g.merge_encoded(blob).map_err(corrupt_rollup)?,
            None => {
                self.groups.insert(
                    self.key.clone(),
                    Rollup::decode(blob).map_err(corrupt_rollup)?,
                );
            }
        }
        Ok(())
    }

    pub(crate) fn finish(self, window: UsageWindow) -> UsageResult {
        let mut total = self.total;
        for g in self.groups.values() {
            total.merge(g);
        }
        let group_by = self.group_by;
        let mut groups: Vec<_> = self
            .groups
            .into_iter()
            .map(|(key, r)| (group_by.iter().copied().zip(key).collect::<GroupKey>(), r))
            .collect();
        groups.sort_by(|(ka, a), (kb, b)| b.requests.cmp(&a.requests).then_with(|| ka.cmp(kb)));
        UsageResult {
            window,
            total,
            groups,
        }
    }
}

/// Puts `v` in `slot`, reusing its buffer; `""` is absent.
pub(crate) fn put_value(slot: &mut Option<String>, v: &str) {
    match slot {
        _ if v.is_empty() => *slot = None,
        Some(s) => {
            s.clear();
            s.push_str(v);
        }
        None => *slot = Some(v.to_string()),
    }
}

/// The position of the encoded rollup in the rows of [`rollup_sql`]; the grouping dimensions
/// follow it, in their order.
pub(crate) const ROLLUP_DATA: usize = 0;

/// The names of the codes a read meets, each looked up once: a lookup in SQL for every row read
/// cost a grouped day of 10 M requests a quarter more.
struct CodeNames<'c> {
    conn: &'c Connection,
    names: HashMap<Vec<u8>, String>,
}

impl<'c> CodeNames<'c> {
    fn new(conn: &'c Connection) -> Self {
        CodeNames {
            conn,
            names: HashMap::new(),
        }
    }

    fn name(&mut self, code: &[u8]) -> Result<&str> {
        if !self.names.contains_key(code) {
            let name: String = self
                .conn
                .prepare_cached("SELECT name FROM names WHERE code = ?1")?
                .query_row([code], |r| r.get(0))
                .optional()?
                .ok_or_else(|| corrupt_rollup(format!("a name code {code:?} not stored")))?;
            self.names.insert(code.to_vec(), name);
        }
        Ok(self.names.get(code).map(String::as_str).unwrap_or_default())
    }
}

/// Reads a row's value of `dim`, at column `i`, into `slot` (`None` for absent), reusing the
/// slot's buffer; a code as its name.
fn dim_value(
    row: &Row<'_>,
    i: usize,
    dim: GroupDim,
    slot: &mut Option<String>,
    names: &mut CodeNames<'_>,
) -> Result<()> {
    match dim {
        GroupDim::Stream => {
            let stream: bool = row.get(i)?;
            put_value(slot, if stream { "true" } else { "false" });
        }
        GroupDim::Status => put_value(slot, &row.get::<_, i64>(i)?.to_string()),
        _ => match row.get_ref(i)? {
            ValueRef::Blob(code) => put_value(slot, names.name(code)?),
            v => put_value(slot, v.as_str().map_err(|e| corrupt_rollup(e.to_string()))?),
        },
    }
    Ok(())
}

/// The window `[from_us, to_us)` widened to whole minutes.
pub(crate) fn window(from_us: i64, to_us: i64) -> UsageWindow {
    UsageWindow {
        from_us: floor_minute(from_us),
        to_us: ceil_minute(to_us),
    }
}

/// One range of a window read from one tier: `[from_us, to_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub tier: Tier,
    pub from_us: i64,
    pub to_us: i64,
}

/// The ranges a window (of whole minutes) is read as: its whole hours from the hour tier, the
/// minutes before the first whole hour and after the last from the minute tier; all minutes
/// when it holds no whole hour. Empty for an empty window.
pub(crate) fn spans(w: &UsageWindow) -> Vec<Span> {
    let span = |tier, from_us, to_us| Span {
        tier,
        from_us,
        to_us,
    };
    let (hours_from, hours_to) = (ceil_hour(w.from_us), floor_hour(w.to_us));
    if hours_from >= hours_to {
        return match w.from_us < w.to_us {
            true => vec![span(Tier::Minute, w.from_us, w.to_us)],
            false => Vec::new(),
        };
    }
    let mut out = Vec::with_capacity(3);
    if w.from_us < hours_from {
        out.push(span(Tier::Minute, w.from_us, hours_from));
    }
    out.push(span(Tier::Hour, hours_from, hours_to));
    if hours_to < w.to_us {
        out.push(span(Tier::Minute, hours_to, w.to_us));
    }
    out
}

/// The statement reading the rollups of `spans` under `filter` (SQLite's; PostgreSQL's is
/// [`crate::pg::usage`]'s): one `SELECT` per span joined by `UNION ALL`, so that one snapshot
/// serves them all (the tiers as one transaction left them). Each row is the encoded rollup,
/// then the value of each of `group_by` (as stored: [`dim_value`] reads a code's name): only those, since
/// reading and decoding the other dimensions took about a third of a 24 h `usage` over 1 M
/// requests. Parameter 1 is the workspace, then each span's bounds in order, then the filter's
/// values (returned; bound once, used by every span).
fn rollup_sql(
    spans: &[Span],
    filter: &UsageFilter,
    group_by: &[GroupDim],
) -> (String, Vec<FilterValue>) {
    let columns: String = std::iter::once("data")
        .chain(group_by.iter().map(|d| d.column()))
        .collect::<Vec<_>>()
        .join(", ");
    let mut filtered = String::new();
    let values = push_filter(
        filter,
        Absent::Empty,
        &mut filtered,
        1 + 2 * spans.len(),
        '?',
        NameForm::SqliteRollups,
    );
    let parts: Vec<String> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let start = s.tier.start_column();
            let table = s.tier.table();
            format!(
                "SELECT {} FROM {table} WHERE workspace_id = ?1 \
                 AND {start} >= ?{} AND {start} < ?{}{filtered}",
                columns,
                2 + 2 * i,
                3 + 2 * i
            )
        })
        .collect();
    (parts.join(" UNION ALL "), values)
}

/// Usage of a workspace over `[from_us, to_us)` widened to whole minutes, filtered, and grouped
/// by `group_by` (empty: no groups). Percentiles come from the merged sketches
/// (see [`laptime_core::rollup`] for the method and its 1 % bound).
pub fn usage(
    conn: &Connection,
    workspace_id: &str,
    from_us: i64,
    to_us: i64,
    filter: &UsageFilter,
    group_by: &[GroupDim],
) -> Result<UsageResult> {
    let window = window(from_us, to_us);
    let spans = spans(&window);
    let mut folding = Folding::new(group_by);
    if spans.is_empty() {
        return Ok(folding.finish(window));
    }
    let (sql, bound) = rollup_sql(&spans, filter, group_by);
    let mut values = vec![Value::Text(workspace_id.to_string())];
    for s in &spans {
        values.push(Value::Integer(s.from_us));
        values.push(Value::Integer(s.to_us));
    }
    values.extend(bound.into_iter().map(sqlite_value));
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(values))?;
    let mut names = CodeNames::new(conn);
    while let Some(row) = rows.next()? {
        let blob = row
            .get_ref(ROLLUP_DATA)?
            .as_blob()
            .map_err(|e| corrupt_rollup(e.to_string()))?;
        folding.add(blob, |i, dim, slot| {
            dim_value(row, i, dim, slot, &mut names)
        })?;
    }
    Ok(folding.finish(window))
}

/// The query of [`recent_filtered`] and its parameters.
fn recent_sql(
    ws: &Value,
    filter: &UsageFilter,
    window: Option<(i64, i64)>,
    limit: u32,
) -> (String, Vec<Value>) {
    let mut sql = format!("{SELECT} WHERE workspace_id = ?1");
    let mut values = vec![ws.clone()];
    if let Some((from, to)) = window {
        values.push(Value::Integer(from));
        values.push(Value::Integer(to));
        sql.push_str(" AND created_at_us >= ?2 AND created_at_us < ?3");
    }
    let bound = push_filter(
        filter,
        Absent::Null,
        &mut sql,
        values.len(),
        '?',
        NameForm::SqliteCodes,
    );
    values.extend(bound.into_iter().map(sqlite_value));
    if asks_unusual(filter) {
        // Implied by the filter; stated so that the partial index of those rows is usable.
        sql.push_str(" AND ");
        sql.push_str(crate::schema::UNUSUAL);
    }
    values.push(Value::Integer(i64::from(limit)));
    sql.push_str(&format!(
        " ORDER BY created_at_us DESC, rowid DESC LIMIT ?{}",
        values.len()
    ));
    (sql, values)
}

/// Whether only unusual requests ([`crate::schema::UNUSUAL`]) can match `filter`: it asks for
/// a status other than 200, an outcome other than `completed` or a classification other than
/// `ok` (an empty value asks for an absent one, which is not those either).
fn asks_unusual(filter: &UsageFilter) -> bool {
    filter.status.is_some_and(|s| s != 200)
        || filter.outcome.as_deref().is_some_and(|o| o != "completed")
        || filter.classification.as_deref().is_some_and(|c| c != "ok")
}

/// The newest records of a workspace that match `filter`, within `window` (`[from, to)`, unix
/// microseconds) when given; newest first, with their attempts. Reads rows as
/// [`crate::records::recent`] does. A filter's rows are found through the minutes whose
/// rollups match it ([`crate::guide`]), all in one read transaction, so the minutes and the
/// rows are of one moment.
pub fn recent_filtered(
    conn: &Connection,
    workspace_id: &str,
    filter: &UsageFilter,
    window: Option<(i64, i64)>,
    limit: u32,
) -> Result<Vec<RequestRecord>> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let ws = names::stored(conn, workspace_id)?;
    // No filter, or one the index of unusual rows serves: down that index.
    let names_filtered = filter.names().iter().any(|v| v.is_some());
    if *filter == UsageFilter::default() || (asks_unusual(filter) && !names_filtered) {
        recent_rows(conn, &ws, filter, window, limit, &mut out)?;
        return Ok(out);
    }
    let tx = conn.unchecked_transaction()?;
    if names::any_never_stored(
        &tx,
        filter.names().into_iter().flatten().map(String::as_str),
    )? {
        return Ok(out);
    }
    let mut rest = Some(window.unwrap_or((i64::MIN, i64::MAX)));
    let mut rows = Some(guide::PROBE_ROWS);
    while let (Some(window), Some(look)) = (rest, rows) {
        let boundary: Option<i64> = tx
            .prepare_cached(
                "SELECT created_at_us FROM requests WHERE workspace_id = ?1 \
                 AND created_at_us >= ?2 AND created_at_us < ?3 \
                 ORDER BY created_at_us DESC, rowid DESC LIMIT 1 OFFSET ?4",
            )?
            .query_row(rusqlite::params![ws, window.0, window.1, look - 1], |r| {
                r.get(0)
            })
            .optional()?;
        let (probed, left) = guide::probe(window, boundary);
        let before = out.len();
        recent_rows(
            &tx,
            &ws,
            filter,
            Some(probed),
            limit - before as u32,
            &mut out,
        )?;
        rest = left.filter(|_| out.len() < limit as usize);
        rows = guide::next_probe(
            look,
            (out.len() - before) as i64,
            limit as i64 - out.len() as i64,
        );
    }
    if let Some(rest) = rest {
        walk(&tx, (workspace_id, &ws), filter, rest, limit, &mut out)?;
    }
    Ok(out)
}

/// Appends to `out` the newest records of a workspace (its id, and as rows store it) that
/// match `filter` within `window`, until it holds `limit`, through the minutes whose rollups
/// match ([`crate::guide`]).
fn walk(
    tx: &Connection,
    (workspace_id, ws): (&str, &Value),
    filter: &UsageFilter,
    window: (i64, i64),
    limit: u32,
    out: &mut Vec<RequestRecord>,
) -> Result<()> {
    let (first, end) = guide::minute_bounds(window);
    let mut values = vec![
        Value::Text(workspace_id.to_string()),
        Value::Integer(floor_hour(first)),
        Value::Integer(end),
    ];
    let newest: Option<i64> = tx
        .prepare_cached(NEWEST_HOUR_SQL)?
        .query_row(params_from_iter(&values), |r| r.get(0))?;
    let Some(newest) = newest else {
        return Ok(());
    };
    let (hours_sql, bound) = matching_starts_sql(Tier::Hour, filter);
    let (minutes_sql, _) = matching_starts_sql(Tier::Minute, filter);
    values.extend(bound.into_iter().map(sqlite_value));
    let mut hours_stmt = tx.prepare_cached(&hours_sql)?;
    let mut minutes_stmt = tx.prepare_cached(&minutes_sql)?;
    let mut starts = |stmt: &mut rusqlite::CachedStatement<'_>, (a, b): (i64, i64)| {
        (values[1], values[2]) = (Value::Integer(a), Value::Integer(b));
        stmt.query_map(params_from_iter(&values), |r| r.get::<_, i64>(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()
    };
    for slice in guide::hour_slices((first, end.min(newest + HOUR_US))) {
        for hour in starts(&mut hours_stmt, slice)? {
            for minutes in guide::minute_slices(hour, (first, end)) {
                for run in guide::runs(&starts(&mut minutes_stmt, minutes)?, window) {
                    let left = limit.saturating_sub(u32::try_from(out.len()).unwrap_or(u32::MAX));
                    recent_rows(tx, ws, filter, Some(run), left, out)?;
                    if out.len() >= limit as usize {
                        return Ok(());
                    }
                }
            }
        }
    }
    Ok(())
}

/// The statement of the start of the newest hour of a workspace's hour tier in a range:
/// parameter 1 the workspace, then the range's bounds (PostgreSQL's, whose hours are folded
/// when they close, is [`crate::pg::usage`]'s).
const NEWEST_HOUR_SQL: &str = "SELECT max(hour_us) FROM rollups_hourly WHERE workspace_id = ?1 \
    AND hour_us >= ?2 AND hour_us < ?3";

/// The statement of the starts (newest first) of the rollups of `tier` that match `filter`
/// ([`crate::guide`]), and the filter's values: parameter 1 is the workspace, 2 and 3 the
/// bounds of the starts (`[from, to)`), then the filter's values.
fn matching_starts_sql(tier: Tier, filter: &UsageFilter) -> (String, Vec<FilterValue>) {
    let start = tier.start_column();
    let mut sql = format!(
        "SELECT DISTINCT {start} FROM {} WHERE workspace_id = ?1 \
         AND {start} >= ?2 AND {start} < ?3",
        tier.table()
    );
    let bound = push_filter(
        filter,
        Absent::Empty,
        &mut sql,
        3,
        '?',
        NameForm::SqliteRollups,
    );
    sql.push_str(&format!(" ORDER BY {start} DESC"));
    (sql, bound)
}

/// Appends the newest records of a workspace (`ws` as rows store it) matching `filter` within
/// `window` to `out`, at most `limit`, walking the workspace's time index (or the index of
/// unusual rows).
fn recent_rows(
    conn: &Connection,
    ws: &Value,
    filter: &UsageFilter,
    window: Option<(i64, i64)>,
    limit: u32,
    out: &mut Vec<RequestRecord>,
) -> Result<()> {
    let (sql, values) = recent_sql(ws, filter, window, limit);
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(values), from_row)?;
    for row in rows {
        out.push(row?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollups::{HOUR_US, MINUTE_US};
    use crate::Store;

    #[test]
    fn a_window_reads_whole_hours_from_the_hour_tier_and_its_edges_by_the_minute() {
        let h = 500_000 * HOUR_US;
        let m = MINUTE_US;
        let span = |tier, from_us, to_us| Span {
            tier,
            from_us,
            to_us,
        };
        let of = |from_us, to_us| spans(&UsageWindow { from_us, to_us });
        assert_eq!(
            of(h - 7 * m, h + 2 * HOUR_US + 3 * m),
            [
                span(Tier::Minute, h - 7 * m, h),
                span(Tier::Hour, h, h + 2 * HOUR_US),
                span(Tier::Minute, h + 2 * HOUR_US, h + 2 * HOUR_US + 3 * m),
            ]
        );
        assert_eq!(of(h, h + HOUR_US), [span(Tier::Hour, h, h + HOUR_US)]);
        assert_eq!(
            of(h, h + HOUR_US + m),
            [
                span(Tier::Hour, h, h + HOUR_US),
                span(Tier::Minute, h + HOUR_US, h + HOUR_US + m)
            ]
        );
        // No whole hour inside: minutes only, even across an hour boundary.
        assert_eq!(of(h - m, h + m), [span(Tier::Minute, h - m, h + m)]);
        assert_eq!(
            of(h + m, h + 59 * m),
            [span(Tier::Minute, h + m, h + 59 * m)]
        );
        assert!(of(h, h).is_empty());
        assert!(of(h + m, h).is_empty());
    }

    /// Newest-first reads must walk an index backwards and stop at the limit; a sort (a temp
    /// b-tree) or a table scan would read the whole workspace first.
    #[test]
    fn newest_first_reads_walk_an_index_without_sorting() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let filters = [
            UsageFilter::default(),
            UsageFilter {
                model: Some("m".into()),
                ..UsageFilter::default()
            },
            UsageFilter {
                outcome: Some("timeout".into()),
                ..UsageFilter::default()
            },
            UsageFilter {
                classification: Some("failed".into()),
                stream: Some(true),
                ..UsageFilter::default()
            },
            UsageFilter {
                status: Some(429),
                ..UsageFilter::default()
            },
            UsageFilter {
                channel: Some("c".into()),
                ..UsageFilter::default()
            },
            UsageFilter {
                provider: Some("p".into()),
                dialect: Some("chat".into()),
                ..UsageFilter::default()
            },
            UsageFilter {
                outcome: Some("completed".into()),
                status: Some(200),
                ..UsageFilter::default()
            },
            UsageFilter {
                group: Some("g".into()),
                endpoint: Some("generation".into()),
                region: Some("r".into()),
                ..UsageFilter::default()
            },
        ];
        for filter in &filters {
            for window in [None, Some((1, 2))] {
                let ws = Value::Blob(vec![1]);
                let (sql, values) = recent_sql(&ws, filter, window, 50);
                let plan: Vec<String> = store
                    .with_conn(|c| {
                        let mut stmt = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                        let rows = stmt
                            .query_map(params_from_iter(values), |r| r.get::<_, String>(3))?
                            .collect::<rusqlite::Result<Vec<_>>>()?;
                        Ok(rows)
                    })
                    .unwrap();
                let plan = plan.join(" | ");
                assert!(
                    plan.contains("USING INDEX"),
                    "{filter:?} {window:?}: {plan}"
                );
                assert!(
                    !plan.contains("TEMP B-TREE"),
                    "{filter:?} {window:?}: {plan}"
                );
                // A filter only unusual requests match walks their partial index.
                assert_eq!(
                    plan.contains("requests_ws_unusual"),
                    asks_unusual(filter),
                    "{filter:?} {window:?}: {plan}"
                );
            }
        }
    }
}
