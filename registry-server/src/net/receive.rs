//! Receiving: the two receiver threads' loop, and what one datagram does: checks (domain, own,
//! loopback, MAC, replay window), reassembly, then an announcement updates the peers and a value
//! is written into its mirror slot if it is newer than what the mirror holds (each value of a
//! bundle on its own: `bundle.rs`). A batch of
//! datagrams that the kernel coalesced (`UDP_GRO`, set at start-up) comes in one read and is cut
//! apart here: a 64 KiB value sent in one `UDP_SEGMENT` call is then also received in one.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::auth::Stream;
use super::bundle::BUNDLE_CHANNEL;
use super::reassembly::{Outcome, Reassembler};
use super::stats::Counters;
use super::warn::Cause;
use super::wire::{self, Announce, Datagram, Drop, Message, SchemaOffer, Value};
use super::{lock, Net, NetState};

/// What became of a datagram that was not dropped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Received {
    /// Taken in: a message (or a fragment of one) from another registry.
    Taken,
    /// This registry's own, looped back by multicast: expected, and no drop (another registry
    /// under this host name is one: `Drop::Own`).
    LoopedBack,
}

impl Net {
    pub(super) fn receive(&self, socket: &UdpSocket) {
        // The largest datagram, and the most the kernel coalesces into one read (UDP_GRO).
        let mut buf = vec![0u8; 65536];
        let mut control = nix::cmsg_space!(i32, nix::libc::in_pktinfo);
        loop {
            let (n, from, read, unicast) = match receive_batch(socket, &mut buf, &mut control) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("receiving: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let Some(each) = read.datagram_size(n) else {
                Counters::add(&self.counters.received_datagrams, 1);
                Counters::add(&self.counters.received_bytes, n as u64);
                self.counters.drop(Drop::Oversized);
                continue;
            };
            if n == 0 {
                // An empty datagram, which `chunks` would yield nothing for: dropped as
                // malformed and counted like any other.
                self.count_datagram(&[], from, unicast);
            }
            for datagram in buf[..n].chunks(each) {
                self.count_datagram(datagram, from, unicast);
            }
        }
    }

    /// Handles one received datagram and counts it (received, or looped back, and why it was
    /// dropped).
    fn count_datagram(&self, datagram: &[u8], from: SocketAddr, unicast: bool) {
        let result = self.on_datagram(datagram, from, unicast);
        if result == Ok(Received::LoopedBack) {
            Counters::add(&self.counters.looped_back, 1);
            return;
        }
        Counters::add(&self.counters.received_datagrams, 1);
        Counters::add(&self.counters.received_bytes, datagram.len() as u64);
        if let Err(why) = result {
            self.counters.drop(why);
        }
    }

    /// Everything done with one received datagram (`unicast`: sent to this host's address,
    /// not to the group); `Err` says why it was dropped.
    pub(super) fn on_datagram(
        &self,
        bytes: &[u8],
        from: SocketAddr,
        unicast: bool,
    ) -> Result<Received, Drop> {
        if let Some((version, domain)) = wire::other_version(bytes) {
            // A registry of this domain built from another release (a payload computer not
            // updated with the robot): nothing it sends can be read here, nor the other way.
            let ip = from.ip();
            if domain == self.domain_id && self.warnings.due(Cause::OtherVersion, &ip.to_string()) {
                tracing::warn!(
                    "datagrams from {ip} are of Baton's wire version {version}, this registry's \
                     is {}: run one Baton release on every computer of the domain (dropped, \
                     counted as malformed; said once a minute)",
                    wire::VERSION
                );
            }
            return Err(Drop::Malformed);
        }
        // Bounded by --max-value below, once the datagram is known to be of this domain: a
        // message over it is then said in the log.
        let d = wire::decode_datagram(bytes, u32::MAX)?;
        let h = d.header;
        if h.domain != self.domain_id {
            return Err(Drop::OtherDomain);
        }
        if h.sender == self.sender_id && h.session == self.session {
            return Ok(Received::LoopedBack);
        }
        if from.ip().is_loopback() {
            return Err(Drop::Loopback);
        }
        // A key on one side only, or two different keys, drop everything silently but for
        // the counters: said in the log too, once a minute per cause and source.
        let ip = from.ip();
        match (&self.key, d.mac) {
            (Some(key), Some(mac)) if key.verify(d.signed, mac) => {}
            (Some(_), Some(_)) => {
                if self.warnings.due(Cause::BadMac, &ip.to_string()) {
                    tracing::warn!(
                        "datagrams from {ip} fail the MAC: a different key? (dropped, counted \
                         as bad_mac; said once a minute)"
                    );
                }
                return Err(Drop::BadMac);
            }
            (Some(_), None) => {
                if self.warnings.due(Cause::Unauthenticated, &ip.to_string()) {
                    tracing::warn!(
                        "unauthenticated datagrams from {ip} while this registry has a key: \
                         give that registry the same --key-file (dropped, counted as \
                         unauthenticated; said once a minute)"
                    );
                }
                return Err(Drop::Unauthenticated);
            }
            (None, Some(_)) => {
                if self.warnings.due(Cause::MacWithoutKey, &ip.to_string()) {
                    tracing::warn!(
                        "datagrams from {ip} carry a MAC but this registry has no key: give it \
                         the same --key-file (dropped, counted as bad_mac; said once a minute)"
                    );
                }
                return Err(Drop::BadMac);
            }
            (None, None) => {}
        }
        if h.sender == self.sender_id {
            // Another registry under this host name (authenticated, when a key is set): the
            // two cannot see each other. Said once a minute, not per datagram.
            self.warn_name_clash(from);
            return Err(Drop::Own);
        }
        // --max-value bounds values. Announcement parts are cut to the sender's datagrams (a
        // part can come out larger, in fragments: the reassembly limit holds those), and a
        // bundle is one datagram (reassembly refuses one in fragments) whose values are each
        // held to --max-value below.
        let of_values = ![wire::ANNOUNCE_CHANNEL, BUNDLE_CHANNEL].contains(&h.channel);
        if h.total > self.max_message && of_values {
            // Said once a minute per source and channel; described only then.
            let subject = format!("{ip} {:#x}", h.channel);
            if self.warnings.due(Cause::OverMaxValue, &subject) {
                let what = describe_channel(&lock(&self.state), h.channel);
                tracing::warn!(
                    "a message of {} bytes ({what}) from {ip} is larger than --max-value {} \
                     allows: raise --max-value on this registry (dropped, counted as \
                     oversized; said once a minute)",
                    h.total,
                    self.max_value
                );
            }
            return Err(Drop::Oversized);
        }
        let mut st = lock(&self.state);
        let stream = if h.channel == wire::ANNOUNCE_CHANNEL {
            Stream::Announcements
        } else {
            Stream::Values
        };
        if stream == Stream::Values {
            // Values are taken only from the session whose announcements are followed, and
            // checked before the replay window sees them: a replayed value of another session
            // (an earlier run whose clock read later) would otherwise move the window to that
            // session and shut out every real value after it. Sessions are start times, but
            // they are not compared: a computer without a real-time clock may restart with its
            // clock set back. After our own restart the replay window is empty, so this check
            // (and the mirror's kept session, `on_value`) is what refuses an old run's packets.
            match st.peers.session_of(h.sender) {
                None => return Err(Drop::Unexpected),
                Some(followed) if followed != h.session => return Err(Drop::Older),
                Some(_) => {}
            }
        }
        // Nothing below changes what is kept about the sender (replay window, delivered
        // messages, when it was last heard) before the datagram proved valid: one forged or
        // broken datagram must not shut its real sender out.
        if let Err(why) = st.replay.check(h.sender, stream, h.session, h.packet) {
            let heard = st.replay.session(h.sender, stream);
            if heard.is_some_and(|s| h.session < s)
                && self.warnings.due(Cause::OlderRun, &ip.to_string())
            {
                // The later run's host, heard from another address: a second registry with the
                // same --host name (two computers made from one image), not a restart.
                let later_elsewhere = st
                    .peers
                    .iter()
                    .find(|p| p.sender == h.sender && p.data_addr.ip() != ip)
                    .map(|p| (p.announce.host.clone(), p.data_addr.ip()));
                if let Some((host, other)) = later_elsewhere {
                    tracing::warn!(
                        "datagrams from {ip} name host '{host}', as do those from {other} of a \
                         later run: two registries use the host name '{host}' (give each \
                         computer its own --host; the default is the computer's host name). \
                         Those from {ip} are refused as replays until this registry restarts{} \
                         (counted as replayed; said once a minute)",
                        if self.key.is_some() {
                            ""
                        } else {
                            " or forgets that host"
                        }
                    );
                    return Err(why);
                }
                tracing::warn!(
                    "datagrams from {ip} belong to an older run of its registry than the one \
                     heard before: restarted with its clock set back (a computer without a \
                     real-time clock), or replays. Refused as replays until this registry \
                     restarts{}; start that registry with --state-dir (systemd's \
                     StateDirectory=) so that its runs always count up (counted as replayed; \
                     said once a minute)",
                    if self.key.is_some() {
                        ""
                    } else {
                        " or forgets that host"
                    }
                );
            }
            return Err(why);
        }
        let now = Instant::now();
        let (outcome, displaced) = st.reassembly.add(&d, now);
        for _ in 0..displaced.evicted {
            self.counters.drop(Drop::Evicted);
        }
        for _ in 0..displaced.superseded {
            self.counters.drop(Drop::Superseded);
        }
        let message = match outcome {
            Outcome::Complete(m) => m,
            Outcome::Pending => {
                // A fragment taken for reassembly: its packet number enters the replay window
                // with its message's last, once that is found valid; a replay of it meanwhile
                // is refused by the reassembly (a fragment held), or is stale (delivered).
                st.peers.touch(h.sender, h.session, now);
                return Ok(Received::Taken);
            }
            Outcome::Dropped(Drop::Oversized) => {
                // Only a message that could never fit is refused so; others evict older ones.
                let subject = format!("{ip} {:#x}", h.channel);
                if self.warnings.due(Cause::OverReassemblyLimit, &subject) {
                    let what = describe_channel(&st, h.channel);
                    tracing::warn!(
                        "a message of {} bytes ({what}) from {ip} does not fit \
                         --reassembly-limit {} (it needs {}): raise --reassembly-limit on this \
                         registry (dropped, counted as oversized; said once a minute)",
                        h.total,
                        st.reassembly.limit(),
                        Reassembler::cost(h.total)
                    );
                }
                return Err(Drop::Oversized);
            }
            Outcome::Dropped(why) => return Err(why),
        };
        match wire::decode_message(&message)? {
            Message::Announce(a) if a.interval_ms == 0 => {
                // A farewell: the sender is forgotten, and with it (without a key) its replay
                // window. Not committed to the window afresh: the window would outlive the
                // forgotten host, and a farewell forged with a session far ahead (or a
                // computer back with an earlier clock) would shut that host out for good.
                // Its own repetitions are known by `has_left`.
                self.on_announce(&mut st, &d, a, from, unicast)?;
                st.reassembly.delivered(&d);
                return Ok(Received::Taken);
            }
            Message::Announce(a) => self.on_announce(&mut st, &d, a, from, unicast)?,
            // A value comes on a value channel only (its session was checked above), never
            // alone on the bundles' channel.
            Message::Value(v) if stream == Stream::Values && h.channel != BUNDLE_CHANNEL => {
                self.on_value(&mut st, &d, &v, ip)?
            }
            Message::Value(_) => return Err(Drop::Malformed),
            Message::Schema(offer) if stream == Stream::Values => {
                self.on_schema(&mut st, &d, &offer)?
            }
            Message::Schema(_) => return Err(Drop::Malformed),
            // Taken whole (it passed the checks above); each value on its own, a value
            // dropped counted as one that came alone would be.
            Message::Values(values) if h.channel == BUNDLE_CHANNEL => {
                for v in values.iter() {
                    match self.on_value(&mut st, &d, &v, ip) {
                        Ok(()) => {
                            // An older value of the slot still in pieces is of no use now.
                            let channel = wire::channel_of(v.name);
                            if st
                                .reassembly
                                .supersede(h.sender, channel, h.session, h.message)
                            {
                                self.counters.drop(Drop::Superseded);
                            }
                        }
                        Err(why) => self.counters.drop(why),
                    }
                }
            }
            Message::Values(_) => return Err(Drop::Malformed),
        }
        st.replay.commit(h.sender, stream, h.session, h.packet);
        st.reassembly.delivered(&d);
        st.peers.touch(h.sender, h.session, now);
        Ok(Received::Taken)
    }

    fn warn_name_clash(&self, from: SocketAddr) {
        if !self.warnings.due(Cause::NameClash, &from.ip().to_string()) {
            return;
        }
        tracing::warn!(
            "another registry at {} uses this host name '{}': the two cannot see each other; \
             give each computer its own --host",
            from.ip(),
            self.host
        );
    }

    fn on_announce(
        &self,
        st: &mut NetState,
        d: &Datagram<'_>,
        a: Announce,
        from: SocketAddr,
        unicast: bool,
    ) -> Result<(), Drop> {
        if d.header.channel != wire::ANNOUNCE_CHANNEL
            || wire::fnv1a(a.host.as_bytes()) != d.header.sender
            || a.host == self.host
            || super::check_host_name(&a.host).is_err()
            // No Rust type's name has one: it would put terminal escapes into `bus-inspect`.
            || a.publications
                .iter()
                .any(|p| p.type_name.chars().any(char::is_control))
        {
            return Err(Drop::Malformed);
        }
        if st.peers.has_left(d.header.sender, d.header.session) {
            // Of a run that said it stops, come late.
            return Ok(());
        }
        if a.interval_ms == 0 {
            // Its registry stops (`Net::farewell`): forgotten now, not after
            // --forget-ms, so that the same computer back under another --host is not taken
            // for a second publisher of its names.
            if let Some(sender) = st.peers.leave(&a.host, d.header.session) {
                tracing::info!("host '{}' left: its registry stopped", a.host);
                self.forget_sender(st, sender);
                st.dirty = true;
                self.wake();
            }
            return Ok(());
        }
        let addr = SocketAddr::new(from.ip(), a.data_port);
        let host = a.host.clone();
        let change = st.peers.heard(a, d.header.session, addr, Instant::now());
        // By unicast from a host this one names with --peer: its answer to this host's own
        // announcements, which go to it by unicast already.
        if unicast && !self.unicast_peers.iter().any(|p| p.ip() == from.ip()) {
            st.peers.heard_by_unicast(&host);
        }
        if change.is_new() {
            // Answer a newcomer at once so that it learns our publications without waiting.
            st.announce_soon();
        }
        if change.changed() {
            st.dirty = true;
            self.wake();
        }
        Ok(())
    }

    /// A publication's schema, sent because this host asked for it (`wire::Want::schema`):
    /// kept for the next reconcile if it is the one its host announces.
    fn on_schema(
        &self,
        st: &mut NetState,
        d: &Datagram<'_>,
        offer: &SchemaOffer<'_>,
    ) -> Result<(), Drop> {
        if d.header.channel != wire::schema_channel_of(offer.name) {
            return Err(Drop::Malformed);
        }
        let asked = st
            .last_announce
            .as_ref()
            .is_some_and(|a| a.wants.iter().any(|w| w.schema && w.name == offer.name));
        let host = st.peers.host_of(d.header.sender).ok_or(Drop::Unexpected)?;
        let announced = st.peers.publication(host, offer.name);
        let (Some(announced), true) = (announced, asked) else {
            return Err(Drop::Unexpected);
        };
        let schema = bus::schema::Schema::from_bytes(offer.schema).map_err(|_| Drop::Malformed)?;
        if schema.hash().0 != announced.schema_hash {
            return Err(Drop::Malformed);
        }
        let key = (offer.name.to_owned(), host.to_owned());
        st.schemas_heard.insert(key, offer.schema.to_vec());
        st.dirty = true;
        self.wake();
        Ok(())
    }

    /// A value larger than this registry's `--max-value` is dropped as oversized and said once a
    /// minute per source and slot (the message check in `on_datagram` stops most of those that
    /// come alone earlier, with their name and fields counted).
    fn within_max_value(&self, v: &Value<'_>, from: std::net::IpAddr) -> Result<(), Drop> {
        if v.bytes.len() <= self.max_value as usize {
            return Ok(());
        }
        if self
            .warnings
            .due(Cause::OverMaxValue, &format!("{from} {}", v.name))
        {
            tracing::warn!(
                "a value of {} bytes of {} from {from} is larger than --max-value {} allows: \
                 raise --max-value on this registry (dropped, counted as oversized; said once a \
                 minute)",
                v.bytes.len(),
                v.name,
                self.max_value
            );
        }
        Err(Drop::Oversized)
    }

    /// Writes a value, come alone or in a bundle from `from`, into its mirror if it is newer
    /// than what the mirror holds.
    fn on_value(
        &self,
        st: &mut NetState,
        d: &Datagram<'_>,
        v: &Value<'_>,
        from: std::net::IpAddr,
    ) -> Result<(), Drop> {
        self.within_max_value(v, from)?;
        let session = d.header.session;
        let host = st.peers.host_of(d.header.sender).ok_or(Drop::Unexpected)?;
        let m = st.mirrors.get_mut(v.name).ok_or(Drop::Unexpected)?;
        if m.origin != host || m.hash != v.schema_hash || m.series != v.series {
            // Another series than the one announced: of the origin's slot made anew before
            // its announcement came, or a late value of the one before. Ordering across two
            // series is unknown: the announcement and the next refresh bring the value.
            return Err(Drop::Unexpected);
        }
        if m.origin_session != session {
            // `on_datagram` let through only the session followed from that host now: the
            // origin registry restarted, and its sequence numbers are a new series.
            m.origin_session = session;
            m.last_sequence = 0;
        }
        if v.sequence == m.last_sequence {
            // The value the mirror holds: a refresh, not news and not a fault.
            Counters::add(&self.counters.values_unchanged, 1);
            return Ok(());
        }
        if v.sequence < m.last_sequence {
            return Err(Drop::Older);
        }
        if v.bytes.len() > m.slot.capacity() {
            return Err(Drop::Oversized);
        }
        if m.written_by_a_newer_publisher(v.writer_first) {
            // A publisher restarted at the origin, whose values come before the announcement
            // that says it runs: its value reads as its own, alive, and as another writer's
            // than the one before (a driver restarted there).
            m.date_held(v.series, v.writer_first);
        }
        if m.publisher
            .is_some_and(|(series, first)| series == m.series && v.sequence < first)
        {
            // An earlier publisher's value, come late: it reads as its gone writer's (the
            // write below makes it sequence `latest + 1`).
            let latest = m.slot.latest_sequence();
            m.slot.set_writer_first_sequence(latest.saturating_add(2));
        }
        m.last_sequence = v.sequence;
        if !m.origin_in_slot {
            // The first value of this origin in the slot (`Registry::ensure_mirror`).
            m.slot.set_origin(&m.origin);
            m.origin_in_slot = true;
        }
        m.slot.set_origin_session(session);
        m.slot.set_origin_series(v.series);
        m.slot.set_origin_sequence(v.sequence);
        if m.slot.write_at(v.bytes, v.write_time_ns).is_err() {
            return Err(Drop::Oversized);
        }
        Counters::add(&self.counters.values_mirrored, 1);
        Ok(())
    }
}

/// What a channel carries, for a warning: an announcement, or the values of a slot mirrored
/// here or announced by a peer (else only the channel is known).
fn describe_channel(st: &NetState, channel: u64) -> String {
    if channel == wire::ANNOUNCE_CHANNEL {
        return "an announcement".to_owned();
    }
    if channel == BUNDLE_CHANNEL {
        return "a bundle of values".to_owned();
    }
    let announced = st
        .peers
        .iter()
        .flat_map(|p| p.announce.publications.iter().map(|i| i.name.as_str()));
    let mut names = st.mirrors.keys().map(String::as_str).chain(announced);
    names
        .find_map(|name| {
            if wire::channel_of(name) == channel {
                Some(format!("a value of {name}"))
            } else if wire::schema_channel_of(name) == channel {
                Some(format!("the schema of {name}"))
            } else {
                None
            }
        })
        .unwrap_or_else(|| format!("a value on channel {channel:#x}, of no slot announced"))
}

/// What one read from a socket holds.
enum Read {
    /// One datagram.
    One,
    /// Several datagrams from one sender laid end to end (UDP_GRO), each of this many bytes
    /// but the last.
    Batch(usize),
    /// A datagram larger than the buffer, cut short by the kernel (nothing valid is that big).
    CutShort,
}

impl Read {
    /// The size of each datagram in a read of `n` bytes (the last may be shorter); `None` for
    /// a datagram cut short.
    fn datagram_size(&self, n: usize) -> Option<usize> {
        match self {
            Read::One => Some(n.max(1)),
            Read::Batch(size) => Some((*size).max(1)),
            Read::CutShort => None,
        }
    }
}

/// Reads one datagram or one coalesced batch: its length, its source, what it holds and
/// whether it was sent to this host's own address (unicast; known from `IP_PKTINFO`, without
/// which everything reads as sent to the group). A source that is not IPv4 is an error.
fn receive_batch(
    socket: &UdpSocket,
    buf: &mut [u8],
    control: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Read, bool)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrIn};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrIn>(
        socket.as_raw_fd(),
        &mut iov,
        Some(control),
        MsgFlags::empty(),
    )?;
    let from = msg
        .address
        .map(|a| SocketAddr::V4(a.into()))
        .ok_or_else(|| std::io::Error::other("a datagram from a non-IPv4 source"))?;
    let mut read = Read::One;
    let mut unicast = false;
    for c in msg.cmsgs()? {
        match c {
            ControlMessageOwned::UdpGroSegments(size) => {
                read = usize::try_from(size).map_or(Read::One, Read::Batch);
            }
            ControlMessageOwned::Ipv4PacketInfo(info) => {
                // The header's destination address (network byte order).
                let to = std::net::Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr));
                unicast = !to.is_multicast() && !to.is_broadcast();
            }
            _ => {}
        }
    }
    if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        read = Read::CutShort;
    }
    Ok((msg.bytes, from, read, unicast))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{setsockopt, sockopt};

    /// A loopback socket that takes coalesced batches (`UDP_GRO`), and a sender.
    fn sockets() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt(&rx, sockopt::UdpGroSegment, &true).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (rx, UdpSocket::bind("127.0.0.1:0").unwrap())
    }

    /// One read from `rx`: the bytes, their source and what they hold.
    fn read_once(rx: &UdpSocket) -> (Vec<u8>, SocketAddr, Read) {
        let mut buf = vec![0u8; 65536];
        let mut control = nix::cmsg_space!(i32, nix::libc::in_pktinfo);
        let (n, from, read, _) = receive_batch(rx, &mut buf, &mut control).unwrap();
        buf.truncate(n);
        (buf, from, read)
    }

    /// Three datagrams sent in one `UDP_SEGMENT` call come back as those three datagrams, in
    /// one read (loopback hands the batch over whole to a socket with `UDP_GRO`).
    #[test]
    fn a_batch_sent_in_one_call_is_read_in_one_call_and_cut_into_its_datagrams() {
        let (rx, tx) = sockets();
        setsockopt(&tx, sockopt::UdpGsoSegment, &100).unwrap();
        let sent: Vec<Vec<u8>> = [(1u8, 100), (2, 100), (3, 40)]
            .iter()
            .map(|&(byte, len)| vec![byte; len])
            .collect();
        tx.send_to(&sent.concat(), rx.local_addr().unwrap())
            .unwrap();
        let (bytes, from, read) = read_once(&rx);
        assert_eq!(from, tx.local_addr().unwrap());
        assert!(
            matches!(read, Read::Batch(100)),
            "one read of the whole batch"
        );
        let got: Vec<Vec<u8>> = bytes
            .chunks(read.datagram_size(bytes.len()).unwrap())
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(got, sent);
    }

    #[test]
    fn a_single_datagram_is_one_datagram() {
        let (rx, tx) = sockets();
        tx.send_to(&[7u8; 300], rx.local_addr().unwrap()).unwrap();
        let (bytes, _, read) = read_once(&rx);
        assert_eq!(bytes.len(), 300);
        assert!(matches!(read, Read::One));
        assert_eq!(read.datagram_size(bytes.len()), Some(300));
    }
}
