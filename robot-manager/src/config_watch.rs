//! When the manager's config file is to be read again. It owns the inotify watches on the
//! directories that lead to the file (editors and deployment tools replace files rather than
//! write them in place, and may swap a whole directory or re-point a symlink), a periodic look
//! at the file for what inotify misses, and the rule that a file being written in place is not
//! read until its writer closes it: half a file is refused as invalid, with an error, while a
//! valid one is on its way.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// How often, in milliseconds, the config file is looked at besides inotify's events.
pub const LOOK_EVERY: u16 = 2000;
/// How long a change found without an event must hold before it is taken.
const CONFIRM_AFTER: Duration = Duration::from_millis(500);
/// How long a write in place of the config (modified, not yet closed) defers the periodic look.
const WRITE_UNFINISHED_FOR: Duration = Duration::from_secs(30);
/// How often, in milliseconds, to try again to watch a config directory that is not there.
const WATCH_AGAIN_EVERY: u16 = 50;

/// The events watched on each directory that leads to the config.
/// Not IN_CREATE: a file just created is usually still empty; its close comes next.
/// IN_MODIFY only says a write is under way (see `ConfigWatch::writing`). A watched directory
/// moved or removed no longer holds the config: its watch is dropped and the directory now at
/// the path watched (IN_IGNORED comes without asking). IN_ATTRIB: a file this process may not
/// read becomes readable by a change of its mode or owner alone.
const CHANGES: AddWatchFlags = AddWatchFlags::IN_CLOSE_WRITE
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_DELETE_SELF);

/// The config file's watches and what they have seen. The owner polls [`ConfigWatch::as_fd`]
/// with [`ConfigWatch::timeout`] and, after every wake, asks [`ConfigWatch::reload_due`].
pub struct ConfigWatch {
    /// Absolute, so that it keeps naming the same file after a directory on the way is
    /// replaced.
    path: PathBuf,
    inotify: Inotify,
    /// The directories of the config's path and of the file it leads to (through symlinks).
    watches: Vec<DirectoryWatch>,
    /// The file as last taken.
    fingerprint: Fingerprint,
    /// Since when someone writes the config in place (modified, not closed yet): a change the
    /// periodic look finds then is a half-written file, and its close event comes next. A close
    /// never seen (the file written through a link elsewhere) stops counting after
    /// `WRITE_UNFINISHED_FOR`.
    writing: Option<Instant>,
    /// Why a directory of the config is not watched now, as last logged. While it is missing
    /// (removed, to be replaced) the file is looked at only once its directory is watched again
    /// (tried every `WATCH_AGAIN_EVERY`), so that no write in place goes unseen between the two;
    /// another failure (no permission, the inotify watch limit) leaves the periodic look to find
    /// changes, as it cannot be waited out.
    unwatched: Option<WatchError>,
    /// A change of the file found without an event for it (a look, or a wake for another
    /// reason), and since when: taken once the file has stayed so for `CONFIRM_AFTER`. A write
    /// in place truncates the file before it writes, and a look can fall between the truncation
    /// and the reading of its event: an empty file was taken (and refused, with an error) while
    /// a valid one was being written.
    unconfirmed: Option<(Fingerprint, Instant)>,
    /// A reload asked for by events read after a load (`written_during_load`), taken by the
    /// next `reload_due` (at once: `timeout` is 0 meanwhile).
    pending_reload: bool,
    /// A write in place of the config was seen (IN_MODIFY) since `written_during_load` began
    /// counting: also one that began and closed while the file was being read.
    modified: bool,
}

impl ConfigWatch {
    /// Watches `path`, whose content as loaded is `loaded` (fingerprinted before the load, so
    /// that an edit made between the two is seen as a change). `path` must be absolute. A
    /// directory that cannot be watched now (not there yet, no permission, the inotify watch
    /// limit) is said and left to `reload_due`, as when it happens later: tried again, or the
    /// file looked at every `LOOK_EVERY`. Fails only without inotify at all.
    pub fn new(path: &Path, loaded: Fingerprint) -> Result<ConfigWatch, String> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| format!("inotify: {e}"))?;
        let mut watch = ConfigWatch {
            path: path.to_owned(),
            inotify,
            watches: Vec::new(),
            fingerprint: loaded,
            writing: None,
            unwatched: None,
            unconfirmed: None,
            pending_reload: false,
            modified: false,
        };
        if let Err(e) = watch.watch_config() {
            watch.say_unwatched(&e);
            watch.unwatched = Some(e);
        }
        Ok(watch)
    }

    /// Says why a directory of the config is not watched, and what is done instead.
    fn say_unwatched(&self, e: &WatchError) {
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

    /// What to poll for events.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }

    /// How long, in milliseconds, the owner may sleep before calling `reload_due` again: at
    /// most `look`, shorter while a directory is missing or a change waits to be confirmed.
    pub fn timeout(&self, look: u16) -> u16 {
        if self.pending_reload {
            return 0;
        }
        if self.unwatched.as_ref().is_some_and(|e| e.missing) {
            return WATCH_AGAIN_EVERY;
        }
        // Looked at again when the change has held long enough (whole milliseconds, rounded
        // up: a poll that ends early only looks again).
        self.unconfirmed.as_ref().map_or(look, |(_, since)| {
            let left = CONFIRM_AFTER.saturating_sub(since.elapsed());
            u16::try_from(left.as_millis() + 1).map_or(look, |ms| ms.min(look))
        })
    }

    /// Reads the events that came, watches the directories anew where they changed, and says
    /// whether the config is to be loaded now. `asked`: a SIGHUP came, which reloads unless the
    /// file is half-written (its close reloads it then).
    pub fn reload_due(&mut self, asked: bool) -> bool {
        let mut reload = asked || std::mem::take(&mut self.pending_reload);
        self.read_events(&mut reload);
        // The symlink may point elsewhere now, or a directory be a new one: watch where it
        // leads, before looking at the file (a failure here is a reason to try again soon, not
        // a reason to stop).
        match self.watch_config() {
            Ok(()) => {
                if self.unwatched.take().is_some() {
                    tracing::info!("watching {} again", self.path.display());
                }
            }
            Err(e) => {
                if self.unwatched.as_ref() != Some(&e) {
                    self.say_unwatched(&e);
                }
                self.unwatched = Some(e);
            }
        }
        let now = Fingerprint::of(&self.path);
        let half_written = self
            .writing
            .is_some_and(|t| t.elapsed() < WRITE_UNFINISHED_FOR);
        if reload && half_written {
            // A SIGHUP (`systemctl reload` fired by a tool) while the file is written in place:
            // what is there is half of it. Its close event reloads it.
            tracing::info!(
                "{} is being written (changed, not closed yet): reloading it once it is closed",
                self.path.display()
            );
            reload = false;
        }
        // A change found without an event waits until the file is watched (SIGHUP does not).
        let waiting_for_directory = self.unwatched.as_ref().is_some_and(|e| e.missing);
        if now == self.fingerprint {
            self.unconfirmed = None;
        } else if reload {
            self.fingerprint = now;
        } else if half_written || waiting_for_directory {
            // Its event comes next (or the watch again): no look needed meanwhile.
            self.unconfirmed = None;
        } else {
            match &self.unconfirmed {
                Some((seen, since)) if *seen == now => {
                    if since.elapsed() >= CONFIRM_AFTER {
                        self.fingerprint = now;
                        reload = true;
                    }
                }
                _ => self.unconfirmed = Some((now, Instant::now())),
            }
        }
        if reload {
            self.unconfirmed = None;
        }
        reload
    }

    /// Whether a write in place of the config began while it was being loaded (after
    /// `reload_due` said to load it): what was read is then part of the new file, or none of it
    /// (truncated), and is to be dropped; its close reloads it. The events of a write come with
    /// the write itself, so one that changed the bytes read is queued by the time the load has
    /// read them. Only a write since the last `reload_due` counts, also one that began and
    /// was closed during the load (its close reloads at once: `pending_reload`).
    pub fn written_during_load(&mut self) -> bool {
        self.writing = None;
        self.modified = false;
        let mut reload = false;
        self.read_events(&mut reload);
        self.pending_reload |= reload;
        let written = self.writing.is_some() || self.modified;
        if written {
            tracing::info!(
                "{} was written to while it was read: taking it once its writer closes it",
                self.path.display()
            );
        }
        written
    }

    /// Takes in the events queued: a close or move of the config (or a lost event) asks for a
    /// reload, a write in place under way is noted, and a watch of a directory gone is dropped.
    fn read_events(&mut self, reload: &mut bool) {
        match self.inotify.read_events() {
            Ok(events) => {
                for event in events {
                    let gone = AddWatchFlags::IN_IGNORED
                        | AddWatchFlags::IN_MOVE_SELF
                        | AddWatchFlags::IN_DELETE_SELF;
                    if event.mask.intersects(gone) {
                        if !event.mask.contains(AddWatchFlags::IN_IGNORED) {
                            let _ = self.inotify.rm_watch(event.wd);
                        }
                        self.watches.retain(|w| w.wd != event.wd);
                        continue;
                    }
                    // A lost event (queue overflow) may have been the config's: reload.
                    let ours = self
                        .watches
                        .iter()
                        .any(|w| event.wd == w.wd && event.name == w.name);
                    if ours && event.mask == AddWatchFlags::IN_MODIFY {
                        self.writing.get_or_insert_with(Instant::now);
                        self.modified = true;
                    } else if ours || event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                        self.writing = None;
                        *reload = true;
                    }
                }
            }
            Err(nix::errno::Errno::EAGAIN) => {}
            Err(e) => {
                tracing::warn!("watching the config: {e}; reloading it to be safe");
                *reload = true;
            }
        }
    }

    /// Watches the config's directory and, if it is a symlink, its target's, unless watched
    /// already. A directory replaced under its path (a deployment tool swaps the whole
    /// directory) is watched anew: inotify follows the old one, which no longer holds the
    /// config.
    fn watch_config(&mut self) -> Result<(), WatchError> {
        let target = std::fs::canonicalize(&self.path).ok();
        let wanted: Vec<(&Path, Option<std::ffi::OsString>)> = std::iter::once(self.path.as_path())
            .chain(target.as_deref())
            .map(|path| {
                let dir = path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                (dir, path.file_name().map(|n| n.to_owned()))
            })
            .collect();
        // A symlink re-pointed (a deployment's `current -> releases/v2`): the directory it led
        // to before holds the config no more. Its watch goes, unless a wanted one shares it (one
        // directory, one watch descriptor). Not while the link leads nowhere (its target being
        // replaced: the old directory's watch sees the new file come).
        let (keep, stale): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watches)
            .into_iter()
            .partition(|w| {
                target.is_none()
                    || wanted
                        .iter()
                        .any(|(dir, name)| w.dir == *dir && w.name == *name)
            });
        for old in stale {
            if !keep.iter().any(|w| w.wd == old.wd) {
                let _ = self.inotify.rm_watch(old.wd);
            }
        }
        self.watches = keep;
        for (dir, name) in wanted {
            let identity = {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(dir)
                    .map(|m| (m.dev(), m.ino()))
                    .map_err(|e| WatchError::of(dir, e))?
            };
            let at = self
                .watches
                .iter()
                .position(|w| w.dir == dir && w.name == name);
            match at {
                Some(i) if self.watches[i].identity == identity => continue,
                Some(i) => {
                    let old = self.watches.remove(i);
                    // The kernel has already dropped it if the old directory was removed.
                    let _ = self.inotify.rm_watch(old.wd);
                }
                None => {}
            }
            let wd = self
                .inotify
                .add_watch(dir, CHANGES)
                .map_err(|e| WatchError::of(dir, e.into()))?;
            self.watches.push(DirectoryWatch {
                wd,
                dir: dir.to_owned(),
                name,
                identity,
            });
        }
        Ok(())
    }
}

/// One directory watched for the config.
struct DirectoryWatch {
    wd: WatchDescriptor,
    dir: PathBuf,
    /// The file name looked for in it.
    name: Option<std::ffi::OsString>,
    /// The directory's device and inode when it was watched.
    identity: (u64, u64),
}

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

/// What identifies the config file's content, and whether this process may read it, without
/// reading it: the file the path leads to (through any symlinks), its size, and its
/// modification and change times (the change time moves with its mode and owner too). `None`
/// while its metadata cannot be read.
#[derive(PartialEq)]
pub struct Fingerprint(Option<[i64; 7]>);

impl Fingerprint {
    pub fn of(path: &Path) -> Fingerprint {
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
