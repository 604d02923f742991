//! Benchmarks stopped early. A benchmark's child processes (its registry, its peers) and its
//! domain's shared memory go with its drop, which the default action of Ctrl-C never runs: an
//! interrupted `bus-bench` left 46 files in /dev/shm. `clean_up_on_stop` takes the stopping
//! signals instead and does what the drop would, from the signal's thread.

use std::path::PathBuf;
use std::time::{Duration, Instant};

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

/// The environment variable a benchmark (and the tests' harness) gives every process it starts:
/// its run's domain. A sweep kills only processes that carry it, never another program started
/// on a domain that happens to be named alike.
pub const RUN_MARK: &str = "BATON_BENCH_RUN";

/// Removes what runs of a benchmark killed with SIGKILL (or by a crash) left, which no signal
/// handler could clean: for every domain `<prefix><pid>` (or `<prefix><pid>-<more>`, as
/// bus-bench's slot series) whose `pid` no longer runs, the processes the run started (marked
/// with [`RUN_MARK`]: a registry-server, arbiters, peers, which outlive it) and then, once no
/// registry serves the domain, its shared memory and its directory `baton-<domain>` in the
/// temporary directory (`arbiter-bench`'s configs). This process's own pid counts as gone: a
/// name of it is an earlier process's of that pid. So it must run before the benchmark makes
/// anything; a benchmark calls it at start for its own naming, as `net-bench` sweeps its labs.
pub fn remove_abandoned_runs(prefix: &str) {
    let own = std::process::id();
    let abandoned = |domain: &str| {
        run_owner(prefix, domain).is_some_and(|pid| {
            pid == own || !std::path::Path::new(&format!("/proc/{pid}")).exists()
        })
    };
    let mut killed = Vec::new();
    let mut killed_domains = std::collections::HashSet::new();
    for (pid, domain) in marked_processes() {
        // Never this process, whatever mark it inherited.
        if pid == own || !abandoned(&domain) {
            continue;
        }
        let started = bus::process::start_time(pid);
        if kill(Pid::from_raw(pid as i32), Signal::SIGKILL).is_ok() {
            killed.extend(started.map(|s| (pid, s)));
            killed_domains.insert(domain);
        }
    }
    // A registry killed but not yet gone could still make a segment.
    let deadline = Instant::now() + KILLED_GO_WITHIN;
    while killed
        .iter()
        .any(|&(pid, started)| bus::process::is_alive(pid, started))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    // A registry that still serves such a domain was not started by a benchmark (or not
    // marked): what it serves stays.
    let mut served = std::collections::HashMap::new();
    let mut unserved_abandoned = |domain: &str| {
        abandoned(domain)
            && !*served.entry(domain.to_owned()).or_insert_with(|| {
                let patience = if killed_domains.contains(domain) {
                    KILLED_GO_WITHIN
                } else {
                    Duration::ZERO
                };
                served_after(domain, patience)
            })
    };
    let files = std::fs::read_dir(bus::names::SHM_DIR).into_iter().flatten();
    for file in files.flatten() {
        let name = file.file_name().to_string_lossy().into_owned();
        // A slot's segment (`baton.<domain>~...`, `%...`) or a raw baseline's
        // (`baton.<domain>.raw-...`).
        let domain = Domain::of_segment_file(&name)
            .map(|d| d.as_str().to_owned())
            .or_else(|| {
                let rest = name.strip_prefix("baton.")?;
                Some(rest.split_once(".raw-")?.0.to_owned())
            });
        if domain.is_some_and(|d| unserved_abandoned(&d)) {
            let _ = std::fs::remove_file(file.path());
        }
    }
    let dirs = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten();
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if name
            .strip_prefix("baton-")
            .is_some_and(&mut unserved_abandoned)
        {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
}

/// How long the processes of a killed run are given to be gone.
const KILLED_GO_WITHIN: Duration = Duration::from_secs(2);

/// Whether a registry serves `domain` still after `patience` (or as soon as none does): one
/// just killed may answer for a moment, its socket going with the last of its threads, after
/// its main thread shows as gone.
fn served_after(domain: &str, patience: Duration) -> bool {
    let Ok(domain) = Domain::new(domain) else {
        return false;
    };
    let deadline = Instant::now() + patience;
    loop {
        let answers = bus::protocol::connect(&domain).is_ok();
        if !answers || Instant::now() >= deadline {
            return answers;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pid in a benchmark's domain name: `bench-812` and `bench-812-slots10` give 812 for the
/// prefix `bench-`; None for other names.
pub fn run_owner(prefix: &str, domain: &str) -> Option<u32> {
    let rest = domain.strip_prefix(prefix)?;
    let digits = rest.split_once('-').map_or(rest, |(pid, _)| pid);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Every process of this machine (of this user, or every user's for root) that carries
/// [`RUN_MARK`], with the domain it names.
fn marked_processes() -> Vec<(u32, String)> {
    let mark = format!("{RUN_MARK}=");
    let mut found = Vec::new();
    for pid in bus::process::pids() {
        // Another user's process cannot be read (or killed) by an unprivileged one.
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let domain = environ
            .split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(mark.as_bytes()))
            .map(|d| String::from_utf8_lossy(d).into_owned());
        if let Some(domain) = domain {
            found.push((pid, domain));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::run_owner;

    #[test]
    fn only_a_benchmarks_own_names_have_an_owner() {
        assert_eq!(run_owner("bench-", "bench-812"), Some(812));
        assert_eq!(run_owner("bench-", "bench-812-slots10"), Some(812));
        assert_eq!(run_owner("arbbench-", "arbbench-7"), Some(7));
        for other in [
            "bench-",
            "bench-x1",
            "bench-12x",
            "default",
            "mybench-812",
            "bench",
        ] {
            assert_eq!(run_owner("bench-", other), None, "{other}");
        }
    }
}
