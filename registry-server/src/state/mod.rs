//! What the registry knows: slots, their endpoints, and the connected processes. Every method
//! returns the messages to send; `server` sends them. `remote` holds what the network layer
//! asks of it (remote claims, mirrors); `directory` publishes the list of known publications;
//! `registration` takes endpoints in and out; `readers` the tools that read a name whatever
//! its type; `reclaim` forgets slots nobody uses any more.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bus::protocol::{EndpointInfo, EndpointKind, Reply, SlotListing};
use bus::schema::Schema;
use bus::slot::{Slot, StoredSchema, WriterState};
use bus::{Domain, SlotName};
use nix::unistd::Gid;

/// A connected client process.
#[derive(Clone, Debug)]
pub struct Peer {
    pub pid: u32,
    pub start_time: u64,
    pub program: String,
}

impl Peer {
    /// Whether its process is known to have died. A peer whose pid this registry cannot see
    /// (another pid namespace: the kernel reports pid 0, or a pid without a /proc entry here)
    /// is not: it is left to the end of its stream, which its death brings as surely.
    fn is_dead(&self) -> bool {
        self.pid != 0 && self.start_time != 0 && !bus::process::is_alive(self.pid, self.start_time)
    }
}

#[derive(Clone, Debug)]
struct EndpointRef {
    conn: u64,
    endpoint: u64,
    kind: EndpointKind,
    bound: bool,
}

struct SlotEntry {
    slot: Option<Slot>,
    schema: StoredSchema,
    endpoints: Vec<EndpointRef>,
    /// `Some(host)`: a mirror of a publication on that host, written by this registry.
    origin: Option<String>,
    /// `Some(capacity)`: a slot the registry itself publishes (its directory, its network
    /// statistics), with room for that many bytes.
    own: Option<u64>,
    /// For a slot adopted at start-up: until when it counts as mapped although no endpoint has
    /// registered yet (its processes are reconnecting; see `ADOPTION_GRACE`).
    adopted_until: Option<Instant>,
    /// `Some(capacity)`: making the slot anew failed (a full /dev/shm); tried again at every
    /// check while a publication is registered (`damage.rs`), or at the next publication's
    /// registration.
    remake: Option<u64>,
    /// The file (device, inode) found in the slot's way when making it again failed last
    /// (another user's, which the registry may not remove): not tried again, nor said again,
    /// at every check while it stays (`make_anew_again`).
    in_the_way: Option<(u64, u64)>,
}

/// How long after a restart an adopted slot is not re-created: processes that map it may not
/// have registered again yet, and re-creating the slot under them would leave them on a file
/// nobody writes.
const ADOPTION_GRACE: Duration = Duration::from_secs(3);

/// Why `SlotEntry::ensure_slot` gave no slot.
enum NoSlot {
    /// The slot is smaller than asked for and mapped by endpoints, so it cannot be re-created.
    TooSmallInUse {
        capacity: u64,
    },
    Create(bus::SegmentError),
}

impl SlotEntry {
    /// An entry of type `schema` without a slot yet: its subscriptions wait for one.
    fn pending(schema: &Schema) -> SlotEntry {
        SlotEntry {
            slot: None,
            schema: StoredSchema::new(schema),
            endpoints: Vec::new(),
            origin: None,
            own: None,
            adopted_until: None,
            remake: None,
            in_the_way: None,
        }
    }

    /// The entry's slot, with room for `capacity` bytes: created if missing, re-created larger
    /// if it is too small and nobody maps it (its old value is lost; nobody saw it; but when
    /// the larger one cannot be made, the old one is put back as it was: `kept`), or, with
    /// `replace_in_use`, also while mapped (the old one marked writer gone; its users are the
    /// caller's to tell). `Ok(true)` when a segment was created.
    fn ensure_slot(
        &mut self,
        segment: &str,
        name: &SlotName,
        schema: &Schema,
        capacity: u64,
        group: Option<Gid>,
        replace_in_use: bool,
    ) -> Result<bool, NoSlot> {
        if capacity > bus::slot::MAX_CAPACITY {
            // Never made: refused before the slot in use is given up for it (a remote host's
            // announcement may say anything).
            return Err(NoSlot::Create(bus::error::SegmentError::TooLarge {
                segment: segment.to_owned(),
                what: "capacity",
                found: capacity,
                max: bus::slot::MAX_CAPACITY,
            }));
        }
        if let Some(slot) = &self.slot {
            if (slot.capacity() as u64) < capacity {
                let reconnecting = self.adopted_until.is_some_and(|t| Instant::now() < t);
                if !replace_in_use && (reconnecting || self.endpoints.iter().any(|e| e.bound)) {
                    return Err(NoSlot::TooSmallInUse {
                        capacity: slot.capacity() as u64,
                    });
                }
                tracing::info!("re-creating {name} with capacity {capacity}");
                slot.mark_writer_gone();
                // Kept until the larger one exists: see `kept`. (A slot still mapped is not:
                // its users stay on the old memory whatever the name stands for.)
                let unmapped = !self.endpoints.iter().any(|e| e.bound);
                let old =
                    (unmapped && slot.latest_sequence() > 0 && kept::may_not_fit(capacity, slot))
                        .then(|| kept::file_of(segment, slot))
                        .flatten();
                self.slot = None;
                let _ = bus::shm::unlink(segment);
                let larger = create_slot(segment, name, schema, capacity, group);
                return match (larger, old) {
                    (Ok(slot), _) => {
                        self.slot = Some(slot);
                        Ok(true)
                    }
                    (Err(e), Some(old)) => {
                        match kept::put_back(segment, &old, group) {
                            Ok(slot) => {
                                tracing::info!("{name}: kept as it was, with its value");
                                self.slot = Some(slot);
                            }
                            Err(why) => tracing::warn!(
                                "{name}: its value is lost: the slot cannot be put back ({why})"
                            ),
                        }
                        Err(NoSlot::Create(e))
                    }
                    (Err(e), None) => {
                        self.unbind_all();
                        Err(NoSlot::Create(e))
                    }
                };
            }
        }
        let created = self.slot.is_none();
        if created {
            self.slot =
                Some(create_slot(segment, name, schema, capacity, group).map_err(NoSlot::Create)?);
            self.remake = None;
        }
        Ok(created)
    }

    /// Binds the subscriptions that waited for the slot to exist: the `Bound` pushes to send.
    /// Marks every endpoint unbound: their slot is no longer the name's (made anew, or given up
    /// for a larger one that could not be made). Whoever makes the slot next binds them all to
    /// it (`bind_waiting`), and they follow it.
    fn unbind_all(&mut self) {
        for endpoint in &mut self.endpoints {
            endpoint.bound = false;
        }
    }

    fn bind_waiting(&mut self, segment: &str) -> Outbox {
        let mut out = Outbox::new();
        for sub in self.endpoints.iter_mut().filter(|e| !e.bound) {
            sub.bound = true;
            out.push((
                sub.conn,
                0,
                Reply::Bound {
                    endpoint: sub.endpoint,
                    segment: segment.to_owned(),
                },
            ));
        }
        out
    }

    /// Sends the endpoints bound to this entry its segment again: the slot they map was made
    /// anew under them, which the client tells its application (`BusError::Replaced`).
    fn tell_bound(&self, segment: &str) -> Outbox {
        self.endpoints
            .iter()
            .filter(|e| e.bound)
            .map(|e| {
                let segment = segment.to_owned();
                (
                    e.conn,
                    0,
                    Reply::Bound {
                        endpoint: e.endpoint,
                        segment,
                    },
                )
            })
            .collect()
    }

    fn published_here(&self) -> bool {
        self.own.is_some()
            || self
                .endpoints
                .iter()
                .any(|e| e.kind == EndpointKind::Publication)
    }

    /// A slot adopted at start-up whose writer still runs and has not registered again yet
    /// (within `ADOPTION_GRACE`): it is published here, its process is reconnecting. Announced
    /// as such, so that peers never see its publication go and come back over a restart.
    /// Adoption marked the writers that no longer ran as gone, so the header's state (one
    /// load, not a look in /proc) says whether it ran then.
    fn writer_reconnecting(&self) -> bool {
        self.origin.is_none()
            && self.adopted_until.is_some_and(|t| Instant::now() < t)
            && self
                .slot
                .as_ref()
                .is_some_and(|s| s.writer_state() == WriterState::Alive)
    }

    /// When the value the slot holds was written (0: none, or no slot).
    fn last_written_ns(&self) -> u64 {
        self.slot
            .as_ref()
            .and_then(|s| s.last_write())
            .map_or(0, |w| w.write_time_ns)
    }

    /// A slot of this host whose publisher is gone and that holds its last value: announced
    /// (as kept) so that a subscriber on another host that comes later gets that value too,
    /// as one on this host does.
    fn keeps_gone_value(&self) -> bool {
        self.origin.is_none()
            && !self.published_here()
            && self
                .slot
                .as_ref()
                .is_some_and(|s| s.latest_sequence() > 0 && s.writer_state() == WriterState::Gone)
    }
}

/// A public name published on another host, as the network layer learnt it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteClaim {
    pub host: String,
    pub type_name: String,
    pub schema_hash: u64,
    /// Whether the remote host says its publisher runs.
    pub writer_alive: bool,
    /// No publisher there, only the last value of a gone one (`wire::PubInfo::kept`).
    pub kept: bool,
    /// When that kept value was written (its host's clock); 0 for a publisher.
    pub kept_written_ns: u64,
}

/// A public slot published on this host, for announcing and reflecting.
#[derive(Clone, Debug)]
pub struct LocalPublication {
    pub name: SlotName,
    pub schema: StoredSchema,
    pub capacity: u64,
    pub writer_alive: bool,
    /// The slot's sequence from which its values are its running writer's.
    pub writer_first: u64,
    /// Which segment of its name the slot is (`Slot::series`).
    pub series: u64,
    pub segment: String,
    /// The file of the registry's slot (`Slot::file`): a slot put back as it was (`kept`) has
    /// the series and capacity of the one before, in another file.
    pub file: (u64, u64),
    /// No process publishes it: the slot keeps a gone publisher's last value
    /// (`SlotEntry::keeps_gone_value`).
    pub kept: bool,
    /// When the kept value was written; 0 for a publication.
    pub kept_written_ns: u64,
}

/// Messages to send: (connection, request id or 0 for a push, reply).
pub type Outbox = Vec<(u64, u64, Reply)>;

pub struct Registry {
    domain: Domain,
    group: Option<Gid>,
    slots: BTreeMap<SlotName, SlotEntry>,
    peers: HashMap<u64, Peer>,
    /// Connections of dead publishers closed at a successor's registration, for the server to
    /// shut down (`take_closed`).
    closed: Vec<u64>,
    /// Public names published on other hosts (empty without networking).
    remote: BTreeMap<SlotName, RemoteClaim>,
    /// Registrations refused because another host publishes the name.
    pub conflicts: u64,
    /// The directory slot and the value last written to it (see `directory`).
    directory: Option<directory::Published>,
    /// Names published here and on another host, with that host (see
    /// `set_published_elsewhere`).
    elsewhere: BTreeMap<SlotName, String>,
    /// Slots unused since when (see `reclaim`), and how many public ones are kept.
    unused_since: BTreeMap<SlotName, Instant>,
    keep_unused: reclaim::KeepUnused,
    /// The last slot checked for damage (`damage`): the next check goes on after it.
    damage_cursor: Option<SlotName>,
    /// Tools waiting to read a name only another host publishes, until its schema comes
    /// (see `readers`).
    readers: BTreeMap<SlotName, Vec<readers::Reader>>,
}

/// Longest program name kept for a client (a process name is at most 15 bytes on Linux; a path
/// or a description is still readable at this length).
pub const MAX_PROGRAM_CHARS: usize = 256;

impl Registry {
    pub fn new(domain: Domain, group: Option<Gid>) -> Registry {
        Registry {
            domain,
            group,
            slots: BTreeMap::new(),
            peers: HashMap::new(),
            closed: Vec::new(),
            remote: BTreeMap::new(),
            conflicts: 0,
            directory: None,
            elsewhere: BTreeMap::new(),
            unused_since: BTreeMap::new(),
            keep_unused: reclaim::KeepUnused::default(),
            damage_cursor: None,
            readers: BTreeMap::new(),
        }
    }

    /// How many slots of gone publishers are kept at most (see `reclaim`).
    pub fn set_keep_unused(&mut self, keep: reclaim::KeepUnused) {
        self.keep_unused = keep;
    }

    /// When the adoption grace of the slots adopted at start-up ends, while it lasts: what is
    /// announced as published changes then without any endpoint changing.
    pub fn adoption_ends(&self) -> Option<Instant> {
        let now = Instant::now();
        self.slots
            .values()
            .filter_map(|e| e.adopted_until)
            .filter(|t| *t > now)
            .max()
    }

    /// Adopts the domain's existing segments. Returns (adopted, skipped as invalid).
    pub fn adopt_existing(&mut self) -> (usize, usize) {
        let files = match self.domain.segment_files() {
            Ok(files) => files,
            Err(e) => {
                tracing::warn!("cannot list {}: {e}", bus::names::SHM_DIR);
                return (0, 0);
            }
        };
        let (mut adopted, mut skipped, mut regrouped) = (0, 0, 0);
        let group = self.group.unwrap_or_else(nix::unistd::getegid);
        for (name, _path) in files {
            let segment = self.domain.segment_name(&name);
            if let Some(why) = foreign::unsafe_to_adopt(&segment, group) {
                tracing::warn!(
                    "not adopting {segment}: {why}; {name} cannot be served until it is removed \
                     (as root: rm '{}{segment}')",
                    bus::names::SHM_DIR
                );
                skipped += 1;
                continue;
            }
            match Slot::open(&segment, true) {
                Ok(slot) => {
                    if let Some(why) = foreign::unsafe_to_adopt_opened(&segment, group, slot.file())
                    {
                        tracing::warn!("not adopting {segment}: {why}");
                        skipped += 1;
                        continue;
                    }
                    // Owner and the bus's group, mode 0660, as the registry makes segments;
                    // one it may not make so (the registry not root, the file root's) stays
                    // as it is, and is not served: others may be able to write it.
                    match bus::shm::set_group(&segment, group) {
                        Ok(true) if self.group.is_some() => regrouped += 1,
                        Ok(true) => tracing::warn!(
                            "{segment} was not the bus's (mode 0660, group {group}): made so"
                        ),
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(
                                "not adopting {segment}: it cannot be given to the bus's group \
                                 with mode 0660 ({e}); {name} cannot be served until it is \
                                 removed (as root: rm '{}{segment}')",
                                bus::names::SHM_DIR
                            );
                            skipped += 1;
                            continue;
                        }
                    }
                    mark_gone_if_dead(&slot);
                    let origin = slot.origin();
                    self.slots.insert(
                        name,
                        SlotEntry {
                            schema: slot.schema().clone(),
                            slot: Some(slot),
                            endpoints: Vec::new(),
                            origin: (!origin.is_empty()).then_some(origin),
                            own: None,
                            adopted_until: Some(Instant::now() + ADOPTION_GRACE),
                            remake: None,
                            in_the_way: None,
                        },
                    );
                    adopted += 1;
                }
                Err(e) => {
                    tracing::warn!("not adopting {segment}: {e}");
                    skipped += 1;
                }
            }
        }
        if regrouped > 0 {
            tracing::info!(
                "gave {regrouped} adopted segment(s) to group {} (mode 0660)",
                self.group.map_or(0, |g| g.as_raw())
            );
        }
        (adopted, skipped)
    }

    pub fn connect(&mut self, conn: u64, peer: Peer) {
        self.peers.insert(conn, peer);
    }

    /// Records the program name a client says it is. The name is a label that every listing
    /// repeats once per endpoint, so a long one is cut to [`MAX_PROGRAM_CHARS`] (with `…`):
    /// kept whole, one client's megabytes of name made the listing outgrow a frame and
    /// `bus-inspect endpoints` fail for everyone.
    pub fn set_program(&mut self, conn: u64, program: String) {
        if let Some(peer) = self.peers.get_mut(&conn) {
            peer.program = match program.char_indices().nth(MAX_PROGRAM_CHARS) {
                Some((cut, _)) => format!("{}…", &program[..cut]),
                None => program,
            };
        }
    }

    pub fn peers(&self) -> impl Iterator<Item = (u64, &Peer)> {
        self.peers.iter().map(|(c, p)| (*c, p))
    }

    /// Connections whose process is no longer the one that connected (died, or pid reused).
    pub fn dead_connections(&self) -> Vec<u64> {
        self.peers
            .iter()
            .filter(|(_, p)| p.is_dead())
            .map(|(c, _)| *c)
            .collect()
    }

    /// Marks gone the writers of adopted slots whose recorded process died while no registry
    /// ran (nobody re-registered them).
    pub fn sweep_adopted_writers(&self) {
        for entry in self.slots.values().filter(|e| e.own.is_none()) {
            let Some(slot) = &entry.slot else { continue };
            let registered = entry
                .endpoints
                .iter()
                .any(|e| e.kind == EndpointKind::Publication);
            if !registered {
                mark_gone_if_dead(slot);
            }
        }
    }

    /// The segment of slot `name` in this registry's domain.
    pub fn segment_name(&self, name: &SlotName) -> String {
        self.domain.segment_name(name)
    }

    /// Creates (or adopts) a slot the registry itself writes, and binds the subscriptions that
    /// wait for it (the network's statistics slot is made when the network opens, which may be
    /// long after start-up): returns the pushes that tell them. A slot that cannot be made now
    /// is still the registry's own, made at a later check if it can be (`make_anew_again`).
    pub fn create_own_slot(
        &mut self,
        name: &SlotName,
        schema: &Schema,
        capacity: u64,
    ) -> Result<Outbox, String> {
        let segment = self.domain.segment_name(name);
        // A slot of another type left from an earlier version is replaced if nobody maps it.
        if let Some(e) = self.slots.get(name) {
            if e.schema.hash != schema.hash() {
                if e.endpoints.iter().any(|r| r.bound) {
                    return Err(format!("{name} exists with another type and is in use"));
                }
                self.slots.remove(name);
                let _ = bus::shm::unlink(&segment);
            }
        }
        let entry = self.slots.entry(name.clone()).or_insert_with(|| SlotEntry {
            own: Some(capacity),
            ..SlotEntry::pending(schema)
        });
        // The registry writes it itself: no grace for reconnecting writers to wait for. Its
        // own from here on, also when it cannot be made now: made at a later check then
        // (`make_anew_again`).
        entry.adopted_until = None;
        entry.own = Some(capacity);
        entry
            .ensure_slot(&segment, name, schema, capacity, self.group, false)
            .map_err(|e| match e {
                NoSlot::TooSmallInUse { capacity: has } => {
                    format!("{name} has room for {has} bytes, needs {capacity}, and is in use")
                }
                NoSlot::Create(e) => format!("cannot create {segment}: {e}"),
            })?;
        if let Some(slot) = &entry.slot {
            write_as_registry(slot);
        }
        Ok(entry.bind_waiting(&segment))
    }

    pub fn listing(&self) -> Vec<SlotListing> {
        self.slots
            .iter()
            .map(|(name, entry)| SlotListing {
                name: name.clone(),
                type_name: entry.schema.type_name.clone(),
                schema_hash: entry.schema.hash.0,
                segment: entry.slot.as_ref().map(|s| s.segment().to_owned()),
                capacity: entry.slot.as_ref().map_or(0, |s| s.capacity() as u64),
                writer: entry
                    .slot
                    .as_ref()
                    .map_or(WriterState::None, |s| s.writer_state()),
                endpoints: entry
                    .endpoints
                    .iter()
                    .map(|e| {
                        let peer = self.peers.get(&e.conn);
                        EndpointInfo {
                            kind: e.kind,
                            pid: peer.map_or(0, |p| p.pid),
                            program: peer.map_or_else(String::new, |p| p.program.clone()),
                            bound: e.bound,
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

/// Makes this registry the writer of one of its own slots, written on this host.
fn write_as_registry(slot: &Slot) {
    slot.set_origin("");
    slot.set_writer(std::process::id(), bus::process::own_start_time(), 0);
}

/// Marks `slot`'s writer gone if it is marked alive and its process died while no registry ran
/// to notice. Judged by the state word (what readers go by); a record left half changed
/// (`Slot::writer` says `None`) names no process that runs.
fn mark_gone_if_dead(slot: &Slot) {
    if slot.writer_state() == WriterState::Alive && !slot.writer().is_running() {
        slot.mark_writer_gone();
    }
}

fn create_slot(
    segment: &str,
    name: &SlotName,
    schema: &Schema,
    capacity: u64,
    group: Option<Gid>,
) -> Result<Slot, bus::SegmentError> {
    let capacity = capacity as usize;
    match Slot::create(segment, name, schema, capacity, group) {
        Err(bus::SegmentError::Io { message, .. }) if message.contains("EEXIST") => {
            // A segment we did not adopt (corrupt header, or not safe: another user's): replace
            // it, if this user may remove it.
            let foreign =
                foreign::unsafe_to_adopt(segment, group.unwrap_or_else(nix::unistd::getegid));
            match &foreign {
                Some(why) => tracing::warn!("replacing segment {segment}: {why}"),
                None => tracing::warn!("replacing unreadable segment {segment}"),
            }
            if let Err(e) = foreign::remove(segment) {
                return Err(bus::SegmentError::Io {
                    segment: segment.to_owned(),
                    message: format!(
                        "{}{e}",
                        foreign.map_or(String::new(), |why| format!("{why}; "))
                    ),
                });
            }
            Slot::create(segment, name, schema, capacity, group)
        }
        other => other,
    }
}

mod damage;
mod directory;
mod foreign;
mod kept;
mod readers;
pub mod reclaim;
mod registration;
mod remote;
pub use reclaim::{KeepUnused, DEFAULT_KEEP_UNUSED, DEFAULT_KEEP_UNUSED_MIB};
pub use remote::NotMirrored;
#[cfg(test)]
mod tests;
