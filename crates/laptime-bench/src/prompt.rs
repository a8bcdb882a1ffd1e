//! Synthetic prompts of an exact token length, made with a real tokenizer, and the request body
//! of each dialect.

use bytes::Bytes;
use laptime_core::Dialect;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use tiktoken_rs::CoreBPE;

use super::contract::{max_tokens_field, Contract};

/// Common English words; those that are one token (with their leading space) in the chosen
/// tokenizer make the prompts.
const WORDS: &str = "the of and to in is was for on that with as by at from his her an be this \
are have or had not but which were all they their one been has more when who will there would \
up no out so what time can only about into could other some these two may first then do any \
like new now such after most also made over many people where did years between way before \
must through back long much should well world year city state house water small right large \
place part three work under old just high last each school while place found number later day \
both name since same during used home life being country good light group great own family \
river show story point power might children line side later under second early light market \
open music game until began food left order near body along few head music local room white \
black road town land church hand war next great case never city door rain table paper green \
stone field summer winter light morning garden window letter friend bread sea ship horse tree";

/// A real BPE tokenizer, and the one-token words prompts are made of.
pub struct Tokenizer {
    bpe: CoreBPE,
    words: Vec<&'static str>,
}

impl Tokenizer {
    /// `o200k_base` (GPT-4o and later) or `cl100k_base` (GPT-4, GPT-3.5). The vocabularies ship
    /// inside tiktoken-rs; nothing is downloaded.
    pub fn load(name: &str) -> Result<Tokenizer, String> {
        let bpe = match name {
            "o200k_base" => tiktoken_rs::o200k_base(),
            "cl100k_base" => tiktoken_rs::cl100k_base(),
            other => {
                return Err(format!(
                    "--tokenizer: {other:?} is not one of o200k_base, cl100k_base"
                ))
            }
        }
        .map_err(|e| format!("loading the {name} tokenizer: {e}"))?;
        let mut words: Vec<&'static str> = WORDS
            .split_whitespace()
            .filter(|w| bpe.encode_ordinary(&format!(" {w}")).len() == 1)
            .collect();
        words.sort_unstable();
        words.dedup();
        if words.len() < 32 {
            return Err(format!(
                "the {name} tokenizer has too few one-token words for synthetic prompts"
            ));
        }
        Ok(Tokenizer { bpe, words })
    }

    pub fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }

    /// A prompt of exactly `tokens` tokens: ` w1 w2 …`. The tokenizer's pre-split keeps every
    /// ` word` a piece of its own, so the count is the sum over words.
    pub fn prompt(&self, tokens: u32, rng: &mut StdRng) -> String {
        let mut s = String::with_capacity(tokens as usize * 7);
        for _ in 0..tokens {
            s.push(' ');
            s.push_str(self.words[rng.gen_range(0..self.words.len())]);
        }
        s
    }
}

/// The seeded generator of request `index`'s words (distinct per request).
pub(crate) fn words_rng(seed: u64, index: u64) -> StdRng {
    StdRng::seed_from_u64(mix(seed, index.wrapping_mul(2).wrapping_add(1)))
}

/// The prompt length of request `index`: both requests of an A/B pair (`index / targets`) get
/// the same length.
pub(crate) fn draw_length(mean: u32, sd: f64, seed: u64, pair: u64) -> u32 {
    if sd <= 0.0 {
        return mean.max(1);
    }
    let mut rng = StdRng::seed_from_u64(mix(seed, pair.wrapping_mul(2)));
    // Box–Muller: one standard normal from two uniforms in (0, 1].
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen::<f64>();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    let v = (f64::from(mean) + sd * z).round();
    if v < 1.0 {
        1
    } else if v > f64::from(u32::MAX) {
        u32::MAX
    } else {
        v as u32
    }
}

/// SplitMix64 of the seed and a stream number, so neighbouring indexes get unrelated streams.
pub(crate) fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The JSON body of one request: the dialect's shape, the contract's settings, then
/// `extra_body` merged over it at the top level.
pub(crate) fn body(c: &Contract, prompt: &str) -> Bytes {
    if c.dialect == Dialect::Gemini {
        return gemini_body(c, prompt);
    }
    let mut m = Map::new();
    m.insert("model".into(), json!(c.model));
    match c.dialect {
        Dialect::Chat => {
            m.insert(
                "messages".into(),
                json!([{"role": "user", "content": prompt}]),
            );
        }
        Dialect::Responses => {
            m.insert("input".into(), json!(prompt));
        }
        Dialect::Messages | Dialect::Gemini => {
            m.insert(
                "messages".into(),
                json!([{"role": "user", "content": prompt}]),
            );
        }
    }
    m.insert("stream".into(), json!(c.stream));
    if c.stream && c.dialect == Dialect::Chat {
        m.insert("stream_options".into(), json!({"include_usage": true}));
    }
    // Anthropic requires max_tokens: the contract builder always sets one for Messages.
    if let Some(n) = c.output_tokens.max_output_tokens {
        m.insert(max_tokens_field(c.dialect).into(), json!(n));
    }
    if let Some(t) = c.sampling.temperature {
        m.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.sampling.top_p {
        m.insert("top_p".into(), json!(p));
    }
    if let Some(e) = &c.reasoning_effort {
        match c.dialect {
            Dialect::Chat => {
                m.insert("reasoning_effort".into(), json!(e));
            }
            Dialect::Responses => {
                m.insert("reasoning".into(), json!({"effort": e}));
            }
            // Refused when the contract is built.
            Dialect::Messages | Dialect::Gemini => {}
        }
    }
    if let Some(Value::Object(extra)) = &c.extra_body {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    Bytes::from(Value::Object(m).to_string())
}

/// A Gemini body: model and stream-ness go in the URL, the settings in `generationConfig`
/// (the reasoning effort as its `thinkingLevel`), then `extra_body` merged at the top level.
fn gemini_body(c: &Contract, prompt: &str) -> Bytes {
    let mut config = Map::new();
    if let Some(n) = c.output_tokens.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(n));
    }
    if let Some(t) = c.sampling.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(p) = c.sampling.top_p {
        config.insert("topP".into(), json!(p));
    }
    if let Some(e) = &c.reasoning_effort {
        config.insert("thinkingConfig".into(), json!({"thinkingLevel": e}));
    }
    let mut m = Map::new();
    m.insert(
        "contents".into(),
        json!([{"role": "user", "parts": [{"text": prompt}]}]),
    );
    if !config.is_empty() {
        m.insert("generationConfig".into(), Value::Object(config));
    }
    if let Some(Value::Object(extra)) = &c.extra_body {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    Bytes::from(Value::Object(m).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_have_exactly_the_drawn_token_count() {
        for name in ["o200k_base", "cl100k_base"] {
            let t = Tokenizer::load(name).unwrap();
            for (i, n) in [1u32, 2, 17, 128, 1000].into_iter().enumerate() {
                let p = t.prompt(n, &mut words_rng(7, i as u64));
                assert_eq!(t.count(&p), n as usize, "{name} {n}");
            }
        }
    }

    fn contract(dialect: Dialect) -> Contract {
        let mut c = Contract {
            schema: String::new(),
            targets: Vec::new(),
            dialect,
            model: "m".into(),
            group: None,
            stream: true,
            input_tokens: crate::contract::InputTokens {
                mean: 3,
                sd: 0.0,
                distribution: String::new(),
                tokenizer: "o200k_base".into(),
                prompt: String::new(),
            },
            output_tokens: crate::contract::OutputTokens {
                max_output_tokens: Some(7),
                request_field: None,
                note: String::new(),
            },
            sampling: crate::contract::Sampling {
                temperature: Some(0.5),
                top_p: None,
            },
            reasoning_effort: (dialect != Dialect::Messages).then(|| "low".into()),
            tools: 0,
            extra_body: Some(json!({"top_p": 0.25, "tools": [{"type": "function"}]})),
            load: crate::contract::Load::ClosedLoop { concurrency: 1 },
            stop: crate::contract::Stop::Requests { requests: 1 },
            warmup_requests_per_target: 0,
            interleave: None,
            retries: String::new(),
            timeouts: crate::contract::Timeouts {
                request_s: 1.0,
                connect_s: 1.0,
            },
            seed: 1,
            auth: String::new(),
            percentile_method: String::new(),
            window: String::new(),
            definitions: Default::default(),
            exclusions: Vec::new(),
        };
        c.normalise();
        c
    }

    #[test]
    fn bodies_follow_each_dialect_and_extra_body_wins() {
        let b = |d| serde_json::from_slice::<Value>(&body(&contract(d), " a b c")).unwrap();
        let chat = b(Dialect::Chat);
        assert_eq!(chat["messages"][0]["content"], " a b c");
        assert_eq!(chat["stream_options"]["include_usage"], true);
        assert_eq!(chat["max_completion_tokens"], 7);
        assert_eq!(chat["reasoning_effort"], "low");
        assert_eq!(chat["temperature"], 0.5);
        assert_eq!(chat["top_p"], 0.25);
        let resp = b(Dialect::Responses);
        assert_eq!(resp["input"], " a b c");
        assert_eq!(resp["max_output_tokens"], 7);
        assert_eq!(resp["reasoning"]["effort"], "low");
        assert!(resp.get("stream_options").is_none());
        let msg = b(Dialect::Messages);
        assert_eq!(msg["max_tokens"], 7);
        assert_eq!(msg["stream"], true);
        assert_eq!(contract(Dialect::Chat).tools, 1);
    }

    #[test]
    fn the_contract_round_trips_through_json() {
        for d in Dialect::ALL {
            let c = contract(d);
            let text = serde_json::to_string_pretty(&c).unwrap();
            let back: Contract = serde_json::from_str(&text).unwrap();
            assert_eq!(back, c);
        }
    }

    #[test]
    fn lengths_are_seeded_and_paired() {
        assert_eq!(draw_length(100, 0.0, 1, 5), 100);
        let a = draw_length(100, 20.0, 1, 5);
        assert_eq!(a, draw_length(100, 20.0, 1, 5));
        let many: Vec<u32> = (0..2000).map(|p| draw_length(100, 20.0, 1, p)).collect();
        let mean = many.iter().map(|&v| f64::from(v)).sum::<f64>() / 2000.0;
        assert!((mean - 100.0).abs() < 2.0, "{mean}");
        assert!(many.iter().all(|&v| v >= 1));
    }
}
