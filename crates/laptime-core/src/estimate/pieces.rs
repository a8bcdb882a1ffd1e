//! Counting tokens without the tokenizer's regex: `o200k_base` splits text into pieces with a
//! pattern that needs a backtracking engine (a lookahead), over 100 ns a piece and most of what
//! an estimate costs. For ASCII text this module splits by hand exactly as that pattern does,
//! and counts each piece from a small per-thread table of pieces seen before, or else with the
//! byte-pair merge ([`super::bpe`]), learning it. Text that is not ASCII is cut where a piece
//! surely starts (a space before an ASCII letter), and only the parts with other characters are
//! split by the pattern. The tests hold the pieces equal to the pattern's and the counts equal
//! to the tokenizer's on prose, code, JSON and random text.
//!
//! Written by hand because no crate exposes a count without the regex, and the table is a cache
//! of a pure function: what it holds changes the time a count takes, never the count.

use std::cell::RefCell;
use std::collections::HashMap;

use super::bpe::O200K_BASE;
use super::Tokenizer;

/// Pieces held per thread; the table is emptied when full (common words come back within a few
/// requests, so a simple reset keeps it useful and bounded).
const TABLE_PIECES: usize = 8192;

/// Pieces longer than this are counted every time, not held (they are rare and long ones would
/// make the table's memory depend on what clients send).
const TABLE_PIECE_BYTES: usize = 24;

thread_local! {
    static TABLE: RefCell<HashMap<Box<[u8]>, u32>> = RefCell::new(HashMap::new());
}

/// The tokens of `text` as `o200k_base` encodes it.
pub(super) fn count(t: &Tokenizer, text: &str) -> u64 {
    let mut total = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let Some(other) = rest.bytes().position(|b| !b.is_ascii()) else {
            return total + ascii(rest.as_bytes());
        };
        // Cut around the other characters where pieces surely start, so each side splits alone
        // exactly as it does within the whole text.
        let head = rest.as_bytes()[..other]
            .windows(2)
            .rposition(|w| w[0] == b' ' && w[1].is_ascii_alphabetic())
            .unwrap_or(0);
        let tail = rest.as_bytes()[other..]
            .windows(2)
            .position(|w| w[0] == b' ' && w[1].is_ascii_alphabetic())
            .map_or(rest.len(), |i| other + i);
        total += ascii(&rest.as_bytes()[..head]);
        total += split(t, rest.get(head..tail).unwrap_or_default());
        rest = rest.get(tail..).unwrap_or_default();
    }
    total
}

/// The tokens of text split by the pattern itself; should the regex engine give up on a piece
/// (a backtracking limit), the rest counts about four bytes a token.
fn split(t: &Tokenizer, text: &str) -> u64 {
    let (mut total, mut counted) = (0, 0);
    for piece in t.split.find_iter(text) {
        let Ok(p) = piece else {
            return total + crate::cost::estimate_input_tokens(text.len() - counted);
        };
        total += O200K_BASE.count(p.as_str().as_bytes()) as u64;
        counted = p.end();
    }
    total
}

/// The tokens of ASCII text: split here, each piece counted from the table or merged.
fn ascii(text: &[u8]) -> u64 {
    TABLE.with(|table| {
        let Ok(mut table) = table.try_borrow_mut() else {
            return pieces(text).map(|p| O200K_BASE.count(p) as u64).sum();
        };
        let mut total = 0;
        for p in pieces(text) {
            total += match table.get(p) {
                Some(&n) => u64::from(n),
                None => {
                    let n = O200K_BASE.count(p);
                    learn(&mut table, p, n);
                    n as u64
                }
            };
        }
        total
    })
}

/// Holds a piece's count, unless the piece is too long to hold.
fn learn(table: &mut HashMap<Box<[u8]>, u32>, piece: &[u8], tokens: usize) {
    if piece.len() > TABLE_PIECE_BYTES {
        return;
    }
    if table.len() >= TABLE_PIECES {
        table.clear();
    }
    table.insert(piece.into(), u32::try_from(tokens).unwrap_or(u32::MAX));
}

/// The pieces of ASCII text, in order; together they are the whole text.
fn pieces(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at;
        (start < text.len()).then(|| {
            at = piece_end(text, start);
            &text[start..at]
        })
    })
}

/// Where the piece starting at `i` ends: the first alternative of the pattern that matches
/// there, read with ASCII classes (letters `A-Za-z`, numbers `0-9`, `\s` the six ASCII spaces).
fn piece_end(b: &[u8], i: usize) -> usize {
    if let Some(end) = word(b, i) {
        end
    } else if b[i].is_ascii_digit() {
        // `\p{N}{1,3}`
        i + b[i..]
            .iter()
            .take(3)
            .take_while(|c| c.is_ascii_digit())
            .count()
    } else if let Some(end) = punctuation(b, i) {
        end
    } else {
        spaces(b, i)
    }
}

/// `[^\r\n\p{L}\p{N}]?` then `[A-Z]*[a-z]+` or `[A-Z]+[a-z]*`, then a contraction.
fn word(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    if !matches!(b[j], b'\r' | b'\n') && !b[j].is_ascii_alphanumeric() {
        j += 1;
    }
    let start = j;
    let upper = start + run(&b[start..], u8::is_ascii_uppercase);
    let lower = upper + run(&b[upper..], u8::is_ascii_lowercase);
    (lower > start).then(|| contraction(b, lower))
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at `j`.
fn contraction(b: &[u8], j: usize) -> usize {
    if b.get(j) != Some(&b'\'') {
        return j;
    }
    let next = |k: usize| b.get(j + k).map(u8::to_ascii_lowercase);
    match (next(1), next(2)) {
        (Some(b's' | b't' | b'm' | b'd'), _) => j + 2,
        (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => j + 3,
        _ => j,
    }
}

/// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
fn punctuation(b: &[u8], i: usize) -> Option<usize> {
    let start = if b[i] == b' ' { i + 1 } else { i };
    let marks = run(&b[start..], |c| !is_space(c) && !c.is_ascii_alphanumeric());
    (marks > 0).then(|| {
        let end = start + marks;
        end + run(&b[end..], |c| matches!(c, b'\r' | b'\n' | b'/'))
    })
}

/// `\s*[\r\n]+`, else `\s+(?!\S)`, else `\s+`, at a space.
fn spaces(b: &[u8], i: usize) -> usize {
    let end = i + run(&b[i..], is_space).max(1);
    if let Some(last) = b[i..end].iter().rposition(|c| matches!(c, b'\r' | b'\n')) {
        i + last + 1
    } else if end == b.len() || end - i == 1 {
        end
    } else {
        end - 1
    }
}

/// `\s` in ASCII.
fn is_space(c: &u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r')
}

fn run(b: &[u8], class: impl Fn(&u8) -> bool) -> usize {
    b.iter().take_while(|c| class(c)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;
    use tiktoken_rs::CoreBPE;

    fn tokenizer() -> &'static Tokenizer {
        assert!(super::super::warm());
        super::super::loaded().unwrap()
    }

    /// tiktoken-rs's own tokenizer: what every count must equal.
    fn oracle() -> &'static CoreBPE {
        static BPE: OnceLock<CoreBPE> = OnceLock::new();
        BPE.get_or_init(|| tiktoken_rs::o200k_base().unwrap())
    }

    /// The pieces of ASCII text are the pattern's, and any text counts as the tokenizer counts
    /// it, from the table too.
    fn assert_same(text: &str) {
        if text.is_ascii() {
            let regex = fancy_regex::Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).unwrap();
            let want: Vec<&str> = regex.find_iter(text).map(|m| m.unwrap().as_str()).collect();
            let got: Vec<&str> = pieces(text.as_bytes())
                .map(|p| std::str::from_utf8(p).unwrap())
                .collect();
            assert_eq!(got, want);
        }
        let want = oracle().encode_ordinary(text).len() as u64;
        assert_eq!(count(tokenizer(), text), want, "{text:?}");
        assert_eq!(count(tokenizer(), text), want, "{text:?} (from the table)");
    }

    #[test]
    fn ascii_pieces_are_the_patterns_pieces() {
        for text in [
            "Hello, world! It's HTMLParser's turn; they'LL say 'REALLY'?",
            "  leading and trailing  \n\n  spaces \t\tx\n",
            "fn main() {\n    let x = 12345 + 6;\r\n    // done/\n}\n",
            "{\"a\": [1, 2.5, -3e10], \"b\": null}",
            "a\u{0B}b\u{0C}c\x01d\x7f",
            "",
        ] {
            assert_same(text);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Every class the pattern tells apart, drawn often enough to meet in every order.
        #[test]
        fn random_ascii_counts_as_the_tokenizer_counts(
            text in "[aZ0123456789 \t\n\r\x0B\x0C'sStTlLdDre.,/(_\"#{}x\x01-]{0,40}"
        ) {
            assert_same(&text);
        }
    }

    #[test]
    fn text_with_other_characters_counts_as_the_tokenizer_counts() {
        for text in [
            "café au lait, naïve résumé",
            "Ünïcödé at the start and the end: ß",
            "emoji 🙂 in the middle 🙂🙂 and “curly quotes” and it’s fine",
            "日本語のテキスト mixed with English words and 数字 123",
            "a\u{A0} b\u{2003}\u{2003}c \u{85}d",
            " é",
            "é ",
        ] {
            assert_same(text);
        }
    }

    #[test]
    fn learned_pieces_hold_their_own_counts() {
        let text = "Unseen zyxwvut, qwertyuiop'll 12345 pneumonoultramicroscopic  \n\n  ):: x/\r\n";
        assert_same(text);
        let held = TABLE.with(|t| t.borrow().clone());
        assert!(held.len() > 2, "{held:?}");
        for (piece, n) in held {
            let piece = std::str::from_utf8(&piece).unwrap();
            assert_eq!(
                n as usize,
                oracle().encode_ordinary(piece).len(),
                "{piece:?}"
            );
        }
    }

    #[test]
    fn the_table_stays_bounded() {
        let text: String = (0..3 * TABLE_PIECES).map(|i| format!(" w{i}x")).collect();
        let want = oracle().encode_ordinary(&text).len() as u64;
        assert_eq!(count(tokenizer(), &text), want);
        TABLE.with(|t| assert!(t.borrow().len() <= TABLE_PIECES));
        let long = "y".repeat(TABLE_PIECE_BYTES + 1);
        count(tokenizer(), &long);
        TABLE.with(|t| assert!(!t.borrow().contains_key(long.as_bytes())));
    }
}
