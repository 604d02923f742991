//! Unit tests of the registry's bookkeeping.

use super::*;

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
