//! `robot-manager`: publishes the robot controllers' priority order on `/robot/manager`.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use clap::Parser;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use robot_manager::{controller_of_segment, ManagerFile};

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
    let signals =
        SignalFd::with_flags(hup, SfdFlags::SFD_NONBLOCK).map_err(|e| format!("signalfd: {e}"))?;
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| format!("inotify: {e}"))?;
    // Watch the config's directory: editors replace files rather than write them in place.
    let config_dir = args
        .config
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let config_name = args.config.file_name().map(|n| n.to_owned());
    let changes =
        AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CREATE;
    let config_watch = inotify
        .add_watch(config_dir, changes)
        .map_err(|e| format!("watching {}: {e}", config_dir.display()))?;
    let shm_watch = inotify
        .add_watch(
            bus::names::SHM_DIR,
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE,
        )
        .map_err(|e| format!("watching {}: {e}", bus::names::SHM_DIR))?;

    let bus = bus::Bus::open(domain.clone()).map_err(|e| e.to_string())?;
    let mut publication = bus
        .publication(arbiter::protocol::MANAGER_SLOT)
        .map_err(|e| e.to_string())?
        .capacity(64 * 1024)
        .create::<arbiter::protocol::ManagerConfig, bus::Serde>()
        .map_err(|e| e.to_string())?;
    let mut discovered: Vec<String> = domain
        .segment_files()
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter_map(|(slot, _)| controller_of_segment(&domain, &slot_file(&domain, &slot)))
        .collect();
    let mut revision = 1;
    let mut published = file.effective(&discovered, revision);
    publication.write(&published).map_err(|e| e.to_string())?;
    tracing::info!("priority order: {:?}", published.controllers);
    daemon::ready("publishing /robot/manager");
    let health = daemon::Health::new();
    let watched = std::sync::Arc::clone(&health);
    daemon::start_watchdog(move || watched.is_healthy());
    loop {
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
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
        for event in inotify.read_events().unwrap_or_default() {
            let name = event
                .name
                .as_ref()
                .map(|n| n.to_string_lossy().into_owned());
            if event.wd == config_watch && event.name.as_deref() == config_name.as_deref() {
                reload = true;
            } else if event.wd == shm_watch {
                let Some(controller) = name.and_then(|n| controller_of_segment(&domain, &n)) else {
                    continue;
                };
                if event.mask.contains(AddWatchFlags::IN_DELETE) {
                    discovered.retain(|d| *d != controller);
                } else if !discovered.contains(&controller) {
                    tracing::info!("controller {controller} appeared on the bus");
                    discovered.push(controller);
                }
            }
        }
        if reload {
            match ManagerFile::load(&args.config) {
                Ok(new) => file = new,
                Err(e) => tracing::error!("keeping the previous config: {e}"),
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

fn slot_file(domain: &bus::Domain, slot: &bus::SlotName) -> String {
    domain.segment_name(slot).trim_start_matches('/').to_owned()
}
