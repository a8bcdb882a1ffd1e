//! How SQLite stores a request id (schema v15 on): an id the gateway made (`req_` and 32
//! lowercase hex digits, see `laptime_proxy::ingress::request_id`) as its 16 bytes, any other
//! id as its text. The row and the id's unique index each hold 16 bytes instead of 36.
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
    }
}
