//! Arbitration while the configuration changes under running programs, across real processes:
//! an arbiter leaving the manager's list under a running controller; two programs of one name
//! started before the registry; processes restarted under a controller; slots made anew. (The
//! manager's own file: `manager_file.rs`.)

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use common::eventually;
use nix::sys::signal::Signal;
use robot::{manager_toml, order_is, Robot};
use serde_json::{json, Value};

/// An arbiter the manager stops listing is out of service: its controllers are told their
/// commands for it do not count, and it sends every resource its safe command (it used to keep
/// executing them); listed again, it follows the controllers again.
#[test]
fn a_controller_outlives_its_arbiter_leaving_the_managers_list() {
    let mut r = Robot::running(&["x"]);
    let x = r.x_holding_the_turret("60");
    let held = || json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null});
    r.expect("x holds the turret", held(), json!({"x": "full"}));
    std::fs::write(&r.manager_file, "controllers = [\"x\"]\narbiters = []\n").unwrap();
    eventually("x says its command's arbiter is no longer listed", || {
        r.t.stdout_of(x).contains("unknown arbiter in arm/turret")
    });
    assert!(r.t.is_running(x), "{}", r.t.stderr_of(x));
    // What x is told holds: the arbiter the manager no longer lists commands nothing.
    r.expect(
        "the unlisted arbiter follows no controller",
        json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({}),
    );
    std::fs::write(&r.manager_file, manager_toml(&["x"])).unwrap();
    eventually("x says where it stands again", || {
        let out = r.t.stdout_of(x);
        out.split("unknown arbiter")
            .nth(1)
            .is_some_and(|after| after.contains("x arm: full (owns: turret)"))
    });
    r.expect("x still holds the turret", held(), json!({"x": "full"}));
    r.t.signal(x, Signal::SIGTERM);
    let out = r.t.finish(x);
    assert!(out.status.success(), "{out:?}");
}

/// What the refused one of two controllers named x says.
const TAKEN: &str = "controller name \"x\" is taken: process ";

/// Of two programs of one name (`first`, `second`) started while no registry runs: starts the
/// registry, waits until one of them ends, checks that it was refused (exit status 1, the
/// reason said: `says`), and returns it, with its output.
fn the_refused_one(
    r: &mut Robot,
    first: usize,
    second: usize,
    says: &str,
) -> (usize, std::process::Output) {
    std::thread::sleep(std::time::Duration::from_millis(300));
    r.t.start_registry();
    eventually("one of the two ends", || {
        !r.t.is_running(first) || !r.t.is_running(second)
    });
    let refused = if r.t.is_running(first) { second } else { first };
    let out = r.t.finish(refused);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(says), "{err}");
    (refused, out)
}

#[test]
fn of_two_controllers_of_one_name_started_before_the_registry_the_refused_one_ends() {
    let mut r = Robot::new(&["x"]);
    let first = r.controller("x", "non_compromising", &["arm/turret=0.5"], 500);
    let second = r.controller("x", "non_compromising", &["arm/turret=-0.5"], 500);
    let (refused, _) = the_refused_one(&mut r, first, second, TAKEN);
    r.manager();
    r.arbiter();
    let (kept, value) = if refused == first {
        (second, -0.5)
    } else {
        (first, 0.5)
    };
    r.expect(
        "the other one holds the turret",
        json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
    let out =
        r.t.inspect(&["get", "/robot/arbiter/arm/command", "--json"]);
    let command: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(command["setpoints"]["turret"], value, "{command}");
    assert!(r.t.is_running(kept));
}

/// The same with the arbiter already running (the registry restarted under it): the refused
/// one never reports the other's outcome as its own before it ends (it used to print
/// `x arm: full (owns: turret)`, the other's resources).
#[test]
fn of_two_controllers_of_one_name_the_refused_one_never_reports_the_others_outcome() {
    let mut r = Robot::running(&["x"]);
    r.expect(
        "the arbiter runs",
        json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({}),
    );
    r.t.kill_registry();
    let first = r.controller("x", "non_compromising", &["arm/turret=0.5"], 500);
    let second = r.controller("x", "non_compromising", &["arm/turret=-0.5"], 500);
    let (_, out) = the_refused_one(&mut r, first, second, TAKEN);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!said.contains("full"), "{said}");
}

/// A new list of arbiters while no registry runs: a controller keeps the feedback of the
/// arbiters it already followed (it used to subscribe to them anew, which cannot bind without
/// a registry, and reported its arbiter as not running until a registry ran again).
#[test]
fn a_controller_keeps_its_feedback_when_the_arbiter_list_changes_without_a_registry() {
    let mut r = Robot::running(&["x"]);
    let x = r.x_holding_the_turret("30");
    eventually("x holds the turret", || {
        r.t.stdout_of(x).contains("x arm: full (owns: turret)")
    });
    r.t.kill_registry();
    std::fs::write(
        &r.manager_file,
        "controllers = [\"x\"]\narbiters = [\"arm\", \"drive\"]\n",
    )
    .unwrap();
    eventually("x follows the new list", || {
        r.t.stdout_of(x).contains("x drive:")
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let said = r.t.stdout_of(x);
    let last_arm = said.lines().rfind(|l| l.starts_with("x arm:"));
    assert_eq!(last_arm, Some("x arm: full (owns: turret)"), "{said}");
}

#[test]
fn of_two_managers_started_before_the_registry_the_refused_one_ends() {
    let mut r = Robot::new(&["a"]);
    let first = r.manager();
    let second = r.manager();
    the_refused_one(
        &mut r,
        first,
        second,
        "another robot-manager publishes the priority order on /robot/manager",
    );
    eventually("the other publishes the order", || {
        order_is(&r, json!(["a"]))
    });
}

/// The arm's owners with only the turret owned, by `owner`.
fn turret(owner: &str) -> serde_json::Value {
    json!({"turret": owner, "shoulder": null, "elbow1": null, "elbow2": null})
}

/// Controllers a and b, non-compromising, both after the turret; once a holds it, the
/// manager's slot is made unreadable (`TestBus::make_unreadable`: its latest-sequence word
/// overwritten to name a buffer whose length is beyond any capacity).
fn a_holds_the_turret_then_the_order_is_overwritten(r: &mut Robot) {
    r.controller("a", "non_compromising", &["arm/turret=0.5"], 300);
    r.controller("b", "non_compromising", &["arm/turret=-0.5"], 300);
    r.expect("a first", turret("a"), json!({"a": "full", "b": "denied"}));
    r.t.make_unreadable("/robot/manager", 1_000_001);
}

/// A corrupted slot stops nothing for good: with the manager's slot made inconsistent under the
/// running arbiter (which reads it at every wake-up, here the controllers' refreshes), the
/// arbiter passes over that value and follows the manager's next order. It used to leave the
/// manager's slot out for good and keep the old order until restarted.
#[test]
fn the_arbiter_follows_the_manager_again_after_its_slot_was_corrupted() {
    let mut r = Robot::running(&["a", "b"]);
    a_holds_the_turret_then_the_order_is_overwritten(&mut r);
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(&r.manager_file, manager_toml(&["b", "a"])).unwrap();
    r.expect("b first", turret("b"), json!({"a": "denied", "b": "full"}));
}

/// The manager writes its order only when it changes, so a slot overwritten under it stayed
/// unreadable: an arbiter started then found no order (every resource unowned) until the
/// order changed (shared-memory soak: one bit of the latest-value word). The manager reads its
/// slot back every two seconds and writes the order again.
#[test]
fn the_manager_writes_its_order_again_when_its_slot_was_overwritten() {
    let (mut r, manager, arbiter) = Robot::running_with_children(&["a", "b"]);
    a_holds_the_turret_then_the_order_is_overwritten(&mut r);
    r.t.kill(arbiter);
    r.arbiter();
    r.expect(
        "a first again",
        turret("a"),
        json!({"a": "full", "b": "denied"}),
    );
    eventually("the manager says why it wrote again", || {
        r.t.stderr_of(manager)
            .contains("does not read back as the order published")
    });
}

/// A command is checked against running arbiters only: the block an ended arbiter left says
/// nothing of the resources it will have when it runs again. A controller started while the
/// arm arbiter is down, for a resource the new arm config adds, gets it once that arbiter runs
/// (it used to exit at once: "unknown resource", checked against the old block).
#[test]
fn a_command_waits_for_the_arbiter_that_will_have_its_resource() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    eventually("the old arm arbiter publishes", || r.arm_block().is_some());
    r.t.kill(arbiter);
    let x = r.controller("x", "compromising", &["arm/gripper=1"], 500);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(r.t.is_running(x), "{}", r.t.stderr_of(x));
    let grown = r.t.dir().join("arm-with-gripper.toml");
    let config = format!(
        "{}[[resources]]\nname = \"gripper\"\nkind = \"switch\"\n",
        robot::ARM
    );
    std::fs::write(&grown, config).unwrap();
    r.t.spawn_bin("arbiter", &["--config", grown.to_str().unwrap()]);
    r.expect(
        "x holds the gripper",
        json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null, "gripper": "x"}),
        json!({"x": "full"}),
    );
    eventually("x says so", || {
        r.t.stdout_of(x).contains("x arm: full (owns: gripper)")
    });
}

/// A controller started again under the same name reports its own outcome, never the one the
/// arbiter gave the process before it (`expired`, from the arbiter's last block, read before
/// the arbiter had seen the new block: here the arbiter is stopped meanwhile).
#[test]
fn a_restarted_controller_never_reports_its_predecessors_outcome() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let first = r.x_holding_the_turret("0.5");
    assert!(r.t.finish(first).status.success());
    r.expect(
        "the first x has ended",
        json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "expired"}),
    );
    r.t.signal(arbiter, Signal::SIGSTOP);
    let second = r.x_holding_the_turret("1");
    std::thread::sleep(std::time::Duration::from_millis(400));
    r.t.signal(arbiter, Signal::SIGCONT);
    let out = r.t.finish(second);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(!printed.contains("expired"), "{printed}");
    let outcomes: Vec<&str> = printed
        .lines()
        .filter(|l| l.starts_with("x arm:") && !l.contains("not seen yet"))
        .collect();
    assert_eq!(
        outcomes.first(),
        Some(&"x arm: full (owns: turret)"),
        "{printed}"
    );
}

/// What a controller knows of the arbiters' blocks from before its first publish survives the
/// manager changing its arbiter list: with the arm arbiter stopped, a restarted `x` reads the
/// block its predecessor left (`full`, owning the turret) and must not print it, also after
/// the list grows; it used to, once the list changed.
#[test]
fn a_predecessors_outcome_stays_hidden_when_the_arbiter_list_changes() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let first = r.x_holding_the_turret("20");
    eventually("the first x holds the turret", || {
        r.t.stdout_of(first).contains("x arm: full (owns: turret)")
    });
    r.t.signal(arbiter, Signal::SIGSTOP);
    r.t.signal(first, Signal::SIGTERM);
    assert!(r.t.finish(first).status.success());
    let second = r.x_holding_the_turret("20");
    eventually("the second x waits for the arbiter", || {
        r.t.stdout_of(second).contains("x arm: not seen yet")
    });
    std::fs::write(
        &r.manager_file,
        "controllers = [\"x\"]\narbiters = [\"arm\", \"gripper\"]\n",
    )
    .unwrap();
    eventually("the second x follows the new list", || {
        r.t.stdout_of(second).contains("x gripper:")
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let printed = r.t.stdout_of(second);
    assert!(!printed.contains("x arm: full"), "{printed}");
    r.t.signal(arbiter, Signal::SIGCONT);
    eventually("the second x holds the turret", || {
        r.t.stdout_of(second).contains("x arm: full (owns: turret)")
    });
    r.t.signal(second, Signal::SIGTERM);
    assert!(r.t.finish(second).status.success());
}

/// Kills the registry, corrupts the header of each of `slots` (as stray writes would), and
/// starts the registry again: it cannot adopt them and makes them anew.
fn restart_registry_on_corrupted(r: &mut Robot, slots: &[&str]) {
    r.t.kill_registry();
    for slot in slots {
        r.t.overwrite_segment(slot, 0, b"garbage!");
    }
    r.t.start_registry();
}

/// Waits until x alone holds the turret.
fn x_holds_the_turret(r: &Robot) {
    r.expect(
        "x holds the turret",
        json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
}

/// Says whether `child`'s log says that its publication of `slot` goes on in the slot made anew.
fn goes_on_in_the_new_slot(r: &Robot, child: usize, slot: &str) -> bool {
    r.t.stderr_of(child)
        .contains(&format!("{slot}: the registry made the slot anew"))
}

/// The arbiter's command slot made anew by a registry restarted on its corrupted segment: the
/// arbiter goes on writing its commands into the new slot, and the simulator, which read the
/// old one, subscribes again and executes them; neither restarted. The running controller
/// follows that slot and does not take the arbiter for hung.
#[test]
fn an_arbiter_whose_command_slot_was_made_anew_goes_on_in_it() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let sim = r.t.spawn_bin("robot-sim", &[]);
    let turret_state = |r: &Robot| {
        r.arm_block()
            .and_then(|b| b["resources"]["turret"]["state"].as_f64())
    };
    let x = r.x_holding_the_turret("30");
    x_holds_the_turret(&r);
    eventually("the turret reaches 1", || {
        turret_state(&r).is_some_and(|s| (s - 1.0).abs() < 0.01)
    });
    r.t.signal(x, Signal::SIGTERM);
    assert!(r.t.finish(x).status.success());
    restart_registry_on_corrupted(&mut r, &["/robot/arbiter/arm/command"]);
    eventually("the arbiter goes on in the new command slot", || {
        goes_on_in_the_new_slot(&r, arbiter, "/robot/arbiter/arm/command")
    });
    eventually("the simulator subscribes again", || {
        r.t.stderr_of(sim)
            .contains("command slots it follows were made anew; subscribing again")
    });
    // A new command, through the new slot, reaches the simulator's turret.
    let x_again = r.controller("x", "compromising", &["arm/turret=-0.5"], 500);
    eventually("the turret reaches -0.5", || {
        turret_state(&r).is_some_and(|s| (s + 0.5).abs() < 0.01)
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let last = r.t.stdout_of(x_again);
    assert!(
        last.rsplit("x arm: ")
            .next()
            .is_some_and(|l| l.starts_with("full (owns: turret)")),
        "{last}"
    );
    assert!(r.t.is_running(arbiter), "{}", r.t.stderr_of(arbiter));
    assert!(r.t.is_running(sim), "{}", r.t.stderr_of(sim));
}

/// The manager's slot made anew by a registry restarted on its corrupted segment: the manager
/// goes on in the new slot (its order carried over), and the arbiter, whose subscription still
/// mapped the old memory, subscribes again and follows the orders published there, neither
/// restarted.
#[test]
fn an_arbiter_follows_a_manager_slot_made_anew() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    let manager = r.manager();
    let arbiter = r.arbiter();
    r.x_holding_the_turret("30");
    x_holds_the_turret(&r);
    restart_registry_on_corrupted(&mut r, &["/robot/manager"]);
    eventually("the manager goes on in the new slot", || {
        goes_on_in_the_new_slot(&r, manager, "/robot/manager")
    });
    x_holds_the_turret(&r);
    // A new order, from the same manager, that no longer lists x.
    std::fs::write(&r.manager_file, manager_toml(&["y"])).unwrap();
    eventually("the arbiter follows the new order", || {
        r.arm_block()
            .is_some_and(|b| b["owners"]["turret"].is_null() && b["outcomes"].get("x").is_none())
    });
    assert!(r.t.is_running(arbiter), "{}", r.t.stderr_of(arbiter));
    assert!(r.t.is_running(manager), "{}", r.t.stderr_of(manager));
    assert!(r
        .t
        .stderr_of(arbiter)
        .contains("slots it follows were made anew; subscribing again"));
}

/// Slots made anew under the robot-controller library and the manager: the arm's feedback
/// block (its arbiter goes on in the new one) and the registry's directory. The controller
/// follows the arbiter's feedback there, and the manager still places a new unlisted
/// controller; none of them restarted.
#[test]
fn controllers_and_the_manager_follow_slots_made_anew() {
    let (mut r, _manager) = Robot::running_unlisted_last(&["x"]);
    let arbiter = r.t.pid(2);
    let x = r.x_holding_the_turret("60");
    eventually("x holds the turret", || {
        r.t.stdout_of(x).contains("x arm: full (owns: turret)")
    });
    restart_registry_on_corrupted(
        &mut r,
        &["/robot/arbiter/arm", bus::directory::DIRECTORY_SLOT],
    );
    eventually("the arbiter goes on in its new feedback slot", || {
        goes_on_in_the_new_slot(&r, 2, "/robot/arbiter/arm")
    });
    eventually("x subscribes again to the arbiter's feedback", || {
        r.t.stderr_of(x)
            .contains("slots it follows were made anew; subscribing again")
    });
    assert!(
        std::path::Path::new(&format!("/proc/{arbiter}")).exists(),
        "the arbiter went on"
    );
    let y = r.controller("y", "compromising", &["arm/shoulder=0.2"], 200);

    eventually("y joins the order and gets the shoulder", || {
        r.t.stdout_of(y).contains("y arm: full (owns: shoulder)")
    });
    // x read its feedback from the new slot all along: its last word on the arm is still that
    // it holds the turret.
    let printed = r.t.stdout_of(x);
    let last = printed.rsplit("x arm: ").next().unwrap_or_default();
    assert!(last.starts_with("full (owns: turret)"), "{printed}");
}

/// A resource nobody owns is held where it was measured when released. Its driver restarted
/// (the joint sagged, or was moved by hand, while none ran) measures it elsewhere: the arbiter
/// kept sending the old position, and the new driver moved a joint no controller asked to move
/// (chaos audit). The hold is now taken again where the new driver measures the joint.
#[test]
fn a_restarted_driver_holds_a_released_joint_where_it_measures_it() {
    let mut r = Robot::running(&["x"]);
    let shoulder_command = |r: &Robot| {
        r.arm_block()
            .and_then(|b| b["resources"]["shoulder"]["command"].as_f64())
    };
    let sim = r.t.spawn_bin("robot-sim", &[]);
    let x = r.controller("x", "compromising", &["arm/shoulder=1.2"], 200);
    eventually("the shoulder reaches 1.2", || {
        r.arm_block().is_some_and(|b| {
            b["resources"]["shoulder"]["state"]
                .as_f64()
                .is_some_and(|s| (s - 1.2).abs() < 0.01)
        })
    });
    r.t.signal(x, Signal::SIGTERM);
    eventually("released, the shoulder is held", || {
        r.arm_block()
            .is_some_and(|b| b["owners"]["shoulder"].is_null())
    });
    assert!(shoulder_command(&r).is_some_and(|c| (c - 1.2).abs() < 0.05));
    // A new simulator starts with every joint at 0. Until the arbiter has read its first
    // state it executes the hold it finds (a step or two towards 1.2, about 0.1 each).
    r.t.kill(sim);
    r.t.spawn_bin("robot-sim", &[]);
    eventually("the hold follows the new driver's measurement", || {
        shoulder_command(&r).is_some_and(|c| c < 0.4)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let c = shoulder_command(&r);
    assert!(c.is_some_and(|c| c < 0.4), "{c:?}");
}

/// Controller c1 commanding the arm's turret and `drive_command` on a drive arbiter that does
/// not run, once the arm has accepted its command and the manager has then dropped the arm
/// (c1 says so); returns the robot and c1's child index.
fn arm_accepted_then_dropped(drive_command: &str) -> (Robot, usize) {
    let mut r = Robot::new(&["c1"]);
    let with_drive = |arbiters: &str| {
        manager_toml(&["c1"]).replace("arbiters = [\"arm\"]", &format!("arbiters = {arbiters}"))
    };
    std::fs::write(&r.manager_file, with_drive(r#"["arm", "drive"]"#)).unwrap();
    r.t.start_registry();
    r.manager();
    r.arbiter();
    let c1 = r.controller(
        "c1",
        "compromising",
        &["arm/turret=0.1", drive_command],
        300,
    );
    eventually("c1 holds the turret", || {
        r.t.stdout_of(c1).contains("c1 arm: full")
    });
    std::fs::write(&r.manager_file, with_drive(r#"["drive"]"#)).unwrap();
    eventually("c1 says the arm no longer counts", || {
        r.t.stdout_of(c1).contains("unknown arbiter in arm/turret")
    });
    (r, c1)
}

/// A command an arbiter has accepted and that a change of configuration later refuses (the
/// manager drops that arbiter) is said, not fatal, also while another arbiter the controller
/// commands has not run yet: acceptance was one flag for all arbiters, so the controller ended
/// as if its command line were wrong (arbitration chaos soak).
#[test]
fn an_arbiter_dropped_after_it_accepted_the_command_is_said_while_another_never_ran() {
    let (mut r, c1) = arm_accepted_then_dropped("drive/left=0.2");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(r.t.is_running(c1), "{}", r.t.stderr_of(c1));
}

/// The same, and then the other arbiter starts and refuses its command (a mistake on the
/// command line): the controller ends on it. Only the first refusal was looked at, the first
/// arbiter's, which is no longer fatal, and the mistake went unsaid.
#[test]
fn a_command_line_mistake_is_fatal_behind_another_arbiters_refusal() {
    let (mut r, c1) = arm_accepted_then_dropped("drive/typo=0.2");
    let drive = r.t.dir().join("drive.toml");
    std::fs::write(&drive, "name = \"drive\"\n[[resources]]\nname = \"left\"\n").unwrap();
    r.t.spawn_bin("arbiter", &["--config", drive.to_str().unwrap()]);
    let out = r.t.finish(c1);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown resource drive/typo"),
        "{out:?}"
    );
}
