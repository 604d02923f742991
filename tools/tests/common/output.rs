//! Reading a finished command's output in tests: its stdout when it succeeded, parsed as one
//! JSON value or as JSON lines.

use std::process::Output;

/// The stdout of a command that must have succeeded.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "bus-inspect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

/// The stdout of a command that must have succeeded, as one JSON value.
pub fn json(out: &Output) -> serde_json::Value {
    let text = ok(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not one JSON value ({e}): {text}"))
}

/// The stdout of a command that must have succeeded, one JSON value per line.
pub fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    ok(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}
