//! An answer that a gateway rate limit applied to carries the limit's headers in the client's
//! dialect, replacing the upstream's headers of the same names (those describe the gateway's
//! provider key, not the client); without a gateway limit the upstream's pass untouched, and
//! headers of names the gateway does not set always pass.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod memory;

use laptime_core::limit::Limits;
use laptime_core::Dialect;
use memory::*;

fn header(resp: &http::Response<axum::body::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

/// A healthy stream with the headers a provider sends about its own key.
fn upstream(dialect: Dialect) -> Reply {
    healthy(dialect)
        .with_header("x-ratelimit-limit-requests", "5000")
        .with_header("x-ratelimit-remaining-requests", "4999")
        .with_header("x-ratelimit-limit-tokens", "2000000")
        .with_header("anthropic-ratelimit-requests-limit", "4000")
        .with_header("anthropic-ratelimit-requests-remaining", "3999")
        .with_header("anthropic-ratelimit-tokens-limit", "400000")
}

#[tokio::test(start_paused = true)]
async fn without_a_gateway_limit_the_upstreams_headers_pass_untouched() {
    for dialect in DIALECTS {
        let gw = gateway(&[("a", upstream(dialect))], |_| {}).await;
        let resp = gw.send(dialect).await;
        assert_eq!(resp.status(), 200, "{dialect}");
        let h = |n| header(&resp, n);
        assert_eq!(h("x-ratelimit-limit-requests").as_deref(), Some("5000"));
        assert_eq!(h("x-ratelimit-remaining-requests").as_deref(), Some("4999"));
        assert_eq!(
            h("anthropic-ratelimit-requests-remaining").as_deref(),
            Some("3999")
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_gateway_limit_replaces_the_upstreams_same_named_headers_in_the_clients_dialect() {
    for dialect in DIALECTS {
        let gw = gateway(&[("a", upstream(dialect))], |_| {}).await;
        let ten = Limits {
            rpm: Some(10),
            ..Limits::default()
        };
        gw.store
            .set_limits(
                &gw.workspace,
                None,
                ten,
                laptime_proxy::clock::now_unix_us(),
            )
            .await
            .unwrap();
        let resp = gw.send(dialect).await;
        assert_eq!(resp.status(), 200, "{dialect}");
        let h = |n| header(&resp, n);
        match dialect {
            Dialect::Messages => {
                assert_eq!(
                    h("anthropic-ratelimit-requests-limit").as_deref(),
                    Some("10")
                );
                assert_eq!(
                    h("anthropic-ratelimit-requests-remaining").as_deref(),
                    Some("9")
                );
                let reset = h("anthropic-ratelimit-requests-reset").unwrap();
                assert!(reset.ends_with('Z') && reset.contains('T'), "{reset}");
                // Names the gateway does not set are the upstream's.
                assert_eq!(h("x-ratelimit-remaining-requests").as_deref(), Some("4999"));
                assert_eq!(
                    h("anthropic-ratelimit-tokens-limit").as_deref(),
                    Some("400000")
                );
            }
            _ => {
                assert_eq!(h("x-ratelimit-limit-requests").as_deref(), Some("10"));
                assert_eq!(h("x-ratelimit-remaining-requests").as_deref(), Some("9"));
                // One request of ten a minute is paid off in six seconds.
                assert_eq!(h("x-ratelimit-reset-requests").as_deref(), Some("6s"));
                assert_eq!(
                    h("x-ratelimit-limit-tokens").as_deref(),
                    Some("2000000"),
                    "no gateway tokens limit: the upstream's stays"
                );
                assert_eq!(
                    h("anthropic-ratelimit-requests-remaining").as_deref(),
                    Some("3999")
                );
            }
        }
        assert_eq!(
            resp.headers()
                .get_all("x-ratelimit-limit-requests")
                .iter()
                .count(),
            1,
            "replaced, not added beside"
        );
    }
}
