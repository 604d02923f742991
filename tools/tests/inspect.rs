//! `bus-inspect list` and `get --json` against a live bus, and the registry's endpoint listing
//! (including removal of a killed process's endpoints).

mod common;

use common::{TestBus, WATCHDOG};
use nix::sys::signal::Signal;

use common::sample::{Mode, Status};

#[repr(C)]
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    bytemuck::Pod,
    bytemuck::Zeroable,
    serde::Serialize,
    serde::Deserialize,
)]
struct Wheel {
    left: f64,
    right: f64,
    stamp: u32,
    flags: u32,
}

/// Aligned beyond its fields (for SIMD), without padding.
#[repr(C, align(16))]
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    bytemuck::Pod,
    bytemuck::Zeroable,
    serde::Serialize,
    serde::Deserialize,
)]
struct Quaternion {
    v: [f32; 4],
}

/// An over-aligned plain-old-data type (refused as "not #[repr(C)]" before) goes through and
/// reads back, in a subscription and in the tool.
#[test]
fn an_over_aligned_pod_type_goes_through() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    // An over-aligned plain-old-data type goes through and reads back, here and in the tool.
    let q = Quaternion {
        v: [0.5, -0.5, 0.25, 1.0],
    };
    let mut qp = bus.publish_pod::<Quaternion>("/robot/attitude").unwrap();
    let mut qs = bus.subscribe_pod::<Quaternion>("/robot/attitude").unwrap();
    qp.wait_bound(WATCHDOG).unwrap();
    qp.write(&q).unwrap();
    assert!(qs.wait_update(WATCHDOG).unwrap());
    assert_eq!(qs.value(), Some(&q));
    let out = t.inspect(&["get", "/robot/attitude", "--json"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got, serde_json::to_value(q).unwrap());
}

#[test]
fn list_and_get_decode_without_the_rust_type() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let status = Status {
        name: "arm".into(),
        joints: vec![0.5, -1.0],
        mode: Mode::Moving { speed: 0.25 },
        battery: Some(87),
    };
    let mut p = bus.publish::<Status>("/robot/status").unwrap();
    p.write(&status).unwrap();
    let mut w = bus.publish_pod::<Wheel>("/robot/wheel").unwrap();
    let wheel = Wheel {
        left: 1.5,
        right: -2.0,
        stamp: 9,
        flags: 1,
    };
    w.write(&wheel).unwrap();
    let _empty = bus.publish::<u64>("/robot/empty").unwrap();
    p.wait_bound(WATCHDOG).unwrap();
    w.wait_bound(WATCHDOG).unwrap();

    let out = t.inspect(&["get", "/robot/status", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line of JSON: {stdout}");
    let got: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(got, serde_json::to_value(&status).unwrap());

    let out = t.inspect(&["get", "/robot/wheel", "--json"]);
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got, serde_json::to_value(wheel).unwrap());

    let out = t.inspect(&["get", "/robot/empty", "--json"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no value yet"));
    let out = t.inspect(&["get", "/robot/missing", "--json"]);
    assert!(!out.status.success());

    let out = t.inspect(&["list", "--json"]);
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        // The registry's own directory slot is listed too.
        .filter(|r| r["name"] != bus::directory::DIRECTORY_SLOT)
        .collect();
    assert_eq!(rows.len(), 3);
    let row = rows.iter().find(|r| r["name"] == "/robot/status").unwrap();
    assert_eq!(row["sequence"], 1);
    assert!(row["type"].as_str().unwrap().ends_with("Status"));
    assert_eq!(row["writer_alive"], true);
    assert!(row["age_s"].as_f64().unwrap() >= 0.0);
    let empty = rows.iter().find(|r| r["name"] == "/robot/empty").unwrap();
    assert_eq!(empty["sequence"], 0);
    assert!(empty["age_s"].is_null());
    // The table form has a header and one line per slot (with the directory).
    let out = t.inspect(&["list"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
}

#[test]
fn the_registry_lists_endpoints_and_forgets_dead_processes() {
    let mut t = TestBus::new();
    t.start_registry();
    let bus = t.bus();
    let _sub = bus.subscribe::<tools::stress::Checked>("/ep").unwrap();
    let writer = t.spawn_stress(&[
        "write",
        "--name",
        "/ep",
        "--count",
        "1",
        "--max-size",
        "8",
        "--linger",
        "30",
    ]);
    let reader = t.spawn_stress(&["read", "--name", "/ep", "--seconds", "30", "--wait"]);
    let listing = || {
        let out = t.inspect(&["endpoints", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let line = text.lines().find(|l| l.contains("\"/ep\"")).unwrap_or("{}");
        serde_json::from_str::<serde_json::Value>(line).unwrap()
    };
    common::eventually("three endpoints, two connections", || {
        let l = listing();
        l["endpoints"].as_array().is_some_and(|e| e.len() == 3) && l["connections"] == 2
    });
    t.signal(reader, Signal::SIGKILL);
    t.signal(writer, Signal::SIGKILL);
    common::eventually("dead endpoints removed", || {
        listing()["endpoints"]
            .as_array()
            .is_some_and(|e| e.len() == 1)
    });
    let out = t.inspect(&["list", "--json"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let row: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["name"] == "/ep")
        .expect("/ep listed");
    assert_eq!(row["writer"], "Gone");
    assert_eq!(row["writer_alive"], false);
}
