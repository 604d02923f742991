//! Receiving: the two receiver threads' loop, and what one datagram does: checks (domain, own,
//! loopback, MAC, replay window), reassembly, then an announcement updates the peers and a value
//! is written into its mirror slot if it is newer than what the mirror holds.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use super::reassembly::Outcome;
use super::stats::Counters;
use super::wire::{self, Announce, Datagram, Drop, Message, Value};
use super::{lock, Net, NetState};

impl Net {
    pub(super) fn receive(&self, socket: &UdpSocket) {
        let mut buf = vec![0u8; 65536];
        loop {
            let (n, from) = match socket.recv_from(&mut buf) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("receiving: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            Counters::add(&self.counters.received_datagrams, 1);
            Counters::add(&self.counters.received_bytes, n as u64);
            if let Err(why) = self.on_datagram(&buf[..n], from) {
                self.counters.drop(why);
            }
        }
    }

    /// Everything done with one received datagram; `Err` says why it was dropped.
    pub(super) fn on_datagram(&self, bytes: &[u8], from: SocketAddr) -> Result<(), Drop> {
        let d = wire::decode_datagram(bytes, self.max_message)?;
        let h = d.header;
        if h.domain != self.domain_id {
            return Err(Drop::OtherDomain);
        }
        if h.sender == self.sender_id {
            return Err(Drop::Own);
        }
        if from.ip().is_loopback() {
            return Err(Drop::Loopback);
        }
        match (&self.key, d.mac) {
            (Some(key), Some(mac)) if key.verify(d.signed, mac) => {}
            (Some(_), None) => return Err(Drop::Unauthenticated),
            _ if d.mac.is_some() || self.key.is_some() => return Err(Drop::BadMac),
            _ => {}
        }
        let mut st = lock(&self.state);
        st.replay.accept(h.sender, h.session, h.packet)?;
        let (outcome, evicted) = st.reassembly.add(&d, Instant::now());
        for _ in 0..evicted {
            self.counters.drop(Drop::Evicted);
        }
        let message = match outcome {
            Outcome::Complete(m) => m,
            Outcome::Pending => return Ok(()),
            Outcome::Dropped(why) => return Err(why),
        };
        match wire::decode_message(&message)? {
            Message::Announce(a) => self.on_announce(&mut st, &d, a, from),
            Message::Value(v) => self.on_value(&mut st, &d, &v),
        }
    }

    fn on_announce(
        &self,
        st: &mut NetState,
        d: &Datagram<'_>,
        a: Announce,
        from: SocketAddr,
    ) -> Result<(), Drop> {
        if d.header.channel != wire::ANNOUNCE_CHANNEL
            || wire::fnv1a(a.host.as_bytes()) != d.header.sender
            || a.host == self.host
        {
            return Err(Drop::Malformed);
        }
        let addr = SocketAddr::new(from.ip(), a.data_port);
        let change = st.peers.heard(a, d.header.session, addr, Instant::now());
        if change.is_new() {
            // Answer a newcomer at once so that it learns our publications without waiting.
            st.next_announce = Instant::now();
        }
        if change.changed() {
            st.dirty = true;
            self.wake();
        }
        Ok(())
    }

    fn on_value(&self, st: &mut NetState, d: &Datagram<'_>, v: &Value<'_>) -> Result<(), Drop> {
        let session = d.header.session;
        let host = st.peers.host_of(d.header.sender).ok_or(Drop::Unexpected)?;
        let m = st.mirrors.get_mut(v.name).ok_or(Drop::Unexpected)?;
        if m.origin != host || m.hash != v.schema_hash {
            return Err(Drop::Unexpected);
        }
        if m.origin_session != session {
            // The origin registry restarted: its sequence numbers are a new series. Packets of
            // its old session never get here (the replay window refuses them).
            m.origin_session = session;
            m.last_sequence = 0;
        }
        if v.sequence <= m.last_sequence {
            return Err(Drop::Older);
        }
        if v.bytes.len() > m.slot.capacity() {
            return Err(Drop::Oversized);
        }
        m.last_sequence = v.sequence;
        m.slot.set_origin_sequence(v.sequence);
        if m.slot.write_at(v.bytes, v.write_time_ns).is_err() {
            return Err(Drop::Oversized);
        }
        Counters::add(&self.counters.values_mirrored, 1);
        Ok(())
    }
}
