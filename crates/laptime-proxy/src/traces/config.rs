//! `[telemetry]`: where request spans are exported over OTLP, how they are sampled and the
//! exporter's bounds. Off without an endpoint; strict and validated like the rest of the config.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How spans reach the receiver (the values of `OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    /// `POST {endpoint}/v1/traces`, a protobuf `ExportTraceServiceRequest` (port 4318).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// The OTLP gRPC service `TraceService/Export` over HTTP/2 (port 4317).
    #[serde(rename = "grpc")]
    Grpc,
}

impl OtlpProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::HttpProtobuf => "http/protobuf",
            OtlpProtocol::Grpc => "grpc",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The OTLP receiver's base URL (also `LAPTIME_OTLP_ENDPOINT`), as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: `http://collector:4318` (`/v1/traces` is appended unless
    /// the path already ends with it) or, with gRPC, `http://collector:4317`. Absent: no span is
    /// built or exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    /// The share of traces exported, 0 to 1, decided by the trace id as OTel's
    /// `TraceIdRatioBased` sampler does (so services sampling at the same ratio keep the same
    /// traces). A trace the client marked unsampled (`traceparent` flags `00`) is never exported.
    pub sampling_ratio: f64,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// The name of an environment variable holding headers sent with every export, in the
    /// format of `OTEL_EXPORTER_OTLP_HEADERS` (`api-key=…,x-tenant=…`, values percent-decoded):
    /// receiver credentials stay in the environment and are never printed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers_env: Option<String>,
    /// Finished requests waiting to be exported; a request finished while it is full is
    /// dropped (its spans counted in `laptime_otel_dropped_total{reason="queue_full"}`).
    pub max_queue_size: usize,
    /// Requests per export call (each gives one request span and one span per attempt).
    pub max_export_batch_size: usize,
    /// How long a batch that is not full waits for more requests before it is sent.
    pub schedule_delay_ms: u64,
    /// How long one export call may take (connect, send, answer); a call that takes longer
    /// fails and is retried like an unreachable receiver.
    pub export_timeout_ms: u64,
    /// Attributes of the exported resource besides `service.name`, such as
    /// `{ "deployment.environment" = "prod" }`.
    pub resource_attributes: BTreeMap<String, String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        // The OTel SDK's batch span processor defaults, but a 1 s delay (its is 5 s).
        TelemetryConfig {
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            sampling_ratio: 1.0,
            service_name: "laptime".into(),
            headers_env: None,
            max_queue_size: 2048,
            max_export_batch_size: 512,
            schedule_delay_ms: 1000,
            export_timeout_ms: 10_000,
            resource_attributes: BTreeMap::new(),
        }
    }
}

/// The path of the trace export under a gRPC endpoint.
pub const GRPC_EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

impl TelemetryConfig {
    /// The URL spans are sent to, when an endpoint is configured and valid.
    pub fn export_url(&self) -> Option<http::Uri> {
        let base = self.otlp_endpoint.as_deref()?;
        let uri: http::Uri = base.trim().parse().ok()?;
        // Credentials in the URL would be printed by check-config and logged: they belong in
        // `headers_env`.
        let userinfo = uri.authority().is_some_and(|a| a.as_str().contains('@'));
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() || userinfo {
            return None;
        }
        let path = uri.path().trim_end_matches('/');
        let path = match self.otlp_protocol {
            OtlpProtocol::HttpProtobuf if path.ends_with("/v1/traces") => path.to_string(),
            OtlpProtocol::HttpProtobuf => format!("{path}/v1/traces"),
            // A gRPC endpoint names a host; the service path is fixed.
            OtlpProtocol::Grpc if path.is_empty() => GRPC_EXPORT_PATH.to_string(),
            OtlpProtocol::Grpc => return None,
        };
        let mut parts = uri.into_parts();
        parts.path_and_query = Some(path.parse().ok()?);
        http::Uri::from_parts(parts).ok()
    }

    /// The headers from `headers_env`, read from `env`. The error never contains a value.
    pub fn headers(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, String> {
        let Some(var) = &self.headers_env else {
            return Ok(Vec::new());
        };
        let Some(text) = env(var) else {
            return Err(format!(
                "telemetry.headers_env: environment variable {var} is not set"
            ));
        };
        parse_headers(&text).map_err(|entry| {
            format!(
                "telemetry.headers_env: entry {entry} of {var} is not name=value with a valid \
                 header name and value"
            )
        })
    }

    /// Every problem of the section, each under its key.
    pub fn validate(&self, env: &dyn Fn(&str) -> Option<String>, errs: &mut Vec<String>) {
        if let Some(e) = &self.otlp_endpoint {
            if self.export_url().is_none() {
                errs.push(match self.otlp_protocol {
                    OtlpProtocol::HttpProtobuf => format!(
                        "telemetry.otlp_endpoint: {e:?} is not an http(s) URL without credentials, \
                         like http://127.0.0.1:4318 (credentials go in headers_env)"
                    ),
                    OtlpProtocol::Grpc => format!(
                        "telemetry.otlp_endpoint: {e:?} is not an http(s) URL without a path, \
                         like http://127.0.0.1:4317 (otlp_protocol = \"grpc\")"
                    ),
                });
            }
        }
        if !(self.sampling_ratio.is_finite() && (0.0..=1.0).contains(&self.sampling_ratio)) {
            errs.push("telemetry.sampling_ratio: must be between 0 and 1".into());
        }
        if self.service_name.trim().is_empty() {
            errs.push("telemetry.service_name: must not be empty".into());
        }
        if self.resource_attributes.keys().any(|k| k.trim().is_empty()) {
            errs.push("telemetry.resource_attributes: names must not be empty".into());
        }
        if self.max_queue_size == 0 {
            errs.push("telemetry.max_queue_size: must be positive".into());
        }
        if self.max_export_batch_size == 0 || self.max_export_batch_size > self.max_queue_size {
            errs.push(format!(
                "telemetry.max_export_batch_size: must be between 1 and max_queue_size ({})",
                self.max_queue_size
            ));
        }
        if self.schedule_delay_ms == 0 {
            errs.push("telemetry.schedule_delay_ms: must be positive".into());
        }
        if self.export_timeout_ms == 0 {
            errs.push("telemetry.export_timeout_ms: must be positive".into());
        }
        if let Err(e) = self.headers(env) {
            errs.push(e);
        }
    }
}

/// `name=value` pairs separated by commas, values percent-decoded (the format of
/// `OTEL_EXPORTER_OTLP_HEADERS`); the error is the 1-based index of the first bad entry.
fn parse_headers(text: &str) -> Result<Vec<(http::HeaderName, http::HeaderValue)>, usize> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let parsed = entry.split_once('=').and_then(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
            let value = http::HeaderValue::from_bytes(&percent_decode(value.trim())?).ok()?;
            Some((name, value))
        });
        out.push(parsed.ok_or(i + 1)?);
    }
    Ok(out)
}

/// `%XX` escapes decoded; `None` for a broken escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(endpoint: &str, protocol: OtlpProtocol) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: Some(endpoint.into()),
            otlp_protocol: protocol,
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn the_traces_path_is_appended_to_an_http_endpoint_once() {
        for (endpoint, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            (
                "https://otel.example/otlp",
                "https://otel.example/otlp/v1/traces",
            ),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
        ] {
            let url_of = with(endpoint, OtlpProtocol::HttpProtobuf).export_url();
            assert_eq!(
                url_of.map(|u| u.to_string()).as_deref(),
                Some(url),
                "{endpoint}"
            );
        }
    }

    #[test]
    fn a_grpc_endpoint_is_a_host_and_the_service_path_is_fixed() {
        let c = with("http://127.0.0.1:4317", OtlpProtocol::Grpc);
        assert_eq!(
            c.export_url().map(|u| u.to_string()),
            Some(format!("http://127.0.0.1:4317{GRPC_EXPORT_PATH}"))
        );
        assert_eq!(
            with("http://c:4317/x", OtlpProtocol::Grpc).export_url(),
            None
        );
        let with_password = with("http://u:pw@c:4318", OtlpProtocol::HttpProtobuf);
        assert_eq!(with_password.export_url(), None);
    }

    #[test]
    fn every_problem_is_reported_with_its_key() {
        let c = TelemetryConfig {
            otlp_endpoint: Some("ftp://x".into()),
            sampling_ratio: 1.5,
            service_name: " ".into(),
            max_queue_size: 0,
            max_export_batch_size: 0,
            schedule_delay_ms: 0,
            export_timeout_ms: 0,
            headers_env: Some("OTLP_HEADERS".into()),
            resource_attributes: [(String::new(), "x".into())].into(),
            ..TelemetryConfig::default()
        };
        let mut errs = Vec::new();
        c.validate(&|_| None, &mut errs);
        for key in [
            "otlp_endpoint",
            "sampling_ratio",
            "service_name",
            "resource_attributes",
            "max_queue_size",
            "max_export_batch_size",
            "schedule_delay_ms",
            "export_timeout_ms",
            "headers_env",
        ] {
            assert!(
                errs.iter()
                    .any(|e| e.starts_with(&format!("telemetry.{key}:"))),
                "{key}: {errs:?}"
            );
        }
    }

    #[test]
    fn the_endpoint_comes_from_the_environment_and_check_config_prints_the_section_back() {
        let mut cfg = crate::config::Config::embedded_default(&|_| None);
        assert_eq!(cfg.telemetry.otlp_endpoint, None, "off by default");
        let env = |v: &str| match v {
            "LAPTIME_OTLP_ENDPOINT" => Some("http://collector:4318".to_string()),
            "OTLP_HEADERS" => Some("api-key=s3cret".to_string()),
            _ => None,
        };
        cfg.apply_env(&env);
        cfg.telemetry.headers_env = Some("OTLP_HEADERS".into());
        cfg.telemetry.sampling_ratio = 0.25;
        cfg.telemetry
            .resource_attributes
            .insert("deployment.environment".into(), "prod".into());
        assert_eq!(cfg.validate(&env), Ok(()));
        let printed = cfg.to_toml();
        assert!(printed.contains("[telemetry]"), "{printed}");
        assert!(
            printed.contains("otlp_endpoint = \"http://collector:4318\""),
            "{printed}"
        );
        assert!(
            printed.contains("OTLP_HEADERS") && !printed.contains("s3cret"),
            "{printed}"
        );
        let back = crate::config::Config::from_toml(&printed, "printed").unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn headers_come_from_the_environment_and_a_bad_one_is_named_without_its_value() {
        let c = TelemetryConfig {
            headers_env: Some("OTLP_HEADERS".into()),
            ..TelemetryConfig::default()
        };
        let env = |v: &str| (v == "OTLP_HEADERS").then(|| "api-key=s3cr%3Dt, x-tenant = a".into());
        let h = c.headers(&env).unwrap_or_default();
        assert_eq!(h.len(), 2);
        assert_eq!(
            (h[0].0.as_str(), h[0].1.as_bytes()),
            ("api-key", &b"s3cr=t"[..])
        );
        assert_eq!(
            (h[1].0.as_str(), h[1].1.as_bytes()),
            ("x-tenant", &b"a"[..])
        );
        let bad = |v: &str| (v == "OTLP_HEADERS").then(|| "a=1,nope-s3cret".into());
        let e = c.headers(&bad).err().unwrap_or_default();
        assert!(e.contains("entry 2") && !e.contains("s3cret"), "{e}");
    }
}
