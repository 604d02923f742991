//! Arbitration while the configuration changes under running programs, across real processes:
//! the manager's file edited, its directory replaced, rejected; an arbiter leaving the
//! manager's list under a running controller; two programs of one name started before the
//! registry.

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use common::eventually;
use nix::sys::signal::Signal;
use robot::{manager_toml, manager_toml_unlisted_last, Robot};
use serde_json::{json, Value};

/// `/robot/manager` as `bus-inspect get --json` prints it.
fn manager_order(r: &Robot) -> Option<Value> {
    let out = r.t.inspect(&["get", "/robot/manager", "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("one line of JSON"))
}

fn order_is(r: &Robot, controllers: Value) -> bool {
    manager_order(r).is_some_and(|m| m["controllers"] == controllers)
}

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

#[test]
fn of_two_controllers_of_one_name_started_before_the_registry_the_refused_one_ends() {
    let mut r = Robot::new(&["x"]);
    let first = r.controller("x", "non_compromising", &["arm/turret=0.5"], 500);
    let second = r.controller("x", "non_compromising", &["arm/turret=-0.5"], 500);
    std::thread::sleep(std::time::Duration::from_millis(300));
    r.t.start_registry();
    r.manager();
    r.arbiter();
    eventually("one of the two ends", || {
        !r.t.is_running(first) || !r.t.is_running(second)
    });
    let (refused, kept, value) = if r.t.is_running(first) {
        (second, first, 0.5)
    } else {
        (first, second, -0.5)
    };
    let out = r.t.finish(refused);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already has a live publisher"), "{err}");
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

#[test]
fn of_two_managers_started_before_the_registry_the_refused_one_ends() {
    let mut r = Robot::new(&["a"]);
    let first = r.manager();
    let second = r.manager();
    std::thread::sleep(std::time::Duration::from_millis(300));
    r.t.start_registry();
    eventually("one of the two ends", || {
        !r.t.is_running(first) || !r.t.is_running(second)
    });
    let refused = if r.t.is_running(first) { second } else { first };
    let out = r.t.finish(refused);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already has a live publisher"), "{err}");
    eventually("the other publishes the order", || {
        order_is(&r, json!(["a"]))
    });
}

#[test]
fn the_manager_keeps_its_order_when_a_new_file_lists_too_many() {
    let mut r = Robot::new(&["a"]);
    r.t.start_registry();
    let m = r.manager();
    eventually("the order is published", || order_is(&r, json!(["a"])));
    let too_long: Vec<String> = (0..126).map(|i| format!("c{i}")).collect();
    std::fs::write(
        &r.manager_file,
        format!("controllers = {too_long:?}\narbiters = [\"arm\"]\n"),
    )
    .unwrap();
    eventually("the manager refuses 126 controllers", || {
        r.t.stderr_of(m).contains("126 controllers listed")
    });
    let too_many: Vec<String> = (0..127).map(|i| format!("a{i}")).collect();
    std::fs::write(
        &r.manager_file,
        format!("controllers = [\"b\"]\narbiters = {too_many:?}\n"),
    )
    .unwrap();
    eventually("the manager refuses 127 arbiters", || {
        r.t.stderr_of(m).contains("127 arbiters listed")
    });
    assert!(r.t.is_running(m), "{}", r.t.stderr_of(m));
    let order = manager_order(&r).unwrap();
    assert_eq!(order["controllers"], json!(["a"]), "{order}");
    assert_eq!(order["revision"], 1, "{order}");
    std::fs::write(&r.manager_file, manager_toml(&["b"])).unwrap();
    eventually("a good file is taken again", || order_is(&r, json!(["b"])));
}

#[test]
fn the_manager_follows_its_file_through_a_replaced_directory() {
    let mut r = Robot::new(&["a"]);
    let etc = r.t.dir().join("etc");
    std::fs::create_dir(&etc).unwrap();
    r.manager_file = etc.join("manager.toml");
    std::fs::write(&r.manager_file, manager_toml(&["a"])).unwrap();
    r.t.start_registry();
    r.manager();
    eventually("the order is published", || order_is(&r, json!(["a"])));
    // As a deployment tool may: the whole directory goes, a new one comes.
    std::fs::remove_dir_all(&etc).unwrap();
    std::fs::create_dir(&etc).unwrap();
    std::fs::write(&r.manager_file, manager_toml(&["b"])).unwrap();
    eventually("the new file is taken", || order_is(&r, json!(["b"])));
    // The new directory is watched from then on: a file written in place in two steps is
    // taken whole. The manager used to keep watching the removed directory only, and its
    // periodic look published the first half.
    let path = r.manager_file.clone();
    write_in_place_in_two_steps(&r, &path, &["c", "b"], json!(["b"]));
}

/// An unlisted controller is told it joins only while a manager runs to place it: with the
/// manager stopped its last order stays in force without the newcomer, and the controller says
/// so; once a manager runs again it is placed last and gets what is free.
#[test]
fn an_unlisted_controller_joins_only_while_a_manager_runs() {
    let (mut r, manager) = Robot::running_unlisted_last(&["a"]);
    eventually("the manager publishes its order", || {
        order_is(&r, json!(["a"]))
    });
    r.t.kill(manager);
    let payload = r.controller("payload", "compromising", &["arm/turret=0.2"], 500);
    eventually("payload says the manager is not running", || {
        r.t.stdout_of(payload)
            .contains("the robot manager is not running")
    });
    eventually("payload says it is not in the order", || {
        r.t.stdout_of(payload)
            .contains("payload arm: not in the robot manager's order")
    });
    let printed = r.t.stdout_of(payload);
    assert!(!printed.contains("joining"), "{printed}");
    r.manager();
    eventually("payload is placed last and gets the turret", || {
        r.t.stdout_of(payload)
            .contains("payload arm: full (owns: turret)")
    });
    assert!(order_is(&r, json!(["a", "payload"])));
}

/// A corrupted slot stops nothing for good: with the manager's slot made inconsistent under the
/// running arbiter (which reads it at every wake-up, here the controllers' refreshes), the
/// arbiter passes over that value and follows the manager's next order. It used to leave the
/// manager's slot out for good and keep the old order until restarted.
#[test]
fn the_arbiter_follows_the_manager_again_after_its_slot_was_corrupted() {
    let mut r = Robot::running(&["a", "b"]);
    r.controller("a", "non_compromising", &["arm/turret=0.5"], 300);
    r.controller("b", "non_compromising", &["arm/turret=-0.5"], 300);
    let turret =
        |owner: &str| json!({"turret": owner, "shoulder": null, "elbow1": null, "elbow2": null});
    r.expect("a first", turret("a"), json!({"a": "full", "b": "denied"}));
    // The latest-sequence word (offset 512) names a buffer that holds another value.
    r.t.overwrite_segment("/robot/manager", 512, &1_000_001u64.to_le_bytes());
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::write(&r.manager_file, manager_toml(&["b", "a"])).unwrap();
    r.expect("b first", turret("b"), json!({"a": "denied", "b": "full"}));
}

/// Writes a config listing `controllers` into `path` in place, in two steps: first without its
/// `unlisted` line, flushed and left open past the manager's periodic look (2 s), while the
/// order must stay `order_before`; then the line, and closed: the manager must take the whole
/// file.
fn write_in_place_in_two_steps(
    r: &Robot,
    path: &std::path::Path,
    controllers: &[&str],
    order_before: Value,
) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    write!(
        file,
        "controllers = {controllers:?}\narbiters = [\"arm\"]\n"
    )
    .unwrap();
    file.sync_data().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2600));
    let order = manager_order(r).unwrap();
    assert_eq!(order["controllers"], order_before, "{order}");
    file.write_all(b"unlisted = \"last\"\n").unwrap();
    drop(file);
    eventually("the whole new file", || {
        manager_order(r)
            .is_some_and(|m| m["controllers"] == json!(controllers) && m["unlisted"] == "last")
    });
}

/// A config written in place in two steps, with a pause between them, is taken once it is
/// closed, never half-written: the manager's periodic look at the file (every 2 s) used to
/// publish the first half (here: the new order without its `unlisted` line).
#[test]
fn the_manager_never_takes_a_half_written_file() {
    let r = Robot::running(&["a", "b"]);
    eventually("the first order", || order_is(&r, json!(["a", "b"])));
    let path = r.manager_file.clone();
    write_in_place_in_two_steps(&r, &path, &["b", "a"], json!(["a", "b"]));
}

/// A manager that starts after the controllers places the unlisted ones in order of
/// appearance (when their processes started), not by name: it used to give `alpha`, which
/// came second, the higher priority.
#[test]
fn a_manager_started_last_places_unlisted_controllers_as_they_came() {
    let mut r = Robot::new(&[]);
    std::fs::write(&r.manager_file, manager_toml_unlisted_last(&[])).unwrap();
    r.t.start_registry();
    r.arbiter();
    for name in ["zeta", "alpha"] {
        r.controller(name, "compromising", &["arm/turret=0.5"], 500);
        let slot = format!("/robot/controller/{name}");
        eventually("its block", || {
            r.t.inspect(&["get", &slot, "--json"]).status.success()
        });
        // Process start times count in clock ticks (10 ms): the next one starts later.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    r.manager();
    eventually("zeta first", || order_is(&r, json!(["zeta", "alpha"])));
}

/// A restarted manager keeps unlisted controllers where the order in force had them (in order
/// of appearance), so ownership does not move: it used to place them in the directory's
/// (name) order, and a turret held by `zeta`, which came first, passed to `alpha`.
#[test]
fn a_restarted_manager_keeps_unlisted_controllers_in_their_places() {
    let (mut r, manager) = Robot::running_unlisted_last(&["a"]);
    r.controller("zeta", "compromising", &["arm/turret=0.5"], 500);
    eventually("zeta is placed", || order_is(&r, json!(["a", "zeta"])));
    r.controller("alpha", "compromising", &["arm/turret=-0.5"], 500);
    eventually("alpha is placed after zeta", || {
        order_is(&r, json!(["a", "zeta", "alpha"]))
    });
    let turret = json!({"turret": "zeta", "shoulder": null, "elbow1": null, "elbow2": null});
    let outcomes = json!({"zeta": "full", "alpha": "denied"});
    r.expect("zeta holds the turret", turret.clone(), outcomes.clone());
    let mut manager = manager;
    // Restarted while the registry runs, then while none runs (the order in force is then read
    // from its slot's segment, not through the registry).
    for registry_down in [false, true] {
        let written = manager_sequence(&r);
        if registry_down {
            r.t.kill_registry();
        }
        r.t.kill(manager);
        manager = r.manager();
        if registry_down {
            std::thread::sleep(std::time::Duration::from_millis(300));
            r.t.start_registry();
        }
        eventually("the new manager publishes", || {
            manager_sequence(&r) > written
        });
        // Long enough for the new manager to have read the registry's directory.
        std::thread::sleep(std::time::Duration::from_millis(500));
        assert!(
            order_is(&r, json!(["a", "zeta", "alpha"])),
            "registry down: {registry_down}: {:?}",
            manager_order(&r)
        );
        r.expect(
            "zeta still holds the turret",
            turret.clone(),
            outcomes.clone(),
        );
    }
}

/// The sequence number of `/robot/manager`'s value (0 while unreadable).
fn manager_sequence(r: &Robot) -> u64 {
    let out = r.t.inspect(&["list", "/robot/manager", "--json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|row| row["sequence"].as_u64())
        .unwrap_or(0)
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

/// A config symlink re-pointed to a file in another directory is followed there too: that file
/// written in place in two steps is taken once closed, never half-written (the manager watched
/// only the directories it found at start, and its periodic look took the first half).
#[test]
fn the_manager_watches_where_its_config_symlink_now_points() {
    let r = Robot::new(&["a", "b"]);
    let dir = r.t.dir();
    let (first, second) = (dir.join("first"), dir.join("second"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    std::fs::write(first.join("manager.toml"), manager_toml(&["a", "b"])).unwrap();
    std::fs::write(second.join("manager.toml"), manager_toml(&["b", "a"])).unwrap();
    std::fs::remove_file(&r.manager_file).unwrap();
    std::os::unix::fs::symlink(first.join("manager.toml"), &r.manager_file).unwrap();
    let mut r = r;
    r.t.start_registry();
    r.manager();
    eventually("the first order", || order_is(&r, json!(["a", "b"])));
    // Re-pointed the way deployment tools do it: a new link renamed over the old one.
    let link = dir.join("manager.toml.new");
    std::os::unix::fs::symlink(second.join("manager.toml"), &link).unwrap();
    std::fs::rename(&link, &r.manager_file).unwrap();
    eventually("the second order", || order_is(&r, json!(["b", "a"])));
    write_in_place_in_two_steps(&r, &second.join("manager.toml"), &["a"], json!(["b", "a"]));
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

/// Waits for `child` to end with exit status 1, saying that `slot` was made anew.
fn ends_saying_made_anew(r: &mut Robot, child: usize, slot: &str) {
    let out = r.t.finish(child);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains(&format!("{slot} was created anew")), "{log}");
}

/// Waits until x alone holds the turret.
fn x_holds_the_turret(r: &Robot) {
    r.expect(
        "x holds the turret",
        json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
}

/// The arbiter's command slot made anew by a registry restarted on its corrupted segment: the
/// simulator and controllers would never see its commands again, so the arbiter ends with the
/// reason (exit status 1: systemd restarts it onto the new slot), and so does the simulator,
/// which reads the old one.
#[test]
fn an_arbiter_whose_command_slot_was_made_anew_ends_to_be_restarted() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let sim = r.t.spawn_bin("robot-sim", &[]);
    let x = r.x_holding_the_turret("30");
    x_holds_the_turret(&r);
    restart_registry_on_corrupted(&mut r, &["/robot/arbiter/arm/command"]);
    ends_saying_made_anew(&mut r, arbiter, "/robot/arbiter/arm/command");
    ends_saying_made_anew(&mut r, sim, "/robot/arbiter/arm/command");
    // Started again (as systemd would): the running controller follows its new command slot,
    // and does not take the arbiter for hung.
    r.arbiter();
    std::thread::sleep(std::time::Duration::from_secs(1));
    eventually(
        "x's last word on the arm is that it holds the turret",
        || {
            r.t.stdout_of(x)
                .rsplit("x arm: ")
                .next()
                .is_some_and(|last| last.starts_with("full (owns: turret)"))
        },
    );
}

/// The manager's slot made anew by a registry restarted on its corrupted segment: the manager
/// ends (its publication no longer reaches anyone) and, started again, publishes a new order;
/// the arbiter, whose subscription still mapped the old memory, subscribes again and follows
/// it without a restart of its own.
#[test]
fn an_arbiter_follows_a_manager_slot_made_anew() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    let manager = r.manager();
    let arbiter = r.arbiter();
    r.x_holding_the_turret("30");
    x_holds_the_turret(&r);
    restart_registry_on_corrupted(&mut r, &["/robot/manager"]);
    ends_saying_made_anew(&mut r, manager, "/robot/manager");
    // Started again (as systemd would), with an order that no longer lists x.
    std::fs::write(&r.manager_file, manager_toml(&["y"])).unwrap();
    r.manager();
    eventually("the arbiter follows the new order", || {
        r.arm_block()
            .is_some_and(|b| b["owners"]["turret"].is_null() && b["outcomes"].get("x").is_none())
    });
    assert!(r.t.is_running(arbiter), "{}", r.t.stderr_of(arbiter));
    assert!(r
        .t
        .stderr_of(arbiter)
        .contains("slots it follows were made anew; subscribing again"));
}

/// Slots made anew under the robot-controller library and the manager: the arm's feedback
/// block (its arbiter, ended by it, is started again) and the registry's directory. The
/// controller follows the new arbiter's feedback, and the manager still places a new unlisted
/// controller, neither restarted.
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
    eventually("the arbiter ends", || {
        !std::path::Path::new(&format!("/proc/{arbiter}")).exists()
            || std::fs::read_to_string(format!("/proc/{arbiter}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    r.arbiter();
    eventually("x follows the new arbiter's feedback", || {
        r.t.stdout_of(x)
            .rsplit("arbiter not running")
            .next()
            .is_some_and(|after| after.contains("x arm: full (owns: turret)"))
    });
    let y = r.controller("y", "compromising", &["arm/shoulder=0.2"], 200);

    eventually("y joins the order and gets the shoulder", || {
        r.t.stdout_of(y).contains("y arm: full (owns: shoulder)")
    });
}
