//! Forged datagrams without a key, across hosts made of network namespaces: a datagram that
//! fails validation must leave nothing behind, and a validly formed one claiming a session far
//! ahead of the real host's must shut that host out only until it is forgotten; names that
//! would put terminal escapes into `bus-inspect`'s output are dropped.

mod common;
mod netns;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

use common::summary;
use netns::{capture_from, eventually, Lab, DOMAIN, PORT};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// A datagram as a registry of `DOMAIN` would send it (see `registry-server/src/net/wire.rs`),
/// without a MAC: one whole message on `channel`.
fn datagram(sender: &str, session: u64, channel: u64, body: &[u8]) -> Vec<u8> {
    let fnv = |s: &str| bus::schema::fnv1a64(s.as_bytes());
    let mut d = registry::net::wire::MAGIC.to_vec();
    // The wire version of this build: a datagram of another is dropped before validation.
    d.extend_from_slice(&[registry::net::wire::VERSION, 0, 0, 0]);
    for v in [fnv(DOMAIN), fnv(sender), session, 1, channel, 1] {
        d.extend_from_slice(&v.to_le_bytes());
    }
    let len = body.len() as u32;
    for v in [len, 0, len, len] {
        d.extend_from_slice(&v.to_le_bytes());
    }
    d.extend_from_slice(body);
    d
}

/// Sends `datagram` from host C to host `to`'s discovery port.
fn send_from_c(lab: &Lab, to: usize, datagram: Vec<u8>) {
    let to: SocketAddr = format!("{}:{PORT}", lab.hosts[to].ip).parse().unwrap();
    lab.in_netns(C, move || {
        let out = UdpSocket::bind("0.0.0.0:0").unwrap();
        out.send_to(&datagram, to).unwrap();
    });
}

/// Registries on A and B, A's values reaching B; then one datagram of A's, captured on C with
/// the header's word at `at` (24: session, 32: packet number) set to `value`, sent from C to B.
/// Without a key it is a valid datagram of A's.
fn forge_a_to_b(lab: &mut Lab, at: usize, value: u64) {
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    lab.write_from(A, "/steady", "100000", "20", "32");
    let r = lab.read_until(B, "/steady", "10", "15");
    assert!(summary(&lab.finish(r))["last"].as_u64() >= Some(10));
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    let mut forged = lab.in_netns(C, move || capture_from(a_ip));
    forged[at..at + 8].copy_from_slice(&value.to_le_bytes());
    send_from_c(lab, B, forged);
}

fn hears_a(lab: &Lab) -> bool {
    lab.stats(B).is_some_and(|s| {
        s["peers"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["host"] == "hA"))
    })
}

/// The tester's datagram: host A's id, a session far ahead, an announcement channel and a body
/// that is no message. Dropped as malformed, it used to move B's replay window to that session
/// first, and every later announcement of A was refused as a replay: a publication A made
/// afterwards never reached B.
#[test]
fn a_datagram_that_fails_validation_leaves_nothing_behind() {
    let mut lab = Lab::new(3);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    eventually("B hears A", || hears_a(&lab));
    send_from_c(&lab, B, datagram("hA", u64::MAX, 0, b"\x09junk"));
    eventually("B drops the forged datagram as malformed", || {
        lab.dropped(B, "malformed") > 0
    });
    lab.write_from(A, "/after", "100000", "20", "32");
    let r = lab.read_until(B, "/after", "20", "15");
    let s = summary(&lab.finish(r));
    assert!(s["last"].as_u64() >= Some(20), "B never learnt /after: {s}");
    assert_eq!(lab.dropped(B, "replayed"), 0, "{:?}", lab.stats(B));
}

/// An announcement whose publication's type name holds a control character (a terminal
/// escape, written out by `bus-inspect list --remote` and `get` on the computer that heard it)
/// is dropped as malformed, and the name is not listed. A Rust type's name never has one.
#[test]
fn an_announced_type_name_with_a_control_character_is_dropped() {
    use registry::net::wire::{encode_announce, Announce, PubInfo, ANNOUNCE_CHANNEL};
    let mut lab = Lab::new(3);
    lab.start_registry(B, &[], &[]);
    let announce = |type_name: &str| {
        let a = Announce {
            host: "hC".into(),
            data_port: PORT,
            interval_ms: 500,
            generation: 1,
            part: 0,
            parts: 1,
            publications: vec![PubInfo {
                name: "/forged".into(),
                type_name: type_name.into(),
                schema_hash: 3,
                capacity: 64,
                writer_alive: true,
                writer_first: 0,
                series: 1,
                kept: false,
                kept_written_ns: 0,
            }],
            wants: vec![],
        };
        let mut body = Vec::new();
        encode_announce(&a, &mut body).unwrap();
        body
    };
    // Sent until counted: the first datagrams from a namespace just made may be lost.
    let bad = datagram("hC", 1, ANNOUNCE_CHANNEL, &announce("T\x1b[2J"));
    eventually("B drops the announcement as malformed", || {
        send_from_c(&lab, B, bad.clone());
        lab.dropped(B, "malformed") > 0
    });
    assert!(lab.directory_entry(B, "/forged").is_none());
    // The same announcement with a plain name is heard: the drop was for the name.
    let good = datagram("hC", 2, ANNOUNCE_CHANNEL, &announce("T"));
    eventually("B lists hC's publication", || {
        send_from_c(&lab, B, good.clone());
        lab.directory_entry(B, "/forged").is_some()
    });
}

/// Without a key anyone can forge a valid announcement of A's claiming a session far ahead:
/// B follows it, and refuses A's real datagrams (an older session) meanwhile. That lasts until
/// B forgets the silent forged session; A must then be taken back (B used to keep the forged
/// session's replay window, and refused A for ever).
#[test]
fn a_forged_session_far_ahead_shuts_the_real_host_out_only_until_forgotten() {
    let mut lab = Lab::new(3);
    forge_a_to_b(&mut lab, 24, u64::MAX);
    eventually("B refuses A's real announcements meanwhile", || {
        lab.dropped(B, "replayed") > 0
    });
    // Forgotten after --forget-ms (1.5 s in the lab), A is heard again and its values flow.
    let r = lab.read_for(B, "/steady", "12");
    let s = summary(&lab.finish(r));
    assert!(
        s["reads"].as_u64() >= Some(20),
        "B must take A back once the forged session is forgotten: {s}"
    );
    assert!(hears_a(&lab), "{:?}", lab.stats(B));
}

/// Without a key anyone can forge A's farewell (an announcement expecting no next one) with a
/// session far ahead: B forgets A, as it must for a real farewell, and then takes A back at its
/// next announcement. B used to commit the farewell's session to a replay window that
/// outlived A's forgetting, and refused A's real datagrams as replays for good (as it would a
/// computer back after a clean stop with a clock set earlier).
#[test]
fn a_forged_farewell_far_ahead_does_not_shut_the_real_host_out() {
    let mut lab = Lab::new(3);
    lab.start_registry(A, &[], &[]);
    lab.start_registry(B, &[], &[]);
    eventually("B hears A", || hears_a(&lab));
    let farewell = registry::net::wire::Announce {
        host: "hA".into(),
        data_port: PORT,
        interval_ms: 0,
        generation: 1,
        part: 0,
        parts: 1,
        publications: Vec::new(),
        wants: Vec::new(),
    };
    let mut body = Vec::new();
    registry::net::wire::encode_announce(&farewell, &mut body).unwrap();
    send_from_c(&lab, B, datagram("hA", u64::MAX, 0, &body));
    eventually("B forgets A on the forged farewell", || {
        lab.log(B).contains("host 'hA' left")
    });
    lab.write_from(A, "/after", "100000", "20", "32");
    let r = lab.read_until(B, "/after", "20", "15");
    let s = summary(&lab.finish(r));
    assert!(s["last"].as_u64() >= Some(20), "B never took A back: {s}");
    assert!(hears_a(&lab), "{:?}", lab.stats(B));
}

/// Empty datagrams are dropped and counted as truncated, as any other too short to be a
/// message (they used to be neither: the receive loop found no datagram in an empty read).
#[test]
fn empty_datagrams_are_dropped_and_counted() {
    let mut lab = Lab::new(3);
    lab.start_registry(B, &[], &[]);
    eventually("B publishes its statistics", || lab.stats(B).is_some());
    let before = lab.dropped(B, "truncated");
    for _ in 0..3 {
        send_from_c(&lab, B, Vec::new());
    }
    eventually("B counts the three empty datagrams", || {
        lab.dropped(B, "truncated") >= before + 3
    });
}

/// Without a key anyone can also forge a valid announcement of A's in A's own session, with a
/// packet number far ahead: B's window moved there and every real announcement of A's after it
/// was refused as older than the window, for good (A, whose values kept it heard, was never
/// forgotten), and B took A to be at the forger's address (network review by running).
#[test]
fn a_forged_packet_number_far_ahead_does_not_shut_the_real_host_out() {
    let mut lab = Lab::new(3);
    forge_a_to_b(&mut lab, 32, 1_000_000_000_000);
    let a_ip: Ipv4Addr = lab.hosts[A].ip.parse().unwrap();
    // A announces every 100 ms in the lab: refused as replays, they would add up here.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let before = lab.dropped(B, "replayed");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let after = lab.dropped(B, "replayed");
    assert!(
        after <= before + 1,
        "B refuses A's real announcements: {before} replays, then {after}; {:?}",
        lab.stats(B)
    );
    let at_a = |s: &serde_json::Value| {
        s["peers"].as_array().is_some_and(|p| {
            p.iter().any(|p| {
                p["host"] == "hA"
                    && p["address"]
                        .as_str()
                        .is_some_and(|a| a.starts_with(&format!("{a_ip}:")))
            })
        })
    };
    eventually("B names A at its own address again", || {
        lab.stats(B).is_some_and(|s| at_a(&s))
    });
    lab.write_from(A, "/after", "100000", "20", "32");
    let r = lab.read_until(B, "/after", "20", "15");
    let s = summary(&lab.finish(r));
    assert!(s["last"].as_u64() >= Some(20), "B never learnt /after: {s}");
}
