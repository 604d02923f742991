//! A publication whose slot the registry made anew goes on writing into the new one.
//!
//! The registry makes a slot anew when its segment was damaged (removed, cut short, its header
//! overwritten) and sends every endpoint bound to it the segment again. An endpoint never
//! moves to another mapping under the application (`Endpoint::slot` is set once), so a
//! publication gets a successor: an endpoint of the same registration (the registry knows the
//! registration as bound to the new slot already) mapped onto the new memory, which the
//! `Publication` takes over at its next write (`Endpoint::current`).
//!
//! Invariants:
//! - One writer per slot. The client thread writes into the new slot (the value carried over)
//!   only before the successor is published in `Endpoint::successor`; the application's thread
//!   writes into it only after it found the successor. `successor` is set before `replaced`,
//!   so a publication that sees `replaced` on its write path finds the successor (the
//!   `OnceLock`s' release and acquire).
//! - One registration. The successor inherits the endpoint number, so the old endpoint's drop
//!   leaves the unregistering to the successor (`Drop for Endpoint`).
//!
//! A value written into the old memory between the copy and the moment the publication takes
//! the successor over reaches nobody until the next write: a write that happens during the
//! registry's repair.

use std::sync::{Arc, Mutex, OnceLock};

use super::{lock, ClientShared, Endpoint};
use crate::error::BusError;
use crate::slot::Slot;

impl ClientShared {
    /// Gives publication `old`, bound to `old_slot`, a successor bound to `segment`, with the
    /// last value of the old memory carried over when the new slot holds none (a cut segment
    /// reads as holding nothing: its pages are gone).
    pub(super) fn follow(
        &self,
        old: &Arc<Endpoint>,
        old_slot: &Slot,
        segment: &str,
    ) -> Result<(), BusError> {
        let name = &old.registration.name;
        let slot = Slot::open(segment, true).map_err(BusError::from)?;
        old.check(&slot)?;
        let mut carried = "the new slot already held a value";
        if slot.latest_sequence() == 0 {
            let mut value = Vec::new();
            carried = match old_slot.read(0, &mut value) {
                Ok(Some(info)) => match slot.write_at(&value, info.write_time_ns) {
                    Ok(_) => "its last value carried over",
                    Err(_) => "its last value could not be carried over",
                },
                Ok(None) => "no value was left in the old memory to carry over",
                Err(_) => "the old memory no longer read as a value",
            };
        }
        let successor = Arc::new(Endpoint {
            registration: old.registration.clone(),
            slot: OnceLock::from(slot),
            error: Mutex::new(None),
            replaced: OnceLock::new(),
            successor: OnceLock::new(),
            pending: Mutex::new(None),
            client: Arc::clone(&old.client),
        });
        lock(&self.state)
            .endpoints
            .insert(successor.registration.endpoint, Arc::downgrade(&successor));
        if old.successor.set(successor).is_err() {
            // Unreachable: the client thread alone sets it, once per endpoint (the registry's
            // later answers go to the successor, which `state.endpoints` names now).
            return Ok(());
        }
        let _ = old.replaced.set(BusError::Replaced {
            name: name.to_string(),
            segment: old_slot.segment().to_owned(),
        });
        // Readers asleep on the old memory (this process's and others') would sleep for ever:
        // woken, they find it replaced.
        old_slot.wake_all_waiters();
        tracing::warn!(
            "{name}: the registry made the slot anew (its memory was damaged); this publication \
             writes into the new one ({carried})"
        );
        Ok(())
    }
}
