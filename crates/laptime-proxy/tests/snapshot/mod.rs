//! Snapshot files under `tests/snapshots`: a changed wire shape fails its test until it is
//! reviewed and rewritten with `UPDATE_SNAPSHOTS=1`.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

/// Compares `actual` with the snapshot `name` (rewriting it first when `UPDATE_SNAPSHOTS` is set).
pub fn snapshot(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        actual, expected,
        "snapshot {name} changed; review and rerun with UPDATE_SNAPSHOTS=1"
    );
}
