//! Round trips through two bus slots between two processes: the leader writes `/ping`, the peer
//! (a re-executed bus-bench) waits for it and writes the same value back on `/pong`, and the
//! leader waits for that echo. Busy mode loops on `update()`; wait mode blocks in
//! `wait_update()`. Every case uses its own slot names, so no value of an earlier case is seen.

use std::time::{Duration, Instant};

use bus::{Bus, Codec, Publication, Subscription};

use super::harness::{announce_ready, Deadline, Harness, Watch, PEER_TIMEOUT};
use super::payload::{Blob, Kind, Msg64, Payload, Pod64, STOP};
use super::stats::Mode;

/// How long one echo may take before the run is declared stuck.
const ECHO_TIMEOUT: Duration = Duration::from_secs(10);

/// Leader side: `warmup` untimed round trips, then `iterations` timed ones, each optionally
/// after `gap` of idleness. Returns round-trip times in nanoseconds.
pub fn roundtrip(
    h: &mut Harness,
    kind: Kind,
    mode: Mode,
    warmup: usize,
    iterations: usize,
    gap: Option<Duration>,
) -> Result<Vec<u64>, String> {
    match kind {
        Kind::Pod64 => roundtrip_of::<Pod64>(h, kind, mode, warmup, iterations, gap),
        Kind::Bincode64 => roundtrip_of::<Msg64>(h, kind, mode, warmup, iterations, gap),
        Kind::Bytes4k | Kind::Bytes1m => {
            roundtrip_of::<Blob>(h, kind, mode, warmup, iterations, gap)
        }
    }
}

/// Creates a publication sized for `bytes` and waits until the registry has bound it.
pub(super) fn create_pub<T: Payload>(
    bus: &Bus,
    name: &str,
    bytes: usize,
) -> Result<Publication<T, T::Codec>, String> {
    let publication = bus
        .publication(name)
        .and_then(|b| b.capacity(T::capacity(bytes)).create::<T, T::Codec>())
        .map_err(|e| format!("publishing {name}: {e}"))?;
    publication
        .wait_bound(PEER_TIMEOUT)
        .map_err(|e| format!("binding {name}: {e}"))?;
    Ok(publication)
}

fn roundtrip_of<T: Payload>(
    h: &mut Harness,
    kind: Kind,
    mode: Mode,
    warmup: usize,
    iterations: usize,
    gap: Option<Duration>,
) -> Result<Vec<u64>, String> {
    let base = h.slot_name(&format!("{}-{}", kind.arg(), mode.as_str()));
    let (ping_name, pong_name) = (format!("{base}/ping"), format!("{base}/pong"));
    let bytes = kind.bytes();
    let mut ping = create_pub::<T>(&h.bus, &ping_name, bytes)?;
    let mut pong = T::subscribe(&h.bus, &pong_name).map_err(|e| e.to_string())?;
    let mut peer = h.spawn_peer(&[
        "--role".into(),
        "bus-echo".into(),
        "--mode".into(),
        mode.as_str().into(),
        "--kind".into(),
        kind.arg().into(),
        "--name".into(),
        base.clone(),
    ])?;
    pong.wait_bound(PEER_TIMEOUT)
        .map_err(|e| format!("binding {pong_name}: {e}"))?;
    let mut value = T::make(bytes);
    let mut samples = Vec::with_capacity(iterations);
    for i in 1..=(warmup + iterations) as u64 {
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        value.set_seq(i);
        let start = Instant::now();
        ping.write(&value).map_err(|e| e.to_string())?;
        await_seq(&mut pong, mode, i)?;
        let ns = start.elapsed().as_nanos() as u64;
        if i as usize > warmup {
            samples.push(ns);
        }
    }
    value.set_seq(STOP);
    ping.write(&value).map_err(|e| e.to_string())?;
    peer.finish(Duration::from_secs(10))?;
    Ok(samples)
}

/// Waits until the subscription holds the value with sequence `want`.
fn await_seq<T: Payload, C: Codec<T>>(
    sub: &mut Subscription<T, C>,
    mode: Mode,
    want: u64,
) -> Result<(), String> {
    let deadline = Deadline::after(ECHO_TIMEOUT, "waiting for the bus echo");
    let mut polls = 0u32;
    loop {
        let fresh = match mode {
            Mode::Busy => sub.update(),
            Mode::Wait => sub.wait_update(deadline.remaining()),
        }
        .map_err(|e| e.to_string())?;
        if fresh && sub.value().map(T::seq) == Some(want) {
            return Ok(());
        }
        if mode == Mode::Busy {
            // The same polite spin as every other busy loop of the benchmark.
            std::hint::spin_loop();
        }
        polls = polls.wrapping_add(1);
        if mode == Mode::Wait || polls % 65_536 == 0 {
            deadline.check()?;
        }
    }
}

/// Peer side: echo every value of `<name>/ping` on `<name>/pong` until the stop value.
pub fn echo(bus: &Bus, kind: Kind, mode: Mode, name: &str) -> Result<(), String> {
    match kind {
        Kind::Pod64 => echo_of::<Pod64>(bus, kind, mode, name),
        Kind::Bincode64 => echo_of::<Msg64>(bus, kind, mode, name),
        Kind::Bytes4k | Kind::Bytes1m => echo_of::<Blob>(bus, kind, mode, name),
    }
}

fn echo_of<T: Payload>(bus: &Bus, kind: Kind, mode: Mode, name: &str) -> Result<(), String> {
    let mut ping = T::subscribe(bus, &format!("{name}/ping")).map_err(|e| e.to_string())?;
    let mut pong = create_pub::<T>(bus, &format!("{name}/pong"), kind.bytes())?;
    ping.wait_bound(PEER_TIMEOUT).map_err(|e| e.to_string())?;
    let watch = Watch::new();
    announce_ready()?;
    let mut polls = 0u32;
    loop {
        let fresh = match mode {
            Mode::Busy => ping.update(),
            Mode::Wait => ping.wait_update(Duration::from_millis(100)),
        }
        .map_err(|e| e.to_string())?;
        if fresh {
            if let Some(value) = ping.value() {
                pong.write(value).map_err(|e| e.to_string())?;
                if value.seq() == STOP {
                    return Ok(());
                }
            }
            continue;
        }
        if mode == Mode::Busy {
            std::hint::spin_loop();
        }
        polls = polls.wrapping_add(1);
        if mode == Mode::Wait || polls % 65_536 == 0 {
            watch.check()?;
        }
    }
}
