//! Egress over real sockets on 127.0.0.1: a TLS upstream with its own CA (a tokio-rustls front
//! of a sim), one that requires a client certificate, and an HTTP proxy written here (it counts
//! CONNECT tunnels and absolute-form requests and checks `Proxy-Authorization`). Trust from a
//! channel's `ca_file`, mTLS, proxies from `proxy_url` and from the environment under
//! `NO_PROXY`, failover from a refusing or absent proxy, and each attempt's connect, tunnel and
//! TLS marks in the order they happen. The CA and certificates are made at test time.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

pub mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use laptime_proxy::config::{ChannelConfig, Models, UpstreamHttp};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A CA, a server certificate for `localhost` and 127.0.0.1 and a client certificate it signed,
/// the CA and the client's files written to a directory of the test's.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertificateDer<'static>,
    server: (CertificateDer<'static>, Vec<u8>),
}

impl Pki {
    fn new() -> Pki {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "laptime test CA");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = ca.self_signed(&ca_key).unwrap();
        let leaf = |names: Vec<String>, usage: rcgen::ExtendedKeyUsagePurpose| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            (params.signed_by(&key, &ca, &ca_key).unwrap(), key)
        };
        let (server, server_key) = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key) = leaf(
            vec!["laptime-gateway".into()],
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("client.pem"), client.pem()).unwrap();
        std::fs::write(dir.path().join("client.key"), client_key.serialize_pem()).unwrap();
        Pki {
            dir,
            ca: ca.der().clone(),
            server: (server.der().clone(), server_key.serialize_der()),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A TLS-terminating front on 127.0.0.1 relaying each connection to `upstream`; it counts the
/// handshakes it completed and keeps the protocol each agreed on (ALPN; `None` when none was).
struct TlsFront {
    port: u16,
    handshakes: Arc<AtomicUsize>,
    agreed: Arc<Mutex<Vec<Option<String>>>>,
}

/// What the fronts of most tests offer: HTTP/1.1 only.
const HTTP1: &[&[u8]] = &[b"http/1.1"];

async fn tls_front(pki: &Pki, upstream: SocketAddr, client_certificates: bool) -> TlsFront {
    tls_front_offering(pki, upstream, client_certificates, HTTP1).await
}

async fn tls_front_offering(
    pki: &Pki,
    upstream: SocketAddr,
    client_certificates: bool,
    alpn: &[&[u8]],
) -> TlsFront {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if client_certificates {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca.clone()).unwrap();
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server.1.clone()));
    let mut config = builder
        .with_single_cert(vec![pki.server.0.clone()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let agreed = Arc::new(Mutex::new(Vec::new()));
    let (counted, noted) = (handshakes.clone(), agreed.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, counted, noted) = (acceptor.clone(), counted.clone(), noted.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let protocol = tls.get_ref().1.alpn_protocol();
                let protocol = protocol.map(|p| String::from_utf8_lossy(p).into_owned());
                noted.lock().unwrap().push(protocol);
                let mut up = TcpStream::connect(upstream).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    TlsFront {
        port,
        handshakes,
        agreed,
    }
}

/// An HTTP proxy on 127.0.0.1: CONNECT tunnels and absolute-form requests, each refused with
/// 407 unless its `Proxy-Authorization` is `wants`.
struct TestProxy {
    addr: SocketAddr,
    tunnels: Arc<AtomicUsize>,
    forwarded: Arc<AtomicUsize>,
    /// Every `Proxy-Authorization` received (absent as `None`).
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

async fn test_proxy(wants: &'static str) -> TestProxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = TestProxy {
        addr: listener.local_addr().unwrap(),
        tunnels: Arc::default(),
        forwarded: Arc::default(),
        seen: Arc::default(),
    };
    let (tunnels, forwarded, seen) = (
        proxy.tunnels.clone(),
        proxy.forwarded.clone(),
        proxy.seen.clone(),
    );
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (tunnels, forwarded, seen) = (tunnels.clone(), forwarded.clone(), seen.clone());
            tokio::spawn(async move {
                proxy_one(client, wants, &tunnels, &forwarded, &seen).await;
            });
        }
    });
    proxy
}

async fn proxy_one(
    mut client: TcpStream,
    wants: &str,
    tunnels: &AtomicUsize,
    forwarded: &AtomicUsize,
    seen: &Mutex<Vec<Option<String>>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let Ok(n) = client.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut first = head.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (
        first.next().unwrap_or_default(),
        first.next().unwrap_or_default(),
    );
    let auth = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_string())
    });
    seen.lock().unwrap().push(auth.clone());
    if auth.as_deref() != Some(wants) {
        let _ = client
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return;
    }
    let authority = if method == "CONNECT" {
        target.to_string()
    } else {
        let rest = target.strip_prefix("http://").unwrap_or(target);
        rest.split('/').next().unwrap_or_default().to_string()
    };
    let Ok(mut upstream) = TcpStream::connect(&authority).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if method == "CONNECT" {
        tunnels.fetch_add(1, Ordering::SeqCst);
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .unwrap();
        upstream.write_all(&buf[head_end..]).await.unwrap();
    } else {
        // Absolute form: the upstream (the sim) reads the request as it came.
        forwarded.fetch_add(1, Ordering::SeqCst);
        upstream.write_all(&buf).await.unwrap();
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

/// A sim of the test's own, for the TLS front to relay to.
async fn own_sim() -> SocketAddr {
    counted_sim().await.0
}

/// A sim of the test's own, and its counters.
async fn counted_sim() -> (SocketAddr, laptime_sim::Sim) {
    let sim = laptime_sim::Sim::new();
    let (addr, _) = laptime_sim::spawn_local(sim.clone()).await.unwrap();
    (addr, sim)
}

/// A channel on `base` serving each of `models` as the sim's `sim-fast`.
fn serving(name: &str, base: &str, models: &[&str]) -> ChannelConfig {
    let mut c = channel(name, base, &[]);
    c.models = Models::Map(
        models
            .iter()
            .map(|m| (m.to_string(), "sim-fast".to_string()))
            .collect(),
    );
    c
}

/// The request id the gateway answered with.
/// Streams a Chat request for `model`: (status, body, request id).
async fn chat(h: &Harness, model: &str) -> (u16, String, String) {
    let r = h
        .post("/v1/chat/completions", &body_for("chat", model, true))
        .await;
    let status = r.status().as_u16();
    let id = request_id(&r);
    (status, r.text().await.unwrap(), id)
}

/// A successful streamed answer's stored row.
async fn answered_row(h: &Harness, model: &str) -> Value {
    let (status, body, id) = chat(h, model).await;
    assert_eq!(status, 200, "{model}: {body}");
    assert!(body.contains("data: [DONE]"), "{model}: {body}");
    let row = h.row(&id).await;
    assert_eq!(row["outcome"], "completed", "{row:#}");
    row
}

/// A successful streamed answer's stored attempts.
async fn answered(h: &Harness, model: &str) -> Vec<Value> {
    answered_row(h, model).await["attempts"]
        .as_array()
        .unwrap()
        .clone()
}

/// Each key present (a number) and each no later than the next.
fn in_order(attempt: &Value, keys: &[&str]) {
    let at: Vec<f64> = keys
        .iter()
        .map(|k| {
            attempt[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{k} absent in {attempt:#}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] <= w[1]),
        "{keys:?} out of order: {at:?}"
    );
}

/// None of the connection's marks: the attempt had a pooled connection.
fn pooled(attempt: &Value) {
    for k in ["connected_ms", "tunnel_ms", "tls_ms"] {
        assert!(attempt[k].is_null(), "{k} in {attempt:#}");
    }
}

#[tokio::test]
async fn a_channel_trusting_its_ca_file_reaches_a_tls_upstream_and_without_it_fails_as_tls() {
    let pki = Pki::new();
    let front = tls_front(&pki, own_sim().await, false).await;
    let base = format!("https://127.0.0.1:{}", front.port);
    let ca = pki.file("ca.pem");
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut trusted = serving("internal", &base, &["internal-model"]);
        trusted.ca_file = Some(ca);
        cfg.channels = vec![trusted, serving("untrusted", &base, &["public-roots-only"])];
    })
    .await;

    let first = answered(&h, "internal-model").await;
    assert_eq!(first.len(), 1);
    in_order(
        &first[0],
        &["start_ms", "connected_ms", "tls_ms", "headers_ms"],
    );
    assert!(first[0]["tunnel_ms"].is_null(), "no proxy, no tunnel");
    // The next request takes the pooled connection: no new connect, no new handshake.
    let second = answered(&h, "internal-model").await;
    pooled(&second[0]);
    assert_eq!(front.handshakes.load(Ordering::SeqCst), 1);

    // GraphQL gives the same marks, camelCase.
    let (_, v) = h
        .gql(
            &h.token,
            "query($w: ID!) { recentRequests(workspaceId: $w, limit: 2) {
                attempts { connectedMs tunnelMs tlsMs } } }",
            json!({"w": "default"}),
        )
        .await;
    let recent = &v["data"]["recentRequests"];
    assert_eq!(recent[0]["attempts"][0]["connectedMs"], Value::Null, "{v}");
    assert_eq!(
        recent[1]["attempts"][0]["connectedMs"],
        first[0]["connected_ms"]
    );
    assert_eq!(recent[1]["attempts"][0]["tlsMs"], first[0]["tls_ms"]);
    assert_eq!(recent[1]["attempts"][0]["tunnelMs"], Value::Null);

    // The same upstream, trusting only the bundled and the system's roots.
    let (status, body, id) = chat(&h, "public-roots-only").await;
    assert_eq!(status, 502, "{body}");
    let row = h.row(&id).await;
    let failed = &row["attempts"][0];
    assert_eq!(failed["error_class"], "tls", "{row:#}");
    assert_eq!(failed["fault"], "upstream");
    in_order(failed, &["start_ms", "connected_ms", "end_ms"]);
    assert!(failed["tls_ms"].is_null(), "{failed:#}");
    h.stop().await;
}

#[tokio::test]
async fn mutual_tls_is_refused_without_a_client_certificate_and_served_with_one() {
    let pki = Pki::new();
    let front = tls_front(&pki, own_sim().await, true).await;
    let base = format!("https://localhost:{}", front.port);
    let (ca, cert, key) = (
        pki.file("ca.pem"),
        pki.file("client.pem"),
        pki.file("client.key"),
    );
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut with = serving("with-cert", &base, &["mtls-with"]);
        with.ca_file = Some(ca.clone());
        with.client_cert_file = Some(cert);
        with.client_key_file = Some(key);
        let mut without = serving("without-cert", &base, &["mtls-without"]);
        without.ca_file = Some(ca);
        cfg.channels = vec![with, without];
    })
    .await;

    let served = answered(&h, "mtls-with").await;
    in_order(
        &served[0],
        &["start_ms", "connected_ms", "tls_ms", "headers_ms"],
    );
    assert_eq!(front.handshakes.load(Ordering::SeqCst), 1);

    let (status, body, id) = chat(&h, "mtls-without").await;
    assert_eq!(status, 502, "{body}");
    let row = h.row(&id).await;
    assert_eq!(row["attempts"][0]["error_class"], "tls", "{row:#}");
    assert_eq!(row["error_class"], "tls");
    assert_eq!(
        front.handshakes.load(Ordering::SeqCst),
        1,
        "the front refused the handshake without a certificate"
    );
    h.stop().await;
}

#[tokio::test]
async fn a_channels_proxy_tunnels_to_the_tls_upstream_once_and_pooled_requests_reuse_the_tunnel() {
    let pki = Pki::new();
    let front = tls_front(&pki, own_sim().await, false).await;
    // "egress:s3/cr3t", the password percent-encoded in the URL.
    let proxy = test_proxy("Basic ZWdyZXNzOnMzL2NyM3Q=").await;
    let base = format!("https://localhost:{}", front.port);
    let proxy_url = format!("http://egress:s3%2Fcr3t@{}", proxy.addr);
    let ca = pki.file("ca.pem");
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut c = serving("proxied", &base, &["via-proxy"]);
        c.ca_file = Some(ca);
        c.proxy_url = Some(proxy_url);
        cfg.channels = vec![c];
    })
    .await;

    let first_row = answered_row(&h, "via-proxy").await;
    let first = first_row["attempts"].as_array().unwrap();
    assert_eq!(proxy.tunnels.load(Ordering::SeqCst), 1);
    in_order(
        &first[0],
        &[
            "start_ms",
            "connected_ms",
            "tunnel_ms",
            "tls_ms",
            "headers_ms",
        ],
    );
    let second = answered(&h, "via-proxy").await;
    assert_eq!(
        proxy.tunnels.load(Ordering::SeqCst),
        1,
        "the pooled connection is reused, no second tunnel"
    );
    pooled(&second[0]);
    assert_eq!(front.handshakes.load(Ordering::SeqCst), 1);
    assert_eq!(
        *proxy.seen.lock().unwrap(),
        [Some("Basic ZWdyZXNzOnMzL2NyM3Q=".to_string())]
    );
    // The proxy's password is nowhere the gateway shows.
    let shown = first_row.to_string() + &h.metrics().await;
    assert!(!shown.contains("s3%2Fcr3t") && !shown.contains("s3/cr3t"));
    h.stop().await;
}

#[tokio::test]
async fn the_environments_proxies_apply_by_scheme_and_no_proxy_or_an_empty_proxy_url_go_direct() {
    let pki = Pki::new();
    let front = tls_front(&pki, own_sim().await, false).await;
    let proxy = test_proxy("Basic ZW52OnB3").await;
    let proxy_env = format!("http://env:pw@{}", proxy.addr);
    let ca = pki.file("ca.pem");
    let vars = [
        ("https_proxy", proxy_env.as_str()),
        ("HTTP_PROXY", proxy_env.as_str()),
        ("NO_PROXY", "127.0.0.1"),
    ];
    let h = start_with_env(
        |cfg, sim| {
            cfg.server.threads = 1;
            let tls = |name: &str, host: &str, model: &str| {
                let mut c = serving(name, &format!("https://{host}:{}", front.port), &[model]);
                c.ca_file = Some(ca.clone());
                c
            };
            let mut opted_out = tls("opted-out", "localhost", "opted-out");
            opted_out.proxy_url = Some(String::new());
            let plain_sim = sim.replace("127.0.0.1", "localhost");
            cfg.channels = vec![
                tls("via-env", "localhost", "env-tls"),
                tls("exempt", "127.0.0.1", "no-proxy-tls"),
                opted_out,
                serving("plain-via-env", &plain_sim, &["env-plain"]),
            ];
        },
        &vars,
    )
    .await;

    let via_env = answered(&h, "env-tls").await;
    assert_eq!(proxy.tunnels.load(Ordering::SeqCst), 1);
    in_order(
        &via_env[0],
        &[
            "start_ms",
            "connected_ms",
            "tunnel_ms",
            "tls_ms",
            "headers_ms",
        ],
    );
    for model in ["no-proxy-tls", "opted-out"] {
        let direct = answered(&h, model).await;
        in_order(
            &direct[0],
            &["start_ms", "connected_ms", "tls_ms", "headers_ms"],
        );
        assert!(direct[0]["tunnel_ms"].is_null(), "{model}: {:#}", direct[0]);
    }
    assert_eq!(
        proxy.tunnels.load(Ordering::SeqCst),
        1,
        "NO_PROXY and proxy_url = \"\" went direct"
    );
    assert_eq!(front.handshakes.load(Ordering::SeqCst), 3);

    // Plain HTTP through HTTP_PROXY: the request in absolute form, no tunnel, no TLS.
    let plain = answered(&h, "env-plain").await;
    assert_eq!(proxy.forwarded.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.tunnels.load(Ordering::SeqCst), 1);
    in_order(&plain[0], &["start_ms", "connected_ms", "headers_ms"]);
    assert!(plain[0]["tunnel_ms"].is_null() && plain[0]["tls_ms"].is_null());
    assert!(proxy
        .seen
        .lock()
        .unwrap()
        .iter()
        .all(|a| a.as_deref() == Some("Basic ZW52OnB3")));
    h.stop().await;
}

#[tokio::test]
async fn a_proxy_that_refuses_or_is_down_fails_the_attempt_as_the_proxys_and_another_channel_answers(
) {
    let pki = Pki::new();
    let front = tls_front(&pki, own_sim().await, false).await;
    let proxy = test_proxy("Basic ZW52OnB3").await;
    let wrong = format!("http://env:wrong@{}", proxy.addr);
    let down = format!("http://127.0.0.1:{}", closed_port().await);
    let base = format!("https://localhost:{}", front.port);
    let ca = pki.file("ca.pem");
    let h = start_with(|cfg, sim| {
        let mut refused = serving("refused-tls", &base, &["m-407"]);
        refused.ca_file = Some(ca.clone());
        refused.proxy_url = Some(wrong.clone());
        let mut refused_plain = serving("refused-plain", sim, &["m-407-plain"]);
        refused_plain.proxy_url = Some(wrong);
        let mut unreachable = serving("proxy-down", &base, &["m-down"]);
        unreachable.ca_file = Some(ca);
        unreachable.proxy_url = Some(down);
        let mut direct = serving("direct", sim, &["m-407", "m-down"]);
        direct.priority = 1;
        cfg.channels = vec![refused, refused_plain, unreachable, direct];
    })
    .await;

    for (model, class, proxy_channel) in [
        ("m-407", "proxy_auth", "refused-tls"),
        ("m-down", "proxy_failed", "proxy-down"),
    ] {
        let attempts = answered(&h, model).await;
        assert_eq!(attempts.len(), 2, "{model}: {attempts:#?}");
        let failed = &attempts[0];
        assert_eq!(failed["channel"], proxy_channel);
        assert_eq!(failed["error_class"], class, "{model}: {failed:#}");
        assert_eq!(failed["fault"], "gateway");
        assert!(failed["tunnel_ms"].is_null() && failed["tls_ms"].is_null());
        assert_eq!(attempts[1]["channel"], "direct");
        assert_eq!(attempts[1]["won"], true);
    }
    // TCP to the refusing proxy was done; to the absent one, never.
    let refused_attempt = &answered(&h, "m-407").await[0];
    in_order(refused_attempt, &["start_ms", "connected_ms", "end_ms"]);
    let down_attempt = &answered(&h, "m-down").await[0];
    assert!(down_attempt["connected_ms"].is_null(), "{down_attempt:#}");
    assert_eq!(proxy.tunnels.load(Ordering::SeqCst), 0);
    assert_eq!(front.handshakes.load(Ordering::SeqCst), 0);

    // Plain HTTP: the proxy's 407 to the absolute-form request is the proxy's refusal too,
    // and with no other channel the client is told in the gateway's words.
    let (status, body, id) = chat(&h, "m-407-plain").await;
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("proxy"), "{body}");
    assert!(!body.contains("wrong"), "{body}");
    let row = h.row(&id).await;
    assert_eq!(row["error_class"], "proxy_auth", "{row:#}");
    assert_eq!(row["fault"], "gateway");
    assert_eq!(row["attempts"].as_array().unwrap().len(), 1);
    h.stop().await;
}

/// Answers every one of `models` a streamed Chat request at once; the rows of all of them.
async fn answered_at_once(h: &Harness, models: &[&str]) -> Vec<Value> {
    let calls = models.iter().map(|m| answered_row(h, m));
    futures_util::future::join_all(calls).await
}

/// A complete streamed timeline: headers, first event, first output and first text, the
/// upstream's end, in order.
fn whole_timeline(row: &Value) {
    let timing = &row["other"]["timing"];
    for k in [
        "upstream_headers_ms",
        "first_sse_event_ms",
        "first_response_ms",
        "first_text_delta_ms",
        "upstream_done_ms",
    ] {
        assert!(timing[k].as_f64().is_some(), "{k} absent in {row:#}");
    }
    in_order(
        timing,
        &[
            "first_sse_event_ms",
            "first_response_ms",
            "first_text_delta_ms",
            "upstream_done_ms",
            "total_handler_ms",
        ],
    );
}

#[tokio::test]
async fn an_http2_channel_carries_its_answers_over_one_h2c_connection_with_whole_timelines() {
    let (addr, sim) = counted_sim().await;
    let base = format!("http://{addr}");
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut h2 = serving("h2c", &base, &["over-h2"]);
        h2.http_version = UpstreamHttp::Http2;
        cfg.channels = vec![h2, serving("plain", &base, &["over-http1"])];
    })
    .await;

    let rows = answered_at_once(&h, &["over-h2"; 8]).await;
    for row in &rows {
        whole_timeline(row);
        assert_eq!(row["attempts"][0]["channel"], "h2c", "{row:#}");
    }
    let stats = sim.stats();
    assert_eq!((stats.requests, stats.http2_requests), (8, 8), "{stats:?}");
    assert_eq!(stats.open_connections, 1, "eight answers, one connection");
    // A non-streamed answer over the same connection.
    let r = h
        .post("/v1/chat/completions", &body_for("chat", "over-h2", false))
        .await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let v: Value = r.json().await.unwrap();
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    assert_eq!(h.row(&id).await["outcome"], "completed");
    assert_eq!(sim.stats().http2_requests, 9);
    assert_eq!(sim.stats().open_connections, 1);

    // The channel left at "auto" on plain http:// speaks HTTP/1.1.
    for row in answered_at_once(&h, &["over-http1"; 2]).await {
        whole_timeline(&row);
    }
    let stats = sim.stats();
    assert_eq!((stats.requests, stats.http2_requests), (11, 9), "{stats:?}");
    h.stop().await;
}

#[tokio::test]
async fn over_tls_each_http_version_offers_what_it_allows_and_the_upstream_agrees() {
    let pki = Pki::new();
    let (addr, sim) = counted_sim().await;
    let both = tls_front_offering(&pki, addr, false, &[b"h2", b"http/1.1"]).await;
    let http1_only = tls_front(&pki, addr, false).await;
    let ca = pki.file("ca.pem");
    let on = |name: &str, port: u16, model: &str, http: UpstreamHttp| {
        let mut c = serving(name, &format!("https://localhost:{port}"), &[model]);
        c.ca_file = Some(ca.clone());
        c.http_version = http;
        c
    };
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        cfg.channels = vec![
            on("auto", both.port, "auto", UpstreamHttp::Auto),
            on("http1", both.port, "http1", UpstreamHttp::Http1),
            on("http2", both.port, "http2", UpstreamHttp::Http2),
            on(
                "http2-to-http1",
                http1_only.port,
                "refused",
                UpstreamHttp::Http2,
            ),
        ];
    })
    .await;

    for (model, agreed, http2) in [
        ("auto", "h2", 1),
        ("http1", "http/1.1", 1),
        ("http2", "h2", 2),
    ] {
        let row = answered_row(&h, model).await;
        whole_timeline(&row);
        in_order(
            &row["attempts"][0],
            &["start_ms", "connected_ms", "tls_ms", "headers_ms"],
        );
        let last = both.agreed.lock().unwrap().last().cloned().flatten();
        assert_eq!(last.as_deref(), Some(agreed), "{model}");
        assert_eq!(sim.stats().http2_requests, http2, "{model}");
    }

    // An upstream that speaks only HTTP/1.1 refuses a channel that offers only HTTP/2: the
    // handshake fails, the upstream's fault.
    let (status, body, id) = chat(&h, "refused").await;
    assert_eq!(status, 502, "{body}");
    let row = h.row(&id).await;
    assert_eq!(row["attempts"][0]["error_class"], "tls", "{row:#}");
    assert_eq!(row["attempts"][0]["fault"], "upstream");
    assert_eq!(http1_only.handshakes.load(Ordering::SeqCst), 0);
    h.stop().await;
}

/// A sim taking `streams` HTTP/2 streams at a time per connection, and a one-thread gateway
/// whose h2c channel to it serves `limited` as the sim's `model`.
async fn h2c_taking(streams: u32, model: &str) -> (Harness, laptime_sim::Sim) {
    let sim = laptime_sim::Sim::with_h2_max_streams(streams);
    let (addr, _) = laptime_sim::spawn_local(sim.clone()).await.unwrap();
    let base = format!("http://{addr}");
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut h2 = channel("h2c", &base, &[]);
        h2.models = Models::Map([("limited".to_string(), model.to_string())].into());
        h2.http_version = UpstreamHttp::Http2;
        cfg.channels = vec![h2];
    })
    .await;
    (h, sim)
}

#[tokio::test]
async fn an_http2_upstream_taking_one_stream_at_a_time_gets_a_connection_per_answer() {
    // One stream at a time per connection. The gateway waits for a new connection's settings
    // before sending more than one stream on it, so none goes past the limit (an upstream
    // refuses those: a refused one would be sent again within its attempt).
    let (h, sim) = h2c_taking(1, "sim-fast").await;

    let rows = answered_at_once(&h, &["limited"; 16]).await;
    for row in &rows {
        let attempts = row["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "one attempt, no failover: {row:#}");
        assert!(attempts[0]["error_class"].is_null(), "{row:#}");
        whole_timeline(row);
    }
    let stats = sim.stats();
    assert_eq!(
        (stats.requests, stats.http2_requests),
        (16, 16),
        "{stats:?}"
    );
    assert_eq!(stats.open_connections, 16, "one stream each");
    h.stop().await;
}

/// `n` answers sent at once, each with its whole timeline, none of which waited for a stream:
/// the sim played all of them at once (one queued behind another on a connection would start
/// only once a stream there ended).
async fn none_waited(h: &Harness, sim: &laptime_sim::Sim, n: usize) {
    for row in answered_at_once(h, &vec!["limited"; n]).await {
        whole_timeline(&row);
    }
    let peak = sim.stats().peak_answers_playing;
    assert_eq!(peak, n as u64, "an answer waited for a stream");
}

#[tokio::test]
async fn past_an_http2_upstreams_stream_limit_answers_go_over_another_connection_not_wait() {
    // Two streams per connection, answers that take 320 ms: a third answer on a connection
    // would wait for one of them, and the wait would look like the upstream's time to answer.
    let (h, sim) = h2c_taking(2, "sim-long").await;

    // At once on a new gateway: the first connection's settings are waited for.
    none_waited(&h, &sim, 6).await;
    let stats = sim.stats();
    assert_eq!((stats.requests, stats.http2_requests), (6, 6), "{stats:?}");
    assert_eq!(stats.open_connections, 3, "six streams, two per connection");
    h.stop().await;
}

#[tokio::test]
async fn over_tls_an_auto_channel_reads_the_upstreams_stream_limit_and_never_sends_past_it() {
    // The sim takes 2 streams per connection behind a TLS front that agrees h2: the limit
    // is read from inside TLS, and 6 answers at once go over 3 connections, none waiting.
    let pki = Pki::new();
    let sim = laptime_sim::Sim::with_h2_max_streams(2);
    let (addr, _) = laptime_sim::spawn_local(sim.clone()).await.unwrap();
    let front = tls_front_offering(&pki, addr, false, &[b"h2", b"http/1.1"]).await;
    let base = format!("https://localhost:{}", front.port);
    let ca = pki.file("ca.pem");
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut c = channel("tls", &base, &[]);
        c.models = Models::Map([("limited".to_string(), "sim-long".to_string())].into());
        c.ca_file = Some(ca.clone());
        cfg.channels = vec![c];
    })
    .await;

    none_waited(&h, &sim, 6).await;
    assert_eq!(sim.stats().http2_requests, 6);
    assert_eq!(
        front.handshakes.load(Ordering::SeqCst),
        3,
        "two streams each"
    );
    let agreed = front.agreed.lock().unwrap().clone();
    assert!(
        agreed.iter().all(|p| p.as_deref() == Some("h2")),
        "{agreed:?}"
    );
    h.stop().await;
}

/// An h2c upstream that refuses its first `refuse` streams unprocessed (`REFUSED_STREAM`) and
/// answers each later one with a whole Chat completion; it counts the streams it saw.
async fn refusing_h2c(refuse: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    const ANSWER: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut conn = h2::server::handshake(tcp).await.unwrap();
                while let Some(Ok((_, mut respond))) = conn.accept().await {
                    if counted.fetch_add(1, Ordering::SeqCst) < refuse {
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    let head = http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(())
                        .unwrap();
                    let mut body = respond.send_response(head, false).unwrap();
                    body.send_data(bytes::Bytes::from_static(ANSWER.as_bytes()), true)
                        .unwrap();
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn a_stream_an_http2_upstream_refuses_unprocessed_is_sent_again_within_its_attempt() {
    let (addr, streams) = refusing_h2c(1).await;
    let base = format!("http://{addr}");
    let h = start_with(|cfg, _| {
        cfg.server.threads = 1;
        let mut c = channel("h2c", &base, &[]);
        c.models = Models::Map([("refused-once".to_string(), "m".to_string())].into());
        c.http_version = UpstreamHttp::Http2;
        cfg.channels = vec![c];
    })
    .await;

    let r = h
        .post(
            "/v1/chat/completions",
            &body_for("chat", "refused-once", false),
        )
        .await;
    assert_eq!(r.status(), 200);
    let id = request_id(&r);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hi", "{v}");
    let row = h.row(&id).await;
    assert_eq!(row["outcome"], "completed", "{row:#}");
    let attempts = row["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "the same attempt, no failover: {row:#}");
    assert!(attempts[0]["error_class"].is_null(), "{row:#}");
    assert_eq!(
        streams.load(Ordering::SeqCst),
        2,
        "refused once, then answered"
    );
    h.stop().await;
}
