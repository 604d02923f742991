//! `robot-manager`: publishes the robot controllers' priority order on `/robot/manager`.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bus::directory::{Directory, DIRECTORY_SLOT};
use clap::Parser;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use robot_manager::{controller_block_hash, controllers_in, merge_discovered, ManagerFile};

#[derive(Parser)]
#[command(
    version,
    about = "Publish the priority order of robot controllers on /robot/manager",
    long_about = "Publish the priority order of robot controllers on /robot/manager, for the \
control arbiters to follow.\n\n\
The file is reloaded on SIGHUP and whenever it changes; an invalid new file is reported and the \
previous config stays in force. Controllers that appear on the bus without being listed are \
ignored, or placed after the listed ones with `unlisted = \"last\"`.\n\n\
Exit status: 0 on SIGTERM or SIGINT (the order in force stays on /robot/manager); 1 for a file \
that is not valid at start, another manager publishing the order, or a bus failure; 2 for a \
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
    let mut args = Args::parse();
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
    let mut fingerprint = Fingerprint::of(&args.config);
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
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| format!("inotify: {e}"))?;
    // Watch the config's directory: editors replace files rather than write them in place.
    // A config that is a symlink is watched where it points too (a deployment tool may edit
    // the target).
    // Not IN_CREATE: a file just created is usually still empty; its close comes next.
    // IN_MODIFY only says a write is under way (see `writing` below). A watched directory
    // moved or removed no longer holds the config: its watch is dropped and the directory
    // now at the path watched (IN_IGNORED comes without asking). IN_ATTRIB: a file this
    // process may not read becomes readable by a change of its mode or owner alone.
    let changes = AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_DELETE_SELF;
    let mut watches = Vec::new();
    watch_config(&inotify, &mut watches, &args.config, changes).map_err(|e| e.message)?;

    let bus = bus::Bus::open(domain.clone()).map_err(|e| e.to_string())?;
    let mut publication = bus
        .publication(arbiter::protocol::MANAGER_SLOT)
        .map_err(|e| e.to_string())?
        .capacity(64 * 1024)
        .create::<arbiter::protocol::ManagerConfig, bus::Serde>()
        .map_err(|e| e.to_string())?;
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
        e => e.to_string(),
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
    // Since when someone writes the config in place (modified, not closed yet): a change the
    // periodic look finds then is a half-written file, and its close event comes next. A
    // close never seen (the file written through a link elsewhere) stops counting after
    // `WRITE_UNFINISHED_FOR`.
    let mut writing: Option<std::time::Instant> = None;
    // Why a directory of the config is not watched now, as last logged. While it is missing
    // (removed, to be replaced) the file is looked at only once its directory is watched again
    // (tried every `WATCH_AGAIN_EVERY`), so that no write in place goes unseen between the two;
    // another failure (no permission, the inotify watch limit) leaves the periodic look to
    // find changes, as it cannot be waited out.
    let mut unwatched: Option<WatchError> = None;
    // A change of the file found without an event for it (a look, or a wake for another
    // reason), and since when: taken once the file has stayed so for `CONFIRM_AFTER`. A write
    // in place truncates the file before it writes, and a look can fall between the
    // truncation and the reading of its event: an empty file was taken (and refused, with an
    // error) while a valid one was being written.
    let mut unconfirmed: Option<(Fingerprint, std::time::Instant)> = None;
    starting.store(false, Ordering::SeqCst);
    loop {
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(directory_wake.as_fd(), PollFlags::POLLIN),
        ];
        // inotify misses some replacements (the config's directory replaced, a symlink on
        // the way re-pointed); a look at the file every few seconds catches those. Until the
        // registry has bound the order's slot, also look for its refusal.
        let timeout = if unwatched.as_ref().is_some_and(|e| e.missing) {
            WATCH_AGAIN_EVERY
        } else {
            let look = if publication.is_bound() {
                LOOK_EVERY
            } else {
                REFUSAL_LOOK_EVERY
            };
            // A change waiting to be confirmed: looked at again when it has held long enough
            // (whole milliseconds, rounded up: a poll that ends early only looks again).
            unconfirmed.as_ref().map_or(look, |(_, since)| {
                let left = CONFIRM_AFTER.saturating_sub(since.elapsed());
                u16::try_from(left.as_millis() + 1).map_or(look, |ms| ms.min(look))
            })
        };
        match poll(&mut fds, PollTimeout::from(timeout)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        health.begin();
        if let Some(e) = publication.bind_error() {
            // Two managers started before the registry: the one refused must not go on
            // logging an order that is not in force.
            return Err(e.to_string());
        }
        if said_unbound && publication.is_bound() {
            said_unbound = false;
            tracing::info!(
                "the registry took the priority order (revision {revision}): in force on {}",
                arbiter::protocol::MANAGER_SLOT
            );
        }
        let mut reload = hangup_while_starting.swap(false, Ordering::SeqCst);
        if reload {
            tracing::info!(
                "SIGHUP (while joining the bus): reloading {}",
                args.config.display()
            );
        }
        while let Ok(Some(signal)) = signals.read_signal() {
            if signal.ssi_signo == Signal::SIGHUP as u32 {
                tracing::info!("SIGHUP: reloading {}", args.config.display());
                reload = true;
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
        match inotify.read_events() {
            Ok(events) => {
                for event in events {
                    let gone = AddWatchFlags::IN_IGNORED
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_DELETE_SELF;
                    if event.mask.intersects(gone) {
                        if !event.mask.contains(AddWatchFlags::IN_IGNORED) {
                            let _ = inotify.rm_watch(event.wd);
                        }
                        watches.retain(|(wd, ..)| *wd != event.wd);
                        continue;
                    }
                    // A lost event (queue overflow) may have been the config's: reload.
                    let ours = watches
                        .iter()
                        .any(|(wd, _, name, _)| event.wd == *wd && event.name == *name);
                    if ours && event.mask == AddWatchFlags::IN_MODIFY {
                        writing.get_or_insert_with(std::time::Instant::now);
                    } else if ours || event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                        writing = None;
                        reload = true;
                    }
                }
            }
            Err(nix::errno::Errno::EAGAIN) => {}
            Err(e) => {
                tracing::warn!("watching the config: {e}; reloading it to be safe");
                reload = true;
            }
        }
        // The symlink may point elsewhere now, or a directory be a new one: watch where it
        // leads, before looking at the file (a failure here is a reason to try again soon,
        // not a reason to stop).
        match watch_config(&inotify, &mut watches, &args.config, changes) {
            Ok(()) => {
                if unwatched.take().is_some() {
                    tracing::info!("watching {} again", args.config.display());
                }
            }
            Err(e) => {
                if unwatched.as_ref() != Some(&e) {
                    if e.missing {
                        tracing::warn!("{}; trying again every {WATCH_AGAIN_EVERY} ms", e.message);
                    } else {
                        tracing::warn!(
                            "{}; looking at the file every {} s instead",
                            e.message,
                            LOOK_EVERY / 1000
                        );
                    }
                }
                unwatched = Some(e);
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
        let now = Fingerprint::of(&args.config);
        let half_written = writing.is_some_and(|t| t.elapsed() < WRITE_UNFINISHED_FOR);
        if reload && half_written {
            // A SIGHUP (`systemctl reload` fired by a tool) while the file is written in place:
            // what is there is half of it. Its close event reloads it.
            tracing::info!(
                "{} is being written (changed, not closed yet): reloading it once it is closed",
                args.config.display()
            );
            reload = false;
        }
        // A change found without an event waits until the file is watched (SIGHUP does not).
        let waiting_for_directory = unwatched.as_ref().is_some_and(|e| e.missing);
        if now == fingerprint {
            unconfirmed = None;
        } else if reload {
            fingerprint = now;
        } else if half_written || waiting_for_directory {
            // Its event comes next (or the watch again): no look needed meanwhile.
            unconfirmed = None;
        } else {
            match &unconfirmed {
                Some((seen, since)) if *seen == now => {
                    if since.elapsed() >= CONFIRM_AFTER {
                        fingerprint = now;
                        reload = true;
                    }
                }
                _ => unconfirmed = Some((now, std::time::Instant::now())),
            }
        }
        if reload {
            unconfirmed = None;
        }
        let mut candidate = None;
        if reload {
            match ManagerFile::load(&args.config) {
                Ok(new) => {
                    warn_cautions(&args.config, &new);
                    candidate = Some(new);
                }
                Err(e) => keep_previous(&e),
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
                Err(e) => return Err(e.to_string()),
            }
        }
        if let Some(new) = candidate {
            file = new;
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

/// How often, in milliseconds, the config file is looked at besides inotify's events.
const LOOK_EVERY: u16 = 2000;
/// How long a change found without an event must hold before it is taken.
const CONFIRM_AFTER: std::time::Duration = std::time::Duration::from_millis(500);
/// How long a write in place of the config (modified, not yet closed) defers the periodic look.
const WRITE_UNFINISHED_FOR: std::time::Duration = std::time::Duration::from_secs(30);
/// How often, in milliseconds, to try again to watch a config directory that is not there.
const WATCH_AGAIN_EVERY: u16 = 50;
/// How often, in milliseconds, until the registry has bound the order's slot (or refused it).
const REFUSAL_LOOK_EVERY: u16 = 200;

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

/// The watches on the config: the directory of its path and of the file it leads to (through
/// symlinks), with the file name looked for in each and the directory's identity (device,
/// inode) when it was watched.
type ConfigWatches = Vec<(
    nix::sys::inotify::WatchDescriptor,
    PathBuf,
    Option<std::ffi::OsString>,
    (u64, u64),
)>;

/// Why a directory of the config could not be watched.
#[derive(PartialEq)]
struct WatchError {
    message: String,
    /// The directory is not there (yet): a replacement under way.
    missing: bool,
}

impl WatchError {
    fn of(dir: &Path, e: std::io::Error) -> WatchError {
        WatchError {
            message: format!("watching {}: {e}", dir.display()),
            missing: e.kind() == std::io::ErrorKind::NotFound,
        }
    }
}

/// Watches `config`'s directory and, if it is a symlink, its target's, unless watched already.
/// A directory replaced under its path (a deployment tool swaps the whole directory) is
/// watched anew: inotify follows the old one, which no longer holds the config.
fn watch_config(
    inotify: &Inotify,
    watches: &mut ConfigWatches,
    config: &Path,
    changes: AddWatchFlags,
) -> Result<(), WatchError> {
    let target = std::fs::canonicalize(config).ok();
    for path in std::iter::once(config).chain(target.as_deref()) {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path.file_name().map(|n| n.to_owned());
        let identity = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(dir)
                .map(|m| (m.dev(), m.ino()))
                .map_err(|e| WatchError::of(dir, e))?
        };
        let at = watches
            .iter()
            .position(|(_, d, n, _)| d == dir && *n == name);
        match at {
            Some(i) if watches[i].3 == identity => continue,
            Some(i) => {
                let (old, ..) = watches.remove(i);
                // The kernel has already dropped it if the old directory was removed.
                let _ = inotify.rm_watch(old);
            }
            None => {}
        }
        let wd = inotify
            .add_watch(dir, changes)
            .map_err(|e| WatchError::of(dir, e.into()))?;
        watches.push((wd, dir.to_owned(), name, identity));
    }
    Ok(())
}

/// What identifies the config file's content, and whether this process may read it, without
/// reading it: the file the path leads to (through any symlinks), its size, and its
/// modification and change times (the change time moves with its mode and owner too). `None`
/// while its metadata cannot be read.
#[derive(PartialEq)]
struct Fingerprint(Option<[i64; 7]>);

impl Fingerprint {
    fn of(path: &Path) -> Fingerprint {
        use std::os::unix::fs::MetadataExt;
        Fingerprint(std::fs::metadata(path).ok().map(|m| {
            [
                m.dev() as i64,
                m.ino() as i64,
                m.size() as i64,
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            ]
        }))
    }
}

/// The order on `/robot/manager` when this manager starts (a previous manager's, kept in the
/// slot; the arbiters follow it); empty when there is none. Read from the segment itself, so
/// that it is found also while no registry runs.
fn order_in_force(domain: &bus::Domain) -> Vec<String> {
    use arbiter::protocol::{ManagerConfig, MANAGER_SLOT};
    let read = || -> Option<Vec<String>> {
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
        bus::codec::decode::<ManagerConfig>(&bytes)
            .ok()
            .map(|m| m.controllers)
    };
    read().unwrap_or_default()
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
                    // The registry made the directory anew (it restarted on a corrupted
                    // segment): only a new subscription follows the new one.
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
