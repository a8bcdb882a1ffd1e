//! A request's query string as decoded pairs, and the list parameters OpenAI's cursor pages
//! take (`after`, `limit`, `order`).

use crate::objects::{seq, ListQuery, Order};
use crate::wire::ApiError;

/// The decoded `key=value` pairs of a query (`+` is a space, `%XX` a byte), in order.
pub(crate) fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The first value of `key`, if present.
pub(crate) fn get(query: Option<&str>, key: &str) -> Option<String> {
    pairs(query)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(byte) = hex {
                    out.push(byte);
                    i += 2;
                } else {
                    out.push(b'%');
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `after`, `limit` (default `default_limit`, 1 to `max_limit`) and `order` (`asc` or `desc`,
/// default `desc`) of a listing whose ids start with `prefix`. A cursor that is not such an id
/// lists from the start.
pub(crate) fn list(
    query: Option<&str>,
    prefix: &str,
    default_limit: usize,
    max_limit: usize,
) -> Result<ListQuery, ApiError> {
    let mut list = ListQuery {
        after: None,
        limit: default_limit,
        order: Order::Desc,
    };
    for (k, v) in pairs(query) {
        match k.as_str() {
            "after" => list.after = seq(prefix, &v),
            "limit" => {
                list.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=max_limit).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid_request(format!(
                            "Invalid 'limit': expected an integer between 1 and {max_limit}, \
                             got '{v}'."
                        ))
                        .param("limit")
                    })?;
            }
            "order" => {
                list.order = match v.as_str() {
                    "asc" => Order::Asc,
                    "desc" => Order::Desc,
                    _ => {
                        return Err(ApiError::invalid_request(format!(
                            "Invalid value for 'order': expected 'asc' or 'desc', got '{v}'."
                        ))
                        .param("order"))
                    }
                }
            }
            _ => {}
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_decoded() {
        assert_eq!(
            pairs(Some("a=1&b=x+y%2Fz&c&&d=%zz")),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y/z".into()),
                ("c".into(), "".into()),
                ("d".into(), "%zz".into()),
            ]
        );
        assert_eq!(
            get(Some("api-version=2024-10-21"), "api-version").as_deref(),
            Some("2024-10-21")
        );
        assert_eq!(get(None, "x"), None);
    }

    #[test]
    fn list_parameters_are_read_and_checked() {
        let q = list(
            Some("after=file-laptimesim0003&limit=2&order=asc"),
            "file-",
            20,
            100,
        )
        .unwrap();
        assert_eq!((q.after, q.limit, q.order), (Some(3), 2, Order::Asc));
        let q = list(None, "file-", 20, 100).unwrap();
        assert_eq!((q.after, q.limit, q.order), (None, 20, Order::Desc));
        assert_eq!(
            list(Some("limit=0"), "file-", 20, 100).unwrap_err().status,
            400
        );
        assert_eq!(
            list(Some("limit=101"), "file-", 20, 100)
                .unwrap_err()
                .openai_param,
            Some("limit")
        );
        assert_eq!(
            list(Some("order=up"), "file-", 20, 100).unwrap_err().status,
            400
        );
    }
}
