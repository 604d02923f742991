//! What a registry logs when the network cannot work as configured, across hosts made of
//! network namespaces: a different key, a key on one host only, values over `--max-value` or
//! `--reassembly-limit`, datagrams that cannot be sent. Each is said about once a minute, with
//! what and where, besides its counter.

mod common;
mod netns;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use netns::{capture_from, eventually, Lab, PORT};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

fn key_file(lab: &mut Lab, name: &str, bytes: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = lab.file(name, bytes);
    // The registry refuses a key file other users may read.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// How many lines of `log` contain `text`.
fn lines_with(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

#[test]
fn a_different_key_or_a_key_on_one_side_only_is_logged_once_a_minute_per_source() {
    let mut lab = Lab::new(3);
    let one = key_file(&mut lab, "key-one", "the first key of the warnings test");
    let two = key_file(&mut lab, "key-two", "the other key of the warnings test");
    lab.start_registry(A, &["--key-file", &one], &[]);
    lab.start_registry(B, &["--key-file", &two], &[]);
    lab.start_registry(C, &[], &[]);
    let (a_ip, b_ip, c_ip) = (
        lab.hosts[A].ip.clone(),
        lab.hosts[B].ip.clone(),
        lab.hosts[C].ip.clone(),
    );
    let bad_mac = format!("datagrams from {b_ip} fail the MAC: a different key?");
    let unauthenticated =
        format!("unauthenticated datagrams from {c_ip} while this registry has a key");
    let no_key = format!("datagrams from {a_ip} carry a MAC but this registry has no key");
    eventually("A and C log what is wrong", || {
        let (a, c) = (lab.log(A), lab.log(C));
        a.contains(&bad_mac) && a.contains(&unauthenticated) && c.contains(&no_key)
    });
    // Many more datagrams come (ten announcements a second each): said once all the same.
    eventually("A counts many datagrams with a bad MAC", || {
        lab.dropped(A, "bad_mac") >= 20
    });
    let a = lab.log(A);
    assert_eq!(lines_with(&a, &bad_mac), 1, "{a}");
    assert_eq!(lines_with(&a, &unauthenticated), 1, "{a}");
}

#[test]
fn a_datagram_that_cannot_be_sent_is_logged_with_the_error_and_destination() {
    let mut lab = Lab::new(1);
    lab.start_registry(A, &[], &[]);
    eventually("A announces", || {
        lab.stats(A)
            .is_some_and(|s| s["datagrams_sent"].as_u64() >= Some(1))
    });
    // Without its multicast route the host cannot send to the group any more.
    lab.run(A, "ip", &["route", "del", "224.0.0.0/4"]);
    let said = "sending to 239.255.66.66:7447 failed: Network is unreachable";
    eventually("A logs the failed send", || lab.log(A).contains(said));
    eventually("A counts many failed sends", || {
        lab.stats(A)
            .is_some_and(|s| s["send_errors"].as_u64() >= Some(20))
    });
    let log = lab.log(A);
    assert_eq!(lines_with(&log, said), 1, "{log}");
}

/// A value larger than the sender's `--max-value` is not sent: said once for the slot, with
/// its name and the limit as given, and counted as such rather than as reflected.
#[test]
fn a_value_over_max_value_is_logged_once_by_slot_and_counted_apart() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--max-value", "1000"], &[]);
    lab.start_registry(B, &[], &[]);
    let reader = lab.read_for(B, "/big", "20");
    lab.write_from(A, "/big", "100000", "20", "5000");
    eventually("A counts values too large to send", || {
        lab.dropped(A, "too_large_to_send") >= 20
    });
    let log = lab.log(A);
    let said = "not reflecting /big to hB: a value of";
    assert_eq!(lines_with(&log, said), 1, "{log}");
    assert!(log.contains("larger than --max-value 1000 "), "{log}");
    let stats = lab.stats(A).expect("A's statistics");
    assert_eq!(stats["values_reflected"], 0, "{stats}");
    lab.kill(reader);
}

/// A value over the receiver's `--max-value` is dropped whether it comes alone or in a bundle
/// with others (it used to be taken alone when within the limit's allowance for name and
/// fields, and dropped without a word in a bundle), and said once a minute per slot.
#[test]
fn a_value_over_the_receivers_max_value_is_refused_alone_or_bundled_and_said() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &["--max-value", "100"], &[]);
    let readers = [
        lab.read_for(B, "/alone", "20"),
        lab.spawn(
            B,
            "bus-stress",
            &[
                "read",
                "--name",
                "/bundled",
                "--slots",
                "4",
                "--seconds",
                "20",
                "--wait",
            ],
        ),
    ];
    lab.write_from(A, "/alone", "1000", "20", "500");
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/bundled",
            "--slots",
            "4",
            "--count",
            "1000",
            "--interval-ms",
            "20",
            "--min-size",
            "500",
            "--max-size",
            "500",
            "--linger",
            "60",
        ],
    );
    let a_ip = lab.hosts[A].ip.clone();
    let said = |name: &str| format!("bytes of {name} from {a_ip} is larger than --max-value 100");
    eventually(
        "B says why it drops /alone and every slot of /bundled",
        || {
            let log = lab.log(B);
            log.contains(&said("/alone"))
                && (0..4).all(|i| log.contains(&said(&format!("/bundled/{i}"))))
        },
    );
    eventually("B drops them as oversized", || {
        lab.dropped(B, "oversized") >= 40
    });
    let log = lab.log(B);
    assert_eq!(lines_with(&log, &said("/alone")), 1, "{log}");
    assert_eq!(lines_with(&log, &said("/bundled/0")), 1, "{log}");
    let stats = lab.stats(B).expect("B's statistics");
    assert_eq!(stats["values_mirrored"], 0, "{stats}");
    for r in readers {
        lab.kill(r);
    }
}

/// Values larger than the receiver's `--reassembly-limit` (host B) or `--max-value` (host C)
/// cannot be taken: each receiver says so, naming the slot, the sender, the size and the
/// option to raise, once a minute however many datagrams come.
#[test]
fn a_value_over_the_receivers_limits_is_logged_with_slot_size_and_option() {
    let mut lab = Lab::new(3);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &["--reassembly-limit", "100000"], &[]);
    lab.start_registry(C, &["--max-value", "100000"], &[]);
    let readers = [
        lab.read_for(B, "/large", "20"),
        lab.read_for(C, "/large", "20"),
    ];
    // Small values first (sizes grow to the largest in 16 steps): B and C know /large by the
    // time its values no longer fit.
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/large",
            "--count",
            "100000",
            "--interval-ms",
            "50",
            "--min-size",
            "8",
            "--max-size",
            "300000",
            "--linger",
            "60",
        ],
    );
    let a_ip = lab.hosts[A].ip.clone();
    let over_limit =
        format!("(a value of /large) from {a_ip} does not fit --reassembly-limit 100000");
    let over_max = format!("(a value of /large) from {a_ip} is larger than --max-value 100000");
    eventually("B and C log why they drop /large", || {
        lab.log(B).contains(&over_limit) && lab.log(C).contains(&over_max)
    });
    eventually("B and C drop many datagrams as oversized", || {
        lab.dropped(B, "oversized") >= 20 && lab.dropped(C, "oversized") >= 20
    });
    assert_eq!(lines_with(&lab.log(B), &over_limit), 1, "{}", lab.log(B));
    assert_eq!(lines_with(&lab.log(C), &over_max), 1, "{}", lab.log(C));
    assert!(lab
        .log(B)
        .contains("raise --reassembly-limit on this registry"));
    for r in readers {
        lab.kill(r);
    }
}

/// A registry of the domain that speaks another wire version (a computer running another Baton
/// release) is named in the log, once a minute, with both versions; its datagrams are dropped.
#[test]
fn a_registry_of_another_wire_version_is_logged_with_both_versions() {
    let mut lab = Lab::new(3);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    let mut older = lab.in_netns(C, move || capture_from(a_ip));
    older[4] = 3;
    let b_addr: SocketAddr = format!("{}:{PORT}", lab.hosts[B].ip).parse().unwrap();
    let before = lab.dropped(B, "malformed");
    lab.in_netns(C, move || {
        let out = UdpSocket::bind("0.0.0.0:0").unwrap();
        for _ in 0..5 {
            out.send_to(&older, b_addr).unwrap();
        }
    });
    let said = format!(
        "datagrams from {} are of Baton's wire version 3, this registry's is",
        lab.hosts[C].ip
    );
    eventually("B names the other release", || lab.log(B).contains(&said));
    eventually("B counts them", || {
        lab.dropped(B, "malformed") >= before + 5
    });
    let b = lab.log(B);
    assert_eq!(lines_with(&b, &said), 1, "{b}");
}

/// Two computers made from one image share a host name. On a network with a key, the robot's
/// registry followed the later run and refused the other's datagrams as replays, blaming a
/// clock set back (network audit). It now says that two registries use the host name, and
/// where.
#[test]
fn two_registries_of_one_host_name_are_named_as_such() {
    let mut lab = Lab::new(3);
    let key = key_file(
        &mut lab,
        "key-dup",
        "the key of the duplicate host name test",
    );
    lab.start_registry(A, &["--key-file", &key], &[]);
    lab.start_registry(B, &["--key-file", &key], &[]);
    let b_ip = lab.hosts[B].ip.clone();
    eventually("A hears B", || lab.log(A).contains("discovered host 'hB'"));
    lab.start_registry(C, &["--key-file", &key, "--host", "hB"], &[]);
    let c_ip = lab.hosts[C].ip.clone();
    eventually("A names the duplicate host name", || {
        lab.log(A).contains(&format!(
            "datagrams from {b_ip} name host 'hB', as do those from {c_ip} of a later run: two \
             registries use the host name 'hB'"
        ))
    });
    assert!(!lab.log(A).contains("clock set back"), "{}", lab.log(A));
}

/// CPU time (user and system) process `pid` has used so far.
fn cpu_time(pid: u32) -> std::time::Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the registry runs");
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and
    // 13th, in clock ticks.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    std::time::Duration::from_millis((fields[0] + fields[1]) * 1000 / hz)
}

/// A reflected slot whose value cannot be read (its memory corrupt: here its latest-sequence
/// word set far past what was written, naming a buffer whose length is beyond any capacity) is
/// said once and passed over. The reflector used to
/// find it unsent at every turn and read it again at once, for ever: a whole CPU, and no word
/// of why.
#[test]
fn an_unreadable_reflected_value_is_said_and_passed_over_not_spun_on() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_from(A, "/spin/x", "1", "0", "16");
    let r = lab.read_until(B, "/spin/x", "1", "15");
    assert!(common::summary(&lab.finish(r))["last"].as_u64() >= Some(1));
    // B keeps subscribing, so that A keeps reflecting the slot.
    let _reader = lab.read_for(B, "/spin/x", "30");
    eventually("A reflects /spin/x to B", || {
        lab.directory_entry(A, "/spin/x").is_some()
    });
    let segment = format!("/dev/shm/baton.{}~spin~x", netns::DOMAIN);
    // As `TestBus::make_unreadable`: the length of buffer 1 (offset 524) beyond any capacity,
    // then the latest-sequence word (offset 512) set to 1,000,001, which names that buffer.
    lab.run(
        A,
        "sh",
        &[
            "-c",
            &format!(
                "printf '\\377\\377\\377\\377' | dd of={segment} bs=1 seek=524 \
                 conv=notrunc status=none && \
                 printf '\\101\\102\\017\\000\\000\\000\\000\\000' | dd of={segment} \
                 bs=1 seek=512 conv=notrunc status=none"
            ),
        ],
    );
    eventually("A says the value cannot be read", || {
        lines_with(&lab.log(A), "/spin/x: its value cannot be read") == 1
    });
    let pid = lab.registry_pid(A).unwrap();
    let before = cpu_time(pid);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let used = cpu_time(pid) - before;
    assert!(
        used < std::time::Duration::from_millis(500),
        "A's registry used {used:?} of CPU in 2 s"
    );
    assert_eq!(lines_with(&lab.log(A), "its value cannot be read"), 1);
}
