//! Control arbitration across hosts made of network namespaces: the robot manager and the arm's
//! arbiter on host A, robot controllers on host B (a payload computer). The manager finds B's
//! controller through its registry's directory (`/baton/registry/directory`), and places it
//! last (`unlisted = "last"`) without any file naming it; a controller on B killed with SIGKILL
//! loses its resources on A through the writer-gone state reflected across the hosts (its time
//! to live is far longer than the test's watchdog, so expiry cannot be what frees them).

mod common;
mod netns;

use netns::{eventually, Lab};
use serde_json::{json, Value};

const A: usize = 0;
const B: usize = 1;

const ARM: &str = r#"
name = "arm"
[[resources]]
name = "turret"
[[resources]]
name = "shoulder"
"#;

/// The arm's memory block as `bus-inspect get /robot/arbiter/arm --json` prints it on host A.
fn arm_block(lab: &Lab) -> Option<Value> {
    let out = lab.inspect(A, &["get", "/robot/arbiter/arm", "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

fn expect(lab: &Lab, what: &str, owners: Value, outcomes: Value) {
    let deadline = std::time::Instant::now() + common::WATCHDOG;
    loop {
        let last = arm_block(lab);
        if last
            .as_ref()
            .is_some_and(|b| b["owners"] == owners && b["outcomes"] == outcomes)
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: expected owners {owners} outcomes {outcomes}; last block {last:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Two hosts with their registries: on A the robot manager (with `manager_toml`) and the arm's
/// arbiter; B, the payload computer, runs nothing yet.
fn robot_on_a_and_payload_b(manager_toml: &str) -> Lab {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let manager = lab.file("manager.toml", manager_toml);
    let arm = lab.file("arm.toml", ARM);
    lab.spawn(A, "robot-manager", &["--config", &manager]);
    lab.spawn(A, "arbiter", &["--config", &arm]);
    lab
}

/// Stops child `child` with SIGTERM and returns what it logged (its stderr).
fn stop_for_its_log(lab: &mut Lab, child: usize) -> String {
    let pid = nix::unistd::Pid::from_raw(lab.pid(child) as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    String::from_utf8_lossy(&lab.finish(child).stderr).into_owned()
}

/// Starts `robot-controller` `name` on `host` with `status`, a `--set` for each of `sets`, and
/// `extra` arguments.
fn controller(
    lab: &mut Lab,
    host: usize,
    name: &str,
    status: &str,
    sets: &[&str],
    extra: &[&str],
) -> usize {
    let mut args = vec!["--name", name, "--status", status];
    for set in sets {
        args.extend(["--set", set]);
    }
    args.extend(extra);
    lab.spawn(host, "robot-controller", &args)
}

#[test]
fn a_controller_on_a_payload_host_joins_last_and_loses_its_resources_when_killed() {
    let mut lab = robot_on_a_and_payload_b(
        "controllers = [\"a\"]\narbiters = [\"arm\"]\nunlisted = \"last\"\n",
    );
    controller(
        &mut lab,
        A,
        "a",
        "non_compromising",
        &["arm/shoulder=0.3"],
        &["--ttl-ms", "500"],
    );
    // A time to live far beyond the watchdog: only the writer-gone state can free its
    // resources within the test.
    let payload = controller(
        &mut lab,
        B,
        "payload",
        "compromising",
        &["arm/shoulder=0.1", "arm/turret=0.2"],
        &["--ttl-ms", "600000"],
    );
    expect(
        &lab,
        "the payload controller on host B is placed last and gets the turret",
        json!({"turret": "payload", "shoulder": "a"}),
        json!({"a": "full", "payload": "partial"}),
    );
    // Host A's directory lists it with its origin.
    let out = lab.inspect(A, &["get", "/baton/registry/directory", "--json"]);
    let directory: Value = serde_json::from_slice(&out.stdout).expect("directory as JSON");
    assert_eq!(directory["host"], "hA", "{directory}");
    let entry = directory["entries"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == "/robot/controller/payload"))
        .cloned()
        .unwrap_or_else(|| panic!("payload controller not in {directory}"));
    assert_eq!(entry["origin_host"], "hB", "{entry}");
    assert_eq!(entry["publisher_alive"], true, "{entry}");

    lab.kill(payload);
    // Unlisted and gone, it also leaves the manager's order, so no outcome names it.
    expect(
        &lab,
        "the killed controller's turret goes back to its safe command",
        json!({"turret": null, "shoulder": "a"}),
        json!({"a": "full"}),
    );
    netns::eventually(
        "host A's directory says the payload controller is gone",
        || {
            let out = lab.inspect(A, &["get", "/baton/registry/directory", "--json"]);
            serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|d| {
                d["entries"].as_array().is_some_and(|e| {
                    e.iter().any(|e| {
                        e["name"] == "/robot/controller/payload" && e["publisher_alive"] == false
                    })
                })
            })
        },
    );
}

/// A listed controller on host B killed: the arbiter's log says its writer on hB is gone (its
/// process ended, or that computer is cut off), not that its block ran out of time to live.
#[test]
fn the_arbiter_says_a_controller_on_another_host_is_gone() {
    let mut lab = robot_on_a_and_payload_b("controllers = [\"payload\"]\narbiters = [\"arm\"]\n");
    // `robot_on_a_and_payload_b` started the manager (child 0), then the arbiter (child 1).
    let arbiter = 1;
    let payload = controller(
        &mut lab,
        B,
        "payload",
        "compromising",
        &["arm/turret=0.2"],
        &["--ttl-ms", "600000"],
    );
    expect(
        &lab,
        "payload on host B holds the turret",
        json!({"turret": "payload", "shoulder": null}),
        json!({"payload": "full"}),
    );
    lab.kill(payload);
    expect(
        &lab,
        "the turret goes back to its safe command",
        json!({"turret": null, "shoulder": null}),
        json!({"payload": "expired"}),
    );
    let log = stop_for_its_log(&mut lab, arbiter);
    let why =
        "payload's writer on host 'hB' is gone: its process ended, or that computer is cut off";
    assert!(log.contains(why), "{log}");
}

/// A payload computer cut off from the robot: its robot-controller said "arbiter not running"
/// and "the robot manager is not running" (network audit), both of which run; the network is
/// what is cut. Where the arbiter's and the manager's blocks come from another computer, it now
/// says that the network may be the cause.
#[test]
fn a_controller_cut_off_from_the_robot_says_the_network_may_be_cut() {
    let mut lab = robot_on_a_and_payload_b("controllers = [\"payload\"]\narbiters = [\"arm\"]\n");
    let payload = controller(
        &mut lab,
        B,
        "payload",
        "compromising",
        &["arm/turret=0.2"],
        &["--duration-s", "8"],
    );
    expect(
        &lab,
        "the payload controller on host B gets the turret",
        json!({"turret": "payload", "shoulder": null}),
        json!({"payload": "full"}),
    );
    // B's controller has heard the robot too (A deciding for it says nothing of B's mirrors).
    netns::eventually("B mirrors the manager's order and the arm's block", || {
        let heard = |name: &str| {
            let out = lab.inspect(B, &["get", name, "--json"]);
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("payload")
        };
        heard("/robot/manager") && heard("/robot/arbiter/arm")
    });
    // B forgets A after its forget time (3 s): the mirrors of A's slots lose their writer.
    lab.set_connected(B, false);
    let out = lab.finish(payload);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("payload arm: arbiter not running, or the network to its computer is cut"),
        "{printed}"
    );
    assert!(
        printed
            .contains("the robot manager on host 'hA' is not running, or the network to it is cut"),
        "{printed}"
    );
}

/// Waits until the arm's memory block on host A says the shoulder measures `position`.
fn shoulder_reaches(lab: &Lab, position: f64) {
    eventually(&format!("the shoulder reaches {position}"), || {
        arm_block(lab).is_some_and(|b| {
            b["resources"]["shoulder"]["state"]
                .as_f64()
                .is_some_and(|s| (s - position).abs() < 0.01)
        })
    });
}

/// The shoulder's held command in the arm's memory block on host A.
fn shoulder_command(lab: &Lab) -> Option<f64> {
    arm_block(lab).and_then(|b| b["resources"]["shoulder"]["command"].as_f64())
}

/// A driver restarted on another computer (the simulator on host B, the arbiter on A) is
/// another driver for the arbiter too: a released joint is held where the new one measures it.
/// The arbiter told drivers apart by the state's writer pid, which in a mirror is its
/// registry's: it kept sending the old hold, and the new driver moved a joint nobody asked to
/// move.
#[test]
fn a_driver_restarted_on_another_host_holds_a_released_joint_where_it_measures_it() {
    let mut lab = robot_on_a_and_payload_b("controllers = [\"x\"]\narbiters = [\"arm\"]\n");
    let sim = lab.spawn(B, "robot-sim", &[]);
    let x = controller(
        &mut lab,
        A,
        "x",
        "compromising",
        &["arm/shoulder=1.2"],
        &["--ttl-ms", "200"],
    );
    shoulder_reaches(&lab, 1.2);
    lab.kill(x);
    expect(
        &lab,
        "the shoulder released",
        json!({"turret": null, "shoulder": null}),
        json!({"x": "expired"}),
    );
    assert!(shoulder_command(&lab).is_some_and(|c| (c - 1.2).abs() < 0.05));
    // A new simulator starts with every joint at 0.
    lab.kill(sim);
    lab.spawn(B, "robot-sim", &[]);
    eventually("the hold follows the new driver's measurement", || {
        shoulder_command(&lab).is_some_and(|c| c < 0.4)
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let c = shoulder_command(&lab);
    assert!(c.is_some_and(|c| c < 0.4), "{c:?}");
}

/// The registry of the arbiter's own computer restarted while the driver runs on another one:
/// the mirror of the driver's state gets a new writing process (the new registry), but the
/// driver is the same. The arbiter told drivers apart by the mirror's writer process, took the
/// restart for another driver, and forgot where it held released joints (said in its log).
#[test]
fn a_restart_of_the_arbiters_own_registry_is_not_another_driver() {
    let mut lab = robot_on_a_and_payload_b("controllers = [\"x\"]\narbiters = [\"arm\"]\n");
    // `robot_on_a_and_payload_b` started the manager (child 0), then the arbiter (child 1).
    let arbiter = 1;
    lab.spawn(B, "robot-sim", &[]);
    controller(
        &mut lab,
        A,
        "x",
        "compromising",
        &["arm/shoulder=1.2"],
        &["--ttl-ms", "2000"],
    );
    shoulder_reaches(&lab, 1.2);
    lab.kill_registry(A);
    lab.start_registry(A, &[], &[]);
    // Values the new registry wrote into the mirror have reached the arbiter once its block
    // shows a state sequence beyond the restart's.
    let state_sequence = |lab: &Lab| {
        lab.list_row(A, "/robot/resource/arm/state")["sequence"]
            .as_u64()
            .unwrap_or(0)
    };
    let after_restart = state_sequence(&lab);
    eventually("the driver's state flows into host A again", || {
        state_sequence(&lab) > after_restart + 10
    });
    expect(
        &lab,
        "x keeps the shoulder",
        json!({"turret": null, "shoulder": "x"}),
        json!({"x": "full"}),
    );
    let log = stop_for_its_log(&mut lab, arbiter);
    assert!(
        log.contains("stopping on"),
        "the arbiter's log is not its own: {log}"
    );
    assert!(!log.contains("another driver"), "{log}");
}
