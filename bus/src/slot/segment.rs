//! Creating a slot's segment (the registry) and opening one (everyone), with every static header
//! field validated against the segment's real size before a `Slot` exists.

use super::*;

impl Slot {
    /// Creates and initialises a new slot segment (the registry's job). `capacity` is rounded
    /// up to a multiple of 64 bytes.
    pub fn create(
        segment: &str,
        name: &SlotName,
        schema: &Schema,
        capacity: usize,
        group: Option<Gid>,
    ) -> Result<Slot, SegmentError> {
        let schema_bytes = schema.to_bytes();
        let too_big = |what, found: u64, max| SegmentError::TooLarge {
            segment: segment.to_owned(),
            what,
            found,
            max,
        };
        // Before rounding up: a capacity within 63 of the largest number would wrap to 0.
        // (`MAX_CAPACITY` is a multiple of 64: what passes stays within it.)
        if capacity as u64 > MAX_CAPACITY {
            return Err(too_big("capacity", capacity as u64, MAX_CAPACITY));
        }
        let capacity = round_up(capacity.max(8), 64);
        if schema_bytes.len() as u64 > MAX_SCHEMA_LEN {
            return Err(too_big("schema", schema_bytes.len() as u64, MAX_SCHEMA_LEN));
        }
        let buffers = round_up(HEADER_SIZE + schema_bytes.len(), 4096);
        let total = buffers + capacity * BUFFER_COUNT as usize;
        let map = Mapping::create(segment, total, group)?;
        let layout = Layout { capacity, buffers };
        let slot = Slot {
            map,
            segment: segment.to_owned(),
            name: name.clone(),
            schema: StoredSchema::new(schema),
            layout,
            short_wakes: AtomicU32::new(0),
            lost_pages_told: AtomicBool::new(false),
            unsettled_version: AtomicU32::new(0),
        };
        let name_bytes = name.as_str().as_bytes();
        slot.store32(OFF_VERSION, VERSION);
        slot.store32(OFF_HEADER_SIZE, HEADER_SIZE as u32);
        slot.store64(OFF_TOTAL_SIZE, total as u64);
        slot.store32(OFF_CAPACITY, capacity as u32);
        slot.store32(OFF_BUFFER_COUNT, BUFFER_COUNT);
        slot.store64(OFF_BUFFERS, buffers as u64);
        slot.store64(OFF_STRIDE, capacity as u64);
        slot.store32(OFF_SCHEMA_OFFSET, HEADER_SIZE as u32);
        slot.store32(OFF_SCHEMA_LEN, schema_bytes.len() as u32);
        slot.store64(OFF_SCHEMA_HASH, schema.hash().0);
        slot.store32(OFF_NAME_LEN, name_bytes.len() as u32);
        slot.copy_in(OFF_NAME, name_bytes);
        slot.copy_in(HEADER_SIZE, &schema_bytes);
        slot.store64(OFF_SERIES, now_ns().max(1));
        // Magic last: a header with the magic is complete.
        slot.word64(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(slot)
    }

    /// Maps an existing slot and validates its header against the segment's real size.
    pub fn open(segment: &str, writable: bool) -> Result<Slot, SegmentError> {
        let map = Mapping::open(segment, writable)?;
        let size = map.len() as u64;
        let bad_size = |what, found: u64| SegmentError::BadSize {
            segment: segment.to_owned(),
            what,
            found,
            segment_size: size,
        };
        if size < HEADER_SIZE as u64 {
            return Err(SegmentError::TooShort {
                segment: segment.to_owned(),
                size,
                header: HEADER_SIZE as u64,
            });
        }
        let raw = RawHeader(&map);
        let magic = raw.load64(OFF_MAGIC);
        if magic != MAGIC {
            return Err(SegmentError::BadMagic {
                segment: segment.to_owned(),
                found: magic,
                expected: MAGIC,
            });
        }
        let version = raw.load32(OFF_VERSION);
        if version != VERSION {
            return Err(SegmentError::BadVersion {
                segment: segment.to_owned(),
                found: version,
                expected: VERSION,
            });
        }
        let header_size = u64::from(raw.load32(OFF_HEADER_SIZE));
        if header_size != HEADER_SIZE as u64 {
            return Err(bad_size("header size", header_size));
        }
        let total = raw.load64(OFF_TOTAL_SIZE);
        if total != size {
            return Err(bad_size("recorded total size", total));
        }
        let capacity = u64::from(raw.load32(OFF_CAPACITY));
        if capacity == 0 || capacity % 64 != 0 || capacity > MAX_CAPACITY {
            return Err(bad_size("capacity", capacity));
        }
        // The value line keeps the lengths and times of exactly this many.
        let count = u64::from(raw.load32(OFF_BUFFER_COUNT));
        if count != u64::from(BUFFER_COUNT) {
            return Err(bad_size("buffer count", count));
        }
        let stride = raw.load64(OFF_STRIDE);
        if stride != capacity {
            return Err(bad_size("buffer stride", stride));
        }
        let schema_off = u64::from(raw.load32(OFF_SCHEMA_OFFSET));
        let schema_len = u64::from(raw.load32(OFF_SCHEMA_LEN));
        let buffers = raw.load64(OFF_BUFFERS);
        if schema_off != HEADER_SIZE as u64 {
            return Err(bad_size("schema offset", schema_off));
        }
        if schema_len > MAX_SCHEMA_LEN {
            return Err(bad_size("schema length", schema_len));
        }
        if buffers % 64 != 0 || buffers < schema_off + schema_len {
            return Err(bad_size("buffer offset", buffers));
        }
        let end = stride
            .checked_mul(count)
            .and_then(|b| b.checked_add(buffers));
        if end != Some(size) {
            return Err(bad_size("buffers end", end.unwrap_or(u64::MAX)));
        }
        let name_len = raw.load32(OFF_NAME_LEN) as usize;
        if name_len > NAME_AREA {
            return Err(bad_size("name length", name_len as u64));
        }
        let bad_field = |what, reason: String| SegmentError::BadField {
            segment: segment.to_owned(),
            what,
            reason,
        };
        let mut name = vec![0u8; name_len];
        raw.0.copy_out(OFF_NAME, &mut name);
        let name = String::from_utf8(name).map_err(|e| bad_field("name", e.to_string()))?;
        // The rule's message quotes the name: of an overwritten header, up to 256 bytes of
        // anything, each control byte written out.
        let name = SlotName::parse(&name).map_err(|e| bad_field("name", cut(e.to_string())))?;
        if !names_segment(segment, &name) {
            return Err(bad_field(
                "name",
                format!(
                    "the header names slot {name}, whose segment has another name (a segment \
                     copied or renamed by hand?)"
                ),
            ));
        }
        let mut schema = vec![0u8; schema_len as usize];
        raw.0.copy_out(HEADER_SIZE, &mut schema);
        let parsed = Schema::from_bytes(&schema).map_err(|e| bad_field("schema", e.to_string()))?;
        let schema = StoredSchema {
            type_name: parsed.type_name().to_owned(),
            hash: parsed.hash(),
            bytes: schema,
        };
        let stored_hash = raw.load64(OFF_SCHEMA_HASH);
        if stored_hash != schema.hash.0 {
            return Err(bad_field(
                "schema hash",
                format!(
                    "header says {}, the stored schema hashes to {}",
                    SchemaHash(stored_hash),
                    schema.hash
                ),
            ));
        }
        let layout = Layout {
            capacity: capacity as usize,
            buffers: buffers as usize,
        };
        Ok(Slot {
            map,
            segment: segment.to_owned(),
            name,
            schema,
            layout,
            short_wakes: AtomicU32::new(0),
            lost_pages_told: AtomicBool::new(false),
            unsettled_version: AtomicU32::new(0),
        })
    }
}

/// Whether `segment` is the file of slot `name` (`Domain::segment_name`): after the domain's
/// prefix (`/baton.<domain>`, whose domain holds neither `~` nor `%`) comes
/// `SlotName::in_segment_name`.
fn names_segment(segment: &str, name: &SlotName) -> bool {
    segment
        .find(['~', '%'])
        .is_some_and(|at| segment[at..] == name.in_segment_name())
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Header reads during validation, before a `Slot` exists.
struct RawHeader<'a>(&'a Mapping);

impl RawHeader<'_> {
    fn load32(&self, off: usize) -> u32 {
        self.0.load_acquire32(off)
    }

    fn load64(&self, off: usize) -> u64 {
        self.0.load_acquire64(off)
    }
}

/// `text` cut to at most 200 characters, marked as cut.
fn cut(text: String) -> String {
    const MAX: usize = 200;
    match text.char_indices().nth(MAX) {
        Some((at, _)) => format!("{} (cut)", &text[..at]),
        None => text,
    }
}
