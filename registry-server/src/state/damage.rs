//! Slots damaged while the registry runs: another process of the bus group removed a segment,
//! put another file under its name, shrank it or overwrote its header. The sweeper checks a
//! few slots at a time (`Slot::damage`, two system calls each); a damaged slot is made anew
//! under its name and every endpoint bound to it is sent its segment again, as when a restarted
//! registry replaces an unreadable segment: that tells a subscription that its memory was
//! replaced (`BusError::Replaced`), and the publication goes on in the new slot (its client
//! gives it a successor there: `bus/src/client/successor.rs`), recorded here as its writer.
//! New endpoints bind to the new slot.

use std::ops::Bound::{Excluded, Unbounded};
use std::time::Instant;

use bus::SlotName;

use super::{Outbox, Registry};

impl Registry {
    /// Checks up to `budget` slots, going on from where the last call stopped, and makes each
    /// damaged one anew. Returns the pushes to send, and whether any was made anew.
    pub fn replace_damaged(&mut self, budget: usize) -> (Outbox, bool) {
        // The registry's own slots outgrown (its directory) at once, not when the cursor
        // comes to them, seconds later among thousands of slots.
        let outgrown: Vec<SlotName> = self
            .slots
            .iter()
            .filter(|(_, e)| {
                e.own
                    .zip(e.slot.as_ref())
                    .is_some_and(|(room, slot)| room > slot.capacity() as u64)
            })
            .map(|(name, _)| name.clone())
            .collect();
        let after = self.damage_cursor.take();
        let names: Vec<SlotName> = match &after {
            Some(c) => self.slots.range::<SlotName, _>((Excluded(c), Unbounded)),
            None => self.slots.range::<SlotName, _>(..),
        }
        .take(budget)
        .map(|(name, _)| name.clone())
        .collect();
        // Past the last name: the next call starts again from the first.
        self.damage_cursor = names.last().cloned();
        let mut out = Outbox::new();
        let mut any = false;
        for name in outgrown.into_iter().chain(names) {
            if let Some(pushes) = self.replace_if_damaged(&name) {
                out.extend(pushes);
                any = true;
            }
        }
        (out, any)
    }

    fn replace_if_damaged(&mut self, name: &SlotName) -> Option<Outbox> {
        let segment = self.domain.segment_name(name);
        let group = self.group;
        let entry = self.slots.get_mut(name)?;
        let Some(slot) = entry.slot.as_ref() else {
            return self.make_anew_again(name);
        };
        // The registry's own slot (its directory) may need more room than it has.
        let outgrown = entry.own.filter(|&room| room > slot.capacity() as u64);
        let damage = match outgrown {
            Some(room) => format!("its value needs room for {room} bytes"),
            None => slot.damage()?,
        };
        if entry.origin.is_none() && entry.unused(Instant::now()) {
            // Nobody uses it, nor is about to (an adopted slot's processes had their time to
            // register again): forgotten as reclaim forgets, not made anew (`bus-inspect clean`
            // removed a leftover, say); the next endpoint of the name makes a slot as any
            // first one does.
            tracing::info!("{name}: {damage}; nobody uses it: forgotten");
            if let Some(old) = entry.slot.take() {
                old.mark_writer_gone();
                if old.names_its_file() {
                    if let Err(e) = super::foreign::remove(&segment) {
                        tracing::warn!("{name}: forgotten, but its segment stays: {e}");
                    }
                }
            }
            self.slots.remove(name);
            self.unused_since.remove(name);
            return None;
        }
        let capacity_before = slot.capacity() as u64;
        let capacity = outgrown.unwrap_or(capacity_before);
        let schema = match entry.schema.parse() {
            Ok(schema) => schema,
            Err(e) => {
                tracing::error!(
                    "{name}: {damage}, and its schema cannot be read to make it anew: {e}"
                );
                return None;
            }
        };
        let publisher = publisher_of(entry, &self.peers);
        let told = entry.tell_bound(&segment);
        tracing::warn!(
            "{name}: {damage}; making it anew (its {} endpoint(s) here are told)",
            told.len()
        );
        // A gone publisher's value kept here (no publication carries it over, and no origin
        // host sends it again), still readable in the registry's mapping (a segment cut short
        // has lost it): kept in the new slot, as a gone writer's.
        let mut kept = None;
        // A mirror's place in its origin's values: the new one holds no value (the origin's
        // next refresh brings it), but must take none older than its subscribers have seen.
        // One below the sequence found: a value being written as it is read (the sequence is
        // stored first) may not be the one the subscribers saw; the one before it was.
        let mut mirror_order = None;
        if let Some(old) = entry.slot.take() {
            if publisher.is_none() && entry.origin.is_none() && entry.own.is_none() {
                let mut bytes = Vec::new();
                if let Ok(Some(info)) = old.read(0, &mut bytes) {
                    kept = Some((bytes, info.write_time_ns));
                }
            }
            if entry.origin.is_some() && old.origin_sequence() > 0 {
                mirror_order = Some((
                    old.origin(),
                    old.origin_session(),
                    old.origin_series(),
                    old.origin_sequence() - 1,
                ));
            }
            // Whoever still shares the old memory sees its writer gone, and is woken.
            old.mark_writer_gone();
        }
        let _ = bus::shm::unlink(&segment);
        let mut made = entry.ensure_slot(&segment, name, &schema, capacity, group, false);
        if let (Err(e), Some(room)) = (&made, outgrown) {
            // No room to grow (a full /dev/shm): the old size again, which the old one's
            // removal made room for, rather than no directory at all.
            let old = capacity_before;
            tracing::error!(
                "{name}: cannot make it with room for {room} bytes ({}); made again with its \
                 {old} bytes",
                match e {
                    super::NoSlot::Create(e) => e.to_string(),
                    super::NoSlot::TooSmallInUse { .. } => "in use".to_string(),
                }
            );
            entry.own = Some(old);
            made = entry.ensure_slot(&segment, name, &schema, old, group, false);
        }
        let made = made.map(|_| ());
        if let (Ok(()), Some((pid, start_time, endpoint)), Some(slot)) =
            (&made, publisher, &entry.slot)
        {
            slot.set_writer(pid, start_time, endpoint);
        }
        if let (Some((bytes, written_ns)), Some(slot)) = (kept, &entry.slot) {
            match slot.write_at(&bytes, written_ns) {
                Ok(_) => slot.mark_writer_gone(),
                Err(e) => tracing::warn!("{name}: the value it kept is lost: {e}"),
            }
        }
        if let (Some((host, session, series, sequence)), Some(slot)) = (mirror_order, &entry.slot) {
            // What the network layer resumes ordering from when it maps the new slot, as after
            // a restart (`reconcile`).
            slot.set_origin(&host);
            slot.set_origin_session(session);
            slot.set_origin_series(series);
            slot.set_origin_sequence(sequence);
        }
        if let Err(e) = made {
            let e = match e {
                super::NoSlot::Create(e) => e.to_string(),
                super::NoSlot::TooSmallInUse { .. } => "in use".to_string(),
            };
            // Its users are told all the same (their slot is no longer the name's: they see
            // `Replaced`, and wait for the new one unbound). Whoever makes the slot (the next
            // check, `make_anew_again`, while a publication or the registry itself publishes
            // it; else the next publication to register) binds them to it.
            entry.unbind_all();
            let again = if entry.own.is_some() {
                "trying again at every check"
            } else {
                entry.remake = Some(capacity);
                "trying again at every check while its publication is registered, else at the \
                 next publication's registration"
            };
            tracing::error!("{name}: cannot make it anew: {e}; {again}");
        }
        if let (Some(_), Some(slot)) = (entry.own, &entry.slot) {
            super::write_as_registry(slot);
        }
        // A mirror made anew holds nothing of its origin's yet (only where its values stand);
        // the network layer sets it up again (`ensure_mirror`) at its next reconciliation and
        // maps it afresh.
        self.follow_if_directory(name);
        Some(told)
    }

    /// After slot `name` was made anew: the directory is written into the new one if it is
    /// the directory's.
    fn follow_if_directory(&mut self, name: &SlotName) {
        if self
            .directory
            .as_ref()
            .is_some_and(|d| d.slot_name() == name.as_str())
        {
            self.reopen_directory();
        }
    }

    /// Makes slot `name` again where making it anew failed (a full /dev/shm, say), as soon as
    /// it can be made: the publication that was bound to it, still registered, cannot follow
    /// until then, and would fail every write; nobody registers to publish the registry's own
    /// slot, so nothing else would make it, and its subscribers would wait for ever. Its
    /// endpoints are bound to it then, and follow. Without a publication registered the slot
    /// waits for one, as any does. Quiet while it fails (the first failure was logged).
    fn make_anew_again(&mut self, name: &SlotName) -> Option<Outbox> {
        let segment = self.domain.segment_name(name);
        let group = self.group;
        let entry = self.slots.get_mut(name)?;
        let publisher = publisher_of(entry, &self.peers);
        let capacity = match (entry.own, entry.remake) {
            (Some(own), _) => own,
            (None, Some(remake)) if publisher.is_some() => remake,
            _ => return None,
        };
        // Not tried without the room: a try reserves all it can before it fails, and would
        // leave /dev/shm full for everyone else for a moment at every check.
        if super::kept::free_in_shm().is_some_and(|free| free < super::kept::room_needed(capacity))
        {
            return None;
        }
        let in_the_way = || {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(format!("{}{segment}", bus::names::SHM_DIR))
                .ok()
                .map(|m| (m.dev(), m.ino()))
        };
        if entry.in_the_way.is_some() && entry.in_the_way == in_the_way() {
            return None;
        }
        let schema = entry.schema.parse().ok()?;
        if entry
            .ensure_slot(&segment, name, &schema, capacity, group, false)
            .is_err()
        {
            entry.in_the_way = in_the_way();
            return None;
        }
        entry.in_the_way = None;
        let slot = entry.slot.as_ref()?;
        if entry.own.is_some() {
            super::write_as_registry(slot);
        } else if let Some((pid, start_time, endpoint)) = publisher {
            slot.set_writer(pid, start_time, endpoint);
        }
        tracing::info!("{name}: made anew at last");
        let bound = entry.bind_waiting(&segment);
        self.follow_if_directory(name);
        Some(bound)
    }

    /// The series (`Slot::series`) of the slot the registry holds for `name`: the network
    /// layer maps slots itself, and remaps one whose series changed (made anew).
    pub fn slot_series(&self, name: &SlotName) -> Option<u64> {
        self.slots.get(name)?.slot.as_ref().map(|s| s.series())
    }

    /// The file (`Slot::file`) of the slot the registry holds for `name`: a slot put back as
    /// it was (`kept`) keeps its series, in another file.
    pub fn slot_file(&self, name: &SlotName) -> Option<(u64, u64)> {
        self.slots.get(name)?.slot.as_ref().map(|s| s.file())
    }
}

/// The publication registered for `entry` (its process and endpoint), which goes on writing
/// into the slot made anew (the client gives it a successor there): recorded as the new slot's
/// writer, as at registration.
fn publisher_of(
    entry: &super::SlotEntry,
    peers: &std::collections::HashMap<u64, super::Peer>,
) -> Option<(u32, u64, u64)> {
    let publication = entry
        .endpoints
        .iter()
        .find(|r| r.kind == bus::protocol::EndpointKind::Publication)?;
    let peer = peers.get(&publication.conn)?;
    Some((peer.pid, peer.start_time, publication.endpoint))
}
