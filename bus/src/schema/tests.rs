//! Schema tests: JSON agrees with serde_json both ways, tracing copes with nesting and
//! recursion, hashes are structural, and corrupt bytes give errors rather than panics.
//! Pod layouts are tested in `pod_tests.rs`.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::pod_tests::{Frame, Vec3, Wide};
use super::*;
use crate::codec;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct UnitS;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Meters(f64);

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Pair(u8, i16);

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
enum Mode {
    Idle,
    Run(u32),
    Two(u8, String),
    Move { x: f64, y: f64 },
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct List {
    head: i32,
    tail: Option<Box<List>>,
}

/// Serializes through `serialize_bytes`, the only way to reach `Format::Bytes` (and the one-piece
/// path of `payload`'s in-place encoding).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Blob(pub(crate) Vec<u8>);

impl Serialize for Blob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Blob;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_byte_buf<E>(self, bytes: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(bytes))
            }
        }
        d.deserialize_byte_buf(Visitor)
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Rich {
    a_u8: u8,
    a_u16: u16,
    a_u32: u32,
    a_u64: u64,
    a_u128: u128,
    a_i8: i8,
    a_i16: i16,
    a_i32: i32,
    a_i64: i64,
    a_i128: i128,
    a_f32: f32,
    a_f64: f64,
    flag: bool,
    letter: char,
    text: String,
    unit: (),
    unit_struct: UnitS,
    meters: Meters,
    pair: Pair,
    modes: Vec<Mode>,
    some: Option<u16>,
    none: Option<String>,
    tuple: (u8, String, f64),
    array: [i32; 4],
    one: [u8; 1],
    empty: [u8; 0],
    hash_map: HashMap<String, Pair>,
    tree_map: BTreeMap<String, u32>,
    int_keys: BTreeMap<u32, String>,
    enum_keys: BTreeMap<Meters2, u8>,
    list: List,
    blob: Blob,
    nested: Vec<Vec<Option<Mode>>>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Meters2 {
    Left,
    Right,
}

fn rich() -> Rich {
    Rich {
        a_u8: 200,
        a_u16: 60_000,
        a_u32: 4_000_000_000,
        a_u64: u64::MAX,
        a_u128: u128::from(u64::MAX),
        a_i8: -100,
        a_i16: -30_000,
        a_i32: i32::MIN,
        a_i64: i64::MIN,
        a_i128: i128::from(i64::MIN),
        a_f32: 0.1,
        a_f64: -2.5e-300,
        flag: true,
        letter: '€',
        text: "héllo\n\"world\"".into(),
        unit: (),
        unit_struct: UnitS,
        meters: Meters(1.5),
        pair: Pair(7, -7),
        modes: vec![
            Mode::Idle,
            Mode::Run(3),
            Mode::Two(1, "two".into()),
            Mode::Move { x: 1.0, y: -1.0 },
        ],
        some: Some(9),
        none: None,
        tuple: (1, "t".into(), 2.0),
        array: [1, -2, 3, -4],
        one: [5],
        empty: [],
        hash_map: HashMap::from([("k".to_string(), Pair(1, 2))]),
        tree_map: BTreeMap::from([("a".into(), 1), ("b".into(), 2), ("c".into(), 3)]),
        int_keys: BTreeMap::from([(1, "one".into()), (7, "seven".into())]),
        enum_keys: BTreeMap::from([(Meters2::Left, 1), (Meters2::Right, 2)]),
        list: List {
            head: 1,
            tail: Some(Box::new(List {
                head: 2,
                tail: None,
            })),
        },
        blob: Blob(vec![0, 1, 255]),
        nested: vec![vec![], vec![None, Some(Mode::Run(1))]],
    }
}

/// `decode_json` is the JSON serde_json writes (read back: `to_value` would widen an f32 to
/// the f64 its text is not), and `encode_json` inverts it byte for byte.
fn check_json<T: Serialize + serde::de::DeserializeOwned>(value: &T) -> Schema {
    let schema = Schema::of_serde::<T>().expect("schema");
    let mut bytes = Vec::new();
    codec::encode_into(value, &mut bytes).expect("encode");
    let text = serde_json::to_string(value).expect("to_string");
    let expected: serde_json::Value = serde_json::from_str(&text).expect("read back");
    assert_eq!(schema.decode_json(&bytes).expect("decode_json"), expected);
    assert_eq!(schema.encode_json(&expected).expect("encode_json"), bytes);
    schema
}

#[test]
fn json_matches_serde_json() {
    check_json(&rich());
    check_json(&Mode::Move { x: 0.5, y: 2.0 });
    check_json(&vec![Mode::Idle, Mode::Run(1)]);
    check_json(&(1u8, "x".to_string(), Some('z')));
    check_json(&[[1.5f32; 2]; 3]);
    check_json(&UnitS);
    check_json(&Meters(-0.0));
    check_json(&());
    check_json(&'ß');
    check_json(&"plain".to_string());
    check_json(&Option::<u8>::None);
    check_json(&i128::from(u64::MAX));
    check_json(&Some(std::time::Duration::from_millis(1500)));
    check_json(&(3u16, 4u16));
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Expr {
    Add(Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Lit(i64),
    Var { name: String },
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Stamped<T> {
    stamp: u64,
    value: T,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Deep {
    P,
    Q(Option<Vec<Deeper>>),
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Deeper {
    X,
    Y(BTreeMap<String, Deepest>),
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Deepest {
    Lo,
    Mid(u8),
    Hi { up: bool },
}

#[test]
fn tracing_handles_nesting_recursion_and_generics() {
    let lit = |n| Box::new(Expr::Lit(n));
    let var = Box::new(Expr::Var { name: "v".into() });
    check_json(&Expr::Add(
        lit(1),
        Box::new(Expr::Neg(Box::new(Expr::Add(lit(2), var)))),
    ));
    let schema = check_json(&Stamped {
        stamp: 1,
        value: Stamped {
            stamp: 2,
            value: 0.5f64,
        },
    });
    let text = schema.describe();
    assert!(
        text.contains("struct Stamped { stamp: u64, value: Stamped<f64> }"),
        "{text}"
    );
    assert!(
        text.contains("struct Stamped<f64> { stamp: u64, value: f64 }"),
        "{text}"
    );
    let deepest = BTreeMap::from([
        ("a".to_string(), Deepest::Lo),
        ("b".to_string(), Deepest::Mid(3)),
        ("c".to_string(), Deepest::Hi { up: true }),
    ]);
    check_json(&vec![
        Deep::P,
        Deep::Q(None),
        Deep::Q(Some(vec![Deeper::X, Deeper::Y(deepest)])),
    ]);
}

/// A type with no finite value: tracing must stop with an error, not overflow the stack.
#[derive(Serialize, Deserialize)]
struct Endless {
    next: Box<[Endless; 1]>,
}

#[derive(Serialize, Deserialize)]
enum Spiral {
    Turn(Box<Spiral>),
}

#[test]
fn endless_types_are_refused() {
    let error = Schema::of_serde::<Endless>()
        .expect_err("endless")
        .to_string();
    assert!(error.contains("nest deeper"), "{error}");
    let error = Schema::of_serde::<Spiral>()
        .expect_err("spiral")
        .to_string();
    assert!(error.contains("Spiral"), "{error}");
}

#[test]
fn special_numbers_and_keys() {
    let schema = Schema::of_serde::<u128>().expect("schema");
    let mut bytes = Vec::new();
    codec::encode_into(&u128::MAX, &mut bytes).expect("encode");
    let text = json!(u128::MAX.to_string());
    assert_eq!(schema.decode_json(&bytes).expect("decode"), text);
    assert_eq!(schema.encode_json(&text).expect("encode"), bytes);

    let schema = Schema::of_serde::<i128>().expect("schema");
    codec::encode_into(&i128::MIN, &mut bytes).expect("encode");
    let text = json!(i128::MIN.to_string());
    assert_eq!(schema.decode_json(&bytes).expect("decode"), text);
    assert_eq!(schema.encode_json(&text).expect("encode"), bytes);

    let schema = Schema::of_serde::<f64>().expect("schema");
    codec::encode_into(&f64::NAN, &mut bytes).expect("encode");
    assert_eq!(schema.decode_json(&bytes).expect("decode"), json!(null));
    let nan = schema.encode_json(&json!(null)).expect("encode");
    assert!(codec::decode::<f64>(&nan).expect("decode").is_nan());

    // An f32 prints as serde_json writes it: its shortest decimal, not the f64 it widens to.
    let floats = vec![0.1f32, f32::MAX, f32::MIN_POSITIVE, -2.5, 1e-7];
    let schema = Schema::of_serde::<Vec<f32>>().expect("schema");
    codec::encode_into(&floats, &mut bytes).expect("encode");
    let decoded = schema.decode_json(&bytes).expect("decode");
    assert_eq!(
        decoded.to_string(),
        serde_json::to_string(&floats).expect("serde_json")
    );
    assert_eq!(schema.encode_json(&decoded).expect("encode"), bytes);

    // Keys serde_json cannot write as strings become [key, value] pairs.
    let map = BTreeMap::from([((1u8, 2u8), true), ((3, 4), false)]);
    let schema = Schema::of_serde::<BTreeMap<(u8, u8), bool>>().expect("schema");
    codec::encode_into(&map, &mut bytes).expect("encode");
    let pairs = json!([[[1, 2], true], [[3, 4], false]]);
    assert_eq!(schema.decode_json(&bytes).expect("decode"), pairs);
    assert_eq!(schema.encode_json(&pairs).expect("encode"), bytes);
    // And an object for them is refused saying what is taken, not that an object is.
    let error = schema
        .encode_json(&json!({"1": true}))
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("(an array of [key, value] pairs), found object"),
        "{error}"
    );
}

#[derive(Serialize, Deserialize)]
struct Outer {
    pose: app_a::Pose,
    mode: Mode,
    small: u8,
}

#[test]
fn encode_errors_name_the_path() {
    let schema = Schema::of_serde::<Outer>().expect("schema");
    let good = json!({"pose": {"x": 1.0, "y": 2.0, "tag": "t"}, "mode": "Idle", "small": 1});
    assert!(schema.encode_json(&good).is_ok());
    let cases = [
        (
            json!({"pose": {"x": "a", "y": 2.0, "tag": "t"}, "mode": "Idle", "small": 1}),
            ".pose.x: expected f64, found string",
        ),
        (
            json!({"pose": {"x": 1.0, "tag": "t"}, "mode": "Idle", "small": 1}),
            ".pose: missing field `y`",
        ),
        (
            json!({"pose": {"x": 1.0, "y": 2.0, "tag": "t", "z": 0}, "mode": "Idle", "small": 1}),
            ".pose: unknown field `z`",
        ),
        (
            json!({"pose": {"x": 1.0, "y": 2.0, "tag": "t"}, "mode": "Fly", "small": 1}),
            ".mode: expected a variant of enum Mode (Idle, Run, Two, Move), found `Fly`",
        ),
        (
            json!({"pose": {"x": 1.0, "y": 2.0, "tag": "t"}, "mode": {"Run": -1}, "small": 1}),
            ".mode.Run: expected u32, found number -1 (out of range)",
        ),
        (
            json!({"pose": {"x": 1.0, "y": 2.0, "tag": "t"}, "mode": "Run", "small": 1}),
            ".mode: variant `Run` of enum Mode needs a value",
        ),
        (
            json!({"pose": {"x": 1.0, "y": 2.0, "tag": "t"}, "mode": "Idle", "small": 256}),
            ".small: expected u8, found number 256 (out of range)",
        ),
        (
            json!([1, 2]),
            "(root): expected struct Outer (an object), found array of 2",
        ),
    ];
    for (value, message) in cases {
        let error = schema.encode_json(&value).expect_err(message).to_string();
        assert!(error.starts_with(message), "{error}");
    }
    // A whole number beyond 64 bits, which JSON readers take as a float, is out of range (it
    // was "expected u8, found number 1.8446744073709552e19").
    let big: serde_json::Value = serde_json::from_str(
        r#"{"pose": {"x": 1.0, "y": 2.0, "tag": "t"}, "mode": "Idle", "small": 18446744073709551616}"#,
    )
    .unwrap();
    let error = schema.encode_json(&big).unwrap_err().to_string();
    assert!(
        error.starts_with(".small: expected u8, found number") && error.contains("(out of range)"),
        "{error}"
    );
}

mod app_a {
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Pose {
        pub x: f64,
        pub y: f64,
        pub tag: String,
    }
}

mod app_b {
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Pose {
        pub x: f64,
        pub y: f64,
        pub tag: String,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Placement {
        pub x: f64,
        pub y: f64,
        pub tag: String,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Renamed {
        pub x: f64,
        pub why: f64,
        pub tag: String,
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Retyped {
        pub x: f64,
        pub y: f32,
        pub tag: String,
    }
}

#[test]
fn schema_is_shareable() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Schema>();
    send_sync::<SchemaError>();
}

#[test]
fn hash_is_structural_and_stable() {
    let hash = |schema: Result<Schema, SchemaError>| schema.expect("schema").hash();
    let a = Schema::of_serde::<app_a::Pose>().expect("schema");
    let b = Schema::of_serde::<app_b::Pose>().expect("schema");
    assert_ne!(a.type_name(), b.type_name());
    assert_eq!(a.hash(), b.hash());
    assert_eq!(a.hash(), hash(Schema::of_serde::<app_b::Placement>()));
    assert_ne!(a.hash(), hash(Schema::of_serde::<app_b::Renamed>()));
    assert_ne!(a.hash(), hash(Schema::of_serde::<app_b::Retyped>()));
    assert_ne!(
        hash(Schema::of_serde::<Vec3>()),
        hash(Schema::of_pod::<Vec3>())
    );
    assert_ne!(
        hash(Schema::of_serde::<u32>()),
        hash(Schema::of_serde::<i32>())
    );
    // A change here breaks every stored slot: only change the canonical form on purpose.
    assert_eq!(
        hash(Schema::of_serde::<u32>()).to_string(),
        "08327e07b4eb5eef"
    );
    assert_eq!(SchemaHash(0xab).to_string(), "00000000000000ab");
}

#[test]
fn describe_is_readable() {
    let schema = Schema::of_serde::<app_a::Pose>().expect("schema");
    assert_eq!(
        schema.describe(),
        "struct Pose { x: f64, y: f64, tag: str }"
    );
    let schema = Schema::of_serde::<Vec<Mode>>().expect("schema");
    assert_eq!(
        schema.describe(),
        "Vec<Mode>\nenum Mode { Idle, Run(u32), Two(u8, str), Move { x: f64, y: f64 } }"
    );
    let text = Schema::of_serde::<Rich>().expect("schema").describe();
    assert!(
        text.contains("struct List { head: i32, tail: Option<List> }"),
        "{text}"
    );
    assert!(text.contains("enum_keys: Map<Meters2, u8>"), "{text}");
    let text = Schema::of_pod::<Frame>().expect("schema").describe();
    assert!(text.ends_with("pod: 72 bytes, alignment 8"), "{text}");
}

#[test]
fn untraceable_types_are_refused() {
    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Loose {
        A(u8),
        B(String),
    }
    let error = Schema::of_serde::<Loose>()
        .expect_err("untagged")
        .to_string();
    assert!(
        error.contains("Loose") && error.contains("deserialize_any"),
        "{error}"
    );
}

#[test]
fn schema_bytes_round_trip() {
    for schema in [
        Schema::of_serde::<Rich>(),
        Schema::of_serde::<Vec<Mode>>(),
        Schema::of_serde::<()>(),
        Schema::of_pod::<Frame>(),
        Schema::of_pod::<Wide>(),
    ] {
        let schema = schema.expect("schema");
        let back = Schema::from_bytes(&schema.to_bytes()).expect("from_bytes");
        assert_eq!(back, schema);
        assert_eq!(back.hash(), schema.hash());
        assert_eq!(back.type_name(), schema.type_name());
    }
}

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn corrupt_schema_bytes_are_errors() {
    let good = Schema::of_serde::<Rich>().expect("schema").to_bytes();
    for len in 0..good.len() {
        assert!(Schema::from_bytes(&good[..len]).is_err(), "prefix {len}");
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..3000 {
        let len = (rng.next() % 200) as usize;
        let _ = Schema::from_bytes(&rng.bytes(len));
        let mut bytes = good.clone();
        for _ in 0..1 + round % 4 {
            let at = (rng.next() as usize) % bytes.len();
            bytes[at] = rng.next() as u8;
        }
        if let Ok(schema) = Schema::from_bytes(&bytes) {
            let _ = schema.describe();
            let _ = schema.decode_json(&rng.bytes(len));
        }
    }
}

/// A schema from another computer whose names hold control characters (terminal escapes for
/// `bus-inspect`'s output) is refused as corrupt; no Rust name has one.
#[test]
fn a_schema_with_a_control_character_in_a_name_is_refused() {
    #[derive(Serialize, Deserialize)]
    struct Pose {
        speed: f64,
    }
    let good = Schema::of_serde::<Pose>().expect("schema").to_bytes();
    assert!(Schema::from_bytes(&good).is_ok());
    let at = good
        .windows(5)
        .position(|w| w == b"speed")
        .expect("the field's name");
    let mut bad = good.clone();
    bad[at + 3] = 0x1b;
    let error = Schema::from_bytes(&bad).expect_err("refused").to_string();
    assert!(error.contains("control character"), "{error}");
}

#[test]
fn hostile_schemas_are_bounded() {
    // Deep nesting.
    let mut format = Format::U8;
    for _ in 0..200 {
        format = Format::Option(Box::new(format));
    }
    let mut bytes = b"BSC1".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.push(b'x');
    bytes.extend_from_slice(&[0, 0]);
    let mut tail = vec![18u8; 200];
    tail.extend_from_slice(&[8, 0, 0, 0, 0]);
    let error = Schema::from_bytes(&[bytes.clone(), tail].concat()).expect_err("deep");
    assert!(error.to_string().contains("deeper"), "{error}");

    // A billion zero-sized elements decode from no bytes unless something stops them.
    let huge = Format::TupleArray {
        content: Box::new(Format::TupleArray {
            content: Box::new(Format::Unit),
            size: 1 << 30,
        }),
        size: 1 << 30,
    };
    let schema = Schema::build("huge", Encoding::Bincode, huge, BTreeMap::new()).expect("build");
    let error = schema.decode_json(&[]).expect_err("budget").to_string();
    assert!(error.contains("too many parts"), "{error}");

    // A pod struct that contains itself.
    let root = Format::TypeName("Loop".to_string());
    let containers = BTreeMap::from([(
        "Loop".to_string(),
        ContainerFormat::NewTypeStruct(Box::new(Format::TypeName("Loop".to_string()))),
    )]);
    assert!(Schema::build("loop", Encoding::Pod, root, containers).is_err());
}

#[test]
fn corrupt_values_are_errors() {
    let schema = Schema::of_serde::<Rich>().expect("schema");
    let mut good = Vec::new();
    codec::encode_into(&rich(), &mut good).expect("encode");
    for len in 0..good.len() {
        assert!(schema.decode_json(&good[..len]).is_err(), "prefix {len}");
    }
    let mut long = good.clone();
    long.push(0);
    let error = schema.decode_json(&long).expect_err("trailing").to_string();
    assert!(error.contains("1 trailing bytes"), "{error}");
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for round in 0..3000 {
        let len = (rng.next() % 300) as usize;
        let _ = schema.decode_json(&rng.bytes(len));
        let mut bytes = good.clone();
        for _ in 0..1 + round % 3 {
            let at = (rng.next() as usize) % bytes.len();
            bytes[at] = rng.next() as u8;
        }
        let _ = schema.decode_json(&bytes);
    }
    let list = Schema::of_serde::<List>().expect("schema");
    let mut deep = Vec::new();
    for _ in 0..10_000 {
        deep.extend_from_slice(&[0, 0, 0, 0, 1]);
    }
    let error = list.decode_json(&deep).expect_err("deep").to_string();
    assert!(error.contains("deeper"), "{error}");
}

/// Two keys of one map that differ as text but not once read (`"1"` and `"01"` for an integer
/// key) are refused: the map decoded would keep one, and the other's value would be lost.
#[test]
fn map_keys_equal_once_read_are_refused() {
    let schema = Schema::of_serde::<BTreeMap<i32, u8>>().expect("schema");
    for text in [json!({"1": 1, "01": 2}), json!([[1, 1], [1, 2]])] {
        let error = schema.encode_json(&text).expect_err("refused").to_string();
        assert!(error.contains("repeats an earlier key"), "{text}: {error}");
    }
    let bytes = schema
        .encode_json(&json!({"1": 1, "2": 2}))
        .expect("encode");
    let map: BTreeMap<i32, u8> = codec::decode(&bytes).expect("decode");
    assert_eq!(map, BTreeMap::from([(1, 1), (2, 2)]));
}

/// A double printed by `decode_json` and parsed back gives the same bits (`put` of what `get`
/// printed): serde_json's default parser can be one unit in the last place off.
#[test]
fn doubles_survive_their_text() {
    let schema = Schema::of_serde::<(f64,)>().expect("schema");
    for x in [2.291712365432881e-9f64, 0.1, 1.0 / 3.0, 5e-324, f64::MAX] {
        let mut bytes = Vec::new();
        codec::encode_into(&(x,), &mut bytes).expect("encode");
        let text = schema.decode_json(&bytes).expect("decode").to_string();
        let back = schema
            .encode_json(&serde_json::from_str(&text).expect("parse"))
            .expect("encode");
        let (y,): (f64,) = codec::decode(&back).expect("decode");
        assert_eq!(y.to_bits(), x.to_bits(), "{x:e} printed as {text}");
    }
}

/// serde_derive counts a field's aliases among its names: such a type is refused with a reason
/// rather than described with names paired with the wrong fields (it printed `{"a_old": 1,
/// "x": 2}` for `{x: 1, y: 2}`, and `put` refused the right form).
#[test]
fn a_field_alias_is_refused_with_a_reason() {
    #[derive(Serialize, Deserialize)]
    #[allow(dead_code)]
    struct Aliased {
        #[serde(alias = "a_old")]
        x: i32,
        y: i32,
    }
    let error = Schema::of_serde::<Aliased>()
        .expect_err("refused")
        .to_string();
    assert!(error.contains("#[serde(alias)]"), "{error}");
    // Also in a struct variant, which was described as `Move { speed, v }`.
    #[derive(Serialize, Deserialize)]
    #[allow(dead_code)]
    enum Command {
        Stop,
        Move {
            #[serde(alias = "v")]
            speed: f64,
            turn: f64,
        },
    }
    let error = Schema::of_serde::<Command>()
        .expect_err("refused")
        .to_string();
    assert!(
        error.contains("#[serde(alias)]") && error.contains("Command"),
        "{error}"
    );
}
