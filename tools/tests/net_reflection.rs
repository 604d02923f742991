//! Reflection across hosts made of network namespaces, with the real `registry-server`,
//! `bus-stress` and `bus-inspect` binaries: start orders, a registry restart, big values, and
//! loss/duplication/reordering.

mod common;
mod netns;

use std::time::Duration;

use common::summary;
use netns::{eventually, Lab};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

#[derive(Clone, Copy, Debug)]
enum Step {
    Registry(usize),
    Publisher,
    Subscriber(usize),
}

fn run_order(order: &[Step]) {
    let mut lab = Lab::new(3);
    let mut readers = Vec::new();
    for step in order {
        match *step {
            Step::Registry(h) => lab.start_registry(h, &[], &[]),
            Step::Publisher => {
                lab.write_from(A, "/order", "5", "0", "32");
            }
            Step::Subscriber(h) => readers.push(lab.read_until(h, "/order", "5", "20")),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for r in readers {
        lab.check_reader(r, 5, &format!("order {order:?}"));
    }
}

#[test]
fn a_publisher_on_one_host_reaches_subscribers_on_two_others_in_any_start_order() {
    use Step::*;
    let orders: [&[Step]; 4] = [
        &[
            Registry(A),
            Registry(B),
            Registry(C),
            Publisher,
            Subscriber(B),
            Subscriber(C),
        ],
        &[
            Registry(A),
            Registry(B),
            Registry(C),
            Subscriber(B),
            Subscriber(C),
            Publisher,
        ],
        &[
            Subscriber(B),
            Publisher,
            Subscriber(C),
            Registry(B),
            Registry(C),
            Registry(A),
        ],
        &[
            Publisher,
            Registry(A),
            Subscriber(C),
            Registry(C),
            Subscriber(B),
            Registry(B),
        ],
    ];
    for order in orders {
        run_order(order);
    }
}

#[test]
fn a_late_subscriber_gets_the_current_value_at_once_and_sees_the_origin() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_from(A, "/late", "3", "0", "16");
    let first = lab.read_until(B, "/late", "3", "20");
    lab.check_reader(first, 3, "first subscriber");
    // The mirror holds the value now: a new subscriber gets it without a new write.
    let second = lab.read_until(B, "/late", "3", "20");
    lab.check_reader(second, 3, "late subscriber");
    let out = lab.inspect(B, &["list", "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/late"), "{text}");
    netns::eventually("host A's statistics show the reflection to hB", || {
        lab.stats(A).is_some_and(|s| {
            s["values_reflected"].as_u64().unwrap_or(0) >= 1 && s["peers"][0]["host"] == "hB"
        })
    });
}

#[test]
fn subscribers_get_values_again_after_their_registry_restarts() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_from(A, "/restart", "120", "50", "16");
    let r = lab.read_until(B, "/restart", "120", "30");
    std::thread::sleep(Duration::from_millis(1500));
    lab.kill_registry(B);
    std::thread::sleep(Duration::from_millis(500));
    lab.start_registry(B, &[], &[]);
    let s = lab.check_reader(r, 120, "subscriber across its registry's restart");
    // The writer on A ran on: the mirror's writer process (B's registry) restarted, which is
    // no other writer to its readers (bus-stress counted one, and let its backwards check
    // start over; network walkthrough).
    assert_eq!(s["writers_changed"], 0, "{s}");
    // And a subscriber that joins after the restart gets the current value.
    let late = lab.read_until(B, "/restart", "120", "20");
    lab.check_reader(late, 120, "subscriber after the restart");
}

#[test]
fn one_mebibyte_values_arrive_whole() {
    let mut lab = Lab::new(3);
    for h in [A, B, C] {
        lab.start_registry(h, &[], &[]);
    }
    let size = (1 << 20).to_string();
    let rb = lab.read_until(B, "/big", "4", "30");
    let rc = lab.read_until(C, "/big", "4", "30");
    lab.write_from(A, "/big", "4", "200", &size);
    lab.check_reader(rb, 4, "1 MiB on B");
    lab.check_reader(rc, 4, "1 MiB on C");
}

/// A run under faults: three hosts whose registries lose 30 % of their datagrams and
/// duplicate and reorder 20 % for 6 s (`seeds`, one per host); A writes `count` values to the
/// `slots` slots of `name`, one every `interval_ms`, sizes cycling from 16 bytes to
/// `max_size`. Every subscriber on B and C must end with the last value of every slot and never
/// read one older than one it read before (`backwards`). Returns the lab, for its counters.
fn under_faults(
    seeds: [&str; 3],
    name: &str,
    slots: &str,
    count: &str,
    interval_ms: &str,
    max_size: &str,
) -> Lab {
    let mut lab = Lab::new(3);
    for (h, seed) in [A, B, C].into_iter().zip(seeds) {
        let faults = format!("loss=0.3,dup=0.2,reorder=0.2,seed={seed},for_ms=6000");
        lab.start_registry(h, &[], &[("BATON_NET_FAULTS", &faults)]);
    }
    let rb = read_slots(&mut lab, B, name, slots, count);
    let rc = read_slots(&mut lab, C, name, slots, count);
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            name,
            "--slots",
            slots,
            "--count",
            count,
            "--interval-ms",
            interval_ms,
            "--min-size",
            "16",
            "--max-size",
            max_size,
            "--linger",
            "60",
        ],
    );
    let last: u64 = count.parse().expect("a count");
    lab.check_reader(rb, last, &format!("{name} on B"));
    lab.check_reader(rc, last, &format!("{name} on C"));
    lab
}

/// One slot, 150 values over about 4.5 s, mixing sizes up to 5 fragments, all under faults.
#[test]
fn loss_duplication_and_reordering_leave_every_subscriber_with_the_newest_value() {
    let lab = under_faults(["1", "2", "3"], "/lossy", "1", "150", "30", "6000");
    let older = lab.dropped(B, "older") + lab.dropped(B, "replayed") + lab.dropped(B, "stale");
    assert!(
        older > 0,
        "the faults should have caused duplicates: {:?}",
        lab.stats(B)
    );
}

/// `bus-stress read` of the `slots` slots NAME/0.. in host `host` until each holds `until`.
fn read_slots(lab: &mut Lab, host: usize, name: &str, slots: &str, until: &str) -> usize {
    lab.spawn(
        host,
        "bus-stress",
        &[
            "read",
            "--name",
            name,
            "--slots",
            slots,
            "--seconds",
            "40",
            "--wait",
            "--until",
            until,
        ],
    )
}

/// Many slots written at once leave in bundles (several values in one datagram), refreshes
/// always: under loss, duplication and reordering every subscriber still ends with each slot's
/// newest value, never sees one older than one it saw, and values too large for a bundle (up
/// to 3 fragments here) go alone among them. (With bundles dropped it fails: the refreshes that
/// bring the last values after the faults are bundled.)
#[test]
fn the_values_of_many_slots_arrive_newest_last_under_faults() {
    under_faults(["4", "5", "6"], "/many", "8", "300", "10", "3000");
}

/// The small values of many slots share datagrams: a registry refreshing sixteen of them
/// every 50 ms sends a few datagrams per refresh, not sixteen, and the other host takes every
/// value of them.
#[test]
fn the_small_values_of_many_slots_share_datagrams() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--refresh-ms", "50"], &[]);
    lab.start_registry(B, &[], &[]);
    let writer = lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/small",
            "--slots",
            "16",
            "--count",
            "1",
            "--min-size",
            "64",
            "--max-size",
            "64",
            "--linger",
            "60",
        ],
    );
    let reader = lab.spawn(
        B,
        "bus-stress",
        &[
            "read",
            "--name",
            "/small",
            "--slots",
            "16",
            "--seconds",
            "40",
            "--wait",
            "--until-writer-gone",
        ],
    );
    let count = |lab: &Lab, host: usize, counter: &str| {
        lab.stats(host)
            .and_then(|s| s[counter].as_u64())
            .unwrap_or(0)
    };
    let dropped = |lab: &Lab, host: usize| {
        lab.stats(host).map_or(0, |s| {
            s["dropped"]
                .as_object()
                .map_or(0, |d| d.values().filter_map(|n| n.as_u64()).sum::<u64>())
        })
    };
    netns::eventually("every slot's value mirrored on hB", || {
        count(&lab, B, "values_mirrored") >= 16
    });
    // The statistics slots are written once a second: 2.5 s takes in two or three of them.
    let before = (
        count(&lab, A, "values_reflected"),
        count(&lab, A, "datagrams_sent"),
        count(&lab, B, "values_unchanged"),
        dropped(&lab, B),
    );
    std::thread::sleep(Duration::from_millis(2500));
    let values = count(&lab, A, "values_reflected") - before.0;
    let datagrams = count(&lab, A, "datagrams_sent") - before.1;
    let taken = count(&lab, B, "values_unchanged") - before.2;
    let dropped = dropped(&lab, B) - before.3;
    // About 40 refreshes of 16 values in two seconds (at least 10 on a loaded machine), each
    // in one or two datagrams, and 20 announcements: one datagram per value would make as many
    // datagrams as values.
    assert!(
        values >= 160 && values >= 3 * datagrams,
        "{values} values reflected in {datagrams} datagrams"
    );
    // Every refreshed value taken (as the one the mirror holds), none dropped.
    assert!(
        taken >= 160 && dropped == 0,
        "{taken} values taken on hB, {dropped} dropped: {:?}",
        lab.stats(B)
    );
    lab.kill(writer);
    lab.check_reader(reader, 1, "small values on B");
}

/// A small `--max-value` holds each value, not the bundle that carries it: a sender makes no
/// bundle larger than it may send (300 bytes of value and the fields: 1,324 bytes), and a
/// receiver with a smaller limit still (1,124 bytes) takes bundles of values each within it.
/// The announcement of sixteen names, also larger than the receiver's limit, is taken too.
#[test]
fn bundles_pass_registries_with_a_small_max_value() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--max-value", "300"], &[]);
    lab.start_registry(B, &["--max-value", "100"], &[]);
    let r = read_slots(&mut lab, B, "/limited", "16", "5");
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/limited",
            "--slots",
            "16",
            "--count",
            "5",
            "--interval-ms",
            "20",
            "--min-size",
            "60",
            "--max-size",
            "60",
            "--linger",
            "60",
        ],
    );
    lab.check_reader(r, 5, "16 slots through a small --max-value");
    // The refreshes, which bundle every slot's value, taken too.
    eventually("two refreshes of the 16 values taken on hB", || {
        lab.stats(B)
            .and_then(|s| s["values_unchanged"].as_u64())
            .is_some_and(|n| n >= 32)
    });
    assert_eq!(lab.dropped(B, "oversized"), 0, "{:?}", lab.stats(B));
    assert!(
        !lab.log(A).contains("larger than --max-value"),
        "{}",
        lab.log(A)
    );
}

/// Announcement parts are cut to the sender's datagrams, not to either side's `--max-value`:
/// a registry whose limit (1 byte and the fields here, 1,025 bytes) was below a part (twelve
/// names and the statistics slot make one part of about 1,240 bytes) used to refuse to send
/// it, and to drop it as oversized when it came from another, and the other host never learnt
/// what it published.
#[test]
fn announcements_pass_registries_with_the_smallest_max_value() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--max-value", "1"], &[]);
    lab.start_registry(B, &["--max-value", "1"], &[]);
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/announced",
            "--slots",
            "12",
            "--count",
            "1",
            "--min-size",
            "8",
            "--max-size",
            "8",
            "--linger",
            "60",
        ],
    );
    eventually("hB's directory names hA's last publication", || {
        lab.directory_entry(B, "/announced/11")
            .is_some_and(|e| e.to_string().contains("hA"))
    });
    assert_eq!(lab.dropped(B, "oversized"), 0, "{:?}", lab.stats(B));
}

#[test]
fn a_host_with_many_publications_is_followed_part_by_part_under_heavy_loss() {
    let mut lab = Lab::new(2);
    // At this MTU host A's announcement of twenty long names takes about twenty datagrams:
    // at 50 % loss all of one repetition get through about once in a million. Its parts stand
    // alone, and each gets through every other time.
    lab.start_registry(
        A,
        &["--mtu", "576"],
        &[("BATON_NET_FAULTS", "loss=0.5,seed=5")],
    );
    lab.start_registry(B, &[], &[]);
    let long = "x".repeat(170);
    let names: Vec<String> = (0..20).map(|i| format!("/many/{long}/{i:02}")).collect();
    for name in &names {
        lab.write_from(A, name, "1000", "200", "64");
    }
    // One more, which ends on its own after 60 values (6 s), unregistering its publication.
    let leaving = format!("/many/{long}/leaving");
    let leaving_args = [
        "write",
        "--name",
        &leaving,
        "--count",
        "60",
        "--interval-ms",
        "100",
    ];
    lab.spawn(A, "bus-stress", &leaving_args);
    let readers: Vec<usize> = [&names[0], &names[19], &leaving]
        .iter()
        .map(|name| lab.read_until(B, name, "10", "20"))
        .collect();
    for r in readers {
        let s = summary(&lab.finish(r));
        let last = s["last"].as_u64().unwrap_or(0);
        assert!(last >= 10, "a publication of host A reached B: {s}");
        assert_eq!(s["bad"], 0, "{s}");
        assert_eq!(s["backwards"], 0, "{s}");
    }
    // It ends while A's announcement keeps changing (a publication comes and goes every
    // 0.2 s, about each announcement): B learns that it went from the one part that named
    // it, not from holding every part of one version of the announcement, which under this
    // loss and churn it seldom does.
    let watcher = lab.spawn(
        B,
        "bus-stress",
        &[
            "read",
            "--name",
            &leaving,
            "--seconds",
            "12",
            "--wait",
            "--until-writer-gone",
        ],
    );
    for i in 0..40 {
        let churn = format!("/churn/{i}");
        let args = [
            "write",
            "--name",
            &churn,
            "--count",
            "2",
            "--interval-ms",
            "50",
        ];
        lab.spawn(A, "bus-stress", &args);
        std::thread::sleep(Duration::from_millis(200));
    }
    let s = summary(&lab.finish(watcher));
    assert_eq!(s["writer"], "Gone", "B saw the publication go: {s}");
}

#[test]
fn unicast_peers_connect_hosts_whose_multicast_does_not_meet() {
    unicast_peers_connect(true);
}

/// Only A names the other host: B answers A by unicast, as the README's example needs (the
/// payload computer names the robot with `--peer`, the robot names nobody). B used to announce
/// only to its group, so A never learnt what B subscribes to, nor of B's publications.
#[test]
fn a_peer_named_on_one_side_only_is_answered_by_unicast() {
    unicast_peers_connect(false);
}

fn unicast_peers_connect(both_sides: bool) {
    let mut lab = Lab::new(2);
    // Each host announces on its own multicast group, so no announcement crosses by multicast;
    // only the --peer lists connect them.
    let peer_of_a = format!("{}:{}", lab.hosts[B].ip, netns::PORT);
    let peer_of_b = format!("{}:{}", lab.hosts[A].ip, netns::PORT);
    lab.start_registry(
        A,
        &["--mcast-group", "239.255.66.1", "--peer", &peer_of_a],
        &[],
    );
    let b_args: &[&str] = if both_sides {
        &["--mcast-group", "239.255.66.2", "--peer", &peer_of_b]
    } else {
        &["--mcast-group", "239.255.66.2"]
    };
    lab.start_registry(B, b_args, &[]);
    lab.write_from(A, "/unicast", "5", "0", "3000");
    let r = lab.read_until(B, "/unicast", "5", "20");
    lab.check_reader(r, 5, "subscriber reached by unicast");
    // And the other way.
    lab.spawn(
        B,
        "bus-stress",
        &[
            "write",
            "--name",
            "/back",
            "--count",
            "4",
            "--max-size",
            "16",
            "--linger",
            "60",
        ],
    );
    let r = lab.read_until(A, "/back", "4", "20");
    lab.check_reader(r, 4, "subscriber on A reached by unicast");
    // B answers the --peer of A by unicast and says so; A, which names B, says nothing of the
    // kind (it said B announced to it for its --peer, of B's answer).
    let said = "announces to this host by unicast (its --peer)";
    assert_eq!(lab.log(B).contains(said), !both_sides, "{}", lab.log(B));
    assert!(!lab.log(A).contains(said), "{}", lab.log(A));
}

/// Under the test switch's loss, a value whose datagram the injection dropped is not counted as
/// reflected: it was (more values reflected than datagrams sent; network chaos audit).
#[test]
fn values_lost_to_fault_injection_are_not_counted_as_reflected() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[("BATON_NET_FAULTS", "loss=0.5,seed=3")]);
    lab.start_registry(B, &[], &[]);
    lab.write_from(A, "/lossy", "400", "5", "16");
    let r = lab.read_until(B, "/lossy", "400", "20");
    lab.finish(r);
    let stats = lab.stats(A).expect("A's statistics");
    let (reflected, sent) = (
        stats["values_reflected"].as_u64().unwrap(),
        stats["datagrams_sent"].as_u64().unwrap(),
    );
    assert!(reflected > 0 && reflected <= sent, "{stats}");
}
