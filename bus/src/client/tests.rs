//! The client's binding, raced against the publication's own thread (no registry needed: the
//! test binds the endpoint itself, as the client thread does when the registry answers).

use std::sync::atomic::AtomicU8;
use std::sync::Barrier;

use super::*;
use crate::names::SlotName;
use crate::schema::Schema;

/// Large enough that a write takes long, so that two writers overlap when they can.
const SIZE: usize = 64 * 1024;

/// A value written while the registry was binding the endpoint never shares the slot with the
/// value kept from before binding: one writer per slot, so no read is torn, every value has
/// its own sequence number, and the last value written is the one the slot keeps.
#[test]
fn binding_never_writes_beside_the_publication() {
    let domain = Domain::new(&format!("unit-bind-{}", std::process::id())).unwrap();
    let client = ClientShared::start(domain.clone()).unwrap();
    let schema = Schema::of_serde::<Vec<u8>>().unwrap();
    let values: Vec<Vec<u8>> = (0..=255u8).map(|v| vec![v; SIZE]).collect();
    for trial in 0..150 {
        let name = SlotName::public(&format!("/unit/bind{trial}")).unwrap();
        let registration = Registration {
            endpoint: 0,
            name: name.clone(),
            kind: EndpointKind::Publication,
            type_name: schema.type_name().into(),
            schema_hash: schema.hash().0,
            schema: schema.to_bytes(),
            capacity: SIZE as u64,
        };
        let endpoint = client.register(registration).unwrap();
        let segment = domain.segment_name(&name);
        let _ = crate::shm::unlink(&segment);
        let slot = Slot::create(&segment, &name, &schema, SIZE, None).unwrap();
        let start = Barrier::new(3);
        let (done, last_written) = (AtomicBool::new(false), AtomicU8::new(0));
        let (mut torn, mut out_of_order) = (0u32, 0u32);
        std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                std::thread::sleep(Duration::from_micros(200));
                endpoint.bind(slot);
            });
            s.spawn(|| {
                start.wait();
                let (mut k, mut after_binding) = (1u8, 0);
                while after_binding < 3 {
                    let bound = endpoint.slot.get().is_some();
                    endpoint.publish_bytes(&values[usize::from(k)]).unwrap();
                    last_written.store(k, Ordering::SeqCst);
                    k = k % 250 + 1;
                    after_binding += u32::from(bound);
                }
                done.store(true, Ordering::SeqCst);
            });
            start.wait();
            let (mut seen, mut out) = (0, Vec::new());
            while !done.load(Ordering::SeqCst) {
                let Some(slot) = endpoint.slot.get() else {
                    continue;
                };
                if let Some(info) = slot.read(seen, &mut out).unwrap() {
                    torn += u32::from(out.iter().any(|&b| b != out[0]));
                    out_of_order += u32::from(info.sequence < seen);
                    seen = info.sequence;
                }
            }
        });
        let slot = endpoint.slot.get().unwrap();
        let mut last = Vec::new();
        slot.read(0, &mut last).unwrap().unwrap();
        let _ = crate::shm::unlink(&segment);
        assert_eq!(torn, 0, "trial {trial}: torn values passed the seqlock");
        assert_eq!(out_of_order, 0, "trial {trial}: sequence went back");
        assert!(
            last.iter().all(|&b| b == last[0]),
            "trial {trial}: a torn value stayed in the slot"
        );
        assert_eq!(
            last[0],
            last_written.load(Ordering::SeqCst),
            "trial {trial}: the slot keeps an older value than the last written"
        );
    }
}
