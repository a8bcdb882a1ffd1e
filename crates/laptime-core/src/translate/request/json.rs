//! Reading a client's JSON with the path of every value at hand, so an error names the field
//! as the client wrote it. Paths are built on the stack and rendered only for an error.

use serde_json::{Map, Value};

use super::error::RequestError;

/// Where a value sits in the client's body.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub(crate) fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub(crate) fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out);
        out
    }

    fn render_into(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.render_into(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, i) => {
                parent.render_into(out);
                out.push_str(&format!("[{i}]"));
            }
        }
    }

    /// Refuses this value for what it is, e.g. `include[0]=file_search_call.results`.
    pub(crate) fn unsupported_as(&self, value: &str, reason: &'static str) -> RequestError {
        RequestError::unsupported(format!("{}={value}", self.render()), reason)
    }

    /// Refuses a field for the value it has, e.g. `tools[0].type=web_search`.
    pub(crate) fn unsupported_value(
        &self,
        key: &str,
        value: &str,
        reason: &'static str,
    ) -> RequestError {
        let mut field = self.render();
        if !field.is_empty() {
            field.push('.');
        }
        field.push_str(key);
        field.push('=');
        field.push_str(value);
        RequestError::unsupported(field, reason)
    }

    pub(crate) fn invalid(&self, reason: impl Into<String>) -> RequestError {
        RequestError::invalid(self.render(), reason)
    }

    pub(crate) fn unsupported(&self, reason: &'static str) -> RequestError {
        RequestError::unsupported(self.render(), reason)
    }
}

pub(crate) type Result<T> = std::result::Result<T, RequestError>;

/// Parses the body: it must be a JSON object.
pub(crate) fn parse_body(body: &[u8]) -> Result<Map<String, Value>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(RequestError::invalid("", "the body must be a JSON object")),
        Err(e) => Err(RequestError::invalid("", format!("not JSON: {e}"))),
    }
}

/// An object of the client's body with its path.
#[derive(Clone, Copy)]
pub(crate) struct Obj<'a> {
    pub(crate) map: &'a Map<String, Value>,
    pub(crate) path: &'a Path<'a>,
}

impl<'a> Obj<'a> {
    pub(crate) fn new(value: &'a Value, path: &'a Path<'a>) -> Result<Obj<'a>> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            _ => Err(path.invalid("expected an object")),
        }
    }

    /// A present, non-null value (OpenAI clients send `null` for "not set").
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Rejects every key not in `known`, naming the first.
    pub(crate) fn only(&self, known: &[&str], reason: &'static str) -> Result<()> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(self.path.key(k).unsupported(reason)),
            None => Ok(()),
        }
    }

    pub(crate) fn str(&self, key: &'a str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.path.key(key).invalid("expected a string")),
        }
    }

    pub(crate) fn req_str(&self, key: &'a str) -> Result<&'a str> {
        self.str(key)?
            .ok_or_else(|| self.path.key(key).invalid("required"))
    }

    pub(crate) fn bool(&self, key: &'a str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.path.key(key).invalid("expected a boolean")),
        }
    }

    pub(crate) fn f64(&self, key: &'a str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.path.key(key).invalid("expected a number")),
        }
    }

    pub(crate) fn u32(&self, key: &'a str) -> Result<Option<u32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    self.path
                        .key(key)
                        .invalid("expected a non-negative integer")
                }),
        }
    }

    pub(crate) fn i64(&self, key: &'a str) -> Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.path.key(key).invalid("expected an integer")),
        }
    }

    pub(crate) fn array(&self, key: &'a str) -> Result<Option<&'a [Value]>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(self.path.key(key).invalid("expected an array")),
        }
    }

    /// Calls `f` with each element of the array at `key`, read as an object at `key[i]` (so a
    /// refusal names the element); `false` when the key is absent.
    pub(crate) fn each_object(
        &self,
        key: &'a str,
        mut f: impl FnMut(Obj<'_>) -> Result<()>,
    ) -> Result<bool> {
        let Some(items) = self.array(key)? else {
            return Ok(false);
        };
        let at = self.path.key(key);
        for (i, item) in items.iter().enumerate() {
            let at = at.index(i);
            f(Obj::new(item, &at)?)?;
        }
        Ok(true)
    }

    pub(crate) fn object(&self, key: &'a str) -> Result<Option<&'a Map<String, Value>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(self.path.key(key).invalid("expected an object")),
        }
    }

    /// A map of string values (OpenAI `metadata`), sorted by key.
    pub(crate) fn string_map(&self, key: &'a str) -> Result<Vec<(String, String)>> {
        let Some(map) = self.object(key)? else {
            return Ok(Vec::new());
        };
        let at = self.path.key(key);
        let mut out = Vec::with_capacity(map.len());
        for (k, v) in map {
            match v {
                Value::String(s) => out.push((k.clone(), s.clone())),
                _ => return Err(at.key(k).invalid("expected a string")),
            }
        }
        out.sort();
        Ok(out)
    }

    /// A string or an array of strings (OpenAI `stop`).
    pub(crate) fn strings(&self, key: &'a str) -> Result<Vec<String>> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => {
                let at = self.path.key(key);
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) => Ok(s.clone()),
                        _ => Err(at.index(i).invalid("expected a string")),
                    })
                    .collect()
            }
            Some(_) => Err(self
                .path
                .key(key)
                .invalid("expected a string or an array of strings")),
        }
    }
}

/// A `data:` URL split into media type and base64 data; `None` for any other URL.
pub(crate) fn split_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

pub(crate) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_as_the_client_wrote_them() {
        let root = Path::Root;
        let messages = root.key("messages");
        let m2 = messages.index(2);
        let content = m2.key("content");
        let c0 = content.index(0);
        assert_eq!(
            c0.key("input_audio").render(),
            "messages[2].content[0].input_audio"
        );
        assert_eq!(root.key("n").render(), "n");
        let tools = root.key("tools");
        let t0 = tools.index(0);
        let refused = t0.unsupported_value("type", "web_search", "why");
        assert_eq!(refused.field(), "tools[0].type=web_search");
    }

    #[test]
    fn data_urls_split_only_when_base64() {
        assert_eq!(
            split_data_url("data:image/png;base64,AAAA"),
            Some(("image/png", "AAAA"))
        );
        assert_eq!(split_data_url("data:text/plain,hello"), None);
        assert_eq!(split_data_url("https://x/y.png"), None);
        assert_eq!(
            data_url("application/pdf", "JVBE"),
            "data:application/pdf;base64,JVBE"
        );
    }
}
