//! The wall clock: unix microseconds for the records' `created_at`, cool-downs, ids and
//! retention cutoffs. Marks never use it (they are offsets on the one monotonic clock); the
//! store takes wall times as arguments, so this is the only place that reads it.

/// Wall-clock now in unix microseconds.
pub fn now_unix_us() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
