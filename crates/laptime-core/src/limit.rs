//! The limits a token or a workspace may have, the name of the one that refused a request, and
//! the per-minute windows that count against them. Pure: the edge hands in the instant.
//!
//! A window is a generic cell rate algorithm (GCRA): `limit` units a minute are one unit every
//! `60 s / limit`, and a client may spend a whole minute's worth at once. The state is one
//! instant (the theoretical arrival time), so a window costs 8 bytes per key and one compare
//! per request, and the same arithmetic runs in a Redis script for a fleet.

use serde::{Deserialize, Serialize};

/// One minute, in microseconds: the period of every rate limit.
pub const MINUTE_US: i64 = 60_000_000;

/// Whose limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitScope {
    Workspace,
    Token,
}

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Requests per minute.
    Rpm,
    /// Tokens (input and output) per minute.
    Tpm,
    /// Requests in flight at once.
    Concurrent,
    /// Spend per calendar day.
    DailyBudget,
    /// Spend per calendar month.
    MonthlyBudget,
}

/// A limit of one scope: the name a refusal is recorded and answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    pub scope: LimitScope,
    pub kind: LimitKind,
}

impl Limit {
    pub const ALL: [Limit; 10] = {
        use LimitKind::*;
        use LimitScope::*;
        [
            Limit::new(Workspace, Rpm),
            Limit::new(Workspace, Tpm),
            Limit::new(Workspace, Concurrent),
            Limit::new(Workspace, DailyBudget),
            Limit::new(Workspace, MonthlyBudget),
            Limit::new(Token, Rpm),
            Limit::new(Token, Tpm),
            Limit::new(Token, Concurrent),
            Limit::new(Token, DailyBudget),
            Limit::new(Token, MonthlyBudget),
        ]
    };

    pub const fn new(scope: LimitScope, kind: LimitKind) -> Limit {
        Limit { scope, kind }
    }

    pub fn as_str(self) -> &'static str {
        use LimitKind::*;
        use LimitScope::*;
        match (self.scope, self.kind) {
            (Workspace, Rpm) => "workspace_rpm",
            (Workspace, Tpm) => "workspace_tpm",
            (Workspace, Concurrent) => "workspace_concurrent",
            (Workspace, DailyBudget) => "workspace_daily_budget",
            (Workspace, MonthlyBudget) => "workspace_monthly_budget",
            (Token, Rpm) => "token_rpm",
            (Token, Tpm) => "token_tpm",
            (Token, Concurrent) => "token_concurrent",
            (Token, DailyBudget) => "token_daily_budget",
            (Token, MonthlyBudget) => "token_monthly_budget",
        }
    }

    pub fn parse(s: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Limit, D::Error> {
        let name = String::deserialize(d)?;
        Limit::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown limit {name:?}")))
    }
}

/// The rate limits of one token or workspace; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub rpm: Option<u64>,
    pub tpm: Option<u64>,
    pub concurrent: Option<u64>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// The rate limits that apply to one token's requests: its workspace's and its own (both
/// apply; a token's may be tighter than its workspace's, or looser, and then the workspace's
/// binds).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applicable {
    pub workspace: Limits,
    pub token: Limits,
}

impl Applicable {
    pub fn is_empty(&self) -> bool {
        self.workspace.is_empty() && self.token.is_empty()
    }

    /// Reads the six stored limits, workspace's then token's (rpm, tpm, concurrent each); a
    /// stored value below 1 is no limit.
    pub fn from_stored(v: [Option<i64>; 6]) -> Applicable {
        let get = |i: usize| v[i].and_then(|n| u64::try_from(n).ok()).filter(|&n| n > 0);
        Applicable {
            workspace: Limits {
                rpm: get(0),
                tpm: get(1),
                concurrent: get(2),
            },
            token: Limits {
                rpm: get(3),
                tpm: get(4),
                concurrent: get(5),
            },
        }
    }
}

/// The time zone whose calendar budget periods follow (`[budgets] zone`): a day or a month
/// starts at local midnight there. IANA names only, read from the tz database compiled into the
/// binary, so two instances of one release agree on every boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    name: String,
    tz: jiff::tz::TimeZone,
}

impl Default for Zone {
    fn default() -> Self {
        Zone::utc()
    }
}

impl Zone {
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// The zone of an IANA name (`Europe/Berlin`, `UTC`); an unknown name says so.
    pub fn named(name: &str) -> Result<Zone, String> {
        let tz = jiff::tz::TimeZone::get(name).map_err(|_| {
            format!("{name:?} is not a time zone of the IANA database (e.g. \"Europe/Berlin\")")
        })?;
        Ok(Zone {
            name: name.to_string(),
            tz,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first instant of `date` here (local midnight; where a DST change skips midnight,
    /// the first instant after the gap), in unix microseconds.
    fn day_start_us(&self, date: jiff::civil::Date) -> Option<i64> {
        let start = date
            .to_zoned_datetime(self.tz.clone())
            .ok()?
            .start_of_day()
            .ok()?;
        Some(start.timestamp().as_microsecond())
    }

    /// The local calendar date holding `at_us`.
    fn date_of(&self, at_us: i64) -> Option<jiff::civil::Date> {
        let ts = jiff::Timestamp::from_microsecond(at_us).ok()?;
        Some(self.tz.to_datetime(ts).date())
    }
}

/// The calendar period of a budget, in the budgets' [`Zone`] (UTC unless configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub const ALL: [Period; 2] = [Period::Day, Period::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    pub fn parse(s: &str) -> Option<Period> {
        Period::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The limit a budget of this period is refused under.
    pub fn limit(self, scope: LimitScope) -> Limit {
        Limit::new(
            scope,
            match self {
                Period::Day => LimitKind::DailyBudget,
                Period::Month => LimitKind::MonthlyBudget,
            },
        )
    }

    /// The first day of the period holding `date`.
    fn first_day(self, date: jiff::civil::Date) -> jiff::civil::Date {
        match self {
            Period::Day => date,
            Period::Month => date.first_of_month(),
        }
    }

    /// The start of the period holding `at_us` (local midnight in `zone` of its day, or of its
    /// month's first day), in unix microseconds.
    pub fn start_us(self, at_us: i64, zone: &Zone) -> i64 {
        zone.date_of(at_us)
            .and_then(|d| zone.day_start_us(self.first_day(d)))
            .unwrap_or(at_us)
    }

    /// The start of the next period after the one holding `at_us`.
    pub fn next_start_us(self, at_us: i64, zone: &Zone) -> i64 {
        let next = zone.date_of(at_us).and_then(|d| match self {
            Period::Day => d.tomorrow().ok(),
            Period::Month => d.last_of_month().tomorrow().ok(),
        });
        next.and_then(|d| zone.day_start_us(d)).unwrap_or(at_us)
    }

    /// The start of the period before the one holding `at_us`.
    pub fn previous_start_us(self, at_us: i64, zone: &Zone) -> i64 {
        let previous = zone
            .date_of(at_us)
            .and_then(|d| self.first_day(d).yesterday().ok());
        previous
            .and_then(|d| zone.day_start_us(self.first_day(d)))
            .unwrap_or(at_us)
    }
}

/// What a budget does when spend reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BudgetMode {
    /// Requests continue, flagged; a metric and a log line at 80 % and 100 %.
    Soft,
    /// New requests are refused (429) until the period ends; requests in flight finish.
    Hard,
}

impl BudgetMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetMode::Soft => "soft",
            BudgetMode::Hard => "hard",
        }
    }

    pub fn parse(s: &str) -> Option<BudgetMode> {
        [BudgetMode::Soft, BudgetMode::Hard]
            .into_iter()
            .find(|m| m.as_str() == s)
    }
}

/// A spending limit of a workspace or token over a calendar period, in nano-USD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub period: Period,
    pub nano_usd: u64,
    pub mode: BudgetMode,
}

/// A window's answer when it admits: what is left, and when it is whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// Units that could still be taken now.
    pub remaining: u64,
    /// Microseconds until the window is whole again.
    pub reset_us: i64,
}

/// A window's answer when it refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// Microseconds until the units asked for would be admitted; `None` when they never
    /// would (more than a whole minute's worth at once).
    pub retry_after_us: Option<i64>,
    /// Microseconds until the window is whole again.
    pub reset_us: i64,
}

/// A GCRA window: `tat_us` is the instant by which everything taken so far has been paid off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub tat_us: i64,
}

/// Microseconds one unit costs at `per_minute` units a minute (at least 1).
fn interval_us(per_minute: u64) -> i64 {
    (MINUTE_US / i64::try_from(per_minute.max(1)).unwrap_or(i64::MAX)).max(1)
}

impl Window {
    /// Takes `units` at `now_us` if a minute's allowance has room for them.
    pub fn take(&mut self, now_us: i64, units: u64, per_minute: u64) -> Result<Granted, Denied> {
        let interval = interval_us(per_minute);
        let start = self.tat_us.max(now_us);
        let cost = interval.saturating_mul(i64::try_from(units).unwrap_or(i64::MAX));
        let tat = start.saturating_add(cost);
        if tat - now_us > MINUTE_US {
            let reset_us = start - now_us;
            return Err(Denied {
                retry_after_us: (cost <= MINUTE_US).then_some(tat - now_us - MINUTE_US),
                reset_us,
            });
        }
        self.tat_us = tat;
        Ok(Granted {
            remaining: self.remaining(now_us, per_minute),
            reset_us: tat - now_us,
        })
    }

    /// Units that could be taken at `now_us`.
    pub fn remaining(&self, now_us: i64, per_minute: u64) -> u64 {
        let owed = (self.tat_us - now_us).max(0);
        u64::try_from((MINUTE_US - owed).max(0) / interval_us(per_minute)).unwrap_or(0)
    }

    /// Corrects what was taken by `delta` units (an estimate reconciled with the real count):
    /// positive charges more, negative gives back; never back past `now_us`.
    pub fn adjust(&mut self, now_us: i64, delta: i64, per_minute: u64) {
        let change = interval_us(per_minute).saturating_mul(delta);
        let base = self.tat_us.max(now_us);
        self.tat_us = base.saturating_add(change).max(now_us.min(self.tat_us));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn at(s: &str) -> i64 {
        let t =
            time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).unwrap();
        (t.unix_timestamp_nanos() / 1000) as i64
    }

    #[test]
    fn periods_start_at_utc_midnight_of_their_day_and_month() {
        let utc = Zone::utc();
        let t = at("2026-12-31T23:59:59.5Z");
        assert_eq!(Period::Day.start_us(t, &utc), at("2026-12-31T00:00:00Z"));
        assert_eq!(Period::Month.start_us(t, &utc), at("2026-12-01T00:00:00Z"));
        assert_eq!(
            Period::Day.next_start_us(t, &utc),
            at("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            Period::Month.next_start_us(t, &utc),
            at("2027-01-01T00:00:00Z")
        );
        assert_eq!(
            Period::Day.previous_start_us(t, &utc),
            at("2026-12-30T00:00:00Z")
        );
        assert_eq!(
            Period::Month.previous_start_us(t, &utc),
            at("2026-11-01T00:00:00Z")
        );
        let feb = at("2028-02-29T12:00:00Z");
        assert_eq!(
            Period::Month.next_start_us(feb, &utc),
            at("2028-03-01T00:00:00Z")
        );
        // The first instant of a period is in it.
        let start = at("2026-06-01T00:00:00Z");
        assert_eq!(Period::Month.start_us(start, &utc), start);
        assert_eq!(
            Period::Month.start_us(start - 1, &utc),
            at("2026-05-01T00:00:00Z")
        );
        for p in Period::ALL {
            assert_eq!(Period::parse(p.as_str()), Some(p));
        }
        assert_eq!(BudgetMode::parse("hard"), Some(BudgetMode::Hard));
        assert_eq!(BudgetMode::parse("strict"), None);
    }

    #[test]
    fn a_configured_zone_starts_periods_at_its_local_midnight() {
        let berlin = Zone::named("Europe/Berlin").unwrap();
        assert_eq!(berlin.name(), "Europe/Berlin");
        // Month end: 23:30 UTC on 31 January is already 1 February in Berlin (UTC+1).
        let t = at("2026-01-31T23:30:00Z");
        assert_eq!(
            Period::Month.start_us(t, &berlin),
            at("2026-01-31T23:00:00Z")
        );
        assert_eq!(Period::Day.start_us(t, &berlin), at("2026-01-31T23:00:00Z"));
        assert_eq!(
            Period::Month.previous_start_us(t, &berlin),
            at("2025-12-31T23:00:00Z")
        );
        // The instant before Berlin's midnight is still January's.
        let last = at("2026-01-31T22:59:59.999999Z");
        assert_eq!(
            Period::Month.start_us(last, &berlin),
            at("2025-12-31T23:00:00Z")
        );
        assert_eq!(
            Period::Month.next_start_us(last, &berlin),
            at("2026-01-31T23:00:00Z")
        );
        // In UTC the same instant is still January.
        assert_eq!(
            Period::Month.start_us(t, &Zone::utc()),
            at("2026-01-01T00:00:00Z")
        );
        // A month that ends in summer time starts in winter time: March 2026 is 31 days less
        // an hour long.
        let march = at("2026-03-15T12:00:00Z");
        assert_eq!(
            Period::Month.start_us(march, &berlin),
            at("2026-02-28T23:00:00Z")
        );
        assert_eq!(
            Period::Month.next_start_us(march, &berlin),
            at("2026-03-31T22:00:00Z")
        );
    }

    #[test]
    fn a_dst_change_day_is_23_or_25_hours_long() {
        let berlin = Zone::named("Europe/Berlin").unwrap();
        const H: i64 = 3_600 * S;
        // 29 March 2026: 02:00 CET becomes 03:00 CEST.
        let spring = at("2026-03-29T12:00:00Z");
        let (start, next) = (
            Period::Day.start_us(spring, &berlin),
            Period::Day.next_start_us(spring, &berlin),
        );
        assert_eq!(start, at("2026-03-28T23:00:00Z"));
        assert_eq!(next, at("2026-03-29T22:00:00Z"));
        assert_eq!(next - start, 23 * H);
        assert_eq!(Period::Day.start_us(next - 1, &berlin), start);
        assert_eq!(Period::Day.start_us(next, &berlin), next);
        // 25 October 2026: 03:00 CEST becomes 02:00 CET.
        let autumn = at("2026-10-25T12:00:00Z");
        let (start, next) = (
            Period::Day.start_us(autumn, &berlin),
            Period::Day.next_start_us(autumn, &berlin),
        );
        assert_eq!((start, next - start), (at("2026-10-24T22:00:00Z"), 25 * H));
        assert_eq!(Period::Day.previous_start_us(next, &berlin), start);
        // Where a DST change skips midnight (Santiago, 6 September 2026: 00:00 is 01:00), the
        // day starts at the first instant it has.
        let santiago = Zone::named("America/Santiago").unwrap();
        let t = at("2026-09-06T12:00:00Z");
        assert_eq!(
            Period::Day.start_us(t, &santiago),
            at("2026-09-06T04:00:00Z")
        );
        assert_eq!(
            Period::Day.next_start_us(t - 86_400 * S, &santiago),
            at("2026-09-06T04:00:00Z")
        );
    }

    #[test]
    fn an_unknown_zone_is_refused_with_its_name() {
        let e = Zone::named("Mars/Olympus").unwrap_err();
        assert!(e.contains("Mars/Olympus"), "{e}");
        assert_eq!(Zone::default(), Zone::utc());
        assert_eq!(Zone::named("UTC").unwrap().name(), "UTC");
    }

    #[test]
    fn names_round_trip_through_serde() {
        let mut seen = std::collections::HashSet::new();
        for l in Limit::ALL {
            assert!(seen.insert(l.as_str()));
            assert_eq!(Limit::parse(l.as_str()), Some(l));
            let json = serde_json::to_value(l).unwrap();
            assert_eq!(json, l.as_str());
            assert_eq!(serde_json::from_value::<Limit>(json).unwrap(), l);
        }
        assert!(serde_json::from_value::<Limit>("token_rps".into()).is_err());
    }

    #[test]
    fn a_minutes_allowance_can_be_spent_at_once_then_refills_evenly() {
        let mut w = Window::default();
        let now = 1_000 * S;
        for i in 0..60 {
            let g = w.take(now, 1, 60).unwrap();
            assert_eq!(g.remaining, 59 - i);
        }
        let denied = w.take(now, 1, 60).unwrap_err();
        assert_eq!(denied.retry_after_us, Some(S));
        assert_eq!(denied.reset_us, 60 * S);
        // One second later one more fits, and only one.
        assert!(w.take(now + S, 1, 60).is_ok());
        assert!(w.take(now + S, 1, 60).is_err());
        // A quiet minute makes it whole.
        assert_eq!(w.remaining(now + 61 * S, 60), 60);
    }

    #[test]
    fn the_admitted_rate_over_a_long_overload_is_the_limit() {
        let mut w = Window::default();
        let mut admitted = 0u64;
        // 10 requests a second for ten minutes against 120 a minute.
        for tick in 0..6_000i64 {
            if w.take(tick * S / 10, 1, 120).is_ok() {
                admitted += 1;
            }
        }
        // A whole minute's 120 at once, then one every half second (the last tick of the ten
        // minutes is the one the first burst's request paid for).
        let expected = 120 + 2 * 600 - 1;
        assert!(admitted.abs_diff(expected) <= 2, "{admitted}");
    }

    #[test]
    fn weighted_takes_and_more_than_a_minutes_worth() {
        let mut w = Window::default();
        assert_eq!(w.take(0, 600, 1_000).unwrap().remaining, 400);
        let denied = w.take(0, 500, 1_000).unwrap_err();
        // 100 over: 100 units at 60 ms each.
        assert_eq!(denied.retry_after_us, Some(100 * 60_000));
        // Never admissible at any time.
        let mut fresh = Window::default();
        assert_eq!(
            fresh.take(0, 1_001, 1_000).unwrap_err().retry_after_us,
            None
        );
    }

    #[test]
    fn reconciling_an_estimate_charges_or_gives_back() {
        let mut w = Window::default();
        w.take(0, 500, 1_000).unwrap();
        // The request used 200 tokens, not 500.
        w.adjust(0, -300, 1_000);
        assert_eq!(w.remaining(0, 1_000), 800);
        // Another used 300 more than estimated.
        w.adjust(0, 300, 1_000);
        assert_eq!(w.remaining(0, 1_000), 500);
        // A give-back larger than what is owed leaves the window whole, not over-full.
        w.adjust(0, -10_000, 1_000);
        assert_eq!(w.remaining(0, 1_000), 1_000);
        assert!(w.take(0, 1_001, 1_000).is_err());
    }
}
