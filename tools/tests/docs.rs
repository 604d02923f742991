//! The guides cannot rot: every ```sh block of docs/application.md, docs/configuring.md and
//! docs/deploying.md runs (with `sh -e`) against a live robot made of the shipped example
//! configuration (registry, manager, arm and drive arbiters, simulator) and must succeed; and
//! the Rust example in docs/application.md is exactly `controllers/examples/wave.rs`.
//!
//! The blocks run in a scratch directory that looks like a built checkout: `scripts/` and
//! `docs/` of this repository, and `target/debug` pointing at the binaries under test; the
//! binaries are also first on PATH. `text` blocks (commands that need a running systemd) are
//! not run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::TestBus;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The fenced blocks of `lang` in a Markdown file.
fn blocks(markdown: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start() == format!("```{lang}") => current = Some(String::new()),
            Some(block) if line.trim_start() == "```" => {
                out.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    out
}

/// A live robot on a fresh domain, from scripts/config.
fn robot() -> TestBus {
    let mut t = TestBus::new();
    t.start_registry();
    let config = |rel: &str| {
        repo()
            .join("scripts/config")
            .join(rel)
            .to_string_lossy()
            .into_owned()
    };
    t.spawn_bin("robot-manager", &["--config", &config("manager.toml")]);
    t.spawn_bin("arbiter", &["--config", &config("arbiters/arm.toml")]);
    t.spawn_bin("arbiter", &["--config", &config("arbiters/drive.toml")]);
    t.spawn_bin("robot-sim", &[]);
    // The arbiters publish without waiting for the manager: wait for both.
    common::eventually("the manager and the arm arbiter publish", || {
        ["/robot/manager", "/robot/arbiter/arm"]
            .iter()
            .all(|name| t.inspect(&["get", name, "--json"]).status.success())
    });
    t
}

/// A directory that looks like a built checkout (see the module comment).
fn checkout_view(t: &TestBus) -> PathBuf {
    let view = t.dir().join("checkout");
    std::fs::create_dir_all(view.join("target")).unwrap();
    let bin_dir = common::bin("registry-server")
        .parent()
        .unwrap()
        .to_path_buf();
    std::os::unix::fs::symlink(repo().join("scripts"), view.join("scripts")).unwrap();
    std::os::unix::fs::symlink(repo().join("docs"), view.join("docs")).unwrap();
    std::os::unix::fs::symlink(&bin_dir, view.join("target/debug")).unwrap();
    view
}

fn run_blocks(doc: &str) {
    let text = std::fs::read_to_string(repo().join("docs").join(doc)).unwrap();
    let sh = blocks(&text, "sh");
    assert!(!sh.is_empty(), "{doc} has no sh block");
    let t = robot();
    let view = checkout_view(&t);
    let bin_dir = common::bin("registry-server")
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for block in sh {
        let started = Instant::now();
        let mut child = Command::new("sh")
            .args(["-e", "-c", &block])
            .current_dir(&view)
            .env("PATH", &path)
            .env("BUS_DOMAIN", t.domain.as_str())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > common::WATCHDOG {
                let _ = child.kill();
                panic!(
                    "{doc}: block did not finish within {:?}:\n{block}",
                    common::WATCHDOG
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{doc}: block failed:\n{block}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "{doc}: ok:\n{block}{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn the_application_guide_runs_and_shows_the_real_example() {
    let text = std::fs::read_to_string(repo().join("docs/application.md")).unwrap();
    let example = std::fs::read_to_string(repo().join("controllers/examples/wave.rs")).unwrap();
    assert_eq!(
        blocks(&text, "rust"),
        vec![example],
        "docs/application.md shows another program than controllers/examples/wave.rs"
    );
    run_blocks("application.md");
}

#[test]
fn the_configuration_guide_runs() {
    run_blocks("configuring.md");
}

#[test]
fn the_deployment_guide_runs() {
    run_blocks("deploying.md");
}
