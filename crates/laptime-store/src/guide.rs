//! How a filtered log read finds its rows through the rollups: every filter of the usage API is
//! of rollup dimensions, and a request's minute (of `created_at_us`) holds a rollup row under
//! its key, written in the transaction that writes the row and deleted only after it. So the
//! minutes whose rollups match a filter are the only ones that can hold matching rows, and a
//! read walks those minutes newest first, reading the rows of each run of consecutive ones.
//! It first looks at the window's newest rows alone ([`probe`]), where a common filter's matches
//! are, and once more at as many as their density says it needs ([`next_probe`]).
//!
//! Without it, a filter that matches few rows walks every row of the workspace's window down
//! the time index (a model no request used: 350 ms for 1 M requests on PostgreSQL, which has
//! no index by model), or needs an index per filtered name (SQLite kept two, model and
//! channel, 59 B a request).

use crate::rollups::{floor_hour, floor_minute, HOUR_US, MINUTE_US};

/// How many of a window's newest rows a filtered read looks at before it walks the rollups: a
/// common filter's newest matches are among them (one model of twenty: some 100), so it costs
/// one short scan of the time index, as before the walk.
pub(crate) const PROBE_ROWS: i64 = 2048;

/// The most rows a later look takes ([`next_probe`]): past it, the walk costs less.
pub(crate) const MAX_PROBE_ROWS: i64 = 32_768;

/// How many rows the next look should take, after one of `rows` rows found `found` of the
/// `left` matches still wanted: twice what the matches' density says is enough, when that is
/// at most [`MAX_PROBE_ROWS`]; `None` (walk the rollups) when it found none or wants more.
/// A filter with a few matches in every minute (outcome = timeout, one request in 200) is
/// found so in one more scan of the time index, where the walk reads many short runs.
pub(crate) fn next_probe(rows: i64, found: i64, left: i64) -> Option<i64> {
    if found <= 0 || left <= 0 {
        return None;
    }
    let want = (left.saturating_mul(rows).saturating_add(found - 1) / found).saturating_mul(2);
    (want <= MAX_PROBE_ROWS).then_some(want.max(PROBE_ROWS))
}

/// The part of `window` its newest rows of a look are in, and the part left (`None`: the
/// window has no more rows), given the time of the look's last row (`None` when the window
/// has fewer rows than the look takes). Rows at that very time may lie on either side of it,
/// so they are all left to the part after: each row is read by exactly one of the two.
pub(crate) fn probe(
    (from, to): (i64, i64),
    boundary: Option<i64>,
) -> ((i64, i64), Option<(i64, i64)>) {
    match boundary {
        Some(at) => (
            (at.saturating_add(1), to),
            Some((from, at.saturating_add(1))),
        ),
        None => ((from, to), None),
    }
}

/// The bounds of the rollup starts a window's rows can be under, `[first, end)`: the window's
/// open ends kept far enough from the integer's ends that rounding cannot overflow.
pub(crate) fn minute_bounds((from, to): (i64, i64)) -> (i64, i64) {
    (floor_minute(from.max(i64::MIN / 2)), to.min(i64::MAX / 2))
}

/// The slices of hour starts a read asks the hour tier about, newest first, covering the hours
/// of the minute starts `[first, end)`: the newest hour alone and the one before it alone,
/// since a common filter needs no more (the newest is often just begun), then four times as
/// many hours each slice, so a rare filter takes a few statements however far back its rows
/// are. Every statement reads at most its slice's rows, whatever plan the server makes, where
/// a `LIMIT` over the whole window was planned (on PostgreSQL without statistics) as a read of
/// every row of the window.
pub(crate) fn hour_slices((first, end): (i64, i64)) -> Vec<(i64, i64)> {
    let first = floor_hour(first);
    let mut out = Vec::new();
    let mut to = end;
    let mut hours = 1_i64;
    while to > first {
        let from = floor_hour(to.saturating_sub(1))
            .saturating_sub((hours - 1).saturating_mul(HOUR_US))
            .max(first);
        out.push((from, to));
        to = from;
        if out.len() >= 2 {
            hours = hours.saturating_mul(4);
        }
    }
    out
}

/// The slices of minute starts of `hour` within `[first, end)` that a read asks the minute tier
/// about, newest first: its last eight minutes, where a common filter's newest rows are, then
/// the rest.
pub(crate) fn minute_slices(hour: i64, (first, end): (i64, i64)) -> Vec<(i64, i64)> {
    let (from, to) = (hour.max(first), (hour + HOUR_US).min(end));
    if from >= to {
        return Vec::new();
    }
    let split = (hour + HOUR_US - 8 * MINUTE_US).clamp(from, to);
    [(split, to), (from, split)]
        .into_iter()
        .filter(|(a, b)| a < b)
        .collect()
}

/// The runs of consecutive minutes among `minutes` (starts, newest first, distinct) as
/// `[from, to)` windows clipped to `window`, newest first.
pub(crate) fn runs(minutes: &[i64], (from, to): (i64, i64)) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for &m in minutes {
        match out.last_mut() {
            Some(run) if run.0 == m.saturating_add(MINUTE_US) => run.0 = m,
            _ => out.push((m, m.saturating_add(MINUTE_US))),
        }
    }
    out.into_iter()
        .map(|(a, b)| (a.max(from), b.min(to)))
        .filter(|(a, b)| a < b)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_consecutive_minutes_newest_first_and_clip_to_the_window() {
        let m = MINUTE_US;
        let minutes = [10 * m, 9 * m, 8 * m, 5 * m, 3 * m, 2 * m];
        assert_eq!(
            runs(&minutes, (i64::MIN, i64::MAX)),
            [(8 * m, 11 * m), (5 * m, 6 * m), (2 * m, 4 * m)]
        );
        assert_eq!(
            runs(&minutes, (2 * m + 7, 10 * m + 1)),
            [(8 * m, 10 * m + 1), (5 * m, 6 * m), (2 * m + 7, 4 * m)]
        );
        // A run wholly outside the window is no read at all.
        assert_eq!(runs(&minutes, (4 * m, 5 * m)), []);
        assert_eq!(runs(&[], (0, m)), []);
    }

    #[test]
    fn hour_slices_cover_the_window_newest_first_two_single_hours_then_growing_four_times() {
        let h = HOUR_US;
        let (first, end) = (100 * h + 5 * MINUTE_US, 130 * h + 7 * MINUTE_US);
        let slices = hour_slices((first, end));
        assert_eq!(
            slices,
            [
                (130 * h, end),
                (129 * h, 130 * h),
                (125 * h, 129 * h),
                (109 * h, 125 * h),
                (100 * h, 109 * h)
            ]
        );
        assert_eq!(hour_slices((5 * h, 6 * h)), [(5 * h, 6 * h)]);
        assert_eq!(hour_slices((5 * h, 5 * h)), []);
        let (first, end) = minute_bounds((i64::MIN, i64::MAX));
        let open = hour_slices((first, end));
        assert!(open.len() < 40, "{}", open.len());
        assert_eq!(open.last().map(|s| s.0), Some(floor_hour(first)));
    }

    #[test]
    fn minute_slices_are_the_last_eight_minutes_then_the_rest_within_the_bounds() {
        let (h, m) = (7 * HOUR_US, MINUTE_US);
        assert_eq!(
            minute_slices(h, (0, i64::MAX)),
            [(h + 52 * m, h + 60 * m), (h, h + 52 * m)]
        );
        assert_eq!(
            minute_slices(h, (h + 10 * m, h + 30 * m)),
            [(h + 10 * m, h + 30 * m)]
        );
        assert_eq!(
            minute_slices(h, (h + 55 * m, i64::MAX)),
            [(h + 55 * m, h + 60 * m)]
        );
        // A window that ends before it starts has no minutes.
        assert_eq!(minute_slices(h, (h + 2 * m, h + m)), []);
    }

    #[test]
    fn the_probe_and_the_walk_split_the_window_at_the_boundary_row_time() {
        assert_eq!(probe((10, 100), None), ((10, 100), None));
        assert_eq!(probe((10, 100), Some(40)), ((41, 100), Some((10, 41))));
        assert_eq!(probe((10, 100), Some(99)), ((100, 100), Some((10, 100))));
    }

    #[test]
    fn a_second_look_takes_twice_what_the_density_says_within_its_bound() {
        // 10 of 2048 rows matched, 40 more wanted: 8,192 rows expected, 16,384 taken.
        assert_eq!(next_probe(2048, 10, 40), Some(16_384));
        assert_eq!(next_probe(2048, 40, 1), Some(PROBE_ROWS));
        assert_eq!(next_probe(2048, 2, 48), None);
        assert_eq!(next_probe(2048, 0, 50), None);
        assert_eq!(next_probe(2048, 50, 0), None);
    }

    #[test]
    fn open_windows_round_to_minutes_without_overflow() {
        let (from, to) = minute_bounds((i64::MIN, i64::MAX));
        assert!(from < -(1 << 60) && to > 1 << 60);
        assert_eq!(
            minute_bounds((MINUTE_US + 5, 7 * MINUTE_US)),
            (MINUTE_US, 7 * MINUTE_US)
        );
    }
}
