//! The registry client: one background thread per `Bus` that keeps a connection to the domain's
//! registry server, (re-)registers every live endpoint whenever a connection is made, and binds
//! endpoints to their slots as the registry answers.
//!
//! Endpoints never depend on the registry being up: an endpoint created while it is down is
//! registered when it appears, and a bound endpoint keeps working through a registry restart
//! (its slot mapping stays valid; the new registry adopts the segment and the endpoint is
//! registered again). Binding is announced on a process-local futex word so that waits on
//! unbound subscriptions sleep instead of polling.
//!
//! A registry that refuses this process (its user may not use the bus) answers with an error
//! and closes the connection. The client then logs the refusal once (again only when its text
//! changes or after `REFUSAL_LOG_AGAIN`), retries with a back-off growing to
//! `MAX_REFUSED_RETRY`, and keeps every endpoint pending: once a registry admits the process (its
//! group fixed, the registry restarted with another `--group`) they register and bind.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};

use crate::error::BusError;
use crate::futex;
use crate::names::Domain;
use crate::protocol::{self, EndpointKind, Registration, Reply, Request};
use crate::slot::Slot;
use successor::Followed;

/// How long endpoint creation waits for the registry's answer when connected.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest pause between connection attempts while no registry runs.
const MAX_RETRY: Duration = Duration::from_millis(200);
/// First pause after the registry refused this process; it doubles up to `MAX_REFUSED_RETRY`.
const FIRST_REFUSED_RETRY: Duration = Duration::from_millis(250);
/// Longest pause between connection attempts while the registry refuses this process.
const MAX_REFUSED_RETRY: Duration = Duration::from_secs(5);
/// An unchanged refusal is logged again after this long.
const REFUSAL_LOG_AGAIN: Duration = Duration::from_secs(600);
/// A registry absent this long, while this process has endpoints, is said once (per outage):
/// a service started before its registry otherwise looks ready while nothing is on the bus.
const SAY_ABSENT_AFTER: Duration = Duration::from_secs(2);

pub(crate) struct ClientShared {
    pub(crate) domain: Domain,
    state: Mutex<ClientState>,
    /// Bumped (and woken, private futex) whenever an endpoint binds or fails, or the connection
    /// comes up.
    pub(crate) bind_word: AtomicU32,
    /// Since when no registry answers (the current outage), and whether that was said.
    absent: Mutex<(Option<Instant>, bool)>,
    /// The registry accepted this process on the current connection (its `Welcome` arrived).
    connected: AtomicBool,
    refusal: Mutex<RefusalState>,
}

/// Why the registry refuses this process, and what of it was logged.
#[derive(Default)]
struct RefusalState {
    /// The registry's reason, from the last connection it refused; cleared when one admits us.
    current: Option<String>,
    /// The refusal last logged, and when.
    logged: Option<(String, Instant)>,
}

#[derive(Default)]
struct ClientState {
    conn: Option<UnixStream>,
    /// By id, which grows with every endpoint created: the order in which they register again
    /// (`on_connect`), hence which of two contenders for a name wins.
    endpoints: BTreeMap<u64, Weak<Endpoint>>,
    waiting: HashMap<u64, Sender<Result<(), BusError>>>,
}

/// A new endpoint id. Ids are unique in the process, not only in a client: the registry takes
/// a publication registered again on a new connection of the same process with the same id for
/// the same one, and a process may open two `Bus` handles on a domain (two clients), whose
/// publications of one name must not pass for one. They start at a random number, so that two
/// processes the registry cannot tell apart (another pid namespace: both pid 0) do not share
/// ids either; they grow from there (the order of creation: `ClientState::endpoints`).
fn new_endpoint_id() -> u64 {
    static LAST: OnceLock<AtomicU64> = OnceLock::new();
    // Room for 2^62 endpoints above the start before the sum could wrap.
    let last = LAST.get_or_init(|| AtomicU64::new(crate::process::random_u64() >> 2));
    last.fetch_add(1, Ordering::Relaxed) + 1
}

/// One publication or subscription as the client tracks it.
pub(crate) struct Endpoint {
    pub(crate) registration: Registration,
    pub(crate) slot: OnceLock<Slot>,
    error: Mutex<Option<BusError>>,
    /// The registry made the slot anew under this endpoint (`BusError::Replaced`): set once,
    /// and one load on the update and write paths. For a subscription it is also kept in
    /// `error` (reported once before it moves on); a publication moves on silently.
    pub(crate) replaced: OnceLock<BusError>,
    /// The endpoint bound to the slot made anew under this one (`successor.rs`), which the
    /// publication or subscription takes over: set before `replaced`, so whoever sees
    /// `replaced` finds it (unless the new slot could not be mapped).
    pub(crate) successor: OnceLock<Arc<Endpoint>>,
    /// The publication has taken `successor` over (it writes there): the client thread no
    /// longer carries this endpoint's last value into it (`successor.rs`).
    pub(crate) taken_over: Mutex<bool>,
    /// Latest value a publication wrote before it was bound, and when (the write time it
    /// carries once bound: the moment the application wrote it, not the registry's arrival).
    pending: Mutex<Option<(Vec<u8>, u64)>>,
    pub(crate) client: Arc<ClientShared>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientShared {
    pub(crate) fn start(domain: Domain) -> Result<Arc<ClientShared>, BusError> {
        let shared = Arc::new(ClientShared {
            domain,
            state: Mutex::new(ClientState::default()),
            bind_word: AtomicU32::new(0),
            absent: Mutex::new((None, false)),
            connected: AtomicBool::new(false),
            refusal: Mutex::new(RefusalState::default()),
        });
        // Try once before returning, so that endpoints created right after `Bus::open` register
        // synchronously (and see refusals) when a registry runs.
        let first = connect_pair(&shared.domain).ok();
        let first = first.map(|(stream, reader)| {
            shared.on_connect(stream);
            reader
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("baton-registry-client".into())
            .spawn(move || run(weak, first))
            .map_err(|e| BusError::io("starting the registry client thread", e))?;
        Ok(shared)
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    fn announce(&self) {
        self.bind_word.fetch_add(1, Ordering::SeqCst);
        futex::wake_all(&self.bind_word, false);
    }

    /// Waits until `ready()` holds, sleeping on the bind word. `false` on timeout.
    pub(crate) fn wait_for(&self, deadline: Option<Instant>, ready: impl Fn() -> bool) -> bool {
        loop {
            let seen = self.bind_word.load(Ordering::SeqCst);
            if ready() {
                return true;
            }
            if futex::wait(&self.bind_word, seen, false, deadline) == futex::Wake::TimedOut {
                return ready();
            }
        }
    }

    /// Why the registry refuses this process, if the last connection it answered was refused.
    pub(crate) fn refusal(&self) -> Option<String> {
        lock(&self.refusal).current.clone()
    }

    /// The error for not being connected: the registry's refusal if it refuses this process
    /// (it runs; starting one would not help), else unreachable for `reason`.
    pub(crate) fn unreachable(&self, reason: &str) -> BusError {
        if let Some(refusal) = self.refusal() {
            return BusError::Refused {
                name: "this process".into(),
                reason: refusal,
            };
        }
        BusError::RegistryUnreachable {
            domain: self.domain.to_string(),
            socket: self.domain.registry_socket(),
            reason: reason.into(),
        }
    }

    /// Creates an endpoint and registers it. If the registry is connected, waits for its answer
    /// so that refusals (type mismatch, second publisher, ...) surface here.
    pub(crate) fn register(
        self: &Arc<ClientShared>,
        mut registration: Registration,
    ) -> Result<Arc<Endpoint>, BusError> {
        let (tx, rx) = bounded(1);
        let endpoint = {
            let mut state = lock(&self.state);
            registration.endpoint = new_endpoint_id();
            let endpoint = Arc::new(Endpoint::new(
                registration,
                Arc::clone(self),
                OnceLock::new(),
                None,
            ));
            let id = endpoint.registration.endpoint;
            state.endpoints.insert(id, Arc::downgrade(&endpoint));
            let request = Request::Register(endpoint.registration.clone());
            if state.send(id, &request) {
                state.waiting.insert(id, tx);
            } else {
                // Not connected: nothing to wait for; `recv_timeout` returns at once.
                drop(tx);
            }
            endpoint
        };
        match rx.recv_timeout(REGISTER_TIMEOUT) {
            Ok(Err(e)) => Err(e),
            Err(RecvTimeoutError::Timeout) => {
                // No longer waited for: a refusal coming later is logged where it arrives. One
                // that came since the timeout is in the channel: returned.
                lock(&self.state)
                    .waiting
                    .remove(&endpoint.registration.endpoint);
                match rx.try_recv() {
                    Ok(Err(e)) => Err(e),
                    _ => Ok(endpoint),
                }
            }
            // Answered, or not connected (bound later): then the endpoint binds in the
            // background.
            _ => Ok(endpoint),
        }
    }

    fn unregister(&self, id: u64) {
        let mut state = lock(&self.state);
        state.endpoints.remove(&id);
        state.waiting.remove(&id);
        state.send(0, &Request::Unregister { endpoint: id });
    }

    fn on_connect(&self, stream: UnixStream) {
        // A registry that stops reading (stopped, hung) must not block the application for
        // ever in a send, holding the client's lock (an endpoint's drop, a registration): the
        // send fails, the connection is dropped and made again.
        let _ = stream.set_write_timeout(Some(REGISTER_TIMEOUT));
        let mut state = lock(&self.state);
        state.conn = Some(stream);
        let hello = Request::Hello {
            program: crate::process::own_program(),
        };
        state.send(0, &hello);
        // Bound endpoints first, then the others in the order the application created them:
        // the registry settles a contest for a name (a second publisher, another type) by
        // which registration comes first, and the outcome must not depend on whether a
        // registry ran when the endpoints were made. An endpoint bound before keeps its slot
        // (a second publication of this process, refused before, would otherwise take the
        // name back from it after a registry restart while the first still writes its old
        // mapping: two writers of one slot).
        let mut live: Vec<Arc<Endpoint>> =
            state.endpoints.values().filter_map(Weak::upgrade).collect();
        live.sort_by_key(|e| e.slot.get().is_none());
        for endpoint in &live {
            let id = endpoint.registration.endpoint;
            state.send(id, &Request::Register(endpoint.registration.clone()));
        }
        // Unlocked first: an endpoint the application dropped meanwhile goes with the last of
        // these references, and its drop unregisters it, which takes the lock.
        drop(state);
        drop(live);
        // `connected` waits for the registry's `Welcome`: a registry that refuses this process
        // accepts the connection, then answers with an error and closes it.
    }

    /// No registry answered a connection attempt: said once an outage lasts
    /// `SAY_ABSENT_AFTER`, if this process has endpoints waiting for one.
    fn on_absent(&self) {
        let has_endpoints = !lock(&self.state).endpoints.is_empty();
        let mut absent = lock(&self.absent);
        let since = *absent.0.get_or_insert_with(Instant::now);
        if !absent.1 && has_endpoints && since.elapsed() >= SAY_ABSENT_AFTER {
            absent.1 = true;
            tracing::warn!(
                "no registry-server answers on domain '{domain}': this process's publications \
                 and subscriptions wait for one (start `registry-server --domain {domain}`)",
                domain = self.domain
            );
        }
    }

    /// The registry answered `Hello`: it accepts this process.
    fn on_welcome(&self) {
        if std::mem::take(&mut *lock(&self.absent)).1 {
            tracing::info!(
                "registry-server of domain '{}' answers: publications and subscriptions bind",
                self.domain
            );
        }
        let was_refused = {
            let mut refusal = lock(&self.refusal);
            refusal.logged = None;
            refusal.current.take().is_some()
        };
        if was_refused {
            tracing::info!(
                "registry: domain '{}' now accepts this process",
                self.domain
            );
        }
        self.connected.store(true, Ordering::Release);
        self.announce();
    }

    /// The registry refused this connection with `message` (it closes it next). Logged once,
    /// again only when the message changes or after `REFUSAL_LOG_AGAIN`.
    fn on_refused(&self, message: String) {
        let mut refusal = lock(&self.refusal);
        let log = refusal
            .logged
            .as_ref()
            .is_none_or(|(logged, at)| *logged != message || at.elapsed() >= REFUSAL_LOG_AGAIN);
        if log {
            tracing::warn!(
                "registry of domain '{}' refuses this process: {message}. Its endpoints stay \
                 pending and bind once the registry accepts it (retrying every few seconds)",
                self.domain,
            );
            refusal.logged = Some((message.clone(), Instant::now()));
        }
        refusal.current = Some(message);
        drop(refusal);
        self.announce();
    }

    fn on_disconnect(&self) {
        let mut state = lock(&self.state);
        state.conn = None;
        // Whoever waits for an answer gets an unbound endpoint; it binds after reconnecting.
        state.waiting.clear();
        drop(state);
        self.connected.store(false, Ordering::Release);
        self.announce();
    }

    fn on_reply(&self, reply: Reply) {
        // The answer, and for a refusal the endpoint's name, to log it if no one waits for it.
        let (id, outcome, refused) = match reply {
            Reply::Registered {
                endpoint,
                segment: Some(segment),
            }
            | Reply::Bound { endpoint, segment } => (endpoint, self.bind(endpoint, &segment), None),
            Reply::Registered {
                endpoint,
                segment: None,
            } => (endpoint, Ok(()), None),
            Reply::Refused { endpoint, refusal } => {
                let Some(ep) = self.endpoint(endpoint) else {
                    return;
                };
                let err = refusal.into_error(&ep.registration);
                ep.fail(err.clone());
                (endpoint, Err(err), Some(ep.registration.name.clone()))
            }
            // The registry sends `Error` only to refuse a connection, before closing it.
            Reply::Error { message } => {
                self.on_refused(message);
                return;
            }
            Reply::Welcome { .. } => {
                self.on_welcome();
                return;
            }
            Reply::Unregistered { .. } | Reply::Listing { .. } => return,
        };
        let unheard = match lock(&self.state).waiting.remove(&id) {
            Some(tx) => tx.send(outcome).err().map(|e| e.into_inner()),
            None => Some(outcome),
        };
        // The creation that waits for a refusal returns it to the application, which says it
        // in its own words; logged here only when no one does (a registration sent again after
        // reconnecting, or answered after the creation stopped waiting).
        if let (Some(name), Some(Err(err))) = (refused, unheard) {
            match err {
                // Its text says "registry refused" already.
                BusError::Refused { .. } => tracing::warn!(endpoint = %name, "{err}"),
                err => tracing::warn!(endpoint = %name, "registry refused: {err}"),
            }
        }
        self.announce();
    }

    fn endpoint(&self, id: u64) -> Option<Arc<Endpoint>> {
        lock(&self.state).endpoints.get(&id).and_then(Weak::upgrade)
    }

    fn bind(&self, id: u64, segment: &str) -> Result<(), BusError> {
        let Some(ep) = self.endpoint(id) else {
            return Ok(());
        };
        if let Some(slot) = ep.slot.get() {
            // An endpoint keeps the memory it was bound to (it never moves to another mapping
            // under the application). If the registry made the slot anew (the old segment was
            // corrupt or removed when it restarted), this process and the others no longer
            // share it: the endpoint gets a successor bound to the new slot (`successor.rs`).
            // A publication goes on there silently; a subscription says so first, once, and
            // keeps it as its error until it moves on (or the application subscribes again).
            let made_anew = slot.segment() != segment || !slot.is_current();
            if made_anew {
                let publication = ep.registration.kind == EndpointKind::Publication;
                match self.follow(&ep, slot, segment) {
                    Ok(Followed::SameMemory) => return Ok(()),
                    Ok(Followed::Successor) if publication => return Ok(()),
                    Ok(Followed::Successor) => {}
                    Err(e) => tracing::warn!(
                        "{}: the registry made its slot anew, and this {} cannot follow it \
                         into the new one: {e}",
                        ep.registration.name,
                        if publication {
                            "publication"
                        } else {
                            "subscription"
                        }
                    ),
                }
            }
            let error = made_anew.then(|| BusError::Replaced {
                name: ep.registration.name.to_string(),
                segment: slot.segment().to_owned(),
            });
            // Otherwise bound again after a refusal of the bound endpoint (a name conflict
            // with another host that has ended): the refusal no longer holds.
            *lock(&ep.error) = error.clone();
            // The error, then the wake-up.
            if let Some(e) = &error {
                if ep.replaced.set(e.clone()).is_ok() {
                    // A warning: a subscription reports it once (`BusError::Replaced`), then
                    // moves on to its successor, if it has one; an application may subscribe
                    // again instead (the arbiter does). A publication is told only when it
                    // could not follow the new slot, above.
                    tracing::warn!("{e}");
                }
                // Waiters on the old memory (this process's, and others') would sleep for
                // ever: wake them, to find the error, or the successor that a slot made
                // again (after a first new one could not be made) brings later.
                slot.wake_all_waiters();
            }
            return error.map_or(Ok(()), Err);
        }
        let result = Slot::open(segment, true)
            .map_err(BusError::from)
            .and_then(|slot| ep.check(&slot).map(|()| slot));
        match result {
            Ok(slot) => {
                ep.bind(slot);
                *lock(&ep.error) = None;
                Ok(())
            }
            Err(e) => {
                ep.fail(e.clone());
                Err(e)
            }
        }
    }
}

impl Drop for ClientShared {
    fn drop(&mut self) {
        if let Some(conn) = &lock(&self.state).conn {
            // Wakes the background thread's blocking read so that it exits.
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl ClientState {
    /// Sends if connected; `false` if not connected or the send failed.
    fn send(&mut self, id: u64, request: &Request) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        match protocol::write_frame(conn, id, request) {
            Ok(()) => true,
            Err(_) => {
                // The reader side notices too and reconnects.
                let _ = conn.shutdown(std::net::Shutdown::Both);
                false
            }
        }
    }
}

/// The background thread: connect, read replies until the connection drops, repeat. Holds only
/// a weak reference so that the client (and the thread) end when the last `Bus` handle and
/// endpoint are dropped.
/// Connecting is retried with a short back-off while no registry runs (an abstract socket
/// cannot be watched for appearance, and this is off every hot path), and with a longer one
/// while the registry refuses this process. A connection that ends before the registry
/// accepted it is never retried at once, so nothing here can spin.
fn run(weak: Weak<ClientShared>, mut connected: Option<UnixStream>) {
    let mut retry = Duration::from_millis(5);
    let mut refused_retry = FIRST_REFUSED_RETRY;
    loop {
        let mut reader = match connected.take() {
            Some(reader) => reader,
            None => {
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                let Ok((stream, reader)) = connect_pair(&shared.domain) else {
                    // No registry runs: a refusal heard from an earlier one no longer holds.
                    lock(&shared.refusal).current = None;
                    shared.on_absent();
                    drop(shared);
                    std::thread::sleep(retry);
                    retry = (retry * 2).min(MAX_RETRY);
                    continue;
                };
                shared.on_connect(stream);
                reader
            }
        };
        let pause = loop {
            let frame = protocol::read_frame::<Reply>(&mut reader);
            let Some(shared) = weak.upgrade() else {
                return;
            };
            match frame {
                Ok(Some(frame)) => shared.on_reply(frame.body),
                Ok(None) | Err(_) => {
                    let was_accepted = shared.is_connected();
                    shared.on_disconnect();
                    if shared.refusal().is_some() {
                        let pause = refused_retry;
                        refused_retry = (refused_retry * 2).min(MAX_REFUSED_RETRY);
                        break pause;
                    }
                    refused_retry = FIRST_REFUSED_RETRY;
                    if was_accepted {
                        // A registry that served us went away: reconnect at once.
                        retry = Duration::from_millis(5);
                        break Duration::ZERO;
                    }
                    let pause = retry;
                    retry = (retry * 2).min(MAX_RETRY);
                    break pause;
                }
            }
        };
        // Without a strong reference: a `Bus` dropped meanwhile ends the thread on waking.
        std::thread::sleep(pause);
    }
}

fn connect_pair(domain: &Domain) -> std::io::Result<(UnixStream, UnixStream)> {
    let stream = protocol::connect(domain)?;
    let reader = stream.try_clone()?;
    Ok((stream, reader))
}

mod endpoint;
mod successor;
#[cfg(test)]
mod tests;
