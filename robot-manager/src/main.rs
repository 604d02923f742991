//! `robot-manager`: publishes the robot controllers' priority order on `/robot/manager`.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bus::directory::{Directory, DIRECTORY_SLOT};
use clap::Parser;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use robot_manager::config_watch::{ConfigWatch, Fingerprint, LOOK_EVERY};
use robot_manager::{controller_block_hash, controllers_in, merge_discovered, ManagerFile};

#[derive(Parser)]
#[command(
    version = daemon::version(bus::slot::VERSION, None),
    about = "Publish the priority order of robot controllers on /robot/manager",
    long_about = "Publish the priority order of robot controllers on /robot/manager, for the \
control arbiters to follow.\n\n\
The file is reloaded on SIGHUP and whenever it changes; an invalid new file is reported and the \
previous config stays in force. Controllers that appear on the bus without being listed are \
ignored, or placed after the listed ones with `unlisted = \"last\"`.\n\n\
Exit status: 0 on SIGTERM or SIGINT (the order in force stays on /robot/manager); 1 for a file \
that is not valid at start, another manager publishing the order, or a bus failure; 64 for a \
command line that does not parse.\n\n\
Config (TOML):\n  controllers = [\"teleop\", \"autonomy\"]   # highest priority first\n  \
arbiters = [\"arm\", \"drive\"]\n  unlisted = \"last\"                      # or \"ignore\" (default)"
)]
struct Args {
    /// Manager configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Check the configuration file and exit (0: valid, with a summary; 1: what is wrong),
    /// touching no bus: to test a file before deploying it.
    #[arg(long)]
    check: bool,
    /// Bus domain.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN,
          value_parser = bus::Domain::parse_arg)]
    domain: bus::Domain,
}

fn main() {
    // Block SIGHUP (reload), SIGTERM and SIGINT (stop) before any thread starts, so that they
    // reach only our signalfd.
    let mut handled = SigSet::empty();
    for signal in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT] {
        handled.add(signal);
    }
    if let Err(e) = handled.thread_block() {
        daemon::exit_on_error("robot-manager", format_args!("blocking signals: {e}"));
    }
    daemon::init_logging("info");
    let mut args: Args = daemon::parse_args();
    if args.check {
        match ManagerFile::load(&args.config) {
            Ok(file) => {
                println!("{}: valid: {}", args.config.display(), file.summary());
                for caution in file.cautions() {
                    println!("caution: {caution}");
                }
                return;
            }
            Err(e) => daemon::exit_on_error("robot-manager", e),
        }
    }
    // Absolute from the start: a relative path would stay relative to the directory the
    // manager started in, even after that directory is replaced.
    match std::path::absolute(&args.config) {
        Ok(config) => args.config = config,
        Err(e) => {
            daemon::exit_on_error(
                "robot-manager",
                format_args!("{}: {e}", args.config.display()),
            );
        }
    }
    if let Err(e) = run(&args, &handled) {
        daemon::exit_on_error("robot-manager", e);
    }
}

fn run(args: &Args, handled: &SigSet) -> Result<(), String> {
    let domain = args.domain.clone();
    // Before the load: an edit made between the two is then seen as a change.
    let loaded = Fingerprint::of(&args.config);
    let mut file = ManagerFile::load(&args.config)?;
    warn_cautions(&args.config, &file);
    let block_hash = controller_block_hash()?;
    let signals = SignalFd::with_flags(handled, SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;
    let starting = Arc::new(AtomicBool::new(true));
    let hangup_while_starting = Arc::new(AtomicBool::new(false));
    stop_while_starting(
        *handled,
        Arc::clone(&starting),
        Arc::clone(&hangup_while_starting),
    )?;
    let mut config_watch = ConfigWatch::new(&args.config, loaded)?;

    let bus = bus::Bus::open(domain.clone()).map_err(|e| e.to_string())?;
    let mut publication = bus
        .publication(arbiter::protocol::MANAGER_SLOT)
        .map_err(|e| e.to_string())?
        .capacity(64 * 1024)
        .create::<arbiter::protocol::ManagerConfig, bus::Serde>()
        .map_err(order_refused)?;
    let (directory, directory_wake) = watch_directory(&bus)?;
    // Unlisted controllers keep the places the order in force gave them (a restarted manager
    // must not reorder, or for a moment drop, them); the directory then removes those gone.
    let mut discovered: Vec<String> = order_in_force(&domain)
        .into_iter()
        .filter(|c| !file.controllers.contains(c))
        .collect();
    let mut unplaced = 0;
    let mut revision = 1;
    let mut published = file.effective(&discovered, revision);
    publication.write(&published).map_err(|e| match e {
        bus::BusError::TooLarge { size, capacity, .. } => format!(
            "{}: {}",
            args.config.display(),
            order_too_large(size, capacity)
        ),
        e => order_refused(e),
    })?;
    // The controllers of the last order found too large for the slot: said once.
    let mut too_large: Option<Vec<String>> = None;
    tracing::info!(
        "priority order: {:?}{}",
        published.controllers,
        not_in_force_yet(&publication)
    );
    // Whether the order was said not to be in force yet: said again when it is.
    let mut said_unbound = !publication.is_bound();
    daemon::ready("publishing /robot/manager");
    let health = daemon::Health::new();
    let watched = std::sync::Arc::clone(&health);
    let _watchdog = daemon::start_watchdog(move || watched.is_healthy());
    // When the slot was last read back (`READ_BACK_EVERY`).
    let mut read_back = std::time::Instant::now();
    let pause_before_read = std::env::var(PAUSE_BEFORE_READ_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis);
    starting.store(false, Ordering::SeqCst);
    loop {
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(config_watch.as_fd(), PollFlags::POLLIN),
            PollFd::new(directory_wake.as_fd(), PollFlags::POLLIN),
        ];
        // Until the registry has bound the order's slot, also look for its refusal.
        let timeout = config_watch.timeout(if publication.is_bound() {
            LOOK_EVERY
        } else {
            REFUSAL_LOOK_EVERY
        });
        match poll(&mut fds, PollTimeout::from(timeout)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        health.begin();
        if let Some(e) = publication.bind_error() {
            // Two managers started before the registry: the one refused must not go on
            // logging an order that is not in force.
            return Err(order_refused(e));
        }
        if said_unbound && publication.is_bound() {
            said_unbound = false;
            tracing::info!(
                "the registry took the priority order (revision {revision}): in force on {}",
                arbiter::protocol::MANAGER_SLOT
            );
        }
        let mut hangup = hangup_while_starting.swap(false, Ordering::SeqCst);
        if hangup {
            tracing::info!(
                "SIGHUP (while joining the bus): reloading {}",
                args.config.display()
            );
        }
        while let Ok(Some(signal)) = signals.read_signal() {
            if signal.ssi_signo == Signal::SIGHUP as u32 {
                tracing::info!("SIGHUP: reloading {}", args.config.display());
                hangup = true;
            } else {
                // The order stays in its slot: arbiters follow it until a manager writes again.
                let name =
                    Signal::try_from(signal.ssi_signo as i32).map_or("a signal", |s| s.as_str());
                if publication.is_bound() {
                    tracing::info!(
                        "stopping on {name}; the priority order in force stays on /robot/manager"
                    );
                } else {
                    tracing::info!(
                        "stopping on {name}; no registry took the priority order, so none is on \
                         /robot/manager"
                    );
                }
                return Ok(());
            }
        }
        // Drain the wake-ups; the latest directory is what counts.
        let mut drain = [0u8; 64];
        while matches!((&directory_wake).read(&mut drain), Ok(n) if n > 0) {}
        let listed = directory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|d| controllers_in(d, block_hash));
        if let Some(listed) = listed {
            for c in merge_discovered(&mut discovered, &listed) {
                if file.unlisted == arbiter::protocol::Unlisted::Ignore
                    && !file.controllers.contains(&c)
                {
                    tracing::info!(
                        "controller {c} appeared on the bus; not listed, so ignored (unlisted = \
                         \"ignore\")"
                    );
                } else {
                    tracing::info!("controller {c} appeared on the bus");
                }
            }
        }
        let reload = config_watch.reload_due(hangup);
        let mut candidate = None;
        if reload {
            if let Some(pause) = pause_before_read {
                std::thread::sleep(pause);
            }
            let loaded = ManagerFile::load(&args.config);
            // A writer that reopened the file just after closing it: what was read is its
            // new beginning (or nothing), not a file to judge.
            if !config_watch.written_during_load() {
                match loaded {
                    Ok(new) => {
                        warn_cautions(&args.config, &new);
                        candidate = Some(new);
                    }
                    Err(e) => keep_previous(&e),
                }
            }
        }
        let proposed = candidate.as_ref().unwrap_or(&file);
        let next = proposed.effective(&discovered, revision + 1);
        let order_changes = next.controllers != published.controllers
            || next.arbiters != published.arbiters
            || next.unlisted != published.unlisted;
        if candidate.is_some() && !order_changes {
            // Said, so that whoever just fixed or re-read the file knows it was taken.
            tracing::info!(
                "{}: valid; the priority order in force is unchanged",
                args.config.display()
            );
        }
        if order_changes {
            match publication.write(&next) {
                Ok(()) => {
                    revision += 1;
                    published = next;
                    tracing::info!(
                        "priority order (revision {revision}): {:?}{}",
                        published.controllers,
                        not_in_force_yet(&publication)
                    );
                    said_unbound |= !publication.is_bound();
                }
                Err(bus::BusError::TooLarge { size, capacity, .. }) => {
                    let why = order_too_large(size, capacity);
                    if candidate.take().is_some() {
                        keep_previous(&why);
                    } else if too_large.as_ref() != Some(&next.controllers) {
                        // Grown by discovered controllers: they stay unplaced.
                        tracing::error!("not placing the controllers that appeared: {why}");
                    }
                    too_large = Some(next.controllers);
                }
                Err(e) => return Err(order_refused(e)),
            }
        }
        if let Some(new) = candidate {
            file = new;
        }
        // The order is written only when it changes, so memory of its slot overwritten by
        // another process (one bit of its latest-value word: every arbiter then finds the slot
        // inconsistent) would stay so until the next change: read it back now and then, and
        // write it again when it does not read as published.
        if publication.is_bound() && read_back.elapsed() >= READ_BACK_EVERY {
            read_back = std::time::Instant::now();
            if read_order(&domain).as_ref() != Some(&published) {
                tracing::warn!(
                    "{} does not read back as the order published (revision {revision}; its \
                     memory was overwritten, or the slot made anew): writing it again",
                    arbiter::protocol::MANAGER_SLOT
                );
                publication.write(&published).map_err(order_refused)?;
            }
        }
        let now_unplaced = file.unplaced(&discovered);
        if now_unplaced != std::mem::replace(&mut unplaced, now_unplaced) && now_unplaced > 0 {
            tracing::warn!(
                "{now_unplaced} unlisted controller(s) not placed: the order holds at most {} \
                 (an arbiter follows no more)",
                arbiter::process::MAX_CONTROLLERS
            );
        }
        health.end();
    }
}

/// Why the order cannot be published. Another manager holding `/robot/manager` is said in a
/// robot's words: the bus's own ("already has a live publisher") does not say what to do.
fn order_refused(e: bus::BusError) -> String {
    match e {
        bus::BusError::AlreadyPublished { pid, .. } => format!(
            "another robot-manager publishes the priority order on {} ({}): a robot has one \
             manager; stop that one first",
            arbiter::protocol::MANAGER_SLOT,
            bus::error::publisher(pid)
        ),
        e => e.to_string(),
    }
}

/// How often, in milliseconds, until the registry has bound the order's slot (or refused it).
const REFUSAL_LOOK_EVERY: u16 = 200;

/// Test switch: milliseconds to wait between deciding to read the config file again and
/// reading it, so that a test can begin a write in between (a race a slow wake-up opens).
const PAUSE_BEFORE_READ_ENV: &str = "BATON_TEST_MANAGER_PAUSE_BEFORE_READ_MS";
/// How often the order's slot is read back (at the periodic look, `LOOK_EVERY`).
const READ_BACK_EVERY: std::time::Duration = std::time::Duration::from_millis(LOOK_EVERY as u64);

fn order_too_large(size: usize, capacity: usize) -> String {
    format!(
        "the new order takes {size} bytes, more than the {capacity} bytes {} holds",
        arbiter::protocol::MANAGER_SLOT
    )
}

/// Until `starting` is cleared, acts on the stopping signals itself: joining the bus waits up to
/// seconds per call for a registry that does not answer (stopped, hung), and the main loop,
/// which reads the signals, is not running yet; SIGTERM then waited for them all (about 10 s).
/// A stop exits at once (nothing is published yet, or the order just published stays, as on any
/// stop); a SIGHUP is passed on to the main loop through `hangup`. It reads through a signalfd of
/// its own and only while `starting` holds: once the main loop runs, a signal is left pending
/// for the main loop's signalfd.
fn stop_while_starting(
    signals: SigSet,
    starting: Arc<AtomicBool>,
    hangup: Arc<AtomicBool>,
) -> Result<(), String> {
    let fd = SignalFd::with_flags(&signals, SfdFlags::SFD_NONBLOCK)
        .map_err(|e| format!("signalfd: {e}"))?;
    std::thread::Builder::new()
        .name("signals-at-start".into())
        .spawn(move || {
            while starting.load(Ordering::SeqCst) {
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::from(50u16));
                if !starting.load(Ordering::SeqCst) {
                    return;
                }
                while let Ok(Some(signal)) = fd.read_signal() {
                    if signal.ssi_signo == Signal::SIGHUP as u32 {
                        hangup.store(true, Ordering::SeqCst);
                        continue;
                    }
                    let name = Signal::try_from(signal.ssi_signo as i32)
                        .map_or("a signal", |s| s.as_str());
                    tracing::info!("stopping on {name} while joining the bus");
                    std::process::exit(0);
                }
            }
        })
        .map_err(|e| format!("starting the signal thread: {e}"))?;
    Ok(())
}

/// One log line per rejected config (a TOML error's excerpt spans several).
fn keep_previous(why: &str) {
    tracing::error!(
        "keeping the previous config: {}",
        why.split_whitespace().collect::<Vec<_>>().join(" ")
    );
}

/// The order on `/robot/manager` when this manager starts (a previous manager's, kept in the
/// slot; the arbiters follow it); empty when there is none. Read from the segment itself, so
/// that it is found also while no registry runs.
fn order_in_force(domain: &bus::Domain) -> Vec<String> {
    read_order(domain)
        .map(|m| m.controllers)
        .unwrap_or_default()
}

/// The order `/robot/manager` holds, read from the segment itself (also while no registry
/// runs); `None` when there is none, or it does not read (another type, corrupt memory).
fn read_order(domain: &bus::Domain) -> Option<arbiter::protocol::ManagerConfig> {
    use arbiter::protocol::{ManagerConfig, MANAGER_SLOT};
    let name = bus::SlotName::public(MANAGER_SLOT).ok()?;
    let slot = bus::slot::Slot::open(&domain.segment_name(&name), false).ok()?;
    let expected = bus::schema::Schema::of_serde::<ManagerConfig>()
        .ok()?
        .hash();
    if slot.schema().hash.0 != expected.0 {
        return None;
    }
    let mut bytes = Vec::new();
    slot.read(0, &mut bytes).ok()??;
    bus::codec::decode::<ManagerConfig>(&bytes).ok()
}

/// The directory as last read by the directory thread.
type LatestDirectory = Arc<Mutex<Option<Directory>>>;

/// Subscribes to the registry's directory on a thread of its own, which waits on it and, on
/// each new value, stores it and writes a byte to the returned socket, so that the main loop's
/// `poll` wakes. The directory also lists the controllers of other computers.
fn watch_directory(bus: &bus::Bus) -> Result<(LatestDirectory, UnixStream), String> {
    let mut subscription = bus
        .subscribe::<Directory>(DIRECTORY_SLOT)
        .map_err(|e| e.to_string())?;
    let (wake, woken) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    for s in [&wake, &woken] {
        s.set_nonblocking(true)
            .map_err(|e| format!("socketpair: {e}"))?;
    }
    let latest = Arc::new(Mutex::new(None));
    let shared = Arc::clone(&latest);
    let bus = bus.clone();
    std::thread::Builder::new()
        .name("directory".into())
        .spawn(move || loop {
            match subscription.wait_update(Duration::from_secs(3600)) {
                Ok(true) => {
                    *shared.lock().unwrap_or_else(|p| p.into_inner()) =
                        subscription.value().cloned();
                    // A full socket already holds a pending wake-up.
                    let _ = (&wake).write(&[1]);
                }
                Ok(false) => {}
                Err(bus::BusError::Replaced { .. }) => {
                    // The registry made the directory anew (its segment was damaged): a new
                    // subscription reads the new one at once (the old one would from its next
                    // update on).
                    match bus.subscribe::<Directory>(DIRECTORY_SLOT) {
                        Ok(again) => subscription = again,
                        Err(e) => {
                            tracing::warn!("subscribing to {DIRECTORY_SLOT} again: {e}");
                            std::thread::sleep(Duration::from_secs(1));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!("reading {DIRECTORY_SLOT}: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })
        .map_err(|e| format!("starting the directory thread: {e}"))?;
    Ok((latest, woken))
}

/// What a log line of the order adds while no registry has taken it: it is on the bus, and in
/// force, only once one has.
fn not_in_force_yet(
    publication: &bus::Publication<arbiter::protocol::ManagerConfig>,
) -> &'static str {
    if publication.is_bound() {
        ""
    } else {
        " (not in force yet: on /robot/manager once registry-server runs and takes it)"
    }
}

fn warn_cautions(path: &std::path::Path, file: &ManagerFile) {
    for caution in file.cautions() {
        tracing::warn!("{}: {caution}", path.display());
    }
}
