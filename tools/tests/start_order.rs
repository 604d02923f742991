//! Any start order delivers the value, and a registry killed and restarted under running
//! publishers and subscribers loses nothing.

mod common;

use std::time::Duration;

use common::{summary, TestBus, WATCHDOG};
use nix::sys::signal::Signal;
use tools::stress::Checked;

/// A registry started on `t`, a publication of `name` that wrote 1, and a subscription that
/// read it.
fn one_written_and_read(
    t: &mut TestBus,
    name: &str,
) -> (bus::Bus, bus::Publication<u64>, bus::Subscription<u64>) {
    t.start_registry();
    let bus = t.bus();
    let mut publication = bus.publish::<u64>(name).unwrap();
    publication.wait_bound(WATCHDOG).unwrap();
    publication.write(&1).unwrap();
    let mut subscription = bus.subscribe::<u64>(name).unwrap();
    assert!(subscription.wait_update(WATCHDOG).unwrap());
    (bus, publication, subscription)
}

/// What the registry lists now (nothing while it does not answer).
fn registry_listing(t: &TestBus) -> Vec<bus::protocol::SlotListing> {
    tools::inspect::registry::listing(&t.domain).unwrap_or_default()
}

#[derive(Clone, Copy, Debug)]
enum Start {
    Registry,
    Publisher,
    Subscriber,
}

fn run_order(order: [Start; 3]) {
    let mut t = TestBus::new();
    let mut reader = None;
    for step in order {
        match step {
            Start::Registry => t.start_registry(),
            // Writes values 1..=5 then holds the publication.
            Start::Publisher => {
                t.spawn_stress(&[
                    "write",
                    "--name",
                    "/order",
                    "--count",
                    "5",
                    "--max-size",
                    "32",
                    "--linger",
                    "30",
                ]);
            }
            Start::Subscriber => {
                reader = Some(t.spawn_stress(&[
                    "read",
                    "--name",
                    "/order",
                    "--seconds",
                    "15",
                    "--wait",
                    "--until",
                    "5",
                ]));
            }
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let s = summary(&t.finish(reader.unwrap()));
    assert_eq!(s["last"], 5, "order {order:?}: {s}");
    assert_eq!(s["bad"], 0, "order {order:?}: {s}");
}

#[test]
fn every_start_order_delivers_the_value() {
    use Start::*;
    for order in [
        [Registry, Publisher, Subscriber],
        [Registry, Subscriber, Publisher],
        [Publisher, Registry, Subscriber],
        [Publisher, Subscriber, Registry],
        [Subscriber, Registry, Publisher],
        [Subscriber, Publisher, Registry],
    ] {
        run_order(order);
    }
}

#[test]
fn value_written_before_the_registry_is_in_the_slot_once_bound() {
    let mut t = TestBus::new();
    let bus = t.bus();
    let mut publication = bus.publish::<String>("/early").unwrap();
    let mut sub = bus.subscribe::<String>("/early").unwrap();
    publication.write(&"first".into()).unwrap();
    let before_write = std::time::SystemTime::now();
    publication.write(&"before the registry".into()).unwrap();
    let after_write = std::time::SystemTime::now();
    assert!(!sub.update().unwrap(), "a value without a registry");
    assert!(sub.value().is_none());
    assert!(!publication.is_bound());
    std::thread::sleep(Duration::from_millis(300));
    t.start_registry();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().unwrap(), "before the registry");
    let meta = sub.meta().unwrap();
    assert_eq!(meta.sequence, 1, "only the last value is kept");
    // Its write time is when the application wrote it, not when the registry came.
    assert!(
        before_write <= meta.write_time && meta.write_time <= after_write,
        "written between {before_write:?} and {after_write:?}, stamped {:?}",
        meta.write_time
    );
}

#[test]
fn registry_killed_and_restarted_loses_nothing() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut publication = bus.publish::<u64>("/counter").unwrap();
    let mut sub = bus.subscribe::<u64>("/counter").unwrap();
    let outside = t.spawn_stress(&[
        "write",
        "--name",
        "/outside",
        "--interval-ms",
        "5",
        "--max-size",
        "64",
    ]);
    let mut outside_sub = bus.subscribe::<Checked>("/outside").unwrap();
    assert!(outside_sub.wait_update(WATCHDOG).unwrap());
    publication.write(&1).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());

    t.kill_registry();
    // Writes while no registry runs reach subscribers at once: the slot is still mapped.
    publication.write(&2).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&2));
    let before = outside_sub.meta().unwrap().sequence;
    assert!(outside_sub.wait_update(WATCHDOG).unwrap());
    assert!(outside_sub.meta().unwrap().sequence > before);

    t.start_registry();
    common::eventually("endpoints registered again", || {
        let slots = registry_listing(&t);
        slots
            .iter()
            .any(|s| s.name.as_str() == "/counter" && s.endpoints.len() == 2)
            && slots
                .iter()
                .any(|s| s.name.as_str() == "/outside" && s.connections().len() == 1)
    });
    publication.write(&3).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value(), Some(&3));
    // Newcomers join the adopted slots and see the current values.
    let newcomer = t.bus();
    let mut late = newcomer.subscribe::<u64>("/counter").unwrap();
    assert!(late.wait_update(WATCHDOG).unwrap());
    assert_eq!(late.value(), Some(&3));
    let reader = t.spawn_stress(&["read", "--name", "/outside", "--seconds", "1", "--wait"]);
    let s = summary(&t.finish(reader));
    assert!(s["reads"].as_u64().unwrap() > 0 && s["bad"] == 0, "{s}");
    // The adopted slot refuses a second publisher while the first lives.
    let err = newcomer
        .publish::<Checked>("/outside")
        .err()
        .expect("second publisher refused");
    assert!(
        matches!(err, bus::BusError::AlreadyPublished { .. }),
        "{err}"
    );
    t.signal(outside, Signal::SIGKILL);
}

/// A process with many endpoints re-registers them all in one burst when the registry comes
/// back, without reading the answers until it has sent them: the registry must keep reading
/// (its answers queue) so that neither side stalls, and every endpoint ends up registered with
/// its writer alive.
#[test]
fn a_thousand_endpoints_register_again_after_a_registry_restart() {
    const N: usize = 1000;
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut publications: Vec<_> = (0..N)
        .map(|i| bus.publish::<u64>(&format!("/many/p{i}")).unwrap())
        .collect();
    for p in &mut publications {
        p.wait_bound(WATCHDOG).unwrap();
        p.write(&1).unwrap();
    }
    t.kill_registry();
    t.start_registry();
    common::eventually("every endpoint registered again, writer alive", || {
        registry_listing(&t)
            .iter()
            .filter(|s| {
                s.name.as_str().starts_with("/many/")
                    && s.endpoints.len() == 1
                    && s.writer == bus::slot::WriterState::Alive
            })
            .count()
            == N
    });
    let mut sub = bus.subscribe::<u64>(&format!("/many/p{}", N - 1)).unwrap();
    publications[N - 1].write(&2).unwrap();
    common::eventually("the last publication still reaches subscribers", || {
        sub.update().unwrap();
        sub.value() == Some(&2)
    });
}

/// After a registry restart a second process cannot take a name whose publisher lives but has
/// not registered again yet (here: stopped while the registry was down); the first keeps it.
#[test]
fn a_living_publisher_keeps_its_name_across_a_registry_restart() {
    let mut t = TestBus::new();
    t.start_registry();
    let first = t.spawn_stress(&[
        "write",
        "--name",
        "/kept",
        "--interval-ms",
        "5",
        "--max-size",
        "64",
    ]);
    let bus = t.bus();
    let mut sub = bus.subscribe::<Checked>("/kept").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    t.signal(first, Signal::SIGSTOP);
    t.kill_registry();
    t.start_registry();
    let err = t
        .bus()
        .publish::<Checked>("/kept")
        .err()
        .expect("a second publisher is refused while the first lives");
    assert!(
        matches!(err, bus::BusError::AlreadyPublished { .. }),
        "{err}"
    );
    t.signal(first, Signal::SIGCONT);
    let before = sub.meta().unwrap().sequence;
    common::eventually("the first publisher writes on", || {
        sub.update().unwrap();
        sub.meta().unwrap().sequence > before + 10
    });
    t.signal(first, Signal::SIGKILL);
}

/// Right after a restart, an adopted slot is not re-created larger for a new publisher while
/// the processes that map it may still be reconnecting (here a subscriber stopped while the
/// registry was down): the new publisher is told the slot is too small and in use, instead of
/// the subscriber being left on a file nobody writes.
#[test]
fn an_adopted_slot_is_not_recreated_under_processes_still_reconnecting() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut small = bus
        .publication("/grow")
        .unwrap()
        .capacity(64)
        .create::<Checked, bus::Serde>()
        .unwrap();
    small.wait_bound(WATCHDOG).unwrap();
    small.write(&Checked::new(1, 8)).unwrap();
    let reader = t.spawn_stress(&["read", "--name", "/grow", "--seconds", "60", "--wait"]);
    common::eventually("the reader bound", || {
        registry_listing(&t)
            .iter()
            .any(|s| s.name.as_str() == "/grow" && s.endpoints.len() == 2)
    });
    t.signal(reader, Signal::SIGSTOP);
    t.kill_registry();
    drop(small);
    t.start_registry();
    // A fresh client: connected at once, so the registry's answer comes with `create` (the old
    // client may still be reconnecting, and would hear the refusal later).
    let err = t
        .bus()
        .publication("/grow")
        .unwrap()
        .capacity(64 * 1024)
        .create::<Checked, bus::Serde>()
        .err()
        .expect("refused while the reader may still come back");
    assert!(
        matches!(err, bus::BusError::CapacityTooSmall { .. }),
        "{err}"
    );
    t.signal(reader, Signal::SIGCONT);
    t.signal(reader, Signal::SIGKILL);
}

/// A process whose endpoints wait for a registry says so once the wait lasts (a service started
/// before its registry looks ready otherwise), once, and says when one answers.
#[test]
fn a_process_says_it_waits_for_a_registry_and_when_one_answers() {
    let mut t = TestBus::new();
    // The simulator: a service, with subscriptions to the arbiters' commands.
    let reader = t.spawn_bin("robot-sim", &[]);
    let domain = t.domain.to_string();
    common::eventually("the simulator says no registry answers", || {
        t.stderr_of(reader).contains(&format!(
            "no registry-server answers on domain '{domain}': this process's publications and \
             subscriptions wait for one"
        ))
    });
    t.start_registry();
    common::eventually("the simulator says the registry answers", || {
        t.stderr_of(reader)
            .contains("answers: publications and subscriptions bind")
    });
    assert_eq!(
        t.stderr_of(reader)
            .matches("no registry-server answers")
            .count(),
        1,
        "said once"
    );
}

/// A registry restarted on a slot whose segment header was corrupted cannot adopt it and makes
/// it anew when its publisher registers again. The subscription that mapped the old memory
/// (nobody else sees it any more) says so, once, as its error, instead of reading it alone in
/// silence, and then follows the new slot; the publication goes on there, its last value
/// carried over.
#[test]
fn endpoints_whose_slot_the_registry_made_anew_say_so_or_follow() {
    let mut t = TestBus::new();
    let (bus, mut publication, mut subscription) = one_written_and_read(&mut t, "/anew/x");
    t.kill_registry();
    t.overwrite_segment("/anew/x", 0, b"garbage!");
    t.start_registry();
    common::eventually("the subscription says the slot was made anew", || {
        matches!(
            subscription.bind_error(),
            Some(bus::BusError::Replaced { .. })
        )
    });
    let text = subscription.bind_error().unwrap().to_string();
    assert!(text.contains("subscribe again"), "{text}");
    assert_eq!(publication.bind_error(), None);
    // Told once, the subscription follows the new slot by itself, starting afresh there.
    assert!(matches!(
        subscription.update(),
        Err(bus::BusError::Replaced { .. })
    ));
    assert!(subscription.wait_update(WATCHDOG).unwrap());
    assert_eq!(
        subscription.value(),
        Some(&1),
        "the last value, carried over"
    );
    assert_eq!(subscription.bind_error(), None);
    let mut again = bus.subscribe::<u64>("/anew/x").unwrap();
    assert!(again.wait_update(WATCHDOG).unwrap());
    assert_eq!(again.value(), Some(&1), "the last value, carried over");
    publication.write(&2).unwrap();
    assert!(again.wait_update(WATCHDOG).unwrap());
    assert_eq!(again.value(), Some(&2));
    assert!(subscription.wait_update(WATCHDOG).unwrap());
    assert_eq!(subscription.value(), Some(&2));
}

/// A slot made anew twice before a subscription's next update (its first successor made anew
/// in turn) is reported once: the subscription moves on to the newest slot, not to the one in
/// between, which would report `Replaced` a second time (and an application that subscribes
/// again on it would do so twice).
#[test]
fn a_slot_made_anew_twice_before_an_update_is_reported_once() {
    let mut t = TestBus::new();
    let (bus, mut publication, mut subscription) = one_written_and_read(&mut t, "/anew/twice");
    let mut made_anew = |expected: &str| {
        // A subscription made now watches the slot as it is, to tell when it was made anew.
        let witness = bus.subscribe::<u64>("/anew/twice").unwrap();
        witness.wait_bound(WATCHDOG).unwrap();
        t.kill_registry();
        t.overwrite_segment("/anew/twice", 0, b"garbage!");
        t.start_registry();
        common::eventually(expected, || {
            matches!(witness.bind_error(), Some(bus::BusError::Replaced { .. }))
        });
    };
    made_anew("the slot is made anew");
    made_anew("the slot is made anew again");
    publication.write(&2).unwrap();
    assert!(matches!(
        subscription.update(),
        Err(bus::BusError::Replaced { .. })
    ));
    assert!(
        subscription.wait_update(WATCHDOG).unwrap(),
        "no second report"
    );
    assert_eq!(subscription.value(), Some(&2));
    assert_eq!(subscription.bind_error(), None);
}

/// A value written while no registry answers is kept for the binding; a publication that ends
/// before any registry answered loses it, and says so rather than nothing.
#[test]
fn a_value_that_never_reached_the_bus_is_said() {
    let mut t = TestBus::new();
    let controller = t.spawn_bin(
        "robot-controller",
        &[
            "--name",
            "x",
            "--status",
            "compromising",
            "--duration-s",
            "0.5",
        ],
    );
    let out = t.finish(controller);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("/robot/controller/x: the value written was never published"),
        "{log}"
    );
}

/// Two endpoints contending for one name (a second publication, another type) in one process
/// made before any registry ran: the first one created wins, as it would with a registry
/// already running. (The endpoints used to register again in hash order: any could win.) Four
/// rounds, each a fresh process-side client and registry, so that a lucky order cannot pass.
#[test]
fn contenders_made_before_the_registry_are_settled_in_creation_order() {
    for _ in 0..4 {
        let mut t = TestBus::new();
        let bus = t.bus();
        let mut first = bus.publish::<String>("/contested").unwrap();
        first.write(&"first".into()).unwrap();
        let other_type = bus.subscribe::<u64>("/contested").unwrap();
        let second = bus.publish::<String>("/contested").unwrap();
        t.start_registry();
        first.wait_bound(WATCHDOG).unwrap();
        let refused = |e: Result<(), bus::BusError>| e.expect_err("refused");
        let err = refused(other_type.wait_bound(WATCHDOG));
        assert!(matches!(err, bus::BusError::TypeMismatch { .. }), "{err}");
        let err = refused(second.wait_bound(WATCHDOG));
        assert!(
            matches!(err, bus::BusError::AlreadyPublished { .. }),
            "{err}"
        );
        // The holder is this process: said so, with what to do (`p = bus.publish(..)` over a
        // publication makes the new one before dropping the old).
        assert!(
            err.to_string().contains("this process, pid ")
                && err
                    .to_string()
                    .contains("drop that one before making a new one"),
            "{err}"
        );
    }
}

/// A process whose second publication of a name was refused: across registry restarts the
/// first keeps the name and the second stays refused, so the slot keeps one writer. (The
/// second used to win half of the re-registrations, while the first went on writing its old
/// mapping.)
#[test]
fn a_refused_second_publication_stays_refused_across_registry_restarts() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let mut first = bus.publish::<String>("/flip").unwrap();
    first.write(&"first".into()).unwrap();
    first.wait_bound(WATCHDOG).unwrap();
    let second = bus.publish::<String>("/flip").err();
    assert!(
        matches!(second, Some(bus::BusError::AlreadyPublished { .. })),
        "{second:?}"
    );
    // The refused endpoint is dropped by `publish`; keep one alive that was refused later.
    let mut sub = bus.subscribe::<String>("/flip").unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    for round in 0..5 {
        t.kill_registry();
        // Created while no registry runs: not refused yet, registers at reconnection.
        let late = bus.publish::<String>("/flip").unwrap();
        t.start_registry();
        let err = late
            .wait_bound(WATCHDOG)
            .expect_err("the name stays the first's");
        assert!(
            matches!(err, bus::BusError::AlreadyPublished { .. }),
            "round {round}: {err}"
        );
        assert!(first.is_bound());
        first.write(&format!("round {round}")).unwrap();
        common::eventually("the first publication's value arrives", || {
            sub.update().unwrap();
            sub.value() == Some(&format!("round {round}"))
        });
    }
}

/// An older publication of this process, refused while another process held the name, and a
/// newer one bound after that process ended: across a registry restart the bound one keeps
/// the name. (Registering again in creation order alone gave it to the older one, while the
/// newer went on writing its old mapping: two writers of one slot.)
#[test]
fn a_bound_publication_registers_again_before_an_older_refused_one() {
    let mut t = TestBus::new();
    t.start_registry();
    let holder = t.spawn_stress(&[
        "write",
        "--name",
        "/held",
        "--count",
        "1",
        "--max-size",
        "32",
        "--linger",
        "60",
    ]);
    let published = |t: &TestBus| {
        registry_listing(t)
            .iter()
            .find(|s| s.name.as_str() == "/held")
            .map(|s| {
                s.endpoints
                    .iter()
                    .filter(|e| e.kind == bus::protocol::EndpointKind::Publication)
                    .map(|e| e.pid)
                    .collect::<Vec<_>>()
            })
    };
    common::eventually("the holder publishes", || {
        published(&t).is_some_and(|p| !p.is_empty())
    });
    t.kill_registry();
    let bus = t.bus();
    // Made while no registry runs, so kept, and refused once one answers.
    let older = bus.publish::<Checked>("/held").unwrap();
    t.start_registry();
    let err = older.wait_bound(WATCHDOG).expect_err("the holder lives");
    assert!(
        matches!(err, bus::BusError::AlreadyPublished { .. }),
        "{err}"
    );
    t.kill(holder);
    let me = std::process::id();
    let mut newer = None;
    common::eventually("the name free again", || {
        newer = bus.publish::<Checked>("/held").ok();
        newer.is_some()
    });
    let newer = newer.unwrap();
    newer.wait_bound(WATCHDOG).unwrap();
    t.kill_registry();
    t.start_registry();
    common::eventually("this process publishes again", || {
        published(&t).is_some_and(|p| p == [me])
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(newer.is_bound());
    assert!(!older.is_bound(), "the older publication took the name");
}

/// A value written before the registry answered, by a publication it then refused (the name
/// was another live process's), is not published when a registry accepts the publication
/// later: the writes after the refusal failed, and the kept value used to come out then as the
/// live writer's newest (an old command, say).
#[test]
fn a_value_kept_by_a_refused_publication_is_not_published_when_it_is_accepted_later() {
    let mut t = TestBus::new();
    t.start_registry();
    let first = t.spawn_stress(&[
        "write",
        "--name",
        "/kept/refused",
        "--max-size",
        "64",
        "--count",
        "3",
        "--linger",
        "60",
    ]);
    let bus = t.bus();
    let mut sub = bus.subscribe::<Checked>("/kept/refused").unwrap();
    common::eventually("the first process's three values", || {
        sub.update().unwrap();
        sub.value().is_some_and(|v| v.sequence == 3)
    });
    t.kill_registry();
    let mut late = bus
        .publication("/kept/refused")
        .unwrap()
        .capacity(128)
        .create::<Checked, bus::Serde>()
        .unwrap();
    late.write(&Checked::new(999, 64)).unwrap();
    t.start_registry();
    let refused = late
        .wait_bound(WATCHDOG)
        .expect_err("refused: the name is taken");
    assert!(
        matches!(refused, bus::BusError::AlreadyPublished { .. }),
        "{refused}"
    );
    // The first process dies, and a registry started again accepts the late publication.
    t.kill(first);
    t.kill_registry();
    t.start_registry();
    // The refusal stands until the new registry answers.
    common::eventually("the late publication is accepted", || {
        late.wait_bound(Duration::from_millis(50)).is_ok()
    });
    std::thread::sleep(Duration::from_millis(200));
    sub.update().unwrap();
    assert_eq!(sub.value().map(|v| v.sequence), Some(3));
    // Its own writes from now on are published.
    late.write(&Checked::new(4, 64)).unwrap();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().map(|v| v.sequence), Some(4));
}
