//! OpenAI Responses requests: the decoder and the encoder.

use serde_json::{Map, Value};

use super::error::RequestError;
use super::json::{Obj, Result};
use super::{Decoder, Encoder, HubRequest};

pub(super) fn decode(_o: Obj<'_>, _d: &mut Decoder<'_>) -> Result<()> {
    Err(RequestError::unsupported("", "not yet"))
}

pub(super) fn encode(_hub: &HubRequest, _e: &mut Encoder<'_, '_>) -> Result<Map<String, Value>> {
    Err(RequestError::unsupported("", "not yet"))
}
