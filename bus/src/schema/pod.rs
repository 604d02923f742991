//! C layout of pod value types, and the proof that a Rust type really has it.
//!
//! A pod slot holds `bytemuck::bytes_of(&value)`; tools read its fields at offsets computed
//! here from the traced serde format. That is only sound if the type is `#[repr(C)]` with
//! fields in serde order, which the type system cannot tell us, so [`prove`] checks it by
//! decoding marker values through serde and finding their bytes in memory.

use std::collections::{BTreeMap, BTreeSet};

use super::{ContainerFormat, Format, SchemaError, MAX_DEPTH};

/// Largest pod value: a hostile schema must not make `encode_json` allocate without bound.
pub(super) const MAX_POD_SIZE: usize = 1 << 30;

/// A primitive that may appear in a pod value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prim {
    U8,
    U16,
    U32,
    U64,
    U128,
    I8,
    I16,
    I32,
    I64,
    I128,
    F32,
    F64,
}

impl Prim {
    pub(super) fn of(format: &Format) -> Option<Prim> {
        Some(match format {
            Format::U8 => Prim::U8,
            Format::U16 => Prim::U16,
            Format::U32 => Prim::U32,
            Format::U64 => Prim::U64,
            Format::U128 => Prim::U128,
            Format::I8 => Prim::I8,
            Format::I16 => Prim::I16,
            Format::I32 => Prim::I32,
            Format::I64 => Prim::I64,
            Format::I128 => Prim::I128,
            Format::F32 => Prim::F32,
            Format::F64 => Prim::F64,
            _ => return None,
        })
    }

    pub(super) fn size(self) -> usize {
        match self {
            Prim::U8 | Prim::I8 => 1,
            Prim::U16 | Prim::I16 => 2,
            Prim::U32 | Prim::I32 | Prim::F32 => 4,
            Prim::U64 | Prim::I64 | Prim::F64 => 8,
            Prim::U128 | Prim::I128 => 16,
        }
    }

    /// The host's alignment: `u64` and `u128` align differently across targets.
    fn align(self) -> usize {
        match self {
            Prim::U8 | Prim::I8 => 1,
            Prim::U16 | Prim::I16 => std::mem::align_of::<u16>(),
            Prim::U32 | Prim::I32 => std::mem::align_of::<u32>(),
            Prim::F32 => std::mem::align_of::<f32>(),
            Prim::U64 | Prim::I64 => std::mem::align_of::<u64>(),
            Prim::F64 => std::mem::align_of::<f64>(),
            Prim::U128 | Prim::I128 => std::mem::align_of::<u128>(),
        }
    }
}

/// The C layout of a pod schema.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Layout {
    pub size: usize,
    pub align: usize,
    /// Size and alignment of each container, so walkers can place fields.
    containers: BTreeMap<String, (usize, usize)>,
}

/// One primitive the proof checks: where its marker goes in the bincode stream and where
/// its bytes must then sit in memory.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Leaf {
    pub path: String,
    pub prim: Prim,
    pub offset: usize,
    pub stream: usize,
}

/// The leaves to check and the length of the bincode stream that fills the whole value.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Plan {
    pub leaves: Vec<Leaf>,
    pub stream_len: usize,
}

pub(super) fn align_up(offset: usize, align: usize) -> Option<usize> {
    offset.checked_next_multiple_of(align.max(1))
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn what(path: &str) -> String {
    if path.is_empty() {
        "the type itself".to_string()
    } else {
        format!("field `{path}`")
    }
}

struct Compute<'a> {
    registry: &'a BTreeMap<String, ContainerFormat>,
    done: BTreeMap<String, (usize, usize)>,
    active: BTreeSet<String>,
}

impl Compute<'_> {
    fn format(
        &mut self,
        format: &Format,
        path: &str,
        depth: usize,
    ) -> Result<(usize, usize), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "{} nests deeper than {MAX_DEPTH} levels",
                what(path)
            ));
        }
        if let Some(prim) = Prim::of(format) {
            return Ok((prim.size(), prim.align()));
        }
        let refuse = |kind: &str| {
            Err(format!(
                "{} is {kind}; pod values hold only integers, floats, fixed-size arrays and \
                 structs of them",
                what(path)
            ))
        };
        match format {
            Format::TupleArray { content, size } => {
                self.array(content, *size, &format!("{path}[0]"), depth)
            }
            // serde traces `[T; 1]` and `[T; 0]` as tuples; real tuples are never `Pod`.
            Format::Tuple(items) if items.windows(2).all(|w| w[0] == w[1]) => match items.first() {
                None => Ok((0, 1)),
                Some(first) => self.array(first, items.len(), &format!("{path}[0]"), depth),
            },
            Format::TypeName(name) => self.container(name, path, depth),
            Format::Bool => refuse("bool"),
            Format::Char => refuse("char"),
            Format::Str => refuse("a string"),
            Format::Bytes => refuse("a byte buffer"),
            Format::Option(_) => refuse("an Option"),
            Format::Seq(_) => refuse("a sequence"),
            Format::Map { .. } => refuse("a map"),
            Format::Tuple(_) => refuse("a tuple"),
            Format::Unit => refuse("()"),
            _ => refuse("not a primitive"),
        }
    }

    fn array(
        &mut self,
        content: &Format,
        count: usize,
        path: &str,
        depth: usize,
    ) -> Result<(usize, usize), String> {
        let (size, align) = self.format(content, path, depth + 1)?;
        let total = size
            .checked_mul(count)
            .ok_or_else(|| format!("{} is too large", what(path)))?;
        Ok((total, align))
    }

    fn container(
        &mut self,
        name: &str,
        path: &str,
        depth: usize,
    ) -> Result<(usize, usize), String> {
        if let Some(&known) = self.done.get(name) {
            return Ok(known);
        }
        let Some(container) = self.registry.get(name) else {
            return Err(format!("{} refers to an unknown type `{name}`", what(path)));
        };
        if !self.active.insert(name.to_string()) {
            return Err(format!("{} contains itself (type `{name}`)", what(path)));
        }
        let fields: Vec<(String, &Format)> = match container {
            ContainerFormat::UnitStruct => Vec::new(),
            ContainerFormat::NewTypeStruct(inner) => vec![(join(path, "0"), &**inner)],
            ContainerFormat::TupleStruct(items) => items
                .iter()
                .enumerate()
                .map(|(i, f)| (join(path, &i.to_string()), f))
                .collect(),
            ContainerFormat::Struct(fields) => fields
                .iter()
                .map(|field| (join(path, &field.name), &field.value))
                .collect(),
            ContainerFormat::Enum(_) => {
                return Err(format!(
                    "{} is the enum `{name}`; pod values cannot hold enums",
                    what(path)
                ))
            }
        };
        let (mut offset, mut align) = (0usize, 1usize);
        for (field_path, format) in fields {
            let (size, field_align) = self.format(format, &field_path, depth + 1)?;
            offset = align_up(offset, field_align)
                .and_then(|start| start.checked_add(size))
                .ok_or_else(|| format!("{} is too large", what(&field_path)))?;
            align = align.max(field_align);
        }
        let size = align_up(offset, align).ok_or_else(|| format!("{} is too large", what(path)))?;
        self.active.remove(name);
        self.done.insert(name.to_string(), (size, align));
        Ok((size, align))
    }
}

impl Layout {
    /// The C layout of `root`, or why `root` cannot be a pod value.
    pub(super) fn compute(
        root: &Format,
        registry: &BTreeMap<String, ContainerFormat>,
    ) -> Result<Layout, String> {
        let mut compute = Compute {
            registry,
            done: BTreeMap::new(),
            active: BTreeSet::new(),
        };
        let (size, align) = compute.format(root, "", 0)?;
        if size > MAX_POD_SIZE {
            return Err(format!(
                "its C layout takes {size} bytes, more than the {MAX_POD_SIZE} a pod value may"
            ));
        }
        Ok(Layout {
            size,
            align,
            containers: compute.done,
        })
    }

    /// Size and alignment of a format inside this layout.
    pub(super) fn of(&self, format: &Format) -> Option<(usize, usize)> {
        if let Some(prim) = Prim::of(format) {
            return Some((prim.size(), prim.align()));
        }
        match format {
            Format::TupleArray { content, size } => {
                let (item, align) = self.of(content)?;
                Some((item.checked_mul(*size)?, align))
            }
            Format::Tuple(items) => match items.first() {
                None => Some((0, 1)),
                Some(first) => {
                    let (item, align) = self.of(first)?;
                    Some((item.checked_mul(items.len())?, align))
                }
            },
            Format::TypeName(name) => self.containers.get(name).copied(),
            _ => None,
        }
    }

    /// Checks the first and last element of each array only: Rust lays array elements out
    /// contiguously, so field order inside structs is all that can differ, and the plan
    /// stays small for large arrays.
    pub(super) fn plan(&self, root: &Format, registry: &BTreeMap<String, ContainerFormat>) -> Plan {
        let mut plan = Plan {
            leaves: Vec::new(),
            stream_len: 0,
        };
        self.walk(root, registry, 0, String::new(), &mut plan, 0);
        plan
    }

    fn walk(
        &self,
        format: &Format,
        registry: &BTreeMap<String, ContainerFormat>,
        offset: usize,
        path: String,
        plan: &mut Plan,
        depth: usize,
    ) {
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(prim) = Prim::of(format) {
            plan.leaves.push(Leaf {
                path,
                prim,
                offset,
                stream: plan.stream_len,
            });
            plan.stream_len += prim.size();
            return;
        }
        let (content, count) = match format {
            Format::TupleArray { content, size } => (&**content, *size),
            Format::Tuple(items) => match items.first() {
                Some(first) => (first, items.len()),
                None => return,
            },
            Format::TypeName(name) => {
                let fields: Vec<(String, &Format)> = match registry.get(name) {
                    Some(ContainerFormat::NewTypeStruct(inner)) => vec![(join(&path, "0"), inner)],
                    Some(ContainerFormat::TupleStruct(items)) => items
                        .iter()
                        .enumerate()
                        .map(|(i, f)| (join(&path, &i.to_string()), f))
                        .collect(),
                    Some(ContainerFormat::Struct(fields)) => fields
                        .iter()
                        .map(|field| (join(&path, &field.name), &field.value))
                        .collect(),
                    _ => Vec::new(),
                };
                let mut field_offset = 0;
                for (field_path, field) in fields {
                    let (size, align) = self.of(field).unwrap_or((0, 1));
                    field_offset = align_up(field_offset, align).unwrap_or(field_offset);
                    let at = offset.saturating_add(field_offset);
                    self.walk(field, registry, at, field_path, plan, depth + 1);
                    field_offset = field_offset.saturating_add(size);
                }
                return;
            }
            _ => return,
        };
        let stride = self.of(content).map_or(0, |(size, _)| size);
        let packed = packed_size(content, registry, depth);
        let start = plan.stream_len;
        self.walk(
            content,
            registry,
            offset,
            format!("{path}[0]"),
            plan,
            depth + 1,
        );
        if count > 1 {
            let last = count - 1;
            plan.stream_len = start.saturating_add(packed.saturating_mul(last));
            let at = offset.saturating_add(stride.saturating_mul(last));
            self.walk(
                content,
                registry,
                at,
                format!("{path}[{last}]"),
                plan,
                depth + 1,
            );
        }
        plan.stream_len = start.saturating_add(packed.saturating_mul(count));
    }
}

/// Bytes a pod format takes in the bincode stream: its primitives without padding.
fn packed_size(
    format: &Format,
    registry: &BTreeMap<String, ContainerFormat>,
    depth: usize,
) -> usize {
    if depth > MAX_DEPTH {
        return 0;
    }
    if let Some(prim) = Prim::of(format) {
        return prim.size();
    }
    let sum = |items: &mut dyn Iterator<Item = &Format>| {
        items.fold(0usize, |total, f| {
            total.saturating_add(packed_size(f, registry, depth + 1))
        })
    };
    match format {
        Format::TupleArray { content, size } => {
            packed_size(content, registry, depth + 1).saturating_mul(*size)
        }
        Format::Tuple(items) => sum(&mut items.iter()),
        Format::TypeName(name) => match registry.get(name) {
            Some(ContainerFormat::NewTypeStruct(inner)) => packed_size(inner, registry, depth + 1),
            Some(ContainerFormat::TupleStruct(items)) => sum(&mut items.iter()),
            Some(ContainerFormat::Struct(fields)) => sum(&mut fields.iter().map(|f| &f.value)),
            _ => 0,
        },
        _ => 0,
    }
}

/// Marker bytes in little-endian order: never zero (so padding cannot match), the first two
/// bytes count leaves so markers differ, and floats get a fixed exponent so every marker
/// is a normal finite number that survives a serde round trip bit for bit.
fn marker(index: usize, prim: Prim) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (j, byte) in bytes.iter_mut().enumerate() {
        *byte = 0x80 | j as u8;
    }
    bytes[0] = (index % 255) as u8 + 1;
    bytes[1] = ((index / 255) % 255) as u8 + 1;
    match prim {
        Prim::F32 => bytes[3] = 0x3f,
        Prim::F64 => bytes[7] = 0x3f,
        _ => {}
    }
    bytes
}

/// Decodes a `T` whose every checked primitive holds a distinct marker, then checks each
/// marker sits at its computed offset in `bytemuck::bytes_of(&t)`.
pub(super) fn prove<T: bytemuck::Pod + serde::de::DeserializeOwned>(
    plan: &Plan,
) -> Result<(), SchemaError> {
    let not_repr_c = |detail: String| SchemaError::NotReprC {
        type_name: std::any::type_name::<T>().to_string(),
        detail,
    };
    let mut stream = vec![0u8; plan.stream_len];
    for (index, leaf) in plan.leaves.iter().enumerate() {
        let size = leaf.prim.size();
        let slot = leaf
            .stream
            .checked_add(size)
            .and_then(|end| stream.get_mut(leaf.stream..end))
            .ok_or_else(|| not_repr_c(format!("field `{}` lies outside the value", leaf.path)))?;
        slot.copy_from_slice(&marker(index, leaf.prim)[..size]);
    }
    let value: T = crate::codec::decode(&stream).map_err(|error| {
        not_repr_c(format!(
            "could not check the field order: decoding marker values failed: {error}"
        ))
    })?;
    let memory = bytemuck::bytes_of(&value);
    for (index, leaf) in plan.leaves.iter().enumerate() {
        let size = leaf.prim.size();
        let mut expected = marker(index, leaf.prim);
        if cfg!(target_endian = "big") {
            expected[..size].reverse();
        }
        let found = leaf
            .offset
            .checked_add(size)
            .and_then(|end| memory.get(leaf.offset..end));
        if found != Some(&expected[..size]) {
            return Err(not_repr_c(format!(
                "field `{}` expected at offset {}",
                leaf.path, leaf.offset
            )));
        }
    }
    Ok(())
}
