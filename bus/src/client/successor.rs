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
//!   carried over) only holding the old endpoint's `taken_over` lock and only while it is
//!   false; the publication sets it under that lock before its first write there
//!   (`Endpoint::take_over_successors`). `successor` is set before `replaced`, so whoever sees
//!   `replaced` finds the successor (the `OnceLock`s' release and acquire).
//! - No value lost in the hand-over. The client thread sets `replaced`, increments the old
//!   slot's notify word (SeqCst read-modify-write, `wake_all_waiters`), then carries the old
//!   memory's value over. Every write increments that word too, and `Publication::write` then
//!   checks `replaced` again and, if set, writes the value into the new slot as well. The
//!   increments are ordered: if the write's comes first, the carry reads its value (or a later
//!   one); if the client's comes first, the write's check sees `replaced`.
//! - One registration. The successor inherits the endpoint number, so the old endpoint's drop
//!   leaves the unregistering to the successor (`Drop for Endpoint`).
//!
//! Only this publication's own value is carried over: one its process did not write (an
//! earlier writer's, gone) must not read as a live writer's in the new slot.

use std::sync::{Arc, OnceLock};

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
    /// When `segment` does not exist (the registry could not make it: a full /dev/shm), the
    /// successor waits for it unbound, as an endpoint made before its slot does: the registry
    /// binds it once it has made the slot (`state/damage.rs`), and a publication's value waits
    /// for that (its last one carried over, or a newer one it writes meanwhile).
    pub(super) fn follow(
        &self,
        old: &Arc<Endpoint>,
        old_slot: &Slot,
        segment: &str,
    ) -> Result<Followed, BusError> {
        let name = &old.registration.name;
        if old.successor.get().is_some() {
            return Ok(Followed::Successor);
        }
        let slot = match Slot::open(segment, true) {
            Ok(slot) => Some(slot),
            Err(e) => {
                // Segment names start with '/'.
                let path = format!("{}{segment}", crate::names::SHM_DIR);
                if std::fs::symlink_metadata(path).is_ok() {
                    return Err(e.into());
                }
                tracing::warn!(
                    "{name}: the registry made the slot anew but could not make the new one \
                     yet ({e}); this endpoint follows it once it exists"
                );
                None
            }
        };
        if let Some(slot) = &slot {
            if slot.file() == old_slot.file() {
                // Only this process's mapping lost pages of it (cut and grown back), and the
                // registry has made nothing anew yet. The next read or write here spoils the
                // header so that it does (`Slot::tell_lost_pages`); followed then.
                return Ok(Followed::SameMemory);
            }
            old.check(slot)?;
        }
        let publication = old.registration.kind == EndpointKind::Publication;
        // A refusal that still holds (another computer publishes the name) goes on, in a
        // successor bound at once; one that waits for its slot keeps values and waits as any
        // unbound endpoint does, which an error would stop (the registry says it again if it
        // still holds then).
        let error = old
            .error()
            .filter(|e| slot.is_some() && !matches!(e, BusError::Replaced { .. }));
        let successor = Arc::new(Endpoint::new(
            old.registration.clone(),
            Arc::clone(&old.client),
            slot.map(OnceLock::from).unwrap_or_default(),
            error,
        ));
        let weak = Arc::downgrade(&successor);
        // Empty: the client thread alone sets it, once per endpoint (checked on entry; the
        // registry's later answers go to the successor, which `state.endpoints` names from
        // here on). A successor dropped unset would unregister the registration it shares.
        let _ = old.successor.set(Arc::clone(&successor));
        lock(&self.state)
            .endpoints
            .insert(old.registration.endpoint, weak);
        if publication {
            let _ = old.replaced.set(BusError::Replaced {
                name: name.to_string(),
                segment: old_slot.segment().to_owned(),
            });
            // Readers asleep on the old memory (this process's and others') would sleep for
            // ever: woken, they find it replaced. Its SeqCst increment of the notify word also
            // orders the carry below against the publication's writes (module comment).
            old_slot.wake_all_waiters();
            let carried = carry_unless_taken_over(old, old_slot, &successor);
            tracing::warn!(
                "{name}: the registry made the slot anew (its memory was damaged); this \
                 publication writes into the new one ({carried})"
            );
        }
        Ok(Followed::Successor)
    }
}

/// Carries `old`'s last value over into `successor`'s slot (or, while it waits for its slot,
/// into the value it keeps for it), unless the publication writes there already (it took the
/// successor over) or the new slot holds a value; says what became of it.
fn carry_unless_taken_over(old: &Endpoint, old_slot: &Slot, successor: &Endpoint) -> &'static str {
    let taken_over = lock(&old.taken_over);
    if *taken_over {
        return "the publication had written into it already";
    }
    match successor.slot.get() {
        Some(slot) if slot.latest_sequence() != 0 => "the new slot already held a value",
        Some(slot) => carry_own_value(old, old_slot, |value, time_ns| {
            slot.write_at(value, time_ns).map(drop)
        })
        .map_or_else(|why| why, |()| "its last value carried over"),
        // Only this thread binds the successor (`ClientShared::bind`), later.
        None => carry_own_value(old, old_slot, |value, time_ns| {
            *lock(&successor.pending) = Some((value.to_vec(), time_ns));
            Ok(())
        })
        .map_or_else(
            |why| why,
            |()| "once it exists; its last value is kept for it",
        ),
    }
}

/// Hands `old`'s last value in `old_slot` to `write`, with its write time, if `old` wrote it
/// (its process and endpoint are the old slot's recorded writer, from its first value on);
/// gives the reason when it does not.
fn carry_own_value(
    old: &Endpoint,
    old_slot: &Slot,
    write: impl FnOnce(&[u8], u64) -> Result<(), BusError>,
) -> Result<(), &'static str> {
    let mut value = Vec::new();
    let info = match old_slot.read(0, &mut value) {
        Ok(Some(info)) => info,
        Ok(None) => return Err("no value was left in the old memory to carry over"),
        Err(_) => return Err("the old memory no longer read as a value"),
    };
    let writer = old_slot.writer_of(Some(info.sequence));
    if writer.pid != std::process::id() || writer.endpoint != old.registration.endpoint {
        return Err("the value in the old memory was not its own: not carried over");
    }
    write(&value, info.write_time_ns).map_err(|_| "its last value could not be carried over")
}
