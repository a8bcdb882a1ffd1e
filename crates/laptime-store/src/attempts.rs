//! A request's attempts as rows written before the packed layout (PostgreSQL's v9, SQLite's
//! v14; see [`crate::packed`]) keep them: inside the request's row, a JSON array with one
//! positional array per attempt (no field names: a request is stored millions of times).
//! PostgreSQL kept them so from its first schema; SQLite since its v13, which folded its
//! `attempts` table (a row and a key entry per attempt, and an insert more per record) into
//! the rows. Newer rows hold them packed; these are read, never written.

use laptime_core::timeline::{Attempt, AttemptRole, ConnectionMarks, ErrorClass};

use crate::records::dur;
#[cfg(test)]
use crate::records::us;
use crate::{corrupt, Result};

/// One attempt as stored: `[channel, role, won, status, error_class, start_us, headers_us,
/// first_byte_us, end_us, connected_us, tunnel_us, tls_us, span_id]`, the connection's three
/// marks and the span id (16 hex digits) left off from the end while absent (most attempts reuse
/// a pooled connection, and rows written before the marks existed have nine elements, before
/// attempts had span ids at most twelve).
type StoredAttempt = (
    String,
    String,
    bool,
    Option<u16>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The elements of a [`StoredAttempt`], and the connection marks that may follow them.
const STORED_HEAD: usize = 9;
const CONNECTION_MARKS: usize = 3;
/// The span id's place in the tail, after the connection marks.
const SPAN_ID: usize = CONNECTION_MARKS;

/// A request's attempts as stored (`[]` for none): as rows written before the packed layout
/// hold them, which tests write to prove those rows still read back.
#[cfg(test)]
pub(crate) fn encode(attempts: &[Attempt]) -> String {
    let rows: Vec<serde_json::Value> = attempts
        .iter()
        .map(|a| {
            let head: StoredAttempt = (
                a.channel.clone(),
                a.role.as_str().to_string(),
                a.won,
                a.status,
                a.error_class.map(|c| c.as_str().to_string()),
                us(a.start),
                us(a.headers),
                us(a.first_byte),
                us(a.end),
            );
            let mut row = match serde_json::to_value(head) {
                Ok(serde_json::Value::Array(row)) => row,
                _ => Vec::new(),
            };
            let c = &a.connection;
            let mut tail: Vec<serde_json::Value> = [c.connected, c.tunnel, c.tls]
                .into_iter()
                .map(|m| serde_json::Value::from(us(m)))
                .collect();
            tail.push(serde_json::Value::from(a.span_id.map(hex::encode)));
            while tail.last() == Some(&serde_json::Value::Null) {
                tail.pop();
            }
            row.extend(tail);
            serde_json::Value::Array(row)
        })
        .collect();
    serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into())
}

/// The attempts of a stored value written by [`encode`] (or by an older build: see
/// [`StoredAttempt`]).
pub(crate) fn decode(s: &str) -> Result<Vec<Attempt>> {
    let rows: Vec<Vec<serde_json::Value>> =
        serde_json::from_str(s).map_err(|_| corrupt("attempts", s))?;
    rows.into_iter()
        .map(|mut row| {
            let tail = row.split_off(STORED_HEAD.min(row.len()));
            if tail.len() > CONNECTION_MARKS + 1 {
                return Err(corrupt("attempts", s));
            }
            let (channel, role, won, status, class, start, headers, first_byte, end): StoredAttempt =
                serde_json::from_value(serde_json::Value::Array(row))
                    .map_err(|_| corrupt("attempts", s))?;
            let mark = |i: usize| -> Result<Option<std::time::Duration>> {
                match tail.get(i) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(v) => v.as_i64().map(|u| dur(Some(u))).ok_or_else(|| corrupt("attempts", s)),
                }
            };
            Ok(Attempt {
                channel,
                role: AttemptRole::parse(&role).ok_or_else(|| corrupt("role", &role))?,
                won,
                status,
                error_class: match class {
                    Some(c) => Some(ErrorClass::parse(&c).ok_or_else(|| corrupt("error_class", &c))?),
                    None => None,
                },
                start: dur(start),
                headers: dur(headers),
                first_byte: dur(first_byte),
                end: dur(end),
                connection: ConnectionMarks {
                    connected: mark(0)?,
                    tunnel: mark(1)?,
                    tls: mark(2)?,
                },
                span_id: match tail.get(SPAN_ID) {
                    None | Some(serde_json::Value::Null) => None,
                    Some(v) => Some(
                        v.as_str()
                            .and_then(crate::records::parse_span_id)
                            .ok_or_else(|| corrupt("attempts", s))?,
                    ),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn absent_connection_marks_and_span_id_are_left_off_and_read_back_absent() {
        let a = Attempt {
            channel: "c".into(),
            role: AttemptRole::Primary,
            won: true,
            status: Some(200),
            error_class: None,
            start: Some(Duration::from_micros(5)),
            headers: Some(Duration::from_micros(700)),
            first_byte: Some(Duration::from_micros(710)),
            end: Some(Duration::from_micros(900)),
            connection: ConnectionMarks::default(),
            span_id: None,
        };
        let stored = encode(std::slice::from_ref(&a));
        assert_eq!(stored, r#"[["c","primary",true,200,null,5,700,710,900]]"#);
        assert_eq!(decode(&stored).unwrap(), std::slice::from_ref(&a));
        // Written with every field, nulls included (as SQLite's v13 folded its table in).
        let full = r#"[["c","primary",true,200,null,5,700,710,900,null,null,null,null]]"#;
        assert_eq!(decode(full).unwrap(), [a]);
        assert!(decode(r#"[["c","primary",true,200,null,5,700,710,900,1,2,3,null,4]]"#).is_err());
    }
}
