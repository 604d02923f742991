//! The resource simulator, as a driver: it executes the arbiters' commands, and fails safe when
//! the arbiter writing a command is gone (the wheels stop), and a command that does not decode
//! never stops it.

mod common;

use arbiter::protocol::{ResourceCommand, ResourceState};
use common::{eventually, TestBus, WATCHDOG};
use nix::sys::signal::Signal;

fn drive_command(left: f64, right: f64) -> ResourceCommand {
    ResourceCommand {
        arbiter: "drive".into(),
        cycle: 1,
        stamp_ns: 0,
        heartbeat_ms: 0,
        setpoints: [("left".to_owned(), left), ("right".to_owned(), right)].into(),
    }
}

/// A registry, a drive arbiter's command written by hand (`command`), and a
/// subscription to the drive's state; no simulator yet.
fn a_drive_commanded_by_hand(
    command: ResourceCommand,
) -> (
    TestBus,
    bus::Publication<ResourceCommand>,
    bus::Subscription<ResourceState>,
) {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut publication = bus
        .publish::<ResourceCommand>("/robot/arbiter/drive/command")
        .unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    publication.write(&command).unwrap();
    let state = bus
        .subscribe::<ResourceState>("/robot/resource/drive/state")
        .unwrap();
    (t, publication, state)
}

#[test]
fn the_wheels_stop_when_the_drive_arbiter_is_gone() {
    let (mut t, mut command, mut state) = a_drive_commanded_by_hand(drive_command(0.5, 0.5));
    // Commands written by hand here are not re-stamped as an arbiter's are: they never grow
    // old for this simulator.
    let sim = t.spawn_bin("robot-sim", &["--command-timeout-ms", "0"]);
    let wheel = |state: &mut bus::Subscription<ResourceState>, name: &str| {
        state.update().unwrap();
        state.value().and_then(|s| s.values.get(name).copied())
    };
    eventually("the wheels turn at the command", || {
        wheel(&mut state, "left").is_some_and(|v| (v - 0.5).abs() < 0.01)
    });
    // The log says what it executes: the drive's command, not the arm's, of which no arbiter
    // runs (its first line said both were executed).
    let log = t.stderr_of(sim);
    assert!(
        log.contains("drive: executing its command") && !log.contains("arm: executing"),
        "{log}"
    );

    // A value that does not decode is reported and passed over; the simulator keeps going.
    let slot = bus::slot::Slot::open(&t.domain.segment_name(command.name()), true).unwrap();
    slot.write(&[0xff; 12]).unwrap();
    command.write(&drive_command(0.3, 0.3)).unwrap();
    eventually("the next command is executed", || {
        wheel(&mut state, "left").is_some_and(|v| (v - 0.3).abs() < 0.01)
    });
    assert!(t.is_running(sim), "an undecodable command did not stop it");

    // The arbiter goes away: its last command is no longer executed.
    drop(command);
    eventually("the wheels stop", || {
        wheel(&mut state, "left").is_some_and(|v| v.abs() < 0.01)
            && wheel(&mut state, "right").is_some_and(|v| v.abs() < 0.01)
    });
}

/// A command timeout of centuries (someone meaning "never") keeps a command that is not
/// re-stamped in force: it wrapped to under a millisecond, and every command went stale at once.
#[test]
fn a_command_timeout_of_centuries_never_ends_a_command() {
    // With a heartbeat, so that the timeout applies to it.
    let mut once = drive_command(0.5, 0.5);
    once.heartbeat_ms = 100;
    let (mut t, _command, mut state) = a_drive_commanded_by_hand(once);
    let sim = t.spawn_bin("robot-sim", &["--command-timeout-ms", "18446744073710"]);
    eventually("the wheels turn at the command", || {
        wheel(&mut state, "left").is_some_and(|v| (v - 0.5).abs() < 0.01)
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(wheel(&mut state, "left").is_some_and(|v| (v - 0.5).abs() < 0.01));
    let log = t.stderr_of(sim);
    assert!(!log.contains("not executing"), "{log}");
}

/// Bad arbiter names are usage errors, checked by the arbiter's own rule before anything is
/// created: a name with `/` would make a slot such as `/robot/resource//robot/arbiter/arm/state`.
#[test]
fn arbiter_names_follow_the_arbiters_rule() {
    let mut t = TestBus::new();
    for args in [
        ["--arm", "/robot/arbiter/arm"],
        ["--drive", "drive base"],
        ["--arm", ""],
    ] {
        let sim = t.spawn_bin("robot-sim", &args);
        let out = t.finish(sim);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.contains(args[0]) && err.contains(arbiter::protocol::NAME_RULE),
            "{args:?}: {err}"
        );
    }
    assert!(
        t.domain.segment_files().unwrap().is_empty(),
        "nothing was created"
    );
}

/// One arbiter for both resources is refused up front, not reported as a second publisher of
/// the simulator's own state slot.
#[test]
fn the_arm_and_the_drive_need_two_arbiters() {
    let mut t = TestBus::new();
    t.start_registry();
    let sim = t.spawn_bin("robot-sim", &["--arm", "base", "--drive", "base"]);
    let out = t.finish(sim);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("--arm and --drive must name different arbiters"),
        "{err}"
    );
    assert!(!err.contains("live publisher"), "{err}");
    let created: Vec<String> = t
        .domain
        .segment_files()
        .unwrap()
        .into_iter()
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with("/robot/"))
        .collect();
    assert!(created.is_empty(), "{created:?}");
}

#[test]
fn of_two_simulators_started_before_the_registry_the_refused_one_ends() {
    let mut t = TestBus::new();
    let first = t.spawn_bin("robot-sim", &[]);
    let second = t.spawn_bin("robot-sim", &[]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    t.start_registry();
    eventually("one of the two ends", || {
        !t.is_running(first) || !t.is_running(second)
    });
    let refused = if t.is_running(first) { second } else { first };
    let out = t.finish(refused);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already has a live publisher"), "{err}");
}

fn wheel(state: &mut bus::Subscription<ResourceState>, name: &str) -> Option<f64> {
    state.update().unwrap();
    state.value().and_then(|s| s.values.get(name).copied())
}

/// A hung arbiter (stopped, its process alive) no longer re-stamps its command: the simulator
/// stops executing it after its command timeout, and resumes when the arbiter does.
#[test]
fn the_wheels_stop_while_the_drive_arbiter_hangs() {
    wheels_stop_while_the_drive_arbiter_hangs(false);
}

/// The same with the simulator's wall clock set back an hour once the arbiter hangs (NTP or
/// GPS correcting the clock at boot): the command's age counts on the monotonic clock from
/// when it was read. Judged on the wall clock alone, the stale command looked an hour younger
/// and the wheels kept turning.
#[test]
fn the_wheels_stop_while_the_drive_arbiter_hangs_and_the_clock_is_set_back() {
    wheels_stop_while_the_drive_arbiter_hangs(true);
}

fn wheels_stop_while_the_drive_arbiter_hangs(set_clock_back: bool) {
    let mut t = TestBus::new();
    let offset = t.dir().join("clock-offset-s");
    std::fs::write(&offset, "0").unwrap();
    let drive = Drive::start(&mut t, "", "1000", &offset);
    eventually("the wheels turn at the command", || drive.at(0.5));
    t.signal(drive.arbiter, Signal::SIGSTOP);
    if set_clock_back {
        std::fs::write(&offset, "-3600").unwrap();
    }
    eventually("the wheels stop while the arbiter hangs", || drive.at(0.0));
    assert!(t.is_running(drive.controller));
    t.signal(drive.arbiter, Signal::SIGCONT);
    eventually("the wheels turn again", || drive.at(0.5));
    let log = t.stderr_of(drive.sim);
    assert!(
        log.contains("drive: the command was not re-stamped for 500 ms")
            && log.contains("not executing it (the wheels stop)")
            && log.contains("drive: executing its command"),
        "the simulator says why the wheels stopped and when they go again: {log}"
    );
}

/// An arm at its setpoint rests until its command changes; a hung arm arbiter changes nothing,
/// and the simulator, asleep, used to say nothing of it (the drive, always stepping, did).
/// It now wakes when the command it executes goes stale and says so, and says when the
/// arbiter is back.
#[test]
fn the_simulator_says_when_the_arm_arbiter_hangs_while_the_arm_rests() {
    let mut t = TestBus::new();
    let offset = t.dir().join("clock-offset-s");
    std::fs::write(&offset, "0").unwrap();
    let (arbiter, sim, _) = start_robot(
        &mut t,
        "arm",
        &[("turret", "position"), ("shoulder", "position")],
        "",
        "60000",
        &offset,
        &["arm/turret=0.3"],
    );
    let mut state = t
        .bus()
        .subscribe::<ResourceState>("/robot/resource/arm/state")
        .unwrap();
    eventually("the turret reaches its setpoint", || {
        wheel(&mut state, "turret").is_some_and(|x| (x - 0.3).abs() < 1e-4)
    });
    // At rest: the simulator no longer publishes the arm's state (it waits for a command).
    eventually("the arm rests", || {
        !state
            .wait_update(std::time::Duration::from_millis(300))
            .unwrap()
    });
    t.signal(arbiter, Signal::SIGSTOP);
    eventually("the simulator says the arm's command is stale", || {
        t.stderr_of(sim)
            .contains("arm: the command was not re-stamped for 500 ms")
    });
    // What the arm does meanwhile, not what the drive would.
    let log = t.stderr_of(sim);
    assert!(log.contains("not executing it (the joints hold)"), "{log}");
    t.signal(arbiter, Signal::SIGCONT);
    eventually(
        "the simulator says it executes the arm's command again",
        || {
            let log = t.stderr_of(sim);
            log.split("arm: the command was not re-stamped")
                .nth(1)
                .is_some_and(|after| after.contains("arm: executing its command"))
        },
    );
}

/// An arbiter without heartbeat (`heartbeat_ms = 0`) writes its command only when it changes:
/// its age says nothing, and the simulator executes it as long as its arbiter runs (it used to
/// stop the wheels 500 ms after each write, while the controller was told it owned them).
#[test]
fn the_command_of_an_arbiter_without_heartbeat_never_grows_old() {
    let mut t = TestBus::new();
    let offset = t.dir().join("clock-offset-s");
    std::fs::write(&offset, "0").unwrap();
    let drive = Drive::start(&mut t, "heartbeat_ms = 0\n", "60000", &offset);
    eventually("the wheels turn at the command", || drive.at(0.5));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(drive.at(0.5), "the wheels still turn");
    let log = t.stderr_of(drive.sim);
    assert!(!log.contains("not executing"), "{log}");
    assert_eq!(
        log.matches("sends no heartbeat").count(),
        1,
        "said once: {log}"
    );
}

/// A drive arbiter (its config starting with `arbiter_head`), the robot manager, the simulator
/// (its clock offset read from `offset`) and a controller `x` holding both wheels at 0.5 with
/// a time to live of `ttl_ms`.
struct Drive {
    arbiter: usize,
    sim: usize,
    controller: usize,
    state: std::cell::RefCell<bus::Subscription<ResourceState>>,
}

impl Drive {
    fn start(t: &mut TestBus, arbiter_head: &str, ttl_ms: &str, offset: &std::path::Path) -> Drive {
        let (arbiter, sim, controller) = start_robot(
            t,
            "drive",
            &[("left", "velocity"), ("right", "velocity")],
            arbiter_head,
            ttl_ms,
            offset,
            &["drive/left=0.5", "drive/right=0.5"],
        );
        let state = t
            .bus()
            .subscribe::<ResourceState>("/robot/resource/drive/state")
            .unwrap();
        Drive {
            arbiter,
            sim,
            controller,
            state: state.into(),
        }
    }

    /// Both wheels turn at `v`.
    fn at(&self, v: f64) -> bool {
        let mut state = self.state.borrow_mut();
        ["left", "right"]
            .iter()
            .all(|w| wheel(&mut state, w).is_some_and(|x| (x - v).abs() < 0.01))
    }
}

/// The registry, the robot manager, arbiter `name` of `resources` (name, kind; its config
/// starting with `arbiter_head`), the simulator (its clock offset read from `offset`) and a
/// compromising controller `x` holding `sets` with a time to live of `ttl_ms`: the arbiter's,
/// the simulator's and the controller's child indices.
fn start_robot(
    t: &mut TestBus,
    name: &str,
    resources: &[(&str, &str)],
    arbiter_head: &str,
    ttl_ms: &str,
    offset: &std::path::Path,
    sets: &[&str],
) -> (usize, usize, usize) {
    t.start_registry();
    let dir = t.dir();
    let manager = dir.join("manager.toml");
    std::fs::write(
        &manager,
        format!("controllers = [\"x\"]\narbiters = [\"{name}\"]\n"),
    )
    .unwrap();
    let config = dir.join(format!("{name}.toml"));
    let mut toml = format!("{arbiter_head}name = \"{name}\"\n");
    for (resource, kind) in resources {
        toml += &format!("[[resources]]\nname = \"{resource}\"\nkind = \"{kind}\"\n");
    }
    std::fs::write(&config, toml).unwrap();
    t.spawn_bin("robot-manager", &["--config", manager.to_str().unwrap()]);
    let arbiter = t.spawn_bin("arbiter", &["--config", config.to_str().unwrap()]);
    let sim = t.spawn_with_env(
        common::bin("robot-sim"),
        &[],
        &[(arbiter::clock::OFFSET_FILE_ENV, offset.to_str().unwrap())],
    );
    let mut args = vec![
        "--name",
        "x",
        "--status",
        "compromising",
        "--ttl-ms",
        ttl_ms,
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let controller = t.spawn_bin("robot-controller", &args);
    (arbiter, sim, controller)
}
