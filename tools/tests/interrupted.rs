//! Benchmarks stopped with Ctrl-C: killed by the signal they left their registry and peers'
//! shared memory in /dev/shm (46 files for `bus-bench`, 7 and a config directory for
//! `arbiter-bench`). They remove them (the slot series' domains of `bus-bench` too), kill their
//! children and exit 130. Killed with SIGKILL, they cannot: the next run of the same benchmark
//! removes what they left. And as they remove all of their domain's files, `bus-bench` given a
//! domain that already holds slots refuses it instead.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::WATCHDOG;

/// Held by every test here: each benchmark run sweeps, at its start, what killed runs left, and
/// could take what another test's benchmark, killed on purpose, left before that test looked.
/// (`cargo nextest` runs them one at a time for the same reason: `.config/nextest.toml`.)
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The files in /dev/shm of the domain `prefix` names (`baton.<domain>`): its slots (`~`,
/// `%`) and raw baselines (`.raw-`), not another domain's that begins alike.
fn files_of(prefix: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|f| {
            f.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(['~', '%', '.']))
        })
        .collect()
}

/// Starts `program args` and returns once it has files in /dev/shm whose names start with
/// `prefix` (the `{pid}` in it replaced: its registry runs) and a moment more, with that
/// prefix.
fn started(program: &str, args: &[&str], prefix: &str) -> (std::process::Child, String) {
    let mut child = Command::new(common::bin(program))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the benchmark");
    let prefix = prefix.replace("{pid}", &child.id().to_string());
    let deadline = Instant::now() + WATCHDOG;
    while files_of(&prefix).is_empty() {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            panic!("{program} made no shared memory");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    (child, prefix)
}

/// Runs `program args`, sends it SIGINT once it runs (`started`), and checks that it exits 130
/// leaving no such file, nor the directory `dir` (likewise) if given.
fn interrupted(program: &str, args: &[&str], prefix: &str, dir: Option<&str>) {
    let (mut child, prefix) = started(program, args, prefix);
    let pid = child.id();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = child.wait().expect("wait for the benchmark");
    assert_eq!(status.code(), Some(130), "{program}: {status:?}");
    let left = files_of(&prefix);
    assert!(left.is_empty(), "{program} left {left:?}");
    if let Some(dir) = dir {
        let dir = std::env::temp_dir().join(dir.replace("{pid}", &pid.to_string()));
        assert!(!dir.exists(), "{program} left {}", dir.display());
    }
}

/// The processes whose command line holds `--domain <domain>`.
fn processes_of(domain: &str) -> Vec<u32> {
    bus::process::pids()
        .into_iter()
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.windows(2)
                .any(|w| w[0] == b"--domain" && w[1] == domain.as_bytes())
                .then_some(pid)
        })
        .collect()
}

/// Runs `program args` and kills it with SIGKILL once it runs (`started`): no handler runs,
/// and its registry (and arbiters) run on with its memory, and its directory `dir` stays.
/// Then runs `program again` to its end, and checks that it removed all of that.
fn killed_then_swept(program: &str, args: &[&str], again: &[&str], domain: &str, dir: bool) {
    /// On a failure, what the second run should have removed.
    struct Leftovers(String, Option<std::path::PathBuf>);
    impl Drop for Leftovers {
        fn drop(&mut self) {
            for pid in processes_of(&self.0) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            for f in files_of(&format!("baton.{}", self.0)) {
                let _ = std::fs::remove_file(format!("/dev/shm/{f}"));
            }
            if let Some(dir) = &self.1 {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
    let (mut child, prefix) = started(program, args, &format!("baton.{domain}"));
    let domain = prefix
        .strip_prefix("baton.")
        .expect("the domain")
        .to_owned();
    child.kill().expect("SIGKILL");
    child.wait().expect("wait for the benchmark");
    let dir = dir.then(|| std::env::temp_dir().join(format!("baton-{domain}")));
    let _leftovers = Leftovers(domain.clone(), dir.clone());
    assert!(!files_of(&prefix).is_empty(), "{program} left no memory");
    assert!(
        !processes_of(&domain).is_empty(),
        "{program} left no process"
    );
    if let Some(dir) = &dir {
        assert!(dir.exists(), "{program} left no {}", dir.display());
    }
    let out = Command::new("timeout")
        .arg(WATCHDOG.as_secs().to_string())
        .arg(common::bin(program))
        .args(again)
        .output()
        .expect("run the benchmark again");
    assert!(out.status.success(), "{program} {again:?}: {out:?}");
    let left = files_of(&prefix);
    assert!(left.is_empty(), "{program} {again:?} left {left:?}");
    // Killed, its processes may take a moment to go.
    let deadline = Instant::now() + WATCHDOG;
    while !processes_of(&domain).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{:?} run on",
            processes_of(&domain)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(dir) = &dir {
        assert!(!dir.exists(), "{program} {again:?} left {}", dir.display());
    }
}

/// Killed with SIGKILL, a bus-bench left its registry running on its domain for good, and 46
/// files; the next bus-bench removes them.
#[test]
fn bus_bench_killed_leaves_what_the_next_one_removes() {
    let _one = one_at_a_time();
    killed_then_swept(
        "bus-bench",
        &["--only", "pingpong", "--iterations", "200000"],
        &["--quick", "--only", "throughput"],
        "bench-{pid}",
        false,
    );
}

/// The same for arbiter-bench: its registry and arbiters, its memory and its configs.
#[test]
fn arbiter_bench_killed_leaves_what_the_next_one_removes() {
    let _one = one_at_a_time();
    killed_then_swept(
        "arbiter-bench",
        &["--iterations", "5000"],
        &["--iterations", "10"],
        "arbbench-{pid}",
        true,
    );
}

#[test]
fn bus_bench_stopped_by_ctrl_c_removes_its_memory() {
    let _one = one_at_a_time();
    interrupted(
        "bus-bench",
        &["--only", "pingpong", "--iterations", "200000"],
        "baton.bench-{pid}",
        None,
    );
}

#[test]
fn arbiter_bench_stopped_by_ctrl_c_removes_its_memory() {
    let _one = one_at_a_time();
    interrupted(
        "arbiter-bench",
        &["--iterations", "5000"],
        "baton.arbbench-{pid}",
        Some("baton-arbbench-{pid}"),
    );
}

/// The publish group's slot series makes a domain of its own per slot count, which the
/// handler has to remove as well: stopped while it sets up the larger counts, the 10-slot
/// domain is already there.
#[test]
fn bus_bench_stopped_in_its_slot_series_removes_those_domains_too() {
    let _one = one_at_a_time();
    interrupted(
        "bus-bench",
        &["--only", "publish", "--iterations", "1000"],
        "baton.bench-{pid}-slots10",
        None,
    );
}

/// bus-bench removes every slot of its domain at the end: given a `--domain` that holds slots
/// already (another program's, left by a registry stopped), it deleted them unasked. It refuses
/// such a domain, and one whose slot series' domain holds slots, and removes nothing.
#[test]
fn bus_bench_refuses_a_named_domain_that_holds_slots_and_keeps_them() {
    let _one = one_at_a_time();
    let content: &[u8] = b"another program's slot";
    for (domain, planted) in [
        ("bbench-held", "baton.bbench-held~robot~pose"),
        ("bbench-held2", "baton.bbench-held2-slots100~robot~pose"),
    ] {
        let path = format!("/dev/shm/{planted}");
        std::fs::write(&path, content).expect("plant a slot file");
        let out = Command::new("timeout")
            .arg(WATCHDOG.as_secs().to_string())
            .arg(common::bin("bus-bench"))
            .args(["--domain", domain, "--quick", "--only", "publish"])
            .output()
            .expect("run bus-bench");
        let kept = std::fs::read(&path);
        let _ = std::fs::remove_file(&path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{domain}: {err}");
        assert!(
            err.contains("slot(s) in /dev/shm already"),
            "{domain}: {err}"
        );
        assert_eq!(kept.ok().as_deref(), Some(content), "{domain}");
        assert!(files_of(&format!("baton.{domain}")).is_empty(), "{domain}");
    }
}

/// The sweep takes only runs whose process is gone: a bus-bench that runs keeps its registry
/// and memory while another runs from start to end, and still ends as it should.
#[test]
fn a_running_bus_bench_is_left_alone_by_the_next() {
    let _one = one_at_a_time();
    let (mut first, prefix) = started(
        "bus-bench",
        &["--only", "pingpong", "--iterations", "200000"],
        "baton.bench-{pid}",
    );
    let domain = prefix
        .strip_prefix("baton.")
        .expect("the domain")
        .to_owned();
    // Its registry: its peers come and go with its rounds.
    let registry = |pids: Vec<u32>| -> Vec<u32> {
        pids.into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "registry-server")
            })
            .collect()
    };
    let before = registry(processes_of(&domain));
    let out = Command::new("timeout")
        .arg(WATCHDOG.as_secs().to_string())
        .arg(common::bin("bus-bench"))
        .args(["--quick", "--only", "throughput"])
        .output()
        .expect("run a second bus-bench");
    let after = registry(processes_of(&domain));
    let files = files_of(&prefix);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = first.wait().expect("wait for the first bus-bench");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        before.len(),
        1,
        "the first bus-bench's registries: {before:?}"
    );
    assert_eq!(
        before, after,
        "the second bus-bench killed the first's registry"
    );
    assert!(
        !files.is_empty(),
        "the second bus-bench removed the first's memory"
    );
    assert_eq!(status.code(), Some(130), "{status:?}");
}
