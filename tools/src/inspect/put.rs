//! `put`: encode JSON through a slot's stored schema and write it as the slot's writer would.
//!
//! A slot has one writer: the seqlock lets readers detect a writer lapping them, not two writers
//! racing for the same buffer (both can store the same sequence, and a reader can then accept a
//! mix of their bytes). So `put` refuses a slot whose writer runs (a live publication, or the
//! registry writing its statistics) and any mirror (the registry's to write, whatever its
//! origin does) unless forced; when the writer is gone or never existed, `put` is the only
//! writer and the protocol holds. The value goes through
//! `Slot::write`, exactly what a publication does: next sequence, buffer, write time, and a
//! wake-up for sleeping subscribers.

use std::fmt;

use bus::{Domain, SlotName, WriterState};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
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

/// Writes `json` (text) into `name`. Refused, with nothing written: first when the slot's
/// writer is alive or it is a mirror and `force` is not given (no value could lift that); then
/// when the text is not JSON (or gives a key twice), does not match the slot's schema (the
/// error names the path in the value) or does not fit the slot.
pub fn put(domain: &Domain, name: &SlotName, json: &str, force: bool) -> Result<Written> {
    // Checks first, on a read-only mapping: a refused put never maps the slot writable.
    let opened = open(domain, name);
    if let Err(Error::NoSlot { .. }) = &opened {
        if let Some(origin) = published_elsewhere(domain, name)? {
            return Err(Error::Refused(format!(
                "put {name}: refused: host '{origin}' publishes it and this computer has no slot \
                 of it; put the value on '{origin}' instead"
            )));
        }
    }
    let slot = opened?;
    // Who writes the slot first: a refusal no value can lift comes before what is wrong with
    // the value (fixing a value only to be refused for another reason).
    writer_refusal(name, &slot, force)?;
    let value = parse_json(json).map_err(|e| {
        Error::Refused(match e.classify() {
            // Valid JSON that `parse_json` refuses: a key given twice.
            serde_json::error::Category::Data => format!("put {name}: {e}"),
            // serde_json's guard against a stack overflow, which no schema needs to reach.
            _ if e.to_string().starts_with("recursion limit exceeded") => format!(
                "put {name}: the value is nested more than 128 levels deep ({e}); no slot's \
                 type is"
            ),
            _ => format!("put {name}: the value is not JSON: {e}"),
        })
    })?;
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
    let hash = slot.schema().hash;
    drop(slot);
    let slot = open_mode(domain, name, true)?;
    // Looked at again: a writer may have started, or died, while the value was read and
    // encoded (a big one from stdin takes a while), and the name may be another slot now (made
    // anew for a publisher of another type), which the bytes were not encoded for.
    if slot.schema().hash != hash || bytes.len() > slot.capacity() {
        return Err(Error::Refused(format!(
            "put {name}: the slot was made anew (now {}) while the value was encoded; put it \
             again",
            slot.schema().type_name
        )));
    }
    let (writer, alive) = writer_refusal(name, &slot, force)?;
    // A writer that died while no registry ran is still marked alive: readers that trust the
    // mark (an arbiter obeys a controller block only while its writer lives) would take this
    // value for the dead writer's. Marked gone first, as the registry would have, the value
    // is what it is: one left by a writer that is gone.
    if writer.state == WriterState::Alive && !alive {
        slot.mark_writer_gone();
    }
    let sequence = slot.write(&bytes)?;
    Ok(Written {
        name: name.to_string(),
        sequence,
        size: bytes.len(),
    })
}

/// Refuses a put into a slot whose writer runs, or into a mirror, unless `force`; otherwise the
/// writer as read and whether it counts as alive.
fn writer_refusal(
    name: &SlotName,
    slot: &bus::slot::Slot,
    force: bool,
) -> Result<(bus::slot::WriterInfo, bool)> {
    let writer = slot.writer();
    // A writer marked alive whose process cannot be seen from here (another pid namespace:
    // the registry recorded pid 0) may well run: as good as alive.
    let unseen = writer.state == WriterState::Alive && writer.pid == 0;
    let alive = writer.is_running() || unseen;
    let origin = slot.origin();
    // A mirror is the registry's to write, whether its publisher on the origin runs or not:
    // a value put here is no other computer's, the next value or refresh from the origin
    // overwrites it, and the mirror goes once nothing here reads it.
    if (alive || !origin.is_empty()) && !force {
        let who = super::program_of(writer.pid).unwrap_or_else(|| "?".into());
        let what = if !origin.is_empty() {
            format!(
                "it mirrors host '{origin}' and this computer's registry writes it; put the \
                 value on '{origin}' instead"
            )
        } else if unseen {
            "its writer is marked alive, in a process this one cannot see (another pid \
             namespace)"
                .to_owned()
        } else {
            format!("its writer runs (pid {}, {who})", writer.pid)
        };
        return Err(Error::Refused(format!(
            "put {name}: refused: {what}; a second writer breaks the slot's single-writer \
             protocol (readers may see a torn value) and its next write overwrites yours. Stop \
             the writer, or use --force if you accept that"
        )));
    }
    Ok((writer, alive))
}

/// The host that publishes `name`, when another computer does and this one has no slot of it
/// (the registry's directory; `None` without one).
fn published_elsewhere(domain: &Domain, name: &SlotName) -> Result<Option<String>> {
    Ok(super::remote::remote_names(domain, Some(name.as_str()))?
        .into_iter()
        .find(|r| r.name == name.as_str())
        .map(|r| r.origin))
}

/// Parses `text` as JSON, refusing an object that names a key twice: `serde_json::Value` keeps
/// the last and drops the others without a word, and a value typed by hand with a key given
/// twice is a mistake whose other half would be written silently.
///
/// A UTF-8 byte-order mark before the value (a file saved by some Windows editors) is passed
/// over, as other JSON readers do; serde_json calls it "expected value at line 1 column 1".
fn parse_json(text: &str) -> serde_json::Result<serde_json::Value> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut reader = serde_json::Deserializer::from_str(text);
    let StrictJson(value) = StrictJson::deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// A JSON value whose objects name each key once.
struct StrictJson(serde_json::Value);

impl<'de> Deserialize<'de> for StrictJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer
            .deserialize_any(StrictJsonVisitor)
            .map(StrictJson)
    }
}

struct StrictJsonVisitor;

impl<'de> Visitor<'de> for StrictJsonVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> std::result::Result<Self::Value, E> {
        // JSON text has no NaN or infinity, so this is always a number.
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, Into::into))
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictJson(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key \"{key}\" is given twice"
                )));
            }
            let StrictJson(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_json;

    #[test]
    fn json_is_parsed_as_serde_json_parses_it() {
        let text =
            r#"{"a": [1, -2, 3.5, "x", null, true], "b": {"c": {}}, "d": 18446744073709551615}"#;
        assert_eq!(
            parse_json(text).unwrap(),
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
        assert!(parse_json("1 2").is_err(), "trailing text");
        assert_eq!(
            parse_json("\u{feff}{\"a\": 1}").unwrap()["a"],
            1,
            "a byte-order mark"
        );
        assert!(parse_json("1\u{feff}").is_err(), "a mark elsewhere");
        assert!(parse_json("{").is_err());
    }

    #[test]
    fn a_key_given_twice_is_refused_with_its_name_and_place() {
        let err = parse_json(r#"{"pose": {"x": 1, "y": 2, "x": 3}}"#).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"x\" is given twice"), "{text}");
        assert!(text.contains("column"), "{text}");
        // The same key in two different objects is fine.
        assert!(parse_json(r#"[{"x": 1}, {"x": 2}]"#).is_ok());
    }
}
