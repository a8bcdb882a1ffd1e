//! Reading config text: every section (and every `[[channels]]`, `[[routes]]`, `[[prices]]`
//! entry) is read on its own, so a type error in one does not hide the errors of the others,
//! and each problem is reported with its key's path and line, together with the semantic
//! problems of what did read. TOML syntax errors stop the reading (the parser gives the first).

use std::ops::Range;

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;
use toml_edit::{ImDocument, Item, Value};

use super::{Config, ConfigErrors, PriceConfig, RouteConfig};

/// One step of a key path: a key, or an entry of an array.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A key path as the messages print it: `routes[0].cache.ttl_s`.
fn path_text(steps: &[Step]) -> String {
    let mut s = String::new();
    for step in steps {
        match step {
            Step::Key(k) if s.is_empty() => s.push_str(k),
            Step::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Step::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The steps of a path printed by [`path_text`] or by a semantic check (`channels[1].models`).
fn parse_path(text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for part in text.split('.') {
        let (key, indexes) = part.split_once('[').unwrap_or((part, ""));
        if !key.is_empty() {
            steps.push(Step::Key(key.to_string()));
        }
        for index in indexes.split('[') {
            if let Ok(i) = index.trim_end_matches(']').parse() {
                steps.push(Step::Index(i));
            }
        }
    }
    steps
}

/// The config as read, and the problems of the text (each already naming the file, line and
/// key). Sections or entries that failed to read hold their defaults (an entry a placeholder),
/// so the semantic checks of the others still run with the same indexes.
#[derive(Debug, Clone)]
pub struct ReadConfig {
    pub config: Config,
    origin: String,
    text: String,
    /// The paths that failed to read: semantic problems under them are not reported (they
    /// would be about the placeholder, not the file).
    failed: Vec<String>,
    problems: Vec<String>,
    /// The top-level keys the text has.
    sections: Vec<String>,
}

/// The top-level sections a config file may have.
const SECTIONS: [&str; 10] = [
    "server",
    "store",
    "shared",
    "thresholds",
    "channels",
    "routes",
    "prices",
    "limits",
    "budgets",
    "telemetry",
];

impl ReadConfig {
    /// A config that did not come from text (the embedded default).
    pub fn whole(config: Config) -> ReadConfig {
        ReadConfig {
            config,
            origin: String::new(),
            text: String::new(),
            failed: Vec::new(),
            problems: Vec::new(),
            sections: Vec::new(),
        }
    }

    /// Reads `text`; `origin` names it in the messages.
    pub fn parse(text: &str, origin: &str) -> ReadConfig {
        let mut read = ReadConfig {
            config: Config::embedded_default(&|_| None),
            origin: origin.to_string(),
            text: text.to_string(),
            failed: Vec::new(),
            problems: Vec::new(),
            sections: Vec::new(),
        };
        read.config.channels.clear();
        let mut table = match toml::from_str::<toml::Table>(text) {
            Ok(t) => t,
            Err(e) => {
                read.failed.push(String::new());
                read.problems
                    .push(format!("{origin}: {}", e.to_string().trim_end()));
                return read;
            }
        };
        read.sections = table.keys().cloned().collect();
        for key in table.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                read.problem(
                    &[Step::Key(key.clone())],
                    &format!(
                        "unknown section `{key}`, expected one of `{}`",
                        SECTIONS.join("`, `")
                    ),
                );
            }
        }
        let c = &mut read.config;
        let mut ps = Vec::new();
        let mut failed = Vec::new();
        let mut take = |key: &str| table.remove(key);
        let mut sink = Sink {
            problems: &mut ps,
            failed: &mut failed,
        };
        sink.section(take("server"), "server", &mut c.server);
        sink.section(take("store"), "store", &mut c.store);
        sink.section(take("shared"), "shared", &mut c.shared);
        sink.section(take("thresholds"), "thresholds", &mut c.thresholds);
        sink.section(take("limits"), "limits", &mut c.limits);
        sink.section(take("budgets"), "budgets", &mut c.budgets);
        sink.section(take("telemetry"), "telemetry", &mut c.telemetry);
        c.channels = sink.list(take("channels"), "channels", Default::default);
        c.routes = sink.list(take("routes"), "routes", || RouteConfig {
            model: String::new(),
            ..super::DEFAULT_ROUTE.clone()
        });
        c.prices = sink.list(take("prices"), "prices", || PriceConfig {
            model: String::new(),
            channel: None,
            input_per_mtok: 0.0,
            output_per_mtok: 0.0,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
            cache_write_1h_per_mtok: None,
            reasoning_per_mtok: None,
            effective_from: super::default_effective_from(),
        });
        read.failed.extend(failed);
        for (steps, message) in ps {
            read.problem(&steps, &message);
        }
        read
    }

    /// Whether the text has this top-level section (`channels`, `server`, …).
    pub fn has_section(&self, key: &str) -> bool {
        self.sections.iter().any(|s| s == key)
    }

    /// A file without `[[channels]]` serves the embedded default's channels (the in-process
    /// sim, and a real channel per provider key in the environment): a file that only sets
    /// `[server]` keys changes the server, not what it serves.
    pub fn keep_default_channels(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        if !self.has_section("channels") {
            self.config.channels = Config::embedded_default(env).channels;
        }
    }

    /// The config, or the problems of its text (without the semantic checks).
    pub fn parsed(self) -> Result<Config, ConfigErrors> {
        if self.problems.is_empty() {
            Ok(self.config)
        } else {
            Err(ConfigErrors(self.problems))
        }
    }

    /// The config once the text read and every check passed; else every problem at once: the
    /// text's, then the semantic ones of what read, each with its line when the file has the key.
    pub fn validate(self, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigErrors> {
        let semantic = match self.config.validate(env) {
            Ok(()) => Vec::new(),
            Err(e) => e.0,
        };
        let mut problems = self.problems.clone();
        for p in semantic {
            let key = p.split(": ").next().unwrap_or_default();
            // An empty path failed: the text did not parse at all.
            if self.failed.iter().any(|f| f.is_empty() || under(key, f)) {
                continue;
            }
            problems.push(self.located(&parse_path(key), &p));
        }
        if problems.is_empty() {
            Ok(self.config)
        } else {
            Err(ConfigErrors(problems))
        }
    }

    fn problem(&mut self, steps: &[Step], message: &str) {
        let text = format!("{}: {message}", path_text(steps));
        let located = self.located(steps, &text);
        self.problems.push(located);
    }

    /// `message` prefixed by the file and, when the text has the key, its line.
    fn located(&self, steps: &[Step], message: &str) -> String {
        if self.origin.is_empty() {
            return message.to_string();
        }
        let line = ImDocument::parse(self.text.as_str())
            .ok()
            .and_then(|doc| in_item(doc.as_item(), steps))
            .and_then(|span| self.text.get(..span.start))
            .map(|before| before.matches('\n').count() + 1);
        match line {
            Some(line) => format!("{}:{line}: {message}", self.origin),
            None => format!("{}: {message}", self.origin),
        }
    }
}

/// Whether `key` is `path` or a key under it (`channels[1].models` under `channels[1]`).
fn under(key: &str, path: &str) -> bool {
    key.strip_prefix(path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// Collects the problems of the sections as they are read.
struct Sink<'a> {
    problems: &'a mut Vec<(Vec<Step>, String)>,
    failed: &'a mut Vec<String>,
}

impl Sink<'_> {
    /// Reads one table into `into`; on error `into` keeps its default.
    fn section<T: DeserializeOwned>(
        &mut self,
        value: Option<toml::Value>,
        key: &str,
        into: &mut T,
    ) {
        let Some(value) = value else { return };
        let at = [Step::Key(key.to_string())];
        if let Some(v) = self.read(value, &at) {
            *into = v;
        }
    }

    /// Reads an array of tables entry by entry; an entry that fails is a placeholder.
    fn list<T: DeserializeOwned>(
        &mut self,
        value: Option<toml::Value>,
        key: &str,
        placeholder: impl Fn() -> T,
    ) -> Vec<T> {
        let entries = match value {
            None => return Vec::new(),
            Some(toml::Value::Array(entries)) => entries,
            Some(other) => {
                let at = vec![Step::Key(key.to_string())];
                let message = format!(
                    "expected an array of tables ([[{key}]]), found {}",
                    other.type_str()
                );
                self.failed.push(path_text(&at));
                self.problems.push((at, message));
                return Vec::new();
            }
        };
        entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| {
                let at = [Step::Key(key.to_string()), Step::Index(i)];
                self.read(entry, &at).unwrap_or_else(&placeholder)
            })
            .collect()
    }

    fn read<T: DeserializeOwned>(&mut self, value: toml::Value, at: &[Step]) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(v) => Some(v),
            Err(e) => {
                let mut steps = at.to_vec();
                steps.extend(e.path().iter().filter_map(|seg| match seg {
                    Segment::Seq { index } => Some(Step::Index(*index)),
                    Segment::Map { key } => Some(Step::Key(key.clone())),
                    Segment::Enum { .. } | Segment::Unknown => None,
                }));
                let message = e.into_inner().message().to_string();
                self.failed.push(path_text(at));
                self.problems.push((steps, message));
                None
            }
        }
    }
}

/// Where the key at `path` sits in the text: the deepest step the document has.
fn in_item(item: &Item, path: &[Step]) -> Option<Range<usize>> {
    let Some((step, rest)) = path.split_first() else {
        return item.span();
    };
    match step {
        Step::Key(k) => {
            let (key, child) = item.as_table_like()?.get_key_value(k)?;
            in_item(child, rest).or_else(|| key.span())
        }
        Step::Index(i) => match item {
            Item::ArrayOfTables(tables) => {
                // An entry's own key when it has it, else the entry's header.
                let table = tables.get(*i)?;
                let within = match rest.split_first() {
                    Some((Step::Key(k), rest)) => table
                        .get_key_value(k)
                        .and_then(|(key, child)| in_item(child, rest).or_else(|| key.span())),
                    _ => None,
                };
                within.or_else(|| table.span())
            }
            Item::Value(Value::Array(values)) => in_value(values.get(*i)?, rest),
            _ => None,
        },
    }
}

fn in_value(value: &Value, path: &[Step]) -> Option<Range<usize>> {
    let Some((step, rest)) = path.split_first() else {
        return value.span();
    };
    match (step, value) {
        (Step::Key(k), Value::InlineTable(t)) => {
            let (key, child) = t.get_key_value(k)?;
            in_item(child, rest).or_else(|| key.span())
        }
        (Step::Index(i), Value::Array(a)) => in_value(a.get(*i)?, rest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_and_parse_back() {
        let steps = vec![
            Step::Key("routes".into()),
            Step::Index(2),
            Step::Key("cache".into()),
            Step::Key("ttl_s".into()),
        ];
        assert_eq!(path_text(&steps), "routes[2].cache.ttl_s");
        assert_eq!(parse_path("routes[2].cache.ttl_s"), steps);
        assert!(under("channels[1].models", "channels[1]"));
        assert!(under("channels[1]", "channels[1]"));
        assert!(!under("channels[10].models", "channels[1]"));
    }
}

#[cfg(test)]
mod reading {
    use super::super::Config;
    use super::ReadConfig;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn every_inline_table_takes_partial_keys_and_keeps_the_other_defaults() {
        let text = r#"
            [[channels]]
            name = "s"
            provider = "sim"
            models = ["m"]
            circuit = { open_s = 60 }

            [[routes]]
            model = "*"
            cache = { ttl_s = 60 }
            timeouts = { idle_ms = 5000 }
            failover = { backoff_ms = 100 }
            translation = { reasoning_budgets = { low = 1 } }
        "#;
        let cfg = Config::from_toml(text, "c.toml").unwrap();
        cfg.validate(&no_env).unwrap();
        let r = &cfg.routes[0];
        let cache = r.cache.as_ref().unwrap();
        assert_eq!((cache.ttl_s, cache.max_entries), (60, 10_000));
        assert_eq!((r.timeouts.idle_ms, r.timeouts.headers_ms), (5000, 15_000));
        assert_eq!((r.failover.backoff_ms, r.failover.max_attempts), (100, 3));
        assert_eq!(r.translation.reasoning_budgets.low, 1);
        assert_eq!(cfg.channels[0].circuit.open_s, 60);
        assert_eq!(cfg.channels[0].circuit.consecutive_failures, 5);
    }

    #[test]
    fn an_unknown_key_is_named_by_its_path_and_line_in_every_table() {
        for (text, want) in [
            (
                "[server]\nlisen = 1\n",
                "c.toml:2: server.lisen: unknown field `lisen`",
            ),
            (
                "[[routes]]\nmodel = \"*\"\ncache = { ttl = 60 }\n",
                "c.toml:3: routes[0].cache.ttl: unknown field `ttl`",
            ),
            (
                "[[routes]]\nmodel = \"*\"\ntimeouts = { idle = 5 }\n",
                "c.toml:3: routes[0].timeouts.idle: unknown field `idle`",
            ),
            ("[srever]\n", "c.toml:1: srever: unknown section `srever`"),
        ] {
            let err = Config::from_toml(text, "c.toml").unwrap_err().to_string();
            assert!(err.contains(want), "want {want:?} in {err}");
        }
    }

    #[test]
    fn type_errors_in_several_sections_are_reported_with_the_semantic_ones() {
        let text = r#"
[server]
max_body_bytes = "big"

[store]
retention_days = 0

[[channels]]
name = "a"
provider = "sim"
models = ["m"]
weight = "heavy"

[[channels]]
name = "b"
provider = "openai"
models = ["m"]

[[routes]]
model = "*"
cache = { ttl_s = -1 }
"#;
        let errs = ReadConfig::parse(text, "c.toml")
            .validate(&no_env)
            .unwrap_err()
            .to_string();
        for want in [
            "c.toml:3: server.max_body_bytes: invalid type: string \"big\"",
            "c.toml:12: channels[0].weight: invalid type: string \"heavy\"",
            "c.toml:21: routes[0].cache.ttl_s: invalid value: integer `-1`",
            "c.toml:6: store.retention_days: must be at least 1",
            "c.toml:14: channels[1].base_url: required for provider openai",
        ] {
            assert!(errs.contains(want), "want {want:?} in {errs}");
        }
        // What did not read is not judged again: the failed channel's defaults, the server's.
        assert!(!errs.contains("channels[0].models"), "{errs}");
        assert!(!errs.contains("at least one channel"), "{errs}");
    }

    #[test]
    fn a_syntax_error_is_reported_with_its_line_and_nothing_else() {
        let errs = ReadConfig::parse("[server]\nlisten = \n", "c.toml")
            .validate(&no_env)
            .unwrap_err();
        assert_eq!(errs.0.len(), 1, "{errs}");
        assert!(errs.0[0].contains("line 2"), "{errs}");
    }
}
