//! The raw baselines: the same ping-pong as the bus cases, but on one bare shared-memory segment.
//! Busy mode spins on two `AtomicU64` counters (one per direction, on separate cache lines);
//! wait mode stores a 32-bit word and always calls `FUTEX_WAKE`, then sleeps in `FUTEX_WAIT` on
//! the other direction's word, so it costs exactly the system calls and scheduler hops a
//! blocking handoff needs. A payload of `bytes` is copied into the segment and out again on each
//! hop with the copy the bus uses (`bus::shm`; 0 bytes: counters only). Also the
//! raw single-writer baseline: copy 64 bytes in and publish a counter.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bus::futex;
use bus::shm::Mapping;

use super::harness::{announce_ready, Deadline, Harness, Watch};
use super::stats::Mode;

// Each side's words in lines of their own, and the two sides' not in one 128-byte pair of
// lines (which a CPU's adjacent-line prefetcher may fetch together: traffic the bus's ping and
// pong, in segments of their own, never have).
const PING_SEQ: usize = 0;
const PONG_SEQ: usize = 2048;
const PING_WORD: usize = 256;
const PONG_WORD: usize = 2048 + 256;
const DATA: usize = 4096;
/// Counter value that tells the peer to stop.
const STOP64: u64 = u64::MAX;
const STOP32: u32 = u32::MAX;

fn pong_data(bytes: usize) -> usize {
    DATA + bytes.div_ceil(4096) * 4096
}

fn segment_len(bytes: usize) -> usize {
    pong_data(bytes) + bytes.div_ceil(4096).max(1) * 4096
}

/// Leader side of a raw ping-pong: `warmup` untimed round trips, then `iterations` timed ones
/// (optionally each after a `gap` of idleness). Returns the round-trip times in nanoseconds.
pub fn roundtrip(
    h: &mut Harness,
    mode: Mode,
    bytes: usize,
    warmup: usize,
    iterations: usize,
    gap: Option<Duration>,
) -> Result<Vec<u64>, String> {
    let segment = h.raw_segment(mode.as_str());
    let map = Mapping::create(&segment, segment_len(bytes), None).map_err(|e| e.to_string())?;
    let mut peer = h.spawn_peer(&[
        "--role".into(),
        "raw-echo".into(),
        "--mode".into(),
        mode.as_str().into(),
        "--bytes".into(),
        bytes.to_string(),
        "--name".into(),
        segment.clone(),
    ])?;
    let out = vec![0x5au8; bytes];
    let mut back = vec![0u8; bytes];
    let mut samples = Vec::with_capacity(iterations);
    let total = warmup + iterations;
    // The 32-bit futex words wrap; the counters in a run stay far below that.
    if total as u64 >= u64::from(STOP32) {
        return Err("too many iterations for the 32-bit futex baseline".into());
    }
    for i in 1..=total as u64 {
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        let start = Instant::now();
        if bytes > 0 {
            map.copy_in(DATA, &out);
        }
        match mode {
            Mode::Busy => {
                // Release: the payload copied above happens-before the peer's Acquire load.
                map.word64(PING_SEQ).store(i, Ordering::Release);
                spin_until(map.word64(PONG_SEQ), i)?;
            }
            Mode::Wait => {
                let (ping, pong) = (map.word32(PING_WORD), map.word32(PONG_WORD));
                ping.store(i as u32, Ordering::Release);
                futex::wake_all(ping, true);
                sleep_until(pong, i as u32)?;
            }
        }
        if bytes > 0 {
            map.copy_out(pong_data(bytes), &mut back);
        }
        let ns = start.elapsed().as_nanos() as u64;
        if i as usize > warmup {
            samples.push(ns);
        }
    }
    map.word64(PING_SEQ).store(STOP64, Ordering::Release);
    map.word32(PING_WORD).store(STOP32, Ordering::Release);
    futex::wake_all(map.word32(PING_WORD), true);
    peer.finish(Duration::from_secs(10))?;
    Ok(samples)
}

/// Spins until `word == want` (Acquire: the peer's payload copy happened before its store).
fn spin_until(word: &AtomicU64, want: u64) -> Result<(), String> {
    let deadline = Deadline::after(Duration::from_secs(10), "raw atomic echo");
    let mut spins = 0u32;
    while word.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins % 65_536 == 0 {
            deadline.check()?;
        }
    }
    Ok(())
}

/// Sleeps on `word` until it holds `want`.
fn sleep_until(word: &AtomicU32, want: u32) -> Result<(), String> {
    let deadline = Deadline::after(Duration::from_secs(10), "raw futex echo");
    loop {
        let seen = word.load(Ordering::Acquire);
        if seen == want {
            return Ok(());
        }
        deadline.check()?;
        futex::wait(
            word,
            seen,
            true,
            Some(Instant::now() + deadline.remaining()),
        );
    }
}

/// Peer side: echo every ping until told to stop.
pub fn echo(mode: Mode, bytes: usize, segment: &str) -> Result<(), String> {
    let map = Mapping::open(segment, true).map_err(|e| e.to_string())?;
    if map.len() < segment_len(bytes) {
        return Err(format!(
            "segment {segment} is smaller than a {bytes}-byte case needs"
        ));
    }
    let watch = Watch::new();
    let mut buf = vec![0u8; bytes];
    announce_ready()?;
    let mut hop = |map: &Mapping| {
        if bytes > 0 {
            map.copy_out(DATA, &mut buf);
            map.copy_in(pong_data(bytes), &buf);
        }
    };
    match mode {
        Mode::Busy => {
            let (ping, pong) = (map.word64(PING_SEQ), map.word64(PONG_SEQ));
            let mut last = 0u64;
            let mut spins = 0u32;
            loop {
                let seen = ping.load(Ordering::Acquire);
                if seen == last {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins % 65_536 == 0 {
                        watch.check()?;
                    }
                    continue;
                }
                if seen == STOP64 {
                    return Ok(());
                }
                hop(&map);
                pong.store(seen, Ordering::Release);
                last = seen;
            }
        }
        Mode::Wait => {
            let (ping, pong) = (map.word32(PING_WORD), map.word32(PONG_WORD));
            let mut last = 0u32;
            loop {
                let seen = ping.load(Ordering::Acquire);
                if seen == last {
                    let deadline = Some(Instant::now() + Duration::from_millis(100));
                    // Whether the parent lives is looked at only when nothing came for 100 ms,
                    // as the bus's echo does: not a system call per round trip.
                    if futex::wait(ping, seen, true, deadline) == futex::Wake::TimedOut {
                        watch.check()?;
                    }
                    continue;
                }
                if seen == STOP32 {
                    return Ok(());
                }
                hop(&map);
                pong.store(seen, Ordering::Release);
                futex::wake_all(pong, true);
                last = seen;
            }
        }
    }
}

/// The raw single-writer baseline: copy `bytes` into a private segment and publish a counter
/// (Release), `writes` times. Returns per-write times, one sample per `batch` writes (see
/// `time_writes`).
pub fn writes(
    h: &mut Harness,
    bytes: usize,
    warmup: usize,
    writes: usize,
    batch: usize,
) -> Result<(Vec<u64>, Duration), String> {
    let segment = h.raw_segment("write");
    let map = Mapping::create(&segment, segment_len(bytes), None).map_err(|e| e.to_string())?;
    let data = vec![0x5au8; bytes];
    let counter = map.word64(PING_SEQ);
    let mut n = 0u64;
    let mut write = || {
        n += 1;
        map.copy_in(DATA, &data);
        counter.store(n, Ordering::Release);
    };
    for _ in 0..warmup {
        write();
    }
    time_writes(writes, batch, || {
        write();
        Ok(())
    })
}

/// Writes timed together in one publish-cost sample. A write costs tens of nanoseconds, and on
/// some machines the clock moves in steps of about 10 ns (26 TSC cycles on the 2-vCPU AMD EPYC
/// guest): one write per sample would make a one-step difference look like a 17 % spread.
/// Sixteen writes per sample read to about a nanosecond, and pay a sixteenth of the clock pair.
pub const PUBLISH_BATCH: usize = 16;

/// Writes per sample of the throughput runs.
pub const THROUGHPUT_BATCH: usize = 1000;

/// Times `count` calls of `write` in batches of `batch` (the last may be shorter). Returns
/// one sample per batch, the batch's time divided by its writes, and the whole run's wall
/// time.
pub fn time_writes(
    count: usize,
    batch: usize,
    mut write: impl FnMut() -> Result<(), String>,
) -> Result<(Vec<u64>, Duration), String> {
    let batch = batch.max(1);
    let mut samples = Vec::with_capacity(count / batch + 1);
    let run = Instant::now();
    let mut left = count;
    while left > 0 {
        let this = left.min(batch);
        let start = Instant::now();
        for _ in 0..this {
            write()?;
        }
        samples.push(start.elapsed().as_nanos() as u64 / this as u64);
        left -= this;
    }
    Ok((samples, run.elapsed()))
}

/// What two back-to-back clock reads cost (the floor under every per-write sample).
pub fn clock_cost(samples: usize) -> Vec<u64> {
    (0..samples)
        .map(|_| {
            let start = Instant::now();
            start.elapsed().as_nanos() as u64
        })
        .collect()
}
