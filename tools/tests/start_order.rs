//! Any start order delivers the value, and a registry killed and restarted under running
//! publishers and subscribers loses nothing.

mod common;

use std::time::Duration;

use common::{summary, TestBus, WATCHDOG};
use nix::sys::signal::Signal;
use tools::stress::Checked;

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
    publication.write(&"before the registry".into()).unwrap();
    assert!(!sub.update().unwrap(), "a value without a registry");
    assert!(sub.value().is_none());
    assert!(!publication.is_bound());
    t.start_registry();
    assert!(sub.wait_update(WATCHDOG).unwrap());
    assert_eq!(sub.value().unwrap(), "before the registry");
    assert_eq!(
        sub.meta().unwrap().sequence,
        1,
        "only the last value is kept"
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
        let reply = bus::protocol::ask(&t.domain, &bus::protocol::Request::List).unwrap();
        let bus::protocol::Reply::Listing { slots } = reply else {
            return false;
        };
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
