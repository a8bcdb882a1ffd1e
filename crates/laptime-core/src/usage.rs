//! Token counts: what upstream reported, merged last-value-wins per field, and normalised so that
//! "input" means the same in every dialect.

use serde::{Deserialize, Serialize};

use crate::Dialect;

/// Token fields one upstream event or body reported, in the dialect's own terms
/// (Anthropic `input` excludes cache reads and writes). Gemini's are folded from one
/// `usageMetadata` object by its classifier, where the fields it sums are side by side (input =
/// prompt + tool-use prompt, output = candidates + thoughts). `None` = the field was not sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageReport {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
    /// The part of `cache_write` written for one hour (Anthropic's
    /// `cache_creation.ephemeral_1h_input_tokens`), priced apart from five-minute writes.
    pub cache_write_1h: Option<u64>,
    pub reasoning: Option<u64>,
}

impl UsageReport {
    pub fn is_empty(&self) -> bool {
        *self == UsageReport::default()
    }
}

/// Normalised token counts as stored and served: input includes cached tokens in every dialect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
    /// The part of `cache_write` that is one-hour cache writes (Anthropic); absent when the
    /// provider does not split them.
    #[serde(default)]
    pub cache_write_1h: Option<u64>,
    pub reasoning: Option<u64>,
    /// Output tokens the gateway counted with its tokenizer over the output it relayed, when the
    /// provider reported no output count (a Chat stream without `include_usage`, a channel that
    /// sends no usage in streams). Kept apart: never in `output`, never summed with it.
    #[serde(default)]
    pub estimated_output: Option<u64>,
}

impl Tokens {
    /// The output count speeds are computed from: the provider's, else the estimate (a figure
    /// that relies on it says so, see [`Tokens::output_estimated`]).
    pub fn output_for_speed(&self) -> Option<u64> {
        self.output.or(self.estimated_output)
    }

    /// Whether the output count in use is the gateway's estimate.
    pub fn output_estimated(&self) -> bool {
        self.output.is_none() && self.estimated_output.is_some()
    }
}

/// Merges usage reports over a stream. Upstream counts are cumulative, so the last value of each
/// field wins; deltas are never summed.
#[derive(Debug, Clone, Copy)]
pub struct UsageAcc {
    dialect: Dialect,
    raw: UsageReport,
}

impl UsageAcc {
    pub fn new(dialect: Dialect) -> Self {
        UsageAcc {
            dialect,
            raw: UsageReport::default(),
        }
    }

    pub fn apply(&mut self, report: &UsageReport) {
        let raw = &mut self.raw;
        for (slot, value) in [
            (&mut raw.input, report.input),
            (&mut raw.output, report.output),
            (&mut raw.cache_read, report.cache_read),
            (&mut raw.cache_write, report.cache_write),
            (&mut raw.cache_write_1h, report.cache_write_1h),
            (&mut raw.reasoning, report.reasoning),
        ] {
            if value.is_some() {
                *slot = value;
            }
        }
    }

    pub fn raw(&self) -> UsageReport {
        self.raw
    }

    /// Anthropic's `input_tokens` leaves out cache reads and writes; the normalised input adds
    /// them back so that input is comparable across dialects.
    pub fn tokens(&self) -> Tokens {
        let raw = self.raw;
        let input = match self.dialect {
            Dialect::Messages => raw.input.map(|i| {
                i.saturating_add(raw.cache_read.unwrap_or(0))
                    .saturating_add(raw.cache_write.unwrap_or(0))
            }),
            Dialect::Chat | Dialect::Responses | Dialect::Gemini => raw.input,
        };
        Tokens {
            input,
            output: raw.output,
            cache_read: raw.cache_read,
            cache_write: raw.cache_write,
            cache_write_1h: raw.cache_write_1h,
            reasoning: raw.reasoning,
            estimated_output: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_report_overrides_each_field_it_carries_and_keeps_the_rest() {
        let mut acc = UsageAcc::new(Dialect::Messages);
        acc.apply(&UsageReport {
            input: Some(43),
            output: Some(1),
            cache_read: Some(100),
            cache_write: Some(7),
            cache_write_1h: None,
            reasoning: None,
        });
        acc.apply(&UsageReport {
            input: Some(61),
            output: Some(120),
            ..UsageReport::default()
        });
        let t = acc.tokens();
        assert_eq!(t.input, Some(61 + 100 + 7));
        assert_eq!(t.output, Some(120));
        assert_eq!(t.cache_read, Some(100));
        assert_eq!(t.cache_write, Some(7));
        assert_eq!(t.reasoning, None);
    }

    #[test]
    fn openai_input_already_includes_cache() {
        let mut acc = UsageAcc::new(Dialect::Chat);
        acc.apply(&UsageReport {
            input: Some(50),
            cache_read: Some(40),
            ..UsageReport::default()
        });
        assert_eq!(acc.tokens().input, Some(50));
    }

    #[test]
    fn no_usage_means_absent_not_zero() {
        let acc = UsageAcc::new(Dialect::Responses);
        assert_eq!(acc.tokens(), Tokens::default());
        assert_eq!(acc.tokens().output, None);
    }
}
