//! Read-only views of a domain's slots, straight from shared memory: opening a segment
//! read-only and reading its header and newest value never writes to the bus and works with or
//! without a registry.

use std::time::{Duration, SystemTime};

use bus::slot::{Slot, WriterState};
use bus::{BusError, Domain, SlotName};
use serde::Serialize;

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
    /// Seconds since the newest value was written; `None` when none.
    pub age_s: Option<f64>,
    pub writer: WriterState,
    pub writer_pid: u32,
    /// `true` when the writer's process runs (checked by pid and start time).
    pub writer_alive: bool,
    pub segment: String,
}

/// Opens a slot of `domain` read-only.
pub fn open(domain: &Domain, name: &SlotName) -> Result<Slot, BusError> {
    Ok(Slot::open(&domain.segment_name(name), false)?)
}

/// Summaries of every readable slot of `domain`, plus errors for unreadable segments.
pub fn list(domain: &Domain) -> Result<(Vec<SlotSummary>, Vec<BusError>), BusError> {
    let files = domain.segment_files().map_err(|e| BusError::Io {
        context: format!("listing {}", bus::names::SHM_DIR),
        message: e.to_string(),
    })?;
    let mut slots = Vec::new();
    let mut errors = Vec::new();
    for (name, _) in files {
        match open(domain, &name).and_then(|slot| summarize(&slot)) {
            Ok(s) => slots.push(s),
            Err(e) => errors.push(e),
        }
    }
    Ok((slots, errors))
}

pub fn summarize(slot: &Slot) -> Result<SlotSummary, BusError> {
    let mut value = Vec::new();
    let info = slot.read(0, &mut value)?;
    let writer = slot.writer();
    Ok(SlotSummary {
        name: slot.name().to_string(),
        type_name: slot.schema().type_name.clone(),
        capacity: slot.capacity(),
        size: if info.is_some() { value.len() } else { 0 },
        sequence: info.map_or(0, |i| i.sequence),
        age_s: info.map(|i| age(i.write_time()).as_secs_f64()),
        writer: writer.state,
        writer_pid: writer.pid,
        writer_alive: writer.state == WriterState::Alive
            && bus::process::is_alive(writer.pid, writer.start_time),
        segment: slot.segment().to_owned(),
    })
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
    /// Write time, nanoseconds since the Unix epoch.
    pub time_ns: u64,
    pub writer: WriterState,
    pub value: serde_json::Value,
}

/// Reads and decodes the newest value; `Ok(None)` when nothing was written yet.
pub fn get(domain: &Domain, name: &SlotName) -> Result<Option<Reading>, BusError> {
    let slot = open(domain, name)?;
    let mut bytes = Vec::new();
    let Some(info) = slot.read(0, &mut bytes)? else {
        return Ok(None);
    };
    let decode_err = |reason: String| BusError::Decode {
        name: name.to_string(),
        type_name: slot.schema().type_name.clone(),
        reason,
    };
    let schema = slot
        .schema()
        .parse()
        .map_err(|e| decode_err(e.to_string()))?;
    let value = schema
        .decode_json(&bytes)
        .map_err(|e| decode_err(e.to_string()))?;
    Ok(Some(Reading {
        name: name.to_string(),
        type_name: slot.schema().type_name.clone(),
        sequence: info.sequence,
        time_ns: info.write_time_ns,
        writer: slot.writer().state,
        value,
    }))
}
