//! `robot-manager`: publishes the robot controllers' priority order on `/robot/manager`.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
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
Config (TOML):\n  controllers = [\"teleop\", \"autonomy\"]   # highest priority first\n  \
arbiters = [\"arm\", \"drive\"]\n  unlisted = \"last\"                      # or \"ignore\" (default)"
)]
struct Args {
    /// Manager configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Bus domain.
    #[arg(long, env = "BUS_DOMAIN", default_value = bus::names::DEFAULT_DOMAIN)]
    domain: String,
}

fn main() {
    // Block SIGHUP before any thread starts, so that it reaches only our signalfd.
    let mut hup = SigSet::empty();
    hup.add(Signal::SIGHUP);
    if let Err(e) = hup.thread_block() {
        eprintln!("robot-manager: blocking SIGHUP: {e}");
        std::process::exit(1);
    }
    daemon::init_logging("info");
    let args = Args::parse();
    if let Err(e) = run(&args, &hup) {
        eprintln!("robot-manager: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args, hup: &SigSet) -> Result<(), String> {
    let domain = bus::Domain::new(&args.domain).map_err(|e| e.to_string())?;
    let mut file = ManagerFile::load(&args.config)?;
    let block_hash = controller_block_hash()?;
    let signals =
        SignalFd::with_flags(hup, SfdFlags::SFD_NONBLOCK).map_err(|e| format!("signalfd: {e}"))?;
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| format!("inotify: {e}"))?;
    // Watch the config's directory: editors replace files rather than write them in place.
    // A config that is a symlink is watched where it points too (a deployment tool may edit
    // the target).
    // Not IN_CREATE: a file just created is usually still empty; its close comes next.
    let changes = AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO;
    let mut watches = Vec::new();
    let target = std::fs::canonicalize(&args.config).ok();
    for path in std::iter::once(args.config.as_path()).chain(target.as_deref()) {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path.file_name().map(|n| n.to_owned());
        if watches
            .iter()
            .any(|(_, d, n): &(_, &Path, _)| *d == dir && *n == name)
        {
            continue;
        }
        let wd = inotify
            .add_watch(dir, changes)
            .map_err(|e| format!("watching {}: {e}", dir.display()))?;
        watches.push((wd, dir, name));
    }

    let bus = bus::Bus::open(domain.clone()).map_err(|e| e.to_string())?;
    let mut publication = bus
        .publication(arbiter::protocol::MANAGER_SLOT)
        .map_err(|e| e.to_string())?
        .capacity(64 * 1024)
        .create::<arbiter::protocol::ManagerConfig, bus::Serde>()
        .map_err(|e| e.to_string())?;
    let (directory, directory_wake) = watch_directory(&bus)?;
    let mut discovered: Vec<String> = Vec::new();
    let mut revision = 1;
    let mut published = file.effective(&discovered, revision);
    publication.write(&published).map_err(|e| e.to_string())?;
    tracing::info!("priority order: {:?}", published.controllers);
    daemon::ready("publishing /robot/manager");
    let health = daemon::Health::new();
    let watched = std::sync::Arc::clone(&health);
    let _watchdog = daemon::start_watchdog(move || watched.is_healthy());
    loop {
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
            PollFd::new(directory_wake.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        health.begin();
        let mut reload = false;
        while let Ok(Some(_)) = signals.read_signal() {
            tracing::info!("SIGHUP: reloading {}", args.config.display());
            reload = true;
        }
        match inotify.read_events() {
            Ok(events) => {
                for event in events {
                    // A lost event (queue overflow) may have been the config's: reload.
                    if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                        || watches
                            .iter()
                            .any(|(wd, _, name)| event.wd == *wd && event.name == *name)
                    {
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
                tracing::info!("controller {c} appeared on the bus");
            }
        }
        if reload {
            match ManagerFile::load(&args.config) {
                Ok(new) => file = new,
                // One log line per event: a TOML error's excerpt spans several.
                Err(e) => tracing::error!(
                    "keeping the previous config: {}",
                    e.split_whitespace().collect::<Vec<_>>().join(" ")
                ),
            }
        }
        let next = file.effective(&discovered, revision + 1);
        if next.controllers != published.controllers
            || next.arbiters != published.arbiters
            || next.unlisted != published.unlisted
        {
            revision += 1;
            published = next;
            publication.write(&published).map_err(|e| e.to_string())?;
            tracing::info!(
                "priority order (revision {revision}): {:?}",
                published.controllers
            );
        }
        health.end();
    }
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
                Err(e) => {
                    tracing::warn!("reading {DIRECTORY_SLOT}: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })
        .map_err(|e| format!("starting the directory thread: {e}"))?;
    Ok((latest, woken))
}
