//! The fleet's heartbeats without Redis: each gateway instance's requests in flight (in total
//! and per channel), one row per instance, replaced every second by that instance's heartbeat
//! task (never by the request path) and removed when it shuts down cleanly. A row older than
//! [`laptime_core::fleet::STALE_AFTER_US`] is an instance that is gone: readers leave it out,
//! and writers delete rows far older than that.

use laptime_core::fleet::Heartbeat;
use rusqlite::{params, Connection};

use crate::{Result, StoreError};

/// Rows this much older than the heartbeat being written are deleted with it.
pub const FORGET_AFTER_US: i64 = 3_600_000_000;

pub(crate) fn channels_of(text: &str) -> Result<Vec<laptime_core::fleet::ChannelInFlight>> {
    Heartbeat::parse_channels(text)
        .ok_or_else(|| StoreError::Corrupt(format!("instances.channels: {text}")))
}

/// Replaces the instance's row with `beat`, and deletes rows long stale.
pub fn put(conn: &Connection, beat: &Heartbeat) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO instances (instance, in_flight, channels, updated_at_us)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (instance) DO UPDATE SET in_flight = excluded.in_flight,
            channels = excluded.channels, updated_at_us = excluded.updated_at_us",
    )?
    .execute(params![
        beat.instance,
        beat.in_flight,
        beat.channels_text(),
        beat.at_us
    ])?;
    conn.prepare_cached("DELETE FROM instances WHERE updated_at_us < ?1")?
        .execute([beat.at_us.saturating_sub(FORGET_AFTER_US)])?;
    Ok(())
}

/// The heartbeats written at or after `since_us`, by instance name.
pub fn since(conn: &Connection, since_us: i64) -> Result<Vec<Heartbeat>> {
    let mut stmt = conn.prepare_cached(
        "SELECT instance, in_flight, channels, updated_at_us FROM instances
         WHERE updated_at_us >= ?1 ORDER BY instance",
    )?;
    let rows = stmt.query_map([since_us], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, u32>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })?;
    rows.map(|row| {
        let (instance, in_flight, channels, at_us) = row?;
        Ok(Heartbeat {
            instance,
            in_flight,
            channels: channels_of(&channels)?,
            at_us,
        })
    })
    .collect()
}

/// Removes an instance's row (it shut down).
pub fn forget(conn: &Connection, instance: &str) -> Result<()> {
    conn.execute("DELETE FROM instances WHERE instance = ?1", [instance])?;
    Ok(())
}
