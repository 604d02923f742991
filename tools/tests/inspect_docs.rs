//! docs/debugging.md cannot rot: every `bus-inspect` line of its ```sh blocks runs against a
//! live bus with the slots the guide describes, and must exit 0; and every command of
//! `bus-inspect` appears in the guide.

mod common;

use std::process::Command;

use common::{TestBus, WATCHDOG};

const GUIDE: &str = include_str!("../../docs/debugging.md");

/// The lines of the guide's ```sh blocks.
fn sh_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if in_sh {
            if trimmed.starts_with("```") {
                in_sh = false;
            } else if !trimmed.is_empty() && !trimmed.starts_with('#') {
                lines.push(trimmed.to_owned());
            }
        } else if trimmed == "```sh" {
            in_sh = true;
        }
    }
    lines
}

#[test]
fn every_command_in_the_debugging_guide_runs() {
    let commands = sh_lines(GUIDE);
    assert!(commands.len() >= 10, "too few commands found: {commands:?}");
    for c in &commands {
        assert!(
            c.starts_with("bus-inspect "),
            "not a bus-inspect command: {c}"
        );
    }
    // Every command of the tool is shown at least once.
    for sub in [
        "list",
        "info",
        "get",
        "watch",
        "hz",
        "bw",
        "wait",
        "put",
        "endpoints",
        "graph",
        "stats",
        "doctor",
        "clean",
    ] {
        assert!(
            commands
                .iter()
                .any(|c| c.split_whitespace().nth(1) == Some(sub)),
            "the guide never runs `bus-inspect {sub}`"
        );
    }

    let mut t = TestBus::new();
    t.start_registry();
    // The bus the guide describes, as its `demo_bus` example makes it.
    let _demo = tools::demo_bus::start(&t.bus(), WATCHDOG).expect("the guide's bus");
    common::eventually("the guide's bus is ready", || {
        let out = t.inspect(&["list", "--json"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // The guide's three slots and the registry's directory.
        text.lines().count() == 4
            && text.contains("\"name\":\"/demo/counter\"")
            && text
                .lines()
                .any(|l| l.contains("/demo/config") && l.contains("\"writer\":\"Gone\""))
    });

    let dir = common::bin("bus-inspect")
        .parent()
        .expect("binary directory")
        .to_owned();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for c in &commands {
        let out = Command::new("sh")
            .args(["-c", c])
            .env("PATH", &path)
            .env("BUS_DOMAIN", t.domain.as_str())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run sh");
        assert!(
            out.status.success(),
            "`{c}` failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "`{c}` printed nothing");
    }
    // The guide's put reached the slot.
    let out = t.inspect(&["get", "/demo/config", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value, serde_json::json!({"max_speed": 0.5, "mode": "slow"}));
}
