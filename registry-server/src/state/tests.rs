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

#[test]
fn names_published_on_another_host_are_refused_with_the_host_and_type() {
    let mut reg = Registry::new(Domain::new("unit-remote").unwrap(), None);
    reg.connect(
        7,
        Peer {
            pid: 1,
            start_time: 0,
            program: "t".into(),
        },
    );
    let theirs = Schema::of_serde::<u64>().unwrap();
    let ours = Schema::of_serde::<String>().unwrap();
    let name = SlotName::public("/remote/x").unwrap();
    reg.set_remote_claims(BTreeMap::from([(
        name,
        RemoteClaim {
            host: "hA".into(),
            type_name: theirs.type_name().into(),
            schema_hash: theirs.hash().0,
            writer_alive: true,
            kept: false,
        },
    )]));
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
    /// Removes the test's segments however it ends.
    struct Cleanup(Domain);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = self.0.remove_all_segments();
        }
    }
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
