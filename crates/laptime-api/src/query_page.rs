//! The GraphQL query page at `GET /graphql`: a small hand-written page (HTML, script and style
//! compiled into the binary) with a token field, a query and variables, that sends
//! `POST /graphql` with `Authorization: Bearer …` to this origin and shows the answer.
//!
//! It replaces GraphiQL, which loaded React and GraphiQL from a public CDN: offline the page
//! never rendered, and online it ran a third-party script on the admin origin. This page fetches
//! nothing from anywhere else, and its Content-Security-Policy says so to the browser too.

use axum::response::Response;
use http::HeaderMap;

use crate::dashboard::{fnv1a, serve, Asset};

/// The page.
pub const INDEX_HTML: &str = include_str!("query_page/index.html");
/// The script (served at `/assets/query.js`).
pub const QUERY_JS: &str = include_str!("query_page/query.js");
/// The style (served at `/assets/query.css`).
pub const QUERY_CSS: &str = include_str!("query_page/query.css");

/// Only this origin's script and style, and `POST /graphql` on it; no frames, forms or base.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const INDEX: Asset = Asset {
    body: INDEX_HTML,
    content_type: "text/html; charset=utf-8",
    etag: fnv1a(INDEX_HTML),
    csp: CSP,
};
pub(crate) const JS: Asset = Asset {
    body: QUERY_JS,
    content_type: "text/javascript; charset=utf-8",
    etag: fnv1a(QUERY_JS),
    csp: CSP,
};
pub(crate) const CSS: Asset = Asset {
    body: QUERY_CSS,
    content_type: "text/css; charset=utf-8",
    etag: fnv1a(QUERY_CSS),
    csp: CSP,
};

/// `GET /graphql`: the page.
pub async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_page_loads_only_its_own_assets_and_sends_a_bearer_token() {
        assert!(INDEX_HTML.contains(r#"src="/assets/query.js""#));
        assert!(INDEX_HTML.contains(r#"href="/assets/query.css""#));
        assert!(QUERY_JS.contains("'Bearer ' + token"));
        assert!(QUERY_JS.contains("fetch('/graphql'"));
        for text in [INDEX_HTML, QUERY_JS, QUERY_CSS] {
            assert!(!text.contains("http://"), "no absolute http URL");
            assert!(!text.contains("https://"), "no absolute https URL");
            assert!(!text.contains("//cdn"), "no CDN");
            assert!(!text.contains("@import"), "no imported style");
            assert!(!text.contains("url("), "no fetched style resource");
        }
        // No inline script or style: the policy would block them.
        assert!(!INDEX_HTML.contains("<script>"));
        assert!(!INDEX_HTML.contains("<style"));
        assert!(!INDEX_HTML.contains(" style="));
        let handlers = INDEX_HTML
            .split_whitespace()
            .filter(|w| w.starts_with("on") && w.contains('='))
            .count();
        assert_eq!(handlers, 0, "no inline event handlers");
    }
}
