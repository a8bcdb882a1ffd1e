//! The dashboard: a static page at `/` with its script and style at `/assets/*`, compiled into
//! the binary (`include_str!`), hand-written, with no build step and nothing fetched from
//! another origin.
//!
//! The page holds no data. It signs in with a `read` or `admin` token kept in the tab's
//! `sessionStorage` and reads `POST /graphql` with it as a bearer header, like any other client:
//! there is no route here that returns data, so these routes answer without a token.
//!
//! Every response carries a Content-Security-Policy that allows only this origin's script,
//! style and GraphQL endpoint, so no third-party script, font or beacon can load even by
//! mistake; assets are revalidated by `ETag` (a hash of their bytes, computed at compile time).

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, StatusCode};

/// The page: the shell that the script fills in.
pub const INDEX_HTML: &str = include_str!("dashboard/index.html");
/// The script: routing, the API client, the tables and SVG charts.
pub const APP_JS: &str = include_str!("dashboard/app.js");
/// The style.
pub const APP_CSS: &str = include_str!("dashboard/app.css");

/// Only this origin: its script, its style, `POST /graphql`; data: URLs for the empty favicon.
pub const CSP: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// FNV-1a over the bytes, at compile time: the assets' `ETag`.
pub(crate) const fn fnv1a(s: &str) -> u64 {
    let b = s.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// A compiled-in file with its type, policy and `ETag`.
pub(crate) struct Asset {
    pub(crate) body: &'static str,
    pub(crate) content_type: &'static str,
    pub(crate) etag: u64,
    pub(crate) csp: &'static str,
}

const INDEX: Asset = Asset {
    body: INDEX_HTML,
    content_type: "text/html; charset=utf-8",
    etag: fnv1a(INDEX_HTML),
    csp: CSP,
};
const JS: Asset = Asset {
    body: APP_JS,
    content_type: "text/javascript; charset=utf-8",
    etag: fnv1a(APP_JS),
    csp: CSP,
};
const CSS: Asset = Asset {
    body: APP_CSS,
    content_type: "text/css; charset=utf-8",
    etag: fnv1a(APP_CSS),
    csp: CSP,
};

pub(crate) fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", asset.etag);
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        asset.body.into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(asset.csp),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /`: the page.
pub async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

/// `GET /assets/{file}`: the dashboard's `app.js` and `app.css`, the query page's `query.js`
/// and `query.css` ([`crate::query_page`]); anything else is 404.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match file.as_str() {
        "app.js" => serve(&JS, &headers),
        "app.css" => serve(&CSS, &headers),
        "query.js" => serve(&crate::query_page::JS, &headers),
        "query.css" => serve(&crate::query_page::CSS, &headers),
        _ => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_assets() {
        assert!(INDEX_HTML.contains(r#"src="/assets/app.js""#));
        assert!(INDEX_HTML.contains(r#"href="/assets/app.css""#));
        for text in [INDEX_HTML, APP_JS, APP_CSS] {
            // The SVG namespace is a name, never fetched.
            let text = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("http://"), "no absolute http URL");
            assert!(!text.contains("https://"), "no absolute https URL");
            assert!(!text.contains("@import"), "no imported style");
        }
    }

    #[test]
    fn etags_differ_per_asset() {
        assert_ne!(JS.etag, CSS.etag);
        assert_ne!(JS.etag, INDEX.etag);
    }
}
