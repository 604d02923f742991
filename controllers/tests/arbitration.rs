//! Control arbitration across real processes: `registry-server`, `robot-manager`, `arbiter` and
//! `robot-controller`s, checked through `bus-inspect get /robot/arbiter/arm --json`.

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use std::time::Instant;

use common::{eventually, TestBus};
use nix::sys::signal::Signal;
use robot::{manager_toml, manager_toml_unlisted_last, Robot, ARM};
use serde_json::{json, Value};

#[test]
fn the_patents_arm_example_across_processes() {
    let mut r = Robot::running(&["a", "b", "n"]);
    let [a, b, _n] = r.abn(500);
    r.expect_patent_example("initial");
    let block = r.arm_block().unwrap();
    assert_eq!(block["resources"]["shoulder"]["command"], 0.3);
    assert_eq!(block["resources"]["turret"]["command"], 1.0);
    assert_eq!(
        block["resources"]["turret"]["limits"],
        json!({"min": -3.0, "max": 3.0})
    );

    // A exits cleanly: it releases at once and B, compromising, gets both of its resources. A's
    // writer is then gone, so its block counts as absent: outcome `expired`.
    r.t.signal(a, Signal::SIGTERM);
    let out = r.t.finish(a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("a arm: full (owns: shoulder)"),
        "{printed}"
    );
    r.expect(
        "after a exits",
        json!({"turret": "b", "shoulder": "b", "elbow1": null, "elbow2": null}),
        json!({"a": "expired", "b": "full", "n": "denied"}),
    );
    // B exits too: N, non-compromising, finally gets all three at once.
    r.t.signal(b, Signal::SIGTERM);
    r.t.finish(b);
    r.expect(
        "after b exits",
        json!({"turret": null, "shoulder": "n", "elbow1": "n", "elbow2": "n"}),
        json!({"a": "expired", "b": "expired", "n": "full"}),
    );
}

#[test]
fn a_killed_controller_loses_its_resources_within_its_time_to_live() {
    let (mut r, _, arbiter) = Robot::running_with_children(&["a", "b", "n"]);
    let [a, _b, _n] = r.abn(300);
    r.expect_patent_example("initial");
    let killed = Instant::now();
    r.t.signal(a, Signal::SIGKILL);
    r.expect(
        "after a is killed",
        json!({"turret": "b", "shoulder": "b", "elbow1": null, "elbow2": null}),
        json!({"a": "expired", "b": "full", "n": "denied"}),
    );
    eprintln!(
        "resources moved {:?} after SIGKILL (time to live 300 ms)",
        killed.elapsed()
    );
    // Its log says why: the process, not the time to live (which a SIGKILL does not wait for).
    eventually("the arbiter says a's process is gone", || {
        r.t.stderr_of(arbiter)
            .contains("arm/shoulder: a -> b (a's process is gone: its block counts no more)")
    });
}

#[test]
fn changing_the_priority_file_changes_owners() {
    let mut r = Robot::new(&["a", "b", "n"]);
    r.t.start_registry();
    let manager = r.manager();
    r.arbiter();
    r.abn(500);
    r.expect_patent_example("initial");
    std::fs::write(&r.manager_file, manager_toml(&["n", "b", "a"])).unwrap();
    r.expect(
        "n first",
        json!({"turret": "b", "shoulder": "n", "elbow1": "n", "elbow2": "n"}),
        json!({"a": "denied", "b": "partial", "n": "full"}),
    );
    // An invalid file is refused and the previous order stays in force.
    std::fs::write(
        &r.manager_file,
        "controllers = [\"a\", \"a\"]\narbiters = [\"arm\"]\n",
    )
    .unwrap();
    eventually("the manager says it keeps the previous order", || {
        let log = r.t.stderr_of(manager);
        log.contains("keeping the previous config") && log.contains("\"a\" is listed twice")
    });
    r.expect(
        "still n first",
        json!({"turret": "b", "shoulder": "n", "elbow1": "n", "elbow2": "n"}),
        json!({"a": "denied", "b": "partial", "n": "full"}),
    );
    // The file mended to the order in force: the manager says it took it.
    std::fs::write(&r.manager_file, manager_toml(&["n", "b", "a"])).unwrap();
    eventually("the manager says the mended file is valid", || {
        r.t.stderr_of(manager)
            .contains("valid; the priority order in force is unchanged")
    });
}

/// A new order while no registry runs takes effect at once: the arbiter keeps following the
/// controllers it followed (it used to subscribe to them anew, which cannot bind without a
/// registry, and count every one as absent: every resource went to its safe command until a
/// registry ran again).
#[test]
fn a_new_priority_order_applies_while_the_registry_is_down() {
    let mut r = Robot::running(&["a", "b", "n"]);
    r.abn(500);
    r.expect_patent_example("initial");
    r.t.kill_registry();
    std::fs::write(&r.manager_file, manager_toml(&["n", "b", "a"])).unwrap();
    r.expect(
        "n first, without a registry",
        json!({"turret": "b", "shoulder": "n", "elbow1": "n", "elbow2": "n"}),
        json!({"a": "denied", "b": "partial", "n": "full"}),
    );
    r.t.start_registry();
    std::fs::write(&r.manager_file, manager_toml(&["a", "b", "n"])).unwrap();
    r.expect_patent_example("back to the first order, with a registry");
}

#[test]
fn unlisted_controllers_join_last_when_the_manager_says_so() {
    let mut r = Robot::new(&["a"]);
    std::fs::write(&r.manager_file, manager_toml_unlisted_last(&["a"])).unwrap();
    r.t.start_registry();
    r.manager();
    r.arbiter();
    r.controller("a", "non_compromising", &["arm/shoulder=0.3"], 500);
    r.controller(
        "payload",
        "compromising",
        &["arm/shoulder=0.1", "arm/turret=0.2"],
        500,
    );
    r.expect(
        "payload placed last",
        json!({"turret": "payload", "shoulder": "a", "elbow1": null, "elbow2": null}),
        json!({"a": "full", "payload": "partial"}),
    );
}

/// A slot under `/robot/controller/` that holds another type (a stray process, an older build)
/// never stops the arbiter: listed by name, that controller counts as absent; unlisted, the
/// manager does not list it. The others keep their resources, and the arbiter keeps deciding.
#[test]
fn a_controller_slot_of_another_type_is_absent_and_stops_nothing() {
    let mut r = Robot::new(&["a"]);
    std::fs::write(
        &r.manager_file,
        manager_toml_unlisted_last(&["a", "listed-odd"]),
    )
    .unwrap();
    r.t.start_registry();
    let bus = r.t.bus();
    let mut listed_odd = bus.publish::<u64>("/robot/controller/listed-odd").unwrap();
    let mut stray = bus.publish::<u64>("/robot/controller/stray").unwrap();
    listed_odd.write(&1).unwrap();
    stray.write(&2).unwrap();
    let manager = r.manager();
    let arbiter = r.arbiter();
    r.controller("a", "non_compromising", &["arm/shoulder=0.3"], 500);
    r.expect(
        "a owns the shoulder despite the odd slots",
        json!({"turret": null, "shoulder": "a", "elbow1": null, "elbow2": null}),
        json!({"a": "full"}),
    );
    let out = r.t.inspect(&["get", "/robot/manager", "--json"]);
    let config: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        config["controllers"],
        json!(["a", "listed-odd"]),
        "no stray"
    );
    // The arbiter still decides: a new controller gets a free resource.
    r.controller("b", "compromising", &["arm/turret=1.0"], 500);
    r.expect(
        "b joins last and gets the turret",
        json!({"turret": "b", "shoulder": "a", "elbow1": null, "elbow2": null}),
        json!({"a": "full", "b": "full"}),
    );
    for (child, what) in [(manager, "manager"), (arbiter, "arbiter")] {
        assert!(r.t.is_running(child), "the {what} is still running");
    }
}

/// The background refresh keeps the block as last published: commands changed without
/// `publish` are not on the bus, however many refreshes pass; `publish` puts them all out.
#[test]
fn only_publish_puts_changes_on_the_bus() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut c = controllers::RobotController::with_ttl(
        &bus,
        "staged",
        arbiter::protocol::Status::Compromising,
        std::time::Duration::from_millis(30),
    )
    .unwrap();
    c.set("arm/shoulder", 0.3).unwrap();
    c.publish().unwrap();
    let mut block = bus
        .subscribe::<arbiter::protocol::ControllerBlock>("/robot/controller/staged")
        .unwrap();
    let commands = |b: &mut bus::Subscription<arbiter::protocol::ControllerBlock>| {
        b.update().unwrap();
        b.value().map(|v| v.commands.clone())
    };
    common::eventually("the first publish", || commands(&mut block).is_some());
    c.clear_all();
    c.set("arm/turret", 1.0).unwrap();
    c.set_status(arbiter::protocol::Status::NonCompromising);
    let stamp = block.value().unwrap().stamp_ns;
    common::eventually("two refreshes", || {
        commands(&mut block);
        block.value().unwrap().stamp_ns > stamp + 20_000_000
    });
    let seen = block.value().unwrap();
    assert_eq!(seen.commands, [("arm/shoulder".to_owned(), 0.3)].into());
    assert_eq!(seen.status, arbiter::protocol::Status::Compromising);
    c.publish().unwrap();
    common::eventually("the second publish", || {
        commands(&mut block) == Some([("arm/turret".to_owned(), 1.0)].into())
    });
    assert_eq!(
        block.value().unwrap().status,
        arbiter::protocol::Status::NonCompromising
    );
}

/// An arbiter's feedback slot holding another type gives no feedback; the application keeps
/// running (it used to exit on the type mismatch).
#[test]
fn an_arbiter_slot_of_another_type_does_not_stop_a_controller() {
    let mut r = Robot::new(&["a"]);
    r.t.start_registry();
    let bus = r.t.bus();
    let mut odd = bus.publish::<u64>("/robot/arbiter/arm").unwrap();
    odd.write(&1).unwrap();
    r.manager();
    let c = r.t.spawn_bin(
        "robot-controller",
        &[
            "--name",
            "a",
            "--status",
            "compromising",
            "--set",
            "arm/shoulder=0.3",
            "--duration-s",
            "1",
        ],
    );
    let started = std::time::Instant::now();
    let out = r.t.finish(c);
    // It ran its whole second; with no arbiter to take its command, it says so at the end.
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("ended before every arbiter commanded had answered"),
        "{err}"
    );
}

#[test]
fn arbiter_manager_and_registry_restarts_recover_ownership() {
    let mut r = Robot::new(&["a", "b", "n"]);
    r.t.start_registry();
    let manager = r.manager();
    let arbiter = r.arbiter();
    r.abn(500);
    r.expect_patent_example("initial");

    r.t.kill(arbiter);
    r.arbiter();
    r.expect_patent_example("after the arbiter restarted");

    r.t.kill(manager);
    r.manager();
    r.expect_patent_example("after the manager restarted");

    r.t.kill_registry();
    r.t.start_registry();
    r.expect_patent_example("after the registry restarted");
    // The arbiter still follows changes after all that.
    std::fs::write(&r.manager_file, manager_toml(&["b", "a", "n"])).unwrap();
    r.expect(
        "b first",
        json!({"turret": "b", "shoulder": "b", "elbow1": null, "elbow2": null}),
        json!({"a": "denied", "b": "full", "n": "denied"}),
    );
}

#[test]
fn every_start_order_ends_in_the_same_ownership() {
    #[derive(Clone, Copy, Debug)]
    enum P {
        Registry,
        Manager,
        Arbiter,
        Controllers,
    }
    use P::*;
    for order in [
        [Registry, Manager, Arbiter, Controllers],
        [Controllers, Arbiter, Manager, Registry],
        [Arbiter, Controllers, Registry, Manager],
        [Manager, Registry, Controllers, Arbiter],
    ] {
        let mut r = Robot::new(&["a", "b", "n"]);
        for p in order {
            match p {
                Registry => r.t.start_registry(),
                Manager => {
                    r.manager();
                }
                Arbiter => {
                    r.arbiter();
                }
                Controllers => {
                    r.abn(500);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        r.expect_patent_example(&format!("order {order:?}"));
    }
}

/// With a publish deadline, an application whose loop stops publishing loses its resources
/// (its block is no longer refreshed, and expires) and gets them back when it publishes again;
/// without one, the library keeps the block fresh for as long as the process lives.
#[test]
fn a_publish_deadline_lets_a_hung_application_lose_its_resources() {
    use arbiter::protocol::Status::Compromising;
    use controllers::RobotController;
    use std::time::Duration;
    let (r, _, arbiter) = Robot::running_with_children(&["looping", "steady"]);
    let bus = r.t.bus();
    let ttl = Duration::from_millis(100);
    let mut looping = RobotController::with_ttl(&bus, "looping", Compromising, ttl).unwrap();
    looping.set_publish_deadline(Some(Duration::from_millis(300)));
    let mut steady = RobotController::with_ttl(&bus, "steady", Compromising, ttl).unwrap();
    looping.set("arm/turret", 0.5).unwrap();
    looping.publish().unwrap();
    steady.set("arm/shoulder", 0.3).unwrap();
    steady.publish().unwrap();
    let owners = |turret: Value| json!({"turret": turret, "shoulder": "steady", "elbow1": null, "elbow2": null});
    let both = json!({"looping": "full", "steady": "full"});
    r.expect("both hold", owners(json!("looping")), both.clone());
    // Neither publishes again: only the one with a deadline lets its block expire.
    r.expect(
        "looping's block expired",
        owners(Value::Null),
        json!({"looping": "expired", "steady": "full"}),
    );
    let log = r.t.stderr_of(arbiter);
    let why = "looping -> (safe) (looping's block expired: not refreshed within its time to live)";
    assert!(log.contains(why), "{log}");
    std::thread::sleep(Duration::from_millis(300));
    r.expect(
        "steady still holds",
        owners(Value::Null),
        json!({"looping": "expired", "steady": "full"}),
    );
    looping.publish().unwrap();
    r.expect("looping holds again", owners(json!("looping")), both);
}

/// The longest order the manager publishes is one an arbiter can follow (one wait over every
/// controller's block, the manager's and the state's slots, and the words for binding and
/// stopping): it serves a controller listed last.
#[test]
fn an_arbiter_follows_the_longest_order_the_manager_publishes() {
    let names: Vec<String> = (0..arbiter::process::MAX_CONTROLLERS)
        .map(|i| format!("c{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut r = Robot::new(&names);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let last = names[names.len() - 1];
    let c = r.controller(last, "compromising", &["arm/turret=1"], 500);
    eventually(&format!("{last} gets the turret"), || {
        r.t.stdout_of(c)
            .contains(&format!("{last} arm: full (owns: turret)"))
    });
    // And the arbiter goes on waiting on them all (it used to end at its first wait).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(r.t.is_running(arbiter), "{}", r.t.stderr_of(arbiter));
    r.t.signal(c, nix::sys::signal::Signal::SIGTERM);
    assert!(r.t.finish(c).status.success());
}

/// A controller's refresh of its block (three times per time to live) is acknowledged in the
/// arbiter's memory block, so that a (re)started controller learns its outcome, but it changes
/// nothing a driver executes: with no heartbeat the command is not rewritten (it used to be,
/// on every refresh).
#[test]
fn a_refresh_rewrites_the_memory_block_but_not_the_command() {
    let mut r = Robot::new(&["x"]);
    std::fs::write(&r.arm_file, format!("heartbeat_ms = 0\n{}", ARM)).unwrap();
    r.t.start_registry();
    r.manager();
    r.arbiter();
    let x = r.controller("x", "compromising", &["arm/turret=1"], 150);
    eventually("x holds the turret", || {
        r.t.stdout_of(x).contains("x arm: full (owns: turret)")
    });
    let bus = r.t.bus();
    let mut command = bus
        .subscribe::<arbiter::protocol::ResourceCommand>("/robot/arbiter/arm/command")
        .unwrap();
    let mut block = bus
        .subscribe::<arbiter::protocol::ArbiterBlock>("/robot/arbiter/arm")
        .unwrap();
    let sequences = |c: &mut bus::Subscription<_>, b: &mut bus::Subscription<_>| {
        c.update().unwrap();
        b.update().unwrap();
        (c.sequence(), b.sequence())
    };
    eventually("both read", || {
        let (c, b) = sequences(&mut command, &mut block);
        c.is_some() && b.is_some()
    });
    let (command_before, block_before) = sequences(&mut command, &mut block);
    // x refreshes every 50 ms: some 20 refreshes in a second.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (command_after, block_after) = sequences(&mut command, &mut block);
    assert_eq!(command_after, command_before, "the command is as it was");
    assert!(
        block_after >= block_before.map(|s| s + 10),
        "the memory block acknowledges the refreshes: {block_before:?} -> {block_after:?}"
    );
}

/// An application's own controller (the library, in this process) learns from `owns` when a
/// higher-priority controller takes its resource and when it gets it back.
#[test]
fn an_application_knows_what_it_owns() {
    let mut r = Robot::running(&["x", "app"]);
    let bus = r.t.bus();
    let mut app = app_owning_the_turret(&bus);
    let owns_turret = |app: &mut controllers::RobotController| {
        app.refresh().unwrap();
        app.owns("arm/turret")
    };
    assert!(!app.owns("arm/shoulder"), "asked for the turret only");
    assert!(!app.owns("turret"), "not a resource name: owns nothing");
    let x = r.x_holding_the_turret("2");
    eventually("x takes the turret from app", || !owns_turret(&mut app));
    let out = r.t.finish(x);
    assert!(out.status.success(), "{out:?}");
    eventually("app owns the turret again", || owns_turret(&mut app));
}

/// Until its first publish, a controller has put nothing on the bus and is told nothing: the
/// outcome the arbiter still gives its name (`expired`, a killed earlier process's) is not its
/// own, and a release before then publishes nothing (it put an empty block out, and counted as
/// the first publish: the check of the commands set before the arbiters were known never ran).
/// Two of one name in one process: the error says so in words that read (review by running).
#[test]
fn a_controller_that_never_published_is_told_nothing_and_releases_nothing() {
    let mut r = Robot::running(&["x"]);
    let x = r.controller("x", "compromising", &["arm/turret=1"], 300);
    r.expect(
        "x holds the turret",
        json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
    r.t.signal(x, Signal::SIGKILL);
    r.expect(
        "x's block expired",
        json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "expired"}),
    );
    let bus = r.t.bus();
    let mut block = bus
        .subscribe::<arbiter::protocol::ControllerBlock>("/robot/controller/x")
        .unwrap();
    assert!(
        block.wait_update(common::WATCHDOG).unwrap(),
        "the dead x's block"
    );
    let before = block.sequence();
    let mut app =
        controllers::RobotController::new(&bus, "x", controllers::Status::Compromising).unwrap();
    app.set("arm/turret", 0.5).unwrap();
    eventually("the arbiters are known", || {
        app.refresh().unwrap();
        !app.arbiters().is_empty()
    });
    assert!(
        app.feedback()
            .iter()
            .all(|f| f.outcome.is_none() && f.owned.is_empty()),
        "{:?}",
        app.feedback()
    );
    app.release().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    block.update().unwrap();
    assert_eq!(block.sequence(), before, "nothing published");
    let err = controllers::RobotController::new(&bus, "x", controllers::Status::Compromising)
        .err()
        .expect("a second controller of the name in this process");
    assert!(
        err.to_string()
            .contains("another RobotController of this process (pid")
            && err.to_string().contains("drop it before making a new one"),
        "{err}"
    );
}

/// `wait_feedback` sleeps until what the application sees changes. Each publish moves the
/// block's expiry, and the arbiter rewrites its own block to acknowledge it: a loop that
/// published and then waited was woken by that rewrite at once, and spun.
#[test]
fn a_publish_and_wait_loop_sleeps_until_its_answer_changes() {
    let mut r = Robot::running(&["x", "app"]);
    let bus = r.t.bus();
    let mut app = app_owning_the_turret(&bus);
    let mut woken = 0;
    for _ in 0..10 {
        app.publish().unwrap();
        if app
            .wait_feedback(std::time::Duration::from_millis(100))
            .unwrap()
        {
            woken += 1;
        }
    }
    assert_eq!(woken, 0, "nothing app sees changed: {:?}", app.feedback());
    assert!(app.owns("arm/turret"));
    let x = r.x_holding_the_turret("2");
    // A wait far longer than the test's watchdog allows would time out; it is woken instead.
    let woke = app
        .wait_feedback(std::time::Duration::from_secs(20))
        .unwrap();
    assert!(woke, "the change woke the wait");
    assert!(!app.owns("arm/turret"), "{:?}", app.feedback());
    let out = r.t.finish(x);
    assert!(out.status.success(), "{out:?}");
}

/// The application `app` (this process), compromising, once it owns the turret.
fn app_owning_the_turret(bus: &bus::Bus) -> controllers::RobotController {
    let mut app =
        controllers::RobotController::new(bus, "app", controllers::Status::Compromising).unwrap();
    app.set("arm/turret", 0.5).unwrap();
    app.publish().unwrap();
    eventually("app owns the turret", || {
        app.refresh().unwrap();
        app.owns("arm/turret")
    });
    app
}
