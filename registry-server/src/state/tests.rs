//! Unit tests of the registry's bookkeeping.

use super::*;
use bus::protocol::{Refusal, Registration};

pub(super) fn registration(name: &str, kind: EndpointKind, schema: &Schema) -> Registration {
    Registration {
        endpoint: 1,
        name: SlotName::public(name).unwrap(),
        kind,
        type_name: schema.type_name().into(),
        schema_hash: schema.hash().0,
        schema: schema.to_bytes(),
        capacity: 64,
    }
}

/// A client of the tests that is no running process (the registry here checks no pid).
fn client() -> Peer {
    Peer {
        pid: 1,
        start_time: 0,
        program: "t".into(),
    }
}

/// `host`'s claim of a name of type `schema`: published there (`kept_written_ns` 0), or a
/// gone publisher's value kept there, written at `kept_written_ns`.
fn claim(host: &str, schema: &Schema, kept_written_ns: u64) -> RemoteClaim {
    RemoteClaim {
        host: host.into(),
        type_name: schema.type_name().into(),
        schema_hash: schema.hash().0,
        writer_alive: kept_written_ns == 0,
        kept: kept_written_ns != 0,
        kept_written_ns,
    }
}

/// Removes a test domain's segments however the test ends.
pub(super) struct Cleanup(pub(super) Domain);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.0.remove_all_segments();
    }
}

#[test]
fn names_published_on_another_host_are_refused_with_the_host_and_type() {
    let mut reg = Registry::new(Domain::new("unit-remote").unwrap(), None);
    reg.connect(7, client());
    let theirs = Schema::of_serde::<u64>().unwrap();
    let ours = Schema::of_serde::<String>().unwrap();
    let name = SlotName::public("/remote/x").unwrap();
    reg.set_remote_claims(BTreeMap::from([(name, claim("hA", &theirs, 0))]));
    let out = reg.register(
        7,
        1,
        registration("/remote/x", EndpointKind::Publication, &theirs),
    );
    assert!(
        matches!(&out[0].2, Reply::Refused { refusal: Refusal::Failed { reason }, .. }
            if reason.contains("host 'hA' already publishes /remote/x")),
        "{out:?}"
    );
    assert_eq!(reg.conflicts, 1);
    let out = reg.register(
        7,
        2,
        registration("/remote/x", EndpointKind::Subscription, &ours),
    );
    assert!(
        matches!(&out[0].2, Reply::Refused { refusal: Refusal::TypeMismatch { slot_type, .. }, .. }
            if slot_type.contains("hA")),
        "{out:?}"
    );
    let out = reg.register(
        7,
        3,
        registration("/remote/x", EndpointKind::Subscription, &theirs),
    );
    assert!(
        matches!(&out[0].2, Reply::Registered { segment: None, .. }),
        "{out:?}"
    );
    assert_eq!(reg.wanted(), vec![SlotName::public("/remote/x").unwrap()]);
}

/// A name that turns out to be published on another host too is told to its local publisher
/// once, as a refusal of its bound publication, and the end of the conflict binds it again.
#[test]
fn a_publisher_learns_of_a_conflict_found_after_binding_and_of_its_end() {
    let domain = Domain::new(&format!("unit-elsewhere-{}", std::process::id())).unwrap();
    let _cleanup = Cleanup(domain.clone());
    let mut reg = Registry::new(domain.clone(), None);
    reg.connect(
        7,
        Peer {
            pid: std::process::id(),
            start_time: bus::process::own_start_time(),
            program: "t".into(),
        },
    );
    let schema = Schema::of_serde::<u64>().unwrap();
    let out = reg.register(
        7,
        1,
        registration("/both/x", EndpointKind::Publication, &schema),
    );
    assert!(matches!(out[0].2, Reply::Registered { .. }), "{out:?}");
    let name = SlotName::public("/both/x").unwrap();
    let conflict = BTreeMap::from([(name.clone(), "hB".to_owned())]);
    let out = reg.set_published_elsewhere(conflict.clone());
    assert!(
        matches!(&out[..], [(7, 0, Reply::Refused { endpoint: 1, refusal: Refusal::Failed { reason } })]
            if reason.contains("host 'hB' publishes /both/x too")),
        "{out:?}"
    );
    assert!(
        reg.set_published_elsewhere(conflict.clone()).is_empty(),
        "told once"
    );
    // Registered again (its process reconnected): the answer clears what it was told, so it
    // is told again.
    reg.disconnect(7);
    reg.connect(
        8,
        Peer {
            pid: std::process::id(),
            start_time: bus::process::own_start_time(),
            program: "t".into(),
        },
    );
    let out = reg.register(
        8,
        2,
        registration("/both/x", EndpointKind::Publication, &schema),
    );
    assert!(
        matches!(
            &out[..],
            [
                (8, 2, Reply::Registered { .. }),
                ..,
                (8, 0, Reply::Refused { .. })
            ]
        ),
        "{out:?}"
    );
    assert!(reg.set_published_elsewhere(conflict).is_empty());
    let out = reg.set_published_elsewhere(BTreeMap::new());
    assert!(
        matches!(&out[..], [(8, 0, Reply::Bound { endpoint: 1, .. })]),
        "{out:?}"
    );
}

/// A gone publisher's value kept here is offered to other hosts (announced as kept), is not
/// swapped for a value kept on another host, yields to a publisher on another host, and is
/// forgotten, unused, once that publisher has written; a kept value elsewhere refuses nothing.
#[test]
fn a_kept_value_is_announced_and_yields_to_a_publisher_elsewhere() {
    let domain = Domain::new(&format!("unit-kept-{}", std::process::id())).unwrap();
    let _cleanup = Cleanup(domain.clone());
    let mut reg = Registry::new(domain, None);
    let me = || Peer {
        pid: std::process::id(),
        start_time: bus::process::own_start_time(),
        program: "t".into(),
    };
    let schema = Schema::of_serde::<u64>().unwrap();
    let name = SlotName::public("/kept/x").unwrap();
    reg.connect(7, me());
    reg.register(
        7,
        1,
        registration("/kept/x", EndpointKind::Publication, &schema),
    );
    let slot = reg.slots[&name].slot.as_ref().expect("slot");
    slot.write_at(&5u64.to_le_bytes(), 1).expect("write");
    assert!(!reg.local_publications()[0].kept, "published");
    reg.disconnect(7);
    let announced = reg.local_publications();
    assert_eq!(announced.len(), 1);
    assert!(announced[0].kept && !announced[0].writer_alive);

    // A value kept on hB, written at `kept_written_ns` (this one was written at 1), or a
    // publisher there (0).
    let claim = |kept_written_ns: u64| claim("hB", &schema, kept_written_ns);
    reg.connect(8, me());
    reg.register(
        8,
        2,
        registration("/kept/x", EndpointKind::Subscription, &schema),
    );
    reg.set_remote_claims(BTreeMap::from([(name.clone(), claim(1))]));
    assert!(
        reg.wanted().is_empty(),
        "not swapped for a value kept elsewhere, as old"
    );
    reg.set_remote_claims(BTreeMap::from([(name.clone(), claim(2))]));
    assert_eq!(
        reg.wanted(),
        vec![name.clone()],
        "a newer kept value is taken"
    );
    reg.set_remote_claims(BTreeMap::from([(name.clone(), claim(0))]));
    assert_eq!(
        reg.wanted(),
        vec![name.clone()],
        "a publisher elsewhere is followed"
    );

    // Another type may be published where the name is only kept elsewhere.
    let other = SlotName::public("/kept/y").unwrap();
    reg.set_remote_claims(BTreeMap::from([
        (name.clone(), claim(0)),
        (other, claim(2)),
    ]));
    let text = Schema::of_serde::<String>().unwrap();
    let out = reg.register(
        8,
        3,
        registration("/kept/y", EndpointKind::Publication, &text),
    );
    assert!(matches!(out[0].2, Reply::Registered { .. }), "{out:?}");
    assert_eq!(reg.conflicts, 0);

    // Unused, its value replaced by the publisher on hB: forgotten at the next sweep.
    reg.disconnect(8);
    let forgotten = reg.reclaim_unused(Instant::now());
    assert_eq!(forgotten, vec![name.clone()]);
    assert!(!reg.slots.contains_key(&name));
}

/// A tool's `Follow` of a name only another host publishes waits for that host's schema: one
/// of another hash or from another host is ignored, the announced one makes the name a
/// subscribed slot of that type (wanted from the host), which a typed subscriber then joins;
/// a name no host has is refused, and a reader whose connection closes is forgotten.
#[test]
fn a_reader_of_a_remote_name_waits_for_its_schema() {
    let mut reg = Registry::new(Domain::new("unit-readers").unwrap(), None);
    for conn in [7, 8, 9] {
        reg.connect(conn, client());
    }
    let theirs = Schema::of_serde::<u64>().unwrap();
    let other = Schema::of_serde::<String>().unwrap();
    let name = SlotName::public("/remote/x").unwrap();
    let out = reg.follow(7, 1, 1, SlotName::public("/remote/none").unwrap());
    assert!(
        matches!(&out[..], [(7, 1, Reply::Refused { refusal: Refusal::Failed { reason }, .. })]
            if reason.contains("no other host announces it")),
        "{out:?}"
    );
    // Only subscribed to here, published nowhere: nothing to read either.
    reg.register(
        9,
        1,
        registration("/remote/pending", EndpointKind::Subscription, &theirs),
    );
    let out = reg.follow(7, 1, 1, SlotName::public("/remote/pending").unwrap());
    assert!(
        matches!(&out[..], [(7, 1, Reply::Refused { .. })]),
        "{out:?}"
    );
    reg.set_remote_claims(BTreeMap::from([(name.clone(), claim("hA", &theirs, 0))]));
    let out = reg.follow(7, 2, 1, name.clone());
    assert!(
        matches!(&out[..], [(7, 2, Reply::Registered { segment: None, .. })]),
        "{out:?}"
    );
    let out = reg.follow(8, 2, 1, name.clone());
    assert_eq!(out.len(), 1);
    assert_eq!(reg.schema_wants(), vec![name.clone()]);
    assert!(!reg.wanted().contains(&name), "no values before the schema");

    assert!(reg.schema_heard(&name, "hA", &other.to_bytes()).is_empty());
    assert!(reg.schema_heard(&name, "hB", &theirs.to_bytes()).is_empty());
    assert_eq!(reg.schema_wants(), vec![name.clone()], "still asked for");

    // Connection 8 closes: only 7's reader is left.
    reg.disconnect(8);
    reg.schema_heard(&name, "hA", &theirs.to_bytes());
    assert!(reg.schema_wants().is_empty());
    assert!(reg.wanted().contains(&name));
    let entry = &reg.slots[&name];
    assert_eq!(entry.schema.hash, theirs.hash());
    let readers: Vec<u64> = entry.endpoints.iter().map(|e| e.conn).collect();
    assert_eq!(readers, [7]);
    // A typed subscriber of the publisher's type joins the same entry.
    let out = reg.register(
        9,
        3,
        registration("/remote/x", EndpointKind::Subscription, &theirs),
    );
    assert!(matches!(&out[0].2, Reply::Registered { .. }), "{out:?}");
    assert_eq!(reg.slots[&name].endpoints.len(), 2);
    // Followed twice by the same endpoint: still one reader.
    reg.follow(7, 4, 1, name.clone());
    assert_eq!(reg.slots[&name].endpoints.len(), 2);

    // A kept value of one type there, subscribers of another type waiting here (a publisher
    // of theirs may come): a reader is refused, not left waiting for a mirror that never
    // comes; so is one that waited for the schema when such a subscriber registered.
    let kept = SlotName::public("/remote/kept").unwrap();
    let mut claims = reg.remote.clone();
    claims.insert(kept.clone(), claim("hA", &theirs, 1));
    reg.set_remote_claims(claims);
    reg.follow(7, 5, 2, kept.clone());
    assert_eq!(reg.schema_wants(), vec![kept.clone()]);
    let out = reg.register(
        9,
        6,
        registration("/remote/kept", EndpointKind::Subscription, &other),
    );
    assert!(
        out.iter().any(|(conn, _, r)| *conn == 7
            && matches!(
                r,
                Reply::Refused {
                    endpoint: 2,
                    refusal: Refusal::TypeMismatch { .. }
                }
            )),
        "{out:?}"
    );
    let out = reg.follow(7, 7, 3, kept.clone());
    let refusal = match &out[..] {
        [(7, 7, Reply::Refused { refusal, .. })] => refusal,
        other => panic!("{other:?}"),
    };
    assert!(
        matches!(refusal, Refusal::TypeMismatch { slot_type, .. }
            if slot_type.contains("subscribers here wait for it as")),
        "{refusal:?}"
    );
}

/// A publisher killed and started again at once, while the registry had not read the end of
/// the dead one's connection yet: the successor takes the name (it used to be refused as a
/// second publisher, and exited); a second publisher of a live process is still refused.
#[test]
fn a_successor_takes_the_name_of_a_publisher_that_died_unnoticed() {
    let domain = Domain::new(&format!("unit-successor-{}", std::process::id())).unwrap();
    let _cleanup = Cleanup(domain.clone());
    let mut reg = Registry::new(domain.clone(), None);
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = exited.id();
    exited.wait().unwrap();
    let me = || Peer {
        pid: std::process::id(),
        start_time: bus::process::own_start_time(),
        program: "t".into(),
    };
    reg.connect(
        7,
        Peer {
            pid: dead_pid,
            start_time: bus::process::own_start_time(),
            program: "killed".into(),
        },
    );
    reg.connect(8, me());
    reg.connect(9, me());
    let schema = Schema::of_serde::<u64>().unwrap();
    let publication = registration("/restarted/x", EndpointKind::Publication, &schema);
    let out = reg.register(7, 1, publication.clone());
    assert!(matches!(out[0].2, Reply::Registered { .. }), "{out:?}");
    let out = reg.register(8, 1, publication.clone());
    assert!(matches!(out[0].2, Reply::Registered { .. }), "{out:?}");
    assert!(
        reg.peers().all(|(conn, _)| conn != 7),
        "the dead one's connection is closed"
    );
    assert_eq!(reg.take_closed(), [7], "for the server to shut down");
    assert!(reg.take_closed().is_empty());
    let second = Registration {
        endpoint: 2,
        ..publication
    };
    let out = reg.register(9, 1, second);
    assert!(
        matches!(
            out[0].2,
            Reply::Refused {
                refusal: Refusal::AlreadyPublished { .. },
                ..
            }
        ),
        "{out:?}"
    );
}

/// A client's program name is a label repeated in every listing: a huge one is cut (on a
/// character boundary) so one client cannot make the listing too big to send.
#[test]
fn a_long_program_name_is_cut_on_a_character_boundary() {
    let mut reg = Registry::new(Domain::new("unit-program").unwrap(), None);
    reg.connect(7, client());
    reg.set_program(7, "é".repeat(3_000_000));
    let kept = &reg.peers[&7].program;
    assert_eq!(kept.chars().count(), MAX_PROGRAM_CHARS + 1);
    assert!(kept.ends_with("é…"), "{kept}");
    reg.set_program(7, "robot-sim".into());
    assert_eq!(reg.peers[&7].program, "robot-sim");
}
