//! The `o200k_base` vocabulary held compactly, and the byte-pair merge that counts a piece's
//! tokens with it. tiktoken-rs keeps every token twice in hash maps of small vectors (and a
//! sorted copy): about 45 MB a process, kept once built, which was most of an idle gateway's
//! memory. Counting needs only "what is the rank of these bytes", so the build script reads the
//! tokens out of tiktoken-rs once and writes them in the layout of [`super::layout`] (about
//! 4 MB), which is compiled into the binary: nothing is built or allocated at run time, and
//! only the pages lookups touch are read in.
//!
//! Written by hand because no crate offers a count over a compact vocabulary; the tests hold
//! every count equal to tiktoken-rs's `encode_ordinary`.

use tiktoken_rs::Rank;

use super::layout::slot_of;

/// Every mergeable token of `o200k_base`, by rank and by bytes, in [`super::layout`]'s layout.
pub(super) struct Vocab {
    bytes: &'static [u8],
    ends: &'static [u8],
    slots: &'static [u8],
}

/// The vocabulary the build script wrote.
pub(super) const O200K_BASE: Vocab = Vocab {
    bytes: include_bytes!(concat!(env!("OUT_DIR"), "/o200k_bytes.bin")),
    ends: include_bytes!(concat!(env!("OUT_DIR"), "/o200k_ends.bin")),
    slots: include_bytes!(concat!(env!("OUT_DIR"), "/o200k_slots.bin")),
};

/// The `u32` at index `i` of a little-endian array.
fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    let at = i.checked_mul(4)?;
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl Vocab {
    #[cfg(test)]
    fn tokens(&self) -> usize {
        self.ends.len() / 4
    }

    fn slots(&self) -> usize {
        self.slots.len() / 4
    }

    /// The bytes of the token of `rank`.
    fn token(&self, rank: usize) -> Option<&'static [u8]> {
        let start = match rank.checked_sub(1) {
            Some(before) => u32_at(self.ends, before)? as usize,
            None => 0,
        };
        self.bytes.get(start..u32_at(self.ends, rank)? as usize)
    }

    /// The rank of the token whose bytes are `b`, if there is one.
    pub(super) fn rank(&self, b: &[u8]) -> Option<Rank> {
        let slots = self.slots();
        if slots == 0 {
            return None;
        }
        let mut slot = slot_of(b, slots);
        loop {
            let rank = u32_at(self.slots, slot)?.checked_sub(1)?;
            if self.token(rank as usize)? == b {
                return Some(rank);
            }
            slot = (slot + 1) & (slots - 1);
        }
    }

    /// The tokens `o200k_base` encodes one piece of the pre-tokenizer's split into: one when
    /// the piece is a token, else what the byte-pair merge leaves (the lowest-ranked adjacent
    /// pair that is a token merges first, the leftmost of equals).
    ///
    /// The merge rescans the parts for each step: quadratic in the piece's bytes, which is why
    /// callers count at most about a kilobyte of text at once.
    pub(super) fn count(&self, piece: &[u8]) -> usize {
        if piece.len() <= 1 || self.rank(piece).is_some() {
            return usize::from(!piece.is_empty());
        }
        // (start of the part, rank of this part joined with the next one).
        let mut parts: Vec<(usize, Rank)> = Vec::with_capacity(piece.len() + 1);
        for i in 0..piece.len() {
            let pair = piece.get(i..i + 2).and_then(|p| self.rank(p));
            parts.push((i, pair.unwrap_or(Rank::MAX)));
        }
        parts.push((piece.len(), Rank::MAX));
        // The rank of parts i and i + 1 joined once i + 1 and i + 2 are one part.
        let joined = |parts: &[(usize, Rank)], i: usize| -> Rank {
            match (parts.get(i), parts.get(i + 3)) {
                (Some(&(from, _)), Some(&(to, _))) => piece
                    .get(from..to)
                    .and_then(|b| self.rank(b))
                    .unwrap_or(Rank::MAX),
                _ => Rank::MAX,
            }
        };
        loop {
            let mut lowest: Option<(Rank, usize)> = None;
            for (i, &(_, rank)) in parts.iter().enumerate() {
                if rank != Rank::MAX && lowest.is_none_or(|(r, _)| rank < r) {
                    lowest = Some((rank, i));
                }
            }
            let Some((_, i)) = lowest else {
                return parts.len() - 1;
            };
            if i > 0 {
                let r = joined(&parts, i - 1);
                if let Some(p) = parts.get_mut(i - 1) {
                    p.1 = r;
                }
            }
            let r = joined(&parts, i);
            if let Some(p) = parts.get_mut(i) {
                p.1 = r;
            }
            parts.remove(i + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fancy_regex::Regex;
    use proptest::prelude::*;
    use std::sync::OnceLock;
    use tiktoken_rs::CoreBPE;

    fn oracle() -> &'static (CoreBPE, Vocab, Regex) {
        static BOTH: OnceLock<(CoreBPE, Vocab, Regex)> = OnceLock::new();
        BOTH.get_or_init(|| {
            let bpe = tiktoken_rs::o200k_base().unwrap();
            let split = Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).unwrap();
            (bpe, O200K_BASE, split)
        })
    }

    /// Each piece of `text` (split as the tokenizer splits) counts as the tokenizer encodes it.
    fn assert_counts(text: &str) {
        let (bpe, vocab, split) = oracle();
        for piece in split.find_iter(text) {
            let piece = piece.unwrap().as_str();
            assert_eq!(
                vocab.count(piece.as_bytes()),
                bpe.encode_ordinary(piece).len(),
                "{piece:?}"
            );
        }
    }

    #[test]
    fn the_built_vocabulary_holds_every_mergeable_token_by_rank_and_bytes_in_little_memory() {
        let (bpe, vocab, _) = oracle();
        assert_eq!(vocab.tokens(), 199_998);
        for rank in (0..199_998).step_by(97).chain([0, 255, 199_997]) {
            let bytes = bpe.decode_bytes(&[rank]).unwrap();
            assert_eq!(vocab.token(rank as usize), Some(&bytes[..]));
            assert_eq!(vocab.rank(&bytes), Some(rank), "{bytes:?}");
        }
        assert_eq!(vocab.rank(b"<|endoftext|>"), None);
        assert_eq!(vocab.rank(b""), None);
        let held = vocab.bytes.len() + vocab.ends.len() + vocab.slots.len();
        assert!(held < 5_000_000, "{held}");
        assert!(vocab.slots() >= 2 * vocab.tokens() && vocab.slots().is_power_of_two());
    }

    #[test]
    fn pieces_count_as_the_tokenizer_encodes_them() {
        for text in [
            "Hello, world! The quick brown fox jumps over the lazy dog.",
            "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "fn main() { let x_y = 12345 + 6; }\r\n\t  // done",
            "Größenordnung naïve café, 日本語のテキスト, 中文文本, Ελληνικά, русский текст",
            "emoji 🎉🚀👍🏽 and ZWJ 👨‍👩‍👧 sequences",
            "QmFzZTY0IGRhdGEgd2l0aG91dCBhbnkgc3BhY2VzIGF0IGFsbCwgZm9yIGEgbG9uZyB3aGlsZQ==",
            "\u{a0}\u{2003}\u{3000}mixed spaces\u{200b}",
            // Pieces of 100 bytes and more: tiktoken-rs merges those with a heap instead.
            "QUJDRGVmZ2hpams".repeat(20).as_str(),
            "a".repeat(150).as_str(),
            "ab1".repeat(60).as_str(),
        ] {
            assert_counts(text);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn random_text_counts_as_the_tokenizer_encodes_it(
            text in "(?s)[a-zA-Z0-9 ,.!?'\"\\n\\téàüß中文日本🎉ø\u{300}-]{0,80}"
        ) {
            assert_counts(&text);
        }
    }
}
