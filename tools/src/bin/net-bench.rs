//! `net-bench`: reflection between two hosts made of network namespaces, against raw UDP
//! between the same namespaces, in one run. Needs root and `ip` (it builds the namespaces).
//!
//! `net-bench run` sets up hosts hA and hB (veth pair, private /dev/shm each), starts a
//! registry on each, and runs in them:
//! - slot ping-pong (hA writes /bench/ping, hB's pong copies it to /bench/pong, hA waits for it)
//!   for 64 B, 1 KiB and 64 KiB values, and raw UDP ping-pong of the same sizes, the two
//!   alternating in rounds;
//! - a 64 B flood from hA, counting the values hB's registry writes into its mirror per second;
//!   twice, the writer at normal priority and then at `nice -n 19` (taking only the CPU the
//!   registries leave, where it shares one with them); then over `--rate-slots` slots (16)
//!   written in turn, whose values leave hA several to a datagram; and its baseline, raw 64 B
//!   datagrams sent from hA as fast as it can, counting those hB receives.
//!
//! The two hosts share the machine's CPUs, unless `--cpu-per-host` gives each one of its own, as
//! two computers have: every datagram then wakes the other host's CPU, the raw baseline's as
//! well, and a host's own wake-ups (a writer waking its registry, a registry waking a
//! subscriber) stay on its CPU.
//!
//! The other subcommands are the parts it runs inside the namespaces.

#![forbid(unsafe_code)]

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
// The ping-pong payload is a byte string (a length and a copy): a `Vec<u8>` goes through serde
// one element at a time, which at 64 KiB costs more than the network.
use tools::bench::payload::Blob as Bytes;
use tools::bench::stats::Stats;
use tools::hosts::Lab;

#[derive(Parser)]
#[command(
    name = "net-bench",
    version = daemon::version(bus::slot::VERSION, None),
    about = "Measure Baton's network reflection against raw UDP (needs root)",
    long_about = "Measure Baton's network reflection against raw UDP (needs root and `ip`).\n\n\
`net-bench run` makes two hosts of network namespaces (hA and hB, each joined by a veth pair to \
a bridge, the lab's switch; a /dev/shm of their own each), starts a registry-server in each, \
and measures slot ping-pong against raw UDP ping-pong (64 B, 1 KiB, 64 KiB; the raw message \
sent as datagrams of at most 1,472 bytes with UDP_SEGMENT and UDP_GRO, as the registries send \
and receive, echoed as received; round trips lost counted, not timed) and the rate of reflected 64 B updates (one slot; then \
--rate-slots slots written in turn, whose values leave several to a datagram) against a raw UDP flood. It removes its hosts when done or stopped (Ctrl-C), and those of a net-bench or \
test killed before it could.\n\n\
Run from a release build: cargo build --release -p tools -p registry-server && \
target/release/net-bench run"
)]
struct Args {
    /// Bus domain of the registries it starts in its hosts (each host has a /dev/shm and
    /// registry sockets of its own: no domain of this computer is touched).
    #[arg(long, global = true, env = "BUS_DOMAIN", default_value = "netbench",
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
    #[command(subcommand)]
    command: Cmd,
}

/// `run`, and the parts it runs in its hosts (hidden from `--help`: only `run` starts them).
#[derive(Subcommand)]
enum Cmd {
    /// Build the namespaces, run everything, print the table.
    Run {
        /// Round trips per size, 20 to 1,000,000 (64 KiB uses a quarter), in 5 rounds.
        #[arg(long, value_name = "N", default_value_t = 4000,
              value_parser = daemon::whole_number(20, 1_000_000, "a count of round trips"),
              allow_negative_numbers = true)]
        iterations: u64,
        /// Seconds of each of the three 64 B floods for the update rate (raw UDP, then the
        /// writer at normal priority, then at nice 19), 0.1 to 3600.
        #[arg(long, value_name = "SECONDS", default_value_t = 3.0,
              value_parser = daemon::decimal_number(0.1, 3600.0, "seconds"),
              allow_negative_numbers = true)]
        flood_seconds: f64,
        /// Run each host's processes on a CPU of its own (hA on the first this process may
        /// use, hB on the second), as on two computers: every datagram then wakes the other
        /// host's CPU, the raw baseline's too. Without it the hosts share every CPU.
        #[arg(long)]
        cpu_per_host: bool,
        /// Slots of the last flood, 2 to 1,000: the writer writes them in turn, as an
        /// application publishing many topics does, and hB subscribes to all of them.
        #[arg(long, value_name = "N", default_value_t = 16,
              value_parser = daemon::whole_number(2, 1_000, "a count of slots"),
              allow_negative_numbers = true)]
        rate_slots: u64,
    },
    /// (inside hB) Copy every /bench/ping value to /bench/pong.
    #[command(hide = true)]
    Pong { size: usize },
    /// (inside hA) Time round trips through /bench/ping and /bench/pong; prints nanoseconds.
    #[command(hide = true)]
    Ping { size: usize, iterations: usize },
    /// (inside hB) Echo UDP datagrams.
    #[command(hide = true)]
    UdpPong { port: u16 },
    /// (inside hA) Time UDP round trips to `to`; prints nanoseconds.
    #[command(hide = true)]
    UdpPing {
        to: String,
        size: usize,
        iterations: usize,
    },
    /// (inside hB) Subscribe to `slots` rate slots (so that hA reflects them) and pull every
    /// update.
    #[command(hide = true)]
    Count { slots: usize },
    /// (inside hA) Write 64 B values to `slots` rate slots in turn, as fast as possible for
    /// `seconds`.
    #[command(hide = true)]
    Flood { seconds: f64, slots: usize },
    /// (inside hB) Say `ready` once bound, then count the UDP datagrams arriving on `port`
    /// until none came for a second (or `seconds` plus ten have passed); prints the count.
    #[command(hide = true)]
    UdpSink { port: u16, seconds: f64 },
    /// (inside hA) Send 64 B datagrams to `to` as fast as possible for `seconds`; prints how
    /// many the kernel took.
    #[command(hide = true)]
    UdpFlood { to: String, seconds: f64 },
}

fn main() {
    let args: Args = daemon::parse_args();
    if matches!(args.command, Cmd::Run { .. }) {
        // Ctrl-C, SIGTERM or a closed terminal in the middle of a run: its hosts, and what runs
        // in them, go with it, as they do at its end (killed by the signal, it left them). The
        // processes it starts inherit the signals blocked: each is killed with SIGKILL, or
        // takes them itself (registry-server).
        let stopped = daemon::on_stop_or_hangup(daemon::Hangup::Stops, |signal| {
            STOPPING.store(true, Ordering::SeqCst);
            eprintln!("net-bench: stopped on {signal}: removing its hosts");
            tools::hosts::remove_own_labs();
            std::process::exit(tools::interrupted::status_after(signal));
        });
        if let Err(e) = stopped {
            eprintln!("net-bench: {e}");
            std::process::exit(1);
        }
    }
    let result = run(&args.domain, args.command);
    // Stopping: the run failed because its hosts are going (or ended meanwhile); the signal's
    // thread ends the process once they are gone, with the signal's status.
    while STOPPING.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(1));
    }
    if let Err(e) = result {
        eprintln!("net-bench: {e}");
        std::process::exit(1);
    }
}

/// Set by the signal that stops a run, before its hosts are removed.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// The update rate's flood: how long each lasts, and how many slots the last one writes.
struct Flood {
    seconds: f64,
    slots: usize,
}

/// The name of the update rate's slot `i`.
fn rate_slot(i: usize) -> String {
    format!("/bench/rate/{i}")
}

fn bus(domain: &bus::Domain) -> Result<bus::Bus, String> {
    bus::Bus::open(domain.clone()).map_err(|e| e.to_string())
}

fn run(domain: &bus::Domain, cmd: Cmd) -> Result<(), String> {
    let e = |e: bus::BusError| e.to_string();
    match cmd {
        Cmd::Pong { size } => {
            let b = bus(domain)?;
            let mut sub = b
                .subscribe::<Bytes>(&format!("/bench/ping-{size}"))
                .map_err(e)?;
            let mut publ = b
                .publication(&format!("/bench/pong-{size}"))
                .map_err(e)?
                .capacity(size + 64)
                .create::<Bytes, bus::Serde>()
                .map_err(e)?;
            loop {
                if sub.wait_update(Duration::from_secs(60)).map_err(e)? {
                    if let Some(v) = sub.value() {
                        publ.write(v).map_err(e)?;
                    }
                }
            }
        }
        Cmd::Ping { size, iterations } => {
            let b = bus(domain)?;
            let mut publ = b
                .publication(&format!("/bench/ping-{size}"))
                .map_err(e)?
                .capacity(size + 64)
                .create::<Bytes, bus::Serde>()
                .map_err(e)?;
            let mut sub = b
                .subscribe::<Bytes>(&format!("/bench/pong-{size}"))
                .map_err(e)?;
            let mut samples = Vec::with_capacity(iterations);
            let mut lost = 0u64;
            let mut value = Bytes(vec![0u8; size]);
            let warmup = 50;
            let mut i = 0u64;
            while samples.len() < iterations {
                i += 1;
                value.0[..8.min(size)].copy_from_slice(&i.to_le_bytes()[..8.min(size)]);
                let t = Instant::now();
                publ.write(&value).map_err(e)?;
                // Wait for the echo of this very value (a refresh may bring an old one).
                let deadline = t + Duration::from_secs(2);
                let mut ok = false;
                while Instant::now() < deadline {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if sub.wait_update(left).map_err(e)?
                        && sub
                            .value()
                            .is_some_and(|v| v.0[..8.min(size)] == value.0[..8.min(size)])
                    {
                        ok = true;
                        break;
                    }
                }
                if ok && i > warmup {
                    samples.push(t.elapsed().as_nanos() as u64);
                } else if i > warmup {
                    lost += 1;
                }
            }
            // The samples, then how many round trips were lost.
            println!(
                "{}\n{lost}",
                serde_json::to_string(&samples).map_err(|e| e.to_string())?
            );
            Ok(())
        }
        Cmd::UdpPong { port } => tools::udp_baseline::pong(port),
        Cmd::UdpPing {
            to,
            size,
            iterations,
        } => {
            let s = tools::udp_baseline::ping(&to, size, iterations)?;
            // The samples, then how many round trips were lost.
            println!(
                "{}\n{}",
                serde_json::to_string(&s.nanos).map_err(|e| e.to_string())?,
                s.lost
            );
            Ok(())
        }
        Cmd::Count { slots } => {
            let b = bus(domain)?;
            let mut group = bus::SubscriptionGroup::new();
            for i in 0..slots {
                let sub = b.subscribe::<[u64; 8]>(&rate_slot(i)).map_err(e)?;
                group.add(sub);
            }
            loop {
                group.wait_any(Duration::from_secs(60)).map_err(e)?;
            }
        }
        Cmd::Flood { seconds, slots } => {
            let b = bus(domain)?;
            let mut publs = Vec::with_capacity(slots);
            for i in 0..slots {
                publs.push(b.publish::<[u64; 8]>(&rate_slot(i)).map_err(e)?);
            }
            for p in &publs {
                p.wait_bound(Duration::from_secs(5)).map_err(e)?;
            }
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            let mut n = 0u64;
            while Instant::now() < end {
                for p in &mut publs {
                    n += 1;
                    p.write(&[n; 8]).map_err(e)?;
                }
            }
            println!("{n}");
            Ok(())
        }
        Cmd::UdpSink { port, seconds } => {
            let s = UdpSocket::bind(("0.0.0.0", port)).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .map_err(|e| e.to_string())?;
            // Bound: the flood may start (`raw_flood` waits for this line).
            println!("ready");
            std::io::Write::flush(&mut std::io::stdout()).map_err(|e| e.to_string())?;
            let give_up = Instant::now() + Duration::from_secs_f64(seconds + 10.0);
            let mut buf = vec![0u8; 2048];
            let mut received = 0u64;
            let mut last = None;
            loop {
                match s.recv_from(&mut buf) {
                    Ok(_) => {
                        received += 1;
                        last = Some(Instant::now());
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        let quiet = last.is_some_and(|t| t.elapsed() > Duration::from_secs(1));
                        if quiet || Instant::now() > give_up {
                            break;
                        }
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            println!("{received}");
            Ok(())
        }
        Cmd::UdpFlood { to, seconds } => {
            let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
            let value = [7u8; 64];
            let end = Instant::now() + Duration::from_secs_f64(seconds);
            let mut sent = 0u64;
            while Instant::now() < end {
                match s.send_to(&value, &to) {
                    Ok(_) => sent += 1,
                    // The device queue is full for a moment: the datagram is not counted.
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            println!("{sent}");
            Ok(())
        }
        Cmd::Run {
            iterations,
            flood_seconds,
            cpu_per_host,
            rate_slots,
        } => {
            // At most 1,000,000 and 1,000 (the parsers' ranges): the casts cannot truncate.
            orchestrate(
                domain.as_str(),
                iterations as usize,
                Flood {
                    seconds: flood_seconds,
                    slots: rate_slots as usize,
                },
                cpu_per_host,
            )
        }
    }
}

// ----- the orchestrator -----

/// The two hosts (namespaces from `tools::hosts`) and the processes started in them.
struct Rig {
    lab: Lab,
    children: Vec<Child>,
    /// The CPU each host runs on (`--cpu-per-host`); `None`: they share them all.
    host_cpus: Option<[usize; 2]>,
}

impl Rig {
    fn cmd(&self, host: usize, program: &Path) -> Command {
        match self.host_cpus {
            Some(cpus) => self.lab.command_on_cpu(host, cpus[host], program),
            None => self.lab.command(host, program),
        }
    }

    fn spawn(&mut self, mut c: Command) -> Result<(), String> {
        let child = c
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        self.children.push(child);
        Ok(())
    }

    /// Stops the process started last.
    fn stop_last(&mut self) {
        if let Some(mut p) = self.children.pop() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }

    fn output(&self, mut c: Command) -> Result<String, String> {
        let out = c.output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            // The part: what follows `--domain <domain>` on its command line.
            let args: Vec<_> = c.get_args().map(|a| a.to_string_lossy()).collect();
            let part = args
                .iter()
                .position(|a| a == "--domain")
                .map_or(&args[..], |i| &args[(i + 2).min(args.len())..]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            // The part's own message starts with the program's name too.
            let stderr = stderr.trim();
            let stderr = stderr.strip_prefix("net-bench: ").unwrap_or(stderr);
            return Err(format!("`{}` {}: {stderr}", part.join(" "), out.status));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Rounds per size; each runs a fresh raw ping and a fresh reflection ping (each with its own
/// 50 warm-up round trips).
const ROUNDS: usize = 5;

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>, String> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| format!("cannot read this process's CPUs: {e}"))?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
}

/// The nanosecond samples a ping printed as one JSON array, and on the next line how many
/// round trips it lost (not in the samples: they would pull the tail in).
fn trips(output: &str) -> Result<(Vec<u64>, u64), String> {
    let mut lines = output.lines();
    let samples =
        serde_json::from_str(lines.next().unwrap_or_default().trim()).map_err(|e| e.to_string())?;
    let lost = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("a ping printed no count of lost round trips")?;
    Ok((samples, lost))
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

fn orchestrate(
    domain: &str,
    iterations: usize,
    flood: Flood,
    cpu_per_host: bool,
) -> Result<(), String> {
    let flood_seconds = flood.seconds;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let registry = me.with_file_name("registry-server");
    let inspect = me.with_file_name("bus-inspect");
    let host_cpus = if cpu_per_host {
        let allowed = allowed_cpus()?;
        match allowed[..] {
            [a, b, ..] => Some([a, b]),
            _ => {
                return Err(format!(
                    "--cpu-per-host needs 2 CPUs (one per host); this process may use \
                     {allowed:?}"
                ))
            }
        }
    } else {
        None
    };
    let mut lab = Rig {
        lab: Lab::new("nb", &["hA", "hB"])?,
        children: Vec::new(),
        host_cpus,
    };
    let pong_addr = format!("{}:9999", lab.lab.hosts[1].address);
    for (h, name) in [(0, "hA"), (1, "hB")] {
        let mut c = lab.cmd(h, &registry);
        c.args([
            "--domain",
            domain,
            "--net",
            "--host",
            name,
            "--announce-ms",
            "100",
        ]);
        lab.spawn(c)?;
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut c = lab.cmd(1, &me);
    c.args(["--domain", domain, "udp-pong", "9999"]);
    lab.spawn(c)?;
    match host_cpus {
        Some([a, b]) => println!("placement: hA on CPU {a}, hB on CPU {b} (--cpu-per-host)\n"),
        None => println!("placement: hA and hB share every CPU\n"),
    }
    println!(
        "| case | size | n | lost | p50 µs | p99 µs | p99.9 µs | max µs | p50 ratio vs raw UDP |\n|---|---|---|---|---|---|---|---|---|"
    );
    for size in [64usize, 1024, 65536] {
        let n = if size >= 65536 {
            iterations / 4
        } else {
            iterations
        };
        let mut c = lab.cmd(1, &me);
        c.args(["--domain", domain, "pong", &size.to_string()]);
        lab.spawn(c)?;
        // Raw and reflection alternate in rounds and their samples are pooled: how fast this
        // VM wakes a halted vCPU drifts within a minute, and one block of each would compare
        // two different moments.
        let per_round = n.div_ceil(ROUNDS);
        let (mut raw, mut bus) = (Vec::new(), Vec::new());
        let (mut raw_lost, mut bus_lost) = (0, 0);
        for _ in 0..ROUNDS {
            let mut c = lab.cmd(0, &me);
            c.args(["--domain", domain, "udp-ping", &pong_addr])
                .args([size.to_string(), per_round.to_string()]);
            let (samples, lost) = trips(&lab.output(c)?)?;
            raw.extend(samples);
            raw_lost += lost;
            let mut c = lab.cmd(0, &me);
            c.args(["--domain", domain, "ping"])
                .args([size.to_string(), per_round.to_string()]);
            let (samples, lost) = trips(&lab.output(c)?)?;
            bus.extend(samples);
            bus_lost += lost;
        }
        let r = Stats::of(&mut raw).ok_or("no raw UDP samples")?;
        let b = Stats::of(&mut bus).ok_or("no reflection samples")?;
        println!(
            "| raw UDP ping-pong | {size} | {} | {raw_lost} | {} | {} | {} | {} | 1.00 |",
            raw.len(),
            us(r.p50),
            us(r.p99),
            us(r.p999),
            us(r.max)
        );
        println!(
            "| reflection round trip | {size} | {} | {bus_lost} | {} | {} | {} | {} | {:.2} |",
            bus.len(),
            us(b.p50),
            us(b.p99),
            us(b.p999),
            us(b.max),
            b.p50 as f64 / r.p50.max(1) as f64
        );
        // Stop this size's pong (it holds /bench/pong with this capacity).
        lab.stop_last();
        std::thread::sleep(Duration::from_millis(300));
    }
    // Update rate: hB subscribes (so hA reflects), hA floods; count hB's mirror writes.
    let mirrored = |lab: &Rig| -> Result<u64, String> {
        let mut c = lab.cmd(1, &inspect);
        c.args([
            "--domain",
            domain,
            "get",
            "/baton/registry/hB/net",
            "--json",
        ]);
        let v: serde_json::Value =
            serde_json::from_str(lab.output(c)?.trim()).map_err(|e| e.to_string())?;
        Ok(v["values_mirrored"].as_u64().unwrap_or(0))
    };
    println!();
    let raw_rate = raw_flood(&mut lab, domain, &me, flood_seconds)?;
    // One slot twice: the writer at the registry's priority, then at the lowest (`nice -n
    // 19`). A writer that writes millions of values a second keeps a CPU busy; where it shares
    // one with its registry (always with --cpu-per-host) it takes half of the CPU the
    // reflection needs. At the lowest priority it takes only what the registries leave: the
    // reflection's own rate. Then many slots written in turn, at normal priority: what comes
    // of one slot per datagram and system call, or of several.
    let mut counting = 0;
    for (niced, slots, writer) in [
        (false, 1, "1 slot, writer at normal priority".to_string()),
        (true, 1, "1 slot, writer at nice 19".to_string()),
        (
            false,
            flood.slots,
            format!("{} slots in turn, writer at normal priority", flood.slots),
        ),
    ] {
        if slots != counting {
            // A subscriber on hB of exactly these slots (so that hA reflects them).
            if counting != 0 {
                lab.stop_last();
            }
            let mut c = lab.cmd(1, &me);
            c.args(["--domain", domain, "count", &slots.to_string()]);
            lab.spawn(c)?;
            counting = slots;
            std::thread::sleep(Duration::from_millis(500 + 10 * slots as u64));
        }
        let before = mirrored(&lab)?;
        let mut c = if niced {
            let mut c = lab.cmd(0, Path::new("nice"));
            c.args(["-n", "19"]).arg(&me);
            c
        } else {
            lab.cmd(0, &me)
        };
        c.args([
            "--domain",
            domain,
            "flood",
            &flood_seconds.to_string(),
            &slots.to_string(),
        ]);
        let written: u64 = lab
            .output(c)?
            .trim()
            .parse()
            .map_err(|e: std::num::ParseIntError| e.to_string())?;
        std::thread::sleep(Duration::from_millis(1100));
        let after = mirrored(&lab)?;
        let rate = (after - before) as f64 / flood_seconds;
        println!(
            "update rate, 64 B, {writer}: {written} values written on hA in {flood_seconds} s \
             ({:.0}/s); {} written into hB's mirror ({rate:.0}/s, {:.2}x raw UDP)",
            written as f64 / flood_seconds,
            after - before,
            rate / raw_rate.max(1.0)
        );
    }
    Ok(())
}

/// The update rate's baseline: hA sends 64 B datagrams to hB as fast as it can for
/// `seconds`, hB counts those it receives; returns them per second. Each reflected value is
/// one datagram as well (its 64 B and the reflection's header), so this is how many the two
/// hosts' kernels carry when nothing else runs.
fn raw_flood(lab: &mut Rig, domain: &str, me: &Path, seconds: f64) -> Result<f64, String> {
    const PORT: &str = "9998";
    let mut c = lab.cmd(1, me);
    c.args(["--domain", domain, "udp-sink", PORT, &seconds.to_string()])
        .stdout(Stdio::piped());
    // One of the rig's children, killed with it if anything below fails; it ends on its own a
    // second after the flood.
    lab.children.push(c.spawn().map_err(|e| e.to_string())?);
    // Its socket bound before the first datagram is sent: none goes uncounted.
    let mut ready = String::new();
    let stdout = lab
        .children
        .last_mut()
        .and_then(|c| c.stdout.as_mut())
        .ok_or("the UDP sink's output")?;
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready)
        .map_err(|e| format!("the UDP sink: {e}"))?;
    if ready.trim() != "ready" {
        return Err(format!("the UDP sink did not start (it said {ready:?})"));
    }
    let to = format!("{}:{PORT}", lab.lab.hosts[1].address);
    let mut c = lab.cmd(0, me);
    c.args(["--domain", domain, "udp-flood", &to, &seconds.to_string()]);
    let sent: u64 = lab
        .output(c)?
        .trim()
        .parse()
        .map_err(|e: std::num::ParseIntError| e.to_string())?;
    let out = lab
        .children
        .pop()
        .ok_or("the UDP sink is gone")?
        .wait_with_output()
        .map_err(|e| e.to_string())?;
    let received: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e: std::num::ParseIntError| format!("the UDP sink's count: {e}"))?;
    if received == 0 {
        return Err(format!(
            "the raw UDP flood: none of {sent} datagrams sent from hA to {to} arrived on hB"
        ));
    }
    let rate = received as f64 / seconds;
    println!(
        "raw UDP flood, 64 B: {sent} datagrams sent from hA in {seconds} s ({:.0}/s); \
         {received} received on hB ({rate:.0}/s)",
        sent as f64 / seconds
    );
    Ok(rate)
}
