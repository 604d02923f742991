//! One endpoint's side of the client: checking and binding the slot the registry hands it,
//! keeping a publication's value until then, waiting for the binding, and unregistering when the
//! application drops it.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::{lock, ClientShared, Endpoint};
use crate::error::BusError;
use crate::futex;
use crate::protocol::{EndpointKind, Registration};
use crate::slot::Slot;

impl Endpoint {
    /// An endpoint of `registration`, bound to `slot` if it is set, with `error` as its
    /// refusal; nothing kept, replaced or followed yet.
    pub(super) fn new(
        registration: Registration,
        client: Arc<ClientShared>,
        slot: OnceLock<Slot>,
        error: Option<BusError>,
    ) -> Endpoint {
        Endpoint {
            registration,
            slot,
            error: Mutex::new(error),
            replaced: OnceLock::new(),
            successor: OnceLock::new(),
            taken_over: Mutex::new(false),
            pending: Mutex::new(None),
            client,
        }
    }

    /// The slot the registry handed us must be the type and size we registered.
    pub(super) fn check(&self, slot: &Slot) -> Result<(), BusError> {
        let reg = &self.registration;
        if slot.schema().hash.0 != reg.schema_hash {
            return Err(BusError::TypeMismatch {
                name: reg.name.to_string(),
                slot_type: slot.schema().type_name.clone(),
                slot_hash: slot.schema().hash.to_string(),
                requested_type: reg.type_name.clone(),
                requested_hash: crate::schema::SchemaHash(reg.schema_hash).to_string(),
            });
        }
        if reg.kind == EndpointKind::Publication && (slot.capacity() as u64) < reg.capacity {
            return Err(BusError::CapacityTooSmall {
                name: reg.name.to_string(),
                capacity: slot.capacity(),
                requested: reg.capacity as usize,
            });
        }
        Ok(())
    }

    pub(super) fn bind(&self, slot: Slot) {
        // A slot has one writer. The value kept before binding goes in before the slot is
        // visible to the publication's own thread, and `pending` is held throughout: a
        // concurrent `publish_bytes` either finds no slot and waits for the lock (then sees the
        // slot and writes after the kept value), or finds the slot set, which happens after the
        // kept value's write (the `OnceLock`'s release, its acquire). Writing the kept value after
        // `set` let a publication write the same buffer at the same time: two writers of one
        // sequence number, a torn value that passed the seqlock, or the older value last.
        let mut pending = lock(&self.pending);
        if self.slot.get().is_some() {
            return; // bound before: the registry answered a re-registration with its slot.
        }
        if let Some((bytes, written_ns)) = pending.take() {
            if let Err(e) = slot.write_at(&bytes, written_ns) {
                tracing::warn!("{}: value written before binding lost: {e}", slot.name());
            }
        }
        let _ = self.slot.set(slot);
    }

    pub(crate) fn error(&self) -> Option<BusError> {
        lock(&self.error).clone()
    }

    /// Records why the endpoint cannot be used (refused by the registry, or its slot not
    /// mapped). A publication's value kept from before binding goes: the writes after it
    /// failed with this error, and it must not come out later, when a registry accepts the
    /// publication, as the newest value of a live writer (an old command, say).
    pub(crate) fn fail(&self, error: BusError) {
        let mut pending = lock(&self.pending);
        if pending.take().is_some() {
            tracing::warn!(
                "{}: the value written before the registry answered is not published: {error}",
                self.registration.name
            );
        }
        *lock(&self.error) = Some(error);
    }

    /// The endpoint that stands for this one now: itself, or the last of its successors.
    pub(crate) fn current(self: &Arc<Endpoint>) -> &Arc<Endpoint> {
        let mut endpoint = self;
        while let Some(next) = endpoint.successor.get() {
            endpoint = next;
        }
        endpoint
    }

    /// For a publication whose slot the registry made anew: the endpoint to write into now,
    /// the last of its successors, each taken over on the way (the client thread carries no
    /// value into a successor once taken over: `successor.rs`); `BusError::Replaced` if a new
    /// slot could not be mapped.
    pub(crate) fn take_over_successors(self: &Arc<Endpoint>) -> Result<Arc<Endpoint>, BusError> {
        let mut endpoint = self;
        while let Some(e) = endpoint.replaced.get() {
            let Some(next) = endpoint.successor.get() else {
                return Err(e.clone());
            };
            *lock(&endpoint.taken_over) = true;
            endpoint = next;
        }
        Ok(Arc::clone(endpoint))
    }

    /// Publishes `bytes`: into the slot if bound, else kept until binding.
    pub(crate) fn publish_bytes(&self, bytes: &[u8]) -> Result<(), BusError> {
        if let Some(slot) = self.slot.get() {
            return slot.write(bytes).map(|_| ());
        }
        if let Some(e) = self.error() {
            return Err(e);
        }
        let mut pending = lock(&self.pending);
        match self.slot.get() {
            Some(slot) => slot.write(bytes).map(|_| ()),
            // Refused since the look above (`fail` takes `pending` first): not kept.
            None => match self.error() {
                Some(e) => Err(e),
                None => {
                    *pending = Some((bytes.to_vec(), crate::slot::now_ns()));
                    Ok(())
                }
            },
        }
    }

    /// Waits until the endpoint is bound (or refused).
    pub(crate) fn wait_bound(&self, timeout: Duration) -> Result<(), BusError> {
        let deadline = futex::deadline_after(timeout);
        let done = || self.slot.get().is_some() || self.error().is_some();
        self.client.wait_for(deadline, done);
        if self.slot.get().is_some() {
            return Ok(());
        }
        if let Some(e) = self.error() {
            return Err(e);
        }
        if self.client.is_connected() {
            Err(BusError::NotBoundYet {
                name: self.registration.name.to_string(),
                waited: timeout,
                reason: match self.registration.kind {
                    // Also what a publisher of another type sees happen: refused, because
                    // waiting subscriptions set the slot's type. Only the registry knows.
                    EndpointKind::Subscription => "no publication has created the slot yet (a \
                        publication of another type would be refused while this subscription \
                        waits: the registry's log names such refusals)"
                        .into(),
                    EndpointKind::Publication => "the registry has not answered".into(),
                },
            })
        } else {
            Err(self
                .client
                .unreachable(&format!("not connected after {timeout:?}")))
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if self.successor.get().is_some() {
            // Its registration is the successor's now, which unregisters it in turn (it is
            // dropped with this one, or later by the publication that took it over). Those who
            // still map the old memory see its writer gone; a subscription wrote nothing there,
            // and whoever does may still be writing it (its process not yet told).
            if self.registration.kind == EndpointKind::Publication {
                if let Some(slot) = self.slot.get() {
                    slot.mark_writer_gone();
                }
            }
            return;
        }
        if self.registration.kind == EndpointKind::Publication {
            if let Some(slot) = self.slot.get() {
                slot.mark_writer_gone();
            } else if lock(&self.pending).is_some() {
                // Written while unbound, and never bound: nobody will read it.
                let why = match (self.error(), self.client.refusal()) {
                    (Some(e), _) => e.to_string(),
                    (None, Some(_)) => "the registry refuses this process, as said above".into(),
                    (None, None) => "no slot was bound to it before the publication ended (no \
                                     registry-server answered, or its slot made anew could not \
                                     be made yet)"
                        .into(),
                };
                tracing::warn!(
                    "{}: the value written was never published ({why})",
                    self.registration.name
                );
            }
        }
        self.client.unregister(self.registration.endpoint);
    }
}
