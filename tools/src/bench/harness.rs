//! The processes of a bus-bench run: the leader's `Harness` (a fresh domain, the real
//! `registry-server`, peers re-executed from the bus-bench binary itself, cleanup of every child
//! and every shared-memory segment even on error) and the peer side's `Watch` (stop when the
//! leader is gone, so that no peer outlives a failed run).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use bus::{Bus, Domain};

/// Longest the leader waits for a peer to get ready or to finish.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// The leader's side of a run.
pub struct Harness {
    pub domain: Domain,
    pub bus: Bus,
    exe: PathBuf,
    registry: Option<Child>,
    raw_segments: Vec<String>,
    next: u32,
    // Dropped after the registry and the segments (fields drop in order, after `Drop::drop`).
    #[cfg(feature = "iceoryx2")]
    _iceoryx2: super::ice::Leftovers,
}

impl Harness {
    /// The domain a harness runs in: `domain`, or a fresh `bench-<pid>`.
    pub fn domain(domain: Option<&str>) -> Result<Domain, String> {
        let name = domain.map_or_else(|| format!("bench-{}", std::process::id()), str::to_owned);
        Domain::new(&name).map_err(|e| e.to_string())
    }

    /// Checks that bus-bench may take `domain` for a run: no registry serves it, and it has
    /// no slots in /dev/shm, since bus-bench removes every segment of its domains when it ends
    /// or is stopped. `own`: the domain is bus-bench's fresh `bench-<pid>` (or one beside it),
    /// whose files can only be an earlier bus-bench's of this pid, killed before it cleaned up,
    /// which `interrupted::remove_abandoned_runs` removes: they are not checked.
    pub fn claim(domain: &Domain, own: bool) -> Result<(), String> {
        if bus::protocol::connect(domain).is_ok() {
            return Err(format!(
                "a registry-server already serves domain '{domain}'; bus-bench starts its own, \
                 so pick a domain nobody uses (or leave --domain out){}",
                if own {
                    ""
                } else {
                    " (a bus-bench killed with SIGKILL while it ran on a domain given with \
                     --domain leaves its registry serving it: stop that registry-server)"
                }
            ));
        }
        if own {
            return Ok(());
        }
        let files = domain
            .segment_files()
            .map_err(|e| format!("cannot list {}: {e}", bus::names::SHM_DIR))?;
        match files.first() {
            None => Ok(()),
            Some((slot, _)) => Err(format!(
                "domain '{domain}' has {} slot(s) in {} already ({slot}{}); bus-bench removes \
                 every slot of its domain when it is done, so pick a domain nobody uses (or \
                 leave --domain out), or remove them first: bus-inspect --domain {domain} clean",
                files.len(),
                bus::names::SHM_DIR,
                if files.len() > 1 { ", ..." } else { "" }
            )),
        }
    }

    /// Starts `registry-server` (next to the running executable) on `domain`, or on a fresh
    /// `bench-<pid>` domain, and waits until it accepts connections. The domain is `claim`ed
    /// first (bus-bench does so at start, for every domain of its run).
    pub fn start(domain: Option<&str>) -> Result<Harness, String> {
        let exe = std::env::current_exe().map_err(|e| format!("locating bus-bench: {e}"))?;
        let registry_bin = exe.with_file_name("registry-server");
        if !registry_bin.exists() {
            return Err(format!(
                "{} not found: build it next to bus-bench (cargo build --release -p tools -p \
                 registry-server)",
                registry_bin.display()
            ));
        }
        let domain = Self::domain(domain)?;
        let registry = Command::new(&registry_bin)
            .args(["--domain", domain.as_str()])
            .env(crate::interrupted::RUN_MARK, domain.as_str())
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", registry_bin.display()))?;
        let bus = Bus::open(domain.clone()).map_err(|e| e.to_string())?;
        let mut harness = Harness {
            domain,
            bus,
            exe,
            registry: Some(registry),
            raw_segments: Vec::new(),
            next: 0,
            #[cfg(feature = "iceoryx2")]
            _iceoryx2: super::ice::Leftovers::note(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while bus::protocol::connect(&harness.domain).is_err() {
            if Instant::now() > deadline {
                return Err("registry-server did not accept connections within 10 s".into());
            }
            if let Some(status) = harness.registry_exited() {
                return Err(format!("registry-server exited at start ({status})"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        harness
            .bus
            .wait_for_registry(Duration::from_secs(10))
            .map_err(|e| e.to_string())?;
        Ok(harness)
    }

    fn registry_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.registry.as_mut()?.try_wait().ok().flatten()
    }

    /// A slot name no other case of this run uses: `/bench/<what>-<n>`.
    pub fn slot_name(&mut self, what: &str) -> String {
        self.next += 1;
        format!("/bench/{what}-{}", self.next)
    }

    /// A shared-memory segment name for a raw baseline, unlinked when the harness drops.
    pub fn raw_segment(&mut self, what: &str) -> String {
        self.next += 1;
        let name = format!("/baton.{}.raw-{what}-{}", self.domain.as_str(), self.next);
        self.raw_segments.push(name.clone());
        name
    }

    /// A name unique to this run and process, for iceoryx2 services.
    pub fn unique(&mut self, what: &str) -> String {
        self.next += 1;
        format!("baton-{}/{what}-{}", self.domain.as_str(), self.next)
    }

    /// Starts `bus-bench peer <args> --domain D` and waits until it prints `ready`.
    pub fn spawn_peer(&self, args: &[String]) -> Result<Peer, String> {
        let mut child = Command::new(&self.exe)
            .arg("peer")
            .args(args)
            .args(["--domain", self.domain.as_str()])
            .env(crate::interrupted::RUN_MARK, self.domain.as_str())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting peer {args:?}: {e}"))?;
        let stdout = child.stdout.take().map(BufReader::new);
        let mut peer = Peer {
            child: Some(child),
            stdout,
            what: args.join(" "),
        };
        let mut line = String::new();
        let read = match peer.stdout.as_mut() {
            Some(out) => out.read_line(&mut line).map_err(|e| e.to_string())?,
            None => 0,
        };
        if read == 0 || line.trim() != "ready" {
            let status = peer.finish(Duration::from_secs(5)).err();
            return Err(format!(
                "peer `{}` did not get ready (said {:?}){}",
                peer.what,
                line.trim(),
                status.map_or(String::new(), |s| format!(": {s}"))
            ));
        }
        Ok(peer)
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(mut registry) = self.registry.take() {
            let _ = registry.kill();
            let _ = registry.wait();
        }
        for segment in &self.raw_segments {
            let _ = bus::shm::unlink(segment);
        }
        let _ = self.domain.remove_all_segments();
    }
}

/// A running peer process; killed if dropped before it finished.
pub struct Peer {
    child: Option<Child>,
    stdout: Option<BufReader<ChildStdout>>,
    what: String,
}

impl Peer {
    /// Waits up to `timeout` for the peer to exit by itself; kills it after that. An error if
    /// it did not exit cleanly.
    pub fn finish(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => return Err(format!("peer `{}` {status}", self.what)),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "peer `{}` did not finish within {timeout:?}; killed",
                        self.what
                    ));
                }
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The peer's view of its leader: tells the peer to stop when the leader died (the peer was
/// re-parented) or when the peer has run longer than any run should.
pub struct Watch {
    parent: nix::unistd::Pid,
    deadline: Instant,
}

impl Watch {
    pub fn new() -> Watch {
        Watch {
            parent: nix::unistd::getppid(),
            deadline: Instant::now() + Duration::from_secs(600),
        }
    }

    /// `Err` when the peer should give up.
    pub fn check(&self) -> Result<(), String> {
        if nix::unistd::getppid() != self.parent {
            return Err("the leader is gone".into());
        }
        if Instant::now() > self.deadline {
            return Err("ran for 10 minutes without being told to stop".into());
        }
        Ok(())
    }
}

impl Default for Watch {
    fn default() -> Self {
        Watch::new()
    }
}

/// Tells the leader that the peer is set up.
pub fn announce_ready() -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")
        .and_then(|_| out.flush())
        .map_err(|e| format!("telling the leader we are ready: {e}"))
}

/// A deadline-bounded loop guard for the leader: an error naming `what` once `timeout` passed.
pub struct Deadline {
    at: Instant,
    what: &'static str,
}

impl Deadline {
    pub fn after(timeout: Duration, what: &'static str) -> Deadline {
        Deadline {
            at: Instant::now() + timeout,
            what,
        }
    }

    pub fn check(&self) -> Result<(), String> {
        if Instant::now() > self.at {
            Err(format!("{} timed out", self.what))
        } else {
            Ok(())
        }
    }

    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
}
