//! Writes the compact `o200k_base` vocabulary that token estimates count with
//! (`src/estimate/bpe.rs`) into `OUT_DIR`, read out of tiktoken-rs here so that the gateway
//! never builds tiktoken-rs's own tokenizer (about 45 MB of memory it keeps, once built).

use std::error::Error;
use std::path::PathBuf;

#[path = "src/estimate/layout.rs"]
mod layout;

/// Ranks are read until the first one the tokenizer does not know (the special tokens come
/// after a gap); more than this is not `o200k_base`.
const MAX_TOKENS: u32 = 1 << 20;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/estimate/layout.rs");
    let bpe = tiktoken_rs::o200k_base()?;
    let tokens: Vec<Vec<u8>> = (0..MAX_TOKENS)
        .map_while(|rank| bpe.decode_bytes(&[rank]).ok())
        .collect();
    let (bytes, ends, slots) = build(&tokens).ok_or("o200k_base does not fit")?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("o200k_bytes.bin"), bytes)?;
    std::fs::write(out.join("o200k_ends.bin"), ends)?;
    std::fs::write(out.join("o200k_slots.bin"), slots)?;
    Ok(())
}

/// The three parts of the layout for `tokens` in rank order: bytes, ends and slots, the last
/// two as little-endian `u32`s. `None` when the tokens do not fit in `u32` offsets.
fn build(tokens: &[Vec<u8>]) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(4 * tokens.len());
    for t in tokens {
        bytes.extend_from_slice(t);
        ends.extend_from_slice(&u32::try_from(bytes.len()).ok()?.to_le_bytes());
    }
    let n = (2 * tokens.len()).next_power_of_two();
    let mut slots = vec![0_u32; n];
    for (rank, t) in tokens.iter().enumerate() {
        let mut slot = layout::slot_of(t, n);
        while slots.get(slot).is_some_and(|s| *s != 0) {
            slot = (slot + 1) & (n - 1);
        }
        *slots.get_mut(slot)? = u32::try_from(rank + 1).ok()?;
    }
    let slots = slots.iter().flat_map(|s| s.to_le_bytes()).collect();
    Some((bytes, ends, slots))
}
