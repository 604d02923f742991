//! The network as it really is under a registry: a link whose MTU is below the registry's
//! `--mtu` (a VPN, a VLAN), and a network that is not up yet when the registry starts; and the
//! lab's own namespaces, left by a test runner that was killed.

mod common;
mod netns;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{summary, WATCHDOG};
use netns::Lab;

const A: usize = 0;
const B: usize = 1;

/// Value datagrams go out with UDP segmentation, which refuses a datagram larger than the
/// device's MTU: every value of more than one datagram used to be lost while announcements
/// (sent without it) still passed. The registry now sends datagrams that fit the route.
#[test]
fn values_cross_a_link_narrower_than_the_mtu_asked_for() {
    let mut lab = Lab::new(2);
    for h in [A, B] {
        lab.run(h, "ip", &["link", "set", "eth0", "mtu", "1400"]);
    }
    for h in [A, B] {
        lab.start_registry(h, &["--mtu", "1500"], &[]);
    }
    let reader = lab.read_until(B, "/wide", "3", "20");
    lab.write_from(A, "/wide", "3", "200", "20000");
    let s = summary(&lab.finish(reader));
    assert_eq!(s["last"], 3, "{s}");
    assert_eq!(s["bad"], 0, "{s}");
    assert!(
        lab.log(A)
            .contains("sending datagrams of at most 1400 bytes"),
        "{}",
        lab.log(A)
    );
}

/// A robot booting: the registry starts before its network is up (no address, no route for
/// the group). It used to exit ("joining 239.255.66.66: No such device"), taking the local bus
/// down with it; it now serves this computer's bus and opens the network once it is there.
#[test]
fn a_registry_started_before_its_network_serves_locally_and_joins_later() {
    let mut lab = Lab::new(2);
    lab.run(A, "ip", &["link", "set", "eth0", "down"]);
    lab.run(A, "ip", &["addr", "flush", "dev", "eth0"]);
    lab.start_registry(A, &["--interface", "eth0"], &[]);
    lab.start_registry(B, &[], &[]);
    // The local bus serves meanwhile: a value written and read on A.
    let local = lab.read_until(A, "/boot/local", "2", "20");
    lab.write_from(A, "/boot/local", "2", "50", "64");
    let s = summary(&lab.finish(local));
    assert_eq!(s["last"], 2, "{s}");
    netns::eventually("the registry says it waits for the network", || {
        lab.log(A).contains("network: not ready")
    });
    // The network comes up: reflection starts without a restart.
    let ip_a = lab.hosts[A].ip.clone();
    lab.run(
        A,
        "ip",
        &["addr", "add", &format!("{ip_a}/24"), "dev", "eth0"],
    );
    lab.run(A, "ip", &["link", "set", "eth0", "up"]);
    lab.run(A, "ip", &["route", "add", "224.0.0.0/4", "dev", "eth0"]);
    let remote = lab.read_until(B, "/boot/remote", "3", "20");
    lab.write_from(A, "/boot/remote", "1000", "50", "64");
    let s = summary(&lab.finish(remote));
    assert!(s["last"].as_u64() >= Some(3), "{s}");
    assert!(
        lab.log(A).contains("network: reflecting as host"),
        "{}",
        lab.log(A)
    );
}

/// The address of a registry's `--interface` changes (DHCP, a cable moved): multicast used to
/// stay on the old address ("Network is unreachable" at every announcement) and the host fell
/// off the bus until its registry restarted. It now follows the interface's new address.
#[test]
fn a_registry_follows_its_interface_to_a_new_address() {
    let mut lab = Lab::new(2);
    for h in [A, B] {
        lab.start_registry(h, &["--interface", "eth0"], &[]);
    }
    lab.write_from(A, "/moved", "100000", "20", "64");
    let before = lab.read_until(B, "/moved", "5", "20");
    let s = summary(&lab.finish(before));
    assert!(s["last"].as_u64() >= Some(5), "{s}");
    lab.run(A, "ip", &["addr", "flush", "dev", "eth0"]);
    lab.run(A, "ip", &["addr", "add", "10.77.0.99/24", "dev", "eth0"]);
    lab.run(A, "ip", &["route", "add", "224.0.0.0/4", "dev", "eth0"]);
    netns::eventually("A's registry follows the new address", || {
        lab.log(A).contains("has address 10.77.0.99 now")
    });
    // B forgets A (its old address is silent), then hears it again from the new one.
    let last_seen = |lab: &mut Lab| {
        let r = lab.read_until(B, "/moved", "1", "5");
        summary(&lab.finish(r))["last"].as_u64().unwrap_or(0)
    };
    let seen = last_seen(&mut lab);
    netns::eventually("B gets A's new values", || last_seen(&mut lab) > seen + 20);
}

/// A network adapter unplugged and plugged in again (a USB adapter, a veth made again): the
/// kernel drops the group's membership with the interface, and the new interface has another
/// index. A registry without `--interface` heard nobody again, and one with `--interface eth0`
/// failed every send ("No such device"), until restarted. Both now join again on their own.
#[test]
fn registries_hear_each_other_again_after_their_adapters_are_plugged_in_again() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--interface", "eth0"], &[]);
    lab.start_registry(B, &[], &[]);
    let both_ways = |lab: &mut Lab, name: &str| {
        for (from, to) in [(A, B), (B, A)] {
            let name = format!("{name}/{from}");
            let reader = lab.read_until(to, &name, "5", "20");
            lab.write_from(from, &name, "100000", "20", "64");
            let s = summary(&lab.finish(reader));
            assert!(s["last"].as_u64() >= Some(5), "{name}: {s}");
        }
    };
    both_ways(&mut lab, "/before");
    for h in [A, B] {
        lab.replug(h);
    }
    both_ways(&mut lab, "/after");
    for h in [A, B] {
        assert!(
            lab.log(h).contains("again on"),
            "host {h} never said it joined again: {}",
            lab.log(h)
        );
    }
}

/// Multicast loops a registry's own datagrams back to it: they are counted apart
/// (`looped_back`), not as received and dropped, which made every host show thousands of
/// drops in normal operation.
#[test]
fn a_registrys_own_looped_back_datagrams_are_not_drops() {
    let mut lab = Lab::new(2);
    for h in [A, B] {
        lab.start_registry(h, &[], &[]);
    }
    lab.write_from(A, "/looped", "100000", "10", "64");
    let r = lab.read_until(B, "/looped", "20", "20");
    let s = summary(&lab.finish(r));
    assert!(s["last"].as_u64() >= Some(20), "{s}");
    netns::eventually("A's statistics count its looped-back datagrams", || {
        lab.stats(A)
            .is_some_and(|s| s["looped_back"].as_u64().unwrap_or(0) > 0)
    });
    assert_eq!(lab.dropped(A, "own"), 0);
    assert_eq!(lab.dropped(B, "own"), 0);
}

/// A test runner killed before its labs were dropped (SIGKILL, a watchdog, a restart of the
/// machine's services) left their namespaces, and the holder processes that keep them, for
/// good: a later runner of the same pid could not even make its own. A new lab removes those
/// of processes that are gone, holders first, and leaves those of a process that runs.
#[test]
fn the_namespaces_of_a_killed_runner_are_removed_by_the_next_lab() {
    struct Cleanup(Vec<String>, Vec<std::process::Child>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for c in &mut self.1 {
                let _ = c.kill();
                let _ = c.wait();
            }
            for n in &self.0 {
                let _ = Command::new("ip").args(["netns", "del", n]).status();
            }
        }
    }
    let ip = |args: &[&str]| {
        let s = Command::new("ip").args(args).status().expect("run ip");
        assert!(s.success(), "ip {args:?}");
    };
    let mut gone = Command::new("true").spawn().expect("spawn true");
    gone.wait().expect("wait for true");
    let runner = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    let abandoned = format!("baton-bt{}x0-hA", gone.id());
    let kept = format!("baton-bt{}x0-hA", runner.id());
    let mut cleanup = Cleanup(vec![abandoned.clone(), kept.clone()], vec![runner]);
    // The holder enters a namespace of its own before the namespace gets its name: the
    // labs of tests running beside this one sweep too, and may remove a name of a gone pid
    // at any moment, so a name must never be seen without its holder.
    let holder = Command::new("unshare")
        .args(["--net", "sleep", "60"])
        .spawn()
        .expect("spawn a holder");
    let holder_pid = holder.id();
    cleanup.1.push(holder);
    let deadline = Instant::now() + WATCHDOG;
    let net_of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    loop {
        let holders = net_of(&holder_pid.to_string());
        assert!(
            holders.is_some(),
            "the holder (unshare --net sleep 60) ended"
        );
        if holders != net_of("self") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the holder never left this namespace"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    ip(&["netns", "attach", &abandoned, &holder_pid.to_string()]);
    ip(&["netns", "add", &kept]);

    tools::hosts::remove_abandoned_labs();

    let list = Command::new("ip").args(["netns", "list"]).output();
    let list = String::from_utf8_lossy(&list.expect("ip netns list").stdout).into_owned();
    let names: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        !names.contains(&abandoned.as_str()),
        "{abandoned} stayed: {list}"
    );
    assert!(
        names.contains(&kept.as_str()),
        "{kept} of a running process was removed: {list}"
    );
    let holder = cleanup.1.last_mut().expect("the holder");
    let status = holder.wait().expect("wait for the holder");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

/// `net-bench run` stopped with Ctrl-C left its two hosts (namespaces, registries, pongs) behind
/// until a later lab swept them. It removes them, and what runs in them, and exits 130.
#[test]
fn net_bench_stopped_by_ctrl_c_removes_its_hosts() {
    let mut command = Command::new(common::bin("net-bench"));
    command.args(["run", "--iterations", "200"]);
    // Its first row of results: the hosts and their registries run.
    let (pid, status, seen) = common::interrupt_after(command, "raw UDP ping-pong");
    assert_eq!(status.code(), Some(130), "{status:?} {seen:?}");
    let list = Command::new("ip").args(["netns", "list"]).output();
    let list = String::from_utf8_lossy(&list.expect("ip netns list").stdout).into_owned();
    let prefix = format!("baton-nb{pid}x");
    assert!(!list.contains(&prefix), "{prefix}: {list}");
}
