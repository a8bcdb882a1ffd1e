//! Attempt: one upstream call. Builds the upstream request from operator configuration only
//! (URL, key) plus the client's body bytes, sends it over a pooled HTTP/1.1 or HTTP/2 client
//! (rustls for TLS, `TCP_NODELAY`, redirects never followed), and classifies failures by whose
//! fault they are.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use laptime_core::timeline::ErrorClass;
use laptime_core::Dialect;

use crate::config::Provider;
use crate::respond::{header_value, GatewayError};
use crate::routing::Channel;

pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Idle connections kept per upstream host. Each holds its buffers and a task; without a cap a
/// burst of N concurrent streams leaves N idle connections (and their memory) for 90 s.
const IDLE_PER_UPSTREAM: usize = 128;

/// The pooled upstream client.
pub fn client(connect_timeout: Duration) -> Result<HttpClient, GatewayError> {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| GatewayError::new(ErrorClass::Internal, format!("TLS setup failed: {e}")))?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(IDLE_PER_UPSTREAM)
        .build(https))
}

/// Client headers passed upstream as they are: the ones that change the answer's format or
/// version. Everything else (including the client's credentials) stays here.
const PASSED: [&str; 3] = ["anthropic-version", "anthropic-beta", "openai-beta"];

const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

pub fn build_request(
    channel: &Channel,
    dialect: Dialect,
    body: Bytes,
    client_headers: &HeaderMap,
    traceparent: &str,
) -> Result<Request<Full<Bytes>>, GatewayError> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(channel.url(dialect))
        .body(Full::new(body))
        .map_err(|e| GatewayError::new(ErrorClass::Internal, format!("bad upstream URL: {e}")))?;
    let h = req.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // The scanner reads the stream as sent; compressed SSE would hide it.
    h.insert(
        http::header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    h.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("laptime/", env!("CARGO_PKG_VERSION"))),
    );
    if let Some(accept) = client_headers.get(http::header::ACCEPT) {
        h.insert(http::header::ACCEPT, accept.clone());
    }
    for name in PASSED {
        if let Some(v) = client_headers.get(name) {
            h.insert(name, v.clone());
        }
    }
    h.insert("traceparent", header_value(traceparent));
    if let Some(key) = &channel.api_key {
        let mut value = match channel.provider {
            Provider::Anthropic => header_value(key.expose()),
            Provider::Openai | Provider::Sim => header_value(&format!("Bearer {}", key.expose())),
        };
        value.set_sensitive(true);
        match channel.provider {
            Provider::Anthropic => h.insert("x-api-key", value),
            Provider::Openai | Provider::Sim => h.insert(http::header::AUTHORIZATION, value),
        };
    }
    if dialect == Dialect::Messages && !h.contains_key("anthropic-version") {
        h.insert(
            "anthropic-version",
            HeaderValue::from_static(DEFAULT_ANTHROPIC_VERSION),
        );
    }
    Ok(req)
}

/// Classifies a failed upstream call.
pub fn classify_error(e: &hyper_util::client::legacy::Error) -> ErrorClass {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return ErrorClass::Tls;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return ErrorClass::ConnectTimeout;
            }
            // An io::Error's `source()` skips the error it wraps (the TLS connector nests
            // io::Error(Other) → io::Error(InvalidData) → rustls::Error), so follow `get_ref`.
            if let Some(inner) = io.get_ref() {
                source = Some(inner);
                continue;
            }
        }
        source = s.source();
    }
    if e.is_connect() {
        ErrorClass::ConnectFailed
    } else {
        ErrorClass::BodyError
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ChannelConfig, Models};

    fn channel(provider: Provider) -> Channel {
        let cfg = ChannelConfig {
            name: "c".into(),
            provider,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some("K".into()),
            models: Models::List(vec!["m".into()]),
            group: "default".into(),
            priority: 0,
            weight: 1,
            circuit: Default::default(),
        };
        Channel::from_config(&cfg, "http://127.0.0.1:9/v1".into(), &|_| {
            Some("sk-canary".into())
        })
    }

    #[test]
    fn client_credentials_never_go_upstream_and_the_channel_key_does() {
        let mut client = HeaderMap::new();
        client.insert("authorization", "Bearer lt_client".parse().unwrap());
        client.insert("x-api-key", "lt_client".parse().unwrap());
        client.insert("cookie", "a=b".parse().unwrap());
        client.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let req = build_request(
            &channel(Provider::Openai),
            Dialect::Chat,
            Bytes::from_static(b"{}"),
            &client,
            "00-a-b-01",
        )
        .unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer sk-canary");
        assert!(req.headers()["authorization"].is_sensitive());
        assert!(!req.headers().contains_key("x-api-key"));
        assert!(!req.headers().contains_key("cookie"));
        assert_eq!(req.uri(), "http://127.0.0.1:9/v1/chat/completions");
        let req = build_request(
            &channel(Provider::Anthropic),
            Dialect::Messages,
            Bytes::new(),
            &client,
            "00-a-b-01",
        )
        .unwrap();
        assert_eq!(req.headers()["x-api-key"], "sk-canary");
        assert!(!req.headers().contains_key("authorization"));
        assert_eq!(req.headers()["anthropic-version"], "2023-06-01");
    }
}
