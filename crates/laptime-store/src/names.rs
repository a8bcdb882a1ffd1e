//! How SQLite stores a request's names (schema v16 on): the model, provider, channel, routing
//! group, dialect, endpoint and region of a row hold a code of one or two bytes, and the
//! `names` table holds each name once. A name repeats in every row of its requests and in the
//! model and channel indexes; a code costs 2 bytes of row where `claude-sonnet-4` cost 16.
//!
//! The columns are `TEXT`: SQLite would turn an integer into its digits there, while a blob
//! stays a blob, so a code is a blob and a name is text, told apart by type. A text never
//! equals a blob, so reading resolves a blob through `names` and keeps a text as it is
//! ([`crate::records::SELECT`]'s columns), and a filter compares the column with the name's
//! code when it has one ([`coded_equals`]).
//!
//! A name gets a code the first time a row names it and keeps it; the table takes at most
//! [`CAP`] names of at most [`MAX_NAME`] bytes, since model names come from clients: a name it
//! cannot take is stored as text in every row, so a name is only ever stored one way.
//!
//! Since v17 the rollups' text dimensions hold codes of the same table ([`crate::rollups`]),
//! found or given by [`Codes::of_names`]; rollups written before were coded by the migration.
//!
//! Since v19 a row's workspace, key id and instance are codes too (`ws_` and 16 hex digits cost
//! 20 bytes of the row and 20 of its index by workspace; `key_` and 16 hex digits, 21 of the
//! row), and a read asks for the one form a workspace is stored in ([`stored`]). The rollups
//! keep the workspace as text: they are keyed by it first, and a workspace's share of their
//! bytes is small. Rows written from v16 to v18 held text when they were created before the
//! store moved to codes (a moment `name_forms` kept); v19 rewrote every row with codes and
//! cleared it ([`crate::wide`]).

use foldhash::HashMap;

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, OptionalExtension};

use laptime_core::timeline::RequestRecord;

/// The most names the table takes: every code fits in two bytes.
pub(crate) const CAP: i64 = 0xFFFF;

/// The longest name that gets a code; a longer one is stored as text.
pub(crate) const MAX_NAME: usize = 64;

/// The columns whose names are coded, as `requests` names them.
pub(crate) const COLUMNS: [&str; 7] = [
    "model", "provider", "channel", "grp", "dialect", "endpoint", "region",
];

/// A coded column read back as its name: the name of its code, or the text it holds.
macro_rules! named {
    ($col:literal) => {
        concat!(
            "COALESCE((SELECT name FROM names WHERE code = requests.",
            $col,
            "), requests.",
            $col,
            ")"
        )
    };
}
pub(crate) use named;

/// The `WHERE` term that compares coded `col` with the name bound as `?{n}`: its code when the
/// name has one, else the name (stored as text then, see the module doc).
pub(crate) fn coded_equals(col: &str, n: usize) -> String {
    format!(" AND {col} = COALESCE((SELECT code FROM names WHERE name = ?{n}), ?{n})")
}

/// The code of the `n`th name: `n` in big-endian bytes without leading zeros.
fn code_of(n: i64) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    bytes[skip..].to_vec()
}

/// The codes of the names a batch of records writes, found or given within its transaction.
pub(crate) struct Codes {
    /// Each name seen, with its code (`None`: stored as text, the table being full). Looked up
    /// about ten times a record, so hashed with foldhash (seeded per process, as std's SipHash
    /// is): under wrk the codes' share of the recorder's time went from 10.5 % to 5.2 %.
    codes: HashMap<String, Option<Vec<u8>>>,
}

impl Codes {
    /// Finds the code of every name `records` write (their workspaces, key ids and instances
    /// among them), giving one to each new name the table can take.
    pub(crate) fn of(tx: &Connection, records: &[RequestRecord]) -> rusqlite::Result<Self> {
        let names = records.iter().flat_map(|r| {
            names_of(r).into_iter().flatten().chain(
                [&r.workspace_id, &r.key_id, &r.instance]
                    .into_iter()
                    .filter_map(|n| n.as_deref()),
            )
        });
        Ok(Self {
            codes: find_or_add(tx, names)?,
        })
    }

    /// Finds the code of each of `names` (rollup keys' names: coded whenever the table can take
    /// them, see [`crate::rollups`]), giving one to each new name the table can take.
    pub(crate) fn of_names<'n>(
        tx: &Connection,
        names: impl IntoIterator<Item = &'n str>,
    ) -> rusqlite::Result<Self> {
        Ok(Self {
            codes: find_or_add(tx, names)?,
        })
    }

    /// What a row stores for `name` (one of its names, its workspace, key id or instance):
    /// NULL for none.
    pub(crate) fn value<'a>(&'a self, name: Option<&'a str>) -> ToSqlOutput<'a> {
        match name {
            Some(name) => self.stored(name),
            None => ToSqlOutput::Borrowed(ValueRef::Null),
        }
    }

    /// What a column stores for `name`: its code when it has one, else the name as text (`""`,
    /// a rollup key's absent value, among them).
    pub(crate) fn stored<'a>(&'a self, name: &'a str) -> ToSqlOutput<'a> {
        match self.codes.get(name) {
            Some(Some(code)) => ToSqlOutput::Borrowed(ValueRef::Blob(code)),
            _ => ToSqlOutput::Borrowed(ValueRef::Text(name.as_bytes())),
        }
    }
}

/// What a coded column holds for `name`: its code, or the name itself when it has none (too
/// long, or the table full when it came): a name is stored one way only.
pub(crate) fn stored(conn: &Connection, name: &str) -> rusqlite::Result<Value> {
    let code: Option<Vec<u8>> = conn
        .prepare_cached("SELECT code FROM names WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .optional()?;
    Ok(code.map_or_else(|| Value::Text(name.to_string()), Value::Blob))
}

/// Each of `names` with its code, found in the table or added to it (`None`: stored as text,
/// the name too long or the table full). `""` (a rollup key's absent value) is not given one:
/// as text it costs no byte; it keeps one an earlier build gave it, so that it is stored one way.
fn find_or_add<'n>(
    tx: &Connection,
    names: impl IntoIterator<Item = &'n str>,
) -> rusqlite::Result<HashMap<String, Option<Vec<u8>>>> {
    let mut codes = HashMap::default();
    let mut find = tx.prepare_cached("SELECT code FROM names WHERE name = ?1")?;
    let mut add = tx.prepare_cached("INSERT INTO names (code, name) VALUES (?1, ?2)")?;
    let mut count: Option<i64> = None;
    for name in names {
        if name.len() > MAX_NAME || codes.contains_key(name) {
            continue;
        }
        let found: Option<Vec<u8>> = find.query_row([name], |r| r.get(0)).optional()?;
        if found.is_some() || name.is_empty() {
            codes.insert(name.to_string(), found);
            continue;
        }
        let n = match count {
            Some(n) => n,
            None => tx.query_row("SELECT count(*) FROM names", [], |r| r.get(0))?,
        };
        if n >= CAP {
            count = Some(n);
            codes.insert(name.to_string(), None);
            continue;
        }
        let code = code_of(n + 1);
        add.execute(rusqlite::params![code, name])?;
        codes.insert(name.to_string(), Some(code));
        count = Some(n + 1);
    }
    Ok(codes)
}

/// Whether one of `names` can be in no row and no rollup: it has no code although it could
/// have one (not too long, the table not full), so nothing ever stored it.
/// Names are never removed from the table, and every rollup's names have codes (v17) but for
/// those the table could not take.
pub(crate) fn any_never_stored<'n>(
    conn: &Connection,
    names: impl IntoIterator<Item = &'n str>,
) -> rusqlite::Result<bool> {
    let mut find = conn.prepare_cached("SELECT 1 FROM names WHERE name = ?1")?;
    let mut full: Option<bool> = None;
    for name in names {
        if name.is_empty() || name.len() > MAX_NAME || find.exists([name])? {
            continue;
        }
        let full = match full {
            Some(f) => f,
            None => *full.insert(
                conn.query_row("SELECT count(*) FROM names", [], |r| r.get::<_, i64>(0))? >= CAP,
            ),
        };
        if !full {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `table.col` read back as its name: the name of its code, or the text it holds ([`named`]
/// for any table).
pub(crate) fn resolved(table: &str, col: &str) -> String {
    format!("COALESCE((SELECT name FROM names WHERE code = {table}.{col}), {table}.{col})")
}

/// The names of `r` in the order of [`COLUMNS`].
pub(crate) fn names_of(r: &RequestRecord) -> [Option<&str>; 7] {
    [
        r.model.as_deref(),
        r.provider.as_deref(),
        r.channel.as_deref(),
        r.group.as_deref(),
        Some(r.dialect.as_str()),
        Some(r.exchange.endpoint.as_str()),
        r.region.as_deref(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::records::{get, insert_batch};
    use crate::usage::{recent_filtered, UsageFilter};
    use crate::Store;
    use laptime_core::limit::Zone;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        (dir, store)
    }

    fn write(store: &Store, records: &[RequestRecord]) {
        store
            .with_conn(|c| insert_batch(c, records, &Zone::utc()))
            .unwrap();
    }

    /// The stored type of each coded column of the row of `id`, in the order of [`COLUMNS`].
    fn forms(store: &Store, id: &str) -> Vec<String> {
        let sql = format!(
            "SELECT {} FROM requests WHERE request_id = ?1",
            COLUMNS.map(|c| format!("typeof({c})")).join(", ")
        );
        store
            .with_conn(|c| {
                Ok(c.query_row(&sql, [crate::stored_id::key(id)], |r| {
                    (0..COLUMNS.len()).map(|i| r.get(i)).collect()
                })?)
            })
            .unwrap()
    }

    fn ids(records: &[RequestRecord]) -> Vec<&str> {
        records.iter().map(|r| r.request_id.as_str()).collect()
    }

    fn named(id: &str, created: i64, model: &str) -> RequestRecord {
        let mut r = sample(id, "ws", created);
        r.model = Some(model.into());
        r.region = Some("eu-west".into());
        r
    }

    #[test]
    fn a_rows_names_are_codes_and_read_back_as_the_names() {
        let (_dir, store) = store();
        let mut bare = sample("b", "ws", 2);
        (bare.provider, bare.channel, bare.group, bare.region) = (None, None, None, None);
        let records = [named("a", 1, "m-1"), bare, named("c", 3, "m-2")];
        write(&store, &records);
        assert_eq!(forms(&store, "a"), ["blob"; 7]);
        let ws_forms: Vec<String> = store
            .with_conn(|c| {
                let mut stmt = c.prepare("SELECT DISTINCT typeof(workspace_id) FROM requests")?;
                let forms = stmt.query_map([], |r| r.get(0))?;
                Ok(forms.collect::<rusqlite::Result<_>>()?)
            })
            .unwrap();
        assert_eq!(ws_forms, ["blob"]);
        assert_eq!(
            forms(&store, "b"),
            ["blob", "null", "null", "null", "blob", "blob", "null"]
        );
        for r in &records {
            let back = store.with_conn(|c| get(c, "ws", &r.request_id)).unwrap();
            assert_eq!(back.as_ref(), Some(r));
        }
        // Each name once (the rollups' names besides): m-1, m-2, sim-fast, sim, default,
        // messages, generation, eu-west.
        let names: i64 = store
            .with_conn(|c| {
                Ok(c.query_row(
                    "SELECT count(*) FROM names WHERE name IN ('m-1', 'm-2', 'sim-fast', 'sim',
                        'default', 'messages', 'generation', 'eu-west')",
                    [],
                    |r| r.get(0),
                )?)
            })
            .unwrap();
        assert_eq!(names, 8);
        let code: Vec<u8> = store
            .with_conn(|c| {
                Ok(
                    c.query_row("SELECT code FROM names WHERE name = 'm-1'", [], |r| {
                        r.get(0)
                    })?,
                )
            })
            .unwrap();
        assert_eq!(code.len(), 1);
    }

    /// A moment left in `name_forms` (re-running v16, as a test that takes migrations back
    /// does, notes one) changes nothing since v19: every row holds codes, whenever it was
    /// created, and filters find them newest first.
    #[test]
    fn every_row_holds_codes_whenever_it_was_created_and_filters_find_them_newest_first() {
        let (_dir, store) = store();
        store
            .with_conn(|c| Ok(c.execute("INSERT INTO name_forms VALUES (100)", [])?))
            .unwrap();
        let records: Vec<RequestRecord> = (0..8)
            .map(|i| {
                let model = if i % 2 == 0 { "even" } else { "odd" };
                named(&format!("r{i}"), 40 + i * 20, model)
            })
            .collect();
        write(&store, &records);
        for r in &records {
            assert_eq!(
                forms(&store, &r.request_id),
                ["blob"; 7],
                "{}",
                r.request_id
            );
            let back = store.with_conn(|c| get(c, "ws", &r.request_id)).unwrap();
            assert_eq!(back.as_ref(), Some(r));
        }
        let read = |filter: UsageFilter, window, limit| {
            let got = store
                .with_conn(|c| recent_filtered(c, "ws", &filter, window, limit))
                .unwrap();
            ids(&got).into_iter().map(String::from).collect::<Vec<_>>()
        };
        let even = || UsageFilter {
            model: Some("even".into()),
            region: Some("eu-west".into()),
            ..UsageFilter::default()
        };
        assert_eq!(read(even(), None, 50), ["r6", "r4", "r2", "r0"]);
        assert_eq!(read(even(), None, 3), ["r6", "r4", "r2"]);
        assert_eq!(read(even(), None, 2), ["r6", "r4"]);
        assert_eq!(read(even(), Some((0, 100)), 50), ["r2", "r0"]);
        assert_eq!(read(even(), Some((100, 1_000)), 50), ["r6", "r4"]);
        assert_eq!(read(even(), Some((60, 130)), 50), ["r4", "r2"]);
        let odd_messages = UsageFilter {
            model: Some("odd".into()),
            dialect: Some("messages".into()),
            endpoint: Some("generation".into()),
            channel: Some("sim".into()),
            provider: Some("sim".into()),
            group: Some("default".into()),
            ..UsageFilter::default()
        };
        assert_eq!(read(odd_messages, None, 50), ["r7", "r5", "r3", "r1"]);
        let unknown = UsageFilter {
            model: Some("none".into()),
            ..UsageFilter::default()
        };
        assert!(read(unknown, None, 50).is_empty());
        assert_eq!(
            read(UsageFilter::default(), None, 50),
            ["r7", "r6", "r5", "r4", "r3", "r2", "r1", "r0"]
        );
    }

    #[test]
    fn a_name_the_table_cannot_take_is_text_in_every_row_and_is_found() {
        let (_dir, store) = store();
        let long = "l".repeat(MAX_NAME + 1);
        write(&store, &[named("long", 1, &long)]);
        assert_eq!(forms(&store, "long")[0], "text");
        // Fill the table up to its cap.
        store
            .with_conn(|c| {
                let tx = c.transaction()?;
                let n: i64 = tx.query_row("SELECT count(*) FROM names", [], |r| r.get(0))?;
                let mut add = tx.prepare("INSERT INTO names (code, name) VALUES (?1, ?2)")?;
                for i in n + 1..=CAP {
                    add.execute(rusqlite::params![code_of(i), format!("fill-{i}")])?;
                }
                drop(add);
                tx.commit()?;
                Ok(())
            })
            .unwrap();
        write(
            &store,
            &[
                named("late", 2, "late-model"),
                named("known", 3, &format!("fill-{CAP}")),
            ],
        );
        assert_eq!(forms(&store, "late")[0], "text");
        assert_eq!(forms(&store, "known")[0], "blob");
        let by_model = |model: &str| {
            let filter = UsageFilter {
                model: Some(model.into()),
                ..UsageFilter::default()
            };
            let got = store
                .with_conn(|c| recent_filtered(c, "ws", &filter, None, 50))
                .unwrap();
            ids(&got).into_iter().map(String::from).collect::<Vec<_>>()
        };
        assert_eq!(by_model("late-model"), ["late"]);
        assert_eq!(by_model(&format!("fill-{CAP}")), ["known"]);
        assert_eq!(by_model(&long), ["long"]);
        // The rollups store each name the same way and find it the same way.
        for model in ["late-model", &format!("fill-{CAP}"), long.as_str()] {
            let filter = UsageFilter {
                model: Some(model.into()),
                ..UsageFilter::default()
            };
            let got = store
                .with_conn(|c| crate::usage::usage(c, "ws", 0, 60_000_000, &filter, &[]))
                .unwrap();
            assert_eq!(got.total.requests, 1, "{model}");
        }
        let back = store.with_conn(|c| get(c, "ws", "late")).unwrap();
        assert_eq!(back.and_then(|r| r.model).as_deref(), Some("late-model"));

        // A workspace that comes when the table is full is text in its rows, and found,
        // filtered and retained as the coded one is.
        let late_ws = sample("late-ws", "ws-late", 4);
        write(&store, std::slice::from_ref(&late_ws));
        let ws_form = |id: &str| -> String {
            store
                .with_conn(|c| {
                    Ok(c.query_row(
                        "SELECT typeof(workspace_id) FROM requests WHERE request_id = ?1",
                        [id],
                        |r| r.get(0),
                    )?)
                })
                .unwrap()
        };
        assert_eq!(
            (ws_form("late-ws"), ws_form("late")),
            ("text".into(), "blob".into())
        );
        let back = store.with_conn(|c| get(c, "ws-late", "late-ws")).unwrap();
        assert_eq!(back.as_ref(), Some(&late_ws));
        assert_eq!(by_model("sim-fast"), Vec::<String>::new());
        let late_recent = store
            .with_conn(|c| crate::records::recent(c, "ws-late", 10))
            .unwrap();
        assert_eq!(ids(&late_recent), ["late-ws"]);
        let gone = store
            .with_conn(|c| crate::records::delete_older_than(c, 1_000))
            .unwrap();
        assert_eq!(gone, 4);
        let left: i64 = store
            .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn codes_are_the_shortest_big_endian_bytes_and_never_repeat() {
        assert_eq!(code_of(1), [1]);
        assert_eq!(code_of(255), [255]);
        assert_eq!(code_of(256), [1, 0]);
        assert_eq!(code_of(CAP), [0xFF, 0xFF]);
        let all: std::collections::HashSet<Vec<u8>> = (1..=CAP).map(code_of).collect();
        assert_eq!(all.len() as i64, CAP);
    }
}
