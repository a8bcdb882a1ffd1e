//! Config reload for `laptime serve`: the file read again as at start ([`FileSource`]), on
//! SIGHUP ([`on_sighup`]) or through the gateway's `POST /api/admin/reload`, which
//! `laptime reload` ([`request`]) calls. What a reload applies is `laptime_proxy::live`'s.

use std::path::PathBuf;
use std::sync::Arc;

use laptime_proxy::config::{Config, Provider};
use laptime_proxy::live::ReloadSource;

/// The configuration `laptime serve` was started from: its file (else the embedded default),
/// the command line's `--listen` and `--data-dir`, and the embedded sim's address.
pub(crate) struct FileSource {
    pub(crate) path: Option<PathBuf>,
    pub(crate) listen: Option<String>,
    pub(crate) data_dir: Option<PathBuf>,
    /// The embedded sim's base URL, when one was started.
    pub(crate) sim: Option<String>,
}

impl ReloadSource for FileSource {
    fn read(&self) -> Result<Config, Vec<String>> {
        // As `serve` read it at start, keeping each problem apart (the reload's answer lists
        // them).
        let mut read = crate::read_config(self.path.as_deref()).map_err(|e| vec![e])?;
        if let Some(l) = &self.listen {
            read.config.server.listen.clone_from(l);
        }
        if let Some(d) = &self.data_dir {
            read.config.server.data_dir.clone_from(d);
        }
        let mut cfg = read.validate(&crate::env).map_err(|e| e.0)?;
        let mut errs = Vec::new();
        for (i, c) in cfg.channels.iter_mut().enumerate() {
            if c.provider != Provider::Sim || c.base_url.is_some() {
                continue;
            }
            match &self.sim {
                Some(url) => point_at_sim(c, url),
                None => errs.push(format!(
                    "channels[{i}].base_url: a sim channel without base_url uses the embedded \
                     sim, which starts only with `laptime serve`: give it a base_url, or restart"
                )),
            }
        }
        if errs.is_empty() {
            Ok(cfg)
        } else {
            Err(errs)
        }
    }

    fn env(&self, name: &str) -> Option<String> {
        crate::env(name)
    }
}

/// Points a `sim` channel without a `base_url` at the embedded sim.
pub(crate) fn point_at_sim(c: &mut laptime_proxy::config::ChannelConfig, url: &str) {
    c.base_url = Some(url.to_string());
    // In this process, on loopback: never through the environment's proxy.
    c.proxy_url.get_or_insert_with(String::new);
}

/// Reloads the config on every SIGHUP while the gateway runs (the handler is installed when
/// this is called, so a SIGHUP right after "listening" is not lost).
pub(crate) fn on_sighup(app: Arc<laptime_proxy::App>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reloading the config");
                        app.reload().await;
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "no SIGHUP handler: reload with `laptime reload`"),
        }
    }
    #[cfg(not(unix))]
    let _ = app;
}

/// `laptime reload`: asks the gateway at `url` to read its config file again; prints what it
/// did. A refused file is an error (with every problem), and the gateway keeps its config.
pub(crate) async fn request(url: &str, token: &str) -> Result<String, String> {
    use http_body_util::BodyExt;
    let client = laptime_bench::client::client(std::time::Duration::from_secs(30))?;
    let target = format!("{}/api/admin/reload", url.trim_end_matches('/'));
    let req = http::Request::post(&target)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .body(laptime_proxy::outbody::OutBody::full(bytes::Bytes::new()))
        .map_err(|e| format!("bad URL {url}: {e}"))?;
    let resp = client
        .request(req)
        .await
        .map_err(|e| format!("{target}: {e} (is `laptime serve` running there?)"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{target}: {e}"))?
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| format!("{target} ({status}): not a reload answer ({e})"))?;
    if let Some(message) = v["error"]["message"].as_str() {
        return Err(format!("{target} ({status}): {message}"));
    }
    let list = |key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut lines = Vec::new();
    match v["result"].as_str() {
        Some("applied") => lines.push(format!("config reloaded: {}", list("changed").join("; "))),
        Some("unchanged") => lines.push("config unchanged: nothing a reload applies".into()),
        Some("refused") => {
            return Err(format!(
                "config refused; the gateway keeps its running config:\n  {}",
                list("errors").join("\n  ")
            ))
        }
        _ => return Err(format!("{target} ({status}): not a reload answer")),
    }
    let restart = list("needs_restart");
    if !restart.is_empty() {
        lines.push(format!(
            "needs a restart (kept as running): {}",
            restart.join(", ")
        ));
    }
    Ok(lines.join("\n"))
}
