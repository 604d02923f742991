//! Slots nobody uses any more are forgotten: of the public slots whose publisher is gone and
//! that have no endpoint, the registry keeps `--keep-unused` (with their last values), the
//! ones unused longest go first, and a slot someone still subscribes to always stays; a
//! private slot goes a few seconds after its writer and readers. Applications started under a
//! new name each time used to grow /dev/shm without end.

mod common;

use std::time::Duration;

use bus::SlotName;
use common::{eventually, TestBus, WATCHDOG};

/// The public slots of the domain whose names start with `prefix`, from /dev/shm.
fn segments(t: &TestBus, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = t
        .domain
        .segment_files()
        .unwrap()
        .into_iter()
        .map(|(n, _)| n.to_string())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

#[test]
fn slots_of_gone_publishers_are_kept_up_to_a_limit_oldest_forgotten_first() {
    let mut t = TestBus::new();
    t.start_registry_with(&["--keep-unused", "3"]);
    let bus = t.bus();
    // Subscribed all along: never forgotten, although its publisher goes.
    let mut watched = bus
        .subscribe::<tools::stress::Checked>("/jobs/watched")
        .unwrap();
    let write_once = |t: &mut TestBus, name: &str| {
        let writer = t.spawn_stress(&["write", "--name", name, "--count", "1"]);
        assert!(t.finish(writer).status.success());
    };
    write_once(&mut t, "/jobs/watched");
    assert!(watched.wait_update(WATCHDOG).unwrap());
    for i in 0..6 {
        write_once(&mut t, &format!("/jobs/{i}"));
        // A sweep (every 500 ms) between two: each is seen unused at its own time.
        std::thread::sleep(Duration::from_millis(600));
    }
    eventually("three unused slots kept", || {
        segments(&t, "/jobs/") == ["/jobs/3", "/jobs/4", "/jobs/5", "/jobs/watched"]
    });
    // The last values of those kept are still there for a late subscriber.
    let out = t.inspect(&["get", "/jobs/5", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let list = String::from_utf8_lossy(&t.inspect(&["list", "/jobs/*"]).stdout).into_owned();
    assert!(!list.contains("/jobs/0"), "{list}");
    // A name forgotten is published again as new.
    write_once(&mut t, "/jobs/0");
    let mut late = bus.subscribe::<tools::stress::Checked>("/jobs/0").unwrap();
    assert!(late.wait_update(WATCHDOG).unwrap());
    drop(late);
    // A restarted registry adopts them all at once: the ones written last are kept.
    t.kill_registry();
    t.start_registry_with(&["--keep-unused", "1"]);
    eventually("the slot written last kept", || {
        segments(&t, "/jobs/") == ["/jobs/0", "/jobs/watched"]
    });
    drop(watched);
}

/// The kept slots also take at most `--keep-unused-mib` of shared memory together: a slot of
/// 250 kB takes a segment of about 1 MB (four buffers), so 2 MiB keeps the last two of four.
/// Counted in slots alone, a thousand kept slots of 1 MiB held 4 GiB of /dev/shm (RAM).
#[test]
fn slots_of_gone_publishers_are_kept_up_to_a_memory_limit_too() {
    let mut t = TestBus::new();
    t.start_registry_with(&["--keep-unused-mib", "2"]);
    for i in 0..4 {
        let name = format!("/big/{i}");
        let args = [
            "write",
            "--name",
            &name,
            "--count",
            "1",
            "--max-size",
            "250000",
        ];
        let writer = t.spawn_stress(&args);
        assert!(t.finish(writer).status.success());
        std::thread::sleep(Duration::from_millis(600));
    }
    eventually("the two slots unused last kept", || {
        segments(&t, "/big/") == ["/big/2", "/big/3"]
    });
}

#[test]
fn a_private_slot_goes_soon_after_its_writer_and_readers() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut private: bus::Publication<u64> = bus.private_publication().create().unwrap();
    private.wait_bound(WATCHDOG).unwrap();
    private.write(&1).unwrap();
    let name: SlotName = private.name().clone();
    let mut reader = bus.subscribe::<u64>(name.as_str()).unwrap();
    assert!(reader.wait_update(WATCHDOG).unwrap());
    drop(private);
    // Read still: the slot stays while its reader does.
    std::thread::sleep(Duration::from_secs(6));
    assert!(t
        .domain
        .segment_files()
        .unwrap()
        .iter()
        .any(|(n, _)| *n == name));
    drop(reader);
    eventually("the private slot is forgotten", || {
        !t.domain
            .segment_files()
            .unwrap()
            .iter()
            .any(|(n, _)| *n == name)
    });
}

/// A public slot that never held a value goes with its last endpoint: a publisher that ended
/// before writing leaves nothing to keep (it used to stay listed, empty, writer gone, until
/// `--keep-unused` pushed it out). One that held a value stays, as above.
#[test]
fn a_slot_never_written_goes_with_its_last_endpoint() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let empty = bus.publish::<u8>("/never/written").unwrap();
    empty.wait_bound(WATCHDOG).unwrap();
    let mut written = bus.publish::<u8>("/never/kept").unwrap();
    written.wait_bound(WATCHDOG).unwrap();
    written.write(&1).unwrap();
    assert_eq!(segments(&t, "/never/").len(), 2);
    drop(empty);
    drop(written);
    eventually("the slot never written is gone", || {
        segments(&t, "/never/") == ["/never/kept"]
    });
}
