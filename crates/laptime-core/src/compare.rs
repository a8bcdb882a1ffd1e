//! The request-shape dimensions that make a usage comparison like with like: reasoning effort,
//! tools present, and the max-output-tokens and input-token buckets (region is the record's own
//! field). Each is a closed set, so a usage grouping has a bounded number of keys whatever
//! clients send: a rollup key built from free text (an effort word, a token count) would grow
//! with every distinct value.
//!
//! **Token buckets** are powers of 4 (1k = 1,024): `<256`, `256-1k`, `1k-4k`, `4k-16k`,
//! `16k-64k`, `64k+`, each holding [lower, upper) tokens. The input bucket is read from the
//! provider's input count (cache included); a request without one has no input bucket. The
//! max-output bucket is the limit the client asked for; a request that asked none has none.

use crate::timeline::RequestRecord;

/// A token-count bucket (powers of 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenBucket {
    Under256,
    To1k,
    To4k,
    To16k,
    To64k,
    From64k,
}

impl TokenBucket {
    pub const ALL: [TokenBucket; 6] = [
        TokenBucket::Under256,
        TokenBucket::To1k,
        TokenBucket::To4k,
        TokenBucket::To16k,
        TokenBucket::To64k,
        TokenBucket::From64k,
    ];

    /// The bucket holding `tokens`.
    pub fn of(tokens: u64) -> TokenBucket {
        TokenBucket::ALL
            .into_iter()
            .find(|b| b.range().1.is_none_or(|upper| tokens < upper))
            .unwrap_or(TokenBucket::From64k)
    }

    /// [lower, upper) in tokens; the last bucket has no upper bound.
    pub fn range(self) -> (u64, Option<u64>) {
        match self {
            TokenBucket::Under256 => (0, Some(256)),
            TokenBucket::To1k => (256, Some(1 << 10)),
            TokenBucket::To4k => (1 << 10, Some(1 << 12)),
            TokenBucket::To16k => (1 << 12, Some(1 << 14)),
            TokenBucket::To64k => (1 << 14, Some(1 << 16)),
            TokenBucket::From64k => (1 << 16, None),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenBucket::Under256 => "<256",
            TokenBucket::To1k => "256-1k",
            TokenBucket::To4k => "1k-4k",
            TokenBucket::To16k => "4k-16k",
            TokenBucket::To64k => "16k-64k",
            TokenBucket::From64k => "64k+",
        }
    }

    pub fn parse(s: &str) -> Option<TokenBucket> {
        TokenBucket::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// The reasoning effort a request asked for, as a class: OpenAI's effort words as they are, a
/// thinking budget (Anthropic, Gemini) as `budget`, and any other word as `other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EffortClass {
    None,
    Minimal,
    Low,
    Medium,
    High,
    XHigh,
    Max,
    Budget,
    Other,
}

/// How ingress records a thinking budget in the shape's `reasoning_effort`.
pub const BUDGET_PREFIX: &str = "budget_tokens:";

impl EffortClass {
    pub const ALL: [EffortClass; 9] = [
        EffortClass::None,
        EffortClass::Minimal,
        EffortClass::Low,
        EffortClass::Medium,
        EffortClass::High,
        EffortClass::XHigh,
        EffortClass::Max,
        EffortClass::Budget,
        EffortClass::Other,
    ];

    /// The words recorded as they are: every class but the last two (`budget`, `other`).
    pub const WORDS: &'static [EffortClass] = EffortClass::ALL.split_at(7).0;

    /// The class of a recorded `reasoning_effort`.
    pub fn of(recorded: &str) -> EffortClass {
        if recorded.starts_with(BUDGET_PREFIX) {
            return EffortClass::Budget;
        }
        EffortClass::WORDS
            .iter()
            .copied()
            .find(|c| c.as_str() == recorded)
            .unwrap_or(EffortClass::Other)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EffortClass::None => "none",
            EffortClass::Minimal => "minimal",
            EffortClass::Low => "low",
            EffortClass::Medium => "medium",
            EffortClass::High => "high",
            EffortClass::XHigh => "xhigh",
            EffortClass::Max => "max",
            EffortClass::Budget => "budget",
            EffortClass::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<EffortClass> {
        EffortClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A record's comparison dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison<'a> {
    /// Absent when the request asked for no effort or budget.
    pub effort: Option<EffortClass>,
    /// The request declared at least one tool.
    pub tools_present: bool,
    pub max_output: Option<TokenBucket>,
    pub input: Option<TokenBucket>,
    pub region: Option<&'a str>,
}

impl<'a> Comparison<'a> {
    pub fn of(r: &'a RequestRecord) -> Self {
        Comparison {
            effort: r.shape.reasoning_effort.as_deref().map(EffortClass::of),
            tools_present: r.shape.tool_count.is_some_and(|n| n > 0),
            max_output: r.shape.max_output_tokens.map(TokenBucket::of),
            input: r.tokens.input.map(TokenBucket::of),
            region: r.region.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_four_with_inclusive_lower_bounds() {
        let cases = [
            (0, "<256"),
            (255, "<256"),
            (256, "256-1k"),
            (1023, "256-1k"),
            (1024, "1k-4k"),
            (4095, "1k-4k"),
            (4096, "4k-16k"),
            (16_383, "4k-16k"),
            (16_384, "16k-64k"),
            (65_535, "16k-64k"),
            (65_536, "64k+"),
            (u64::MAX, "64k+"),
        ];
        for (n, want) in cases {
            assert_eq!(TokenBucket::of(n).as_str(), want, "{n}");
        }
        for b in TokenBucket::ALL {
            assert_eq!(TokenBucket::parse(b.as_str()), Some(b));
            let (lo, hi) = b.range();
            assert_eq!(TokenBucket::of(lo), b);
            if let Some(hi) = hi {
                assert_eq!(TokenBucket::of(hi - 1), b);
                assert_ne!(TokenBucket::of(hi), b);
            }
        }
        assert_eq!(TokenBucket::parse("1k"), None);
    }

    #[test]
    fn efforts_are_a_closed_set_whatever_the_client_sent() {
        assert_eq!(EffortClass::of("low"), EffortClass::Low);
        assert_eq!(EffortClass::of("xhigh"), EffortClass::XHigh);
        assert_eq!(EffortClass::of("none"), EffortClass::None);
        assert_eq!(EffortClass::of("budget_tokens:2048"), EffortClass::Budget);
        assert_eq!(EffortClass::of("LOW"), EffortClass::Other);
        assert_eq!(EffortClass::of("budget"), EffortClass::Other);
        for c in EffortClass::ALL {
            assert_eq!(EffortClass::parse(c.as_str()), Some(c));
        }
    }

    #[test]
    fn a_record_without_shape_or_usage_has_no_buckets_and_no_tools() {
        let mut r = crate::timeline::tests_support::record();
        let c = Comparison::of(&r);
        assert_eq!(
            c,
            Comparison {
                effort: None,
                tools_present: false,
                max_output: None,
                input: None,
                region: None,
            }
        );
        r.shape.tool_count = Some(0);
        r.shape.max_output_tokens = Some(1024);
        r.shape.reasoning_effort = Some("budget_tokens:512".into());
        r.tokens.input = Some(300);
        r.region = Some("eu".into());
        let c = Comparison::of(&r);
        assert!(!c.tools_present, "an empty tools list is no tools");
        assert_eq!(c.max_output, Some(TokenBucket::To4k));
        assert_eq!(c.input, Some(TokenBucket::To1k));
        assert_eq!(c.effort, Some(EffortClass::Budget));
        assert_eq!(c.region, Some("eu"));
        r.shape.tool_count = Some(2);
        assert!(Comparison::of(&r).tools_present);
    }
}
