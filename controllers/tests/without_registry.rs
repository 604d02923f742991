//! What holds while no registry runs to mark dead writers gone.

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use robot::Robot;
use serde_json::json;

/// A controller killed while no registry runs is still marked alive in its slot. `bus-inspect
/// put` saw its process gone and wrote without `--force`, and the arbiter, which trusts the
/// mark, obeyed the value as the dead controller's for its whole time to live (up to an hour:
/// the chaos audit's turret driven to -2 for a dead process). `put` now marks such a writer
/// gone first, as the registry would have.
#[test]
fn a_block_put_for_a_controller_that_died_unseen_is_not_obeyed() {
    let mut r = Robot::running(&["x"]);
    let x = r.controller("x", "compromising", &["arm/shoulder=0.2"], 200);
    let nobody = json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null});
    r.expect(
        "x holds the shoulder",
        json!({"turret": null, "shoulder": "x", "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
    r.t.kill_registry();
    r.t.kill(x);
    r.expect("x's block expired", nobody.clone(), json!({"x": "expired"}));
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let block = format!(
        r#"{{"name":"x","status":"compromising","commands":{{"arm/turret":-2.0}},"stamp_ns":{stamp},"ttl_ms":3600000}}"#
    );
    let out = r.t.inspect(&["put", "/robot/controller/x", &block]);
    assert!(out.status.success(), "{out:?}");
    let get = r.t.inspect(&["get", "/robot/controller/x"]);
    assert!(
        String::from_utf8_lossy(&get.stdout).contains("writer gone"),
        "{get:?}"
    );
    // The arbiter reads the new block at once: for half a second, it never acts on it.
    let until = std::time::Instant::now() + std::time::Duration::from_millis(500);
    while std::time::Instant::now() < until {
        let block = r.arm_block().expect("the arm's block");
        assert_eq!(block["owners"], nobody, "{block}");
        assert_ne!(block["outcomes"]["x"], "full", "{block}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
