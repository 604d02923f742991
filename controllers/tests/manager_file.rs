//! The robot manager's file across real processes: edited in place, replaced, its directory
//! replaced, re-pointed through a symlink, refused; and where it places the controllers it
//! does not list.

#[path = "../../tools/tests/common/mod.rs"]
mod common;
mod robot;

use common::{eventually, require_root, runnable_by_anyone, AS_NOBODY};
use robot::{manager_order, manager_toml, manager_toml_unlisted_last, order_is, Robot};
use serde_json::{json, Value};

/// The sequence number of `/robot/manager`'s value (0 while unreadable).
fn manager_sequence(r: &Robot) -> u64 {
    let out = r.t.inspect(&["list", "/robot/manager", "--json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|row| row["sequence"].as_u64())
        .unwrap_or(0)
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

/// A SIGHUP (`systemctl reload`) while the file is written in place waits for its close: it
/// applied the half written so far (multi-user and config audit).
#[test]
fn a_sighup_while_the_file_is_written_waits_until_it_is_closed() {
    use std::io::Write;
    let mut r = Robot::new(&["a", "b"]);
    r.t.start_registry();
    let manager = r.manager();
    r.arbiter();
    eventually("the first order", || order_is(&r, json!(["a", "b"])));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&r.manager_file)
        .unwrap();
    file.write_all(b"controllers = [\"b\", \"a\"]\narbiters = [\"arm\"]\n")
        .unwrap();
    file.sync_data().unwrap();
    r.t.signal(manager, nix::sys::signal::Signal::SIGHUP);
    eventually("the manager says it waits", || {
        r.t.stderr_of(manager)
            .contains("is being written (changed, not closed yet): reloading it once it is closed")
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(order_is(&r, json!(["a", "b"])), "{:?}", manager_order(&r));
    file.write_all(b"unlisted = \"last\"\n").unwrap();
    drop(file);
    eventually("the whole new file", || {
        manager_order(&r)
            .is_some_and(|m| m["controllers"] == json!(["b", "a"]) && m["unlisted"] == "last")
    });
}

/// A change inotify does not report (the file written through a hard link in another
/// directory) found by a look that falls between the truncation and the rest of the write
/// (here: the wake for a controller that appears) is not taken half-done: it is taken once it
/// has held for a moment (500 ms). The manager used to read the empty file and log an error.
/// The write must follow the look well within that moment: a round in which this loaded
/// machine was slower proves nothing, and is tried again.
#[test]
fn a_change_found_without_an_event_is_taken_once_it_holds() {
    use std::time::{Duration, Instant};
    let mut r = Robot::new(&["a", "b"]);
    r.t.start_registry();
    let manager = r.manager();
    r.arbiter();
    eventually("the first order", || order_is(&r, json!(["a", "b"])));
    let elsewhere = r.t.dir().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let link = elsewhere.join("manager.toml");
    std::fs::hard_link(&r.manager_file, &link).unwrap();
    for round in 0..3 {
        let order = if round % 2 == 0 {
            ["b", "a"]
        } else {
            ["a", "b"]
        };
        let logged_before = r.t.stderr_of(manager).len();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&link)
            .unwrap();
        let controller = format!("zz{round}");
        r.controller(&controller, "compromising", &["arm/elbow1=0.1"], 500);
        let appeared = format!("controller {controller} appeared");
        eventually("the manager wakes for the controller", || {
            r.t.stderr_of(manager).contains(&appeared)
        });
        let seen = Instant::now();
        std::io::Write::write_all(&mut file, manager_toml(&order).as_bytes()).unwrap();
        drop(file);
        let late = seen.elapsed() > Duration::from_millis(400);
        eventually("the new order", || order_is(&r, json!(order)));
        if !late {
            let log = r.t.stderr_of(manager);
            let this_round = &log[logged_before..];
            assert!(
                !this_round.contains("keeping the previous config"),
                "{this_round}"
            );
            return;
        }
    }
    panic!("the file was never written within 400 ms of the manager's look");
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
    let manager = r.manager();
    eventually("the first order", || order_is(&r, json!(["a", "b"])));
    // Re-pointed the way deployment tools do it: a new link renamed over the old one.
    let link = dir.join("manager.toml.new");
    std::os::unix::fs::symlink(second.join("manager.toml"), &link).unwrap();
    std::fs::rename(&link, &r.manager_file).unwrap();
    eventually("the second order", || order_is(&r, json!(["b", "a"])));
    write_in_place_in_two_steps(&r, &second.join("manager.toml"), &["a"], json!(["b", "a"]));
    // The file it led to before is no longer watched: a write there is not read (the watch
    // stayed, and every write of an old release's file reloaded the config).
    let reloads = |r: &Robot| {
        r.t.stderr_of(manager)
            .matches("the priority order in force is unchanged")
            .count()
    };
    let before = reloads(&r);
    std::fs::write(first.join("manager.toml"), manager_toml(&["a", "b"])).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(reloads(&r), before, "{}", r.t.stderr_of(manager));
    assert!(order_is(&r, json!(["a"])));
}

/// The manager's slot removed under a running robot whose manager has died: the registry makes
/// it anew, empty (a running manager would go on in it, its order carried over). The arbiter
/// keeps the order it followed, and the controllers' feedback must say what the arbiter does:
/// it used to tell a controller that still held its resources that it was "not in the robot
/// manager's order" and owned nothing.
#[test]
fn a_controller_reports_what_the_arbiter_does_while_the_managers_order_is_gone() {
    let mut r = Robot::running(&["a"]);
    let manager = 1;
    let a = r.controller("a", "compromising", &["arm/turret=0.2"], 500);
    eventually("a owns the turret", || {
        r.t.stdout_of(a).contains("a arm: full (owns: turret)")
    });
    r.t.kill(manager);
    std::fs::remove_file(r.t.segment_path("/robot/manager")).unwrap();
    eventually("the order is gone from the bus", || {
        manager_order(&r).is_none()
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let printed = r.t.stdout_of(a);
    let after = &printed[printed.rfind("full (owns: turret)").unwrap_or(0)..];
    assert!(
        !after.contains("not in the robot manager's order"),
        "{printed}"
    );
    r.expect(
        "the arbiter keeps its order",
        json!({"turret": "a", "shoulder": null, "elbow1": null, "elbow2": null}),
        json!({"a": "full"}),
    );
}

/// A file the manager may not read, made readable by a change of its mode alone, is taken:
/// nothing saw that change (the file's look compared its size and modification time, and no
/// event was asked for), and the old order stayed in force until a SIGHUP. The manager runs
/// as another user: root reads any file.
#[test]
fn a_file_made_readable_by_its_mode_alone_is_taken() {
    use std::os::unix::fs::PermissionsExt;
    require_root();
    let mut r = Robot::new(&["a"]);
    r.t.start_registry_with(&["--group", "65534"]);
    let manager = runnable_by_anyone(&r.t, "robot-manager");
    let mode = |m| std::fs::Permissions::from_mode(m);
    std::fs::set_permissions(&r.manager_file, mode(0o644)).unwrap();
    let mut args = AS_NOBODY.to_vec();
    let config = r.manager_file.to_str().unwrap().to_owned();
    args.extend([manager.to_str().unwrap(), "--config", &config]);
    let m = r.t.spawn("setpriv".into(), &args);
    eventually("the order is published", || order_is(&r, json!(["a"])));
    // As `install -m 600` by root leaves a file: replaced by one only its owner reads.
    let new = r.t.dir().join("manager.toml.new");
    std::fs::write(&new, manager_toml(&["b"])).unwrap();
    std::fs::set_permissions(&new, mode(0o600)).unwrap();
    std::fs::rename(&new, &r.manager_file).unwrap();
    eventually("the manager says it may not read the file", || {
        r.t.stderr_of(m).contains("Permission denied")
    });
    assert!(order_is(&r, json!(["a"])), "the previous order stays");
    std::fs::set_permissions(&r.manager_file, mode(0o644)).unwrap();
    eventually("the file made readable is taken", || {
        order_is(&r, json!(["b"]))
    });
}

/// A manager started before the registry says its order is not in force yet, and says when it
/// is: it logged "priority order: [..]" as if the arbiters followed it (config audit).
#[test]
fn a_manager_started_first_says_when_its_order_is_in_force() {
    let mut r = Robot::new(&["a", "b"]);
    let manager = r.manager();
    eventually("the manager says its order waits", || {
        r.t.stderr_of(manager).contains(
            "priority order: [\"a\", \"b\"] (not in force yet: on /robot/manager once \
             registry-server runs and takes it)",
        )
    });
    r.t.start_registry();
    eventually("the manager says its order is in force", || {
        r.t.stderr_of(manager).contains(
            "the registry took the priority order (revision 1): in force on /robot/manager",
        )
    });
    eventually("the order on the bus", || order_is(&r, json!(["a", "b"])));
}

/// A file written in place right after an earlier write of it was closed: the manager, woken by
/// that close, read the file once the new write had begun and published its first part (here
/// without the `unlisted` line, so unlisted controllers would drop out of the order) until the
/// close (probing the config reload: four rounds of eight, with controllers waking the manager
/// often). It now drops a read during which the file was written, and takes the file at its
/// close. The manager waits 300 ms before it reads (a test switch), the new write begins
/// within them.
#[test]
fn a_write_begun_just_after_a_close_is_not_taken_half_done() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let mut r = Robot::new(&["a", "b"]);
    std::fs::write(&r.manager_file, manager_toml_unlisted_last(&["a", "b"])).unwrap();
    r.t.start_registry();
    let f = r.manager_file.to_str().unwrap().to_owned();
    let manager = r.t.spawn_with_env(
        common::bin("robot-manager"),
        &["--config", &f],
        &[("BATON_TEST_MANAGER_PAUSE_BEFORE_READ_MS", "300")],
    );
    eventually("the first order", || order_is(&r, json!(["a", "b"])));
    let whole = "controllers = [\"a\", \"b\"]\narbiters = [\"arm\"]\nunlisted = \"last\"\n";
    // Longer than `whole`, so that none of it is left behind the new bytes.
    let first_part = "controllers = [\"b\", \"a\"]  # the new order, longer than the file before\n\
                      arbiters = [\"arm\"]\n";
    std::fs::write(&r.manager_file, whole).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&r.manager_file)
        .unwrap();
    file.write_all(first_part.as_bytes()).unwrap();
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        let order = manager_order(&r);
        assert!(
            !order.as_ref().is_some_and(|m| m["unlisted"] != "last"),
            "the first part was taken: {order:?}\n{}",
            r.t.stderr_of(manager)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        r.t.stderr_of(manager)
            .contains("was written to while it was read: taking it once its writer closes it"),
        "{}",
        r.t.stderr_of(manager)
    );
    file.write_all(b"unlisted = \"last\"\n").unwrap();
    drop(file);
    eventually("the whole new file", || {
        manager_order(&r)
            .is_some_and(|m| m["controllers"] == json!(["b", "a"]) && m["unlisted"] == "last")
    });
}
