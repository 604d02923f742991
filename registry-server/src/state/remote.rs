//! What the network layer asks of the registry: the names other hosts publish (remote claims),
//! the local publications to announce, the names this host needs from elsewhere, and the mirror
//! slots that hold remote values.

use std::collections::{BTreeMap, BTreeSet};

use bus::protocol::{EndpointKind, Refusal, Reply};
use bus::slot::WriterState;
use bus::SlotName;

use super::{LocalPublication, NoSlot, Outbox, Registry, RemoteClaim, SlotEntry};

/// Most values of gone publishers kept here that are announced, the most recently written
/// first. Each takes room in the announcement (a peer holds about ten thousand entries of one
/// host, `net::announce::MAX_HELD_BYTES`) and about 200 bytes a second of the network, and
/// `--keep-unused` may keep many more.
pub const KEPT_ANNOUNCED_MAX: usize = 1000;

/// The refusal that tells a local publisher its name is kept by another host's publisher.
pub(super) fn published_elsewhere(endpoint: u64, name: &SlotName, host: &str) -> Reply {
    Reply::Refused {
        endpoint,
        refusal: Refusal::Failed {
            reason: format!(
                "host '{host}' publishes {name} too (their buses met with the name published on \
                 both); one public name has one publisher on the whole bus: rename or stop one \
                 of them"
            ),
        },
    }
}

impl Registry {
    /// Replaces what is known of other hosts' publications.
    pub fn set_remote_claims(&mut self, claims: BTreeMap<SlotName, RemoteClaim>) {
        self.remote = claims;
    }

    /// Names published here that another host publishes too, with that host: a conflict found
    /// after both publishers were accepted (two computers whose buses met, a partition that
    /// healed; otherwise the second registration is refused). Each local publisher of such a
    /// name is told once, with a refusal of its (bound) publication: the bus goes on carrying
    /// its values here, but an application that must be the only one of its name on the bus
    /// (a robot controller, whose outcomes the arbiters give by name) learns that it is not.
    /// When the conflict ends the slot is bound again, which clears the refusal. Returns the
    /// messages to send.
    pub fn set_published_elsewhere(&mut self, elsewhere: BTreeMap<SlotName, String>) -> Outbox {
        let mut out = Outbox::new();
        for (name, entry) in &self.slots {
            let now = elsewhere.get(name);
            if now == self.elsewhere.get(name) {
                continue;
            }
            let Some(segment) = entry.slot.as_ref().map(|s| s.segment().to_owned()) else {
                continue;
            };
            let publishers = entry
                .endpoints
                .iter()
                .filter(|e| e.kind == EndpointKind::Publication);
            for p in publishers {
                let reply = match now {
                    Some(host) => published_elsewhere(p.endpoint, name, host),
                    None => Reply::Bound {
                        endpoint: p.endpoint,
                        segment: segment.clone(),
                    },
                };
                out.push((p.conn, 0, reply));
            }
        }
        self.elsewhere = elsewhere;
        out
    }

    /// Public slots published on this host (by a process, or by the registry itself), and
    /// those that keep the last value of a publisher gone from this host (at most
    /// `KEPT_ANNOUNCED_MAX`, the most recently written).
    pub fn local_publications(&self) -> Vec<LocalPublication> {
        // Each public slot of this host's own, with the write time of a kept value.
        let mut announced: Vec<(&SlotName, &SlotEntry, Option<u64>)> = self
            .slots
            .iter()
            .filter(|(name, e)| {
                !name.is_private()
                    && !bus::directory::is_host_local(name.as_str())
                    && e.origin.is_none()
            })
            .filter_map(|(name, e)| {
                if e.published_here() || e.writer_reconnecting() {
                    Some((name, e, None))
                } else if e.keeps_gone_value() {
                    Some((name, e, Some(e.last_written_ns())))
                } else {
                    None
                }
            })
            .collect();
        let mut kept: Vec<(u64, &SlotName)> = announced
            .iter()
            .filter_map(|(name, _, written)| Some(((*written)?, *name)))
            .collect();
        if kept.len() > KEPT_ANNOUNCED_MAX {
            kept.sort_unstable_by(|a, b| b.cmp(a));
            let unannounced: BTreeSet<&SlotName> =
                kept[KEPT_ANNOUNCED_MAX..].iter().map(|(_, n)| *n).collect();
            announced.retain(|(name, _, written)| written.is_none() || !unannounced.contains(name));
        }
        announced
            .into_iter()
            .filter_map(|(name, e, kept_written)| {
                let slot = e.slot.as_ref()?;
                Some(LocalPublication {
                    name: name.clone(),
                    schema: e.schema.clone(),
                    capacity: slot.capacity() as u64,
                    // Of the value it holds: a publisher that registered after its last
                    // writer died is not announced alive before it writes.
                    writer_alive: slot.writer_state_of(Some(slot.latest_sequence()))
                        == WriterState::Alive,
                    writer_first: slot.writer_first_sequence(),
                    series: slot.series(),
                    segment: slot.segment().to_owned(),
                    file: slot.file(),
                    kept: kept_written.is_some(),
                    // Only a kept value's: a publication's would change the announcement at
                    // every write.
                    kept_written_ns: kept_written.unwrap_or(0),
                })
            })
            .collect()
    }

    /// Public names this host needs from elsewhere: subscribed to (or mirrored already) and
    /// not published here, nor published elsewhere with another type than this host's
    /// subscribers use (its values could not be mirrored: none is asked for).
    pub fn wanted(&self) -> Vec<SlotName> {
        self.slots
            .iter()
            .filter(|(name, e)| {
                !name.is_private()
                    && !bus::directory::is_host_local(name.as_str())
                    && !e.published_here()
                    && (e.origin.is_some()
                        || e.endpoints
                            .iter()
                            .any(|r| r.kind == EndpointKind::Subscription))
                    && !e.writer_reconnecting()
                    && self.remote.get(*name).is_none_or(|c| {
                        // A mirror goes on asking for a publisher of another type (a
                        // conflict, logged and counted), not for another type's kept value.
                        let typed =
                            c.schema_hash == e.schema.hash.0 || (e.origin.is_some() && !c.kept);
                        // A gone publisher's value held here is swapped only for a newer one
                        // kept elsewhere (as the two hosts' clocks tell); a running
                        // publisher's, on any host, is taken.
                        let newer = !(c.kept
                            && e.keeps_gone_value()
                            && c.kept_written_ns <= e.last_written_ns());
                        typed && newer
                    })
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Refuses the subscriptions here that wait for `name` with another type than the one
    /// `claim`'s host publishes (the name's one publisher on the bus): they would wait in
    /// silence for ever. A subscription made once the claim is known is refused alike when it
    /// registers. Returns the refusals to send.
    pub fn refuse_mistyped_waiting(&mut self, name: &SlotName, claim: &RemoteClaim) -> Outbox {
        let Some(entry) = self.slots.get_mut(name) else {
            return Outbox::new();
        };
        // A kept value is nobody's publication: a publisher of the subscribers' type may come.
        if claim.kept
            || entry.schema.hash.0 == claim.schema_hash
            || entry.origin.is_some()
            || entry.own.is_some()
        {
            return Outbox::new();
        }
        let refusal = Refusal::TypeMismatch {
            slot_type: format!("{} (published on host '{}')", claim.type_name, claim.host),
            slot_hash: claim.schema_hash,
        };
        let mut out = Outbox::new();
        entry.endpoints.retain(|e| {
            let waiting = e.kind == EndpointKind::Subscription && !e.bound;
            if waiting {
                let refusal = refusal.clone();
                let endpoint = e.endpoint;
                out.push((e.conn, 0, Reply::Refused { endpoint, refusal }));
            }
            !waiting
        });
        if !out.is_empty() {
            tracing::warn!(
                "conflict: refused {} subscription(s) of {name} waiting with type {}: host \
                 '{}' publishes it as {}",
                out.len(),
                entry.schema.type_name,
                claim.host,
                claim.type_name
            );
        }
        if entry.endpoints.is_empty() && entry.slot.is_none() {
            self.slots.remove(name);
        }
        out
    }

    /// Whether the name is published by a process on this host.
    pub fn is_published_here(&self, name: &SlotName) -> bool {
        self.slots
            .get(name)
            .is_some_and(|e| e.published_here() || e.writer_reconnecting())
    }

    /// Makes `name` a mirror of `claim`'s publication: creates the slot if needed, records the
    /// origin host, makes this registry its writer, and binds the subscriptions that wait for
    /// it. Returns the segment, the messages, and whether the slot was created now (the caller
    /// maps it afresh).
    ///
    /// A mirror too small for the publication (restarted on its host with a larger capacity)
    /// is made anew even while subscribers here map it: kept, it would hold nothing new for
    /// as long as one of them lived, and every subscriber that came later would wait in
    /// silence. Those mapping the old one are sent their slot again, which they find replaced
    /// (`BusError::Replaced`, "restart it"); those that come later get the new one.
    pub fn ensure_mirror(
        &mut self,
        name: &SlotName,
        claim: &RemoteClaim,
        capacity: u64,
    ) -> Result<(String, Outbox, bool), NotMirrored> {
        let segment = self.domain.segment_name(name);
        let entry = self
            .slots
            .get_mut(name)
            .ok_or_else(|| NotMirrored::Conflict(format!("{name} is not wanted here")))?;
        if entry.published_here() {
            return Err(NotMirrored::Conflict(format!(
                "{name} is published on this host too"
            )));
        }
        if entry.schema.hash.0 != claim.schema_hash {
            return Err(NotMirrored::Conflict(format!(
                "local subscribers of {name} use type {}, host '{}' publishes {}",
                entry.schema.type_name, claim.host, claim.type_name
            )));
        }
        // The subscribers' schema (checked when they registered), of the hash the origin
        // announced: announcements do not carry schemas.
        let schema = entry
            .schema
            .parse()
            .map_err(|e| NotMirrored::Failed(format!("{name}: unreadable schema: {e}")))?;
        let outgrown_in_use = entry
            .slot
            .as_ref()
            .is_some_and(|s| (s.capacity() as u64) < capacity)
            && entry.endpoints.iter().any(|e| e.bound);
        let created = entry
            .ensure_slot(&segment, name, &schema, capacity, self.group, true)
            .map_err(|e| {
                NotMirrored::Failed(match e {
                    NoSlot::TooSmallInUse { .. } => format!(
                        "mirror of {name} is smaller than the {capacity} bytes host '{}' \
                         publishes and is in use",
                        claim.host
                    ),
                    NoSlot::Create(e) => format!("cannot create {segment}: {e}"),
                })
            })?;
        let mut out = Outbox::new();
        if outgrown_in_use {
            out = entry.tell_bound(&segment);
            tracing::warn!(
                "mirror {name} made anew with room for {capacity} bytes (host '{}' publishes it \
                 larger now); its {} subscriber(s) here map the old one and are told to restart",
                claim.host,
                out.len()
            );
        }
        let slot = entry
            .slot
            .as_ref()
            .ok_or_else(|| NotMirrored::Failed(format!("{name}: slot vanished")))?;
        if created {
            tracing::info!(
                "created mirror {name} ({}, {} bytes) of host '{}'",
                claim.type_name,
                slot.capacity(),
                claim.host
            );
        }
        if entry.origin.as_deref() != Some(claim.host.as_str()) || slot.origin() != claim.host {
            if slot.origin() != claim.host {
                // The ordering kept in the slot (session, series, sequence) was another host's, and so
                // is the value it holds: none of this origin's publisher's yet. The slot's origin
                // stays the host that wrote a value held until the new one's first value
                // (`net::receive`): it names where a value came from, not who may write next.
                slot.set_origin_session(0);
                slot.set_origin_series(0);
                slot.set_origin_sequence(0);
                slot.set_writer_first_sequence(slot.latest_sequence().saturating_add(1));
                if slot.latest_sequence() == 0 {
                    // Nothing held to misname: a mirror of that host from the start.
                    slot.set_origin(&claim.host);
                }
            }
            entry.origin = Some(claim.host.clone());
        }
        // Whether a mirror's value is its origin's running publisher's is what the origin
        // host announces (`writer_alive`), and which of the values it held that publisher
        // wrote (`net::reconcile` dates the value held by its first sequence; the registry
        // stays the writer, keeping it). A mirror made for a gone publisher gets a writer once
        // (then marked gone), so that it lists as one.
        let writer = slot.writer();
        let registry_alive = writer.state == WriterState::Alive && writer.pid == std::process::id();
        if !registry_alive && (claim.writer_alive || writer.state == WriterState::None) {
            // Taken over (made now, adopted from an earlier registry, or followed again after
            // its publisher went): what it holds counts as its publisher's only once dated.
            // Undated first, so that no reader sees the value held as the live writer's in
            // between (`set_writer` keeps the first sequence for the same process).
            slot.set_writer_first_sequence(slot.latest_sequence().saturating_add(1));
            slot.set_writer(std::process::id(), bus::process::own_start_time(), 0);
        }
        out.extend(entry.bind_waiting(&segment));
        Ok((segment, out, created))
    }

    /// The remote publisher of a mirror went away (or its host was forgotten). Returns
    /// whether the mirror read as written by a running publisher until now.
    pub fn mirror_writer_gone(&self, name: &SlotName) -> bool {
        let slot = self
            .slots
            .get(name)
            .filter(|e| e.origin.is_some())
            .and_then(|e| e.slot.as_ref());
        match slot {
            Some(slot) if slot.writer_state() == WriterState::Alive => {
                slot.mark_writer_gone();
                true
            }
            _ => false,
        }
    }
}

/// Why a remote publication is not mirrored here.
#[derive(Debug)]
pub enum NotMirrored {
    /// It conflicts with what this host has: a publication of the name here, or subscribers
    /// of another type (counted as a conflict).
    Conflict(String),
    /// It could not be made: no room in shared memory, a mirror too small that is in use.
    Failed(String),
}
