//! A lab of "hosts" on one machine for network tests, on top of `tools::hosts` (each host a
//! network namespace on a shared bridge, with its own /dev/shm): a registry per host with its
//! log, processes started in hosts, statistics and raw sockets inside a host. Everything is
//! removed on drop, also when the test fails (and then the registries' logs and the children's
//! stderr are printed). Needs root and `ip`; without them the test fails loudly rather than
//! skipping.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::common::{bin, summary, WATCHDOG};

pub const DOMAIN: &str = "lab";
pub const PORT: u16 = 7447;

pub struct Host {
    pub name: String,
    pub ns: String,
    pub ip: String,
    registry: Option<Child>,
}

pub struct Lab {
    /// The namespaces (shared with the demo and net-bench: `tools::hosts`); dropped last.
    hosts_lab: tools::hosts::Lab,
    pub hosts: Vec<Host>,
    children: Vec<Option<Child>>,
    /// Prefix of this lab's namespaces and scratch files.
    tag: String,
    /// Scratch files (key files, ...) removed with the lab.
    files: Vec<std::path::PathBuf>,
}

impl Lab {
    /// A switch and `n` hosts named hA, hB, hC, ...
    pub fn new(n: usize) -> Lab {
        let names: Vec<String> = (0..n)
            .map(|i| format!("h{}", (b'A' + i as u8) as char))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let hosts_lab = tools::hosts::Lab::new("bt", &names).unwrap_or_else(|e| {
            panic!("cannot build the network lab (root and iproute2 needed): {e}")
        });
        let tag = hosts_lab.tag().to_owned();
        let hosts = hosts_lab
            .hosts
            .iter()
            .map(|h| Host {
                name: h.name.clone(),
                ns: h.namespace.clone(),
                ip: h.address.clone(),
                registry: None,
            })
            .collect();
        Lab {
            hosts_lab,
            hosts,
            children: Vec::new(),
            tag,
            files: Vec::new(),
        }
    }

    /// Connects host `host` to the others, or cuts it off (see `tools::hosts`).
    pub fn set_connected(&self, host: usize, connected: bool) {
        self.hosts_lab
            .set_connected(host, connected)
            .expect("plug or pull a host's cable");
    }

    /// Unplugs host `host`'s network adapter and plugs it in again (see `tools::hosts`).
    pub fn replug(&self, host: usize) {
        self.hosts_lab
            .replug(host)
            .expect("unplug and plug in a host's adapter");
    }

    pub fn holder_pid(&self, host: usize) -> u32 {
        self.hosts_lab.holder_pid(host)
    }

    /// A command that runs `program` inside host `host`.
    pub fn command(&self, host: usize, program: &Path) -> Command {
        self.hosts_lab.command(host, program)
    }

    /// Runs `program args` (a system command such as `ip` or `mount`) in host `host` to its
    /// end; its output, which must say success.
    pub fn run(&self, host: usize, program: &str, args: &[&str]) -> Output {
        let out = self
            .command(host, Path::new(program))
            .args(args)
            .output()
            .expect("run a command in a host");
        assert!(out.status.success(), "{program} {args:?}: {out:?}");
        out
    }

    /// Starts host `host`'s registry with networking on (and extra arguments / environment;
    /// a timing option or `--host` among them replaces the lab's default).
    pub fn start_registry(&mut self, host: usize, extra: &[&str], env: &[(&str, &str)]) {
        assert!(
            self.hosts[host].registry.is_none(),
            "registry already running"
        );
        let name = self.hosts[host].name.clone();
        let mut c = self.command(host, &bin("registry-server"));
        c.args(["--domain", DOMAIN, "--net"]);
        if !extra.contains(&"--host") {
            c.args(["--host", &name]);
        }
        for (option, value) in [
            ("--announce-ms", "100"),
            ("--forget-ms", "1500"),
            ("--refresh-ms", "300"),
        ] {
            if !extra.contains(&option) {
                c.args([option, value]);
            }
        }
        c.args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(self.log_file(host));
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c.spawn().expect("spawn registry-server");
        self.hosts[host].registry = Some(child);
    }

    /// The pid of host `host`'s registry, while it runs.
    pub fn registry_pid(&self, host: usize) -> Option<u32> {
        self.hosts[host].registry.as_ref().map(Child::id)
    }

    /// Where host `host`'s registry logs (appended across restarts; removed with the lab).
    pub fn log_path(&self, host: usize) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("{}.registry.log", self.hosts[host].ns))
    }

    fn log_file(&self, host: usize) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(host))
            .expect("registry log file")
    }

    /// What host `host`'s registry logged so far.
    pub fn log(&self, host: usize) -> String {
        std::fs::read_to_string(self.log_path(host)).unwrap_or_default()
    }

    /// Kills host `host`'s registry (SIGKILL).
    pub fn kill_registry(&mut self, host: usize) {
        let mut child = self.hosts[host].registry.take().expect("registry running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Stops host `host`'s registry as systemd does (SIGTERM) and waits for it.
    pub fn stop_registry(&mut self, host: usize) {
        let mut child = self.hosts[host].registry.take().expect("registry running");
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = child.wait();
    }

    /// Runs `program args` in host `host` with the lab's domain, stdout and stderr captured.
    pub fn spawn(&mut self, host: usize, program: &str, args: &[&str]) -> usize {
        let child = self
            .command(host, &bin(program))
            .args(args)
            .args(["--domain", DOMAIN])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        self.children.push(Some(child));
        self.children.len() - 1
    }

    /// `bus-stress write` of `count` values of `size` bytes to `name` in host `host`, one
    /// every `interval_ms`, holding the publication a minute after the last.
    pub fn write_from(
        &mut self,
        host: usize,
        name: &str,
        count: &str,
        interval_ms: &str,
        size: &str,
    ) -> usize {
        let args = [
            "--count",
            count,
            "--interval-ms",
            interval_ms,
            "--min-size",
            size,
            "--max-size",
            size,
            "--linger",
            "60",
        ];
        self.stress_write(host, name, &args)
    }

    /// `bus-stress write` to `name` in host `host`, one value of up to `max_size` bytes every
    /// `interval_ms`, until killed.
    pub fn write_every(
        &mut self,
        host: usize,
        name: &str,
        interval_ms: &str,
        max_size: &str,
    ) -> usize {
        let args = ["--interval-ms", interval_ms, "--max-size", max_size];
        self.stress_write(host, name, &args)
    }

    fn stress_write(&mut self, host: usize, name: &str, args: &[&str]) -> usize {
        let mut all = vec!["write", "--name", name];
        all.extend_from_slice(args);
        self.spawn(host, "bus-stress", &all)
    }

    /// Host `host`'s `bus-inspect list NAME --json` row of `name` (JSON null while it has no
    /// slot of that name).
    pub fn list_row(&self, host: usize, name: &str) -> serde_json::Value {
        let out = self.inspect(host, &["list", name, "--json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_default()
    }

    /// Waits until host `host`'s registry directory gives `name` to host `origin`'s publisher.
    pub fn wait_listed(&self, host: usize, name: &str, origin: &str) {
        eventually(
            &format!("{name} of {origin} in the directory of host {host}"),
            || {
                self.directory_entry(host, name)
                    .is_some_and(|e| e["origin_host"] == origin)
            },
        );
    }

    /// `bus-stress read` of `name` in host `host`, waiting for each value, until value
    /// `until` arrives or `seconds` pass (its summary on stdout).
    pub fn read_until(&mut self, host: usize, name: &str, until: &str, seconds: &str) -> usize {
        self.spawn(
            host,
            "bus-stress",
            &[
                "read",
                "--name",
                name,
                "--seconds",
                seconds,
                "--wait",
                "--until",
                until,
            ],
        )
    }

    /// `bus-stress read` of `name` in host `host`, waiting for each value, for `seconds`.
    pub fn read_for(&mut self, host: usize, name: &str, seconds: &str) -> usize {
        self.spawn(
            host,
            "bus-stress",
            &["read", "--name", name, "--seconds", seconds, "--wait"],
        )
    }

    /// A child's process id (nsenter executes the program in its own process).
    pub fn pid(&self, child: usize) -> u32 {
        self.children[child].as_ref().expect("child running").id()
    }

    /// Whether a child still runs (not exited, not reaped).
    pub fn is_running(&mut self, child: usize) -> bool {
        self.children[child]
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills a child with SIGKILL and reaps it.
    pub fn kill(&mut self, child: usize) {
        if let Some(mut c) = self.children[child].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Writes a scratch file (configs) visible in every host; removed with the lab.
    pub fn file(&mut self, name: &str, text: &str) -> String {
        let path = std::env::temp_dir().join(format!("{}-{name}", self.tag));
        std::fs::write(&path, text).expect("write scratch file");
        self.files.push(path.clone());
        path.to_string_lossy().into_owned()
    }

    /// Waits for a child (watchdog-bounded) and returns its output.
    pub fn finish(&mut self, child: usize) -> Output {
        let mut process = self.children[child].take().expect("child not finished yet");
        let deadline = Instant::now() + WATCHDOG * 2;
        while process.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = process.kill();
                let out = process.wait_with_output().expect("reap");
                panic!(
                    "child {child} did not finish within {:?}; stderr: {}",
                    WATCHDOG * 2,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        process.wait_with_output().expect("collect output")
    }

    /// Waits for a `bus-stress read` child and checks its summary: the last value it read is
    /// `last`, none was bad, none went backwards. Returns the summary.
    pub fn check_reader(&mut self, child: usize, last: u64, what: &str) -> serde_json::Value {
        let s = summary(&self.finish(child));
        assert_eq!(s["last"], last, "{what}: {s}");
        assert_eq!(s["bad"], 0, "{what}: {s}");
        assert_eq!(s["backwards"], 0, "{what}: {s}");
        s
    }

    /// Runs `bus-inspect` in host `host` to completion.
    pub fn inspect(&self, host: usize, args: &[&str]) -> Output {
        self.command(host, &bin("bus-inspect"))
            .args(["--domain", DOMAIN])
            .args(args)
            .output()
            .expect("run bus-inspect")
    }

    /// Host `host`'s network statistics, as JSON, or `None` while not available.
    pub fn stats(&self, host: usize) -> Option<serde_json::Value> {
        let name = format!("/baton/registry/{}/net", self.hosts[host].name);
        let out = self.inspect(host, &["get", &name, "--json"]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Host `host`'s directory entry of `name` (`/baton/registry/directory`), as JSON: who
    /// publishes it, as that host's registry sees it.
    pub fn directory_entry(&self, host: usize, name: &str) -> Option<serde_json::Value> {
        let out = self.inspect(host, &["get", "/baton/registry/directory", "--json"]);
        let directory: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        directory["entries"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
    }

    /// A dropped-datagram counter of host `host` (0 while unknown).
    pub fn dropped(&self, host: usize, cause: &str) -> u64 {
        self.stats(host)
            .and_then(|s| s["dropped"][cause].as_u64())
            .unwrap_or(0)
    }

    /// Runs `f` on a thread inside host `host`'s network namespace (for raw sockets).
    pub fn in_netns<R: Send + 'static>(
        &self,
        host: usize,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let path = format!("/run/netns/{}", self.hosts[host].ns);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("netns thread")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        for (n, child) in self.children.iter_mut().enumerate() {
            let Some(mut child) = child.take() else {
                continue;
            };
            let _ = child.kill();
            if panicking {
                if let Ok(out) = child.wait_with_output() {
                    eprintln!(
                        "--- stderr of child {n} ---\n{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            } else {
                let _ = child.wait();
            }
        }
        for h in &mut self.hosts {
            if let Some(r) = h.registry.as_mut() {
                let _ = r.kill();
                let _ = r.wait();
            }
        }
        if panicking {
            for i in 0..self.hosts.len() {
                eprintln!(
                    "--- registry log of {} ---\n{}",
                    self.hosts[i].name,
                    self.log(i)
                );
            }
        }
        for i in 0..self.hosts.len() {
            let _ = std::fs::remove_file(self.log_path(i));
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Polls `cond` until it holds, failing after the watchdog.
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WATCHDOG;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Receives one datagram that the host at `from` sends to the multicast group (its next
/// announcement), inside the current network namespace (`Lab::in_netns`).
pub fn capture_from(from: std::net::Ipv4Addr) -> Vec<u8> {
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    s.set_reuse_address(true).unwrap();
    let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, PORT));
    s.bind(&any.into()).unwrap();
    s.join_multicast_v4(&"239.255.66.66".parse().unwrap(), &Ipv4Addr::UNSPECIFIED)
        .unwrap();
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, src) = s.recv_from(&mut buf).expect("a datagram within 10 s");
        if src.ip() == from {
            return buf[..n].to_vec();
        }
    }
}
