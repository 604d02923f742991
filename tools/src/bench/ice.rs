//! The peer library: iceoryx2 publish-subscribe ping-pong between two processes, the same
//! shape as the bus cases. Built only with the `iceoryx2` cargo feature.
//!
//! Each direction is a `[u8]` publish-subscribe service holding one sample per subscriber
//! (history 0, buffer 1, safe overflow: the closest iceoryx2 setting to a latest-value slot).
//! The sender loans a sample and copies its payload in (`write_from_slice`, the safe API; a
//! producer has to put its data somewhere); the receiver reads it in place (zero-copy); the echo
//! copies the received payload into a new loan, and the leader copies the echoed payload out
//! (the bus subscription and the raw baseline hand the leader the whole value too). Busy mode polls `receive()`. Wait mode adds one
//! event service per direction: the sender calls `notify()` after `send()`, the receiver sleeps
//! in `Listener::timed_wait_one` (iceoryx2's recommended IPC event, a Unix datagram socket).

use std::time::{Duration, Instant};

use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::*;

use super::harness::{announce_ready, Deadline, Harness, Watch};
use super::payload::STOP;
use super::stats::Mode;

type Svc = ipc::Service;

/// One side's ports: send on `out`, receive on `back`.
struct Ends {
    publisher: Publisher<Svc, [u8], ()>,
    subscriber: Subscriber<Svc, [u8], ()>,
    notifier: Option<Notifier<Svc>>,
    listener: Option<Listener<Svc>>,
    // Dropped last: the ports above belong to the node's services.
    _node: Node<Svc>,
}

fn err(what: &str) -> impl Fn(&dyn std::fmt::Debug) -> String + '_ {
    move |e| format!("iceoryx2: {what}: {e:?}")
}

impl Ends {
    fn open(name: &str, out: &str, back: &str, bytes: usize, mode: Mode) -> Result<Ends, String> {
        set_log_level(LogLevel::Error);
        let node = NodeBuilder::new()
            .create::<Svc>()
            .map_err(|e| err("creating a node")(&e))?;
        let service = |dir: &str| -> Result<_, String> {
            let sname: ServiceName = format!("{name}/{dir}")
                .as_str()
                .try_into()
                .map_err(|e| err("service name")(&e))?;
            node.service_builder(&sname)
                .publish_subscribe::<[u8]>()
                .history_size(0)
                .subscriber_max_buffer_size(1)
                .enable_safe_overflow(true)
                .max_publishers(1)
                .max_subscribers(1)
                .open_or_create()
                .map_err(|e| err("publish-subscribe service")(&e))
        };
        let event = |dir: &str| -> Result<_, String> {
            let sname: ServiceName = format!("{name}/{dir}-event")
                .as_str()
                .try_into()
                .map_err(|e| err("service name")(&e))?;
            node.service_builder(&sname)
                .event()
                .open_or_create()
                .map_err(|e| err("event service")(&e))
        };
        let publisher = service(out)?
            .publisher_builder()
            .initial_max_slice_len(bytes)
            .create()
            .map_err(|e| err("publisher")(&e))?;
        let subscriber = service(back)?
            .subscriber_builder()
            .create()
            .map_err(|e| err("subscriber")(&e))?;
        let (notifier, listener) = match mode {
            Mode::Busy => (None, None),
            Mode::Wait => (
                Some(
                    event(out)?
                        .notifier_builder()
                        .create()
                        .map_err(|e| err("notifier")(&e))?,
                ),
                Some(
                    event(back)?
                        .listener_builder()
                        .create()
                        .map_err(|e| err("listener")(&e))?,
                ),
            ),
        };
        Ok(Ends {
            publisher,
            subscriber,
            notifier,
            listener,
            _node: node,
        })
    }

    /// Loans a sample, copies `payload` in, sends it and (wait mode) notifies.
    fn send(&self, payload: &[u8]) -> Result<(), String> {
        let sample = self
            .publisher
            .loan_slice_uninit(payload.len())
            .map_err(|e| err("loan")(&e))?
            .write_from_slice(payload);
        sample.send().map_err(|e| err("send")(&e))?;
        if let Some(n) = &self.notifier {
            n.notify().map_err(|e| err("notify")(&e))?;
        }
        Ok(())
    }

    /// Sleeps until notified (wait mode) or at most `timeout`; busy mode only spins once.
    fn sleep(&self, timeout: Duration) -> Result<(), String> {
        match &self.listener {
            Some(l) => {
                l.timed_wait_one(timeout).map_err(|e| err("wait")(&e))?;
            }
            // The same polite spin as every other busy loop of the benchmark.
            None => std::hint::spin_loop(),
        }
        Ok(())
    }
}

/// What iceoryx2 leaves behind on purpose: its node-id counter in `/dev/shm` (a 16-byte
/// `iox2_*.global_mgmt` file every iceoryx2 process of the machine shares) and its empty
/// `/tmp/iceoryx2` directories. A run removes those it made, never those that were there before
/// it (another iceoryx2 program may use them); `Drop` does it, so a failed run cleans up too.
pub struct Leftovers {
    shm_before: Vec<std::ffi::OsString>,
    /// `DIRS`, innermost first, that did not exist before the run.
    dirs_made: Vec<&'static str>,
}

const SHM_DIR: &str = "/dev/shm";
const DIRS: [&str; 3] = [
    "/tmp/iceoryx2/nodes",
    "/tmp/iceoryx2/services",
    "/tmp/iceoryx2",
];

fn iceoryx2_shm_files() -> Vec<std::ffi::OsString> {
    std::fs::read_dir(SHM_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("iox2_"))
        .collect()
}

impl Leftovers {
    pub fn note() -> Leftovers {
        Leftovers {
            shm_before: iceoryx2_shm_files(),
            dirs_made: DIRS
                .into_iter()
                .filter(|d| !std::path::Path::new(d).exists())
                .collect(),
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for name in iceoryx2_shm_files() {
            if !self.shm_before.contains(&name) {
                let _ = std::fs::remove_file(std::path::Path::new(SHM_DIR).join(name));
            }
        }
        // `remove_dir` removes only empty directories: whatever another program put there in
        // the meantime stays.
        for dir in &self.dirs_made {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn seq_of(payload: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    if let Some(head) = payload.get(..8) {
        b.copy_from_slice(head);
    }
    u64::from_le_bytes(b)
}

/// Leader side: as `pingpong::roundtrip`, for `bytes` of payload. During warm-up a ping that
/// got no echo within 100 ms is sent again (a sample sent before the peer's subscriber was
/// connected is not delivered: history 0).
pub fn roundtrip(
    h: &mut Harness,
    bytes: usize,
    mode: Mode,
    warmup: usize,
    iterations: usize,
    gap: Option<Duration>,
) -> Result<Vec<u64>, String> {
    let name = h.unique(&format!("iox2-{bytes}-{}", mode.as_str()));
    let ends = Ends::open(&name, "ping", "pong", bytes, mode)?;
    let mut peer = h.spawn_peer(&[
        "--role".into(),
        "ice-echo".into(),
        "--mode".into(),
        mode.as_str().into(),
        "--bytes".into(),
        bytes.to_string(),
        "--name".into(),
        name.clone(),
    ])?;
    let mut payload: Vec<u8> = (0..bytes.max(8)).map(|i| (i * 31 % 251) as u8).collect();
    let mut samples = Vec::with_capacity(iterations);
    for i in 1..=(warmup + iterations) as u64 {
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        payload[..8].copy_from_slice(&i.to_le_bytes());
        let warming = i as usize <= warmup;
        let start = Instant::now();
        ends.send(&payload)?;
        let deadline = Deadline::after(Duration::from_secs(10), "waiting for the iceoryx2 echo");
        let mut resend = Instant::now() + Duration::from_millis(100);
        let mut polls = 0u32;
        'echo: loop {
            while let Some(sample) = ends.subscriber.receive().map_err(|e| err("receive")(&e))? {
                if seq_of(&sample) == i {
                    // Take the echoed value into the leader's hands, as the bus subscription
                    // and the raw baseline do (and as the echo does with the ping): a round
                    // trip delivers the value to both ends, not just its sequence number.
                    payload.copy_from_slice(&sample);
                    break 'echo;
                }
            }
            ends.sleep(Duration::from_millis(100))?;
            polls = polls.wrapping_add(1);
            if mode == Mode::Wait || polls % 4096 == 0 {
                deadline.check()?;
                if warming && Instant::now() > resend {
                    ends.send(&payload)?;
                    resend = Instant::now() + Duration::from_millis(100);
                }
            }
        }
        let ns = start.elapsed().as_nanos() as u64;
        if !warming {
            samples.push(ns);
        }
    }
    payload[..8].copy_from_slice(&STOP.to_le_bytes());
    ends.send(&payload)?;
    peer.finish(Duration::from_secs(10))?;
    Ok(samples)
}

/// Peer side: echo every ping until the stop value.
pub fn echo(mode: Mode, bytes: usize, name: &str) -> Result<(), String> {
    let ends = Ends::open(name, "pong", "ping", bytes, mode)?;
    let watch = Watch::new();
    announce_ready()?;
    let mut polls = 0u32;
    loop {
        while let Some(sample) = ends.subscriber.receive().map_err(|e| err("receive")(&e))? {
            ends.send(&sample)?;
            if seq_of(&sample) == STOP {
                return Ok(());
            }
        }
        let slept = std::time::Instant::now();
        ends.sleep(Duration::from_millis(100))?;
        polls = polls.wrapping_add(1);
        // Whether the parent lives is looked at only when nothing came for 100 ms (wait mode),
        // as the bus's echo does: not a system call per round trip.
        let idle = mode == Mode::Wait && slept.elapsed() >= Duration::from_millis(100);
        if idle || polls % 65_536 == 0 {
            watch.check()?;
        }
    }
}
