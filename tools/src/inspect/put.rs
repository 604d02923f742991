//! `put`: encode JSON through a slot's stored schema and write it as the slot's writer would.
//!
//! A slot has one writer: the seqlock lets readers detect a writer lapping them, not two writers
//! racing for the same buffer (both can store the same sequence, and a reader can then accept a
//! mix of their bytes). So `put` refuses a slot whose writer runs (a live publication, or the
//! registry writing a mirror or its statistics) unless forced; when the writer is gone or never
//! existed, `put` is the only writer and the protocol holds. The value goes through
//! `Slot::write`, exactly what a publication does: next sequence, buffer, write time, and a
//! wake-up for sleeping subscribers.

use bus::{Domain, SlotName};
use serde::Serialize;

use super::{open, open_mode, Error, Result};

/// What `put` wrote.
#[derive(Debug, Serialize)]
pub struct Written {
    pub name: String,
    pub sequence: u64,
    /// Encoded size in bytes.
    pub size: usize,
}

/// Writes `json` (text) into `name`. Refused, with nothing written, when the text is not JSON,
/// does not match the slot's schema (the error names the path in the value), does not fit the
/// slot, or the slot's writer is alive and `force` is not given.
pub fn put(domain: &Domain, name: &SlotName, json: &str, force: bool) -> Result<Written> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| Error::Refused(format!("put {name}: the value is not JSON: {e}")))?;
    // Checks first, on a read-only mapping: a refused put never maps the slot writable.
    let slot = open(domain, name)?;
    let schema = slot.schema().parse().map_err(|e| {
        Error::Refused(format!(
            "put {name}: the slot's stored schema is unreadable: {e}"
        ))
    })?;
    let bytes = schema.encode_json(&value).map_err(|e| {
        Error::Refused(format!(
            "put {name}: the value does not match the slot's schema: {e}; the schema is: {}",
            schema.describe().replace('\n', "; ")
        ))
    })?;
    if bytes.len() > slot.capacity() {
        return Err(Error::Refused(format!(
            "put {name}: the value is {} bytes encoded, the slot holds at most {}",
            bytes.len(),
            slot.capacity()
        )));
    }
    let writer = slot.writer();
    let alive = writer.is_running();
    if alive && !force {
        let who = super::program_of(writer.pid).unwrap_or_else(|| "?".into());
        let origin = slot.origin();
        let what = if origin.is_empty() {
            format!("its writer runs (pid {}, {who})", writer.pid)
        } else {
            format!(
                "it mirrors host '{origin}' and the registry (pid {}) writes it; put the value \
                 on '{origin}' instead",
                writer.pid
            )
        };
        return Err(Error::Refused(format!(
            "put {name}: refused: {what}; a second writer breaks the slot's single-writer \
             protocol (readers may see a torn value) and its next write overwrites yours. Stop \
             the writer, or use --force if you accept that"
        )));
    }
    drop(slot);
    let slot = open_mode(domain, name, true)?;
    let sequence = slot.write(&bytes)?;
    Ok(Written {
        name: name.to_string(),
        sequence,
        size: bytes.len(),
    })
}
