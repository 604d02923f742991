//! `hz` and `bw`: write rate and bandwidth of slots over a window, measured without
//! subscribing.
//!
//! A slot keeps the sequence number, length and write time of its last three values that are
//! sure to be whole (`Slot::buffer_stamps`). Sampling them often (every `sample_every`, 1 ms by
//! default) therefore sees every write as long as the writer makes fewer than about three
//! writes per sample, and the write times are the writer's own, so intervals are exact and
//! independent of when we sampled. Faster writers outrun the sampling: then some values are
//! never seen, the rate comes from sequence numbers (writes = difference of sequences, time =
//! difference of the known write times) and the report says so. Nothing is written: the
//! segments are mapped read-only and no waiter count is touched. (A name only another computer
//! publishes is mirrored here for the window: `remote`; the mirror's write times are its
//! origin's.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bus::slot::Slot;
use bus::{Domain, SlotName};
use serde::Serialize;

use super::followed::Followed;
use super::remote::MirrorHold;
use super::Result;

/// How to measure.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub window: Duration,
    pub sample_every: Duration,
}

/// Smallest, median, 99th percentile and largest of a set of measurements.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Spread {
    /// Nearest-rank percentiles; `None` for an empty set.
    pub fn of(mut values: Vec<f64>) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let rank =
            |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Some(Spread {
            min: values[0],
            p50: rank(0.50),
            p99: rank(0.99),
            max: values[values.len() - 1],
        })
    }
}

/// What `hz` and `bw` print for one slot.
#[derive(Debug, Serialize)]
pub struct Report {
    pub name: String,
    /// Whether the slot existed at the end of the window (else there are no numbers and
    /// `note` says so).
    pub exists: bool,
    /// Seconds sampled.
    pub window_s: f64,
    /// Writes during the window (from sequence numbers, so also the ones not seen).
    pub writes: u64,
    /// Of those, how many were seen in the buffers.
    pub seen: u64,
    /// `true` when every write was seen: the periods are all the real intervals.
    pub complete: bool,
    /// Writes per second; `None` without two known write times.
    pub rate_hz: Option<f64>,
    /// Time between consecutive writes, milliseconds (pairs of consecutive writes seen).
    pub period_ms: Option<Spread>,
    /// Size of the values seen, bytes.
    pub size_bytes: Option<Spread>,
    /// Bytes written per second (mean size seen × rate).
    pub bandwidth_bps: Option<f64>,
    /// How the numbers were obtained when not every write was seen, or why there are none.
    pub note: Option<String>,
}

struct Tracked {
    slot: Followed,
    /// Sequence of the newest value when sampling began (0 when the slot appeared or was
    /// re-created during the window).
    start: u64,
    /// The slot was re-created during the window: measured from then on.
    recreated: bool,
    /// Writes of the window to the slots it replaced (re-created), said in the note.
    writes_before: u64,
    /// Every value seen: sequence → (write time, length).
    seen: BTreeMap<u64, (u64, u64)>,
}

impl Tracked {
    fn sample(&mut self, domain: &Domain) -> Result<()> {
        let had_slot = self.slot.slot().is_some();
        if self.slot.refresh(domain)? {
            // Appeared or re-created during the window: all its values are new, and a
            // re-created slot's sequence numbers start again.
            self.recreated |= had_slot;
            if let Some(&newest) = self.seen.keys().next_back() {
                self.writes_before += newest.saturating_sub(self.start);
            }
            self.start = 0;
            self.seen.clear();
        }
        let Some(slot) = self.slot.slot() else {
            return Ok(());
        };
        for stamp in slot.buffer_stamps() {
            if stamp.sequence >= self.start {
                self.seen
                    .insert(stamp.sequence, (stamp.write_time_ns, stamp.len));
            }
        }
        Ok(())
    }

    /// `began_ns`: the wall-clock time sampling began.
    fn report(&self, window: Duration, began_ns: u64, sample_every: Duration) -> Report {
        let mut report = Report {
            name: self.slot.name().to_string(),
            exists: self.slot.slot().is_some(),
            window_s: window.as_secs_f64(),
            writes: 0,
            seen: 0,
            complete: true,
            rate_hz: None,
            period_ms: None,
            size_bytes: None,
            bandwidth_bps: None,
            note: None,
        };
        if self.slot.slot().is_none() {
            report.note = Some("the slot does not exist".into());
            return report;
        }
        // The value current at the start is not a write of the window; it anchors the first
        // interval only if it was itself written during the window (else the interval would
        // span the writer's idle time before the window).
        let new: Vec<(u64, u64, u64)> = self
            .seen
            .iter()
            .filter(|(seq, _)| **seq > self.start)
            .map(|(seq, (t, len))| (*seq, *t, *len))
            .collect();
        let timed: Vec<(u64, u64)> = self
            .seen
            .iter()
            .filter(|(seq, (t, _))| **seq > self.start || *t >= began_ns)
            .map(|(seq, (t, _))| (*seq, *t))
            .collect();
        let Some(&(last_new, _, _)) = new.last() else {
            report.note = Some(if self.recreated {
                format!(
                    "the slot was re-created during the window, after {} write(s); none since",
                    self.writes_before
                )
            } else {
                "no value was written during the window".into()
            });
            return report;
        };
        report.writes = last_new - self.start.min(last_new);
        report.seen = new.len() as u64;
        report.complete = report.seen == report.writes;
        if let (Some(&(seq0, t0)), Some(&(seq1, t1))) = (timed.first(), timed.last()) {
            if seq1 > seq0 && t1 > t0 {
                report.rate_hz = Some((seq1 - seq0) as f64 * 1e9 / (t1 - t0) as f64);
            }
        }
        let periods: Vec<f64> = timed
            .iter()
            .zip(timed.iter().skip(1))
            .filter(|((a, _), (b, _))| *b == *a + 1)
            .map(|((_, ta), (_, tb))| tb.saturating_sub(*ta) as f64 / 1e6)
            .collect();
        report.period_ms = Spread::of(periods);
        let sizes: Vec<f64> = new.iter().map(|(_, _, len)| *len as f64).collect();
        let mean = sizes.iter().sum::<f64>() / sizes.len() as f64;
        report.size_bytes = Spread::of(sizes);
        report.bandwidth_bps = report.rate_hz.map(|r| r * mean);
        if self.recreated {
            report.note = Some(format!(
                "the slot was re-created during the window: measured from then on ({} write(s) \
                 before)",
                self.writes_before
            ));
        }
        if !report.complete {
            report.note = Some(format!(
                "saw {} of {} writes (sampling every {:?} is slower than the writer): the rate \
                 comes from sequence numbers and write times, periods and sizes from the writes \
                 seen",
                report.seen, report.writes, sample_every
            ));
        }
        report
    }
}

/// Samples `names` for `options.window` and reports each. A name without a slot yet is
/// watched for its appearance.
pub fn measure(domain: &Domain, names: &[SlotName], options: Options) -> Result<Vec<Report>> {
    let mut tracked = Vec::new();
    // Names only another computer publishes are mirrored here for the window (before it
    // starts: following one may take a moment).
    let mut holds = Vec::new();
    for name in names {
        let mut slot = Followed::new(domain, name)?;
        let mut hold = MirrorHold::new(name);
        let mirrored_now = hold.keep(domain, slot.slot(), None);
        slot.refresh(domain)?;
        if let Some(s) = slot.slot().filter(|_| mirrored_now) {
            // Its first value (the publisher's current one, written before the window) is
            // waited for, so that the window counts only what comes after it.
            super::remote::wait_for_first_value(s);
        }
        holds.push(hold);
        let start = slot.slot().map_or(0, Slot::latest_sequence);
        tracked.push(Tracked {
            slot,
            start,
            recreated: false,
            writes_before: 0,
            seen: BTreeMap::new(),
        });
    }
    let began = Instant::now();
    let began_ns = bus::slot::now_ns();
    let end = began
        .checked_add(options.window)
        .ok_or_else(|| super::Error::Refused("the window is too long".into()))?;
    loop {
        for t in &mut tracked {
            t.sample(domain)?;
        }
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(options.sample_every.min(end - now));
    }
    let window = began.elapsed();
    Ok(tracked
        .iter()
        .map(|t| t.report(window, began_ns, options.sample_every))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn spread_uses_nearest_rank() {
        let s = Spread::of((1..=100).map(f64::from).collect()).unwrap();
        assert_eq!((s.min, s.p50, s.p99, s.max), (1.0, 50.0, 99.0, 100.0));
        assert!(Spread::of(Vec::new()).is_none());
        let one = Spread::of(vec![7.0]).unwrap();
        assert_eq!((one.p50, one.p99), (7.0, 7.0));
    }
}
