//! Tracing a Rust type's serde format by deserializing sample values of it.
//!
//! serde-reflection's `Tracer` explores the contents of an Option, Vec or map only on its
//! first pass, so an enum nested there (`Vec<Mode>`) stays half-known unless each enum type
//! is traced by name, which a generic `Schema::of_serde::<T>()` cannot do. This tracer
//! produces the same formats (serde-reflection's data model) but explores every position
//! on every pass, picking a new enum variant at each visit until every variant of every
//! reachable enum is known. Recursive types are cut where a container meets itself: that
//! inner occurrence is recorded by name and filled with a small value (None, empty, or a
//! variant that does not lead back).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de;

use super::sample::Tracing;
use super::{ContainerFormat, Format, Named, VariantFormat};

/// Enough passes for nested enums with hundreds of variants; each pass is one traversal.
const MAX_PASSES: usize = 4096;
/// Sample values nest at most this deep; deeper means a recursion with no way out.
pub(super) const MAX_SAMPLE_DEPTH: usize = 128;

#[derive(Debug)]
pub(super) struct TraceError(pub String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

impl de::Error for TraceError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TraceError(format!(
            "the type's Deserialize refused a sample value: {msg}"
        ))
    }
}

pub(super) type Result<T, E = TraceError> = std::result::Result<T, E>;

pub(super) fn unsupported(what: &str) -> TraceError {
    TraceError(format!(
        "{what} is not supported: bincode cannot encode self-describing data, so avoid \
         #[serde(untagged)], #[serde(tag = ...)], #[serde(flatten)] and Deserialize impls \
         that call deserialize_any"
    ))
}

#[derive(Default)]
pub(super) struct EnumState {
    pub names: &'static [&'static str],
    pub variants: BTreeMap<u32, VariantFormat>,
    pub in_flight: BTreeSet<u32>,
    turn: usize,
}

#[derive(Default)]
pub(super) struct Tracer {
    containers: BTreeMap<String, ContainerFormat>,
    pub enums: BTreeMap<String, EnumState>,
    /// Registry name -> Rust type name, and back: two types sharing a serde name (generic
    /// instances like `Stamped<f64>` and `Stamped<u8>`) get distinct registry names.
    owners: BTreeMap<String, String>,
    names: BTreeMap<String, String>,
    /// Containers being explored, so a recursive occurrence is recognised.
    pub stack: Vec<String>,
}

/// Traces `T`: its root format and every container it reaches, by registry name.
pub(super) fn trace<T: serde::de::DeserializeOwned>(
) -> Result<(Format, BTreeMap<String, ContainerFormat>)> {
    let mut tracer = Tracer::default();
    for _ in 0..MAX_PASSES {
        let mut root = Format::Unit;
        T::deserialize(Tracing::new(&mut tracer, &mut root))?;
        let complete = tracer
            .enums
            .values()
            .all(|e| e.variants.len() == e.names.len());
        if complete {
            let mut containers = tracer.containers;
            for (name, state) in tracer.enums {
                let variants = state
                    .variants
                    .into_iter()
                    .map(|(index, value)| {
                        let name = state.names.get(index as usize).copied().unwrap_or("?");
                        (
                            index,
                            Named {
                                name: name.to_string(),
                                value,
                            },
                        )
                    })
                    .collect();
                containers.insert(name, ContainerFormat::Enum(variants));
            }
            return Ok((root, containers));
        }
    }
    Err(TraceError(format!(
        "enum variants were still being found after {MAX_PASSES} passes"
    )))
}

/// `a::b::Stamped<c::D>` -> `Stamped<D>`, a readable registry name for a second type that
/// has the same serde name as an earlier one.
fn short_name(type_name: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for c in type_name.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            out.push(c);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(&word));
    out
}

impl Tracer {
    pub(super) fn name(&mut self, serde_name: &str, type_name: &str) -> String {
        if let Some(name) = self.names.get(type_name) {
            return name.clone();
        }
        let mut name = serde_name.to_string();
        if self.owners.contains_key(&name) {
            name = short_name(type_name);
            let base = name.clone();
            let mut n = 2;
            while self.owners.contains_key(&name) {
                name = format!("{base}#{n}");
                n += 1;
            }
        }
        self.owners.insert(name.clone(), type_name.to_string());
        self.names.insert(type_name.to_string(), name.clone());
        name
    }

    pub(super) fn record(&mut self, name: &str, format: ContainerFormat) -> Result<()> {
        match self.containers.get(name) {
            Some(known) if *known != format => Err(TraceError(format!(
                "type `{name}` gave two different formats; its Deserialize is not \
                 deterministic"
            ))),
            Some(_) => Ok(()),
            None => {
                self.containers.insert(name.to_string(), format);
                Ok(())
            }
        }
    }

    /// Whether `format` reaches an enum with unknown variants, so its variant is worth
    /// visiting again.
    fn reaches_incomplete(&self, format: &Format, seen: &mut BTreeSet<String>) -> bool {
        let mut found = false;
        super::wire::for_children(format, &mut |child| {
            found = found || self.reaches_incomplete(child, seen);
        });
        let Format::TypeName(name) = format else {
            return found;
        };
        if found || !seen.insert(name.clone()) {
            return found;
        }
        if let Some(state) = self.enums.get(name) {
            return state.variants.len() < state.names.len()
                || state
                    .variants
                    .values()
                    .any(|v| self.variant_reaches(v, seen));
        }
        let mut found = false;
        if let Some(container) = self.containers.get(name) {
            super::wire::container_children(container, &mut |child| {
                found = found || self.reaches_incomplete(child, seen);
            });
        }
        found
    }

    fn variant_reaches(&self, variant: &VariantFormat, seen: &mut BTreeSet<String>) -> bool {
        match variant {
            VariantFormat::NewType(inner) => self.reaches_incomplete(inner, seen),
            VariantFormat::Tuple(items) => items.iter().any(|f| self.reaches_incomplete(f, seen)),
            VariantFormat::Struct(fields) => fields
                .iter()
                .any(|f| self.reaches_incomplete(&f.value, seen)),
            _ => false,
        }
    }

    /// Whether a cut sample of `format` would meet a container being explored again
    /// (Options, sequences and maps are cut to None or empty, so they end the search).
    fn meets_stack(&self, format: &Format, seen: &mut BTreeSet<String>) -> bool {
        let mut items: Vec<&Format> = Vec::new();
        match format {
            Format::Tuple(list) => items.extend(list),
            Format::TupleArray { content, .. } => items.push(content),
            Format::TypeName(name) => {
                if self.stack.contains(name) {
                    return true;
                }
                if !seen.insert(name.clone()) || self.enums.contains_key(name) {
                    return false;
                }
                if let Some(container) = self.containers.get(name) {
                    super::wire::container_children(container, &mut |f| items.push(f));
                }
            }
            _ => {}
        }
        items.into_iter().any(|f| self.meets_stack(f, seen))
    }

    /// The variant a visit explores: an unknown one first, then one leading to an
    /// incomplete enum (in turn), else the first not being explored already.
    pub(super) fn pick(&mut self, name: &str, cut: bool) -> Option<u32> {
        let state = self.enums.get(name)?;
        let count = state.names.len() as u32;
        let free = |i: &u32| !state.in_flight.contains(i);
        if cut {
            let safe = |i: &u32| match state.variants.get(i) {
                None => false,
                Some(v) => !self.variant_meets_stack(v),
            };
            return (0..count)
                .filter(free)
                .find(safe)
                .or_else(|| {
                    (0..count)
                        .filter(free)
                        .find(|i| !state.variants.contains_key(i))
                })
                .or_else(|| (0..count).find(free));
        }
        if let Some(i) = (0..count)
            .filter(free)
            .find(|i| !state.variants.contains_key(i))
        {
            return Some(i);
        }
        let again: Vec<u32> = (0..count)
            .filter(free)
            .filter(|i| {
                let variant = state.variants.get(i);
                variant.is_some_and(|v| self.variant_reaches(v, &mut BTreeSet::new()))
            })
            .collect();
        let turn = state.turn;
        let choice = match again.len() {
            0 => (0..count).find(free),
            n => again.get(turn % n).copied(),
        };
        if let Some(state) = self.enums.get_mut(name) {
            state.turn = state.turn.wrapping_add(1);
        }
        choice
    }

    fn variant_meets_stack(&self, variant: &VariantFormat) -> bool {
        let mut seen = BTreeSet::new();
        match variant {
            VariantFormat::NewType(inner) => self.meets_stack(inner, &mut seen),
            VariantFormat::Tuple(items) => items.iter().any(|f| self.meets_stack(f, &mut seen)),
            VariantFormat::Struct(fields) => {
                fields.iter().any(|f| self.meets_stack(&f.value, &mut seen))
            }
            _ => false,
        }
    }
}
