//! Mirrors and the paths to them when the machines change under a running bus: a subscriber
//! host's registry restarted under a mirror (the writer state its subscribers see follows the
//! origin's publishers afterwards as before), a mirror that cannot be made for lack of room,
//! a route's MTU lowered after start. Real `registry-server`, `bus-stress` and `bus-inspect`
//! binaries in the network-namespace lab.

mod common;
mod netns;

use netns::{eventually, Lab};

const A: usize = 0;
const B: usize = 1;

/// B's registry restarts while its mirror holds the value of a publisher gone from A; a new
/// publisher on A then writes once. B's subscribers must read that value as its running
/// writer's. They read it as gone for good: the restarted registry took the mirror over (as
/// its writer) after dating the value it held, which undid the dating.
#[test]
fn a_new_remote_publisher_reads_alive_after_the_subscriber_hosts_registry_restarts() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let first = lab.write_from(A, "/again", "1", "0", "16");
    let reader = lab.read_for(B, "/again", "60");
    eventually("B mirrors the first publisher's value", || {
        lab.list_row(B, "/again")["writer_alive"] == true
    });
    lab.kill(first);
    eventually("B reads the first publisher as gone", || {
        lab.list_row(B, "/again")["writer_alive"] == false
    });
    lab.kill_registry(B);
    lab.start_registry(B, &[], &[]);
    eventually("B's registry serves again", || {
        lab.inspect(B, &["endpoints", "--json"]).status.success()
    });
    let second = lab.write_from(A, "/again", "1", "0", "16");
    eventually(
        "B reads the new publisher's value as its running writer's",
        || {
            let row = lab.list_row(B, "/again");
            row["writer_alive"] == true && row["origin"] == "hA"
        },
    );
    lab.kill(second);
    lab.kill(reader);
}

/// A mirror that cannot be made here (no room left in this host's /dev/shm) is said in the log
/// as such, with the reason, and not counted as a conflict (it was both, as if the two hosts
/// disagreed on the name).
#[test]
fn a_mirror_without_room_is_no_conflict() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    eventually("B's registry has made its own slots", || {
        lab.stats(B).is_some()
    });
    // Room for what B holds (its directory and statistics) and 2 MiB more: not for a mirror
    // of /big's 4 MB values.
    let df = lab.run(B, "/usr/bin/df", &["-k", "--output=used", "/dev/shm"]);
    let used_kib: u64 = String::from_utf8_lossy(&df.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df's used KiB");
    let size = format!("remount,size={}k", used_kib + 2048);
    lab.run(B, "/usr/bin/mount", &["-o", &size, "/dev/shm"]);
    lab.write_from(A, "/big", "3", "0", "4000000");
    lab.read_for(B, "/big", "20");
    eventually("B says it cannot mirror /big, and why", || {
        let log = lab.log(B);
        log.contains("cannot mirror /big of host 'hA'") && log.contains("is /dev/shm full?")
    });
    let stats = lab.stats(B).expect("statistics");
    assert_eq!(stats["conflicts"], 0, "{stats}");
    assert!(!lab.log(B).contains("conflict"), "{}", lab.log(B));
}

/// The path's MTU lowered under a running registry's datagram size (measured at start): every
/// send of a value fails, and the log says why and what to do, once a minute; batching stays
/// on (it was turned off for good, as if batching were to blame).
#[test]
fn a_route_mtu_lowered_after_start_is_said_with_the_way_out() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    eventually("A's registry has measured the route", || {
        lab.stats(A).is_some()
    });
    lab.run(A, "/usr/sbin/ip", &["link", "set", "eth0", "mtu", "1200"]);
    lab.write_from(A, "/wide", "100000", "20", "5000");
    lab.read_for(B, "/wide", "20");
    eventually("A says why its sends fail", || {
        lab.log(A)
            .contains("the route's MTU is now below this registry's datagrams")
    });
    assert!(!lab.log(A).contains("sending one by one"), "{}", lab.log(A));
    // None of the values went out: none counts as reflected (they all did, before).
    eventually("A's statistics show the failed sends", || {
        lab.stats(A)
            .is_some_and(|s| s["send_errors"].as_u64() > Some(10))
    });
    let stats = lab.stats(A).expect("statistics");
    assert_eq!(stats["values_reflected"], 0, "{stats}");
}

/// A publisher restarted on another host reads as running here from its first value on: its
/// values come before the announcement that it runs, and read meanwhile as the gone writer's
/// (network chaos audit: 39 of 55 restarts, for about 0.1 s each). Announcements 2 s apart
/// make the wait show.
#[test]
fn a_restarted_remote_publishers_first_value_reads_alive() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--announce-ms", "2000"], &[]);
    lab.start_registry(B, &["--announce-ms", "2000"], &[]);
    let first = lab.write_from(A, "/restarted", "1", "0", "16");
    let reader = lab.read_for(B, "/restarted", "60");
    // Its value, not only the mirror (made, and dated live by an announcement, before the
    // value comes).
    eventually("B mirrors the first publisher's value", || {
        let row = lab.list_row(B, "/restarted");
        row["writer_alive"] == true && row["sequence"].as_u64() >= Some(1)
    });
    let before = lab.list_row(B, "/restarted")["sequence"].as_u64().unwrap();
    lab.kill(first);
    eventually("B reads the first publisher as gone", || {
        lab.list_row(B, "/restarted")["writer_alive"] == false
    });
    let second = lab.write_from(A, "/restarted", "1", "0", "16");
    let mut seen = Vec::new();
    eventually("B holds the new publisher's value", || {
        let row = lab.list_row(B, "/restarted");
        let new = row["sequence"].as_u64().is_some_and(|s| s > before);
        if new {
            seen.push(row);
        }
        new
    });
    assert_eq!(
        seen[0]["writer_alive"],
        true,
        "{seen:?}\n{}\n{}",
        lab.log(A),
        lab.log(B)
    );
    lab.kill(second);
    lab.kill(reader);
}

/// A mirror holding a gone publisher's value while a publisher on another host has taken the
/// name but not written yet names the host the value came from: it named the new host, which
/// wrote nothing (network chaos audit).
#[test]
fn a_mirror_names_the_host_its_value_came_from_not_the_next_publishers() {
    const C: usize = 2;
    let mut lab = Lab::new(3);
    for host in [A, B, C] {
        lab.start_registry(host, &[], &[]);
    }
    let reader = lab.read_for(C, "/handed", "60");
    let first = lab.write_from(A, "/handed", "1", "0", "16");
    eventually("C mirrors A's value", || {
        let row = lab.list_row(C, "/handed");
        row["writer_alive"] == true && row["origin"] == "hA"
    });
    lab.kill(first);
    eventually("C reads A's publisher as gone", || {
        lab.list_row(C, "/handed")["writer_alive"] == false
    });
    // Taken on B, nothing written yet.
    let next = lab.write_from(B, "/handed", "0", "0", "16");
    lab.wait_listed(C, "/handed", "hB");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let row = lab.list_row(C, "/handed");
    assert_eq!(row["origin"], "hA", "{row}");
    assert_eq!(row["writer_alive"], false, "{row}");
    lab.kill(next);
    lab.kill(reader);
}

/// A computer renamed: its registry stopped (SIGTERM) and started again under another --host.
/// The other computers kept the old name for --forget-ms, its publications still running, and
/// took the new name for a second publisher of the same names: a false conflict, and, when the
/// old name sorts first, no value from the new one meanwhile (network chaos audit). A registry
/// that stops says so, and is forgotten at once.
#[test]
fn a_computer_renamed_is_followed_under_its_new_name_at_once() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--host", "aaa-old", "--forget-ms", "20000"], &[]);
    lab.start_registry(B, &["--forget-ms", "20000"], &[]);
    let reader = lab.read_for(B, "/renamed", "60");
    let writer = lab.write_every(A, "/renamed", "20", "16");
    eventually("B mirrors aaa-old's value", || {
        lab.list_row(B, "/renamed")["origin"] == "aaa-old"
    });
    lab.kill(writer);
    lab.stop_registry(A);
    eventually("B hears that aaa-old left", || {
        lab.log(B)
            .contains("host 'aaa-old' left: its registry stopped")
    });
    lab.start_registry(A, &["--forget-ms", "20000"], &[]);
    lab.write_every(A, "/renamed", "20", "16");
    eventually("B mirrors hA's values", || {
        let row = lab.list_row(B, "/renamed");
        row["origin"] == "hA" && row["writer_alive"] == true
    });
    assert!(!lab.log(B).contains("conflict"), "{}", lab.log(B));
    lab.kill(reader);
}
