//! The numbers the request rows hold for a request's outcome and classification (SQLite's from
//! schema v19, PostgreSQL's from v13, as a `smallint`). Their names took 9 and 2 bytes of nearly
//! every row (`completed`, `ok`); as numbers the usual ones are 0, which SQLite stores in the
//! row's header alone. The numbers are fixed here, one per value, and never reused: a new value
//! takes the next.

use laptime_core::slow::{Classification, SlowStage};
use laptime_core::timeline::Outcome;

/// The number a row holds for `o`.
pub(crate) fn outcome_code(o: Outcome) -> i64 {
    match o {
        Outcome::Completed => 0,
        Outcome::Incomplete => 1,
        Outcome::UpstreamError => 2,
        Outcome::UpstreamClosedEarly => 3,
        Outcome::ClientCancelled => 4,
        Outcome::Timeout => 5,
        Outcome::Rejected => 6,
        Outcome::CacheHit => 7,
        Outcome::RateLimited => 8,
        Outcome::GatewayShutdown => 9,
        Outcome::GatewayCrashed => 10,
    }
}

/// The outcome a row's number stands for.
pub(crate) fn outcome_of(code: i64) -> Option<Outcome> {
    Outcome::ALL.into_iter().find(|o| outcome_code(*o) == code)
}

/// The number a row holds for `c`.
pub(crate) fn classification_code(c: Classification) -> i64 {
    match c {
        Classification::Ok => 0,
        Classification::Failed => 1,
        Classification::Slow(stage) => match stage {
            SlowStage::UpstreamHeadersSlow => 2,
            SlowStage::FirstEventSlow => 3,
            SlowStage::EffectiveOutputSlow => 4,
            SlowStage::VisibleTextLate => 5,
            SlowStage::GenerationSlowTps => 6,
            SlowStage::LocalOverheadSlow => 7,
        },
    }
}

/// The classification a row's number stands for.
pub(crate) fn classification_of(code: i64) -> Option<Classification> {
    all_classifications().find(|c| classification_code(*c) == code)
}

pub(crate) fn all_classifications() -> impl Iterator<Item = Classification> {
    [Classification::Ok, Classification::Failed]
        .into_iter()
        .chain(SlowStage::ALL.map(Classification::Slow))
}

/// The number a filter on the column `col` (`outcome` or `classification`) compares with for
/// the name `name`: -1, which no row holds, for a name that is none of the values.
pub(crate) fn filter_code(col: &str, name: &str) -> Option<i64> {
    let code = match col {
        "outcome" => Outcome::parse(name).map(outcome_code),
        "classification" => Classification::parse(name).map(classification_code),
        _ => return None,
    };
    Some(code.unwrap_or(-1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_value_has_its_own_number_and_reads_back_from_it() {
        let outcomes: HashSet<i64> = Outcome::ALL.into_iter().map(outcome_code).collect();
        assert_eq!(outcomes.len(), Outcome::ALL.len());
        for o in Outcome::ALL {
            assert_eq!(outcome_of(outcome_code(o)), Some(o));
            assert_eq!(filter_code("outcome", o.as_str()), Some(outcome_code(o)));
        }
        let classes: Vec<Classification> = all_classifications().collect();
        let numbers: HashSet<i64> = classes.iter().map(|c| classification_code(*c)).collect();
        assert_eq!(numbers.len(), classes.len());
        for c in classes {
            assert_eq!(classification_of(classification_code(c)), Some(c));
            assert_eq!(
                filter_code("classification", c.as_str()),
                Some(classification_code(c))
            );
        }
        // The usual ones cost a row nothing.
        assert_eq!(outcome_code(Outcome::Completed), 0);
        assert_eq!(classification_code(Classification::Ok), 0);
        assert_eq!(outcome_of(-1), None);
        assert_eq!(filter_code("outcome", "no-such-outcome"), Some(-1));
        assert_eq!(filter_code("model", "completed"), None);
    }
}
