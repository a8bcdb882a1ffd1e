//! Egress: how each channel's connections leave the gateway, decided once at start. A channel
//! goes directly or through an HTTP proxy (its `proxy_url`, else the environment's
//! `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` under `NO_PROXY`), and trusts the bundled webpki
//! roots, the operating system's trust store and its own `ca_file`, presenting its client
//! certificate (`client_cert_file` + `client_key_file`) when it has one. Channels with the same
//! way out share one [`Profile`]; the one with no proxy and no files of its own is the default,
//! which every such channel shares. [`open`] opens a profile's connections.
//!
//! The environment's proxies are matched by hyper-util's `Matcher` (curl's `NO_PROXY` rules); it
//! also reads a proxy URL's credentials into `Proxy-Authorization: Basic`. Nothing here ever puts
//! a proxy password or a private key in a message: URLs are shown through [`redacted`].

pub mod open;
pub mod settings;
mod tunnel;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use http::{HeaderValue, Uri};
use hyper_util::client::proxy::matcher::Matcher;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

use crate::config::{ChannelConfig, UpstreamHttp};

/// An HTTP proxy: where the TCP connection goes, and the credentials it is given.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// `http://host:port/`, without credentials.
    uri: Uri,
    /// `Basic …`, marked sensitive (never logged).
    auth: Option<HeaderValue>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("address", &self.address())
            .field("credentials", &self.auth.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Proxy {
    /// Reads `http://[user:password@]host:port`. The reason a URL is refused never quotes it.
    pub fn parse(url: &str) -> Result<Proxy, &'static str> {
        let uri: Uri = url.parse().map_err(|_| "is not a URL")?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => {
                return Err(
                    "must be an http:// proxy (an https upstream is reached through \
                     an HTTP CONNECT tunnel, TLS end to end)",
                )
            }
            None => return Err("needs the scheme: http://host:port"),
        }
        if uri.host().is_none_or(str::is_empty) {
            return Err("has no host");
        }
        if uri.port_u16().is_none() {
            return Err("needs a port (http://host:3128)");
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err("must not have a path");
        }
        // The matcher splits off and percent-decodes the credentials and encodes them as Basic.
        let probe = Uri::from_static("https://upstream.invalid/");
        let intercept = Matcher::builder()
            .all(url)
            .build()
            .intercept(&probe)
            .ok_or("is not a proxy URL")?;
        Ok(Proxy {
            uri: intercept.uri().clone(),
            auth: intercept.basic_auth().cloned(),
        })
    }

    /// `host:port`, for messages (never the credentials).
    pub fn address(&self) -> String {
        self.uri
            .authority()
            .map_or_else(String::new, |a| a.as_str().to_string())
    }

    /// The `Proxy-Authorization` value, when the URL had credentials.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        self.auth.as_ref()
    }

    pub(crate) fn uri(&self) -> &Uri {
        &self.uri
    }
}

/// A URL with the password of its `user:password@` replaced by `***`, scheme or not: for
/// messages and printed configuration. The last `@` ends the userinfo, so a password holding
/// `/` or `@` is hidden whole (over-redacting a path with an `@` is the safe mistake).
pub fn redacted(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let masked = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}{user}{masked}@{host}")
        }
        None => url.to_string(),
    }
}

/// The proxy variables, each read upper-case name first (an empty value counts as unset).
const PROXY_VARS: [(&str, &str); 4] = [
    ("ALL_PROXY", "all_proxy"),
    ("HTTP_PROXY", "http_proxy"),
    ("HTTPS_PROXY", "https_proxy"),
    ("NO_PROXY", "no_proxy"),
];

/// The environment's proxies, read once at start.
pub struct ProxyEnv {
    matcher: Matcher,
}

impl std::fmt::Debug for ProxyEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyEnv")
    }
}

impl ProxyEnv {
    /// Reads `ALL_PROXY`, `HTTP_PROXY`, `HTTPS_PROXY` and `NO_PROXY` (and their lower-case
    /// forms) through `env`. A value that is not an http:// proxy URL is a problem naming its
    /// variable (never ignored: a proxy silently bypassed would break an egress policy).
    pub fn read(env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyEnv, Vec<String>> {
        let mut values: [(String, String); 4] = Default::default();
        let mut errs = Vec::new();
        for (slot, (upper, lower)) in values.iter_mut().zip(PROXY_VARS) {
            let found = [upper, lower]
                .into_iter()
                .find_map(|name| env(name).filter(|v| !v.is_empty()).map(|v| (name, v)));
            if let Some((name, value)) = found {
                if upper != "NO_PROXY" {
                    if let Err(why) = Proxy::parse(&value) {
                        errs.push(format!("environment {name}: {:?} {why}", redacted(&value)));
                    }
                }
                *slot = (name.to_string(), value);
            }
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let [all, http, https, no] = values;
        let matcher = Matcher::builder()
            .all(all.1)
            .http(http.1)
            .https(https.1)
            .no(no.1)
            .build();
        Ok(ProxyEnv { matcher })
    }

    /// The proxy the environment gives for `url` (by its scheme, unless `NO_PROXY` names its
    /// host).
    pub fn for_url(&self, url: &Uri) -> Option<Proxy> {
        let intercept = self.matcher.intercept(url)?;
        Some(Proxy {
            uri: intercept.uri().clone(),
            auth: intercept.basic_auth().cloned(),
        })
    }
}

/// The files a channel's TLS reads, as configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TlsFiles {
    ca_file: Option<PathBuf>,
    client_cert_file: Option<PathBuf>,
    client_key_file: Option<PathBuf>,
}

/// One way out: the proxy (if any) and the TLS settings of the channels that share it.
#[derive(Clone)]
pub struct Profile {
    /// Unique in the process: the key of its clients (two gateways in one process, as in
    /// tests, never share a pool by accident).
    pub id: usize,
    pub proxy: Option<Proxy>,
    /// The HTTP its connections speak; its TLS offers only what this allows.
    pub http: UpstreamHttp,
    tls: Arc<rustls::ClientConfig>,
    files: TlsFiles,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("id", &self.id)
            .field("proxy", &self.proxy)
            .field("http", &self.http)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Profile {
    /// Direct, trusting the bundled and the operating system's roots, no client certificate.
    pub fn direct() -> Result<Profile, String> {
        Ok(Profile {
            id: next_id(),
            proxy: None,
            http: UpstreamHttp::Auto,
            tls: Arc::new(client_config(
                RootCertStore::empty(),
                None,
                UpstreamHttp::Auto,
            )?),
            files: TlsFiles::default(),
        })
    }

    /// Whether a request to `url` goes to this profile's proxy in absolute form (plain HTTP
    /// through a proxy), with the proxy's credentials on the request; an https upstream is
    /// tunnelled, its credentials in the CONNECT.
    pub fn forwards(&self, url: &Uri) -> bool {
        self.proxy.is_some() && url.scheme() == Some(&http::uri::Scheme::HTTP)
    }

    pub(crate) fn tls(&self) -> &Arc<rustls::ClientConfig> {
        &self.tls
    }
}

/// Every profile of a gateway, the default first, and which one each channel takes.
#[derive(Debug)]
pub struct Egress {
    profiles: Vec<Arc<Profile>>,
    /// By channel, in config order; `None` for the default.
    of_channel: Vec<Option<Arc<Profile>>>,
}

impl Egress {
    /// The profiles of the configured channels. Reads the environment's proxies and every
    /// channel's files: every problem is reported, each naming its key.
    pub fn build(
        channels: &[ChannelConfig],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Egress, Vec<String>> {
        let mut errs = Vec::new();
        let proxy_env = ProxyEnv::read(env).map_err(|e| errs.extend(e)).ok();
        let mut profiles = vec![Arc::new(Profile::direct().map_err(|e| vec![e])?)];
        let mut of_channel = Vec::with_capacity(channels.len());
        for (i, c) in channels.iter().enumerate() {
            let key = format!("channels[{i}]");
            let proxy = channel_proxy(c, &key, proxy_env.as_ref(), &mut errs);
            let files = TlsFiles {
                ca_file: c.ca_file.clone(),
                client_cert_file: c.client_cert_file.clone(),
                client_key_file: c.client_key_file.clone(),
            };
            let http = c.http_version;
            if let Err(why) = http_through(c, proxy.as_ref()) {
                errs.push(format!("{key}.http_version: {why}"));
            }
            if proxy.is_none() && files == TlsFiles::default() && http == UpstreamHttp::Auto {
                of_channel.push(None);
                continue;
            }
            if let Some(p) = profiles
                .iter()
                .find(|p| p.proxy == proxy && p.files == files && p.http == http)
            {
                of_channel.push(Some(p.clone()));
                continue;
            }
            let tls = match channel_tls(c, &key) {
                Ok(tls) => tls,
                Err(e) => {
                    errs.extend(e);
                    of_channel.push(None);
                    continue;
                }
            };
            let profile = Arc::new(Profile {
                id: next_id(),
                proxy,
                http,
                tls: Arc::new(tls),
                files,
            });
            profiles.push(profile.clone());
            of_channel.push(Some(profile));
        }
        if errs.is_empty() {
            Ok(Egress {
                profiles,
                of_channel,
            })
        } else {
            Err(errs)
        }
    }

    /// The profile of the `index`-th configured channel; `None` for the default.
    pub fn of_channel(&self, index: usize) -> Option<Arc<Profile>> {
        self.of_channel.get(index).cloned().flatten()
    }

    /// The way out of channels with no proxy and no files of their own.
    pub fn default_profile(&self) -> &Arc<Profile> {
        &self.profiles[0]
    }

    /// How many distinct ways out there are (the default included).
    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }
}

fn next_id() -> usize {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The proxy of one channel: its `proxy_url` (`""`: none), else the environment's for its
/// `base_url`. A channel without a `base_url` (the embedded sim, filled in later) has none.
fn channel_proxy(
    c: &ChannelConfig,
    key: &str,
    env: Option<&ProxyEnv>,
    errs: &mut Vec<String>,
) -> Option<Proxy> {
    match c.proxy_url.as_deref() {
        Some("") => None,
        Some(url) => match Proxy::parse(url) {
            Ok(p) => Some(p),
            Err(why) => {
                errs.push(format!("{key}.proxy_url: {:?} {why}", redacted(url)));
                None
            }
        },
        None => {
            let base: Uri = c.base_url.as_deref()?.parse().ok()?;
            env?.for_url(&base)
        }
    }
}

/// A channel's TLS settings from its files; every problem names its key.
fn channel_tls(c: &ChannelConfig, key: &str) -> Result<rustls::ClientConfig, Vec<String>> {
    let mut errs = Vec::new();
    let https = c
        .base_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"));
    let mut roots = RootCertStore::empty();
    if let Some(path) = &c.ca_file {
        if !https {
            errs.push(format!(
                "{key}.ca_file: the channel's base_url is not https://, so no TLS uses it"
            ));
        }
        match read_certs(path) {
            Ok(certs) => {
                for (n, cert) in certs.into_iter().enumerate() {
                    if let Err(e) = roots.add(cert) {
                        errs.push(format!(
                            "{key}.ca_file: certificate {} in {} is not a valid CA certificate: {e}",
                            n + 1,
                            path.display()
                        ));
                    }
                }
            }
            Err(why) => errs.push(format!("{key}.ca_file: {why}")),
        }
    }
    let client = match (&c.client_cert_file, &c.client_key_file) {
        (None, None) => None,
        (Some(_), None) => {
            errs.push(format!(
                "{key}.client_key_file: required with client_cert_file"
            ));
            None
        }
        (None, Some(_)) => {
            errs.push(format!(
                "{key}.client_cert_file: required with client_key_file"
            ));
            None
        }
        (Some(cert), Some(private)) => {
            if !https {
                errs.push(format!(
                    "{key}.client_cert_file: the channel's base_url is not https://, so no TLS uses it"
                ));
            }
            let chain = read_certs(cert).map_err(|why| format!("{key}.client_cert_file: {why}"));
            let private = read_key(private).map_err(|why| format!("{key}.client_key_file: {why}"));
            match (chain, private) {
                (Ok(chain), Ok(private)) => Some((chain, private)),
                (chain, private) => {
                    errs.extend(chain.err());
                    errs.extend(private.err());
                    None
                }
            }
        }
    };
    if !errs.is_empty() {
        return Err(errs);
    }
    client_config(roots, client, c.http_version).map_err(|why| vec![format!("{key}: {why}")])
}

/// The certificates of a PEM file (one or more).
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{} is not valid PEM", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key of a PEM file. The reason it cannot be read never quotes the file.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
        format!(
            "{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        )
    })
}

/// Whether a channel can speak its `http_version` the way its connections go: h2c cannot go
/// through an HTTP proxy, which forwards plain requests one by one (an https upstream is
/// tunnelled, so HTTP/2 goes end to end inside its TLS).
fn http_through(c: &ChannelConfig, proxy: Option<&Proxy>) -> Result<(), &'static str> {
    let plain = c
        .base_url
        .as_deref()
        .is_some_and(|u| u.starts_with("http://"));
    if c.http_version == UpstreamHttp::Http2 && plain && proxy.is_some() {
        return Err(
            "\"http2\" over a plain http:// base_url (h2c) cannot go through the \
             channel's HTTP proxy; use an https:// upstream, \"auto\", or proxy_url = \"\"",
        );
    }
    Ok(())
}

/// A client TLS configuration trusting the bundled webpki roots, the operating system's store
/// and `extra`, with a client certificate when given, offering (ALPN) what `http` allows:
/// HTTP/2 then HTTP/1.1, or one of them.
fn client_config(
    mut roots: RootCertStore,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    http: UpstreamHttp,
) -> Result<rustls::ClientConfig, String> {
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots.add_parsable_certificates(native_roots().iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots);
    let mut config = match client {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            format!("client_cert_file and client_key_file do not make a client certificate: {e}")
        })?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = match http {
        UpstreamHttp::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        UpstreamHttp::Http1 => vec![b"http/1.1".to_vec()],
        UpstreamHttp::Http2 => vec![b"h2".to_vec()],
    };
    Ok(config)
}

/// The operating system's trust store, read once per process (a store that cannot be read
/// leaves the bundled roots, with a warning).
fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "operating system trust store: some certificates could not be read");
        }
        tracing::debug!(
            certificates = found.certs.len(),
            "operating system trust store read"
        );
        found.certs
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn a_proxy_url_gives_its_address_and_basic_credentials_and_never_shows_the_password() {
        let p = Proxy::parse("http://us%40er:p%3Ass@proxy.internal:3128").unwrap();
        assert_eq!(p.address(), "proxy.internal:3128");
        // "us@er:p:ss" in base64.
        assert_eq!(p.authorization().unwrap(), "Basic dXNAZXI6cDpzcw==");
        assert!(p.authorization().unwrap().is_sensitive());
        assert!(!format!("{p:?}").contains("p%3Ass"));
        assert!(!format!("{p:?}").contains("dXNA"));
        assert_eq!(
            Proxy::parse("http://proxy:3128/").unwrap().authorization(),
            None
        );
        for (bad, why) in [
            ("https://proxy:3128", "http://"),
            ("socks5://proxy:1080", "http://"),
            ("proxy:3128", "scheme"),
            ("http://proxy", "port"),
            ("http://proxy:3128/path", "path"),
            ("http://:3128", ""),
        ] {
            let e = Proxy::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn redaction_hides_the_password_with_or_without_a_scheme() {
        assert_eq!(
            redacted("http://user:s3cret@proxy:3128"),
            "http://user:***@proxy:3128"
        );
        assert_eq!(redacted("user:s3cret@proxy:3128"), "user:***@proxy:3128");
        assert_eq!(
            redacted("http://user:s3:cr@et@proxy:3128/x"),
            "http://user:***@proxy:3128/x"
        );
        assert_eq!(
            redacted("http://user:pa/ss@proxy:3128"),
            "http://user:***@proxy:3128"
        );
        assert_eq!(redacted("http://proxy:3128"), "http://proxy:3128");
    }

    #[test]
    fn the_environment_picks_by_scheme_upper_case_first_and_no_proxy_exempts() {
        let env = env_of(&[
            ("HTTPS_PROXY", "http://a:b@secure-proxy:3128"),
            ("https_proxy", "http://ignored:3128"),
            ("http_proxy", "http://plain-proxy:8080"),
            ("NO_PROXY", "internal.example, 10.0.0.0/8"),
        ]);
        let pe = ProxyEnv::read(&env).unwrap();
        let p = pe.for_url(&uri("https://api.openai.com/v1")).unwrap();
        assert_eq!(p.address(), "secure-proxy:3128");
        assert!(p.authorization().is_some());
        let p = pe.for_url(&uri("http://models.example:8000/v1")).unwrap();
        assert_eq!(p.address(), "plain-proxy:8080");
        assert_eq!(p.authorization(), None);
        assert!(pe
            .for_url(&uri("https://llm.internal.example/v1"))
            .is_none());
        assert!(pe.for_url(&uri("https://10.1.2.3:8443")).is_none());
        let all = env_of(&[("ALL_PROXY", "http://every:1"), ("HTTP_PROXY", "")]);
        let pe = ProxyEnv::read(&all).unwrap();
        assert_eq!(
            pe.for_url(&uri("http://x.example")).unwrap().address(),
            "every:1",
            "an empty variable counts as unset"
        );
        assert!(ProxyEnv::read(&env_of(&[]))
            .unwrap()
            .for_url(&uri("https://x"))
            .is_none());
    }

    #[test]
    fn a_bad_environment_proxy_is_a_problem_naming_the_variable_without_its_password() {
        let env = env_of(&[
            ("https_proxy", "socks5://u:hunter2@proxy:1080"),
            ("HTTP_PROXY", "not a url"),
        ]);
        let errs = ProxyEnv::read(&env).unwrap_err().join("\n");
        assert!(errs.contains("environment https_proxy"), "{errs}");
        assert!(errs.contains("environment HTTP_PROXY"), "{errs}");
        assert!(!errs.contains("hunter2"), "{errs}");
    }

    #[test]
    fn a_profile_forwards_only_plain_http_and_only_through_a_proxy() {
        let mut p = Profile::direct().unwrap();
        assert!(!p.forwards(&uri("http://m:80/v1")));
        p.proxy = Some(Proxy::parse("http://u:pw@proxy:3128").unwrap());
        assert!(p.forwards(&uri("http://m:80/v1")));
        assert!(!p.forwards(&uri("https://m/v1")));
    }

    fn with_http(name: &str, base: &str, http: UpstreamHttp) -> ChannelConfig {
        ChannelConfig {
            name: name.into(),
            base_url: Some(base.into()),
            http_version: http,
            ..ChannelConfig::default()
        }
    }

    #[test]
    fn each_http_version_gets_a_way_out_of_its_own_offering_only_what_it_allows() {
        let channels = [
            with_http("a", "https://a.example", UpstreamHttp::Auto),
            with_http("b", "https://b.example", UpstreamHttp::Http1),
            with_http("c", "http://c.example", UpstreamHttp::Http2),
            with_http("d", "https://d.example", UpstreamHttp::Http2),
        ];
        let egress = Egress::build(&channels, &|_| None).unwrap();
        assert!(
            egress.of_channel(0).is_none(),
            "auto is the default way out"
        );
        let alpn = |i: usize| {
            let p = egress.of_channel(i).unwrap();
            (p.http, p.tls().alpn_protocols.clone())
        };
        assert_eq!(alpn(1), (UpstreamHttp::Http1, vec![b"http/1.1".to_vec()]));
        assert_eq!(alpn(2), (UpstreamHttp::Http2, vec![b"h2".to_vec()]));
        // One way out per distinct setting: c and d share theirs.
        assert_eq!(egress.len(), 3);
        assert_eq!(
            egress.of_channel(2).unwrap().id,
            egress.of_channel(3).unwrap().id
        );
        let default = egress.default_profile();
        assert_eq!(
            default.tls().alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn h2c_through_an_http_proxy_is_refused_naming_the_key() {
        let mut plain = with_http("p", "http://model.internal:8000", UpstreamHttp::Http2);
        plain.proxy_url = Some("http://u:hunter2@proxy:3128".into());
        let errs = Egress::build(&[plain.clone()], &|_| None)
            .unwrap_err()
            .join("\n");
        assert!(errs.contains("channels[0].http_version"), "{errs}");
        assert!(errs.contains("h2c"), "{errs}");
        assert!(!errs.contains("hunter2"), "{errs}");
        // The environment's proxy as well; an https upstream is tunnelled, so it may.
        plain.proxy_url = None;
        let env = env_of(&[("HTTP_PROXY", "http://proxy:3128")]);
        assert!(Egress::build(&[plain.clone()], &env).is_err());
        let mut tunnelled = with_http("t", "https://model.example", UpstreamHttp::Http2);
        tunnelled.proxy_url = Some("http://proxy:3128".into());
        assert!(Egress::build(&[tunnelled], &|_| None).is_ok());
        // Direct, h2c is fine.
        plain.proxy_url = Some(String::new());
        assert!(Egress::build(&[plain], &env).is_ok());
    }
}
