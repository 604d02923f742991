//! The reflector thread: sleeps on the reflected slots' notify words and the change word, sends
//! new values to the hosts that want them, and on a tick expires silent hosts, reconciles with
//! the registry, announces, schedules refreshes and publishes the statistics.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bus::futex;
use bus::slot::{ReadInfo, Slot, WriterState};

use super::announce;
use super::bundle::{Bundler, Outgoing};
use super::stats::{Counters, NetStats, PeerStats};
use super::warn::Cause;
use super::wire::{self, Drop, Value};
use super::{
    lock, Net, NetState, Reflected, REASSEMBLY_AGE, RECONCILE_GAP, STATS_EVERY, TICK, WATCH_MAX,
};
use crate::server::Shared;

/// The reflector's buffers, reused from pass to pass: a value read, a message encoded, and the
/// bundles being filled.
struct Buffers {
    value: Vec<u8>,
    message: Vec<u8>,
    bundler: Bundler,
}

impl Net {
    pub(super) fn reflect(&self, shared: &Shared) {
        let mut buffers = Buffers {
            value: Vec::new(),
            message: Vec::new(),
            // At most a datagram, and no larger than a message may be (a small --max-value).
            bundler: Bundler::new(self.chunk.min(self.max_message as usize)),
        };
        let mut next_tick = Instant::now();
        let mut last_tick = Instant::now();
        loop {
            let now = Instant::now();
            // A change of the registry's endpoints (`poke`) is reconciled soon, not at the next
            // tick, but at most once per `RECONCILE_GAP`: a burst of registrations (every
            // process of a restarted registry coming back) is taken in batches.
            let early = lock(&self.state).dirty && now >= last_tick + RECONCILE_GAP;
            if now >= next_tick || early {
                self.tick(shared, now, &mut buffers.message);
                last_tick = now;
                if now >= next_tick {
                    next_tick = now + TICK;
                }
            }
            self.send_new_values(&mut buffers);
            let watched: Vec<Arc<Slot>> = {
                let st = lock(&self.state);
                st.reflected.values().map(|r| Arc::clone(&r.slot)).collect()
            };
            self.sleep(&watched, next_tick, last_tick + RECONCILE_GAP);
        }
    }

    /// Sleeps until a watched slot is written, the registry changes, or `deadline` (or
    /// `reconcile_at` when a change is waiting to be reconciled).
    fn sleep(&self, watched: &[Arc<Slot>], deadline: Instant, reconcile_at: Instant) {
        let change_seen = self.change.load(Ordering::SeqCst);
        let deadline = if watched.len() > WATCH_MAX {
            deadline.min(Instant::now() + Duration::from_millis(2))
        } else {
            deadline
        };
        let watched = &watched[..watched.len().min(WATCH_MAX)];
        // Counted as a waiter first, then the notify words read (see `bus::slot::waiters`): a
        // write after this point either sees us counted and wakes us, or changed the word we
        // compare against. A count dropped as stale meanwhile means: do not sleep.
        let tickets: Vec<_> = watched.iter().map(|s| s.count_waiter()).collect();
        let mut words = vec![futex::WaitOn {
            word: &self.change,
            expected: change_seen,
            shared: false,
        }];
        let mut recounted = false;
        for (s, t) in watched.iter().zip(&tickets) {
            let expected = s.notify_to_sleep_on(t);
            recounted |= expected.is_none();
            words.push(futex::WaitOn {
                word: s.notify_word(),
                expected: expected.unwrap_or(0),
                shared: true,
            });
        }
        // Checked after reading the words, under one lock: anything that arrives later changes
        // a word we compare against.
        let mut deadline = deadline;
        let pending = {
            let st = lock(&self.state);
            if st.dirty {
                deadline = deadline.min(reconcile_at);
            }
            !st.owed.is_empty()
                || !st.schemas_owed.is_empty()
                || st
                    .reflected
                    .values()
                    .any(|r| r.slot.latest_sequence() != r.last_sent)
        } || recounted;
        if !pending {
            futex::wait_any(&words, Some(deadline));
        }
        for (s, t) in watched.iter().zip(tickets) {
            s.uncount_waiter(t);
        }
    }

    /// Sends every reflected slot's value that changed since last sent to all its targets, and
    /// the current value of the others to the hosts it is owed to: each value read and encoded
    /// once, however many hosts it goes to, and the small values for one host bundled into as
    /// few datagrams as they fit (`bundle.rs`). Schemas owed go first (under the same lock).
    fn send_new_values(&self, buffers: &mut Buffers) {
        let mut st = lock(&self.state);
        let schemas = std::mem::take(&mut st.schemas_owed);
        if !schemas.is_empty() {
            self.send_schemas(schemas, &mut buffers.message);
        }
        let NetState {
            reflected, owed, ..
        } = &mut *st;
        let mut owed = std::mem::take(owed);
        let mut announce_alive = false;
        for (name, r) in reflected.iter_mut() {
            let owed_hosts = owed.remove(name);
            let changed = r.slot.latest_sequence() != r.last_sent;
            let to: Vec<SocketAddr> = if changed {
                r.targets.values().map(|(a, ..)| *a).collect()
            } else if let Some(hosts) = owed_hosts {
                hosts
                    .iter()
                    .filter_map(|h| r.targets.get(h).map(|(a, ..)| *a))
                    .collect()
            } else {
                continue;
            };
            if to.is_empty() {
                continue;
            }
            let read = match r.slot.read(0, &mut buffers.value) {
                Ok(Some(read)) => read,
                Ok(None) => continue,
                Err(e) => {
                    // Passed over as a local reader passes it over: marked sent, so that this
                    // thread sleeps until the writer's next value instead of reading this one
                    // again at once, for ever, at a whole CPU.
                    if changed {
                        r.last_sent = r.slot.latest_sequence();
                    }
                    if self.warnings.due(Cause::UnreadableValue, name) {
                        tracing::warn!(
                            "{name}: its value cannot be read, so it is not sent to the hosts \
                             that subscribe to it: {e} (said once a minute)"
                        );
                    }
                    continue;
                }
            };
            if changed {
                r.last_sent = read.sequence;
                announce_alive |= !r.announced_alive
                    && r.slot.writer_state_of(Some(read.sequence)) == WriterState::Alive;
            }
            self.send_value(name, r, read, &to, buffers);
        }
        buffers.bundler.flush(|to, out| self.send_outgoing(to, out));
        if announce_alive {
            st.dirty = true;
        }
    }

    /// Sends the schemas owed to the hosts that asked for them (`wire::Want::schema`).
    fn send_schemas(
        &self,
        owed: Vec<(String, SocketAddr, super::SchemaBytes)>,
        message: &mut Vec<u8>,
    ) {
        for (name, to, schema) in owed {
            let offer = wire::SchemaOffer {
                name: &name,
                schema: &schema,
            };
            wire::encode_schema(&offer, message);
            self.send_message(wire::schema_channel_of(&name), message, &[to]);
        }
    }

    /// Sends the value just read (`buffers.value`) to `to`: a value that fits a bundle goes
    /// into each host's (sent when full, or at the end of the pass), a larger one alone, in as
    /// many datagrams as it needs.
    fn send_value(
        &self,
        name: &str,
        r: &mut Reflected,
        read: ReadInfo,
        to: &[SocketAddr],
        buffers: &mut Buffers,
    ) {
        let Buffers {
            value,
            message,
            bundler,
        } = buffers;
        if value.len() > self.max_value as usize {
            // Every write and refresh would say it again: once per slot, and counted.
            if !r.too_large_said {
                r.too_large_said = true;
                let hosts: Vec<&str> = r.targets.keys().map(String::as_str).collect();
                tracing::warn!(
                    "not reflecting {name} to {}: a value of {} bytes is larger than \
                     --max-value {} (raise --max-value on every registry of the domain; counted \
                     as too_large_to_send; said once per slot)",
                    hosts.join(", "),
                    value.len(),
                    self.max_value
                );
            }
            for _ in to {
                self.counters.drop(Drop::TooLargeToSend);
            }
            return;
        }
        // Which publisher wrote it, if it runs: a mirror elsewhere tells a restarted one by it
        // before the next announcement (0 for a value of a gone writer, or of an earlier one
        // than the running publisher, which has not written yet).
        let writer_first = if r.slot.writer_state_of(Some(read.sequence)) == WriterState::Alive {
            r.slot.writer_first_sequence().max(1)
        } else {
            0
        };
        // The write time read with the value: a separate read could pair this value with the
        // time of a newer write.
        wire::encode_value(
            &Value {
                name,
                sequence: read.sequence,
                write_time_ns: read.write_time_ns,
                schema_hash: r.hash,
                series: r.slot.series(),
                writer_first,
                bytes: value,
            },
            message,
        );
        let channel = wire::channel_of(name);
        if bundler.takes(message) {
            for dest in to {
                bundler.add(*dest, channel, message, |to, out| {
                    self.send_outgoing(to, out)
                });
            }
        } else {
            // The small values read before it go first: control values do not wait behind a
            // large one's datagrams.
            bundler.flush(|to, out| self.send_outgoing(to, out));
            let sent = self.send_message(channel, message, to);
            Counters::add(&self.counters.values_reflected, sent as u64);
        }
    }

    /// Sends a value alone or a bundle of them to one host.
    fn send_outgoing(&self, to: SocketAddr, out: Outgoing<'_>) {
        let sent = self.send_message(out.channel, out.message, &[to]);
        Counters::add(&self.counters.values_reflected, (sent * out.values) as u64);
    }

    /// Periodic work: expire hosts, reconcile with the registry, announce, refresh, statistics.
    fn tick(&self, shared: &Shared, now: Instant, message: &mut Vec<u8>) {
        self.follow_interface(now);
        let expired = {
            let mut st = lock(&self.state);
            let gone = st.peers.expire(now, self.forget_after);
            for (host, sender) in &gone {
                tracing::info!(
                    "forgot host '{host}': silent for longer than {:?} and three of its own \
                     announcement intervals",
                    self.forget_after
                );
                self.forget_sender(&mut st, *sender);
            }
            let aged = st.reassembly.expire(now, REASSEMBLY_AGE);
            for _ in 0..aged {
                self.counters.drop(Drop::Evicted);
            }
            !gone.is_empty()
        };
        let dirty = expired || {
            let mut st = lock(&self.state);
            if st.adoption_ends.is_some_and(|t| now >= t) {
                // What is announced as published here changes now (`writer_reconnecting`).
                st.adoption_ends = None;
                st.dirty = true;
            }
            st.dirty
        };
        let out = if dirty {
            shared.with_state(|reg| {
                let mut st = lock(&self.state);
                st.dirty = false;
                self.reconcile(reg, &mut st)
            })
        } else {
            Vec::new()
        };
        shared.send_outbox(out);
        let (announce, refresh, stats) = {
            let st = lock(&self.state);
            (
                now >= st.next_announce,
                now >= st.next_refresh,
                now >= st.next_stats,
            )
        };
        if announce {
            self.announce(shared, message);
        }
        if refresh {
            let mut st = lock(&self.state);
            st.next_refresh = now + self.refresh_every;
            let NetState {
                reflected,
                owed,
                schema_offers,
                schemas_owed,
                ..
            } = &mut *st;
            for (name, r) in reflected.iter() {
                owed.entry(name.clone())
                    .or_default()
                    .extend(r.targets.keys().cloned());
            }
            // A schema asked for is sent again while the ask lasts: one may have been lost.
            for ((name, _), (to, schema)) in schema_offers.iter() {
                schemas_owed.push((name.clone(), *to, Arc::clone(schema)));
            }
        }
        if stats {
            self.publish_stats(now, shared);
        }
    }

    /// Drops what is held for a host forgotten (it went silent, or left): its replay window
    /// (with a key only the sessions it had; without, everything) and its reassemblies.
    pub(super) fn forget_sender(&self, st: &mut NetState, sender: u64) {
        if self.key.is_some() {
            st.replay.forget(sender);
        } else {
            // Without a key a window keeps out nothing that could not be forged, and a forged
            // session far ahead would shut the real host out for ever.
            st.replay.remove(sender);
        }
        st.reassembly.forget(sender);
    }

    /// Says to every host that this registry stops: one announcement that expects no next one
    /// (`interval_ms` 0), with nothing published or wanted. They forget this host at once (its
    /// publishers with it) instead of after --forget-ms: a computer renamed and back at once
    /// is not taken for a second publisher of its own names meanwhile.
    pub fn farewell(&self) {
        let generation = lock(&self.state).generation + 1;
        let farewell = wire::Announce {
            host: self.host.clone(),
            data_port: self.data_port,
            interval_ms: 0,
            generation,
            part: 0,
            parts: 1,
            publications: Vec::new(),
            wants: Vec::new(),
        };
        let mut message = Vec::new();
        if wire::encode_announce(&farewell, &mut message).is_ok() {
            let to = self.announce_destinations();
            self.send_message(wire::ANNOUNCE_CHANNEL, &message, &to);
        }
    }

    /// Where announcements go: the group, the --peer hosts, and the hosts whose --peer names
    /// this one, unless ours names them too (they would get each announcement twice).
    fn announce_destinations(&self) -> Vec<SocketAddr> {
        let mut to = vec![self.group];
        to.extend(self.unicast_peers.iter().copied());
        let answers: Vec<SocketAddr> = lock(&self.state)
            .peers
            .unicast_answers()
            .filter(|a| !self.unicast_peers.iter().any(|p| p.ip() == a.ip()))
            .collect();
        to.extend(answers);
        to
    }

    /// Announces what this registry publishes and wants, in parts that each fit a datagram;
    /// the generation grows when that changed since the last announcement.
    fn announce(&self, shared: &Shared, message: &mut Vec<u8>) {
        let whole = shared.with_state(|reg| self.our_announce(reg));
        let generation = {
            let mut st = lock(&self.state);
            if st.last_announce.as_ref() != Some(&whole) {
                st.generation += 1;
            }
            st.generation
        };
        let to = self.announce_destinations();
        for part in announce::split(&whole, generation, self.chunk) {
            if let Err(e) = wire::encode_announce(&part, message) {
                tracing::warn!("cannot encode the announcement: {e}");
                return;
            }
            self.send_message(wire::ANNOUNCE_CHANNEL, message, &to);
        }
        let mut st = lock(&self.state);
        st.last_announce = Some(whole);
        let now = Instant::now();
        st.last_announced = now;
        st.next_announce = now + self.announce_every;
    }

    fn publish_stats(&self, now: Instant, shared: &Shared) {
        // The registry's statistics slot as it holds it now, to map it when it was not made
        // yet at start or was made anew since (a file of that name it did not make is not
        // written to).
        let name = super::stats_slot_name(&self.host).ok();
        let (conflicts, registry_slot) = shared.with_state(|reg| {
            let slot = name
                .as_ref()
                .and_then(|name| Some((reg.slot_file(name)?, reg.segment_name(name))));
            (reg.conflicts, slot)
        });
        let mut st = lock(&self.state);
        st.next_stats = now + STATS_EVERY;
        let mut stats = NetStats::load(&self.counters);
        stats.host = self.host.clone();
        stats.authenticated = self.key.is_some();
        stats.conflicts += conflicts;
        stats.reassemblies_pending = st.reassembly.pending() as u64;
        stats.reassembly_bytes = st.reassembly.held() as u64;
        stats.peers = st
            .peers
            .iter()
            .map(|p| PeerStats {
                host: p.announce.host.clone(),
                address: p.data_addr.to_string(),
                publications: p.announce.publications.len() as u64,
                wants: p.announce.wants.len() as u64,
                last_heard_ms: now.duration_since(p.last_heard).as_millis() as u64,
            })
            .collect();
        if st.stats_slot.as_ref().is_none_or(|slot| !slot.is_current()) {
            if let Some((file, segment)) = registry_slot {
                let ours = bus::schema::Schema::of_serde::<NetStats>()
                    .ok()
                    .map(|s| s.hash());
                match Slot::open(&segment, true) {
                    // Not one of another type held under the name (an older build's, in use):
                    // its readers would read these bytes as their type.
                    Ok(new) if new.file() == file && ours == Some(new.schema().hash) => {
                        st.stats_slot = Some(new)
                    }
                    // Made anew again since the look above (mapped at the next turn), or
                    // another type's.
                    Ok(_) => {}
                    Err(e) => {
                        if self.warnings.due(Cause::StatsSlot, &segment) {
                            tracing::warn!("cannot map the statistics slot {segment}: {e}");
                        }
                    }
                }
            }
        }
        if let Some(slot) = st.stats_slot.as_ref() {
            let mut bytes = Vec::new();
            if bus::codec::encode_into(&stats, &mut bytes).is_ok() {
                let _ = slot.write(&bytes);
            }
        }
    }
}
