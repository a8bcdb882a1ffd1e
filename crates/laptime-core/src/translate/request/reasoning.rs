//! The table between named reasoning efforts and reasoning-token budgets, which the proxy fills
//! per model from its config.
//!
//! Default budgets (tokens): minimal 1024 (Anthropic's smallest), low 2048, medium 8192,
//! high 16384, xhigh 32768, max 65536. A budget goes back to the effort whose budget is
//! nearest, a tie to the higher one.

use super::hub::Effort;

/// Reasoning-token budgets per effort, for one model (the proxy reads it from its config: a
/// field left out keeps its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReasoningTable {
    pub minimal: u32,
    pub low: u32,
    pub medium: u32,
    pub high: u32,
    pub xhigh: u32,
    pub max: u32,
    /// The upstream model takes a named effort itself (Anthropic adaptive thinking with
    /// `output_config.effort`, Gemini `thinkingLevel`) instead of a budget, so an effort is sent
    /// as one.
    pub native_effort: bool,
}

impl ReasoningTable {
    pub const DEFAULT: ReasoningTable = ReasoningTable {
        minimal: 1024,
        low: 2048,
        medium: 8192,
        high: 16384,
        xhigh: 32768,
        max: 65536,
        native_effort: false,
    };

    pub fn budget_for(&self, effort: Effort) -> u32 {
        match effort {
            Effort::Minimal => self.minimal,
            Effort::Low => self.low,
            Effort::Medium => self.medium,
            Effort::High => self.high,
            Effort::XHigh => self.xhigh,
            Effort::Max => self.max,
        }
    }

    /// The effort whose budget is nearest `budget`; on a tie, the higher effort.
    pub fn effort_for(&self, budget: u32) -> Effort {
        let mut best = Effort::Minimal;
        for effort in Effort::ALL {
            let d = self.budget_for(effort).abs_diff(budget);
            if d <= self.budget_for(best).abs_diff(budget) {
                best = effort;
            }
        }
        best
    }
}

impl Default for ReasoningTable {
    fn default() -> Self {
        ReasoningTable::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_effort_goes_to_its_budget_and_back() {
        let t = ReasoningTable::DEFAULT;
        for e in Effort::ALL {
            assert_eq!(t.effort_for(t.budget_for(e)), e);
        }
    }

    #[test]
    fn a_budget_goes_to_the_nearest_effort_and_a_tie_to_the_higher() {
        let t = ReasoningTable::DEFAULT;
        assert_eq!(t.effort_for(0), Effort::Minimal);
        assert_eq!(t.effort_for(3000), Effort::Low);
        assert_eq!(t.effort_for(6000), Effort::Medium);
        assert_eq!(
            t.effort_for(5120),
            Effort::Medium,
            "2048 and 8192 are 3072 away"
        );
        assert_eq!(t.effort_for(1_000_000), Effort::Max);
    }

    #[test]
    fn an_overridden_table_is_used_both_ways() {
        let t = ReasoningTable {
            high: 50_000,
            ..ReasoningTable::DEFAULT
        };
        assert_eq!(t.budget_for(Effort::High), 50_000);
        assert_eq!(t.effort_for(49_000), Effort::High);
    }
}
