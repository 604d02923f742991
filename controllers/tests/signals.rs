//! The services under `systemctl stop` and `systemctl kill -s HUP`: SIGTERM stops each one with
//! a log line and exit status 0 (the arbiter first sends every resource its safe command), and
//! SIGHUP stops none of them (it reloads the manager's file; a robot-controller ends on it only
//! when it is its terminal's, releasing).

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use common::eventually;
use common::output::json;
use nix::sys::signal::Signal;
use robot::Robot;
use serde_json::Value;

/// The arm arbiter's coherent command, as `bus-inspect get --json` prints it.
fn arm_command(r: &Robot) -> Value {
    json(&r.t.inspect(&["get", "/robot/arbiter/arm/command", "--json"]))
}

#[test]
fn sighup_stops_no_service_and_sigterm_stops_each_cleanly() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    let manager = r.manager();
    let arbiter = r.arbiter();
    let sim = r.t.spawn_bin("robot-sim", &[]);
    // As a service: in a session of its own, without a controlling terminal (systemd starts
    // each service so), also when the tests run in a terminal.
    let robot_controller = common::bin("robot-controller");
    let mut args = vec![robot_controller.to_str().unwrap()];
    args.extend(robot::x_holding_the_turret_args("30"));
    let x = r.t.spawn("setsid".into(), &args);
    eventually("x holds the turret", || {
        r.t.stdout_of(x).contains("x arm: full (owns: turret)")
    });
    for service in [manager, arbiter, sim] {
        r.t.signal(service, Signal::SIGHUP);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    for (service, name) in [
        (manager, "manager"),
        (arbiter, "arbiter"),
        (sim, "robot-sim"),
    ] {
        assert!(
            r.t.is_running(service),
            "SIGHUP ended the {name}: {}",
            r.t.stderr_of(service)
        );
    }
    assert!(r.t.stderr_of(arbiter).contains("SIGHUP ignored"));
    assert!(r.t.stderr_of(manager).contains("SIGHUP: reloading"));
    assert_eq!(arm_command(&r)["setpoints"]["turret"], 1.0);

    // The arbiter's last command is the safe one: every resource held where the simulator
    // last measured it, owned by nobody.
    r.t.signal(arbiter, Signal::SIGTERM);
    let out = r.t.finish(arbiter);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("stopping on SIGTERM"), "{log}");
    assert!(
        log.contains("every resource has its safe command; stopped"),
        "{log}"
    );
    // The release is put down to the stop (it was put down to the manager's order).
    assert!(
        log.contains("arm/turret: x -> (safe) (x is no longer followed: the arbiter is stopping)"),
        "{log}"
    );
    let block = r.arm_block().unwrap();
    assert!(
        block["owners"]
            .as_object()
            .unwrap()
            .values()
            .all(Value::is_null),
        "{block}"
    );
    let command = arm_command(&r);
    let state = json(&r.t.inspect(&["get", "/robot/resource/arm/state", "--json"]));
    assert_eq!(
        command["setpoints"]["turret"], state["values"]["turret"],
        "held where it was measured: {command} {state}"
    );

    for (service, name) in [(manager, "robot-manager"), (sim, "robot-sim")] {
        r.t.signal(service, Signal::SIGTERM);
        let out = r.t.finish(service);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {log}");
        assert!(log.contains("stopping on SIGTERM"), "{name}: {log}");
    }
    let registry = r.t.registry();
    r.t.signal(registry, Signal::SIGHUP);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(r.t.is_running(registry), "SIGHUP ended the registry");
    r.t.signal(registry, Signal::SIGTERM);
    let out = r.t.finish(registry);
    assert!(out.status.success(), "registry: {out:?}");

    // A robot-controller without a terminal (a service) lives through SIGHUP too; SIGTERM ends
    // it, releasing.
    r.t.signal(x, Signal::SIGHUP);
    eventually("the robot-controller says it ignores SIGHUP", || {
        r.t.stderr_of(x)
            .contains("SIGHUP ignored: no terminal of this process closed")
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(r.t.is_running(x), "SIGHUP ended the robot-controller");
    r.t.signal(x, Signal::SIGTERM);
    let out = r.t.finish(x);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("x: released every resource"), "{text}");
}

/// A robot-controller started from a terminal ends when the terminal closes (SIGHUP), also
/// with its input redirected, as `robot-controller ... &` in a script run there has it: it
/// looked at its input only, and kept its command in force after the terminal went.
#[test]
fn a_controller_started_from_a_terminal_ends_when_it_closes() {
    let mut r = Robot::new(&["y"]);
    r.t.start_registry();
    r.manager();
    r.arbiter();
    let command = format!(
        "exec {} --domain {} --name y --status compromising --set arm/turret=1 --duration-s 60 \
         < /dev/null",
        common::bin("robot-controller").display(),
        r.t.domain.as_str()
    );
    // `script` runs the command on a terminal of its own (a pseudo-terminal): its controlling
    // terminal. `exec` makes the controller script's child.
    let terminal = r.t.spawn_with_args_only(
        "script".into(),
        &[
            "--quiet",
            "--flush",
            "--return",
            "--command",
            &command,
            "/dev/null",
        ],
    );
    eventually("y holds the turret", || {
        r.t.stdout_of(terminal)
            .contains("y arm: full (owns: turret)")
    });
    let y = common::children_of(r.t.pid(terminal));
    assert_eq!(y.len(), 1, "script's children: {y:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(y[0]), Signal::SIGHUP).unwrap();
    let out = r.t.finish(terminal);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("y: released every resource"), "{text}");
}

/// A controller stopped (SIGSTOP, a suspended machine) for longer than its time to live lost
/// its place meanwhile, though its outcome may read the same as before once it continues: it
/// says so.
#[test]
fn a_controller_stopped_past_its_time_to_live_says_so_when_it_continues() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    let x = r.controller("x", "compromising", &[], 200);
    eventually("x publishes its block", || {
        r.t.inspect(&["get", "/robot/controller/x", "--json"])
            .status
            .success()
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !r.t.stderr_of(x).contains("not refreshed"),
        "{}",
        r.t.stderr_of(x)
    );
    r.t.signal(x, Signal::SIGSTOP);
    std::thread::sleep(std::time::Duration::from_millis(800));
    r.t.signal(x, Signal::SIGCONT);
    eventually(
        "x says it was not refreshed for longer than its time to live",
        || {
            r.t.stderr_of(x)
                .contains("longer than its time to live (200ms; the process was stopped, or not given a CPU in time")
        },
    );
}

/// A controller that hangs (SIGSTOP) loses its resources one time to live after its last
/// write, even when the arbiter's wall clock is set back meanwhile (NTP or GPS correcting a
/// clock at boot): the arbiter counts expiry on its monotonic clock. On the wall clock alone
/// the hung controller held the turret for the hour the clock went back.
#[test]
fn a_hung_controller_expires_on_time_when_the_clock_is_set_back() {
    let mut r = Robot::new(&["x"]);
    let offset = r.t.dir().join("clock-offset-s");
    std::fs::write(&offset, "0").unwrap();
    r.t.start_registry();
    r.manager();
    let arbiter =
        r.arbiter_with_env(&[(arbiter::clock::OFFSET_FILE_ENV, offset.to_str().unwrap())]);
    let x = r.controller("x", "compromising", &["arm/turret=1"], 300);
    r.expect(
        "x holds the turret",
        serde_json::json!({"turret": "x", "shoulder": null, "elbow1": null, "elbow2": null}),
        serde_json::json!({"x": "full"}),
    );
    r.t.signal(x, Signal::SIGSTOP);
    std::fs::write(&offset, "-3600").unwrap();
    r.expect(
        "the hung x's block expired",
        serde_json::json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        serde_json::json!({"x": "expired"}),
    );
    // The log says why x lost the turret.
    eventually("the arbiter says why", || {
        r.t.stderr_of(arbiter)
            .contains("arm/turret: x -> (safe) (x's block expired")
    });
    r.t.signal(x, Signal::SIGCONT);
}

/// A controller whose clock is behind the arbiter's by more than its time to live (a payload
/// computer not synchronised) has every block arrive expired: the arbiter says so once, with
/// the likely cause, instead of the controller just never getting anything.
#[test]
fn a_block_that_arrives_expired_is_said_with_its_likely_cause() {
    let mut r = Robot::new(&["x"]);
    let offset = r.t.dir().join("clock-offset-s");
    std::fs::write(&offset, "-2").unwrap();
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let first = x_with_clock_offset(&mut r, &offset, "500");
    r.expect(
        "x's blocks count as expired",
        serde_json::json!({"turret": null, "shoulder": null, "elbow1": null, "elbow2": null}),
        serde_json::json!({"x": "expired"}),
    );
    eventually("the arbiter says why", || {
        let log = r.t.stderr_of(arbiter);
        log.contains("controller x's block arrives already expired")
            && log.contains("for a time to live of 500 ms")
    });
    let said =
        r.t.stderr_of(arbiter)
            .matches("arrives already expired")
            .count();
    assert_eq!(said, 1, "said once: {}", r.t.stderr_of(arbiter));
    // The next process of that name: its blocks arrive expired like the first's, so the
    // arbiter's decision does not change, but it acknowledges them; the controller used to say
    // "not seen yet" for ever, and the arbiter said nothing more.
    r.t.kill(first);
    let second = x_with_clock_offset(&mut r, &offset, "500");
    eventually("the second x says it is expired, and why", || {
        r.t.stdout_of(second)
            .contains("x arm: expired (the arbiter counts this controller's block as run out")
    });
    eventually("the arbiter says it for the second x too", || {
        r.t.stderr_of(arbiter)
            .matches("arrives already expired")
            .count()
            == 2
    });
}

/// A controller whose clock is behind by most of its time to live: each block arrives alive,
/// but expires before the next refresh (every third of the time to live) comes, and the
/// controller's control came and went several times a second without a word. The arbiter now
/// says, once, that blocks arrive with less than half of their time to live left, and why.
#[test]
fn blocks_that_arrive_late_are_said_before_control_comes_and_goes() {
    let mut r = Robot::new(&["x"]);
    let offset = r.t.dir().join("clock-offset-s");
    std::fs::write(&offset, "-1").unwrap();
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    x_with_clock_offset(&mut r, &offset, "1400");
    eventually("the arbiter says the blocks come late", || {
        let log = r.t.stderr_of(arbiter);
        log.contains("controller x's block arrives with less than half of its time to live left")
            && log.contains("for a time to live of 1400 ms")
    });
    // A few refreshes later (every 467 ms), still said once.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let log = r.t.stderr_of(arbiter);
    assert_eq!(log.matches("less than half").count(), 1, "said once: {log}");
    assert!(!log.contains("arrives already expired"), "{log}");
}

/// A robot-controller or a robot manager started while its registry hangs (stopped) waits
/// seconds for each answer while it joins the bus; SIGTERM used to wait for them all (about
/// 10 s under `systemctl stop`). Both now exit at once: nothing a controller published outlives
/// it (its block expires, or the registry marks its writer gone).
#[test]
fn sigterm_stops_a_controller_and_a_manager_still_joining_a_hung_registry() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    let registry = r.t.registry();
    r.t.signal(registry, Signal::SIGSTOP);
    let x = r.controller("x", "compromising", &["arm/turret=1"], 200);
    let manager = r.manager();
    std::thread::sleep(std::time::Duration::from_millis(500));
    r.t.signal(x, Signal::SIGTERM);
    r.t.signal(manager, Signal::SIGTERM);
    // Well before the first of their registrations (5 s each) would have given up.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while (r.t.is_running(x) || r.t.is_running(manager)) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let still_running = [r.t.is_running(x), r.t.is_running(manager)];
    r.t.signal(registry, Signal::SIGCONT);
    assert_eq!(
        still_running,
        [false, false],
        "still joining 3 s after SIGTERM"
    );
    assert!(r.t.finish(x).status.success());
    assert!(r.t.finish(manager).status.success());
}

/// A SIGHUP while the manager joins a hung registry is not lost: the manager reloads, and says
/// so, once its main loop runs (it reloaded without a word).
#[test]
fn a_sighup_while_the_manager_joins_the_bus_reloads_once_it_runs() {
    let mut r = Robot::new(&["x"]);
    r.t.start_registry();
    let registry = r.t.registry();
    r.t.signal(registry, Signal::SIGSTOP);
    let manager = r.manager();
    std::thread::sleep(std::time::Duration::from_millis(500));
    r.t.signal(manager, Signal::SIGHUP);
    std::thread::sleep(std::time::Duration::from_millis(200));
    r.t.signal(registry, Signal::SIGCONT);
    eventually("the manager reloads once it runs", || {
        r.t.stderr_of(manager)
            .contains("SIGHUP (while joining the bus): reloading")
    });
    assert!(r.t.is_running(manager), "{}", r.t.stderr_of(manager));
}

/// SIGTERM wakes the arbiter at once: also one with no heartbeat and only a controller with a
/// long time to live (nothing else would wake it for a minute), it sends the safe command.
#[test]
fn sigterm_wakes_an_arbiter_without_heartbeat_for_its_safe_command() {
    let mut r = Robot::new(&["x"]);
    std::fs::write(&r.arm_file, format!("heartbeat_ms = 0\n{}", robot::ARM)).unwrap();
    r.t.start_registry();
    r.manager();
    let arbiter = r.arbiter();
    let x = r.controller("x", "compromising", &["arm/turret=1"], 60_000);
    eventually("x holds the turret", || {
        r.t.stdout_of(x).contains("x arm: full (owns: turret)")
    });
    r.t.signal(arbiter, Signal::SIGTERM);
    let out = r.t.finish(arbiter);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("every resource has its safe command; stopped"),
        "{log}"
    );
    // Nobody owns the turret: it holds (no simulator here: where it was last commanded). The
    // stopped arbiter follows no controller: no outcome for x (it said `expired`, as if x's
    // block had run out), and x says the arbiter no longer runs.
    let block = r.arm_block().unwrap();
    assert!(block["owners"]["turret"].is_null(), "{block}");
    assert_eq!(block["outcomes"], serde_json::json!({}), "{block}");
    eventually("x says its arbiter stopped", || {
        r.t.stdout_of(x)
            .contains("x arm: arbiter not running (owns: nothing)")
    });
}

/// Starts robot-controller x (compromising, the turret at 1) with time to live `ttl_ms`, its
/// wall clock offset by the seconds in `offset` (the clock test switch).
fn x_with_clock_offset(r: &mut Robot, offset: &std::path::Path, ttl_ms: &str) -> usize {
    r.t.spawn_with_env(
        common::bin("robot-controller"),
        &[
            "--name",
            "x",
            "--status",
            "compromising",
            "--ttl-ms",
            ttl_ms,
            "--set",
            "arm/turret=1",
        ],
        &[(arbiter::clock::OFFSET_FILE_ENV, offset.to_str().unwrap())],
    )
}

/// An arbiter woken and then kept off its CPU for longer than the controllers' time to live
/// (a busy process on its CPU, a stop signal right after the wake, a paused virtual machine)
/// read, on running again, only the block whose write woke it: the blocks the others refreshed
/// meanwhile were still the old ones it held, past their time to live, and a live
/// higher-priority controller was counted expired, its resources commanded to a lower one for
/// a cycle (arbitration chaos soak). It reads every block before one counts as expired.
#[test]
fn an_arbiter_starved_after_a_wake_counts_no_live_controller_expired() {
    let (mut r, _, arbiter) = Robot::running_with_children(&["hi", "lo"]);
    let hi = r.controller("hi", "non_compromising", &["arm/turret=0.5"], 100);
    let lo = r.controller("lo", "compromising", &["arm/turret=-0.5"], 100);
    eventually("hi holds the turret", || {
        r.t.stdout_of(hi).contains("hi arm: full")
    });
    // The arbiter on the last CPU this test may use, in the idle scheduling class: a busy
    // process there takes its CPU whenever it wants it.
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let cpus: Vec<usize> = (0..nix::sched::CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    assert!(
        cpus.len() >= 2,
        "this test starves the arbiter on a CPU of its own: needs 2 CPUs, has {cpus:?}"
    );
    let cpu = cpus[cpus.len() - 1].to_string();
    let pid = r.t.pid(arbiter).to_string();
    for (program, args) in [
        ("taskset", &["-a", "-p", "-c", &cpu, &pid][..]),
        ("chrt", &["-a", "-i", "-p", "0", &pid][..]),
    ] {
        let status = std::process::Command::new(program)
            .args(args)
            .output()
            .unwrap();
        assert!(status.status.success(), "{program}: {status:?}");
    }
    for _ in 0..5 {
        let mut busy = std::process::Command::new("taskset")
            .args(["-c", &cpu, "sh", "-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        busy.kill().unwrap();
        busy.wait().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let log = r.t.stderr_of(arbiter);
    assert!(!log.contains("turret: hi -> lo"), "{log}");
    assert!(
        !r.t.stdout_of(hi).contains("expired"),
        "{}",
        r.t.stdout_of(hi)
    );
    assert!(r.t.is_running(lo));
}

/// An arbiter stopping publishes its last block without outcomes (it follows no controller any
/// more) a moment before its process ends: a controller it had answered said "not seen yet"
/// in between, as if it had never been seen (arbitration chaos soak, at every SIGTERM).
#[test]
fn a_controller_answered_before_says_an_arbiter_stopping_gives_no_outcome_now() {
    let (mut r, _, arbiter) = Robot::running_with_children(&["c1"]);
    let c1 = r.controller("c1", "compromising", &["arm/turret=0.1"], 300);
    eventually("c1 holds the turret", || {
        r.t.stdout_of(c1).contains("c1 arm: full")
    });
    r.t.signal(arbiter, Signal::SIGTERM);
    eventually("c1 sees the arbiter gone", || {
        r.t.stdout_of(c1).contains("c1 arm: arbiter not running")
    });
    // Before its first answer a controller is "not seen yet", rightly: only what follows the
    // answer counts.
    let out = r.t.stdout_of(c1);
    let after = &out[out.find("c1 arm: full").unwrap()..];
    assert!(!after.contains("not seen yet"), "{out}");
}
