//! The slots of a domain straight from shared memory: `list` and `get`. Opening a segment
//! read-only and reading its header, buffers and newest value never writes to the bus, and works
//! with or without a registry.

use std::time::{Duration, SystemTime};

use bus::slot::{Slot, WriterState};
use bus::{BusError, Domain};
use serde::Serialize;

use super::{open, Error, Result};

/// One line of `bus-inspect list`.
#[derive(Debug, Serialize)]
pub struct SlotSummary {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// Payload capacity in bytes.
    pub capacity: usize,
    /// Size of the newest value in bytes (0 when none).
    pub size: usize,
    pub sequence: u64,
    /// Writes per second over the last few writes the slot's buffers still hold; `None` with
    /// fewer than two writes, and once the newest is older than three periods of that rate
    /// (and a second): the writer stopped, and the rate of its last burst is not current.
    pub rate_hz: Option<f64>,
    /// Seconds since the newest value was written; `None` when none.
    pub age_s: Option<f64>,
    pub writer: WriterState,
    pub writer_pid: u32,
    /// `true` when the writer's process runs (checked by pid and start time).
    pub writer_alive: bool,
    /// The writer's program name when its process runs here.
    pub writer_program: Option<String>,
    /// `true` for a mirror of a publication on another host (its writer is the registry).
    pub mirrored: bool,
    /// Host the value comes from: the origin of a mirror, or this host.
    pub origin: String,
    pub segment: String,
}

/// Summaries of the slots of `domain` whose name matches `pattern` (all with `None`), plus
/// errors for unreadable segments.
pub fn list(domain: &Domain, pattern: Option<&str>) -> Result<(Vec<SlotSummary>, Vec<Error>)> {
    let files = domain.segment_files().map_err(|e| BusError::Io {
        context: format!("listing {}", bus::names::SHM_DIR),
        message: e.to_string(),
    })?;
    let here = super::local_host(domain);
    let mut slots = Vec::new();
    let mut errors = Vec::new();
    for (name, _) in files {
        if pattern.is_some_and(|p| !super::matches(p, name.as_str())) {
            continue;
        }
        match open(domain, &name).and_then(|slot| summarize(&slot, &here)) {
            Ok(s) => slots.push(s),
            Err(e) => errors.push(e),
        }
    }
    Ok((slots, errors))
}

/// The `list` line of one slot; `here` is this computer's host name.
pub fn summarize(slot: &Slot, here: &str) -> Result<SlotSummary> {
    let mut value = Vec::new();
    let info = slot.read(0, &mut value)?;
    // The writer of the value shown: one that registered after it was written (its writer
    // died) has not written yet, and the value is not its.
    let writer = slot.writer_of(info.map(|i| i.sequence));
    let alive = writer.is_running();
    let origin = slot.origin();
    let age_s = info.map(|i| age(i.write_time()).as_secs_f64());
    Ok(SlotSummary {
        name: slot.name().to_string(),
        type_name: slot.schema().type_name.clone(),
        capacity: slot.capacity(),
        size: if info.is_some() { value.len() } else { 0 },
        sequence: info.map_or(0, |i| i.sequence),
        rate_hz: current_rate(recent_rate(slot), age_s),
        age_s,
        writer: writer.state,
        writer_pid: writer.pid,
        writer_alive: alive,
        writer_program: if alive {
            super::program_of(writer.pid)
        } else {
            None
        },
        mirrored: !origin.is_empty(),
        origin: if origin.is_empty() {
            here.to_owned()
        } else {
            origin
        },
        segment: slot.segment().to_owned(),
    })
}

/// A slot counts as still writing at `rate` while its newest value is younger than this many
/// of its periods...
const QUIET_PERIODS: f64 = 3.0;
/// ...and than this many seconds, so that a slow writer's jitter does not blank its rate.
const QUIET_MIN_S: f64 = 1.0;

/// The rate of the last writes if they are the slot's current activity: `None` once the newest
/// value is older than `QUIET_PERIODS` periods of that rate (and `QUIET_MIN_S`), because
/// the rate of a burst long over says nothing about the slot now.
pub fn current_rate(rate: Option<f64>, age_s: Option<f64>) -> Option<f64> {
    let (rate, age_s) = (rate?, age_s?);
    (age_s <= (QUIET_PERIODS / rate).max(QUIET_MIN_S)).then_some(rate)
}

/// Writes per second over the values the buffers still hold (up to three): no sampling needed.
fn recent_rate(slot: &Slot) -> Option<f64> {
    let stamps = slot.buffer_stamps();
    let (first, last) = (stamps.first()?, stamps.last()?);
    let span_ns = last.write_time_ns.checked_sub(first.write_time_ns)?;
    if last.sequence <= first.sequence || span_ns == 0 {
        return None;
    }
    Some((last.sequence - first.sequence) as f64 * 1e9 / span_ns as f64)
}

fn age(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// The newest value of `name` decoded through the stored schema, with its metadata.
#[derive(Debug, Serialize)]
pub struct Reading {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub sequence: u64,
    /// Write time, nanoseconds since the Unix epoch (the origin host's clock for a mirror).
    pub time_ns: u64,
    pub writer: WriterState,
    /// `true` when the recorded writer's process runs (checked by pid and start time), as in
    /// `list`: for a mirror, this computer's registry, which feeds it (`writer` is then the
    /// state of its publisher on the origin host, as last reflected).
    pub writer_alive: bool,
    /// Origin host of a mirrored value; `None` for a value written on this computer.
    pub origin: Option<String>,
    pub value: serde_json::Value,
    /// The writer's pid and, while it runs here, its program: for the text form, which
    /// describes the writer as `list` does (the JSON keeps its documented fields).
    #[serde(skip)]
    pub writer_pid: u32,
    #[serde(skip)]
    pub writer_program: Option<String>,
}

/// Reads and decodes the newest value if its sequence is not `last_seen`.
pub fn read_newer(slot: &Slot, last_seen: u64) -> Result<Option<Reading>> {
    let mut bytes = Vec::new();
    let Some(info) = slot.read(last_seen, &mut bytes)? else {
        return Ok(None);
    };
    let value = decode(slot, &bytes).map_err(|e| match e {
        // The value that did not decode, by its sequence: a follower can pass it over.
        Error::Bus(BusError::Decode {
            name,
            type_name,
            reason,
            ..
        }) => Error::Bus(BusError::Decode {
            name,
            type_name,
            reason,
            sequence: info.sequence,
        }),
        e => e,
    })?;
    let origin = slot.origin();
    let recorded = slot.writer_of(Some(info.sequence));
    let writer_alive = recorded.is_running();
    // A mirror's recorded writer is this computer's registry: it not running says nothing of
    // the publisher on the origin host (the text form says the mirror is not fed, as `list`).
    let writer = if origin.is_empty() {
        writer_now(&recorded)
    } else {
        recorded.state
    };
    let writer_pid = recorded.pid;
    Ok(Some(Reading {
        name: slot.name().to_string(),
        type_name: slot.schema().type_name.clone(),
        sequence: info.sequence,
        time_ns: info.write_time_ns,
        writer,
        origin: (!origin.is_empty()).then_some(origin),
        value,
        writer_pid,
        writer_program: if writer == WriterState::Alive {
            super::program_of(writer_pid)
        } else {
            None
        },
        writer_alive,
    }))
}

/// The state of `writer` (a value's, `Slot::writer_of`), with a writer marked alive whose
/// process has died (while no registry ran to notice) reported as gone, as `list` does.
fn writer_now(writer: &bus::slot::WriterInfo) -> WriterState {
    if writer.state == WriterState::Alive && !writer.is_running() {
        WriterState::Gone
    } else {
        writer.state
    }
}

/// Decodes value bytes of `slot` with the schema stored in it.
pub fn decode(slot: &Slot, bytes: &[u8]) -> Result<serde_json::Value> {
    let decode_err = |reason: String| BusError::Decode {
        name: slot.name().to_string(),
        type_name: slot.schema().type_name.clone(),
        reason,
        sequence: 0,
    };
    let schema = slot
        .schema()
        .parse()
        .map_err(|e| decode_err(e.to_string()))?;
    Ok(schema
        .decode_json(bytes)
        .map_err(|e| decode_err(e.to_string()))?)
}

#[cfg(test)]
mod tests {
    use super::current_rate;

    #[test]
    fn a_rate_lasts_three_periods_and_at_least_a_second() {
        assert_eq!(current_rate(Some(44.7), Some(0.5)), Some(44.7));
        assert_eq!(current_rate(Some(44.7), Some(1.0)), Some(44.7));
        assert_eq!(current_rate(Some(44.7), Some(336.0)), None, "5m36s old");
        assert_eq!(current_rate(Some(44.7), Some(1.01)), None);
        assert_eq!(
            current_rate(Some(0.5), Some(5.9)),
            Some(0.5),
            "three 2 s periods"
        );
        assert_eq!(current_rate(Some(0.5), Some(6.1)), None);
        assert_eq!(current_rate(None, Some(0.1)), None);
        assert_eq!(current_rate(Some(10.0), None), None);
    }
}
