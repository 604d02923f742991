//! `wait_update` and `wait_any` wake with the right value and the right members, and a timeout
//! returns as a timeout. Writers are separate processes or threads; the registry is real.

mod common;

use std::time::{Duration, Instant};

use common::{summary, TestBus, WATCHDOG};
use tools::stress::Checked;

/// A bound publication of `name`, and a handle on its slot for looking at the waiters word.
fn bound_with_slot<T>(
    t: &TestBus,
    bus: &bus::Bus,
    name: &str,
) -> (bus::Publication<T>, bus::slot::Slot)
where
    T: serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    let publication = bus.publish::<T>(name).unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    let slot = bus::slot::Slot::open(&t.domain.segment_name(publication.name()), true).unwrap();
    (publication, slot)
}

#[test]
fn wait_update_wakes_with_the_new_value_and_times_out_without_one() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut sub = bus.subscribe::<Checked>("/w").unwrap();
    // Nothing published: a timeout, reported as such.
    let started = Instant::now();
    assert!(!sub.wait_update(Duration::from_millis(200)).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(sub.value().is_none());

    let writer = t.spawn_stress(&[
        "write",
        "--name",
        "/w",
        "--count",
        "1",
        "--max-size",
        "100",
        "--linger",
        "30",
    ]);
    assert!(sub.wait_update(WATCHDOG).unwrap());
    let v = sub.value().unwrap();
    assert_eq!(v.sequence, 1);
    assert!(v.is_valid());
    // Already seen: waiting again times out.
    assert!(!sub.wait_update(Duration::from_millis(100)).unwrap());
    t.signal(writer, nix::sys::signal::Signal::SIGKILL);
}

#[test]
fn a_waiter_is_woken_by_a_write_from_another_thread() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut publication = bus.publish::<u32>("/ping").unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    let waiter = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            let mut sub = bus.subscribe::<u32>("/ping").unwrap();
            sub.wait_bound(WATCHDOG).unwrap();
            let mut seen = Vec::new();
            while seen.last() != Some(&10) {
                assert!(sub.wait_update(WATCHDOG).unwrap(), "wait_update timed out");
                seen.push(*sub.value().unwrap());
            }
            seen
        })
    };
    for i in 1..=10 {
        std::thread::sleep(Duration::from_millis(20));
        publication.write(&i).unwrap();
    }
    let seen = waiter.join().unwrap();
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&10));
}

#[test]
fn wait_any_reports_exactly_the_members_that_changed() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut group = bus::SubscriptionGroup::new();
    let a = group.add(bus.subscribe::<u64>("/g/a").unwrap());
    let b = group.add(bus.subscribe::<String>("/g/b").unwrap());
    let c = group.add(bus.subscribe::<Checked>("/g/c").unwrap());
    // Nothing exists yet: the group waits on binding and times out cleanly.
    assert!(group
        .wait_any(Duration::from_millis(150))
        .unwrap()
        .is_empty());

    let mut pa = bus.publish::<u64>("/g/a").unwrap();
    let mut pb = bus.publish::<String>("/g/b").unwrap();
    // A writer arriving counts as a change, even before its first value (the two subscriptions
    // bind asynchronously, so the two arrivals may come in one wait or in two).
    let mut arrived = Vec::new();
    while arrived.len() < 2 {
        let changed = group.wait_any(WATCHDOG).unwrap();
        assert!(!changed.is_empty(), "timed out");
        arrived.extend(changed);
        arrived.sort();
        let expected = [a.index(), b.index()];
        assert!(arrived.iter().all(|m| expected.contains(m)), "{arrived:?}");
    }
    assert_eq!(arrived, [a.index(), b.index()]);
    assert!(group.get(a).value().is_none());
    pa.write(&7).unwrap();
    let changed = group.wait_any(WATCHDOG).unwrap();
    assert_eq!(changed, vec![a.index()]);
    assert_eq!(group.get(a).value(), Some(&7));

    pb.write(&"hello".into()).unwrap();
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![b.index()]);
    assert_eq!(group.get(b).value().map(String::as_str), Some("hello"));

    // A write from another process to the third member (its arrival may be reported first).
    let writer = t.spawn_stress(&[
        "write",
        "--name",
        "/g/c",
        "--count",
        "1",
        "--max-size",
        "10",
        "--linger",
        "30",
    ]);
    while group.get(c).value().is_none() {
        assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![c.index()]);
    }
    assert!(group.get(c).value().unwrap().is_valid());

    // Two changes before the wait: both reported by one call.
    pa.write(&8).unwrap();
    pb.write(&"again".into()).unwrap();
    assert_eq!(
        group.wait_any(WATCHDOG).unwrap(),
        vec![a.index(), b.index()]
    );
    assert!(group
        .wait_any(Duration::from_millis(100))
        .unwrap()
        .is_empty());
    assert!(group.update_all().unwrap().is_empty());
    t.signal(writer, nix::sys::signal::Signal::SIGKILL);
}

#[test]
fn waiting_readers_wake_on_writes_from_another_process() {
    let mut t = TestBus::new();
    t.start_registry();
    let reader = t.spawn_stress(&[
        "read",
        "--name",
        "/pp",
        "--seconds",
        "10",
        "--wait",
        "--until",
        "50",
    ]);
    let writer = t.spawn_stress(&[
        "write",
        "--name",
        "/pp",
        "--count",
        "50",
        "--interval-ms",
        "5",
        "--max-size",
        "64",
        "--linger",
        "10",
    ]);
    let s = summary(&t.finish(reader));
    assert_eq!(s["last"], 50, "{s}");
    assert_eq!(s["bad"], 0);
    t.signal(writer, nix::sys::signal::Signal::SIGKILL);
}

/// A group stays counted as a waiter between `wait_any` calls (so a wake-up goes straight to
/// reading), and stops being counted at `update_all` or when dropped: writers must not keep
/// making wake-up calls for a group nobody waits on any more.
#[test]
fn a_group_keeps_its_waiter_count_until_update_all_or_drop() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, slot) = bound_with_slot::<u64>(&t, &bus, "/counted");
    let waiters = || slot.waiter_count();
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(bus.subscribe::<u64>("/counted").unwrap());
    group.get(member).wait_bound(WATCHDOG).unwrap();
    assert_eq!(waiters(), 0);
    assert!(group
        .wait_any(Duration::from_millis(50))
        .unwrap()
        .is_empty());
    assert_eq!(waiters(), 1, "counted after a wait that timed out");
    for value in 1..=3u64 {
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                publication.write(&value).unwrap();
            });
            assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![member.index()]);
        });
        assert_eq!(group.get(member).value(), Some(&value));
        assert_eq!(waiters(), 1, "one count, however many waits");
    }
    group.update_all().unwrap();
    assert_eq!(waiters(), 0, "update_all ends the registration");
    assert!(group
        .wait_any(Duration::from_millis(10))
        .unwrap()
        .is_empty());
    assert_eq!(waiters(), 1);
    drop(group);
    assert_eq!(waiters(), 0, "dropping the group ends it");
}

/// After a wake-up the group reads only the member that woke it; members written at the same
/// moment must still be reported, by the calls that follow, each once and with its newest value.
#[test]
fn members_written_together_are_all_reported() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut pa = bus.publish::<u64>("/together/a").unwrap();
    let mut pb = bus.publish::<u64>("/together/b").unwrap();
    let mut group = bus::SubscriptionGroup::new();
    let a = group.add(bus.subscribe::<u64>("/together/a").unwrap());
    let b = group.add(bus.subscribe::<u64>("/together/b").unwrap());
    pa.write(&0).unwrap();
    pb.write(&0).unwrap();
    // Both bound and holding their first value, with every arrival reported, before the rounds.
    while group.get(a).value() != Some(&0) || group.get(b).value() != Some(&0) {
        assert!(!group.wait_any(WATCHDOG).unwrap().is_empty(), "timed out");
    }
    while !group
        .wait_any(Duration::from_millis(50))
        .unwrap()
        .is_empty()
    {}
    for round in 1..=20u64 {
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                pa.write(&round).unwrap();
                pb.write(&round).unwrap();
            });
            let mut reported = Vec::new();
            while reported.len() < 2 {
                let changed = group.wait_any(WATCHDOG).unwrap();
                assert!(!changed.is_empty(), "round {round}: timed out");
                reported.extend(changed);
            }
            reported.sort();
            assert_eq!(reported, vec![a.index(), b.index()], "round {round}");
        });
        assert_eq!(group.get(a).value(), Some(&round));
        assert_eq!(group.get(b).value(), Some(&round));
    }
}

/// A subscriber process killed with SIGKILL while waiting (in a group's `wait_any`) never takes
/// back its waiter count. Writes keep waking (finding nobody) for `STALE_AFTER` writes, then the
/// count is dropped and writes stop making wake calls; a live subscriber still wakes afterwards.
#[test]
fn a_waiter_killed_in_its_sleep_stops_costing_writers_wake_calls() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, slot) = bound_with_slot::<Checked>(&t, &bus, "/sleepy");
    let reader = t.spawn_stress(&["read", "--name", "/sleepy", "--seconds", "60", "--wait"]);
    common::eventually("the reader waiting", || slot.waiter_count() == 1);
    t.kill(reader);
    assert_eq!(
        slot.waiter_count(),
        1,
        "a killed waiter's count stays behind"
    );

    for i in 1..bus::slot::STALE_AFTER {
        publication.write(&Checked::new(u64::from(i), 16)).unwrap();
    }
    assert_eq!(
        slot.waiter_count(),
        1,
        "kept until STALE_AFTER wakes found fewer sleepers than counted"
    );
    publication
        .write(&Checked::new(u64::from(bus::slot::STALE_AFTER), 16))
        .unwrap();
    assert_eq!(slot.waiter_count(), 0, "dropped as stale");

    let mut sub = bus.subscribe::<Checked>("/sleepy").unwrap();
    sub.wait_bound(WATCHDOG).unwrap();
    sub.update().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            common::eventually("the live subscriber asleep", || slot.waiter_count() == 1);
            publication.write(&Checked::new(1000, 16)).unwrap();
        });
        assert!(
            sub.wait_update(WATCHDOG).unwrap(),
            "a live waiter still wakes"
        );
    });
    assert_eq!(sub.value().unwrap().sequence, 1000);
    assert_eq!(slot.waiter_count(), 0);
}

/// A group's kept count dropped as stale (a dead waiter's count on the same slot made the
/// writer's wakes come up short) is taken again at the group's next wait: the group keeps
/// waking for every write, and the slot ends with the group's count alone.
#[test]
fn a_group_counts_again_after_its_kept_count_is_dropped() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, slot) = bound_with_slot::<u64>(&t, &bus, "/regroup");
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(bus.subscribe::<u64>("/regroup").unwrap());
    group.get(member).wait_bound(WATCHDOG).unwrap();
    let _dead = slot.count_waiter();
    let n = u64::from(bus::slot::STALE_AFTER) * 2;
    let seen = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=n {
                // Each write finds the group asleep: one sleeper of two counted.
                std::thread::sleep(Duration::from_millis(1));
                publication.write(&i).unwrap();
                common::eventually("the group saw the write", || {
                    seen.load(std::sync::atomic::Ordering::SeqCst) == i
                });
            }
        });
        while seen.load(std::sync::atomic::Ordering::SeqCst) < n {
            let changed = group.wait_any(WATCHDOG).unwrap();
            assert!(!changed.is_empty(), "wait_any timed out");
            let value = *group.get(member).value().unwrap();
            seen.store(value, std::sync::atomic::Ordering::SeqCst);
        }
    });
    assert_eq!(
        slot.waiter_repairs(),
        1,
        "one repair dropped the dead count"
    );
    assert!(group
        .wait_any(Duration::from_millis(10))
        .unwrap()
        .is_empty());
    assert_eq!(
        slot.waiter_count(),
        1,
        "the group counted again, the dead one gone"
    );
    group.update_all().unwrap();
    assert_eq!(slot.waiter_count(), 0);
}

/// The repair of stale waiter counts never loses a live waiter's wake-up. A writer thread
/// writes 1..=N in blocks of 256: the first writes of a block leak counts (so that repairs keep
/// happening), and at the end of each block the writer stops until a `wait_update` loop and a
/// group's `wait_any` loop have both seen its last value. A waiter left asleep without a count
/// would not be woken then (nobody counted, no more writes): the block's deadline fails.
#[test]
fn live_waiters_are_never_lost_when_stale_counts_are_dropped() {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    const N: u64 = 256 * 60;
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, slot) = bound_with_slot::<u64>(&t, &bus, "/repairs");
    let mut sub = bus.subscribe::<u64>("/repairs").unwrap();
    sub.wait_bound(WATCHDOG).unwrap();
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(bus.subscribe::<u64>("/repairs").unwrap());
    group.get(member).wait_bound(WATCHDOG).unwrap();
    let (sub_seen, group_seen) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 1..=N {
                if i % 256 < 8 {
                    let _leaked = slot.count_waiter();
                }
                publication.write(&i).unwrap();
                if i % 3 == 0 {
                    std::thread::yield_now();
                }
                if i % 256 == 0 {
                    let deadline = Instant::now() + Duration::from_secs(2);
                    while sub_seen.load(SeqCst) < i || group_seen.load(SeqCst) < i {
                        assert!(Instant::now() < deadline, "a waiter missed write {i}");
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        });
        s.spawn(|| {
            while sub.value() != Some(&N) {
                let woke = sub.wait_update(Duration::from_secs(5)).unwrap();
                assert!(woke, "wait_update timed out at {:?}", sub.value());
                sub_seen.store(*sub.value().unwrap(), SeqCst);
            }
        });
        while group.get(member).value() != Some(&N) {
            let changed = group.wait_any(Duration::from_secs(5)).unwrap();
            let value = group.get(member).value();
            assert!(!changed.is_empty(), "wait_any timed out at {value:?}");
            group_seen.store(*value.unwrap(), SeqCst);
        }
    });
    assert!(slot.waiter_repairs() > 0, "the run made repairs");
}

/// `Duration::MAX` means "no timeout" for every wait of the bus (it used to overflow the
/// deadline and panic): each wait below starts before what it waits for happens, and returns
/// when it does.
#[test]
fn a_timeout_of_duration_max_waits_for_ever() {
    let mut t = TestBus::new();
    let bus = t.bus();
    let (done, finished) = std::sync::mpsc::channel();
    let waiter = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            bus.wait_for_registry(Duration::MAX).unwrap();
            done.send("registry").unwrap();
            let sub = bus.subscribe::<u32>("/forever").unwrap();
            sub.wait_bound(Duration::MAX).unwrap();
            let mut group = bus::SubscriptionGroup::new();
            let member = group.add(sub);
            group.update_all().unwrap();
            done.send("waiting in the group").unwrap();
            assert_eq!(group.wait_any(Duration::MAX).unwrap(), vec![member.index()]);
            assert_eq!(group.get(member).value(), Some(&1));
            let mut sub = bus.subscribe::<u32>("/forever").unwrap();
            sub.wait_bound(Duration::MAX).unwrap();
            sub.update().unwrap();
            done.send("waiting in the subscription").unwrap();
            assert!(sub.wait_update(Duration::MAX).unwrap());
            *sub.value().unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    t.start_registry();
    assert_eq!(finished.recv_timeout(WATCHDOG), Ok("registry"));
    let mut publication = bus.publish::<u32>("/forever").unwrap();
    publication.wait_bound(Duration::MAX).unwrap();
    assert_eq!(finished.recv_timeout(WATCHDOG), Ok("waiting in the group"));
    std::thread::sleep(Duration::from_millis(50));
    publication.write(&1).unwrap();
    assert_eq!(
        finished.recv_timeout(WATCHDOG),
        Ok("waiting in the subscription")
    );
    std::thread::sleep(Duration::from_millis(50));
    publication.write(&2).unwrap();
    let deadline = Instant::now() + WATCHDOG;
    while !waiter.is_finished() {
        assert!(Instant::now() < deadline, "the waiter never returned");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(waiter.join().unwrap(), 2);
}

/// A `Member` names a member of the group that made it only: used with another group it is a
/// clear panic, not an index out of bounds or another member's subscription.
#[test]
#[should_panic(expected = "another SubscriptionGroup")]
fn a_member_of_another_group_is_a_clear_mistake() {
    let t = TestBus::new();
    let bus = t.bus();
    let mut first = bus::SubscriptionGroup::new();
    let mut second = bus::SubscriptionGroup::new();
    second.add(bus.subscribe::<u64>("/second").unwrap());
    let member = first.add(bus.subscribe::<u64>("/first").unwrap());
    let _ = second.get(member);
}

/// CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
}

/// A slot's latest-sequence word corrupted to 0 after a value was seen: `read` finds nothing in
/// sequence 0, so waiting must sleep until the timeout, not take the word for news and spin.
#[test]
fn a_latest_word_corrupted_to_zero_is_slept_on_not_spun_on() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, _slot) = bound_with_slot::<u64>(&t, &bus, "/zeroed");
    publication.write(&7).unwrap();
    let mut sub = bus.subscribe::<u64>("/zeroed").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    let mut group = bus::SubscriptionGroup::new();
    group.add(bus.subscribe::<u64>("/zeroed").unwrap());
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![0]);
    t.overwrite_segment("/zeroed", 512, &0u64.to_le_bytes());

    let wait = Duration::from_millis(300);
    let before = thread_cpu_time();
    assert!(!sub.wait_update(wait).unwrap());
    assert!(group.wait_any(wait).unwrap().is_empty());
    let busy = thread_cpu_time() - before;
    // Sleeping costs a few hundred microseconds of CPU; spinning, the whole 600 ms.
    assert!(busy < Duration::from_millis(150), "spun for {busy:?}");
    // The writer's next writes are read again.
    publication.write(&8).unwrap();
    publication.write(&9).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&9));
}

/// A `GroupWaker` ends a group's wait from another thread (a stop signal), whether its members
/// are bound or still wait for their slot; a wake while nobody waits ends the next wait.
#[test]
fn a_group_waker_ends_the_wait_from_another_thread() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, _slot) = bound_with_slot::<u64>(&t, &bus, "/woken/x");
    publication.write(&1).unwrap();
    let mut group = bus::SubscriptionGroup::new();
    group.add(bus.subscribe::<u64>("/woken/x").unwrap());
    group.add(bus.subscribe::<u64>("/woken/never-published").unwrap());
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![0]);
    let waker = bus::GroupWaker::new();
    group.wake_on(&waker);
    let from_thread = waker.clone();
    let started = Instant::now();
    let wake = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        from_thread.wake();
    });
    assert!(group.wait_any(WATCHDOG).unwrap().is_empty());
    let took = started.elapsed();
    assert!(took < WATCHDOG / 2, "woken only at the timeout ({took:?})");
    wake.join().unwrap();
    // Woken before the wait: it ends at once, and the next wait is an ordinary one.
    waker.wake();
    assert!(group.wait_any(WATCHDOG).unwrap().is_empty());
    assert!(group
        .wait_any(Duration::from_millis(100))
        .unwrap()
        .is_empty());
    // A write still wakes it with its member.
    publication.write(&2).unwrap();
    assert_eq!(group.wait_any(WATCHDOG).unwrap(), vec![0]);
}

/// A group sleeps on one bind word per `Bus` its members come from: with members of two
/// handles, 127 bound members asked the kernel for 129 words and `wait_any` failed with EINVAL
/// (reported as "needs Linux 5.16"); the limit is now said as the group's size.
#[test]
fn a_group_over_two_handles_says_its_real_size_limit() {
    let mut t = TestBus::new();
    t.start_registry();
    let writer = t.bus();
    let names: Vec<String> = (0..127).map(|i| format!("/many/{i}")).collect();
    let publications: Vec<_> = names
        .iter()
        .map(|n| {
            let p = writer.publish::<u64>(n).unwrap();
            p.wait_bound(WATCHDOG).unwrap();
            p
        })
        .collect();
    let (first, second) = (t.bus(), t.bus());
    let mut group = bus::SubscriptionGroup::new();
    for (i, n) in names.iter().enumerate() {
        let handle = if i % 2 == 0 { &first } else { &second };
        let sub = handle.subscribe::<u64>(n).unwrap();
        sub.wait_bound(WATCHDOG).unwrap();
        group.add(sub);
    }
    match group.wait_any(Duration::from_millis(10)) {
        Err(bus::BusError::GroupTooLarge { members, max }) => {
            assert_eq!((members, max), (127, 126));
        }
        other => panic!("expected GroupTooLarge, got {other:?}"),
    }
    drop(publications);
}

/// A group's waiter count zeroed under it while it sleeps (a stray write into the slot's
/// memory): writers then wake nobody, and the group slept until its timeout (an idle robot-sim,
/// for an hour; shared-memory soak). It looks again every second, counting itself anew.
#[test]
fn a_group_whose_waiter_count_was_zeroed_still_wakes() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let (mut publication, slot) = bound_with_slot::<u32>(&t, &bus, "/zeroed");
    publication.write(&1).unwrap();
    let waiter = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            let mut group = bus::SubscriptionGroup::new();
            let member = group.add(bus.subscribe::<u32>("/zeroed").unwrap());
            while group.get(member).value() != Some(&1) {
                group.wait_any(WATCHDOG).unwrap();
            }
            let started = Instant::now();
            let changed = group.wait_any(WATCHDOG).unwrap();
            (
                changed,
                *group.get(member).value().unwrap(),
                started.elapsed(),
            )
        })
    };
    common::eventually("the group sleeps, counted", || slot.waiter_count() == 1);
    std::thread::sleep(Duration::from_millis(100));
    // The count's four bytes (the epoch above them stays).
    t.overwrite_segment("/zeroed", 776, &[0; 4]);
    assert_eq!(slot.waiter_count(), 0);
    publication.write(&2).unwrap();
    let (changed, value, slept) = waiter.join().unwrap();
    assert_eq!((changed, value), (vec![0], 2));
    assert!(slept < Duration::from_secs(5), "slept {slept:?}");
}

/// A group member refused (its name held another type) is left out, but taken back once a
/// later registry binds it: it stayed left out for good, although the subscription itself
/// worked again.
#[test]
fn a_group_member_refused_is_taken_back_once_bound() {
    let mut t = TestBus::new();
    t.start_registry();
    let other = t.spawn_stress(&[
        "write",
        "--name",
        "/g/taken",
        "--count",
        "1",
        "--max-size",
        "10",
        "--linger",
        "60",
    ]);
    common::eventually("the other type is published", || {
        std::path::Path::new(&t.segment_path("/g/taken")).exists()
    });
    // Subscribed while no registry runs: refused once one does (the other publisher holds the
    // name), not at once.
    t.kill_registry();
    let bus = t.bus();
    let mut group = bus::SubscriptionGroup::new();
    let member = group.add(bus.subscribe::<u64>("/g/taken").unwrap());
    t.start_registry();
    let changed = group.wait_any(WATCHDOG).unwrap();
    assert_eq!(changed, vec![member.index()]);
    assert!(
        matches!(
            group.error(member.index()),
            Some(bus::BusError::TypeMismatch { .. })
        ),
        "{:?}",
        group.error(member.index())
    );
    // The other type's publisher and its slot go; a registry started again takes the
    // subscription, and a publisher of its type binds it.
    t.kill(other);
    t.kill_registry();
    std::fs::remove_file(t.segment_path("/g/taken")).unwrap();
    t.start_registry();
    let mut publication = bus.publish::<u64>("/g/taken").unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    publication.write(&11).unwrap();
    let deadline = Instant::now() + WATCHDOG;
    while group.get(member).value() != Some(&11) {
        assert!(Instant::now() < deadline, "the member was not taken back");
        group.wait_any(Duration::from_millis(500)).unwrap();
    }
    assert!(group.error(member.index()).is_none());
}
