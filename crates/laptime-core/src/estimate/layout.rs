//! The compact vocabulary's layout, shared by the build script that writes it and by
//! [`super::bpe`] that reads it: every token's bytes back to back in rank order, where each
//! token ends (little-endian `u32`s), and an open-addressed table of rank + 1 (0: empty) hashed
//! by the token's bytes, linear probing, a power of two at least twice the tokens.

/// FNV-1a folded to the table: tokens are short, and a multiply per byte beats setting up a
/// keyed hash. `slots` is a power of two.
pub(crate) fn slot_of(b: &[u8], slots: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &c in b {
        h = (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ (h >> 32)) as usize & (slots - 1)
}
