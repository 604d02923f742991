//! Network reflection: the registries of one domain on several computers find each other by
//! UDP multicast (or a unicast peer list), announce their public publications (also those whose
//! publisher is gone while the host keeps the last value: a later subscriber elsewhere gets it)
//! and the names they need, and send each written value to the hosts that need it, where the
//! registry writes it into a local mirror slot. A host where a tool reads a name nothing there
//! subscribes to (`bus-inspect get`) asks for the publication's schema first: announcements
//! carry only schema hashes.
//!
//! Pieces: `wire` (the datagram format; pure, never panics), `auth` (keyed MAC and replay
//! window), `reassembly` (fragments to messages, bounded memory), `faults` (test-only loss,
//! duplication, reordering), `stats` (counters and the published statistics), `announce` (an
//! announcement cut into parts that fit a datagram, and put together again), `peers` (what
//! each remote host announced and the decisions drawn from it), `send` (datagrams out),
//! `receive` (datagrams in), `reflector` (the thread that sends values, announces and ticks),
//! `reconcile` (announcements applied to the registry's state), `session` (this run's session
//! number, above the last one recorded), `warn` (warnings said once a minute per cause and
//! subject), `route` (the interface multicast uses and the MTU the routes carry). This module
//! owns the
//! configuration, the sockets and the state those share, and starts the threads.
//!
//! Threads: two receivers (the discovery socket on the multicast port, the data socket on an
//! ephemeral port), and the reflector, which sleeps on the notify words of the reflected slots
//! (`futex_waitv`) and on a private word poked when anything changes, sends new values, and on
//! a tick announces, refreshes, forgets silent hosts and publishes the statistics.

mod announce;
pub mod auth;
pub mod bundle;
pub mod faults;
pub mod peers;
pub mod reassembly;
mod receive;
mod reconcile;
mod reflector;
mod route;
mod send;
mod session;
pub mod stats;
mod warn;
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
use self::faults::Faults;
use self::peers::Peers;
use self::reassembly::Reassembler;
pub use self::route::interface_address;
use self::route::{mtu_for_paths, Interface};
use self::stats::{Counters, NetStats};
use self::wire::Announce;
use crate::server::Shared;

/// Network settings of one registry.
pub struct NetConfig {
    /// This host's name on the bus (origin of its values); unique per domain.
    pub host: String,
    pub group: Ipv4Addr,
    pub port: u16,
    /// The interface to use for multicast, as given (`--interface`: a name or its IPv4
    /// address), resolved whenever the network is opened; `None`: the routing table's.
    pub interface: Option<String>,
    pub ttl: u32,
    /// Registries reached by unicast (their discovery port), for networks without multicast.
    pub peers: Vec<SocketAddr>,
    /// Path MTU: datagrams never exceed it (values are fragmented below it).
    pub mtu: usize,
    pub announce_every: Duration,
    pub forget_after: Duration,
    pub refresh_every: Duration,
    pub key: Option<Key>,
    /// Largest value accepted or sent (`--max-value`).
    pub max_value: u32,
    /// Bytes held at most for incomplete messages.
    pub reassembly_limit: usize,
    pub faults: Option<Faults>,
    /// Where this registry records its session number (`session.rs`); `None`: the session is
    /// the start time only.
    pub session_file: Option<std::path::PathBuf>,
}

/// Bytes a value message holds besides the value: its fixed fields and the slot name, with
/// room to spare.
const MESSAGE_OVERHEAD: u32 = 1024;
/// Longest time an incomplete message may wait for its next fragment.
const REASSEMBLY_AGE: Duration = Duration::from_secs(5);
/// Reflector tick: announcements, refreshes, expiry and statistics are checked this often.
const TICK: Duration = Duration::from_millis(50);
/// Shortest time between two reconciles started by changes of the registry's endpoints.
const RECONCILE_GAP: Duration = Duration::from_millis(5);
/// Statistics slot update interval.
const STATS_EVERY: Duration = Duration::from_secs(1);
/// Room for the statistics (`NetStats`: a line per peer; 64 KiB holds hundreds).
const STATS_CAPACITY: u64 = 64 * 1024;
/// Most slots one `futex_waitv` call watches (one word is the change word); with more the
/// reflector also scans on a short timeout.
const WATCH_MAX: usize = futex::WAITV_MAX - 1;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The rule for a host name, this registry's (`--host`) and every announced one: it names a
/// statistics slot (`stats_slot_name`) and is kept as a mirror's origin (at most 64 bytes).
pub fn check_host_name(host: &str) -> Result<(), String> {
    stats_slot_name(host)?;
    if host.len() > 64 {
        return Err(format!("host name {host:?} is longer than 64 bytes"));
    }
    Ok(())
}

/// The rule for the announcement group (`--mcast-group`): an IPv4 multicast address.
pub fn check_group(group: Ipv4Addr) -> Result<(), String> {
    if group.is_multicast() {
        Ok(())
    } else {
        Err(format!(
            "{group} is not a multicast group (224.0.0.0 to 239.255.255.255)"
        ))
    }
}

/// Name of a host's statistics slot: `/baton/registry/<host>/net`.
pub fn stats_slot_name(host: &str) -> Result<SlotName, String> {
    // One path component: a '/' inside would pass as a longer slot path.
    let name = (!host.contains('/'))
        .then(|| SlotName::public(&format!("/baton/registry/{host}/net")).ok())
        .flatten();
    name.ok_or_else(|| {
        format!(
            "host name {host:?} must be 1 or more ASCII letters, digits, '_', '-' or '.' (not \
                 . or .. alone)"
        )
    })
}

struct SendState {
    packet: u64,
    message: u64,
    faults: Option<Faults>,
    datagram: Vec<u8>,
    /// Datagrams are batched (`UDP_SEGMENT` is set and has not failed).
    gso: bool,
    gso_buffer: Vec<u8>,
}

/// A local slot sent to remote hosts.
struct Reflected {
    slot: Arc<Slot>,
    hash: u64,
    /// Host → (data address, that host's session and the series of its mirror when it was
    /// added: `wire::Want`).
    targets: BTreeMap<String, (SocketAddr, u64, u64)>,
    /// Slot sequence last sent to every target.
    last_sent: u64,
    /// A value too large to send was logged (once per slot, not per write and refresh).
    too_large_said: bool,
    /// Whether this host announces the slot's writer alive (as of the last reconcile). A
    /// publisher that registered after its last writer died is announced alive once it
    /// writes: its first value sent asks for a reconcile, which announces it.
    announced_alive: bool,
}

/// A local slot written with a remote host's values.
struct Mirror {
    slot: Slot,
    origin: String,
    hash: u64,
    /// Session of the origin registry the ordering below belongs to.
    origin_session: u64,
    /// The origin slot's series (`Slot::series`) the values taken belong to, as its host
    /// announces it: a slot made anew there numbers its values from 1 again.
    series: u64,
    last_sequence: u64,
    /// The origin's running publisher as last dated (`date_held`): the series and the first
    /// sequence of its values; `None` while the origin announces none.
    publisher: Option<(u64, u64)>,
    /// Whether the slot names `origin` as where its value came from: not before that host's
    /// first value (`Registry::ensure_mirror`).
    origin_in_slot: bool,
    /// The latest publisher dated in the series followed (its first sequence), also once gone:
    /// a value of a later one is a publisher restarted at the origin (`Value::writer_first`).
    newest_first: u64,
}

impl Mirror {
    /// Follows the origin slot's series as announced: values of another series are another
    /// slot's, numbered anew, so their order starts again (from the value held, if it is of
    /// that series).
    fn follow_series(&mut self, series: u64) {
        if self.series != series {
            self.series = series;
            self.newest_first = 0;
            self.last_sequence = if self.slot.origin_series() == series {
                self.slot.origin_sequence()
            } else {
                0
            };
        }
    }

    /// Whether a value written by the publisher whose first sequence is `first` (in the series
    /// followed) comes from a publisher started at the origin after every one dated here.
    fn written_by_a_newer_publisher(&self, first: u64) -> bool {
        first != 0 && first > self.newest_first
    }

    /// Whether an announcement from `host` that its publisher of this name does not run is
    /// older than a value that came here since: the value's publisher started after the one
    /// it names, or it is that publisher, which had not written yet (and is not gone: `kept`
    /// would say so) when it was announced.
    fn has_values_newer_than(&self, host: &str, info: &wire::PubInfo) -> bool {
        if info.writer_alive || self.origin != host || self.series != info.series {
            return false;
        }
        let first = info.writer_first.max(1);
        self.newest_first > first
            || (self.newest_first == first
                && !info.kept
                && self.publisher.is_some()
                && self.slot.origin_series() == info.series
                && self.slot.origin_sequence() >= first)
    }

    /// Tells whether the value held is the running publisher's at the origin, whose values
    /// start at `first` in the origin slot's series `series`, before the mirror reads as
    /// written by it: the value held counts only if it came from that series at or after
    /// `first`. (A value of an earlier publisher, of this origin or of another host, or of a
    /// slot since made anew, reads as its gone writer's until the next value comes.)
    fn date_held(&mut self, series: u64, first: u64) {
        // 0 ("every value") and 1 date alike; one number for both, so that an announcement
        // and a value (`Value::writer_first`, never 0) name the same publisher alike.
        let first = first.max(1);
        if series == self.series {
            self.newest_first = self.newest_first.max(first);
        }
        if self.publisher.replace((series, first)) == Some((series, first)) {
            return;
        }
        // The origin's publisher is the mirror's writer as readers tell writers apart
        // (`WriterId`): a driver restarted on its host is another writer here too, though the
        // mirror's writer process stays this registry. Its number: the series and first
        // sequence the origin gives that publisher (never 0, "not known").
        let number = match series.rotate_left(32) ^ first {
            0 => u64::MAX,
            n => n,
        };
        self.slot
            .set_mirror_writer(std::process::id(), bus::process::own_start_time(), number);
        let latest = self.slot.latest_sequence();
        // Sequence 0 is never a value: an origin sequence of 0 is one not known.
        let current = latest != 0
            && self.slot.origin() == self.origin
            && self.slot.origin_series() == series
            && self.slot.origin_sequence() >= first.max(1);
        self.slot
            .set_writer_first_sequence(if current { 0 } else { latest.saturating_add(1) });
    }
}

/// A publication's schema (`Schema::to_bytes`), shared by the hosts it is sent to.
type SchemaBytes = Arc<Vec<u8>>;

struct NetState {
    peers: Peers,
    replay: Replay,
    reassembly: Reassembler,
    mirrors: HashMap<String, Mirror>,
    reflected: BTreeMap<String, Reflected>,
    /// Values owed now to new targets (and to every target on a refresh): name -> hosts.
    owed: BTreeMap<String, BTreeSet<String>>,
    /// The schemas of local publications other hosts ask for (`wire::Want::schema`):
    /// (name, host) -> (where it goes, the schema). Sent when first asked for and on every
    /// refresh while asked for, so that a lost one is sent again.
    schema_offers: BTreeMap<(String, String), (SocketAddr, SchemaBytes)>,
    /// Schemas to send now: name, destination, schema.
    schemas_owed: Vec<(String, SocketAddr, SchemaBytes)>,
    /// Schemas heard from other hosts for names this host asked for: (name, host) -> schema,
    /// handed to the registry at the next reconcile (which takes the one of the host that
    /// publishes the name: another that publishes it too may answer as well).
    schemas_heard: BTreeMap<(String, String), Vec<u8>>,
    /// What was announced last (whole, its part fields zero) and its generation.
    last_announce: Option<Announce>,
    generation: u64,
    next_announce: Instant,
    /// When this registry last announced: an announcement made because something changed
    /// comes at most every `TICK` (a burst of changes must not send all parts every time).
    last_announced: Instant,
    next_refresh: Instant,
    next_stats: Instant,
    /// Conflicts logged once each: (name, host).
    logged: BTreeSet<(String, String)>,
    /// The registry's statistics slot, mapped here once it exists (`publish_stats`).
    stats_slot: Option<Slot>,
    dirty: bool,
    /// When the adoption grace of the registry's adopted slots ends (reconciled again then).
    adoption_ends: Option<Instant>,
}

impl NetState {
    /// Announces as soon as allowed: now, or `TICK` after the last announcement.
    fn announce_soon(&mut self) {
        let soonest = Instant::now().max(self.last_announced + TICK);
        self.next_announce = self.next_announce.min(soonest);
    }
}

pub struct Net {
    host: String,
    domain_id: u64,
    sender_id: u64,
    session: u64,
    group: SocketAddr,
    /// The interface multicast goes through now (`follow_interface`).
    interface: Interface,
    unicast_peers: Vec<SocketAddr>,
    chunk: usize,
    /// Bytes of a full datagram (header, `chunk` bytes, MAC).
    datagram_size: usize,
    /// Most datagrams sent in one batch.
    gso_batch: usize,
    /// `--max-value`, as given (named in warnings).
    max_value: u32,
    /// Largest message accepted or sent: a value of `max_value` bytes with its name and fields.
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
    /// Warnings already said (`warn.rs`).
    warnings: warn::Warnings,
}

/// Why the network could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The configuration cannot work: the registry stops, one clear line.
    #[error("{0}")]
    Config(String),
    /// The network is not there yet (no address, no route for the group, the interface not
    /// up): the local bus serves meanwhile, and the network is tried again.
    #[error("{0}")]
    Network(String),
}

impl Net {
    /// Opens the sockets. `OpenError::Config` if the configuration cannot work,
    /// `OpenError::Network` if the network is not ready for it (yet). On success the fault
    /// switch, if any, moves into the `Net`.
    pub fn open(cfg: &mut NetConfig, domain: &bus::Domain) -> Result<Net, OpenError> {
        check_host_name(&cfg.host).map_err(OpenError::Config)?;
        check_group(cfg.group).map_err(OpenError::Config)?;
        let iface = match cfg.interface.as_deref() {
            Some(spec) => interface_address(spec).map_err(OpenError::Network)?,
            None => Ipv4Addr::UNSPECIFIED,
        };
        if iface.is_loopback() {
            return Err(OpenError::Config(
                "the multicast interface must not be a loopback address".into(),
            ));
        }
        let mtu = mtu_for_paths(cfg.mtu, cfg.group, cfg.port, iface, &cfg.peers);
        let chunk = wire::chunk_for_mtu(mtu, cfg.key.is_some()).ok_or_else(|| {
            let least = wire::least_mtu(cfg.key.is_some());
            OpenError::Config(format!(
                "MTU {mtu} leaves no room for a datagram: at least {least} bytes{}",
                if cfg.key.is_some() {
                    " with a key file (its MAC takes room in every datagram)"
                } else {
                    ""
                }
            ))
        })?;
        let io = |what: &str, e: std::io::Error| {
            let hint = match e.raw_os_error() {
                Some(libc::ENODEV) | Some(libc::ENETUNREACH) | Some(libc::EADDRNOTAVAIL) => {
                    " (no interface for the group yet: no address or no multicast route; \
                     --interface names one)"
                }
                _ => "",
            };
            OpenError::Network(format!("{what}: {e}{hint}"))
        };
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
        // Batched sends: with UDP_SEGMENT at the full datagram size the kernel cuts one send
        // into datagrams of that size (a send no larger goes out as one datagram). At most 64
        // segments and 64 KiB per send (the kernel's limits).
        let datagram_size =
            wire::HEADER_LEN + chunk + if cfg.key.is_some() { wire::MAC_LEN } else { 0 };
        let gso_batch = (65_507 / datagram_size).clamp(1, 64);
        let gso = nix::sys::socket::setsockopt(
            &data,
            nix::sys::socket::sockopt::UdpGsoSegment,
            &(datagram_size as i32),
        )
        .is_ok();
        if !gso {
            tracing::info!("UDP segmentation offload unavailable: one system call per datagram");
        }
        // Batched receives, the other half: with UDP_GRO a batch that arrives whole (as one
        // sent over a veth pair or by a NIC that coalesces) is read in one system call and cut
        // apart here (`receive`). Without it every datagram is read on its own, as before.
        for (s, what) in [(&data, "data"), (&disco, "discovery")] {
            if nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::UdpGroSegment, &true)
                .is_err()
            {
                tracing::debug!("UDP receive coalescing unavailable on the {what} socket");
            }
            // Each datagram's destination, to tell an announcement sent to this host (a
            // `--peer` elsewhere naming it) from one sent to the group: the first is answered
            // by unicast (`Peers::heard_by_unicast`).
            if nix::sys::socket::setsockopt(s, nix::sys::socket::sockopt::Ipv4PacketInfo, &true)
                .is_err()
            {
                tracing::warn!(
                    "IP_PKTINFO unavailable on the {what} socket: a host whose --peer names this \
                     one is not answered by unicast (name it with --peer here too)"
                );
            }
        }
        let data: UdpSocket = data.into();
        let discovery: UdpSocket = disco.into();
        let data_port = data
            .local_addr()
            .map_err(|e| io("data socket address", e))?
            .port();
        let back = cfg
            .faults
            .as_ref()
            .map_or(0, |f| f.clock_back.as_nanos() as u64);
        let wall = bus::slot::now_ns().saturating_sub(back).max(1);
        let session = match &cfg.session_file {
            Some(file) => session::next(wall, file).unwrap_or_else(|e| {
                tracing::warn!(
                    "{e}; this run's network session is its start time only: if the clock \
                     went back since the last run, the peers that heard it refuse this one"
                );
                wall
            }),
            None => wall,
        };
        let now = Instant::now();
        Ok(Net {
            domain_id: wire::fnv1a(domain.as_str().as_bytes()),
            sender_id: wire::fnv1a(cfg.host.as_bytes()),
            host: cfg.host.clone(),
            session,
            group: SocketAddr::V4(SocketAddrV4::new(cfg.group, cfg.port)),
            interface: Interface {
                name: cfg
                    .interface
                    .clone()
                    .filter(|spec| spec.parse::<Ipv4Addr>().is_err()),
                address: Mutex::new((iface, now)),
            },
            unicast_peers: cfg.peers.clone(),
            chunk,
            datagram_size,
            gso_batch,
            max_value: cfg.max_value,
            max_message: cfg.max_value.saturating_add(MESSAGE_OVERHEAD),
            announce_every: cfg.announce_every,
            forget_after: cfg.forget_after,
            refresh_every: cfg.refresh_every,
            key: cfg.key.clone(),
            data,
            discovery,
            data_port,
            send: Mutex::new(SendState {
                packet: 0,
                message: 0,
                faults: cfg.faults.take(),
                datagram: Vec::with_capacity(mtu),
                gso,
                gso_buffer: Vec::new(),
            }),
            warnings: warn::Warnings::default(),
            state: Mutex::new(NetState {
                peers: Peers::default(),
                replay: Replay::new(cfg.key.is_some()),
                reassembly: Reassembler::new(cfg.reassembly_limit),
                mirrors: HashMap::new(),
                reflected: BTreeMap::new(),
                owed: BTreeMap::new(),
                schema_offers: BTreeMap::new(),
                schemas_owed: Vec::new(),
                schemas_heard: BTreeMap::new(),
                last_announce: None,
                generation: 0,
                next_announce: now,
                last_announced: now - TICK,
                next_refresh: now + cfg.refresh_every,
                next_stats: now,
                logged: BTreeSet::new(),
                stats_slot: None,
                dirty: true,
                adoption_ends: None,
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
        // Not made now (a full /dev/shm, a file of another user in the way) is no reason not to
        // reflect: the registry makes it at a later check if it can (`make_anew_again`), and
        // the statistics are written from then on (`publish_stats`).
        match shared.with_state(|reg| reg.create_own_slot(&name, &schema, STATS_CAPACITY)) {
            Ok(bound) => shared.send_outbox(bound),
            Err(e) => tracing::error!(
                "network statistics: {e}; reflecting without {name} (made at a later check if it \
                 can be)"
            ),
        }

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
}
