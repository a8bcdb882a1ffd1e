//! Arbitrary GraphQL requests (the CI smoke of `fuzz/`'s GraphQL target) through the assembled
//! router over a real SQLite store, as an admin: any query text and variables, well-formed or
//! not, are answered 200 or 400 with a JSON body (an error is the client's, never a 500 or a
//! panic), and the store still answers afterwards.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use laptime_proxy::config::Config;
use laptime_proxy::server::Gateway;
use laptime_store::auth;
use laptime_store::Store;
use proptest::prelude::*;
use tower::ServiceExt;

// Argument values by type, each list with a wrong type or an odd value among the right ones.
const WS: &[&str] = &["\"default\"", "\"default\"", "\"nope\"", "$v", "5"];
const INT: &[&str] = &["5", "0", "-1", "500", "100000000000", "$w", "\"x\""];
const WINDOW: &[&str] = &[
    "{last: \"1h\"}",
    "{last: \"15m\"}",
    "{last: \"-5m\"}",
    "{last: \"99999999d\"}",
    "{last: \"\"}",
    "{from: \"2020-01-01T00:00:00Z\", to: \"2019-01-01T00:00:00Z\"}",
    "{from: \"x\"}",
    "null",
    "{nope: 1}",
];
const GROUP_BY: &[&str] = &[
    "[MODEL]",
    "[MODEL, DIALECT, STATUS]",
    "[CLASSIFICATION, CLASSIFICATION]",
    "[]",
    "null",
    "MODEL",
    "[\"MODEL\"]",
];
const FILTER: &[&str] = &[
    "null",
    "{model: \"m\"}",
    "{status: 500, stream: true}",
    "{outcome: \"completed\", dialect: \"chat\"}",
    "{nope: 1}",
    "{status: \"x\"}",
];
const STR: &[&str] = &[
    "\"w1\"",
    "\"w2\"",
    "\"\"",
    "null",
    "\"\\u0000\"",
    "\"default\"",
    "$v",
    "7",
];
const SCOPE: &[&str] = &["READ", "ADMIN", "PROXY", "\"READ\"", "OWNER"];

/// Tokens for edits that break a well-formed query.
const JUNK: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    ":",
    ",",
    "$",
    "...",
    "\"",
    "#",
    "@skip(if: true)",
    "__typename",
    "\n",
];

/// One root field of the schema with arguments picked by `i`.
fn root(mutation: bool, kind: u8, i: [prop::sample::Index; 4]) -> String {
    // Mostly one of the first `good` values of each list (well typed), else any: a query with
    // several fields then mostly validates, so the resolvers and the store run.
    let pick = |(list, good): (&[&str], usize), k: usize| {
        let n = i[k].index(100);
        let at = if n < 85 { n % good } else { n % list.len() };
        list[at].to_string()
    };
    let (ws, int, str_) = (pick((WS, 3), 0), pick((INT, 5), 1), pick((STR, 4), 2));
    if mutation {
        return match kind % 4 {
            0 => format!(
                "createWorkspace(name: {str_}, group: {}) {{ id name group }}",
                pick((STR, 4), 3)
            ),
            1 => format!("setWorkspaceGroup(workspaceId: {ws}, group: {str_}) {{ id group }}"),
            2 => format!(
                "createToken(workspaceId: {ws}, scope: {}) {{ keyId scope }}",
                pick((SCOPE, 3), 3)
            ),
            _ => format!("revokeToken(workspaceId: {ws}, keyId: {str_})"),
        };
    }
    match kind % 8 {
        0 => "me { workspaceId workspaceName keyId scope group }".into(),
        1 => "workspaces { id name group }".into(),
        2 => "channels { name provider group models inflight circuit }".into(),
        3 => format!("tokens(workspaceId: {ws}) {{ keyId scope group createdAt revokedAt }}"),
        4 => format!(
            "recentRequests(workspaceId: {ws}, limit: {int}, filter: {}) {{ requestId model \
             latencyMs timing {{ firstTextDeltaMs }} attempts {{ channel fault }} }}",
            pick((FILTER, 4), 2)
        ),
        5 => format!("request(workspaceId: {ws}, requestId: {str_}) {{ requestId outcome flags }}"),
        6 => format!(
            "usage(workspaceId: {ws}, window: {}, groupBy: {}, filter: {}) {{ window {{ from to }} \
             percentileMethod rollup {{ requestCount errorRate ttftMs {{ p50 p99 count nullCount }} }} \
             groups {{ key {{ dimension value }} rollup {{ requestCount }} }} recent(limit: {int}) {{ requestId }} }}",
            pick((WINDOW, 2), 1),
            pick((GROUP_BY, 4), 2),
            pick((FILTER, 4), 3)
        ),
        _ => format!("x{kind}: __schema {{ types {{ name }} }}"),
    }
}

/// A query built from the schema's own fields with arbitrary arguments (mostly well-formed, so
/// the resolvers and the store run), then sometimes broken by an edit.
fn query() -> impl Strategy<Value = String> {
    let op = prop::sample::select(vec![
        (false, ""),
        (false, ""),
        (false, ""),
        (true, "mutation"),
        (true, "mutation"),
        (false, "query Q($v: ID, $w: Int)"),
        (true, "mutation M($v: ID!, $w: Int)"),
        (false, "subscription"),
    ]);
    (
        op,
        prop::bool::weighted(0.8),
        prop::collection::vec((any::<u8>(), any::<[prop::sample::Index; 4]>()), 1..4),
        prop::option::weighted(
            0.3,
            (
                any::<prop::sample::Index>(),
                prop::sample::select(JUNK),
                any::<bool>(),
            ),
        ),
    )
        .prop_map(|((mutation, op), aliased, roots, edit)| {
            let fields: Vec<String> = roots
                .into_iter()
                .enumerate()
                .map(|(n, (kind, i))| {
                    let f = root(mutation, kind, i);
                    if aliased {
                        format!("a{n}: {f}")
                    } else {
                        f
                    }
                })
                .collect();
            let mut q = format!("{op} {{ {} }}", fields.join(" "));
            if let Some((at, junk, delete)) = edit {
                let mut i = at.index(q.len() + 1);
                while !q.is_char_boundary(i) {
                    i -= 1;
                }
                if delete && i < q.len() {
                    q.remove(i);
                } else {
                    q.insert_str(i, junk);
                }
            }
            q
        })
}

/// Variables: an object of `v` and `w` (sometimes another key), with values of any JSON type.
fn variables() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        prop::sample::select(vec!["default", "nope", "", "w1"]).prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{0,3}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map(prop::sample::select(vec!["v", "w", "x"]), value, 0..3).prop_map(
        |m| serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
    )
}

/// The body: a GraphQL request, or (sometimes) bytes that are not one.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => (query(), variables(), any::<bool>()).prop_map(|(q, v, with_vars)| {
            let mut r = serde_json::json!({"query": q});
            if with_vars {
                r["variables"] = v;
            }
            serde_json::to_vec(&r).unwrap()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
}

#[test]
fn any_graphql_request_is_answered_as_a_client_error_or_data_never_a_crash() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (router, admin, _gateway) = rt.block_on(async {
        let store = Store::open_dir(dir.path()).unwrap();
        let admin = store
            .with_conn(|c| auth::bootstrap(c, None, laptime_proxy::clock::now_unix_us()))
            .unwrap()
            .unwrap()
            .token;
        let mut cfg = Config::embedded_default(&|_| None);
        cfg.channels[0].base_url = Some("http://127.0.0.1:9".into());
        cfg.server.data_dir = dir.path().to_path_buf();
        let gateway = Gateway::start(cfg, store, &|_| None).await.unwrap();
        let router = laptime_api::router(gateway.app.clone());
        (router, admin, gateway)
    });
    let ask = |body: Vec<u8>| {
        rt.block_on(async {
            let resp = router
                .clone()
                .oneshot(
                    Request::post("/graphql")
                        .header("authorization", format!("Bearer {admin}"))
                        .header("content-type", "application/json")
                        .body(Body::from(body))
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (status, bytes)
        })
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(300));
    runner
        .run(&body(), |body| {
            let (status, bytes) = ask(body);
            prop_assert!(
                status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
                "{status}"
            );
            let json: Result<serde_json::Value, _> = serde_json::from_slice(&bytes);
            prop_assert!(json.is_ok(), "{}", String::from_utf8_lossy(&bytes));
            Ok(())
        })
        .unwrap();
    let (status, bytes) = ask(br#"{"query":"{ me { scope } }"}"#.to_vec());
    assert_eq!(status, StatusCode::OK);
    assert!(
        String::from_utf8_lossy(&bytes).contains("ADMIN"),
        "{bytes:?}"
    );
}
