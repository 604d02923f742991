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

/// A writer on A every 20 ms (until the lab ends), its values read on B.
fn reflect_from_a(lab: &mut Lab, name: &str) {
    lab.write_from(A, name, "100000", "20", "64");
    let r = lab.read_until(B, name, "5", "20");
    assert!(summary(&lab.finish(r))["last"].as_u64() >= Some(5));
}

fn check(lab: &mut Lab, child: usize, last: u64, what: &str) -> serde_json::Value {
    let out = lab.finish(child);
    let s = summary(&out);
    assert_eq!(s["last"], last, "{what}: {s}");
    assert_eq!(s["bad"], 0, "{what}: {s}");
    assert_eq!(s["backwards"], 0, "{what}: {s}");
    s
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
        check(&mut lab, r, 5, &format!("order {order:?}"));
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
    check(&mut lab, first, 3, "first subscriber");
    // The mirror holds the value now: a new subscriber gets it without a new write.
    let second = lab.read_until(B, "/late", "3", "20");
    check(&mut lab, second, 3, "late subscriber");
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
    check(&mut lab, r, 120, "subscriber across its registry's restart");
    // And a subscriber that joins after the restart gets the current value.
    let late = lab.read_until(B, "/restart", "120", "20");
    check(&mut lab, late, 120, "subscriber after the restart");
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
    check(&mut lab, rb, 4, "1 MiB on B");
    check(&mut lab, rc, 4, "1 MiB on C");
}

#[test]
fn loss_duplication_and_reordering_leave_every_subscriber_with_the_newest_value() {
    let mut lab = Lab::new(3);
    for (h, seed) in [(A, "1"), (B, "2"), (C, "3")] {
        let faults = format!("loss=0.3,dup=0.2,reorder=0.2,seed={seed},for_ms=6000");
        lab.start_registry(h, &[], &[("BATON_NET_FAULTS", &faults)]);
    }
    let rb = lab.read_until(B, "/lossy", "150", "40");
    let rc = lab.read_until(C, "/lossy", "150", "40");
    // 150 values over about 4.5 s, mixing sizes up to 5 fragments, all under faults.
    lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/lossy",
            "--count",
            "150",
            "--interval-ms",
            "30",
            "--min-size",
            "16",
            "--max-size",
            "6000",
            "--linger",
            "60",
        ],
    );
    // `backwards` counts values older than one seen before: it must stay 0.
    check(&mut lab, rb, 150, "lossy B");
    check(&mut lab, rc, 150, "lossy C");
    let older = lab.dropped(B, "older") + lab.dropped(B, "replayed") + lab.dropped(B, "stale");
    assert!(
        older > 0,
        "the faults should have caused duplicates: {:?}",
        lab.stats(B)
    );
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
fn a_remote_publisher_killed_shows_as_writer_gone_to_subscribers_on_other_hosts() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let w = lab.spawn(
        A,
        "bus-stress",
        &[
            "write",
            "--name",
            "/mortal",
            "--count",
            "3",
            "--max-size",
            "16",
            "--linger",
            "60",
        ],
    );
    let first = lab.read_until(B, "/mortal", "3", "20");
    check(&mut lab, first, 3, "subscriber on B before the kill");
    let r = lab.spawn(
        B,
        "bus-stress",
        &[
            "read",
            "--name",
            "/mortal",
            "--seconds",
            "40",
            "--wait",
            "--until-writer-gone",
        ],
    );
    lab.kill(w);
    let s = check(&mut lab, r, 3, "subscriber on B after the kill");
    assert_eq!(s["writer"], "Gone", "{s}");
    // A new publisher of the name on A that has not written yet does not make the killed
    // one's value live again on B (A announced it alive, and B's mirror passed the old value
    // off as the new publisher's); its first value does, at once.
    let writer_alive_on_b = |lab: &Lab| {
        let out = lab.inspect(B, &["list", "/mortal", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .map(|row| row["writer_alive"].clone())
    };
    let idle = lab.write_from(A, "/mortal", "0", "0", "16");
    let idle_pid = lab.pid(idle);
    eventually("the new publisher registered on A", || {
        let out = lab.inspect(A, &["list", "/mortal", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .is_ok_and(|row| row["writer_pid"].as_u64() == Some(u64::from(idle_pid)))
    });
    // A few announcements later B knows it.
    std::thread::sleep(Duration::from_millis(500));
    let r = lab.read_for(B, "/mortal", "1");
    let s = check(&mut lab, r, 3, "subscriber on B of the idle publisher");
    assert_eq!(s["writer"], "Gone", "{s}");
    assert_eq!(writer_alive_on_b(&lab), Some(false.into()));
    lab.kill(idle);
    lab.write_from(A, "/mortal", "5", "0", "16");
    let r = lab.read_until(B, "/mortal", "5", "20");
    // The new writer counts from 1 again: a reader that first saw the killed writer's value
    // (3, kept on A, and B's mirror still follows it) sees another writer, not a value read
    // backwards (it counted one, and failed any run with a writer restarted). Slot order
    // holds: every value after that is the new writer's, in order.
    let s = summary(&lab.finish(r));
    assert_eq!(
        (
            s["last"].as_u64(),
            s["bad"].as_u64(),
            s["backwards"].as_u64()
        ),
        (Some(5), Some(0), Some(0)),
        "{s}"
    );
    eventually("the new writer's value is live on B", || {
        writer_alive_on_b(&lab) == Some(true.into())
    });
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
    check(&mut lab, r, 5, "subscriber reached by unicast");
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
    check(&mut lab, r, 4, "subscriber on A reached by unicast");
    // B answers the --peer of A by unicast and says so; A, which names B, says nothing of the
    // kind (it said B announced to it for its --peer, of B's answer).
    let said = "announces to this host by unicast (its --peer)";
    assert_eq!(lab.log(B).contains(said), !both_sides, "{}", lab.log(B));
    assert!(!lab.log(A).contains(said), "{}", lab.log(A));
}

/// A registry restarted with its clock set back (a computer without a real-time clock, before
/// time synchronisation) starts a smaller session. Its datagrams are refused as replays until
/// the receiving registry restarts; from then on the receiver's mirror follows it again instead
/// of refusing its values as older than the session the mirror kept.
#[test]
fn a_mirror_follows_an_origin_restarted_with_its_clock_set_back() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    reflect_from_a(&mut lab, "/clock");
    lab.kill_registry(A);
    lab.start_registry(A, &[], &[("BATON_NET_FAULTS", "clock_back_s=3600")]);
    // B says why it refuses A's new run (it used to count replays in silence).
    eventually("B says A's datagrams belong to an older run", || {
        lab.log(B)
            .contains("belong to an older run of its registry than the one heard before")
    });
    lab.kill_registry(B);
    lab.start_registry(B, &[], &[]);
    let r = lab.read_for(B, "/clock", "4");
    let s = summary(&lab.finish(r));
    assert!(
        s["reads"].as_u64() >= Some(20),
        "B's mirror must follow A's new values: {s}"
    );
    assert_eq!(s["backwards"], 0, "{s}");
}

#[test]
fn a_registry_restarted_with_its_clock_set_back_is_taken_at_once_with_a_state_dir() {
    let state = std::env::temp_dir().join(format!("baton-state-{}", std::process::id()));
    std::fs::create_dir_all(&state).unwrap();
    let state_dir = state.to_str().unwrap().to_owned();
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--state-dir", &state_dir], &[]);
    lab.start_registry(B, &[], &[]);
    reflect_from_a(&mut lab, "/rtc");
    // A computer without a real-time clock reboots an hour in the past. B keeps running: it
    // heard A's previous run, whose session (its start time) is later than the new start.
    lab.kill_registry(A);
    lab.start_registry(
        A,
        &["--state-dir", &state_dir],
        &[("BATON_NET_FAULTS", "clock_back_s=3600")],
    );
    let r = lab.read_for(B, "/rtc", "4");
    let s = summary(&lab.finish(r));
    std::fs::remove_dir_all(&state).unwrap();
    assert!(
        s["reads"].as_u64() >= Some(20),
        "B follows A's new run without restarting: {s}"
    );
    assert_eq!(s["backwards"], 0, "{s}");
    assert_eq!(lab.dropped(B, "replayed"), 0, "{:?}", lab.stats(B));
}

#[test]
fn a_registry_restart_never_shows_its_live_publications_as_gone_elsewhere() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    reflect_from_a(&mut lab, "/steady");
    // B's subscriber stops as soon as it sees the writer gone: it never should, the writer
    // runs throughout. A's registry is down for 1.2 s (less than B takes to forget a host);
    // restarted, it announces before A's writer, backing off, has registered again.
    let watcher = lab.spawn(
        B,
        "bus-stress",
        &[
            "read",
            "--name",
            "/steady",
            "--seconds",
            "7",
            "--wait",
            "--until-writer-gone",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    lab.kill_registry(A);
    std::thread::sleep(Duration::from_millis(1200));
    lab.start_registry(A, &[], &[]);
    let s = summary(&lab.finish(watcher));
    assert_ne!(s["writer"], "Gone", "{s}");
    assert_eq!(s["bad"], 0, "{s}");
}

/// A publisher restarted on its host with a larger capacity: the mirror on the other host is
/// made anew although a subscriber there maps it (that one is told its slot was replaced), and
/// subscribers that come later get the new values. They used to wait in silence for as long
/// as the first subscriber lived.
#[test]
fn a_publication_restarted_larger_reaches_the_subscribers_of_its_mirror() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let small = lab.write_from(A, "/grow", "10", "20", "16");
    let first = lab.read_for(B, "/grow", "30");
    let r = lab.read_until(B, "/grow", "10", "20");
    assert_eq!(summary(&lab.finish(r))["last"], 10);
    lab.kill(small);
    // Its values count from 1 again: 30 is beyond anything the old mirror held.
    lab.write_from(A, "/grow", "100000", "20", "5000");
    eventually(
        "B makes its mirror anew, the first reader still on the old one",
        || {
            lab.log(B)
                .contains("mirror /grow made anew with room for 5120 bytes")
        },
    );
    let r = lab.read_until(B, "/grow", "30", "20");
    let s = summary(&lab.finish(r));
    assert!(s["last"].as_u64() >= Some(30), "{s}");
    assert_eq!(s["bad"], 0, "{s}");
    lab.kill(first);
}

/// A mirror whose publisher is gone on its host and that nobody here reads is forgotten like a
/// local slot (`--keep-unused`): applications of new names on a payload computer no longer
/// grow the robot's /dev/shm.
#[test]
fn an_unused_mirror_of_a_gone_publisher_is_forgotten() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &["--keep-unused", "0"], &[]);
    let writer = lab.write_from(A, "/job/1", "100000", "20", "64");
    let r = lab.read_until(B, "/job/1", "3", "20");
    assert!(summary(&lab.finish(r))["last"].as_u64() >= Some(3));
    let mirrored = |lab: &Lab| {
        String::from_utf8_lossy(&lab.inspect(B, &["list", "/job/*"]).stdout).contains("/job/1")
    };
    assert!(
        mirrored(&lab),
        "B holds the mirror while its publisher runs"
    );
    lab.kill(writer);
    eventually("B forgets the mirror", || !mirrored(&lab));
}

/// Only names some remote host subscribes to are sent: once the last subscriber on B has gone,
/// B forgets its mirror of a publication that goes on writing on A, and A stops sending it
/// (the mirror used to be kept, and asked for, as long as the publisher ran). A later
/// subscriber on B asks again and gets the values.
#[test]
fn values_stop_crossing_once_the_last_remote_subscriber_has_gone() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    reflect_from_a(&mut lab, "/camera");
    let mirrored = |lab: &Lab| {
        String::from_utf8_lossy(&lab.inspect(B, &["list", "/camera"]).stdout).contains("/camera")
    };
    eventually("B forgets the mirror nobody subscribes to", || {
        !mirrored(&lab)
    });
    let reflected = |lab: &Lab| {
        lab.stats(A)
            .and_then(|s| s["values_reflected"].as_u64())
            .expect("A's statistics")
    };
    // The statistics are published every second; a value is written every 20 ms: two
    // publications with nothing reflected between them mean none is sent any more.
    let quiet = Duration::from_millis(2500);
    eventually("A stops sending the values", || {
        let before = reflected(&lab);
        std::thread::sleep(quiet);
        reflected(&lab) == before
    });
    let stopped = reflected(&lab);
    std::thread::sleep(quiet);
    assert_eq!(reflected(&lab), stopped, "nobody on B subscribes");
    let r = lab.read_until(B, "/camera", "3", "20");
    assert!(summary(&lab.finish(r))["last"].as_u64() >= Some(3));
    eventually("A sends values to a new subscriber on B", || {
        reflected(&lab) > stopped
    });
}

/// A subscriber that comes after its host forgot the mirror gets the current value at once,
/// also when the publisher's host never heard that the name was no longer wanted (B was cut
/// off meanwhile) and the publisher does not write again: B asks for its new mirror, which A
/// tells from the one it sent to. A used to wait for its next refresh (a minute here).
#[test]
fn a_mirror_made_anew_gets_the_current_value_without_waiting_for_a_refresh() {
    let mut lab = Lab::new(2);
    let slow = ["--refresh-ms", "60000", "--forget-ms", "60000"];
    lab.start_registry(A, &slow, &[]);
    lab.start_registry(B, &slow, &[]);
    lab.write_from(A, "/map", "3", "0", "64");
    let r = lab.read_until(B, "/map", "3", "20");
    check(&mut lab, r, 3, "first subscriber on B");
    lab.set_connected(B, false);
    eventually("B forgets the mirror nobody subscribes to", || {
        lab.log(B).contains("forgot 1 mirror(s)")
    });
    let r = lab.read_until(B, "/map", "3", "20");
    std::thread::sleep(Duration::from_millis(500));
    lab.set_connected(B, true);
    check(
        &mut lab,
        r,
        3,
        "subscriber on B after the mirror was made anew",
    );
}

/// A name whose publisher died on host B and that a new publisher takes on host A, which has
/// not written yet: B's slot, now a mirror of A's, does not pass the dead publisher's value off
/// as the new one's (a robot controller killed on one computer and started again on another
/// would have its old command obeyed); A's first value is live on B.
#[test]
fn a_name_taken_over_on_another_host_does_not_revive_the_dead_publishers_value() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let writer_on_b = |lab: &Lab| {
        let out = lab.inspect(B, &["list", "/moved", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()
    };
    let reader = lab.read_for(B, "/moved", "30");
    let died = lab.write_from(B, "/moved", "3", "0", "16");
    // Values written before the registry bound the publication arrive as one, the last.
    eventually("B's slot holds a value", || {
        writer_on_b(&lab).is_some_and(|row| row["sequence"].as_u64() >= Some(1))
    });
    let held = writer_on_b(&lab).unwrap()["sequence"].clone();
    // A refuses a name another host announces: wait until A knows B's publisher, and then
    // until it knows it gone.
    let alive_on_b_says_a = |lab: &Lab| {
        lab.directory_entry(A, "/moved")
            .is_some_and(|e| e["publisher_alive"] == true)
    };
    eventually("A hears of B's publisher", || alive_on_b_says_a(&lab));
    lab.kill(died);
    eventually("A hears that B's publisher is gone", || {
        !alive_on_b_says_a(&lab)
    });
    let idle = lab.write_from(A, "/moved", "0", "0", "16");
    lab.wait_listed(B, "/moved", "hA");
    std::thread::sleep(Duration::from_millis(300));
    let row = writer_on_b(&lab).unwrap();
    assert_eq!(row["writer_alive"], false, "{row}");
    // The value held is still the one written here, and says so (A wrote nothing yet).
    assert_eq!(row["origin"], "hB", "{row}");
    lab.kill(idle);
    lab.write_from(A, "/moved", "5", "0", "16");
    eventually("A's new writer's value is live on B", || {
        writer_on_b(&lab).is_some_and(|row| row["writer_alive"] == true && row["sequence"] != held)
    });
    lab.kill(reader);
}

/// A slot made anew on its host (the old one forgotten: `--keep-unused 0`) numbers its values
/// from 1 again: another host's mirror follows the new series from its first value, and does
/// not pass the old slot's value off as the new publisher's before it writes. The mirror used
/// to drop the new values as older than the last one it held, and to show the dead
/// publisher's value as the new one's.
#[test]
fn a_slot_made_anew_on_its_host_is_followed_from_its_first_value() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &["--keep-unused", "0"], &[]);
    lab.start_registry(B, &[], &[]);
    let row = |lab: &Lab, host: usize| {
        let out = lab.inspect(host, &["list", "/anew", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()
    };
    let value_on_b = |lab: &Lab| {
        let out = lab.inspect(B, &["get", "/anew", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .ok()
            .map(|v| v["sequence"].clone())
    };
    let reader = lab.read_for(B, "/anew", "30");
    let old = lab.write_from(A, "/anew", "20", "0", "16");
    eventually("B mirrors the old slot's last value", || {
        value_on_b(&lab) == Some(20.into())
    });
    lab.kill(old);
    eventually("A forgets the unused slot", || row(&lab, A).is_none());
    let idle = lab.write_from(A, "/anew", "0", "0", "16");
    eventually("A has the new slot", || {
        row(&lab, A).is_some_and(|r| r["writer_alive"] == true)
    });
    std::thread::sleep(Duration::from_millis(300));
    let held = row(&lab, B).unwrap();
    assert_eq!(held["writer_alive"], false, "{held}");
    lab.kill(idle);
    lab.write_from(A, "/anew", "3", "0", "16");
    eventually("B takes the new slot's values", || {
        value_on_b(&lab) == Some(3.into())
            && row(&lab, B).is_some_and(|r| r["writer_alive"] == true)
    });
    lab.kill(reader);
}

/// A publisher that wrote and is gone leaves its last value on its host, and a subscriber on
/// another host that comes later gets it too, writer gone, as one on its own host does (it
/// used to wait for ever: hosts announced only running publishers). The kept value is no
/// publication: another host may publish the name, with no conflict, and its values are then
/// the ones followed, also on the first host, which forgets the value it kept.
#[test]
fn a_gone_publishers_kept_value_reaches_a_later_subscriber_on_another_host() {
    let mut lab = Lab::new(2);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    let row_on = |lab: &Lab, host: usize| lab.list_row(host, "/once");
    let writer = lab.write_from(A, "/once", "3", "0", "16");
    let on_a = lab.read_until(A, "/once", "3", "20");
    check(
        &mut lab,
        on_a,
        3,
        "subscriber on A while the publisher runs",
    );
    lab.kill(writer);
    // B learns that A keeps the value of a publisher gone (before, A stopped announcing it).
    let kept_on_a_says_b = |lab: &Lab| {
        lab.directory_entry(B, "/once")
            .is_some_and(|e| e["origin_host"] == "hA" && e["publisher_alive"] == false)
    };
    eventually("B hears that A keeps a gone publisher's value", || {
        kept_on_a_says_b(&lab)
    });
    let late = lab.read_until(B, "/once", "3", "20");
    check(
        &mut lab,
        late,
        3,
        "subscriber on B after the publisher left A",
    );
    let row = row_on(&lab, B);
    assert_eq!(row["origin"], "hA", "{row}");
    assert_eq!(row["writer_alive"], false, "{row}");
    let on_b = lab.write_from(B, "/once", "5", "0", "16");
    eventually("B's own publisher has written", || {
        let row = row_on(&lab, B);
        row["mirrored"] == false && row["writer_alive"] == true
    });
    // A, where nothing uses its old value, forgets it: a newer one exists, and A must not
    // offer the old one again once B's publisher is gone too.
    eventually("A forgets the value B's publisher replaced", || {
        row_on(&lab, A).is_null()
    });
    let on_a = lab.read_until(A, "/once", "5", "20");
    check(&mut lab, on_a, 5, "subscriber on A of B's publisher");
    for host in [A, B] {
        let stats = lab.stats(host).expect("statistics");
        assert_eq!(stats["conflicts"], 0, "host {host}: {stats}");
    }
    lab.kill(on_b);
}

/// Two hosts that each kept a value of the name while apart (a partition, or a robot and a
/// payload computer that ran the same application at different times): when they meet, the
/// newer value is the one followed, also on the host that kept the older one, where a
/// subscriber gets it.
#[test]
fn of_two_kept_values_the_newer_is_followed() {
    let mut lab = Lab::new(2);
    lab.set_connected(B, false);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    for (host, count) in [(A, "3"), (B, "5")] {
        let writer = lab.write_from(host, "/twice", count, "0", "16");
        let reader = lab.read_until(host, "/twice", count, "20");
        check(
            &mut lab,
            reader,
            count.parse().unwrap(),
            "the publisher's own host",
        );
        lab.kill(writer);
    }
    lab.set_connected(B, true);
    let on_a = lab.read_until(A, "/twice", "5", "20");
    let s = check(&mut lab, on_a, 5, "subscriber on A after the hosts met");
    assert_eq!(s["writer"], "Gone", "{s}");
    let row = lab.list_row(A, "/twice");
    assert_eq!(row["origin"], "hB", "{row}");
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
