//! An endpoint whose slot the registry made anew goes on in the new one.
//!
//! The registry makes a slot anew when its segment was damaged (removed, cut short, its header
//! overwritten) and sends every endpoint bound to it the segment again. An endpoint never
//! moves to another mapping under the application (`Endpoint::slot` is set once), so it gets a
//! successor: an endpoint of the same registration (the registry knows the registration as
//! bound to the new slot already) mapped onto the new memory. A `Publication` takes it over at
//! its next write, silently; a `Subscription` first reports `BusError::Replaced` once (an
//! application may subscribe again, as before), then takes it over at its next update and
//! starts afresh there (`Endpoint::current`).
//!
//! Invariants:
//! - One writer per slot. The client thread writes into the new slot (a publication's value
//!   carried over) only before the successor is published in `Endpoint::successor`; the
//!   application's thread writes into it only after it found the successor. `successor` is set
//!   before `replaced`, so whoever sees `replaced` finds the successor (the `OnceLock`s'
//!   release and acquire).
//! - One registration. The successor inherits the endpoint number, so the old endpoint's drop
//!   leaves the unregistering to the successor (`Drop for Endpoint`).
//!
//! A value written into the old memory between the copy and the moment the publication takes
//! the successor over reaches nobody until the next write: a write that happens during the
//! registry's repair. Only this publication's own value is carried over: one its process did
//! not write (an earlier writer's, gone) must not read as a live writer's in the new slot.

use std::sync::{Arc, Mutex, OnceLock};

use super::{lock, ClientShared, Endpoint};
use crate::error::BusError;
use crate::protocol::EndpointKind;
use crate::slot::Slot;

/// What `ClientShared::follow` did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Followed {
    /// A successor is bound to the new slot.
    Successor,
    /// The segment named is still the memory mapped: nothing was made anew yet.
    SameMemory,
}

impl ClientShared {
    /// Gives `old`, bound to `old_slot`, a successor bound to `segment`; a publication's last
    /// value in the old memory is carried over when the new slot holds none (a cut segment
    /// reads as holding nothing: its pages are gone), and the publication is marked replaced
    /// (its next write moves on). A subscription is marked by the caller, which also says so.
    pub(super) fn follow(
        &self,
        old: &Arc<Endpoint>,
        old_slot: &Slot,
        segment: &str,
    ) -> Result<Followed, BusError> {
        let name = &old.registration.name;
        let slot = Slot::open(segment, true).map_err(BusError::from)?;
        if slot.file() == old_slot.file() {
            // Only this process's mapping lost pages of it (cut and grown back), and the
            // registry has made nothing anew yet. The next read or write here spoils the
            // header so that it does (`Slot::tell_lost_pages`); followed then.
            return Ok(Followed::SameMemory);
        }
        old.check(&slot)?;
        let publication = old.registration.kind == EndpointKind::Publication;
        let mut carried = "the new slot already held a value";
        if publication && slot.latest_sequence() == 0 {
            carried = carry_own_value(old, old_slot, &slot);
        }
        let successor = Arc::new(Endpoint {
            registration: old.registration.clone(),
            slot: OnceLock::from(slot),
            // A refusal that still holds (another computer publishes the name) goes on.
            error: Mutex::new(
                old.error()
                    .filter(|e| !matches!(e, BusError::Replaced { .. })),
            ),
            replaced: OnceLock::new(),
            successor: OnceLock::new(),
            pending: Mutex::new(None),
            client: Arc::clone(&old.client),
        });
        let weak = Arc::downgrade(&successor);
        if old.successor.set(successor).is_err() {
            // Unreachable: the client thread alone sets it, once per endpoint (the registry's
            // later answers go to the successor, which `state.endpoints` names from here on).
            return Ok(Followed::Successor);
        }
        lock(&self.state)
            .endpoints
            .insert(old.registration.endpoint, weak);
        if publication {
            let _ = old.replaced.set(BusError::Replaced {
                name: name.to_string(),
                segment: old_slot.segment().to_owned(),
            });
            // Readers asleep on the old memory (this process's and others') would sleep for
            // ever: woken, they find it replaced.
            old_slot.wake_all_waiters();
            tracing::warn!(
                "{name}: the registry made the slot anew (its memory was damaged); this \
                 publication writes into the new one ({carried})"
            );
        }
        Ok(Followed::Successor)
    }
}

/// Copies `old`'s last value in `old_slot` into `slot`, with its write time, if `old` wrote it
/// (its process and endpoint are the old slot's recorded writer, from its first value on);
/// says what became of it.
fn carry_own_value(old: &Endpoint, old_slot: &Slot, slot: &Slot) -> &'static str {
    let mut value = Vec::new();
    let info = match old_slot.read(0, &mut value) {
        Ok(Some(info)) => info,
        Ok(None) => return "no value was left in the old memory to carry over",
        Err(_) => return "the old memory no longer read as a value",
    };
    let writer = old_slot.writer_of(Some(info.sequence));
    if writer.pid != std::process::id() || writer.endpoint != old.registration.endpoint {
        return "the value in the old memory was not its own: not carried over";
    }
    match slot.write_at(&value, info.write_time_ns) {
        Ok(_) => "its last value carried over",
        Err(_) => "its last value could not be carried over",
    }
}
