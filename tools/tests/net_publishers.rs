//! Publishers and their mirrors over their lives, across hosts made of network namespaces:
//! a publisher killed, restarted (larger, or under a name another host took over), a registry
//! restarted with its clock set back, the values of gone publishers kept on their host, and
//! mirrors forgotten or made anew. Real `registry-server`, `bus-stress` and `bus-inspect`
//! binaries.

mod common;
mod netns;

use std::time::Duration;

use common::summary;
use netns::{eventually, Lab};

const A: usize = 0;
const B: usize = 1;

/// A writer on A every 20 ms (until the lab ends), its values read on B.
fn reflect_from_a(lab: &mut Lab, name: &str) {
    lab.write_from(A, name, "100000", "20", "64");
    let r = lab.read_until(B, name, "5", "20");
    assert!(summary(&lab.finish(r))["last"].as_u64() >= Some(5));
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
    lab.check_reader(first, 3, "subscriber on B before the kill");
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
    let s = lab.check_reader(r, 3, "subscriber on B after the kill");
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
        let out = lab.inspect(A, &["info", "/mortal", "--json"]);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).is_ok_and(|info| {
            info["endpoints"]["publishers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|e| e["pid"] == idle_pid && e["bound"] == true))
        })
    });
    // The value's writer is the killed one, not the new process (whose pid list showed).
    let out = lab.inspect(A, &["list", "/mortal", "--json"]);
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["writer_pid"], 0, "{row}");
    // A few announcements later B knows it.
    std::thread::sleep(Duration::from_millis(500));
    let r = lab.read_for(B, "/mortal", "1");
    let s = lab.check_reader(r, 3, "subscriber on B of the idle publisher");
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
    lab.check_reader(r, 3, "first subscriber on B");
    lab.set_connected(B, false);
    eventually("B forgets the mirror nobody subscribes to", || {
        lab.log(B).contains("forgot 1 mirror(s)")
    });
    let r = lab.read_until(B, "/map", "3", "20");
    std::thread::sleep(Duration::from_millis(500));
    lab.set_connected(B, true);
    lab.check_reader(r, 3, "subscriber on B after the mirror was made anew");
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
    lab.check_reader(on_a, 3, "subscriber on A while the publisher runs");
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
    lab.check_reader(late, 3, "subscriber on B after the publisher left A");
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
    lab.check_reader(on_a, 5, "subscriber on A of B's publisher");
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
        lab.check_reader(reader, count.parse().unwrap(), "the publisher's own host");
        lab.kill(writer);
    }
    lab.set_connected(B, true);
    let on_a = lab.read_until(A, "/twice", "5", "20");
    let s = lab.check_reader(on_a, 5, "subscriber on A after the hosts met");
    assert_eq!(s["writer"], "Gone", "{s}");
    let row = lab.list_row(A, "/twice");
    assert_eq!(row["origin"], "hB", "{row}");
}
