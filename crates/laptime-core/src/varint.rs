//! LEB128 varints and zigzag signs: the integer encoding of the stored rollups
//! ([`crate::rollup`]) and of a request's packed fields (in the store). Written by hand: a few
//! lines each way, with the one-byte fast path the rollup merge depends on.

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarintError {
    /// The bytes ended inside it.
    Truncated,
    /// More than ten bytes: no `u64` is that long.
    TooLong,
}

/// Appends `v`, seven bits a byte, low bits first.
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads the varint at `*pos` and moves `*pos` past it.
#[inline]
pub fn read(b: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    // Most counts, steps and distances fit one byte.
    if let Some(&byte) = b.get(*pos) {
        if byte < 0x80 {
            *pos += 1;
            return Ok(u64::from(byte));
        }
    }
    let mut v = 0_u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos).ok_or(VarintError::Truncated)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(VarintError::TooLong)
}

/// A signed value as an unsigned one that is small when the value is near zero.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_reads_back_and_a_cut_or_overlong_one_is_refused() {
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut pos = 0;
            assert_eq!(read(&b, &mut pos), Ok(v));
            assert_eq!(pos, b.len());
            let mut cut = 0;
            if b.len() > 1 {
                assert_eq!(
                    read(&b[..b.len() - 1], &mut cut),
                    Err(VarintError::Truncated)
                );
            }
        }
        assert_eq!(read(&[0xff; 11], &mut 0), Err(VarintError::TooLong));
        for v in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
    }
}
