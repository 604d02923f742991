//! `bus-inspect` on a mirrored slot between two hosts of the network-namespace lab: `list` and
//! `info` show the origin host, `put` refuses the mirror, `stats` decodes the registries'
//! network counters, `graph` draws the remote host, `doctor` checks the multicast route, group,
//! TTL and the remote clock. Needs root and `ip`, like the other net tests.

mod common;
mod netns;

use std::collections::BTreeMap;

use common::output::json;
use netns::{eventually, Lab};

const A: usize = 0;
const B: usize = 1;

#[test]
fn mirrors_network_counters_and_multicast_checks_show_across_hosts() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--ttl", "2"], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_every(A, "/lab/x", "20", "32");
    lab.read_for(B, "/lab/x", "60");
    eventually("the value is mirrored on hB", || {
        let out = lab.inspect(B, &["list", "/lab/x", "--json"]);
        out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|r| r["mirrored"] == true && r["sequence"].as_u64() > Some(2))
    });
    let row = json(&lab.inspect(B, &["list", "/lab/x", "--json"]));
    assert_eq!(row["origin"], "hA");
    let local = json(&lab.inspect(A, &["list", "/lab/x", "--json"]));
    assert_eq!(local["mirrored"], false);
    assert_eq!(local["origin"], "hA");
    let info = json(&lab.inspect(B, &["info", "/lab/x", "--json"]));
    assert_eq!(info["origin"], "hA");
    let text = String::from_utf8(lab.inspect(B, &["info", "/lab/x"]).stdout).unwrap();
    assert!(text.contains("hA (mirror)"), "{text}");
    // A mirror's writer is its publisher on hA, not hB's registry (whose pid said nothing).
    let text = String::from_utf8(lab.inspect(B, &["list", "/lab/x"]).stdout).unwrap();
    assert!(text.contains("alive on hA"), "{text}");
    let text = String::from_utf8(lab.inspect(B, &["get", "/lab/x"]).stdout).unwrap();
    assert!(text.contains("writer alive on hA"), "{text}");
    assert_eq!(text.matches("hA").count(), 1, "the host named once: {text}");
    let r = json(&lab.inspect(B, &["watch", "/lab/x", "--json", "--count", "1"]));
    assert_eq!(
        (&r["writer"], &r["writer_alive"]),
        (&"Alive".into(), &true.into()),
        "{r}"
    );
    // While hB's registry is down the mirror is not fed, which says nothing of its publisher on
    // hA: `get` said the writer was gone on hA, where `list` said this.
    lab.kill_registry(B);
    for command in ["list", "get"] {
        let out = lab.inspect(B, &[command, "/lab/x"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            text.contains("not fed from hA (this computer's registry is not running)"),
            "{command}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // In JSON: the publisher's state as last reflected, and the feeding registry not running.
    let r = json(&lab.inspect(B, &["watch", "/lab/x", "--json", "--count", "1"]));
    assert_eq!(
        (&r["writer"], &r["writer_alive"]),
        (&"Alive".into(), &false.into()),
        "{r}"
    );
    assert_eq!(lab.list_row(B, "/lab/x")["writer_alive"], false);
    lab.start_registry(B, &[], &[]);
    let before = lab.list_row(B, "/lab/x")["sequence"].as_u64();
    eventually("the mirror is fed again", || {
        let row = lab.list_row(B, "/lab/x");
        row["sequence"].as_u64() > before
    });

    // The registry writes the mirror: put is refused and names the origin.
    let out = lab.inspect(
        B,
        &[
            "put",
            "/lab/x",
            r#"{"sequence":1,"payload":[],"piece":[],"checksum":0}"#,
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mirrors host 'hA'"), "{err}");

    eventually("hB's statistics name hA as a peer", || {
        let s = json(&lab.inspect(B, &["stats", "--json"]));
        s["net"].as_array().is_some_and(|n| {
            n.iter()
                .any(|h| h["host"] == "hB" && h["value"]["peers"][0]["host"] == "hA")
        })
    });
    let info = json(&lab.inspect(B, &["info", "/lab/x", "--json"]));
    assert_eq!(info["peer_hosts"], serde_json::json!(["hA"]));
    // hA's statistics mirrored here (watched) name hB among hA's peers: `info` merged every
    // statistics slot in /dev/shm, and called hB a peer of its own (network walkthrough).
    let watch = lab.spawn(
        B,
        "bus-inspect",
        &["watch", "/baton/registry/hA/net", "--timeout", "60"],
    );
    eventually("hA's statistics are mirrored on hB", || {
        lab.list_row(B, "/baton/registry/hA/net")["mirrored"] == true
    });
    let info = json(&lab.inspect(B, &["info", "/lab/x", "--json"]));
    assert_eq!(info["peer_hosts"], serde_json::json!(["hA"]));
    lab.kill(watch);
    // The statistics are published once a second: the mirroring may be newer than them.
    eventually("hB's statistics count mirrored values", || {
        let s = json(&lab.inspect(B, &["stats", "--json"]));
        s["net"].as_array().is_some_and(|n| {
            n.iter()
                .any(|h| h["host"] == "hB" && h["value"]["values_mirrored"].as_u64() > Some(0))
        })
    });
    let text = String::from_utf8(lab.inspect(B, &["stats"]).stdout).unwrap();
    assert!(text.contains("hB hears hA"), "{text}");

    let g = json(&lab.inspect(B, &["graph", "--json"]));
    assert!(
        g["remote_hosts"].as_array().unwrap().contains(&"hA".into()),
        "{g}"
    );
    assert!(g["edges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["from"] == "host:hA" && e["to"] == "slot:/lab/x" && e["kind"] == "mirrors"));

    let checks = |host| -> BTreeMap<String, serde_json::Value> {
        let d = json(&lab.inspect(host, &["doctor", "--json"]));
        d["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["check"].as_str().unwrap().to_owned(), c.clone()))
            .collect()
    };
    eventually("hB's registry joined the multicast group", || {
        checks(B)["multicast group"]["status"] == "ok"
    });
    let c = checks(B);
    assert_eq!(c["multicast route"]["status"], "ok", "{c:?}");
    assert!(c["multicast route"]["detail"]
        .as_str()
        .unwrap()
        .contains("eth0"));
    assert!(c["multicast group"]["detail"]
        .as_str()
        .unwrap()
        .contains("239.255.66.66"));
    assert!(c["multicast ttl"]["detail"]
        .as_str()
        .unwrap()
        .starts_with("TTL 1"));
    // Same machine, same clock: nothing mirrored from hA is from the future.
    assert_eq!(c["clocks"]["status"], "ok", "{c:?}");
    assert!(c["clocks"]["detail"].as_str().unwrap().contains("hA"));
    assert_eq!(c["stale"]["status"], "ok");
    let c = checks(A);
    assert!(c["multicast ttl"]["detail"]
        .as_str()
        .unwrap()
        .starts_with("TTL 2"));

    // Rates of a mirror come from the origin's write times.
    let r = json(&lab.inspect(B, &["hz", "/lab/x", "--window", "1", "--json"]));
    assert!(r["writes"].as_u64().unwrap() > 0, "{r}");

    // Whom hB hears: hA, until hB's cable is pulled (every row above stays as it was; the
    // network audit found doctor all "ok" with nothing reachable).
    let c = checks(B);
    assert_eq!(c["peers"]["status"], "ok", "{c:?}");
    assert!(c["peers"]["detail"].as_str().unwrap().contains("hA at "));
    lab.set_connected(B, false);
    eventually("hB's doctor says it hears nobody", || {
        let c = checks(B);
        let detail = c["peers"]["detail"].as_str().unwrap_or_default();
        // The drop counters are totals: said as such (an old cause read as the current one).
        c["peers"]["status"] == "warn"
            && detail.starts_with("this registry hears no other computer")
            && detail.contains("since the registry started")
    });
    lab.set_connected(B, true);

    // hB's registry restarted under another host name: its earlier run's statistics stay in
    // their slot, marked as gone (they read as current).
    lab.kill_registry(B);
    lab.start_registry(B, &["--host", "hB2"], &[]);
    eventually("hB's stats mark the earlier run's as gone", || {
        let out = lab.inspect(B, &["stats"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("hB (gone)") && text.contains("hB2 ") && !text.contains("hB hears")
    });
}

/// `get`, `watch` and `info` of a name that only another host publishes, and nothing here
/// subscribes to: the registry asks that host for the schema and mirrors the name while the
/// tool reads, then forgets the mirror. Before, they said there was no such slot.
#[test]
fn get_and_watch_read_a_name_only_another_host_publishes() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let writer = lab.write_from(A, "/lab/far", "3", "0", "16");
    lab.wait_listed(B, "/lab/far", "hA");
    let mirrored_on_b = |lab: &Lab| !lab.list_row(B, "/lab/far").is_null();
    assert!(!mirrored_on_b(&lab), "nothing on hB subscribes yet");
    // `list --remote` names it all the same, as the directory has it.
    let row = json(&lab.inspect(B, &["list", "/lab/far", "--remote", "--json"]));
    assert_eq!(
        (&row["origin"], &row["here"], &row["writer_alive"]),
        (&"hA".into(), &false.into(), &true.into()),
        "{row}"
    );
    assert!(row["type"].as_str().unwrap().contains("Checked"), "{row}");
    let out = lab.inspect(B, &["list", "/lab/far", "--remote"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hA (not mirrored here)"), "{text}");

    let value = json(&lab.inspect(B, &["get", "/lab/far", "--json"]));
    assert_eq!(value["sequence"], 3, "{value}");
    let out = lab.inspect(B, &["get", "/lab/far"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("writer alive on hA"), "{text}");
    let out = lab.inspect(
        B,
        &[
            "watch",
            "/lab/far",
            "--count",
            "1",
            "--json",
            "--timeout",
            "10",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(json(&out)["value"]["sequence"], 3);
    let info = json(&lab.inspect(B, &["info", "/lab/far", "--json"]));
    assert_eq!(info["origin"], "hA", "{info}");
    assert!(
        info["slot"]["sequence"].as_u64() >= Some(1),
        "a value: {info}"
    );
    assert!(
        info["schema"].as_str().unwrap().contains("checksum"),
        "{info}"
    );
    assert_eq!(
        info["endpoints"]["subscribers"],
        serde_json::json!([]),
        "info leaves itself out: {info}"
    );

    // Once no tool reads it, the mirror goes, as after any last subscriber.
    eventually("hB forgets the mirror no one reads", || {
        !mirrored_on_b(&lab)
    });

    // A name no host publishes is still no slot, said at once.
    let out = lab.inspect(B, &["get", "/lab/nowhere"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no slot /lab/nowhere"), "{err}");

    // A gone publisher's value that hA keeps reads the same way, writer gone.
    lab.kill(writer);
    eventually(
        "hB hears that hA keeps the value of a gone publisher",
        || {
            lab.directory_entry(B, "/lab/far")
                .is_some_and(|e| e["publisher_alive"] == false)
        },
    );
    let out = lab.inspect(B, &["get", "/lab/far"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("writer gone"), "{text}");
    assert!(text.contains("hA"), "{text}");

    // `put` sends a value of hA's name to hA, whether hB mirrors it (the `get` above made a
    // mirror, its publisher gone: put wrote into it, to be overwritten or forgotten) or not
    // (it said there was no such slot). Refused, nothing written (docs review by running).
    let value = r#"{"sequence": 9, "payload": [], "piece": [], "checksum": 0}"#;
    for mirrored in [true, false] {
        if mirrored {
            assert!(mirrored_on_b(&lab), "the get's mirror is still there");
        } else {
            eventually("hB forgets the mirror again", || !mirrored_on_b(&lab));
        }
        let out = lab.inspect(B, &["put", "/lab/far", value]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "mirrored {mirrored}: {out:?}");
        assert!(
            err.contains("put the value on 'hA' instead"),
            "mirrored {mirrored}: {err}"
        );
    }
    assert!(!mirrored_on_b(&lab), "a refused put makes no mirror");
}

/// `hz` measures a name only another host publishes; `watch` started while a subscriber here
/// has the name mirrored keeps the mirror after that subscriber leaves: it follows the name
/// itself, so values keep coming (the mirror would be forgotten about 5 s after its last
/// subscriber).
#[test]
fn watch_keeps_a_mirror_whose_other_subscriber_left() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_every(A, "/lab/steady", "20", "16");
    // Rates too are measured on a name only hA publishes.
    lab.wait_listed(B, "/lab/steady", "hA");
    // A value every 20 ms: about 50 in the 1 s window.
    let r = json(&lab.inspect(B, &["hz", "/lab/steady", "--window", "1", "--json"]));
    let writes = r["writes"].as_u64().unwrap_or(0);
    assert!((10..=80).contains(&writes), "{r}");
    let reader = lab.read_for(B, "/lab/steady", "2");
    eventually("hB mirrors /lab/steady for its subscriber", || {
        let r = lab.list_row(B, "/lab/steady");
        r["mirrored"] == true && r["sequence"].as_u64() > Some(2)
    });
    let watch = lab.spawn(
        B,
        "bus-inspect",
        // Polled slowly: its output waits in a pipe until it ends.
        &[
            "watch",
            "/lab/steady",
            "--json",
            "--timeout",
            "12",
            "--poll-ms",
            "500",
        ],
    );
    lab.finish(reader);
    let out = lab.finish(watch);
    let ended_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let text = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value =
        serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or_default();
    let age_s = ended_ns.saturating_sub(last["time_ns"].as_u64().unwrap_or(0)) as f64 / 1e9;
    assert!(
        age_s < 2.0,
        "the last value watched is {age_s:.1} s old: the mirror went with the other subscriber \
         (stderr: {})",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `get` that finds the mirror another `get` had made, still empty, waits for its first
/// value as the first does (it used to say "has no value yet" at once). The publisher on hA
/// registers first and writes only once both `get`s wait on the mirror.
#[test]
fn a_get_that_finds_a_new_empty_mirror_waits_for_its_value() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_from(A, "/lab/late", "0", "0", "16");
    lab.wait_listed(B, "/lab/late", "hA");
    let outs: Vec<_> = std::thread::scope(|s| {
        let lab = &lab;
        let first = s.spawn(move || lab.inspect(B, &["get", "/lab/late", "--json"]));
        eventually("the first get has hB mirror /lab/late", || {
            let r = lab.list_row(B, "/lab/late");
            r["mirrored"] == true && r["sequence"] == 0
        });
        let second = s.spawn(move || lab.inspect(B, &["get", "/lab/late", "--json"]));
        // The second waits as a subscriber of the mirror too (before the change it had given
        // up at once, and no value would ever have reached it).
        eventually("both gets subscribe to /lab/late on hB", || {
            let out = lab.inspect(B, &["endpoints", "--json"]);
            String::from_utf8_lossy(&out.stdout).lines().any(|line| {
                let slot: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
                slot["name"] == "/lab/late"
                    && slot["endpoints"].as_array().is_some_and(|e| {
                        e.iter().filter(|e| e["program"] == "bus-inspect").count() == 2
                    })
            })
        });
        let value = r#"{"sequence":1,"payload":[],"piece":[],"checksum":0}"#;
        let put = lab.inspect(A, &["put", "/lab/late", value, "--force"]);
        assert!(put.status.success(), "{put:?}");
        vec![first.join().unwrap(), second.join().unwrap()]
    });
    for out in outs {
        assert_eq!(json(&out)["sequence"], 1, "{out:?}");
    }
}

/// A `watch` of a name no host publishes yet keeps asking, and shows the value once another
/// host publishes it. The publisher starts 8 s into the watch, past the watch's first asks,
/// and the watch gives up at 14 s: it used to ask again only 15 s in (the pause doubled up to
/// 16 s), now every 2 s.
#[test]
fn a_watch_shows_a_name_another_host_publishes_later() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let args = [
        "watch",
        "/lab/later",
        "--count",
        "1",
        "--json",
        "--timeout",
        "14",
    ];
    let watch = lab.spawn(B, "bus-inspect", &args);
    std::thread::sleep(std::time::Duration::from_secs(8));
    assert!(lab.is_running(watch), "the watch waits for the name");
    lab.write_from(A, "/lab/later", "2", "0", "16");
    let out = lab.finish(watch);
    assert!(out.status.success(), "{out:?}");
    let seen = json(&out);
    assert_eq!(seen["value"]["sequence"], 2, "{seen}");
}

/// A watch on the computer that published a name, when another computer publishes it next:
/// the registry here forgets its kept value (the name is the other host's now), and the watch,
/// holding the local slot's memory, went silent for good (network chaos audit). It follows the
/// name to the other host.
#[test]
fn a_watch_follows_a_name_that_moves_to_another_host() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let here = lab.write_from(A, "/lab/moves", "1", "0", "16");
    eventually("the value is written here", || {
        lab.list_row(A, "/lab/moves")["sequence"] == 1
    });
    let args = [
        "watch",
        "/lab/moves",
        "--count",
        "2",
        "--json",
        "--timeout",
        "15",
    ];
    let watch = lab.spawn(A, "bus-inspect", &args);
    std::thread::sleep(std::time::Duration::from_millis(500));
    lab.kill(here);
    eventually("the publisher here is gone", || {
        lab.list_row(A, "/lab/moves")["writer_alive"] == false
    });
    // Announced so (every 100 ms in the lab): B may publish the name.
    std::thread::sleep(std::time::Duration::from_millis(500));
    lab.write_every(B, "/lab/moves", "50", "16");
    let out = lab.finish(watch);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["origin"], "hB", "{text}");
}

/// A computer renamed (its registry restarted with another `--host`) keeps its old name's
/// statistics slot, writer gone: `list` named the local slots by whichever statistics slot it
/// found first, the old name's as often as not (network chaos audit). The running registry's
/// name is the one.
#[test]
fn list_names_local_slots_by_the_running_registrys_host_name() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--host", "aaa-old"], &[]);
    lab.start_registry(B, &[], &[]);
    eventually("A's statistics under its old name", || {
        lab.list_row(A, "/baton/registry/aaa-old/net")["sequence"].as_u64() > Some(0)
    });
    lab.kill_registry(A);
    lab.start_registry(A, &[], &[]);
    lab.write_from(A, "/lab/named", "1", "0", "16");
    eventually("the local slot is named by the new host name", || {
        let out = lab.inspect(A, &["list", "/lab/named"]);
        String::from_utf8_lossy(&out.stdout).contains("hA (local)")
    });
    let out = lab.inspect(A, &["list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("aaa-old (local)"), "{text}");
}

/// The registry restarted without `--net`: the local slots are named by the computer's host
/// name, as the new registry's directory says, not by the `--host` of the earlier run, whose
/// statistics slot stays (probing `list`, `info` and `get`).
#[test]
fn a_registry_restarted_without_net_names_local_slots_by_the_host_name() {
    let mut lab = Lab::new(1);
    lab.start_registry(A, &["--host", "aaa-old"], &[]);
    eventually("A's statistics under its --host", || {
        lab.list_row(A, "/baton/registry/aaa-old/net")["sequence"].as_u64() > Some(0)
    });
    lab.kill_registry(A);
    // Started by hand: the lab's registries all reflect.
    lab.spawn(A, "registry-server", &[]);
    lab.write_from(A, "/lab/plain", "1", "0", "16");
    let here = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    eventually("the local slot is named by the host name", || {
        let out = lab.inspect(A, &["list", "/lab/plain"]);
        String::from_utf8_lossy(&out.stdout).contains(&format!("{here} (local)"))
    });
    let info = lab.inspect(A, &["info", "/lab/plain"]);
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(text.contains(&format!("{here} (local)")), "{text}");
    assert!(!text.contains("aaa-old"), "{text}");
}

/// Host `host`'s `bus-inspect doctor --json` row of check `which` (JSON null if absent). doctor
/// exits 1 when a check fails: its report is read all the same.
fn doctor_check(lab: &Lab, host: usize, which: &str) -> serde_json::Value {
    let out = lab.inspect(host, &["doctor", "--json"]);
    let d: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == which)
        .cloned()
        .unwrap_or_default()
}

/// With no multicast route in its namespace, a registry given --interface still sends to the
/// group (on that device) and is heard: doctor says the route is not needed rather than failing
/// and telling that discovery cannot leave the computer, which the guide's own advice (give
/// --interface) would contradict. Without --interface it fails and names --interface first
/// (docs review by running).
#[test]
fn doctor_needs_no_multicast_route_when_the_registry_has_an_interface() {
    let mut lab = Lab::new(2);
    for host in [A, B] {
        lab.run(host, "ip", &["route", "del", "224.0.0.0/4"]);
    }
    let check = doctor_check;
    let route = |lab: &Lab, host| check(lab, host, "multicast route");
    lab.start_registry(A, &["--interface", "eth0"], &[]);
    lab.start_registry(B, &["--interface", "eth0"], &[]);
    eventually("A hears B through its interface", || {
        lab.stats(A).is_some_and(|s| {
            s["peers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["host"] == "hB"))
        })
    });
    let r = route(&lab, A);
    assert_eq!(r["status"], "ok", "{r}");
    assert!(
        r["detail"]
            .as_str()
            .unwrap()
            .contains("none needed: the registry sends on --interface eth0"),
        "{r}"
    );
    let out = lab.inspect(A, &["doctor"]);
    assert!(out.status.success(), "{out:?}");
    // Without --interface it fails, naming --interface first. With --peer as well: the
    // registry joins the group before its network opens, and without a route or an interface
    // that never happens (doctor said the --peer addresses were reached by unicast: network
    // walkthrough).
    let peer = lab.hosts[B].ip.clone();
    for (args, said) in [
        (&[][..], "give the registry --interface"),
        (
            &["--peer", &peer][..],
            "has not opened (its log says `network: not ready`), so nothing is sent, to the \
             --peer addresses neither",
        ),
    ] {
        lab.stop_registry(A);
        lab.start_registry(A, args, &[]);
        eventually(
            &format!("doctor fails the route of a registry with {args:?}"),
            || {
                let r = route(&lab, A);
                r["status"] == "fail" && r["detail"].as_str().unwrap_or_default().contains(said)
            },
        );
    }
    let p = check(&lab, A, "peers");
    assert_eq!(p["status"], "warn", "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("has not opened"),
        "{p}"
    );
}

/// The multicast route removed after the registry's network opened: with --peer the peers are
/// still reached by unicast, and doctor warns that only they are; without --peer it fails, as
/// discovery then reaches no other computer.
#[test]
fn doctor_says_what_still_passes_once_the_route_goes_after_the_network_opened() {
    let mut lab = Lab::new(2);
    let peer = lab.hosts[B].ip.clone();
    lab.start_registry(A, &["--peer", &peer], &[]);
    lab.start_registry(B, &[], &[]);
    eventually("A hears B", || {
        lab.stats(A).is_some_and(|s| {
            s["peers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["host"] == "hB"))
        })
    });
    lab.run(A, "ip", &["route", "del", "224.0.0.0/4"]);
    route_says(
        &lab,
        "warn",
        "only the --peer addresses are reached (by unicast)",
    );
    // As it says: a value written on A after the route went reaches B.
    let reader = lab.read_until(B, "/routeless/x", "3", "20");
    lab.write_from(A, "/routeless/x", "1000", "50", "64");
    let s = common::summary(&lab.finish(reader));
    assert!(s["last"].as_u64() >= Some(3), "{s}");
    // Without --peer (started while the route was there, so its network opened), nothing
    // reaches another computer.
    lab.run(A, "ip", &["route", "add", "224.0.0.0/4", "dev", "eth0"]);
    lab.stop_registry(A);
    lab.start_registry(A, &[], &[]);
    eventually("A's network opens again", || {
        lab.log(A).matches("network: reflecting as host").count() >= 2
    });
    lab.run(A, "ip", &["route", "del", "224.0.0.0/4"]);
    route_says(&lab, "fail", "discovery cannot leave this computer");
}

/// Asserts that doctor's multicast route row on host A has `status` and says `said`.
fn route_says(lab: &Lab, status: &str, said: &str) {
    let r = doctor_check(lab, A, "multicast route");
    assert_eq!(r["status"], status, "{r}");
    assert!(
        r["detail"].as_str().unwrap_or_default().contains(said),
        "{r}"
    );
}
