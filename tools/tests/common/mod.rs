//! Harness for tests across real processes: a fresh bus domain per test, the real
//! `registry-server`, `bus-stress` and `bus-inspect` binaries, and cleanup (children killed,
//! the domain's shared memory removed) even when the test fails.

#![allow(dead_code)]

pub mod output;
pub mod sample;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use bus::Domain;

/// Longest any single wait in a test may take before the test fails.
pub const WATCHDOG: Duration = Duration::from_secs(20);

/// The processes `pid` started that still run (its threads' children).
pub fn children_of(pid: i32) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// Every binary of the workspace (a test of all of them names each).
pub const PROGRAMS: [&str; 11] = [
    "registry-server",
    "robot-manager",
    "arbiter",
    "robot-controller",
    "robot-sim",
    "bus-inspect",
    "bus-stress",
    "baton-demo",
    "bus-bench",
    "net-bench",
    "arbiter-bench",
];

pub fn bin(name: &str) -> PathBuf {
    // Cargo puts every workspace binary in the directory above the test executable's `deps/`.
    let test_exe = std::env::current_exe().expect("test executable path");
    let dir = test_exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not built; run the tests with `cargo nextest run --workspace` (or cargo test --workspace)",
        path.display()
    );
    path
}

pub struct TestBus {
    pub domain: Domain,
    children: Vec<Option<Child>>,
    registry: Option<usize>,
}

/// The prefix of every test domain, `t<pid>-<n>` (the pid of the test process that made it).
pub const DOMAIN_PREFIX: &str = "t";

impl TestBus {
    pub fn new() -> TestBus {
        // A test process killed before its drops ran (nextest's timeout, a SIGKILL of
        // `cargo test`) left its domains: their segments, scratch directories and any child
        // still running. The first bus of every test process removes those of test processes
        // that are gone, before it makes a domain (its own pid would count as gone).
        static SWEEP: Once = Once::new();
        SWEEP.call_once(|| tools::interrupted::remove_abandoned_runs(DOMAIN_PREFIX));
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{DOMAIN_PREFIX}{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let domain = Domain::new(&name).expect("test domain name");
        let _ = domain.remove_all_segments();
        TestBus {
            domain,
            children: Vec::new(),
            registry: None,
        }
    }

    /// A scratch directory for this test's files (configs), removed on drop.
    pub fn dir(&self) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("baton-{}", self.domain));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    pub fn bus(&self) -> bus::Bus {
        bus::Bus::open(self.domain.clone()).expect("open bus")
    }

    /// Starts the registry and waits until it accepts connections.
    pub fn start_registry(&mut self) {
        self.start_registry_with(&[]);
    }

    /// Starts the registry with extra arguments and waits until it accepts connections.
    pub fn start_registry_with(&mut self, args: &[&str]) {
        let child = Command::new(bin("registry-server"))
            .args(["--domain", self.domain.as_str()])
            .args(args)
            .env("RUST_LOG", "warn")
            .env(tools::interrupted::RUN_MARK, self.domain.as_str())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn registry-server");
        self.children.push(Some(child));
        self.registry = Some(self.children.len() - 1);
        let deadline = Instant::now() + WATCHDOG;
        while bus::protocol::connect(&self.domain).is_err() {
            assert!(Instant::now() < deadline, "registry-server did not come up");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The registry's child index (for `signal`, `finish`); its output is not captured.
    pub fn registry(&self) -> usize {
        self.registry.expect("registry running")
    }

    /// Kills the registry with SIGKILL and reaps it.
    pub fn kill_registry(&mut self) {
        let i = self.registry.take().expect("registry running");
        let mut child = self.children[i].take().expect("registry child");
        child.kill().expect("kill registry");
        child.wait().expect("reap registry");
    }

    /// Starts `bus-stress` with the given arguments (domain added), stdout captured.
    pub fn spawn_stress(&mut self, args: &[&str]) -> usize {
        self.spawn(bin("bus-stress"), args)
    }

    /// Starts one of the workspace's binaries with `args` (domain added).
    pub fn spawn_bin(&mut self, name: &str, args: &[&str]) -> usize {
        self.spawn(bin(name), args)
    }

    /// Kills a child with SIGKILL and reaps it.
    pub fn kill(&mut self, child: usize) {
        if let Some(mut c) = self.children[child].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Output goes to files in the scratch directory (a pipe nobody drains could block a
    /// chatty child); `finish` reads them back.
    pub fn spawn(&mut self, program: PathBuf, args: &[&str]) -> usize {
        self.spawn_with_env(program, args, &[])
    }

    /// `spawn` with these environment variables set as well.
    pub fn spawn_with_env(
        &mut self,
        program: PathBuf,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> usize {
        let mut command = Command::new(program);
        command
            .args(args)
            .args(["--domain", self.domain.as_str()])
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        self.spawn_command(command)
    }

    /// `spawn` without the domain added: for a program that starts a bus program itself (the
    /// domain is then in `args`).
    pub fn spawn_with_args_only(&mut self, program: PathBuf, args: &[&str]) -> usize {
        let mut command = Command::new(program);
        command.args(args).env("RUST_LOG", "info");
        self.spawn_command(command)
    }

    fn spawn_command(&mut self, mut command: Command) -> usize {
        // Marked with its domain, so that a later test process's sweep kills it if this one
        // is killed without its drop (`remove_abandoned_runs`).
        command.env(tools::interrupted::RUN_MARK, self.domain.as_str());
        let n = self.children.len();
        let (out, err) = self.output_files(n);
        let child = command
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("spawn child");
        self.children.push(Some(child));
        n
    }

    fn output_files(&self, n: usize) -> (PathBuf, PathBuf) {
        let dir = self.dir();
        (
            dir.join(format!("child-{n}.out")),
            dir.join(format!("child-{n}.err")),
        )
    }

    /// What a child printed so far.
    pub fn stdout_of(&self, child: usize) -> String {
        std::fs::read_to_string(self.output_files(child).0).unwrap_or_default()
    }

    /// What a child logged so far.
    pub fn stderr_of(&self, child: usize) -> String {
        std::fs::read_to_string(self.output_files(child).1).unwrap_or_default()
    }

    /// Whether a child is still running (not exited, not reaped).
    pub fn is_running(&mut self, child: usize) -> bool {
        self.children[child]
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn pid(&self, child: usize) -> i32 {
        self.children[child].as_ref().expect("child running").id() as i32
    }

    pub fn signal(&self, child: usize, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid(child)), signal)
            .expect("signal");
    }

    /// Waits for a child to exit (watchdog-bounded) and returns its output.
    pub fn finish(&mut self, child: usize) -> Output {
        let mut process = self.children[child].take().expect("child not finished yet");
        let deadline = Instant::now() + WATCHDOG;
        let status = loop {
            if let Some(status) = process.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = process.kill();
                let _ = process.wait();
                panic!("child {child} did not finish within {WATCHDOG:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let (out, err) = self.output_files(child);
        Output {
            status,
            stdout: std::fs::read(out).unwrap_or_default(),
            stderr: std::fs::read(err).unwrap_or_default(),
        }
    }

    /// Publishes `value` on public slot `name` (once the registry bound it), and drops the
    /// publication: the slot keeps the value, its writer gone.
    pub fn leave_value(&self, name: &str, value: u64) {
        let bus = self.bus();
        let mut p = bus.publish::<u64>(name).expect("publish");
        p.wait_bound(WATCHDOG).expect("bound");
        p.write(&value).expect("write");
    }

    /// The file in /dev/shm of public slot `name`'s segment.
    pub fn segment_path(&self, name: &str) -> String {
        let segment = self
            .domain
            .segment_name(&bus::SlotName::public(name).unwrap());
        format!("/dev/shm/{}", &segment[1..])
    }

    /// Overwrites `bytes` at offset `at` of public slot `name`'s segment in place, as stray
    /// memory corruption would (the file is not truncated: processes keep it mapped).
    pub fn overwrite_segment(&self, name: &str, at: usize, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(self.segment_path(name))
            .unwrap();
        file.write_all_at(bytes, at as u64).unwrap();
    }

    /// Makes public slot `name`'s memory inconsistent, as stray corruption would: its
    /// latest-sequence word (offset 512 of `bus::slot`'s layout) set to `latest`, and the length
    /// of the buffer that names (the u32 at 520 + 4 x (`latest` % 4)) beyond any capacity. The
    /// writer's next value, in the next buffer, makes it readable again.
    pub fn make_unreadable(&self, name: &str, latest: u64) {
        self.overwrite_segment(
            name,
            520 + 4 * (latest % 4) as usize,
            &u32::MAX.to_le_bytes(),
        );
        self.overwrite_segment(name, 512, &latest.to_le_bytes());
    }

    /// Runs `bus-inspect` to completion.
    pub fn inspect(&self, args: &[&str]) -> Output {
        Command::new(bin("bus-inspect"))
            .args(["--domain", self.domain.as_str()])
            .args(args)
            .output()
            .expect("run bus-inspect")
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for n in 0..self.children.len() {
                let err = std::fs::read_to_string(self.output_files(n).1).unwrap_or_default();
                eprintln!("--- stderr of child {n} ---\n{err}");
            }
        }
        let _ = self.domain.remove_all_segments();
        let _ =
            std::fs::remove_dir_all(std::env::temp_dir().join(format!("baton-{}", self.domain)));
    }
}

/// Parses the one JSON line a `bus-stress` child printed.
pub fn summary(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "bad summary {line:?} ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Polls `cond` until it holds, failing the test after the watchdog.
pub fn eventually(what: &str, cond: impl FnMut() -> bool) {
    eventually_or(what, String::new, cond);
}

/// `eventually`, saying what `context` gives (a process's log, say) when it times out.
pub fn eventually_or(what: &str, context: impl Fn() -> String, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WATCHDOG;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A copy of workspace binary `name` that any user may execute (the build tree may not be), in
/// the test's scratch directory.
pub fn runnable_by_anyone(t: &TestBus, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    runnable_copy_in(&t.dir().join("bin"), name)
}

/// A copy of workspace binary `name` in `dir` (made, and opened to everyone) that any user may
/// execute.
pub fn runnable_copy_in(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join(name);
    std::fs::copy(bin(name), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// `setpriv` arguments that run a program as user and group 65534 without other groups.
pub const AS_NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

pub fn require_root() {
    if !nix::unistd::geteuid().is_root() {
        panic!("this test runs a process as another user: run the tests as root");
    }
}

/// Runs `command` (its stdout piped), waits for a line of its stdout that contains `marker`
/// (failing on the watchdog), then sends it SIGINT, as Ctrl-C would, and waits for it to end:
/// its pid, its exit status and every line it printed.
pub fn interrupt_after(
    mut command: Command,
    marker: &str,
) -> (u32, std::process::ExitStatus, Vec<String>) {
    use std::io::BufRead;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the program to interrupt");
    let (lines, read) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("its stdout");
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let mut seen: Vec<String> = Vec::new();
    while !seen.iter().any(|l| l.contains(marker)) {
        match read.recv_timeout(WATCHDOG) {
            Ok(line) => seen.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("no line with {marker:?} ({e}): {seen:?}");
            }
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let status = child.wait().expect("wait for the program");
    reader.join().expect("the reader of its stdout");
    seen.extend(read.try_iter());
    (child.id(), status, seen)
}
