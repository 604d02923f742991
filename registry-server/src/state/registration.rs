//! Endpoints coming and going: a registration checked against the slot it names (name, type,
//! capacity, one publisher, another host's claim) and bound, or refused with the reason; the
//! endpoints of a connection that closed or whose process died removed.

use bus::protocol::{EndpointKind, Refusal, Registration, Reply};
use bus::schema::{Schema, SchemaHash};
use bus::SlotName;

use super::{remote, EndpointRef, NoSlot, Outbox, Peer, Registry, SlotEntry};

impl Registry {
    /// Handles a registration from connection `conn`.
    pub fn register(&mut self, conn: u64, id: u64, reg: Registration) -> Outbox {
        let endpoint = reg.endpoint;
        match self.try_register(conn, &reg) {
            Ok(mut out) => {
                // Readers waiting for the name's schema take this entry's type.
                out.extend(self.adopt_readers(&reg.name));
                let segment = self
                    .slots
                    .get(&reg.name)
                    .and_then(|e| e.slot.as_ref())
                    .map(|s| s.segment().to_owned());
                out.insert(0, (conn, id, Reply::Registered { endpoint, segment }));
                // Registered again (it reconnected) while its name is still another host's:
                // told again, as the answer cleared what it was told before.
                if let Some(host) = self.elsewhere.get(&reg.name) {
                    if reg.kind == EndpointKind::Publication {
                        out.push((
                            conn,
                            0,
                            remote::published_elsewhere(endpoint, &reg.name, host),
                        ));
                    }
                }
                out
            }
            Err(refusal) => {
                self.forget_if_unused(&reg.name);
                let kind = match reg.kind {
                    EndpointKind::Publication => "publication",
                    EndpointKind::Subscription => "subscription",
                };
                // A connection closed as dead (`forget_dead_publisher`) may still have
                // requests unread: refused, with nobody to tell, so not logged.
                if let Some(peer) = self.peers.get(&conn) {
                    tracing::info!(
                        "refused a {kind} by pid {}: {}",
                        peer.pid,
                        refusal.clone().into_error(&reg)
                    );
                }
                vec![(conn, id, Reply::Refused { endpoint, refusal })]
            }
        }
    }

    /// A publication of `name` with another type than the slot kept for it, which nobody uses
    /// (no endpoint, no running writer, no tool waiting to read it, no process of an adopted
    /// slot still reconnecting): the application changed its message type and its publisher
    /// was started again. The old type's kept value is forgotten, as `reclaim` would in time,
    /// and the name takes the new type; otherwise the new publisher would be refused until
    /// then. A subscription never does this: a reader of the wrong type (a mistyped tool)
    /// would throw away the value kept for the others; it is refused, told that a publisher
    /// of its type takes the name.
    fn retype_unused(&mut self, name: &SlotName, schema: &Schema) {
        let Some(entry) = self.slots.get(name) else {
            return;
        };
        if entry.schema.hash.0 == schema.hash().0 || !self.nothing_uses(name, entry) {
            return;
        }
        tracing::info!(
            "{name}: published now as {}; the last value kept of type {}, which nothing uses, \
             is forgotten",
            schema.type_name(),
            entry.schema.type_name
        );
        self.forget_slot(name);
    }

    /// The publisher of `name` whose process died before its connection's end was read:
    /// killed and started again at once while this registry was stalled (or busy), it would
    /// refuse the successor as a second publisher, which then exits. Its endpoints are removed
    /// here, as its end would remove them, and the server shuts its connection down
    /// (`take_closed`).
    fn forget_dead_publisher(&mut self, name: &SlotName) {
        let Some(entry) = self.slots.get(name) else {
            return;
        };
        let dead: Vec<(u64, u32)> = entry
            .endpoints
            .iter()
            .filter(|e| e.kind == EndpointKind::Publication)
            .filter_map(|e| self.peers.get(&e.conn).map(|p| (e.conn, p)))
            .filter(|(_, p)| p.is_dead())
            .map(|(conn, p)| (conn, p.pid))
            .collect();
        for (conn, pid) in dead {
            tracing::info!(
                "connection {conn}: its process (pid {pid}, publisher of {name}) died; removing \
                 its endpoints"
            );
            self.disconnect(conn);
            self.closed.push(conn);
        }
    }

    /// The connections closed by `forget_dead_publisher` since the last call, for the server
    /// to shut down: the sweep of dead connections no longer sees them.
    pub fn take_closed(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.closed)
    }

    /// Whether nothing uses `entry`'s slot (`SlotEntry::unused`: no endpoint, no live writer,
    /// not the registry's own, no adopted process still reconnecting) and no tool waits to
    /// read `name`.
    fn nothing_uses(&self, name: &SlotName, entry: &SlotEntry) -> bool {
        entry.unused(std::time::Instant::now()) && !self.readers.contains_key(name)
    }

    fn try_register(&mut self, conn: u64, reg: &Registration) -> Result<Outbox, Refusal> {
        let failed = |reason: String| Refusal::Failed { reason };
        let parsed = Schema::from_bytes(&reg.schema)
            .map_err(|e| failed(format!("unreadable schema: {e}")))?;
        if parsed.hash().0 != reg.schema_hash {
            return Err(failed(format!(
                "schema hashes to {}, registration says {}",
                parsed.hash(),
                SchemaHash(reg.schema_hash)
            )));
        }
        if reg.kind == EndpointKind::Publication && reg.capacity > bus::slot::MAX_CAPACITY {
            return Err(failed(format!(
                "capacity {} exceeds the largest slot, {} bytes",
                reg.capacity,
                bus::slot::MAX_CAPACITY
            )));
        }
        let peer = self
            .peers
            .get(&conn)
            .cloned()
            .ok_or_else(|| failed("unknown connection".into()))?;
        // A name only kept elsewhere (its publisher gone there) is free to publish, with any
        // type: the new publisher takes it on every host.
        if let Some(claim) = self.remote.get(&reg.name).filter(|c| !c.kept) {
            if reg.kind == EndpointKind::Publication {
                self.conflicts += 1;
                tracing::warn!(
                    "conflict: refused publication of {} ({}) by pid {}: host '{}' already \
                     publishes it ({})",
                    reg.name,
                    reg.type_name,
                    peer.pid,
                    claim.host,
                    claim.type_name
                );
                return Err(failed(format!(
                    "host '{}' already publishes {} (type {}); one public name has one \
                     publisher on the whole bus",
                    claim.host, reg.name, claim.type_name
                )));
            }
            if claim.schema_hash != reg.schema_hash {
                return Err(Refusal::TypeMismatch {
                    slot_type: format!("{} (published on host '{}')", claim.type_name, claim.host),
                    slot_hash: claim.schema_hash,
                });
            }
        }
        if reg.kind == EndpointKind::Publication
            && self.slots.get(&reg.name).is_some_and(|e| e.own.is_some())
        {
            return Err(Refusal::AlreadyPublished {
                pid: std::process::id(),
            });
        }
        if reg.kind == EndpointKind::Publication {
            self.forget_dead_publisher(&reg.name);
            self.retype_unused(&reg.name, &parsed);
        }
        // Asked only of a slot of another type (the refusal below says it is kept for nobody).
        let kept_for_nobody = self.slots.get(&reg.name).is_some_and(|e| {
            e.schema.hash.0 != reg.schema_hash
                && e.slot.is_some()
                && self.nothing_uses(&reg.name, e)
        });
        let entry = self
            .slots
            .entry(reg.name.clone())
            .or_insert_with(|| SlotEntry::pending(&parsed));
        if entry.schema.hash.0 != reg.schema_hash {
            let slot_type = if kept_for_nobody {
                format!(
                    "{} (the last value of a publisher now gone, kept; a publisher of another \
                     type takes the name)",
                    entry.schema.type_name
                )
            } else if entry.slot.is_some() {
                entry.schema.type_name.clone()
            } else {
                // No slot yet: the type is the one subscribers here wait for.
                format!(
                    "{} (not created yet: the type its waiting subscribers asked for)",
                    entry.schema.type_name
                )
            };
            return Err(Refusal::TypeMismatch {
                slot_type,
                slot_hash: entry.schema.hash.0,
            });
        }
        // Drop any earlier registration of the same endpoint (a re-registration after reconnect).
        entry
            .endpoints
            .retain(|e| !(e.conn == conn && e.endpoint == reg.endpoint));
        let mut out = Outbox::new();
        match reg.kind {
            EndpointKind::Subscription => {
                let bound = entry.slot.is_some();
                entry.endpoints.push(EndpointRef {
                    conn,
                    endpoint: reg.endpoint,
                    kind: EndpointKind::Subscription,
                    bound,
                });
            }
            EndpointKind::Publication => {
                let me = self.peers.get(&conn).map(|p| (p.pid, p.start_time));
                if let Some(i) = entry
                    .endpoints
                    .iter()
                    .position(|e| e.kind == EndpointKind::Publication)
                {
                    let other = &entry.endpoints[i];
                    let theirs = self.peers.get(&other.conn).map(|p| (p.pid, p.start_time));
                    // Endpoint ids start at random in each process: the same id of a process
                    // this registry cannot see (another pid namespace: pid 0) is the same
                    // process's as well.
                    if theirs == me && other.endpoint == reg.endpoint {
                        // The same publication of the same process, re-registered on a new
                        // connection before its old one was closed: the new one takes over.
                        entry.endpoints.remove(i);
                    } else {
                        return Err(Refusal::AlreadyPublished {
                            pid: theirs.map_or(0, |t| t.0),
                        });
                    }
                }
                // After a registry restart the slot remembers its writer: while that process
                // lives and has not registered again, the name is still its.
                if let Some(slot) = &entry.slot {
                    let writer = slot.writer();
                    // Its process, and the same publication of it (another `Bus` handle of the
                    // process is another publisher: endpoint ids are unique in a process).
                    let same = me == Some((writer.pid, writer.start_time))
                        && (writer.endpoint == 0 || writer.endpoint == reg.endpoint);
                    if !same && writer.is_running() {
                        return Err(Refusal::AlreadyPublished { pid: writer.pid });
                    }
                }
                let segment = self.domain.segment_name(&reg.name);
                let entry = self
                    .slots
                    .get_mut(&reg.name)
                    .ok_or_else(|| failed("slot vanished".into()))?;
                let created = entry
                    .ensure_slot(
                        &segment,
                        &reg.name,
                        &parsed,
                        reg.capacity,
                        self.group,
                        false,
                    )
                    .map_err(|e| match e {
                        NoSlot::TooSmallInUse { capacity } => {
                            Refusal::CapacityTooSmall { capacity }
                        }
                        NoSlot::Create(e) => failed(format!("cannot create {segment}: {e}")),
                    })?;
                let slot = entry
                    .slot
                    .as_ref()
                    .ok_or_else(|| failed("slot vanished".into()))?;
                if created {
                    tracing::info!(
                        "created {} ({}, {} bytes) for pid {}",
                        reg.name,
                        parsed.type_name(),
                        slot.capacity(),
                        peer.pid
                    );
                }
                if entry.origin.take().is_some() {
                    // A mirror whose remote publisher went away: the name is local now.
                    slot.set_origin("");
                    slot.set_origin_sequence(0);
                }
                // The value the slot holds, if any, is an earlier writer's: it does not count
                // as this one's until it writes (`Slot::writer_state_of`).
                slot.set_writer(peer.pid, peer.start_time, reg.endpoint);
                entry.endpoints.push(EndpointRef {
                    conn,
                    endpoint: reg.endpoint,
                    kind: EndpointKind::Publication,
                    bound: true,
                });
                out.extend(entry.bind_waiting(&segment));
            }
        }
        Ok(out)
    }

    /// Removes one endpoint.
    pub fn unregister(&mut self, conn: u64, endpoint: u64) {
        let names: Vec<SlotName> = self
            .slots
            .iter()
            .filter(|(_, e)| {
                e.endpoints
                    .iter()
                    .any(|r| r.conn == conn && r.endpoint == endpoint)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.remove_endpoints(&name, |r| r.conn == conn && r.endpoint == endpoint);
        }
        self.forget_reader(|r| r.conn == conn && r.endpoint == endpoint);
    }

    /// Removes everything of a connection that closed or whose process died.
    pub fn disconnect(&mut self, conn: u64) -> Option<Peer> {
        let names: Vec<SlotName> = self
            .slots
            .iter()
            .filter(|(_, e)| e.endpoints.iter().any(|r| r.conn == conn))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.remove_endpoints(&name, |r| r.conn == conn);
        }
        self.forget_reader(|r| r.conn == conn);
        self.peers.remove(&conn)
    }

    fn remove_endpoints(&mut self, name: &SlotName, gone: impl Fn(&EndpointRef) -> bool) {
        let Some(entry) = self.slots.get_mut(name) else {
            return;
        };
        let publisher_gone = entry
            .endpoints
            .iter()
            .any(|e| gone(e) && e.kind == EndpointKind::Publication);
        entry.endpoints.retain(|e| !gone(e));
        if publisher_gone {
            if let Some(slot) = &entry.slot {
                slot.mark_writer_gone();
            }
        }
        // A slot's time unused counts from its last endpoint's going (`reclaim`), also when one
        // came and went between two sweeps.
        self.unused_since.remove(name);
        self.forget_if_unused(name);
    }

    /// A slot without memory and without endpoints was only a pending subscription: forget it.
    /// So is a local slot that never held a value once its last endpoint is gone (a publisher
    /// that ended before writing, or whose registration was taken after it had died): there is
    /// no value to keep, and listed it would only show an empty slot of a gone writer. An
    /// adopted slot whose processes may still be reconnecting is left alone, and so is one of
    /// the registry's own (its directory, its statistics), also while it cannot be made: it is
    /// made at a later check (`make_anew_again`).
    fn forget_if_unused(&mut self, name: &SlotName) {
        let Some(entry) = self.slots.get(name).filter(|e| e.own.is_none()) else {
            return;
        };
        let pending_alone = entry.slot.is_none() && entry.endpoints.is_empty();
        // A writer still alive (not registered again yet) may write still: kept.
        let never_written = entry.origin.is_none()
            && entry
                .slot
                .as_ref()
                .is_some_and(|s| s.latest_sequence() == 0)
            && self.nothing_uses(name, entry);
        if pending_alone || never_written {
            self.forget_slot(name);
        }
    }
}
