//! Tools that read a name whatever its type (`Request::Follow`, from `bus-inspect`). On a name
//! this host holds they are subscribers like any other. On a name only another host publishes
//! they wait here, without a slot entry (an entry has a schema, and announcements carry only
//! schema hashes), while the network layer asks that host for the schema
//! (`Registry::schema_wants`); once it comes (`Registry::schema_heard`) the name becomes a
//! subscribed slot of the publisher's own type, which the network layer then mirrors as it
//! does for any subscriber here.

use bus::protocol::{EndpointKind, Refusal, Reply};
use bus::schema::Schema;
use bus::SlotName;

use super::{EndpointRef, Outbox, Registry, RemoteClaim, SlotEntry};

/// One tool waiting for a remote name's schema: its connection and endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Reader {
    pub conn: u64,
    pub endpoint: u64,
}

impl Registry {
    /// Handles a `Follow` of `name` from connection `conn`.
    pub fn follow(&mut self, conn: u64, id: u64, endpoint: u64, name: SlotName) -> Outbox {
        let refused = |refusal: Refusal| vec![(conn, id, Reply::Refused { endpoint, refusal })];
        if !self.peers.contains_key(&conn) {
            return refused(Refusal::Failed {
                reason: "unknown connection".into(),
            });
        }
        // The same endpoint followed again (a client that asks twice) is one reader.
        self.unregister(conn, endpoint);
        let reader = Reader { conn, endpoint };
        if self.segment_of(&name).is_some() {
            return self.reader_joins(reader, id, name);
        }
        let Some(claim) = self.remote.get(&name) else {
            // Nothing to read anywhere: a name only subscribed to here waits for a publisher;
            // one of the registry's own slots that could not be made is not there either.
            return refused(Refusal::Failed {
                reason: format!("no slot {name} on this host, and no other host announces it"),
            });
        };
        if let Some(entry) = self.slots.get(&name) {
            if entry.schema.hash.0 != claim.schema_hash {
                return refused(mistyped(entry, claim));
            }
            // Subscribers here wait for its mirror already: the reader waits with them.
            return self.reader_joins(reader, id, name);
        }
        tracing::info!(
            "asking host '{}' for the schema of {name}, for a reader here",
            claim.host
        );
        self.readers.entry(name).or_default().push(reader);
        vec![(
            conn,
            id,
            Reply::Registered {
                endpoint,
                segment: None,
            },
        )]
    }

    /// `reader` becomes a subscription of `name`'s slot entry, bound if the slot exists.
    fn reader_joins(&mut self, reader: Reader, id: u64, name: SlotName) -> Outbox {
        self.readers.entry(name.clone()).or_default().push(reader);
        let mut out = self.adopt_readers(&name);
        let segment = self.segment_of(&name);
        let endpoint = reader.endpoint;
        out.insert(
            0,
            (reader.conn, id, Reply::Registered { endpoint, segment }),
        );
        out
    }

    /// Names readers here wait for whose schema another host has: asked for by the network
    /// layer (`wire::Want::schema`).
    pub fn schema_wants(&self) -> Vec<SlotName> {
        self.readers
            .keys()
            .filter(|name| !self.slots.contains_key(*name) && self.remote.contains_key(*name))
            .cloned()
            .collect()
    }

    /// `host`'s schema for `name`: if readers wait for it and `host` is the one that publishes
    /// the name (with a schema of that hash), the name becomes a slot entry of that type with
    /// the readers as its subscriptions, waiting for the mirror (`wanted` lists it from now
    /// on). Returns the messages to send.
    pub fn schema_heard(&mut self, name: &SlotName, host: &str, schema: &[u8]) -> Outbox {
        if !self.readers.contains_key(name) {
            return Outbox::new();
        }
        if !self.slots.contains_key(name) {
            let Some(claim) = self.remote.get(name).filter(|c| c.host == host) else {
                return Outbox::new();
            };
            let parsed = match Schema::from_bytes(schema) {
                Ok(s) if s.hash().0 == claim.schema_hash => s,
                Ok(_) | Err(_) => {
                    tracing::warn!(
                        "host '{host}' sent a schema for {name} that is not the one it announces"
                    );
                    return Outbox::new();
                }
            };
            tracing::info!(
                "host '{host}' sent the schema of {name} ({}): mirroring it for a reader here",
                parsed.type_name()
            );
            self.slots.insert(name.clone(), SlotEntry::pending(&parsed));
        }
        self.adopt_readers(name)
    }

    /// Makes the readers waiting for `name` subscriptions of its slot entry (if it has one
    /// now), bound at once if the slot exists.
    ///
    /// A slotless entry of another type than the name's publisher elsewhere (subscribers here
    /// wait for a publisher of their type, as a kept value allows) refuses them instead: its
    /// mirror would never come.
    pub(super) fn adopt_readers(&mut self, name: &SlotName) -> Outbox {
        let segment = self.segment_of(name);
        let Some(entry) = self.slots.get_mut(name) else {
            return Outbox::new();
        };
        let Some(readers) = self.readers.remove(name) else {
            return Outbox::new();
        };
        let claim = self.remote.get(name);
        if let Some(claim) =
            claim.filter(|c| segment.is_none() && entry.schema.hash.0 != c.schema_hash)
        {
            let refusal = mistyped(entry, claim);
            return readers
                .into_iter()
                .map(|r| {
                    let endpoint = r.endpoint;
                    let refusal = refusal.clone();
                    (r.conn, 0, Reply::Refused { endpoint, refusal })
                })
                .collect();
        }
        for r in readers {
            entry.endpoints.push(EndpointRef {
                conn: r.conn,
                endpoint: r.endpoint,
                kind: EndpointKind::Subscription,
                bound: false,
            });
        }
        self.unused_since.remove(name);
        match segment {
            Some(segment) => entry.bind_waiting(&segment),
            None => Outbox::new(),
        }
    }

    /// Forgets the waiting readers `gone` selects (a connection closed, an endpoint removed).
    pub(super) fn forget_reader(&mut self, gone: impl Fn(&Reader) -> bool) {
        self.readers.retain(|_, readers| {
            readers.retain(|r| !gone(r));
            !readers.is_empty()
        });
    }

    /// The segment of `name`'s slot, if it has one.
    fn segment_of(&self, name: &SlotName) -> Option<String> {
        self.slots
            .get(name)
            .and_then(|e| e.slot.as_ref())
            .map(|s| s.segment().to_owned())
    }
}

/// The refusal of a reader of a name that subscribers here wait for with another type than the
/// one its host publishes.
fn mistyped(entry: &SlotEntry, claim: &RemoteClaim) -> Refusal {
    Refusal::TypeMismatch {
        slot_type: format!(
            "{} on host '{}', while subscribers here wait for it as {}",
            claim.type_name, claim.host, entry.schema.type_name
        ),
        slot_hash: claim.schema_hash,
    }
}
