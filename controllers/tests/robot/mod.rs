//! The robot of the arbitration tests: a scratch bus with the manager's and the arm arbiter's
//! files, and the real programs started on it; the arm's ownership read through
//! `bus-inspect get /robot/arbiter/arm --json`.

#![allow(dead_code)]

use std::time::Instant;

use serde_json::{json, Value};

use super::common::{self, TestBus};

pub const ARM: &str = r#"
name = "arm"
[[resources]]
name = "turret"
min = -3.0
max = 3.0
[[resources]]
name = "shoulder"
min = -1.57
max = 1.57
[[resources]]
name = "elbow1"
min = -2.5
max = 2.5
[[resources]]
name = "elbow2"
min = -2.5
max = 2.5
"#;

pub fn manager_toml(order: &[&str]) -> String {
    format!("controllers = {order:?}\narbiters = [\"arm\"]\nunlisted = \"ignore\"\n")
}

/// The same with unlisted controllers placed last.
pub fn manager_toml_unlisted_last(order: &[&str]) -> String {
    manager_toml(order).replace("\"ignore\"", "\"last\"")
}

pub struct Robot {
    pub t: TestBus,
    pub manager_file: std::path::PathBuf,
    pub arm_file: std::path::PathBuf,
}

impl Robot {
    pub fn new(order: &[&str]) -> Robot {
        let t = TestBus::new();
        let dir = t.dir();
        let manager_file = dir.join("manager.toml");
        let arm_file = dir.join("arm.toml");
        std::fs::write(&manager_file, manager_toml(order)).unwrap();
        std::fs::write(&arm_file, ARM).unwrap();
        Robot {
            t,
            manager_file,
            arm_file,
        }
    }

    /// A robot with the registry, the manager and the arm arbiter running.
    pub fn running(order: &[&str]) -> Robot {
        Robot::running_with_children(order).0
    }

    /// `running`, with the manager's and the arbiter's child indices (to signal or read them).
    pub fn running_with_children(order: &[&str]) -> (Robot, usize, usize) {
        let mut r = Robot::new(order);
        r.t.start_registry();
        let manager = r.manager();
        let arbiter = r.arbiter();
        (r, manager, arbiter)
    }

    /// A running robot whose manager places unlisted controllers last; also the manager's
    /// child index.
    pub fn running_unlisted_last(order: &[&str]) -> (Robot, usize) {
        let mut r = Robot::new(order);
        std::fs::write(&r.manager_file, manager_toml_unlisted_last(order)).unwrap();
        r.t.start_registry();
        let manager = r.manager();
        r.arbiter();
        (r, manager)
    }

    pub fn manager(&mut self) -> usize {
        let f = self.manager_file.to_str().unwrap().to_owned();
        self.t.spawn_bin("robot-manager", &["--config", &f])
    }

    pub fn arbiter(&mut self) -> usize {
        self.arbiter_with_env(&[])
    }

    /// The arm's arbiter with these environment variables (test switches) set.
    pub fn arbiter_with_env(&mut self, env: &[(&str, &str)]) -> usize {
        let f = self.arm_file.to_str().unwrap().to_owned();
        self.t
            .spawn_with_env(common::bin("arbiter"), &["--config", &f], env)
    }

    pub fn controller(&mut self, name: &str, status: &str, sets: &[&str], ttl_ms: u64) -> usize {
        let ttl = ttl_ms.to_string();
        let mut args = vec!["--name", name, "--status", status, "--ttl-ms", &ttl];
        for s in sets {
            args.extend(["--set", s]);
        }
        self.t.spawn_bin("robot-controller", &args)
    }

    /// `robot-controller` x, compromising, asking for the turret for `seconds`.
    pub fn x_holding_the_turret(&mut self, seconds: &str) -> usize {
        self.t
            .spawn_bin("robot-controller", &x_holding_the_turret_args(seconds))
    }

    /// The patents' three controllers.
    pub fn abn(&mut self, ttl_ms: u64) -> [usize; 3] {
        [
            self.controller("a", "non_compromising", &["arm/shoulder=0.3"], ttl_ms),
            self.controller(
                "b",
                "compromising",
                &["arm/shoulder=0.5", "arm/turret=1.0"],
                ttl_ms,
            ),
            self.controller(
                "n",
                "non_compromising",
                &["arm/shoulder=0.1", "arm/elbow1=0.2", "arm/elbow2=0.3"],
                ttl_ms,
            ),
        ]
    }

    /// The arbiter's memory block as `bus-inspect get --json` prints it.
    pub fn arm_block(&self) -> Option<Value> {
        let out = self.t.inspect(&["get", "/robot/arbiter/arm", "--json"]);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).expect("one line of JSON"))
    }

    /// Waits until the arm's owners and outcomes are exactly these.
    pub fn expect(&self, what: &str, owners: Value, outcomes: Value) {
        let mut last = None;
        let deadline = Instant::now() + common::WATCHDOG;
        loop {
            if let Some(block) = self.arm_block() {
                if block["owners"] == owners && block["outcomes"] == outcomes {
                    return;
                }
                last = Some(block);
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: expected owners {owners} outcomes {outcomes}, last block {}",
                    last.map_or("none".into(), |b| b.to_string())
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    pub fn expect_patent_example(&self, what: &str) {
        self.expect(
            what,
            json!({"turret": "b", "shoulder": "a", "elbow1": null, "elbow2": null}),
            json!({"a": "full", "b": "partial", "n": "denied"}),
        );
    }
}

/// `/robot/manager` as `bus-inspect get --json` prints it.
pub fn manager_order(r: &Robot) -> Option<Value> {
    let out = r.t.inspect(&["get", "/robot/manager", "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("one line of JSON"))
}

/// Whether the manager's order lists exactly `controllers`.
pub fn order_is(r: &Robot, controllers: Value) -> bool {
    manager_order(r).is_some_and(|m| m["controllers"] == controllers)
}

/// The arguments of `Robot::x_holding_the_turret`.
pub fn x_holding_the_turret_args(seconds: &str) -> [&str; 8] {
    [
        "--name",
        "x",
        "--status",
        "compromising",
        "--set",
        "arm/turret=1",
        "--duration-s",
        seconds,
    ]
}
