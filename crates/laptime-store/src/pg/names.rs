//! How PostgreSQL stores a request's names (schema v11 on): its model, provider, channel,
//! routing group, dialect, endpoint and region as one row of `name_sets`, which the request row
//! refers to by a 4-byte id instead of holding about 70 bytes of text. A deployment sees few
//! such sets (its models times its channels, groups and dialects).
//!
//! Reading takes each name from the row or, when the row refers to a set, from the set
//! ([`SET_NAMES`]); a filter asks for the row's text or one of the sets with the name
//! ([`equals`], [`is_null`]). So rows written before v11, which hold their text, and rows
//! written since read and filter alike, and a row may hold its text whenever no set is at
//! hand: the table takes at most [`CAP`] sets of names of at most [`MAX_NAME`] bytes (model
//! names come from clients), and a set another instance adds in the same moment may not be
//! seen by this batch.
//!
//! A batch finds its sets with one query, and adds those missing with one more, in a statement
//! of their own before the batch's transaction: a set is never changed or removed, so one added
//! for a batch that then fails costs nothing.
//!
//! From schema v13 a request's workspace, key id and instance are codes too: the id of one row
//! of `names`, which the row holds instead of their text (about 20 bytes each, repeated in every
//! request of a workspace, key or instance). They are found and added as sets are, and every
//! such text has one, always: workspaces and keys are made by administrators and instances by
//! starting the gateway, so the table grows with them, never with traffic.

use std::collections::HashMap;

use laptime_core::timeline::RequestRecord;
use tokio_postgres::types::ToSql;

use crate::Result;

/// The most sets the table takes (a batch adding at once may pass it by its own sets).
pub(super) const CAP: i64 = 100_000;

/// The longest name a set holds; a request with a longer one keeps its text.
pub(super) const MAX_NAME: usize = 64;

/// The request columns a set holds, in the order of [`crate::names::names_of`].
const COLUMNS: [&str; 7] = crate::names::COLUMNS;

/// The names of the set a row refers to (NULL for a row that holds its own), as one array
/// in the order of [`COLUMNS`]: one lookup per row read, rather than a join, which left the
/// planner free to hash the whole table before the limit.
pub(super) const SET_NAMES: &str = "(SELECT ARRAY[s_model, s_provider, s_channel, s_grp, \
     s_dialect, s_endpoint, s_region] FROM name_sets WHERE id = requests.name_set)";

/// The `WHERE` term for a name column equal to `value` (a parameter): the row's text, or a set
/// with it, whose ids are found once per statement.
pub(crate) fn equals(col: &str, value: &str) -> String {
    format!(
        " AND (requests.{col} = {value} OR requests.name_set = \
         ANY(ARRAY(SELECT id FROM name_sets WHERE s_{col} = {value})))"
    )
}

/// The `WHERE` term for a name column without a value, in the row and in its set.
pub(crate) fn is_null(col: &str) -> String {
    format!(
        " AND requests.{col} IS NULL AND (requests.name_set IS NULL OR requests.name_set = \
         ANY(ARRAY(SELECT id FROM name_sets WHERE s_{col} IS NULL)))"
    )
}

/// Whether `col` is one a set holds.
pub(crate) fn in_set(col: &str) -> bool {
    COLUMNS.contains(&col)
}

/// The set ids of a batch's names, by their key, and the codes of its workspaces, key ids and
/// instances, by their text.
#[derive(Debug, Default)]
pub(crate) struct NameSets {
    ids: HashMap<String, i32>,
    codes: HashMap<String, i32>,
}

/// The key of a request's names: the seven as a JSON array, which no two sets share.
fn key_of(r: &RequestRecord) -> Option<String> {
    let names = crate::names::names_of(r);
    if names.iter().flatten().any(|n| n.len() > MAX_NAME) {
        return None;
    }
    serde_json::to_string(&names).ok()
}

impl NameSets {
    /// Finds the set of every request of `records`, adding the sets missing while the table
    /// has room.
    pub(crate) async fn of(c: &tokio_postgres::Client, records: &[RequestRecord]) -> Result<Self> {
        let mut sets = NameSets::sets_of(c, records).await?;
        sets.codes = codes_of(c, records).await?;
        Ok(sets)
    }

    async fn sets_of(c: &tokio_postgres::Client, records: &[RequestRecord]) -> Result<Self> {
        let mut wanted: HashMap<String, [Option<&str>; 7]> = HashMap::new();
        for r in records {
            if let Some(key) = key_of(r) {
                wanted
                    .entry(key)
                    .or_insert_with(|| crate::names::names_of(r));
            }
        }
        let mut sets = NameSets::default();
        if wanted.is_empty() {
            return Ok(sets);
        }
        let keys: Vec<&str> = wanted.keys().map(String::as_str).collect();
        let found = c
            .query(
                "SELECT id, key FROM name_sets WHERE key = ANY($1)",
                &[&keys],
            )
            .await?;
        sets.take(&found)?;
        let mut missing: Vec<(&String, &[Option<&str>; 7])> = wanted
            .iter()
            .filter(|(k, _)| !sets.ids.contains_key(*k))
            .collect();
        if missing.is_empty() {
            return Ok(sets);
        }
        // One order for every instance, so that two adding at once never wait on each other
        // in a cycle.
        missing.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let keys: Vec<&str> = missing.iter().map(|(k, _)| k.as_str()).collect();
        let column = |i: usize| -> Vec<Option<&str>> {
            missing
                .iter()
                .map(|(_, n)| n.get(i).copied().flatten())
                .collect()
        };
        let names: Vec<Vec<Option<&str>>> = (0..COLUMNS.len()).map(column).collect();
        let sql = format!(
            "INSERT INTO name_sets (key, {})
             SELECT * FROM UNNEST($1::text[], {})
             WHERE (SELECT count(*) FROM name_sets) < {CAP}
             ORDER BY 1
             ON CONFLICT (key) DO NOTHING
             RETURNING id, key",
            COLUMNS.map(|c| format!("s_{c}")).join(", "),
            (2..=COLUMNS.len() + 1)
                .map(|i| format!("${i}::text[]"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&keys];
        for n in &names {
            params.push(n);
        }
        let added = c.query(&sql, &params).await?;
        sets.take(&added)?;
        Ok(sets)
    }

    fn take(&mut self, rows: &[tokio_postgres::Row]) -> Result<()> {
        for row in rows {
            self.ids.insert(row.try_get(1)?, row.try_get(0)?);
        }
        Ok(())
    }

    /// The set `r`'s row refers to, `None` when it holds its text.
    pub(crate) fn of_record(&self, r: &RequestRecord) -> Option<i32> {
        key_of(r).and_then(|k| self.ids.get(&k).copied())
    }

    /// The code of a workspace, key id or instance of the batch (`None` for none).
    pub(crate) fn code(&self, text: Option<&str>) -> Option<i32> {
        text.and_then(|t| self.codes.get(t).copied())
    }
}

/// The texts a request's row holds as codes: its workspace, key id and instance.
fn coded(r: &RequestRecord) -> [Option<&str>; 3] {
    [
        r.workspace_id.as_deref(),
        r.key_id.as_deref(),
        r.instance.as_deref(),
    ]
}

/// The code of every text of `records` that [`coded`] gives, adding those `names` lacks.
async fn codes_of(
    c: &tokio_postgres::Client,
    records: &[RequestRecord],
) -> Result<HashMap<String, i32>> {
    let mut wanted: Vec<&str> = records.iter().flat_map(coded).flatten().collect();
    // Sorted, so that two instances adding at once never wait on each other in a cycle.
    wanted.sort_unstable();
    wanted.dedup();
    let mut codes = HashMap::with_capacity(wanted.len());
    if wanted.is_empty() {
        return Ok(codes);
    }
    let find = "SELECT id, value FROM names WHERE value = ANY($1)";
    take_codes(&mut codes, &c.query(find, &[&wanted]).await?)?;
    let missing: Vec<&str> = wanted
        .into_iter()
        .filter(|t| !codes.contains_key(*t))
        .collect();
    if missing.is_empty() {
        return Ok(codes);
    }
    let add = "INSERT INTO names (value) SELECT * FROM UNNEST($1::text[]) ORDER BY 1
               ON CONFLICT (value) DO NOTHING RETURNING id, value";
    take_codes(&mut codes, &c.query(add, &[&missing]).await?)?;
    // A text another instance added in the same moment was not returned above.
    take_codes(&mut codes, &c.query(find, &[&missing]).await?)?;
    match missing.iter().find(|t| !codes.contains_key(**t)) {
        Some(t) => Err(crate::corrupt("name without a code", t)),
        None => Ok(codes),
    }
}

fn take_codes(codes: &mut HashMap<String, i32>, rows: &[tokio_postgres::Row]) -> Result<()> {
    for row in rows {
        codes.insert(row.try_get(1)?, row.try_get(0)?);
    }
    Ok(())
}

/// The text of the code a row's column `col` holds, as a read's column: `names` is read once
/// per row, as [`SET_NAMES`] is.
pub(super) fn text_of(col: &str) -> String {
    format!("(SELECT value FROM names WHERE id = requests.{col})")
}

/// The `WHERE` term for a coded column equal to the text of the parameter `value`.
pub(crate) fn code_equals(col: &str, value: &str) -> String {
    format!(" AND requests.{col} = (SELECT id FROM names WHERE value = {value})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::usage::UsageFilter;

    fn named(id: &str, created: i64, model: &str, region: Option<&str>) -> RequestRecord {
        let mut r = sample(id, "ws", created);
        r.model = Some(model.into());
        r.region = region.map(str::to_string);
        r
    }

    /// Rows that refer to a set, rows that hold their text (a name too long for a set, a table
    /// at its cap, a row from before v11) read back as written and answer every name filter
    /// alike.
    #[tokio::test]
    async fn rows_refer_to_shared_sets_and_filters_find_rows_of_either_form() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let store = crate::Store::open_postgres(schema.url()).await.unwrap();
        let config: tokio_postgres::Config = schema.url().parse().unwrap();
        let client = crate::pg::connect(&config).await.unwrap();
        let day = 20_000 * super::super::records::DAY_US;
        let long = "l".repeat(MAX_NAME + 1);
        let first = vec![
            named("a", day + 1, "m-1", Some("eu")),
            named("b", day + 2, "m-1", Some("eu")),
            named("c", day + 3, "m-2", None),
            named("d", day + 4, &long, Some("eu")),
        ];
        store.insert_batch(first.clone()).await.unwrap();
        let forms = |rows: Vec<tokio_postgres::Row>| -> Vec<(String, Option<i32>, Option<String>)> {
            rows.iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect()
        };
        let stored = forms(
            client
                .query(
                    "SELECT convert_from(request_id, 'UTF8'), name_set, model FROM requests
                     ORDER BY request_id",
                    &[],
                )
                .await
                .unwrap(),
        );
        let set = |i: usize| stored[i].1;
        assert!(set(0).is_some() && set(0) == set(1), "{stored:?}");
        assert!(set(2).is_some() && set(2) != set(0), "{stored:?}");
        assert_eq!(
            (set(3), stored[3].2.as_deref()),
            (None, Some(long.as_str()))
        );
        assert_eq!(stored[0].2, None);
        let sets: i64 = client
            .query_one("SELECT count(*) FROM name_sets", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(sets, 2);

        // A table at its cap: a new set is not added and its row keeps its text.
        client
            .execute(
                "INSERT INTO name_sets (key) SELECT 'fill-' || i FROM generate_series(1, $1::bigint) i",
                &[&(CAP - sets)],
            )
            .await
            .unwrap();
        let late = named("e", day + 5, "m-3", Some("eu"));
        let known = named("f", day + 6, "m-1", Some("eu"));
        store
            .insert_batch(vec![late.clone(), known.clone()])
            .await
            .unwrap();
        let row = client
            .query_one(
                "SELECT name_set, model FROM requests WHERE request_id = convert_to('e', 'UTF8')",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, Option<i32>>(0), None);
        assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("m-3"));
        let row = client
            .query_one(
                "SELECT name_set FROM requests WHERE request_id = convert_to('f', 'UTF8')",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, Option<i32>>(0), set(0));

        let mut all = first;
        all.extend([late, known]);
        for r in &all {
            let back = store.record("ws", &r.request_id).await.unwrap();
            assert_eq!(back.as_ref(), Some(r), "{}", r.request_id);
        }
        let ids = |filter: UsageFilter| {
            let store = &store;
            async move {
                let got = store.recent("ws", filter, None, 50).await.unwrap();
                got.into_iter().map(|r| r.request_id).collect::<Vec<_>>()
            }
        };
        let model = |m: &str| UsageFilter {
            model: Some(m.into()),
            ..UsageFilter::default()
        };
        assert_eq!(ids(model("m-1")).await, ["f", "b", "a"]);
        assert_eq!(ids(model("m-3")).await, ["e"]);
        assert_eq!(ids(model(&long)).await, ["d"]);
        let no_region = UsageFilter {
            region: Some(String::new()),
            ..UsageFilter::default()
        };
        assert_eq!(ids(no_region).await, ["c"]);
        let every_name = UsageFilter {
            provider: Some("sim".into()),
            channel: Some("sim".into()),
            group: Some("default".into()),
            dialect: Some("messages".into()),
            endpoint: Some("generation".into()),
            region: Some("eu".into()),
            ..UsageFilter::default()
        };
        assert_eq!(ids(every_name).await, ["f", "e", "d", "b", "a"]);
    }
}
