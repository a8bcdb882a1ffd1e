//! What admission's input-token estimate costs a request ([`laptime_core::estimate::input_tokens`]):
//! a short chat, and bodies past the tokenized cap (256 bytes of text), where the
//! rest is only counted and extrapolated, so the cost stops growing with the text; and text of
//! words never seen before, which the table of known pieces cannot serve.
//!
//! Run: `cargo bench -p laptime-core --bench input_estimate`.

#![expect(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::hint::black_box;

fn main() {
    assert!(laptime_core::estimate::warm());
    divan::main();
}

fn chat(text_bytes: usize) -> Vec<u8> {
    let sentence = "The quick brown fox jumps over the lazy dog. ";
    let text = sentence.repeat(text_bytes.div_ceil(sentence.len()));
    serde_json::to_vec(&serde_json::json!({
        "model": "gpt-4.1-mini",
        "max_tokens": 256,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": &text[..text_bytes]},
        ],
    }))
    .unwrap()
}

#[divan::bench(args = [16, 256, 640, 2_048, 65_536, 1_048_576])]
fn input_tokens(b: divan::Bencher, text_bytes: usize) {
    let body = chat(text_bytes);
    b.bench(|| laptime_core::estimate::input_tokens(black_box(&body)));
}

#[divan::bench(args = [16, 256, 640, 2_048, 65_536, 1_048_576])]
fn bytes_div_4(b: divan::Bencher, text_bytes: usize) {
    let body = chat(text_bytes);
    b.bench(|| laptime_core::cost::estimate_input_tokens(black_box(body.len())));
}

/// Text whose every word is new to the estimate's table of pieces (random letters), so each
/// piece goes through the tokenizer: what a request of unseen text costs.
#[divan::bench(args = [256, 2_048])]
fn input_tokens_unseen_words(b: divan::Bencher, text_bytes: usize) {
    let mut state = 0x2545_F491_4F6C_DD1D_u64;
    let mut word = move || {
        (0..6)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'a' + (state % 26) as u8)
            })
            .collect::<String>()
    };
    b.with_inputs(|| {
        let mut text = String::new();
        while text.len() < text_bytes {
            text.push(' ');
            text.push_str(&word());
        }
        serde_json::to_vec(&serde_json::json!({
            "model": "gpt-4.1-mini",
            "messages": [{"role": "user", "content": text}],
        }))
        .unwrap()
    })
    .bench_local_refs(|body| laptime_core::estimate::input_tokens(black_box(body)));
}
