//! The Baton demo: the whole system in one command. It starts a registry, the robot manager, an
//! arm arbiter and a drive arbiter, the simulator and three applications with different
//! priorities and statuses, then narrates for about 20 seconds what the arbiters decide while a
//! high-priority application takes over and lets go, and another crashes. It stops everything
//! and leaves no shared memory behind. With two hosts (root), the payload application runs on a
//! second computer made of namespaces and reaches the arbiters through network reflection.
//!
//! The narration is a separate process (`baton-demo narrate`) on the robot host that watches
//! the arbiters' memory blocks, so it reports what the bus says, not what the script expects.
//!
//! Ctrl-C (SIGINT), SIGTERM or SIGHUP (its terminal closed) stops the script at its next step, and the demo stops everything
//! and removes its slots (and namespaces) as at its end: killed by the signal, it left them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arbiter::protocol::{arbiter_slot, ArbiterBlock, Outcome};
use bus::{Bus, Domain};

use crate::hosts::Lab;

const MANAGER: &str = include_str!("../../scripts/config/manager.toml");
const ARM: &str = include_str!("../../scripts/config/arbiters/arm.toml");
const DRIVE: &str = include_str!("../../scripts/config/arbiters/drive.toml");
const TELEOP: &str = include_str!("../../scripts/config/controllers/teleop.env");
const AUTONOMY: &str = include_str!("../../scripts/config/controllers/autonomy.env");
const PAYLOAD: &str = include_str!("../../scripts/config/controllers/payload.env");
/// Time to live of the applications' blocks: a crashed one loses its resources within this.
pub const TTL_MS: u64 = 300;

/// The processes of the demo, on one or two hosts.
struct Processes {
    lab: Option<Lab>,
    bin_dir: PathBuf,
    domain: Domain,
    children: Vec<(String, Child)>,
}

impl Processes {
    fn command(&self, host: usize, program: &str) -> Command {
        let path = self.bin_dir.join(program);
        match &self.lab {
            Some(lab) => lab.command(host, &path),
            None => Command::new(path),
        }
    }

    fn start(
        &mut self,
        host: usize,
        name: &str,
        program: &str,
        args: &[&str],
    ) -> Result<(), String> {
        let child = self
            .command(host, program)
            .args(args)
            .args(["--domain", self.domain.as_str()])
            .env("RUST_LOG", "error")
            .stdout(if name == "narrator" {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    fn start_app(&mut self, host: usize, name: &str, env_file: &str) -> Result<(), String> {
        let args = app_args(env_file)?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.start(host, name, "robot-controller", &args)
    }

    fn signal(&mut self, name: &str, signal: nix::sys::signal::Signal) -> Result<(), String> {
        let (_, child) = self
            .children
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| format!("no process {name}"))?;
        // Under nsenter the child is nsenter itself, which forwards nothing: signal the real
        // process, nsenter's only child.
        let pid = real_pid(child.id());
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .map_err(|e| format!("signalling {name}: {e}"))
    }

    fn stop_all(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(real_pid(child.id()) as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for (_, child) in self.children.iter_mut().rev() {
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The pid of the program a child runs: the child itself, or nsenter's child.
fn real_pid(pid: u32) -> u32 {
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(pid)
}

/// The arguments of a shipped application (`BATON_APP_ARGS` of its env file) with the demo's
/// time to live.
fn app_args(env_file: &str) -> Result<Vec<String>, String> {
    let line = env_file
        .lines()
        .find_map(|l| l.strip_prefix("BATON_APP_ARGS="))
        .ok_or("an application env file without BATON_APP_ARGS")?;
    let mut args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    args.extend(["--ttl-ms".to_owned(), TTL_MS.to_string()]);
    Ok(args)
}

fn say(t0: Instant, text: &str) {
    println!("[{:6.2}s] {text}", t0.elapsed().as_secs_f64());
}

/// The signal that stopped the demo (SIGINT, SIGTERM, SIGHUP), once one came.
static STOPPED_BY: OnceLock<&'static str> = OnceLock::new();

/// How the demo ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The whole script ran.
    Finished,
    /// Stopped early by this signal (everything stopped and removed all the same).
    Stopped(&'static str),
}

/// Waits `ms` milliseconds, the script's step; `Err` with the signal's name once one of them
/// came.
fn pause(ms: u64) -> Result<(), &'static str> {
    let end = Instant::now() + Duration::from_millis(ms);
    loop {
        if let Some(signal) = STOPPED_BY.get() {
            return Err(signal);
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        std::thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// Runs the demo on `hosts` hosts (1, or 2 with root). Call it first in `main`: it takes
/// SIGINT, SIGTERM and SIGHUP for the whole process (`daemon::on_stop_or_hangup`), before any
/// thread starts.
pub fn run(hosts: usize) -> Result<Ended, String> {
    if !(1..=2).contains(&hosts) {
        return Err(format!("--hosts {hosts}: the demo runs on 1 or 2 hosts"));
    }
    // The processes started inherit the signals blocked: each of them takes them itself
    // (`daemon::on_stop`, the narrator too), and the holders of the namespaces are killed.
    daemon::on_stop_or_hangup(daemon::Hangup::Stops, |signal| {
        let _ = STOPPED_BY.set(signal);
    })?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin_dir = exe.parent().ok_or("no binary directory")?.to_path_buf();
    let domain = Domain::new(&format!("demo{}", std::process::id())).map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("baton-{domain}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = |name: &str, text: &str| -> Result<String, String> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| e.to_string())?;
        Ok(path.to_string_lossy().into_owned())
    };
    let manager = file("manager.toml", MANAGER)?;
    let arm = file("arm.toml", ARM)?;
    let drive = file("drive.toml", DRIVE)?;
    let lab = if hosts == 2 {
        Some(Lab::new("bd", &["robot", "payload"])?)
    } else {
        None
    };
    let payload_host = hosts - 1;
    let mut p = Processes {
        lab,
        bin_dir,
        domain: domain.clone(),
        children: Vec::new(),
    };
    let result = match script(&mut p, payload_host, &manager, &arm, &drive) {
        Ok(()) => Ok(Ended::Finished),
        Err(Step::Stopped(signal)) => Ok(Ended::Stopped(signal)),
        Err(Step::Failed(e)) => Err(e),
    };
    drop(p); // stops every process
    let _ = std::fs::remove_dir_all(&dir);
    // Slots outlive their processes by design (a restarted registry adopts them); the demo's
    // domain is over, so remove its slots and check that none is left.
    let removed = domain.remove_all_segments().unwrap_or(0);
    let left = domain.segment_files().map(|f| f.len()).unwrap_or(0);
    let ended = result?;
    if left > 0 {
        return Err(format!(
            "{left} shared-memory segment(s) of domain {domain} could not be removed"
        ));
    }
    if let Ended::Stopped(signal) = ended {
        print!("stopped on {signal}: ");
    }
    println!(
        "stopped every process and removed the demo's {removed} shared-memory slot(s): none left"
    );
    Ok(ended)
}

/// Why the script did not run to its end.
enum Step {
    Stopped(&'static str),
    Failed(String),
}

impl From<String> for Step {
    fn from(e: String) -> Step {
        Step::Failed(e)
    }
}

/// Waits the script's next step out, unless a signal stopped the demo (`pause`).
fn step(ms: u64) -> Result<(), Step> {
    pause(ms).map_err(Step::Stopped)
}

fn script(
    p: &mut Processes,
    payload_host: usize,
    manager: &str,
    arm: &str,
    drive: &str,
) -> Result<(), Step> {
    let t0 = Instant::now();
    let t0_ns = bus::slot::now_ns().to_string();
    let two_hosts = p.lab.is_some();
    say(
        t0,
        if two_hosts {
            "starting: registries on hosts `robot` and `payload` (network reflection on), robot manager, arm and drive arbiters, simulator"
        } else {
            "starting: registry, robot manager, arm and drive arbiters, simulator"
        },
    );
    say(
        t0,
        "priority order (manager.toml): teleop > autonomy > payload",
    );
    if two_hosts {
        p.start(
            0,
            "registry",
            "registry-server",
            &["--net", "--host", "robot"],
        )?;
        p.start(
            1,
            "registry-payload",
            "registry-server",
            &["--net", "--host", "payload"],
        )?;
    } else {
        p.start(0, "registry", "registry-server", &[])?;
    }
    p.start(0, "manager", "robot-manager", &["--config", manager])?;
    p.start(0, "arbiter-arm", "arbiter", &["--config", arm])?;
    p.start(0, "arbiter-drive", "arbiter", &["--config", drive])?;
    p.start(0, "sim", "robot-sim", &[])?;
    p.start(0, "narrator", "baton-demo", &["narrate", "--t0-ns", &t0_ns])?;
    step(1000)?;

    say(
        t0,
        "autonomy starts (non-compromising): drive left+right and the arm's turret",
    );
    p.start_app(0, "autonomy", AUTONOMY)?;
    step(500)?;
    say(
        t0,
        &format!(
            "payload starts{} (compromising): turret, shoulder, elbow1 — it takes what is free",
            if two_hosts { " on host `payload`" } else { "" }
        ),
    );
    p.start_app(payload_host, "payload", PAYLOAD)?;
    step(4500)?;

    say(
        t0,
        "teleop starts (highest priority, non-compromising): the drive and the shoulder",
    );
    say(
        t0,
        "  each arbiter decides for its own resources: on the drive, autonomy (all or nothing)",
    );
    say(
        t0,
        "  gets nothing; on the arm, payload (compromising) loses the shoulder, keeps elbow1",
    );
    p.start_app(0, "teleop", TELEOP)?;
    step(5000)?;

    say(
        t0,
        "teleop exits cleanly: it releases at once; autonomy gets the drive, payload the shoulder",
    );
    p.signal("teleop", nix::sys::signal::Signal::SIGTERM)?;
    step(3000)?;

    say(t0, &format!("payload crashes (SIGKILL): its resources must go back within its time to live ({TTL_MS} ms)"));
    p.signal("payload", nix::sys::signal::Signal::SIGKILL)?;
    step(4000)?;
    say(t0, "done: stopping everything");
    Ok(())
}

/// What the narrator last printed for an arbiter: its owners and outcomes.
type Decided = (BTreeMap<String, Option<String>>, BTreeMap<String, Outcome>);

/// The narrator: prints every change of owners and outcomes of the arm and drive arbiters.
pub fn narrate(domain: &Domain, t0_ns: u64) -> Result<(), String> {
    let bus = Bus::open(domain.clone()).map_err(|e| e.to_string())?;
    let mut group = bus::SubscriptionGroup::new();
    let arbiters = ["arm", "drive"];
    let members: Vec<_> = arbiters
        .iter()
        .map(|a| {
            bus.subscribe::<ArbiterBlock>(&arbiter_slot(a))
                .map(|s| group.add(s))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let mut shown: BTreeMap<&str, Decided> = BTreeMap::new();
    loop {
        group
            .wait_any(Duration::from_secs(3600))
            .map_err(|e| e.to_string())?;
        for (name, member) in arbiters.iter().zip(&members) {
            if let Some(e) = group.take_error(member.index()) {
                tracing::warn!("narrator: the {name} arbiter's block: {e}");
            }
            let Some(block) = group.get(*member).value() else {
                continue;
            };
            let now = (block.owners.clone(), block.outcomes.clone());
            if shown.get(name) == Some(&now) {
                continue;
            }
            let t = bus::slot::now_ns().saturating_sub(t0_ns) as f64 / 1e9;
            let owners: Vec<String> = block
                .owners
                .iter()
                .map(|(r, o)| format!("{r}={}", o.as_deref().unwrap_or("(safe)")))
                .collect();
            let outcomes: Vec<String> = block
                .outcomes
                .iter()
                .map(|(c, o)| format!("{c} {}", outcome_word(*o)))
                .collect();
            println!(
                "[{t:6.2}s]   {name:<5} owners: {}   outcomes: {}",
                owners.join(" "),
                if outcomes.is_empty() {
                    "-".to_owned()
                } else {
                    outcomes.join(", ")
                }
            );
            shown.insert(name, now);
        }
    }
}

fn outcome_word(o: Outcome) -> &'static str {
    match o {
        Outcome::Full => "full",
        Outcome::Partial => "partial",
        Outcome::Denied => "denied",
        Outcome::Expired => "expired",
        Outcome::Idle => "idle",
    }
}
