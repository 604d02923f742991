//! Local clients that misuse the registry's socket: they may lose their own connection, never
//! the registry's memory or its service to everyone else.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bus::protocol::{encode_frame, EndpointKind, Registration, Request};
use bus::schema::Schema;
use bus::SlotName;
use common::{TestBus, WATCHDOG};

/// The most memory the registry has held (`VmHWM`), in MiB.
fn peak_rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("registry status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/pid/status");
    kib >> 10
}

/// A client that asks for listing after listing and reads none: the answers used to queue in
/// the registry without bound (a 100 KB listing asked 3,000 times held 300 MB). Now the
/// registry lets at most 64 MiB wait, then closes that connection and serves on.
#[test]
fn a_client_that_asks_for_listings_and_reads_none_is_disconnected_not_fed() {
    let mut t = TestBus::new();
    t.start_registry();
    let registry_pid = t.pid(t.registry());
    let before = peak_rss_mib(registry_pid);

    let mut client = bus::protocol::connect(&t.domain).expect("connect");
    let mut requests = encode_frame(
        1,
        &Request::Hello {
            program: "p".repeat(200),
        },
    )
    .unwrap();
    // 200 waiting subscriptions with long names: a listing of about 100 KB.
    let schema = Schema::of_serde::<u64>().unwrap();
    for endpoint in 0..200u64 {
        let name = format!("/hostile/{endpoint:03}/{}", "n".repeat(180));
        let registration = Registration {
            endpoint,
            name: SlotName::public(&name).unwrap(),
            kind: EndpointKind::Subscription,
            type_name: schema.type_name().into(),
            schema_hash: schema.hash().0,
            schema: schema.to_bytes(),
            capacity: 0,
        };
        requests.extend(encode_frame(2 + endpoint, &Request::Register(registration)).unwrap());
    }
    client.write_all(&requests).expect("register");
    let list = encode_frame(1000, &Request::List).unwrap();
    let mut closed = false;
    for _ in 0..3000 {
        if client.write_all(&list).is_err() {
            closed = true;
            break;
        }
    }

    // The connection ends: what was written before the registry gave up on it, then its end.
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + WATCHDOG;
    let mut buf = vec![0u8; 1 << 20];
    while !closed {
        assert!(
            Instant::now() < deadline,
            "the registry kept the connection"
        );
        match client.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => closed = true,
        }
    }
    let grown = peak_rss_mib(registry_pid).saturating_sub(before);
    assert!(
        grown < 160,
        "the registry grew by {grown} MiB for one client's unread answers"
    );
    // The others are still served.
    let out = t.inspect(&["endpoints"]);
    assert!(out.status.success(), "{out:?}");
}
