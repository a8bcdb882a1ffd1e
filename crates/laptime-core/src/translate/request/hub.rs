//! The hub model of a request: what a request of any dialect means, in no dialect's words.
//!
//! Canonical forms, so that two dialects saying the same thing decode to equal hubs:
//! - every system or developer message, wherever it stood, is an [`Instruction`], in order;
//! - consecutive user (or assistant) messages are one message, their parts in order;
//! - a tool result is its own [`Message::Tool`], one per result, in the order given;
//! - empty text parts are left out (no dialect gives them a meaning);
//! - tool call arguments are parsed JSON, not text.

use serde_json::Value;

/// A request in no dialect.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HubRequest {
    pub instructions: Vec<Instruction>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn; `None` is the upstream's default.
    pub parallel_tool_calls: Option<bool>,
    /// The cap on output tokens (reasoning included, as every dialect counts it).
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub stop: Vec<String>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    /// How many alternative answers to generate (Chat `n`, Gemini `candidateCount`).
    pub choices: Option<u32>,
    pub output: Option<OutputFormat>,
    pub reasoning: Option<Reasoning>,
    /// Whether (and how) the client wants the reasoning summarised back to it.
    pub reasoning_summary: Option<ReasoningSummary>,
    pub verbosity: Option<Verbosity>,
    /// The end user's opaque id, for the provider's abuse monitoring.
    pub user: Option<String>,
    /// Caller-defined string tags, sorted by key.
    pub metadata: Vec<(String, String)>,
    pub prompt_cache_key: Option<String>,
    /// The client's own `stream` flag, as sent (the caller decides what goes upstream).
    pub stream: Option<bool>,
    /// Chat only: whether the client asked for the final usage chunk.
    pub include_usage: Option<bool>,
    /// Responses only: the client asked for encrypted reasoning, to carry it to its next turn
    /// itself (`include: ["reasoning.encrypted_content"]`).
    pub include_encrypted_reasoning: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    pub role: InstructionRole,
    /// The text blocks, in order; never empty.
    pub parts: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstructionRole {
    System,
    Developer,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User(Vec<Part>),
    Assistant(Vec<Part>),
    Tool(ToolResult),
}

impl Message {
    /// The parts of a user or assistant message; a tool result has its own shape.
    pub fn parts(&self) -> Option<&[Part]> {
        match self {
            Message::User(p) | Message::Assistant(p) => Some(p),
            Message::Tool(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Image(Image),
    Document(Document),
    ToolCall(ToolCall),
    Thought(Thought),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub source: Source,
    pub detail: Option<ImageDetail>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageDetail {
    Auto,
    Low,
    High,
}

/// Where the bytes of an image or document are.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Url(String),
    Base64 { media_type: String, data: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub source: Source,
    /// Chat and Responses `filename`, Anthropic `title`.
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub call_id: String,
    /// The called tool's name, resolved from the assistant's call earlier in the conversation
    /// (Gemini answers by name, not id). `None` when no earlier call has this id.
    pub name: Option<String>,
    /// Text, image and document parts only.
    pub content: Vec<Part>,
    pub is_error: bool,
}

/// Reasoning from an earlier turn that the client carries back.
#[derive(Debug, Clone, PartialEq)]
pub struct Thought {
    /// The visible reasoning or its summary (may be empty when only opaque state is kept).
    pub text: String,
    /// The provider's proof that the reasoning is its own (Anthropic `signature`, Responses
    /// `encrypted_content`); without it no provider accepts the reasoning back.
    pub signature: Option<String>,
    /// Reasoning the provider withheld, as its opaque data (Anthropic `redacted_thinking`).
    pub redacted: Option<String>,
    /// The Responses reasoning item id.
    pub id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Option<Value>,
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool must be called (OpenAI `required`, Anthropic `any`, Gemini `ANY`).
    Required,
    Named(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum OutputFormat {
    Text,
    JsonObject,
    JsonSchema(JsonSchema),
}

#[derive(Debug, Clone, PartialEq)]
pub struct JsonSchema {
    pub name: Option<String>,
    pub description: Option<String>,
    pub schema: Value,
    pub strict: Option<bool>,
}

/// How hard the model should think.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    /// No reasoning (OpenAI effort `none`, Anthropic thinking `disabled`, Gemini budget 0).
    Disabled,
    /// The model decides (Anthropic `adaptive` without an effort, Gemini budget -1).
    Dynamic,
    Effort(Effort),
    /// A budget of reasoning tokens.
    Budget(u32),
}

/// The named reasoning levels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
    XHigh,
    Max,
}

impl Effort {
    pub const ALL: [Effort; 6] = [
        Effort::Minimal,
        Effort::Low,
        Effort::Medium,
        Effort::High,
        Effort::XHigh,
        Effort::Max,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::XHigh => "xhigh",
            Effort::Max => "max",
        }
    }

    pub fn parse(s: &str) -> Option<Effort> {
        Effort::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningSummary {
    Auto,
    Concise,
    Detailed,
}

impl ReasoningSummary {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningSummary::Auto => "auto",
            ReasoningSummary::Concise => "concise",
            ReasoningSummary::Detailed => "detailed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    Low,
    Medium,
    High,
}

impl Verbosity {
    pub fn as_str(self) -> &'static str {
        match self {
            Verbosity::Low => "low",
            Verbosity::Medium => "medium",
            Verbosity::High => "high",
        }
    }
}

impl HubRequest {
    /// Appends a message, merging it into the last one when both are from the user or both
    /// from the assistant (the canonical form; Anthropic requires alternating turns).
    pub fn push(&mut self, message: Message) {
        match (self.messages.last_mut(), message) {
            (Some(Message::User(last)), Message::User(more))
            | (Some(Message::Assistant(last)), Message::Assistant(more)) => last.extend(more),
            (_, message) => self.messages.push(message),
        }
    }

    /// The name of the tool an earlier assistant call with this id named.
    pub fn tool_name_for(&self, call_id: &str) -> Option<&str> {
        self.messages
            .iter()
            .filter_map(Message::parts)
            .flatten()
            .find_map(|p| match p {
                Part::ToolCall(c) if c.id == call_id => Some(c.name.as_str()),
                _ => None,
            })
    }
}
