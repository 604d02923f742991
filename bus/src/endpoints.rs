//! The user-facing endpoints: `Bus` (a handle on one domain), `Publication` and `Subscription`.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{ClientShared, Endpoint};
use crate::codec::LengthPrefixes;
use crate::error::BusError;
use crate::futex;
use crate::names::{Domain, SlotName};
use crate::protocol::{EndpointKind, Registration};
use crate::schema::Schema;
use crate::slot::{ReadInfo, Slot, WriterId, WriterState};
use crate::value::{Codec, Pod, Serde};

/// A handle on one bus domain. Cheap to clone; endpoints keep the connection alive.
#[derive(Clone)]
pub struct Bus {
    client: Arc<ClientShared>,
}

impl Bus {
    /// Opens `domain`. Never fails because no registry runs: endpoints bind when it appears.
    pub fn open(domain: Domain) -> Result<Bus, BusError> {
        Ok(Bus {
            client: ClientShared::start(domain)?,
        })
    }

    /// Opens the domain named by `BUS_DOMAIN` (or `default`).
    pub fn from_env() -> Result<Bus, BusError> {
        Bus::open(Domain::from_env()?)
    }

    pub fn domain(&self) -> &Domain {
        &self.client.domain
    }

    /// Whether the registry is connected right now (and accepts this process). The connection
    /// is made by a background thread: just after `Bus::open` this is usually still `false`
    /// (`wait_for_registry` waits for it).
    pub fn is_connected(&self) -> bool {
        self.client.is_connected()
    }

    /// Why the domain's registry refuses this process (its user may not use the bus), if the
    /// last registry that answered did; `None` once one accepts it or none runs.
    pub fn refusal(&self) -> Option<String> {
        self.client.refusal()
    }

    /// Waits up to `timeout` for the registry; the error says how to start one.
    pub fn wait_for_registry(&self, timeout: Duration) -> Result<(), BusError> {
        let deadline = futex::deadline_after(timeout);
        if self
            .client
            .wait_for(deadline, || self.client.is_connected())
        {
            Ok(())
        } else {
            Err(self
                .client
                .unreachable(&format!("no connection within {timeout:?}")))
        }
    }

    /// A publication of serde type `T` on public `name`, with the default capacity.
    pub fn publish<T>(&self, name: &str) -> Result<Publication<T>, BusError>
    where
        Serde: Codec<T>,
    {
        self.publication(name)?.create()
    }

    /// A subscription of serde type `T` to `name`.
    pub fn subscribe<T>(&self, name: &str) -> Result<Subscription<T>, BusError>
    where
        Serde: Codec<T>,
    {
        Subscription::create(self, SlotName::parse(name)?)
    }

    /// A publication of plain-old-data type `T`, copied as bytes.
    pub fn publish_pod<T>(&self, name: &str) -> Result<Publication<T, Pod>, BusError>
    where
        Pod: Codec<T>,
    {
        self.publication(name)?.create()
    }

    /// A subscription of plain-old-data type `T`.
    pub fn subscribe_pod<T>(&self, name: &str) -> Result<Subscription<T, Pod>, BusError>
    where
        Pod: Codec<T>,
    {
        Subscription::create(self, SlotName::parse(name)?)
    }

    /// A publication builder for public `name` (set capacity, codec).
    pub fn publication(&self, name: &str) -> Result<PublicationBuilder, BusError> {
        Ok(PublicationBuilder {
            bus: self.clone(),
            name: SlotName::public(name)?,
            capacity: None,
        })
    }

    /// A publication builder for a private slot with a generated unique name.
    pub fn private_publication(&self) -> PublicationBuilder {
        PublicationBuilder {
            bus: self.clone(),
            name: SlotName::private(),
            capacity: None,
        }
    }

    fn register(
        &self,
        name: SlotName,
        kind: EndpointKind,
        capacity: usize,
        schema: &Schema,
    ) -> Result<Arc<Endpoint>, BusError> {
        let registration = Registration {
            endpoint: 0,
            name,
            kind,
            type_name: schema.type_name().to_owned(),
            schema_hash: schema.hash().0,
            schema: schema.to_bytes(),
            capacity: capacity as u64,
        };
        self.client.register(registration)
    }
}

/// Options of a publication before it is created.
pub struct PublicationBuilder {
    bus: Bus,
    name: SlotName,
    capacity: Option<usize>,
}

impl PublicationBuilder {
    /// Largest encoded value, in bytes (default 4 KiB for serde types, the type's size for
    /// plain-old-data). Fixed when the slot is created; 0 is refused by `create`.
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity = Some(bytes);
        self
    }

    pub fn create<T, C: Codec<T>>(self) -> Result<Publication<T, C>, BusError> {
        if self.capacity == Some(0) {
            // Every write would be refused as too large: said now, not at the first write.
            return Err(BusError::ZeroCapacity {
                name: self.name.to_string(),
            });
        }
        // At least 1: a zero-sized type's slot still records that a value was written.
        let capacity = self.capacity.unwrap_or_else(C::default_capacity).max(1);
        let endpoint = self.bus.register(
            self.name,
            EndpointKind::Publication,
            capacity,
            &C::schema()?,
        )?;
        Ok(Publication {
            endpoint,
            capacity,
            scratch: Vec::new(),
            last_len: 0,
            _type: PhantomData,
        })
    }
}

/// Writes values of `T` into one slot. Never blocks on readers.
pub struct Publication<T, C = Serde> {
    endpoint: Arc<Endpoint>,
    capacity: usize,
    scratch: Vec<u8>,
    /// Encoded length of the last value written (how the codec picks its write path).
    last_len: usize,
    _type: PhantomData<fn(&T) -> C>,
}

impl<T, C: Codec<T>> Publication<T, C> {
    /// Publishes `value`. Before the registry has bound the slot the value is kept and written
    /// at binding; a refusal (the name taken, another type) drops it, and writes fail with the
    /// refusal until a registry accepts the publication. A value larger than the capacity is
    /// refused, never truncated. Once the registry has made the slot anew under this
    /// publication (its segment was damaged or removed), writes go into the new slot, its last
    /// value carried over (while the registry cannot make the new slot yet, on a full
    /// /dev/shm, the latest value is kept for it, as before binding); only if this process
    /// cannot map the new slot does every write fail with `BusError::Replaced` (nobody would
    /// read it).
    pub fn write(&mut self, value: &T) -> Result<(), BusError> {
        loop {
            if self.endpoint.replaced.get().is_some() {
                self.endpoint = self.endpoint.take_over_successors()?;
            }
            self.write_once(value)?;
            // Made anew while this value went into the old memory: the client thread may have
            // carried the old memory's value over before this one reached it, so this one goes
            // into the new slot as well (`client/successor.rs` says why one of the two sees it).
            if self.endpoint.replaced.get().is_none() {
                return Ok(());
            }
        }
    }

    /// Writes `value` into this publication's current endpoint.
    fn write_once(&mut self, value: &T) -> Result<(), BusError> {
        if let Some(slot) = self.endpoint.slot.get() {
            let (limit, last_len) = (self.capacity, self.last_len);
            if let Some(written) =
                C::write_in_place(value, slot, limit, &mut self.scratch, last_len)
            {
                self.last_len = written?;
                return Ok(());
            }
        }
        let bytes = C::encode(value, &mut self.scratch)?;
        if bytes.len() > self.capacity {
            return Err(BusError::TooLarge {
                name: self.endpoint.registration.name.to_string(),
                size: bytes.len(),
                capacity: self.capacity,
            });
        }
        self.last_len = bytes.len();
        self.endpoint.publish_bytes(bytes)
    }

    pub fn name(&self) -> &SlotName {
        &self.endpoint.registration.name
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn is_bound(&self) -> bool {
        self.endpoint.current().slot.get().is_some()
    }

    /// Waits until the registry has created and bound the slot.
    pub fn wait_bound(&self, timeout: Duration) -> Result<(), BusError> {
        self.endpoint.current().wait_bound(timeout)
    }

    /// Why this publication cannot be bound, while that lasts: the registry refused it (its
    /// name has another live publisher, its slot holds another type, another computer
    /// publishes the name too, ...), or its slot could not be mapped (also a slot the registry
    /// made anew under it: `BusError::Replaced`, nobody else sees its writes any more; drop it
    /// and publish again). A publication created before the registry ran learns this only
    /// when the registry answers; until bound, `write` fails with the same error.
    pub fn bind_error(&self) -> Option<BusError> {
        self.endpoint.current().error()
    }
}

/// Metadata of the value a subscription holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueMeta {
    /// Increases by one with every write to the slot. A slot the registry made anew (its
    /// memory was damaged) counts from 1 again: a subscription that follows it starts afresh
    /// there and reads the carried-over value, if any, as a new one.
    pub sequence: u64,
    pub write_time: SystemTime,
    /// The state now of the value's writer: `Gone` once it exited, or died and the registry
    /// noticed (a writer that dies while no registry runs stays `Alive` until one does), also
    /// when another publication has taken the slot since but not written yet
    /// (`Slot::writer_state_of`).
    pub writer: WriterState,
    /// The writing process; 0 for a value of an earlier writer than the one the slot records
    /// now (a process that took the name but has not written yet): the slot keeps one
    /// writer's record.
    pub writer_pid: u32,
    /// Which writer that is: another id under the same pid is another writer (a process
    /// restarted, or, in a mirror, the publisher on the origin host restarted). A mirror's
    /// writing process is its registry (`writer_pid` is the registry's), but its id is the
    /// origin publisher's alone: this computer's registry restarted is no other writer.
    /// `origin` tells which host the value comes from.
    pub writer_id: WriterId,
    /// Host the value came from; `None` for values written on this computer. Read from the
    /// slot when `meta` is called (not with the value, to keep updates cheap): in the moment a
    /// name moves between computers (a publisher here takes a name another host published,
    /// or the other way round) it may already name the slot's next source.
    pub origin: Option<String>,
}

/// Reads the latest value of one slot.
pub struct Subscription<T, C = Serde> {
    endpoint: Arc<Endpoint>,
    scratch: Vec<u8>,
    /// What the type's schema says about length prefixes (how carefully to decode).
    prefixes: LengthPrefixes,
    value: Option<T>,
    last: Option<ReadInfo>,
    /// The slot sequence of a value that could not be read (it did not decode, or the slot's
    /// memory was inconsistent: a corrupt segment), when that is newer than `last`: reported
    /// once and passed over; updates and waits look for a value written after it.
    passed_over: Option<u64>,
    /// Whether `update` has reported that the registry made the slot anew.
    replaced_reported: bool,
    _codec: PhantomData<fn() -> C>,
}

impl<T, C: Codec<T>> Subscription<T, C> {
    fn create(bus: &Bus, name: SlotName) -> Result<Self, BusError> {
        let schema = C::schema()?;
        let endpoint = bus.register(name, EndpointKind::Subscription, 0, &schema)?;
        Ok(Subscription {
            endpoint,
            scratch: Vec::new(),
            prefixes: schema.length_prefixes(),
            value: None,
            last: None,
            passed_over: None,
            replaced_reported: false,
            _codec: PhantomData,
        })
    }

    /// Pulls the current value. `true` if it is newer than the one held before.
    ///
    /// A value that cannot be read is reported once and then passed over: one that does not
    /// decode (a hostile writer) as `BusError::Decode`, one the slot's memory cannot give
    /// (corrupted) as `BusError::Inconsistent`. The subscription keeps the last good value and
    /// its metadata, and the next update or wait looks for a value written after that one
    /// (a writer's next write makes a corrupted slot readable again). A slot the registry made
    /// anew under the subscription is reported once too, as `BusError::Replaced` (waits wake
    /// for it); the next update follows the new slot and starts afresh there, as a new
    /// subscription would: no value until the new slot holds one (its publisher's last value
    /// is carried over into it when its old memory still held it).
    pub fn update(&mut self) -> Result<bool, BusError> {
        if self.replaced_reported {
            self.move_on();
        }
        let Some(slot) = self.endpoint.slot.get() else {
            return match self.endpoint.error() {
                Some(e) => Err(e),
                None => Ok(false),
            };
        };
        // Reported once (as `BusError::Replaced`), like a value passed over; the subscription
        // then moves on to the new slot (`move_on`), or, if it could not be mapped, goes on
        // reading the old memory, which nobody writes: subscribe again then.
        if !self.replaced_reported {
            if let Some(e) = self.endpoint.replaced.get() {
                self.replaced_reported = true;
                return Err(e.clone());
            }
        }
        let seen = self.last_sequence();
        match C::read(
            slot,
            seen,
            &mut self.scratch,
            self.prefixes,
            &mut self.value,
        ) {
            Ok(Some(info)) => {
                self.last = Some(info);
                self.passed_over = None;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => {
                if let BusError::Decode { sequence, .. } | BusError::Inconsistent { sequence, .. } =
                    e
                {
                    self.passed_over = Some(sequence);
                }
                Err(e)
            }
        }
    }

    /// Blocks, without spinning, until a value newer than the one held exists (and pulls it:
    /// `Ok(true)`), or `timeout` passes (`Ok(false)`). `Duration::MAX` waits without end (as
    /// does every timeout of the bus too long for the clock). A writer that exits or dies
    /// writes no newer value, so this does not return for it: to learn that a source stopped,
    /// wait with a finite timeout and look at `writer()`, or wait in a `SubscriptionGroup`,
    /// whose `wait_any` reports a member whose writer comes or goes.
    pub fn wait_update(&mut self, timeout: Duration) -> Result<bool, BusError> {
        let deadline = futex::deadline_after(timeout);
        loop {
            if self.update()? {
                return Ok(true);
            }
            let wake = match self.endpoint.slot.get() {
                // A successor that comes after the update above (following the new slot
                // failed first, a later binding succeeded) is news as well: its one wake-up
                // may have come before this wait counted itself.
                Some(slot) => wait_on_slot(slot, self.last_sequence(), deadline, || {
                    self.replaced_unreported() || self.moves_on()
                }),
                None => {
                    let client = &self.endpoint.client;
                    let seen = client.bind_word.load(Ordering::SeqCst);
                    if self.endpoint.slot.get().is_some() || self.endpoint.error().is_some() {
                        continue;
                    }
                    futex::wait(&client.bind_word, seen, false, deadline)
                }
            };
            if wake == futex::Wake::TimedOut {
                return self.update();
            }
        }
    }

    /// The value held (after the last successful `update`), if any.
    pub fn value(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Sequence number of the value held; `None` before the first value. Unlike `meta`, reads
    /// nothing from the slot (for a hot path).
    pub fn sequence(&self) -> Option<u64> {
        self.last.map(|i| i.sequence)
    }

    /// Metadata of the value held; `None` before the first value.
    pub fn meta(&self) -> Option<ValueMeta> {
        let info = self.last?;
        let slot = self.endpoint.slot.get()?;
        let writer = slot.writer_of(Some(info.sequence));
        let origin = slot.origin();
        Some(ValueMeta {
            sequence: info.sequence,
            write_time: info.write_time(),
            writer: writer.state,
            writer_pid: writer.pid,
            writer_id: if origin.is_empty() {
                writer.id()
            } else {
                writer.origin_publisher_id()
            },
            origin: (!origin.is_empty()).then_some(origin),
        })
    }

    /// State now of the writer of the value held (the slot's writer, or `Gone` when the value
    /// is from an earlier one: `Slot::writer_state_of`); `None` while unbound.
    pub fn writer(&self) -> Option<WriterState> {
        self.endpoint
            .slot
            .get()
            .map(|s| s.writer_state_of(self.sequence()))
    }

    /// Why this subscription is not bound, or no longer shares its slot with the others: the
    /// registry refused it (another type), its slot could not be mapped, or the registry made
    /// the slot anew under it (`BusError::Replaced`, until the update after the one that
    /// reported it follows the new slot; a new subscription follows it too).
    pub fn bind_error(&self) -> Option<BusError> {
        self.endpoint.error()
    }

    pub fn name(&self) -> &SlotName {
        &self.endpoint.registration.name
    }

    pub fn is_bound(&self) -> bool {
        self.endpoint.slot.get().is_some()
    }

    /// Waits until the slot exists and is bound. A timeout is `BusError::NotBoundYet` (no
    /// publication has created the slot yet) or `RegistryUnreachable`; a refusal (the slot is
    /// typed otherwise) is `TypeMismatch` or `Refused`.
    pub fn wait_bound(&self, timeout: Duration) -> Result<(), BusError> {
        self.endpoint.wait_bound(timeout)
    }

    /// Whether the registry made the slot anew and `update` has not reported it yet.
    pub(crate) fn replaced_unreported(&self) -> bool {
        !self.replaced_reported && self.endpoint.replaced.get().is_some()
    }

    /// Whether the next `update` moves on to the slot made anew (`move_on`).
    pub(crate) fn moves_on(&self) -> bool {
        self.replaced_reported && self.endpoint.successor.get().is_some()
    }

    /// Once the slot made anew was reported: takes over the endpoint bound to the new slot
    /// (`client/successor.rs`) and starts afresh there, holding no value, as a new
    /// subscription does (the old value's sequence and writer are the old slot's).
    fn move_on(&mut self) {
        if self.endpoint.successor.get().is_none() {
            return;
        }
        // The last successor: a slot made anew twice before this update is reported once.
        self.endpoint = Arc::clone(self.endpoint.current());
        self.value = None;
        self.last = None;
        self.passed_over = None;
        self.replaced_reported = false;
    }

    /// The newest sequence this subscription has dealt with: its value's, or a newer one that
    /// could not be read (`passed_over`).
    pub(crate) fn last_sequence(&self) -> u64 {
        self.passed_over
            .unwrap_or_else(|| self.last.map_or(0, |i| i.sequence))
    }

    pub(crate) fn endpoint(&self) -> &Arc<Endpoint> {
        &self.endpoint
    }
}

/// Sleeps on `slot`'s notify word unless its latest sequence already differs from `seen`, or
/// `news` says there is something else to report (checked after the notify word is read, like
/// the sequence: an event that bumps the word after that is seen by the futex).
fn wait_on_slot(
    slot: &Slot,
    seen: u64,
    deadline: Option<Instant>,
    news: impl Fn() -> bool,
) -> futex::Wake {
    // Counted first, then the notify word read, then re-checked (see `slot::waiters`): a
    // concurrent write either sees the count or changes the word we sleep against, and a
    // count a writer dropped as stale in between means: do not sleep, count again.
    let ticket = slot.count_waiter();
    let wake = match slot.notify_to_sleep_on(&ticket) {
        Some(expected) if !slot.has_news(seen) && !news() => {
            // At most `RECHECK_EVERY` at a time: a segment cut short under this process puts
            // a private page where the shared one was, and the wakes of its replacement
            // (`BusError::Replaced`) then go to that page, never to the one slept on.
            let recheck = Instant::now() + RECHECK_EVERY;
            match futex::wait(
                slot.notify_word(),
                expected,
                true,
                Some(deadline.map_or(recheck, |d| d.min(recheck))),
            ) {
                futex::Wake::TimedOut if deadline.is_none_or(|d| recheck < d) => {
                    futex::Wake::Maybe(None)
                }
                wake => wake,
            }
        }
        _ => futex::Wake::Maybe(None),
    };
    slot.uncount_waiter(ticket);
    wake
}

/// Longest a `wait_update` (and a group's `wait_any`) sleeps before it looks again whether its
/// slot was replaced, or its count on it lost (see `wait_on_slot`); a change of value wakes it
/// at once.
pub(crate) const RECHECK_EVERY: Duration = Duration::from_secs(1);
