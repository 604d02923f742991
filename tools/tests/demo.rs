//! The demo runs to completion and its narration shows the ownership changes it promises; it
//! leaves no shared memory behind. Also on two hosts (namespaces; the tests run as root), and
//! when Ctrl-C stops it early.

mod common;

use std::process::Command;

fn run_demo(args: &[&str]) -> String {
    let child = Command::new(common::bin("baton-demo"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "demo failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left(pid);
    text
}

/// The demo's domain is named after its pid: nothing of it may remain in /dev/shm.
fn assert_nothing_left(pid: u32) {
    let prefix = format!("baton.demo{pid}");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&format!("{prefix}~")) || n.starts_with(&format!("{prefix}%"))
        })
        .collect();
    assert!(left.is_empty(), "shared memory left behind: {left:?}");
}

/// The narrator's lines for `arbiter` after the script line containing `after`.
fn narrated_after<'a>(text: &'a str, after: &str, arbiter: &str) -> Vec<&'a str> {
    let start = text
        .find(after)
        .unwrap_or_else(|| panic!("no step {after:?} in:\n{text}"));
    text[start..]
        .lines()
        .filter(|l| l.contains(&format!("{arbiter:<5} owners:")))
        .collect()
}

fn check_story(text: &str) {
    let eventually = |after: &str, arbiter: &str, facts: &[&str]| {
        let lines = narrated_after(text, after, arbiter);
        assert!(
            lines.iter().any(|l| facts.iter().all(|f| l.contains(f))),
            "after {after:?}, {arbiter} never showed {facts:?}:\n{text}"
        );
    };
    eventually(
        "autonomy starts",
        "drive",
        &["left=autonomy", "right=autonomy", "autonomy full"],
    );
    eventually(
        "payload starts",
        "arm",
        &[
            "turret=autonomy",
            "shoulder=payload",
            "elbow1=payload",
            "payload partial",
        ],
    );
    eventually(
        "teleop starts",
        "drive",
        &["left=teleop", "autonomy denied", "teleop full"],
    );
    eventually(
        "teleop starts",
        "arm",
        &["shoulder=teleop", "elbow1=payload", "turret=autonomy"],
    );
    eventually(
        "teleop exits",
        "arm",
        &["shoulder=payload", "teleop expired"],
    );
    eventually("teleop exits", "drive", &["left=autonomy", "autonomy full"]);
    eventually(
        "payload crashes",
        "arm",
        &[
            "shoulder=(safe)",
            "elbow1=(safe)",
            "payload expired",
            "turret=autonomy",
        ],
    );
    assert!(text.contains("none left"), "{text}");
}

#[test]
fn the_demo_narrates_takeover_release_and_crash() {
    check_story(&run_demo(&[]));
}

#[test]
fn the_demo_runs_with_the_payload_on_a_second_host() {
    let text = run_demo(&["--hosts", "2"]);
    assert!(text.contains("on host `payload`"), "{text}");
    check_story(&text);
}

/// Ctrl-C in the middle of the demo killed it and left its processes' slots in /dev/shm (and,
/// on two hosts, its namespaces). It stops everything, removes what it made, says so, and
/// exits 130 as a shell reports a Ctrl-C.
#[test]
fn the_demo_stopped_by_ctrl_c_cleans_up() {
    let command = Command::new(common::bin("baton-demo"));
    let (pid, status, seen) = common::interrupt_after(command, "payload starts");
    assert_eq!(status.code(), Some(130), "{seen:?}");
    let last = seen.last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("stopped on SIGINT: stopped every process and removed"),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|l| l.contains("teleop exits")), "{seen:?}");
    assert_nothing_left(pid);
}
