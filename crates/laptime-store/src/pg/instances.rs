//! The fleet's heartbeats on PostgreSQL, as [`crate::instances`] keeps them in SQLite.

use deadpool_postgres::GenericClient;
use laptime_core::fleet::Heartbeat;

use crate::instances::{channels_of, FORGET_AFTER_US};
use crate::Result;

pub async fn put(c: &impl GenericClient, beat: &Heartbeat) -> Result<()> {
    let in_flight = i64::from(beat.in_flight);
    c.execute(
        "INSERT INTO instances (instance, in_flight, channels, updated_at_us)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (instance) DO UPDATE SET in_flight = excluded.in_flight,
            channels = excluded.channels, updated_at_us = excluded.updated_at_us",
        &[
            &beat.instance,
            &in_flight,
            &beat.channels_text(),
            &beat.at_us,
        ],
    )
    .await?;
    c.execute(
        "DELETE FROM instances WHERE updated_at_us < $1",
        &[&beat.at_us.saturating_sub(FORGET_AFTER_US)],
    )
    .await?;
    Ok(())
}

pub async fn since(c: &impl GenericClient, since_us: i64) -> Result<Vec<Heartbeat>> {
    let rows = c
        .query(
            "SELECT instance, in_flight, channels, updated_at_us FROM instances
             WHERE updated_at_us >= $1 ORDER BY instance",
            &[&since_us],
        )
        .await?;
    rows.iter()
        .map(|r| {
            let in_flight: i64 = r.try_get(1)?;
            let channels: String = r.try_get(2)?;
            Ok(Heartbeat {
                instance: r.try_get(0)?,
                in_flight: u32::try_from(in_flight).unwrap_or(u32::MAX),
                channels: channels_of(&channels)?,
                at_us: r.try_get(3)?,
            })
        })
        .collect()
}

pub async fn forget(c: &impl GenericClient, instance: &str) -> Result<()> {
    c.execute("DELETE FROM instances WHERE instance = $1", &[&instance])
        .await?;
    Ok(())
}
