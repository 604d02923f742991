//! The demo's processes (registry, manager, two arbiters, simulator, three applications, with
//! the shipped example configuration in scripts/config) started in 10 random orders (seeded)
//! all reach the same ownership.

#[path = "../../tools/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::TestBus;
use serde_json::{json, Value};

fn config(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts/config")
        .join(rel)
}

/// BATON_APP_ARGS of an application's env file, split into arguments.
fn app_args(name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(config(&format!("controllers/{name}.env"))).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("BATON_APP_ARGS="))
        .expect("BATON_APP_ARGS");
    line.split_whitespace().map(str::to_owned).collect()
}

/// A tiny deterministic generator (xorshift64*), so the orders are the same on every run.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }
}

#[derive(Clone, Copy, Debug)]
enum P {
    Registry,
    Manager,
    Arm,
    Drive,
    Sim,
    App(&'static str),
}

fn block(t: &TestBus, arbiter: &str) -> Option<Value> {
    let out = t.inspect(&["get", &format!("/robot/arbiter/{arbiter}"), "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn ten_seeded_start_orders_reach_the_same_ownership() {
    let mut rng = Rng(0x5eed_ba70);
    let all = [
        P::Registry,
        P::Manager,
        P::Arm,
        P::Drive,
        P::Sim,
        P::App("teleop"),
        P::App("autonomy"),
        P::App("payload"),
    ];
    let want_arm =
        json!({"turret": "autonomy", "shoulder": "teleop", "elbow1": "payload", "elbow2": null});
    let want_drive = json!({"left": "teleop", "right": "teleop"});
    for round in 0..10 {
        let mut order = all.to_vec();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let mut t = TestBus::new();
        for p in &order {
            let path = |rel: &str| config(rel).to_string_lossy().into_owned();
            match p {
                P::Registry => t.start_registry(),
                P::Manager => {
                    t.spawn_bin("robot-manager", &["--config", &path("manager.toml")]);
                }
                P::Arm => {
                    t.spawn_bin("arbiter", &["--config", &path("arbiters/arm.toml")]);
                }
                P::Drive => {
                    t.spawn_bin("arbiter", &["--config", &path("arbiters/drive.toml")]);
                }
                P::Sim => {
                    t.spawn_bin("robot-sim", &[]);
                }
                P::App(name) => {
                    let args = app_args(name);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    t.spawn_bin("robot-controller", &args);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let deadline = Instant::now() + common::WATCHDOG;
        loop {
            let arm = block(&t, "arm");
            let drive = block(&t, "drive");
            let arm_ok = arm
                .as_ref()
                .is_some_and(|b| b["owners"] == want_arm && b["outcomes"]["teleop"] == "full");
            let drive_ok = drive.as_ref().is_some_and(|b| {
                b["owners"] == want_drive && b["outcomes"]["autonomy"] == "denied"
            });
            if arm_ok && drive_ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}, order {order:?}: arm {arm:?}, drive {drive:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("round {round}: {order:?} reached the expected ownership");
    }
}
