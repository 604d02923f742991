//! Controller blocks written by hand (`bus-inspect put`): what the arbiter makes of them.

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
    let block = block_json("x", "arm/turret", -2.0, 3_600_000);
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

/// A block whose `name` is another controller's, written into a controller's slot (by hand,
/// or by a program that writes another's slot), counts as the slot's controller's; the arbiter
/// took it without a word (chaos audit). It now says so, once.
#[test]
fn a_block_naming_another_controller_is_said() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let x = r.controller("x", "compromising", &["arm/shoulder=0.2"], 200);
    r.expect(
        "x holds the shoulder",
        json!({"turret": null, "shoulder": "x", "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
    r.t.kill(x);
    let block = block_json("teleop", "arm/turret", 1.0, 200);
    for _ in 0..2 {
        let out = r.t.inspect(&["put", "/robot/controller/x", &block]);
        assert!(out.status.success(), "{out:?}");
    }
    common::eventually("the arbiter says the block names teleop", || {
        r.t.stderr_of(arbiter).contains(
            "the block in /robot/controller/x names controller 'teleop': it counts as x's",
        )
    });
    let log = r.t.stderr_of(arbiter);
    assert_eq!(log.matches("names controller 'teleop'").count(), 1, "{log}");
}

/// A compromising controller block named `name`, commanding `resource` to `value`, stamped now,
/// as JSON for `bus-inspect put`.
fn block_json(name: &str, resource: &str, value: f64, ttl_ms: u64) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    json!({"name": name, "status": "compromising", "commands": {resource: value},
        "stamp_ns": stamp as u64, "ttl_ms": ttl_ms, "session": 0})
    .to_string()
}

/// A controller whose newest write cannot be read (its slot's memory corrupt: here the
/// latest-sequence word set far past what was written, naming a buffer whose length is beyond
/// any capacity: `TestBus::make_unreadable`) counts as absent until it writes a
/// block that can be: what it wrote last, a stop say, is not known. The arbiter used to go on
/// executing the block before it for that block's whole time to live (here a minute).
#[test]
fn a_controller_whose_newest_block_cannot_be_read_counts_as_absent() {
    let mut r = Robot::running(&["x"]);
    let x = r.controller("x", "compromising", &["arm/shoulder=0.2"], 60_000);
    r.expect(
        "x holds the shoulder",
        json!({"turret": null, "shoulder": "x", "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
    // Stopped, so that it does not write again (its next write would make the slot whole).
    r.t.signal(x, nix::sys::signal::Signal::SIGSTOP);
    r.t.make_unreadable("/robot/controller/x", 1_000_001);
    common::eventually("the arbiter gives the shoulder up", || {
        r.arm_block()
            .is_some_and(|b| b["owners"]["shoulder"].is_null() && b["outcomes"]["x"] != "full")
    });
    r.t.signal(x, nix::sys::signal::Signal::SIGCONT);
}
