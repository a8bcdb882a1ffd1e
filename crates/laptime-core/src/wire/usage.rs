//! Each dialect's usage object as it stands on the wire, read into a [`UsageReport`]: the
//! classifiers (what the observer records) and the hub's decoders (what the client is told)
//! read the same counts, so they share these shapes.

use serde::Deserialize;

use super::Count;
use crate::usage::UsageReport;

/// Chat `CompletionUsage`: `prompt_tokens` includes cached tokens, `completion_tokens` includes
/// reasoning tokens.
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ChatUsage {
    #[serde(default)]
    pub(crate) prompt_tokens: Count,
    #[serde(default)]
    pub(crate) completion_tokens: Count,
    pub(crate) prompt_tokens_details: Option<CacheDetails>,
    pub(crate) completion_tokens_details: Option<ReasoningDetails>,
    /// DeepSeek's name for cached prompt tokens.
    #[serde(default)]
    pub(crate) prompt_cache_hit_tokens: Count,
}

/// `prompt_tokens_details` (Chat) and `input_tokens_details` (Responses).
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CacheDetails {
    #[serde(default)]
    pub(crate) cached_tokens: Count,
    #[serde(default)]
    pub(crate) cache_write_tokens: Count,
}

/// `completion_tokens_details` (Chat) and `output_tokens_details` (Responses).
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReasoningDetails {
    #[serde(default)]
    pub(crate) reasoning_tokens: Count,
}

impl ChatUsage {
    /// The counts under OpenAI's names; DeepSeek's `prompt_cache_hit_tokens` are the cache
    /// reads when OpenAI's `cached_tokens` is not sent (its `prompt_tokens` includes them, as
    /// OpenAI's does).
    pub(crate) fn report(self) -> UsageReport {
        let prompt = self.prompt_tokens_details;
        UsageReport {
            input: self.prompt_tokens.0,
            output: self.completion_tokens.0,
            cache_read: prompt
                .and_then(|d| d.cached_tokens.0)
                .or(self.prompt_cache_hit_tokens.0),
            cache_write: prompt.and_then(|d| d.cache_write_tokens.0),
            cache_write_1h: None,
            reasoning: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens.0),
        }
    }
}

/// Responses `ResponseUsage`: `input_tokens` includes cached tokens, `output_tokens` includes
/// reasoning.
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ResponsesUsage {
    #[serde(default)]
    pub(crate) input_tokens: Count,
    #[serde(default)]
    pub(crate) output_tokens: Count,
    pub(crate) input_tokens_details: Option<CacheDetails>,
    pub(crate) output_tokens_details: Option<ReasoningDetails>,
}

impl ResponsesUsage {
    pub(crate) fn report(self) -> UsageReport {
        let input = self.input_tokens_details;
        UsageReport {
            input: self.input_tokens.0,
            output: self.output_tokens.0,
            cache_read: input.and_then(|d| d.cached_tokens.0),
            cache_write: input.and_then(|d| d.cache_write_tokens.0),
            cache_write_1h: None,
            reasoning: self
                .output_tokens_details
                .and_then(|d| d.reasoning_tokens.0),
        }
    }
}

/// Anthropic usage: `input_tokens` excludes cache reads and writes (normalised later, in
/// `usage`); `message_delta` counts are cumulative and may revise the input side.
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MessagesUsage {
    #[serde(default)]
    pub(crate) input_tokens: Count,
    #[serde(default)]
    pub(crate) cache_read_input_tokens: Count,
    #[serde(default)]
    pub(crate) cache_creation_input_tokens: Count,
    #[serde(default)]
    pub(crate) output_tokens: Count,
    pub(crate) output_tokens_details: Option<ThinkingDetails>,
    pub(crate) cache_creation: Option<CacheCreation>,
}

/// Anthropic's split of `cache_creation_input_tokens` by cache lifetime.
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CacheCreation {
    #[serde(default)]
    pub(crate) ephemeral_1h_input_tokens: Count,
}

#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ThinkingDetails {
    #[serde(default)]
    pub(crate) thinking_tokens: Count,
}

impl MessagesUsage {
    pub(crate) fn report(self) -> UsageReport {
        UsageReport {
            input: self.input_tokens.0,
            output: self.output_tokens.0,
            cache_read: self.cache_read_input_tokens.0,
            cache_write: self.cache_creation_input_tokens.0,
            cache_write_1h: self
                .cache_creation
                .and_then(|c| c.ephemeral_1h_input_tokens.0),
            reasoning: self.output_tokens_details.and_then(|d| d.thinking_tokens.0),
        }
    }
}

/// Gemini `usageMetadata`: `promptTokenCount` includes `cachedContentTokenCount`,
/// `candidatesTokenCount` excludes `thoughtsTokenCount`, and `toolUsePromptTokenCount` is
/// outside the prompt. Its fields are side by side in one object, so one object is folded into
/// the normalised terms here (input = prompt + tool-use prompt, output = candidates + thoughts);
/// within a present object Google leaves zero counts out.
#[derive(Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GeminiUsage {
    #[serde(default)]
    prompt_token_count: Count,
    #[serde(default)]
    candidates_token_count: Count,
    #[serde(default)]
    cached_content_token_count: Count,
    #[serde(default)]
    thoughts_token_count: Count,
    #[serde(default)]
    tool_use_prompt_token_count: Count,
}

impl GeminiUsage {
    pub(crate) fn report(self) -> UsageReport {
        let output = match (self.candidates_token_count.0, self.thoughts_token_count.0) {
            (None, None) => None,
            (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        let tool_prompt = self.tool_use_prompt_token_count.0.unwrap_or(0);
        UsageReport {
            input: self
                .prompt_token_count
                .0
                .map(|p| p.saturating_add(tool_prompt)),
            output,
            cache_read: self.cached_content_token_count.0,
            cache_write: None,
            cache_write_1h: None,
            reasoning: self.thoughts_token_count.0,
        }
    }
}
