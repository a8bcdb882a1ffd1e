//! The embeddings the sim answers with: deterministic unit vectors seeded by a hash of each
//! input, in the two encodings OpenAI sends (JSON floats, or base64 of little-endian `f32`s).
//!
//! The same input always gets the same vector, different inputs (almost surely) different
//! ones, and a vector of `d` dimensions is the first `d` components of the longer one scaled
//! back to unit length, as OpenAI's shortened `text-embedding-3` vectors are.

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// A unit vector of `dims` components for the input whose bytes are `seed`.
pub(crate) fn unit_vector(seed: &[u8], dims: usize) -> Vec<f32> {
    let digest = Sha256::digest(seed);
    let mut state = digest
        .chunks_exact(8)
        .map(|c| {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            u64::from_le_bytes(word)
        })
        .fold(0u64, |acc, w| acc.rotate_left(17) ^ w);
    let raw: Vec<f64> = (0..dims)
        .map(|_| {
            // 53 random bits as a uniform value in [-1, 1).
            let bits = splitmix64(&mut state) >> 11;
            (bits as f64) / f64::from(1u32 << 26) / f64::from(1u32 << 26) - 1.0
        })
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        // Cannot happen for dims > 0 in practice; a unit vector all the same.
        return (0..dims).map(|i| if i == 0 { 1.0 } else { 0.0 }).collect();
    }
    raw.iter().map(|x| (x / norm) as f32).collect()
}

/// Base64 (standard alphabet, padded) of the vector's little-endian `f32` bytes: what
/// `encoding_format: "base64"` answers and the openai SDKs decode with a float32 view.
pub(crate) fn base64_f32(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Base64 of any bytes (images, audio chunks).
pub(crate) fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(v: &[f32]) -> f64 {
        v.iter()
            .map(|x| f64::from(*x) * f64::from(*x))
            .sum::<f64>()
            .sqrt()
    }

    #[test]
    fn vectors_are_unit_length_deterministic_and_differ_by_input() {
        let a = unit_vector(b"hello", 1536);
        assert_eq!(a.len(), 1536);
        assert!((norm(&a) - 1.0).abs() < 1e-5);
        assert_eq!(a, unit_vector(b"hello", 1536));
        assert_ne!(a, unit_vector(b"hello!", 1536));
        assert!(a.iter().any(|x| *x < 0.0) && a.iter().any(|x| *x > 0.0));
    }

    #[test]
    fn a_shorter_vector_is_the_longer_ones_prefix_rescaled() {
        let long = unit_vector(b"x", 64);
        let short = unit_vector(b"x", 8);
        let scale = f64::from(short[0]) / f64::from(long[0]);
        for (s, l) in short.iter().zip(&long) {
            assert!((f64::from(*s) - f64::from(*l) * scale).abs() < 1e-6);
        }
        assert!((norm(&short) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn base64_holds_the_little_endian_floats() {
        let v = [1.0f32, -2.5, 0.1];
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(base64_f32(&v))
            .unwrap();
        let back: Vec<f32> = decoded
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(back, v);
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
    }
}
