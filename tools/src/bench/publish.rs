//! The writer's side alone: single-writer throughput with nobody reading, and the cost of one
//! `write()` while 1, 10 or 100 subscriptions in another process poll the slot, while 1, 10 or
//! 100 subscriptions sleep in `wait_update()` on it (the writer then pays `FUTEX_WAKE`), and
//! while 10, 1,000 or 10,000 slots exist on its bus. Also the peer roles that hold those
//! subscriptions.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bus::names::SlotName;
use bus::slot::Slot;
use bus::{Bus, Publication};

use super::harness::{announce_ready, Deadline, Harness, Watch, PEER_TIMEOUT};
use super::payload::{Blob, Payload, Pod64, STOP};
use super::pingpong::create_pub;
use super::raw;
use super::stats::{Row, Stats, System};

/// Iteration counts of the writer-side cases.
pub struct Counts {
    /// Rounds the compared publish-cost cases are split into (see `rounds_of`).
    pub rounds: usize,
    /// Rounds of the cases with polling subscribers (each with a fresh peer) and of the slot
    /// series: more than the others, because one round times its writes within a millisecond
    /// or so, a snapshot of where the host has put the two vCPUs then, and the cost of a line
    /// taken back from the polling core differs between placements by a factor of two or more
    /// (about 90 against 230 ns on the AMD EPYC guest). With five snapshots per row, one row in
    /// two or three runs drew a majority of slow ones and its p50 said so, whatever the count
    /// of subscribers. The rounds' own p50s spread from about 36 to 100 ns there (2026-11-24,
    /// 20:30), so with 25 rounds the pooled p50s of three rows still differed by 3 to 22 % from
    /// one run to the next; 100 rounds halve that sampling error.
    pub placement_rounds: usize,
    /// Writes per publish-cost row, timed `raw::PUBLISH_BATCH` at a time.
    pub each: usize,
    /// Writes per publish-cost row with sleeping subscribers (each waits for them to re-sleep).
    pub blocked: usize,
    /// Writes of the 64-byte throughput run (the 4 KiB run does a tenth).
    pub throughput: usize,
    /// Slot counts of the "slots on the bus" series.
    pub slots: Vec<usize>,
}

fn stats(mut samples: Vec<u64>, what: &str) -> Result<Stats, String> {
    Stats::of(&mut samples).ok_or_else(|| format!("{what}: no sample"))
}

/// Writes of 64 B POD and of 4 KiB bytes, nobody reading, against the raw write baseline.
pub fn throughput(h: &mut Harness, c: &Counts) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for (bytes, count) in [(64usize, c.throughput), (4096, c.throughput / 10)] {
        let warmup = (count / 10).max(1000);
        let size = super::stats::fmt_bytes(bytes);
        let raw_case = format!("raw shm write {size}");
        eprintln!("bus-bench: throughput, {size}");
        let (samples, took) = raw::writes(h, bytes, warmup, count, raw::THROUGHPUT_BATCH)?;
        let mut row = Row::new(
            "throughput",
            System::Raw,
            &raw_case,
            stats(samples, &raw_case)?,
        )
        .bytes(bytes)
        .note("copy in + Release counter store");
        row.per_second = Some(count as f64 / took.as_secs_f64());
        rows.push(row);

        let name = h.slot_name(&format!("throughput-{bytes}"));
        let (samples, took) = if bytes == 64 {
            let mut p = create_pub::<Pod64>(&h.bus, &name, bytes)?;
            write_run(
                &mut p,
                Pod64::make(bytes),
                warmup,
                count,
                raw::THROUGHPUT_BATCH,
            )?
        } else {
            let mut p = create_pub::<Blob>(&h.bus, &name, bytes)?;
            write_run(
                &mut p,
                Blob::make(bytes),
                warmup,
                count,
                raw::THROUGHPUT_BATCH,
            )?
        };
        let case = if bytes == 64 {
            "bus write 64 B POD".to_string()
        } else {
            format!("bus write {size} bytes")
        };
        let mut row = Row::new("throughput", System::Bus, &case, stats(samples, &case)?)
            .bytes(bytes)
            .baseline(raw_case);
        row.per_second = Some(count as f64 / took.as_secs_f64());
        rows.push(row);
    }
    Ok(rows)
}

/// `warmup` untimed writes, then `count` timed ones (see `raw::time_writes`).
fn write_run<T: Payload>(
    p: &mut Publication<T, T::Codec>,
    mut value: T,
    warmup: usize,
    count: usize,
    batch: usize,
) -> Result<(Vec<u64>, Duration), String> {
    let mut seq = 0u64;
    for _ in 0..warmup {
        seq += 1;
        value.set_seq(seq);
        p.write(&value).map_err(|e| e.to_string())?;
    }
    raw::time_writes(count, batch, || {
        seq += 1;
        value.set_seq(seq);
        p.write(&value).map_err(|e| e.to_string())
    })
}

/// The load on the slot while one case's writes are timed.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// The raw baseline: no bus at all.
    Raw,
    /// A bus slot nobody reads.
    Alone,
    /// A peer process polls this many subscriptions of the slot.
    Polling(usize),
    /// A peer process has this many threads sleeping in `wait_update` on the slot.
    Sleeping(usize),
}

const RAW_CASE: &str = "raw shm write 64 B";

impl Load {
    fn case(self) -> String {
        match self {
            Load::Raw => RAW_CASE.into(),
            Load::Alone => "no reader".into(),
            Load::Polling(n) => format!("{n} polling subscriber(s)"),
            Load::Sleeping(n) => format!("{n} sleeping subscriber(s)"),
        }
    }

    /// `count` timed writes (after `warmup` untimed ones) under this load.
    fn measure(self, h: &mut Harness, warmup: usize, count: usize) -> Result<Vec<u64>, String> {
        let timed = |p: &mut Publication<Pod64, bus::Pod>, _: &Slot| {
            write_run(p, Pod64::make(64), warmup, count, raw::PUBLISH_BATCH).map(|(s, _)| s)
        };
        match self {
            Load::Raw => raw::writes(h, 64, warmup, count, raw::PUBLISH_BATCH).map(|(s, _)| s),
            Load::Alone => with_readers(h, "none", 0, timed),
            Load::Polling(n) => with_readers(h, "busy-readers", n, timed),
            Load::Sleeping(n) => {
                with_readers(h, "waiters", n, |p, slot| blocked_writes(p, slot, n, count))
            }
        }
    }
}

/// Runs each load in `rounds` rounds (rotating which goes first), `count` timed writes in all.
fn rounds_of(
    h: &mut Harness,
    loads: &[Load],
    rounds: usize,
    count: usize,
) -> Result<Vec<Vec<u64>>, String> {
    rotating_rounds(
        loads.len(),
        rounds,
        count,
        |i| loads[i].case(),
        |i, warmup, per_round| loads[i].measure(h, warmup, per_round),
    )
}

/// Times `cases` cases in `rounds` rounds, rotating which goes first, `count` timed writes per
/// case in all: `measure(case, warmup, writes)` times one round of one case. The samples of
/// each case, pooled.
fn rotating_rounds(
    cases: usize,
    rounds: usize,
    count: usize,
    name: impl Fn(usize) -> String,
    mut measure: impl FnMut(usize, usize, usize) -> Result<Vec<u64>, String>,
) -> Result<Vec<Vec<u64>>, String> {
    let per_round = count.div_ceil(rounds);
    let warmup = (per_round / 10).clamp(20, 10_000);
    let mut samples: Vec<Vec<u64>> = vec![Vec::new(); cases];
    for round in 0..rounds {
        for k in 0..cases {
            let i = (k + round) % cases;
            eprintln!(
                "bus-bench: round {}/{rounds}: publish cost, {}",
                round + 1,
                name(i)
            );
            samples[i].extend(measure(i, warmup, per_round)?);
        }
    }
    Ok(samples)
}

/// Publish cost of a 64 B POD slot under the different loads.
pub fn publish_cost(h: &mut Harness, c: &Counts) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let clock = "clock read pair";
    rows.push(
        Row::new(
            "publish",
            System::Raw,
            clock,
            stats(raw::clock_cost(c.each), clock)?,
        )
        .note("two Instant::now() calls: per write, a 16th of it in the rows timed 16 together, all of it in the sleeping rows"),
    );
    let row = |load: Load, samples: Vec<u64>| -> Result<Row, String> {
        let case = load.case();
        let stats = stats(samples, &case)?;
        Ok(match load {
            Load::Raw => Row::new("publish", System::Raw, &case, stats).bytes(64),
            _ => Row::new("publish", System::Bus, &case, stats)
                .bytes(64)
                .baseline(RAW_CASE),
        })
    };
    let polling = [
        Load::Raw,
        Load::Alone,
        Load::Polling(1),
        Load::Polling(10),
        Load::Polling(100),
    ];
    for (load, samples) in
        polling
            .into_iter()
            .zip(rounds_of(h, &polling, c.placement_rounds, c.each)?)
    {
        let r = row(load, samples)?;
        rows.push(match load {
            Load::Raw => r,
            // Shown next to the series, not in it: the target is flatness across 1, 10 and 100
            // subscribers, and the distance to no reader at all is read off the table.
            Load::Alone => r.note("the same slot setup with nobody reading"),
            _ => r
                .series(&["subscribers"])
                .note("one peer process loops update() over all of them"),
        });
    }
    let sleeping = [Load::Sleeping(1), Load::Sleeping(10), Load::Sleeping(100)];
    for (load, samples) in sleeping
        .into_iter()
        .zip(rounds_of(h, &sleeping, c.rounds, c.blocked)?)
    {
        rows.push(row(load, samples)?.note(
            "each write finds them all asleep in wait_update, so it calls FUTEX_WAKE (no target)",
        ));
    }
    rows.extend(slot_series(h, c)?);
    Ok(rows)
}

/// How long the slot series waits after making its slots before it times writes: the setup's
/// aftermath (in the registries, and in this process's bus thread) is not the number of slots.
/// On the 2-vCPU AMD EPYC guest (2026-11-24) writes timed at once read 51 to 58 ns (four
/// runs), where the same slot read 36 to 37 ns when timed again later.
const SETTLE_AFTER_SETUP: Duration = Duration::from_secs(1);

/// The domain of the slot series' case with `slots` slots: `<domain>-slots<slots>`, so that
/// the slots of one case (and of the other cases of the run) do not count in another.
pub fn slot_series_domain(domain: &str, slots: usize) -> String {
    format!("{domain}-slots{slots}")
}

/// One case of the slot series: a domain with its own registry holding `slots` slots, one of
/// which is the slot whose writes are timed.
struct SlotSet {
    slots: usize,
    /// Slot segments in the domain once set up (the registry adds its own directory slot).
    in_domain: usize,
    measured: Publication<Pod64, bus::Pod>,
    _others: Vec<Publication<Pod64, bus::Pod>>,
    // Dropped last: it stops the registry and removes the domain's segments.
    _harness: Harness,
}

impl SlotSet {
    fn make(domain: &str, slots: usize) -> Result<SlotSet, String> {
        let started = Instant::now();
        let mut hs = Harness::start(Some(&slot_series_domain(domain, slots)))?;
        let value = Pod64::make(64);
        let prefix = hs.slot_name("others");
        let others = (0..slots.saturating_sub(1))
            .map(|i| {
                let name = format!("{prefix}/{i}");
                let mut p = hs
                    .bus
                    .publication(&name)
                    .and_then(|b| b.create::<Pod64, bus::Pod>())
                    .map_err(|e| format!("publishing {name}: {e}"))?;
                p.write(&value).map_err(|e| e.to_string())?;
                Ok(p)
            })
            .collect::<Result<Vec<_>, String>>()?;
        if let Some(last) = others.last() {
            last.wait_bound(PEER_TIMEOUT).map_err(|e| e.to_string())?;
        }
        let name = hs.slot_name("cost-slots");
        let measured = create_pub::<Pod64>(&hs.bus, &name, 64)?;
        let in_domain = hs.domain.segment_files().map_or(0, |f| f.len());
        eprintln!(
            "bus-bench: publish cost, {in_domain} slots in domain {} (set up in {:.1} s)",
            hs.domain,
            started.elapsed().as_secs_f64()
        );
        Ok(SlotSet {
            slots,
            in_domain,
            measured,
            _others: others,
            _harness: hs,
        })
    }
}

/// Writes to one slot while 10, 1,000, 10,000 slots exist on its bus: each count in a domain of
/// its own, all set up first, then timed in rotating rounds like the polling subscribers (see
/// `Counts::placement_rounds`). Timed one count after the other, as before 2026-11-24 20:00, the
/// rows compared snapshots taken minutes apart: a write here costs about 37 or about 57 ns and
/// switches between the two on its own, so one run in two read one count at the other level.
fn slot_series(h: &Harness, c: &Counts) -> Result<Vec<Row>, String> {
    let mut sets = c
        .slots
        .iter()
        .map(|&slots| SlotSet::make(h.domain.as_str(), slots))
        .collect::<Result<Vec<_>, String>>()?;
    std::thread::sleep(SETTLE_AFTER_SETUP);
    let slot_counts: Vec<usize> = sets.iter().map(|s| s.slots).collect();
    let value = Pod64::make(64);
    let samples = rotating_rounds(
        sets.len(),
        c.placement_rounds,
        c.each,
        |i| format!("no reader, {} slots", slot_counts[i]),
        |i, warmup, per_round| {
            write_run(
                &mut sets[i].measured,
                value,
                warmup,
                per_round,
                raw::PUBLISH_BATCH,
            )
            .map(|(s, _)| s)
        },
    )?;
    sets.iter()
        .zip(samples)
        .map(|(set, samples)| {
            let case = format!("no reader, {} slots", set.slots);
            Ok(
                Row::new("publish", System::Bus, &case, stats(samples, &case)?)
                    .bytes(64)
                    .baseline(RAW_CASE)
                    .series(&["slots"])
                    .note(format!(
                        "{} slot segments in its domain, one domain per count",
                        set.in_domain
                    )),
            )
        })
        .collect()
}

/// Creates a 64 B POD publication, starts a peer holding `count` subscriptions of it in
/// `role` (none for 0), runs `measure`, then tells the peer to stop.
fn with_readers(
    h: &mut Harness,
    role: &str,
    count: usize,
    measure: impl FnOnce(&mut Publication<Pod64, bus::Pod>, &Slot) -> Result<Vec<u64>, String>,
) -> Result<Vec<u64>, String> {
    let name = h.slot_name(&format!("cost-{role}-{count}"));
    let mut p = create_pub::<Pod64>(&h.bus, &name, 64)?;
    let segment = h
        .domain
        .segment_name(&SlotName::parse(&name).map_err(|e| e.to_string())?);
    let slot = Slot::open(&segment, false).map_err(|e| e.to_string())?;
    let mut value = Pod64::make(64);
    p.write(&value).map_err(|e| e.to_string())?;
    if count == 0 {
        return measure(&mut p, &slot);
    }
    let mut peer = h.spawn_peer(&[
        "--role".into(),
        role.into(),
        "--count".into(),
        count.to_string(),
        "--name".into(),
        name.clone(),
    ])?;
    let samples = measure(&mut p, &slot)?;
    value.set_seq(STOP);
    p.write(&value).map_err(|e| e.to_string())?;
    peer.finish(Duration::from_secs(10))?;
    Ok(samples)
}

/// Times `count` writes, each made only once all `waiters` subscriptions sleep on the slot.
fn blocked_writes(
    p: &mut Publication<Pod64, bus::Pod>,
    slot: &Slot,
    waiters: usize,
    count: usize,
) -> Result<Vec<u64>, String> {
    let mut value = Pod64::make(64);
    let mut samples = Vec::with_capacity(count);
    let warmup = 20;
    for i in 1..=(warmup + count) as u64 {
        let deadline = Deadline::after(Duration::from_secs(10), "waiting for subscribers to sleep");
        // SeqCst, as the waiters' increments: the count read here is at least as new as theirs.
        while slot.waiter_count() < waiters as u32 {
            deadline.check()?;
            std::thread::sleep(Duration::from_micros(20));
        }
        // A counted waiter is between its increment and FUTEX_WAIT for a moment; let it get
        // into the kernel so that the write really has sleepers to wake.
        std::thread::sleep(Duration::from_micros(50));
        value.set_seq(i);
        let start = Instant::now();
        p.write(&value).map_err(|e| e.to_string())?;
        let ns = start.elapsed().as_nanos() as u64;
        if i as usize > warmup {
            samples.push(ns);
        }
    }
    Ok(samples)
}

/// Peer role `busy-readers`: `count` subscriptions of `name`, polled round-robin until one
/// reads the stop value.
pub fn busy_readers(bus: &Bus, name: &str, count: usize) -> Result<(), String> {
    let mut subs = (0..count)
        .map(|_| Pod64::subscribe(bus, name).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    for s in &subs {
        s.wait_bound(PEER_TIMEOUT).map_err(|e| e.to_string())?;
    }
    let watch = Watch::new();
    announce_ready()?;
    let mut rounds = 0u32;
    loop {
        for s in subs.iter_mut() {
            if s.update().map_err(|e| e.to_string())? && s.value().map(Pod64::seq) == Some(STOP) {
                return Ok(());
            }
        }
        rounds = rounds.wrapping_add(1);
        if rounds % 4096 == 0 {
            watch.check()?;
        }
    }
}

/// Peer role `waiters`: `count` threads, each with its own subscription of `name`, looping on
/// `wait_update` until the stop value.
pub fn waiters(bus: &Bus, name: &str, count: usize) -> Result<(), String> {
    let bound = Arc::new(Barrier::new(count + 1));
    let threads = (0..count)
        .map(|_| {
            let (bus, name, bound) = (bus.clone(), name.to_owned(), Arc::clone(&bound));
            std::thread::spawn(move || -> Result<(), String> {
                let sub = Pod64::subscribe(&bus, &name).map_err(|e| e.to_string());
                let bind = sub
                    .as_ref()
                    .map_err(Clone::clone)
                    .and_then(|s| s.wait_bound(PEER_TIMEOUT).map_err(|e| e.to_string()));
                bound.wait();
                let mut sub = sub?;
                bind?;
                let watch = Watch::new();
                loop {
                    if sub
                        .wait_update(Duration::from_millis(100))
                        .map_err(|e| e.to_string())?
                        && sub.value().map(Pod64::seq) == Some(STOP)
                    {
                        return Ok(());
                    }
                    watch.check()?;
                }
            })
        })
        .collect::<Vec<_>>();
    bound.wait();
    announce_ready()?;
    let mut result = Ok(());
    for t in threads {
        let outcome = t
            .join()
            .unwrap_or_else(|_| Err("a waiter thread panicked".into()));
        if result.is_ok() {
            result = outcome;
        }
    }
    result
}
