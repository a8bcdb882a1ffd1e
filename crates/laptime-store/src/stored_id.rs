//! How the stores hold a request id: an id the gateway made (`req_` and 32 lowercase hex
//! digits, see `laptime_proxy::ingress::request_id`) as its 16 bytes, any other id as its text.
//! The row and the id's unique index each hold 16 or 17 bytes instead of 36.
//!
//! SQLite (schema v15 on) keeps an id as a blob or as text, a value's own type telling them
//! apart. PostgreSQL (schema v13 on) keeps every id as `bytea`: a gateway id as a zero byte and
//! its 16 bytes ([`pg_key`]), any other as its UTF-8, which never begins with a zero byte
//! (PostgreSQL's text holds none, and neither do header values).
//!
//! A text and a blob never compare equal in SQLite, so an id is looked for in the one form
//! [`key`] gives it. Rows written from v15 to v18 could hold an older gateway id as text (one
//! made before the store moved to bytes, a moment `id_forms` kept); v19 rewrote every row with
//! bytes and cleared it ([`crate::wide`]).

use rusqlite::types::{Value, ValueRef};

/// The prefix of the ids the gateway makes.
const PREFIX: &str = "req_";

/// The value a row written now stores for `id`.
pub fn key(id: &str) -> Value {
    match bytes_of(id) {
        Some(b) => Value::Blob(b.to_vec()),
        None => Value::Text(id.to_string()),
    }
}

/// The id a stored value holds, `None` when it is neither text nor 16 bytes.
pub fn id_of(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Text(t) => std::str::from_utf8(t).ok().map(str::to_string),
        ValueRef::Blob(b) if b.len() == 16 => Some(format!("{PREFIX}{}", hex::encode(b))),
        _ => None,
    }
}

/// The value PostgreSQL's row holds for `id`.
pub fn pg_key(id: &str) -> Vec<u8> {
    match bytes_of(id) {
        Some(b) => {
            let mut v = Vec::with_capacity(17);
            v.push(0);
            v.extend_from_slice(&b);
            v
        }
        None => id.as_bytes().to_vec(),
    }
}

/// The id a PostgreSQL row's value holds, `None` when it is neither form.
pub fn pg_id_of(v: &[u8]) -> Option<String> {
    match v.split_first() {
        Some((0, b)) if b.len() == 16 => Some(format!("{PREFIX}{}", hex::encode(b))),
        Some((0, _)) => None,
        _ => std::str::from_utf8(v).ok().map(str::to_string),
    }
}

/// The time (µs since the epoch, to the millisecond) an id the gateway made begins with;
/// `None` for any other id.
pub fn made_at_us(id: &str) -> Option<i64> {
    let b = bytes_of(id)?;
    let mut ms = [0_u8; 8];
    ms[2..].copy_from_slice(b.get(..6)?);
    i64::try_from(u64::from_be_bytes(ms))
        .ok()?
        .checked_mul(1000)
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
    fn a_gateway_id_tells_the_millisecond_it_was_made_and_no_other_id_does() {
        assert_eq!(
            made_at_us("req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f"),
            Some(0x0190_f3a2_b4c5 * 1000)
        );
        assert_eq!(made_at_us("req_0190F3A2B4C5D6E7F8091A2B3C4D5E6F"), None);
        assert_eq!(made_at_us("imported-1"), None);
    }

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
    }

    #[test]
    fn postgres_holds_gateway_ids_in_seventeen_bytes_and_every_id_reads_back_as_written() {
        let made = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f";
        let stored = pg_key(made);
        assert_eq!((stored.len(), stored.first()), (17, Some(&0)));
        for id in [
            made,
            "req_0190F3A2B4C5D6E7F8091A2B3C4D5E6F",
            "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6",
            "0123456789abcdef",
            "req_",
            "",
            "req_é190f3a2b4c5d6e7f8091a2b3c4d5e6",
        ] {
            let stored = pg_key(id);
            assert_eq!(pg_id_of(&stored).as_deref(), Some(id), "{id}");
            assert_eq!(stored.first() == Some(&0), id == made, "{id}");
        }
        assert_eq!(pg_id_of(&[0; 16]), None);
        assert_eq!(pg_id_of(&[0xff, 0xfe]), None);
    }
}
