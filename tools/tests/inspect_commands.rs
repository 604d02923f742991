//! Every `bus-inspect` command against a live bus (real registry-server, bus-stress writers and
//! readers, publications of this test process), with `--json` parsed back: list, info, get,
//! watch, hz, bw, put, wait, graph, stats, doctor, clean, endpoints; and a check that the
//! reading commands leave every byte of the bus unchanged.

mod common;

use std::collections::BTreeMap;
use std::process::Output;

use common::output::{json, json_lines, ok};
use common::{TestBus, WATCHDOG};

use common::sample::{Mode, Status};

/// The one line of stderr of a failed command.
fn refused(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "one error line: {err}");
    err
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A writer at 10 ms, a waiting reader of it, and a `Status` written once by this process.
fn live_bus(t: &mut TestBus) -> (bus::Publication<Status>, usize, usize) {
    t.start_registry();
    let writer = t.spawn_stress(&[
        "write",
        "--name",
        "/robot/counter",
        "--interval-ms",
        "10",
        "--max-size",
        "100",
    ]);
    let reader = t.spawn_stress(&[
        "read",
        "--name",
        "/robot/counter",
        "--seconds",
        "60",
        "--wait",
    ]);
    let mut p = t.bus().publish::<Status>("/robot/status").unwrap();
    p.write(&Status::arm()).unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    common::eventually("the counter has values and a subscriber", || {
        let out = t.inspect(&["info", "/robot/counter", "--json"]);
        out.status.success() && {
            let i: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            i["slot"]["sequence"].as_u64().unwrap_or(0) >= 5
                && i["endpoints"]["connections"]
                    .as_array()
                    .is_some_and(|c| c.len() == 1)
        }
    });
    (p, writer, reader)
}

#[test]
fn list_info_get_and_watch_show_the_live_bus() {
    let mut t = TestBus::new();
    let (_p, writer, reader) = live_bus(&mut t);
    let rows = json_lines(&t.inspect(&["list", "/robot/*", "--json"]));
    assert_eq!(rows.len(), 2, "{rows:?}");
    let counter = rows.iter().find(|r| r["name"] == "/robot/counter").unwrap();
    assert!(counter["type"].as_str().unwrap().ends_with("Checked"));
    assert!(counter["rate_hz"].as_f64().unwrap() > 0.0);
    assert_eq!(counter["writer_alive"], true);
    assert_eq!(counter["writer_pid"], t.pid(writer));
    assert_eq!(counter["writer_program"], "bus-stress");
    assert_eq!(counter["mirrored"], false);
    assert_eq!(counter["origin"], hostname());
    // A substring filter, and the aligned table: header plus one line per slot.
    let only = json_lines(&t.inspect(&["list", "status", "--json"]));
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["name"], "/robot/status");
    // A filter that matches nothing says so on stderr, and is no failure.
    let none = t.inspect(&["list", "/robot/nothing*"]);
    assert!(none.status.success(), "{none:?}");
    assert!(
        String::from_utf8_lossy(&none.stderr).contains(
            "no slot matches '/robot/nothing*' here (list --remote adds the names other \
             computers publish)"
        ),
        "{none:?}"
    );
    let table = ok(&t.inspect(&["list"]));
    let lines: Vec<&str> = table.lines().collect();
    // Header, the registry's own directory slot, and the two slots of the test.
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[1].starts_with("/baton/registry/directory"), "{table}");
    let col = lines[0].find("SEQUENCE").unwrap();
    assert!(lines[1..].iter().all(|l| l.len() > col), "{table}");
    assert!(table.contains("(local)") && table.contains("alive bus-stress"));

    let info = json(&t.inspect(&["info", "/robot/counter", "--json"]));
    assert!(info["schema"].as_str().unwrap().contains("struct Checked"));
    let e = &info["endpoints"];
    assert_eq!(e["publishers"][0]["pid"], t.pid(writer));
    assert_eq!(e["publishers"][0]["program"], "bus-stress");
    assert_eq!(e["subscribers"][0]["pid"], t.pid(reader));
    assert_eq!(
        e["connections"][0],
        serde_json::json!([t.pid(writer), t.pid(reader)])
    );
    assert!(info["origin"].is_null());
    let text = ok(&t.inspect(&["info", "/robot/status"]));
    assert!(text.contains("enum Mode"), "{text}");
    // The registry's own slot has a writer and no publication; "none" alone read as a slot
    // nobody writes, while `put` refuses it for its writer.
    let own = ok(&t.inspect(&["info", "/baton/registry/directory"]));
    assert!(
        own.contains("publishers  none: the registry writes this slot itself"),
        "{own}"
    );
    let missing = refused(&t.inspect(&["info", "/robot/missing"]));
    assert!(missing.contains("no slot /robot/missing"), "{missing}");

    let got = json(&t.inspect(&["get", "/robot/status", "--json"]));
    assert_eq!(got, serde_json::to_value(Status::arm()).unwrap());

    let values = json_lines(&t.inspect(&["watch", "/robot/counter", "--count", "3", "--json"]));
    assert_eq!(values.len(), 3);
    let seqs: Vec<u64> = values
        .iter()
        .map(|v| v["sequence"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(values.iter().all(|v| v["value"]["payload"].is_array()));
    // A slot that does not change: --count is not reached before --timeout.
    let out = t.inspect(&["watch", "/robot/status", "--count", "2", "--timeout", "0.3"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("/robot/status")
            .count(),
        1
    );
}

#[test]
fn hz_and_bw_match_a_publishers_known_rate() {
    let mut t = TestBus::new();
    let (_p, _writer, _reader) = live_bus(&mut t);
    // A 10 ms pause between writes: a bit under 100 Hz. The band is generous: this checks the
    // measurement, not the machine's timer.
    let r = json(&t.inspect(&["hz", "/robot/counter", "--window", "2", "--json"]));
    let rate = r["rate_hz"].as_f64().unwrap();
    assert!((40.0..=110.0).contains(&rate), "rate {rate}: {r}");
    assert!(r["writes"].as_u64().unwrap() >= 10, "{r}");
    let p = &r["period_ms"];
    assert!(p["min"].as_f64().unwrap() <= p["p50"].as_f64().unwrap());
    assert!(p["p50"].as_f64().unwrap() <= p["p99"].as_f64().unwrap());
    assert!(p["p99"].as_f64().unwrap() <= p["max"].as_f64().unwrap());
    assert!(
        p["min"].as_f64().unwrap() >= 10.0,
        "a period is at least the sleep: {r}"
    );

    let b = json(&t.inspect(&["bw", "/robot/counter", "--window", "1", "--json"]));
    let s = &b["size_bytes"];
    // bus-stress values are 8..100 payload bytes plus their encoding.
    assert!(
        s["min"].as_f64().unwrap() >= 8.0 && s["max"].as_f64().unwrap() <= 164.0,
        "{b}"
    );
    assert!(b["bandwidth_bps"].as_f64().unwrap() > 0.0);
    let text = ok(&t.inspect(&["bw", "/robot/counter", "/robot/status", "--window", "0.5"]));
    assert!(
        text.contains("BANDWIDTH") && text.contains("no value was written"),
        "{text}"
    );

    // A writer far faster than the sampling: the report says the rate comes from sequences.
    t.spawn_stress(&["write", "--name", "/robot/fast", "--max-size", "16"]);
    common::eventually("the fast writer writes", || {
        t.inspect(&["get", "/robot/fast", "--json"])
            .status
            .success()
    });
    let f = json_lines(&t.inspect(&["hz", "/robot/fast", "--window", "0.5", "--json"]));
    let (writes, seen) = (
        f[0]["writes"].as_u64().unwrap(),
        f[0]["seen"].as_u64().unwrap(),
    );
    assert!(writes > 0 && seen <= writes, "{f:?}");
    if seen < writes {
        assert_eq!(f[0]["complete"], false);
        assert!(f[0]["note"].as_str().unwrap().contains("sequence numbers"));
    }
}

#[test]
fn put_writes_through_the_schema_and_refuses_what_does_not_fit() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut p = bus.publish::<Status>("/robot/status").unwrap();
    p.write(&Status::arm()).unwrap();
    let mut sub = bus.subscribe::<Status>("/robot/status").unwrap();
    sub.wait_bound(WATCHDOG).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());

    let mut new = Status::arm();
    new.mode = Mode::Idle;
    new.battery = None;
    let new_json = serde_json::to_string(&new).unwrap();
    // A live writer: refused, naming it and --force.
    let err = refused(&t.inspect(&["put", "/robot/status", &new_json]));
    assert!(
        err.contains("writer runs") && err.contains("--force"),
        "{err}"
    );
    // Values that do not match the schema: refused with the path of the mismatch.
    let mut bad = serde_json::to_value(Status::arm()).unwrap();
    bad["battery"] = "full".into();
    let err = refused(&t.inspect(&["put", "/robot/status", &bad.to_string(), "--force"]));
    assert!(
        err.contains("does not match") && err.contains("battery"),
        "{err}"
    );
    let err = refused(&t.inspect(&["put", "/robot/status", r#"{"name": "x"}"#, "--force"]));
    assert!(err.contains("does not match"), "{err}");
    // Without --force the writer is said first: no fixing of a value that would be refused
    // anyway (network walkthrough).
    for value in [r#"{"name": "x"}"#, "{not json"] {
        let err = refused(&t.inspect(&["put", "/robot/status", value]));
        assert!(
            err.contains("writer runs") && !err.contains("does not match"),
            "{value}: {err}"
        );
    }
    let err = refused(&t.inspect(&["put", "/robot/status", "{not json", "--force"]));
    assert!(err.contains("not JSON"), "{err}");
    // A key typed twice: serde_json would keep the last one silently.
    let mut twice = serde_json::to_string(&new).unwrap();
    twice.insert_str(1, r#""battery": 0.5, "#);
    let err = refused(&t.inspect(&["put", "/robot/status", &twice, "--force"]));
    assert!(err.contains(r#""battery" is given twice"#), "{err}");
    assert!(!err.contains("not JSON"), "{err}");
    // JSON nested past serde_json's guard is JSON still: said as what it is.
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let err = refused(&t.inspect(&["put", "/robot/status", &deep, "--force"]));
    assert!(err.contains("nested more than 128 levels deep"), "{err}");
    assert!(!err.contains("not JSON"), "{err}");
    assert!(!sub.update().unwrap(), "a refused put wrote nothing");

    // Once the writer is gone, put is the slot's only writer.
    drop(p);
    common::eventually("the writer is gone", || {
        let rows = json_lines(&t.inspect(&["list", "/robot/status", "--json"]));
        rows[0]["writer"] == "Gone"
    });
    let w = json(&t.inspect(&["put", "/robot/status", &new_json, "--json"]));
    assert_eq!(w["sequence"], 2);
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&new));
    assert_eq!(sub.meta().unwrap().sequence, 2);

    // --force writes beside a live (idle) writer.
    let mut other = bus.publish::<u64>("/robot/forced").unwrap();
    other.write(&1).unwrap();
    other.wait_bound(WATCHDOG).unwrap();
    ok(&t.inspect(&["put", "/robot/forced", "42", "--force"]));
    assert_eq!(json(&t.inspect(&["get", "/robot/forced", "--json"])), 42);
    // A value read from stdin (`-`), for values too big for a command line.
    let mut put = std::process::Command::new(common::bin("bus-inspect"))
        .args([
            "--domain",
            t.domain.as_str(),
            "put",
            "/robot/forced",
            "-",
            "--force",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut put.stdin.take().unwrap(), b"43\n").unwrap();
    assert!(put.wait_with_output().unwrap().status.success());
    assert_eq!(json(&t.inspect(&["get", "/robot/forced", "--json"])), 43);
    // A negative number is the value, not an option: no `--` before it.
    let mut signed = bus.publish::<i64>("/robot/signed").unwrap();
    signed.write(&1).unwrap();
    signed.wait_bound(WATCHDOG).unwrap();
    ok(&t.inspect(&["put", "/robot/signed", "-5", "--force"]));
    assert_eq!(json(&t.inspect(&["get", "/robot/signed", "--json"])), -5);
    let err = refused(&t.inspect(&["put", "/robot/missing", "1"]));
    assert!(err.contains("no slot /robot/missing"), "{err}");
}

#[test]
fn wait_prints_which_slot_changed() {
    let mut t = TestBus::new();
    t.start_registry();
    let waiter = t.spawn_bin(
        "bus-inspect",
        &["wait", "/w/a", "/w/b", "--json", "--timeout", "60"],
    );
    let pid = t.pid(waiter) as u32;
    let start = bus::process::start_time(pid).expect("waiter runs");
    // Write until the waiter exits: whenever it started looking, a later write is a change.
    let mut b = t.bus().publish::<String>("/w/b").unwrap();
    common::eventually("wait exits after a write", || {
        b.write(&"hello".to_owned()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        !bus::process::is_alive(pid, start)
    });
    let out = t.finish(waiter);
    let changes = json_lines(&out);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["name"], "/w/b");
    assert!(changes[0]["sequence"].as_u64().unwrap() >= 1);
    // An existing slot written every 10 ms.
    t.spawn_stress(&[
        "write",
        "--name",
        "/w/c",
        "--interval-ms",
        "10",
        "--max-size",
        "8",
    ]);
    let text = ok(&t.inspect(&["wait", "/w/a", "/w/c"]));
    assert!(text.starts_with("/w/c changed (sequence "), "{text}");
    // Nothing changes: exit status 2 after the timeout, even with a poll interval longer than
    // the timeout; a command line that does not parse is 64, never the timeout's 2.
    let started = std::time::Instant::now();
    let out = t.inspect(&["wait", "/w/b", "--timeout", "0.2", "--poll-ms", "10000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let out = t.inspect(&["wait", "/w/b", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(64));
    // So is a slot name the bus refuses, in every command that takes names.
    for args in [
        &["wait", "/w/b", "bad"][..],
        &["get", "no-slash"],
        &["hz", "/w/b", "a b"],
        &["info", "/w//b"],
    ] {
        let out = t.inspect(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid slot name"), "{args:?}: {err}");
    }
    // Timeouts that are no number of seconds, or past a year, are usage errors, not crashes.
    for bad in ["1e19", "0", "nan"] {
        let out = t.inspect(&["watch", "/w/b", "--count", "1", "--timeout", bad]);
        assert_eq!(out.status.code(), Some(64), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("give seconds above 0"), "{bad}: {err}");
    }
}

/// `wait` follows a slot the registry re-creates (larger, once nobody maps it) instead of
/// watching the old file nobody writes any more.
#[test]
fn wait_follows_a_slot_the_registry_recreates() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut small = bus.publish::<String>("/w/grow").unwrap();
    small.wait_bound(WATCHDOG).unwrap();
    small.write(&"first".to_owned()).unwrap();
    let waiter = t.spawn_bin("bus-inspect", &["wait", "/w/grow", "--timeout", "20"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(small);
    let mut large = bus
        .publication("/w/grow")
        .unwrap()
        .capacity(64 * 1024)
        .create::<String, bus::Serde>()
        .unwrap();
    large.wait_bound(WATCHDOG).unwrap();
    large.write(&"second".to_owned()).unwrap();
    let out = t.finish(waiter);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("/w/grow changed (sequence 1)"),
        "{out:?}"
    );
}

#[test]
fn graph_stats_doctor_and_endpoints_describe_the_bus() {
    let mut t = TestBus::new();
    let (_p, writer, reader) = live_bus(&mut t);
    let g = json(&t.inspect(&["graph", "--json"]));
    let pids: Vec<u64> = g["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(pids.contains(&(t.pid(writer) as u64)) && pids.contains(&(t.pid(reader) as u64)));
    let edge = |from: String, to: &str, kind: &str| {
        g["edges"].as_array().unwrap().iter().any(|e| {
            e["from"] == from.as_str() && e["to"] == to && e["kind"] == kind && e["bound"] == true
        })
    };
    assert!(edge(
        format!("process:{}", t.pid(writer)),
        "slot:/robot/counter",
        "publishes"
    ));
    assert!(edge(
        "slot:/robot/counter".into(),
        &format!("process:{}", t.pid(reader)),
        "subscribes"
    ));
    assert_eq!(g["host"], hostname());
    let dot = ok(&t.inspect(&["graph"]));
    assert!(
        dot.starts_with("digraph ") && dot.trim_end().ends_with('}'),
        "{dot}"
    );
    let arrow = format!("\"process:{}\" -> \"slot:/robot/counter\";", t.pid(writer));
    assert!(dot.contains(&arrow), "{dot}");
    assert_eq!(dot.matches('{').count(), dot.matches('}').count());

    let s = json(&t.inspect(&["stats", "--json"]));
    // The test's two slots and the registry's directory.
    assert_eq!(s["registry"]["slots"], 3);
    assert_eq!(s["registry"]["publications"], 2);
    assert_eq!(s["registry"]["subscriptions"], 1);
    assert_eq!(s["registry"]["connections"], 1);
    assert_eq!(s["registry"]["awaited"], 0);
    assert_eq!(s["net"], serde_json::json!([]));
    assert!(ok(&t.inspect(&["stats"])).contains("runs without --net"));

    let d = json(&t.inspect(&["doctor", "--json"]));
    let checks: BTreeMap<String, serde_json::Value> = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["check"].as_str().unwrap().to_owned(), c.clone()))
        .collect();
    assert_eq!(checks["registry"]["status"], "ok");
    assert_eq!(checks["stale"]["status"], "ok");
    assert_eq!(checks["permissions"]["status"], "ok", "{d}");
    assert!(checks["permissions"]["detail"]
        .as_str()
        .unwrap()
        .contains("0660"));
    assert_eq!(checks["multicast"]["status"], "skip");
    assert_eq!(checks["clocks"]["status"], "skip");
    assert_eq!(d["stale"], serde_json::json!([]));
    assert!(ok(&t.inspect(&["doctor"])).contains("registry-server pid"));

    let eps = json_lines(&t.inspect(&["endpoints", "--json"]));
    let counter = eps.iter().find(|e| e["name"] == "/robot/counter").unwrap();
    assert_eq!(counter["connections"], 1);
    assert_eq!(counter["endpoints"].as_array().unwrap().len(), 2);
}

/// Every byte of every segment of the domain.
fn snapshot(t: &TestBus) -> BTreeMap<String, Vec<u8>> {
    t.domain
        .segment_files()
        .unwrap()
        .into_iter()
        .map(|(name, path)| (name.to_string(), std::fs::read(path).unwrap()))
        .collect()
}

#[test]
fn reading_commands_leave_every_byte_unchanged() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut p = bus.publish::<Status>("/quiet/status").unwrap();
    p.write(&Status::arm()).unwrap();
    let mut q = bus.publish::<u64>("/quiet/count").unwrap();
    for i in 0..6 {
        q.write(&i).unwrap();
    }
    let sub = bus.subscribe::<u64>("/quiet/count").unwrap();
    sub.wait_bound(WATCHDOG).unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    // The registry rewrites its directory shortly after registrations: let it settle first.
    common::eventually("the directory lists both publications", || {
        let out = t.inspect(&["get", "/baton/registry/directory", "--json"]);
        let text = String::from_utf8_lossy(&out.stdout);
        text.contains("/quiet/count") && text.contains("/quiet/status")
    });
    let before = snapshot(&t);
    assert_eq!(before.len(), 3, "two slots and the registry's directory");
    let commands: &[&[&str]] = &[
        &["list"],
        &["list", "--json"],
        &["info", "/quiet/count", "--json"],
        &["info", "/quiet/status"],
        &["get", "/quiet/status", "--json"],
        &["get", "/quiet/count"],
        &["watch", "/quiet/count", "--count", "1"],
        &["hz", "/quiet/count", "/quiet/status", "--window", "0.3"],
        &["bw", "/quiet/count", "--window", "0.3", "--json"],
        &["graph"],
        &["graph", "--json"],
        &["stats"],
        &["stats", "--json"],
        &["doctor"],
        &["doctor", "--json"],
        &["endpoints"],
    ];
    for args in commands {
        ok(&t.inspect(args));
    }
    assert_eq!(
        t.inspect(&["wait", "/quiet/count", "--timeout", "0.3"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        t.inspect(&["watch", "/quiet/count", "--count", "2", "--timeout", "0.2"])
            .status
            .code(),
        Some(2)
    );
    assert!(
        snapshot(&t) == before,
        "a reading command changed a segment"
    );
}

#[test]
fn clean_removes_a_killed_domains_segments_and_nothing_else() {
    let mut dead = TestBus::new();
    let mut live = TestBus::new();
    let mut writers = Vec::new();
    for t in [&mut dead, &mut live] {
        t.start_registry();
        writers.push(t.spawn_stress(&[
            "write",
            "--name",
            "/k/x",
            "--count",
            "1",
            "--max-size",
            "8",
            "--linger",
            "60",
        ]));
        common::eventually("a value", || {
            t.inspect(&["get", "/k/x", "--json"]).status.success()
        });
    }
    let mut p = live.bus().publish::<u64>("/k/y").unwrap();
    p.write(&7).unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    // Kill the first domain: registry and writer, SIGKILL, nothing cleaned up by them.
    dead.kill_registry();
    dead.kill(writers[0]);
    // /k/x and the dead registry's directory.
    assert_eq!(dead.domain.segment_files().unwrap().len(), 2);
    // The registry check fails: doctor reports everything and exits 1.
    let out = dead.inspect(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stale: Vec<&str> = d["stale"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(stale, ["/baton/registry/directory", "/k/x"], "{d}");
    assert_eq!(d["checks"][0]["status"], "fail", "{d}");
    // No terminal and no --yes: refused, nothing removed.
    let err = refused(&dead.inspect(&["clean"]));
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(dead.domain.segment_files().unwrap().len(), 2);
    let removed = json_lines(&dead.inspect(&["clean", "--yes", "--json"]));
    assert_eq!(
        removed,
        [
            serde_json::json!({"name": "/baton/registry/directory", "removed": true, "error": null}),
            serde_json::json!({"name": "/k/x", "removed": true, "error": null})
        ]
    );
    assert!(dead.domain.segment_files().unwrap().is_empty());
    // The live domain lost nothing and has nothing stale.
    assert_eq!(live.domain.segment_files().unwrap().len(), 2 + 1);
    assert!(json_lines(&live.inspect(&["clean", "--yes", "--json"])).is_empty());
    assert_eq!(live.domain.segment_files().unwrap().len(), 2 + 1);
    assert_eq!(json(&live.inspect(&["get", "/k/y", "--json"])), 7);
}

#[test]
fn rates_and_watch_of_a_slot_that_never_exists_exit_1() {
    let mut t = TestBus::new();
    t.start_registry();
    let out = t.inspect(&["hz", "/nope", "--window", "0.2"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("does not exist"));
    let out = t.inspect(&["bw", "/nope", "--window", "0.2", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exists"], false, "{report}");
    let err = refused(&t.inspect(&["watch", "/nope", "--timeout", "0.2"]));
    assert!(err.contains("no slot /nope"), "{err}");
}

/// `watch` passes over a value it cannot read (slot memory made inconsistent under it) with a
/// line on stderr, and follows the writer's next value, instead of ending on it.
#[test]
fn watch_passes_over_a_value_it_cannot_read() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut p = bus.publish::<u64>("/w/c").unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    p.write(&1).unwrap();
    let watcher = t.spawn_bin(
        "bus-inspect",
        &["watch", "/w/c", "--count", "2", "--json", "--timeout", "20"],
    );
    common::eventually("the first value is shown", || {
        t.stdout_of(watcher).lines().count() == 1
    });
    t.make_unreadable("/w/c", 1_000_001);
    // Seen at the watcher's next look (the overwrite wakes nobody): before the next write,
    // which puts the word right again (a fixed pause let a loaded machine miss it).
    common::eventually("the watcher passes over the value", || {
        t.stderr_of(watcher).contains("passing over value 1000001")
    });
    p.write(&2).unwrap();
    let out = t.finish(watcher);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("passing over value 1000001"), "{stderr}");
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["value"], 2, "{last}");
}

/// A segment that does not open (a slot being made, or a broken one) and that goes away while a
/// waiting command starts: the command waited for the file's grace period to end, which a file
/// gone never ends, and `--timeout` never came (wait, watch, hz and bw hung; shared-memory
/// soak). Each command now ends on its own terms.
#[test]
fn a_broken_segment_removed_as_a_command_starts_leaves_its_timeout_in_force() {
    let mut t = TestBus::new();
    let path = t.segment_path("/p/g");
    for args in [
        &["wait", "/p/g", "--timeout", "2"][..],
        &["watch", "/p/g", "--count", "1", "--timeout", "2"],
        &["hz", "/p/g", "--window", "0.5"],
    ] {
        std::fs::write(&path, vec![0u8; 8704]).unwrap();
        let remover = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                let _ = std::fs::remove_file(path);
            })
        };
        let started = std::time::Instant::now();
        let child = t.spawn_bin("bus-inspect", args);
        let out = t.finish(child);
        remover.join().unwrap();
        assert!(
            started.elapsed() < WATCHDOG / 2,
            "{args:?} took {:?}: {out:?}",
            started.elapsed()
        );
    }
}
