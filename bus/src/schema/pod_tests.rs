//! Pod schema tests: C layouts are computed with padding, non-pod formats are refused,
//! field order is proven, and pod JSON agrees with serde_json both ways.

use std::collections::BTreeMap;

use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::pod::{Layout, Prim};
use super::*;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Serialize, Deserialize)]
pub(super) struct Vec3 {
    x: f32,
    y: f32,
    z: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Serialize, Deserialize)]
pub(super) struct Frame {
    id: u8,
    kind: u8,
    pad: [u8; 2],
    pos: Vec3,
    stamp: u64,
    ids: [u16; 4],
    m: [[f64; 2]; 2],
    one: [i16; 1],
    extra: [i16; 3],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Serialize, Deserialize)]
pub(super) struct Wide {
    big: u128,
    small: i64,
    tail: u64,
}

fn frame() -> Frame {
    Frame {
        id: 1,
        kind: 2,
        pad: [0; 2],
        pos: Vec3 {
            x: 0.5,
            y: -1.0,
            z: 3.25,
        },
        stamp: 1 << 40,
        ids: [1, 2, 3, u16::MAX],
        m: [[1.0, 2.0], [3.0, f64::MAX]],
        one: [-1],
        extra: [4, 5, 6],
    }
}

fn check_pod<T: Pod + Serialize + serde::de::DeserializeOwned>(value: &T) -> Schema {
    let schema = Schema::of_pod::<T>().expect("pod schema");
    assert_eq!(schema.encoding(), Encoding::Pod);
    assert_eq!(schema.pod_size(), Some(std::mem::size_of::<T>()));
    let expected = serde_json::to_value(value).expect("to_value");
    let bytes = bytemuck::bytes_of(value);
    assert_eq!(schema.decode_json(bytes).expect("decode_json"), expected);
    assert_eq!(schema.encode_json(&expected).expect("encode_json"), bytes);
    schema
}

#[test]
fn pod_layout_and_json() {
    check_pod(&frame());
    check_pod(&Vec3 {
        x: 1.0,
        y: 2.0,
        z: 3.0,
    });
    check_pod(&Wide {
        big: u128::from(u64::MAX),
        small: -5,
        tail: 9,
    });
    check_pod(&[7u32, 8, 9]);
    check_pod(&42u64);
    let schema = Schema::of_pod::<Frame>().expect("schema");
    assert!(schema.decode_json(&[0; 63]).is_err());
    assert!(schema.decode_json(&[0; 65]).is_err());
}

#[test]
fn pod_layout_pads_like_c() {
    // struct P { a: u8, b: u64, c: [u16; 3], d: Q } struct Q { e: u8 }: padding after a,
    // after c, and at the end, which a derived `Pod` cannot have, so build it by hand.
    let named = |name: &str, value: Format| Named {
        name: name.to_string(),
        value,
    };
    let mut containers = BTreeMap::new();
    containers.insert(
        "P".to_string(),
        ContainerFormat::Struct(vec![
            named("a", Format::U8),
            named("b", Format::U64),
            named(
                "c",
                Format::TupleArray {
                    content: Box::new(Format::U16),
                    size: 3,
                },
            ),
            named("d", Format::TypeName("Q".to_string())),
        ]),
    );
    containers.insert(
        "Q".to_string(),
        ContainerFormat::Struct(vec![named("e", Format::U8)]),
    );
    let root = Format::TypeName("P".to_string());
    let schema =
        Schema::build("P", Encoding::Pod, root.clone(), containers.clone()).expect("build");
    assert_eq!(schema.pod_size(), Some(24));
    let layout = Layout::compute(&root, &containers).expect("layout");
    let offsets: Vec<(String, usize)> = layout
        .plan(&root, &containers)
        .leaves
        .into_iter()
        .map(|leaf| (leaf.path, leaf.offset))
        .collect();
    let expected = [("a", 0), ("b", 8), ("c[0]", 16), ("c[2]", 20), ("d.e", 22)];
    let expected: Vec<(String, usize)> =
        expected.iter().map(|(p, o)| (p.to_string(), *o)).collect();
    assert_eq!(offsets, expected);
    let value = json!({"a": 1, "b": 2, "c": [3, 4, 5], "d": {"e": 6}});
    let bytes = schema.encode_json(&value).expect("encode");
    let mut want = vec![0u8; 24];
    want[0] = 1;
    want[8..16].copy_from_slice(&2u64.to_ne_bytes());
    for (i, v) in [3u16, 4, 5].iter().enumerate() {
        want[16 + 2 * i..18 + 2 * i].copy_from_slice(&v.to_ne_bytes());
    }
    want[22] = 6;
    assert_eq!(bytes, want);
    assert_eq!(schema.decode_json(&bytes).expect("decode"), value);
}

#[test]
fn pod_refuses_non_pod_formats() {
    for (format, word) in [
        (Format::Bool, "bool"),
        (Format::Char, "char"),
        (Format::Str, "string"),
        (Format::Option(Box::new(Format::U8)), "Option"),
        (Format::Seq(Box::new(Format::U8)), "sequence"),
        (
            Format::Map {
                key: Box::new(Format::U8),
                value: Box::new(Format::U8),
            },
            "map",
        ),
        (Format::Tuple(vec![Format::U8, Format::U16]), "tuple"),
    ] {
        let reason = Layout::compute(&format, &BTreeMap::new()).expect_err(word);
        assert!(reason.contains(word), "{reason}");
    }
    let enum_root = Format::TypeName("E".to_string());
    let containers = BTreeMap::from([("E".to_string(), ContainerFormat::Enum(BTreeMap::new()))]);
    let reason = Layout::compute(&enum_root, &containers).expect_err("enum");
    assert!(reason.contains("enum"), "{reason}");
    let error = Schema::of_pod::<Flag>()
        .expect_err("bool field")
        .to_string();
    assert!(error.contains("field `on` is bool"), "{error}");
}

/// Memory order `a, b`, serde order `b, a`: what a reordering compiler would produce.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Deserialize)]
#[serde(from = "SwappedSerde")]
struct Swapped {
    a: u32,
    b: u32,
}

#[derive(Deserialize)]
struct SwappedSerde {
    b: u32,
    a: u32,
}

impl From<SwappedSerde> for Swapped {
    fn from(s: SwappedSerde) -> Self {
        Swapped { a: s.a, b: s.b }
    }
}

/// What rustc does to `struct { a: u8, b: u64, c: u8 }` without `#[repr(C)]`.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Deserialize)]
#[serde(from = "Rusty")]
struct Reordered {
    b: u64,
    a: u8,
    c: u8,
    pad: [u8; 6],
}

#[derive(Deserialize)]
struct Rusty {
    a: u8,
    b: u64,
    c: u8,
}

impl From<Rusty> for Reordered {
    fn from(r: Rusty) -> Self {
        Reordered {
            b: r.b,
            a: r.a,
            c: r.c,
            pad: [0; 6],
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable, Deserialize)]
#[serde(from = "FlagSerde")]
struct Flag {
    on: u8,
}

#[derive(Deserialize)]
struct FlagSerde {
    on: bool,
}

impl From<FlagSerde> for Flag {
    fn from(f: FlagSerde) -> Self {
        Flag { on: u8::from(f.on) }
    }
}

#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Serialize, Deserialize)]
struct Aligned16 {
    v: [f32; 4],
}

/// A type aligned beyond its fields, without padding (bytemuck refuses padding), is the C
/// layout of its fields: it was refused as "not #[repr(C)]" (the API audit).
#[test]
fn an_over_aligned_type_without_padding_is_pod() {
    let schema = Schema::of_pod::<Aligned16>().expect("repr(C, align(16)) without padding");
    assert_eq!(schema.type_name(), std::any::type_name::<Aligned16>());
}

#[test]
fn field_order_is_proven() {
    let error = Schema::of_pod::<Swapped>()
        .expect_err("swapped")
        .to_string();
    assert!(
        error.contains("is not #[repr(C)] (field `b` expected at offset 0)"),
        "{error}"
    );
    let error = Schema::of_pod::<Reordered>()
        .expect_err("reordered")
        .to_string();
    assert!(
        error.contains("is not #[repr(C)]") && error.contains("size 24"),
        "{error}"
    );

    // The proof itself, against a hand-made wrong layout of a correct type.
    let schema = Schema::of_pod::<Vec3>().expect("schema");
    let layout = Layout::compute(schema.root(), schema.containers()).expect("layout");
    let mut plan = layout.plan(schema.root(), schema.containers());
    assert!(pod::prove::<Vec3>(&plan).is_ok());
    assert_eq!(plan.leaves[1].prim, Prim::F32);
    plan.leaves.swap(0, 1);
    let (first, second) = (plan.leaves[0].offset, plan.leaves[1].offset);
    plan.leaves[0].offset = second;
    plan.leaves[1].offset = first;
    let error = pod::prove::<Vec3>(&plan)
        .expect_err("wrong plan")
        .to_string();
    assert!(error.contains("field `y` expected at offset 0"), "{error}");
}
