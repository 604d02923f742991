//! Authentication, hostile datagrams and publication conflicts across hosts made of network
//! namespaces: wrong keys, missing keys, replays, garbage, another domain's datagrams, and the
//! same name published on two hosts.

mod common;
mod netns;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use common::{require_root, summary, AS_NOBODY, WATCHDOG};
use netns::{capture_from, eventually, Lab, PORT};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

fn key_file(tag: &str, bytes: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::temp_dir().join(format!("baton-key-{}-{tag}", std::process::id()));
    std::fs::write(&path, bytes).expect("write key file");
    // The registry refuses a key file other users may read.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// A reader of `/auth` on `host` until it holds the fifth value; its summary.
fn last_auth_value_on(lab: &mut Lab, host: usize) -> serde_json::Value {
    let r = lab.read_until(host, "/auth", "5", "20");
    summary(&lab.finish(r))
}

#[test]
fn wrong_keys_missing_keys_replays_and_garbage_are_dropped_and_counted() {
    let mut lab = Lab::new(3);
    let good = key_file("good", "correct horse battery staple\n");
    let bad = key_file("bad", "another key entirely, 32 bytes!!");
    let good_arg = good.to_string_lossy().into_owned();
    let bad_arg = bad.to_string_lossy().into_owned();
    lab.start_registry(A, &["--key-file", &good_arg], &[]);
    lab.start_registry(B, &["--key-file", &good_arg], &[]);
    lab.start_registry(C, &["--key-file", &bad_arg], &[]);
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/auth",
            "--count",
            "5",
            "--max-size",
            "32",
            "--linger",
            "60",
        ],
    );
    // Same key: reflection works.
    let s = last_auth_value_on(&mut lab, B);
    assert_eq!(s["last"], 5, "{s}");
    // Wrong key: C drops A's and B's datagrams, and they drop C's.
    eventually("C counts datagrams with a bad MAC", || {
        lab.dropped(C, "bad_mac") > 0
    });
    eventually("A counts C's datagrams as bad MACs", || {
        lab.dropped(A, "bad_mac") > 0
    });
    assert!(lab
        .stats(C)
        .is_some_and(|s| s["peers"].as_array().is_some_and(|p| p.is_empty())));
    // The registry says at start-up whether the network is authenticated.
    assert!(
        lab.log(A).contains("authenticated with the key file"),
        "{}",
        lab.log(A)
    );

    // A replayed datagram (captured on C's side of the network, sent again to B), garbage,
    // a truncated datagram, an altered one and another domain's.
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    let b_addr: SocketAddr = format!("{}:{PORT}", lab.hosts[B].ip).parse().unwrap();
    lab.kill_registry(C);
    let before = lab.dropped(B, "replayed");
    lab.in_netns(C, move || {
        let captured = capture_from(a_ip);
        let out = UdpSocket::bind("0.0.0.0:0").unwrap();
        out.send_to(&captured, b_addr).unwrap();
        out.send_to(b"hello", b_addr).unwrap();
        out.send_to(&captured[..captured.len() - 3], b_addr)
            .unwrap();
        let mut altered = captured.clone();
        let last = altered.len() - 20;
        altered[last] ^= 0x55;
        out.send_to(&altered, b_addr).unwrap();
        let mut other_domain = captured.clone();
        other_domain[8] ^= 1;
        out.send_to(&other_domain, b_addr).unwrap();
        let mut bad_magic = captured;
        bad_magic[0] = b'X';
        out.send_to(&bad_magic, b_addr).unwrap();
    });
    eventually("B counts the replay", || {
        lab.dropped(B, "replayed") > before
    });
    for cause in ["truncated", "malformed", "other_domain"] {
        eventually(&format!("B counts {cause}"), || lab.dropped(B, cause) > 0);
    }
    eventually("B counts the altered datagram", || {
        lab.dropped(B, "bad_mac") > 0
    });

    // No key: C's datagrams are unauthenticated for A; C says so when it starts.
    lab.start_registry(C, &[], &[]);
    eventually("A counts unauthenticated datagrams", || {
        lab.dropped(A, "unauthenticated") > 0
    });
    assert!(lab.log(C).contains("UNAUTHENTICATED"), "{}", lab.log(C));
    // B still works with A throughout.
    assert_eq!(last_auth_value_on(&mut lab, B)["last"], 5);
    let _ = std::fs::remove_file(good);
    let _ = std::fs::remove_file(bad);
}

#[test]
fn a_name_published_on_another_host_is_refused_and_the_first_keeps_working() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/dup",
            "--count",
            "200",
            "--interval-ms",
            "20",
            "--max-size",
            "32",
            "--linger",
            "60",
        ],
    );
    wait_until_b_knows_a_publications(&lab);
    let second = lab.spawn(
        B,
        "bus-stress",
        &[
            "write",
            "--name",
            "/dup",
            "--count",
            "1",
            "--max-size",
            "32",
        ],
    );
    let out = lab.finish(second);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the second publisher must be refused"
    );
    assert!(err.contains("host 'hA' already publishes /dup"), "{err}");
    assert!(lab.log(B).contains("conflict"), "{}", lab.log(B));
    eventually("B counts the conflict", || {
        lab.stats(B)
            .is_some_and(|s| s["conflicts"].as_u64().unwrap_or(0) >= 1)
    });
    // The first publisher keeps working, also for subscribers on B.
    let r = lab.read_until(B, "/dup", "200", "20");
    let s = summary(&lab.finish(r));
    assert_eq!(s["last"], 200, "{s}");
    assert_eq!(s["backwards"], 0, "{s}");
}

#[test]
fn a_subscription_of_another_type_than_the_remote_publication_is_refused_naming_both() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    // Subscribed on B as `Checked` before host A publishes the name as `ManagerConfig`: once
    // B's registry learns A's publication it refuses the waiting subscription, naming both
    // types (it used to wait in silence while A's values were sent to B and dropped there).
    let early = lab.read_for(B, "/robot/manager", "5");
    let manager = std::env::temp_dir().join(format!("baton-types-{}.toml", std::process::id()));
    std::fs::write(&manager, "controllers = []\narbiters = []\n").expect("manager file");
    lab.spawn(
        A,
        "robot-manager",
        &["--config", &manager.to_string_lossy()],
    );
    eventually("B logs the type conflict with both types", || {
        let log = lab.log(B);
        log.contains("refused 1 subscription(s) of /robot/manager")
            && log.contains("tools::stress::Checked")
            && log.contains("arbiter::protocol::ManagerConfig")
    });
    let out = lab.finish(early);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the waiting subscription must be refused"
    );
    assert!(
        err.contains("arbiter::protocol::ManagerConfig (schema ")
            && err.contains("; published on host 'hA')")
            && err.contains("tools::stress::Checked"),
        "{err}"
    );
    // Nothing of A's is asked for by B any more: no value of it is sent to B and dropped.
    // (Over several refresh periods of the lab's registries: 300 ms.)
    let dropped = lab.dropped(B, "unexpected");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(lab.dropped(B, "unexpected"), dropped);
    // Subscribing once B knows A's publication: refused at once, the error names both types.
    wait_until_b_knows_a_publications(&lab);
    let late = lab.read_for(B, "/robot/manager", "20");
    let out = lab.finish(late);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the subscription must be refused");
    assert!(
        err.contains("arbiter::protocol::ManagerConfig (schema ")
            && err.contains("; published on host 'hA')")
            && err.contains("tools::stress::Checked"),
        "{err}"
    );
    let _ = std::fs::remove_file(manager);
}

#[test]
fn a_forgotten_hosts_old_datagram_is_still_a_replay() {
    let mut lab = Lab::new(3);
    let key = key_file("forgotten", "a shared key for the forgotten host test");
    let key_arg = key.to_string_lossy().into_owned();
    lab.start_registry(A, &["--key-file", &key_arg], &[]);
    lab.start_registry(B, &["--key-file", &key_arg], &[]);
    eventually("B hears A", || {
        lab.stats(B)
            .is_some_and(|s| s["peers"].as_array().is_some_and(|p| p.len() == 1))
    });
    // Captured on C's side of the network while A runs, replayed after B forgot A.
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    let captured = lab.in_netns(C, move || capture_from(a_ip));
    lab.kill_registry(A);
    eventually("B forgets the silent host A", || {
        lab.stats(B)
            .is_some_and(|s| s["peers"].as_array().is_some_and(|p| p.is_empty()))
    });
    let before = lab.dropped(B, "replayed");
    let b_addr: SocketAddr = format!("{}:{PORT}", lab.hosts[B].ip).parse().unwrap();
    lab.in_netns(C, move || {
        let out = UdpSocket::bind("0.0.0.0:0").unwrap();
        out.send_to(&captured, b_addr).unwrap();
    });
    eventually(
        "B counts the forgotten host's old datagram as a replay",
        || lab.dropped(B, "replayed") > before,
    );
    assert!(
        lab.stats(B)
            .is_some_and(|s| s["peers"].as_array().is_some_and(|p| p.is_empty())),
        "the replay must not bring A back: {:?}",
        lab.stats(B)
    );
    let _ = std::fs::remove_file(key);
}

/// Waits until host B's registry has heard of (at least) A's two publications.
fn wait_until_b_knows_a_publications(lab: &Lab) {
    eventually("B learns A's publications", || {
        lab.stats(B)
            .is_some_and(|s| s["peers"][0]["publications"].as_u64().unwrap_or(0) >= 2)
    });
}

/// With a key, big values (hundreds of datagrams each) flow while every host announces ten
/// times a second: announcements and values come through two sockets in no order between them,
/// and none of the values' datagrams may be refused as a replay.
#[test]
fn big_values_beside_announcements_are_never_taken_for_replays() {
    let mut lab = Lab::new(3);
    let key = key_file("streams", "a shared key for the two streams test");
    let key_arg = key.to_string_lossy().into_owned();
    for h in [A, B, C] {
        lab.start_registry(h, &["--key-file", &key_arg], &[]);
    }
    let readers: Vec<usize> = [B, C]
        .into_iter()
        .map(|h| lab.read_until(h, "/streams", "100", "30"))
        .collect();
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/streams",
            "--count",
            "100",
            "--interval-ms",
            "10",
            "--min-size",
            "300000",
            "--max-size",
            "1000000",
            "--linger",
            "60",
        ],
    );
    for r in readers {
        let s = summary(&lab.finish(r));
        assert_eq!(s["last"], 100, "{s}");
        assert_eq!(s["bad"], 0, "{s}");
    }
    for h in [B, C] {
        assert_eq!(
            lab.dropped(h, "replayed"),
            0,
            "host {h}: {:?}",
            lab.stats(h)
        );
    }
    let _ = std::fs::remove_file(key);
}

/// The first value datagram from `from` to a port other than the discovery port, as it
/// arrives in the current netns (a packet socket sees it beside the registry's own socket).
fn capture_value_from(from: Ipv4Addr) -> Vec<u8> {
    const ETH_P_IP: u16 = 0x0800;
    let s = socket2::Socket::new(
        socket2::Domain::PACKET,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::from(i32::from(ETH_P_IP.to_be()))),
    )
    .expect("packet socket (root)");
    let s: UdpSocket = std::os::fd::OwnedFd::from(s).into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = s.recv(&mut buf).expect("a packet within 10 s");
        let ip = &buf[..n];
        let header = usize::from(ip[0] & 0x0f) * 4;
        let (src, protocol) = (Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]), ip[9]);
        if src != from || protocol != 17 || n < header + 8 {
            continue;
        }
        let udp = &ip[header..];
        let to_port = u16::from_be_bytes([udp[2], udp[3]]);
        // A value: its channel (bytes 40..48 of the datagram header) is not the announcements'
        // 0 (a newcomer's announcement can come to the data port too).
        let payload = &udp[8..];
        let value = payload
            .get(40..48)
            .is_some_and(|c| c.iter().any(|&b| b != 0));
        if to_port != PORT && value && payload.len() >= 72 {
            // One datagram: the kernel may hand the packet socket several coalesced (GRO).
            let body = u32::from_le_bytes(payload[68..72].try_into().unwrap()) as usize;
            let mac = if payload[5] & 1 != 0 { 16 } else { 0 };
            return payload[..(72 + body + mac).min(payload.len())].to_vec();
        }
    }
}

/// A value datagram captured on its way to B, replayed (from C) after B's registry was killed
/// and restarted, its replay window empty, and before A's next refresh could reach it: the
/// mirror keeps its newer value, because the origin's session and sequence are kept in the
/// mirror slot.
#[test]
fn a_value_replayed_after_a_registry_restart_does_not_roll_the_mirror_back() {
    let mut lab = Lab::new(3);
    let key = key_file("restart", "a shared key for the restart replay test");
    let key_arg = key.to_string_lossy().into_owned();
    lab.start_registry(A, &["--key-file", &key_arg], &[]);
    lab.start_registry(B, &["--key-file", &key_arg], &[]);
    // Reads across the restart and the replay; a value older than one seen is "backwards".
    let reader = lab.read_for(B, "/replay", "10");
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    let capture = lab.in_netns(B, move || {
        std::thread::spawn(move || capture_value_from(a_ip))
    });
    lab.write_from(A, "/replay", "30", "20", "64");
    let captured = capture.join().expect("capture");
    let until_last = lab.read_until(B, "/replay", "30", "10");
    assert_eq!(
        summary(&lab.finish(until_last))["last"],
        30,
        "B's mirror holds A's last value"
    );
    // From now on nothing of A's reaches B by unicast (announcements still come by multicast).
    let b_ip = lab.hosts[B].ip.clone();
    let route = |lab: &Lab, verb: &str| {
        let done = lab
            .command(A, std::path::Path::new("ip"))
            .args(["route", verb, "blackhole", &format!("{b_ip}/32")])
            .status()
            .expect("run ip route");
        assert!(done.success(), "ip route {verb} blackhole {b_ip}/32");
    };
    route(&lab, "add");
    lab.kill_registry(B);
    lab.start_registry(B, &["--key-file", &key_arg], &[]);
    eventually("B's restarted registry hears A again", || {
        lab.stats(B)
            .is_some_and(|s| s["peers"].as_array().is_some_and(|p| p.len() == 1))
    });
    let b_addr: SocketAddr = format!("{b_ip}:{PORT}").parse().unwrap();
    // Sent again until refused as older: a replay that comes before the restarted registry
    // has its mirror back is dropped as unexpected, which proves nothing.
    eventually("B refuses the replayed value as older", || {
        let captured = captured.clone();
        lab.in_netns(C, move || {
            let out = UdpSocket::bind("0.0.0.0:0").unwrap();
            out.send_to(&captured, b_addr).unwrap();
        });
        lab.dropped(B, "older") > 0
    });
    route(&lab, "del");
    let s = summary(&lab.finish(reader));
    assert_eq!(s["backwards"], 0, "the mirror went back: {s}");
    assert_eq!(s["last"], 30, "{s}");
    let _ = std::fs::remove_file(key);
}

/// After A's registry restarted with its clock set back (its session is now smaller than the
/// one before), a value datagram of A's earlier run, replayed to B, is refused, and B's mirror
/// keeps following A's new values (the replay must not move B's replay window to the old
/// session, which would shut out every real value after it).
#[test]
fn a_replayed_value_of_an_earlier_larger_session_does_not_shut_out_the_current_one() {
    let mut lab = Lab::new(3);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let reader = lab.read_until(B, "/clock", "40", "20");
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    let capture = lab.in_netns(B, move || {
        std::thread::spawn(move || capture_value_from(a_ip))
    });
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/clock",
            "--interval-ms",
            "20",
            "--count",
            "100000",
        ],
    );
    let captured = capture.join().expect("capture");
    assert_eq!(summary(&lab.finish(reader))["last"], 40);
    lab.kill_registry(A);
    lab.start_registry(A, &[], &[("BATON_NET_FAULTS", "clock_back_s=3600")]);
    lab.kill_registry(B);
    lab.start_registry(B, &[], &[]);
    let flowing = lab.read_until(B, "/clock", "80", "20");
    assert!(summary(&lab.finish(flowing))["last"].as_u64() >= Some(80));
    let b_addr: SocketAddr = format!("{}:{PORT}", lab.hosts[B].ip).parse().unwrap();
    lab.in_netns(C, move || {
        let out = UdpSocket::bind("0.0.0.0:0").unwrap();
        out.send_to(&captured, b_addr).unwrap();
    });
    let r = lab.read_for(B, "/clock", "3");
    let s = summary(&lab.finish(r));
    assert!(
        s["reads"].as_u64() >= Some(20),
        "B's mirror must keep following A: {s}"
    );
    assert_eq!(lab.dropped(B, "replayed"), 0, "{:?}", lab.stats(B));
}

/// Two computers whose buses meet with one name published on both (a cut cable plugged back
/// in, two robots joined): every registry decides alike which keeps the name (hA: the host
/// name sorting first), and the robot controller on the other stops with the reason, instead
/// of each taking the arbiters' outcomes for that name as its own (both used to report `full`
/// while only one was obeyed; then both were stopped).
#[test]
fn a_name_published_on_two_hosts_when_their_buses_meet_stops_one_controller() {
    let mut lab = Lab::new(2);
    lab.set_connected(B, false);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let args = [
        "--name",
        "payload",
        "--status",
        "compromising",
        "--duration-s",
        "30",
    ];
    let on_a = lab.spawn(A, "robot-controller", &args);
    let on_b = lab.spawn(B, "robot-controller", &args);
    eventually("each host has its own controller's block", || {
        [A, B].iter().all(|&h| {
            lab.inspect(h, &["get", "/robot/controller/payload", "--json"])
                .status
                .success()
        })
    });
    lab.set_connected(B, true);
    let out = lab.finish(on_b);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("host 'hA' publishes /robot/controller/payload too"),
        "{err}"
    );
    // The one on hA keeps its name, and B follows it: B's directory gives the name to hA's
    // running controller, and B forgets the refused controller's last block (nothing there
    // uses it, and hA's is newer).
    eventually(
        "B follows hA's controller and forgets its own's block",
        || {
            let follows_a = lab
                .directory_entry(B, "/robot/controller/payload")
                .is_some_and(|e| e["origin_host"] == "hA" && e["publisher_alive"] == true);
            // Nothing listed: the slot is gone from B.
            let held_on_b = !lab
                .inspect(B, &["list", "/robot/controller/payload", "--json"])
                .stdout
                .is_empty();
            follows_a && !held_on_b
        },
    );
    assert!(
        lab.is_running(on_a),
        "the controller on hA must keep running"
    );
    lab.kill(on_a);
}

/// Which host keeps a name is decided from what each announces: a publisher that has not
/// written since it took a name whose writer died (its host announces it as not alive) loses
/// to a live one on another host when their buses meet, also when its host's name sorts
/// first. Each host used to take its own publisher for alive, and both decided they kept the
/// name.
#[test]
fn a_publisher_that_has_not_written_loses_a_conflict_to_a_live_one() {
    let mut lab = Lab::new(2);
    lab.set_connected(B, false);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    // A writer that wrote and died: its value stays, its writer gone.
    let died = lab.write_from(A, "/both", "3", "0", "32");
    // Values written before the registry bound the publication arrive as one, the last.
    eventually("A's slot holds a value", || {
        let out = lab.inspect(A, &["list", "/both", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .is_ok_and(|row| row["sequence"].as_u64() >= Some(1))
    });
    lab.kill(died);
    let _idle = lab.write_from(A, "/both", "0", "0", "32");
    let _live = lab.write_from(B, "/both", "100000", "20", "32");
    std::thread::sleep(Duration::from_millis(300));
    lab.set_connected(B, true);
    let says = |host: usize| {
        let log = lab.log(host);
        log.lines()
            .filter(|l| l.contains("conflict: /both is published here"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    eventually("both hosts see the conflict", || {
        !says(A).is_empty() && !says(B).is_empty()
    });
    assert!(
        says(A)[0].ends_with("the bus follows that host's"),
        "{:?}",
        says(A)
    );
    assert!(
        says(B)[0].ends_with("the bus follows this host's"),
        "{:?}",
        says(B)
    );
}

/// Every Baton unit and application runs as user `baton`: a registry holding the network key
/// makes itself non-dumpable, so that another process of its user cannot read the key out of
/// its memory (/proc/PID/mem, which needs only the same user where ptrace is not restricted).
#[test]
fn a_registry_with_a_key_keeps_its_memory_from_its_own_user() {
    use std::os::unix::fs::{chown, PermissionsExt};
    require_root();
    let lab = Lab::new(1);
    let dir = std::env::temp_dir().join(format!("baton-nobody-{}", std::process::id()));
    let registry = common::runnable_copy_in(&dir, "registry-server");
    let key = dir.join("net.key");
    std::fs::write(&key, "correct horse battery staple\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown(&key, Some(65534), Some(65534)).unwrap();
    let mut child = lab
        .command(A, std::path::Path::new("setpriv"))
        .args(AS_NOBODY)
        .arg(&registry)
        .args(["--domain", netns::DOMAIN, "--net", "--host", "ha"])
        .arg("--key-file")
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until nsenter and setpriv have made way for the registry, the process is root's, and
    // closed to nobody for that reason.
    let pid = child.id();
    let deadline = std::time::Instant::now() + WATCHDOG;
    while std::fs::read_link(format!("/proc/{pid}/exe")).ok().as_ref() != Some(&registry)
        || !std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .contains("Uid:\t65534")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the registry did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let mem = format!("if=/proc/{pid}/mem");
    let denied = loop {
        let out = std::process::Command::new("setpriv")
            .args(AS_NOBODY)
            .args(["dd", &mem, "of=/dev/null", "count=0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if err.contains("Permission denied") || std::time::Instant::now() > deadline {
            break (!out.status.success(), err);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(running, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(denied.0, "its user read its memory: {}", denied.1);
}
