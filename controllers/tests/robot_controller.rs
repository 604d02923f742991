//! The `robot-controller` program in front of people and scripts, across real processes: what
//! it waits for and prints, its outcome lines, command-line mistakes, unknown resources, an
//! arbiter that hangs, refuses or never answers, a command clamped to its limits, and a publish
//! refused as too large.

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use nix::sys::signal::Signal;
use robot::Robot;
use serde_json::json;

use common::eventually;

#[test]
fn an_unknown_resource_is_a_clear_error() {
    let mut r = Robot::running(&["x"]);
    r.expect(
        "arbiter up",
        json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({}),
    );
    let c = r.controller("x", "compromising", &["arm/wrist=1.0"], 500);
    let out = r.t.finish(c);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown resource arm/wrist") && err.contains("shoulder"),
        "{err}"
    );
    let c = r.controller("x", "compromising", &["gripper/jaw=1.0"], 500);
    let err = String::from_utf8_lossy(&r.t.finish(c).stderr).into_owned();
    assert!(
        err.contains("unknown arbiter") && err.contains("arm"),
        "{err}"
    );
    // The library: a command set before the arbiters are known is taken unchecked, and the
    // first publish, which learns them, refuses it rather than publish a request that is
    // denied without a word.
    let bus = r.t.bus();
    let mut app =
        controllers::RobotController::new(&bus, "x", controllers::Status::NonCompromising).unwrap();
    app.set("arm/shoulderr", 0.2).unwrap();
    let err = app.publish().expect_err("refused").to_string();
    assert!(err.contains("unknown resource arm/shoulderr"), "{err}");
    app.clear("arm/shoulderr");
    app.set("arm/shoulder", 0.2).unwrap();
    app.publish().unwrap();
    eventually("x owns the shoulder", || {
        app.refresh().unwrap();
        app.owns("arm/shoulder")
    });
}

/// A publish refused because the block grew too large leaves the block published before in
/// force: it is still refreshed, and the controller keeps what it owns. (The refused block
/// used to take its place, fail at every refresh, and let the turret expire a time to live
/// later while the error read as if only this publish had failed.)
#[test]
fn a_publish_refused_as_too_large_leaves_the_last_block_in_force() {
    let mut r = Robot::new(&["x"]);
    // A second arbiter that never runs: commands for it are taken unchecked, as for any
    // arbiter not yet running, which lets the block grow past its capacity.
    std::fs::write(
        &r.manager_file,
        "controllers = [\"x\"]\narbiters = [\"arm\", \"gripper\"]\nunlisted = \"ignore\"\n",
    )
    .unwrap();
    r.t.start_registry();
    r.manager();
    r.arbiter();
    let bus = r.t.bus();
    let mut app = controllers::RobotController::with_ttl(
        &bus,
        "x",
        controllers::Status::Compromising,
        std::time::Duration::from_millis(100),
    )
    .unwrap();
    app.set("arm/turret", 0.5).unwrap();
    eventually("x owns the turret", || {
        app.publish().unwrap();
        app.refresh().unwrap();
        app.owns("arm/turret")
    });
    for i in 0..1_000 {
        app.set(&format!("gripper/{i:0>64}"), 0.0).unwrap();
    }
    let err = app
        .publish()
        .expect_err("a block of 1,001 commands is refused");
    assert!(
        matches!(err, controllers::ControllerError::BlockTooLarge { .. }),
        "{err}"
    );
    // Ten times the time to live: the block in force must have been refreshed meanwhile.
    std::thread::sleep(std::time::Duration::from_secs(1));
    app.refresh().unwrap();
    assert!(app.owns("arm/turret"), "{:?}", app.feedback());
    r.expect(
        "x still holds the turret",
        json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
}

#[test]
fn robot_controller_says_what_it_waits_for_and_refuses_non_finite_commands() {
    let mut r = Robot::new(&["x"]);
    // Each run ends without reaching an arbiter: an error, after saying what it waited for.
    let run = |r: &mut Robot| {
        let c = r.x_holding_the_turret("0.5");
        let out = r.t.finish(c);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = run(&mut r);
    assert!(
        said.contains("x: waiting for registry-server on domain"),
        "{said}"
    );
    r.t.start_registry();
    let said = run(&mut r);
    assert!(said.contains("x: waiting for the robot manager"), "{said}");
    for bad in ["arm/turret=NaN", "arm/turret=inf", "arm/turret=-infinity"] {
        let c = r.controller("x", "compromising", &[bad], 500);
        let out = r.t.finish(c);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("not a finite number"),
            "{bad}: {err}"
        );
    }
}

/// While the registry is away after the block was in place, robot-controller says so and that
/// the arbiters here still read the block; once it is back, it says where things stand again,
/// so its last line is never a wait that is over.
#[test]
fn robot_controller_reprints_its_outcome_when_a_wait_ends() {
    let mut r = Robot::running(&["x"]);
    let c = r.x_holding_the_turret("4");
    common::eventually("x owns the turret", || {
        r.t.stdout_of(c).contains("x arm: full (owns: turret)")
    });
    r.t.kill_registry();
    // Its block stays in place: the arbiter goes on with it, and the line says so rather than
    // that it waits (as if its command were no longer in force).
    common::eventually("x says the registry stopped", || {
        r.t.stdout_of(c).contains(
            "stopped (start it again): arbiters on this computer still read this controller's \
             block",
        )
    });
    assert!(
        !r.t.stdout_of(c).contains("waiting for registry-server"),
        "{}",
        r.t.stdout_of(c)
    );
    r.expect(
        "x keeps the turret while the registry is away",
        json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"x": "full"}),
    );
    r.t.start_registry();
    let out = r.t.finish(c);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines[lines.len().saturating_sub(2)..],
        ["x arm: full (owns: turret)", "x: released every resource"],
        "{said}"
    );
}

/// A controller started again under a name whose last process just ended is not told the
/// outcome of that process's block (`expired`, once its writer is gone) as its own. An arbiter
/// woken by the resource state (robot-sim steps 1,000 times a second here) decides on the
/// blocks it has read, and a block written at that moment is read at its next wake-up: the
/// block it publishes in between was taken for an answer to the new process (1 to 2 runs in 15
/// said `expired` first, before `ArbiterBlock::sessions`).
#[test]
fn a_controller_started_again_never_takes_its_predecessors_outcome_for_its_own() {
    let mut r = Robot::running(&["x"]);
    r.t.spawn_bin("robot-sim", &["--rate-hz", "1000"]);
    let args = [
        "--name",
        "x",
        "--status",
        "compromising",
        "--set",
        "arm/turret=0.1",
        "--duration-s",
        "0.3",
        "--json",
    ];
    for run in 0..15 {
        let c = r.t.spawn_bin("robot-controller", &args);
        let out = r.t.finish(c);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "run {run}: {out:?}");
        assert!(said.contains(r#""outcome":"full""#), "run {run}: {said}");
        assert!(!said.contains("expired"), "run {run}: {said}");
    }
}

/// The command line is checked before anything runs: a resource given twice, a bad name and
/// a time to live out of range are usage errors (exit 64); a run whose commands never reached a
/// running arbiter ends with an error, so that `robot-controller ... && next` does not go on.
#[test]
fn command_line_mistakes_and_runs_that_commanded_nothing_fail() {
    let mut r = Robot::new(&["x"]);
    for args in [
        &["--set", "arm/elbow1=1", "--set", "arm/elbow1=-1"][..],
        &["--ttl-ms", "5"],
        &["--ttl-ms", "-5"],
        &["--set", "arm/elbow1"],
        &["--set", "elbow1=1"],
        &["--set", "arm/../x=1"],
        &["--duration-s", "0"],
        &["--duration-s", "-1"],
    ] {
        let mut all = vec!["--name", "x", "--status", "compromising"];
        all.extend_from_slice(args);
        let c = r.t.spawn_bin("robot-controller", &all);
        let out = r.t.finish(c);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        if args[0] == "--ttl-ms" {
            assert!(err.contains("from 10 to 3600000"), "{args:?}: {err}");
        }
        // Out of range, said so (a negative number is no unknown option).
        if args[0] == "--duration-s" {
            assert!(
                err.contains("more than 0 and at most 31536000"),
                "{args:?}: {err}"
            );
        }
    }
    let c = r.t.spawn_bin(
        "robot-controller",
        &["--name", "a b", "--status", "compromising"],
    );
    assert_eq!(r.t.finish(c).status.code(), Some(64));
    // No registry at all: it waits, and says at the end that nothing was commanded.
    let c = r.x_holding_the_turret("0.5");
    let out = r.t.finish(c);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("waiting for registry-server"), "{err}");
    // Nothing reached the bus, so nothing is said to be released.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("x: held nothing: its block never reached the bus")
            && !said.contains("released every resource"),
        "{said}"
    );
    // Also a run too short for one look names the registry, not the arbiter, and a run that
    // commands nothing fails when its block never reached the bus (it exited 0).
    for args in [
        &["--set", "arm/turret=0.5", "--duration-s", "1e-6"][..],
        &["--duration-s", "0.2"],
    ] {
        let mut all = vec!["--name", "x", "--status", "compromising"];
        all.extend_from_slice(args);
        let c = r.t.spawn_bin("robot-controller", &all);
        let out = r.t.finish(c);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--duration-s ended before")
                && err.contains("waiting for registry-server")
                && !err.contains("no such arbiter"),
            "{args:?}: {err}"
        );
    }
}

/// An arbiter that hangs (stopped with SIGSTOP) is told apart from one with nothing to say:
/// its command stops being re-stamped at its heartbeat, and the controller says it does not
/// respond and owns nothing meanwhile; when it resumes, the controller says where it stands
/// again.
#[test]
fn a_hung_arbiter_is_reported_as_not_responding() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let x = r.x_holding_the_turret("20");
    common::eventually("x holds the turret", || {
        r.t.stdout_of(x).contains("x arm: full (owns: turret)")
    });
    r.t.signal(arbiter, Signal::SIGSTOP);
    // Owning nothing it can count on: robot-sim stops executing a command not re-stamped (and
    // an arbiter cut off by the network gives the turret to others). It said "owns: turret".
    common::eventually("x says the arbiter does not respond", || {
        r.t.stdout_of(x).lines().any(|l| {
            l.starts_with("x arm: arbiter not responding") && l.ends_with("(owns: nothing)")
        })
    });
    r.t.signal(arbiter, Signal::SIGCONT);
    common::eventually("x says it holds the turret again", || {
        r.t.stdout_of(x)
            .split("arbiter not responding")
            .nth(1)
            .is_some_and(|after| after.contains("x arm: full (owns: turret)"))
    });
    r.t.signal(x, Signal::SIGTERM);
    assert!(r.t.finish(x).status.success());
}

/// The library's `wait_feedback` ends when the only arbiter stops responding: nothing is
/// written then that would wake it, and it used to sleep its whole timeout while the
/// application took itself for the turret's owner.
#[test]
fn wait_feedback_wakes_when_the_arbiter_stops_responding() {
    let (r, _, arbiter) = Robot::running_with_children(&["x"]);
    let bus = r.t.bus();
    let mut app =
        controllers::RobotController::new(&bus, "x", controllers::Status::Compromising).unwrap();
    app.set("arm/turret", 0.5).unwrap();
    eventually("x owns the turret", || {
        app.publish().unwrap();
        app.refresh().unwrap();
        app.owns("arm/turret")
    });
    r.t.signal(arbiter, Signal::SIGSTOP);
    // Whatever wakes a wait first (the arbiter's last answers), one of these waits must be the
    // one that sees it stop responding, long before the 60 s.
    let started = std::time::Instant::now();
    while app_responding(&app) {
        assert!(
            app.wait_feedback(std::time::Duration::from_secs(60))
                .unwrap(),
            "a wait of 60 s ended with nothing changed"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
    assert!(!app.owns("arm/turret"));
    r.t.signal(arbiter, Signal::SIGCONT);
}

fn app_responding(app: &controllers::RobotController) -> bool {
    app.feedback().iter().all(|f| f.arbiter_responding)
}

/// A run that no arbiter answered did not command the robot, whatever it printed: with the
/// manager ignoring it (unlisted), `robot-controller --duration-s` exits 1. A command refused
/// once its arbiter runs (here started after the controller) ends the run with its release
/// said.
#[test]
fn a_run_no_arbiter_answered_fails_and_a_refusal_says_it_released() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    r.manager();
    let x = r.controller("x", "compromising", &["arm/wrist=1.0"], 500);
    std::thread::sleep(std::time::Duration::from_millis(300));
    r.arbiter();
    let out = r.t.finish(x);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown resource arm/wrist"), "{err}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        printed.lines().last(),
        Some("x: released every resource"),
        "{printed}"
    );
    let stranger = r.t.spawn_bin(
        "robot-controller",
        &[
            "--name",
            "stranger",
            "--status",
            "compromising",
            "--set",
            "arm/turret=1",
            "--duration-s",
            "0.5",
        ],
    );
    let out = r.t.finish(stranger);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("not in the robot manager's order"),
        "{printed}"
    );
    // The error it ends with gives the reason too (it said only that no arbiter answered).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("had answered this controller (arm: not in the robot manager's order)"),
        "{err}"
    );
}

/// A command outside its resource's limits is owned and sent clamped: the controller says so
/// rather than `full` alone (it said `full`, and the joint went elsewhere than commanded).
#[test]
fn a_clamped_command_is_said_to_be_clamped() {
    let mut r = Robot::running(&["x"]);
    let x = r.controller(
        "x",
        "compromising",
        &["arm/shoulder=2", "arm/turret=1"],
        500,
    );
    eventually("x says its shoulder command was clamped", || {
        r.t.stdout_of(x)
            .contains("x arm: full (owns: shoulder, turret; clamped into its limits: shoulder)")
    });
    let block = r.arm_block().unwrap();
    assert_eq!(block["resources"]["shoulder"]["command"], 1.57, "{block}");
}
