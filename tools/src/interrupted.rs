//! Benchmarks stopped early. A benchmark's child processes (its registry, its peers) and its
//! domain's shared memory go with its drop, which the default action of Ctrl-C never runs: an
//! interrupted `bus-bench` left 46 files in /dev/shm. `clean_up_on_stop` takes the stopping
//! signals instead and does what the drop would, from the signal's thread.

use std::path::PathBuf;

use bus::Domain;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The exit status a shell gives a process killed by `signal` (130 for Ctrl-C), for a program
/// that cleaned up after it instead.
pub fn status_after(signal: &str) -> i32 {
    match signal {
        "SIGHUP" => 128 + 1,
        "SIGTERM" => 128 + 15,
        _ => 128 + 2,
    }
}

/// Takes SIGINT, SIGTERM and SIGHUP for the whole process (call it first in `main`, before any
/// thread starts: `daemon::on_stop_or_hangup`). On the first, `program` says so, kills every
/// child process with SIGKILL (they inherit the signals blocked: each must be killed, or take
/// them itself), removes `domain`'s segments (its slots, and the raw baselines'
/// `baton.<domain>.raw-*`) and the directories `dirs`, runs `also` (a peer library's files),
/// and exits with `status_after`.
pub fn clean_up_on_stop(
    program: &'static str,
    domain: Domain,
    dirs: Vec<PathBuf>,
    also: impl FnOnce() + Send + 'static,
) -> Result<(), String> {
    daemon::on_stop_or_hangup(daemon::Hangup::Stops, move |signal| {
        eprintln!("{program}: stopped on {signal}: removing its processes and shared memory");
        kill_children();
        let _ = domain.remove_all_segments();
        remove_raw_segments(&domain);
        for dir in &dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        also();
        std::process::exit(status_after(signal));
    })
}

/// SIGKILL to every child of every thread of this process (`/proc/self/task/*/children`).
fn kill_children() {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The raw baselines' segments of `domain` (`Harness::raw_segment`): not slots, so not among
/// `Domain::remove_all_segments`'s.
fn remove_raw_segments(domain: &Domain) {
    let prefix = format!("baton.{domain}.raw-");
    let Ok(files) = std::fs::read_dir(bus::names::SHM_DIR) else {
        return;
    };
    for file in files.flatten() {
        if file.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(file.path());
        }
    }
}
