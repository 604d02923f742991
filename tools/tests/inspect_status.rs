//! `bus-inspect` describing what is, or is not, going on: a slot that stopped has no rate,
//! a domain without a registry says so, the writer reads alike in every command and with its
//! whole program name, and `doctor` names what it could not read.

mod common;

use common::output::{json, json_lines, ok};
use common::sample::Status;
use common::{TestBus, WATCHDOG};

/// The first row of `list` for `pattern`, as JSON.
fn listed(t: &TestBus, pattern: &str) -> serde_json::Value {
    let rows = json_lines(&t.inspect(&["list", pattern, "--json"]));
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows[0].clone()
}

/// RATE is what the slot does now: once its newest value is older than three of its periods
/// (and at least a second), `list` and `info` show no rate instead of the last burst's.
#[test]
fn a_slot_that_stopped_has_no_rate() {
    let mut t = TestBus::new();
    t.start_registry();
    let mut p = t.bus().publish::<u64>("/burst/x").unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    let mut i = 0;
    common::eventually("a rate while it writes every 10 ms", || {
        for _ in 0..4 {
            i += 1;
            p.write(&i).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        listed(&t, "/burst/x")["rate_hz"]
            .as_f64()
            .is_some_and(|r| r > 0.0)
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let row = listed(&t, "/burst/x");
    assert!(row["rate_hz"].is_null(), "{row}");
    assert!(row["age_s"].as_f64().unwrap() >= 1.0, "{row}");
    let table = ok(&t.inspect(&["list", "/burst/x"]));
    let cells: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(cells[4], "-", "RATE column: {table}");
    let info = ok(&t.inspect(&["info", "/burst/x"]));
    assert!(info.contains(", rate -"), "{info}");
}

/// Without a registry, `list` still lists the segments (exit 0) and `get`/`info` of a missing
/// slot fail as before, but each says on stderr that no registry answers, in doctor's words;
/// `stats` and `graph` say so too and exit 1.
#[test]
fn without_a_registry_list_get_info_stats_and_graph_say_so() {
    let mut t = TestBus::new();
    let domain = t.domain.to_string();
    // A slot the registry created before it was killed: its segment outlives it.
    t.start_registry();
    let mut p = t.bus().publish::<u64>("/lonely/x").unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    p.write(&1).unwrap();
    t.kill_registry();
    let d: serde_json::Value =
        serde_json::from_slice(&t.inspect(&["doctor", "--json"]).stdout).unwrap();
    assert_eq!(d["checks"][0]["check"], "registry");
    let doctor_says = d["checks"][0]["detail"].as_str().unwrap().to_owned();
    assert!(
        doctor_says.contains("no registry-server answers") && doctor_says.contains(&domain),
        "{doctor_says}"
    );
    // The domains in use here, which the message ends with, come and go with the tests that
    // run beside this one: compared without them.
    let note = format!("bus-inspect: {}", without_domains_in_use(&doctor_says));
    let says_note = |err: &str| err.lines().any(|l| without_domains_in_use(l) == note);

    for args in [&["list"][..], &["list", "--json"], &["list", "/nothing/*"]] {
        let out = t.inspect(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(says_note(&err), "{args:?}: {err}");
    }
    assert!(ok(&t.inspect(&["list"])).contains("/lonely/x"));
    for args in [
        &["get", "/robot/manager"][..],
        &["info", "/robot/manager"],
        &["put", "/robot/manager", "1"],
    ] {
        let out = t.inspect(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no slot /robot/manager"), "{args:?}: {err}");
        assert!(says_note(&err), "{args:?}: {err}");
        // Not `list --remote`, which asks the registry that is not there.
        assert!(!err.contains("list --remote"), "{args:?}: {err}");
    }
    // `stats` and `graph` print what shared memory shows, but without the processes they
    // describe through the registry they end in 1, saying why on stderr.
    for args in [
        &["stats"][..],
        &["stats", "--json"],
        &["graph"],
        &["graph", "--json"],
    ] {
        let out = t.inspect(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(!out.stdout.is_empty(), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(says_note(&err), "{args:?}: {err}");
    }
    // So do the commands that wait for or measure a slot that is not there, and `endpoints`,
    // which has nothing but the registry to ask (debugging.md says every command does).
    for (args, status) in [
        (&["watch", "/robot/manager", "--timeout", "0.2"][..], 1),
        (&["wait", "/robot/manager", "--timeout", "0.2"], 2),
        (&["hz", "/robot/manager", "--window", "0.2"], 1),
        (&["bw", "/robot/manager", "--window", "0.2"], 1),
        (&["endpoints"], 1),
    ] {
        let out = t.inspect(args);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(says_note(&err), "{args:?}: {err}");
    }
    // A slot that exists reads without a registry, and without a note.
    let out = t.inspect(&["get", "/lonely/x", "--json"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{out:?}");

    // With a registry, nothing more is said.
    t.start_registry();
    for args in [&["list"][..], &["get", "/robot/manager"]] {
        let err = String::from_utf8_lossy(&t.inspect(args).stderr).into_owned();
        assert!(!err.contains("no registry-server"), "{args:?}: {err}");
    }
}

/// The no-registry message without the domains in use it ends with.
fn without_domains_in_use(message: &str) -> &str {
    message
        .split(", or name a domain in use here")
        .next()
        .unwrap_or(message)
}

/// `get` (and `watch`) describe the writer in `list`'s words: `alive PROGRAM (PID)`,
/// `gone (PID)`, never Rust's `Alive`.
#[test]
fn get_and_list_describe_the_writer_alike() {
    let mut t = TestBus::new();
    t.start_registry();
    let mut p = t.bus().publish::<Status>("/robot/status").unwrap();
    p.write(&Status::arm()).unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    let me = std::process::id();
    let alive = format!("alive {} ({me})", bus::process::own_program());
    let table = ok(&t.inspect(&["list", "/robot/status"]));
    assert!(table.contains(&alive), "{table}");
    let got = ok(&t.inspect(&["get", "/robot/status"]));
    let head = got.lines().next().unwrap();
    assert!(head.contains(&format!(", writer {alive}")), "{head}");
    let watched = ok(&t.inspect(&["watch", "/robot/status", "--count", "1"]));
    assert!(watched.contains(&format!(", writer {alive}")), "{watched}");

    drop(p);
    common::eventually("the writer is gone", || {
        listed(&t, "/robot/status")["writer_alive"] == false
    });
    let gone = format!("gone ({me})");
    assert!(ok(&t.inspect(&["list", "/robot/status"])).contains(&gone));
    let head = ok(&t.inspect(&["get", "/robot/status"]));
    assert!(head.contains(&format!(", writer {gone}")), "{head}");
    assert!(!head.contains("Alive") && !head.contains("Gone"), "{head}");
}

/// A program name longer than the kernel's 15-character `comm` is shown whole (the base name
/// of its argv[0]).
#[test]
fn long_program_names_are_not_cut() {
    let mut t = TestBus::new();
    t.start_registry();
    let long = t.dir().join("bus-stress-with-a-long-name");
    std::os::unix::fs::symlink(common::bin("bus-stress"), &long).unwrap();
    let writer = t.spawn(
        long,
        &[
            "write",
            "--name",
            "/long/x",
            "--interval-ms",
            "50",
            "--max-size",
            "8",
        ],
    );
    common::eventually("the writer writes", || {
        t.inspect(&["get", "/long/x", "--json"]).status.success()
    });
    let row = listed(&t, "/long/x");
    assert_eq!(
        row["writer_program"], "bus-stress-with-a-long-name",
        "{row}"
    );
    let info = ok(&t.inspect(&["info", "/long/x"]));
    let cell = format!(
        "writer      alive bus-stress-with-a-long-name ({})",
        t.pid(writer)
    );
    assert!(info.contains(&cell), "{info}");
}

/// Processes whose memory maps cannot be read, as root, are named; doctor does not tell root to
/// run as root.
#[test]
fn doctor_as_root_names_the_processes_it_cannot_read() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let mut t = TestBus::new();
    t.start_registry();
    let mut unreadable: Vec<u32> = bus::process::pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/maps"))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
        })
        .collect();
    unreadable.sort_unstable();
    let d = json(&t.inspect(&["doctor", "--json"]));
    let segments = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "segments")
        .unwrap();
    let detail = segments["detail"].as_str().unwrap();
    assert!(!detail.contains("run as root"), "{detail}");
    // The first of them (pid 1 in a container whose init is protected) is named.
    if let Some(first) = unreadable.first() {
        assert!(detail.contains(&format!("pid {first}")), "{detail}");
    } else {
        eprintln!("no unreadable process here: only the wording is checked");
    }
}

/// `stats` counts slots that exist: a name only subscribed to so far has no slot yet, and a
/// subscription waiting there is not also counted as bound (it used to read "8 slots" for 5
/// and "3 subscriptions (3 pending)" for 3 waiting).
#[test]
fn stats_tells_slots_from_names_awaited_and_bound_from_waiting_subscriptions() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let p = bus.publish::<u64>("/stats/published").unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    let bound = bus.subscribe::<u64>("/stats/published").unwrap();
    bound.wait_bound(WATCHDOG).unwrap();
    let _waiting = bus.subscribe::<u64>("/stats/awaited").unwrap();
    common::eventually("the waiting subscription registered", || {
        json(&t.inspect(&["stats", "--json"]))["registry"]["pending"] == 1
    });
    let s = json(&t.inspect(&["stats", "--json"]));
    // The publication's slot and the registry's directory.
    assert_eq!(s["registry"]["slots"], 2, "{s}");
    assert_eq!(s["registry"]["awaited"], 1, "{s}");
    assert_eq!(s["registry"]["subscriptions"], 1, "{s}");
    let text = ok(&t.inspect(&["stats"]));
    assert!(
        text.contains("2 slots (+1 names awaited)")
            && text.contains("1 subscriptions bound (+1 waiting for a publication)"),
        "{text}"
    );
}

/// A slot whose header is whole but whose value cannot be read (a buffer's stored length
/// overwritten past the capacity) is a slot nobody can read, as `list` says: `doctor`'s
/// segments row fails on it as on a damaged header (it said "ok"; docs review by running).
#[test]
fn doctor_fails_on_a_value_nobody_can_read() {
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/doctor/value", 0x1122_3344_5566_7788u64);
    // Value 1's stored length: the u32 at 520 + 4 x (1 % 4) (`bus::slot`'s layout).
    let bytes = std::fs::read(t.segment_path("/doctor/value")).unwrap();
    assert_eq!(bytes[524..528], 8u32.to_le_bytes(), "the length word");
    // In place: a rewrite would cut the file first, under the registry's mapping.
    t.overwrite_segment("/doctor/value", 524, &999_999u32.to_le_bytes());
    doctor_fails_on_segment(&t, "/doctor/value", "exceeds capacity");
}

/// Runs `doctor`, which must fail with its segments row naming `slot` and saying `why`; its
/// text.
fn doctor_fails_on_segment(t: &TestBus, slot: &str, why: &str) -> String {
    let out = t.inspect(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("FAIL")
            && l.contains("segments")
            && l.contains(slot)
            && l.contains(why)),
        "{text}"
    );
    text
}

/// A symbolic link in place of a segment (no registry to make it anew): doctor named it by the
/// mode of the file it leads to ("/s/v has mode 0640", another slot's), which the bus never
/// opens through a link. The segments row says what is there instead (it said ELOOP).
#[test]
fn doctor_names_a_link_in_place_of_a_segment_as_such() {
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/doctor/linked", 1);
    t.leave_value("/doctor/target", 2);
    t.kill_registry();
    let linked = t.segment_path("/doctor/linked");
    let target = t.segment_path("/doctor/target");
    std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    std::fs::remove_file(&linked).unwrap();
    std::os::unix::fs::symlink(&target, &linked).unwrap();
    let text = doctor_fails_on_segment(
        &t,
        "/doctor/linked",
        "a symbolic link in place of the segment",
    );
    let permissions = text.lines().find(|l| l.contains("permissions")).unwrap();
    assert!(
        permissions.contains("/doctor/target has mode 0640"),
        "{text}"
    );
    assert!(!permissions.contains("/doctor/linked"), "{text}");
}

/// A registry that listens but does not answer (stopped here; hung, or out of file
/// descriptors): every command said "no registry-server answers ...; start `registry-server`",
/// which would not help. It says one listens and did not answer, and doctor and clean call
/// nothing stale, as for a registry that refuses the user.
#[test]
fn a_registry_that_does_not_answer_is_not_said_to_be_missing() {
    let mut t = TestBus::new();
    t.start_registry();
    t.leave_value("/silent/value", 1);
    t.signal(t.registry(), nix::sys::signal::Signal::SIGSTOP);
    let out = t.inspect(&["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    t.signal(t.registry(), nix::sys::signal::Signal::SIGCONT);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("listens on domain") && text.contains("did not answer within 5s"),
        "{text}"
    );
    assert!(!text.contains("start `registry-server"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("skip") && l.contains("stale")),
        "{text}"
    );
}
