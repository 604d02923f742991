//! The registry's I/O: the domain's abstract Unix socket, one thread per connected process, and
//! a sweeper that removes the endpoints of processes that died.

use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bus::protocol::{encode_frame, read_frame, write_frame, Reply, Request};
use bus::Domain;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::unistd::Gid;

use crate::admission::Admission;
use crate::state::{Outbox, Peer, Registry};

/// How often the sweeper checks that connected processes still live.
const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// Slots checked for damage (removed, shrunk, overwritten: `state::damage`) per sweep: two
/// system calls each, so that 10,000 slots cost a few milliseconds a sweep; each slot is
/// checked every 0.5 s up to 256 slots, every 20 s with 10,000.
const DAMAGE_CHECKS_PER_SWEEP: usize = 256;
/// A client that does not read its socket for this long is disconnected rather than allowed to
/// stall the registry.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Refused connections told why at one time, at most (`refuse`); more are closed unanswered.
const MAX_REFUSING: usize = 16;
/// How long a refused connection is kept open in all, for its client to read the answer.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Bytes of answers and pushes a connection may have waiting to be written. Registering
/// endpoints queues about 100 bytes an answer, so a burst of 10,000 stays far below; only a
/// client that keeps asking for listings (up to `MAX_FRAME`, 4 MiB each) without reading them
/// gets here, and it is disconnected rather than allowed to grow the registry's memory.
const MAX_QUEUED_BYTES: usize = 64 << 20;

pub struct ServerConfig {
    pub domain: Domain,
    /// Group given read/write access to every segment (mode 0660); `None`: the registry's own.
    pub group: Option<Gid>,
    /// Network reflection; `None`: this computer only.
    pub net: Option<crate::net::NetConfig>,
    /// Slots of gone publishers kept at most (`--keep-unused`, `--keep-unused-mib`; see
    /// `state::reclaim`).
    pub keep_unused: crate::state::KeepUnused,
}

/// A connection's way out. Replies and pushes are queued and written by the connection's own
/// writer thread, so the thread that reads a process's requests never waits for that process
/// to read: a client re-registering hundreds of endpoints in one burst after a registry restart
/// (without reading the answers until it has sent them all) used to fill both socket buffers
/// and stall both sides. A client that does not read for `WRITE_TIMEOUT`, or lets more than
/// `MAX_QUEUED_BYTES` wait, is disconnected.
struct Outgoing {
    /// Encoded frames, in order, for the writer thread.
    queue: std::sync::mpsc::Sender<Vec<u8>>,
    /// Bytes in `queue` not yet written (added by `push`, taken off by the writer thread).
    queued_bytes: Arc<AtomicUsize>,
    /// A handle for shutting the connection down (the sweeper, an overrun queue).
    stream: UnixStream,
    /// The client's pid, for the log.
    pid: u32,
    /// Set when the queue overran: the connection is going, later frames are dropped unsaid.
    overrun: AtomicBool,
}

impl Outgoing {
    /// Queues one frame for the writer thread; never blocks. A connection whose queue would
    /// pass `MAX_QUEUED_BYTES` is shut down instead (its reading thread then closes it).
    fn push(&self, conn: u64, id: u64, reply: &Reply) {
        // A listing bigger than a frame: the asker is told so instead of the answer.
        let encoded = encode_frame(id, reply).or_else(|e| {
            let message = format!("the registry cannot send its answer: {e}");
            encode_frame(id, &Reply::Error { message })
        });
        let Ok(frame) = encoded else {
            return self.shut_down();
        };
        let len = frame.len();
        let queued = self.queued_bytes.fetch_add(len, Ordering::Relaxed) + len;
        if queued > MAX_QUEUED_BYTES {
            self.queued_bytes.fetch_sub(len, Ordering::Relaxed);
            if self.overrun.swap(true, Ordering::Relaxed) {
                return;
            }
            tracing::warn!(
                "connection {conn} (pid {}) does not read its answers ({} MiB waiting); \
                 closing it",
                self.pid,
                (queued - len) >> 20
            );
            return self.shut_down();
        }
        // Fails only when the writer thread has ended: the connection is closing anyway.
        let _ = self.queue.send(frame);
    }

    /// Ends the connection: its writer fails, its reading thread sees the end of the stream
    /// and removes what is left of it (`close`).
    fn shut_down(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// What the connection threads, the sweeper and the network threads share.
pub struct Shared {
    state: Mutex<Registry>,
    /// Who may use the bus.
    admission: Admission,
    /// Per connection, its way out (see `Outgoing`).
    writers: Mutex<std::collections::HashMap<u64, Arc<Outgoing>>>,
    /// Set once the network is open (at start, or later: `open_network_later`).
    net: OnceLock<Arc<crate::net::Net>>,
    /// Set when endpoints changed; the directory thread then rewrites the directory once for a
    /// whole burst of registrations (rewriting it per registration made n registrations cost
    /// O(n²): 10,000 slots took 10 s to create).
    directory_dirty: Mutex<bool>,
    directory_wake: Condvar,
}

impl Shared {
    /// Runs `f` on the registry's state under its lock.
    pub fn with_state<R>(&self, f: impl FnOnce(&mut Registry) -> R) -> R {
        f(&mut lock(&self.state))
    }

    /// Sends replies and pushes to connected processes.
    pub fn send_outbox(&self, out: Outbox) {
        send(self, out);
    }

    /// Tells the network layer that endpoints changed.
    fn changed(&self) {
        if let Some(net) = self.net.get() {
            net.poke();
        }
    }

    /// Asks the directory thread to rewrite the directory soon.
    fn directory_changed(&self) {
        *lock(&self.directory_dirty) = true;
        self.directory_wake.notify_one();
    }
}

/// The network of this process, once it runs: for `farewell`, from the signal thread.
static RUNNING_NET: std::sync::OnceLock<Arc<crate::net::Net>> = std::sync::OnceLock::new();

/// Tells the other computers that this registry stops (`Net::farewell`), if it reflects, taking
/// at most `limit`: call it on SIGTERM, before exiting. It runs on a thread of its own, so that
/// a registry that hangs (a lock held) still stops.
pub fn farewell_within(limit: Duration) {
    let Some(net) = RUNNING_NET.get() else {
        return;
    };
    let (said, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        net.farewell();
        let _ = said.send(());
    });
    let _ = done.recv_timeout(limit);
}

/// Starts reflecting through `net`, now open.
fn start_network(shared: &Arc<Shared>, net: Arc<crate::net::Net>) -> std::io::Result<()> {
    if net.is_authenticated() {
        tracing::info!("network: datagrams authenticated with the key file");
    } else {
        tracing::warn!(
            "network: UNAUTHENTICATED (no --key-file): any host on the network can read and \
             write this domain's reflected slots"
        );
    }
    net.start(shared)?;
    tracing::info!("network: reflecting as host '{}'", net.host());
    let _ = RUNNING_NET.set(Arc::clone(&net));
    let _ = shared.net.set(net);
    shared.changed();
    Ok(())
}

/// Opens the network once it is ready, trying every second; a new reason it is not ready is
/// said once.
fn open_network_later(shared: &Arc<Shared>, mut cfg: crate::net::NetConfig, domain: &bus::Domain) {
    let mut said = String::new();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        match crate::net::Net::open(&mut cfg, domain) {
            Ok(net) => {
                if let Err(e) = start_network(shared, Arc::new(net)) {
                    tracing::error!("network: cannot start: {e}");
                }
                return;
            }
            Err(e) => {
                let e = e.to_string();
                if e != said {
                    tracing::info!("network: still not ready ({e})");
                    said = e;
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Binds the domain's socket. Fails if another registry serves the domain.
pub fn bind(domain: &Domain) -> std::io::Result<UnixListener> {
    let addr = SocketAddr::from_abstract_name(domain.registry_socket())?;
    UnixListener::bind_addr(&addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            std::io::Error::new(
                e.kind(),
                format!(
                    "a registry-server already serves domain '{domain}' (socket @{} in use{})",
                    domain.registry_socket(),
                    holder(&addr)
                ),
            )
        } else {
            e
        }
    })
}

/// Who holds the socket at `addr`, as its credentials say (`, by pid N (program) of user U`):
/// an abstract socket has no file permissions, so any user may have taken the name.
fn holder(addr: &SocketAddr) -> String {
    let Ok(stream) = std::os::unix::net::UnixStream::connect_addr(addr) else {
        return String::new();
    };
    match getsockopt(&stream, PeerCredentials) {
        Ok(c) => format!(
            ", by pid {}{} of user {}",
            c.pid(),
            std::fs::read_to_string(format!("/proc/{}/comm", c.pid()))
                .map_or(String::new(), |p| format!(" ({})", p.trim())),
            bus::process::user_or_number(c.uid())
        ),
        Err(_) => String::new(),
    }
}

/// Adopts existing slots, then serves `listener` forever. `ready` runs once the registry
/// accepts connections (sd_notify, logging).
pub fn serve(
    config: ServerConfig,
    listener: UnixListener,
    ready: impl FnOnce(usize),
) -> std::io::Result<()> {
    // The network first: a configuration that cannot work stops the registry before it has
    // created anything in /dev/shm.
    let host = match &config.net {
        Some(cfg) => cfg.host.clone(),
        None => nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    // A configuration that cannot work stops here; a network that is not up yet (no
    // address, no route for the group: a robot booting) is tried again every second while
    // the local bus serves (`open_network_later`).
    let mut later = None;
    let net = match config.net {
        Some(mut cfg) => match crate::net::Net::open(&mut cfg, &config.domain) {
            Ok(net) => Some(Arc::new(net)),
            Err(crate::net::OpenError::Config(e)) => return Err(std::io::Error::other(e)),
            Err(crate::net::OpenError::Network(why)) => {
                later = Some((cfg, why));
                None
            }
        },
        None => None,
    };
    let mut registry = Registry::new(config.domain.clone(), config.group);
    registry.set_keep_unused(config.keep_unused);
    let (adopted, skipped) = registry.adopt_existing();
    if skipped > 0 {
        tracing::warn!(
            "{skipped} segment(s) of domain '{}' were not adopted (unreadable, or not safe to \
             serve: said above)",
            config.domain
        );
    }
    // The directory names this computer as the network does, or by its host name.
    registry
        .create_directory_slot(&host)
        .map_err(std::io::Error::other)?;
    let shared = Arc::new(Shared {
        state: Mutex::new(registry),
        admission: Admission::new(config.group),
        writers: Mutex::new(Default::default()),
        net: OnceLock::new(),
        directory_dirty: Mutex::new(false),
        directory_wake: Condvar::new(),
    });
    if let Some(net) = net {
        start_network(&shared, net)?;
    } else if let Some((cfg, why)) = later {
        tracing::warn!(
            "network: not ready ({why}); serving this computer's bus meanwhile and trying \
             again every second"
        );
        let shared = Arc::clone(&shared);
        let domain = config.domain.clone();
        std::thread::Builder::new()
            .name("net-setup".into())
            .spawn(move || open_network_later(&shared, cfg, &domain))?;
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("sweeper".into())
            .spawn(move || sweep(&shared))?;
    }
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("directory".into())
            .spawn(move || publish_directory(&shared))?;
    }
    ready(adopted);
    let mut next_conn = 0u64;
    // A failing accept, said once until one works again (it is retried 10 times a second).
    let mut failing: Option<std::io::ErrorKind> = None;
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => {
                if failing.take().is_some() {
                    tracing::info!("accepting connections again");
                }
                s
            }
            Err(e) => {
                // Out of file descriptors or memory: wait for some to come back rather than
                // spin on the pending connection.
                if failing != Some(e.kind()) {
                    tracing::error!(
                        "cannot accept connections: {e}; processes that connect wait until \
                         it can (out of file descriptors: raise LimitNOFILE, or `ulimit -n`)"
                    );
                    failing = Some(e.kind());
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // The socket is abstract (no file permissions): who may use the bus is checked here,
        // before anything is spent on the connection, with the same rule as the segments'
        // mode, owner and group.
        let pid = match getsockopt(&stream, PeerCredentials) {
            Ok(c) => match shared.admission.check(c.uid(), c.gid(), c.pid() as u32) {
                Ok(()) => c.pid() as u32,
                Err(denied) => {
                    let shared = Arc::clone(&shared);
                    refuse(stream, move || shared.admission.refusal(&denied));
                    continue;
                }
            },
            Err(e) => {
                let message = format!("the registry cannot tell who connects: {e}");
                refuse(stream, move || message);
                continue;
            }
        };
        next_conn += 1;
        let conn = next_conn;
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{conn}"))
            .spawn(move || handle(&shared, conn, stream, pid));
        if let Err(e) = spawned {
            // The stream went with the closure: the connection is closed; others carry on.
            tracing::warn!("connection {conn} refused: cannot start its thread: {e}");
        }
    }
    Ok(())
}

/// Tells a connection it is refused (the `message` made, and logged, on a thread of its own:
/// it may look names up), or, while `MAX_REFUSING` others are being told, closes it unanswered:
/// a process outside the bus must not tie up the registry's threads and descriptors, nor its
/// accepting thread, by connecting again and again.
fn refuse(stream: UnixStream, message: impl FnOnce() -> String + Send + 'static) {
    static REFUSING: AtomicUsize = AtomicUsize::new(0);
    if REFUSING.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSING {
        REFUSING.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("refusing".into())
        .spawn(move || {
            tell_refused(stream, message());
            REFUSING.fetch_sub(1, Ordering::Relaxed);
        });
    if spawned.is_err() {
        REFUSING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Writes the refusal, then reads what the client sent for at most `REFUSAL_LINGER` in all
/// (closing with its requests unread would reset the connection under it before it read the
/// answer) and closes.
fn tell_refused(mut stream: UnixStream, message: String) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if write_frame(&mut stream, 0, &Reply::Error { message }).is_err() {
        return;
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let until = Instant::now() + REFUSAL_LINGER;
    let mut read = 0;
    let mut buf = [0u8; 4096];
    while read < 1 << 20 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match std::io::Read::read(&mut stream, &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n,
        }
    }
}

fn handle(shared: &Shared, conn: u64, stream: UnixStream, pid: u32) {
    let peer = Peer {
        pid,
        start_time: bus::process::start_time(pid).unwrap_or(0),
        program: String::new(),
    };
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let (mut reader, handle_for_shutdown) = match (stream.try_clone(), stream.try_clone()) {
        (Ok(reader), Ok(other)) => (reader, other),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!("connection from pid {pid}: {e}");
            return;
        }
    };
    let (queue, queued) = std::sync::mpsc::channel::<Vec<u8>>();
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let written = Arc::clone(&queued_bytes);
    let spawned = std::thread::Builder::new()
        .name(format!("conn-{conn}-out"))
        .spawn(move || write_replies(conn, stream, queued, &written));
    if let Err(e) = spawned {
        tracing::warn!("connection from pid {pid}: cannot start its writer: {e}");
        return;
    }
    lock(&shared.writers).insert(
        conn,
        Arc::new(Outgoing {
            queue,
            queued_bytes,
            stream: handle_for_shutdown,
            pid,
            overrun: AtomicBool::new(false),
        }),
    );
    lock(&shared.state).connect(conn, peer);
    loop {
        let frame = match read_frame::<Request>(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            // A client that exits with a reply still unread resets the connection: an
            // ordinary end, not a fault.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            // Its process ended (killed, say) in the middle of sending a request.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                tracing::info!("connection of pid {pid} ended in the middle of a request");
                break;
            }
            Err(e) => {
                tracing::warn!("dropping connection of pid {pid}: {e}");
                break;
            }
        };
        // Connections of dead publishers the registration closed (`Registry::take_closed`).
        let mut closed = Vec::new();
        let out: Outbox = {
            let mut state = lock(&shared.state);
            match frame.body {
                Request::Hello { program } => {
                    state.set_program(conn, program);
                    vec![(
                        conn,
                        frame.id,
                        Reply::Welcome {
                            registry_pid: std::process::id(),
                        },
                    )]
                }
                Request::Register(reg) => {
                    shared.changed();
                    let out = state.register(conn, frame.id, reg);
                    closed = state.take_closed();
                    shared.directory_changed();
                    out
                }
                Request::Unregister { endpoint } => {
                    shared.changed();
                    state.unregister(conn, endpoint);
                    shared.directory_changed();
                    vec![(conn, frame.id, Reply::Unregistered { endpoint })]
                }
                Request::Follow { endpoint, name } => {
                    let out = state.follow(conn, frame.id, endpoint, name);
                    // A refused one (no host has the name; a watch asks again now and then)
                    // changed nothing.
                    if !matches!(out.first(), Some((_, _, Reply::Refused { .. }))) {
                        shared.changed();
                    }
                    out
                }
                Request::List => vec![(
                    conn,
                    frame.id,
                    Reply::Listing {
                        slots: state.listing(),
                    },
                )],
            }
        };
        send(shared, out);
        for dead in closed {
            shut_down(shared, dead);
        }
    }
    close(shared, conn);
}

/// Queues replies and pushes for their connections' writer threads; never blocks. Queued
/// under the lock of the connections, so that what two threads send one connection keeps the
/// order in which they take it.
fn send(shared: &Shared, out: Outbox) {
    let writers = lock(&shared.writers);
    for (conn, id, reply) in out {
        if let Some(w) = writers.get(&conn) {
            w.push(conn, id, &reply);
        }
    }
}

/// A connection's writer thread: writes its queued replies in order until the queue closes
/// (the connection was closed) or the client stops taking them.
fn write_replies(
    conn: u64,
    mut stream: UnixStream,
    queued: std::sync::mpsc::Receiver<Vec<u8>>,
    queued_bytes: &AtomicUsize,
) {
    for frame in queued {
        let written = stream.write_all(&frame).and_then(|()| stream.flush());
        queued_bytes.fetch_sub(frame.len(), Ordering::Relaxed);
        if let Err(e) = written {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                tracing::debug!("connection {conn} closed before its answer");
            } else {
                tracing::warn!("connection {conn} does not take messages ({e}); closing it");
            }
            // The reading thread then sees the end of the stream and closes the connection.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

fn close(shared: &Shared, conn: u64) {
    lock(&shared.writers).remove(&conn);
    shared.changed();
    let mut state = lock(&shared.state);
    if let Some(peer) = state.disconnect(conn) {
        tracing::debug!("pid {} ({}) disconnected", peer.pid, peer.program);
    }
    drop(state);
    shared.directory_changed();
}

/// Rewrites the directory after endpoint changes, coalescing bursts: it waits for a change,
/// lets a short burst settle, then publishes once.
fn publish_directory(shared: &Shared) {
    const SETTLE: Duration = Duration::from_millis(2);
    loop {
        {
            let mut dirty = lock(&shared.directory_dirty);
            while !*dirty {
                dirty = shared
                    .directory_wake
                    .wait(dirty)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
        std::thread::sleep(SETTLE);
        *lock(&shared.directory_dirty) = false;
        lock(&shared.state).publish_directory();
    }
}

/// Shuts down the connection of a process found dead: its thread sees the end of stream and
/// removes what is left of it (`close`).
fn shut_down(shared: &Shared, conn: u64) {
    let writer = lock(&shared.writers).get(&conn).cloned();
    if let Some(w) = writer {
        w.shut_down();
    }
}

fn sweep(shared: &Shared) {
    loop {
        std::thread::sleep(SWEEP_EVERY);
        let (dead, pushes, net_changed) = {
            let mut state = lock(&shared.state);
            state.sweep_adopted_writers();
            let forgotten = state.reclaim_unused(Instant::now());
            let (pushes, any_replaced) = state.replace_damaged(DAMAGE_CHECKS_PER_SWEEP);
            state.publish_directory();
            let net_changed = any_replaced || !forgotten.is_empty();
            (state.dead_connections(), pushes, net_changed)
        };
        send(shared, pushes);
        if net_changed {
            // The network layer maps slots itself: it remaps those made anew, unmaps the
            // mirrors forgotten and stops asking for their values.
            shared.changed();
        }
        for conn in dead {
            shut_down(shared, conn);
            tracing::info!("connection {conn}: its process died; removing its endpoints");
            close(shared, conn);
        }
    }
}
