//! The arbitration benchmark: latency from a controller's write of its block to the arbiter's
//! coherent command being readable, with 1, 8 and 32 controllers and 1 and 4 arbiter processes,
//! against the bus's own wait-mode one-way latency (a write, a wake in another process and a
//! write back) measured in the same run.
//!
//! Both are taken from the slots' own write times (CLOCK_REALTIME, one machine): "readable" is
//! the moment the arbiter's command write completed, as the bus stamped it.
//!
//! Cross-core wake-up latency on a virtual machine drifts by a factor of two between minutes,
//! so every arbitration case also takes one baseline sample after each of its own samples
//! (interleaved, same processes): a case is compared with the baseline measured alongside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arbiter::protocol::{
    command_slot, controller_slot, now_ns, ControllerBlock, ManagerConfig, ResourceCommand, Status,
    Unlisted, MANAGER_SLOT,
};
use bus::{Bus, Domain};

use crate::bench::stats::Stats;

const ECHO_IN: &str = "/bench/arbitration/ping";
const ECHO_OUT: &str = "/bench/arbitration/pong";
const WATCHDOG: Duration = Duration::from_secs(10);

/// One measured case.
pub struct Case {
    pub name: String,
    pub stats: Stats,
    /// The bus one-way latency sampled interleaved with this case (`None` for the baseline's
    /// own row).
    pub baseline: Option<Stats>,
}

/// Children killed and the domain's memory removed on drop.
pub struct Rig {
    pub domain: Domain,
    pub dir: PathBuf,
    children: Vec<Child>,
    /// The stand-in robot manager, one publication for the whole run: a case dropping its own
    /// and the next creating another raced the registry's unregistration of the first.
    manager: Option<bus::Publication<ManagerConfig>>,
}

impl Rig {
    /// The domain a rig of this process runs in, and the directory of its config files.
    pub fn domain_and_dir() -> Result<(Domain, PathBuf), String> {
        let domain =
            Domain::new(&format!("arbbench-{}", std::process::id())).map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!("baton-{domain}"));
        Ok((domain, dir))
    }

    pub fn new() -> Result<Rig, String> {
        let (domain, dir) = Self::domain_and_dir()?;
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut rig = Rig {
            domain,
            dir,
            children: Vec::new(),
            manager: None,
        };
        rig.spawn("registry-server", &[])?;
        let deadline = Instant::now() + WATCHDOG;
        while bus::protocol::connect(&rig.domain).is_err() {
            if Instant::now() > deadline {
                return Err("registry-server did not come up".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(rig)
    }

    pub fn spawn(&mut self, program: &str, args: &[&str]) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let path = if program == "self" {
            exe
        } else {
            exe.with_file_name(program)
        };
        let child = Command::new(&path)
            .args(args)
            .args(["--domain", self.domain.as_str()])
            .env(crate::interrupted::RUN_MARK, self.domain.as_str())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", path.display()))?;
        self.children.push(child);
        Ok(())
    }
}

impl Rig {
    /// Stops the children started after the first `keep`.
    fn stop_after(&mut self, keep: usize) {
        for mut c in self.children.drain(keep..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.domain.remove_all_segments();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The echo child: writes every value it receives on `ECHO_IN` back on `ECHO_OUT`.
pub fn echo(domain: &Domain) -> Result<(), String> {
    let bus = Bus::open(domain.clone()).map_err(err)?;
    let mut input = bus.subscribe::<u64>(ECHO_IN).map_err(err)?;
    let mut output = bus.publish::<u64>(ECHO_OUT).map_err(err)?;
    loop {
        if input.wait_update(Duration::from_secs(3600)).map_err(err)? {
            if let Some(v) = input.value() {
                output.write(v).map_err(err)?;
            }
        }
    }
}

/// The baseline's two ends: `ECHO_IN` written here, the echo process's write back on
/// `ECHO_OUT` awaited.
pub struct Echo {
    ping: bus::Publication<u64>,
    pong: bus::Subscription<u64>,
    next: u64,
}

impl Echo {
    /// Starts the echo process.
    pub fn start(rig: &mut Rig) -> Result<Echo, String> {
        rig.spawn("self", &["echo"])?;
        let bus = Bus::open(rig.domain.clone()).map_err(err)?;
        let ping = bus.publish::<u64>(ECHO_IN).map_err(err)?;
        let pong = bus.subscribe::<u64>(ECHO_OUT).map_err(err)?;
        Ok(Echo {
            ping,
            pong,
            next: 0,
        })
    }

    /// One wait-mode one-way sample: write → another process wakes and writes back; the time
    /// from before the write to the write-back's stamp. Sleeps afterwards so that the echo
    /// process is asleep again before the next sample (wake-up latency, not a busy pipeline).
    pub fn sample(&mut self) -> Result<u64, String> {
        self.next += 1;
        let i = self.next;
        let t0 = now_ns();
        self.ping.write(&i).map_err(err)?;
        wait_for(&mut self.pong, |v| *v == i)?;
        let written = self.pong.meta().map(|m| m.write_time).ok_or("no pong")?;
        std::thread::sleep(Duration::from_micros(200));
        Ok(ns_since(written, t0))
    }
}

/// Wait-mode one-way latency of the bus, as one block of samples.
pub fn bus_one_way(echo: &mut Echo, iterations: usize) -> Result<Case, String> {
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + iterations / 10 {
        let ns = echo.sample()?;
        if i >= iterations / 10 {
            samples.push(ns);
        }
    }
    Ok(Case {
        name: "bus one-way (wait mode, write back)".into(),
        stats: Stats::of(&mut samples).ok_or("no samples")?,
        baseline: None,
    })
}

fn ns_since(t: std::time::SystemTime, t0: u64) -> u64 {
    let t = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t.saturating_sub(t0)
}

fn wait_for<T: 'static>(
    sub: &mut bus::Subscription<T>,
    done: impl Fn(&T) -> bool,
) -> Result<(), String>
where
    bus::Serde: bus::Codec<T>,
{
    let deadline = Instant::now() + WATCHDOG;
    loop {
        if sub.value().is_some_and(&done) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("timed out waiting for the echo / arbiter".into());
        }
        sub.wait_update(WATCHDOG).map_err(err)?;
    }
}

fn arbiter_config(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let mut text = format!("name = \"{name}\"\n");
    for r in 0..4 {
        text.push_str(&format!(
            "[[resources]]\nname = \"r{r}\"\nmin = -1e9\nmax = 1e9\n"
        ));
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).map_err(err)?;
    Ok(path)
}

/// Controller write → coherent command readable, with `controllers` controllers and `arbiters`
/// arbiter processes, each arbiter following every controller.
pub fn arbitration(
    rig: &mut Rig,
    echo: &mut Echo,
    controllers: usize,
    arbiters: usize,
    iterations: usize,
) -> Result<Case, String> {
    let bus = Bus::open(rig.domain.clone()).map_err(err)?;
    let names: Vec<String> = (0..arbiters)
        .map(|a| format!("c{controllers}a{arbiters}x{a}"))
        .collect();
    let controller_names: Vec<String> = (0..controllers)
        .map(|c| format!("c{controllers}a{arbiters}c{c}"))
        .collect();
    if rig.manager.is_none() {
        rig.manager = Some(
            bus.publication(MANAGER_SLOT)
                .map_err(err)?
                .capacity(64 * 1024)
                .create::<ManagerConfig, bus::Serde>()
                .map_err(err)?,
        );
    }
    let manager = rig.manager.as_mut().ok_or("no manager publication")?;
    manager
        .write(&ManagerConfig {
            controllers: controller_names.clone(),
            arbiters: names.clone(),
            unlisted: Unlisted::Ignore,
            revision: (controllers * 10 + arbiters) as u64,
        })
        .map_err(err)?;
    // This case's arbiters are stopped at its end, so that they never load the next case.
    let before = rig.children.len();
    let result = measure_arbitration(rig, echo, &bus, &names, &controller_names, iterations);
    rig.stop_after(before);
    let (mut samples, mut baseline) = result?;
    Ok(Case {
        name: format!("{controllers} controllers, {arbiters} arbiter(s)"),
        stats: Stats::of(&mut samples).ok_or("no samples")?,
        baseline: Some(Stats::of(&mut baseline).ok_or("no baseline samples")?),
    })
}

/// Returns the case's samples and the baseline samples interleaved with them.
fn measure_arbitration(
    rig: &mut Rig,
    echo: &mut Echo,
    bus: &Bus,
    names: &[String],
    controller_names: &[String],
    iterations: usize,
) -> Result<(Vec<u64>, Vec<u64>), String> {
    for name in names {
        let config = arbiter_config(&rig.dir, name)?;
        rig.spawn("arbiter", &["--config", config.to_str().ok_or("path")?])?;
    }
    // Every controller commands one resource of every arbiter; c0 (highest priority) r0.
    let mut blocks = Vec::new();
    for (c, name) in controller_names.iter().enumerate() {
        let commands: BTreeMap<String, f64> = names
            .iter()
            .map(|a| (format!("{a}/r{}", c % 4), 0.0))
            .collect();
        let block = ControllerBlock {
            name: name.clone(),
            status: Status::Compromising,
            commands,
            stamp_ns: now_ns(),
            ttl_ms: 3_600_000,
            session: c as u64 + 1,
        };
        let mut publication = bus
            .publication(&controller_slot(name))
            .map_err(err)?
            .capacity(arbiter::process::BLOCK_CAPACITY)
            .create::<ControllerBlock, bus::Serde>()
            .map_err(err)?;
        publication.write(&block).map_err(err)?;
        blocks.push((publication, block));
    }
    let mut command = bus
        .subscribe::<ResourceCommand>(&command_slot(&names[0]))
        .map_err(err)?;
    let key = format!("{}/r0", names[0]);
    let mut samples = Vec::with_capacity(iterations);
    let mut baseline = Vec::with_capacity(iterations);
    let warmup = iterations / 10;
    for i in 0..iterations + warmup {
        let value = (i + 1) as f64;
        let (publication, block) = &mut blocks[0];
        block.commands.insert(key.clone(), value);
        block.stamp_ns = now_ns();
        let t0 = now_ns();
        publication.write(block).map_err(err)?;
        wait_for(&mut command, |c| c.setpoints.get("r0") == Some(&value))?;
        let written = command.meta().map(|m| m.write_time).ok_or("no command")?;
        std::thread::sleep(Duration::from_micros(300));
        let base = echo.sample()?;
        if i >= warmup {
            samples.push(ns_since(written, t0));
            baseline.push(base);
        }
    }
    Ok((samples, baseline))
}
