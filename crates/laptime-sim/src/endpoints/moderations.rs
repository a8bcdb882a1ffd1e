//! `POST /v1/moderations`: one result per input string (one for a multimodal array), every
//! category of OpenAI's moderation object present.
//!
//! Nothing is flagged unless the input's text contains [`FLAG_WORD`]: then `violence` is, with a
//! high score, so a gateway test can see a flagged result pass through. The id is `modr-` and
//! a hash of the request body, so the same request gets the same id.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::json::{obj, J};
use crate::wire::ApiError;

use super::{missing, object};

/// The text that makes a moderation result flagged.
pub(crate) const FLAG_WORD: &str = "sim-flagged";
const DEFAULT_MODEL: &str = "omni-moderation-latest";

/// Each category, and whether images are scored for it too.
const CATEGORIES: [(&str, bool); 13] = [
    ("harassment", false),
    ("harassment/threatening", false),
    ("hate", false),
    ("hate/threatening", false),
    ("illicit", false),
    ("illicit/violent", false),
    ("self-harm", true),
    ("self-harm/instructions", true),
    ("self-harm/intent", true),
    ("sexual", true),
    ("sexual/minors", false),
    ("violence", true),
    ("violence/graphic", true),
];

/// One thing to moderate: its text and whether it had an image.
struct Item {
    text: String,
    image: bool,
}

pub(super) fn serve(body: &[u8]) -> Result<String, ApiError> {
    let digest = hex::encode(Sha256::digest(body));
    let body = object(body)?;
    answer(&body, &digest[..24])
}

/// The moderation answer to a request body (also a batch line's); `id_hash` names it.
pub(crate) fn answer(
    body: &serde_json::Map<String, Value>,
    id_hash: &str,
) -> Result<String, ApiError> {
    let items = items(body.get("input"))?;
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_MODEL);
    let results: Vec<J> = items.iter().map(result).collect();
    Ok(obj! {
        "id": format!("modr-{id_hash}"),
        "model": model,
        "results": J::Arr(results),
    }
    .encode())
}

fn items(input: Option<&Value>) -> Result<Vec<Item>, ApiError> {
    let text = |s: &str| Item {
        text: s.to_owned(),
        image: false,
    };
    match input {
        None | Some(Value::Null) => Err(missing("input")),
        Some(Value::String(s)) => Ok(vec![text(s)]),
        Some(Value::Array(list)) if list.iter().all(Value::is_string) && !list.is_empty() => {
            Ok(list.iter().filter_map(Value::as_str).map(text).collect())
        }
        Some(Value::Array(parts)) if parts.iter().all(Value::is_object) && !parts.is_empty() => {
            // A multimodal input is one item: its texts, and whether it had an image.
            let mut item = text("");
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        item.text
                            .push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    Some("image_url") => item.image = true,
                    _ => {
                        return Err(ApiError::invalid_request(
                            "Invalid 'input': each part must be of type 'text' or 'image_url'."
                                .to_owned(),
                        )
                        .param("input"))
                    }
                }
            }
            Ok(vec![item])
        }
        Some(_) => Err(ApiError::invalid_request(
            "Invalid 'input': expected a string, an array of strings, or an array of \
             multimodal parts."
                .to_owned(),
        )
        .param("input")),
    }
}

fn result(item: &Item) -> J {
    let flagged = item.text.contains(FLAG_WORD);
    let hit = |name: &str| flagged && name == "violence";
    let fields = |value: &dyn Fn(&'static str, bool) -> J| {
        J::Obj(
            CATEGORIES
                .iter()
                .map(|(name, images)| (*name, value(name, *images)))
                .collect(),
        )
    };
    let categories = fields(&|name, _| J::from(hit(name)));
    let scores = fields(&|name, _| J::from(if hit(name) { 0.97 } else { 0.0001 }));
    let applied = fields(&|_, images| {
        let mut types = Vec::new();
        if !item.text.is_empty() || !item.image {
            types.push(J::from("text"));
        }
        if images && item.image {
            types.push(J::from("image"));
        }
        J::Arr(types)
    });
    obj! {
        "flagged": flagged,
        "categories": categories,
        "category_scores": scores,
        "category_applied_input_types": applied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(body: Value) -> Value {
        serde_json::from_str(&answer(body.as_object().unwrap(), "abc").unwrap()).unwrap()
    }

    #[test]
    fn each_string_gets_a_result_with_every_category() {
        let out = run(json!({"input": ["hello", "this is sim-flagged"]}));
        assert_eq!(out["id"], "modr-abc");
        assert_eq!(out["model"], DEFAULT_MODEL);
        let results = out["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["flagged"], false);
        assert_eq!(results[1]["flagged"], true);
        assert_eq!(results[1]["categories"]["violence"], true);
        assert_eq!(results[1]["categories"]["hate"], false);
        for r in results {
            for (name, _) in CATEGORIES {
                assert!(r["categories"][name].is_boolean(), "{name}");
                assert!(r["category_scores"][name].is_number(), "{name}");
                assert_eq!(
                    r["category_applied_input_types"][name],
                    json!(["text"]),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn a_multimodal_input_is_one_result_with_images_applied() {
        let out = run(json!({"model": "omni-moderation-2024-09-26", "input": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
        ]}));
        assert_eq!(out["model"], "omni-moderation-2024-09-26");
        let r = &out["results"][0];
        assert_eq!(
            r["category_applied_input_types"]["violence"],
            json!(["text", "image"])
        );
        assert_eq!(r["category_applied_input_types"]["hate"], json!(["text"]));
    }

    #[test]
    fn no_input_is_a_400() {
        let e = answer(json!({}).as_object().unwrap(), "x").unwrap_err();
        assert_eq!((e.status, e.openai_param), (400, Some("input")));
        assert!(answer(json!({"input": 3}).as_object().unwrap(), "x").is_err());
    }
}
