//! The round-trip property: a request any dialect can carry, written in a client's dialect,
//! decoded, encoded for another dialect and decoded again, is the same hub request in every
//! field both dialects carry.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::error::Omissions;
use super::hub::*;
use super::{decode, encode, ReasoningTable, RequestOptions};
use crate::Dialect;

const TABLE: ReasoningTable = ReasoningTable::DEFAULT;

fn opts() -> RequestOptions<'static> {
    RequestOptions {
        upstream_model: "m",
        stream: false,
        default_max_tokens: None,
        reasoning: &TABLE,
        pass_through: &[],
        prefill: None,
    }
}

/// The hub with what not every dialect carries set to what decoding gives back: stream flags,
/// OpenAI's defaults made explicit (image detail auto, a tool not strict, a schema named
/// `response`), and a budget read as its nearest effort.
fn common(h: &HubRequest) -> HubRequest {
    let mut h = h.clone();
    h.stream = None;
    h.include_usage = None;
    h.include_encrypted_reasoning = false;
    for m in &mut h.messages {
        if let Message::User(parts) | Message::Assistant(parts) = m {
            for p in parts {
                if let Part::Image(img) = p {
                    img.detail = None;
                }
            }
        }
    }
    for t in &mut h.tools {
        t.strict = None;
    }
    if let Some(OutputFormat::JsonSchema(s)) = &mut h.output {
        s.name = None;
        s.description = None;
        s.strict = None;
    }
    if let Some(Reasoning::Budget(b)) = h.reasoning {
        h.reasoning = Some(Reasoning::Effort(TABLE.effort_for(b)));
    }
    h
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 .,!?]{1,12}"
}

fn user_part() -> impl Strategy<Value = Part> {
    prop_oneof![
        text().prop_map(Part::Text),
        "[A-Za-z0-9]{4,8}".prop_map(|data| Part::Image(Image {
            source: Source::Base64 {
                media_type: "image/png".into(),
                data,
            },
            detail: None,
        })),
        ("[A-Za-z0-9]{4,8}", proptest::option::of("[a-z]{1,6}\\.pdf")).prop_map(|(data, name)| {
            Part::Document(Document {
                source: Source::Base64 {
                    media_type: "application/pdf".into(),
                    data,
                },
                name,
            })
        }),
    ]
}

fn arguments() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(
        "[a-z]{1,5}",
        prop_oneof![
            text().prop_map(Value::from),
            (0i64..1000).prop_map(Value::from),
        ],
        0..3,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// One exchange: a user turn, the assistant's answer with its tool calls, and their results.
#[derive(Debug, Clone)]
struct Exchange {
    user: Vec<Part>,
    texts: Vec<String>,
    calls: Vec<(String, Value, String)>,
}

fn exchange() -> impl Strategy<Value = Exchange> {
    (
        proptest::collection::vec(user_part(), 1..3),
        proptest::collection::vec(text(), 0..2),
        proptest::collection::vec(("[a-z]{1,6}", arguments(), text()), 0..3),
    )
        .prop_map(|(user, texts, calls)| Exchange { user, texts, calls })
}

fn conversation(exchanges: Vec<Exchange>, hub: &mut HubRequest) {
    let mut n = 0;
    for x in exchanges {
        hub.push(Message::User(x.user));
        let mut parts: Vec<Part> = x.texts.into_iter().map(Part::Text).collect();
        let mut results = Vec::new();
        for (name, arguments, output) in x.calls {
            n += 1;
            let id = format!("call_{n}");
            parts.push(Part::ToolCall(ToolCall {
                id: id.clone(),
                name: name.clone(),
                arguments,
            }));
            results.push(ToolResult {
                call_id: id,
                name: Some(name),
                content: vec![Part::Text(output)],
                is_error: false,
            });
        }
        if parts.is_empty() {
            continue;
        }
        hub.push(Message::Assistant(parts));
        for r in results {
            hub.push(Message::Tool(r));
        }
    }
}

fn tools() -> impl Strategy<Value = Vec<Tool>> {
    proptest::collection::btree_set("[a-z]{1,6}", 0..3).prop_map(|names| {
        names
            .into_iter()
            .map(|name| Tool {
                description: Some(format!("{name} it")),
                parameters: Some(
                    json!({"type": "object", "properties": {"q": {"type": "string"}}}),
                ),
                name,
                strict: None,
            })
            .collect()
    })
}

/// Sampling, reasoning and tool choice together, within Anthropic's thinking rules.
#[derive(Debug, Clone)]
enum Knobs {
    Sampling {
        temperature: Option<f64>,
        top_p: Option<f64>,
        force: bool,
    },
    Reasoning(Reasoning),
}

fn knobs() -> impl Strategy<Value = Knobs> {
    prop_oneof![
        (
            proptest::option::of((0u8..=10).prop_map(|t| f64::from(t) / 10.0)),
            proptest::option::of((1u8..=10).prop_map(|t| f64::from(t) / 10.0)),
            any::<bool>(),
        )
            .prop_map(|(temperature, top_p, force)| Knobs::Sampling {
                temperature,
                top_p,
                force
            }),
        prop_oneof![
            Just(Reasoning::Disabled),
            Just(Reasoning::Effort(Effort::Low)),
            Just(Reasoning::Effort(Effort::Medium)),
            Just(Reasoning::Effort(Effort::High)),
        ]
        .prop_map(Knobs::Reasoning),
    ]
}

prop_compose! {
    fn hub_request()(
        system in proptest::option::of(proptest::collection::vec(text(), 1..3)),
        exchanges in proptest::collection::vec(exchange(), 1..4),
        tools in tools(),
        knobs in knobs(),
        parallel in proptest::option::of(any::<bool>()),
        auto in any::<bool>(),
        max in 40_000u32..100_000,
        schema in any::<bool>(),
        user in proptest::option::of("[a-z0-9]{1,8}"),
    ) -> HubRequest {
        let mut h = HubRequest {
            max_output_tokens: Some(max),
            user,
            ..HubRequest::default()
        };
        if let Some(parts) = system {
            h.instructions.push(Instruction { role: InstructionRole::System, parts });
        }
        conversation(exchanges, &mut h);
        if !tools.is_empty() {
            let forced = matches!(knobs, Knobs::Sampling { force: true, .. });
            h.tool_choice = Some(match (forced, auto) {
                (true, true) => ToolChoice::Required,
                (true, false) => ToolChoice::Named(tools[0].name.clone()),
                (false, true) => ToolChoice::Auto,
                (false, false) => ToolChoice::None,
            });
            if h.tool_choice != Some(ToolChoice::None) {
                h.parallel_tool_calls = parallel;
            }
        }
        h.tools = tools;
        match knobs {
            Knobs::Sampling { temperature, top_p, .. } => {
                h.temperature = temperature;
                h.top_p = top_p;
            }
            Knobs::Reasoning(r) => h.reasoning = Some(r),
        }
        if schema {
            h.output = Some(OutputFormat::JsonSchema(JsonSchema {
                name: None,
                description: None,
                schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
                strict: None,
            }));
        }
        h
    }
}

/// What of `h` survives a trip through `a` and `b`: Gemini has no end-user id, no parallel
/// tool call setting and no document names, so a pair with Gemini starts without them.
fn carried(h: &HubRequest, a: Dialect, b: Dialect) -> HubRequest {
    let mut h = h.clone();
    if a == Dialect::Gemini || b == Dialect::Gemini {
        h.user = None;
        h.parallel_tool_calls = None;
        for m in &mut h.messages {
            if let Message::User(parts) = m {
                for p in parts {
                    if let Part::Document(d) = p {
                        d.name = None;
                    }
                }
            }
        }
    }
    h
}

/// Encodes the hub in `dialect` and decodes it back, as a client of that dialect would send it.
fn through(dialect: Dialect, other: Dialect, h: &HubRequest) -> HubRequest {
    let mut omitted = Omissions::default();
    let body = match encode(dialect, other, h, &opts(), &mut omitted) {
        Ok(map) => Value::Object(map).to_string(),
        Err(e) => panic!("encoding for {dialect}: {e:?}\n{h:#?}"),
    };
    match decode(dialect, other, body.as_bytes(), &mut omitted) {
        Ok(back) => back,
        Err(e) => panic!("decoding {dialect}: {e:?}\n{body}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_request_survives_any_pair_of_dialects(h in hub_request()) {
        for client in Dialect::ALL {
            let sent = carried(&h, client, client);
            let decoded = through(client, client, &sent);
            prop_assert_eq!(common(&decoded), common(&sent), "{} alone", client);
            for upstream in Dialect::ALL.into_iter().filter(|&u| u != client) {
                let base = carried(&decoded, client, upstream);
                let again = through(upstream, client, &base);
                prop_assert_eq!(common(&again), common(&base), "{} → {}", client, upstream);
            }
        }
    }
}
