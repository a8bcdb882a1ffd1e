//! The OTLP transport: one `ExportTraceServiceRequest` per call, as HTTP/protobuf
//! (`POST …/v1/traces`) or gRPC (`TraceService/Export` over HTTP/2, one length-prefixed
//! message), over a hyper client of its own (rustls, no redirects), each call bounded by the
//! export timeout and its answer by [`MAX_ANSWER_BYTES`]. What the receiver accepted and
//! rejected comes back from its `ExportTraceServiceResponse` (partial success).

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

use super::config::OtlpProtocol;

/// An answer bigger than this is not read (a receiver answers a few bytes).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why an export call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportError {
    /// No answer: the receiver could not be reached, or the connection broke.
    Transport(String),
    /// No whole answer within the export timeout.
    Timeout,
    /// An HTTP status other than 2xx, with its `Retry-After`.
    Status(u16, Option<Duration>),
    /// A gRPC status other than OK, with its message.
    Grpc(u32, String),
    /// A 2xx answer that is not an `ExportTraceServiceResponse`.
    BadAnswer(String),
}

impl ExportError {
    /// Whether the same batch may succeed later (OTLP's retryable answers), and after how long
    /// the receiver asked to wait.
    pub fn retryable(&self) -> Option<Option<Duration>> {
        match self {
            ExportError::Transport(_) | ExportError::Timeout => Some(None),
            ExportError::Status(429 | 502 | 503 | 504, after) => Some(*after),
            // CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, OUT_OF_RANGE,
            // UNAVAILABLE, DATA_LOSS.
            ExportError::Grpc(1 | 4 | 8 | 10 | 11 | 14 | 15, _) => Some(None),
            _ => None,
        }
    }
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportError::Transport(e) => write!(f, "receiver unreachable: {e}"),
            ExportError::Timeout => f.write_str("no answer within export_timeout_ms"),
            ExportError::Status(s, _) => write!(f, "receiver answered HTTP {s}"),
            ExportError::Grpc(code, msg) => {
                write!(f, "receiver answered gRPC status {code}: {msg}")
            }
            ExportError::BadAnswer(e) => write!(f, "receiver's answer is not OTLP: {e}"),
        }
    }
}

/// Where and how spans are sent.
#[derive(Debug, Clone)]
pub struct Transport {
    client: HttpsClient,
    url: Uri,
    protocol: OtlpProtocol,
    headers: Vec<(HeaderName, HeaderValue)>,
    timeout: Duration,
}

impl Transport {
    pub fn new(
        url: Uri,
        protocol: OtlpProtocol,
        headers: Vec<(HeaderName, HeaderValue)>,
        timeout: Duration,
    ) -> Result<Transport, String> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let mut builder = Client::builder(TokioExecutor::new());
        // One export at a time: one connection kept is all the exporter needs.
        builder
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(hyper_util::rt::TokioTimer::new());
        // gRPC is HTTP/2 only; on `http://` that is h2c with prior knowledge.
        builder.http2_only(protocol == OtlpProtocol::Grpc);
        Ok(Transport {
            client: builder.build(https),
            url,
            protocol,
            headers,
            timeout,
        })
    }

    /// One export call: how many spans the receiver rejected (0 unless it answered with a
    /// partial success).
    pub async fn export(&self, request: &ExportTraceServiceRequest) -> Result<u64, ExportError> {
        match tokio::time::timeout(self.timeout, self.call(request)).await {
            Ok(result) => result,
            Err(_) => Err(ExportError::Timeout),
        }
    }

    async fn call(&self, request: &ExportTraceServiceRequest) -> Result<u64, ExportError> {
        let (body, content_type) = match self.protocol {
            OtlpProtocol::HttpProtobuf => {
                (request.encode_to_vec().into(), "application/x-protobuf")
            }
            OtlpProtocol::Grpc => (grpc_frame(request), "application/grpc"),
        };
        let mut req = Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, content_type)
            .body(Full::new(body))
            .map_err(|e| ExportError::Transport(e.to_string()))?;
        if self.protocol == OtlpProtocol::Grpc {
            req.headers_mut()
                .insert(http::header::TE, HeaderValue::from_static("trailers"));
        }
        for (name, value) in &self.headers {
            req.headers_mut().insert(name.clone(), value.clone());
        }
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| ExportError::Transport(error_chain(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(ExportError::Status(
                status.as_u16(),
                retry_after(resp.headers()),
            ));
        }
        let (parts, body) = resp.into_parts();
        let collected = Limited::new(body, MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(
                |e| match e.downcast_ref::<http_body_util::LengthLimitError>() {
                    Some(_) => ExportError::BadAnswer(format!("over {MAX_ANSWER_BYTES} bytes")),
                    None => ExportError::Transport(error_chain(e.as_ref())),
                },
            )?;
        let trailers = collected.trailers().cloned();
        let bytes = collected.to_bytes();
        match self.protocol {
            OtlpProtocol::HttpProtobuf => rejected(&bytes),
            OtlpProtocol::Grpc => {
                // A trailers-only answer carries its status in the head.
                let grpc = trailers.as_ref().unwrap_or(&parts.headers);
                grpc_status(grpc)?;
                rejected(&grpc_message(bytes)?)
            }
        }
    }
}

/// The spans a receiver's answer says it rejected (an empty answer rejects none).
fn rejected(answer: &[u8]) -> Result<u64, ExportError> {
    let resp = ExportTraceServiceResponse::decode(answer)
        .map_err(|e| ExportError::BadAnswer(e.to_string()))?;
    Ok(resp
        .partial_success
        .map_or(0, |p| u64::try_from(p.rejected_spans).unwrap_or(0)))
}

/// A gRPC message: uncompressed flag, big-endian length, the protobuf bytes.
fn grpc_frame(request: &ExportTraceServiceRequest) -> Bytes {
    let len = request.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
    // Encoding into a buffer of the right capacity cannot run out of room.
    let _ = request.encode(&mut buf);
    buf.freeze()
}

/// The one message of a gRPC answer (empty when the answer has none).
fn grpc_message(mut body: Bytes) -> Result<Bytes, ExportError> {
    if body.is_empty() {
        return Ok(body);
    }
    if body.len() < 5 || body[0] != 0 {
        return Err(ExportError::BadAnswer(
            "not one uncompressed gRPC message".into(),
        ));
    }
    body.advance(1);
    let len = body.get_u32() as usize;
    if body.len() < len {
        return Err(ExportError::BadAnswer("gRPC message cut short".into()));
    }
    Ok(body.split_to(len))
}

fn grpc_status(h: &http::HeaderMap) -> Result<(), ExportError> {
    let code = h
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok());
    match code {
        Some(0) => Ok(()),
        Some(code) => {
            let msg = h
                .get("grpc-message")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            Err(ExportError::Grpc(code, msg.chars().take(200).collect()))
        }
        None => Err(ExportError::BadAnswer("no grpc-status".into())),
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not used by OTLP receivers).
fn retry_after(h: &http::HeaderMap) -> Option<Duration> {
    let s = h.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    s.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// An error with its sources, which say what actually failed (refused, reset, TLS, …).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_frame_reads_back_as_its_message() {
        let req = ExportTraceServiceRequest::default();
        let framed = grpc_frame(&req);
        assert_eq!(framed[0], 0);
        let msg = grpc_message(framed).unwrap();
        assert_eq!(ExportTraceServiceRequest::decode(msg).unwrap(), req);
        assert!(grpc_message(Bytes::from_static(&[1, 0, 0, 0, 0])).is_err());
        assert!(grpc_message(Bytes::from_static(&[0, 0, 0, 0, 9, 1])).is_err());
    }

    #[test]
    fn only_transient_failures_are_retried() {
        assert_eq!(ExportError::Timeout.retryable(), Some(None));
        assert_eq!(
            ExportError::Status(503, Some(Duration::from_secs(2))).retryable(),
            Some(Some(Duration::from_secs(2)))
        );
        assert_eq!(ExportError::Status(400, None).retryable(), None);
        assert_eq!(ExportError::Grpc(14, String::new()).retryable(), Some(None));
        assert_eq!(ExportError::Grpc(3, String::new()).retryable(), None);
    }

    #[test]
    fn a_partial_success_names_the_rejected_spans() {
        let answer = ExportTraceServiceResponse {
            partial_success: Some(
                opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess {
                    rejected_spans: 3,
                    error_message: "too old".into(),
                },
            ),
        };
        assert_eq!(rejected(&answer.encode_to_vec()), Ok(3));
        assert_eq!(rejected(&[]), Ok(0));
    }
}
