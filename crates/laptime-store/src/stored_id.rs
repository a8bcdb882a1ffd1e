//! How SQLite stores a request id (schema v15 on): an id the gateway made (`req_` and 32
//! lowercase hex digits, see `laptime_proxy::ingress::request_id`) as its 16 bytes, any other
//! id as its text. The row and the id's unique index each hold 16 bytes instead of 36.
//!
//! A text and a blob never compare equal in SQLite, so a row written before v15 (its id as
//! text) and a newer one are told apart by the value's type, and a lookup asks for both forms
//! ([`lookup`]): the older rows stay as written until retention removes them. The unique index
//! cannot see that a new row's bytes and an older row's text are one id either, so a write
//! looks for the text too, but only for ids made before the store moved to bytes
//! ([`may_be_text`]): an id carries the millisecond it was made in its first six bytes.

use rusqlite::types::{Value, ValueRef};
use rusqlite::Connection;

/// The prefix of the ids the gateway makes.
const PREFIX: &str = "req_";

/// The `WHERE` term that finds an id written either way: parameters `?{n}` ([`key`]) and
/// `?{n+1}` (the id's text), as [`params_of`] gives them.
pub(crate) fn lookup(n: usize) -> String {
    format!("request_id IN (?{n}, ?{})", n + 1)
}

/// When the store moved to bytes (unix ms), if it had rows then: v15 notes it in `id_forms`.
/// No gateway id made later can have a row holding it as text.
pub(crate) fn moved_ms(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT max(text_ids_before_ms) FROM id_forms")?
        .query_row([], |r| r.get(0))
}

/// Whether a row may hold `id` as text although it is written as bytes now: the id was made
/// before `moved_ms` (with a minute's room for the two clocks that tell it).
pub(crate) fn may_be_text(id: &str, moved_ms: Option<i64>) -> bool {
    let (Some(moved), Some(b)) = (moved_ms, bytes_of(id)) else {
        return false;
    };
    let mut ms = [0_u8; 8];
    ms[2..].copy_from_slice(&b[..6]);
    i64::from_be_bytes(ms) <= moved.saturating_add(60_000)
}

/// The value a row written now stores for `id`.
pub fn key(id: &str) -> Value {
    match bytes_of(id) {
        Some(b) => Value::Blob(b.to_vec()),
        None => Value::Text(id.to_string()),
    }
}

/// The two parameters of [`lookup`] for `id`.
pub(crate) fn params_of(id: &str) -> [Value; 2] {
    [key(id), Value::Text(id.to_string())]
}

/// The id a stored value holds, `None` when it is neither text nor 16 bytes.
pub fn id_of(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Text(t) => std::str::from_utf8(t).ok().map(str::to_string),
        ValueRef::Blob(b) if b.len() == 16 => Some(format!("{PREFIX}{}", hex::encode(b))),
        _ => None,
    }
}

/// The 16 bytes of an id the gateway made; `None` for any other, which is kept as text (an
/// upper-case hex digit too, so that the text reads back as it was written).
fn bytes_of(id: &str) -> Option<[u8; 16]> {
    let hex = id.strip_prefix(PREFIX)?;
    if hex.len() != 32 || !hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut b = [0_u8; 16];
    hex::decode_to_slice(hex, &mut b).ok()?;
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_ids_take_sixteen_bytes_and_every_id_reads_back_as_written() {
        let made = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f";
        assert!(matches!(key(made), Value::Blob(ref b) if b.len() == 16));
        for id in [
            made,
            "req_0190F3A2B4C5D6E7F8091A2B3C4D5E6F",
            "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6",
            "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f0",
            "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6g",
            "0190f3a2b4c5d6e7f8091a2b3c4d5e6f0190",
            "req_",
            "",
            "r",
            "req_é190f3a2b4c5d6e7f8091a2b3c4d5e6",
        ] {
            let stored = key(id);
            let read = id_of(ValueRef::from(&stored));
            assert_eq!(read.as_deref(), Some(id), "{id}");
            assert_eq!(matches!(stored, Value::Blob(_)), id == made, "{id}");
        }
        assert_eq!(id_of(ValueRef::Blob(&[0; 15])), None);
        assert_eq!(id_of(ValueRef::Integer(7)), None);
        assert_eq!(lookup(2), "request_id IN (?2, ?3)");
    }

    #[test]
    fn only_ids_made_before_the_move_to_bytes_may_have_a_text_row() {
        // 0x0190f3a2b4c5 ms is 2024-07-19.
        let id = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f";
        let made = 0x0190_f3a2_b4c5;
        assert!(may_be_text(id, Some(made)));
        assert!(may_be_text(id, Some(made - 60_000)));
        assert!(!may_be_text(id, Some(made - 60_001)));
        assert!(
            !may_be_text(id, None),
            "a store that was empty when it moved"
        );
        assert!(!may_be_text("req_old", Some(i64::MAX)), "text both ways");
    }
}
