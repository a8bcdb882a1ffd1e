//! Prices and what a request cost: which price applies to a model on a channel at an instant,
//! which tokens a provider billed, and their cost in nano-USD. Integer nano-USD keep sums over
//! millions of requests exact (a float sum depends on its order), and one token at a price of
//! $0.001 per million is still a whole unit.
//!
//! A request the provider did not bill (refused, answered from the cache, failed before any
//! output) costs 0, which is known without a price. A billed request whose model has no price,
//! or whose tokens include a kind the price does not name (cache reads with no
//! `cache_read_per_mtok`), has no cost: `None`, never 0.

use serde::{Deserialize, Serialize};

use crate::timeline::{Outcome, RequestRecord};
use crate::usage::Tokens;

/// Nano-USD per token for a price of one USD per million tokens.
const NANO_PER_TOKEN_AT_ONE_USD_PER_MTOK: f64 = 1_000.0;

/// What one request cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    pub nano_usd: u64,
    /// Some of the tokens priced were estimated (the provider reported no usage for them).
    pub estimated: bool,
}

impl Cost {
    pub const FREE: Cost = Cost {
        nano_usd: 0,
        estimated: false,
    };

    pub fn usd(self) -> f64 {
        nano_to_usd(self.nano_usd)
    }
}

/// USD from nano-USD.
pub fn nano_to_usd(nano: u64) -> f64 {
    nano as f64 / 1e9
}

/// One configured price, per million tokens, in USD.
#[derive(Debug, Clone, PartialEq)]
pub struct Price {
    /// A model name as clients ask for it, or `*` for any model not priced by name.
    pub model: String,
    /// Only for requests served by this channel (a channel's own contract or mapped model).
    pub channel: Option<String>,
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    pub cache_read_per_mtok: Option<f64>,
    /// Cache writes (Anthropic's five-minute writes, and every write of providers that do not
    /// split them).
    pub cache_write_per_mtok: Option<f64>,
    /// Anthropic's one-hour cache writes.
    pub cache_write_1h_per_mtok: Option<f64>,
    /// Reasoning tokens when billed apart from output (else they are output).
    pub reasoning_per_mtok: Option<f64>,
    /// The instant (UTC midnight of the configured day) from which the price applies, in unix
    /// microseconds: a later price for the same model and channel replaces it from its own day
    /// on, so a price change never rewrites what earlier requests cost.
    pub effective_from_us: i64,
}

/// Why a price list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceError(pub String);

impl std::fmt::Display for PriceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Every configured price, looked up by model, channel and instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable {
    prices: Vec<Price>,
}

/// The unix microseconds of UTC midnight of a `YYYY-MM-DD` day.
pub fn day_start_us(day: &str) -> Option<i64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(day, &format).ok()?;
    Some(date.midnight().assume_utc().unix_timestamp() * 1_000_000)
}

impl PriceTable {
    /// No prices: every billed request is unpriced.
    pub const EMPTY: PriceTable = PriceTable { prices: Vec::new() };

    /// Checks every rate (finite, not negative) and that no two prices claim the same model,
    /// channel and day.
    pub fn new(prices: Vec<Price>) -> Result<PriceTable, PriceError> {
        for (i, p) in prices.iter().enumerate() {
            let at = |what: &str| PriceError(format!("prices[{i}] ({}): {what}", p.model));
            if let Some(problem) = p.problem() {
                return Err(at(problem));
            }
            let twin = prices[..i].iter().any(|q| {
                q.model == p.model
                    && q.channel == p.channel
                    && q.effective_from_us == p.effective_from_us
            });
            if twin {
                return Err(at(
                    "another price has the same model, channel and effective_from",
                ));
            }
        }
        Ok(PriceTable { prices })
    }

    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// The price for `model` on `channel` at `at_us`: the most specific kind of entry that has
    /// one in force (model and channel, then model, then `*` and channel, then `*`), and of
    /// those the latest to take effect.
    pub fn find(&self, model: &str, channel: Option<&str>, at_us: i64) -> Option<&Price> {
        let ranks: [(&str, Option<&str>); 4] =
            [(model, channel), (model, None), ("*", channel), ("*", None)];
        ranks.into_iter().find_map(|(m, c)| {
            self.prices
                .iter()
                .filter(|p| {
                    p.model == m && p.channel.as_deref() == c && p.effective_from_us <= at_us
                })
                .max_by_key(|p| p.effective_from_us)
        })
    }

    /// Whether a model (on any channel, at any time) has a price.
    pub fn prices_model(&self, model: &str) -> bool {
        self.prices
            .iter()
            .any(|p| p.model == model || p.model == "*")
    }

    /// What a finished request cost; `None` when it was billed but no price covers it.
    pub fn cost_of(&self, r: &RequestRecord, input_estimate: Option<u64>) -> Option<Cost> {
        match billed(r, input_estimate) {
            Billed::Nothing => Some(Cost::FREE),
            Billed::Tokens { tokens, estimated } => {
                let price =
                    self.find(r.model.as_deref()?, r.channel.as_deref(), r.created_at_us)?;
                Some(Cost {
                    nano_usd: price.nano_usd(&tokens)?,
                    estimated,
                })
            }
        }
    }
}

impl Price {
    /// What is wrong with this price on its own, if anything.
    pub fn problem(&self) -> Option<&'static str> {
        if self.model.trim().is_empty() {
            return Some("model must not be empty (use \"*\" for any model)");
        }
        let rates = [
            Some(self.input_per_mtok),
            Some(self.output_per_mtok),
            self.cache_read_per_mtok,
            self.cache_write_per_mtok,
            self.cache_write_1h_per_mtok,
            self.reasoning_per_mtok,
        ];
        rates
            .into_iter()
            .flatten()
            .any(|r| !r.is_finite() || r < 0.0)
            .then_some("every price must be a number of USD ≥ 0")
    }

    /// The cost of `t` at this price, or `None` when `t` has tokens of a kind it does not price.
    pub fn nano_usd(&self, t: &Tokens) -> Option<u64> {
        let count = |v: Option<u64>| v.unwrap_or(0);
        let cache_read = count(t.cache_read);
        let cache_write = count(t.cache_write);
        let write_1h = count(t.cache_write_1h).min(cache_write);
        let uncached = count(t.input).saturating_sub(cache_read.saturating_add(cache_write));
        let output = count(t.output);
        let (reasoning, reasoning_rate) = match self.reasoning_per_mtok {
            Some(rate) => (count(t.reasoning).min(output), Some(rate)),
            None => (0, None),
        };
        let parts = [
            (uncached, Some(self.input_per_mtok)),
            (cache_read, self.cache_read_per_mtok),
            (cache_write - write_1h, self.cache_write_per_mtok),
            (write_1h, self.cache_write_1h_per_mtok),
            (output - reasoning, Some(self.output_per_mtok)),
            (reasoning, reasoning_rate),
        ];
        let mut nano = 0.0;
        for (tokens, rate) in parts {
            if tokens == 0 {
                continue;
            }
            nano += tokens as f64 * rate? * NANO_PER_TOKEN_AT_ONE_USD_PER_MTOK;
        }
        Some(nano.round() as u64)
    }
}

/// What a provider billed for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Billed {
    /// No upstream was called, or it failed before producing anything and reported no usage.
    Nothing,
    Tokens {
        tokens: Tokens,
        /// A count was estimated: the input from the request's size, the output from the
        /// gateway's tokenizer count ([`Tokens::estimated_output`]), else the text deltas
        /// relayed.
        estimated: bool,
    },
}

/// The billed tokens of a finished request. A stream cut or cancelled after output began is
/// billed for what was produced: the counts the provider reported, else estimates.
pub fn billed(r: &RequestRecord, input_estimate: Option<u64>) -> Billed {
    let no_upstream = r.upstream_dialect.is_none()
        || r.cached
        || matches!(
            r.outcome,
            Outcome::CacheHit | Outcome::Rejected | Outcome::RateLimited
        );
    if no_upstream {
        return Billed::Nothing;
    }
    let t = r.tokens;
    let reported = t.input.is_some() || t.output.is_some();
    let produced = r.outcome.is_success() || r.marks.first_effective.is_some();
    if !reported && !produced {
        return Billed::Nothing;
    }
    let mut tokens = t;
    let mut estimated = false;
    if tokens.input.is_none() {
        tokens.input = input_estimate;
        estimated = true;
    }
    if tokens.output.is_none() {
        // The gateway's tokenizer count when it made one, else one token per text delta.
        tokens.output = Some(
            t.estimated_output
                .unwrap_or_else(|| u64::from(r.text_delta_count)),
        );
        estimated = true;
    }
    Billed::Tokens { tokens, estimated }
}

/// An estimate of a request's input tokens from its body's size: about four bytes a token for
/// English text and JSON, rounded up. Used where the provider's count is not known yet
/// (admission) or never came (a cut stream).
pub fn estimate_input_tokens(body_bytes: usize) -> u64 {
    (body_bytes as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(model: &str, channel: Option<&str>, day: &str, input: f64, output: f64) -> Price {
        Price {
            model: model.into(),
            channel: channel.map(str::to_string),
            input_per_mtok: input,
            output_per_mtok: output,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
            cache_write_1h_per_mtok: None,
            reasoning_per_mtok: None,
            effective_from_us: day_start_us(day).unwrap(),
        }
    }

    fn at(day: &str) -> i64 {
        day_start_us(day).unwrap()
    }

    #[test]
    fn a_later_price_applies_from_its_day_and_earlier_requests_keep_theirs() {
        let table = PriceTable::new(vec![
            price("m", None, "2026-01-01", 1.0, 2.0),
            price("m", None, "2026-06-01", 3.0, 4.0),
        ])
        .unwrap();
        assert_eq!(table.find("m", None, at("2025-12-31")), None);
        assert_eq!(
            table
                .find("m", None, at("2026-01-01"))
                .unwrap()
                .input_per_mtok,
            1.0
        );
        assert_eq!(
            table
                .find("m", None, at("2026-06-01") - 1)
                .unwrap()
                .input_per_mtok,
            1.0
        );
        assert_eq!(
            table
                .find("m", None, at("2026-06-01"))
                .unwrap()
                .input_per_mtok,
            3.0
        );
    }

    #[test]
    fn a_channel_price_wins_over_the_models_and_a_name_over_the_wildcard() {
        let table = PriceTable::new(vec![
            price("*", None, "2026-01-01", 9.0, 9.0),
            price("m", None, "2026-01-01", 1.0, 1.0),
            price("m", Some("azure"), "2026-01-01", 2.0, 2.0),
            price("*", Some("local"), "2026-01-01", 0.0, 0.0),
        ])
        .unwrap();
        let now = at("2026-02-01");
        assert_eq!(
            table.find("m", Some("azure"), now).unwrap().input_per_mtok,
            2.0
        );
        assert_eq!(
            table.find("m", Some("openai"), now).unwrap().input_per_mtok,
            1.0
        );
        assert_eq!(table.find("m", None, now).unwrap().input_per_mtok, 1.0);
        assert_eq!(
            table
                .find("other", Some("local"), now)
                .unwrap()
                .input_per_mtok,
            0.0
        );
        assert_eq!(
            table
                .find("other", Some("openai"), now)
                .unwrap()
                .input_per_mtok,
            9.0
        );
    }

    #[test]
    fn bad_prices_are_refused_with_their_place() {
        let mut negative = price("m", None, "2026-01-01", -1.0, 1.0);
        let e = PriceTable::new(vec![negative.clone()]).unwrap_err();
        assert!(e.0.contains("prices[0] (m)"), "{e}");
        negative.input_per_mtok = f64::NAN;
        assert!(PriceTable::new(vec![negative]).is_err());
        let twin = price("m", None, "2026-01-01", 1.0, 1.0);
        let e = PriceTable::new(vec![twin.clone(), twin]).unwrap_err();
        assert!(e.0.contains("prices[1]"), "{e}");
        assert!(PriceTable::new(vec![price(" ", None, "2026-01-01", 1.0, 1.0)]).is_err());
        assert_eq!(day_start_us("2026-13-01"), None);
    }

    #[test]
    fn each_kind_of_token_is_priced_at_its_own_rate() {
        let p = Price {
            cache_read_per_mtok: Some(0.1),
            cache_write_per_mtok: Some(1.25),
            cache_write_1h_per_mtok: Some(2.0),
            reasoning_per_mtok: Some(5.0),
            ..price("m", None, "2026-01-01", 1.0, 4.0)
        };
        let t = Tokens {
            // 1,000 uncached + 10,000 read + 300 written (100 of them for an hour).
            input: Some(11_300),
            cache_read: Some(10_000),
            cache_write: Some(300),
            cache_write_1h: Some(100),
            // 50 reasoning of the 250 output.
            output: Some(250),
            reasoning: Some(50),
            estimated_output: None,
        };
        // 1000×1 + 10000×0.1 + 200×1.25 + 100×2 + 200×4 + 50×5, per million, in nano-USD.
        let expected = (1000.0 + 1000.0 + 250.0 + 200.0 + 800.0 + 250.0) * 1000.0;
        assert_eq!(p.nano_usd(&t), Some(expected as u64));
        // Without a reasoning price, reasoning is output.
        let plain = Price {
            reasoning_per_mtok: None,
            ..p.clone()
        };
        let expected = (1000.0 + 1000.0 + 250.0 + 200.0 + 1000.0) * 1000.0;
        assert_eq!(plain.nano_usd(&t), Some(expected as u64));
    }

    #[test]
    fn tokens_of_a_kind_with_no_price_leave_the_cost_unknown() {
        let p = price("m", None, "2026-01-01", 1.0, 4.0);
        let read = Tokens {
            input: Some(100),
            cache_read: Some(40),
            output: Some(1),
            ..Tokens::default()
        };
        assert_eq!(p.nano_usd(&read), None);
        // A zero count of an unpriced kind is no obstacle.
        let none_read = Tokens {
            cache_read: Some(0),
            ..read
        };
        assert_eq!(p.nano_usd(&none_read), Some(100_000 + 4_000));
    }

    fn record(outcome: Outcome) -> RequestRecord {
        let mut r = crate::timeline::tests_support::record();
        r.outcome = outcome;
        r.model = Some("m".into());
        r.created_at_us = at("2026-03-01");
        r.upstream_dialect = Some(crate::Dialect::Chat);
        r
    }

    #[test]
    fn what_the_provider_did_not_bill_costs_zero_even_without_a_price() {
        let table = PriceTable::default();
        let mut refused = record(Outcome::Rejected);
        refused.upstream_dialect = None;
        assert_eq!(table.cost_of(&refused, Some(10)), Some(Cost::FREE));
        assert_eq!(
            table.cost_of(&record(Outcome::RateLimited), None),
            Some(Cost::FREE)
        );
        let failed = record(Outcome::UpstreamError);
        assert_eq!(table.cost_of(&failed, Some(10)), Some(Cost::FREE));
        // Billed, but nothing prices it: unknown, not zero.
        let mut done = record(Outcome::Completed);
        done.tokens.input = Some(10);
        done.tokens.output = Some(5);
        assert_eq!(table.cost_of(&done, None), None);
    }

    #[test]
    fn a_cut_stream_is_charged_for_what_it_produced_and_flagged_estimated() {
        let table = PriceTable::new(vec![price("m", None, "2026-01-01", 1.0, 2.0)]).unwrap();
        let mut cut = record(Outcome::ClientCancelled);
        cut.marks.first_effective = Some(std::time::Duration::from_millis(5));
        cut.text_delta_count = 30;
        cut.tokens.input = Some(1_000);
        assert_eq!(
            table.cost_of(&cut, Some(999)),
            Some(Cost {
                nano_usd: 1_000 * 1_000 + 30 * 2_000,
                estimated: true,
            })
        );
        let mut reported = record(Outcome::Completed);
        reported.tokens.input = Some(1_000);
        reported.tokens.output = Some(10);
        let cost = table.cost_of(&reported, Some(5)).unwrap();
        assert_eq!(
            cost,
            Cost {
                nano_usd: 1_020_000,
                estimated: false
            }
        );
        assert!((cost.usd() - 0.00102).abs() < 1e-12);
    }

    #[test]
    fn input_estimates_round_up() {
        assert_eq!(estimate_input_tokens(0), 0);
        assert_eq!(estimate_input_tokens(1), 1);
        assert_eq!(estimate_input_tokens(8), 2);
        assert_eq!(estimate_input_tokens(9), 3);
    }
}
