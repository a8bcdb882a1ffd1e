//! Request rows as schemas 1 to 18 held them, which migration 19 reads once to rewrite them in
//! today's layout ([`crate::records::COLUMNS`]).
//!
//! Until v14 every field had a column; v14 packed the fields no query uses into one value and
//! left the other columns NULL, 0 or `''` on newer rows. SQLite gives every column of a row a
//! byte of its header, NULL or not, and does not leave trailing NULLs out. A table cannot drop
//! a column that older rows still need, so v19 writes every row anew as today's writer does:
//! the older rows packed, every name, workspace, key id and instance a code, the outcome and
//! the classification numbers, every gateway id its bytes. No row is stored an older way any
//! more, so the moments `id_forms` and `name_forms` kept are cleared.

use rusqlite::{Connection, Row};

use laptime_core::cost::Cost;
use laptime_core::endpoint::Endpoint;
use laptime_core::limit::Limit;
use laptime_core::slow::Classification;
use laptime_core::timeline::{
    DeadlineKind, ErrorClass, Exchange, Hedge, InBandCarrier, Marks, Outcome, RequestRecord,
    RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;

use crate::names::{named, Codes};
use crate::records::{corrupt, dur, insert_row, insert_sql, named, request_id, untok};
use crate::Result;

/// Rows read and written per step of the rewrite: the records of one step are held in memory.
const STEP: usize = 4096;

/// Migration 19: `requests` rewritten with the columns of [`crate::records::COLUMNS`] alone,
/// in the order the rows were written (which orders requests created in the same microsecond),
/// with the same indexes.
pub(crate) fn rewrite(tx: &Connection) -> Result<()> {
    tx.execute_batch(&format!(
        "DELETE FROM id_forms;
         DELETE FROM name_forms;
         CREATE TABLE requests_v19 ({});",
        crate::schema::REQUESTS_V19
    ))?;
    {
        let mut read = tx.prepare(&format!("{SELECT} ORDER BY rowid"))?;
        let mut rows = read.query([])?;
        let mut step = Vec::with_capacity(STEP);
        loop {
            let row = rows.next()?;
            if let Some(row) = row {
                step.push(from_row(row)?);
            }
            if step.len() == STEP || (row.is_none() && !step.is_empty()) {
                let codes = Codes::of(tx, &step)?;
                let mut write = tx.prepare_cached(&insert_sql("requests_v19"))?;
                for r in step.drain(..) {
                    insert_row(&mut write, &codes, &r)?;
                }
            }
            if row.is_none() {
                break;
            }
        }
    }
    tx.execute_batch(&format!(
        "DROP TABLE requests;
         ALTER TABLE requests_v19 RENAME TO requests;
         {}",
        crate::schema::requests_indexes()
    ))?;
    Ok(())
}

/// The columns [`from_row`] reads, in its order: every column rows had (rows written before
/// schema v14 hold each field in its own), then the packed fields of newer rows. The coded
/// columns read back as their names ([`crate::names`]).
const SELECT: &str = concat!(
    "SELECT request_id, workspace_id, key_id, created_at_us, ",
    named!("model"),
    ", ",
    named!("provider"),
    ", ",
    named!("channel"),
    ", ",
    named!("grp"),
    ", ",
    named!("dialect"),
    ", stream, status, outcome, timeout_kind, error_class, classification,
    flags, auth_us, body_read_us, distribution_us, upstream_start_us, upstream_headers_us,
    first_byte_us, first_event_us, first_effective_us, first_visible_us, last_effective_us,
    upstream_done_us, handler_done_us, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, reasoning_tokens, event_count, text_delta_count, channel_inflight, hedge,
    failover_count, cached, max_output_tokens, reasoning_effort, tool_count, tool_choice,
    response_format, temperature, top_p, ",
    named!("region"),
    ", trace_id, upstream_dialect, instance,
    cache_write_1h_tokens, cost_nano_usd, cost_estimated, admission_us, refused_by, ",
    named!("endpoint"),
    ",
    bytes_in, bytes_out, key_index, estimated_output_tokens, in_band, attempts, packed
    FROM requests"
);

/// A record from a row of [`SELECT`], of either layout.
fn from_row(row: &Row<'_>) -> rusqlite::Result<RequestRecord> {
    match row.get_ref(62)?.as_blob_or_null()? {
        Some(packed) => from_packed_row(row, packed),
        None => from_columns(row),
    }
}

/// A row written since schema v14: the columns it kept and the packed fields.
fn from_packed_row(row: &Row<'_>, packed: &[u8]) -> rusqlite::Result<RequestRecord> {
    let columns = crate::packed::Columns {
        request_id: request_id(row)?,
        created_at_us: row.get(3)?,
        workspace_id: row.get(1)?,
        model: row.get(4)?,
        provider: row.get(5)?,
        channel: row.get(6)?,
        group: row.get(7)?,
        dialect: named(row, 8, "dialect", Dialect::parse)?,
        stream: row.get(9)?,
        status: row.get(10)?,
        outcome: named(row, 11, "outcome", Outcome::parse)?,
        classification: named(row, 14, "classification", Classification::parse)?,
        endpoint: named(row, 55, "endpoint", Endpoint::parse)?,
        input_tokens: untok(row.get(28)?),
        max_output_tokens: untok(row.get(39)?),
        reasoning_effort: row.get(40)?,
        tool_count: row.get(41)?,
        region: row.get(46)?,
    };
    crate::packed::record(columns, packed).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(62, rusqlite::types::Type::Blob, Box::new(e))
    })
}

/// A row written before schema v14: each field in its column.
fn from_columns(row: &Row<'_>) -> rusqlite::Result<RequestRecord> {
    let dialect: String = row.get(8)?;
    let outcome: String = row.get(11)?;
    let error_class: Option<String> = row.get(13)?;
    let timeout_kind: Option<String> = row.get(12)?;
    let classification: String = row.get(14)?;
    let flags: String = row.get(15)?;
    let hedge: String = row.get(36)?;
    let upstream_dialect: Option<String> = row.get(48)?;
    let cost_nano: Option<i64> = row.get(51)?;
    let cost_estimated: Option<bool> = row.get(52)?;
    let refused_by: Option<String> = row.get(54)?;
    let endpoint: String = row.get(55)?;
    let in_band: Option<String> = row.get(60)?;
    Ok(RequestRecord {
        request_id: request_id(row)?,
        workspace_id: row.get(1)?,
        key_id: row.get(2)?,
        created_at_us: row.get(3)?,
        model: row.get(4)?,
        provider: row.get(5)?,
        channel: row.get(6)?,
        group: row.get(7)?,
        dialect: Dialect::parse(&dialect).ok_or_else(|| corrupt("dialect", &dialect))?,
        upstream_dialect: match upstream_dialect {
            Some(d) => Some(Dialect::parse(&d).ok_or_else(|| corrupt("upstream_dialect", &d))?),
            None => None,
        },
        stream: row.get(9)?,
        status: row.get(10)?,
        outcome: Outcome::parse(&outcome).ok_or_else(|| corrupt("outcome", &outcome))?,
        timeout_kind: match timeout_kind {
            Some(k) => Some(DeadlineKind::parse(&k).ok_or_else(|| corrupt("timeout_kind", &k))?),
            None => None,
        },
        error_class: match error_class {
            Some(c) => Some(ErrorClass::parse(&c).ok_or_else(|| corrupt("error_class", &c))?),
            None => None,
        },
        classification: Classification::parse(&classification)
            .ok_or_else(|| corrupt("classification", &classification))?,
        flags: serde_json::from_str(&flags).map_err(|_| corrupt("flags", &flags))?,
        marks: Marks {
            auth: dur(row.get(16)?),
            admission: dur(row.get(53)?),
            body_read: dur(row.get(17)?),
            distribution: dur(row.get(18)?),
            upstream_start: dur(row.get(19)?),
            upstream_headers: dur(row.get(20)?),
            first_byte: dur(row.get(21)?),
            first_event: dur(row.get(22)?),
            first_effective: dur(row.get(23)?),
            first_visible: dur(row.get(24)?),
            last_effective: dur(row.get(25)?),
            upstream_done: dur(row.get(26)?),
            handler_done: dur(row.get(27)?),
        },
        tokens: Tokens {
            input: untok(row.get(28)?),
            output: untok(row.get(29)?),
            cache_read: untok(row.get(30)?),
            cache_write: untok(row.get(31)?),
            cache_write_1h: untok(row.get(50)?),
            reasoning: untok(row.get(32)?),
            estimated_output: untok(row.get(59)?),
        },
        event_count: row.get(33)?,
        text_delta_count: row.get(34)?,
        channel_inflight: row.get(35)?,
        hedge: Hedge::parse(&hedge).ok_or_else(|| corrupt("hedge", &hedge))?,
        failover_count: row.get(37)?,
        cached: row.get(38)?,
        shape: RequestShape {
            max_output_tokens: untok(row.get(39)?),
            reasoning_effort: row.get(40)?,
            tool_count: row.get(41)?,
            tool_choice: row.get(42)?,
            response_format: row.get(43)?,
            temperature: row.get(44)?,
            top_p: row.get(45)?,
        },
        region: row.get(46)?,
        trace_id: row.get(47)?,
        instance: row.get(49)?,
        cost: cost_nano.map(|n| Cost {
            nano_usd: u64::try_from(n).unwrap_or(0),
            estimated: cost_estimated.unwrap_or(false),
        }),
        refused_by: match refused_by {
            Some(l) => Some(Limit::parse(&l).ok_or_else(|| corrupt("refused_by", &l))?),
            None => None,
        },
        exchange: Exchange {
            endpoint: Endpoint::parse(&endpoint).ok_or_else(|| corrupt("endpoint", &endpoint))?,
            bytes_in: untok(row.get(56)?),
            bytes_out: untok(row.get(57)?),
            key_index: row.get(58)?,
        },
        in_band: match in_band {
            Some(c) => Some(InBandCarrier::parse(&c).ok_or_else(|| corrupt("in_band", &c))?),
            None => None,
        },
        attempts: match row.get::<_, Option<String>>(61)? {
            Some(stored) => crate::attempts::decode(&stored).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    61,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?,
            None => Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::tests::{full, sparse};
    use crate::records::tests::{insert_legacy_rows, sample};
    use crate::records::{get, insert_absent, insert_batch, recent};
    use crate::schema::{migrate, migrate_to, tests::empty_at};
    use laptime_core::limit::Zone;

    /// Writes `records` as builds of v14 to v18 did: the packed row with the older columns that
    /// may not be NULL at their empty values; with `text_names`, the names as text, as those
    /// builds wrote a request created before the store moved to codes.
    fn insert_v18_rows(conn: &Connection, records: &[RequestRecord], text_names: bool) {
        let codes = Codes::of(conn, records).unwrap();
        let mut write = conn
            .prepare_cached(&format!(
                "INSERT INTO requests ({}, flags, event_count, text_delta_count, hedge,
                    failover_count, cached)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                    ?17, ?18, ?19, ?20, ?21, '', 0, 0, '', 0, 0)",
                crate::records::COLUMNS
            ))
            .unwrap();
        for r in records {
            insert_row(&mut write, &codes, r).unwrap();
        }
        // Those builds stored the workspace, the outcome and the classification as text, and
        // the key id and instance packed.
        conn.execute_batch(
            "UPDATE requests SET workspace_id = (SELECT name FROM names WHERE code = workspace_id)
             WHERE typeof(workspace_id) = 'blob'",
        )
        .unwrap();
        let mut pack = conn
            .prepare(
                "UPDATE requests SET key_id = NULL, instance = NULL, packed = ?1, outcome = ?2,
                    classification = ?3
                 WHERE request_id = ?4",
            )
            .unwrap();
        for r in records {
            let key = crate::stored_id::key(&r.request_id);
            let packed = crate::packed::encode(r);
            let (outcome, class) = (r.outcome.as_str(), r.classification.as_str());
            pack.execute(rusqlite::params![packed, outcome, class, &key])
                .unwrap();
            for col in crate::names::COLUMNS.iter().filter(|_| text_names) {
                conn.execute(
                    &format!(
                        "UPDATE requests SET {col} = (SELECT name FROM names WHERE code = {col})
                         WHERE request_id = ?1 AND typeof({col}) = 'blob'"
                    ),
                    [&key],
                )
                .unwrap();
            }
        }
    }

    fn column_types(conn: &Connection, col: &str) -> Vec<String> {
        conn.prepare(&format!(
            "SELECT typeof({col}) FROM requests ORDER BY rowid"
        ))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// A store that had rows of each older form (every field in its column and the id and the
    /// names as text; packed with text names; packed with codes and bytes) reads every one back
    /// as written after v19, from rows of today's columns alone, in today's form alone.
    #[test]
    fn v19_rewrites_rows_of_every_older_form_into_todays_and_each_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        empty_at(&conn, 14);
        let mut columns = full();
        columns.request_id = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f".into();
        // The most the older columns held.
        columns.tokens.estimated_output = Some(i64::MAX as u64);
        let ws = columns.workspace_id.clone().unwrap();
        let mut packed_text = full();
        packed_text.request_id = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e70".into();
        packed_text.model = Some("a-model-only-text-rows-name".into());
        insert_legacy_rows(&conn, std::slice::from_ref(&columns));
        // v15 and v16 note the moments after which rows hold bytes and codes; a row created
        // before the second is written with its names as text still.
        migrate_to(&mut conn, 18).unwrap();
        insert_v18_rows(&conn, std::slice::from_ref(&packed_text), true);
        assert_eq!(count(&conn, "SELECT count(*) FROM id_forms"), 1);
        assert_eq!(count(&conn, "SELECT count(*) FROM name_forms"), 1);
        let mut bare = sparse();
        bare.request_id = "req_bare".into();
        bare.workspace_id = Some(ws.clone());
        // Two requests of one microsecond: the later written is the newer.
        let tie = 1_900_000_000_000_000;
        let (first, second) = (
            sample("tie_first", &ws, tie),
            sample("tie_second", &ws, tie),
        );
        let newer = [bare, first, second];
        insert_v18_rows(&conn, &newer, false);
        assert_eq!(column_types(&conn, "request_id")[..2], ["text", "blob"]);
        assert_eq!(column_types(&conn, "model")[..3], ["text", "text", "null"]);
        assert!(column_types(&conn, "workspace_id")
            .iter()
            .all(|t| t == "text"));

        migrate(&mut conn).unwrap();
        let all: Vec<&RequestRecord> = [&columns, &packed_text].into_iter().chain(&newer).collect();
        for r in &all {
            assert_eq!(get(&conn, &ws, &r.request_id).unwrap().as_ref(), Some(*r));
        }
        let got: Vec<String> = recent(&conn, &ws, 10)
            .unwrap()
            .into_iter()
            .map(|r| r.request_id)
            .collect();
        assert_eq!(got[..2], ["tie_second", "tie_first"]);
        assert_eq!(got.len(), all.len());

        let names: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('requests')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let want: Vec<&str> = crate::records::COLUMNS.split(", ").map(str::trim).collect();
        assert_eq!(names, want);
        // Every gateway id is bytes and every name and workspace a code, and nothing says
        // otherwise.
        assert_eq!(column_types(&conn, "request_id")[..2], ["blob", "blob"]);
        for col in crate::names::COLUMNS
            .into_iter()
            .chain(["workspace_id", "key_id", "instance"])
        {
            let types = column_types(&conn, col);
            assert!(
                types.iter().all(|t| t == "blob" || t == "null"),
                "{col}: {types:?}"
            );
        }
        assert_eq!(count(&conn, "SELECT count(*) FROM id_forms"), 0);
        assert_eq!(count(&conn, "SELECT count(*) FROM name_forms"), 0);
        // Found by either form of its id, and a replay writes nothing again.
        let replay = insert_absent(
            &mut conn,
            &[columns.clone(), packed_text.clone()],
            &Zone::utc(),
        );
        assert!(replay.unwrap().is_empty());
        // Written again, a rewritten row is replaced, not doubled.
        let mut again = columns.clone();
        again.status = 599;
        insert_batch(&mut conn, std::slice::from_ref(&again), &Zone::utc()).unwrap();
        assert_eq!(
            count(&conn, "SELECT count(*) FROM requests"),
            all.len() as i64
        );
        assert_eq!(get(&conn, &ws, &columns.request_id).unwrap(), Some(again));
        // Taken back and run again (as a test that takes a migration back does), v19 is done.
        conn.pragma_update(None, "user_version", 18).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(
            count(&conn, "SELECT count(*) FROM requests"),
            all.len() as i64
        );
    }

    /// The rewrite goes in steps of [`STEP`] rows: more than one step loses and doubles none.
    #[test]
    fn v19_rewrites_stores_larger_than_a_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        empty_at(&conn, 18);
        let rows: Vec<RequestRecord> = (0..STEP * 2 + 3)
            .map(|i| sample(&format!("r{i}"), "ws", i as i64))
            .collect();
        insert_v18_rows(&conn, &rows, false);
        migrate(&mut conn).unwrap();
        let got = recent(&conn, "ws", rows.len() as u32).unwrap();
        let want: Vec<RequestRecord> = rows.into_iter().rev().collect();
        assert_eq!(got, want);
    }
}
