//! Bad input gives a clear error, never a panic or undefined behaviour: type mismatch, a second
//! publisher, oversized value, invalid names, no registry, corrupt segment headers.

mod common;

use std::time::{Duration, Instant};

use bus::BusError;
use common::{TestBus, WATCHDOG};

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Pose {
    x: f64,
    y: f64,
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Twist {
    linear: f64,
    angular: f64,
}

#[test]
fn a_second_type_is_refused_naming_both_types() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let _pose = bus.publish::<Pose>("/robot/pose").unwrap();
    let err = bus
        .subscribe::<Twist>("/robot/pose")
        .err()
        .expect("mismatch refused");
    let msg = err.to_string();
    assert!(matches!(err, BusError::TypeMismatch { .. }), "{msg}");
    assert!(msg.contains("Pose") && msg.contains("Twist"), "{msg}");
    let err = bus
        .publish::<Twist>("/robot/pose")
        .err()
        .expect("mismatch refused");
    assert!(err.to_string().contains("Pose"), "{err}");
    // Subscriber first: the first endpoint's type is the slot's type.
    let _sub = bus.subscribe::<Pose>("/robot/goal").unwrap();
    let err = bus
        .publish::<u32>("/robot/goal")
        .err()
        .expect("mismatch refused");
    assert!(
        err.to_string().contains("Pose") && err.to_string().contains("u32"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("not created yet: the type its waiting subscribers asked for"),
        "{err}"
    );
}

/// An application whose message type changed, started again: its publication takes the name
/// from the value kept of the old type, which nothing uses (it was refused until the registry
/// forgot that value, in practice never). While a subscriber of the old type runs, it is still
/// refused. A subscriber never takes the name: one of another type (a mistyped tool) threw
/// away the value kept for the others; it is refused, told that a publisher of another type
/// takes the name, and the kept value stays.
#[test]
fn a_new_type_takes_a_name_whose_kept_value_nothing_uses() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut old = bus.publish::<Pose>("/robot/changed").unwrap();
    old.wait_bound(WATCHDOG).unwrap();
    old.write(&Pose { x: 1.0, y: 2.0 }).unwrap();
    let reader = bus.subscribe::<Pose>("/robot/changed").unwrap();
    drop(old);
    let err = bus
        .publish::<Twist>("/robot/changed")
        .err()
        .expect("refused while a subscriber of the old type runs");
    assert!(err.to_string().contains("Pose"), "{err}");
    drop(reader);
    let mut new = once_the_old_type_is_forgotten(|| bus.publish::<Twist>("/robot/changed"));
    new.wait_bound(WATCHDOG).unwrap();
    let twist = Twist {
        linear: 0.5,
        angular: -0.1,
    };
    new.write(&twist).unwrap();
    let mut sub = bus.subscribe::<Twist>("/robot/changed").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&twist));
    drop((new, sub));

    // The type changes back, the subscriber starts first: refused (once the end of the last
    // endpoints has reached the registry), the kept value untouched.
    let deadline = Instant::now() + WATCHDOG;
    let err = loop {
        let err = bus
            .subscribe::<Pose>("/robot/changed")
            .err()
            .expect("a subscriber of another type than the kept value is refused");
        if err
            .to_string()
            .contains("a publisher of another type takes the name")
            || Instant::now() > deadline
        {
            break err;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = err.to_string();
    assert!(matches!(err, BusError::TypeMismatch { .. }), "{text}");
    assert!(
        text.contains("Twist (schema ")
            && text.contains("; the last value of a publisher now gone, kept;")
            && text.contains("Pose"),
        "{text}"
    );
    let mut kept = bus.subscribe::<Twist>("/robot/changed").unwrap();
    assert!(kept.wait_update(WATCHDOG).unwrap());
    assert_eq!(kept.value(), Some(&twist), "the kept value stays");
    drop(kept);
    // The publisher of the new type takes the name; the subscriber then follows it.
    let mut back = once_the_old_type_is_forgotten(|| bus.publish::<Pose>("/robot/changed"));
    back.wait_bound(WATCHDOG).unwrap();
    let mut sub = bus.subscribe::<Pose>("/robot/changed").unwrap();
    let pose = Pose { x: 3.0, y: 4.0 };
    back.write(&pose).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&pose));
}

/// What `make` makes, once the registry no longer refuses it for the type of the value it
/// kept (retried: the old endpoint's end reaches the registry a moment after its drop).
fn once_the_old_type_is_forgotten<T>(mut make: impl FnMut() -> Result<T, BusError>) -> T {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        match make() {
            Ok(made) => return made,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, BusError::TypeMismatch { .. }), "{e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the old type's kept value still holds the name: {e}"),
        }
    }
}

/// One type name, two schemas (plain-old-data on one side, serde on the other): the error says
/// what usually causes that, since both sides print the same name.
#[test]
fn one_type_as_plain_old_data_and_as_serde_is_explained() {
    #[repr(C)]
    #[derive(
        Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable, serde::Serialize, serde::Deserialize,
    )]
    struct Wheels {
        left: f64,
        right: f64,
    }
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let _pod = bus.publish_pod::<Wheels>("/robot/wheels").unwrap();
    let err = bus
        .subscribe::<Wheels>("/robot/wheels")
        .err()
        .expect("mismatch refused");
    let msg = err.to_string();
    assert!(matches!(err, BusError::TypeMismatch { .. }), "{msg}");
    assert!(
        msg.contains("plain-old-data and the other as serde"),
        "{msg}"
    );
    // The same when the slot's type is only the one its waiting subscribers asked for (the
    // registry names it with a note: the hint compared the names with the note).
    let _serde = bus.subscribe::<Wheels>("/robot/waiting").unwrap();
    let err = bus
        .publish_pod::<Wheels>("/robot/waiting")
        .err()
        .expect("mismatch refused");
    let msg = err.to_string();
    assert!(msg.contains("not created yet"), "{msg}");
    assert!(
        msg.contains("plain-old-data and the other as serde"),
        "{msg}"
    );
}

/// Two `Bus` handles of one process are two clients of the registry; a publication of a name
/// in each is a second publisher, refused. (Endpoint ids were counted per client, so the
/// registry took the second for the first registered again, and let it take the name over.)
#[test]
fn a_second_publisher_in_the_same_process_is_refused() {
    let mut t = TestBus::new();
    t.start_registry();
    let (one, two) = (t.bus(), t.bus());
    let mut first = one.publish::<u64>("/twice").unwrap();
    let err = two
        .publish::<u64>("/twice")
        .err()
        .expect("the second publisher is refused");
    assert!(matches!(err, BusError::AlreadyPublished { .. }), "{err}");
    first.write(&1).unwrap();
    let mut sub = two.subscribe::<u64>("/twice").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&1));
    // A registry started again adopts the slot with the first as its writer: a publication of
    // a third handle that registers before the first is back is refused (same process, another
    // publication), not given the name.
    t.kill_registry();
    t.start_registry();
    let three = t.bus();
    let err = three
        .publish::<u64>("/twice")
        .err()
        .expect("the third publisher is refused");
    assert!(matches!(err, BusError::AlreadyPublished { .. }), "{err}");
    first.write(&2).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&2));
}

/// A registry in a pid namespace of its own (a container) sees every client's pid and start
/// time as 0: two publishers of one name, both unseen and both with endpoint 1, are not one
/// publication registered again, and the second is refused rather than taking the name over.
#[test]
fn a_second_publisher_the_registry_cannot_see_is_refused() {
    common::require_root();
    let mut t = TestBus::new();
    let domain = t.domain.as_str().to_owned();
    let registry = common::bin("registry-server");
    let registry = registry.to_str().unwrap();
    // `--kill-child`: the registry goes with `unshare` when the test kills it.
    let args = [
        "--pid",
        "--fork",
        "--kill-child",
        registry,
        "--domain",
        &domain,
    ];
    t.spawn_with_args_only("unshare".into(), &args);
    let write = |seconds| {
        [
            "write",
            "--name",
            "/twice",
            "--seconds",
            seconds,
            "--interval-ms",
            "50",
        ]
    };
    let first = t.spawn_stress(&write("10"));
    let reader = t.bus();
    let mut sub = reader
        .subscribe::<tools::stress::Checked>("/twice")
        .unwrap();
    assert!(
        sub.wait_update(WATCHDOG).unwrap(),
        "the first publisher is not bound"
    );
    let second = t.spawn_stress(&write("1"));
    let out = t.finish(second);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("already has a live publisher"),
        "{out:?}"
    );
    t.kill(first);
}

#[test]
fn an_oversized_value_is_refused_with_both_sizes() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    // A capacity of 0 is refused when the publication is made (it was taken as 1, and every
    // write refused afterwards).
    let zero = bus
        .publication("/zero")
        .unwrap()
        .capacity(0)
        .create::<u64, bus::Serde>();
    let err = zero.err().expect("capacity 0 refused");
    assert!(
        matches!(err, BusError::ZeroCapacity { .. }) && err.to_string().contains(".capacity()"),
        "{err}"
    );
    let mut small = bus
        .publication("/small")
        .unwrap()
        .capacity(100)
        .create::<Vec<u8>, bus::Serde>()
        .unwrap();
    small.write(&vec![1u8; 50]).unwrap();
    let err = small.write(&vec![1u8; 200]).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            BusError::TooLarge {
                size: 208,
                capacity: 100,
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("208") && msg.contains("100"), "{msg}");
    // Nothing was truncated: the slot still holds the last value that fitted.
    let mut sub = bus.subscribe::<Vec<u8>>("/small").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().unwrap().len(), 50);
    // The same after a large value, which the publication encodes straight into the slot: the
    // refused value leaves the slot as it was, and a value that fits goes through again.
    let mut large = bus
        .publication("/large")
        .unwrap()
        .capacity(64 * 1024)
        .create::<Vec<u8>, bus::Serde>()
        .unwrap();
    large.write(&vec![2u8; 10_000]).unwrap();
    let err = large.write(&vec![3u8; 70_000]).unwrap_err();
    assert!(
        matches!(
            err,
            BusError::TooLarge {
                size: 70_008,
                capacity: 65_536,
                ..
            }
        ),
        "{err}"
    );
    let mut sub = bus.subscribe::<Vec<u8>>("/large").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().unwrap(), &vec![2u8; 10_000]);
    large.write(&vec![4u8; 20_000]).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().unwrap(), &vec![4u8; 20_000]);
    assert_eq!(sub.meta().unwrap().sequence, 2);
    // Asking for an absurd capacity is refused by the registry.
    let err = bus
        .publication("/huge")
        .unwrap()
        .capacity(1 << 40)
        .create::<Vec<u8>, bus::Serde>()
        .err()
        .unwrap();
    assert!(err.to_string().contains("exceeds"), "{err}");
}

#[test]
fn invalid_names_state_the_rule() {
    let t = TestBus::new();
    let bus = t.bus();
    for bad in ["robot/pose", "/with space", "/bad~char", ""] {
        let err = bus.publish::<u8>(bad).err().expect("refused");
        assert!(err.to_string().contains("starts with '/'"), "{err}");
        assert!(bus.subscribe::<u8>(bad).is_err());
    }
    let long = format!("/{}", "x".repeat(200));
    let err = bus.publish::<u8>(&long).err().expect("refused");
    assert!(err.to_string().contains("this one is 201 bytes"), "{err}");
    // Command-line values out of range say the range, as a usage error (exit status 64).
    for (args, said) in [
        (&["watch", "/x", "--poll-ms", "0"][..], "from 1 to 3600000"),
        (&["watch", "/x", "--count", "0"][..], "at least 1"),
    ] {
        let out = t.inspect(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{args:?}: {err}");
    }
    assert!(bus::Domain::new("bad domain")
        .unwrap_err()
        .to_string()
        .contains("A-Z"));
}

#[test]
fn no_registry_is_a_clear_error_where_one_is_needed() {
    let t = TestBus::new();
    let bus = t.bus();
    // Creating endpoints never fails for want of a registry...
    let publication = bus.publish::<u8>("/lonely").unwrap();
    // ...but asking for one says what is missing and how to fix it.
    let err = bus
        .wait_for_registry(Duration::from_millis(200))
        .unwrap_err();
    assert!(matches!(err, BusError::RegistryUnreachable { .. }));
    assert!(
        err.to_string().contains("registry-server --domain"),
        "{err}"
    );
    let err = publication
        .wait_bound(Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(err, BusError::RegistryUnreachable { .. }), "{err}");
    let out = t.inspect(&["endpoints"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no registry-server answers"), "{stderr}");
}

/// Byte offsets in the slot header (see bus/src/slot.rs).
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 8;
const TOTAL_SIZE_AT: usize = 16;
const CAPACITY_AT: usize = 24;

fn corrupt(t: &TestBus, name: &str, at: usize, bytes: &[u8]) {
    let path = t.segment_path(name);
    let mut data = std::fs::read(&path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    std::fs::write(&path, data).unwrap();
}

#[test]
fn corrupt_segment_headers_give_errors_not_crashes() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut keep = Vec::new();
    for name in [
        "/bad/magic",
        "/bad/version",
        "/bad/size",
        "/bad/capacity",
        "/good",
    ] {
        let mut p = bus.publish::<u64>(name).unwrap();
        p.write(&42).unwrap();
        keep.push(p);
    }
    corrupt(&t, "/bad/magic", MAGIC_AT, b"NOTBATON");
    corrupt(&t, "/bad/version", VERSION_AT, &99u32.to_le_bytes());
    corrupt(&t, "/bad/size", TOTAL_SIZE_AT, &u64::MAX.to_le_bytes());
    corrupt(&t, "/bad/capacity", CAPACITY_AT, &u32::MAX.to_le_bytes());
    let open = |n: &str| {
        bus::slot::Slot::open(
            &t.domain.segment_name(&bus::SlotName::public(n).unwrap()),
            false,
        )
    };
    let expect = |n: &str, needle: &str| {
        let err = open(n).unwrap_err().to_string();
        assert!(err.contains(needle), "{n}: {err}");
    };
    expect("/bad/magic", "wrong magic");
    expect("/bad/version", "version 99");
    expect("/bad/size", "recorded total size");
    expect("/bad/capacity", "capacity");
    assert!(open("/good").is_ok());
    // A segment copied by hand under another slot's file name: its header names /good.
    let copy = t.segment_path("/bad/copy");
    std::fs::copy(t.segment_path("/good"), &copy).unwrap();
    expect(
        "/bad/copy",
        "names slot /good, whose segment has another name",
    );
    let out = t.inspect(&["get", "/bad/copy"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("copied or renamed by hand"), "{err}");
    std::fs::remove_file(&copy).unwrap();

    // A tool lists the good slot and reports the bad ones, with exit status 1.
    let out = t.inspect(&["list", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The good slot and the registry's directory.
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.contains("/good"));
    assert!(stdout.contains(bus::directory::DIRECTORY_SLOT));
    assert_eq!(stderr.matches("unreadable").count(), 4, "{stderr}");

    // A restarted registry skips the corrupt segments, adopts the good one and keeps serving;
    // a new publisher of a corrupt slot gets a fresh one.
    t.kill_registry();
    drop(keep);
    t.start_registry();
    let fresh = t.bus();
    let mut sub = fresh.subscribe::<u64>("/good").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&42));
    let mut again = fresh.publish::<u64>("/bad/magic").unwrap();
    again.write(&7).unwrap();
    let mut sub = fresh.subscribe::<u64>("/bad/magic").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&7));
}

/// Slot memory made inconsistent under running processes (its latest-sequence word overwritten
/// with a value whose buffer holds another) is reported once and passed over: the subscription
/// and the group keep their last good value and sleep, and both read the writer's next value,
/// which makes the slot consistent again. A group used to leave such a member out for good.
#[test]
fn an_inconsistent_slot_is_reported_once_and_read_again_after_the_next_write() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut publication = bus.publish::<u64>("/counter").unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    publication.write(&1).unwrap();
    let mut sub = bus.subscribe::<u64>("/counter").unwrap();
    sub.wait_bound(WATCHDOG).unwrap();
    assert!(sub.update().unwrap());
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(bus.subscribe::<u64>("/counter").unwrap());
    group.get(member).wait_bound(WATCHDOG).unwrap();
    group.update_all().unwrap();

    t.make_unreadable("/counter", 1_000_001);
    let e = sub.update().unwrap_err();
    assert!(matches!(e, BusError::Inconsistent { .. }), "{e}");
    assert!(e.to_string().contains("the segment is corrupt"), "{e}");
    assert!(!sub.update().unwrap(), "reported once");
    assert_eq!(sub.value(), Some(&1));
    let started = Instant::now();
    assert!(!sub.wait_update(Duration::from_millis(50)).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(50), "slept");
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![member.index()]);
    let e = group.take_error(member.index());
    assert!(matches!(e, Some(BusError::Inconsistent { .. })), "{e:?}");
    assert!(group
        .wait_any(Duration::from_millis(50))
        .unwrap()
        .is_empty());
    // `info` shows what is readable (type, schema, segment, endpoints) with the value's error,
    // exit status 1 (it used to print the error alone).
    let out = t.inspect(&["info", "/counter"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("type        u64")
            && text.contains("value       unreadable:")
            && text.contains("(segment /baton."),
        "{text}"
    );
    assert!(text.contains("publishers  "), "{text}");

    publication.write(&2).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&2));
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![member.index()]);
    assert!(group.take_error(member.index()).is_none());
    assert_eq!(group.get(member).value(), Some(&2));
}

/// A value that does not decode (garbage written into the slot) is reported once and passed
/// over: the subscription keeps its last good value and waits for a newer one instead of
/// failing again, and a group reports the member once with its error and keeps working.
#[test]
fn an_undecodable_value_is_reported_once_and_passed_over() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut publication = bus.publish::<String>("/text").unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    publication.write(&"good".to_owned()).unwrap();
    let mut sub = bus.subscribe::<String>("/text").unwrap();
    sub.wait_bound(WATCHDOG).unwrap();
    assert!(sub.update().unwrap());
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(bus.subscribe::<String>("/text").unwrap());
    group.get(member).wait_bound(WATCHDOG).unwrap();
    group.update_all().unwrap();

    // A length prefix far beyond the value's bytes: not a String.
    let slot = bus::slot::Slot::open(&t.domain.segment_name(publication.name()), true).unwrap();
    slot.write(&[0xff; 12]).unwrap();
    let e = sub.update().unwrap_err();
    assert!(matches!(e, BusError::Decode { .. }), "{e}");
    assert!(!sub.update().unwrap(), "reported once");
    assert_eq!(sub.value().map(String::as_str), Some("good"));
    assert!(
        !sub.wait_update(Duration::from_millis(50)).unwrap(),
        "waits for a newer value"
    );
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![member.index()]);
    // The error stands while the member is pulled again without a change (the arbiter pulls
    // every member at a block's expiry before it takes the errors).
    assert!(group.update_all().unwrap().is_empty());
    let e = group.take_error(member.index());
    assert!(matches!(e, Some(BusError::Decode { .. })), "{e:?}");
    assert!(group
        .wait_any(Duration::from_millis(50))
        .unwrap()
        .is_empty());

    publication.write(&"next".to_owned()).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().map(String::as_str), Some("next"));
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![member.index()]);
    assert!(group.take_error(member.index()).is_none());
    assert_eq!(group.get(member).value().map(String::as_str), Some("next"));
}

/// A network configuration that cannot work stops the registry with one clear line before it
/// has created anything in /dev/shm.
#[test]
fn a_bad_network_configuration_is_refused_before_anything_is_created() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestBus::new();
    // Room for a datagram without a key, not with one (its MAC).
    let key = t.dir().join("net.key");
    std::fs::write(&key, "a key of the bad configuration test").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = std::process::Command::new(common::bin("registry-server"))
        .args(["--domain", t.domain.as_str(), "--net", "--mtu", "170"])
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("MTU 170 leaves no room for a datagram: at least 180 bytes with a key file"),
        "{stderr}"
    );
    assert_eq!(
        t.domain.segment_files().unwrap().len(),
        0,
        "nothing created"
    );
}

#[test]
fn a_second_registry_for_the_same_domain_says_so() {
    let mut t = TestBus::new();
    t.start_registry();
    let out = std::process::Command::new(common::bin("registry-server"))
        .args(["--domain", t.domain.as_str()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Whose it is, too: any user may hold an abstract socket's name.
    let pid = t.pid(t.registry());
    assert!(
        stderr.contains("already serves domain")
            && stderr.contains(&format!(
                ", by pid {pid} (registry-server) of user {}",
                bus::process::user_or_number(nix::unistd::geteuid().as_raw())
            )),
        "{stderr}"
    );
}

/// A subscription's `wait_bound` that times out because no publication has made the slot yet
/// says so as a timeout, not as a refusal.
#[test]
fn waiting_for_a_slot_nobody_publishes_is_a_timeout_not_a_refusal() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    bus.wait_for_registry(WATCHDOG).unwrap();
    let sub = bus.subscribe::<u64>("/nobody").unwrap();
    let err = sub.wait_bound(Duration::from_millis(100)).unwrap_err();
    assert!(matches!(err, BusError::NotBoundYet { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("no publication has created the slot yet"),
        "{err}"
    );
}

/// A mistyped domain has no registry: bus-inspect names the domains in use here too, the
/// likelier answer than starting a registry on the typo.
#[test]
fn a_domain_without_a_registry_is_told_with_the_domains_in_use_here() {
    let mut t = TestBus::new();
    t.start_registry();
    let typo = format!("{}x", t.domain);
    let mut said = String::new();
    common::eventually("bus-inspect names the domain in use", || {
        let out = std::process::Command::new(common::bin("bus-inspect"))
            .args(["--domain", &typo, "list"])
            .output()
            .expect("bus-inspect");
        said = String::from_utf8_lossy(&out.stderr).into_owned();
        said.contains("name a domain in use here (segments): ")
            && said.contains(&format!("{} (", t.domain))
    });
    assert!(
        said.contains(&format!("start `registry-server --domain {typo}`")),
        "{said}"
    );
}

/// `bus-stress write` without a registry wrote its values into nothing and exited 0, so a
/// script (or a test) checking its status passed on a run that published nothing.
#[test]
fn bus_stress_write_that_published_nothing_fails() {
    let mut t = TestBus::new();
    let w = t.spawn_stress(&["write", "--name", "/nowhere", "--count", "3"]);
    let out = t.finish(w);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("none of the 3 values was published"),
        "{out:?}"
    );
}
