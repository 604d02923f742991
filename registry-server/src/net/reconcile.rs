//! Reconciling what the peers announced with the registry: remote claims (and the conflicts
//! they reveal), mirror slots for the names this host wants, reflected slots and their target
//! hosts, and this host's own announcement.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bus::slot::Slot;
use bus::SlotName;

use super::stats::Counters;
use super::warn::Cause;
use super::wire::{Announce, PubInfo, Want};
use super::{Mirror, Net, NetState, Reflected};
use crate::state::NotMirrored;

impl Net {
    /// Applies what the peers announced to the registry: remote claims, mirrors, reflected
    /// slots and their targets. Returns the replies for subscriptions that got bound.
    pub(super) fn reconcile(
        &self,
        reg: &mut crate::state::Registry,
        st: &mut NetState,
    ) -> crate::state::Outbox {
        let mut out = crate::state::Outbox::new();
        // Every conflict still present in this pass; the others leave `st.logged` at the end,
        // so a conflict that comes back is logged and counted again.
        let mut current = BTreeSet::new();
        let mut claims = st.peers.claims(&mut |name, first, second| {
            if st_log(&mut st.logged, &mut current, name, second) {
                tracing::warn!(
                    "conflict: hosts '{first}' and '{second}' both publish {name}; using '{first}'"
                );
                Counters::add(&self.counters.conflicts, 1);
            }
        });
        // A value came here from a publisher the announcement held does not know runs (one
        // started at the origin since: `Value::writer_first`): the announcement is older than
        // the value, and its publisher's not running is not news. The next one says so.
        for (name, c) in claims.iter_mut() {
            let newer_seen = st
                .mirrors
                .get(name.as_str())
                .is_some_and(|m| m.has_values_newer_than(&c.claim.host, &c.info));
            if newer_seen {
                c.info.writer_alive = true;
                c.info.kept = false;
                c.claim.writer_alive = true;
                c.claim.kept = false;
            }
        }
        // Names published both here and remotely: the local one keeps working here. Which
        // publisher the bus follows is `peers::keeps` (decided alike on every host, from what
        // each announces); a local one that loses is told (`set_published_elsewhere`): it goes
        // on here, but a robot controller must not take the arbiters' feedback for its name as
        // its own, so it stops. Its values are still sent to the hosts that want them: one
        // that does not hear the other host follows this one (the others drop them).
        // (Nothing below changes which slots are local publications, nor their writers.)
        let local = reg.local_publications();
        let announced: BTreeMap<&SlotName, bool> =
            local.iter().map(|p| (&p.name, p.writer_alive)).collect();
        let mut elsewhere = BTreeMap::new();
        for (name, claim) in &claims {
            // A value only kept there (its publisher gone) yields to the publisher here.
            if !reg.is_published_here(name) || claim.claim.kept {
                continue;
            }
            let here = crate::state::RemoteClaim {
                host: self.host.clone(),
                writer_alive: announced.get(name).copied().unwrap_or(true),
                kept: false,
                kept_written_ns: 0,
                ..claim.claim.clone()
            };
            let lost = super::peers::keeps(&claim.claim, &here);
            if lost {
                elsewhere.insert(name.clone(), claim.claim.host.clone());
            }
            if st_log(
                &mut st.logged,
                &mut current,
                name.as_str(),
                &claim.claim.host,
            ) {
                let outcome = if lost {
                    "the bus follows that host's"
                } else {
                    "the bus follows this host's"
                };
                tracing::warn!(
                    "conflict: {name} is published here and on host '{}' ({}); {outcome}",
                    claim.claim.host,
                    claim.claim.type_name
                );
                Counters::add(&self.counters.conflicts, 1);
            }
        }
        out.extend(reg.set_published_elsewhere(elsewhere));
        let remote: BTreeMap<SlotName, crate::state::RemoteClaim> = claims
            .iter()
            .filter(|(name, _)| !reg.is_published_here(name))
            .map(|(n, c)| (n.clone(), c.claim.clone()))
            .collect();
        reg.set_remote_claims(remote.clone());
        // Schemas asked for by readers here (`state::readers`): their names become subscribed
        // slots of that type, mirrored below.
        for ((name, host), schema) in std::mem::take(&mut st.schemas_heard) {
            if let Ok(name) = SlotName::parse(&name) {
                out.extend(reg.schema_heard(&name, &host, &schema));
            }
        }
        // Subscriptions waiting here with another type than the one publisher's: refused now,
        // not left waiting in silence while its values are sent here and dropped.
        for (name, claim) in &remote {
            let refused = reg.refuse_mistyped_waiting(name, claim);
            if !refused.is_empty() {
                Counters::add(&self.counters.conflicts, 1);
            }
            out.extend(refused);
        }
        // Mirrors.
        let wanted: BTreeSet<SlotName> = reg.wanted().into_iter().collect();
        for (name, c) in &claims {
            if !wanted.contains(name) || !remote.contains_key(name) {
                continue;
            }
            // Before the mirror reads as written by the origin's running publisher: which of its
            // values are that publisher's (also when `ensure_mirror` fails below: a publisher
            // restarted at the origin must not have its predecessor's value read as its own).
            if let Some(m) = st.mirrors.get_mut(name.as_str()) {
                if m.origin == c.claim.host {
                    m.follow_series(c.info.series);
                }
                if !c.info.writer_alive {
                    m.publisher = None;
                } else if m.origin == c.claim.host {
                    m.date_held(c.info.series, c.info.writer_first);
                }
            }
            match reg.ensure_mirror(name, &c.claim, c.info.capacity) {
                Ok((segment, bound, created)) => {
                    out.extend(bound);
                    let series = reg.slot_series(name);
                    let file = reg.slot_file(name);
                    let fresh = created
                        || st.mirrors.get(name.as_str()).is_none_or(|m| {
                            m.origin != c.claim.host
                                || m.hash != c.claim.schema_hash
                                || Some(m.slot.series()) != series
                                || Some(m.slot.file()) != file
                        });
                    if fresh {
                        match Slot::open(&segment, true) {
                            Ok(slot) => {
                                // An adopted mirror resumes ordering from what it holds.
                                let last_sequence = slot.origin_sequence();
                                let origin_session = slot.origin_session();
                                let series = slot.origin_series();
                                let origin_in_slot = slot.origin() == c.claim.host;
                                let mut mirror = Mirror {
                                    slot,
                                    origin_in_slot,
                                    origin: c.claim.host.clone(),
                                    hash: c.claim.schema_hash,
                                    origin_session,
                                    series,
                                    last_sequence,
                                    publisher: None,
                                    newest_first: 0,
                                };
                                mirror.follow_series(c.info.series);
                                if c.info.writer_alive {
                                    // Made (or adopted) now: dated at once.
                                    mirror.date_held(c.info.series, c.info.writer_first);
                                }
                                st.mirrors.insert(name.as_str().to_owned(), mirror);
                            }
                            Err(e) => tracing::warn!("cannot map mirror {segment}: {e}"),
                        }
                    } else if let Some(m) = st.mirrors.get_mut(name.as_str()) {
                        // Dated again, afresh: a registry that took the mirror over as its
                        // writer just now (one restarted here, adopting it) counts every value
                        // held as an earlier writer's (`ensure_mirror`), which undoes the dating
                        // above. Meanwhile the value held reads as its gone writer's, never the
                        // other way round.
                        if c.info.writer_alive {
                            m.publisher = None;
                            m.date_held(c.info.series, c.info.writer_first);
                        }
                    }
                    // Said when a followed publisher goes, not for a mirror made now for a kept
                    // value (it reads as written by this registry only until the line below).
                    if !c.info.writer_alive
                        && reg.mirror_writer_gone(name)
                        && c.info.kept
                        && !created
                    {
                        tracing::info!(
                            "{name}: its publisher on host '{}' is gone; that host keeps its last \
                             value",
                            c.claim.host
                        );
                    }
                }
                Err(why) => {
                    // Said once while it lasts.
                    if st_log(&mut st.logged, &mut current, name.as_str(), &c.claim.host) {
                        match why {
                            NotMirrored::Conflict(reason) => {
                                tracing::warn!("conflict: not mirroring {name}: {reason}");
                                Counters::add(&self.counters.conflicts, 1);
                            }
                            NotMirrored::Failed(reason) => tracing::warn!(
                                "cannot mirror {name} of host '{}' (its subscribers here wait): \
                                 {reason}",
                                c.claim.host
                            ),
                        }
                    }
                }
            }
        }
        st.logged.retain(|k| current.contains(k));
        // Mirrors no longer wanted (forgotten by `reclaim`, nobody here subscribing to them, or
        // only another type's kept value left on the bus): their mapping goes, and values still
        // on their way are dropped as unexpected. One still here reads as no longer fed.
        st.mirrors.retain(|name, m| {
            let Ok(n) = SlotName::parse(name) else {
                return false;
            };
            if wanted.contains(&n) {
                return true;
            }
            let fed = remote
                .get(&n)
                .is_some_and(|c| c.host == m.origin && c.writer_alive);
            if !fed {
                reg.mirror_writer_gone(&n);
            }
            false
        });
        // Mirrors whose publisher went away keep their last value, writer gone.
        let stale: Vec<String> = st
            .mirrors
            .iter()
            .filter(|(name, m)| {
                let claim = SlotName::parse(name).ok().and_then(|n| remote.get(&n));
                claim.is_none_or(|c| c.host != m.origin)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in stale {
            st.mirrors.remove(&name);
            if let Ok(n) = SlotName::parse(&name) {
                reg.mirror_writer_gone(&n);
            }
            tracing::info!("{name}: its remote publisher is gone");
        }
        // Reflected slots and their targets.
        let mut keep = BTreeSet::new();
        for p in &local {
            if p.kept && claims.get(&p.name).is_some_and(|c| !c.claim.kept) {
                // A publisher elsewhere has the name: the hosts that want it follow that one.
                continue;
            }
            let name = p.name.as_str().to_owned();
            let targets = st.peers.wanting(&name);
            if targets.is_empty() {
                continue;
            }
            keep.insert(name.clone());
            if !st.reflected.contains_key(&name) {
                // Writable: the reflector counts itself in the slot's waiter word.
                match Slot::open(&p.segment, true) {
                    Ok(slot) => {
                        st.reflected.insert(
                            name.clone(),
                            Reflected {
                                slot: Arc::new(slot),
                                hash: p.schema.hash.0,
                                targets: BTreeMap::new(),
                                last_sent: 0,
                                too_large_said: false,
                                announced_alive: p.writer_alive,
                            },
                        );
                    }
                    Err(e) => {
                        tracing::warn!("cannot map {}: {e}", p.segment);
                        continue;
                    }
                }
            }
            let NetState {
                reflected, owed, ..
            } = &mut *st;
            let Some(r) = reflected.get_mut(&name) else {
                continue;
            };
            // A publication restarted with a larger capacity has a new segment of the same
            // name: the capacity tells it from the one mapped here; a slot put back as it was
            // (`state::kept`), only its file.
            if r.slot.segment() != p.segment
                || r.hash != p.schema.hash.0
                || r.slot.capacity() as u64 != p.capacity
                || r.slot.series() != p.series
                || r.slot.file() != p.file
            {
                match Slot::open(&p.segment, true) {
                    Ok(slot) => {
                        r.slot = Arc::new(slot);
                        r.hash = p.schema.hash.0;
                        r.last_sent = 0;
                    }
                    // The old mapping is sent on meanwhile; tried again at the next
                    // reconciliation (the next change of what is published or wanted).
                    Err(e) if self.warnings.due(Cause::Remap, &name) => tracing::warn!(
                        "{name}: its slot changed and the new one cannot be mapped to reflect \
                         it: {e} (said once a minute)"
                    ),
                    Err(_) => {}
                }
            }
            r.announced_alive = p.writer_alive;
            r.targets
                .retain(|host, _| targets.iter().any(|t| &t.0 == host));
            for (host, addr, session, mirror) in targets {
                let known = r
                    .targets
                    .get(&host)
                    .is_some_and(|t| *t == (addr, session, mirror));
                if !known {
                    // A new (or restarted) subscriber host, or one whose mirror is new, gets
                    // the current value at once.
                    r.targets.insert(host.clone(), (addr, session, mirror));
                    owed.entry(name.clone()).or_default().insert(host);
                }
            }
        }
        st.reflected.retain(|name, _| keep.contains(name));
        self.offer_schemas(st, &local);
        reg.publish_directory();
        st.adoption_ends = reg.adoption_ends();
        if st.last_announce.as_ref() != Some(&self.our_announce(reg)) {
            st.announce_soon();
        }
        out
    }

    pub(super) fn our_announce(&self, reg: &crate::state::Registry) -> Announce {
        Announce {
            host: self.host.clone(),
            data_port: self.data_port,
            interval_ms: self.announce_every.as_millis().min(u128::from(u32::MAX)) as u32,
            // Set when it is cut into parts (`Reflector::announce`).
            generation: 0,
            part: 0,
            parts: 1,
            publications: reg
                .local_publications()
                .into_iter()
                .map(|p| PubInfo {
                    name: p.name.as_str().to_owned(),
                    type_name: p.schema.type_name.clone(),
                    schema_hash: p.schema.hash.0,
                    capacity: p.capacity,
                    writer_alive: p.writer_alive,
                    writer_first: p.writer_first,
                    series: p.series,
                    kept: p.kept,
                    kept_written_ns: p.kept_written_ns,
                })
                .collect(),
            wants: reg
                .wanted()
                .into_iter()
                .map(|n| Want {
                    mirror: reg.slot_series(&n).unwrap_or(0),
                    name: n.as_str().to_owned(),
                    schema: false,
                })
                .chain(reg.schema_wants().into_iter().map(|n| Want {
                    mirror: 0,
                    name: n.as_str().to_owned(),
                    schema: true,
                }))
                .collect(),
        }
    }

    /// Follows which hosts ask for the schema of which local publication: a new ask is owed
    /// its schema now (`send_schemas`), all of them again at each refresh.
    fn offer_schemas(&self, st: &mut NetState, local: &[crate::state::LocalPublication]) {
        let published: BTreeMap<&str, &crate::state::LocalPublication> =
            local.iter().map(|p| (p.name.as_str(), p)).collect();
        let NetState {
            peers,
            schema_offers,
            schemas_owed,
            ..
        } = st;
        let mut offers = BTreeMap::new();
        for (name, host, addr) in peers.schema_wanting() {
            let Some(p) = published.get(name) else {
                continue;
            };
            let key = (name.to_owned(), host.to_owned());
            let schema = match schema_offers.get(&key) {
                Some((to, schema)) if *to == addr && **schema == p.schema.bytes => {
                    Arc::clone(schema)
                }
                _ => {
                    let schema = Arc::new(p.schema.bytes.clone());
                    schemas_owed.push((name.to_owned(), addr, Arc::clone(&schema)));
                    schema
                }
            };
            offers.insert(key, (addr, schema));
        }
        *schema_offers = offers;
    }
}

/// `true` the first time `(name, who)` is seen since it was last absent: log a conflict once
/// while it lasts, not every tick. Notes it in `current` (the conflicts of this pass).
fn st_log(
    logged: &mut BTreeSet<(String, String)>,
    current: &mut BTreeSet<(String, String)>,
    name: &str,
    who: &str,
) -> bool {
    let key = (name.to_owned(), who.to_owned());
    current.insert(key.clone());
    logged.insert(key)
}
