//! Network reflection: the registries of one domain on several computers find each other by
//! UDP multicast (or a unicast peer list), announce their public publications and the names
//! they need, and send each written value to the hosts that need it, where the registry writes
//! it into a local mirror slot.
//!
//! Pieces: `wire` (the datagram format; pure, never panics), `auth` (keyed MAC and replay
//! window), `reassembly` (fragments to messages, bounded memory), `faults` (test-only loss,
//! duplication, reordering), `stats` (counters and the published statistics), `peers` (what
//! each remote host announced and the decisions drawn from it). This module is the shell: the
//! sockets, the threads and the glue to the registry's state.
//!
//! Threads: two receivers (the discovery socket on the multicast port, the data socket on an
//! ephemeral port), and the reflector, which sleeps on the notify words of the reflected slots
//! (`futex_waitv`) and on a private word poked when anything changes, sends new values, and on
//! a tick announces, refreshes, forgets silent hosts and publishes the statistics.

pub mod auth;
pub mod faults;
pub mod peers;
pub mod reassembly;
pub mod stats;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bus::futex;
use bus::schema::Schema;
use bus::slot::Slot;
use bus::SlotName;
use socket2::{Domain as SockDomain, Protocol, SockAddr, Socket, Type};

use self::auth::{Key, Replay};
use self::faults::{Action, Faults};
use self::peers::Peers;
use self::reassembly::{Outcome, Reassembler};
use self::stats::{Counters, NetStats, PeerStats};
use self::wire::{Announce, Datagram, Drop, Header, Message, PubInfo, Value};
use crate::server::Shared;

/// Network settings of one registry.
pub struct NetConfig {
    /// This host's name on the bus (origin of its values); unique per domain.
    pub host: String,
    pub group: Ipv4Addr,
    pub port: u16,
    /// Local IPv4 address of the interface to use for multicast; `None`: the routing table's.
    pub interface: Option<Ipv4Addr>,
    pub ttl: u32,
    /// Registries reached by unicast (their discovery port), for networks without multicast.
    pub peers: Vec<SocketAddr>,
    /// Path MTU: datagrams never exceed it (values are fragmented below it).
    pub mtu: usize,
    pub announce_every: Duration,
    pub forget_after: Duration,
    pub refresh_every: Duration,
    pub key: Option<Key>,
    /// Largest message (value plus name) accepted or sent.
    pub max_message: u32,
    /// Bytes held at most for incomplete messages.
    pub reassembly_limit: usize,
    pub faults: Option<Faults>,
}

/// Longest time an incomplete message may wait for its missing fragments.
const REASSEMBLY_AGE: Duration = Duration::from_secs(5);
/// Reflector tick: announcements, refreshes, expiry and statistics are checked this often.
const TICK: Duration = Duration::from_millis(50);
/// Statistics slot update interval.
const STATS_EVERY: Duration = Duration::from_secs(1);
/// Most slots one `futex_waitv` call watches (one word is the change word); with more the
/// reflector also scans on a short timeout.
const WATCH_MAX: usize = futex::WAITV_MAX - 1;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Name of a host's statistics slot: `/baton/registry/<host>/net`.
pub fn stats_slot_name(host: &str) -> Result<SlotName, String> {
    SlotName::public(&format!("/baton/registry/{host}/net"))
        .map_err(|_| format!("host name {host:?} must be letters, digits, '_', '-' or '.'"))
}

struct SendState {
    packet: u64,
    message: u64,
    faults: Option<Faults>,
    datagram: Vec<u8>,
}

/// A local slot sent to remote hosts.
struct Reflected {
    slot: Arc<Slot>,
    hash: u64,
    /// Host → (data address, that host's session when it was added).
    targets: BTreeMap<String, (SocketAddr, u64)>,
    /// Slot sequence last sent to every target.
    last_sent: u64,
}

/// A local slot written with a remote host's values.
struct Mirror {
    slot: Slot,
    origin: String,
    hash: u64,
    /// Session of the origin registry the ordering below belongs to.
    origin_session: u64,
    last_sequence: u64,
}

struct NetState {
    peers: Peers,
    replay: Replay,
    reassembly: Reassembler,
    mirrors: HashMap<String, Mirror>,
    reflected: BTreeMap<String, Reflected>,
    /// Values owed now to new targets: (name, host).
    owed: Vec<(String, String)>,
    last_announce: Option<Announce>,
    next_announce: Instant,
    next_refresh: Instant,
    next_stats: Instant,
    /// Conflicts logged once each: (name, host).
    logged: BTreeSet<(String, String)>,
    stats_slot: Option<Slot>,
    dirty: bool,
}

pub struct Net {
    host: String,
    domain_id: u64,
    sender_id: u64,
    session: u64,
    group: SocketAddr,
    unicast_peers: Vec<SocketAddr>,
    chunk: usize,
    max_message: u32,
    announce_every: Duration,
    forget_after: Duration,
    refresh_every: Duration,
    key: Option<Key>,
    data: UdpSocket,
    discovery: UdpSocket,
    data_port: u16,
    send: Mutex<SendState>,
    state: Mutex<NetState>,
    counters: Counters,
    /// Poked (private futex) whenever the registry's endpoints change.
    change: AtomicU32,
}

impl Net {
    /// Opens the sockets. Fails with one clear line if the configuration cannot work.
    pub fn open(cfg: NetConfig, domain: &bus::Domain) -> Result<Net, String> {
        stats_slot_name(&cfg.host)?;
        if cfg.host.len() > 64 {
            return Err(format!("host name {:?} is longer than 64 bytes", cfg.host));
        }
        if !cfg.group.is_multicast() {
            return Err(format!("{} is not a multicast group", cfg.group));
        }
        let chunk = wire::chunk_for_mtu(cfg.mtu, cfg.key.is_some())
            .ok_or_else(|| format!("MTU {} leaves no room for a datagram", cfg.mtu))?;
        let iface = cfg.interface.unwrap_or(Ipv4Addr::UNSPECIFIED);
        if iface.is_loopback() {
            return Err("the multicast interface must not be a loopback address".into());
        }
        let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
        // Discovery: bound to the group's port on every address, joined to the group.
        let disco = Socket::new(SockDomain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| io("discovery socket", e))?;
        disco
            .set_reuse_address(true)
            .map_err(|e| io("SO_REUSEADDR", e))?;
        let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, cfg.port));
        disco
            .bind(&SockAddr::from(any))
            .map_err(|e| io(&format!("binding UDP port {}", cfg.port), e))?;
        disco
            .join_multicast_v4(&cfg.group, &iface)
            .map_err(|e| io(&format!("joining {}", cfg.group), e))?;
        // Data: an ephemeral port; also sends announcements (so their source is the data port).
        let data = Socket::new(SockDomain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|e| io("data socket", e))?;
        let any0 = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
        data.bind(&SockAddr::from(any0))
            .map_err(|e| io("binding the data socket", e))?;
        data.set_multicast_ttl_v4(cfg.ttl)
            .map_err(|e| io("IP_MULTICAST_TTL", e))?;
        data.set_multicast_loop_v4(true)
            .map_err(|e| io("IP_MULTICAST_LOOP", e))?;
        if !iface.is_unspecified() {
            data.set_multicast_if_v4(&iface)
                .map_err(|e| io("IP_MULTICAST_IF", e))?;
        }
        // Big values arrive as bursts of fragments: give the receive buffers room (best effort;
        // the kernel caps it at net.core.rmem_max unless we may force it).
        for s in [&data, &disco] {
            if s.set_recv_buffer_size(8 << 20).is_err() {
                tracing::debug!("could not enlarge a receive buffer");
            }
            let _ = s.set_send_buffer_size(4 << 20);
        }
        let data: UdpSocket = data.into();
        let discovery: UdpSocket = disco.into();
        let data_port = data
            .local_addr()
            .map_err(|e| io("data socket address", e))?
            .port();
        let session = bus::slot::now_ns().max(1);
        let now = Instant::now();
        Ok(Net {
            domain_id: wire::fnv1a(domain.as_str().as_bytes()),
            sender_id: wire::fnv1a(cfg.host.as_bytes()),
            host: cfg.host,
            session,
            group: SocketAddr::V4(SocketAddrV4::new(cfg.group, cfg.port)),
            unicast_peers: cfg.peers,
            chunk,
            max_message: cfg.max_message,
            announce_every: cfg.announce_every,
            forget_after: cfg.forget_after,
            refresh_every: cfg.refresh_every,
            key: cfg.key,
            data,
            discovery,
            data_port,
            send: Mutex::new(SendState {
                packet: 0,
                message: 0,
                faults: cfg.faults,
                datagram: Vec::with_capacity(cfg.mtu),
            }),
            state: Mutex::new(NetState {
                peers: Peers::default(),
                replay: Replay::default(),
                reassembly: Reassembler::new(cfg.reassembly_limit),
                mirrors: HashMap::new(),
                reflected: BTreeMap::new(),
                owed: Vec::new(),
                last_announce: None,
                next_announce: now,
                next_refresh: now + cfg.refresh_every,
                next_stats: now,
                logged: BTreeSet::new(),
                stats_slot: None,
                dirty: true,
            }),
            counters: Counters::default(),
            change: AtomicU32::new(0),
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn is_authenticated(&self) -> bool {
        self.key.is_some()
    }

    /// Tells the reflector that the registry's endpoints changed.
    pub fn poke(&self) {
        lock(&self.state).dirty = true;
        self.wake();
    }

    fn wake(&self) {
        self.change.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&self.change, false);
    }

    /// Starts the receiver and reflector threads.
    pub fn start(self: &Arc<Net>, shared: &Arc<Shared>) -> std::io::Result<()> {
        let name = stats_slot_name(&self.host).map_err(std::io::Error::other)?;
        let schema = Schema::of_serde::<NetStats>().map_err(std::io::Error::other)?;
        let segment = shared
            .with_state(|reg| reg.create_own_slot(&name, &schema, 64 * 1024))
            .map_err(std::io::Error::other)?;
        lock(&self.state).stats_slot =
            Some(Slot::open(&segment, true).map_err(std::io::Error::other)?);
        for (label, socket) in [("net-data", &self.data), ("net-discovery", &self.discovery)] {
            let net = Arc::clone(self);
            let socket = socket.try_clone()?;
            std::thread::Builder::new()
                .name(label.into())
                .spawn(move || net.receive(&socket))?;
        }
        let net = Arc::clone(self);
        let shared = Arc::clone(shared);
        std::thread::Builder::new()
            .name("net-reflector".into())
            .spawn(move || net.reflect(&shared))?;
        Ok(())
    }

    // ----- sending -----

    /// Sends one message to each destination, fragmented at the chunk size.
    fn send_message(&self, channel: u64, body: &[u8], to: &[SocketAddr]) {
        if to.is_empty() {
            return;
        }
        if body.len() > self.max_message as usize {
            tracing::warn!(
                "not sending a message of {} bytes (limit {})",
                body.len(),
                self.max_message
            );
            return;
        }
        let mut s = lock(&self.send);
        s.message += 1;
        let message = s.message;
        let total = body.len().max(1);
        let padded: &[u8] = if body.is_empty() { &[0] } else { body };
        for (i, part) in padded.chunks(self.chunk).enumerate() {
            for dest in to {
                s.packet += 1;
                let header = Header {
                    flags: if self.key.is_some() {
                        wire::FLAG_MAC
                    } else {
                        0
                    },
                    domain: self.domain_id,
                    sender: self.sender_id,
                    session: self.session,
                    packet: s.packet,
                    channel,
                    message,
                    total: total as u32,
                    offset: (i * self.chunk) as u32,
                    chunk: self.chunk as u32,
                    body_len: part.len() as u32,
                };
                let mut d = std::mem::take(&mut s.datagram);
                wire::encode_header(&header, &mut d);
                d.extend_from_slice(part);
                if let Some(key) = &self.key {
                    let mac = key.mac(&d);
                    d.extend_from_slice(&mac);
                }
                self.transmit(&mut s, &d, *dest);
                s.datagram = d;
            }
        }
    }

    fn transmit(&self, s: &mut SendState, d: &[u8], to: SocketAddr) {
        let action = match s.faults.as_mut() {
            Some(f) => f.decide(Instant::now()),
            None => Action::Send,
        };
        match action {
            Action::Drop => {}
            Action::Send => self.send_to(d, to),
            Action::Twice => {
                self.send_to(d, to);
                self.send_to(d, to);
            }
            Action::Hold => {
                if let Some(f) = s.faults.as_mut() {
                    f.hold(d, to);
                }
                return;
            }
        }
        if let Some((held, to)) = s.faults.as_mut().and_then(Faults::take_held) {
            self.send_to(&held, to);
        }
    }

    fn send_to(&self, d: &[u8], to: SocketAddr) {
        match self.data.send_to(d, to) {
            Ok(n) => {
                Counters::add(&self.counters.sent_datagrams, 1);
                Counters::add(&self.counters.sent_bytes, n as u64);
            }
            Err(_) => Counters::add(&self.counters.send_errors, 1),
        }
    }

    // ----- receiving -----

    fn receive(&self, socket: &UdpSocket) {
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
    fn on_datagram(&self, bytes: &[u8], from: SocketAddr) -> Result<(), Drop> {
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
        let host = st
            .peers
            .host_of(d.header.sender)
            .ok_or(Drop::Unexpected)?
            .to_owned();
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

    // ----- the reflector -----

    fn reflect(&self, shared: &Shared) {
        let mut value = Vec::new();
        let mut message = Vec::new();
        let mut next_tick = Instant::now();
        loop {
            let now = Instant::now();
            if now >= next_tick {
                self.tick(shared, now, &mut message);
                next_tick = now + TICK;
            }
            self.send_new_values(&mut value, &mut message);
            let watched: Vec<Arc<Slot>> = {
                let st = lock(&self.state);
                st.reflected.values().map(|r| Arc::clone(&r.slot)).collect()
            };
            self.sleep(&watched, next_tick);
        }
    }

    /// Sleeps until a watched slot is written, the registry changes, or `deadline`.
    fn sleep(&self, watched: &[Arc<Slot>], deadline: Instant) {
        let change_seen = self.change.load(Ordering::SeqCst);
        let deadline = if watched.len() > WATCH_MAX {
            deadline.min(Instant::now() + Duration::from_millis(2))
        } else {
            deadline
        };
        let watched = &watched[..watched.len().min(WATCH_MAX)];
        // Register as a waiter first (SeqCst, paired with the writer's notify store and waiter
        // load), then read the notify words: a write after this point either sees us counted
        // and wakes us, or changed the word we compare against.
        for s in watched {
            s.waiters_word().fetch_add(1, Ordering::SeqCst);
        }
        let mut words = vec![futex::WaitOn {
            word: &self.change,
            expected: change_seen,
            shared: false,
        }];
        let pending = {
            let st = lock(&self.state);
            st.dirty
                || !st.owed.is_empty()
                || st
                    .reflected
                    .values()
                    .any(|r| r.slot.latest_sequence() != r.last_sent)
        };
        for s in watched {
            words.push(futex::WaitOn {
                word: s.notify_word(),
                expected: s.notify_word().load(Ordering::SeqCst),
                shared: true,
            });
        }
        let pending = pending
            || watched.iter().any(|s| {
                let st = lock(&self.state);
                st.reflected
                    .get(s.name().as_str())
                    .is_some_and(|r| r.slot.latest_sequence() != r.last_sent)
            });
        if !pending {
            futex::wait_any(&words, Some(deadline));
        }
        for s in watched {
            s.waiters_word().fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sends every reflected slot's value that changed since last sent, and values owed to
    /// new targets.
    fn send_new_values(&self, value: &mut Vec<u8>, message: &mut Vec<u8>) {
        let mut st = lock(&self.state);
        let owed = std::mem::take(&mut st.owed);
        for (name, host) in owed {
            if let Some(r) = st.reflected.get(&name) {
                if let Some(&(addr, _)) = r.targets.get(&host) {
                    if let Some(seq) = read_value(&r.slot, value) {
                        self.send_value(&name, r, seq, value, message, &[addr]);
                    }
                }
            }
        }
        for (name, r) in st.reflected.iter_mut() {
            if r.slot.latest_sequence() == r.last_sent || r.targets.is_empty() {
                continue;
            }
            let Some(seq) = read_value(&r.slot, value) else {
                continue;
            };
            r.last_sent = seq;
            let to: Vec<SocketAddr> = r.targets.values().map(|(a, _)| *a).collect();
            self.send_value(name, r, seq, value, message, &to);
        }
    }

    fn send_value(
        &self,
        name: &str,
        r: &Reflected,
        seq: u64,
        value: &[u8],
        message: &mut Vec<u8>,
        to: &[SocketAddr],
    ) {
        let write_time_ns = r.slot.last_write().map_or(0, |w| w.write_time_ns);
        wire::encode_value(
            &Value {
                name,
                sequence: seq,
                write_time_ns,
                schema_hash: r.hash,
                bytes: value,
            },
            message,
        );
        self.send_message(wire::channel_of(name), message, to);
        Counters::add(&self.counters.values_reflected, to.len() as u64);
    }

    /// Periodic work: expire hosts, reconcile with the registry, announce, refresh, statistics.
    fn tick(&self, shared: &Shared, now: Instant, message: &mut Vec<u8>) {
        let expired = {
            let mut st = lock(&self.state);
            let gone = st.peers.expire(now, self.forget_after);
            for (host, sender) in &gone {
                tracing::info!("forgot host '{host}': silent for {:?}", self.forget_after);
                st.replay.forget(*sender);
                st.reassembly.forget(*sender);
            }
            let aged = st.reassembly.expire(now, REASSEMBLY_AGE);
            for _ in 0..aged {
                self.counters.drop(Drop::Evicted);
            }
            !gone.is_empty()
        };
        let dirty = expired || lock(&self.state).dirty;
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
                reflected, owed, ..
            } = &mut *st;
            for (name, r) in reflected.iter() {
                for host in r.targets.keys() {
                    owed.push((name.clone(), host.clone()));
                }
            }
        }
        if stats {
            self.publish_stats(now, shared);
        }
    }

    /// Applies what the peers announced to the registry: remote claims, mirrors, reflected
    /// slots and their targets. Returns the replies for subscriptions that got bound.
    fn reconcile(
        &self,
        reg: &mut crate::state::Registry,
        st: &mut NetState,
    ) -> crate::state::Outbox {
        let mut out = crate::state::Outbox::new();
        let claims = st.peers.claims(&mut |name, first, second| {
            if st_log(&mut st.logged, name, second) {
                tracing::warn!(
                    "conflict: hosts '{first}' and '{second}' both publish {name}; using '{first}'"
                );
                Counters::add(&self.counters.conflicts, 1);
            }
        });
        // Names published both here and remotely: the local one keeps working.
        for (name, claim) in &claims {
            if reg.is_published_here(name)
                && st_log(&mut st.logged, name.as_str(), &claim.claim.host)
            {
                tracing::warn!(
                    "conflict: {name} is published here and on host '{}' ({}); not mirroring it",
                    claim.claim.host,
                    claim.claim.type_name
                );
                Counters::add(&self.counters.conflicts, 1);
            }
        }
        let remote: BTreeMap<SlotName, crate::state::RemoteClaim> = claims
            .iter()
            .filter(|(name, _)| !reg.is_published_here(name))
            .map(|(n, c)| (n.clone(), c.claim.clone()))
            .collect();
        reg.set_remote_claims(remote.clone());
        // Mirrors.
        let wanted: BTreeSet<SlotName> = reg.wanted().into_iter().collect();
        for (name, c) in &claims {
            if !wanted.contains(name) || !remote.contains_key(name) {
                continue;
            }
            let schema = match Schema::from_bytes(&c.info.schema) {
                Ok(s) if s.hash().0 == c.info.schema_hash => s,
                _ => {
                    if st_log(&mut st.logged, name.as_str(), "schema") {
                        tracing::warn!(
                            "host '{}' announced an unreadable schema for {name}",
                            c.claim.host
                        );
                    }
                    continue;
                }
            };
            match reg.ensure_mirror(name, &c.claim, &schema, c.info.capacity) {
                Ok((segment, bound)) => {
                    out.extend(bound);
                    let fresh = st
                        .mirrors
                        .get(name.as_str())
                        .is_none_or(|m| m.origin != c.claim.host || m.hash != c.claim.schema_hash);
                    if fresh {
                        match Slot::open(&segment, true) {
                            Ok(slot) => {
                                let last_sequence = slot.origin_sequence();
                                st.mirrors.insert(
                                    name.as_str().to_owned(),
                                    Mirror {
                                        slot,
                                        origin: c.claim.host.clone(),
                                        hash: c.claim.schema_hash,
                                        origin_session: 0,
                                        last_sequence,
                                    },
                                );
                            }
                            Err(e) => tracing::warn!("cannot map mirror {segment}: {e}"),
                        }
                    }
                    if !c.info.writer_alive {
                        reg.mirror_writer_gone(name);
                    }
                }
                Err(reason) => {
                    if st_log(&mut st.logged, name.as_str(), &c.claim.host) {
                        tracing::warn!("conflict: not mirroring {name}: {reason}");
                        Counters::add(&self.counters.conflicts, 1);
                    }
                }
            }
        }
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
        for p in reg.local_publications() {
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
            if r.slot.segment() != p.segment || r.hash != p.schema.hash.0 {
                if let Ok(slot) = Slot::open(&p.segment, true) {
                    r.slot = Arc::new(slot);
                    r.hash = p.schema.hash.0;
                    r.last_sent = 0;
                }
            }
            r.targets
                .retain(|host, _| targets.iter().any(|t| &t.0 == host));
            for (host, addr, session) in targets {
                let known = r
                    .targets
                    .get(&host)
                    .is_some_and(|(a, s)| *a == addr && *s == session);
                if !known {
                    // A new (or restarted) subscriber host gets the current value at once.
                    r.targets.insert(host.clone(), (addr, session));
                    owed.push((name.clone(), host));
                }
            }
        }
        st.reflected.retain(|name, _| keep.contains(name));
        // Announce now if what we announce changed.
        if st.last_announce.as_ref() != Some(&self.our_announce(reg)) {
            st.next_announce = Instant::now();
        }
        out
    }

    fn our_announce(&self, reg: &crate::state::Registry) -> Announce {
        Announce {
            host: self.host.clone(),
            data_port: self.data_port,
            interval_ms: self.announce_every.as_millis().min(u128::from(u32::MAX)) as u32,
            publications: reg
                .local_publications()
                .into_iter()
                .map(|p| PubInfo {
                    name: p.name.as_str().to_owned(),
                    type_name: p.schema.type_name.clone(),
                    schema_hash: p.schema.hash.0,
                    capacity: p.capacity,
                    writer_alive: p.writer_alive,
                    schema: p.schema.bytes.clone(),
                })
                .collect(),
            wants: reg
                .wanted()
                .into_iter()
                .map(|n| n.as_str().to_owned())
                .collect(),
        }
    }

    fn announce(&self, shared: &Shared, message: &mut Vec<u8>) {
        let a = shared.with_state(|reg| self.our_announce(reg));
        if let Err(e) = wire::encode_announce(&a, message) {
            tracing::warn!("cannot encode the announcement: {e}");
            return;
        }
        let mut to = vec![self.group];
        to.extend(self.unicast_peers.iter().copied());
        self.send_message(wire::ANNOUNCE_CHANNEL, message, &to);
        let mut st = lock(&self.state);
        st.last_announce = Some(a);
        st.next_announce = Instant::now() + self.announce_every;
    }

    fn publish_stats(&self, now: Instant, shared: &Shared) {
        let conflicts = shared.with_state(|reg| reg.conflicts);
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
        if let Some(slot) = &st.stats_slot {
            let mut bytes = Vec::new();
            if bus::codec::encode_into(&stats, &mut bytes).is_ok() {
                let _ = slot.write(&bytes);
            }
        }
    }
}

/// `true` the first time `(name, who)` is seen: log a conflict once, not every tick.
fn st_log(logged: &mut BTreeSet<(String, String)>, name: &str, who: &str) -> bool {
    logged.insert((name.to_owned(), who.to_owned()))
}

/// Reads the slot's latest value; its sequence, or `None` if nothing was written.
fn read_value(slot: &Slot, out: &mut Vec<u8>) -> Option<u64> {
    slot.read(0, out).ok().flatten().map(|info| info.sequence)
}

/// Resolves `--interface`: an IPv4 address, or the name of an interface with one.
pub fn interface_address(spec: &str) -> Result<Ipv4Addr, String> {
    if let Ok(ip) = spec.parse::<Ipv4Addr>() {
        return Ok(ip);
    }
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| format!("listing interfaces: {e}"))?;
    for a in addrs {
        if a.interface_name != spec {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(sin.ip());
        }
    }
    Err(format!("interface {spec:?} has no IPv4 address"))
}
